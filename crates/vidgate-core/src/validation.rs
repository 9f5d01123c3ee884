//! Request validation: every rule of SPEC.md section 4 that needs no media
//! download, driven by the catalog's parameter definitions. The result is the
//! accepted input with defaults filled in, which is both what a generation
//! echoes back as `input` and what pricing reads.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::catalog::{Endpoint, Parameter, ParameterType};

/// Why a body is being validated. A quote prices whatever is present, so it
/// requires nothing; a submit must carry every required field.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Purpose {
    Submit,
    Quote,
}

/// A request the service rejects with 400 `invalid_request`. `param` names
/// the offending field, when one field is to blame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InvalidRequest {
    pub param: Option<String>,
    pub message: String,
}

impl InvalidRequest {
    pub fn new(param: Option<&str>, message: impl Into<String>) -> InvalidRequest {
        InvalidRequest {
            param: param.map(str::to_owned),
            message: message.into(),
        }
    }

    fn about(param: &str, message: impl Into<String>) -> InvalidRequest {
        InvalidRequest::new(Some(param), message)
    }
}

/// An accepted request body with defaults filled in. Keys are inserted in
/// catalog order, so the echo is stable for a given catalog.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ValidatedInput {
    fields: Map<String, Value>,
}

impl ValidatedInput {
    /// The echo of the accepted input, defaults included.
    pub fn to_json(&self) -> Value {
        Value::Object(self.fields.clone())
    }

    /// Re-reads an input the service stored itself, so it is trusted and not
    /// validated again; anything but an object reads as an empty input.
    pub fn from_stored_json(value: Value) -> ValidatedInput {
        match value {
            Value::Object(fields) => ValidatedInput { fields },
            _ => ValidatedInput::default(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields.get(name)
    }

    fn text(&self, name: &str) -> Option<&str> {
        self.fields.get(name).and_then(Value::as_str)
    }

    fn texts(&self, name: &str) -> Vec<&str> {
        match self.fields.get(name) {
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        }
    }

    /// The prompt, or an empty string for a quote that carried none.
    pub fn prompt(&self) -> &str {
        self.text("prompt").unwrap_or_default()
    }

    pub fn negative_prompt(&self) -> Option<&str> {
        self.text("negative_prompt")
    }

    /// The requested duration in seconds; every mode of a consistent catalog
    /// has a duration default, so zero only appears for a foreign input.
    pub fn duration_s(&self) -> u32 {
        self.fields
            .get("duration")
            .and_then(Value::as_u64)
            .and_then(|seconds| u32::try_from(seconds).ok())
            .unwrap_or(0)
    }

    pub fn resolution(&self) -> Option<&str> {
        self.text("resolution")
    }

    pub fn aspect_ratio(&self) -> Option<&str> {
        self.text("aspect_ratio")
    }

    /// Whether audio is generated. Modes without the parameter produce none.
    pub fn generate_audio(&self) -> bool {
        self.fields
            .get("generate_audio")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    pub fn seed(&self) -> Option<u64> {
        self.fields.get("seed").and_then(Value::as_u64)
    }

    pub fn webhook_url(&self) -> Option<&str> {
        self.text("webhook_url")
    }

    pub fn image_url(&self) -> Option<&str> {
        self.text("image_url")
    }

    pub fn end_image_url(&self) -> Option<&str> {
        self.text("end_image_url")
    }

    pub fn reference_image_urls(&self) -> Vec<&str> {
        self.texts("reference_image_urls")
    }

    pub fn reference_video_urls(&self) -> Vec<&str> {
        self.texts("reference_video_urls")
    }

    pub fn reference_audio_urls(&self) -> Vec<&str> {
        self.texts("reference_audio_urls")
    }
}

pub(crate) fn validate_body(
    endpoint: Endpoint<'_>,
    body: &[u8],
    purpose: Purpose,
) -> Result<ValidatedInput, InvalidRequest> {
    let value: Value = serde_json::from_slice(body).map_err(|error| {
        InvalidRequest::new(None, format!("the request body is not valid JSON: {error}"))
    })?;
    validate_value(endpoint, &value, purpose)
}

pub(crate) fn validate_value(
    endpoint: Endpoint<'_>,
    body: &Value,
    purpose: Purpose,
) -> Result<ValidatedInput, InvalidRequest> {
    let Value::Object(body) = body else {
        return Err(InvalidRequest::new(
            None,
            format!(
                "the request body must be a JSON object, not {}",
                describe_type(body)
            ),
        ));
    };
    for name in body.keys() {
        if endpoint.parameter(name).is_none() {
            return Err(not_accepted(endpoint, name));
        }
    }
    let mut fields = Map::new();
    for parameter in endpoint.parameters() {
        let required = purpose == Purpose::Submit && parameter.required_in(endpoint.mode);
        // JSON null stands for an omitted optional field.
        match body.get(&parameter.name).filter(|value| !value.is_null()) {
            None if required => {
                return Err(InvalidRequest::about(
                    &parameter.name,
                    format!("{} is required", parameter.name),
                ));
            }
            None => {
                if let Some(default) = &parameter.default {
                    fields.insert(parameter.name.clone(), default.clone());
                }
            }
            Some(value) => {
                let accepted = check_value(parameter, value)?;
                if required && accepted.as_array().is_some_and(Vec::is_empty) {
                    return Err(InvalidRequest::about(
                        &parameter.name,
                        format!(
                            "{} is required and must hold at least one item",
                            parameter.name
                        ),
                    ));
                }
                fields.insert(parameter.name.clone(), accepted);
            }
        }
    }
    let input = ValidatedInput { fields };
    check_requires_any_of(endpoint, &input)?;
    check_prompt_mentions(endpoint, &input)?;
    Ok(input)
}

fn not_accepted(endpoint: Endpoint<'_>, name: &str) -> InvalidRequest {
    let message = match endpoint.model.parameter(name) {
        Some(parameter) => {
            let modes: Vec<&str> = parameter.modes.iter().map(|mode| mode.as_str()).collect();
            format!(
                "{name} is not accepted in {} mode of {}; it is only accepted in {}",
                endpoint.mode,
                endpoint.model.id,
                modes.join(", ")
            )
        }
        None => {
            let accepted: Vec<&str> = endpoint
                .parameters()
                .map(|parameter| parameter.name.as_str())
                .collect();
            format!(
                "unknown parameter {name}; {} accepts {}",
                endpoint.id(),
                accepted.join(", ")
            )
        }
    };
    InvalidRequest::about(name, message)
}

/// Checks one present, non-null value against its parameter definition and
/// returns it normalised (integers written as `5.0` become `5`). The catalog
/// also uses this to check its own defaults.
pub(crate) fn check_value(parameter: &Parameter, value: &Value) -> Result<Value, InvalidRequest> {
    let name = parameter.name.as_str();
    match parameter.parameter_type {
        ParameterType::String => {
            let Some(text) = value.as_str() else {
                return Err(wrong_type(name, "a string", value));
            };
            check_length(parameter, text)?;
            check_allowed(parameter, value)?;
            Ok(value.clone())
        }
        ParameterType::Integer => {
            let number = integer(parameter, value)?;
            let out_of_range = parameter.minimum.is_some_and(|minimum| number < minimum)
                || parameter.maximum.is_some_and(|maximum| number > maximum);
            if out_of_range {
                return Err(InvalidRequest::about(
                    name,
                    format!("{name} must be {}; got {number}", range_text(parameter)),
                ));
            }
            let normalised = Value::from(number);
            check_allowed(parameter, &normalised)?;
            Ok(normalised)
        }
        ParameterType::Boolean => match value {
            Value::Bool(_) => Ok(value.clone()),
            _ => Err(wrong_type(name, "true or false", value)),
        },
        ParameterType::Uri => {
            let Some(text) = value.as_str() else {
                return Err(wrong_type(name, "a URL string", value));
            };
            check_uri(text, parameter.reject_credentials)
                .map_err(|problem| InvalidRequest::about(name, format!("{name} {problem}")))?;
            Ok(value.clone())
        }
        ParameterType::UriArray => {
            let Some(items) = value.as_array() else {
                return Err(wrong_type(name, "an array of URL strings", value));
            };
            if let Some(max_items) = parameter.max_items
                && items.len() > max_items
            {
                return Err(InvalidRequest::about(
                    name,
                    format!(
                        "{name} may hold at most {max_items} items; got {}",
                        items.len()
                    ),
                ));
            }
            for (index, item) in items.iter().enumerate() {
                let Some(text) = item.as_str() else {
                    return Err(InvalidRequest::about(
                        name,
                        format!(
                            "{name}[{index}] must be a URL string, not {}",
                            describe_type(item)
                        ),
                    ));
                };
                check_uri(text, parameter.reject_credentials).map_err(|problem| {
                    InvalidRequest::about(name, format!("{name}[{index}] {problem}"))
                })?;
            }
            Ok(value.clone())
        }
    }
}

/// Reads a JSON integer. A number with a zero fraction such as `5.0` counts
/// as that integer, since many JSON encoders write every number as a float;
/// `5.5` and the string `"5"` do not.
fn integer(parameter: &Parameter, value: &Value) -> Result<i64, InvalidRequest> {
    let name = parameter.name.as_str();
    let Value::Number(number) = value else {
        return Err(wrong_type(name, "an integer", value));
    };
    if let Some(integer) = number.as_i64() {
        return Ok(integer);
    }
    let is_whole =
        number.as_u64().is_some() || number.as_f64().is_some_and(|float| float.fract() == 0.0);
    if !is_whole {
        return Err(InvalidRequest::about(
            name,
            format!("{name} must be a whole number; got {number}"),
        ));
    }
    // Whole floats within i64 convert exactly; `as` saturates the rest,
    // which the range check below (or the message here) then rejects.
    let float = number.as_f64().unwrap_or(f64::MAX);
    if float.abs() < 9.0e18 {
        return Ok(float as i64);
    }
    Err(InvalidRequest::about(
        name,
        format!("{name} must be {}; got {number}", range_text(parameter)),
    ))
}

fn range_text(parameter: &Parameter) -> String {
    match (parameter.minimum, parameter.maximum) {
        (Some(minimum), Some(maximum)) => format!("an integer from {minimum} to {maximum}"),
        (Some(minimum), None) => format!("an integer of at least {minimum}"),
        (None, Some(maximum)) => format!("an integer of at most {maximum}"),
        (None, None) => "an integer that fits in 64 bits".to_owned(),
    }
}

fn check_length(parameter: &Parameter, text: &str) -> Result<(), InvalidRequest> {
    let name = parameter.name.as_str();
    let length = text.chars().count();
    if let Some(min_length) = parameter.min_length
        && length < min_length
    {
        let message = if min_length == 1 {
            format!("{name} must not be empty")
        } else {
            format!("{name} must be at least {min_length} characters long; got {length}")
        };
        return Err(InvalidRequest::about(name, message));
    }
    if let Some(max_length) = parameter.max_length
        && length > max_length
    {
        return Err(InvalidRequest::about(
            name,
            format!("{name} must be at most {max_length} characters long; got {length}"),
        ));
    }
    Ok(())
}

fn check_allowed(parameter: &Parameter, value: &Value) -> Result<(), InvalidRequest> {
    let Some(allowed) = &parameter.allowed_values else {
        return Ok(());
    };
    if allowed.contains(value) {
        return Ok(());
    }
    let listed: Vec<String> = allowed.iter().map(display_value).collect();
    let name = parameter.name.as_str();
    Err(InvalidRequest::about(
        name,
        format!(
            "{name} must be one of {}; got {}",
            listed.join(", "),
            display_value(value)
        ),
    ))
}

/// Allowed values are listed bare (`16:9`, `8`) so the message reads well.
fn display_value(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Only absolute http and https URLs are accepted, written out in full: the
/// `url` crate alone would also accept `http:example.com` or surrounding
/// spaces, which it silently repairs. The returned problem completes a
/// sentence that starts with the field name.
fn check_uri(text: &str, reject_credentials: bool) -> Result<(), String> {
    if text
        .chars()
        .any(|character| character.is_whitespace() || character.is_control())
    {
        return Err("must be a URL without spaces or control characters".to_owned());
    }
    let scheme_end = text.find("://").unwrap_or(0);
    let scheme = text[..scheme_end].to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(format!(
            "must be an absolute http or https URL; got {text:?}"
        ));
    }
    let url = url::Url::parse(text)
        .map_err(|error| format!("is not a valid URL ({error}); got {text:?}"))?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("must name a host; got {text:?}"));
    }
    if reject_credentials && (!url.username().is_empty() || url.password().is_some()) {
        return Err("must not contain a user name or password".to_owned());
    }
    Ok(())
}

fn wrong_type(name: &str, expected: &str, value: &Value) -> InvalidRequest {
    InvalidRequest::about(
        name,
        format!("{name} must be {expected}, not {}", describe_type(value)),
    )
}

fn describe_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(number) if number.is_f64() => "a number with a fraction",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn check_requires_any_of(
    endpoint: Endpoint<'_>,
    input: &ValidatedInput,
) -> Result<(), InvalidRequest> {
    let is_non_empty_list = |name: &str| {
        input
            .get(name)
            .and_then(Value::as_array)
            .is_some_and(|items| !items.is_empty())
    };
    for parameter in endpoint.parameters() {
        if parameter.requires_any_of.is_empty() || !is_non_empty_list(&parameter.name) {
            continue;
        }
        if !parameter
            .requires_any_of
            .iter()
            .any(|other| is_non_empty_list(other))
        {
            return Err(InvalidRequest::about(
                &parameter.name,
                format!(
                    "{} needs at least one item in {}",
                    parameter.name,
                    parameter.requires_any_of.join(" or ")
                ),
            ));
        }
    }
    Ok(())
}

/// The reference lists a prompt can point into, with the word a mention
/// starts with and the noun for messages.
const MENTION_TARGETS: [(&str, &str, &str); 3] = [
    ("Image", "reference_image_urls", "reference images"),
    ("Video", "reference_video_urls", "reference videos"),
    ("Audio", "reference_audio_urls", "reference audio files"),
];

/// Every `@Image<n>`, `@Video<n>` and `@Audio<n>` in the prompt must point
/// at a supplied item: n counts from 1 in list order. A mode without the
/// list has nothing to point at.
fn check_prompt_mentions(
    endpoint: Endpoint<'_>,
    input: &ValidatedInput,
) -> Result<(), InvalidRequest> {
    let Some(prompt) = input.get("prompt").and_then(Value::as_str) else {
        return Ok(());
    };
    for (at_index, _) in prompt.match_indices('@') {
        let after_at = &prompt[at_index + 1..];
        for (word, list_name, noun) in MENTION_TARGETS {
            let Some(after_word) = after_at.strip_prefix(word) else {
                continue;
            };
            let digits_length = after_word.bytes().take_while(u8::is_ascii_digit).count();
            if digits_length == 0 {
                continue;
            }
            let digits = &after_word[..digits_length];
            let mention = format!("@{word}{digits}");
            // A number too long for u64 points past any list.
            let number: u64 = digits.parse().unwrap_or(u64::MAX);
            let supplied = input
                .get(list_name)
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let problem = if number == 0 {
                Some(format!(
                    "prompt mentions {mention}, but references are numbered from 1"
                ))
            } else if endpoint.parameter(list_name).is_none() {
                Some(format!(
                    "prompt mentions {mention}, but {} takes no {noun}",
                    endpoint.id()
                ))
            } else if number > supplied as u64 {
                Some(format!(
                    "prompt mentions {mention}, but only {supplied} {noun} were supplied in {list_name}"
                ))
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(InvalidRequest::about("prompt", problem));
            }
        }
    }
    Ok(())
}
