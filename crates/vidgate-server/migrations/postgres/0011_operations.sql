-- Retention (issue 19): finished clips and uploads are deleted from storage
-- once they are older than `--retain-days`; the records stay.
--
-- A generation whose clip expired keeps its row; `output_expired_at` says
-- when the sweep rewrote its output to say so, and keeps the sweep from
-- taking it twice.
ALTER TABLE generations ADD COLUMN output_expired_at BIGINT;
CREATE INDEX generations_retention ON generations (completed_at)
    WHERE status = 'succeeded' AND output_expired_at IS NULL;
CREATE INDEX uploads_created ON uploads (created_at);
-- The operator's list of generations across accounts, newest first.
CREATE INDEX generations_recent ON generations (created_at, id);
CREATE INDEX direct_uploads_created ON direct_uploads (created_at);

-- Every stored file that expired (or belonged to a deleted account): written
-- in the transaction that retires its record, before the object is deleted,
-- so a node that dies in between leaves a row another node finishes. The row
-- stays after the deletion (`deleted_at`) so that the file's URL answers
-- 410 Gone instead of 404. `claimed_until` is the short lease of the node
-- deleting the object, so several nodes never delete the same one at once.
CREATE TABLE expired_files (
    relative_path  TEXT PRIMARY KEY,
    account_id     TEXT NOT NULL,
    expired_at     BIGINT NOT NULL,
    claimed_until  BIGINT,
    deleted_at     BIGINT
);
CREATE INDEX expired_files_pending ON expired_files (expired_at) WHERE deleted_at IS NULL;

-- A deleted account stays as a tombstone with its money figures, so the
-- ledger still adds up; its media, keys, users and personal data are gone.
ALTER TABLE accounts ADD COLUMN deleted_at BIGINT;

-- Debits (issue 19): an operator's adjustment may take money back, once per
-- Idempotency-Key as a credit is given, and never below a zero balance.
ALTER TABLE credit_adjustments ADD COLUMN kind TEXT NOT NULL DEFAULT 'credit'
    CHECK (kind IN ('credit', 'debit'));
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_kind_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_kind_check
    CHECK (kind IN ('credit', 'debit', 'hold', 'capture', 'release'));
