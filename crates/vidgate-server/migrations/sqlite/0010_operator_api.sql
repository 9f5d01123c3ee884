-- The operator API (/admin/v1).
--
-- A credit adjustment is keyed by the Idempotency-Key its caller sent (a
-- payment system's webhook, retried), so one top-up is applied exactly once;
-- its ledger entry and audit row are written in the same transaction.
CREATE TABLE credit_adjustments (
    idempotency_key  TEXT PRIMARY KEY,
    account_id       TEXT NOT NULL REFERENCES accounts (id),
    amount_micros    BIGINT NOT NULL CHECK (amount_micros > 0),
    reason           TEXT NOT NULL,
    actor            TEXT NOT NULL,
    created_at       BIGINT NOT NULL
);
CREATE INDEX credit_adjustments_account ON credit_adjustments (account_id, created_at);

-- Every change made through the operator API: who (the operator's name),
-- what (an action and its target, with details as JSON), when.
CREATE TABLE audit_log (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    actor       TEXT NOT NULL,
    action      TEXT NOT NULL,
    target      TEXT NOT NULL,
    detail      TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
