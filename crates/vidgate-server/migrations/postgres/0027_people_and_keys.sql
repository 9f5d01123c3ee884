-- People and keys (issue 50). A key records the dashboard user who made it,
-- so that removing that person can revoke it with them. Keys the operator,
-- the first start or an earlier version made record nobody.
ALTER TABLE api_keys ADD COLUMN created_by_user_id TEXT;
-- The keys a person made, found when the person is removed.
CREATE INDEX api_keys_created_by ON api_keys (account_id, created_by_user_id);
-- Whether the account's members may create and revoke keys, change their
-- spend limits and read or rotate the webhook secret. Owners always may;
-- members may not unless an owner allows it.
ALTER TABLE accounts ADD COLUMN members_manage_keys_and_secrets BOOLEAN NOT NULL DEFAULT FALSE;
-- When a one-time password (an invitation's, or one the operator's `user
-- create` or the first start shows) stops signing in, in Unix ms; NULL for
-- a password the person chose. One-time passwords shown before this
-- migration expire 72 hours after their user was made, as new ones do.
ALTER TABLE users ADD COLUMN one_time_password_expires_at BIGINT;
UPDATE users SET one_time_password_expires_at = created_at + 259200000
    WHERE must_change_password;
