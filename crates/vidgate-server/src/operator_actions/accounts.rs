//! The operator's actions on accounts: create one (with its first API key),
//! show one, add or take credit, change its limits, set its low-balance
//! alert, rotate its webhook secret, delete its media and personal data.

use serde_json::json;
use vidgate_core::Micros;

use super::{OperatorActionError, bounded_text};
use crate::application::accounts::{self, CreatedAccount, parse_low_balance_setting};
use crate::application::keys_and_secrets::{self, Changer};
use crate::application::submit::IDEMPOTENCY_KEY;
use crate::store::{
    Account, AccountDeletion, AccountLimits, AdjustmentKind, AdjustmentOutcome, AuditAction,
    CreditAdjustment, NewAuditEntry, NewCreditAdjustment, Store,
};

pub const MAX_NAME_LENGTH: usize = 200;
pub const MAX_REASON_LENGTH: usize = 500;
pub const MAX_IDEMPOTENCY_KEY_LENGTH: usize = 255;
/// The highest figure any limit may be set to, a bound against a typo's
/// extra zeros; far above what one customer needs (one node answers some
/// 50k reads a second), so that a big account or a benchmark is not held
/// below what the cluster can do.
pub const MAX_LIMIT_FIGURE: u32 = 1_000_000;
/// The largest single adjustment, a bound against a typo's extra zeros.
pub const MAX_ADJUSTMENT: Micros = Micros(1_000_000 * 1_000_000);

/// Creates an account with `initial_credit` and its first API key (its
/// secret shown once). The operator API gives no initial credit: there,
/// money is added with a credit adjustment, so it always has a reason.
pub async fn create(
    store: &Store,
    actor: &str,
    name: &str,
    initial_credit: Micros,
) -> Result<CreatedAccount, OperatorActionError> {
    let name = bounded_text("name", name, MAX_NAME_LENGTH)?;
    let new_account = accounts::new_account(name, initial_credit);
    let first_key = accounts::issue_api_key(&new_account.id, "default");
    let audit = NewAuditEntry {
        actor: actor.to_owned(),
        action: AuditAction::AccountCreate,
        target: new_account.id.clone(),
        detail: json!({
            "name": name,
            "key_id": first_key.record.id,
            "credit_micros": initial_credit.0,
        }),
    };
    let account = store
        .operator()
        .create_account_audited(&new_account, &first_key.record, &audit)
        .await?;
    Ok(CreatedAccount {
        account,
        key_id: first_key.record.id,
        api_key: first_key.secret,
    })
}

/// The account, deleted or not.
pub async fn show(store: &Store, account_id: &str) -> Result<Account, OperatorActionError> {
    store
        .accounts()
        .get(account_id)
        .await?
        .ok_or_else(|| OperatorActionError::AccountNotFound(account_id.to_owned()))
}

/// A credit or debit as the operator asks for it.
pub struct AdjustmentRequest<'a> {
    pub account_id: &'a str,
    pub kind: AdjustmentKind,
    pub amount: Micros,
    pub reason: &'a str,
    /// The adjustment is applied once per key: a payment system's webhook
    /// delivered twice, or a retried script, moves the money once.
    pub idempotency_key: &'a str,
}

/// A credit or debit with the account after it.
pub struct Adjusted {
    pub adjustment: CreditAdjustment,
    pub account: Account,
    /// The key was used before for the same adjustment: nothing was
    /// applied again, and `adjustment` is the first one.
    pub replayed: bool,
}

/// Adds credit, or takes it back (a chargeback, a correction), once per
/// idempotency key, with its ledger entry and audit row in one transaction.
/// A debit larger than the balance takes nothing: money held for running
/// jobs and money already spent are not the operator's to take, and a
/// balance below zero would break the books.
pub async fn adjust_credit(
    store: &Store,
    actor: &str,
    request: AdjustmentRequest<'_>,
) -> Result<Adjusted, OperatorActionError> {
    let idempotency_key = request.idempotency_key.trim();
    if idempotency_key.is_empty() || idempotency_key.len() > MAX_IDEMPOTENCY_KEY_LENGTH {
        return Err(OperatorActionError::Invalid {
            param: IDEMPOTENCY_KEY,
            message: format!(
                "A {} needs an {IDEMPOTENCY_KEY} of 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} \
                 characters, so that it is applied once.",
                request.kind.as_str()
            ),
        });
    }
    if request.amount.0 <= 0 || request.amount > MAX_ADJUSTMENT {
        return Err(OperatorActionError::Invalid {
            param: "amount_micros",
            message: format!(
                "amount_micros must be more than 0 and at most {}.",
                MAX_ADJUSTMENT.0
            ),
        });
    }
    let reason = bounded_text("reason", request.reason, MAX_REASON_LENGTH)?;
    let outcome = store
        .operator()
        .adjust_credit(NewCreditAdjustment {
            idempotency_key: idempotency_key.to_owned(),
            account_id: request.account_id.to_owned(),
            kind: request.kind,
            amount: request.amount,
            reason: reason.to_owned(),
            actor: actor.to_owned(),
        })
        .await?;
    match outcome {
        AdjustmentOutcome::Applied(adjustment, account) => Ok(Adjusted {
            adjustment,
            account,
            replayed: false,
        }),
        AdjustmentOutcome::Replayed(adjustment, account) => Ok(Adjusted {
            adjustment,
            account,
            replayed: true,
        }),
        AdjustmentOutcome::KeyReused => Err(OperatorActionError::IdempotencyKeyReused),
        AdjustmentOutcome::InsufficientBalance { balance } => {
            Err(OperatorActionError::InsufficientBalance { balance })
        }
        AdjustmentOutcome::AccountDeleted => Err(OperatorActionError::BooksClosed(
            request.account_id.to_owned(),
        )),
        AdjustmentOutcome::AccountNotFound => Err(OperatorActionError::AccountNotFound(
            request.account_id.to_owned(),
        )),
    }
}

/// New limits for an account; a figure left out stays as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct LimitChanges {
    pub requests_per_second: Option<u32>,
    pub burst: Option<u32>,
    pub max_concurrent: Option<u32>,
}

/// Changes an account's limits (each 1 to `MAX_LIMIT_FIGURE`, concurrency
/// from 0); the figures left out stay as they are.
pub async fn set_limits(
    store: &Store,
    actor: &str,
    account_id: &str,
    changes: LimitChanges,
) -> Result<Account, OperatorActionError> {
    for (param, figure, minimum) in [
        ("requests_per_second", changes.requests_per_second, 1),
        ("burst", changes.burst, 1),
        ("max_concurrent_generations", changes.max_concurrent, 0),
    ] {
        if let Some(figure) = figure
            && !(minimum..=MAX_LIMIT_FIGURE).contains(&figure)
        {
            return Err(OperatorActionError::Invalid {
                param,
                message: format!("{param} must be between {minimum} and {MAX_LIMIT_FIGURE}."),
            });
        }
    }
    let current = accounts::changeable_account(store, account_id)
        .await?
        .limits;
    let limits = AccountLimits {
        requests_per_second: changes
            .requests_per_second
            .unwrap_or(current.requests_per_second),
        burst: changes.burst.unwrap_or(current.burst),
        max_concurrent: changes.max_concurrent.unwrap_or(current.max_concurrent),
    };
    let audit = NewAuditEntry {
        actor: actor.to_owned(),
        action: AuditAction::AccountLimits,
        target: account_id.to_owned(),
        detail: json!({
            "requests_per_second": limits.requests_per_second,
            "burst": limits.burst,
            "max_concurrent_generations": limits.max_concurrent,
        }),
    };
    store
        .operator()
        .set_account_limits_audited(account_id, limits, &audit)
        .await?
        .ok_or_else(|| OperatorActionError::AccountNotFound(account_id.to_owned()))
}

/// Issues a new webhook signing secret; the replaced one keeps signing
/// deliveries beside it for `ROTATION_GRACE`, so receivers can switch over
/// without rejecting anything.
pub async fn rotate_webhook_secret(
    store: &Store,
    actor: &str,
    account_id: &str,
) -> Result<Account, OperatorActionError> {
    Ok(
        keys_and_secrets::rotate_webhook_secret(store, Changer::Operator(actor), account_id)
            .await?,
    )
}

/// What deleting an account left.
pub struct DeletedAccount {
    /// The tombstone: its money figures and when it was deleted.
    pub account: Account,
    /// Stored files listed for the retention sweep to delete; 0 when the
    /// account was deleted before.
    pub files_expired: usize,
}

/// Deletes an account's media and personal data (keys, users, webhook
/// settings, uploads, prompts and outputs), with its audit row, in one
/// transaction; the account stays as a tombstone with its money figures.
/// Refused while generations are queued or running, so no job finishes
/// into a deleted account. Deleting a deleted account answers the
/// tombstone again.
pub async fn delete(
    store: &Store,
    actor: &str,
    account_id: &str,
) -> Result<DeletedAccount, OperatorActionError> {
    match store.operator().delete_account(account_id, actor).await? {
        AccountDeletion::Deleted { account, files } => Ok(DeletedAccount {
            account,
            files_expired: files,
        }),
        AccountDeletion::AlreadyDeleted(account) => Ok(DeletedAccount {
            account,
            files_expired: 0,
        }),
        AccountDeletion::Active { generations } => Err(OperatorActionError::AccountBusy {
            account_id: account_id.to_owned(),
            generations,
        }),
        AccountDeletion::AccountNotFound => {
            Err(OperatorActionError::AccountNotFound(account_id.to_owned()))
        }
    }
}

/// Sets the account's low-balance alert (`threshold_usd`, and the URL its
/// event goes to), or removes it when `threshold_usd` is absent; a
/// threshold above the balance sends the event at once. Answers the account
/// after the change.
pub async fn set_low_balance_alert(
    store: &Store,
    actor: &str,
    account_id: &str,
    threshold_usd: Option<&str>,
    webhook_url: Option<&str>,
) -> Result<Account, OperatorActionError> {
    let setting = parse_low_balance_setting(threshold_usd, webhook_url).map_err(|error| {
        OperatorActionError::Invalid {
            param: error.param,
            message: error.message,
        }
    })?;
    accounts::changeable_account(store, account_id).await?;
    let audit = NewAuditEntry {
        actor: actor.to_owned(),
        action: AuditAction::AccountLowBalance,
        target: account_id.to_owned(),
        detail: json!({
            "low_balance_threshold_micros": setting.threshold.map(|threshold| threshold.0),
            "low_balance_webhook_url": setting.webhook_url,
        }),
    };
    store
        .operator()
        .set_low_balance_alert_audited(account_id, &setting, &audit)
        .await?
        .ok_or_else(|| OperatorActionError::AccountNotFound(account_id.to_owned()))
}
