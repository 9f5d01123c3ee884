-- People and passwords (issue 44): a user of an account is an `owner`, who
-- may invite, change the roles of and remove the account's people, or a
-- `member`, who may not. Every user before this migration could do all of
-- it, so they become owners. The application keeps an account with users
-- from having no owner, inside the transaction of each change.
ALTER TABLE users ADD COLUMN role TEXT NOT NULL DEFAULT 'owner'
    CHECK (role IN ('owner', 'member'));
-- Set for a user whose password someone else saw (a generated one-time
-- password: the development user, the operator's `user create` without a
-- password, an invited person): the dashboard sends them to the password
-- page until they choose one of their own.
ALTER TABLE users ADD COLUMN must_change_password BOOLEAN NOT NULL DEFAULT FALSE;
