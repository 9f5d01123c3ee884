//! `POST /uploads` (multipart/form-data, field `file`): media uploaded to
//! obtain a URL for any `*_url` request field; and `POST /uploads/initiate`:
//! presigned direct uploads. Local-disk storage cannot sign, so there it
//! answers the spec's 501; with an S3-compatible bucket it returns a PUT URL
//! for the object, and the object is probed the first time a request names
//! the upload's `url`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::multipart::{MultipartError, MultipartRejection};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Multipart, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;
use vidgate_core::ValidatedInput;
use vidgate_media::{MediaDetails, MediaInfo};

use super::{ApiError, AppState, body_bytes, rfc3339};
use crate::ids::random_token;
use crate::storage::{self, DIRECT_UPLOAD_VALIDITY, ReadError};
use crate::store::{Caller, DirectUpload, NewDirectUpload, NewUpload, now_millis};

const FILE_FIELD: &str = "file";

/// What the probe accepts, for messages.
const ACCEPTED_FORMATS: &str = "JPG, PNG, WebP, MP4, MOV, MP3 or WAV";

/// Creates a pending direct upload and signs a PUT URL for its object.
/// Body: `{"content_type"?, "size_bytes"?}`; a declared content type is
/// bound to the signature (the PUT must send it) and must match what the
/// probe later finds; a declared size is checked against the upload cap.
pub async fn initiate(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    if state.storage.local_root().is_some() {
        return Err(ApiError::DirectUploadUnavailable(
            "Presigned direct uploads are not available on this deployment; upload with multipart/form-data to POST /uploads instead."
                .into(),
        ));
    }
    let body = body_bytes(body)?;
    let request = parse_initiate(&body, state.max_upload_bytes)?;
    let upload_id = format!("upl_{}", random_token(24));
    // A declared type names the file, so the URL serves with that type from
    // the first byte; otherwise the type is found when the file is probed.
    let extension = request
        .content_type
        .map(|name| format!(".{}", storage::extension_of(name)))
        .unwrap_or_default();
    let relative_path = format!("uploads/{}/{upload_id}{extension}", random_token(24));
    let created_at = now_millis();
    let Some(upload_url) = state
        .storage
        .presign_put(&relative_path, request.content_type)
        .await
        .map_err(ApiError::internal)?
    else {
        return Err(ApiError::internal(std::io::Error::other(
            "a bucket could not sign a URL",
        )));
    };
    state
        .store
        .create_direct_upload(&NewDirectUpload {
            id: upload_id.clone(),
            account_id: caller.account_id,
            relative_path: relative_path.clone(),
            created_at,
        })
        .await?;
    let mut headers = Map::new();
    if let Some(content_type) = request.content_type {
        headers.insert("Content-Type".into(), json!(content_type));
    }
    let expires_at = created_at + DIRECT_UPLOAD_VALIDITY.as_millis() as i64;
    let record = json!({
        "id": upload_id,
        "object": "upload",
        "upload_url": upload_url.as_str(),
        "method": "PUT",
        "headers": headers,
        "url": format!("{}/files/{relative_path}", state.api_base),
        "expires_at": rfc3339(expires_at),
    });
    Ok((StatusCode::CREATED, Json(record)).into_response())
}

/// What `POST /uploads/initiate` may be told.
struct InitiateRequest {
    content_type: Option<&'static str>,
}

/// Reads the initiate body (empty means `{}`), naming a bad field in
/// `param`.
fn parse_initiate(body: &[u8], max_upload_bytes: u64) -> Result<InitiateRequest, ApiError> {
    let value: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(body).map_err(|error| ApiError::InvalidRequest {
            message: format!("The body is not valid JSON: {error}"),
            param: None,
        })?
    };
    let Value::Object(fields) = value else {
        return Err(ApiError::InvalidRequest {
            message: "The body must be a JSON object.".into(),
            param: None,
        });
    };
    let mut request = InitiateRequest { content_type: None };
    for (name, value) in &fields {
        match name.as_str() {
            "content_type" => {
                let known = value.as_str().and_then(storage::media_type_named);
                request.content_type = Some(known.ok_or_else(|| {
                    ApiError::invalid(
                        "content_type",
                        "content_type must be one of image/jpeg, image/png, image/webp, video/mp4, video/quicktime, audio/mpeg or audio/wav.",
                    )
                })?);
            }
            "size_bytes" => {
                let fits = value
                    .as_u64()
                    .is_some_and(|size| (1..=max_upload_bytes).contains(&size));
                if !fits {
                    return Err(ApiError::invalid(
                        "size_bytes",
                        format!(
                            "size_bytes must be an integer from 1 to {max_upload_bytes}, the largest upload this deployment accepts."
                        ),
                    ));
                }
            }
            other => {
                return Err(ApiError::invalid(
                    other,
                    format!("Unknown field {other:?}: send content_type and size_bytes only."),
                ));
            }
        }
    }
    Ok(request)
}

fn content_type(info: &MediaInfo) -> &'static str {
    storage::media_type_of_extension(info.format.catalog_name())
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
                vidgate_media::probe(&bytes)
                    .map(|info| (info, bytes))
                    .map_err(|error| {
                        ApiError::invalid(
                            FILE_FIELD,
                            format!("The file is not a readable {ACCEPTED_FORMATS} file: {error}."),
                        )
                    })
            }
            Err(error) => Err(error),
        };
        let (info, contents) = match probed {
            Ok(probed) => probed,
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
                contents,
                &upload_id,
                info.format.catalog_name(),
                content_type(&info),
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
        let owned = match state.store.upload_owner(relative_path).await? {
            Some(owner) => owner == caller.account_id,
            None => match state.store.direct_upload(relative_path).await? {
                Some(direct) if direct.account_id == caller.account_id => {
                    record_direct_upload(state, &direct, relative_path, &field).await?;
                    true
                }
                _ => false,
            },
        };
        if !owned {
            return Err(ApiError::invalid(
                field.clone(),
                format!("{field} names an upload this account did not make."),
            ));
        }
    }
    Ok(())
}

/// The first use of a direct upload: reads and probes the object with the
/// same rules as a multipart upload (the cap, the content's magic bytes) and
/// records it as an upload, so later uses are one indexed read. Nothing is
/// recorded on failure: the client may still PUT the file and try again.
async fn record_direct_upload(
    state: &AppState,
    direct: &DirectUpload,
    relative_path: &str,
    field: &str,
) -> Result<(), ApiError> {
    let bytes = match state
        .storage
        .read(relative_path, state.max_upload_bytes)
        .await
    {
        Ok(bytes) => bytes,
        Err(ReadError::NotFound) => {
            return Err(ApiError::invalid(
                field,
                format!(
                    "{field} names direct upload {} whose file has not been uploaded: PUT the file to its upload_url first.",
                    direct.id
                ),
            ));
        }
        Err(ReadError::TooLarge { limit }) => {
            return Err(ApiError::invalid(
                field,
                format!(
                    "{field} names direct upload {} whose file is larger than {limit} bytes.",
                    direct.id
                ),
            ));
        }
        Err(error @ ReadError::Store(_)) => return Err(ApiError::internal(error)),
    };
    let info = vidgate_media::probe(&bytes).map_err(|error| {
        ApiError::invalid(
            field,
            format!("{field} names direct upload {} whose file is not a readable {ACCEPTED_FORMATS} file: {error}.", direct.id),
        )
    })?;
    let found = content_type(&info);
    let declared = storage::content_type_of(relative_path);
    if declared != storage::UNKNOWN_CONTENT_TYPE && declared != found {
        return Err(ApiError::invalid(
            field,
            format!(
                "{field} names direct upload {} declared as {declared}, but its file is {found}.",
                direct.id
            ),
        ));
    }
    state
        .store
        .record_direct_upload(&NewUpload {
            id: direct.id.clone(),
            account_id: direct.account_id.clone(),
            relative_path: relative_path.to_owned(),
            content_type: found.to_owned(),
            size_bytes: bytes.len() as i64,
            media: media_json(&info),
            created_at: now_millis(),
        })
        .await?;
    Ok(())
}
