//! The webhook outbox: the delivery written with a generation's final
//! state, claimed by senders under a lease, each attempt recorded, and the
//! account's signing secrets. The delivery log's reads are in
//! `webhook_log.rs`.

use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

use super::accounts::{Account, AccountRow};
use super::database::{Database, WriteTransaction};
use super::generations::{Generation, GenerationRow};
use super::webhook_log::WebhookDelivery;
use super::{Store, StoreError, now_millis};

/// Where a webhook delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryStatus {
    /// Waiting for its next attempt, or being attempted.
    Pending,
    /// A receiver answered 2xx.
    Delivered,
    /// Every attempt failed, or the URL may never be sent to.
    Failed,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        }
    }
}

impl std::str::FromStr for DeliveryStatus {
    type Err = StoreError;

    fn from_str(text: &str) -> Result<DeliveryStatus, StoreError> {
        match text {
            "pending" => Ok(DeliveryStatus::Pending),
            "delivered" => Ok(DeliveryStatus::Delivered),
            "failed" => Ok(DeliveryStatus::Failed),
            other => Err(StoreError::Corrupt(format!(
                "unknown webhook delivery status {other:?}"
            ))),
        }
    }
}

/// A webhook delivery a sender has claimed, with what it needs to send it.
#[derive(Debug, Clone)]
pub struct ClaimedDelivery {
    /// Also the `webhook-id` header.
    pub id: String,
    pub event_type: String,
    pub url: String,
    /// Attempts recorded before this one.
    pub attempts: i64,
    pub subject: DeliverySubject,
    /// The account's signing secrets valid now, the current one first.
    pub signing_secrets: Vec<String>,
}

/// What a delivery's event is about.
#[derive(Debug, Clone)]
pub enum DeliverySubject {
    /// The finished generation, read when the delivery is claimed (a final
    /// generation no longer changes). Boxed: a generation is many times the
    /// size of the account event's fields.
    Generation(Box<Generation>),
    /// The account (`account.balance_low`): the event's data as it was fixed
    /// when the event happened, and that time (Unix ms).
    Account {
        data: serde_json::Value,
        occurred_at: i64,
    },
}

impl DeliverySubject {
    /// The generation the event is about, if it is about one.
    pub fn generation_id(&self) -> Option<&str> {
        match self {
            DeliverySubject::Generation(generation) => Some(&generation.id),
            DeliverySubject::Account { .. } => None,
        }
    }
}

/// The per-account share of one node's senders, which a claim respects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SenderFairness {
    /// What the lease owners of this node's senders start with (every
    /// sender id of the node is this prefix and a suffix).
    pub sender_group: String,
    /// Deliveries of one account this node's senders attempt at once.
    pub max_in_flight_per_account: u32,
}

/// What one attempt to send a delivery did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    pub started_at: i64,
    pub duration_ms: i64,
    /// The receiver's HTTP status, `None` when no response came.
    pub status_code: Option<u16>,
    pub error: Option<String>,
    /// The start of the response body.
    pub response_body: Option<String>,
}

/// What becomes of a delivery after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Delivered,
    /// Try again at this time (Unix milliseconds).
    RetryAt(i64),
    /// Give up: the last attempt failed, or the URL may never be sent to.
    Failed,
}

database_row! {
    pub(super) struct DeliveryRow {
        pub(super) id: String,
        /// None for an event about the account, whose data is `payload`.
        pub(super) generation_id: Option<String>,
        pub(super) account_id: String,
        event_type: String,
        url: String,
        status: String,
        attempts: i64,
        next_attempt_at: Option<i64>,
        lease_owner: Option<String>,
        created_at: i64,
        completed_at: Option<i64>,
        payload: Option<String>,
    }
}

impl DeliveryRow {
    /// The delivery for the log; `now` tells a live lease from one whose
    /// sender died.
    pub(super) fn into_delivery(self, now: i64) -> Result<WebhookDelivery, StoreError> {
        let status = DeliveryStatus::from_str(&self.status)?;
        Ok(WebhookDelivery {
            in_flight: status == DeliveryStatus::Pending
                && self.lease_owner.is_some()
                && self
                    .next_attempt_at
                    .is_some_and(|lease_end| lease_end > now),
            id: self.id,
            event_type: self.event_type,
            url: self.url,
            status,
            attempts: self.attempts,
            next_attempt_at: self.next_attempt_at,
            created_at: self.created_at,
            completed_at: self.completed_at,
            attempt_log: Vec::new(),
        })
    }

    pub(super) fn into_claimed(
        self,
        subject: DeliverySubject,
        signing_secrets: Vec<String>,
    ) -> ClaimedDelivery {
        ClaimedDelivery {
            id: self.id,
            event_type: self.event_type,
            url: self.url,
            attempts: self.attempts,
            subject,
            signing_secrets,
        }
    }
}

impl Store {
    /// Writes the webhook delivery of a generation that was just put
    /// in a final state, inside the transaction that did it, when the
    /// generation has a webhook URL. The event type follows from the
    /// final status (`generation.succeeded`, `.failed`, `.canceled`).
    pub(super) async fn enqueue_webhook_in(
        transaction: &mut WriteTransaction,
        generation_id: &str,
    ) -> Result<(), StoreError> {
        execute_in_transaction!(
            transaction,
            sqlx::query(
                "INSERT INTO webhook_deliveries (id, generation_id, account_id, event_type, \
                 url, status, next_attempt_at, created_at) \
                 SELECT $1, id, account_id, 'generation.' || status, webhook_url, 'pending', \
                 $2, $2 FROM generations WHERE id = $3 AND webhook_url IS NOT NULL",
            )
            .bind(crate::ids::new_webhook_message_id())
            .bind(now_millis())
            .bind(generation_id)
        )?;
        Ok(())
    }
}

/// How the two databases pick the delivery whose turn it is.
#[derive(Clone, Copy)]
enum DeliveryClaimDialect {
    /// SQLite's single writer needs no row locks: the account whose turn it
    /// is, then its delivery due longest, each by an index.
    Sqlite,
    /// Senders on several nodes pass over each other's rows: each account in
    /// turn order, its delivery due longest that no one else has locked
    /// (`FOR UPDATE SKIP LOCKED` in the lateral subquery, the only level
    /// without an aggregate). The turns are sorted before the join, so the
    /// nested loop stops at the first account with such a delivery.
    Postgres,
}

/// The fair claim of a webhook delivery, for both databases, as the queue's
/// claim of a job (`store/queue.rs`, `claim_statement`) is. Among the
/// accounts with a due delivery and fewer live leases than their share of
/// this node's senders, the one whose last claim is oldest, or that was
/// never claimed for, goes first (then the one whose delivery has been due
/// longest), and its delivery due longest is taken. So one account's burst
/// of thousands of due deliveries (alerts, or the webhooks of thousands of
/// generations) holds another account's delivery back by at most one claim
/// per account waiting, instead of by the whole burst. Claims are numbered
/// (`claim_sequence`, one more than the highest so far) rather than timed,
/// since many fall in one millisecond; two PostgreSQL nodes claiming at
/// once may draw the same number, which is harmless.
///
/// The claim takes the delivery by moving its due time to the end of the
/// lease, so no other sender sees it as due until the lease has passed.
/// Live leases are the rows whose `next_attempt_at`, the lease's end while
/// a sender holds them, is still ahead; they are read from the small index
/// of leased rows (migration 0012), the turns from migration 0028's.
///
/// `$1`..`$3` are the sender, the lease's end and now; `$4` and `$5` the
/// length of the node's sender group and the group; `$6` the share of
/// senders one account may hold.
fn delivery_claim_statement(dialect: DeliveryClaimDialect) -> String {
    let due = "status = 'pending' AND next_attempt_at <= $3";
    let turns = format!(
        "SELECT waiting.account_id, waiting.head, \
           COALESCE((SELECT MAX(served.claim_sequence) FROM webhook_deliveries served \
                     WHERE served.account_id = waiting.account_id \
                     AND served.claim_sequence IS NOT NULL), 0) AS last_turn \
         FROM (SELECT account_id, MIN(next_attempt_at) AS head FROM webhook_deliveries \
               WHERE {due} AND account_id NOT IN \
                 (SELECT account_id FROM webhook_deliveries \
                  WHERE status = 'pending' AND lease_owner IS NOT NULL \
                  AND next_attempt_at > $3 AND substr(lease_owner, 1, $4) = $5 \
                  GROUP BY account_id HAVING COUNT(*) >= $6) \
               GROUP BY account_id) waiting"
    );
    let pick = match dialect {
        DeliveryClaimDialect::Sqlite => format!(
            "SELECT d.id FROM webhook_deliveries d \
             WHERE d.status = 'pending' AND d.next_attempt_at <= $3 AND d.account_id = \
               (SELECT turns.account_id FROM ({turns}) turns \
                ORDER BY turns.last_turn, turns.head, turns.account_id LIMIT 1) \
             ORDER BY d.next_attempt_at, d.id LIMIT 1"
        ),
        DeliveryClaimDialect::Postgres => format!(
            "SELECT head.id FROM \
               (SELECT * FROM ({turns}) unordered \
                ORDER BY last_turn, head, account_id) turns \
             CROSS JOIN LATERAL \
               (SELECT d.id FROM webhook_deliveries d \
                WHERE d.account_id = turns.account_id AND d.status = 'pending' \
                AND d.next_attempt_at <= $3 \
                ORDER BY d.next_attempt_at, d.id LIMIT 1 FOR UPDATE SKIP LOCKED) head \
             ORDER BY turns.last_turn, turns.head, turns.account_id LIMIT 1"
        ),
    };
    format!(
        "UPDATE webhook_deliveries SET lease_owner = $1, next_attempt_at = $2, \
         claim_sequence = (SELECT COALESCE(MAX(claimed.claim_sequence), 0) + 1 \
                           FROM webhook_deliveries claimed \
                           WHERE claimed.claim_sequence IS NOT NULL) \
         WHERE {due} AND id = ({pick}) \
         RETURNING {columns}",
        columns = DeliveryRow::COLUMNS,
    )
}

impl Store {
    /// Rotates the secret inside the caller's transaction and answers the
    /// account after it; `None` when there is no such account.
    pub(super) async fn rotate_webhook_secret_in(
        transaction: &mut WriteTransaction,
        account_id: &str,
        new_secret: &str,
        previous_valid_for: Duration,
    ) -> Result<Option<Account>, StoreError> {
        // The right-hand sides read the row as it was, so the
        // current secret becomes the previous one.
        execute_in_transaction!(
            &mut *transaction,
            sqlx::query(
                "UPDATE accounts SET previous_webhook_secret = webhook_secret, \
                 previous_webhook_secret_expires_at = $1, webhook_secret = $2 \
                 WHERE id = $3",
            )
            .bind(now_millis() + previous_valid_for.as_millis() as i64)
            .bind(new_secret)
            .bind(account_id)
        )?;
        Self::account_in(transaction, account_id).await
    }
}

/// The operations of `webhooks` (see `Store::webhooks`).
#[derive(Clone, Copy)]
pub struct Webhooks<'store> {
    pub(super) store: &'store Store,
}

impl Webhooks<'_> {
    /// Claims a due delivery for `sender`, holding it until `lease` has
    /// passed (then it falls due again if the sender has not recorded an
    /// attempt, as when its process died). Accounts take turns (see
    /// `delivery_claim_statement`); within an account the delivery due
    /// longest goes first. Deliveries of an account that already has
    /// `fairness.max_in_flight_per_account` live leases held by senders of
    /// `fairness.sender_group` are passed over, so one account's slow
    /// receiver cannot take every sender of a node.
    pub async fn claim_delivery(
        self,
        sender: &str,
        lease: Duration,
        fairness: &SenderFairness,
    ) -> Result<Option<ClaimedDelivery>, StoreError> {
        static SQLITE_CLAIM: LazyLock<String> =
            LazyLock::new(|| delivery_claim_statement(DeliveryClaimDialect::Sqlite));
        static POSTGRES_CLAIM: LazyLock<String> =
            LazyLock::new(|| delivery_claim_statement(DeliveryClaimDialect::Postgres));
        let statement = match &self.store.database {
            Database::Sqlite(_) => SQLITE_CLAIM.as_str(),
            Database::Postgres(_) => POSTGRES_CLAIM.as_str(),
        };
        let now = now_millis();
        let claimed: Option<DeliveryRow> = fetch_on_writer!(
            self.store,
            fetch_optional,
            sqlx::query_as(statement)
                .bind(sender)
                .bind(now + lease.as_millis() as i64)
                .bind(now)
                .bind(fairness.sender_group.chars().count() as i32)
                .bind(&fairness.sender_group)
                .bind(i64::from(fairness.max_in_flight_per_account))
        )?;
        let Some(claimed) = claimed else {
            return Ok(None);
        };
        let subject = match (&claimed.generation_id, &claimed.payload) {
            // A final generation no longer changes, so reading it after
            // the claim reads what the event is about.
            (Some(generation_id), _) => {
                let generation: GenerationRow = fetch_on_reader!(
                    self.store,
                    fetch_one,
                    sqlx::query_as(statement!(
                        "SELECT ",
                        GenerationRow::COLUMNS,
                        " FROM generations WHERE id = $1"
                    ))
                    .bind(generation_id)
                )?;
                DeliverySubject::Generation(Box::new(Generation::try_from(generation)?))
            }
            (None, Some(payload)) => DeliverySubject::Account {
                data: serde_json::from_str(payload).map_err(|error| {
                    StoreError::Corrupt(format!("a delivery's payload is not JSON: {error}"))
                })?,
                occurred_at: claimed.created_at,
            },
            (None, None) => {
                return Err(StoreError::Corrupt(
                    "a delivery is about neither a generation nor an account".into(),
                ));
            }
        };
        let account: AccountRow = fetch_on_reader!(
            self.store,
            fetch_one,
            sqlx::query_as(statement!(
                "SELECT ",
                AccountRow::COLUMNS,
                " FROM accounts WHERE id = $1"
            ))
            .bind(&claimed.account_id)
        )?;
        let signing_secrets = Account::from(account).signing_secrets(now);
        Ok(Some(claimed.into_claimed(subject, signing_secrets)))
    }

    /// Logs an attempt and moves the delivery on, in one transaction; false
    /// when `sender` no longer holds it, in which case nothing changed.
    pub async fn record_attempt(
        self,
        delivery_id: &str,
        sender: &str,
        attempt: &AttemptRecord,
        outcome: AttemptOutcome,
    ) -> Result<bool, StoreError> {
        let (status, next_attempt_at, completed_at) = match outcome {
            AttemptOutcome::Delivered => (DeliveryStatus::Delivered, None, Some(now_millis())),
            AttemptOutcome::RetryAt(due) => (DeliveryStatus::Pending, Some(due), None),
            AttemptOutcome::Failed => (DeliveryStatus::Failed, None, Some(now_millis())),
        };
        let mut transaction = self.store.begin_write().await?;
        // Guarded by the lease: a sender that took longer than its
        // lease, while another sender took the delivery over, records
        // nothing.
        let attempt_number: Option<i64> = fetch_in_transaction!(
            &mut transaction,
            fetch_optional,
            sqlx::query_scalar(
                "UPDATE webhook_deliveries SET attempts = attempts + 1, status = $1, \
                 next_attempt_at = $2, completed_at = $3, lease_owner = NULL \
                 WHERE id = $4 AND status = 'pending' AND lease_owner = $5 \
                 RETURNING attempts",
            )
            .bind(status.as_str())
            .bind(next_attempt_at)
            .bind(completed_at)
            .bind(delivery_id)
            .bind(sender)
        )?;
        let Some(attempt_number) = attempt_number else {
            return Ok(false);
        };
        execute_in_transaction!(
            &mut transaction,
            sqlx::query(
                "INSERT INTO webhook_attempts (delivery_id, attempt, started_at, duration_ms, \
                 status_code, error, response_body, next_attempt_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(delivery_id)
            .bind(attempt_number)
            .bind(attempt.started_at)
            .bind(attempt.duration_ms)
            .bind(attempt.status_code.map(i64::from))
            .bind(&attempt.error)
            .bind(&attempt.response_body)
            .bind(next_attempt_at)
        )?;
        transaction.commit().await?;
        Ok(true)
    }

    /// Deliveries still waiting for an attempt (due, scheduled or leased),
    /// for the metrics.
    pub async fn pending_deliveries(self) -> Result<i64, StoreError> {
        Ok(fetch_on_reader!(
            self.store,
            fetch_one,
            sqlx::query_scalar("SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'pending'")
        )?)
    }
}
