//! `GET /openapi.json`: the OpenAPI 3.1 description of this API, made from
//! the same route tables as the router.
//!
//! Each handler has its `Operation` beside it (`operation.rs`), and each
//! route table pairs every route with its handler and its `Operation`
//! (`described`), so a route cannot be served without being described. A
//! `Surface` is the routes behind one `Door`; `http::surfaces` lists them
//! all, and the router and `document` are both made from that list. The
//! answers' schemas are derived from the records the handlers serialise
//! (`record::<T>`), and the run and quote endpoints' request schemas come
//! from the catalog itself (`Endpoint::input_schema`), so they are the
//! validator's own rules. CI runs schemathesis against the running server
//! with this document, so a handler that drifts from it fails the build.

mod operation;

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::Request;
use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{MethodFilter, MethodRouter, on};
use serde_json::{Map, Value, json};
use vidgate_core::Catalog;

pub use operation::{
    Answer, BodyContent, Content, Context, Door, ENDPOINT_SEGMENTS, Field, Header, NOT_MODIFIED,
    Operation, Parameter, PerEndpoint, Refusal, RequestBody, Schema, SecurityScheme, Success, Tag,
    any_object, record,
};

use super::AppState;
use super::error::ErrorBody;
use super::prepared::PreparedJson;

/// A route of a surface: its path under the door's mount, its method, its
/// handler and the handler's description.
pub struct Route {
    pub path: &'static str,
    pub method: Method,
    pub handler: MethodRouter<AppState>,
    pub operation: &'static Operation,
}

/// The route of `handler` at `path`, described by `operation`.
pub fn described<H, T>(
    method: Method,
    path: &'static str,
    handler: H,
    operation: &'static Operation,
) -> Route
where
    H: Handler<T, AppState>,
    T: 'static,
{
    let filter = MethodFilter::try_from(method.clone()).expect("a method axum routes");
    Route {
        path,
        method,
        handler: on(filter, handler),
        operation,
    }
}

/// The routes behind one door, and the layer that guards them.
pub struct Surface {
    pub door: &'static Door,
    pub routes: Vec<Route>,
    /// Adds the door's guard (authentication, fair use) to the routes.
    pub guard: fn(Router<AppState>, &AppState) -> Router<AppState>,
}

impl Surface {
    /// The surface's routes, each at its full path, behind its guard.
    pub fn router(self, state: &AppState) -> Router<AppState> {
        let mount = self.door.mount;
        let routes = self
            .routes
            .into_iter()
            .fold(Router::new(), |router, route| {
                router.route(&format!("{mount}{}", route.path), route.handler)
            });
        (self.guard)(routes, state)
    }
}

/// The document once the routes are all known: `/openapi.json` is itself a
/// route it describes, so its handler is made before the document is.
#[derive(Clone, Default)]
pub struct Published(Arc<OnceLock<PreparedJson>>);

impl Published {
    pub fn publish(&self, document: &Value) {
        // The router is built once; a second document would be the same.
        let _ = self.0.set(PreparedJson::new(document));
    }
}

/// The body of vidgate's own refusals (`error.rs`).
pub const VIDGATE_ERROR: Schema = Schema::Of(record::<ErrorBody>);

pub const GET_DOCUMENT: Operation = Operation {
    id: "get_openapi",
    summary: "This document",
    tag: "meta",
    success: Success::json("200", "OpenAPI 3.1 document.", Schema::Of(any_object)),
    also: &[NOT_MODIFIED],
    ..Operation::PLAIN
};

/// `GET /openapi.json`, answering the document once it is published.
pub fn route(published: Published) -> Route {
    described(
        Method::GET,
        "/openapi.json",
        move |request: Request| async move {
            let document = published
                .0
                .get()
                .expect("the router publishes the document before it serves");
            document.respond(request.headers())
        },
        &GET_DOCUMENT,
    )
}

/// The tags of the customers' operations, in the order tools show them;
/// a door with a tag of its own adds it after them.
const CUSTOMER_TAGS: [&str; 6] = [
    "generations",
    "catalog",
    "account",
    "webhooks",
    "uploads",
    "meta",
];

/// The whole document for this deployment: one path item per route, or
/// per catalog endpoint for a per-endpoint operation.
pub fn document(catalog: &Catalog, api_base: &str, surfaces: &[Surface]) -> Value {
    let mut context = Context::new(catalog);
    // Every refusal names the Error schema, even where no answer does.
    record::<ErrorBody>(&mut context);
    let origin = api_base.trim_end_matches(super::API_PREFIX);
    let mut paths = Map::new();
    let mut tags: Vec<Value> = CUSTOMER_TAGS
        .iter()
        .map(|name| json!({ "name": name }))
        .collect();
    let mut schemes = Map::new();
    for surface in surfaces {
        let door = surface.door;
        if let Some(tag) = door
            .tag
            .as_ref()
            .filter(|tag| !tags.iter().any(|known| known["name"] == tag.name))
        {
            tags.push(json!({ "name": tag.name, "description": tag.description }));
        }
        if let Some(scheme) = &door.security {
            schemes.insert(scheme.name.into(), scheme.json());
        }
        for route in &surface.routes {
            for (path, operation) in path_operations(door, route, &mut context) {
                add_operation(&mut paths, door, origin, path, &route.method, operation);
            }
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "vidgate",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Asynchronous video generation. Submit a job, get 202 with a queued generation, poll it or receive a webhook. Billing is per second of video; failures and cancels are refunded."
        },
        "servers": [{ "url": api_base }],
        "security": [{ "bearer": [] }],
        "tags": tags,
        "paths": Value::Object(paths),
        "components": {
            "securitySchemes": Value::Object(schemes),
            "schemas": Value::Object(context.into_components())
        }
    })
}

/// A route's operation at its path, or at each catalog endpoint's path.
fn path_operations(door: &Door, route: &Route, context: &mut Context<'_>) -> Vec<(String, Value)> {
    if route.operation.per_endpoint.is_none() {
        return vec![(route.path.to_owned(), route.operation.json(door, context))];
    }
    let catalog = context.catalog;
    let described = catalog
        .endpoints()
        .map(|endpoint| {
            context.endpoint = Some(endpoint);
            let path = route.path.replace(ENDPOINT_SEGMENTS, &endpoint.id());
            (path, route.operation.json(door, context))
        })
        .collect();
    context.endpoint = None;
    described
}

/// Adds `operation` to the path item of `path`. A path under the
/// document's server is written as it is; any other is written in full
/// under a path-level server naming the origin.
fn add_operation(
    paths: &mut Map<String, Value>,
    door: &Door,
    origin: &str,
    path: String,
    method: &Method,
    operation: Value,
) {
    let (key, item) = if door.mount == super::API_PREFIX {
        (path, json!({}))
    } else {
        (
            format!("{}{path}", door.mount),
            json!({ "servers": [{ "url": origin }] }),
        )
    };
    let item = paths.entry(key.clone()).or_insert(item);
    let method = method.as_str().to_lowercase();
    assert!(
        item.get(&method).is_none(),
        "{method} {key} is described twice"
    );
    item[method] = operation;
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::HashSet;

    use axum::response::IntoResponse;
    use vidgate_core::{GenerationStatus, Micros};

    use super::*;
    use crate::http::ApiError;
    use crate::http::account::AccountRecord;
    use crate::http::webhooks::WebhookSecretRecord;
    use crate::representation::{GenerationOutput, rfc3339, sample_generation};
    use crate::store::{Account, AccountLimits, Generation, StoredJson};

    const API_BASE: &str = "https://api.example/api/v1";

    /// The server's surfaces, as its router is made from them.
    fn surfaces(catalog: &Catalog) -> Vec<Surface> {
        crate::http::surfaces(catalog, API_BASE, 1 << 20, Published::default())
    }

    /// The component schemas of the document the server publishes.
    fn component_schemas() -> Map<String, Value> {
        let catalog = Catalog::embedded();
        let document = document(&catalog, API_BASE, &surfaces(&catalog));
        document["components"]["schemas"]
            .as_object()
            .expect("the document has component schemas")
            .clone()
    }

    /// A described route names each segment of its path as a path
    /// parameter, in order (a per-endpoint operation's path ends with the
    /// endpoint's segments instead), and every operation of the document
    /// has an id, a summary and a tag of its own.
    #[test]
    fn every_route_describes_its_path_and_its_own_operation() {
        let catalog = Catalog::embedded();
        let surfaces = surfaces(&catalog);
        for route in surfaces.iter().flat_map(|surface| &surface.routes) {
            let where_ = format!("{} {}", route.method, route.path);
            let path = match route.operation.per_endpoint {
                Some(_) => route
                    .path
                    .strip_suffix(ENDPOINT_SEGMENTS)
                    .unwrap_or_else(|| panic!("{where_}: not a per-endpoint path")),
                None => route.path,
            };
            let segments: Vec<&str> = path
                .split('/')
                .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
                .collect();
            let described: Vec<&str> = route
                .operation
                .parameters
                .iter()
                .filter_map(Parameter::path_segment)
                .collect();
            assert_eq!(segments, described, "{where_}");
        }
        let document = document(&catalog, API_BASE, &surfaces);
        let mut operation_ids = HashSet::new();
        for (path, item) in document["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                if method == "servers" {
                    continue;
                }
                let id = operation["operationId"].as_str().unwrap();
                assert!(operation_ids.insert(id.to_owned()), "{id} is used twice");
                for field in ["operationId", "summary"] {
                    assert_ne!(operation[field], "", "{method} {path}: no {field}");
                }
                assert_ne!(operation["tags"][0], "", "{method} {path}: no tag");
            }
        }
    }

    /// What `value` has that its schema does not list, and what the schema
    /// requires that `value` lacks, at every level the schema describes
    /// (free-form objects, without `properties`, are not looked into).
    /// Gathers the properties and required fields of every part of an
    /// `allOf` into `merged`, following references and nested `allOf`s.
    fn merge_parts(schemas: &Map<String, Value>, schema: &Value, merged: &mut Value) {
        let schema = match schema["$ref"].as_str() {
            Some(reference) => &schemas[reference.rsplit('/').next().unwrap_or_default()],
            None => schema,
        };
        for part in schema["allOf"].as_array().into_iter().flatten() {
            merge_parts(schemas, part, merged);
        }
        for (name, property) in schema["properties"].as_object().into_iter().flatten() {
            merged["properties"][name] = property.clone();
        }
        for required in schema["required"].as_array().into_iter().flatten() {
            merged["required"]
                .as_array_mut()
                .unwrap()
                .push(required.clone());
        }
    }

    fn field_problems(
        schemas: &Map<String, Value>,
        schema: &Value,
        value: &Value,
        at: &str,
    ) -> Vec<String> {
        if let Some(reference) = schema["$ref"].as_str() {
            let name = reference.rsplit('/').next().unwrap_or_default();
            return field_problems(schemas, &schemas[name], value, at);
        }
        // A record that flattens another is both records' fields at once,
        // and the other may flatten a third.
        if schema["allOf"].is_array() {
            let mut merged = json!({ "properties": {}, "required": [] });
            merge_parts(schemas, schema, &mut merged);
            return field_problems(schemas, &merged, value, at);
        }
        let mut problems = Vec::new();
        for variant in ["oneOf", "anyOf"]
            .iter()
            .filter_map(|key| schema[key].as_array())
            .flatten()
        {
            if !value.is_null() && variant["type"] != "null" {
                problems.extend(field_problems(schemas, variant, value, at));
            }
        }
        if let (Some(properties), Some(fields)) =
            (schema["properties"].as_object(), value.as_object())
        {
            for (name, field) in fields {
                match properties.get(name) {
                    Some(property) => problems.extend(field_problems(
                        schemas,
                        property,
                        field,
                        &format!("{at}.{name}"),
                    )),
                    None => problems.push(format!("{at}.{name}: a field the schema does not list")),
                }
            }
            for required in schema["required"].as_array().into_iter().flatten() {
                let name = required.as_str().unwrap_or_default();
                if !fields.contains_key(name) {
                    problems.push(format!(
                        "{at}.{name}: required by the schema, absent from the answer"
                    ));
                }
            }
        }
        if let Some(elements) = value.as_array() {
            for (index, element) in elements.iter().enumerate() {
                problems.extend(field_problems(
                    schemas,
                    &schema["items"],
                    element,
                    &format!("{at}[{index}]"),
                ));
            }
        }
        problems
    }

    /// What `value` has that the document's schema `name` does not list,
    /// and what the schema requires that `value` lacks.
    pub(in crate::http) fn problems_of(name: &str, value: &Value) -> Vec<String> {
        let schemas = component_schemas();
        let schema = schemas
            .get(name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} schema"));
        field_problems(&schemas, &schema, value, name)
    }

    fn generation(
        status: GenerationStatus,
        output: Option<Value>,
        error: Option<Value>,
    ) -> Generation {
        Generation {
            output: output.as_ref().map(StoredJson::from_value),
            error: error.as_ref().map(StoredJson::from_value),
            completed_at: Some(1_795_000_002_000),
            ..sample_generation(status)
        }
    }

    /// An account as the store answers it.
    pub(in crate::http) fn account() -> Account {
        Account {
            id: "acct_1".into(),
            name: "Acme".into(),
            balance: Micros(1_000_000),
            held: Micros::ZERO,
            captured: Micros::ZERO,
            credited: Micros(1_000_000),
            debt: Micros::ZERO,
            limits: AccountLimits::default(),
            webhook_secret: "whsec_1".into(),
            previous_webhook_secret: None,
            previous_webhook_secret_expires_at: Some(1_795_000_000_000),
            created_at: 1_795_000_000_000,
            deleted_at: None,
            low_balance_alert: None,
        }
    }

    /// The answers the handlers write, each against the schema derived
    /// from its record. The derive lists every field a record serialises;
    /// this checks the fields the records carry as stored JSON (a
    /// generation's output, written by `GenerationOutput`, and its error)
    /// and the answers built around the records.
    #[tokio::test]
    async fn every_field_of_an_answer_is_in_its_schema() {
        let output = GenerationOutput {
            content_type: "video/mp4",
            duration_s: 5.0,
            expired: Some(true),
            expired_at: Some(rfc3339(1_795_000_003_000)),
            fps: 24,
            has_audio: false,
            height: 720,
            seed: Some(7),
            size_bytes: 1000,
            video_url: "https://api.example/api/v1/files/outputs/a/gen_1.mp4".into(),
            width: 1280,
        };
        let succeeded = generation(
            GenerationStatus::Succeeded,
            Some(serde_json::to_value(output).unwrap()),
            None,
        );
        let failed = generation(
            GenerationStatus::Failed,
            None,
            Some(json!({ "code": "render_failed", "message": "the clip could not be rendered" })),
        );
        for generation in [succeeded, failed] {
            let record =
                crate::representation::generation_json(&generation, "https://api.example/api/v1");
            assert_eq!(problems_of("Generation", &record), Vec::<String>::new());
        }
        let account = account();
        let record = serde_json::to_value(AccountRecord::new(&account)).unwrap();
        assert_eq!(problems_of("Account", &record), Vec::<String>::new());
        let record = serde_json::to_value(WebhookSecretRecord::new(&account)).unwrap();
        assert_eq!(problems_of("WebhookSecret", &record), Vec::<String>::new());
        for model in Catalog::embedded().models() {
            let record = model.public_json("https://api.example/api/v1");
            assert_eq!(problems_of("Model", &record), Vec::<String>::new());
        }
        // The other dialects' records (issue 53), errors included.
        for model in Catalog::embedded().models() {
            let record =
                serde_json::to_value(crate::dialects::openrouter_videos::model_object(model))
                    .unwrap();
            assert_eq!(
                problems_of("OpenRouterVideoModel", &record),
                Vec::<String>::new()
            );
        }
        let openai_error = crate::dialects::openai_videos::error_object(
            400,
            "invalid_request",
            "seconds must be one of 4, 8.",
            Some("seconds"),
        );
        let record = serde_json::to_value(openai_error).unwrap();
        assert_eq!(problems_of("OpenAiError", &record), Vec::<String>::new());
        let openrouter_error = crate::dialects::openrouter_videos::error_object(
            402,
            "insufficient_balance",
            "The balance does not cover the price.",
            None,
        );
        let record = serde_json::to_value(openrouter_error).unwrap();
        assert_eq!(
            problems_of("OpenRouterError", &record),
            Vec::<String>::new()
        );
        let response = ApiError::invalid("prompt", "The prompt is empty.").into_response();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(problems_of("Error", &body), Vec::<String>::new());
    }

    /// The check above fails on a field its schema does not list, and on a
    /// required field the answer lacks.
    #[test]
    fn the_check_finds_a_field_missing_from_the_schema() {
        let generation = generation(GenerationStatus::Queued, None, None);
        let mut record =
            crate::representation::generation_json(&generation, "https://api.example/api/v1");
        record["priority"] = json!(1);
        record["urls"]["stream"] = json!("https://api.example/stream");
        record.as_object_mut().unwrap().remove("cost");
        assert_eq!(
            problems_of("Generation", &record),
            [
                "Generation.priority: a field the schema does not list",
                "Generation.urls.stream: a field the schema does not list",
                "Generation.cost: required by the schema, absent from the answer",
            ]
        );
    }
}
