-- The same logical schema as migrations/sqlite: money is integer
-- micro-dollars, times are Unix milliseconds (UTC), JSON is text. Every
-- integer is BIGINT so that both stores decode the same Rust types.

CREATE TABLE accounts (
    id                TEXT PRIMARY KEY,
    name              TEXT NOT NULL,
    -- Spendable money. The ledger invariant, checked by tests:
    -- credited = balance + held + captured, and none of them is negative.
    balance_micros    BIGINT NOT NULL DEFAULT 0 CHECK (balance_micros >= 0),
    held_micros       BIGINT NOT NULL DEFAULT 0 CHECK (held_micros >= 0),
    captured_micros   BIGINT NOT NULL DEFAULT 0 CHECK (captured_micros >= 0),
    credited_micros   BIGINT NOT NULL DEFAULT 0 CHECK (credited_micros >= 0),
    rate_per_second   BIGINT NOT NULL DEFAULT 10,
    rate_burst        BIGINT NOT NULL DEFAULT 20,
    max_concurrent    BIGINT NOT NULL DEFAULT 20,
    webhook_secret    TEXT NOT NULL,
    created_at        BIGINT NOT NULL
);

CREATE TABLE api_keys (
    id            TEXT PRIMARY KEY,
    account_id    TEXT NOT NULL REFERENCES accounts (id),
    name          TEXT NOT NULL,
    -- The first characters of the secret, kept so people can tell keys apart.
    prefix        TEXT NOT NULL,
    secret_sha256 TEXT NOT NULL UNIQUE,
    created_at    BIGINT NOT NULL,
    last_used_at  BIGINT,
    revoked_at    BIGINT
);
CREATE INDEX api_keys_account ON api_keys (account_id);

-- The generations table is also the job queue: a queued row is a job.
CREATE TABLE generations (
    id                 TEXT PRIMARY KEY,
    account_id         TEXT NOT NULL REFERENCES accounts (id),
    api_key_id         TEXT,
    model              TEXT NOT NULL,
    endpoint           TEXT NOT NULL,
    mode               TEXT NOT NULL,
    status             TEXT NOT NULL,
    input              TEXT NOT NULL,
    output             TEXT,
    error              TEXT,
    price_micros       BIGINT NOT NULL,
    official_micros    BIGINT NOT NULL,
    source             TEXT NOT NULL,
    webhook_url        TEXT,
    idempotency_key    TEXT,
    request_sha256     TEXT,
    attempts           BIGINT NOT NULL DEFAULT 0,
    max_attempts       BIGINT NOT NULL,
    lease_owner        TEXT,
    lease_expires_at   BIGINT,
    created_at         BIGINT NOT NULL,
    started_at         BIGINT,
    completed_at       BIGINT
);
CREATE INDEX generations_queue ON generations (created_at, id) WHERE status = 'queued';
CREATE INDEX generations_leases ON generations (lease_expires_at) WHERE status = 'running';
CREATE INDEX generations_account_recent ON generations (account_id, created_at DESC, id DESC);
CREATE INDEX generations_account_active ON generations (account_id) WHERE status IN ('queued', 'running');
CREATE UNIQUE INDEX generations_idempotency ON generations (account_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Append-only: rows are inserted, never updated or deleted.
CREATE TABLE ledger_entries (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id     TEXT NOT NULL REFERENCES accounts (id),
    generation_id  TEXT,
    kind           TEXT NOT NULL CHECK (kind IN ('credit', 'hold', 'capture', 'release')),
    amount_micros  BIGINT NOT NULL CHECK (amount_micros > 0),
    created_at     BIGINT NOT NULL
);
CREATE INDEX ledger_entries_account ON ledger_entries (account_id, id);

CREATE TABLE model_states (
    model_id    TEXT PRIMARY KEY,
    paused      BOOLEAN NOT NULL,
    updated_at  BIGINT NOT NULL
);
