-- The operator's list across accounts (migration 0011) had an index on
-- (created_at, id) that every planner could also use for one account's
-- list, filtering the other accounts' rows out as it walked back in time.
-- With statistics saying one account holds most rows, PostgreSQL chose it
-- for that account's `GET /generations`: when the newest rows belonged to
-- others (the big account had stopped submitting), each page walked past
-- all of them (15,000 rows and 16-28 ms a page in the benchmark, against
-- 0.03 ms by `generations_account_recent`).
--
-- The index is now partial, on a condition true of every row that only the
-- operator's statement writes out (store/operator.rs, without an account
-- filter), so a planner may use it there and nowhere else.
DROP INDEX generations_recent;
CREATE INDEX generations_recent ON generations (created_at, id) WHERE created_at >= 0;
