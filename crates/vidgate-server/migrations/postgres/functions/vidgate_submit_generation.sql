-- vidgate_submit_generation: one submit, decided and written in the server
-- (store/submit.rs). The whole function lives in this file: to change a
-- rule of the submit, change it here (and its revision in
-- store/schema.rs). The store applies this file after the numbered
-- migrations, and again whenever its text changes, under one lock, so
-- nodes starting together apply it once (store/schema.rs,
-- `apply_postgres_functions`). Its history is in migrations 0009, 0021,
-- 0023 and 0028, which created and replaced it before this file existed.
--
-- The account row is locked first; then, in order: the idempotent replay
-- (a key older than the window is forgotten first), the concurrency cap,
-- the balance (a debt stops every submit), the key's spend limit, the
-- insert of the queued generation and its media binding, the hold with
-- its ledger row, the low-balance alert the hold may raise, and the
-- announcement of the work. A refusal writes nothing (at most it forgets
-- an idempotency key past the window, as any later submit would). It
-- answers one row: the outcome, the generation it names, and the balance
-- and limit a refusal reports.
CREATE OR REPLACE FUNCTION vidgate_submit_generation(
    new_id TEXT,
    new_account_id TEXT,
    new_api_key_id TEXT,
    new_model TEXT,
    new_endpoint TEXT,
    new_mode TEXT,
    new_input TEXT,
    new_price BIGINT,
    new_official BIGINT,
    new_webhook_url TEXT,
    new_idempotency_key TEXT,
    new_request_sha256 TEXT,
    new_max_attempts BIGINT,
    now_millis BIGINT,
    idempotency_window_millis BIGINT,
    work_channel TEXT,
    new_media_binding TEXT
) RETURNS TABLE (outcome TEXT, generation_id TEXT, balance BIGINT, concurrency_limit BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    account_balance BIGINT;
    account_debt BIGINT;
    account_limit BIGINT;
    active BIGINT;
    earlier_id TEXT;
    earlier_digest TEXT;
    key_limit BIGINT;
    key_period TEXT;
    period_start BIGINT;
    key_spent BIGINT;
    shown_after BIGINT;
    alert_threshold BIGINT;
    alert_raised BOOLEAN;
    alert_url TEXT;
BEGIN
    SELECT balance_micros, debt_micros, max_concurrent
        INTO account_balance, account_debt, account_limit
        FROM accounts WHERE id = new_account_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'account_not_found', NULL::TEXT, NULL::BIGINT, NULL::BIGINT;
        RETURN;
    END IF;
    IF new_idempotency_key IS NOT NULL THEN
        -- A key older than the window is forgotten so that it can be used again.
        UPDATE generations SET idempotency_key = NULL
            WHERE account_id = new_account_id AND idempotency_key = new_idempotency_key
              AND created_at < now_millis - idempotency_window_millis;
        SELECT id, request_sha256 INTO earlier_id, earlier_digest
            FROM generations
            WHERE account_id = new_account_id AND idempotency_key = new_idempotency_key;
        IF FOUND THEN
            IF earlier_digest IS DISTINCT FROM new_request_sha256 THEN
                RETURN QUERY SELECT 'idempotency_mismatch', earlier_id, NULL::BIGINT, NULL::BIGINT;
            ELSE
                RETURN QUERY SELECT 'replayed', earlier_id, NULL::BIGINT, NULL::BIGINT;
            END IF;
            RETURN;
        END IF;
    END IF;
    SELECT COUNT(*) INTO active FROM generations
        WHERE account_id = new_account_id AND status IN ('queued', 'running');
    IF active >= account_limit THEN
        RETURN QUERY SELECT 'concurrency_limit', NULL::TEXT, account_balance, account_limit;
        RETURN;
    END IF;
    -- A debt stops every submit, a free one too, and the refusal answers
    -- the balance the customer sees, negative while the debt is owed.
    IF account_debt > 0 OR account_balance < new_price THEN
        RETURN QUERY SELECT 'insufficient_balance', NULL::TEXT, account_balance - account_debt,
            account_limit;
        RETURN;
    END IF;
    -- The key's spend limit (migration 0021), decided under the account's
    -- lock like the balance: the key belongs to the account, so its
    -- submits take turns on every node. A refusal answers what the key
    -- spent in the period (as `balance`) and its limit (as
    -- `concurrency_limit`); the caller reads the period from the key.
    SELECT spend_limit_micros, spend_limit_period INTO key_limit, key_period
        FROM api_keys WHERE id = new_api_key_id;
    IF key_limit IS NOT NULL THEN
        period_start := CASE key_period
            WHEN 'day' THEN (now_millis / 86400000) * 86400000
            WHEN 'month' THEN (EXTRACT(EPOCH FROM date_trunc('month',
                to_timestamp(now_millis / 1000.0) AT TIME ZONE 'UTC')) * 1000)::BIGINT
            ELSE 0
        END;
        SELECT COALESCE(SUM(price_micros), 0) INTO key_spent FROM generations
            WHERE api_key_id = new_api_key_id AND created_at >= period_start
              AND status IN ('queued', 'running', 'succeeded');
        IF key_spent + new_price > key_limit THEN
            RETURN QUERY SELECT 'spend_limit', NULL::TEXT, key_spent, key_limit;
            RETURN;
        END IF;
    END IF;
    INSERT INTO generations (id, account_id, api_key_id, model, endpoint, mode, status, input,
        price_micros, official_micros, source, webhook_url, idempotency_key, request_sha256,
        max_attempts, created_at)
    VALUES (new_id, new_account_id, new_api_key_id, new_model, new_endpoint, new_mode, 'queued',
        new_input, new_price, new_official, 'api', new_webhook_url, new_idempotency_key,
        new_request_sha256, new_max_attempts, now_millis);
    -- The request media the generation is bound to (migration 0006).
    IF new_media_binding IS NOT NULL THEN
        INSERT INTO generation_media (generation_id, binding) VALUES (new_id, new_media_binding);
    END IF;
    -- The hold, as every other movement of money: the account's totals and
    -- the ledger row together (a free generation moves nothing).
    IF new_price > 0 THEN
        UPDATE accounts SET balance_micros = balance_micros - new_price,
            held_micros = held_micros + new_price
            WHERE id = new_account_id
            RETURNING balance_micros - debt_micros, low_balance_threshold_micros,
                low_balance_alerted, low_balance_webhook_url
            INTO shown_after, alert_threshold, alert_raised, alert_url;
        INSERT INTO ledger_entries (account_id, generation_id, kind, amount_micros, created_at)
            VALUES (new_account_id, new_id, 'hold', new_price, now_millis);
        -- The hold that takes the balance below the account's low-balance
        -- threshold raises the alert and writes its event's delivery, as
        -- `Store::settle_low_balance_alert_in` does for every other
        -- movement (store/ledger.rs): a hold only lowers the balance, so it
        -- never re-arms the alert. The delivery's id has the form of
        -- `ids::new_webhook_message_id`, from a random UUID.
        IF alert_threshold IS NOT NULL AND NOT alert_raised AND shown_after < alert_threshold THEN
            UPDATE accounts SET low_balance_alerted = TRUE WHERE id = new_account_id;
            -- At most one alert waits per account (migration 0028).
            IF alert_url IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM webhook_deliveries
                WHERE account_id = new_account_id AND status = 'pending'
                  AND event_type = 'account.balance_low'
            ) THEN
                INSERT INTO webhook_deliveries (id, generation_id, account_id, event_type, url,
                    status, next_attempt_at, created_at, payload)
                VALUES ('msg_' || replace(gen_random_uuid()::TEXT, '-', ''), NULL,
                    new_account_id, 'account.balance_low', alert_url, 'pending', now_millis,
                    now_millis,
                    json_build_object('account_id', new_account_id,
                        'balance_micros', shown_after,
                        'threshold_micros', alert_threshold)::TEXT);
            END IF;
        END IF;
    END IF;
    -- Delivered to listening workers only if the transaction commits.
    PERFORM pg_notify(work_channel, new_id);
    RETURN QUERY SELECT 'created', new_id, account_balance - new_price, account_limit;
END
$$;
