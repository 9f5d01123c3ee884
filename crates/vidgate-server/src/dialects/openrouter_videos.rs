//! OpenRouter's video API (`/api/v1/videos`) ↔ vidgate's catalog inputs
//! and generations. Read from OpenRouter's official TypeScript SDK,
//! `@openrouter/sdk` 1.3.19 (`esm/models/videogenerationrequest.js`,
//! `videogenerationresponse.js`, `videogenerationusage.js`,
//! `videomodel.js`, `frameimage.js`, `inputreference.js`,
//! `badrequestresponseerrordata.js`, and `esm/funcs/videoGeneration*.js`
//! for the statuses each call accepts), whose response schemas are strict:
//! a create must answer 202, a job must carry `polling_url`, `error` must
//! be text, and a model must carry every VideoModel key (null allowed).

use serde_json::{Map, Value, json};
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

/// OpenRouter's job status (`VideoGenerationResponseStatus`).
fn status_of(status: GenerationStatus) -> &'static str {
    match status {
        GenerationStatus::Queued => "pending",
        GenerationStatus::Running => "in_progress",
        GenerationStatus::Succeeded => "completed",
        GenerationStatus::Failed => "failed",
        GenerationStatus::Canceled => "cancelled",
    }
}

/// A generation as OpenRouter's `VideoGenerationResponse`. `api_base` ends
/// in `/api/v1`; `polling_url` is this job's `GET`, and `unsigned_urls`
/// its `content` (the same key reads it). `usage.cost` is what vidgate
/// charged, once it is final: the price when it succeeded, 0 otherwise.
pub fn job_object(generation: &Generation, api_base: &str) -> Value {
    let polling_url = format!("{api_base}/videos/{}", generation.id);
    let mut job = json!({
        "id": generation.id,
        "generation_id": generation.id,
        "polling_url": polling_url,
        "status": status_of(generation.status),
    });
    let cost = match generation.status {
        GenerationStatus::Succeeded => Some(generation.price),
        GenerationStatus::Failed | GenerationStatus::Canceled => Some(Micros::ZERO),
        GenerationStatus::Queued | GenerationStatus::Running => None,
    };
    if let Some(cost) = cost {
        job["usage"] = json!({ "cost": cost.to_usd(), "is_byok": false });
    }
    match generation.status {
        GenerationStatus::Succeeded => {
            job["unsigned_urls"] = json!([format!("{polling_url}/content?index=0")]);
        }
        GenerationStatus::Failed => {
            let error = generation
                .error
                .as_ref()
                .and_then(|error| serde_json::from_str::<Value>(error.text()).ok())
                .unwrap_or(Value::Null);
            job["error"] = Value::from(
                error["message"]
                    .as_str()
                    .unwrap_or("The generation failed."),
            );
        }
        GenerationStatus::Canceled => {
            job["error"] = Value::from("The generation was canceled; nothing was charged.");
        }
        GenerationStatus::Queued | GenerationStatus::Running => {}
    }
    job
}

/// Each catalog model as OpenRouter's `VideoModel`, every key present
/// (the SDK refuses a model without one). What the catalog does not know
/// (when the model was added, creativity, upscaling) is null or 0.
pub fn model_object(model: &Model) -> Value {
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
    json!({
        "id": model.id,
        "canonical_slug": model.id,
        "name": model.name,
        "description": model.description,
        "created": 0,
        "supported_resolutions": resolutions,
        "supported_durations": durations,
        "supported_aspect_ratios": ratios,
        "supported_sizes": sizes,
        "supported_frame_images": if frame_images.is_empty() { Value::Null } else { json!(frame_images) },
        "generate_audio": model.parameter("generate_audio").is_some(),
        "seed": model.parameter("seed").is_some(),
        "creativity": Value::Null,
        "upscale_factor": Value::Null,
        "allowed_passthrough_parameters": [],
    })
}

/// `values` once each, in their first order.
fn distinct<'a>(values: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen: Vec<&str> = Vec::new();
    for value in values {
        if !seen.contains(&value) {
            seen.push(value);
        }
    }
    seen
}

/// OpenRouter's error object (`BadRequestResponseErrorData` and its
/// siblings: `{"error": {code, message, metadata}}`, `code` the HTTP
/// status as a number), with vidgate's code and the surface's field name
/// in `metadata`.
pub fn error_object(status: u16, code: &str, message: &str, param: Option<&str>) -> Value {
    let mut metadata = json!({ "code": code });
    if let Some(param) = param {
        metadata["param"] = Value::from(param);
    }
    json!({ "error": { "code": status, "message": message, "metadata": metadata } })
}
