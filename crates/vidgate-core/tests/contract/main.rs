//! Contract tests of the catalog, validation and pricing against SPEC.md.
//! One test crate, so the hand-written spec tables are shared.

mod catalog;
mod pricing;
mod spec;
mod validation;
