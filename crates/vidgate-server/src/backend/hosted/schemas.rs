//! The providers' published input schemas, and what vidgate sends held
//! against them. A schema is the JSON Schema subset that fal's per-endpoint
//! OpenAPI documents and Replicate's model versions use (`type`, `enum`,
//! `required`, `properties`, `additionalProperties`, `items`, ranges,
//! `$ref`, `allOf`, `anyOf`, `oneOf`); `validate` lists every difference of
//! one input from it, each saying what vidgate would have to change. Each
//! provider finds the input schema in its own documents
//! (`providers/*/schema.rs`). The schema tests hold the backends files
//! against transcribed copies, and the live check (`schema_check.rs`)
//! against the providers' current documents.

use std::fmt;

use serde_json::Value;

/// Nested schemas are followed this deep at most: a document whose `$ref`s
/// loop is refused rather than followed forever.
const MAX_DEPTH: usize = 32;

/// One way an input differs from a provider's schema.
#[derive(Debug, Clone, PartialEq)]
pub enum Difference {
    /// A field vidgate sends that the schema does not have: renamed or
    /// removed at the provider.
    UnknownField { field: String },
    /// A field the schema requires that vidgate does not send.
    MissingRequired { field: String },
    /// A value of another type than the schema's.
    WrongType {
        field: String,
        expected: String,
        sent: Value,
    },
    /// A value outside the schema's enumeration.
    NotAllowed {
        field: String,
        sent: Value,
        allowed: Vec<Value>,
    },
    /// A number, a list or a text beyond the schema's bounds.
    OutOfRange {
        field: String,
        sent: Value,
        bound: String,
    },
    /// The schema itself could not be read (a `$ref` that points nowhere).
    Unreadable { field: String, reason: String },
}

impl Difference {
    /// The field it is about.
    pub fn field(&self) -> &str {
        match self {
            Difference::UnknownField { field }
            | Difference::MissingRequired { field }
            | Difference::WrongType { field, .. }
            | Difference::NotAllowed { field, .. }
            | Difference::OutOfRange { field, .. }
            | Difference::Unreadable { field, .. } => field,
        }
    }
}

impl fmt::Display for Difference {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Difference::UnknownField { field } => write!(
                formatter,
                "`{field}` is sent but the schema has no such field (renamed or removed)"
            ),
            Difference::MissingRequired { field } => write!(
                formatter,
                "`{field}` is required by the schema but not sent"
            ),
            Difference::WrongType {
                field,
                expected,
                sent,
            } => write!(formatter, "`{field}` takes {expected}, but {sent} is sent"),
            Difference::NotAllowed {
                field,
                sent,
                allowed,
            } => {
                let allowed: Vec<String> = allowed.iter().map(Value::to_string).collect();
                write!(
                    formatter,
                    "`{field}` does not take {sent} (it takes {})",
                    allowed.join(", ")
                )
            }
            Difference::OutOfRange { field, sent, bound } => {
                write!(formatter, "`{field}` = {sent} is out of range ({bound})")
            }
            Difference::Unreadable { field, reason } => {
                write!(
                    formatter,
                    "the schema of `{field}` cannot be read: {reason}"
                )
            }
        }
    }
}

/// A provider's input schema: the schema of the input object and the
/// document its `$ref`s point into.
#[derive(Debug, Clone)]
pub struct InputSchema {
    pub document: Value,
    pub schema: Value,
}

impl InputSchema {
    /// A schema that refers to nothing outside itself (the transcribed
    /// copies).
    pub fn standalone(schema: Value) -> InputSchema {
        InputSchema {
            document: schema.clone(),
            schema,
        }
    }

    /// Every difference of `input` from the schema.
    pub fn validate(&self, input: &Value) -> Vec<Difference> {
        let mut differences = Vec::new();
        check(&self.document, &self.schema, input, "", 0, &mut differences);
        differences
    }
}

/// Follows `$ref`s (`#/…` into `document`) to the schema they name.
pub(in crate::backend::hosted) fn resolve<'a>(
    document: &'a Value,
    schema: &'a Value,
    depth: usize,
) -> Result<&'a Value, String> {
    let Some(reference) = schema.get("$ref").and_then(Value::as_str) else {
        return Ok(schema);
    };
    if depth > MAX_DEPTH {
        return Err(format!("$ref {reference} nests too deep"));
    }
    let pointer = reference
        .strip_prefix('#')
        .ok_or_else(|| format!("$ref {reference} is not in the document"))?;
    let target = document
        .pointer(pointer)
        .ok_or_else(|| format!("$ref {reference} points nowhere"))?;
    resolve(document, target, depth + 1)
}

/// Adds every difference of `value` (at `field`) from `schema` to
/// `differences`: the schema's parts (`allOf`, `anyOf`, `oneOf`), then the
/// value's type, enumeration and bounds, then its members.
fn check(
    document: &Value,
    schema: &Value,
    value: &Value,
    field: &str,
    depth: usize,
    differences: &mut Vec<Difference>,
) {
    let unreadable = |reason: String| Difference::Unreadable {
        field: field.to_owned(),
        reason,
    };
    if depth > MAX_DEPTH {
        differences.push(unreadable("the schema nests too deep".into()));
        return;
    }
    let schema = match resolve(document, schema, depth) {
        Ok(schema) => schema,
        Err(reason) => {
            differences.push(unreadable(reason));
            return;
        }
    };
    // `true` (or an empty schema) takes anything; `false` nothing.
    if schema == &Value::Bool(false) {
        differences.push(Difference::UnknownField {
            field: field.to_owned(),
        });
        return;
    }
    let at = Position {
        document,
        field,
        depth,
    };
    check_parts(&at, schema, value, differences);
    if let Some(expected) = schema.get("type")
        && !type_matches(expected, value)
    {
        differences.push(Difference::WrongType {
            field: field.to_owned(),
            expected: type_name(expected),
            sent: value.clone(),
        });
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.iter().any(|allowed| same_value(allowed, value))
    {
        differences.push(Difference::NotAllowed {
            field: field.to_owned(),
            sent: value.clone(),
            allowed: allowed.clone(),
        });
    }
    if let Some(constant) = schema.get("const")
        && !same_value(constant, value)
    {
        differences.push(Difference::NotAllowed {
            field: field.to_owned(),
            sent: value.clone(),
            allowed: vec![constant.clone()],
        });
    }
    check_bounds(schema, value, field, differences);
    match value {
        Value::Object(object) => check_members(&at, schema, object, differences),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    let nested = format!("{field}[{index}]");
                    check(document, item_schema, item, &nested, depth + 1, differences);
                }
            }
        }
        _ => {}
    }
}

/// Where in a document a value is checked: the document its `$ref`s point
/// into, the field's path and how deep the check is.
struct Position<'a> {
    document: &'a Value,
    field: &'a str,
    depth: usize,
}

/// The differences of `value` from each part of an `allOf`, and from the
/// closest branch of an `anyOf` or `oneOf` when none takes it.
fn check_parts(
    at: &Position<'_>,
    schema: &Value,
    value: &Value,
    differences: &mut Vec<Difference>,
) {
    let (document, field, depth) = (at.document, at.field, at.depth);
    for part in schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        check(document, part, value, field, depth + 1, differences);
    }
    for key in ["anyOf", "oneOf"] {
        let Some(branches) = schema.get(key).and_then(Value::as_array) else {
            continue;
        };
        // Any branch that takes the value will do; otherwise the branch
        // closest to taking it says what is wrong.
        let mut closest: Option<Vec<Difference>> = None;
        for branch in branches {
            let mut found = Vec::new();
            check(document, branch, value, field, depth + 1, &mut found);
            if closest.as_ref().is_none_or(|best| found.len() < best.len()) {
                closest = Some(found);
            }
        }
        differences.extend(closest.unwrap_or_default());
    }
}

/// The differences of an object's members: required ones missing, each
/// present one against its property, and ones the schema does not list.
fn check_members(
    at: &Position<'_>,
    schema: &Value,
    object: &serde_json::Map<String, Value>,
    differences: &mut Vec<Difference>,
) {
    let (document, field, depth) = (at.document, at.field, at.depth);
    let properties = schema.get("properties").and_then(Value::as_object);
    for required in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !object.contains_key(required) {
            differences.push(Difference::MissingRequired {
                field: join(field, required),
            });
        }
    }
    for (name, item) in object {
        let nested = join(field, name);
        match properties.and_then(|properties| properties.get(name)) {
            Some(property) => {
                check(document, property, item, &nested, depth + 1, differences);
            }
            None => match schema.get("additionalProperties") {
                // Documents that list their fields and say nothing of
                // others are held to their list: a field the provider does
                // not know is at best ignored.
                None | Some(Value::Bool(false)) if properties.is_some() => {
                    differences.push(Difference::UnknownField { field: nested });
                }
                Some(additional @ Value::Object(_)) => {
                    check(document, additional, item, &nested, depth + 1, differences);
                }
                _ => {}
            },
        }
    }
}

fn check_bounds(schema: &Value, value: &Value, field: &str, differences: &mut Vec<Difference>) {
    let mut out_of_range = |bound: String| {
        differences.push(Difference::OutOfRange {
            field: field.to_owned(),
            sent: value.clone(),
            bound,
        });
    };
    if let Some(number) = value.as_f64() {
        let limit = |key: &str| schema.get(key).and_then(Value::as_f64);
        if let Some(minimum) = limit("minimum")
            && number < minimum
        {
            out_of_range(format!("minimum {minimum}"));
        }
        if let Some(maximum) = limit("maximum")
            && number > maximum
        {
            out_of_range(format!("maximum {maximum}"));
        }
        if let Some(minimum) = limit("exclusiveMinimum")
            && number <= minimum
        {
            out_of_range(format!("above {minimum}"));
        }
        if let Some(maximum) = limit("exclusiveMaximum")
            && number >= maximum
        {
            out_of_range(format!("below {maximum}"));
        }
    }
    let count = |key: &str| schema.get(key).and_then(Value::as_u64);
    if let Value::Array(items) = value {
        if let Some(most) = count("maxItems")
            && items.len() as u64 > most
        {
            out_of_range(format!("at most {most} items"));
        }
        if let Some(least) = count("minItems")
            && (items.len() as u64) < least
        {
            out_of_range(format!("at least {least} items"));
        }
    }
    if let Value::String(text) = value {
        let length = text.chars().count() as u64;
        if let Some(most) = count("maxLength")
            && length > most
        {
            out_of_range(format!("at most {most} characters"));
        }
        if let Some(least) = count("minLength")
            && length < least
        {
            out_of_range(format!("at least {least} characters"));
        }
    }
}

fn join(field: &str, name: &str) -> String {
    if field.is_empty() {
        name.to_owned()
    } else {
        format!("{field}.{name}")
    }
}

/// Enumerations compare numbers by value (`5` and `5.0` are the same).
fn same_value(left: &Value, right: &Value) -> bool {
    match (left.as_f64(), right.as_f64()) {
        (Some(left), Some(right)) => left == right,
        _ => left == right,
    }
}

fn type_matches(expected: &Value, value: &Value) -> bool {
    match expected {
        Value::String(name) => one_type_matches(name, value),
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .any(|name| one_type_matches(name, value)),
        _ => true,
    }
}

fn one_type_matches(name: &str, value: &Value) -> bool {
    match name {
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        // A type this check does not know takes anything.
        _ => true,
    }
}

fn type_name(expected: &Value) -> String {
    match expected {
        Value::String(name) => format!("a {name}"),
        Value::Array(names) => {
            let names: Vec<&str> = names.iter().filter_map(Value::as_str).collect();
            format!("one of {}", names.join(", "))
        }
        other => other.to_string(),
    }
}

/// A schema document larger than this is refused (fal's are tens of KB).
const MAX_SCHEMA_BYTES: usize = 8 * 1024 * 1024;

/// A provider's schema document read with `request`: its JSON, at most
/// `MAX_SCHEMA_BYTES`.
pub(in crate::backend::hosted) async fn get_json(
    request: reqwest::RequestBuilder,
) -> Result<Value, String> {
    let mut response = request
        .send()
        .await
        .map_err(|error| format!("the provider could not be reached: {error}"))?;
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Err(format!(
            "the target does not exist at the provider (it answered {status})"
        ));
    }
    if !status.is_success() {
        return Err(format!("the provider answered {status}"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| format!("the answer broke off: {error}"))?
    {
        if body.len() + chunk.len() > MAX_SCHEMA_BYTES {
            return Err(format!("the answer is over {MAX_SCHEMA_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|error| format!("the answer is not JSON: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn seedance() -> InputSchema {
        InputSchema::standalone(json!({
            "type": "object",
            "required": ["prompt"],
            "additionalProperties": false,
            "properties": {
                "prompt": { "type": "string", "maxLength": 20 },
                "duration": { "type": "string", "enum": ["auto", "4", "5"] },
                "seed": { "anyOf": [{ "type": "integer", "minimum": 0 }, { "type": "null" }] },
                "image_urls": { "type": "array", "items": { "type": "string" }, "maxItems": 2 }
            }
        }))
    }

    #[test]
    fn an_input_the_schema_takes_has_no_differences() {
        let input = json!({ "prompt": "a kite", "duration": "5", "seed": 7,
            "image_urls": ["https://a/1.png"] });
        assert_eq!(seedance().validate(&input), vec![]);
        assert_eq!(
            seedance().validate(&json!({ "prompt": "a kite", "seed": null })),
            vec![]
        );
    }

    #[test]
    fn every_kind_of_difference_is_named_with_its_field() {
        let input = json!({
            "duration": 6,
            "generate_sound": true,
            "seed": -1,
            "image_urls": ["https://a/1.png", 2, "https://a/3.png"],
        });
        let found = seedance().validate(&input);
        let shown: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert!(
            found.contains(&Difference::MissingRequired {
                field: "prompt".into()
            }),
            "{shown:?}"
        );
        assert!(
            found.contains(&Difference::UnknownField {
                field: "generate_sound".into()
            }),
            "{shown:?}"
        );
        assert!(
            found.contains(&Difference::WrongType {
                field: "duration".into(),
                expected: "a string".into(),
                sent: json!(6),
            }),
            "{shown:?}"
        );
        assert!(
            found.iter().any(|difference| matches!(difference,
            Difference::OutOfRange { field, .. } if field == "seed")),
            "{shown:?}"
        );
        assert!(
            found.iter().any(|difference| matches!(difference,
            Difference::OutOfRange { field, .. } if field == "image_urls")),
            "{shown:?}"
        );
        assert!(
            found
                .iter()
                .any(|difference| difference.field() == "image_urls[1]"),
            "{shown:?}"
        );
        let not_allowed = seedance().validate(&json!({ "prompt": "a", "duration": "15" }));
        assert_eq!(
            not_allowed,
            vec![Difference::NotAllowed {
                field: "duration".into(),
                sent: json!("15"),
                allowed: vec![json!("auto"), json!("4"), json!("5")],
            }]
        );
        assert_eq!(
            not_allowed[0].to_string(),
            "`duration` does not take \"15\" (it takes \"auto\", \"4\", \"5\")"
        );
    }

    #[test]
    fn a_reference_that_loops_is_unreadable() {
        let looping = InputSchema::standalone(json!({ "$ref": "#" }));
        assert!(matches!(
            looping.validate(&json!({}))[0],
            Difference::Unreadable { .. }
        ));
    }
}
