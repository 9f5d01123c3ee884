//! `POST /admin/v1/models/{vendor}/{model}/pause` and `…/resume`: stop and
//! start accepting new generations for a model (submits get 503
//! `model_unavailable` while it is paused).

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::Operator;
use crate::http::ApiError;
use crate::state::AppState;
use crate::store::NewAuditEntry;

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
    // Pausing a model that does not exist would silently do nothing.
    if state.catalog.model(&model_id).is_none() {
        return Err(ApiError::NotFound(format!("No model {model_id:?} exists.")));
    }
    state.store.set_model_paused(&model_id, paused).await?;
    state
        .store
        .record_audit(NewAuditEntry {
            actor,
            action: if paused {
                "model.pause"
            } else {
                "model.resume"
            },
            target: model_id.clone(),
            detail: json!({}),
        })
        .await?;
    Ok(Json(json!({ "model_id": model_id, "paused": paused })))
}
