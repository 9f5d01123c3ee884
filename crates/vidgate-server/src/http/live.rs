//! Live status over HTTP: `Prefer: wait=N` on a submit and on a read (the
//! answer comes once the generation is final, or after N seconds with its
//! state then), and `GET /generations/{id}/events`, a `text/event-stream`
//! of the generation's changes. Following a generation and the caps on
//! open waits and streams are `live_status.rs`'s; this file parses the
//! headers and writes the answers.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::body::Frame;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::openapi::{Answer, Content, Header, Operation, Parameter, Refusal, Schema, Success};
use super::{ApiError, AppState};
use crate::live_status::{
    CAP_RETRY_AFTER, GenerationFollower, LiveSlot, MAX_STREAM_DURATION, MAX_WAIT_SECONDS, state_id,
};
use crate::metrics::RateLimit;
use crate::representation::GenerationRecord;
use crate::store::{Caller, Generation};

const PREFER: HeaderName = HeaderName::from_static("prefer");
const PREFERENCE_APPLIED: HeaderName = HeaderName::from_static("preference-applied");
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// The `Prefer` header of a request that may wait for its generation.
pub(super) const PREFER_WAIT_PARAMETER: Parameter = Parameter::Header {
    name: "Prefer",
    required: false,
    description: Some(
        "`wait=N` (N from 1 to 60): answer once the generation is final (succeeded, failed or canceled), or after N seconds with its state then; the status code is unchanged. Preference-Applied says the wait was honoured and for how long (at most the server's HTTP idle timeout). Other preferences are ignored; a malformed wait is refused with 400 naming Prefer. Open waits count against the per-key and per-server caps of waits and event streams (429 past them).",
    ),
    schema: Schema::TEXT,
    example: Some("wait=60"),
};

/// The header of an answer that waited as `Prefer: wait` asked.
pub(super) const PREFERENCE_APPLIED_HEADER: Header = Header {
    name: "Preference-Applied",
    description: "`wait=N` when the request's Prefer: wait was honoured, with the seconds it could wait.",
    schema: Schema::TEXT,
};

pub const EVENTS: Operation = Operation {
    id: "stream_generation_events",
    summary: "The generation's changes as server-sent events, until it is final",
    description: Some(
        "Authorized like GET /generations/{id}. An open stream counts against the per-key and per-server caps of waits and event streams (429 with Retry-After past them).",
    ),
    tag: "generations",
    parameters: &[
        Parameter::Path("id"),
        Parameter::Header {
            name: "Last-Event-ID",
            required: false,
            description: Some(
                "The id of the last event seen: the stream resumes after it (the state it names is not sent again).",
            ),
            schema: Schema::TEXT,
            example: None,
        },
    ],
    success: Success {
        status: "200",
        description: "A text/event-stream. Each event is `id: <state>` and one `data:` line holding the generation's record exactly as GET /generations/{id} returns it: first the state now, then one event per change of status, and the stream closes after the final state. Event ids name the state (`queued-0`, `running-1`, `succeeded-1`; treat them as opaque). A comment line (`: keep-alive`) comes every 15 seconds without events. The first event sets `retry: 1000`. A stream also ends at the server's shutdown and after 30 minutes open; reconnect with Last-Event-ID.",
        content: Content::EventStream(Schema::Of(event_schema)),
        headers: &[],
    },
    also: &[Answer {
        status: "204",
        description: "Last-Event-ID names the generation's final state: nothing more will come (an EventSource stops reconnecting).",
    }],
    refusals: &[Refusal {
        status: "404",
        description: "not_found: no such generation in this account.",
    }],
    ..Operation::PLAIN
};

/// The schema of one event, as server-sent-event clients (and
/// schemathesis) read them: the fields of an event block.
fn event_schema(_: &mut super::openapi::Context<'_>) -> serde_json::Value {
    serde_json::json!({
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
    })
}

/// How often an event stream with nothing to say sends a comment line, so
/// that proxies (and this server's own idle timeout) keep it open.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(15);

/// How long a client's `EventSource` waits before it reconnects to a
/// stream that ended without a final state (a node shutting down).
const RECONNECT_MILLIS: u32 = 1000;

/// Longest `Last-Event-ID` read; the server's own ids are far shorter.
const MAX_EVENT_ID_BYTES: usize = 64;

/// The `wait` preference of a request's `Prefer` headers, in seconds;
/// `None` without one. Other preferences are ignored, as RFC 7240 asks.
pub(super) fn requested_wait(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let malformed = || {
        ApiError::invalid(
            "Prefer",
            format!(
                "Prefer: wait must be a whole number of seconds from 1 to {MAX_WAIT_SECONDS}, as in `Prefer: wait=30`."
            ),
        )
    };
    let mut wait = None;
    for value in headers.get_all(PREFER) {
        let value = value.to_str().map_err(|_| malformed())?;
        for preference in value.split(',') {
            // A preference's own parameters follow a semicolon.
            let preference = preference.split(';').next().unwrap_or("").trim();
            let (name, argument) = match preference.split_once('=') {
                Some((name, argument)) => (name.trim(), Some(argument.trim())),
                None => (preference, None),
            };
            if !name.eq_ignore_ascii_case("wait") {
                continue;
            }
            let argument = argument.ok_or_else(malformed)?;
            let argument = argument
                .strip_prefix('"')
                .and_then(|quoted| quoted.strip_suffix('"'))
                .unwrap_or(argument);
            let seconds = argument
                .parse::<u64>()
                .ok()
                .filter(|seconds| (1..=MAX_WAIT_SECONDS).contains(seconds))
                .filter(|_| argument.bytes().all(|byte| byte.is_ascii_digit()))
                .ok_or_else(malformed)?;
            wait = Some(seconds);
        }
    }
    Ok(wait)
}

/// A slot for one wait or stream of the caller, or the 429 of the cap it
/// would pass (counted with the rate limiter's other refusals).
pub(super) fn admit(state: &AppState, caller: &Caller) -> Result<LiveSlot, ApiError> {
    state.live_status.admit(caller).map_err(|refusal| {
        state
            .metrics
            .record_rate_limit_refusal(RateLimit::LiveStatus);
        ApiError::RateLimited {
            message: refusal.to_string(),
            retry_after: CAP_RETRY_AFTER,
        }
    })
}

/// Follows `generation_id` until it is final or `seconds` (as the node
/// applies them) pass, and returns it then; `None` when the caller's
/// account has no such generation.
pub(super) async fn wait_for_final(
    state: &AppState,
    caller: &Caller,
    generation_id: &str,
    seconds: u64,
) -> Result<Option<Generation>, ApiError> {
    let until = Instant::now() + state.live_status.applied_wait(seconds);
    let Some((mut follower, current)) = state
        .live_status
        .follow(&state.store, &caller.account_id, generation_id)
        .await?
    else {
        return Ok(None);
    };
    if current.status.is_final() {
        return Ok(Some(current));
    }
    let slot = admit(state, caller)?;
    let closing = state.live_status.closing();
    tokio::select! {
        biased;
        // The key was revoked while it waited: it learns nothing more.
        () = slot.revoked().cancelled() => Err(ApiError::Unauthorized(
            "The API key or session was revoked while the request waited.".into(),
        )),
        followed = follower.until_final(current, until, closing) => Ok(Some(followed)),
    }
}

/// Follows a generation just submitted (or replayed) until it is final or
/// `seconds` pass, in the wait's `slot`, taken before the submit.
pub(super) async fn wait_after_submit(
    state: &AppState,
    caller: &Caller,
    submitted: Generation,
    seconds: u64,
    slot: LiveSlot,
) -> Result<Generation, ApiError> {
    let until = Instant::now() + state.live_status.applied_wait(seconds);
    let Some((mut follower, current)) = state
        .live_status
        .follow(&state.store, &caller.account_id, &submitted.id)
        .await?
    else {
        // Generations are never deleted; should one vanish, the submit's
        // own answer stands.
        return Ok(submitted);
    };
    let closing = state.live_status.closing();
    tokio::select! {
        biased;
        // The key was revoked while it waited. The submit was accepted
        // (and holds its price), so its answer is still 202, with the
        // state the submit itself returned and nothing learned since.
        () = slot.revoked().cancelled() => Ok(submitted),
        followed = follower.until_final(current, until, closing) => Ok(followed),
    }
}

/// Says on `response` that the wait was honoured, with its length.
pub(super) fn mark_wait_applied(state: &AppState, response: &mut Response, seconds: u64) {
    let applied = state.live_status.applied_wait(seconds).as_secs();
    if let Ok(value) = HeaderValue::from_str(&format!("wait={applied}")) {
        response.headers_mut().insert(PREFERENCE_APPLIED, value);
    }
}

/// `GET /generations/{id}/events`: the generation's record now, then once
/// per change, until it is final. A `Last-Event-ID` naming the state the
/// generation is still in skips that first event; naming its final state,
/// the answer is 204, which tells an `EventSource` not to reconnect.
pub async fn events(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(generation_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let last_event_id = headers
        .get(LAST_EVENT_ID)
        .and_then(|value| value.to_str().ok())
        .filter(|value| value.len() <= MAX_EVENT_ID_BYTES)
        .map(str::to_owned);
    let Some((follower, current)) = state
        .live_status
        .follow(&state.store, &caller.account_id, &generation_id)
        .await?
    else {
        return Err(ApiError::NotFound(format!(
            "No generation {generation_id:?} exists in this account."
        )));
    };
    if current.status.is_final() && last_event_id.as_deref() == Some(&state_id(&current)) {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let slot = admit(&state, &caller)?;
    // Two chunks of room: the task writes ahead of a slow reader by no
    // more, and then waits on the connection like any response body.
    let (events, received) = mpsc::channel(2);
    tokio::spawn(send_events(
        state.clone(),
        follower,
        current,
        last_event_id,
        events,
        slot,
    ));
    let mut response = Body::new(EventStreamBody { received }).into_response();
    let response_headers = response.headers_mut();
    response_headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response_headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // nginx would otherwise hold the events back in its buffer.
    response_headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// The task behind one event stream: it ends after the final state, when
/// the client goes away (its body, and so `events`' receiver, dropped),
/// when the stream has been open `MAX_STREAM_DURATION`, when the caller's
/// key or session is revoked, or at shutdown.
async fn send_events(
    state: AppState,
    mut follower: GenerationFollower,
    mut current: Generation,
    mut seen: Option<String>,
    events: mpsc::Sender<Bytes>,
    slot: LiveSlot,
) {
    let closing = state.live_status.closing();
    let revoked = slot.revoked();
    let stream_ends = Instant::now() + MAX_STREAM_DURATION;
    let mut first = true;
    loop {
        let current_id = state_id(&current);
        let chunk = if seen.as_deref() != Some(&current_id) {
            let chunk = event_chunk(&current, &current_id, &state.api_base, first);
            seen = Some(current_id);
            Some(chunk)
        } else if !first {
            Some(Bytes::from_static(b": keep-alive\n\n"))
        } else {
            None
        };
        // A stream whose key was revoked ends without another word.
        if revoked.is_cancelled() {
            return;
        }
        if let Some(chunk) = chunk
            && events.send(chunk).await.is_err()
        {
            return;
        }
        if current.status.is_final() || closing.is_cancelled() || Instant::now() >= stream_ends {
            return;
        }
        let until = (Instant::now() + KEEP_ALIVE_INTERVAL).min(stream_ends);
        let seen_id = seen.clone().unwrap_or_default();
        tokio::select! {
            biased;
            () = revoked.cancelled() => return,
            next = follower.next_state(&seen_id, until, closing) => match next {
                Some(next) => current = next,
                None => return,
            },
            () = events.closed() => return,
        }
        first = false;
    }
}

/// One event: the state's id, and the record as `GET` returns it on one
/// `data` line (JSON escapes every line break inside strings). The first
/// event of a stream also sets how long a client waits to reconnect.
fn event_chunk(generation: &Generation, id: &str, api_base: &str, first: bool) -> Bytes {
    let record = serde_json::to_string(&GenerationRecord::new(generation, api_base))
        .expect("a generation record serialises");
    let retry = if first {
        format!("retry: {RECONNECT_MILLIS}\n")
    } else {
        String::new()
    };
    Bytes::from(format!("{retry}id: {id}\ndata: {record}\n\n"))
}

/// The body of an event stream: what its task sends, as it comes.
struct EventStreamBody {
    received: mpsc::Receiver<Bytes>,
}

impl HttpBody for EventStreamBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.received
            .poll_recv(context)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait_of(values: &[&str]) -> Result<Option<u64>, (Option<String>, String)> {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(PREFER, HeaderValue::from_str(value).unwrap());
        }
        requested_wait(&headers).map_err(|error| match error {
            ApiError::InvalidRequest { param, message } => (param, message),
            other => panic!("unexpected {other:?}"),
        })
    }

    #[test]
    fn the_wait_preference_is_read_among_others_and_malformed_ones_name_the_header() {
        assert_eq!(wait_of(&[]), Ok(None));
        assert_eq!(wait_of(&["respond-async"]), Ok(None));
        assert_eq!(wait_of(&["wait=10"]), Ok(Some(10)));
        assert_eq!(wait_of(&["respond-async, wait=60"]), Ok(Some(60)));
        assert_eq!(wait_of(&["handling=lenient", "Wait = \"5\""]), Ok(Some(5)));
        assert_eq!(wait_of(&["wait=1;foo=bar"]), Ok(Some(1)));
        for malformed in [
            "wait",
            "wait=",
            "wait=0",
            "wait=61",
            "wait=-1",
            "wait=1.5",
            "wait=+5",
            "wait=abc",
            "wait=99999999999999999999",
        ] {
            let (param, message) = wait_of(&[malformed]).expect_err(malformed);
            assert_eq!(param.as_deref(), Some("Prefer"), "{malformed}");
            assert!(message.contains("1 to 60"), "{message}");
        }
    }

    #[test]
    fn an_event_is_one_data_line_with_the_state_as_its_id() {
        let generation = Generation {
            id: "gen_a".into(),
            account_id: "acct_a".into(),
            model: "vendor_1/model_1".into(),
            endpoint: "vendor_1/model_1/text-to-video".into(),
            mode: "text-to-video".into(),
            status: vidgate_core::GenerationStatus::Queued,
            // A line break in a prompt must not end the data line.
            input: crate::store::StoredJson::from_value(
                &serde_json::json!({ "prompt": "two\nlines" }),
            ),
            output: None,
            error: None,
            price: vidgate_core::Micros(100_000),
            official_price: vidgate_core::Micros(100_000),
            source: "api".into(),
            webhook_url: None,
            attempts: 0,
            created_at: 1_700_000_000_000,
            started_at: None,
            completed_at: None,
        };
        let chunk = event_chunk(&generation, "queued-0", "http://x/api/v1", true);
        let text = std::str::from_utf8(&chunk).unwrap();
        assert!(
            text.starts_with("retry: 1000\nid: queued-0\ndata: {"),
            "{text}"
        );
        assert!(text.ends_with("}\n\n"), "{text}");
        assert_eq!(text.matches('\n').count(), 4, "{text}");
        let later = event_chunk(&generation, "queued-0", "http://x/api/v1", false);
        assert!(
            std::str::from_utf8(&later)
                .unwrap()
                .starts_with("id: queued-0\n")
        );
    }
}
