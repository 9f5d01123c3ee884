//! The operator API's part of `/openapi.json`, derived from its routes:
//! each handler has its `Operation` beside it, and `super::routes` pairs
//! every route with its handler and its `Operation`, so the router and the
//! document are made from one list and a route cannot be served without
//! being described. The operations are under the tag `operator` and the
//! security scheme `operator_token`, each path written in full
//! (`/admin/v1/…`) under a path-level `servers` entry naming the origin
//! rather than the document's `/api/v1`, so tools that read only the
//! customer API can leave them out by tag or by server. Written in full, an
//! operator path can never take the key of a customer path with the same
//! tail (`/generations`): a document's paths are one map.

use serde_json::{Map, Value, json};

/// What one operation of the operator API is, for the document.
pub struct Operation {
    pub id: &'static str,
    pub summary: &'static str,
    pub parameters: &'static [Parameter],
    /// The JSON body's fields, when it takes one.
    pub body: Option<&'static [Field]>,
    pub success: Success,
    /// The refusals besides 400 and 401, which every operation may answer.
    pub refusals: &'static [Refusal],
}

/// The answer of an operation that succeeds.
pub struct Success {
    pub status: &'static str,
    pub description: &'static str,
    /// Also answers `text/csv` (when the query asks for it).
    pub also_csv: bool,
}

/// A refusal an operation may answer: its status and what it means.
pub struct Refusal {
    pub status: &'static str,
    pub description: &'static str,
}

/// The refusal of an operation on an account or a model that is not there.
pub const NOT_FOUND: Refusal = Refusal {
    status: "404",
    description: "not_found: no such account or model.",
};

/// The refusal of a change to an account that was deleted.
pub const ACCOUNT_DELETED: Refusal = Refusal {
    status: "409",
    description: "conflict: the account was deleted.",
};

pub enum Parameter {
    /// The optional `X-Operator` header, naming who makes a change.
    Operator,
    /// A required segment of the path, e.g. `account_id`.
    Path(&'static str),
    Query {
        name: &'static str,
        description: Option<&'static str>,
        schema: Schema,
    },
    /// A required header.
    Header { name: &'static str, schema: Schema },
}

/// A field of a JSON body.
pub struct Field {
    pub name: &'static str,
    pub required: bool,
    pub schema: Schema,
}

/// The value a parameter or a field takes.
pub enum Schema {
    Text {
        min_length: Option<usize>,
        max_length: Option<usize>,
    },
    Integer {
        minimum: Option<i64>,
        maximum: Option<i64>,
        default: Option<i64>,
        description: Option<&'static str>,
    },
    Choice {
        values: &'static [&'static str],
        default: &'static str,
    },
}

impl Schema {
    /// A string without bounds.
    pub const TEXT: Schema = Schema::Text {
        min_length: None,
        max_length: None,
    };

    /// A string of 1 to `max_length` characters.
    pub const fn text_up_to(max_length: usize) -> Schema {
        Schema::Text {
            min_length: Some(1),
            max_length: Some(max_length),
        }
    }

    /// An integer from `minimum` to `maximum`.
    pub const fn integer(minimum: i64, maximum: i64) -> Schema {
        Schema::Integer {
            minimum: Some(minimum),
            maximum: Some(maximum),
            default: None,
            description: None,
        }
    }

    fn json(&self) -> Value {
        let mut schema = Map::new();
        let mut set = |key: &str, value: Option<Value>| {
            if let Some(value) = value {
                schema.insert(key.to_owned(), value);
            }
        };
        match self {
            Schema::Text {
                min_length,
                max_length,
            } => {
                set("type", Some(json!("string")));
                set("minLength", min_length.map(Value::from));
                set("maxLength", max_length.map(Value::from));
            }
            Schema::Integer {
                minimum,
                maximum,
                default,
                description,
            } => {
                set("type", Some(json!("integer")));
                set("minimum", minimum.map(Value::from));
                set("maximum", maximum.map(Value::from));
                set("default", default.map(Value::from));
                set("description", description.map(Value::from));
            }
            Schema::Choice { values, default } => {
                set("type", Some(json!("string")));
                set("enum", Some(json!(values)));
                set("default", Some(json!(default)));
            }
        }
        Value::Object(schema)
    }
}

impl Parameter {
    fn json(&self) -> Value {
        match self {
            Parameter::Operator => json!({
                "name": "X-Operator", "in": "header", "required": false,
                "description": "Who makes the change, for the audit log (1 to 100 printable characters).",
                "schema": { "type": "string" } }),
            Parameter::Path(name) => json!({
                "name": name, "in": "path", "required": true, "schema": { "type": "string" } }),
            Parameter::Query {
                name,
                description,
                schema,
            } => {
                let mut parameter = json!({
                    "name": name, "in": "query", "required": false, "schema": schema.json() });
                if let Some(description) = description {
                    parameter["description"] = json!(description);
                }
                parameter
            }
            Parameter::Header { name, schema } => json!({
                "name": name, "in": "header", "required": true, "schema": schema.json() }),
        }
    }
}

fn error(description: &str) -> Value {
    json!({ "description": description, "content": { "application/json": {
        "schema": { "$ref": "#/components/schemas/Error" } } } })
}

impl Operation {
    fn json(&self) -> Value {
        let mut success = json!({ "description": self.success.description, "content": {
            "application/json": { "schema": { "type": "object" } } } });
        if self.success.also_csv {
            success["content"]["text/csv"] = json!({ "schema": { "type": "string" } });
        }
        let mut responses = Map::new();
        responses.insert(self.success.status.into(), success);
        responses.insert(
            "401".into(),
            error("unauthorized: no operator token is configured, or this is not it."),
        );
        responses.insert(
            "400".into(),
            error("invalid_request: a bad parameter or body; param names it."),
        );
        for refusal in self.refusals {
            responses.insert(refusal.status.into(), error(refusal.description));
        }
        let parameters: Vec<Value> = self.parameters.iter().map(Parameter::json).collect();
        let mut operation = json!({
            "operationId": self.id, "summary": self.summary, "tags": ["operator"],
            "security": [{ "operator_token": [] }],
            "parameters": parameters,
            "responses": responses,
        });
        if let Some(fields) = self.body {
            let properties: Map<String, Value> = fields
                .iter()
                .map(|field| (field.name.to_owned(), field.schema.json()))
                .collect();
            let mut schema = json!({ "type": "object", "additionalProperties": false,
                "properties": properties });
            let required: Vec<&str> = fields
                .iter()
                .filter(|field| field.required)
                .map(|field| field.name)
                .collect();
            if !required.is_empty() {
                schema["required"] = json!(required);
            }
            operation["requestBody"] = json!({ "required": true, "content": {
                "application/json": { "schema": schema } } });
        }
        operation
    }
}

/// The security scheme the operations name.
pub fn security_scheme() -> Value {
    json!({ "type": "http", "scheme": "bearer",
        "description": "The operator token (--admin-token-file or VIDGATE_ADMIN_TOKEN)." })
}

/// The operator API's path items, each `/admin/v1/…` from `origin`, one per
/// path of its routes with an operation per method.
pub fn paths(origin: &str) -> Vec<(String, Value)> {
    let mut items: Map<String, Value> = Map::new();
    for route in super::routes() {
        let item = items
            .entry(format!("/admin/v1{}", route.path))
            .or_insert_with(|| json!({ "servers": [{ "url": origin }] }));
        item[route.method.as_str().to_lowercase()] = route.operation.json();
    }
    items.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::Parameter;

    /// A described route names each segment of its path as a path
    /// parameter, in order, and has an operation id of its own.
    #[test]
    fn every_route_describes_its_path_and_its_own_operation() {
        let mut operation_ids = HashSet::new();
        for route in super::super::routes() {
            let where_ = format!("{} {}", route.method, route.path);
            assert!(
                operation_ids.insert(route.operation.id),
                "{where_}: operation id {} is used twice",
                route.operation.id
            );
            let segments: Vec<&str> = route
                .path
                .split('/')
                .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
                .collect();
            let described: Vec<&str> = route
                .operation
                .parameters
                .iter()
                .filter_map(|parameter| match parameter {
                    Parameter::Path(name) => Some(*name),
                    _ => None,
                })
                .collect();
            assert_eq!(segments, described, "{where_}");
        }
    }
}
