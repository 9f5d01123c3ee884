-- PostgreSQL's functions, each kept whole in one file of `functions/`
-- (issue 52): the store applies them after the numbered migrations, and
-- again whenever a file's text changes, instead of a migration copying a
-- function's whole body to change one line of it. This table records, for
-- each function, the revision and the SHA-256 of the text last applied
-- (store/schema.rs, `apply_postgres_functions`): a file whose revision is
-- higher, or whose text differs at the same revision, is applied; a node of
-- an older release, whose revision is lower, leaves a newer function alone.
-- The functions existing before this migration (vidgate_submit_generation
-- and vidgate_submit_generations) are applied from their files once, with
-- the body of migrations 0028 and 0016.
CREATE TABLE vidgate_functions (
    name TEXT PRIMARY KEY,
    revision BIGINT NOT NULL,
    sha256 TEXT NOT NULL,
    applied_at BIGINT NOT NULL
);
