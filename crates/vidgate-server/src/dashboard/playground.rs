//! The playground: a form built from an endpoint's input schema, a live
//! quote, and a run whose status updates in place.
//!
//! With JavaScript, `app.js` turns the form into the API's JSON body (each
//! input says its type in `data-type`), quotes it on every change through
//! `POST /api/v1/quote/…`, submits it through `POST /api/v1/run/…` with the
//! session cookie and `X-CSRF-Token`, follows the generation's event stream
//! (polling when streams are refused) with the time since the run began, and
//! offers the API's cancel while it is unfinished. Without JavaScript the
//! form posts here, is turned into the same body by `body_from_form`, and is
//! submitted through the API's own submit path (`crate::application::submit`), so both
//! paths validate, price and charge alike.
//!
//! The page also opens filled in: `?endpoint=…&prompt=…&duration=…` sets the
//! named inputs (the generation page's "Open in the playground", and the
//! model switch, which carries the values that the next model shares).

use std::collections::HashMap;

use askama::Template;
use axum::Form;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::{Map, Value};
use vidgate_core::catalog::{Parameter, ParameterType};
use vidgate_core::{Catalog, Endpoint, MediaFacts, Purpose};

use super::session::SignedIn;
use super::{Layout, Section, render, usd};
use crate::application::sessions::api_caller;
use crate::application::state::AppState;
use crate::application::submit::{SubmitError, submit_generation};
use crate::diagnostics::log_cause_chain;
use crate::metrics::RateLimit;
use crate::store::Session;

/// The endpoint shown when none is chosen.
const DEFAULT_ENDPOINT: &str = "vendor_1/model_1/text-to-video";
/// Text parameters longer than this get a multi-line box.
const TEXTAREA_FROM_CHARS: usize = 200;
/// Inputs that most runs leave as they are, shown folded away under
/// "Advanced". They are optional everywhere and change neither the price
/// nor what the clip shows in outline.
const ADVANCED_PARAMETERS: [&str; 3] = ["seed", "negative_prompt", "webhook_url"];

/// Inputs a link never fills in. A webhook URL sends the finished clip's
/// record where it points, so a link made by someone else must not be able
/// to slip one into a form that its reader then runs.
const NEVER_LINKED: [&str; 1] = ["webhook_url"];

/// A parameter's name in words, for its label; the API name stays beside
/// it. Names without an entry are spelled out from the API name.
fn parameter_label(name: &str) -> String {
    let known = match name {
        "prompt" => "Prompt",
        "negative_prompt" => "Negative prompt (what to avoid)",
        "duration" => "Length in seconds",
        "resolution" => "Resolution",
        "aspect_ratio" => "Aspect ratio",
        "generate_audio" => "Generate audio",
        "seed" => "Seed (the same seed repeats a clip)",
        "image_url" => "Start image URL",
        "end_image_url" => "End image URL",
        "reference_image_urls" => "Reference image URLs",
        "reference_video_urls" => "Reference video URLs",
        "reference_audio_urls" => "Reference audio URLs",
        "webhook_url" => "Webhook URL (told when it ends)",
        _ => "",
    };
    if !known.is_empty() {
        return known.to_owned();
    }
    let spelled = name.replace('_', " ");
    let mut characters = spelled.chars();
    characters.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(characters).collect()
    })
}

/// Where a form's values come from.
#[derive(Clone, Copy)]
enum Filled<'a> {
    /// The catalog's defaults: a fresh form.
    Defaults,
    /// A posted form shown again (after a refusal): exactly what was sent,
    /// an absent checkbox being unchecked.
    Posted(&'a HashMap<String, String>),
    /// A link's query: the values it names where the endpoint accepts them
    /// (never a `NEVER_LINKED` one), the defaults elsewhere. A checkbox
    /// reads `true` or `false`.
    Linked(&'a HashMap<String, String>),
}

/// One input of the form, as the template draws it.
pub enum FieldKind {
    TextArea {
        value: String,
    },
    Text {
        value: String,
        input_type: &'static str,
    },
    Select {
        options: Vec<SelectOption>,
    },
    Number {
        value: String,
        min: String,
        max: String,
    },
    Checkbox {
        checked: bool,
    },
    UrlList {
        value: String,
    },
}

pub struct SelectOption {
    value: String,
    selected: bool,
}

pub struct Field {
    name: String,
    label: String,
    description: String,
    required: bool,
    /// How `app.js` and `body_from_form` read the input back:
    /// `string`, `integer`, `boolean`, `uri` or `uri-array`.
    data_type: &'static str,
    kind: FieldKind,
}

struct EndpointOption {
    id: String,
    /// The model's catalog label and name with the mode in words:
    /// `M1 · Model 1 — text to video`.
    label: String,
    selected: bool,
}

#[derive(Template)]
#[template(path = "playground.html")]
struct PlaygroundPage {
    layout: Layout,
    endpoints: Vec<EndpointOption>,
    endpoint: String,
    model_description: String,
    fields: Vec<Field>,
    advanced_fields: Vec<Field>,
    quote: String,
    alert: Option<String>,
    /// A refusal for money (402) links to where credit is added.
    add_credit_link: bool,
}

fn data_type(parameter_type: ParameterType) -> &'static str {
    match parameter_type {
        ParameterType::String => "string",
        ParameterType::Integer => "integer",
        ParameterType::Boolean => "boolean",
        ParameterType::Uri => "uri",
        ParameterType::UriArray => "uri-array",
    }
}

/// A JSON input value as the form's text: arrays one item a line.
pub(super) fn value_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        Value::Array(items) => items.iter().map(value_text).collect::<Vec<_>>().join("\n"),
        other => other.to_string(),
    }
}

/// The form's inputs, filled as `filled` says.
fn fields(endpoint: Endpoint<'_>, filled: Filled<'_>) -> Vec<Field> {
    endpoint
        .parameters()
        .map(|parameter| {
            let default = parameter
                .default
                .as_ref()
                .map(value_text)
                .unwrap_or_default();
            let value = match filled {
                Filled::Defaults => default.clone(),
                Filled::Posted(values) => values.get(&parameter.name).cloned().unwrap_or_default(),
                Filled::Linked(values) => values
                    .get(&parameter.name)
                    .filter(|_| !NEVER_LINKED.contains(&parameter.name.as_str()))
                    .filter(|value| fits(parameter, value))
                    .cloned()
                    .unwrap_or_else(|| default.clone()),
            };
            let kind = match (&parameter.parameter_type, &parameter.allowed_values) {
                (ParameterType::Boolean, _) => FieldKind::Checkbox {
                    checked: match filled {
                        Filled::Posted(values) => values.contains_key(&parameter.name),
                        Filled::Linked(values) if values.contains_key(&parameter.name) => {
                            values[&parameter.name] == "true"
                        }
                        Filled::Defaults | Filled::Linked(_) => {
                            parameter.default == Some(Value::Bool(true))
                        }
                    },
                },
                (_, Some(allowed)) => FieldKind::Select {
                    options: allowed
                        .iter()
                        .map(|option| {
                            let option = value_text(option);
                            SelectOption {
                                selected: option == value,
                                value: option,
                            }
                        })
                        .collect(),
                },
                (ParameterType::Integer, None) => FieldKind::Number {
                    value,
                    min: parameter
                        .minimum
                        .map(|min| min.to_string())
                        .unwrap_or_default(),
                    max: parameter
                        .maximum
                        .map(|max| max.to_string())
                        .unwrap_or_default(),
                },
                (ParameterType::UriArray, None) => FieldKind::UrlList { value },
                (ParameterType::Uri, None) => FieldKind::Text {
                    value,
                    input_type: "url",
                },
                (ParameterType::String, None) => {
                    if parameter.max_length.unwrap_or(0) > TEXTAREA_FROM_CHARS {
                        FieldKind::TextArea { value }
                    } else {
                        FieldKind::Text {
                            value,
                            input_type: "text",
                        }
                    }
                }
            };
            Field {
                name: parameter.name.clone(),
                label: parameter_label(&parameter.name),
                description: parameter.description.clone(),
                required: parameter.required_in(endpoint.mode),
                data_type: data_type(parameter.parameter_type),
                kind,
            }
        })
        .collect()
}

/// Whether a linked value can stand in the parameter's input: one of its
/// allowed values, or a whole number in its range. Anything else (a value
/// the previous model allowed and this one does not) leaves the default,
/// so a model switch never shows a form the quote refuses at once.
fn fits(parameter: &Parameter, value: &str) -> bool {
    if let Some(allowed) = &parameter.allowed_values {
        return allowed.iter().any(|option| value_text(option) == value);
    }
    if parameter.parameter_type == ParameterType::Integer {
        return value.parse::<i64>().is_ok_and(|number| {
            parameter.minimum.is_none_or(|min| number >= min)
                && parameter.maximum.is_none_or(|max| number <= max)
        });
    }
    true
}

/// The API request body a filled-in form stands for: the same rules as
/// `readForm` in app.js. Empty optional inputs are left out so the API
/// applies its defaults; values that do not parse are passed on as text so
/// the API's validation names the field.
fn body_from_form(endpoint: Endpoint<'_>, values: &HashMap<String, String>) -> Value {
    let mut body = Map::new();
    for parameter in endpoint.parameters() {
        let name = &parameter.name;
        let text = values.get(name).map(|text| text.trim()).unwrap_or("");
        let value = match parameter.parameter_type {
            ParameterType::Boolean => Some(Value::Bool(values.contains_key(name))),
            _ if text.is_empty() => None,
            ParameterType::Integer => Some(
                text.parse::<i64>()
                    .map_or_else(|_| Value::String(text.to_owned()), Value::from),
            ),
            ParameterType::UriArray => Some(Value::Array(
                text.lines()
                    .map(str::trim)
                    .filter(|line| !line.is_empty())
                    .map(|line| Value::String(line.to_owned()))
                    .collect(),
            )),
            ParameterType::String | ParameterType::Uri => Some(Value::String(text.to_owned())),
        };
        if let Some(value) = value {
            body.insert(name.clone(), value);
        }
    }
    Value::Object(body)
}

/// The price of the form as first shown, from its defaults; the live quote
/// takes over in the browser.
fn initial_quote(endpoint: Endpoint<'_>, fields: &[Field]) -> String {
    let values: HashMap<String, String> = fields
        .iter()
        .filter_map(|field| match &field.kind {
            FieldKind::Checkbox { checked: false } => None,
            FieldKind::Checkbox { checked: true } => Some((field.name.clone(), "on".into())),
            FieldKind::Select { options } => options
                .iter()
                .find(|option| option.selected)
                .map(|option| (field.name.clone(), option.value.clone())),
            FieldKind::TextArea { value }
            | FieldKind::Text { value, .. }
            | FieldKind::Number { value, .. }
            | FieldKind::UrlList { value } => Some((field.name.clone(), value.clone())),
        })
        .collect();
    endpoint
        .validate_value(&body_from_form(endpoint, &values), Purpose::Quote)
        .map(|input| usd(endpoint.price(&input, &MediaFacts::default()).amount))
        .unwrap_or_else(|_| "—".to_owned())
}

fn chosen_endpoint<'a>(catalog: &'a Catalog, requested: Option<&str>) -> Option<Endpoint<'a>> {
    catalog
        .endpoint(requested.unwrap_or(DEFAULT_ENDPOINT))
        .or_else(|| {
            requested
                .is_none()
                .then(|| catalog.endpoints().next())
                .flatten()
        })
}

/// `M1 · Model 1 — text to video`: how the model list names an endpoint.
fn endpoint_label(endpoint: Endpoint<'_>) -> String {
    format!(
        "{} · {} — {}",
        endpoint.model.label,
        endpoint.model.name,
        endpoint.mode.as_str().replace('-', " ")
    )
}

fn playground_page(
    catalog: &Catalog,
    session: &Session,
    endpoint: Endpoint<'_>,
    filled: Filled<'_>,
    status: StatusCode,
    alert: Option<String>,
) -> Response {
    let all_fields = fields(endpoint, filled);
    let quote = initial_quote(endpoint, &all_fields);
    let (advanced_fields, fields): (Vec<Field>, Vec<Field>) = all_fields
        .into_iter()
        .partition(|field| ADVANCED_PARAMETERS.contains(&field.name.as_str()));
    let endpoint_id = endpoint.id();
    render(
        status,
        &PlaygroundPage {
            layout: Layout::signed_in(session, "Playground", Section::Playground),
            endpoints: catalog
                .endpoints()
                .map(|option| {
                    let id = option.id();
                    EndpointOption {
                        selected: id == endpoint_id,
                        label: endpoint_label(option),
                        id,
                    }
                })
                .collect(),
            quote,
            endpoint: endpoint_id,
            model_description: endpoint.model.description.clone(),
            fields,
            advanced_fields,
            add_credit_link: status == StatusCode::PAYMENT_REQUIRED,
            alert,
        },
    )
}

/// The page, on the endpoint its query names (`endpoint`), with the other
/// names of the query filled in where that endpoint has such inputs.
pub async fn show(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(endpoint) = chosen_endpoint(&state.catalog, query.get("endpoint").map(String::as_str))
    else {
        return super::not_found(Some(&signed_in.0));
    };
    let linked = query.keys().any(|name| name != "endpoint");
    playground_page(
        &state.catalog,
        &signed_in.0,
        endpoint,
        if linked {
            Filled::Linked(&query)
        } else {
            Filled::Defaults
        },
        StatusCode::OK,
        None,
    )
}

/// The form posted without JavaScript: submitted through the API's submit path
/// as the session's caller (and through its rate-limit bucket), then on to
/// the new generation's page.
pub async fn submit(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Form(values): Form<HashMap<String, String>>,
) -> Response {
    let session = &signed_in.0;
    if let Some(refused) =
        signed_in.csrf_refusal(values.get("csrf_token").map_or("", String::as_str))
    {
        return refused;
    }
    let Some(endpoint) = values
        .get("endpoint")
        .and_then(|endpoint| state.catalog.endpoint(endpoint))
    else {
        return super::not_found(Some(session));
    };
    let caller = api_caller(session);
    let rate = state.rate_limiter.check_caller(&caller).await;
    if !rate.allowed {
        state.metrics.record_rate_limit_refusal(RateLimit::Caller);
        return playground_page(
            &state.catalog,
            session,
            endpoint,
            Filled::Posted(&values),
            StatusCode::TOO_MANY_REQUESTS,
            Some("Too many requests: wait a moment and try again.".to_owned()),
        );
    }
    let body = body_from_form(endpoint, &values).to_string();
    let error = match submit_generation(&state, &caller, endpoint, body.as_bytes(), None).await {
        Ok((generation, _replayed)) => {
            return Redirect::to(&format!("/dashboard/generations/{}", generation.id))
                .into_response();
        }
        Err(error) => error,
    };
    if let SubmitError::Internal(_) = &error {
        log_cause_chain(&error);
    }
    let status = match &error {
        SubmitError::Invalid { .. } => StatusCode::BAD_REQUEST,
        SubmitError::ConcurrencyLimit { .. } | SubmitError::MediaFetchLimit { .. } => {
            StatusCode::TOO_MANY_REQUESTS
        }
        SubmitError::InsufficientBalance { .. } | SubmitError::SpendLimit { .. } => {
            StatusCode::PAYMENT_REQUIRED
        }
        SubmitError::IdempotencyKeyReused => StatusCode::CONFLICT,
        SubmitError::AccountNotFound => StatusCode::UNAUTHORIZED,
        SubmitError::MediaBusy { .. } | SubmitError::DatabaseUnavailable => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        // The page itself worked: what failed is the model or the service
        // behind it.
        SubmitError::ModelUnavailable(_)
        | SubmitError::RefusedUpstream(_)
        | SubmitError::Internal(_) => StatusCode::BAD_GATEWAY,
    };
    let message = error.to_string();
    playground_page(
        &state.catalog,
        session,
        endpoint,
        Filled::Posted(&values),
        status,
        Some(message),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_become_api_bodies_by_parameter_type() {
        let catalog = Catalog::embedded();
        let endpoint = catalog.endpoint(DEFAULT_ENDPOINT).unwrap();
        let values: HashMap<String, String> = [
            ("prompt", "a kite"),
            ("duration", "3"),
            ("resolution", "480p"),
            ("seed", ""),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
        let body = body_from_form(endpoint, &values);
        assert_eq!(body["prompt"], "a kite");
        assert_eq!(body["duration"], 3);
        assert_eq!(body["resolution"], "480p");
        assert!(body.get("seed").is_none(), "{body}");
        // An unchecked checkbox is sent as false, not left to the default.
        if endpoint.parameter("generate_audio").is_some() {
            assert_eq!(body["generate_audio"], false);
        }
        endpoint.validate_value(&body, Purpose::Submit).unwrap();
    }

    #[test]
    fn every_endpoint_has_a_form_and_the_default_one_a_quote() {
        let catalog = Catalog::embedded();
        for endpoint in catalog.endpoints() {
            let fields = fields(endpoint, Filled::Defaults);
            assert_eq!(fields.len(), endpoint.parameters().count());
        }
        let endpoint = catalog.endpoint(DEFAULT_ENDPOINT).unwrap();
        let quote = initial_quote(endpoint, &fields(endpoint, Filled::Defaults));
        assert!(quote.starts_with('$'), "{quote}");
    }

    #[test]
    fn a_linked_form_keeps_the_values_the_endpoint_accepts() {
        let catalog = Catalog::embedded();
        let endpoint = catalog.endpoint(DEFAULT_ENDPOINT).unwrap();
        let linked: HashMap<String, String> = [
            ("prompt", "a kite"),
            ("resolution", "no such resolution"),
            ("duration", "3"),
            ("generate_audio", "false"),
            ("not_a_parameter", "ignored"),
            ("webhook_url", "https://example.com/somebody-elses-hook"),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
        let fields = fields(endpoint, Filled::Linked(&linked));
        let field = |name: &str| fields.iter().find(|field| field.name == name).unwrap();
        assert!(
            matches!(&field("prompt").kind, FieldKind::TextArea { value } if value == "a kite")
        );
        assert!(matches!(&field("duration").kind, FieldKind::Number { value, .. } if value == "3"));
        assert!(matches!(
            field("generate_audio").kind,
            FieldKind::Checkbox { checked: false }
        ));
        let FieldKind::Select { options } = &field("resolution").kind else {
            panic!("resolution is a select");
        };
        let selected: Vec<&str> = options
            .iter()
            .filter(|option| option.selected)
            .map(|option| option.value.as_str())
            .collect();
        assert_eq!(
            selected,
            ["720p"],
            "a value the endpoint refuses leaves the default"
        );
        assert!(
            matches!(&field("webhook_url").kind, FieldKind::Text { value, .. } if value.is_empty()),
            "a link never sets the webhook URL"
        );
        assert_eq!(field("prompt").label, "Prompt");
        assert_eq!(parameter_label("some_new_input"), "Some new input");
    }
}
