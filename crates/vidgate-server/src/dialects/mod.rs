//! The other dialects vidgate speaks (issue 53): the requests and answers of
//! clients written for another service, translated to and from vidgate's
//! catalog inputs and generations. Nothing here does I/O: the HTTP layer
//! reads the request, calls a translation, submits through `submit.rs`
//! like `/api/v1/run`, and writes the translated answer. Each behaviour
//! names the client source or published document it follows.

pub mod mcp_tools;
pub mod openai_videos;
pub mod openrouter_videos;

use serde_json::{Map, Value};
use vidgate_core::Endpoint;
use vidgate_core::catalog::ParameterType;

/// A request a dialect refuses, in the dialect's own field names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub param: Option<String>,
    pub message: String,
}

impl Invalid {
    pub fn of(param: &str, message: impl Into<String>) -> Invalid {
        Invalid {
            param: Some(param.to_owned()),
            message: message.into(),
        }
    }
}

/// Form fields (`name=value` pairs, in order) as one JSON object of text
/// values, the bracket keys of nested values made nested again:
/// `input_reference[image_url]` becomes `{"input_reference": {"image_url":
/// …}}` and `tags[]` repeated becomes an array. This is how the Stainless
/// clients (openai-python's `_base_client._serialize_multipartform`, with
/// `array_format="brackets"`) flatten a JSON body into a form; values arrive
/// as text (`true`/`false` for booleans, `""` for null).
pub fn form_to_object(pairs: Vec<(String, String)>) -> Result<Map<String, Value>, Invalid> {
    let mut object = Map::new();
    for (name, value) in pairs {
        let (head, rest) = match name.find('[') {
            Some(at) => (&name[..at], Some(&name[at..])),
            None => (name.as_str(), None),
        };
        match rest {
            None => {
                object.insert(head.to_owned(), Value::String(value));
            }
            Some("[]") => {
                let entry = object
                    .entry(head.to_owned())
                    .or_insert_with(|| Value::Array(Vec::new()));
                match entry {
                    Value::Array(items) => items.push(Value::String(value)),
                    _ => return Err(Invalid::of(head, format!("{head} is sent twice."))),
                }
            }
            Some(bracketed) => {
                let key = bracketed
                    .strip_prefix('[')
                    .and_then(|inner| inner.strip_suffix(']'))
                    .filter(|inner| !inner.contains(['[', ']']))
                    .ok_or_else(|| {
                        Invalid::of(head, format!("{name} is not a field vidgate reads."))
                    })?;
                let entry = object
                    .entry(head.to_owned())
                    .or_insert_with(|| Value::Object(Map::new()));
                match entry {
                    Value::Object(fields) => {
                        fields.insert(key.to_owned(), Value::String(value));
                    }
                    _ => return Err(Invalid::of(head, format!("{head} is sent twice."))),
                }
            }
        }
    }
    Ok(object)
}

/// A form's text value as the JSON type the endpoint's parameter takes (a
/// JSON body's values are left as they are, for the validator to judge).
/// Text that does not read as that type stays text, so the validator's
/// message names the parameter and what it takes.
pub fn typed_as_catalog(endpoint: Endpoint<'_>, name: &str, value: Value) -> Value {
    let Some(parameter) = endpoint.parameter(name) else {
        return value;
    };
    let Value::String(text) = &value else {
        return value;
    };
    let typed = match parameter.parameter_type {
        ParameterType::Integer => text.trim().parse::<i64>().ok().map(Value::from),
        ParameterType::Boolean => match text.trim() {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        ParameterType::UriArray => Some(Value::Array(vec![value.clone()])),
        ParameterType::String | ParameterType::Uri => None,
    };
    typed.unwrap_or(value)
}

/// Whole seconds from a Unix time in milliseconds, as OpenAI's and
/// OpenRouter's objects give their times.
pub fn unix_seconds(millis: i64) -> i64 {
    millis.div_euclid(1000)
}
