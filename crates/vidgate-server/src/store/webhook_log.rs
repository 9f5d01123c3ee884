//! The webhook delivery log: an account's deliveries with their attempts,
//! and a delivery sent again on request.

use sqlx::{Postgres, Sqlite};

use super::webhooks::{AttemptRecord, DeliveryRow, DeliveryStatus};
use super::{Store, StoreError, now_millis};

/// One delivery of one generation, with its attempts, for the delivery log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookDelivery {
    pub id: String,
    pub event_type: String,
    pub url: String,
    pub status: DeliveryStatus,
    pub attempts: i64,
    /// When the next attempt is due, while pending. While a sender holds the
    /// delivery this is the end of its lease.
    pub next_attempt_at: Option<i64>,
    /// True while a sender is attempting it.
    pub in_flight: bool,
    pub created_at: i64,
    pub completed_at: Option<i64>,
    pub attempt_log: Vec<WebhookAttempt>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookAttempt {
    pub attempt: i64,
    pub record: AttemptRecord,
    /// When the next attempt was scheduled after this one, if any.
    pub next_attempt_at: Option<i64>,
}

/// Re-sends a customer may ask for, per delivery, over its lifetime.
pub const MAX_MANUAL_RETRIES: i64 = 5;

/// The event the dashboard's "Send a test event" queues.
pub const TEST_EVENT: &str = "webhook.test";

/// Test events an account may have waiting at once: enough to try a
/// receiver again after fixing it, too few to make the senders a flood.
pub const MAX_PENDING_TEST_EVENTS: i64 = 3;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryRetryOutcome {
    /// The delivery is pending and due now.
    Scheduled,
    /// A sender is attempting it right now; nothing changed.
    InFlight,
    /// It was re-sent on request `MAX_MANUAL_RETRIES` times already.
    RetriesExhausted,
    NotFound,
}

/// A webhook delivery of one of an account's generations, or of an event
/// about the account itself (no generation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountDelivery {
    pub generation_id: Option<String>,
    pub delivery: WebhookDelivery,
}

database_row! {
    /// An attempt of a delivery, as the log shows it.
    pub(super) struct AttemptRow {
        pub(super) delivery_id: String,
        attempt: i64,
        started_at: i64,
        duration_ms: i64,
        status_code: Option<i64>,
        error: Option<String>,
        response_body: Option<String>,
        next_attempt_at: Option<i64>,
    }
}

impl From<AttemptRow> for WebhookAttempt {
    fn from(row: AttemptRow) -> Self {
        WebhookAttempt {
            attempt: row.attempt,
            record: AttemptRecord {
                started_at: row.started_at,
                duration_ms: row.duration_ms,
                status_code: row.status_code.map(|code| code as u16),
                error: row.error,
                response_body: row.response_body,
            },
            next_attempt_at: row.next_attempt_at,
        }
    }
}

impl Store {
    /// The deliveries `deliveries_statement` selects, in its order, each
    /// with the attempts among those `attempts_statement` selects that
    /// belong to it, in the order they were made. Both statements take the
    /// same two parameters, so that they select the same deliveries; the
    /// second is generic because the two logs bind an account id or a page
    /// size there.
    async fn deliveries_with_attempts<Second>(
        &self,
        deliveries_statement: &'static str,
        attempts_statement: &'static str,
        first: &str,
        second: Second,
    ) -> Result<Vec<AccountDelivery>, StoreError>
    where
        Second: for<'value> sqlx::Encode<'value, Sqlite>
            + sqlx::Type<Sqlite>
            + for<'value> sqlx::Encode<'value, Postgres>
            + sqlx::Type<Postgres>
            + Copy
            + Send,
    {
        let now = now_millis();
        let rows: Vec<DeliveryRow> = fetch_on_reader!(
            self,
            fetch_all,
            sqlx::query_as(deliveries_statement)
                .bind(first)
                .bind(second)
        )?;
        let attempts: Vec<AttemptRow> = fetch_on_reader!(
            self,
            fetch_all,
            sqlx::query_as(attempts_statement).bind(first).bind(second)
        )?;
        let mut deliveries = rows
            .into_iter()
            .map(|row| {
                let generation_id = row.generation_id.clone();
                row.into_delivery(now).map(|delivery| AccountDelivery {
                    generation_id,
                    delivery,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        for attempt in attempts {
            if let Some(found) = deliveries
                .iter_mut()
                .find(|found| found.delivery.id == attempt.delivery_id)
            {
                found
                    .delivery
                    .attempt_log
                    .push(WebhookAttempt::from(attempt));
            }
        }
        Ok(deliveries)
    }
}

/// The operations of `webhook_log` (see `Store::webhook_log`).
#[derive(Clone, Copy)]
pub struct WebhookLog<'store> {
    pub(super) store: &'store Store,
}

impl WebhookLog<'_> {
    /// The deliveries of one generation of the account, oldest first, each
    /// with its attempts.
    pub async fn deliveries(
        self,
        account_id: &str,
        generation_id: &str,
    ) -> Result<Vec<WebhookDelivery>, StoreError> {
        let deliveries = self
            .store
            .deliveries_with_attempts(
                statement!(
                    "SELECT ",
                    DeliveryRow::COLUMNS,
                    " FROM webhook_deliveries WHERE generation_id = $1 AND account_id = $2 \
                      ORDER BY created_at, id"
                ),
                statement!(
                    "SELECT ",
                    AttemptRow::COLUMNS,
                    " FROM webhook_attempts WHERE delivery_id IN \
                      (SELECT id FROM webhook_deliveries WHERE generation_id = $1 \
                       AND account_id = $2) ORDER BY id"
                ),
                generation_id,
                account_id,
            )
            .await?;
        Ok(deliveries
            .into_iter()
            .map(|account_delivery| account_delivery.delivery)
            .collect())
    }

    /// Makes a delivery pending and due now, whatever its status.
    pub async fn retry_delivery(
        self,
        account_id: &str,
        generation_id: &str,
        delivery_id: &str,
    ) -> Result<DeliveryRetryOutcome, StoreError> {
        let now = now_millis();
        let mut transaction = self.store.begin_write().await?;
        // A delivery a live sender holds is left alone: the attempt
        // under way is the re-send asked for. A lease that ran out
        // (its sender died) is cleared.
        let scheduled = execute_in_transaction!(
            &mut transaction,
            sqlx::query(
                "UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = $1, \
                 completed_at = NULL, lease_owner = NULL, \
                 manual_retries = manual_retries + 1 \
                 WHERE id = $2 AND generation_id = $3 AND account_id = $4 \
                 AND manual_retries < $5 \
                 AND NOT (status = 'pending' AND lease_owner IS NOT NULL \
                          AND next_attempt_at > $1)",
            )
            .bind(now)
            .bind(delivery_id)
            .bind(generation_id)
            .bind(account_id)
            .bind(MAX_MANUAL_RETRIES)
        )?;
        if scheduled == 1 {
            transaction.commit().await?;
            return Ok(DeliveryRetryOutcome::Scheduled);
        }
        let exists: Option<i64> = fetch_in_transaction!(
            &mut transaction,
            fetch_optional,
            sqlx::query_scalar(
                "SELECT manual_retries FROM webhook_deliveries \
                 WHERE id = $1 AND generation_id = $2 AND account_id = $3",
            )
            .bind(delivery_id)
            .bind(generation_id)
            .bind(account_id)
        )?;
        Ok(match exists {
            Some(retries) if retries >= MAX_MANUAL_RETRIES => {
                DeliveryRetryOutcome::RetriesExhausted
            }
            Some(_) => DeliveryRetryOutcome::InFlight,
            None => DeliveryRetryOutcome::NotFound,
        })
    }

    /// Queues a `webhook.test` event for the account to `url`, due now,
    /// signed and retried like every other delivery. False, and nothing
    /// queued, when the account is deleted or already has
    /// `MAX_PENDING_TEST_EVENTS` test events waiting. The check and the
    /// insert are one statement, so two clicks at once cannot pass it both.
    pub async fn queue_test(
        self,
        account_id: &str,
        url: &str,
        payload: &serde_json::Value,
    ) -> Result<bool, StoreError> {
        let now = now_millis();
        let inserted = execute_on_writer!(
            self.store,
            sqlx::query(
                "INSERT INTO webhook_deliveries (id, generation_id, account_id, event_type, url, \
                 status, next_attempt_at, created_at, payload) \
                 SELECT $1, NULL, id, $2, $3, 'pending', $4, $4, $5 FROM accounts \
                 WHERE id = $6 AND deleted_at IS NULL AND (SELECT COUNT(*) FROM \
                 webhook_deliveries WHERE account_id = $6 AND event_type = $2 \
                 AND status = 'pending') < $7",
            )
            .bind(crate::ids::new_webhook_message_id())
            .bind(TEST_EVENT)
            .bind(url)
            .bind(now)
            .bind(payload.to_string())
            .bind(account_id)
            .bind(MAX_PENDING_TEST_EVENTS)
        )?;
        Ok(inserted == 1)
    }

    /// The account's latest webhook deliveries, newest first, each with its
    /// attempts.
    pub async fn recent_deliveries(
        self,
        account_id: &str,
        limit: u32,
    ) -> Result<Vec<AccountDelivery>, StoreError> {
        self.store
            .deliveries_with_attempts(
                statement!(
                    "SELECT ",
                    DeliveryRow::COLUMNS,
                    " FROM webhook_deliveries WHERE account_id = $1 \
                  ORDER BY created_at DESC, id DESC LIMIT $2"
                ),
                statement!(
                    "SELECT ",
                    AttemptRow::COLUMNS,
                    " FROM webhook_attempts a WHERE a.delivery_id IN \
                  (SELECT id FROM webhook_deliveries WHERE account_id = $1 \
                   ORDER BY created_at DESC, id DESC LIMIT $2) \
                  ORDER BY a.id"
                ),
                account_id,
                limit as i64,
            )
            .await
    }
}
