//! The OpenAI Videos API (`/v1/videos`) ↔ vidgate's catalog inputs and
//! generations. Read from the official `openai` Python SDK 3.51.0
//! (`resources/videos.py`, `types/video.py`, `types/video_create_params.py`,
//! `types/video_delete_response.py`, `pagination.py`'s
//! `SyncConversationCursorPage`, `_base_client.py`), which is what the
//! tests drive it with; docs/dialects.md lists the choices.

use serde::Serialize;
use serde_json::{Map, Value, json};
use utoipa::ToSchema;
use vidgate_core::{Catalog, Endpoint, GenerationStatus, Mode, Model, Purpose};

use super::{Invalid, typed_as_catalog, unix_seconds};
use crate::store::Generation;

/// The fields this surface names differently from vidgate's catalog, as
/// (vidgate's name, the surface's name). An error about one of vidgate's
/// fields names the surface's field (`param` in OpenAI's error object).
const RENAMED: [(&str, &str); 5] = [
    ("duration", "seconds"),
    ("resolution", "size"),
    ("aspect_ratio", "size"),
    ("image_url", "input_reference"),
    // The file of a stored upload (`http/uploads.rs`).
    ("file", "input_reference"),
];

/// The surface's name for one of vidgate's fields.
pub fn surface_param(vidgate_param: &str) -> &str {
    RENAMED
        .iter()
        .find(|(vidgate, _)| *vidgate == vidgate_param)
        .map_or(vidgate_param, |(_, surface)| surface)
}

/// A file sent as `input_reference`, once the HTTP layer stored it as an
/// upload of the caller's account.
pub struct StoredReference {
    /// The upload's URL, which the submit reads like any `image_url`.
    pub url: String,
    /// The SHA-256 of its bytes: what a retry is compared on, since each
    /// retry stores the file again under a new URL.
    pub sha256: String,
}

/// A create request in vidgate's terms.
#[derive(Debug)]
pub struct CreateRequest<'c> {
    pub endpoint: Endpoint<'c>,
    /// The body `/api/v1/run/{endpoint}` would be sent.
    pub body: Vec<u8>,
    /// The request as parsed, for the idempotency key (`submit::Submission`).
    pub idempotency_request: Vec<u8>,
}

/// Translates the fields of `POST /v1/videos` (a JSON body's, or a form's
/// made into one object by `form_to_object`, then `from_form`) into a
/// vidgate submit.
///
/// - `model` is a catalog model id; OpenAI's default (`sora-2`) is not
///   one, so it is required.
/// - `seconds` (text in OpenAI's schema, `VideoSeconds`) is `duration`.
/// - `size` ("WxH", `VideoSize`) is the model's frame of that width and
///   height: its `resolution` and `aspect_ratio`, each where the mode takes
///   it, and refused unless the mode makes exactly that frame.
/// - `input_reference` (a file, or `{"image_url"}` as in
///   `ImageInputReferenceParam`) makes it image-to-video with that image.
/// - Every other field the endpoint takes passes through, typed as the
///   catalog says (a form sends text).
pub fn create_request<'c>(
    catalog: &'c Catalog,
    mut fields: Map<String, Value>,
    from_form: bool,
    file: Option<StoredReference>,
) -> Result<CreateRequest<'c>, Invalid> {
    let model = model_named(catalog, fields.remove("model"))?;
    for (vidgate, surface) in &RENAMED[..4] {
        if fields.contains_key(*vidgate) {
            return Err(Invalid::of(
                vidgate,
                format!("Send {surface} instead of {vidgate} on this API."),
            ));
        }
    }
    let (image_url, fingerprint) = match (fields.remove("input_reference"), file) {
        (Some(_), Some(_)) => {
            return Err(Invalid::of(
                "input_reference",
                "Send input_reference once: a file or an image_url.",
            ));
        }
        (None, Some(file)) => (Some(file.url), Some(format!("sha256:{}", file.sha256))),
        (Some(reference), None) => (Some(reference_url(reference)?), None),
        (None, None) => (None, None),
    };
    let mode = match image_url {
        Some(_) => Mode::ImageToVideo,
        None => Mode::TextToVideo,
    };
    let endpoint = model.endpoint(mode).ok_or_else(|| match mode {
        Mode::ImageToVideo => Invalid::of(
            "input_reference",
            format!("{} does not make video from an image.", model.id),
        ),
        _ => Invalid::of(
            "input_reference",
            format!(
                "{} makes video only from an image: send input_reference.",
                model.id
            ),
        ),
    })?;
    let mut body = Map::new();
    let seconds = fields.remove("seconds");
    let size = fields.remove("size");
    for (name, value) in fields {
        // A form sends a field the client set to None as empty text.
        if from_form && name != "prompt" && value == Value::String(String::new()) {
            continue;
        }
        let value = if from_form {
            typed_as_catalog(endpoint, &name, value)
        } else {
            value
        };
        body.insert(name, value);
    }
    if let Some(seconds) = seconds {
        body.insert("duration".into(), whole_seconds(&seconds)?);
    }
    let frame = size.map(|size| frame_named(endpoint, &size)).transpose()?;
    if let Some((resolution, aspect_ratio, _)) = &frame {
        for (name, value) in [("resolution", resolution), ("aspect_ratio", aspect_ratio)] {
            if endpoint.parameter(name).is_some() {
                body.insert(name.into(), Value::String(value.clone()));
            }
        }
    }
    if let Some(image_url) = &image_url {
        body.insert("image_url".into(), Value::String(image_url.clone()));
    }
    let body = Value::Object(body);
    let input = endpoint
        .validate_value(&body, Purpose::Submit)
        .map_err(|invalid| Invalid {
            param: invalid
                .param
                .as_deref()
                .map(|param| surface_param(param).to_owned()),
            message: invalid.message,
        })?;
    if let Some((_, _, (width, height))) = frame {
        let made = endpoint.frame_size(&input);
        if made != (width, height) {
            return Err(Invalid::of(
                "size",
                format!(
                    "{} makes {}x{} frames in {mode} with these fields, not {width}x{height}.",
                    model.id, made.0, made.1
                ),
            ));
        }
    }
    let mut compared = body.clone();
    if let (Some(fingerprint), Value::Object(fields)) = (fingerprint, &mut compared) {
        fields.insert("image_url".into(), Value::String(fingerprint));
    }
    Ok(CreateRequest {
        endpoint,
        body: body.to_string().into_bytes(),
        idempotency_request: compared.to_string().into_bytes(),
    })
}

/// The JSON Schema of a create request, for the OpenAPI document: as a
/// form (`from_form`: every value text, `input_reference` a file, nested
/// values as bracket keys) or as a JSON object.
pub fn create_schema(catalog: &Catalog, from_form: bool) -> Value {
    let models: Vec<&str> = catalog
        .models()
        .iter()
        .map(|model| model.id.as_str())
        .collect();
    let input_reference = if from_form {
        json!({ "type": "string", "format": "binary",
            "description": "An image: makes it image-to-video from that image." })
    } else {
        json!({ "type": "object", "required": ["image_url"],
            "properties": { "image_url": { "type": "string", "format": "uri" } },
            "description": "An image URL: makes it image-to-video from that image." })
    };
    json!({
        "type": "object",
        "required": ["model"],
        "properties": {
            "model": { "type": "string", "enum": models,
                "description": "A vidgate model id." },
            "prompt": { "type": "string" },
            "seconds": { "type": "string", "pattern": "^[0-9]+$",
                "description": "The duration in whole seconds, one the model takes." },
            "size": { "type": "string", "pattern": "^[0-9]+x[0-9]+$",
                "description": "WIDTHxHEIGHT, one of the model's frames in the mode." },
            "input_reference": input_reference,
        },
        "additionalProperties": {
            "description": "Any other field the model's endpoint takes (generate_audio, seed, negative_prompt, …), typed as the catalog says; a form's text is read as that type."
        },
    })
}

fn model_named(catalog: &Catalog, model: Option<Value>) -> Result<&Model, Invalid> {
    let ids = || {
        catalog
            .models()
            .iter()
            .map(|model| model.id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match model {
        Some(Value::String(id)) => catalog.model(&id).ok_or_else(|| {
            Invalid::of(
                "model",
                format!("No model {id:?} exists here; the models are {}.", ids()),
            )
        }),
        _ => Err(Invalid::of(
            "model",
            format!("model is required: one of {}.", ids()),
        )),
    }
}

/// The URL of an `input_reference` object (`ImageInputReferenceParam`:
/// `image_url` or `file_id`). vidgate has no Files API, so a `file_id`
/// names nothing here.
fn reference_url(reference: Value) -> Result<String, Invalid> {
    let url = match &reference {
        Value::Object(fields) if fields.contains_key("file_id") => {
            return Err(Invalid::of(
                "input_reference",
                "input_reference.file_id is not supported here: upload the file as input_reference, or send input_reference.image_url.",
            ));
        }
        Value::Object(fields) => fields.get("image_url").and_then(Value::as_str),
        _ => None,
    };
    url.filter(|url| !url.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| {
            Invalid::of(
                "input_reference",
                "input_reference must be a file or an object with image_url.",
            )
        })
}

/// `seconds` as vidgate's whole `duration`: text such as "8" (OpenAI's
/// `VideoSeconds` is text), or a number in a JSON body.
fn whole_seconds(seconds: &Value) -> Result<Value, Invalid> {
    let parsed = match seconds {
        Value::String(text) => text.trim().parse::<i64>().ok(),
        Value::Number(number) => number.as_i64(),
        _ => None,
    };
    parsed.map(Value::from).ok_or_else(|| {
        Invalid::of(
            "seconds",
            "seconds must be a whole number of seconds, such as \"8\".",
        )
    })
}

/// The model's frame of `size` ("WxH"): its resolution, aspect ratio and
/// width and height.
fn frame_named(
    endpoint: Endpoint<'_>,
    size: &Value,
) -> Result<(String, String, (u32, u32)), Invalid> {
    let frames = endpoint.model.frames();
    let sizes = || {
        frames
            .iter()
            .map(|frame| format!("{}x{}", frame.width, frame.height))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let asked = size.as_str().and_then(|text| {
        let (width, height) = text.trim().split_once('x')?;
        Some((width.parse::<u32>().ok()?, height.parse::<u32>().ok()?))
    });
    asked
        .and_then(|(width, height)| {
            frames
                .iter()
                .find(|frame| frame.width == width && frame.height == height)
        })
        .map(|frame| {
            (
                frame.resolution.clone(),
                frame.aspect_ratio.clone(),
                (frame.width, frame.height),
            )
        })
        .ok_or_else(|| {
            Invalid::of(
                "size",
                format!(
                    "size must be one of {}'s frames, written WIDTHxHEIGHT: {}.",
                    endpoint.model.id,
                    sizes()
                ),
            )
        })
}

/// What a canceled generation's `error.code` says: OpenAI's `Video.status`
/// has no canceled state (`queued`, `in_progress`, `completed`, `failed`),
/// and its clients stop polling on `failed`, so a canceled one is `failed`
/// with this code.
pub const CANCELED_CODE: &str = "canceled";

/// OpenAI's `Video` object (`types/video.py`): the record `GET
/// /v1/videos/{id}` and the create answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct Video {
    /// The generation's id (`gen_…`), the same on every surface.
    pub id: String,
    /// Always `video`.
    pub object: &'static str,
    pub model: String,
    pub status: VideoStatus,
    /// 0 until the clip is stored, then 100: vidgate does not know how far
    /// a running job is.
    pub progress: u8,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds, once it is final.
    pub completed_at: Option<i64>,
    /// Always null: a clip's retention is the deployment's (`output.expired`
    /// on `/api/v1`).
    pub expires_at: Option<i64>,
    pub prompt: Option<String>,
    /// Always null: vidgate has no remix.
    pub remixed_from_video_id: Option<String>,
    /// The duration in whole seconds, as text.
    pub seconds: String,
    /// The frame, `WIDTHxHEIGHT`.
    pub size: String,
    pub error: Option<VideoError>,
}

/// `Video.status`. A canceled generation is `failed` with the error code
/// `canceled` (`CANCELED_CODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VideoStatus {
    Queued,
    InProgress,
    Completed,
    Failed,
}

/// Why a video failed: vidgate's error code and message.
#[derive(Debug, Serialize, ToSchema)]
pub struct VideoError {
    pub code: String,
    pub message: String,
}

/// A page of `GET /v1/videos` (`SyncConversationCursorPage`).
#[derive(Debug, Serialize, ToSchema)]
pub struct VideoList {
    /// Always `list`.
    pub object: &'static str,
    pub data: Vec<Video>,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub has_more: bool,
}

/// The answer of `DELETE /v1/videos/{id}` (`VideoDeleteResponse`).
#[derive(Debug, Serialize, ToSchema)]
pub struct VideoDeleted {
    pub id: String,
    /// Always `video.deleted`.
    pub object: &'static str,
    pub deleted: bool,
}

impl VideoDeleted {
    pub fn new(id: String, deleted: bool) -> VideoDeleted {
        VideoDeleted {
            id,
            object: "video.deleted",
            deleted,
        }
    }
}

/// A generation as OpenAI's `Video` object.
pub fn video_object(generation: &Generation, catalog: &Catalog) -> Video {
    let stored = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    let input = stored(generation.input.text());
    let output = generation
        .output
        .as_ref()
        .map(|output| stored(output.text()));
    let (status, error) = match generation.status {
        GenerationStatus::Queued => (VideoStatus::Queued, None),
        GenerationStatus::Running => (VideoStatus::InProgress, None),
        GenerationStatus::Succeeded => (VideoStatus::Completed, None),
        GenerationStatus::Failed => {
            let error = generation
                .error
                .as_ref()
                .map(|error| stored(error.text()))
                .unwrap_or(Value::Null);
            let text = |field: &str| error[field].as_str().unwrap_or_default().to_owned();
            (
                VideoStatus::Failed,
                Some(VideoError {
                    code: text("code"),
                    message: text("message"),
                }),
            )
        }
        GenerationStatus::Canceled => (
            VideoStatus::Failed,
            Some(VideoError {
                code: CANCELED_CODE.to_owned(),
                message: "The generation was canceled before it ran; nothing was charged."
                    .to_owned(),
            }),
        ),
    };
    let (width, height) = match &output {
        Some(output) if output["width"].is_u64() => (
            output["width"].as_u64().unwrap_or(0),
            output["height"].as_u64().unwrap_or(0),
        ),
        _ => catalog
            .endpoint(&generation.endpoint)
            .map(|endpoint| {
                let input = vidgate_core::ValidatedInput::from_stored_json(input.clone());
                let (width, height) = endpoint.frame_size(&input);
                (u64::from(width), u64::from(height))
            })
            .unwrap_or((0, 0)),
    };
    let seconds = match &input["duration"] {
        Value::Number(number) => number.to_string(),
        _ => String::new(),
    };
    Video {
        id: generation.id.clone(),
        object: "video",
        model: generation.model.clone(),
        status,
        progress: if generation.status == GenerationStatus::Succeeded {
            100
        } else {
            0
        },
        created_at: unix_seconds(generation.created_at),
        completed_at: generation.completed_at.map(unix_seconds),
        expires_at: None,
        prompt: input["prompt"].as_str().map(str::to_owned),
        remixed_from_video_id: None,
        seconds,
        size: format!("{width}x{height}"),
        error,
    }
}

/// OpenAI's error object (`{"error": {message, type, param, code}}`, read
/// by `_base_client._make_status_error_from_response`).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = OpenAiError)]
pub struct ErrorObject {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = OpenAiErrorDetail)]
pub struct ErrorDetail {
    pub message: String,
    /// The kind of error, in OpenAI's names; the SDK picks its exception by
    /// status alone, so this is for people.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The field at fault, in this surface's names (`seconds`, `size`).
    pub param: Option<String>,
    /// vidgate's error code (`invalid_request`, `insufficient_balance`, …).
    pub code: String,
}

/// The error object for an answer of `status` with vidgate's `code` and
/// `message`, and `param` already in the surface's names (the handlers
/// rename it).
pub fn error_object(status: u16, code: &str, message: &str, param: Option<&str>) -> ErrorObject {
    let kind = match status {
        401 => "authentication_error",
        402 => "insufficient_quota",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        503 => "service_unavailable_error",
        500..=599 => "server_error",
        _ => "invalid_request_error",
    };
    ErrorObject {
        error: ErrorDetail {
            message: message.to_owned(),
            kind,
            param: param.map(str::to_owned),
            code: code.to_owned(),
        },
    }
}
