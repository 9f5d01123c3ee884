//! Test helpers that more than one crate's tests use, kept in one place
//! instead of being included by path: fresh PostgreSQL databases for a test
//! (`test_database`) and a fake of where the providers publish their input
//! schemas (`schema_fake`), and the rows the benches seed
//! (`seeded_generation`). Only the workspace's crates depend on it, and
//! only as a dev-dependency.

pub mod schema_fake;
pub mod seeded_generation;
pub mod test_database;
