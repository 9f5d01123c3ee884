//! `GET /openapi.json`: the OpenAPI 3.1 description of this API.
//!
//! The request schemas of the run and quote endpoints come from the catalog
//! itself (`Endpoint::input_schema`), so they are the validator's own rules;
//! the response schemas are derived from the records the handlers in this
//! module's siblings serialise (`component_schemas`). CI runs schemathesis
//! against the running server with this document, so a handler that drifts
//! from it fails the build.

use axum::Router;
use axum::extract::Request;
use axum::routing::get;
use serde_json::{Map, Value, json};
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;
use vidgate_core::{Catalog, GenerationStatus};

use super::AppState;
use super::account::AccountRecord;
use super::error::ErrorBody;
use super::generations::ListPage;
use super::models::ModelList;
use super::payments::CheckoutSessionRecord;
use super::prepared::PreparedJson;
use super::quote::QuoteRecord;
use super::uploads::{DirectUploadRecord, UploadRecord};
use super::webhooks::{DeliveryList, WebhookSecretRecord};
use crate::representation::GenerationRecord;

fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn json_content(schema: Value) -> Value {
    json!({ "application/json": { "schema": schema } })
}

fn error_response(description: &str) -> Value {
    json!({ "description": description, "content": json_content(schema_ref("Error")) })
}

/// The answer of a public endpoint past its per-address fair-use limit.
fn public_rate_limited() -> Value {
    error_response(
        "rate_limited: too many requests to the public endpoints from this client address; Retry-After says when to try again.",
    )
}

/// The `Prefer` header of a request that may wait for its generation.
fn prefer_wait_parameter() -> Value {
    json!({
        "name": "Prefer", "in": "header", "required": false,
        "description": "`wait=N` (N from 1 to 60): answer once the generation is final (succeeded, failed or canceled), or after N seconds with its state then; the status code is unchanged. Preference-Applied says the wait was honoured and for how long (at most the server's HTTP idle timeout). Other preferences are ignored; a malformed wait is refused with 400 naming Prefer. Open waits count against the per-key and per-server caps of waits and event streams (429 past them).",
        "schema": { "type": "string" },
        "example": "wait=60"
    })
}

fn preference_applied_header() -> Value {
    json!({ "description": "`wait=N` when the request's Prefer: wait was honoured, with the seconds it could wait.", "schema": { "type": "string" } })
}

fn rate_limit_headers() -> Value {
    let integer =
        |description: &str| json!({ "description": description, "schema": { "type": "integer" } });
    json!({
        "x-ratelimit-limit": integer("Capacity of the key's token bucket."),
        "x-ratelimit-remaining": integer("Tokens left in the bucket."),
        "x-ratelimit-reset": integer("Seconds until the bucket is full again."),
    })
}

/// The error responses every authenticated endpoint can give, plus `extra`.
fn authenticated_errors(extra: &[(&str, &str)]) -> Map<String, Value> {
    let mut responses = Map::new();
    responses.insert(
        "401".into(),
        error_response("unauthorized: the key is missing, malformed or revoked."),
    );
    responses.insert(
        "403".into(),
        error_response("forbidden: a request that is authenticated by a dashboard session cookie and changes something needs the page's X-CSRF-Token header."),
    );
    responses.insert("429".into(), error_response("rate_limited: too many requests per second, too many generations in progress, or (with Prefer: wait or an event stream) too many waits and streams open for this key or on this server, or this account is already fetching as much request media as one account may at once. Retry-After says when to try again. Nothing is charged."));
    responses.insert(
        "500".into(),
        error_response("internal_error: retry with backoff."),
    );
    for (status, description) in extra {
        responses.insert((*status).into(), error_response(description));
    }
    responses
}

fn with_success(
    status: &str,
    description: &str,
    schema: Value,
    errors: Map<String, Value>,
) -> Value {
    let mut responses = errors;
    responses.insert(
        status.into(),
        json!({ "description": description, "headers": rate_limit_headers(), "content": json_content(schema) }),
    );
    Value::Object(responses)
}

/// The component schemas, derived from the records the handlers serialise
/// (`ToSchema` beside `Serialize` on each), so the document's answers cannot
/// drift from the answers themselves. Each record brings the schemas it
/// refers to (`Generation` brings `Cost`, `GenerationOutput` and
/// `GenerationError`).
fn component_schemas() -> Map<String, Value> {
    let mut schemas = Vec::new();
    add_schema::<ErrorBody>(&mut schemas);
    add_schema::<GenerationRecord<'static>>(&mut schemas);
    add_schema::<ListPage<'static>>(&mut schemas);
    add_schema::<AccountRecord<'static>>(&mut schemas);
    add_schema::<QuoteRecord>(&mut schemas);
    add_schema::<ModelList<'static>>(&mut schemas);
    add_schema::<DeliveryList<'static>>(&mut schemas);
    add_schema::<WebhookSecretRecord<'static>>(&mut schemas);
    add_schema::<UploadRecord>(&mut schemas);
    add_schema::<DirectUploadRecord>(&mut schemas);
    add_schema::<CheckoutSessionRecord>(&mut schemas);
    schemas
        .into_iter()
        .map(|(name, schema)| {
            let schema = serde_json::to_value(schema).expect("a schema is plain JSON");
            (name, schema)
        })
        .collect()
}

fn add_schema<T: ToSchema>(schemas: &mut Vec<(String, RefOr<Schema>)>) {
    schemas.push((T::name().into_owned(), T::schema()));
    T::schemas(schemas);
}

/// The validator treats a JSON `null` in an optional field as "omitted", as
/// clients that serialise absent values as null expect; the published request
/// schema says so by allowing null beside each optional field's own schema.
fn with_nullable_optionals(catalog_schema: Value) -> Value {
    let mut schema = catalog_schema;
    let required: Vec<Value> = schema["required"].as_array().cloned().unwrap_or_default();
    if let Some(properties) = schema["properties"].as_object_mut() {
        for (name, property) in properties.iter_mut() {
            if required.contains(&Value::String(name.clone())) {
                continue;
            }
            let description = property.get("description").cloned();
            let mut nullable = json!({ "anyOf": [property.take(), { "type": "null" }] });
            if let Some(description) = description {
                nullable["description"] = description;
            }
            *property = nullable;
        }
    }
    schema
}

/// A quote validates what is present but requires nothing, so its schema is
/// the run schema without `required`.
fn quote_schema(run_schema: &Value) -> Value {
    let mut schema = run_schema.clone();
    if let Some(object) = schema.as_object_mut() {
        object.remove("required");
    }
    // Lists that a run requires (M6 reference images) may be empty in a quote.
    if let Some(properties) = schema["properties"].as_object_mut() {
        for property in properties.values_mut() {
            if let Some(object) = property.as_object_mut() {
                object.remove("minItems");
            }
        }
    }
    // Every field is optional in a quote, so every field may be null.
    with_nullable_optionals(schema)
}

fn endpoint_paths(catalog: &Catalog, paths: &mut Map<String, Value>) {
    for model in catalog.models() {
        for mode in model.modes() {
            let Some(endpoint) = model.endpoint(*mode) else {
                continue;
            };
            let id = endpoint.id();
            let run_schema = with_nullable_optionals(endpoint.input_schema());
            let mut run_errors = authenticated_errors(&[
                (
                    "400",
                    "invalid_request: invalid JSON, a missing, unknown or out-of-range parameter, or a malformed Prefer: wait; param names it.",
                ),
                (
                    "402",
                    "insufficient_balance: the balance does not cover the price. Nothing is charged.",
                ),
                (
                    "409",
                    "conflict: the Idempotency-Key was used with a different request.",
                ),
                (
                    "413",
                    "payload_too_large: the body is larger than the limit.",
                ),
                (
                    "502",
                    "upstream_error: the model refused the job; any held amount was refunded.",
                ),
                (
                    "503",
                    "model_unavailable: the model is temporarily not accepting new generations, or this node is fetching as much request media as it may at once (Retry-After says when to try again).",
                ),
            ]);
            run_errors.insert(
                "202".into(),
                json!({
                    "description": "Accepted: the generation is queued and its price is held.",
                    "headers": {
                        "Location": { "description": "The generation's URL.", "schema": { "type": "string", "format": "uri" } },
                        "Preference-Applied": preference_applied_header(),
                        "x-ratelimit-limit": { "schema": { "type": "integer" } },
                        "x-ratelimit-remaining": { "schema": { "type": "integer" } },
                        "x-ratelimit-reset": { "schema": { "type": "integer" } }
                    },
                    "content": json_content(schema_ref("Generation"))
                }),
            );
            paths.insert(
                format!("/run/{id}"),
                json!({ "post": {
                    "operationId": format!("run_{}", id.replace(['/', '-'], "_")),
                    "summary": format!("Submit a {} generation to {} ({})", mode.as_str(), model.label, model.id),
                    "tags": ["generations"],
                    "security": [{ "bearer": [] }],
                    "parameters": [{
                        "name": "Idempotency-Key", "in": "header", "required": false,
                        "description": "Replays the original generation for the same key and body within 24 hours (with Prefer: wait, the replay waits for it too).",
                        "schema": { "type": "string", "minLength": 1, "maxLength": 255 }
                    }, prefer_wait_parameter()],
                    "requestBody": { "required": true, "content": json_content(run_schema.clone()) },
                    "responses": Value::Object(run_errors)
                }}),
            );
            paths.insert(
                format!("/quote/{id}"),
                json!({ "post": {
                    "operationId": format!("quote_{}", id.replace(['/', '-'], "_")),
                    "summary": format!("Price a {} request to {} without running it", mode.as_str(), model.label),
                    "tags": ["catalog"],
                    "security": [],
                    "requestBody": { "required": false, "content": json_content(quote_schema(&run_schema)) },
                    "responses": {
                        "200": { "description": "The price.", "content": json_content(schema_ref("Quote")) },
                        "400": error_response("invalid_request: a parameter is invalid; param names it."),
                        "413": error_response("payload_too_large"),
                        "429": error_response("rate_limited: too many requests to the public endpoints from this client address, or this client network is already fetching as much request media as one client may at once; Retry-After says when to try again."),
                        "500": error_response("internal_error"),
                        "503": error_response("model_unavailable: this node is fetching as much request media as it may at once; Retry-After says when to try again.")
                    }
                }}),
            );
        }
    }
}

/// The whole document for this deployment.
fn document(catalog: &Catalog, api_base: &str) -> Value {
    let mut paths = Map::new();
    endpoint_paths(catalog, &mut paths);
    let model_ids: Vec<&str> = catalog
        .models()
        .iter()
        .map(|model| model.id.as_str())
        .collect();
    let vendors: Vec<&str> = model_ids
        .iter()
        .filter_map(|id| id.split('/').next())
        .collect();
    let names: Vec<&str> = model_ids
        .iter()
        .filter_map(|id| id.split('/').nth(1))
        .collect();
    let generation_id =
        json!({ "name": "id", "in": "path", "required": true, "schema": { "type": "string" } });
    paths.insert("/models".into(), json!({ "get": {
        "operationId": "list_models", "summary": "List models and their endpoints", "tags": ["catalog"], "security": [],
        "responses": {
            "200": { "description": "The catalog.", "content": json_content(schema_ref("ModelList")) },
            "304": { "description": "Not modified since the ETag sent in If-None-Match." },
            "429": public_rate_limited()
        }
    }}));
    paths.insert("/models/{vendor}/{model}".into(), json!({ "get": {
        "operationId": "get_model", "summary": "One model", "tags": ["catalog"], "security": [],
        "parameters": [
            { "name": "vendor", "in": "path", "required": true, "schema": { "type": "string", "enum": vendors } },
            { "name": "model", "in": "path", "required": true, "schema": { "type": "string", "enum": names } }
        ],
        "responses": {
            "200": { "description": "The model.", "content": json_content(schema_ref("Model")) },
            "304": { "description": "Not modified since the ETag sent in If-None-Match." },
            "404": error_response("not_found: no such model."),
            "429": public_rate_limited()
        }
    }}));
    paths.insert("/generations".into(), json!({ "get": {
        "operationId": "list_generations", "summary": "Recent generations, newest first", "tags": ["generations"],
        "security": [{ "bearer": [] }],
        "parameters": [
            { "name": "limit", "in": "query", "schema": { "type": "integer", "minimum": 1, "maximum": 100, "default": 20 } },
            { "name": "cursor", "in": "query", "schema": { "type": "string" }, "description": "next_cursor of the previous page." },
            { "name": "status", "in": "query", "schema": { "type": "string", "enum": GenerationStatus::ALL.iter().map(|status| status.as_str()).collect::<Vec<_>>() } },
            { "name": "model", "in": "query", "schema": { "type": "string" } }
        ],
        "responses": with_success("200", "A page of generations.", schema_ref("GenerationList"),
            authenticated_errors(&[("400", "invalid_request: a query parameter is invalid; param names it.")]))
    }}));
    let mut read_responses = with_success(
        "200",
        "The generation; Retry-After: 5 while it is not final.",
        schema_ref("Generation"),
        authenticated_errors(&[
            (
                "400",
                "invalid_request: a malformed Prefer: wait; param is Prefer.",
            ),
            ("404", "not_found: no such generation in this account."),
        ]),
    );
    read_responses["200"]["headers"]["Preference-Applied"] = preference_applied_header();
    read_responses["200"]["headers"]["Retry-After"] = json!({ "description": "Seconds before polling again, while the generation is not final.", "schema": { "type": "integer" } });
    paths.insert("/generations/{id}".into(), json!({ "get": {
        "operationId": "get_generation", "summary": "One generation (poll no tighter than every 5 seconds, or wait with Prefer: wait=N)", "tags": ["generations"],
        "security": [{ "bearer": [] }],
        "parameters": [generation_id, prefer_wait_parameter()],
        "responses": read_responses
    }}));
    let mut event_responses =
        authenticated_errors(&[("404", "not_found: no such generation in this account.")]);
    event_responses.insert("200".into(), json!({
        "description": "A text/event-stream. Each event is `id: <state>` and one `data:` line holding the generation's record exactly as GET /generations/{id} returns it: first the state now, then one event per change of status, and the stream closes after the final state. Event ids name the state (`queued-0`, `running-1`, `succeeded-1`; treat them as opaque). A comment line (`: keep-alive`) comes every 15 seconds without events. The first event sets `retry: 1000`. A stream also ends at the server's shutdown and after 30 minutes open; reconnect with Last-Event-ID.",
        "headers": rate_limit_headers(),
        // The schema of one event, as server-sent-event clients (and
        // schemathesis) read them: the fields of an event block.
        "content": { "text/event-stream": { "schema": {
            "type": "object",
            "required": ["data"],
            "properties": {
                "data": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "description": "The generation's record as JSON text, exactly as GET /generations/{id} returns it."
                },
                "id": { "type": "string", "description": "The state the event shows (`running-1`); opaque." },
                "event": { "type": "string", "description": "Always `message` (the default event type)." },
                "retry": { "type": "integer", "description": "On the first event: reconnect after this many milliseconds." }
            }
        } } }
    }));
    event_responses.insert("204".into(), json!({
        "description": "Last-Event-ID names the generation's final state: nothing more will come (an EventSource stops reconnecting)."
    }));
    paths.insert("/generations/{id}/events".into(), json!({ "get": {
        "operationId": "stream_generation_events", "summary": "The generation's changes as server-sent events, until it is final", "tags": ["generations"],
        "description": "Authorized like GET /generations/{id}. An open stream counts against the per-key and per-server caps of waits and event streams (429 with Retry-After past them).",
        "security": [{ "bearer": [] }],
        "parameters": [generation_id, {
            "name": "Last-Event-ID", "in": "header", "required": false,
            "description": "The id of the last event seen: the stream resumes after it (the state it names is not sent again).",
            "schema": { "type": "string" }
        }],
        "responses": Value::Object(event_responses)
    }}));
    paths.insert("/generations/{id}/cancel".into(), json!({ "post": {
        "operationId": "cancel_generation", "summary": "Cancel a queued generation (refunded)", "tags": ["generations"],
        "description": "A queued generation is canceled and refunded. A running one whose job still waits in a hosted provider's queue is canceled there first, then canceled and refunded here; any other running or finished one answers 409.",
        "security": [{ "bearer": [] }],
        "parameters": [generation_id],
        "responses": with_success("200", "The canceled generation.", schema_ref("Generation"),
            authenticated_errors(&[
                ("404", "not_found: no such generation in this account."),
                ("409", "conflict: the generation is already running or finished."),
                ("502", "upstream_error: the model's provider could not be reached to cancel its queued job; nothing changed.")
            ]))
    }}));
    paths.insert("/generations/{id}/webhook-deliveries".into(), json!({ "get": {
        "operationId": "list_webhook_deliveries", "summary": "The webhook deliveries of a generation, with every attempt", "tags": ["webhooks"],
        "security": [{ "bearer": [] }],
        "parameters": [generation_id],
        "responses": with_success("200", "The deliveries, oldest first.", schema_ref("WebhookDeliveryList"),
            authenticated_errors(&[("404", "not_found: no such generation in this account.")]))
    }}));
    paths.insert("/generations/{id}/webhook-deliveries/{delivery_id}/retry".into(), json!({ "post": {
        "operationId": "retry_webhook_delivery", "summary": "Send a webhook delivery again now", "tags": ["webhooks"],
        "security": [{ "bearer": [] }],
        "parameters": [generation_id, { "name": "delivery_id", "in": "path", "required": true, "schema": { "type": "string" } }],
        "responses": with_success("202", "The delivery, scheduled for now.", schema_ref("WebhookDelivery"),
            authenticated_errors(&[
                ("404", "not_found: no such generation or delivery in this account."),
                ("409", "conflict: the delivery is being attempted right now.")
            ]))
    }}));
    paths.insert("/account/webhook-secret/rotate".into(), json!({ "post": {
        "operationId": "rotate_webhook_secret", "summary": "Issue a new webhook signing secret; the old one keeps signing for 24 hours", "tags": ["webhooks"],
        "security": [{ "bearer": [] }],
        "responses": with_success("200", "The new secret, shown once.", schema_ref("WebhookSecret"),
            authenticated_errors(&[
                ("403", "forbidden: the request is authenticated by a dashboard session cookie; people rotate the secret on the dashboard's Webhooks page, where the account's owners decide who may and the change is audited.")
            ]))
    }}));
    paths.insert("/account".into(), json!({ "get": {
        "operationId": "get_account", "summary": "The caller's account, balance and limits", "tags": ["account"],
        "security": [{ "bearer": [] }],
        "responses": with_success("200", "The account.", schema_ref("Account"), authenticated_errors(&[]))
    }}));
    // Served only where Stripe is configured (docs/stripe.md); elsewhere
    // every call is answered 404, which the document says.
    paths.insert("/account/checkout".into(), json!({ "post": {
        "operationId": "create_checkout", "summary": "Start a Stripe Checkout to add credit to the account (only where the operator connected Stripe)", "tags": ["account"],
        "security": [{ "bearer": [] }],
        "parameters": [{ "name": "Idempotency-Key", "in": "header", "required": false,
            "description": "The same key answers the same session when the request is retried.",
            "schema": { "type": "string" } }],
        "requestBody": { "required": true, "content": { "application/json": { "schema": {
            "type": "object", "additionalProperties": false, "required": ["amount_usd"],
            "properties": {
                "amount_usd": { "type": "string", "pattern": "^[0-9]+(\\.[0-9]{1,2})?$", "examples": ["20.00"],
                    "description": "Whole cents of US dollars, within the deployment's minimum and maximum." }
            }
        }}}},
        "responses": with_success("201", "The session: send the customer to its url.", schema_ref("CheckoutSession"), authenticated_errors(&[
            ("400", "invalid_request: the amount is outside the allowed range or not in whole cents, or the body is not {\"amount_usd\": \"20.00\"}; param is amount_usd."),
            ("404", "not_found: this deployment does not sell credit through Stripe."),
            ("502", "upstream_error: Stripe could not create the session; retry with backoff.")
        ]))
    }}));
    paths.insert("/uploads".into(), json!({ "post": {
        "operationId": "create_upload", "summary": "Upload media (JPG, PNG, WebP, MP4, MOV, MP3, WAV) to obtain a URL for requests", "tags": ["uploads"],
        "security": [{ "bearer": [] }],
        "requestBody": { "required": true, "content": { "multipart/form-data": { "schema": {
            "type": "object", "required": ["file"],
            "properties": { "file": { "type": "string", "format": "binary", "description": "The type is decided from the content, not the declared type." } }
        }}}},
        "responses": with_success("201", "The upload.", schema_ref("Upload"), authenticated_errors(&[
            ("400", "invalid_request: not multipart, no `file` field, or not a supported media file; param is `file`."),
            ("413", "payload_too_large: the file is larger than the deployment's limit.")
        ]))
    }}));
    paths.insert("/uploads/initiate".into(), json!({ "post": {
        "operationId": "initiate_upload", "summary": "Presigned direct upload to the deployment's S3-compatible storage", "tags": ["uploads"],
        "security": [{ "bearer": [] }],
        "requestBody": { "required": false, "content": { "application/json": { "schema": {
            "type": "object", "additionalProperties": false,
            "properties": {
                "content_type": { "type": "string", "enum": ["image/jpeg", "image/png", "image/webp", "video/mp4", "video/quicktime", "audio/mpeg", "audio/wav"], "description": "Bound to the signature; the file must turn out to be of this type." },
                "size_bytes": { "type": "integer", "minimum": 1, "description": "Checked against the deployment's upload limit." }
            }
        }}}},
        "responses": with_success("201", "The pending upload and where to PUT its file.", schema_ref("DirectUpload"), authenticated_errors(&[
            ("400", "invalid_request: a bad content_type or size_bytes (size above the upload limit), or an unknown field; param names it."),
            ("501", "direct_upload_unavailable: presigned uploads are unavailable on this deployment (local-disk storage); use multipart/form-data.")
        ]))
    }}));
    paths.insert("/openapi.json".into(), json!({ "get": {
        "operationId": "get_openapi", "summary": "This document", "tags": ["meta"], "security": [],
        "responses": {
            "200": { "description": "OpenAPI 3.1 document.", "content": { "application/json": { "schema": { "type": "object" } } } },
            "304": { "description": "Not modified since the ETag sent in If-None-Match." },
            "429": public_rate_limited()
        }
    }}));

    // The operator API, under its own tag, scheme and server (admin/openapi.rs).
    // Its paths are written in full, so none may take a customer path's key.
    let origin = api_base.trim_end_matches("/api/v1");
    for (path, item) in super::admin::openapi::paths(origin) {
        let replaced = paths.insert(path.clone(), item);
        assert!(
            replaced.is_none(),
            "the operator path {path} hides a customer path"
        );
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
        "tags": [
            { "name": "generations" }, { "name": "catalog" }, { "name": "account" }, { "name": "webhooks" }, { "name": "uploads" }, { "name": "meta" },
            { "name": "operator", "description": "The operator API under /admin/v1, with the operator token; not for customers." }
        ],
        "paths": Value::Object(paths),
        "components": {
            "securitySchemes": {
                "bearer": { "type": "http", "scheme": "bearer", "description": "An API key: vg_live_…" },
                "operator_token": super::admin::openapi::security_scheme()
            },
            "schemas": Value::Object(component_schemas())
        }
    })
}

/// The route, with the document prepared: it depends only on the catalog and
/// the API base, so it is built and serialised once.
pub fn routes(catalog: &Catalog, api_base: &str) -> Router<AppState> {
    let prepared = PreparedJson::new(&document(catalog, api_base));
    Router::new().route(
        &super::api_path("/openapi.json"),
        get(move |request: Request| async move { prepared.respond(request.headers()) }),
    )
}

#[cfg(test)]
mod tests {
    use axum::response::IntoResponse;
    use vidgate_core::Micros;

    use super::*;
    use crate::http::ApiError;
    use crate::representation::{GenerationOutput, rfc3339, sample_generation};
    use crate::store::{Account, AccountLimits, Generation, StoredJson};

    /// What `value` has that its schema does not list, and what the schema
    /// requires that `value` lacks, at every level the schema describes
    /// (free-form objects, without `properties`, are not looked into).
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
        let mut problems = Vec::new();
        for variant in ["oneOf", "anyOf", "allOf"]
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

    fn problems_of(name: &str, value: &Value) -> Vec<String> {
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

    fn account() -> Account {
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
