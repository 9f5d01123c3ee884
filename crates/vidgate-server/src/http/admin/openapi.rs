//! The operator API's part of `/openapi.json`: its operations under the tag
//! `operator` and the security scheme `operator_token`, each path written
//! in full (`/admin/v1/…`) under a path-level `servers` entry naming the
//! origin rather than the document's `/api/v1`, so tools that read only the
//! customer API can leave them out by tag or by server. Written in full, an
//! operator path can never take the key of a customer path with the same
//! tail (`/generations`): a document's paths are one map.

use serde_json::{Map, Value, json};

fn error(description: &str) -> Value {
    json!({ "description": description, "content": { "application/json": {
        "schema": { "$ref": "#/components/schemas/Error" } } } })
}

fn ok(status: &str, description: &str) -> Value {
    let mut responses = Map::new();
    responses.insert(
        status.into(),
        json!({ "description": description, "content": {
        "application/json": { "schema": { "type": "object" } } } }),
    );
    responses.insert(
        "401".into(),
        error("unauthorized: no operator token is configured, or this is not it."),
    );
    responses.insert(
        "400".into(),
        error("invalid_request: a bad parameter or body; param names it."),
    );
    Value::Object(responses)
}

fn operation(operation_id: &str, summary: &str, responses: Value) -> Value {
    json!({
        "operationId": operation_id, "summary": summary, "tags": ["operator"],
        "security": [{ "operator_token": [] }],
        "parameters": [{ "name": "X-Operator", "in": "header", "required": false,
            "description": "Who makes the change, for the audit log (1 to 100 printable characters).",
            "schema": { "type": "string" } }],
        "responses": responses
    })
}

fn with_not_found(mut responses: Value) -> Value {
    responses["404"] = error("not_found: no such account or model.");
    responses
}

/// The security scheme the operations name.
pub fn security_scheme() -> Value {
    json!({ "type": "http", "scheme": "bearer",
        "description": "The operator token (--admin-token-file or VIDGATE_ADMIN_TOKEN)." })
}

/// The operator API's path items, each `/admin/v1/…` from `origin`.
pub fn paths(origin: &str) -> Vec<(String, Value)> {
    let servers = json!([{ "url": origin }]);
    let page = |name: &str, description: &str| {
        json!({ "name": name, "in": "query", "required": false, "description": description,
            "schema": { "type": "string" } })
    };
    let limit = json!({ "name": "limit", "in": "query", "required": false,
        "schema": { "type": "integer", "minimum": 1, "maximum": 500, "default": 50 } });
    let account_id = json!({ "name": "account_id", "in": "path", "required": true,
        "schema": { "type": "string" } });
    let model = json!([
        { "name": "vendor", "in": "path", "required": true, "schema": { "type": "string" } },
        { "name": "model", "in": "path", "required": true, "schema": { "type": "string" } }
    ]);

    let mut list_accounts = operation(
        "operator_list_accounts",
        "Every account, in id order",
        ok("200", "A page of accounts and `next_after`."),
    );
    list_accounts["parameters"] = json!([
        page("after", "An account id: the page starts after it."),
        limit
    ]);
    let mut create_account = operation(
        "operator_create_account",
        "Create an account (no credit) with its first API key, shown once",
        ok("201", "The account, its API key and its webhook secret."),
    );
    create_account["requestBody"] = json!({ "required": true, "content": { "application/json": {
        "schema": { "type": "object", "additionalProperties": false, "required": ["name"],
            "properties": { "name": { "type": "string", "minLength": 1, "maxLength": 200 } } } } } });
    let mut show_account = operation(
        "operator_get_account",
        "One account",
        with_not_found(ok("200", "The account.")),
    );
    show_account["parameters"]
        .as_array_mut()
        .expect("parameters")
        .push(account_id.clone());
    let mut delete_account = operation(
        "operator_delete_account",
        "Delete an account's media and personal data; the tombstone keeps its money figures",
        with_not_found(ok(
            "200",
            "The tombstone (deleted_at set), also when it was deleted before.",
        )),
    );
    delete_account["responses"]["409"] =
        error("conflict: generations of the account are queued or running; cancel them or wait.");
    delete_account["parameters"]
        .as_array_mut()
        .expect("parameters")
        .push(account_id.clone());
    let mut credit = operation(
        "operator_credit_account",
        "Add credit once per Idempotency-Key (a payment system's top-up)",
        with_not_found(ok(
            "201",
            "Applied. A repeated key for the same account and amount answers 200 with the first adjustment.",
        )),
    );
    credit["responses"]["409"] = error(
        "conflict: the Idempotency-Key was used for another account, kind or amount, or the account was deleted.",
    );
    credit["parameters"]
        .as_array_mut()
        .expect("parameters")
        .extend([
            account_id,
            json!({ "name": "Idempotency-Key", "in": "header", "required": true,
                "schema": { "type": "string", "minLength": 1, "maxLength": 255 } }),
        ]);
    credit["requestBody"] = json!({ "required": true, "content": { "application/json": {
        "schema": { "type": "object", "additionalProperties": false,
            "required": ["amount_micros", "reason"],
            "properties": {
                "amount_micros": { "type": "integer", "minimum": 1, "maximum": 1_000_000_000_000i64,
                    "description": "Exact integer micro-dollars." },
                "reason": { "type": "string", "minLength": 1, "maxLength": 500 }
            } } } } });
    let mut list_generations = operation(
        "operator_list_generations",
        "Generations across accounts, newest first, with filters",
        ok(
            "200",
            "A page of Generation records, each with its account_id, as the public list answers.",
        ),
    );
    list_generations["parameters"] = json!([
        page("account_id", "Only this account's generations."),
        page("status", "queued, running, succeeded, failed or canceled."),
        page("model", "A model id, e.g. vendor_1/model_1."),
        page("created_from", "RFC 3339: created at or after this time."),
        page("created_until", "RFC 3339: created before this time."),
        page("cursor", "next_cursor of the previous page."),
        json!({ "name": "limit", "in": "query", "required": false,
            "schema": { "type": "integer", "minimum": 1, "maximum": 100, "default": 20 } })
    ]);
    // A debit takes the same parameters and body, and may find too little.
    let mut debit = credit.clone();
    debit["operationId"] = json!("operator_debit_account");
    debit["summary"] = json!(
        "Take credit back once per Idempotency-Key (a chargeback, a correction), never below a zero balance"
    );
    debit["responses"]["402"] =
        error("insufficient_balance: the debit is larger than the balance; nothing was taken.");
    let model_operation = |operation_id: &str, summary: &str| {
        let mut built = operation(
            operation_id,
            summary,
            with_not_found(ok("200", "The model's id and whether it is paused.")),
        );
        built["parameters"]
            .as_array_mut()
            .expect("parameters")
            .extend(model.as_array().expect("model parameters").iter().cloned());
        built
    };
    let mut audit_log = operation(
        "operator_audit_log",
        "Every change made through the operator API, newest first",
        ok("200", "A page of audit entries and `next_before`."),
    );
    audit_log["parameters"] = json!([
        { "name": "before", "in": "query", "required": false,
            "description": "An entry id: the page starts before it.", "schema": { "type": "integer" } },
        limit
    ]);

    let with_account = |mut built: Value| {
        built["parameters"]
            .as_array_mut()
            .expect("parameters")
            .push(
                json!({ "name": "account_id", "in": "path", "required": true,
                "schema": { "type": "string" } }),
            );
        built
    };
    let body = |schema: Value| json!({ "required": true, "content": { "application/json": { "schema": schema } } });
    let mut limits = with_account(operation(
        "operator_set_limits",
        "Change an account's limits; figures left out stay as they are",
        with_not_found(ok("200", "The account.")),
    ));
    limits["responses"]["409"] = error("conflict: the account was deleted.");
    limits["requestBody"] = body(
        json!({ "type": "object", "additionalProperties": false, "properties": {
        "requests_per_second": { "type": "integer", "minimum": 1, "maximum": 10000 },
        "burst": { "type": "integer", "minimum": 1, "maximum": 10000 },
        "max_concurrent_generations": { "type": "integer", "minimum": 0, "maximum": 10000 } } }),
    );
    let mut create_key = with_account(operation(
        "operator_create_key",
        "Create an API key for an account (the secret is shown once)",
        with_not_found(ok("201", "The key's id and secret.")),
    ));
    create_key["responses"]["409"] = error("conflict: the account was deleted.");
    create_key["requestBody"] = body(json!({ "type": "object", "additionalProperties": false,
        "properties": { "name": { "type": "string", "minLength": 1, "maxLength": 100 } } }));
    let mut create_user = with_account(operation(
        "operator_create_user",
        "Create a dashboard user of an account, with a one-time password",
        with_not_found(ok("201", "The user and its one-time password.")),
    ));
    create_user["responses"]["409"] =
        error("conflict: a user with this email exists, or the account was deleted.");
    create_user["requestBody"] = body(json!({ "type": "object", "additionalProperties": false,
        "required": ["email"], "properties": { "email": { "type": "string" } } }));
    let mut usage = with_account(operation(
        "operator_usage",
        "Money an account spent per UTC day (JSON, or CSV with format=csv)",
        with_not_found(ok("200", "The days with spend.")),
    ));
    usage["responses"]["200"]["content"]["text/csv"] = json!({ "schema": { "type": "string" } });
    usage["parameters"]
        .as_array_mut()
        .expect("parameters")
        .extend([
            json!({ "name": "days", "in": "query", "required": false,
            "schema": { "type": "integer", "minimum": 1, "maximum": 366, "default": 30 } }),
            json!({ "name": "format", "in": "query", "required": false,
            "schema": { "type": "string", "enum": ["json", "csv"], "default": "json" } }),
        ]);
    let mut revoke_key = operation(
        "operator_revoke_key",
        "Revoke an API key; it is refused from then on",
        with_not_found(ok("200", "The key's id, revoked.")),
    );
    revoke_key["parameters"]
        .as_array_mut()
        .expect("parameters")
        .push(json!({
        "name": "key_id", "in": "path", "required": true, "schema": { "type": "string" } }));
    let mut key_limits = operation(
        "operator_set_key_limits",
        "Set an API key's spend limit per UTC day, per UTC month or in total; a null amount removes it",
        with_not_found(ok("200", "The key's id and its limit.")),
    );
    key_limits["parameters"] = revoke_key["parameters"].clone();
    key_limits["requestBody"] = body(json!({ "type": "object", "additionalProperties": false,
        "properties": {
            "spend_limit_usd": { "type": ["string", "null"], "examples": ["1.00"] },
            "spend_limit_period": { "type": "string", "enum": ["day", "month", "total"] } } }));

    let items: Vec<(&str, Value)> = vec![
        (
            "/accounts/{account_id}/limits",
            json!({ "servers": servers, "post": limits }),
        ),
        (
            "/accounts/{account_id}/keys",
            json!({ "servers": servers, "post": create_key }),
        ),
        (
            "/accounts/{account_id}/users",
            json!({ "servers": servers, "post": create_user }),
        ),
        (
            "/accounts/{account_id}/usage",
            json!({ "servers": servers, "get": usage }),
        ),
        (
            "/keys/{key_id}/revoke",
            json!({ "servers": servers, "post": revoke_key }),
        ),
        (
            "/keys/{key_id}/limits",
            json!({ "servers": servers, "post": key_limits }),
        ),
        (
            "/accounts",
            json!({ "servers": servers, "get": list_accounts, "post": create_account }),
        ),
        (
            "/accounts/{account_id}",
            json!({ "servers": servers, "get": show_account, "delete": delete_account }),
        ),
        (
            "/accounts/{account_id}/credit",
            json!({ "servers": servers, "post": credit }),
        ),
        (
            "/accounts/{account_id}/debit",
            json!({ "servers": servers, "post": debit }),
        ),
        (
            "/models/{vendor}/{model}/pause",
            json!({ "servers": servers, "post": model_operation(
                "operator_pause_model", "Stop accepting new generations for a model (submits get 503)") }),
        ),
        (
            "/models/{vendor}/{model}/resume",
            json!({ "servers": servers, "post": model_operation(
                "operator_resume_model", "Accept new generations for a model again") }),
        ),
        (
            "/generations",
            json!({ "servers": servers, "get": list_generations }),
        ),
        (
            "/audit-log",
            json!({ "servers": servers, "get": audit_log }),
        ),
    ];
    items
        .into_iter()
        .map(|(path, item)| (format!("/admin/v1{path}"), item))
        .collect()
}
