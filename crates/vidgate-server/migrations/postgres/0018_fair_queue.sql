-- The fair claim (store/queue.rs, `claim_statement`) lets accounts take
-- turns. Each claim numbers itself (`claim_sequence`, one more than the
-- highest so far), and the account whose last claim has the lowest number
-- goes next. The indexes serve the claim's lookups: the accounts with
-- queued jobs and each one's queued jobs oldest first, with the model the
-- claim filters on (the queue's index on (created_at, id) has neither by
-- account), each account's last claim, and the highest number given.
ALTER TABLE generations ADD COLUMN claim_sequence BIGINT;
CREATE INDEX generations_queue_by_account ON generations (account_id, created_at, id, model)
    WHERE status = 'queued';
CREATE INDEX generations_account_turns ON generations (account_id, claim_sequence)
    WHERE claim_sequence IS NOT NULL;
CREATE INDEX generations_claim_sequence ON generations (claim_sequence)
    WHERE claim_sequence IS NOT NULL;
