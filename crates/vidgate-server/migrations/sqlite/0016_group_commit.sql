-- Group commit of submits needs no schema change on SQLite: a batch is one
-- write transaction of the statements a submit runs alone (store/submit.rs).
-- This migration keeps the two stores' migration versions the same
-- (PostgreSQL's 0016 adds the function vidgate_submit_generations).
SELECT 1;
