//! A fake of where the providers publish their input schemas (test-only),
//! for the live schema check: fal's per-endpoint queue OpenAPI document
//! (`GET …/openapi.json?endpoint_id=<id>`, the input behind a `$ref` as fal
//! writes it) and Replicate's model answer (`GET /v1/models/{owner}/{name}`
//! with the bearer token, each enumeration behind `allOf: [{$ref}]` as Cog
//! writes it). It serves the transcribed schemas of
//! `fixtures/provider_schemas/`, each passed through `drift` first, so a
//! test can serve them as published or changed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

/// The Replicate token the fake takes.
pub const REPLICATE_TOKEN: &str = "r8_schema_fake_token";

/// Changes a transcribed schema (provider, target, schema) before it is
/// served.
pub type Drift = dyn Fn(&str, &str, &mut Value) + Send + Sync;

pub struct SchemaFake {
    pub base_url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SchemaFake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Served {
    drift: Box<Drift>,
}

/// The transcribed schemas, found from either crate's tests.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../vidgate-server/tests/fixtures/provider_schemas")
}

fn transcribed(provider: &str, target: &str) -> Option<Value> {
    let text =
        std::fs::read_to_string(fixtures().join(provider).join(format!("{target}.json"))).ok()?;
    let fixture: Value = serde_json::from_str(&text).ok()?;
    Some(fixture["schema"].clone())
}

impl SchemaFake {
    /// Serves the transcribed schemas as they are.
    pub async fn start() -> SchemaFake {
        SchemaFake::drifted(|_, _, _| {}).await
    }

    /// Serves the transcribed schemas, each changed by `drift`.
    pub async fn drifted(
        drift: impl Fn(&str, &str, &mut Value) + Send + Sync + 'static,
    ) -> SchemaFake {
        let served = Arc::new(Served {
            drift: Box::new(drift),
        });
        let router = Router::new()
            .route("/fal/openapi.json", get(fal_document))
            .route("/replicate/v1/models/{*model}", get(replicate_model))
            .with_state(served);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        SchemaFake { base_url, task }
    }

    pub fn fal_schema_url(&self) -> String {
        format!("{}/fal/openapi.json", self.base_url)
    }

    pub fn replicate_api_url(&self) -> String {
        format!("{}/replicate/v1", self.base_url)
    }

    /// The example backends file `name` (`fal.json`, `replicate.json`) of
    /// `examples/hosted/`, its schema documents read from this fake, written
    /// into `directory`.
    pub fn example_backends_file(&self, name: &str, directory: &Path) -> PathBuf {
        let example = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/hosted")
            .join(name);
        let mut file: Value =
            serde_json::from_str(&std::fs::read_to_string(example).unwrap()).unwrap();
        for model in file["models"].as_object_mut().unwrap().values_mut() {
            match model["backend"].as_str() {
                Some("fal") => model["schema_url"] = json!(self.fal_schema_url()),
                Some("replicate") => model["api_url"] = json!(self.replicate_api_url()),
                _ => {}
            }
        }
        let path = directory.join(name);
        std::fs::write(&path, file.to_string()).unwrap();
        path
    }
}

async fn fal_document(
    State(served): State<Arc<Served>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(endpoint_id) = query.get("endpoint_id") else {
        return (StatusCode::BAD_REQUEST, "endpoint_id is required").into_response();
    };
    let Some(mut schema) = transcribed("fal", endpoint_id) else {
        return (StatusCode::NOT_FOUND, "no such endpoint").into_response();
    };
    (served.drift)("fal", endpoint_id, &mut schema);
    // A drift that leaves nothing: the endpoint is gone.
    if schema.is_null() {
        return (StatusCode::NOT_FOUND, "no such endpoint").into_response();
    }
    axum::Json(json!({
        "openapi": "3.0.4",
        "info": { "title": "Queue OpenAPI for fal.ai endpoint",
                  "x-fal-metadata": { "endpointId": endpoint_id } },
        "servers": [{ "url": "https://queue.fal.run" }],
        "paths": { format!("/{endpoint_id}"): { "post": { "requestBody": {
            "required": true,
            "content": { "application/json": { "schema": {
                "$ref": "#/components/schemas/EndpointInput" } } } } } } },
        "components": { "schemas": { "EndpointInput": schema } }
    }))
    .into_response()
}

async fn replicate_model(
    State(served): State<Arc<Served>>,
    UrlPath(model): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    let authorized = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        == Some(&format!("Bearer {REPLICATE_TOKEN}"));
    if !authorized {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({ "title": "Unauthenticated", "status": 401 })),
        )
            .into_response();
    }
    let Some(mut schema) = transcribed("replicate", &model) else {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({ "detail": "Not found." })),
        )
            .into_response();
    };
    (served.drift)("replicate", &model, &mut schema);
    if schema.is_null() {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({ "detail": "Not found." })),
        )
            .into_response();
    }
    // Cog writes each enumeration as its own component.
    let mut components = serde_json::Map::new();
    if let Some(properties) = schema["properties"].as_object_mut() {
        for (name, property) in properties.iter_mut() {
            if property.get("enum").is_some() {
                components.insert(name.clone(), property.clone());
                *property = json!({ "allOf": [{ "$ref": format!("#/components/schemas/{name}") }],
                    "x-order": 0 });
            }
        }
    }
    components.insert("Input".into(), schema);
    axum::Json(json!({
        "url": format!("https://replicate.com/{model}"),
        "owner": model.split('/').next(),
        "name": model.split('/').nth(1),
        "latest_version": {
            "id": "5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa",
            "openapi_schema": { "openapi": "3.0.2", "components": { "schemas": components } }
        }
    }))
    .into_response()
}
