//! The operator's actions on models: pause one (submits get 503
//! `model_unavailable`) and resume it.

use serde_json::json;
use vidgate_core::Catalog;

use super::OperatorActionError;
use crate::store::{AuditAction, NewAuditEntry, Store};

/// Stops (`paused`) or starts again accepting new generations for a model
/// of `catalog`. Pausing a model that does not exist would silently do
/// nothing, so it is refused.
pub async fn set_paused(
    store: &Store,
    catalog: &Catalog,
    actor: &str,
    model_id: &str,
    paused: bool,
) -> Result<(), OperatorActionError> {
    if catalog.model(model_id).is_none() {
        return Err(OperatorActionError::ModelNotFound(model_id.to_owned()));
    }
    let audit = NewAuditEntry {
        actor: actor.to_owned(),
        action: if paused {
            AuditAction::ModelPause
        } else {
            AuditAction::ModelResume
        },
        target: model_id.to_owned(),
        detail: json!({}),
    };
    store
        .operator()
        .set_model_paused_audited(model_id, paused, &audit)
        .await?;
    Ok(())
}
