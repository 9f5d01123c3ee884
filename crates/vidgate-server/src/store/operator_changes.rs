//! The operator's changes (`operator_actions`), each made in one transaction
//! with its audit row: if the audit row cannot be written the change rolls
//! back with it, so no change is kept without its line in the audit log.
//! Each method composes the aggregate's `_in` statement with
//! `record_audit_in`; a change that finds nothing to do (no such key, a
//! taken email) rolls back and writes no audit row. Credit adjustments and
//! account deletion, which were audited in their own transactions from the
//! start, stay in `operator.rs`.
//!
//! The changes to an account's keys and webhook secret are also made by
//! people in the dashboard (`KeyChanger::Person`): for them the same
//! transaction checks that the person may manage keys and secrets and that
//! the key is their account's.

use std::time::Duration;

use super::accounts::{Account, AccountLimits, NewAccount, NewApiKey};
use super::database::WriteTransaction;
use super::low_balance::LowBalanceSetting;
use super::operator::NewAuditEntry;
use super::operator::Operator;
use super::users::{PeopleActor, User};
use super::{Store, StoreError};
use crate::spend_limits::SpendLimit;

/// Who changes an account's keys or webhook secret.
#[derive(Debug, Clone, Copy)]
pub enum KeyChanger<'a> {
    /// The operator (the CLI or the operator API), any account's; or an
    /// account's own API key, which holds the account's full rights: no
    /// person's permission to check.
    Trusted,
    /// A person in the dashboard: only their own account's, and only while
    /// they are an owner or the account's owners let members manage keys
    /// and secrets (`may_manage_keys_and_secrets_in`).
    Person(PeopleActor<'a>),
}

/// Why a change to keys or a webhook secret was not made. Nothing was
/// changed and no audit row was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyChangeRefusal {
    /// The person may not manage the account's keys and secrets.
    NotAllowed,
    /// No such key (or account), or, for a person, another account's.
    NotFound,
}

impl Store {
    /// What every change by `changer` starts with: a person's permission,
    /// decided with the account locked, and, when the change is to a key,
    /// that the key exists and (for a person) is of their account.
    async fn key_change_allowed_in(
        transaction: &mut WriteTransaction,
        changer: KeyChanger<'_>,
        key_id: Option<&str>,
    ) -> Result<Result<(), KeyChangeRefusal>, StoreError> {
        if let KeyChanger::Person(actor) = changer
            && !Self::may_manage_keys_and_secrets_in(&mut *transaction, actor).await?
        {
            return Ok(Err(KeyChangeRefusal::NotAllowed));
        }
        let Some(key_id) = key_id else {
            return Ok(Ok(()));
        };
        let key_account: Option<String> = fetch_in_transaction!(
            transaction,
            fetch_optional,
            sqlx::query_scalar("SELECT account_id FROM api_keys WHERE id = $1").bind(key_id)
        )?;
        Ok(match (changer, key_account) {
            (_, None) => Err(KeyChangeRefusal::NotFound),
            (KeyChanger::Person(actor), Some(account_id)) if account_id != actor.account_id => {
                Err(KeyChangeRefusal::NotFound)
            }
            _ => Ok(()),
        })
    }
}

impl Operator<'_> {
    /// Creates an account (with its initial credit) and its first API key.
    pub async fn create_account_audited(
        self,
        account: &NewAccount,
        first_key: &NewApiKey,
        audit: &NewAuditEntry,
    ) -> Result<Account, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        let created = Store::create_account_in(&mut transaction, account).await?;
        Store::insert_api_key_in(&mut transaction, first_key).await?;
        Store::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        Ok(created)
    }

    /// Sets an account's limits; `None` (and no audit row) when there is no
    /// such account.
    pub async fn set_account_limits_audited(
        self,
        account_id: &str,
        limits: AccountLimits,
        audit: &NewAuditEntry,
    ) -> Result<Option<Account>, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        let Some(account) =
            Store::set_account_limits_in(&mut transaction, account_id, limits).await?
        else {
            return Ok(None);
        };
        Store::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        // Remembered callers carry their account's limits.
        self.store.callers().forget_all();
        Ok(Some(account))
    }

    /// Sets an account's low-balance alert as `set_low_balance_alert`
    /// does, the event a new threshold may raise included; `None` (and no
    /// audit row) when there is no such account.
    pub async fn set_low_balance_alert_audited(
        self,
        account_id: &str,
        setting: &LowBalanceSetting,
        audit: &NewAuditEntry,
    ) -> Result<Option<Account>, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        let Some(account) =
            Store::set_low_balance_alert_in(&mut transaction, account_id, setting).await?
        else {
            return Ok(None);
        };
        Store::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        Ok(Some(account))
    }

    /// Replaces an account's webhook secret as `rotate_webhook_secret`
    /// does; refused (and no audit row) when there is no such account or
    /// the changer may not.
    pub async fn rotate_webhook_secret_audited(
        self,
        changer: KeyChanger<'_>,
        account_id: &str,
        new_secret: &str,
        previous_valid_for: Duration,
        audit: &NewAuditEntry,
    ) -> Result<Result<Account, KeyChangeRefusal>, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        if let Err(refused) = Store::key_change_allowed_in(&mut transaction, changer, None).await? {
            return Ok(Err(refused));
        }
        let Some(account) = Store::rotate_webhook_secret_in(
            &mut transaction,
            account_id,
            new_secret,
            previous_valid_for,
        )
        .await?
        else {
            return Ok(Err(KeyChangeRefusal::NotFound));
        };
        Store::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        Ok(Ok(account))
    }

    /// Creates a key of `key.account_id`; a person's is their account's.
    pub async fn create_api_key_audited(
        self,
        changer: KeyChanger<'_>,
        key: &NewApiKey,
        audit: &NewAuditEntry,
    ) -> Result<Result<(), KeyChangeRefusal>, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        if let Err(refused) = Store::key_change_allowed_in(&mut transaction, changer, None).await? {
            return Ok(Err(refused));
        }
        Store::insert_api_key_in(&mut transaction, key).await?;
        Store::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        Ok(Ok(()))
    }

    /// Revokes a key; refused (and no audit row) when no unrevoked key has
    /// that id or the changer may not. Takes effect at once in this process
    /// and within `CALLER_CACHE_TTL` in others.
    pub async fn revoke_api_key_audited(
        self,
        changer: KeyChanger<'_>,
        key_id: &str,
        audit: &NewAuditEntry,
    ) -> Result<Result<(), KeyChangeRefusal>, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        if let Err(refused) =
            Store::key_change_allowed_in(&mut transaction, changer, Some(key_id)).await?
        {
            return Ok(Err(refused));
        }
        if !Store::revoke_api_key_in(&mut transaction, key_id).await? {
            return Ok(Err(KeyChangeRefusal::NotFound));
        }
        Store::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        self.store.callers().forget_all();
        Ok(Ok(()))
    }

    /// Sets or removes a key's spend limit; refused (and no audit row)
    /// when no such key exists or the changer may not.
    pub async fn set_spend_limit_audited(
        self,
        changer: KeyChanger<'_>,
        key_id: &str,
        limit: Option<SpendLimit>,
        audit: &NewAuditEntry,
    ) -> Result<Result<(), KeyChangeRefusal>, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        if let Err(refused) =
            Store::key_change_allowed_in(&mut transaction, changer, Some(key_id)).await?
        {
            return Ok(Err(refused));
        }
        if !Store::set_spend_limit_in(&mut transaction, key_id, limit).await? {
            return Ok(Err(KeyChangeRefusal::NotFound));
        }
        Store::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        Ok(Ok(()))
    }

    pub async fn set_model_paused_audited(
        self,
        model_id: &str,
        paused: bool,
        audit: &NewAuditEntry,
    ) -> Result<(), StoreError> {
        let mut transaction = self.store.begin_write().await?;
        Store::set_model_paused_in(&mut transaction, model_id, paused).await?;
        Store::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        Ok(())
    }

    /// Creates a dashboard user; `None` (and no audit row) when the email
    /// is taken.
    pub async fn create_user_audited(
        self,
        user: &User,
        audit: &NewAuditEntry,
    ) -> Result<Option<User>, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        if !Store::insert_user_in(&mut transaction, user).await? {
            return Ok(None);
        }
        Store::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        Ok(Some(user.clone()))
    }

    /// Removes a user and its sessions, and revokes the keys the user
    /// made; `None` (and no audit row) when there is no such user. The
    /// audit row is made from the ids of the keys revoked.
    pub async fn remove_user_audited(
        self,
        user: &User,
        audit: impl FnOnce(&[String]) -> NewAuditEntry,
    ) -> Result<Option<Vec<String>>, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        if !Store::remove_user_in(&mut transaction, &user.id).await? {
            return Ok(None);
        }
        let revoked =
            Store::revoke_keys_made_by_in(&mut transaction, &user.account_id, &user.id).await?;
        Store::record_audit_in(&mut transaction, &audit(&revoked)).await?;
        transaction.commit().await?;
        if !revoked.is_empty() {
            self.store.callers().forget_all();
        }
        Ok(Some(revoked))
    }

    /// Revokes every live session of a user and answers how many were
    /// live; the audit row is made from that count, since it is known only
    /// inside the transaction.
    pub async fn revoke_user_sessions_audited(
        self,
        user_id: &str,
        audit: impl FnOnce(u64) -> NewAuditEntry,
    ) -> Result<u64, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        let revoked = Store::revoke_user_sessions_in(&mut transaction, user_id).await?;
        Store::record_audit_in(&mut transaction, &audit(revoked)).await?;
        transaction.commit().await?;
        Ok(revoked)
    }
}
