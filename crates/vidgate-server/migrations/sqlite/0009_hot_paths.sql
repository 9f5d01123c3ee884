-- GET /generations filtered by status or by model, newest first: with these
-- indexes a page costs the same whether the account has ten thousand or
-- millions of generations, matching or not, at any cursor depth (the cursor
-- is a seek on the trailing (created_at, id) columns).
CREATE INDEX generations_account_status_recent ON generations (account_id, status, created_at, id);
CREATE INDEX generations_account_model_recent ON generations (account_id, model, created_at, id);
