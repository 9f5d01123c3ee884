//! `POST /uploads` (multipart/form-data, field `file`): media uploaded to
//! obtain a URL for any `*_url` request field; and `POST /uploads/initiate`:
//! presigned direct uploads. Local-disk storage cannot sign, so there it
//! answers the spec's 501; with an S3-compatible bucket it returns a PUT URL
//! for the object, and the object is probed the first time a request names
//! the upload's `url`.

use std::collections::BTreeMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::multipart::{self, MultipartError, MultipartRejection};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Multipart, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use utoipa::ToSchema;

use super::account::caller_account;
use super::openapi::{
    BodyContent, Context, Field, Operation, Refusal, RequestBody, Schema, Success, record,
};
use super::{ApiError, AppState, body_bytes, rfc3339};
use crate::ids::random_token;
use crate::media::{ACCEPTED_FORMATS, UploadMedia, content_type};
use crate::representation::object_kind;
use crate::storage::{self, DIRECT_UPLOAD_VALIDITY};
use crate::store::{Caller, NewDirectUpload, NewUpload, now_millis};

const FILE_FIELD: &str = "file";

pub const INITIATE: Operation = Operation {
    id: "initiate_upload",
    summary: "Presigned direct upload to the deployment's S3-compatible storage",
    tag: "uploads",
    body: Some(RequestBody {
        required: false,
        content: BodyContent::Fields(&[
            Field {
                name: "content_type",
                required: false,
                schema: Schema::Of(declared_content_type),
            },
            Field {
                name: "size_bytes",
                required: false,
                schema: Schema::Integer {
                    minimum: Some(1),
                    maximum: None,
                    default: None,
                    description: Some("Checked against the deployment's upload limit."),
                },
            },
        ]),
    }),
    success: Success::json(
        "201",
        "The pending upload and where to PUT its file.",
        Schema::Of(record::<DirectUploadRecord>),
    ),
    refusals: &[
        Refusal {
            status: "400",
            description: "invalid_request: a bad content_type or size_bytes (size above the upload limit), or an unknown field; param names it.",
        },
        Refusal {
            status: "501",
            description: "direct_upload_unavailable: presigned uploads are unavailable on this deployment (local-disk storage); use multipart/form-data.",
        },
    ],
    ..Operation::PLAIN
};

fn declared_content_type(_: &mut Context<'_>) -> Value {
    json!({ "type": "string", "enum": ["image/jpeg", "image/png", "image/webp", "video/mp4", "video/quicktime", "audio/mpeg", "audio/wav"],
        "description": "Bound to the signature; the file must turn out to be of this type." })
}

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
    check_upload_quota(&state, &caller, 0).await?;
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
        .uploads()
        .create_direct(&NewDirectUpload {
            id: upload_id.clone(),
            account_id: caller.account_id,
            relative_path: relative_path.clone(),
            created_at,
        })
        .await?;
    let headers = request
        .content_type
        .map(|content_type| ("Content-Type", content_type))
        .into_iter()
        .collect();
    let expires_at = created_at + DIRECT_UPLOAD_VALIDITY.as_millis() as i64;
    let record = DirectUploadRecord {
        expires_at: rfc3339(expires_at),
        headers,
        id: upload_id,
        method: PutMethod::Put,
        object: UploadKind::Upload,
        upload_url: upload_url.to_string(),
        url: format!("{}/files/{relative_path}", state.api_base),
    };
    Ok((StatusCode::CREATED, Json(record)).into_response())
}

// `"object": "upload"`.
object_kind!(UploadKind, Upload);

// `"method": "PUT"`: the one method a presigned upload URL takes.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum PutMethod {
    Put,
}

/// An upload, as `POST /uploads` answers it.
#[derive(Serialize, ToSchema)]
#[schema(as = Upload)]
pub struct UploadRecord {
    content_type: String,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(pattern = "^upl_")]
    id: String,
    #[schema(inline)]
    media: UploadMedia,
    #[schema(inline)]
    object: UploadKind,
    size_bytes: u64,
    /// Usable in any *_url request field of this account.
    #[schema(format = Uri)]
    pub url: String,
}

/// A pending direct upload, as `POST /uploads/initiate` answers it.
#[derive(Serialize, ToSchema)]
#[schema(as = DirectUpload)]
pub struct DirectUploadRecord {
    /// When upload_url stops working: 15 minutes after the initiate.
    #[schema(format = DateTime)]
    expires_at: String,
    /// Headers the PUT must send (Content-Type when one was declared).
    headers: BTreeMap<&'static str, &'static str>,
    #[schema(pattern = "^upl_")]
    id: String,
    #[schema(inline)]
    method: PutMethod,
    #[schema(inline)]
    object: UploadKind,
    /// Presigned URL: PUT the file's bytes here, with `headers`, before `expires_at`.
    #[schema(format = Uri)]
    upload_url: String,
    /// Usable in any *_url request field of this account once the file is PUT; the file is probed on first use.
    #[schema(format = Uri)]
    url: String,
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

fn unreadable(error: MultipartError) -> ApiError {
    ApiError::invalid(
        FILE_FIELD,
        format!("The multipart body could not be read: {error}"),
    )
}

pub const CREATE: Operation = Operation {
    id: "create_upload",
    summary: "Upload media (JPG, PNG, WebP, MP4, MOV, MP3, WAV) to obtain a URL for requests",
    tag: "uploads",
    body: Some(RequestBody {
        required: true,
        content: BodyContent::Multipart(Schema::Of(multipart_file)),
    }),
    success: Success::json("201", "The upload.", Schema::Of(record::<UploadRecord>)),
    refusals: &[
        Refusal {
            status: "400",
            description: "invalid_request: not multipart, no `file` field, or not a supported media file; param is `file`.",
        },
        Refusal {
            status: "413",
            description: "payload_too_large: the file is larger than the deployment's limit.",
        },
    ],
    ..Operation::PLAIN
};

fn multipart_file(_: &mut Context<'_>) -> Value {
    json!({ "type": "object", "required": [FILE_FIELD],
        "properties": { FILE_FIELD: { "type": "string", "format": "binary", "description": "The type is decided from the content, not the declared type." } } })
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
    // The count is checked before the body is read, the bytes once known.
    check_upload_quota(&state, &caller, 0).await?;
    while let Some(field) = multipart.next_field().await.map_err(unreadable)? {
        if field.name() != Some(FILE_FIELD) {
            continue;
        }
        let kept = keep_upload(&state, &caller, field).await?;
        return Ok((StatusCode::CREATED, Json(kept.record)).into_response());
    }
    Err(ApiError::invalid(
        FILE_FIELD,
        "The multipart body has no `file` field.",
    ))
}

/// An upload kept for an account: its record, and the SHA-256 of its bytes.
pub(super) struct KeptUpload {
    pub record: UploadRecord,
    pub sha256: String,
}

/// Keeps a multipart field's file as an upload of the caller's account, as
/// `POST /uploads` does (the OpenAI surface keeps its `input_reference`
/// files so too): refusals name the `file` field.
pub(super) async fn keep_upload(
    state: &AppState,
    caller: &Caller,
    mut field: multipart::Field<'_>,
) -> Result<KeptUpload, ApiError> {
    let (incoming, mut file) = state
        .storage
        .incoming_file()
        .await
        .map_err(ApiError::internal)?;
    let mut size_bytes = 0u64;
    let mut digest = Sha256::new();
    let written: Result<(), ApiError> = async {
        while let Some(chunk) = field.chunk().await.map_err(unreadable)? {
            size_bytes += chunk.len() as u64;
            if size_bytes > state.max_upload_bytes {
                return Err(ApiError::PayloadTooLarge(format!(
                    "The file is larger than {} bytes.",
                    state.max_upload_bytes
                )));
            }
            digest.update(&chunk);
            file.write_all(&chunk).await.map_err(ApiError::internal)?;
        }
        file.flush().await.map_err(ApiError::internal)
    }
    .await;
    drop(file);
    let probed = match written {
        Ok(()) => crate::media::probe_stored_file(incoming.clone())
            .await
            .map_err(|error| {
                ApiError::invalid(
                    FILE_FIELD,
                    format!("The file is not a readable {ACCEPTED_FORMATS} file: {error}."),
                )
            }),
        Err(error) => Err(error),
    };
    let info = match probed {
        Ok(info) => info,
        Err(error) => {
            let _ = tokio::fs::remove_file(&incoming).await;
            return Err(error);
        }
    };
    if let Err(error) = check_upload_quota(state, caller, size_bytes).await {
        let _ = tokio::fs::remove_file(&incoming).await;
        return Err(error);
    }
    let upload_id = format!("upl_{}", random_token(24));
    let stored = state
        .storage
        .keep_upload(
            &incoming,
            &upload_id,
            info.format.catalog_name(),
            content_type(&info),
        )
        .await
        .map_err(ApiError::internal)?;
    let created_at = now_millis();
    let media = UploadMedia::of(&info);
    let upload = NewUpload {
        id: upload_id,
        account_id: caller.account_id.clone(),
        relative_path: stored.relative_path.clone(),
        content_type: content_type(&info).to_owned(),
        size_bytes: size_bytes as i64,
        media: media.to_json(),
        created_at,
    };
    state.store.uploads().create(&upload).await?;
    let record = UploadRecord {
        content_type: upload.content_type,
        created_at: rfc3339(created_at),
        id: upload.id,
        media,
        object: UploadKind::Upload,
        size_bytes,
        url: format!("{}/files/{}", state.api_base, upload.relative_path),
    };
    Ok(KeptUpload {
        record,
        sha256: digest
            .finalize()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect(),
    })
}

/// How many uploads an account may hold, and their total bytes: a few
/// reference files for an account that never had credit (so a free account
/// cannot use uploads as storage), far more for one that has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadQuota {
    pub count: i64,
    pub bytes: i64,
}

pub const UPLOAD_QUOTA_WITHOUT_CREDIT: UploadQuota = UploadQuota {
    count: 10,
    bytes: 250 * 1024 * 1024,
};

pub const UPLOAD_QUOTA_WITH_CREDIT: UploadQuota = UploadQuota {
    count: 1000,
    bytes: 20 * 1024 * 1024 * 1024,
};

/// Refuses an upload that would take the account past its quota
/// (`adding_bytes` more than it holds, one more upload).
async fn check_upload_quota(
    state: &AppState,
    caller: &Caller,
    adding_bytes: u64,
) -> Result<(), ApiError> {
    let account = caller_account(state, caller).await?;
    let quota = if account.credited.0 > 0 {
        UPLOAD_QUOTA_WITH_CREDIT
    } else {
        UPLOAD_QUOTA_WITHOUT_CREDIT
    };
    let usage = state.store.uploads().usage(&caller.account_id).await?;
    let adding_bytes = i64::try_from(adding_bytes).unwrap_or(i64::MAX);
    // The upload being checked is not recorded yet: it is the one more.
    let count_after = usage.count + 1;
    if count_after > quota.count || usage.bytes.saturating_add(adding_bytes) > quota.bytes {
        return Err(ApiError::RateLimited {
            message: format!(
                "Upload quota reached: this account may hold {} uploads of {} bytes in all.",
                quota.count, quota.bytes
            ),
            retry_after: std::time::Duration::from_secs(3600),
        });
    }
    Ok(())
}
