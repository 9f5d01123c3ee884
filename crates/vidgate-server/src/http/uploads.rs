//! `POST /uploads/initiate`: presigned direct uploads. This deployment keeps
//! files on local disk, which cannot sign upload URLs, so it answers the
//! spec's 501 and points at multipart upload.

use super::ApiError;

pub async fn initiate() -> ApiError {
    ApiError::DirectUploadUnavailable(
        "Presigned direct uploads are not available on this deployment; upload with multipart/form-data instead."
            .into(),
    )
}
