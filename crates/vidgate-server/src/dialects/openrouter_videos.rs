//! OpenRouter's video API (`/api/v1/videos`) ↔ vidgate's catalog inputs
//! and generations. Read from OpenRouter's official TypeScript SDK,
//! `@openrouter/sdk` 1.3.19 (`esm/models/videogenerationrequest.js`,
//! `videogenerationresponse.js`, `videogenerationusage.js`,
//! `videomodel.js`, `frameimage.js`, `inputreference.js`,
//! `badrequestresponseerrordata.js`, and `esm/funcs/videoGeneration*.js`
//! for the statuses each call accepts), whose response schemas are strict:
//! a create must answer 202, a job must carry `polling_url`, `error` must
//! be text, and a model must carry every VideoModel key (null allowed).

use serde::Serialize;
use serde_json::{Map, Value, json};
use utoipa::ToSchema;
use vidgate_core::catalog::Frame;
use vidgate_core::{Catalog, Endpoint, GenerationStatus, Micros, Mode, Model, Purpose};

use super::Invalid;
use crate::store::Generation;

/// The request fields vidgate reads as OpenRouter names them, beside
/// vidgate's own names for the same inputs.
const SAME_NAMES: [&str; 6] = [
    "prompt",
    "duration",
    "resolution",
    "aspect_ratio",
    "seed",
    "generate_audio",
];

/// Fields OpenRouter's request takes that describe the caller or route
/// among OpenRouter's providers, not the video: read and left aside.
const IGNORED: [&str; 4] = ["provider", "user", "session_id", "trace"];

/// A create request in vidgate's terms.
#[derive(Debug)]
pub struct CreateRequest<'c> {
    pub endpoint: Endpoint<'c>,
    /// The body `/api/v1/run/{endpoint}` would be sent.
    pub body: Vec<u8>,
}

/// Translates `POST /api/v1/videos` (`VideoGenerationRequest`) into a
/// vidgate submit.
///
/// - `model` is a catalog model id, required as in OpenRouter's schema.
/// - `frame_images` (`FrameImage`: `first_frame`, `last_frame`) make it
///   image-to-video: `image_url`, and `end_image_url` where the model
///   takes one.
/// - `input_references` (`InputReference`: image, video or audio URLs) make
///   it reference-to-video, each kind in its list.
/// - `size` ("WxH") picks the model's frame as `resolution` and
///   `aspect_ratio`; `callback_url` is vidgate's `webhook_url`.
/// - `prompt`, `duration`, `resolution`, `aspect_ratio`, `seed` and
///   `generate_audio` are vidgate's own names.
pub fn create_request<'c>(
    catalog: &'c Catalog,
    mut fields: Map<String, Value>,
) -> Result<CreateRequest<'c>, Invalid> {
    let model = model_named(catalog, fields.remove("model"))?;
    for name in IGNORED {
        fields.remove(name);
    }
    let mut body = Map::new();
    for name in SAME_NAMES {
        if let Some(value) = fields.remove(name) {
            body.insert(name.to_owned(), value);
        }
    }
    if let Some(callback_url) = fields.remove("callback_url") {
        body.insert("webhook_url".into(), callback_url);
    }
    let frames = fields.remove("frame_images");
    let references = fields.remove("input_references");
    let size = fields.remove("size");
    if let Some((name, _)) = fields.into_iter().next() {
        return Err(Invalid::of(
            &name,
            format!("{name} is not a field vidgate takes on this API."),
        ));
    }
    let mode = match (&frames, &references) {
        (Some(_), Some(_)) => {
            return Err(Invalid::of(
                "input_references",
                "Send frame_images or input_references, not both.",
            ));
        }
        (Some(frames), None) => {
            read_frames(frames, &mut body)?;
            Mode::ImageToVideo
        }
        (None, Some(references)) => {
            read_references(references, &mut body)?;
            Mode::ReferenceToVideo
        }
        (None, None) => Mode::TextToVideo,
    };
    let endpoint = model.endpoint(mode).ok_or_else(|| {
        let param = match mode {
            Mode::ImageToVideo => "frame_images",
            Mode::ReferenceToVideo => "input_references",
            Mode::TextToVideo => "model",
        };
        Invalid::of(param, format!("{} does not offer {mode}.", model.id))
    })?;
    if let Some(size) = size {
        let frame = frame_of_size(model, &size)?;
        for (name, value) in [
            ("resolution", &frame.resolution),
            ("aspect_ratio", &frame.aspect_ratio),
        ] {
            if endpoint.parameter(name).is_some() {
                body.insert(name.into(), Value::String(value.clone()));
            }
        }
    }
    let body = Value::Object(body);
    endpoint
        .validate_value(&body, Purpose::Submit)
        .map_err(|invalid| Invalid {
            param: invalid
                .param
                .as_deref()
                .map(|param| surface_param(param).to_owned()),
            message: invalid.message,
        })?;
    Ok(CreateRequest {
        endpoint,
        body: body.to_string().into_bytes(),
    })
}

/// The JSON Schema of a create request, for the OpenAPI document
/// (`VideoGenerationRequest`, with the fields vidgate reads).
pub fn create_schema(catalog: &Catalog) -> Value {
    let models: Vec<&str> = catalog
        .models()
        .iter()
        .map(|model| model.id.as_str())
        .collect();
    let url_part = |kind: &str| {
        json!({ "type": "object", "required": ["type", kind],
            "properties": {
                "type": { "type": "string", "enum": [kind] },
                kind: { "type": "object", "required": ["url"],
                    "properties": { "url": { "type": "string", "format": "uri" } } } } })
    };
    let mut frame = url_part("image_url");
    frame["required"] = json!(["type", "image_url", "frame_type"]);
    frame["properties"]["frame_type"] =
        json!({ "type": "string", "enum": ["first_frame", "last_frame"] });
    json!({
        "type": "object",
        "required": ["model", "prompt"],
        "additionalProperties": false,
        "properties": {
            "model": { "type": "string", "enum": models, "description": "A vidgate model id." },
            "prompt": { "type": "string" },
            "duration": { "type": "integer", "description": "Seconds, one the model takes." },
            "resolution": { "type": "string" },
            "aspect_ratio": { "type": "string" },
            "size": { "type": "string", "pattern": "^[0-9]+x[0-9]+$",
                "description": "WIDTHxHEIGHT, one of the model's frames." },
            "seed": { "type": "integer" },
            "generate_audio": { "type": "boolean" },
            "frame_images": { "type": "array", "items": frame,
                "description": "The first (and last) frame: makes it image-to-video." },
            "input_references": { "type": "array",
                "items": { "anyOf": [url_part("image_url"), url_part("video_url"), url_part("audio_url")] },
                "description": "Reference media: makes it reference-to-video." },
            "callback_url": { "type": "string", "format": "uri",
                "description": "Gets vidgate's signed webhook, as webhook_url does." },
            "provider": { "type": "object", "description": "Read and left aside." },
            "user": { "type": "string", "description": "Read and left aside." },
            "session_id": { "type": "string", "description": "Read and left aside." },
            "trace": { "type": "object", "description": "Read and left aside." },
        },
    })
}

/// The surface's name for one of vidgate's fields, for `metadata.param`.
pub fn surface_param(vidgate_param: &str) -> &str {
    match vidgate_param {
        "webhook_url" => "callback_url",
        "image_url" | "end_image_url" => "frame_images",
        "reference_image_urls" | "reference_video_urls" | "reference_audio_urls" => {
            "input_references"
        }
        other => other,
    }
}

fn model_named(catalog: &Catalog, model: Option<Value>) -> Result<&Model, Invalid> {
    let id = model
        .as_ref()
        .and_then(Value::as_str)
        .ok_or_else(|| Invalid::of("model", "model is required: a model id of /videos/models."))?;
    catalog.model(id).ok_or_else(|| {
        Invalid::of(
            "model",
            format!("No model {id:?} exists here; /videos/models lists them."),
        )
    })
}

/// `frame_images`: `[{type: "image_url", image_url: {url}, frame_type}]`.
fn read_frames(frames: &Value, body: &mut Map<String, Value>) -> Result<(), Invalid> {
    let wrong = || {
        Invalid::of(
            "frame_images",
            "frame_images must be a list of {type: \"image_url\", image_url: {url}, frame_type: \"first_frame\" or \"last_frame\"}.",
        )
    };
    for frame in frames.as_array().ok_or_else(wrong)? {
        let url = frame["image_url"]["url"].as_str().ok_or_else(wrong)?;
        let field = match frame["frame_type"].as_str() {
            Some("first_frame") => "image_url",
            Some("last_frame") => "end_image_url",
            _ => return Err(wrong()),
        };
        if body.insert(field.into(), Value::from(url)).is_some() {
            return Err(Invalid::of(
                "frame_images",
                "frame_images has two frames of one frame_type.",
            ));
        }
    }
    Ok(())
}

/// `input_references`: `[{type: "image_url", image_url: {url}}]` and the
/// same for `video_url` and `audio_url` (`ContentPartImage`,
/// `ContentPartVideo`, `ContentPartAudio`).
fn read_references(references: &Value, body: &mut Map<String, Value>) -> Result<(), Invalid> {
    let wrong = || {
        Invalid::of(
            "input_references",
            "input_references must be a list of {type, image_url|video_url|audio_url: {url}}.",
        )
    };
    for reference in references.as_array().ok_or_else(wrong)? {
        let kind = reference["type"].as_str().ok_or_else(wrong)?;
        let field = match kind {
            "image_url" => "reference_image_urls",
            "video_url" => "reference_video_urls",
            "audio_url" => "reference_audio_urls",
            _ => return Err(wrong()),
        };
        let url = reference[kind]["url"].as_str().ok_or_else(wrong)?;
        let list = body
            .entry(field)
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(urls) = list {
            urls.push(Value::from(url));
        }
    }
    Ok(())
}

fn frame_of_size<'m>(model: &'m Model, size: &Value) -> Result<&'m Frame, Invalid> {
    let asked = size.as_str().and_then(|text| {
        let (width, height) = text.split_once('x')?;
        Some((width.parse::<u32>().ok()?, height.parse::<u32>().ok()?))
    });
    asked
        .and_then(|(width, height)| {
            model
                .frames()
                .iter()
                .find(|frame| frame.width == width && frame.height == height)
        })
        .ok_or_else(|| {
            Invalid::of(
                "size",
                format!(
                    "size must be one of {}'s supported_sizes (/videos/models).",
                    model.id
                ),
            )
        })
}

/// OpenRouter's `VideoGenerationResponse`: the create answer and `GET
/// /api/v1/videos/{id}`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = OpenRouterVideoJob)]
pub struct Job {
    /// The generation's id (`gen_…`), the same on every surface.
    pub id: String,
    pub generation_id: String,
    /// This job's `GET`.
    pub polling_url: String,
    pub status: JobStatus,
    /// What vidgate charged, once the job is final.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The clip's `content` URL, once it succeeded (the same key reads it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsigned_urls: Option<Vec<String>>,
    /// Why it failed or that it was canceled, as text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `VideoGenerationResponseStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = OpenRouterJobStatus)]
pub enum JobStatus {
    Pending,
    InProgress,
    Completed,
    Failed,
    Cancelled,
}

/// `VideoGenerationUsage`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = OpenRouterUsage)]
pub struct Usage {
    /// In US dollars: the price when the job succeeded, 0 otherwise.
    pub cost: f64,
    pub is_byok: bool,
}

/// OpenRouter's job status.
fn status_of(status: GenerationStatus) -> JobStatus {
    match status {
        GenerationStatus::Queued => JobStatus::Pending,
        GenerationStatus::Running => JobStatus::InProgress,
        GenerationStatus::Succeeded => JobStatus::Completed,
        GenerationStatus::Failed => JobStatus::Failed,
        GenerationStatus::Canceled => JobStatus::Cancelled,
    }
}

/// A generation as OpenRouter's job. `api_base` ends in `/api/v1`.
pub fn job_object(generation: &Generation, api_base: &str) -> Job {
    let polling_url = format!("{api_base}/videos/{}", generation.id);
    let cost = match generation.status {
        GenerationStatus::Succeeded => Some(generation.price),
        GenerationStatus::Failed | GenerationStatus::Canceled => Some(Micros::ZERO),
        GenerationStatus::Queued | GenerationStatus::Running => None,
    };
    let unsigned_urls = (generation.status == GenerationStatus::Succeeded)
        .then(|| vec![format!("{polling_url}/content?index=0")]);
    let error = match generation.status {
        GenerationStatus::Failed => {
            let error = generation
                .error
                .as_ref()
                .and_then(|error| serde_json::from_str::<Value>(error.text()).ok())
                .unwrap_or(Value::Null);
            Some(
                error["message"]
                    .as_str()
                    .unwrap_or("The generation failed.")
                    .to_owned(),
            )
        }
        GenerationStatus::Canceled => {
            Some("The generation was canceled; nothing was charged.".to_owned())
        }
        GenerationStatus::Queued | GenerationStatus::Running | GenerationStatus::Succeeded => None,
    };
    Job {
        id: generation.id.clone(),
        generation_id: generation.id.clone(),
        polling_url,
        status: status_of(generation.status),
        usage: cost.map(|cost| Usage {
            cost: cost.to_usd(),
            is_byok: false,
        }),
        unsigned_urls,
        error,
    }
}

/// The answer of `GET /api/v1/videos/models`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = OpenRouterVideoModels)]
pub struct ModelList {
    pub data: Vec<VideoModel>,
}

/// OpenRouter's `VideoModel`, every key present (the SDK refuses a model
/// without one). What the catalog does not know (when the model was added,
/// creativity, upscaling) is null or 0.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = OpenRouterVideoModel)]
pub struct VideoModel {
    pub id: String,
    pub canonical_slug: String,
    pub name: String,
    pub description: String,
    /// Always 0: the catalog does not say when a model was added.
    pub created: i64,
    pub supported_resolutions: Vec<String>,
    pub supported_durations: Option<Vec<i64>>,
    pub supported_aspect_ratios: Vec<String>,
    /// The frames, `WIDTHxHEIGHT`.
    pub supported_sizes: Vec<String>,
    /// `first_frame`, and `last_frame` where the model takes an end image;
    /// null without image-to-video.
    pub supported_frame_images: Option<Vec<&'static str>>,
    pub generate_audio: bool,
    pub seed: bool,
    /// Always null.
    pub creativity: Option<f64>,
    /// Always null.
    pub upscale_factor: Option<f64>,
    /// Always empty.
    pub allowed_passthrough_parameters: Vec<String>,
}

/// A catalog model as a `VideoModel`.
pub fn model_object(model: &Model) -> VideoModel {
    let frames = model.frames();
    let resolutions = distinct(frames.iter().map(|frame| frame.resolution.as_str()));
    let ratios = distinct(frames.iter().map(|frame| frame.aspect_ratio.as_str()));
    let sizes: Vec<String> = frames
        .iter()
        .map(|frame| format!("{}x{}", frame.width, frame.height))
        .collect();
    let durations = model.parameter("duration").map(|duration| {
        match (&duration.allowed_values, duration.minimum, duration.maximum) {
            (Some(values), _, _) => values.iter().filter_map(Value::as_i64).collect::<Vec<_>>(),
            (None, Some(minimum), Some(maximum)) => (minimum..=maximum).collect(),
            _ => Vec::new(),
        }
    });
    let mut frame_images = Vec::new();
    if model.modes().contains(&Mode::ImageToVideo) {
        frame_images.push("first_frame");
        if model.parameter("end_image_url").is_some() {
            frame_images.push("last_frame");
        }
    }
    VideoModel {
        id: model.id.clone(),
        canonical_slug: model.id.clone(),
        name: model.name.clone(),
        description: model.description.clone(),
        created: 0,
        supported_resolutions: resolutions,
        supported_durations: durations,
        supported_aspect_ratios: ratios,
        supported_sizes: sizes,
        supported_frame_images: (!frame_images.is_empty()).then_some(frame_images),
        generate_audio: model.parameter("generate_audio").is_some(),
        seed: model.parameter("seed").is_some(),
        creativity: None,
        upscale_factor: None,
        allowed_passthrough_parameters: Vec::new(),
    }
}

/// `values` once each, in their first order.
fn distinct<'a>(values: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for value in values {
        if !seen.iter().any(|known| known == value) {
            seen.push(value.to_owned());
        }
    }
    seen
}

/// OpenRouter's error object (`BadRequestResponseErrorData` and its
/// siblings: `{"error": {code, message, metadata}}`), with vidgate's code
/// and the surface's field name in `metadata`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = OpenRouterError)]
pub struct ErrorObject {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = OpenRouterErrorDetail)]
pub struct ErrorDetail {
    /// The HTTP status, as a number: the SDK refuses text.
    pub code: u16,
    pub message: String,
    pub metadata: ErrorMetadata,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = OpenRouterErrorMetadata)]
pub struct ErrorMetadata {
    /// vidgate's error code (`invalid_request`, `insufficient_balance`, …).
    pub code: String,
    /// The field at fault, in this surface's names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
}

/// The error object for an answer of `status` with vidgate's `code`,
/// `message` and field at fault.
pub fn error_object(status: u16, code: &str, message: &str, param: Option<&str>) -> ErrorObject {
    ErrorObject {
        error: ErrorDetail {
            code: status,
            message: message.to_owned(),
            metadata: ErrorMetadata {
                code: code.to_owned(),
                param: param.map(str::to_owned),
            },
        },
    }
}
