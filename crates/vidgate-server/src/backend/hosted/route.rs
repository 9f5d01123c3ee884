//! How a failover model chooses among its providers (`"route"` in the
//! backends file), and the measurements the `latency` route reads. Pure
//! but for the clock of the measurements: `rank` takes what it judges as
//! plain values, so that its tests inject prices, health and latencies.
//!
//! - `order` (the default): the operator's order.
//! - `price`: the cheapest by the provider's `costs` lines for the
//!   request's mode and values; a provider with no line for the request
//!   comes after every priced one, in the operator's order, because its
//!   cost is unknown rather than zero.
//! - `latency`: the fastest by this node's recent submit-to-finish times
//!   of the model's jobs at each provider and mode. A provider without a
//!   recent measurement is tried first, one job at a time, so that it gets
//!   one; while that job runs it ranks after the measured providers.
//!
//! Whatever the route, a provider whose creates circuit is open comes
//! after the healthy ones, and the loss guard (`LossGuard`) judges every
//! provider's cost for the request: one whose known cost is above its
//! price to the customer is left out unless the operator allowed it
//! (`"allow_loss": true`), and one with no `costs` line for the request,
//! whose loss cannot be ruled out, is left out or tried after the priced
//! ones as the entry's `"unpriced"` says (left out by default with `route:
//! price`, which would otherwise route there blind).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use vidgate_core::{Micros, Mode};

/// How a failover model orders its providers for a job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    #[default]
    Order,
    Price,
    Latency,
}

impl Route {
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Order => "order",
            Route::Price => "price",
            Route::Latency => "latency",
        }
    }
}

/// What a failover model does with a provider that has no `costs` line
/// for a request (`"unpriced"` in the backends file): its cost is unknown,
/// so whether it would sell at a loss cannot be judged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unpriced {
    /// Left out, as one that would sell at a loss is (unless
    /// `allow_loss`): the default with `route: price`.
    LeaveOut,
    /// Tried after every priced provider, in the operator's order: the
    /// default with `order` and `latency` (and so of the default route),
    /// routes that do not claim to judge prices.
    #[default]
    AfterPriced,
}

impl Unpriced {
    /// What a failover entry with `route` does with an unpriced provider
    /// when it does not say.
    pub fn default_for(route: Route) -> Unpriced {
        match route {
            Route::Price => Unpriced::LeaveOut,
            Route::Order | Route::Latency => Unpriced::AfterPriced,
        }
    }
}

/// Which providers a job may go to by their cost for it and its price.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossGuard {
    /// Whether a provider whose cost is above the price may take it.
    pub allow_loss: bool,
    pub unpriced: Unpriced,
}

impl LossGuard {
    /// Whether a provider of `cost` (`None`: no `costs` line for the
    /// request) may take a request sold at `price`.
    pub fn admits(self, cost: Option<Micros>, price: Micros) -> bool {
        self.allow_loss || cost.map_or(self.unpriced == Unpriced::AfterPriced, |cost| cost <= price)
    }
}

/// Why a job went to the provider it went to: recorded with its provider
/// job and counted in the metrics, so a fixed few values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteReason {
    /// `order`: the first healthy provider in the operator's order.
    FirstHealthy,
    /// `price`: the lowest cost for the request.
    Cheapest,
    /// `price`: no healthy provider has a cost line for the request; the
    /// first in the operator's order.
    Unpriced,
    /// `latency`: the lowest recent submit-to-finish time.
    Fastest,
    /// `latency`: no recent measurement; tried so that it gets one.
    Unmeasured,
    /// The only provider left that is healthy and would not sell at a
    /// loss, whatever the route.
    OnlyEligible,
    /// The providers ranked before it were known not to have the job
    /// (they refused it, or were proved not to have it).
    Failover,
    /// Every provider's creates circuit is open: the last is tried anyway,
    /// because the job was admitted.
    LastResort,
}

impl RouteReason {
    pub const ALL: [RouteReason; 8] = [
        RouteReason::FirstHealthy,
        RouteReason::Cheapest,
        RouteReason::Unpriced,
        RouteReason::Fastest,
        RouteReason::Unmeasured,
        RouteReason::OnlyEligible,
        RouteReason::Failover,
        RouteReason::LastResort,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RouteReason::FirstHealthy => "first_healthy",
            RouteReason::Cheapest => "cheapest",
            RouteReason::Unpriced => "unpriced",
            RouteReason::Fastest => "fastest",
            RouteReason::Unmeasured => "unmeasured",
            RouteReason::OnlyEligible => "only_eligible",
            RouteReason::Failover => "failover",
            RouteReason::LastResort => "last_resort",
        }
    }
}

/// What routing knows of one provider for one job, in the operator's
/// order.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Whether its creates circuit is closed.
    pub healthy: bool,
    /// Its cost for the request by its `costs` lines; `None` without one.
    pub cost: Option<Micros>,
    /// This node's recent mean submit-to-finish time of the model's jobs of
    /// this mode there; `None` when none is recent.
    pub latency: Option<Duration>,
    /// Whether a job is already out measuring it (`latency` route).
    pub probing: bool,
}

/// A provider's place in a job's ranking: its index in the operator's
/// order, and why it is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranked {
    pub index: usize,
    pub reason: RouteReason,
}

/// The providers a job may go to, best first, each with the reason it
/// would be chosen if those before it do not take the job. Providers the
/// loss guard does not admit are left out; the healthy come before those
/// whose circuit is open.
pub fn rank(
    route: Route,
    candidates: &[Candidate],
    price: Micros,
    guard: LossGuard,
) -> Vec<Ranked> {
    let eligible: Vec<usize> = (0..candidates.len())
        .filter(|&index| guard.admits(candidates[index].cost, price))
        .collect();
    let (mut healthy, unhealthy): (Vec<usize>, Vec<usize>) = eligible
        .iter()
        .partition(|&&index| candidates[index].healthy);
    // A stable sort keeps the operator's order among equals.
    let first_reason = match route {
        Route::Order => RouteReason::FirstHealthy,
        Route::Price => {
            healthy
                .sort_by_key(|&index| (candidates[index].cost.is_none(), candidates[index].cost));
            match healthy.first() {
                Some(&index) if candidates[index].cost.is_none() => RouteReason::Unpriced,
                _ => RouteReason::Cheapest,
            }
        }
        Route::Latency => {
            // The first unmeasured provider that no job is measuring yet
            // goes first; the measured follow, fastest first; the rest
            // (unmeasured, a job already measuring them) last.
            let probe = healthy.iter().position(|&index| {
                candidates[index].latency.is_none() && !candidates[index].probing
            });
            let probe = probe.map(|position| healthy.remove(position));
            healthy.sort_by_key(|&index| {
                (
                    candidates[index].latency.is_none(),
                    candidates[index].latency,
                )
            });
            match probe {
                Some(index) => {
                    healthy.insert(0, index);
                    RouteReason::Unmeasured
                }
                None => RouteReason::Fastest,
            }
        }
    };
    let only_one = healthy.len() == 1 && candidates.len() > 1;
    let mut ranked: Vec<Ranked> = healthy
        .iter()
        .enumerate()
        .map(|(position, &index)| Ranked {
            index,
            reason: match position {
                0 if only_one && first_reason != RouteReason::Unmeasured => {
                    RouteReason::OnlyEligible
                }
                0 => first_reason,
                _ => RouteReason::Failover,
            },
        })
        .collect();
    let last = unhealthy.len().saturating_sub(1);
    let none_healthy = ranked.is_empty();
    ranked.extend(
        unhealthy
            .iter()
            .enumerate()
            .map(|(position, &index)| Ranked {
                index,
                reason: if none_healthy && position == last {
                    RouteReason::LastResort
                } else {
                    RouteReason::Failover
                },
            }),
    );
    ranked
}

/// How many recent submit-to-finish times are kept per provider and mode.
const LATENCY_WINDOW: usize = 5;
/// How long a measurement counts as recent: past it the provider is
/// measured again with one job, so that a provider that was slow once is
/// not left out for ever after it recovered.
pub const LATENCY_FRESH_FOR: Duration = Duration::from_secs(10 * 60);

/// This node's recent submit-to-finish times of one model's jobs at one
/// provider, per mode: the last few succeeded jobs, newest last.
#[derive(Default)]
pub struct RecentLatencies {
    state: Mutex<LatencyState>,
}

#[derive(Default)]
struct LatencyState {
    by_mode: HashMap<Mode, VecDeque<(Instant, Duration)>>,
    probing: HashSet<Mode>,
}

impl RecentLatencies {
    fn state(&self) -> std::sync::MutexGuard<'_, LatencyState> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// A succeeded job of `mode` took `took` from its submit to its end;
    /// answers the window's new mean.
    pub fn record(&self, mode: Mode, took: Duration) -> Duration {
        self.record_at(mode, took, Instant::now())
    }

    fn record_at(&self, mode: Mode, took: Duration, now: Instant) -> Duration {
        let mut state = self.state();
        let window = state.by_mode.entry(mode).or_default();
        window.push_back((now, took));
        while window.len() > LATENCY_WINDOW {
            window.pop_front();
        }
        mean(window)
    }

    /// The mean of the window of `mode`, if its newest measurement is
    /// recent.
    pub fn recent(&self, mode: Mode) -> Option<Duration> {
        self.recent_at(mode, Instant::now())
    }

    fn recent_at(&self, mode: Mode, now: Instant) -> Option<Duration> {
        let state = self.state();
        let window = state.by_mode.get(&mode)?;
        let (newest, _) = window.back()?;
        (now.duration_since(*newest) < LATENCY_FRESH_FOR).then(|| mean(window))
    }

    /// Whether a job of `mode` is out measuring the provider.
    pub fn probing(&self, mode: Mode) -> bool {
        self.state().probing.contains(&mode)
    }

    /// Marks a job of `mode` as measuring the provider until the guard is
    /// dropped; `None` when another job already is.
    pub fn start_probe(self: &Arc<Self>, mode: Mode) -> Option<Probe> {
        self.state().probing.insert(mode).then(|| Probe {
            latencies: self.clone(),
            mode,
        })
    }
}

fn mean(window: &VecDeque<(Instant, Duration)>) -> Duration {
    let total: Duration = window.iter().map(|(_, took)| *took).sum();
    total / u32::try_from(window.len().max(1)).unwrap_or(u32::MAX)
}

/// A job out measuring a provider: while it lives, no other job is sent
/// to measure the same provider and mode.
pub struct Probe {
    latencies: Arc<RecentLatencies>,
    mode: Mode,
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.latencies.state().probing.remove(&self.mode);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(healthy: bool, cost: Option<i64>, latency_ms: Option<u64>) -> Candidate {
        Candidate {
            healthy,
            cost: cost.map(Micros),
            latency: latency_ms.map(Duration::from_millis),
            probing: false,
        }
    }

    fn order(ranked: &[Ranked]) -> Vec<(usize, &'static str)> {
        ranked
            .iter()
            .map(|ranked| (ranked.index, ranked.reason.as_str()))
            .collect()
    }

    const PRICE: Micros = Micros(1_000_000);
    const AFTER_PRICED: LossGuard = LossGuard {
        allow_loss: false,
        unpriced: Unpriced::AfterPriced,
    };
    const AT_A_LOSS: LossGuard = LossGuard {
        allow_loss: true,
        unpriced: Unpriced::LeaveOut,
    };
    const LEAVE_OUT: LossGuard = LossGuard {
        allow_loss: false,
        unpriced: Unpriced::LeaveOut,
    };

    /// Issue 51: with `route: price` the loss guard judges every value: a
    /// provider without a price for the request is left out unless the
    /// entry says to try it after the priced ones (or allows a loss).
    #[test]
    fn an_unpriced_provider_is_left_out_unless_the_entry_says_otherwise() {
        assert_eq!(Unpriced::default_for(Route::Price), Unpriced::LeaveOut);
        assert_eq!(Unpriced::default_for(Route::Order), Unpriced::AfterPriced);
        let candidates = [
            candidate(true, None, None),
            candidate(true, Some(400_000), None),
        ];
        assert_eq!(
            order(&rank(Route::Price, &candidates, PRICE, LEAVE_OUT)),
            [(1, "only_eligible")]
        );
        assert_eq!(
            order(&rank(Route::Price, &candidates, PRICE, AFTER_PRICED)),
            [(1, "cheapest"), (0, "failover")]
        );
        let unpriced = [candidate(true, None, None), candidate(true, None, None)];
        assert!(rank(Route::Price, &unpriced, PRICE, LEAVE_OUT).is_empty());
        assert!(LEAVE_OUT.admits(Some(PRICE), PRICE));
        assert!(!LEAVE_OUT.admits(None, PRICE));
        assert!(AT_A_LOSS.admits(None, PRICE));
    }

    #[test]
    fn price_ranks_the_cheapest_first_and_unpriced_after_the_priced() {
        let candidates = [
            candidate(true, None, None),
            candidate(true, Some(900_000), None),
            candidate(true, Some(400_000), None),
        ];
        assert_eq!(
            order(&rank(Route::Price, &candidates, PRICE, AFTER_PRICED)),
            [(2, "cheapest"), (1, "failover"), (0, "failover")]
        );
        let unpriced = [candidate(true, None, None), candidate(true, None, None)];
        assert_eq!(
            order(&rank(Route::Price, &unpriced, PRICE, AFTER_PRICED)),
            [(0, "unpriced"), (1, "failover")]
        );
    }

    #[test]
    fn an_open_circuit_sends_a_provider_after_the_healthy_ones() {
        let candidates = [
            candidate(false, Some(100_000), None),
            candidate(true, Some(900_000), None),
            candidate(true, Some(500_000), None),
        ];
        assert_eq!(
            order(&rank(Route::Price, &candidates, PRICE, AFTER_PRICED)),
            [(2, "cheapest"), (1, "failover"), (0, "failover")]
        );
        let all_open = [
            candidate(false, Some(100_000), None),
            candidate(false, Some(200_000), None),
        ];
        assert_eq!(
            order(&rank(Route::Order, &all_open, PRICE, AFTER_PRICED)),
            [(0, "failover"), (1, "last_resort")]
        );
    }

    #[test]
    fn a_provider_that_would_sell_at_a_loss_is_left_out_unless_allowed() {
        let candidates = [
            candidate(true, Some(1_200_000), None),
            candidate(true, Some(800_000), None),
        ];
        assert_eq!(
            order(&rank(Route::Order, &candidates, PRICE, AFTER_PRICED)),
            [(1, "only_eligible")]
        );
        assert_eq!(
            order(&rank(Route::Order, &candidates, PRICE, AT_A_LOSS)),
            [(0, "first_healthy"), (1, "failover")]
        );
        let all_at_a_loss = [
            candidate(true, Some(1_000_001), None),
            candidate(true, Some(2_000_000), None),
        ];
        assert!(rank(Route::Price, &all_at_a_loss, PRICE, AFTER_PRICED).is_empty());
        // Exactly the price is no loss.
        assert!(AFTER_PRICED.admits(Some(PRICE), PRICE));
        assert!(!AFTER_PRICED.admits(Some(Micros(PRICE.0 + 1)), PRICE));
    }

    #[test]
    fn latency_measures_an_unmeasured_provider_once_then_follows_the_fastest() {
        let mut candidates = [
            candidate(true, None, Some(3_000)),
            candidate(true, None, None),
            candidate(true, None, Some(1_000)),
        ];
        assert_eq!(
            order(&rank(Route::Latency, &candidates, PRICE, AFTER_PRICED)),
            [(1, "unmeasured"), (2, "failover"), (0, "failover")]
        );
        // While one job measures it, the measured go first.
        candidates[1].probing = true;
        assert_eq!(
            order(&rank(Route::Latency, &candidates, PRICE, AFTER_PRICED)),
            [(2, "fastest"), (0, "failover"), (1, "failover")]
        );
    }

    #[test]
    fn the_window_follows_a_provider_that_slows_down_and_forgets_old_times() {
        let latencies = Arc::new(RecentLatencies::default());
        let mode = Mode::TextToVideo;
        let start = Instant::now();
        for _ in 0..LATENCY_WINDOW {
            latencies.record_at(mode, Duration::from_secs(10), start);
        }
        assert_eq!(
            latencies.recent_at(mode, start),
            Some(Duration::from_secs(10))
        );
        // Slow jobs push the fast ones out of the window.
        for _ in 0..LATENCY_WINDOW {
            latencies.record_at(mode, Duration::from_secs(100), start);
        }
        assert_eq!(
            latencies.recent_at(mode, start),
            Some(Duration::from_secs(100))
        );
        assert_eq!(latencies.recent_at(mode, start + LATENCY_FRESH_FOR), None);
        assert_eq!(latencies.recent_at(Mode::ImageToVideo, start), None);
        // One job measures a provider at a time.
        let probe = latencies.start_probe(mode).expect("nobody measures it yet");
        assert!(latencies.probing(mode));
        assert!(latencies.start_probe(mode).is_none());
        drop(probe);
        assert!(!latencies.probing(mode));
    }
}
