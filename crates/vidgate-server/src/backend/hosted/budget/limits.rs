//! The request budget of each hosted provider credential as the backends
//! file gives it (`budget`), and the budgets of a file checked together:
//! the file's format, apart from the scheduler that spends the budgets
//! (`mod.rs`).
//!
//! Defaults are the providers' documented limits. Replicate: "create
//! predictions at 600 requests per minute; all other endpoints 3000/min",
//! short bursts allowed (https://replicate.com/docs/topics/predictions/rate-limits,
//! quoted in /work/shared/UPSTREAMS.md, "Rate limits"). fal documents no
//! per-minute limit on its queue, only a concurrency per account (2 to 40
//! jobs running, the rest wait in fal's queue and are never refused:
//! https://fal.ai/docs/documentation/model-apis/concurrency-limits). fal's
//! budget is a per-minute ceiling of vidgate's own (the same figures as
//! Replicate's, so that vidgate's polling of thousands of jobs cannot flood
//! it), and an optional ceiling of jobs in flight (`max_in_flight`): set to
//! the account's concurrency, jobs beyond it wait in vidgate's queue, where
//! they are fair across accounts and cancelable for free, instead of in
//! fal's.

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;
use sha2::Digest;

use super::CallClass;

/// Replicate's documented limits, the default of every provider (fal's
/// being vidgate's own ceiling, as fal documents none per minute).
pub const DOCUMENTED_CREATES_PER_MINUTE: u32 = 600;
pub const DOCUMENTED_OTHERS_PER_MINUTE: u32 = 3000;

/// One class's limit: calls per minute, of which `burst` may come at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassLimit {
    pub per_minute: u32,
    pub burst: u32,
}

impl ClassLimit {
    /// The bucket that keeps every 60-second window within `per_minute`
    /// calls when `nodes` share it equally (one for a bucket in Redis):
    /// the refill interval and the capacity.
    pub(super) fn bucket(&self, nodes: u32) -> (Duration, u32) {
        let nodes = nodes.max(1);
        let burst = (self.burst / nodes).max(1);
        let refilled_per_minute = (self.per_minute / nodes).saturating_sub(burst).max(1);
        (Duration::from_secs(60) / refilled_per_minute, burst)
    }
}

/// Overrides of a provider credential's request budget; each one left out
/// keeps its documented default (this module's comment).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    /// Calls that create jobs, per minute (default 600, Replicate's
    /// documented limit).
    #[serde(default)]
    pub creates_per_minute: Option<u32>,
    /// Every other call (reads, lists, cancels, downloads), per minute
    /// (default 3000, Replicate's documented limit).
    #[serde(default)]
    pub others_per_minute: Option<u32>,
    /// How many of a minute's creates may go at once (default a twentieth).
    #[serde(default)]
    pub creates_burst: Option<u32>,
    /// How many of a minute's other calls may go at once (default a
    /// twentieth).
    #[serde(default)]
    pub others_burst: Option<u32>,
    /// Jobs of this credential one node runs at the provider at once
    /// (default: no ceiling); for fal, the account's concurrency divided
    /// by the nodes, so that jobs beyond it wait in vidgate's queue.
    #[serde(default)]
    pub max_in_flight: Option<u32>,
    /// How many nodes share the budget when there is no Redis: each takes
    /// an equal share of the limits (default 1). Ignored with Redis, where
    /// every node takes from one shared budget.
    #[serde(default)]
    pub nodes: Option<u32>,
}

impl BudgetConfig {
    /// This budget with each value it leaves out taken from `defaults` (a
    /// provider's documented limits, `HostedProvider::default_budget`). A
    /// default burst goes with its default figure per minute only: a file
    /// that sets its own figure gets a twentieth of it, as with no default,
    /// rather than a burst sized for another figure.
    pub fn over(self, defaults: &BudgetConfig) -> BudgetConfig {
        let burst = |own: Option<u32>, own_per_minute: Option<u32>, default: Option<u32>| {
            own.or(default.filter(|_| own_per_minute.is_none()))
        };
        BudgetConfig {
            creates_per_minute: self.creates_per_minute.or(defaults.creates_per_minute),
            others_per_minute: self.others_per_minute.or(defaults.others_per_minute),
            creates_burst: burst(
                self.creates_burst,
                self.creates_per_minute,
                defaults.creates_burst,
            ),
            others_burst: burst(
                self.others_burst,
                self.others_per_minute,
                defaults.others_burst,
            ),
            max_in_flight: self.max_in_flight.or(defaults.max_in_flight),
            nodes: self.nodes.or(defaults.nodes),
        }
    }
}

/// A provider credential's limits, resolved from the provider's defaults
/// and the backends file's `budget`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetLimits {
    pub creates: ClassLimit,
    pub others: ClassLimit,
    /// Jobs of this credential a node runs at once, if limited.
    pub max_in_flight: Option<u32>,
    /// How many nodes share the limits when there is no Redis: each takes
    /// an equal share.
    pub nodes: u32,
}

impl BudgetLimits {
    /// The documented defaults (see the module's comment), with
    /// the backends file's overrides, checked.
    pub fn resolve(config: &BudgetConfig) -> Result<BudgetLimits, String> {
        let creates_per_minute = config
            .creates_per_minute
            .unwrap_or(DOCUMENTED_CREATES_PER_MINUTE);
        let others_per_minute = config
            .others_per_minute
            .unwrap_or(DOCUMENTED_OTHERS_PER_MINUTE);
        let class = |name: &str, per_minute: u32, burst: Option<u32>| {
            if per_minute < 2 {
                return Err(format!("budget: {name}_per_minute must be at least 2"));
            }
            // A twentieth of the minute's calls may come at once by default
            // (GUESS): Replicate allows "short bursts" without saying how
            // large.
            let burst = burst.unwrap_or((per_minute / 20).max(1));
            if burst == 0 || burst >= per_minute {
                return Err(format!(
                    "budget: {name}_burst must be at least 1 and less than {name}_per_minute ({per_minute})"
                ));
            }
            Ok(ClassLimit { per_minute, burst })
        };
        let limits = BudgetLimits {
            creates: class("creates", creates_per_minute, config.creates_burst)?,
            others: class("others", others_per_minute, config.others_burst)?,
            max_in_flight: config.max_in_flight,
            nodes: config.nodes.unwrap_or(1),
        };
        if limits.max_in_flight == Some(0) {
            return Err("budget: max_in_flight must be at least 1".into());
        }
        if limits.nodes == 0 {
            return Err("budget: nodes must be at least 1".into());
        }
        Ok(limits)
    }

    pub(super) fn class(&self, class: CallClass) -> ClassLimit {
        match class {
            CallClass::Creates => self.creates,
            CallClass::Others => self.others,
        }
    }
}

/// The bucket keys' prefix of a provider credential's budget: the
/// provider and a fingerprint of the credential, never the credential.
pub(super) fn budget_key(provider: &str, credential: &str) -> String {
    let fingerprint = hex(&sha2::Sha256::digest(credential.as_bytes())[..8]);
    format!("provider-budget:{provider}:{fingerprint}")
}

/// The budgets a backends file gives its provider credentials, checked as
/// `ProviderBudgets::budget` will take them, so that a file whose models
/// give one credential two budgets is refused when it is read.
#[derive(Default)]
pub(in crate::backend) struct BudgetsInFile {
    by_key: HashMap<String, BudgetSettings>,
}

impl BudgetsInFile {
    pub(in crate::backend) fn add(
        &mut self,
        provider: &'static str,
        credential: &str,
        limits: BudgetLimits,
        explicit: bool,
    ) -> Result<(), String> {
        match self.by_key.entry(budget_key(provider, credential)) {
            std::collections::hash_map::Entry::Occupied(mut known) => {
                known.get_mut().merge(provider, limits, explicit)?;
            }
            std::collections::hash_map::Entry::Vacant(new) => {
                new.insert(BudgetSettings { limits, explicit });
            }
        }
        Ok(())
    }
}

pub(super) struct BudgetSettings {
    pub(super) limits: BudgetLimits,
    /// Whether the backends file gave the limits (not the defaults).
    pub(super) explicit: bool,
}

impl BudgetSettings {
    /// Takes another model's limits for the same credential: explicit
    /// limits win over the defaults, and two different explicit ones are
    /// refused. True when the limits changed.
    pub(super) fn merge(
        &mut self,
        provider: &str,
        limits: BudgetLimits,
        explicit: bool,
    ) -> Result<bool, String> {
        if !explicit {
            return Ok(false);
        }
        if self.explicit && self.limits != limits {
            return Err(format!(
                "budget: another model of {provider} with the same credential gives it another budget; give every such model the same one (or only one of them)"
            ));
        }
        self.limits = limits;
        self.explicit = true;
        Ok(true)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
