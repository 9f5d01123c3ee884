//! Generations: the list and one generation with its video.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use vidgate_core::{GenerationStatus, Micros};

use super::session::SignedIn;
use super::{Layout, Section, display_time, render, usd};
use crate::state::AppState;
use crate::store::{Generation, ListFilter};

/// Generations listed, newest first.
const LIST_ROWS: u32 = 100;

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

struct GenerationRow {
    id: String,
    status: String,
    endpoint: String,
    cost: String,
    created: String,
}

#[derive(Template)]
#[template(path = "generations.html")]
struct GenerationsPage {
    layout: Layout,
    generations: Vec<GenerationRow>,
}

pub async fn list(State(state): State<AppState>, signed_in: SignedIn) -> Response {
    let session = &signed_in.0;
    let filter = ListFilter {
        limit: LIST_ROWS,
        ..ListFilter::default()
    };
    match state
        .store
        .list_generations(&session.account_id, &filter)
        .await
    {
        Ok(generations) => render(
            StatusCode::OK,
            &GenerationsPage {
                layout: Layout::signed_in(session, "Generations", Section::Generations),
                generations: generations
                    .iter()
                    .map(|generation| GenerationRow {
                        id: generation.id.clone(),
                        status: generation.status.as_str().to_owned(),
                        endpoint: generation.endpoint.clone(),
                        cost: cost(generation),
                        created: display_time(generation.created_at),
                    })
                    .collect(),
            },
        ),
        Err(error) => super::internal_error(error),
    }
}

#[derive(Template)]
#[template(path = "generation.html")]
struct GenerationPage {
    layout: Layout,
    id: String,
    status: String,
    endpoint: String,
    cost: String,
    created: String,
    completed: Option<String>,
    input: String,
    error: Option<String>,
    video_url: Option<String>,
}

/// The error object's message, or the whole object when it has none.
fn error_text(error: &serde_json::Value) -> String {
    match (error["code"].as_str(), error["message"].as_str()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        _ => error.to_string(),
    }
}

pub async fn show(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Path(generation_id): Path<String>,
) -> Response {
    let session = &signed_in.0;
    let generation = match state
        .store
        .generation(&session.account_id, &generation_id)
        .await
    {
        Ok(Some(generation)) => generation,
        Ok(None) => return super::not_found(Some(session)),
        Err(error) => return super::internal_error(error),
    };
    let video_url = (generation.status == GenerationStatus::Succeeded)
        .then_some(generation.output.as_ref())
        .flatten()
        .and_then(|output| output["video_url"].as_str())
        .map(str::to_owned);
    render(
        StatusCode::OK,
        &GenerationPage {
            layout: Layout::signed_in(session, "Generation", Section::Generations),
            status: generation.status.as_str().to_owned(),
            endpoint: generation.endpoint.clone(),
            cost: cost(&generation),
            created: display_time(generation.created_at),
            completed: generation.completed_at.map(display_time),
            input: serde_json::to_string_pretty(&generation.input).unwrap_or_default(),
            error: generation.error.as_ref().map(error_text),
            video_url,
            id: generation.id,
        },
    )
}
