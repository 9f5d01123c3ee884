//! Submitting a generation with its hold, the one write on the hot path,
//! done the way each database does it best without loosening any rule: the
//! account is locked first, then the idempotent replay, the concurrency cap
//! and the balance are decided, and the generation, the hold and its ledger
//! row are written, all in one transaction that a refusal rolls back.
//!
//! SQLite runs those statements in a write transaction on its single writer
//! connection. PostgreSQL calls the function `vidgate_submit_generation`
//! (migration 0009), which runs the same statements in the server: the
//! account row stays locked for one round trip instead of one per
//! statement, and that lock is what bounds one account's submits per second
//! across all nodes.

use vidgate_core::{GenerationStatus, Micros};

use super::generations::{
    Generation, GenerationStore, IDEMPOTENCY_WINDOW, NewGeneration, SubmitOutcome, SubmitRefusal,
};
use super::ledger::Movement;
use super::postgres::WORK_CHANNEL;
use super::{PgStore, SqliteStore, StoreError, now_millis};

/// The record of a generation just inserted as queued at `now`, as a read
/// would return it, without reading it back.
fn queued_generation(generation: NewGeneration, now: i64) -> Generation {
    Generation {
        id: generation.id,
        account_id: generation.account_id,
        model: generation.model,
        endpoint: generation.endpoint,
        mode: generation.mode,
        status: GenerationStatus::Queued,
        input: generation.input,
        output: None,
        error: None,
        price: generation.price,
        official_price: generation.official_price,
        source: "api".into(),
        webhook_url: generation.webhook_url,
        attempts: 0,
        created_at: now,
        started_at: None,
        completed_at: None,
    }
}

impl SqliteStore {
    pub(super) async fn submit(
        &self,
        generation: NewGeneration,
    ) -> Result<SubmitOutcome, SubmitRefusal> {
        let mut transaction = self.begin_write().await?;
        let now = now_millis();
        // The account is locked first, so everything below (the
        // idempotent replay, the concurrency count and the balance)
        // is decided by one submit of this account at a time.
        let account = Self::account_in(&mut transaction, &generation.account_id)
            .await?
            .ok_or(SubmitRefusal::AccountNotFound)?;
        if let Some(idempotency) = &generation.idempotency {
            // A key older than the window is forgotten so that it can
            // be used again, as the Idempotency-Key convention expects.
            sqlx::query(
                "UPDATE generations SET idempotency_key = NULL \
                 WHERE account_id = $1 AND idempotency_key = $2 AND created_at < $3",
            )
            .bind(&generation.account_id)
            .bind(&idempotency.key)
            .bind(now - IDEMPOTENCY_WINDOW.as_millis() as i64)
            .execute(&mut *transaction)
            .await
            .map_err(StoreError::from)?;
            let earlier: Option<(String, Option<String>)> = sqlx::query_as(
                "SELECT id, request_sha256 FROM generations \
                 WHERE account_id = $1 AND idempotency_key = $2",
            )
            .bind(&generation.account_id)
            .bind(&idempotency.key)
            .fetch_optional(&mut *transaction)
            .await
            .map_err(StoreError::from)?;
            if let Some((earlier_id, earlier_digest)) = earlier {
                if earlier_digest.as_deref() != Some(idempotency.request_sha256.as_str()) {
                    return Err(SubmitRefusal::IdempotencyMismatch);
                }
                let original = Self::generation_in(&mut transaction, &earlier_id)
                    .await?
                    .ok_or_else(|| StoreError::Corrupt("replayed generation vanished".into()))?;
                return Ok(SubmitOutcome::Replayed(original));
            }
        }

        let active: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM generations \
             WHERE account_id = $1 AND status IN ('queued', 'running')",
        )
        .bind(&generation.account_id)
        .fetch_one(&mut *transaction)
        .await
        .map_err(StoreError::from)?;
        let limit = account.limits.max_concurrent as i64;
        if active >= limit {
            return Err(SubmitRefusal::ConcurrencyLimit { limit });
        }
        if account.balance < generation.price {
            return Err(SubmitRefusal::InsufficientBalance {
                balance: account.balance,
                price: generation.price,
            });
        }
        let (idempotency_key, request_sha256) = match &generation.idempotency {
            Some(idempotency) => (
                Some(idempotency.key.as_str()),
                Some(idempotency.request_sha256.as_str()),
            ),
            None => (None, None),
        };
        sqlx::query(
            "INSERT INTO generations (id, account_id, api_key_id, model, endpoint, mode, \
             status, input, price_micros, official_micros, source, webhook_url, \
             idempotency_key, request_sha256, max_attempts, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, 'queued', $7, $8, $9, 'api', $10, $11, \
             $12, $13, $14)",
        )
        .bind(&generation.id)
        .bind(&generation.account_id)
        .bind(&generation.api_key_id)
        .bind(&generation.model)
        .bind(&generation.endpoint)
        .bind(&generation.mode)
        .bind(generation.input.to_string())
        .bind(generation.price.0)
        .bind(generation.official_price.0)
        .bind(&generation.webhook_url)
        .bind(idempotency_key)
        .bind(request_sha256)
        .bind(generation.max_attempts)
        .bind(now)
        .execute(&mut *transaction)
        .await
        .map_err(StoreError::from)?;
        if let Some(binding) = &generation.media_binding {
            sqlx::query("INSERT INTO generation_media (generation_id, binding) VALUES ($1, $2)")
                .bind(&generation.id)
                .bind(binding.to_string())
                .execute(&mut *transaction)
                .await
                .map_err(StoreError::from)?;
        }
        Self::move_money(
            &mut transaction,
            &generation.account_id,
            Some(&generation.id),
            Movement::Hold,
            generation.price,
        )
        .await?;
        Self::announce_work(&mut transaction, &generation.id).await?;
        transaction.commit().await.map_err(StoreError::from)?;
        Ok(SubmitOutcome::Created(queued_generation(generation, now)))
    }
}

impl PgStore {
    pub(super) async fn submit(
        &self,
        generation: NewGeneration,
    ) -> Result<SubmitOutcome, SubmitRefusal> {
        let now = now_millis();
        let (idempotency_key, request_sha256) = match &generation.idempotency {
            Some(idempotency) => (
                Some(idempotency.key.as_str()),
                Some(idempotency.request_sha256.as_str()),
            ),
            None => (None, None),
        };
        // One statement outside an explicit transaction is its own
        // transaction: the function's writes commit together or not at all.
        let (outcome, generation_id, balance, limit): (
            String,
            Option<String>,
            Option<i64>,
            Option<i64>,
        ) = sqlx::query_as(
            "SELECT outcome, generation_id, balance, concurrency_limit FROM vidgate_submit_generation($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
        )
        .bind(&generation.id)
        .bind(&generation.account_id)
        .bind(&generation.api_key_id)
        .bind(&generation.model)
        .bind(&generation.endpoint)
        .bind(&generation.mode)
        .bind(generation.input.to_string())
        .bind(generation.price.0)
        .bind(generation.official_price.0)
        .bind(&generation.webhook_url)
        .bind(idempotency_key)
        .bind(request_sha256)
        .bind(generation.max_attempts)
        .bind(now)
        .bind(IDEMPOTENCY_WINDOW.as_millis() as i64)
        .bind(WORK_CHANNEL)
        .bind(generation.media_binding.as_ref().map(|binding| binding.to_string()))
        .fetch_one(self.writer())
        .await
        .map_err(StoreError::from)?;
        let corrupt = |what: &str| {
            SubmitRefusal::Store(StoreError::Corrupt(format!(
                "vidgate_submit_generation answered {outcome:?} without {what}"
            )))
        };
        match outcome.as_str() {
            "created" => Ok(SubmitOutcome::Created(queued_generation(generation, now))),
            "replayed" => {
                let earlier_id = generation_id.as_deref().ok_or_else(|| corrupt("an id"))?;
                let original = self
                    .generation(&generation.account_id, earlier_id)
                    .await?
                    .ok_or_else(|| StoreError::Corrupt("replayed generation vanished".into()))?;
                Ok(SubmitOutcome::Replayed(original))
            }
            "idempotency_mismatch" => Err(SubmitRefusal::IdempotencyMismatch),
            "concurrency_limit" => Err(SubmitRefusal::ConcurrencyLimit {
                limit: limit.ok_or_else(|| corrupt("the limit"))?,
            }),
            "insufficient_balance" => Err(SubmitRefusal::InsufficientBalance {
                balance: Micros(balance.ok_or_else(|| corrupt("the balance"))?),
                price: generation.price,
            }),
            "account_not_found" => Err(SubmitRefusal::AccountNotFound),
            other => Err(SubmitRefusal::Store(StoreError::Corrupt(format!(
                "vidgate_submit_generation answered the unknown outcome {other:?}"
            )))),
        }
    }
}
