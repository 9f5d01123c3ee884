-- The webhook outbox, fair and bounded (issue 50, item 4).
--
-- At most one `account.balance_low` delivery per account waits at a time:
-- a crossing that finds one pending raises the alert (the dashboard warns)
-- and writes nothing more, since the pending event already tells the
-- receiver the account is low. Setting and removing the threshold in a
-- loop wrote one delivery per turn before. The check runs under the
-- account's row lock, which every write of the alert holds (the submit
-- function locks the row, every other path updates it first), so two
-- crossings cannot both find none. It is a check and not a unique index:
-- during a rolling upgrade a node of the previous version still inserts
-- without it, and a unique index would fail the movement of money that
-- carries that insert. This index serves the check.
CREATE INDEX webhook_deliveries_pending_alert ON webhook_deliveries (account_id)
    WHERE status = 'pending' AND event_type = 'account.balance_low';

-- Accounts take turns at the senders, as they do at the workers (migration
-- 0018): each claim numbers itself (`claim_sequence`, one more than the
-- highest so far), and the account with a due delivery whose last claim has
-- the lowest number goes next, so one account's thousands of due
-- deliveries hold another account's back by one claim per account waiting
-- instead of by all of them. The indexes serve the claim's lookups: each
-- account's due deliveries oldest first, each account's last claim, and
-- the highest number given.
ALTER TABLE webhook_deliveries ADD COLUMN claim_sequence BIGINT;
CREATE INDEX webhook_deliveries_due_by_account
    ON webhook_deliveries (account_id, next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_account_turns ON webhook_deliveries (account_id, claim_sequence)
    WHERE claim_sequence IS NOT NULL;
CREATE INDEX webhook_deliveries_claim_sequence ON webhook_deliveries (claim_sequence)
    WHERE claim_sequence IS NOT NULL;
