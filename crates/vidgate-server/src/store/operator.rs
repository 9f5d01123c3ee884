//! What the operator API (`/admin/v1`) needs beyond the other aggregates:
//! every account at once, credit adjustments applied exactly once per
//! Idempotency-Key, the deletion of an account, and the audit log of the
//! operator's changes.

use vidgate_core::Micros;

use super::accounts::{Account, AccountRow};
use super::database::WriteTransaction;
use super::generations::{Generation, GenerationRow, ListFilter, push_list_filter};
use super::ledger::Movement;
use super::retention::record_expired_file;
use super::retention::stored_path_of_output;
use super::{Store, StoreError, now_millis};

/// One row of the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    pub id: i64,
    /// Who made the change: the operator's name as the API was told it.
    pub actor: String,
    /// What was done, e.g. `account.create`, `account.credit`, `model.pause`.
    pub action: String,
    /// What it was done to: an account, key or model id.
    pub target: String,
    /// The change's figures, as JSON text.
    pub detail: String,
    pub created_at: i64,
}

/// What an operator did, as the audit log names it. Every operator action
/// (`operator_actions`) has one, and so has every change an account's
/// owners make to its people in the dashboard (`application::users`, its
/// actor `dashboard:<email>`), so a new action adds a variant here and its
/// name is written in this one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditAction {
    AccountCreate,
    AccountCredit,
    AccountDebit,
    AccountLimits,
    AccountLowBalance,
    AccountRotateWebhookSecret,
    AccountDelete,
    KeyCreate,
    KeyRevoke,
    KeyLimit,
    ModelPause,
    ModelResume,
    UserCreate,
    UserRemove,
    UserRevokeSessions,
    /// An owner gave a user of their account another role (dashboard).
    UserRole,
    /// A user changed their own password (dashboard).
    UserPassword,
    /// An owner let the account's members manage keys and secrets, or
    /// stopped them (dashboard).
    AccountMemberPermissions,
}

impl AuditAction {
    /// The name stored in the audit log's `action` column.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::AccountCreate => "account.create",
            AuditAction::AccountCredit => "account.credit",
            AuditAction::AccountDebit => "account.debit",
            AuditAction::AccountLimits => "account.limits",
            AuditAction::AccountLowBalance => "account.low_balance",
            AuditAction::AccountRotateWebhookSecret => "account.rotate_webhook_secret",
            AuditAction::AccountDelete => "account.delete",
            AuditAction::KeyCreate => "key.create",
            AuditAction::KeyRevoke => "key.revoke",
            AuditAction::KeyLimit => "key.limit",
            AuditAction::ModelPause => "model.pause",
            AuditAction::ModelResume => "model.resume",
            AuditAction::UserCreate => "user.create",
            AuditAction::UserRemove => "user.remove",
            AuditAction::UserRevokeSessions => "user.revoke_sessions",
            AuditAction::UserRole => "user.role",
            AuditAction::UserPassword => "user.password",
            AuditAction::AccountMemberPermissions => "account.member_permissions",
        }
    }
}

/// A change to write to the audit log.
pub struct NewAuditEntry {
    pub actor: String,
    pub action: AuditAction,
    pub target: String,
    pub detail: serde_json::Value,
}

/// Which way an adjustment moves money.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdjustmentKind {
    /// Adds to the balance (a top-up, goodwill).
    Credit,
    /// Takes from the balance (a chargeback, a correction), never below zero.
    Debit,
}

impl AdjustmentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AdjustmentKind::Credit => "credit",
            AdjustmentKind::Debit => "debit",
        }
    }

    fn from_stored(text: &str) -> Result<AdjustmentKind, StoreError> {
        match text {
            "credit" => Ok(AdjustmentKind::Credit),
            "debit" => Ok(AdjustmentKind::Debit),
            other => Err(StoreError::Corrupt(format!("adjustment kind {other:?}"))),
        }
    }

    fn movement(self) -> Movement {
        match self {
            AdjustmentKind::Credit => Movement::Credit,
            AdjustmentKind::Debit => Movement::Debit,
        }
    }
}

/// Credit added to (or taken from) an account by an operator or a payment
/// system.
pub struct NewCreditAdjustment {
    pub idempotency_key: String,
    pub account_id: String,
    pub kind: AdjustmentKind,
    /// More than zero; `kind` says which way it moves.
    pub amount: Micros,
    pub reason: String,
    pub actor: String,
}

/// A credit adjustment as it was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreditAdjustment {
    pub idempotency_key: String,
    pub account_id: String,
    pub kind: AdjustmentKind,
    pub amount: Micros,
    pub reason: String,
    pub actor: String,
    pub created_at: i64,
}

#[derive(Debug)]
pub enum AdjustmentOutcome {
    /// Applied now, with the account after it.
    Applied(CreditAdjustment, Account),
    /// The key was used before for the same account and amount: nothing is
    /// applied again, and the first adjustment is returned.
    Replayed(CreditAdjustment, Account),
    /// The key was used before for a different account, kind or amount.
    KeyReused,
    /// A debit larger than the balance: nothing is taken.
    InsufficientBalance {
        balance: Micros,
    },
    /// The account was deleted: its books are closed.
    AccountDeleted,
    AccountNotFound,
}

/// What deleting an account did.
#[derive(Debug)]
pub enum AccountDeletion {
    /// Deleted now: the tombstone, and how many stored files it listed for
    /// the retention sweep to delete.
    Deleted {
        account: Account,
        files: usize,
    },
    /// Deleted before; nothing was done again.
    AlreadyDeleted(Account),
    /// Refused: generations are queued or running, and their holds and
    /// results still belong to the account.
    Active {
        generations: i64,
    },
    AccountNotFound,
}

/// Which generations the operator lists across accounts: the public list's
/// filters, optionally one account, and a range of creation times.
#[derive(Debug, Clone, Default)]
pub struct OperatorGenerationFilter {
    pub account_id: Option<String>,
    /// Status, model, cursor and page size, as the public list takes them.
    pub list: ListFilter,
    /// Created at or after this time (Unix ms).
    pub created_from: Option<i64>,
    /// Created before this time (Unix ms).
    pub created_until: Option<i64>,
}

/// An adjustment row: key, account, kind, amount, reason, actor, time.
type AdjustmentRow = (String, String, String, i64, String, String, i64);

fn adjustment_from_row(
    (idempotency_key, account_id, kind, amount, reason, actor, created_at): AdjustmentRow,
) -> Result<CreditAdjustment, StoreError> {
    Ok(CreditAdjustment {
        idempotency_key,
        account_id,
        kind: AdjustmentKind::from_stored(&kind)?,
        amount: Micros(amount),
        reason,
        actor,
        created_at,
    })
}

/// An audit row: id, actor, action, target, detail, time.
type AuditRow = (i64, String, String, String, String, i64);

fn audit_entry_from_row((id, actor, action, target, detail, created_at): AuditRow) -> AuditEntry {
    AuditEntry {
        id,
        actor,
        action,
        target,
        detail,
        created_at,
    }
}

/// What replaces personal text of a deleted account.
const REDACTED: &str = "[deleted]";

/// The fields of audit details that people wrote about an account or its
/// users: an account's or key's name, a user's email, an adjustment's
/// reason.
const PERSONAL_AUDIT_FIELDS: [&str; 4] = ["name", "email", "reason", "idempotency_key"];

/// Whether an audit entry's detail names `account_id` as its account (the
/// entries about a user do).
fn audit_detail_names_account(detail: &str, account_id: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(detail)
        .is_ok_and(|detail| detail["account_id"].as_str() == Some(account_id))
}

/// An audit entry's detail with its personal fields replaced, or `None`
/// when it has none (the entry stays as it is).
fn redacted_audit_detail(detail: &str) -> Option<String> {
    let mut detail: serde_json::Value = serde_json::from_str(detail).ok()?;
    let fields = detail.as_object_mut()?;
    let mut changed = false;
    for field in PERSONAL_AUDIT_FIELDS {
        if let Some(value) = fields.get_mut(field) {
            *value = serde_json::Value::from(REDACTED);
            changed = true;
        }
    }
    changed.then(|| detail.to_string())
}

/// A failed generation's error with its message (which may quote the
/// request or a provider's words about it) replaced; its code stays.
fn redacted_failure(error: &str) -> String {
    let code = serde_json::from_str::<serde_json::Value>(error)
        .ok()
        .and_then(|error| error.get("code").cloned())
        .unwrap_or(serde_json::Value::Null);
    serde_json::json!({ "code": code, "message": REDACTED }).to_string()
}

impl Store {
    /// Replaces the operator's idempotency keys of an account's credit
    /// adjustments, which an operator may have written from what they
    /// knew of the customer, by their digests, in the adjustments and in
    /// the audit entries that name them. A replay of a key after the
    /// deletion then finds no adjustment and is refused with the deleted
    /// account.
    async fn redact_idempotency_keys_in(
        transaction: &mut WriteTransaction,
        account_id: &str,
    ) -> Result<(), StoreError> {
        let keys: Vec<String> = fetch_in_transaction!(
            &mut *transaction,
            fetch_all,
            sqlx::query_scalar(
                "SELECT idempotency_key FROM credit_adjustments WHERE account_id = $1",
            )
            .bind(account_id)
        )?;
        for key in keys {
            let redacted = format!("{REDACTED}:{}", crate::ids::sha256_hex(key.as_bytes()));
            for statement in [
                "UPDATE credit_adjustments SET idempotency_key = $1 WHERE idempotency_key = $2",
                "UPDATE audit_log SET target = $1 WHERE target = $2",
            ] {
                execute_in_transaction!(
                    &mut *transaction,
                    sqlx::query(statement).bind(&redacted).bind(&key)
                )?;
            }
        }
        Ok(())
    }

    pub(super) async fn record_audit_in(
        transaction: &mut WriteTransaction,
        entry: &NewAuditEntry,
    ) -> Result<(), StoreError> {
        execute_in_transaction!(
            transaction,
            sqlx::query(
                "INSERT INTO audit_log (actor, action, target, detail, created_at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&entry.actor)
            .bind(entry.action.as_str())
            .bind(&entry.target)
            .bind(entry.detail.to_string())
            .bind(now_millis())
        )?;
        Ok(())
    }
}

/// The operations of `operator` (see `Store::operator`).
#[derive(Clone, Copy)]
pub struct Operator<'store> {
    pub(super) store: &'store Store,
}

impl Operator<'_> {
    /// Generations of every account (or one), newest first, filtered.
    pub async fn list_generations_across_accounts(
        self,
        filter: &OperatorGenerationFilter,
    ) -> Result<Vec<Generation>, StoreError> {
        // As the public list does, only the filters given are
        // written into the statement, so that the planner can use the
        // index that fits (`generations_recent` across accounts, or
        // `generations_account_recent` when the account is given) and
        // seek to the cursor.
        // The builder is written once and typed for each database by
        // the pool it runs on.
        let rows: Vec<GenerationRow> = on_reader!(self.store, |reader| {
            let mut query = sqlx::QueryBuilder::new(statement!(
                "SELECT ",
                GenerationRow::COLUMNS,
                " FROM generations WHERE 1 = 1"
            ));
            match &filter.account_id {
                Some(account_id) => {
                    query
                        .push(" AND account_id = ")
                        .push_bind(account_id.as_str());
                }
                // True of every row, written out (not bound) so that
                // the planner may use the partial index
                // `generations_recent` (migration 0017), which no
                // account's list names and so cannot be misled into.
                None => {
                    query.push(" AND created_at >= 0");
                }
            }
            push_list_filter(
                &mut query,
                &filter.list,
                filter.created_from,
                filter.created_until,
            );
            query.build_query_as().fetch_all(reader).await
        })?;
        rows.into_iter().map(Generation::try_from).collect()
    }

    /// Accounts in id order, after `after` when given.
    pub async fn list_accounts(
        self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Account>, StoreError> {
        let rows: Vec<AccountRow> =
            fetch_on_reader!(self.store, fetch_all, sqlx::query_as(statement!(
                "SELECT ",
                AccountRow::COLUMNS,
                " FROM accounts WHERE (CAST($1 AS TEXT) IS NULL OR id > $1) ORDER BY id LIMIT $2"
            ))
            .bind(after)
            .bind(limit as i64)
)?;
        Ok(rows.into_iter().map(Account::from).collect())
    }

    /// Adds or takes credit once per idempotency key: the adjustment, its
    /// ledger entry and its audit row in one transaction.
    pub async fn adjust_credit(
        self,
        adjustment: NewCreditAdjustment,
    ) -> Result<AdjustmentOutcome, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        // The account row is locked first, so two deliveries of one
        // webhook take turns and the second finds the first's row.
        let Some(account) = Store::account_in(&mut transaction, &adjustment.account_id).await?
        else {
            return Ok(AdjustmentOutcome::AccountNotFound);
        };
        let earlier: Option<AdjustmentRow> = fetch_in_transaction!(
            &mut transaction,
            fetch_optional,
            sqlx::query_as(
                "SELECT idempotency_key, account_id, kind, amount_micros, reason, actor, \
                 created_at FROM credit_adjustments WHERE idempotency_key = $1",
            )
            .bind(&adjustment.idempotency_key)
        )?;
        if let Some(earlier) = earlier.map(adjustment_from_row).transpose()? {
            if earlier.account_id != adjustment.account_id
                || earlier.kind != adjustment.kind
                || earlier.amount != adjustment.amount
            {
                return Ok(AdjustmentOutcome::KeyReused);
            }
            return Ok(AdjustmentOutcome::Replayed(earlier, account));
        }
        if account.deleted_at.is_some() {
            return Ok(AdjustmentOutcome::AccountDeleted);
        }
        if adjustment.kind == AdjustmentKind::Debit && adjustment.amount > account.balance {
            return Ok(AdjustmentOutcome::InsufficientBalance {
                balance: account.balance,
            });
        }
        let created_at = now_millis();
        // A key used at once for another account (whose row this
        // transaction did not lock) fails here on the primary key,
        // and the whole adjustment rolls back.
        execute_in_transaction!(
            &mut transaction,
            sqlx::query(
                "INSERT INTO credit_adjustments \
                 (idempotency_key, account_id, kind, amount_micros, reason, actor, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(&adjustment.idempotency_key)
            .bind(&adjustment.account_id)
            .bind(adjustment.kind.as_str())
            .bind(adjustment.amount.0)
            .bind(&adjustment.reason)
            .bind(&adjustment.actor)
            .bind(created_at)
        )?;
        Store::move_money(
            &mut transaction,
            &adjustment.account_id,
            None,
            adjustment.kind.movement(),
            adjustment.amount,
        )
        .await?;
        Store::record_audit_in(
            &mut transaction,
            &NewAuditEntry {
                actor: adjustment.actor.clone(),
                action: match adjustment.kind {
                    AdjustmentKind::Credit => AuditAction::AccountCredit,
                    AdjustmentKind::Debit => AuditAction::AccountDebit,
                },
                target: adjustment.account_id.clone(),
                detail: serde_json::json!({
                    "amount_micros": adjustment.amount.0,
                    "reason": adjustment.reason,
                    "idempotency_key": adjustment.idempotency_key,
                }),
            },
        )
        .await?;
        let account = Store::account_in(&mut transaction, &adjustment.account_id)
            .await?
            .ok_or_else(|| StoreError::Corrupt("account vanished".into()))?;
        transaction.commit().await?;
        Ok(AdjustmentOutcome::Applied(
            CreditAdjustment {
                idempotency_key: adjustment.idempotency_key,
                account_id: adjustment.account_id,
                kind: adjustment.kind,
                amount: adjustment.amount,
                reason: adjustment.reason,
                actor: adjustment.actor,
                created_at,
            },
            account,
        ))
    }

    /// Deletes an account's personal data and media in one transaction with
    /// its audit row: keys, users and sessions, webhook secrets, URLs and
    /// deliveries, uploads, and the inputs and outputs of its generations
    /// (their files join the expired files: their URLs answer 410 at once,
    /// and the sweep deletes them). What people wrote about the account is
    /// redacted: names, emails and reasons in the audit log and the credit
    /// adjustments, and the messages of failed generations. The account
    /// row stays with its money figures and its ledger, so the books still
    /// add up.
    pub async fn delete_account(
        &self,
        account_id: &str,
        actor: &str,
    ) -> Result<AccountDeletion, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        // Locked first, so no submit of the account slips in while
        // its data goes.
        let Some(account) = Store::account_in(&mut transaction, account_id).await? else {
            return Ok(AccountDeletion::AccountNotFound);
        };
        if account.deleted_at.is_some() {
            return Ok(AccountDeletion::AlreadyDeleted(account));
        }
        let generations: i64 = fetch_in_transaction!(
            &mut transaction,
            fetch_one,
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM generations \
                 WHERE account_id = $1 AND status IN ('queued', 'running')",
            )
            .bind(account_id)
        )?;
        if generations > 0 {
            return Ok(AccountDeletion::Active { generations });
        }
        let now = now_millis();
        let files = expire_account_files_in(&mut transaction, account_id, now).await?;
        redact_what_people_wrote_in(&mut transaction, account_id).await?;
        erase_account_data_in(&mut transaction, account_id, now).await?;
        Store::record_audit_in(
            &mut transaction,
            &NewAuditEntry {
                actor: actor.to_owned(),
                action: AuditAction::AccountDelete,
                target: account_id.to_owned(),
                detail: serde_json::json!({
                    "files": files,
                    "balance_micros": account.balance.0,
                    "captured_micros": account.captured.0,
                    "credited_micros": account.credited.0,
                }),
            },
        )
        .await?;
        let account = Store::account_in(&mut transaction, account_id)
            .await?
            .ok_or_else(|| StoreError::Corrupt("account vanished".into()))?;
        transaction.commit().await?;
        // Its keys are gone: this node forgets them at once, other
        // nodes when their cached entries expire.
        self.store.callers().forget_all();
        Ok(AccountDeletion::Deleted { account, files })
    }

    pub async fn record_audit(self, entry: NewAuditEntry) -> Result<(), StoreError> {
        let mut transaction = self.store.begin_write().await?;
        Store::record_audit_in(&mut transaction, &entry).await?;
        transaction.commit().await?;
        Ok(())
    }

    /// The audit log, newest first, before the entry `before` when given.
    pub async fn audit_log(
        self,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let rows: Vec<AuditRow> = fetch_on_reader!(
            self.store,
            fetch_all,
            sqlx::query_as(
                "SELECT id, actor, action, target, detail, created_at FROM audit_log \
                 WHERE (CAST($1 AS BIGINT) IS NULL OR id < $1) ORDER BY id DESC LIMIT $2",
            )
            .bind(before)
            .bind(limit as i64)
        )?;
        Ok(rows.into_iter().map(audit_entry_from_row).collect())
    }
}

/// Records every file of the account (its generations' clips, its uploads)
/// as expired, so their URLs answer 410 at once and the sweep deletes them;
/// answers how many there were.
async fn expire_account_files_in(
    transaction: &mut WriteTransaction,
    account_id: &str,
    now: i64,
) -> Result<usize, StoreError> {
    let outputs: Vec<(String, String)> = fetch_in_transaction!(
        &mut *transaction,
        fetch_all,
        sqlx::query_as(
            "SELECT id, output FROM generations WHERE account_id = $1 \
             AND output IS NOT NULL AND output_expired_at IS NULL",
        )
        .bind(account_id)
    )?;
    let mut files = Vec::new();
    for (generation_id, output) in outputs {
        let output: serde_json::Value = serde_json::from_str(&output)
            .map_err(|error| StoreError::Corrupt(format!("generation {generation_id}: {error}")))?;
        files.extend(stored_path_of_output(&output));
    }
    let uploads: Vec<String> = fetch_in_transaction!(
        &mut *transaction,
        fetch_all,
        sqlx::query_scalar(
            "SELECT relative_path FROM uploads WHERE account_id = $1 \
             UNION SELECT relative_path FROM direct_uploads WHERE account_id = $1",
        )
        .bind(account_id)
    )?;
    files.extend(uploads);
    for relative_path in &files {
        record_expired_file(transaction, relative_path, account_id, now).await?;
    }
    Ok(files.len())
}

/// Redacts what people wrote about the account: names, emails and reasons
/// in the audit log and the credit adjustments, the idempotency keys the
/// operator gave, and the messages of failed generations. Which event
/// happened, when, by whom and for how much stays.
async fn redact_what_people_wrote_in(
    transaction: &mut WriteTransaction,
    account_id: &str,
) -> Result<(), StoreError> {
    let audit_rows: Vec<(i64, String)> = fetch_in_transaction!(
        &mut *transaction,
        fetch_all,
        sqlx::query_as(
            "SELECT id, detail FROM audit_log WHERE target = $1 \
             OR target IN (SELECT id FROM users WHERE account_id = $1) \
             OR target IN (SELECT id FROM api_keys WHERE account_id = $1) \
             OR target IN (SELECT idempotency_key FROM credit_adjustments \
                           WHERE account_id = $1)",
        )
        .bind(account_id)
    )?;
    // A user removed before the account is no longer in `users`, but
    // the entries about it name the account in their detail.
    let naming_the_account: Vec<(i64, String)> = fetch_in_transaction!(
        &mut *transaction,
        fetch_all,
        sqlx::query_as("SELECT id, detail FROM audit_log WHERE detail LIKE $1")
            .bind(format!("%{account_id}%"))
    )?;
    let audit_rows = audit_rows.into_iter().chain(
        naming_the_account
            .into_iter()
            .filter(|(_, detail)| audit_detail_names_account(detail, account_id)),
    );
    for (id, detail) in audit_rows {
        if let Some(redacted) = redacted_audit_detail(&detail) {
            execute_in_transaction!(
                &mut *transaction,
                sqlx::query("UPDATE audit_log SET detail = $1 WHERE id = $2")
                    .bind(redacted)
                    .bind(id)
            )?;
        }
    }
    execute_in_transaction!(
        &mut *transaction,
        sqlx::query("UPDATE credit_adjustments SET reason = $2 WHERE account_id = $1")
            .bind(account_id)
            .bind(REDACTED)
    )?;
    Store::redact_idempotency_keys_in(transaction, account_id).await?;
    let failures: Vec<(String, String)> = fetch_in_transaction!(
        &mut *transaction,
        fetch_all,
        sqlx::query_as(
            "SELECT id, error FROM generations WHERE account_id = $1 AND error IS NOT NULL",
        )
        .bind(account_id)
    )?;
    for (generation_id, error) in failures {
        execute_in_transaction!(
            &mut *transaction,
            sqlx::query("UPDATE generations SET error = $1 WHERE id = $2")
                .bind(redacted_failure(&error))
                .bind(generation_id)
        )?;
    }
    Ok(())
}

/// Deletes the account's keys, people, sessions, deliveries and uploads,
/// empties its generations' inputs and outputs and blanks its own row.
/// Prices, statuses and times stay: they are the books.
async fn erase_account_data_in(
    transaction: &mut WriteTransaction,
    account_id: &str,
    now: i64,
) -> Result<(), StoreError> {
    // Children before parents, for the foreign keys.
    for statement in [
        "DELETE FROM webhook_attempts WHERE delivery_id IN \
         (SELECT id FROM webhook_deliveries WHERE account_id = $1)",
        "DELETE FROM webhook_deliveries WHERE account_id = $1",
        "DELETE FROM generation_media WHERE generation_id IN \
         (SELECT id FROM generations WHERE account_id = $1)",
        "UPDATE provider_jobs SET input = '{}' WHERE generation_id IN \
         (SELECT id FROM generations WHERE account_id = $1)",
        "DELETE FROM uploads WHERE account_id = $1",
        "DELETE FROM direct_uploads WHERE account_id = $1",
        "DELETE FROM sessions WHERE account_id = $1",
        "DELETE FROM users WHERE account_id = $1",
        "DELETE FROM api_keys WHERE account_id = $1",
    ] {
        execute_in_transaction!(&mut *transaction, sqlx::query(statement).bind(account_id))?;
    }
    execute_in_transaction!(
        &mut *transaction,
        sqlx::query(
            "UPDATE generations SET input = '{}', output = NULL, webhook_url = NULL, \
             idempotency_key = NULL, request_sha256 = NULL, \
             output_expired_at = COALESCE(output_expired_at, $2) WHERE account_id = $1",
        )
        .bind(account_id)
        .bind(now)
    )?;
    execute_in_transaction!(
        &mut *transaction,
        sqlx::query(
            "UPDATE accounts SET name = '', webhook_secret = '', \
             previous_webhook_secret = NULL, previous_webhook_secret_expires_at = NULL, \
             low_balance_threshold_micros = NULL, low_balance_webhook_url = NULL, \
             low_balance_alerted = FALSE, deleted_at = $2 WHERE id = $1",
        )
        .bind(account_id)
        .bind(now)
    )?;
    Ok(())
}
