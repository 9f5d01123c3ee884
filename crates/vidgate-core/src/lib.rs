//! The vidgate domain, free of I/O: the model catalog, request validation,
//! pricing, exact money and the generation state machine. Everything here is
//! a pure function of its inputs so it can be tested exhaustively and shared
//! by the server, the quote endpoint and the command-line client.

pub mod catalog;
pub mod money;
pub mod pricing;
pub mod status;
pub mod validation;

pub use catalog::{Catalog, CatalogError, Endpoint, MediaKind, Mode, Model, ModelRecord};
pub use money::Micros;
pub use pricing::{Breakdown, MediaFacts, Price};
pub use status::{CancelRefusal, GenerationStatus};
pub use validation::{InvalidRequest, Purpose, ValidatedInput};
