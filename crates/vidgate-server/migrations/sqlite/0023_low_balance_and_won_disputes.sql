-- Low balance is visible (issue 41): an account may set a threshold below
-- which the dashboard warns, and a URL to which the webhook event
-- `account.balance_low` is sent once each time the balance (what the
-- customer sees, `balance - debt`) falls below the threshold.
-- `low_balance_alerted` says the balance is below the threshold now and its
-- event was written: it is set, with the event's delivery row, in the
-- transaction of the ledger change that crosses the threshold downwards,
-- and cleared by the change that takes the balance back to the threshold or
-- above, which re-arms the alert. A threshold set above the balance counts
-- as a crossing too, so the receiver hears at once that the account is low.
ALTER TABLE accounts ADD COLUMN low_balance_threshold_micros BIGINT
    CHECK (low_balance_threshold_micros IS NULL OR low_balance_threshold_micros >= 0);
ALTER TABLE accounts ADD COLUMN low_balance_webhook_url TEXT;
ALTER TABLE accounts ADD COLUMN low_balance_alerted BOOLEAN NOT NULL DEFAULT FALSE;

-- The webhook outbox carries events about an account as well as events
-- about a generation: such a delivery has no generation, and its body's
-- `data` is fixed when the event happens (`payload`, JSON), so every
-- attempt sends the same bytes. SQLite cannot drop a NOT NULL in place, so
-- the outbox and its attempt log (which refers to it) are rebuilt as its
-- documented procedure for schema changes says
-- (https://www.sqlite.org/lang_altertable.html#otheralter): the new tables
-- are made and filled, the old ones dropped (the attempt log first, so no
-- reference to the old outbox remains), and the new ones renamed, which
-- also renames the new attempt log's reference; then the indexes of
-- migrations 0002, 0004 and 0012 are made again. The migration's
-- transaction makes the steps one change.
CREATE TABLE new_webhook_deliveries (
    id               TEXT PRIMARY KEY,
    generation_id    TEXT REFERENCES generations (id),
    account_id       TEXT NOT NULL REFERENCES accounts (id),
    event_type       TEXT NOT NULL,
    url              TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  BIGINT,
    lease_owner      TEXT,
    created_at       BIGINT NOT NULL,
    completed_at     BIGINT,
    manual_retries   INTEGER NOT NULL DEFAULT 0,
    payload          TEXT,
    CHECK ((generation_id IS NULL) <> (payload IS NULL))
);
INSERT INTO new_webhook_deliveries (id, generation_id, account_id, event_type, url, status,
        attempts, next_attempt_at, lease_owner, created_at, completed_at, manual_retries)
    SELECT id, generation_id, account_id, event_type, url, status, attempts, next_attempt_at,
        lease_owner, created_at, completed_at, manual_retries
    FROM webhook_deliveries;
CREATE TABLE new_webhook_attempts (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id      TEXT NOT NULL REFERENCES new_webhook_deliveries (id),
    attempt          INTEGER NOT NULL,
    started_at       BIGINT NOT NULL,
    duration_ms      BIGINT NOT NULL,
    status_code      INTEGER,
    error            TEXT,
    response_body    TEXT,
    next_attempt_at  BIGINT
);
INSERT INTO new_webhook_attempts (id, delivery_id, attempt, started_at, duration_ms,
        status_code, error, response_body, next_attempt_at)
    SELECT id, delivery_id, attempt, started_at, duration_ms, status_code, error,
        response_body, next_attempt_at
    FROM webhook_attempts;
DROP TABLE webhook_attempts;
DROP TABLE webhook_deliveries;
ALTER TABLE new_webhook_deliveries RENAME TO webhook_deliveries;
ALTER TABLE new_webhook_attempts RENAME TO webhook_attempts;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, id)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_generation ON webhook_deliveries (generation_id, created_at);
CREATE INDEX webhook_deliveries_account ON webhook_deliveries (account_id, created_at);
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (lease_owner, account_id)
    WHERE status = 'pending' AND lease_owner IS NOT NULL;
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, id);

-- Each dispute of a credited Stripe payment: what its creation took back,
-- and when Stripe reported it won (`charge.dispute.closed` with status
-- `won`), which gives that much back once. Events arrive in any order: a
-- dispute reported won before its creation arrived is recorded as won with
-- nothing taken, and its creation then takes nothing.
CREATE TABLE stripe_disputes (
    dispute_id           TEXT PRIMARY KEY,
    checkout_session_id  TEXT NOT NULL REFERENCES stripe_payments (checkout_session_id),
    taken_micros         BIGINT NOT NULL CHECK (taken_micros >= 0),
    won_at               BIGINT
);
