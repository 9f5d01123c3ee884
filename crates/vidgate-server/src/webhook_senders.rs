//! Webhook delivery: the senders that drain the outbox.
//!
//! The store writes a delivery row in the same transaction that puts a
//! generation with a `webhook_url` in a final state, so an event exists
//! exactly when its state change does. Senders (a few tasks on every node
//! that runs jobs) claim due deliveries with a short lease, POST the event
//! signed the Standard Webhooks way, and record each attempt with what
//! happens next: delivered, retried later on the schedule (kept in the
//! database, so it survives restarts), or failed after the last attempt. A
//! sender that dies mid-attempt records nothing; its lease runs out and the
//! delivery is sent again, which is why receivers get every event at least
//! once and deduplicate by `webhook-id`.
//!
//! The receiver's URL is untrusted, so every request goes through the same
//! address guard as media fetching: IP-literal hosts are checked before
//! sending, host names through a resolver that drops forbidden addresses,
//! proxies from the environment are ignored and redirects are not followed.

use std::error::Error as StdError;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use rand::RngExt;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{self, HeaderMap};
use serde_json::json;
use sha2::Sha256;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use url::{Host, Url};
use vidgate_core::Micros;

use crate::metrics::{Metrics, WebhookAttemptOutcome};
use crate::representation::{generation_json, rfc3339};
use crate::store::{
    AttemptOutcome, AttemptRecord, ClaimedDelivery, DeliverySubject, SenderFairness, Store,
    TEST_EVENT, now_millis,
};
use crate::telemetry;

/// Prefix of a Standard Webhooks secret; the rest is the base64 key.
const SECRET_PREFIX: &str = "whsec_";

/// How much of a receiver's response body is kept in the attempt log.
pub const MAX_KEPT_RESPONSE_BYTES: usize = 4096;

/// How deliveries are sent and retried.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// The wait before each retry: after the first attempt fails the next
    /// comes `retry_schedule[0]` later, and so on; when the schedule is
    /// exhausted the delivery fails. Each wait gets ±10 % jitter so that the
    /// retries of a receiver's outage do not arrive all at once.
    pub retry_schedule: Vec<Duration>,
    /// One attempt, connection and response included.
    pub attempt_timeout: Duration,
    /// The longest wait a receiver's `Retry-After` can ask for; longer
    /// values are cut to this.
    pub max_retry_after: Duration,
    /// How long a sender holds a delivery it claimed before another sender
    /// may take it over; longer than an attempt can take.
    pub lease: Duration,
    /// How often an idle sender looks for due deliveries.
    pub poll_interval: Duration,
    /// Deliveries sent at once by this node, so that one slow receiver does
    /// not hold up the others.
    pub senders: usize,
    /// Deliveries of one account this node sends at once (at least one).
    /// Below `senders`, so that an account whose receiver accepts
    /// connections and never answers holds at most this many senders for
    /// the attempt timeout, and the other accounts' deliveries go out on the
    /// rest.
    pub max_in_flight_per_account: u32,
}

impl Default for WebhookSettings {
    /// About a day of retries: ten attempts over 22 h 42 min.
    fn default() -> WebhookSettings {
        let minutes = |count: u64| Duration::from_secs(count * 60);
        WebhookSettings {
            retry_schedule: vec![
                Duration::from_secs(5),
                Duration::from_secs(30),
                minutes(2),
                minutes(10),
                minutes(30),
                minutes(60),
                minutes(3 * 60),
                minutes(6 * 60),
                minutes(12 * 60),
            ],
            attempt_timeout: Duration::from_secs(10),
            max_retry_after: minutes(60),
            lease: Duration::from_secs(60),
            poll_interval: Duration::from_secs(1),
            senders: 4,
            max_in_flight_per_account: 2,
        }
    }
}

/// The Standard Webhooks signature of one message with one secret:
/// `v1,` and the base64 HMAC-SHA256 of `{id}.{timestamp}.{body}`, keyed with
/// the base64-decoded part of the secret after `whsec_`.
pub fn sign(
    secret: &str,
    message_id: &str,
    timestamp: i64,
    body: &str,
) -> Result<String, base64::DecodeError> {
    let key = STANDARD.decode(secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret))?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC accepts keys of any length");
    mac.update(format!("{message_id}.{timestamp}.{body}").as_bytes());
    Ok(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}

/// The `webhook-signature` header: one signature per secret, space
/// separated, which Standard Webhooks verifiers accept if any one matches.
pub fn signature_header(
    secrets: &[String],
    message_id: &str,
    timestamp: i64,
    body: &str,
) -> Result<String, base64::DecodeError> {
    let signatures = secrets
        .iter()
        .map(|secret| sign(secret, message_id, timestamp, body))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(signatures.join(" "))
}

/// The body of an event: its type, when it happened and what it is about.
/// A generation's event carries the finished generation exactly as `GET
/// /generations/{id}` returns it, at its completion; a final generation does
/// not change, so every attempt of a delivery sends the same bytes. An
/// account's `account.balance_low` carries the balance that fell below the
/// threshold and the threshold, as they were when it happened; its
/// `webhook.test` (sent from the dashboard) carries the account and a line
/// saying what it is.
pub fn event_body(delivery: &ClaimedDelivery, api_base: &str) -> String {
    let (timestamp, data) = match &delivery.subject {
        DeliverySubject::Generation(generation) => (
            generation.completed_at.unwrap_or(generation.created_at),
            generation_json(generation, api_base),
        ),
        DeliverySubject::Account { data, occurred_at } if delivery.event_type == TEST_EVENT => {
            (*occurred_at, test_event_json(data))
        }
        DeliverySubject::Account { data, occurred_at } => (*occurred_at, balance_low_json(data)),
    };
    json!({
        "type": delivery.event_type,
        "timestamp": rfc3339(timestamp),
        "data": data,
    })
    .to_string()
}

/// The `data` of `account.balance_low` from what the store fixed when it
/// happened (micro-dollars): the account, its balance as the customer sees
/// it (negative while in debt) and the threshold, in dollars as the API
/// shows money.
fn balance_low_json(fixed: &serde_json::Value) -> serde_json::Value {
    let usd = |field: &str| fixed[field].as_i64().map(|micros| Micros(micros).to_usd());
    json!({
        "object": "balance_alert",
        "account_id": fixed["account_id"],
        "balance_usd": usd("balance_micros"),
        "threshold_usd": usd("threshold_micros"),
    })
}

/// The `data` of `webhook.test`: the account, and what the event is for,
/// so that a receiver's log explains it.
fn test_event_json(fixed: &serde_json::Value) -> serde_json::Value {
    json!({
        "object": "webhook_test",
        "account_id": fixed["account_id"],
        "message": "A test event sent from the vidgate dashboard. Nothing happened to any generation or to the balance.",
    })
}

/// The wait before the next attempt after `attempts_made` attempts failed,
/// or `None` when the schedule is exhausted. A receiver's `Retry-After`
/// can lengthen the wait (up to `max_retry_after`), never shorten it.
pub fn next_retry_delay(
    settings: &WebhookSettings,
    attempts_made: i64,
    retry_after: Option<Duration>,
) -> Option<Duration> {
    let index = usize::try_from(attempts_made.checked_sub(1)?).ok()?;
    let scheduled = *settings.retry_schedule.get(index)?;
    let jittered = scheduled.mul_f64(rand::rng().random_range(0.9..=1.1));
    let asked = retry_after
        .map(|asked| asked.min(settings.max_retry_after))
        .unwrap_or_default();
    Some(jittered.max(asked))
}

/// Reads `Retry-After` as delay-seconds or as an HTTP date.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or_default())
}

/// Why an attempt did not deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SendFailure {
    /// The URL may never be sent to (a forbidden address, an unusable URL):
    /// retrying cannot help.
    Refused(String),
    /// No response (connection refused, timeout, DNS failure): worth a retry.
    Unreachable(String),
}

struct ReceiverResponse {
    status: u16,
    body: String,
    retry_after: Option<Duration>,
}

/// The HTTP client for receivers, with the address guard built in.
#[derive(Clone)]
pub struct WebhookClient {
    client: reqwest::Client,
    allow_private_network: bool,
    attempt_timeout: Duration,
}

impl WebhookClient {
    pub fn new(
        allow_private_network: bool,
        attempt_timeout: Duration,
    ) -> Result<WebhookClient, reqwest::Error> {
        let client = reqwest::Client::builder()
            .dns_resolver(Arc::new(GuardedResolver {
                allow_private_network,
            }))
            .no_proxy()
            // A redirect would send the event somewhere the customer did not
            // name (and past the address check): it counts as a failure.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(attempt_timeout)
            .user_agent(concat!("vidgate-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(WebhookClient {
            client,
            allow_private_network,
            attempt_timeout,
        })
    }

    /// The checks that need no network: the scheme, and an IP-literal host,
    /// which reqwest connects to without asking the resolver.
    fn check_url(&self, url: &str) -> Result<Url, SendFailure> {
        let url = Url::parse(url)
            .map_err(|error| SendFailure::Refused(format!("the URL is not valid: {error}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(SendFailure::Refused(
                "the URL is not http or https".to_owned(),
            ));
        }
        let literal = match url.host() {
            Some(Host::Ipv4(address)) => IpAddr::V4(address),
            Some(Host::Ipv6(address)) => IpAddr::V6(address),
            Some(Host::Domain(_)) => return Ok(url),
            None => return Err(SendFailure::Refused("the URL has no host".to_owned())),
        };
        match refusal(literal, self.allow_private_network) {
            Some(refused) => Err(SendFailure::Refused(refused.to_string())),
            None => Ok(url),
        }
    }

    async fn post(
        &self,
        url: &str,
        message_id: &str,
        timestamp: i64,
        signature: &str,
        body: String,
    ) -> Result<ReceiverResponse, SendFailure> {
        let url = self.check_url(url)?;
        let request = self
            .client
            .post(url)
            .header(header::CONTENT_TYPE, "application/json")
            .header("webhook-id", message_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body)
            .send();
        // reqwest's own timeout covers the request; this one also bounds the
        // reading of the body kept below.
        let exchange = async {
            let mut response = request.await.map_err(|error| self.describe(&error))?;
            let status = response.status().as_u16();
            let retry_after = retry_after(response.headers());
            let mut kept = Vec::new();
            // A body error after the status arrived changes nothing about
            // the outcome; the part read so far is kept.
            while kept.len() < MAX_KEPT_RESPONSE_BYTES {
                match response.chunk().await {
                    Ok(Some(chunk)) => {
                        let room = MAX_KEPT_RESPONSE_BYTES - kept.len();
                        kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    }
                    Ok(None) | Err(_) => break,
                }
            }
            Ok(ReceiverResponse {
                status,
                body: String::from_utf8_lossy(&kept).into_owned(),
                retry_after,
            })
        };
        tokio::time::timeout(self.attempt_timeout, exchange)
            .await
            .unwrap_or_else(|_| Err(self.timed_out()))
    }

    fn timed_out(&self) -> SendFailure {
        SendFailure::Unreachable(format!(
            "no response within {} s",
            self.attempt_timeout.as_secs_f64()
        ))
    }

    /// Turns a reqwest error into a failure, recovering the resolver's
    /// refusal from the error's source chain.
    fn describe(&self, error: &reqwest::Error) -> SendFailure {
        let mut source: Option<&(dyn StdError + 'static)> = Some(error);
        let mut innermost: &(dyn StdError + 'static) = error;
        while let Some(current) = source {
            if let Some(refused) = current.downcast_ref::<AddressRefused>() {
                return SendFailure::Refused(refused.to_string());
            }
            innermost = current;
            source = current.source();
        }
        if error.is_timeout() {
            return self.timed_out();
        }
        // The innermost cause says most ("connection refused"); reqwest's
        // own message only names the URL.
        SendFailure::Unreachable(innermost.to_string())
    }
}

fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(header::RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(value, SystemTime::now())
}

/// The media fetcher's address rule, lifted by `--allow-private-network`.
fn refusal(address: IpAddr, allow_private_network: bool) -> Option<AddressRefused> {
    if allow_private_network {
        return None;
    }
    vidgate_media::address::refusal_reason(address).map(|reason| AddressRefused { address, reason })
}

/// A forbidden receiver address, carried through reqwest's error chain.
#[derive(Debug)]
struct AddressRefused {
    address: IpAddr,
    reason: &'static str,
}

impl std::fmt::Display for AddressRefused {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "the URL points at {} ({}), which webhooks are not sent to",
            self.reason, self.address
        )
    }
}

impl StdError for AddressRefused {}

/// Resolves host names with the system resolver and keeps only allowed
/// addresses. reqwest connects to exactly the addresses returned, so what
/// was checked is what is used, even if the name's records change.
struct GuardedResolver {
    allow_private_network: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private_network = self.allow_private_network;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut first_refusal = None;
            let allowed: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|socket| match refusal(socket.ip(), allow_private_network) {
                    Some(refused) => {
                        first_refusal.get_or_insert(refused);
                        false
                    }
                    None => true,
                })
                .collect();
            match first_refusal {
                Some(refused) if allowed.is_empty() => {
                    Err(Box::new(refused) as Box<dyn StdError + Send + Sync>)
                }
                _ => Ok(Box::new(allowed.into_iter()) as Addrs),
            }
        })
    }
}

/// What the senders share.
pub struct WebhookContext {
    pub store: Arc<Store>,
    pub client: WebhookClient,
    pub api_base: String,
    pub settings: WebhookSettings,
    /// Identifies this process in lease_owner columns.
    pub node_id: String,
    /// Taken around every claim of this node's senders. A claim counts the
    /// node's live leases of the account before it takes one more; taken one
    /// at a time, two senders cannot both see room for the last one.
    claim_turn: tokio::sync::Mutex<()>,
    pub metrics: Arc<Metrics>,
}

impl WebhookContext {
    pub fn new(
        store: Arc<Store>,
        client: WebhookClient,
        api_base: String,
        settings: WebhookSettings,
        node_id: String,
        metrics: Arc<Metrics>,
    ) -> WebhookContext {
        WebhookContext {
            store,
            client,
            api_base,
            settings,
            node_id,
            claim_turn: tokio::sync::Mutex::new(()),
            metrics,
        }
    }

    /// The prefix every sender id of this node starts with.
    fn sender_group(&self) -> String {
        format!("{}/webhooks", self.node_id)
    }
}

/// Starts the senders; they stop claiming when `shutdown` fires and finish
/// the attempt under way (bounded by the attempt timeout), so an attempt is
/// never left half-recorded.
pub fn spawn(context: Arc<WebhookContext>, shutdown: CancellationToken) -> Vec<JoinHandle<()>> {
    (0..context.settings.senders)
        .map(|index| {
            let sender_id = format!("{}{index}", context.sender_group());
            tokio::spawn(sender_loop(context.clone(), sender_id, shutdown.clone()))
        })
        .collect()
}

async fn sender_loop(context: Arc<WebhookContext>, sender_id: String, shutdown: CancellationToken) {
    let fairness = SenderFairness {
        sender_group: context.sender_group(),
        max_in_flight_per_account: context.settings.max_in_flight_per_account,
    };
    while !shutdown.is_cancelled() {
        let claimed = {
            let _turn = context.claim_turn.lock().await;
            context
                .store
                .webhooks()
                .claim_delivery(&sender_id, context.settings.lease, &fairness)
                .await
        };
        let pause = match claimed {
            Ok(Some(delivery)) => {
                deliver(&context, &sender_id, delivery).await;
                continue;
            }
            Ok(None) => context.settings.poll_interval,
            Err(error) => {
                tracing::error!(sender = %sender_id, error = %error, "claiming a webhook delivery failed");
                Duration::from_secs(1)
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.cancelled() => {}
        }
    }
}

/// Makes one attempt and records it with what happens next, in its
/// `webhook.deliver` span: a CLIENT span that, while tracing is on,
/// continues the trace of the generation's submit.
async fn deliver(context: &WebhookContext, sender_id: &str, delivery: ClaimedDelivery) {
    let span = tracing::info_span!("webhook.deliver", otel.kind = "client", delivery_id = %delivery.id, generation_id = delivery.subject.generation_id(), event_type = %delivery.event_type, attempt = delivery.attempts + 1, outcome = tracing::field::Empty);
    if let Some(generation_id) = delivery
        .subject
        .generation_id()
        .filter(|_| telemetry::enabled())
    {
        // A trace that cannot be read leaves the attempt a trace of its own.
        if let Ok(Some(traceparent)) = context.store.generations().traceparent(generation_id).await
        {
            telemetry::continue_trace(&span, &traceparent);
        }
        telemetry::describe(&span, &[("vidgate.generation.id", generation_id)]);
    }
    attempt_delivery(context, sender_id, delivery)
        .instrument(span)
        .await;
}

async fn attempt_delivery(context: &WebhookContext, sender_id: &str, delivery: ClaimedDelivery) {
    let body = event_body(&delivery, &context.api_base);
    let started_at = now_millis();
    let clock = Instant::now();
    let timestamp = started_at.div_euclid(1000);
    let sent = match signature_header(&delivery.signing_secrets, &delivery.id, timestamp, &body) {
        Ok(signature) => {
            context
                .client
                .post(&delivery.url, &delivery.id, timestamp, &signature, body)
                .await
        }
        Err(error) => {
            // Secrets are made by vidgate, so this is a corrupt account row:
            // no attempt can succeed until an operator rotates the secret.
            tracing::error!(delivery = %delivery.id, error = %error, "the account's webhook secret is not valid base64");
            Err(SendFailure::Refused(
                "the account's webhook secret is unreadable; rotate it".to_owned(),
            ))
        }
    };
    let attempts_made = delivery.attempts + 1;
    let mut record = AttemptRecord {
        started_at,
        duration_ms: clock.elapsed().as_millis() as i64,
        status_code: None,
        error: None,
        response_body: None,
    };
    let retry = |retry_after| match next_retry_delay(&context.settings, attempts_made, retry_after)
    {
        Some(delay) => AttemptOutcome::RetryAt(now_millis() + delay.as_millis() as i64),
        None => AttemptOutcome::Failed,
    };
    let outcome = match sent {
        Ok(response) => {
            record.status_code = Some(response.status);
            record.response_body = Some(response.body);
            if (200..300).contains(&response.status) {
                AttemptOutcome::Delivered
            } else {
                record.error = Some(if (300..400).contains(&response.status) {
                    format!(
                        "the receiver answered HTTP {}; redirects are not followed",
                        response.status
                    )
                } else {
                    format!("the receiver answered HTTP {}", response.status)
                });
                retry(response.retry_after)
            }
        }
        Err(SendFailure::Unreachable(message)) => {
            record.error = Some(message);
            retry(None)
        }
        Err(SendFailure::Refused(message)) => {
            record.error = Some(message);
            AttemptOutcome::Failed
        }
    };
    let span = tracing::Span::current();
    span.record(
        "outcome",
        match outcome {
            AttemptOutcome::Delivered => "delivered",
            AttemptOutcome::RetryAt(_) => "retrying",
            AttemptOutcome::Failed => "failed",
        },
    );
    if let Some(status) = record.status_code {
        telemetry::describe_number(&span, "http.response.status_code", i64::from(status));
    }
    if outcome != AttemptOutcome::Delivered {
        telemetry::mark_failed(
            &span,
            match record.status_code {
                Some(_) => "http_status",
                None => "unreachable",
            },
        );
    }
    log_outcome(&delivery, attempts_made, &record, outcome);
    match context
        .store
        .webhooks()
        .record_attempt(&delivery.id, sender_id, &record, outcome)
        .await
    {
        Ok(true) => context.metrics.record_webhook_attempt(match outcome {
            AttemptOutcome::Delivered => WebhookAttemptOutcome::Delivered,
            AttemptOutcome::RetryAt(_) => WebhookAttemptOutcome::Retrying,
            AttemptOutcome::Failed => WebhookAttemptOutcome::Failed,
        }),
        Ok(false) => {
            tracing::warn!(delivery = %delivery.id, "webhook attempt finished after its lease was taken over; not recorded")
        }
        Err(error) => {
            // The lease runs out and the delivery is attempted again.
            tracing::error!(delivery = %delivery.id, error = %error, "recording a webhook attempt failed");
        }
    }
}

fn log_outcome(
    delivery: &ClaimedDelivery,
    attempt: i64,
    record: &AttemptRecord,
    outcome: AttemptOutcome,
) {
    let delivery_id = delivery.id.as_str();
    let generation = delivery.subject.generation_id().unwrap_or("");
    let status = record.status_code;
    let error = record.error.as_deref().unwrap_or("");
    let duration_ms = record.duration_ms;
    match outcome {
        AttemptOutcome::Delivered => {
            tracing::info!(
                delivery = delivery_id,
                generation,
                attempt,
                ?status,
                duration_ms,
                "webhook delivered"
            )
        }
        AttemptOutcome::RetryAt(due) => {
            tracing::warn!(delivery = delivery_id, generation, attempt, ?status, error, duration_ms, next_attempt_at = %rfc3339(due), "webhook attempt failed; will retry")
        }
        AttemptOutcome::Failed => {
            tracing::error!(
                delivery = delivery_id,
                generation,
                attempt,
                ?status,
                error,
                duration_ms,
                "webhook delivery failed for good"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_the_standard_webhooks_test_vector() {
        let signature = sign(
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            1_649_367_553,
            r#"{"email":"test@example.com","username":"test_user"}"#,
        )
        .unwrap();
        assert_eq!(signature, "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=");
    }

    #[test]
    fn signs_once_per_secret_space_separated() {
        let secrets = [
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".to_owned(),
            crate::ids::new_webhook_secret(),
        ];
        let header = signature_header(&secrets, "msg_1", 1_700_000_000, "{}").unwrap();
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(
            parts[0],
            sign(&secrets[0], "msg_1", 1_700_000_000, "{}").unwrap()
        );
        assert_ne!(parts[0], parts[1]);
        assert!(parts.iter().all(|part| part.starts_with("v1,")));
    }

    #[test]
    fn retries_follow_the_schedule_with_jitter_then_stop() {
        let settings = WebhookSettings::default();
        for (attempts_made, scheduled) in (1..).zip(&settings.retry_schedule) {
            let delay = next_retry_delay(&settings, attempts_made, None).unwrap();
            assert!(
                delay >= scheduled.mul_f64(0.9) && delay <= scheduled.mul_f64(1.1),
                "attempt {attempts_made}: {delay:?} for {scheduled:?}"
            );
        }
        let last = settings.retry_schedule.len() as i64 + 1;
        assert_eq!(next_retry_delay(&settings, last, None), None);
        let total: Duration = settings.retry_schedule.iter().sum();
        assert!(total > Duration::from_secs(20 * 3600) && total < Duration::from_secs(24 * 3600));
    }

    #[test]
    fn retry_after_lengthens_the_wait_within_bounds_but_never_shortens_it() {
        let settings = WebhookSettings::default();
        let asked = next_retry_delay(&settings, 1, Some(Duration::from_secs(120))).unwrap();
        assert_eq!(asked, Duration::from_secs(120));
        let capped = next_retry_delay(&settings, 1, Some(Duration::from_secs(86_400))).unwrap();
        assert_eq!(capped, settings.max_retry_after);
        let shorter = next_retry_delay(&settings, 4, Some(Duration::from_secs(1))).unwrap();
        assert!(shorter >= Duration::from_secs(9 * 60), "{shorter:?}");
    }

    #[test]
    fn reads_retry_after_as_seconds_or_a_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        assert_eq!(
            parse_retry_after(" 30 ", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:58:30 GMT", now),
            Some(Duration::from_secs(30 * 60 + 30))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[test]
    fn refuses_private_ip_literals_unless_allowed() {
        let strict = WebhookClient::new(false, Duration::from_secs(1)).unwrap();
        for url in [
            "http://127.0.0.1:9/hook",
            "http://[::1]/hook",
            "http://169.254.169.254/latest",
            "http://10.1.2.3/hook",
        ] {
            assert!(
                matches!(strict.check_url(url), Err(SendFailure::Refused(_))),
                "{url}"
            );
        }
        assert!(strict.check_url("https://93.184.215.14/hook").is_ok());
        assert!(strict.check_url("https://hooks.example.com/hook").is_ok());
        assert!(matches!(
            strict.check_url("ftp://example.com/hook"),
            Err(SendFailure::Refused(_))
        ));
        let relaxed = WebhookClient::new(true, Duration::from_secs(1)).unwrap();
        assert!(relaxed.check_url("http://127.0.0.1:9/hook").is_ok());
    }
}
