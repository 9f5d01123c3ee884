-- Presigned direct uploads: the object is PUT straight to the bucket under
-- `relative_path`, so nothing is known about it when the row is written. The
-- first request that names it probes the object and records it in `uploads`
-- under the same id; this row keeps saying whose the path is meanwhile.
CREATE TABLE direct_uploads (
    id             TEXT PRIMARY KEY,
    account_id     TEXT NOT NULL REFERENCES accounts (id),
    relative_path  TEXT NOT NULL UNIQUE,
    created_at     BIGINT NOT NULL
);
