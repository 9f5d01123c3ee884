//! The integration tests of vidgate-media, as one test binary: each module is one
//! area, and the helpers are in one place. One binary links the crate once,
//! where a binary per file linked it once per file.

mod common;

mod fetch_and_probe;
mod inspect;
