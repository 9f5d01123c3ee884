//! The integration tests of vidgate-engine, as one test binary: each module is one
//! area, and the helpers are in one place. One binary links the crate once,
//! where a binary per file linked it once per file.

mod common;

mod control;
mod determinism;
mod images;
mod output;
