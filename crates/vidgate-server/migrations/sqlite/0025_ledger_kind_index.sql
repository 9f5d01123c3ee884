-- The dashboard's ledger filtered by kind: a page of one kind reads this
-- index from the account's newest entry of that kind down, instead of
-- walking every entry of the account to find the few of a rare kind.
CREATE INDEX ledger_entries_account_kind ON ledger_entries (account_id, kind, id);
