//! How a model on a Cog server is described in the backends file
//! (`"backend": "cog"`): where the server is, how many predictions it takes
//! at once, the predictor's input names, and the timeouts. `cog.rs` runs
//! jobs with it; `backends_file.rs` reads it from the file.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CogModelConfig {
    /// Where the Cog server listens, e.g. `http://10.0.0.5:5000`.
    pub base_url: String,
    /// How many predictions vidgate sends this server at once; more would
    /// only be refused with 409 while its slots are busy.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Our parameter name → the predictor's input name. Besides the
    /// request's parameters, `seed`, `width`, `height` and `mode` name the
    /// values the job was given.
    #[serde(default = "default_inputs")]
    pub inputs: BTreeMap<String, String>,
    /// Predictor inputs sent with every prediction, e.g. `{"fps": 24}`.
    #[serde(default)]
    pub constants: Map<String, Value>,
    #[serde(default)]
    pub timeouts: CogTimeouts,
    /// Largest output accepted, in bytes, from a data URI or a download.
    #[serde(default = "default_max_output_bytes")]
    pub max_output_bytes: u64,
}

/// Timeouts and intervals, in seconds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CogTimeouts {
    /// One HTTP request to the server (dispatch, state read, cancel, health).
    pub request_seconds: f64,
    /// A whole prediction, from dispatch to result; then it is canceled and
    /// the generation fails.
    pub prediction_seconds: f64,
    /// How often the state of a dispatched prediction is read while its
    /// webhook has not arrived.
    pub poll_seconds: f64,
    /// How often `GET /health-check` is called.
    pub health_seconds: f64,
    /// How long the server may stay unreachable during a job before the
    /// generation fails.
    pub unreachable_seconds: f64,
}

impl Default for CogTimeouts {
    fn default() -> CogTimeouts {
        CogTimeouts {
            request_seconds: 30.0,
            prediction_seconds: 1800.0,
            poll_seconds: 5.0,
            health_seconds: 5.0,
            unreachable_seconds: 60.0,
        }
    }
}

fn default_concurrency() -> usize {
    1
}

fn default_inputs() -> BTreeMap<String, String> {
    ["prompt", "duration", "seed"]
        .into_iter()
        .map(|name| (name.to_owned(), name.to_owned()))
        .collect()
}

fn default_max_output_bytes() -> u64 {
    256 * 1024 * 1024
}
