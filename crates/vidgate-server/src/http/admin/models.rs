//! `POST /admin/v1/models/{vendor}/{model}/pause` and `…/resume`: stop and
//! start accepting new generations for a model (submits get 503
//! `model_unavailable` while it is paused), through the operator action
//! `operator_actions::models::set_paused`.

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::{NOT_FOUND, Operator, answer};
use crate::application::state::AppState;
use crate::http::ApiError;
use crate::http::openapi::{Operation, Parameter, Schema, Success, record};
use crate::operator_actions::models;

const MODEL_PATH: [Parameter; 3] = [
    Parameter::Operator,
    Parameter::Path("vendor"),
    Parameter::Path("model"),
];
const MODEL_STATE: Success = Success::json(
    "200",
    "The model's id and whether it is paused.",
    Schema::Of(record::<ModelStateRecord>),
);

/// Whether a model accepts new generations.
#[derive(Serialize, ToSchema)]
#[schema(as = ModelState)]
pub struct ModelStateRecord {
    model_id: String,
    paused: bool,
}

pub const PAUSE: Operation = Operation {
    id: "operator_pause_model",
    summary: "Stop accepting new generations for a model (submits get 503)",
    parameters: &MODEL_PATH,
    body: None,
    success: MODEL_STATE,
    refusals: &[NOT_FOUND],
    ..Operation::PLAIN
};

pub const RESUME: Operation = Operation {
    id: "operator_resume_model",
    summary: "Accept new generations for a model again",
    parameters: &MODEL_PATH,
    body: None,
    success: MODEL_STATE,
    refusals: &[NOT_FOUND],
    ..Operation::PLAIN
};

pub async fn pause(
    State(state): State<AppState>,
    operator: Operator,
    Path(model): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    set_paused(state, operator, model, true).await
}

pub async fn resume(
    State(state): State<AppState>,
    operator: Operator,
    Path(model): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    set_paused(state, operator, model, false).await
}

async fn set_paused(
    state: AppState,
    Operator(actor): Operator,
    (vendor, model): (String, String),
    paused: bool,
) -> Result<Json<Value>, ApiError> {
    let model_id = format!("{vendor}/{model}");
    models::set_paused(
        state.store.as_ref(),
        &state.catalog,
        &actor,
        &model_id,
        paused,
    )
    .await?;
    Ok(answer(ModelStateRecord { model_id, paused }))
}
