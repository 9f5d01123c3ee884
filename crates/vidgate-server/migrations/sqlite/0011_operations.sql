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

-- The ledger's kinds gain `debit`. SQLite cannot change a CHECK constraint
-- in place, so the table is rebuilt as its documented procedure for schema
-- changes says (https://www.sqlite.org/lang_altertable.html#otheralter):
-- create the new table, copy the rows, drop the old one, rename the new one
-- and recreate its indexes. No table, view or trigger refers to
-- ledger_entries, so nothing else needs redoing, and the migration's
-- transaction makes the steps one change.
CREATE TABLE new_ledger_entries (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id     TEXT NOT NULL REFERENCES accounts (id),
    generation_id  TEXT,
    kind           TEXT NOT NULL
        CHECK (kind IN ('credit', 'debit', 'hold', 'capture', 'release')),
    amount_micros  BIGINT NOT NULL CHECK (amount_micros > 0),
    created_at     BIGINT NOT NULL
);
INSERT INTO new_ledger_entries (id, account_id, generation_id, kind, amount_micros, created_at)
    SELECT id, account_id, generation_id, kind, amount_micros, created_at FROM ledger_entries;
DROP TABLE ledger_entries;
ALTER TABLE new_ledger_entries RENAME TO ledger_entries;
CREATE INDEX ledger_entries_account ON ledger_entries (account_id, id);
CREATE INDEX ledger_entries_account_time ON ledger_entries (account_id, created_at);
