//! Generations: the list (filtered by status and model, paged by the API's
//! own cursor) and one generation with its video, what it was charged or
//! refunded in words, and ways to take it elsewhere (its id and a curl
//! command to copy, and the playground filled with its inputs).
//!
//! A succeeded clip's thumbnail in the list is the clip itself in a
//! `<video preload="metadata">`: the browser fetches a few kilobytes with a
//! range request and shows the first frame. A stored poster image would
//! need a frame extracted by every worker and stored beside each clip, for
//! a picture the browser can already draw from the MP4.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;
use vidgate_core::{Catalog, GenerationStatus, Micros};

use super::session::SignedIn;
use super::{Layout, Section, display_time, display_time_to_the_second, render, usd};
use crate::application::state::AppState;
use crate::store::{Generation, ListFilter, StoreError, StoredJson};

/// Generations on one page of the list, newest first.
const PAGE_ROWS: usize = 25;
/// How much of a prompt the list shows; the generation's page has it all.
const PROMPT_PREVIEW_CHARS: usize = 80;

/// What the generation costs the account: the hold while it is pending, the
/// captured price once it succeeded, nothing once it failed or was canceled
/// (the hold was refunded), as the API's `cost` says.
fn cost(generation: &Generation) -> String {
    match generation.status {
        GenerationStatus::Queued | GenerationStatus::Running => {
            format!("{} (held)", usd(generation.price))
        }
        GenerationStatus::Succeeded => usd(generation.price),
        GenerationStatus::Failed | GenerationStatus::Canceled => usd(Micros::ZERO),
    }
}

/// What happened to the account's money, in a sentence: the price is held
/// on submit, captured on success and released in full on a failure or a
/// cancel (`store/queue.rs` and the ledger's kinds say the same).
fn billing(generation: &Generation) -> String {
    let price = usd(generation.price);
    match generation.status {
        GenerationStatus::Queued | GenerationStatus::Running => {
            format!("Hold of {price}: charged if it succeeds, refunded if not")
        }
        GenerationStatus::Succeeded => format!("Charged {price}"),
        GenerationStatus::Failed | GenerationStatus::Canceled => {
            format!("Hold of {price} refunded")
        }
    }
}

/// The list's filters and position, as its plain GET form and page links
/// send them. Empty values mean no filter (an HTML form sends them empty).
#[derive(Deserialize, Default, Clone)]
pub struct ListQuery {
    #[serde(default)]
    status: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    cursor: String,
}

impl ListQuery {
    /// `?status=…&model=…` (and the cursor, when `with_cursor`), only with
    /// the values set; empty when none is.
    fn query_string(&self, with_cursor: bool) -> String {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        let cursor = if with_cursor {
            self.cursor.as_str()
        } else {
            ""
        };
        for (name, value) in [
            ("status", self.status.as_str()),
            ("model", self.model.as_str()),
            ("cursor", cursor),
        ] {
            if !value.is_empty() {
                query.append_pair(name, value);
            }
        }
        let query = query.finish();
        if query.is_empty() {
            query
        } else {
            format!("?{query}")
        }
    }

    fn status(&self) -> Option<GenerationStatus> {
        self.status.parse().ok()
    }
}

struct GenerationRow {
    id: String,
    status: String,
    model: String,
    prompt: String,
    duration: String,
    resolution: String,
    cost: String,
    created: String,
    created_to_the_second: String,
    video_url: Option<String>,
}

struct FilterOption {
    value: String,
    label: String,
    selected: bool,
}

#[derive(Template)]
#[template(path = "generations.html")]
struct GenerationsPage {
    layout: Layout,
    generations: Vec<GenerationRow>,
    statuses: Vec<FilterOption>,
    models: Vec<FilterOption>,
    filtered: bool,
    /// Appended to each row's link so the generation's page links back to
    /// this very page of the list.
    row_query: String,
    first_page_href: Option<String>,
    next_page_href: Option<String>,
    alert: Option<String>,
}

/// The model's short label and name from the catalog (`M1 · Model 1`), or
/// its id when the catalog no longer has it.
pub(super) fn model_name(catalog: &Catalog, model_id: &str) -> String {
    catalog.model(model_id).map_or_else(
        || model_id.to_owned(),
        |model| format!("{} · {}", model.label, model.name),
    )
}

/// At most `PROMPT_PREVIEW_CHARS` characters of the prompt, with an
/// ellipsis when it was cut; empty for a request without one.
pub(super) fn prompt_preview(input: &Value) -> String {
    let prompt = input["prompt"].as_str().unwrap_or("").trim();
    let mut preview: String = prompt.chars().take(PROMPT_PREVIEW_CHARS).collect();
    if preview.len() < prompt.len() {
        preview.push('…');
    }
    preview
}

/// A generation's input, output and error, parsed once for the several
/// fields of a page that read them (the store keeps them as JSON text).
struct ParsedFields {
    input: Value,
    output: Option<Value>,
    error: Option<Value>,
}

impl ParsedFields {
    fn of(generation: &Generation) -> Result<ParsedFields, StoreError> {
        Ok(ParsedFields {
            input: generation.input.value()?,
            output: generation
                .output
                .as_ref()
                .map(StoredJson::value)
                .transpose()?,
            error: generation
                .error
                .as_ref()
                .map(StoredJson::value)
                .transpose()?,
        })
    }
}

/// The clip's URL when it succeeded and the clip was not expired by the
/// retention sweep.
fn video_url(generation: &Generation, fields: &ParsedFields) -> Option<String> {
    let output = fields.output.as_ref()?;
    let playable = generation.status == GenerationStatus::Succeeded
        && output["expired"].as_bool() != Some(true);
    playable
        .then(|| output["video_url"].as_str().map(str::to_owned))
        .flatten()
}

/// The clip's length: what was made when it succeeded, what was asked for
/// otherwise.
fn duration(fields: &ParsedFields) -> String {
    if let Some(seconds) = fields
        .output
        .as_ref()
        .and_then(|output| output["duration_s"].as_f64())
    {
        return format!("{seconds:.1} s");
    }
    match &fields.input["duration"] {
        Value::Number(seconds) => format!("{seconds} s"),
        Value::String(seconds) => format!("{seconds} s"),
        _ => "—".to_owned(),
    }
}

/// The clip's size: the frame that was made when it succeeded, the
/// resolution asked for otherwise.
fn resolution(fields: &ParsedFields) -> String {
    if let Some(output) = &fields.output
        && let (Some(width), Some(height)) = (output["width"].as_u64(), output["height"].as_u64())
    {
        return format!("{width}×{height}");
    }
    fields.input["resolution"]
        .as_str()
        .map_or_else(|| "—".to_owned(), str::to_owned)
}

fn row(catalog: &Catalog, generation: &Generation) -> Result<GenerationRow, StoreError> {
    let fields = ParsedFields::of(generation)?;
    Ok(GenerationRow {
        id: generation.id.clone(),
        status: generation.status.as_str().to_owned(),
        model: model_name(catalog, &generation.model),
        prompt: prompt_preview(&fields.input),
        duration: duration(&fields),
        resolution: resolution(&fields),
        cost: cost(generation),
        created: display_time(generation.created_at),
        created_to_the_second: display_time_to_the_second(generation.created_at),
        video_url: video_url(generation, &fields),
    })
}

pub async fn list(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Query(query): Query<ListQuery>,
) -> Response {
    let session = &signed_in.0;
    let mut query = query;
    // A page link that no longer decodes (edited by hand) shows the newest
    // page of the same filters, saying so, rather than an error page.
    let mut alert = None;
    let before = if query.cursor.is_empty() {
        None
    } else {
        let decoded = crate::representation::decode_cursor(&query.cursor);
        if decoded.is_none() {
            alert = Some("That page link is not valid; showing the newest generations.".to_owned());
            query.cursor.clear();
        }
        decoded
    };
    let filter = ListFilter {
        status: query.status(),
        model: (!query.model.is_empty()).then(|| query.model.clone()),
        before,
        // One row more than the page tells whether another page exists.
        limit: PAGE_ROWS as u32 + 1,
    };
    let generations = match state
        .store
        .generations()
        .list(&session.account_id, &filter)
        .await
    {
        Ok(generations) => generations,
        Err(error) => return super::internal_error(error),
    };
    let (generations, next_cursor) = crate::representation::one_page(generations, PAGE_ROWS);
    let rows = match generations
        .iter()
        .map(|generation| row(&state.catalog, generation))
        .collect()
    {
        Ok(rows) => rows,
        Err(error) => return super::internal_error(error),
    };
    let filters_only = query.query_string(false);
    let next_page_href = next_cursor.map(|cursor| {
        let next = ListQuery {
            cursor,
            ..query.clone()
        };
        format!("/dashboard/generations{}", next.query_string(true))
    });
    let statuses = GenerationStatus::ALL
        .iter()
        .map(|status| FilterOption {
            value: status.as_str().to_owned(),
            label: status.as_str().to_owned(),
            selected: query.status() == Some(*status),
        })
        .collect();
    let models = state
        .catalog
        .models()
        .iter()
        .map(|model| FilterOption {
            value: model.id.clone(),
            label: model_name(&state.catalog, &model.id),
            selected: query.model == model.id,
        })
        .collect();
    render(
        StatusCode::OK,
        &GenerationsPage {
            layout: Layout::signed_in(session, "Generations", Section::Generations),
            generations: rows,
            statuses,
            models,
            filtered: filter.status.is_some() || filter.model.is_some(),
            row_query: query.query_string(true),
            first_page_href: (!query.cursor.is_empty())
                .then(|| format!("/dashboard/generations{filters_only}")),
            next_page_href,
            alert,
        },
    )
}

#[derive(Template)]
#[template(path = "generation.html")]
struct GenerationPage {
    layout: Layout,
    id: String,
    status: String,
    endpoint: String,
    model: String,
    cost: String,
    billing: String,
    created: String,
    completed: Option<String>,
    input: String,
    error: Option<String>,
    video_url: Option<String>,
    back_href: String,
    playground_href: String,
    curl: String,
}

/// The error object's message, or the whole object when it has none.
fn error_text(error: &serde_json::Value) -> String {
    match (error["code"].as_str(), error["message"].as_str()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        _ => error.to_string(),
    }
}

/// The playground, opened on the generation's endpoint with its inputs
/// filled in (the playground reads the same names from its query, all but
/// the webhook URL).
fn playground_href(generation: &Generation, fields: &ParsedFields) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    query.append_pair("endpoint", &generation.endpoint);
    if let Value::Object(input) = &fields.input {
        for (name, value) in input {
            query.append_pair(name, &super::playground::value_text(value));
        }
    }
    format!("/dashboard/playground?{}", query.finish())
}

/// The API call that reads the generation, with a placeholder where the
/// caller's own key goes: the dashboard never puts a key in a page.
fn curl_command(api_base: &str, generation_id: &str) -> String {
    format!(
        "curl -s {api_base}/generations/{generation_id} -H \"Authorization: Bearer $VIDGATE_API_KEY\""
    )
}

pub async fn show(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Path(generation_id): Path<String>,
    Query(from_list): Query<ListQuery>,
) -> Response {
    let session = &signed_in.0;
    let generation = match state
        .store
        .generations()
        .get(&session.account_id, &generation_id)
        .await
    {
        Ok(Some(generation)) => generation,
        Ok(None) => return super::not_found(Some(session)),
        Err(error) => return super::internal_error(error),
    };
    let fields = match ParsedFields::of(&generation) {
        Ok(fields) => fields,
        Err(error) => return super::internal_error(error),
    };
    render(
        StatusCode::OK,
        &GenerationPage {
            layout: Layout::signed_in(session, "Generation", Section::Generations),
            status: generation.status.as_str().to_owned(),
            endpoint: generation.endpoint.clone(),
            model: model_name(&state.catalog, &generation.model),
            cost: cost(&generation),
            billing: billing(&generation),
            created: display_time(generation.created_at),
            completed: generation.completed_at.map(display_time),
            input: serde_json::to_string_pretty(&fields.input).unwrap_or_default(),
            error: fields.error.as_ref().map(error_text),
            video_url: video_url(&generation, &fields),
            back_href: format!("/dashboard/generations{}", from_list.query_string(true)),
            playground_href: playground_href(&generation, &fields),
            curl: curl_command(&state.api_base, &generation.id),
            id: generation.id,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_prompts_are_cut_on_a_character_boundary() {
        let long = "é".repeat(PROMPT_PREVIEW_CHARS + 5);
        let preview = prompt_preview(&serde_json::json!({ "prompt": long }));
        assert_eq!(preview.chars().count(), PROMPT_PREVIEW_CHARS + 1);
        assert!(preview.ends_with('…'));
        assert_eq!(
            prompt_preview(&serde_json::json!({ "prompt": "a kite" })),
            "a kite"
        );
        assert_eq!(prompt_preview(&serde_json::json!({})), "");
    }

    #[test]
    fn the_list_query_keeps_only_the_values_set() {
        let query = ListQuery {
            status: "failed".into(),
            model: String::new(),
            cursor: "abc".into(),
        };
        assert_eq!(query.query_string(true), "?status=failed&cursor=abc");
        assert_eq!(query.query_string(false), "?status=failed");
        assert_eq!(ListQuery::default().query_string(true), "");
    }
}
