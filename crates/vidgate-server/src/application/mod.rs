//! The application layer: what vidgate does for its callers, below every
//! door they come in by. The HTTP API (`http/`), the dashboard
//! (`dashboard/`) and the operator's actions (`operator_actions/`) all call
//! down into it; it calls the store, the backends and the services, and
//! never up into a door, so a rule here holds whichever door a request
//! came in by.
//!
//! - `submit` — the one submit path of the API, the playground and the
//!   drop-in surfaces: validate, price, admit, keep the media, submit with
//!   a hold.
//! - `callers`, `sessions` — who is calling: an API key, or a dashboard
//!   session; CSRF tokens and device cookies.
//! - `accounts` — account and key creation.
//! - `keys_and_secrets` — the audited changes to an account's keys and
//!   webhook secret, whoever makes them (the operator, a person, an API
//!   key).
//! - `users`, `passwords` — people, their roles and invitations, and the
//!   password hashing gate.
//! - `client_address` — the one decision of a request's client address.
//! - `state` — `AppState`, what every handler reaches.

pub mod accounts;
pub mod callers;
pub mod client_address;
pub mod keys_and_secrets;
pub mod passwords;
pub mod sessions;
pub mod state;
pub mod submit;
pub mod users;
