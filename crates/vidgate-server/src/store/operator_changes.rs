//! The operator's changes (`operator_actions`), each made in one transaction
//! with its audit row: if the audit row cannot be written the change rolls
//! back with it, so no change is kept without its line in the audit log.
//! Each method composes the aggregate's `_in` statement with
//! `record_audit_in`; a change that finds nothing to do (no such key, a
//! taken email) rolls back and writes no audit row. Credit adjustments and
//! account deletion, which were audited in their own transactions from the
//! start, stay in `operator.rs`.

use std::time::Duration;

use super::accounts::{Account, AccountLimits, NewAccount, NewApiKey};
use super::low_balance::LowBalanceSetting;
use super::operator::NewAuditEntry;
use super::users::User;
use super::{Store, StoreError};
use crate::spend_limits::SpendLimit;

impl Store {
    /// Creates an account (with its initial credit) and its first API key.
    pub async fn create_account_audited(
        &self,
        account: &NewAccount,
        first_key: &NewApiKey,
        audit: &NewAuditEntry,
    ) -> Result<Account, StoreError> {
        let mut transaction = self.begin_write().await?;
        let created = Self::create_account_in(&mut transaction, account).await?;
        Self::insert_api_key_in(&mut transaction, first_key).await?;
        Self::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        Ok(created)
    }

    /// Sets an account's limits; `None` (and no audit row) when there is no
    /// such account.
    pub async fn set_account_limits_audited(
        &self,
        account_id: &str,
        limits: AccountLimits,
        audit: &NewAuditEntry,
    ) -> Result<Option<Account>, StoreError> {
        let mut transaction = self.begin_write().await?;
        let Some(account) =
            Self::set_account_limits_in(&mut transaction, account_id, limits).await?
        else {
            return Ok(None);
        };
        Self::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        // Remembered callers carry their account's limits.
        self.callers().forget_all();
        Ok(Some(account))
    }

    /// Sets an account's low-balance alert as `set_low_balance_alert`
    /// does, the event a new threshold may raise included; `None` (and no
    /// audit row) when there is no such account.
    pub async fn set_low_balance_alert_audited(
        &self,
        account_id: &str,
        setting: &LowBalanceSetting,
        audit: &NewAuditEntry,
    ) -> Result<Option<Account>, StoreError> {
        let mut transaction = self.begin_write().await?;
        let Some(account) =
            Self::set_low_balance_alert_in(&mut transaction, account_id, setting).await?
        else {
            return Ok(None);
        };
        Self::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        Ok(Some(account))
    }

    /// Replaces an account's webhook secret as `rotate_webhook_secret`
    /// does; `None` (and no audit row) when there is no such account.
    pub async fn rotate_webhook_secret_audited(
        &self,
        account_id: &str,
        new_secret: &str,
        previous_valid_for: Duration,
        audit: &NewAuditEntry,
    ) -> Result<Option<Account>, StoreError> {
        let mut transaction = self.begin_write().await?;
        let Some(account) = Self::rotate_webhook_secret_in(
            &mut transaction,
            account_id,
            new_secret,
            previous_valid_for,
        )
        .await?
        else {
            return Ok(None);
        };
        Self::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        Ok(Some(account))
    }

    pub async fn create_api_key_audited(
        &self,
        key: &NewApiKey,
        audit: &NewAuditEntry,
    ) -> Result<(), StoreError> {
        let mut transaction = self.begin_write().await?;
        Self::insert_api_key_in(&mut transaction, key).await?;
        Self::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        Ok(())
    }

    /// Revokes a key; false (and no audit row) when no unrevoked key has
    /// that id. Takes effect at once in this process and within
    /// `CALLER_CACHE_TTL` in others.
    pub async fn revoke_api_key_audited(
        &self,
        key_id: &str,
        audit: &NewAuditEntry,
    ) -> Result<bool, StoreError> {
        let mut transaction = self.begin_write().await?;
        if !Self::revoke_api_key_in(&mut transaction, key_id).await? {
            return Ok(false);
        }
        Self::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        self.callers().forget_all();
        Ok(true)
    }

    /// Sets or removes a key's spend limit; false (and no audit row) when
    /// no such key exists.
    pub async fn set_spend_limit_audited(
        &self,
        key_id: &str,
        limit: Option<SpendLimit>,
        audit: &NewAuditEntry,
    ) -> Result<bool, StoreError> {
        let mut transaction = self.begin_write().await?;
        if !Self::set_spend_limit_in(&mut transaction, key_id, limit).await? {
            return Ok(false);
        }
        Self::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        Ok(true)
    }

    pub async fn set_model_paused_audited(
        &self,
        model_id: &str,
        paused: bool,
        audit: &NewAuditEntry,
    ) -> Result<(), StoreError> {
        let mut transaction = self.begin_write().await?;
        Self::set_model_paused_in(&mut transaction, model_id, paused).await?;
        Self::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        Ok(())
    }

    /// Creates a dashboard user; `None` (and no audit row) when the email
    /// is taken.
    pub async fn create_user_audited(
        &self,
        user: &User,
        audit: &NewAuditEntry,
    ) -> Result<Option<User>, StoreError> {
        let mut transaction = self.begin_write().await?;
        if !Self::insert_user_in(&mut transaction, user).await? {
            return Ok(None);
        }
        Self::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        Ok(Some(user.clone()))
    }

    /// Removes a user and its sessions; false (and no audit row) when there
    /// is no such user.
    pub async fn remove_user_audited(
        &self,
        user_id: &str,
        audit: &NewAuditEntry,
    ) -> Result<bool, StoreError> {
        let mut transaction = self.begin_write().await?;
        if !Self::remove_user_in(&mut transaction, user_id).await? {
            return Ok(false);
        }
        Self::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        Ok(true)
    }

    /// Revokes every live session of a user and answers how many were
    /// live; the audit row is made from that count, since it is known only
    /// inside the transaction.
    pub async fn revoke_user_sessions_audited(
        &self,
        user_id: &str,
        audit: impl FnOnce(u64) -> NewAuditEntry,
    ) -> Result<u64, StoreError> {
        let mut transaction = self.begin_write().await?;
        let revoked = Self::revoke_user_sessions_in(&mut transaction, user_id).await?;
        Self::record_audit_in(&mut transaction, &audit(revoked)).await?;
        transaction.commit().await?;
        Ok(revoked)
    }
}
