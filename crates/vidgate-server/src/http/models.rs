//! `GET /models` and `GET /models/{vendor}/{model}`: the public catalog,
//! cacheable by clients and proxies.
//!
//! The records depend only on the catalog and the API base, so they are
//! serialised once when the router is built and served from those bytes.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Request};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use serde_json::{Value, json};
use vidgate_core::Catalog;

use super::prepared::PreparedJson;
use super::{ApiError, AppState};

/// The list and every model's record, ready to send.
struct ModelDocuments {
    list: PreparedJson,
    /// Keyed by model id (`vendor_1/model_1`).
    models: HashMap<String, PreparedJson>,
}

impl ModelDocuments {
    fn new(catalog: &Catalog, api_base: &str) -> ModelDocuments {
        let records: Vec<(String, Value)> = catalog
            .models()
            .iter()
            .map(|model| (model.id.clone(), model.public_json(api_base)))
            .collect();
        let list = json!({
            "object": "list",
            "data": records.iter().map(|(_, record)| record).collect::<Vec<_>>(),
        });
        ModelDocuments {
            list: PreparedJson::new(&list),
            models: records
                .iter()
                .map(|(id, record)| (id.clone(), PreparedJson::new(record)))
                .collect(),
        }
    }

    fn show(&self, model_id: &str, headers: &HeaderMap) -> Result<Response, ApiError> {
        let model = self
            .models
            .get(model_id)
            .ok_or_else(|| ApiError::NotFound(format!("No model {model_id:?} exists.")))?;
        Ok(model.respond(headers))
    }
}

/// The two routes, with the catalog's documents prepared.
pub fn routes(catalog: &Catalog, api_base: &str) -> Router<AppState> {
    let documents = Arc::new(ModelDocuments::new(catalog, api_base));
    let for_show = documents.clone();
    Router::new()
        .route(
            &super::api_path("/models"),
            // The request itself, not a `HeaderMap` (which axum fills with a
            // copy of every header): only `If-None-Match` is read.
            get(move |request: Request| async move { documents.list.respond(request.headers()) }),
        )
        .route(
            &super::api_path("/models/{vendor}/{model}"),
            get(
                move |Path((vendor, model)): Path<(String, String)>, request: Request| async move {
                    for_show.show(&format!("{vendor}/{model}"), request.headers())
                },
            ),
        )
}
