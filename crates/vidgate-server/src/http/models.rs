//! `GET /models` and `GET /models/{vendor}/{model}`: the public catalog,
//! cacheable by clients and proxies.
//!
//! The records depend only on the catalog and the API base, so they are
//! serialised once when the router is built and served from those bytes.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Path, Request};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;
use vidgate_core::{Catalog, ModelRecord};

use super::ApiError;
use super::openapi::{
    Context, NOT_MODIFIED, Operation, Parameter, Refusal, Route, Schema, Success, described, record,
};
use super::prepared::PreparedJson;
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

pub const LIST: Operation = Operation {
    id: "list_models",
    summary: "List models and their endpoints",
    tag: "catalog",
    success: Success::json(
        "200",
        "The catalog.",
        Schema::Of(record::<ModelList<'static>>),
    ),
    also: &[NOT_MODIFIED],
    ..Operation::PLAIN
};

pub const SHOW: Operation = Operation {
    id: "get_model",
    summary: "One model",
    tag: "catalog",
    parameters: &[
        Parameter::PathOf {
            name: "vendor",
            schema: Schema::Of(vendors),
        },
        Parameter::PathOf {
            name: "model",
            schema: Schema::Of(model_names),
        },
    ],
    success: Success::json(
        "200",
        "The model.",
        Schema::Of(record::<ModelRecord<'static>>),
    ),
    also: &[NOT_MODIFIED],
    refusals: &[Refusal {
        status: "404",
        description: "not_found: no such model.",
    }],
    ..Operation::PLAIN
};

/// The catalog's vendors, one per model (`vendor_1` of `vendor_1/model_1`).
fn vendors(context: &mut Context<'_>) -> Value {
    model_id_parts(context.catalog, 0)
}

/// The catalog's model names, one per model (`model_1` of
/// `vendor_1/model_1`).
fn model_names(context: &mut Context<'_>) -> Value {
    model_id_parts(context.catalog, 1)
}

fn model_id_parts(catalog: &Catalog, part: usize) -> Value {
    let parts: Vec<&str> = catalog
        .models()
        .iter()
        .filter_map(|model| model.id.split('/').nth(part))
        .collect();
    json!({ "type": "string", "enum": parts })
}

/// The two routes, with the catalog's documents prepared.
pub fn routes(catalog: &Catalog, api_base: &str) -> Vec<Route> {
    let documents = Arc::new(ModelDocuments::new(catalog, api_base));
    let for_show = documents.clone();
    vec![
        // The request itself, not a `HeaderMap` (which axum fills with a
        // copy of every header): only `If-None-Match` is read.
        described(
            Method::GET,
            "/models",
            move |request: Request| async move { documents.list.respond(request.headers()) },
            &LIST,
        ),
        described(
            Method::GET,
            "/models/{vendor}/{model}",
            move |request: Request| async move { for_show.show(request).await },
            &SHOW,
        ),
    ]
}
