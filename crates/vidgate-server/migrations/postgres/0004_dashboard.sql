-- The account dashboard: people who sign in, and their sessions.

-- A user signs in to the dashboard of one account. Emails are stored
-- lowercased by the application, so uniqueness ignores case.
CREATE TABLE users (
    id             TEXT PRIMARY KEY,
    account_id     TEXT NOT NULL REFERENCES accounts (id),
    email          TEXT NOT NULL UNIQUE,
    -- An Argon2id hash in PHC string form; the password itself is never kept.
    password_hash  TEXT NOT NULL,
    created_at     BIGINT NOT NULL
);
CREATE INDEX users_account ON users (account_id);

-- A signed-in browser. Only the SHA-256 of the cookie's token is kept, so a
-- leaked table does not let anyone sign in. A session ends when it has been
-- idle too long, at `expires_at`, or when it is revoked (sign-out).
CREATE TABLE sessions (
    id             TEXT PRIMARY KEY,
    token_sha256   TEXT NOT NULL UNIQUE,
    user_id        TEXT NOT NULL REFERENCES users (id),
    account_id     TEXT NOT NULL REFERENCES accounts (id),
    -- Sent back by every form and by the dashboard's own API calls.
    csrf_token     TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    last_seen_at   BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    revoked_at     BIGINT
);
CREATE INDEX sessions_user ON sessions (user_id);

-- The dashboard lists an account's recent deliveries and its spend per day.
CREATE INDEX webhook_deliveries_account ON webhook_deliveries (account_id, created_at);
CREATE INDEX ledger_entries_account_time ON ledger_entries (account_id, created_at);
