-- vidgate_submit_generations: group commit of submits
-- (store/group_commit.rs). The submits a node has waiting, in one
-- statement and so in one transaction with one commit (one flush of the
-- write-ahead log) for all of them. The whole function lives in this file,
-- applied as `vidgate_submit_generation.sql` is (store/schema.rs); it was
-- created by migration 0016.
--
-- Each submit is decided exactly as alone, by vidgate_submit_generation,
-- and sees what the submits before it in the batch wrote: the replay of a
-- key an earlier item used, the count of active generations, the balance.
--
-- The items run in account order and, within an account, in arrival order
-- (their position in the arrays), whatever order the caller passes them in:
-- every batch, on every node, locks accounts in the same order, so two
-- batches wait for each other and never deadlock. Each account stays
-- locked until the batch commits. A refused item wrote nothing (at most it
-- forgot an idempotency key past the window, as a submit alone does). A
-- database error in any item fails the whole statement, and the caller
-- then submits the items one statement each, so that one bad item fails
-- alone.
--
-- One row per item: its position in the arrays (from 1) and what
-- vidgate_submit_generation answered for it.
CREATE OR REPLACE FUNCTION vidgate_submit_generations(
    new_ids TEXT[],
    new_account_ids TEXT[],
    new_api_key_ids TEXT[],
    new_models TEXT[],
    new_endpoints TEXT[],
    new_modes TEXT[],
    new_inputs TEXT[],
    new_prices BIGINT[],
    new_officials BIGINT[],
    new_webhook_urls TEXT[],
    new_idempotency_keys TEXT[],
    new_request_sha256s TEXT[],
    new_max_attempts BIGINT[],
    now_millis BIGINT,
    idempotency_window_millis BIGINT,
    work_channel TEXT,
    new_media_bindings TEXT[]
) RETURNS TABLE (item INTEGER, outcome TEXT, generation_id TEXT, balance BIGINT, concurrency_limit BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    next_item INTEGER;
BEGIN
    FOR next_item IN
        SELECT items.arrival FROM unnest(new_account_ids) WITH ORDINALITY AS items (account_id, arrival)
        ORDER BY items.account_id, items.arrival
    LOOP
        RETURN QUERY SELECT next_item, submitted.outcome, submitted.generation_id,
                submitted.balance, submitted.concurrency_limit
            FROM vidgate_submit_generation(
                new_ids[next_item], new_account_ids[next_item], new_api_key_ids[next_item],
                new_models[next_item], new_endpoints[next_item], new_modes[next_item],
                new_inputs[next_item], new_prices[next_item], new_officials[next_item],
                new_webhook_urls[next_item], new_idempotency_keys[next_item],
                new_request_sha256s[next_item], new_max_attempts[next_item], now_millis,
                idempotency_window_millis, work_channel, new_media_bindings[next_item]
            ) AS submitted;
    END LOOP;
END
$$;
