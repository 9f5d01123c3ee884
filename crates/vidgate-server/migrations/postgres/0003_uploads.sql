-- Files customers uploaded for use in requests. The file itself lives in
-- storage under `relative_path`; the row says whose it is and what it is.
CREATE TABLE uploads (
    id             TEXT PRIMARY KEY,
    account_id     TEXT NOT NULL REFERENCES accounts (id),
    relative_path  TEXT NOT NULL UNIQUE,
    content_type   TEXT NOT NULL,
    size_bytes     BIGINT NOT NULL,
    media          TEXT NOT NULL,
    created_at     BIGINT NOT NULL
);
CREATE INDEX uploads_account ON uploads (account_id, created_at);
