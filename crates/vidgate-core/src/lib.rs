//! The vidgate domain, free of I/O: the model catalog, request validation,
//! pricing, exact money and the generation state machine. Everything here is
//! a pure function of its inputs so it can be tested exhaustively and shared
//! by the server, the quote endpoint and the command-line client.

pub mod money;
pub mod status;

pub use money::Micros;
pub use status::{CancelRefusal, GenerationStatus};
