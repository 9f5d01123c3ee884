-- Keys the server makes for itself and every node shares, by purpose.
-- `media_urls` signs the short-lived URLs of kept request media that model
-- servers and hosted providers fetch (bound_media.rs). The first node that
-- needs a key stores a random one; every other node reads that one, so a
-- URL signed on one node is honoured on all of them and after restarts.
CREATE TABLE server_keys (
    purpose     TEXT PRIMARY KEY,
    secret      TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
