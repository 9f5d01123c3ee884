-- GET /generations filtered by status or by model, newest first: with these
-- indexes a page costs the same whether the account has ten thousand or
-- millions of generations, matching or not, at any cursor depth (the cursor
-- is a seek on the trailing (created_at, id) columns).
CREATE INDEX generations_account_status_recent ON generations (account_id, status, created_at, id);
CREATE INDEX generations_account_model_recent ON generations (account_id, model, created_at, id);

-- A submit in one statement. The account row is locked first, so the
-- idempotent replay, the concurrency count and the balance are decided by
-- one submit of the account at a time across all nodes (SubmitRefusal in
-- store/generations.rs names the outcomes); every statement of
-- a PL/pgSQL function takes a new snapshot under READ COMMITTED, so the
-- count sees the generations of the submit that held the lock before. The
-- lock is held for one round trip instead of one per statement, which is
-- what bounds one account's submits per second. No generation is inserted
-- and no money moves unless the outcome is 'created'; the caller's
-- transaction (this statement's own when it runs alone) commits the
-- generation, the hold and its ledger row together.
CREATE FUNCTION vidgate_submit_generation(
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
    account_limit BIGINT;
    active BIGINT;
    earlier_id TEXT;
    earlier_digest TEXT;
BEGIN
    SELECT balance_micros, max_concurrent INTO account_balance, account_limit
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
    IF account_balance < new_price THEN
        RETURN QUERY SELECT 'insufficient_balance', NULL::TEXT, account_balance, account_limit;
        RETURN;
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
            WHERE id = new_account_id;
        INSERT INTO ledger_entries (account_id, generation_id, kind, amount_micros, created_at)
            VALUES (new_account_id, new_id, 'hold', new_price, now_millis);
    END IF;
    -- Delivered to listening workers only if the transaction commits.
    PERFORM pg_notify(work_channel, new_id);
    RETURN QUERY SELECT 'created', new_id, account_balance - new_price, account_limit;
END
$$;
