//! `POST /uploads` (multipart/form-data, field `file`): media uploaded to
//! obtain a URL for any `*_url` request field; and `POST /uploads/initiate`:
//! presigned direct uploads, which local-disk storage cannot sign, so it
//! answers the spec's 501.

use axum::Json;
use axum::extract::multipart::{MultipartError, MultipartRejection};
use axum::extract::{Extension, Multipart, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use vidgate_core::ValidatedInput;
use vidgate_media::{MediaDetails, MediaInfo};

use super::{ApiError, AppState, rfc3339};
use crate::ids::random_token;
use crate::store::{Caller, NewUpload, now_millis};

const FILE_FIELD: &str = "file";

pub async fn initiate() -> ApiError {
    ApiError::DirectUploadUnavailable(
        "Presigned direct uploads are not available on this deployment; upload with multipart/form-data to POST /uploads instead."
            .into(),
    )
}

fn content_type(info: &MediaInfo) -> &'static str {
    match info.format.catalog_name() {
        "jpg" => "image/jpeg",
        "png" => "image/png",
        "webp" => "image/webp",
        "mp4" => "video/mp4",
        "mov" => "video/quicktime",
        "mp3" => "audio/mpeg",
        _ => "audio/wav",
    }
}

/// What the prober found, as the upload record shows it.
fn media_json(info: &MediaInfo) -> Value {
    let mut media = json!({ "format": info.format.catalog_name() });
    match &info.details {
        MediaDetails::Image { width, height } => {
            media["width"] = json!(width);
            media["height"] = json!(height);
        }
        MediaDetails::Video {
            width,
            height,
            duration_ms,
            frame_rate,
        } => {
            media["width"] = json!(width);
            media["height"] = json!(height);
            media["duration_s"] = json!(*duration_ms as f64 / 1000.0);
            media["fps"] = json!(frame_rate.per_second());
        }
        MediaDetails::Audio { duration_ms } => {
            media["duration_s"] = json!(*duration_ms as f64 / 1000.0);
        }
    }
    media
}

fn unreadable(error: MultipartError) -> ApiError {
    ApiError::invalid(
        FILE_FIELD,
        format!("The multipart body could not be read: {error}"),
    )
}

/// Streams the `file` field to storage with the size cap, decides its type
/// from its content (never from the client's header), probes it and records
/// it for the caller's account.
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Response, ApiError> {
    let mut multipart = multipart.map_err(|rejection| {
        ApiError::invalid(
            FILE_FIELD,
            format!("Send multipart/form-data with a `file` field: {rejection}"),
        )
    })?;
    while let Some(mut field) = multipart.next_field().await.map_err(unreadable)? {
        if field.name() != Some(FILE_FIELD) {
            continue;
        }
        let (incoming, mut file) = state
            .storage
            .incoming_file()
            .await
            .map_err(ApiError::internal)?;
        let mut size_bytes = 0u64;
        let written: Result<(), ApiError> = async {
            while let Some(chunk) = field.chunk().await.map_err(unreadable)? {
                size_bytes += chunk.len() as u64;
                if size_bytes > state.max_upload_bytes {
                    return Err(ApiError::PayloadTooLarge(format!(
                        "The file is larger than {} bytes.",
                        state.max_upload_bytes
                    )));
                }
                file.write_all(&chunk).await.map_err(ApiError::internal)?;
            }
            file.flush().await.map_err(ApiError::internal)
        }
        .await;
        drop(file);
        let probed = match written {
            Ok(()) => {
                let bytes = tokio::fs::read(&incoming)
                    .await
                    .map_err(ApiError::internal)?;
                vidgate_media::probe(&bytes).map_err(|error| {
                    ApiError::invalid(
                        FILE_FIELD,
                        format!("The file is not a readable JPG, PNG, WebP, MP4, MOV, MP3 or WAV file: {error}."),
                    )
                })
            }
            Err(error) => Err(error),
        };
        let info = match probed {
            Ok(info) => info,
            Err(error) => {
                let _ = tokio::fs::remove_file(&incoming).await;
                return Err(error);
            }
        };
        let upload_id = format!("upl_{}", random_token(24));
        let stored = state
            .storage
            .keep_upload(
                &incoming,
                &upload_id,
                info.format.catalog_name(),
                size_bytes,
            )
            .await
            .map_err(ApiError::internal)?;
        let created_at = now_millis();
        let upload = NewUpload {
            id: upload_id,
            account_id: caller.account_id.clone(),
            relative_path: stored.relative_path.clone(),
            content_type: content_type(&info).to_owned(),
            size_bytes: size_bytes as i64,
            media: media_json(&info),
            created_at,
        };
        state.store.create_upload(&upload).await?;
        let record = json!({
            "id": upload.id,
            "object": "upload",
            "url": format!("{}/files/{}", state.api_base, upload.relative_path),
            "content_type": upload.content_type,
            "size_bytes": size_bytes,
            "media": upload.media,
            "created_at": rfc3339(created_at),
        });
        return Ok((StatusCode::CREATED, Json(record)).into_response());
    }
    Err(ApiError::invalid(
        FILE_FIELD,
        "The multipart body has no `file` field.",
    ))
}

/// Refuses a request that names another account's upload: upload URLs are
/// capabilities for fetching, but using one in a generation is reserved to
/// the account that uploaded it.
pub async fn check_upload_ownership(
    state: &AppState,
    caller: &Caller,
    input: &ValidatedInput,
) -> Result<(), ApiError> {
    let prefix = format!("{}/files/", state.api_base);
    let mut fields: Vec<(String, &str)> = Vec::new();
    fields.extend(input.image_url().map(|url| ("image_url".to_owned(), url)));
    fields.extend(
        input
            .end_image_url()
            .map(|url| ("end_image_url".to_owned(), url)),
    );
    for (name, urls) in [
        ("reference_image_urls", input.reference_image_urls()),
        ("reference_video_urls", input.reference_video_urls()),
        ("reference_audio_urls", input.reference_audio_urls()),
    ] {
        fields.extend(urls.into_iter().map(|url| (name.to_owned(), url)));
    }
    for (field, url) in fields {
        let Some(relative_path) = url.strip_prefix(&prefix) else {
            continue;
        };
        if !relative_path.starts_with("uploads/") {
            continue;
        }
        let owner = state.store.upload_owner(relative_path).await?;
        if owner.as_deref() != Some(caller.account_id.as_str()) {
            return Err(ApiError::invalid(
                field.clone(),
                format!("{field} names an upload this account did not make."),
            ));
        }
    }
    Ok(())
}
