-- Spend limits per API key (issue 41): a key may spend at most
-- `spend_limit_micros` per UTC day, per UTC month or in total. What a key
-- has spent in the period is what its generations created in the period
-- hold or were charged: queued and running ones hold their price, succeeded
-- ones were charged it, and failed or canceled ones gave it back. The
-- submit checks it in the transaction that takes the hold, with the
-- account locked, so concurrent submits cannot pass the limit together.
ALTER TABLE api_keys ADD COLUMN spend_limit_micros BIGINT
    CHECK (spend_limit_micros IS NULL OR spend_limit_micros >= 0);
ALTER TABLE api_keys ADD COLUMN spend_limit_period TEXT
    CHECK (spend_limit_period IS NULL OR spend_limit_period IN ('day', 'month', 'total'));

-- A key's generations since a time: the spend of its period.
CREATE INDEX generations_key_created ON generations (api_key_id, created_at);
