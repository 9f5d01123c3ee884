-- The request media a generation is bound to (issue 16): for each item that
-- submit fetched, checked and priced, its SHA-256 and the path and URL of the
-- copy kept for the job, as JSON. Written in the submit transaction; backends
-- get the kept copies instead of the customer's URLs.
CREATE TABLE generation_media (
    generation_id  TEXT PRIMARY KEY REFERENCES generations (id),
    binding        TEXT NOT NULL
);
