//! `GET /models` and `GET /models/{vendor}/{model}`: the public catalog,
//! cacheable by clients and proxies.
//!
//! The records depend only on the catalog and the API base, so they are
//! serialised once when the router is built and served from those bytes.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRequestParts, Path, Request};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use utoipa::ToSchema;
use vidgate_core::{Catalog, ModelRecord};

use super::prepared::PreparedJson;
use super::{ApiError, AppState};
use crate::representation::ListKind;

/// The catalog's models.
#[derive(Serialize, ToSchema)]
pub struct ModelList<'a> {
    data: Vec<ModelRecord<'a>>,
    #[schema(inline)]
    object: ListKind,
}

/// The list and every model's record, ready to send.
struct ModelDocuments {
    list: PreparedJson,
    /// Keyed by model id (`vendor_1/model_1`).
    models: HashMap<String, PreparedJson>,
    /// What precedes the model id in a record's path: `/api/v1/models/`.
    show_prefix: String,
}

impl ModelDocuments {
    fn new(catalog: &Catalog, api_base: &str) -> ModelDocuments {
        let list = ModelList {
            data: catalog
                .models()
                .iter()
                .map(|model| model.public_record(api_base))
                .collect(),
            object: ListKind::List,
        };
        ModelDocuments {
            list: PreparedJson::new(&list),
            models: catalog
                .models()
                .iter()
                .zip(&list.data)
                .map(|(model, record)| (model.id.clone(), PreparedJson::new(record)))
                .collect(),
            show_prefix: super::api_path("/models/"),
        }
    }

    /// The record the request's path names, or 404. The path is looked up
    /// as it came first (the usual request, with nothing to decode), and
    /// only when that misses through the `Path` extractor, which decodes
    /// percent-escapes.
    async fn show(&self, request: Request) -> Response {
        let as_sent = request.uri().path().strip_prefix(&self.show_prefix);
        if let Some(model) = as_sent.and_then(|model_id| self.models.get(model_id)) {
            return model.respond(request.headers());
        }
        let (mut parts, _body) = request.into_parts();
        // A path that does not decode is refused as the extractor refuses
        // it everywhere else; the envelope gives the refusal the API's shape.
        let (vendor, model) =
            match Path::<(String, String)>::from_request_parts(&mut parts, &()).await {
                Ok(Path(names)) => names,
                Err(rejection) => return rejection.into_response(),
            };
        let model_id = format!("{vendor}/{model}");
        match self.models.get(&model_id) {
            Some(model) => model.respond(&parts.headers),
            None => ApiError::NotFound(format!("No model {model_id:?} exists.")).into_response(),
        }
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
            get(move |request: Request| async move { for_show.show(request).await }),
        )
}
