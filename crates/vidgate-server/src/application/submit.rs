//! Submitting a generation, the application operation behind the API's
//! `POST /run/…` and the dashboard's playground: validate, check uploads,
//! price, admit and queue one generation, holding its price. It knows no
//! status codes: each caller presents a `SubmitError` in its own way (the
//! API in `http/error.rs`, the playground as its page), with the message
//! customers see.

use std::sync::Arc;
use std::time::Duration;

use vidgate_core::{Endpoint, InvalidRequest, MediaFacts, Micros, Model, Purpose, ValidatedInput};
use vidgate_media::InspectError;

use crate::application::state::AppState;
use crate::backend::{Admission, Backend, Rejection};
use crate::bound_media::{MediaBinding, is_kept_media};
use crate::ids::{new_generation_id, sha256_hex};
use crate::media::{
    ACCEPTED_FORMATS, ScratchCopyError, UploadMedia, content_type, copy_to_scratch, own_file_path,
    probe_stored_file,
};
use crate::metrics::RateLimit;
use crate::spend_limits::{SpendLimit, SpendPeriod};
use crate::storage::{self, ReadError};
use crate::store::{
    Caller, DirectUpload, EarlierSubmit, Generation, IdempotencyKey, NewGeneration, NewUpload,
    Source, StoreError, StoredJson, SubmitOutcome, SubmitRefusal, now_millis,
};

/// The name clients send the idempotency key under (an HTTP header), as
/// refusals name it.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";
pub const MAX_IDEMPOTENCY_KEY_LENGTH: usize = 255;

/// How long a client refused for its account's concurrency limit should
/// wait before trying again.
pub const CONCURRENCY_RETRY_AFTER: Duration = Duration::from_secs(5);

/// What a submit the balance cannot pay is told. A negative balance is a
/// debt (money Stripe took back after it was spent), which stops every
/// submit, a free one too, until a top-up pays it; the figures are exact
/// text, so a debt of a fraction of a cent does not read as $0.00.
fn insufficient_balance_message(balance: Micros, price: Micros) -> String {
    if balance < Micros::ZERO {
        format!(
            "The balance is {} USD: the account owes {} USD, and no generation can be \
             submitted until credit is added to pay it. Nothing was charged.",
            balance.usd_text(),
            (Micros::ZERO - balance).usd_text()
        )
    } else {
        format!(
            "The balance of {} USD does not cover the price of {} USD. Nothing was charged.",
            balance.usd_text(),
            price.usd_text()
        )
    }
}

/// What a submit refused by its key's spend limit is told: the limit, what
/// the period has used, and when the room comes back.
fn spend_limit_message(
    limit: &SpendLimit,
    spent: Micros,
    price: Micros,
    resets_at: Option<i64>,
) -> String {
    let period = match limit.period {
        SpendPeriod::Day => "per UTC day",
        SpendPeriod::Month => "per UTC month",
        SpendPeriod::Total => "in total",
    };
    let reset = match resets_at {
        Some(resets_at) => format!("The limit resets at {}.", crate::store::rfc3339(resets_at)),
        None => {
            "The limit does not reset; the account's owner or the operator can raise it.".to_owned()
        }
    };
    format!(
        "This API key may spend {} USD {period}; {} USD is held or spent and the price is {} USD. {reset} Nothing was charged.",
        limit.amount.usd_text(),
        spent.usd_text(),
        price.usd_text()
    )
}

/// Why a generation was not submitted. Nothing was charged for any of them.
/// The message of each is what the customer is told.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The request is wrong; `param` names the field at fault.
    #[error("{message}")]
    Invalid {
        message: String,
        param: Option<String>,
    },
    #[error("{0}")]
    ModelUnavailable(String),
    /// The model's backend refused the job at admission.
    #[error("The model refused the job: {0}. Nothing was charged.")]
    RefusedUpstream(String),
    #[error(
        "Too many generations in progress: at most {limit} may be queued or running at once per account. Wait for one to finish."
    )]
    ConcurrencyLimit { limit: i64 },
    /// `balance` is the balance the customer sees, negative while the
    /// account owes a debt.
    #[error("{}", insufficient_balance_message(*.balance, *.price))]
    InsufficientBalance { balance: Micros, price: Micros },
    /// The hold would take the API key past its spend limit.
    #[error("{}", spend_limit_message(.limit, *.spent, *.price, *.resets_at))]
    SpendLimit {
        limit: SpendLimit,
        spent: Micros,
        price: Micros,
        /// When the period ends (Unix ms); never for a total limit.
        resets_at: Option<i64>,
    },
    #[error("This {IDEMPOTENCY_KEY} was already used with a different request.")]
    IdempotencyKeyReused,
    #[error("The account of this API key no longer exists.")]
    AccountNotFound,
    /// This node is fetching as much request media as it may at once.
    #[error(
        "The service is fetching as much request media as it can at once. Retry in {} s; nothing was charged.",
        .retry_after.as_secs().max(1)
    )]
    MediaBusy { retry_after: Duration },
    /// The account already runs as many media fetches as one account may
    /// (a limit on this client: 429, unlike `MediaBusy`).
    #[error(
        "Too many requests: this account is already fetching request media {limit} at a time, the most one account may. Retry in {} s; nothing was charged.",
        .retry_after.as_secs().max(1)
    )]
    MediaFetchLimit { limit: usize, retry_after: Duration },
    /// The database could not be reached in time (`StoreError::
    /// is_unavailable`): the same submit may pass once it is back.
    #[error("The service cannot reach its database at the moment. Retry with backoff.")]
    DatabaseUnavailable,
    /// A failure on our side; its cause is for the log only.
    #[error("The service failed to handle the request. Retry with backoff.")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl SubmitError {
    /// The API error code this refusal is answered with (`http/error.rs`
    /// maps it so, and its tests hold the two together): the `outcome`
    /// label of the submit metrics.
    pub fn code(&self) -> &'static str {
        match self {
            SubmitError::Invalid { .. } => "invalid_request",
            SubmitError::ModelUnavailable(_)
            | SubmitError::MediaBusy { .. }
            | SubmitError::DatabaseUnavailable => "model_unavailable",
            SubmitError::RefusedUpstream(_) => "upstream_error",
            SubmitError::ConcurrencyLimit { .. } | SubmitError::MediaFetchLimit { .. } => {
                "rate_limited"
            }
            SubmitError::InsufficientBalance { .. } | SubmitError::SpendLimit { .. } => {
                "insufficient_balance"
            }
            SubmitError::IdempotencyKeyReused => "conflict",
            SubmitError::AccountNotFound => "unauthorized",
            SubmitError::Internal(_) => "internal_error",
        }
    }

    fn invalid(param: impl Into<String>, message: impl Into<String>) -> SubmitError {
        SubmitError::Invalid {
            message: message.into(),
            param: Some(param.into()),
        }
    }

    fn internal(error: impl std::error::Error + Send + Sync + 'static) -> SubmitError {
        SubmitError::Internal(Box::new(error))
    }
}

impl From<InvalidRequest> for SubmitError {
    fn from(error: InvalidRequest) -> Self {
        SubmitError::Invalid {
            message: error.message,
            param: error.param,
        }
    }
}

impl From<InspectError> for SubmitError {
    fn from(error: InspectError) -> Self {
        match error {
            InspectError::Invalid(invalid) => invalid.into(),
            InspectError::Busy { retry_after } => SubmitError::MediaBusy { retry_after },
            InspectError::RequesterAtLimit { limit, retry_after } => {
                SubmitError::MediaFetchLimit { limit, retry_after }
            }
        }
    }
}

impl From<StoreError> for SubmitError {
    fn from(error: StoreError) -> Self {
        if error.is_unavailable() {
            SubmitError::DatabaseUnavailable
        } else {
            SubmitError::internal(error)
        }
    }
}

/// Checks the client's idempotency key and makes it specific to the request.
/// `key` is `None` when the client sent none; a key that is not visible
/// ASCII text reaches here as the empty string, which is refused with the
/// same message.
fn idempotency_key(
    key: Option<&str>,
    endpoint_id: &str,
    body: &[u8],
) -> Result<Option<IdempotencyKey>, SubmitError> {
    let Some(key) = key else {
        return Ok(None);
    };
    let key = Some(key.trim())
        .filter(|key| !key.is_empty() && key.len() <= MAX_IDEMPOTENCY_KEY_LENGTH)
        .ok_or_else(|| {
            SubmitError::invalid(
                IDEMPOTENCY_KEY,
                format!(
                    "{IDEMPOTENCY_KEY} must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} visible ASCII characters."
                ),
            )
        })?;
    // The digest covers the endpoint too: the same body sent to another
    // model is a different request.
    let mut request = endpoint_id.as_bytes().to_vec();
    request.push(b'\n');
    request.extend_from_slice(body);
    Ok(Some(IdempotencyKey {
        key: key.to_owned(),
        request_sha256: sha256_hex(&request),
    }))
}

/// One request to submit, as a surface hands it over: vidgate's JSON body
/// for the endpoint, and what an idempotency key is compared on.
pub struct Submission<'a> {
    /// The body `/run/{endpoint}` would be sent.
    pub body: &'a [u8],
    /// The client's idempotency key, if it sent one.
    pub idempotency_key: Option<&'a str>,
    /// The request as its surface parsed it, which a retry under the same
    /// key must repeat: the body itself for `/api/v1/run`; for a surface
    /// whose clients send the same fields in other bytes (a multipart
    /// boundary, a file stored under a new URL) its fields in one spelling.
    pub idempotency_request: &'a [u8],
    pub source: Source,
}

/// Validates, prices, admits and queues one generation for `caller`, holding
/// its price. Answers the generation and whether it replays an earlier
/// request with the same idempotency key. Every outcome is counted in the
/// metrics, by the endpoint's model and mode.
pub async fn submit_generation(
    state: &AppState,
    caller: &Caller,
    endpoint: Endpoint<'_>,
    body: &[u8],
    idempotency_key_text: Option<&str>,
) -> Result<(Generation, bool), SubmitError> {
    let submission = Submission {
        body,
        idempotency_key: idempotency_key_text,
        idempotency_request: body,
        source: Source::Api,
    };
    submit(state, caller, endpoint, submission).await
}

/// `submit_generation` for any surface: the one submit path.
pub async fn submit(
    state: &AppState,
    caller: &Caller,
    endpoint: Endpoint<'_>,
    submission: Submission<'_>,
) -> Result<(Generation, bool), SubmitError> {
    let submitted = queue_generation(state, caller, endpoint, submission).await;
    let outcome = match &submitted {
        Ok((_, false)) => "accepted",
        Ok((_, true)) => "replayed",
        Err(error) => error.code(),
    };
    state
        .metrics
        .record_submit(&endpoint.model.id, endpoint.mode.as_str(), outcome);
    match &submitted {
        Err(SubmitError::ConcurrencyLimit { .. }) => state
            .metrics
            .record_rate_limit_refusal(RateLimit::Concurrency),
        Err(SubmitError::MediaFetchLimit { .. }) => state
            .metrics
            .record_rate_limit_refusal(RateLimit::MediaFetches),
        _ => {}
    }
    submitted
}

async fn queue_generation(
    state: &AppState,
    caller: &Caller,
    endpoint: Endpoint<'_>,
    submission: Submission<'_>,
) -> Result<(Generation, bool), SubmitError> {
    let input = endpoint.validate(submission.body, Purpose::Submit)?;
    check_upload_ownership(state, caller, &input).await?;
    let endpoint_id = endpoint.id();
    let idempotency = idempotency_key(
        submission.idempotency_key,
        &endpoint_id,
        submission.idempotency_request,
    )?;
    // A retry of an accepted request is answered its generation before any
    // check that could refuse it now (the backend, a paused model, the
    // balance, the backend's admission): refused, the client would believe
    // nothing is held while the first request's generation runs and is
    // charged. The submit's transaction still decides a retry that races
    // its original.
    if let Some(idempotency) = &idempotency {
        match state
            .store
            .generations()
            .earlier_submit(&caller.account_id, idempotency)
            .await?
        {
            Some(EarlierSubmit::SameRequest(generation)) => return Ok((*generation, true)),
            Some(EarlierSubmit::OtherRequest) => return Err(SubmitError::IdempotencyKeyReused),
            None => {}
        }
    }
    let model = endpoint.model;
    let backend = accepting_backend(state, model).await?;
    refuse_what_the_account_cannot_pay(state, caller, endpoint, &input).await?;
    // Media is fetched and checked only once the cheap checks passed; its
    // probed durations price reference videos, exactly as a quote does. The
    // bytes are fetched afresh (never from the probe cache) and kept, so the
    // job gets exactly what was checked and priced.
    let requester = vidgate_media::Requester::Account {
        id: caller.account_id.clone(),
    };
    let inspection = state
        .media
        .inspect_and_keep(&requester, endpoint, &input)
        .await?;
    let price = endpoint.price(&input, &inspection.facts);
    // The backend is asked before anything is held, so that a refusal is an
    // error with nothing charged and no generation left behind; asking after
    // the commit would race a worker that already claimed the job.
    backend
        .admit(&Admission {
            model,
            mode: endpoint.mode,
            input: &input,
            price: price.amount,
        })
        .await
        .map_err(admission_error)?;
    let binding = MediaBinding::keep(&state.storage, &state.api_base, &inspection)
        .await
        .map_err(SubmitError::internal)?;
    drop(inspection);
    let generation_id = new_generation_id();
    crate::telemetry::describe(
        &tracing::Span::current(),
        &[
            ("vidgate.generation.id", &generation_id),
            ("vidgate.account.id", &caller.account_id),
            ("gen_ai.request.model", &model.id),
        ],
    );
    let outcome = state
        .store
        .generations()
        .submit(NewGeneration {
            id: generation_id.clone(),
            account_id: caller.account_id.clone(),
            api_key_id: caller.key_id.clone(),
            model: model.id.clone(),
            endpoint: endpoint_id,
            mode: endpoint.mode.as_str().to_owned(),
            input: StoredJson::from_value(&input.to_json()),
            price: price.amount,
            official_price: price.official,
            webhook_url: input.webhook_url().map(str::to_owned),
            idempotency,
            max_attempts: state.max_attempts,
            media_binding: binding.to_json(),
            source: submission.source,
            traceparent: crate::telemetry::traceparent_of(&tracing::Span::current()),
        })
        .await;
    let outcome = match outcome {
        Ok(SubmitOutcome::Created(generation)) => Ok(SubmitOutcome::Created(generation)),
        // A refused submit, or a replay of an earlier one (which has its own
        // binding), keeps nothing.
        refused_or_replayed => {
            binding.release(&state.storage).await;
            refused_or_replayed
        }
    }
    .map_err(refusal_error)?;

    let (generation, replayed) = match outcome {
        SubmitOutcome::Created(generation) => (generation, false),
        SubmitOutcome::Replayed(generation) => (generation, true),
    };
    if !replayed {
        state.queue_wakeup.job_queued(backend.runs_at_provider());
    }
    Ok((generation, replayed))
}

/// The backend of `model`, unless the deployment has none for it or the
/// operator paused it.
async fn accepting_backend(
    state: &AppState,
    model: &Model,
) -> Result<Arc<dyn Backend>, SubmitError> {
    let backend = state.backends.for_model(model).ok_or_else(|| {
        SubmitError::ModelUnavailable(format!(
            "{} has no backend configured on this deployment.",
            model.id
        ))
    })?;
    if state.store.accounts().is_model_paused(&model.id).await? {
        return Err(SubmitError::ModelUnavailable(format!(
            "{} is temporarily not accepting new generations. Retry later with backoff.",
            model.id
        )));
    }
    Ok(backend)
}

/// What the customer is told when the backend refused the job at admission.
fn admission_error(rejection: Rejection) -> SubmitError {
    match rejection {
        Rejection::Unavailable(message) => SubmitError::ModelUnavailable(message),
        Rejection::Upstream(message) => SubmitError::RefusedUpstream(message),
        Rejection::Unserved { param, message } => SubmitError::Invalid {
            message,
            param: Some(param),
        },
    }
}

/// What the customer is told when the submit's transaction refused it.
fn refusal_error(refusal: SubmitRefusal) -> SubmitError {
    match refusal {
        SubmitRefusal::ConcurrencyLimit { limit } => SubmitError::ConcurrencyLimit { limit },
        SubmitRefusal::InsufficientBalance { balance, price } => {
            SubmitError::InsufficientBalance { balance, price }
        }
        SubmitRefusal::SpendLimit {
            limit,
            spent,
            price,
        } => SubmitError::SpendLimit {
            limit,
            spent,
            price,
            resets_at: limit.period.resets_at(now_millis()),
        },
        SubmitRefusal::IdempotencyMismatch => SubmitError::IdempotencyKeyReused,
        SubmitRefusal::AccountNotFound => SubmitError::AccountNotFound,
        SubmitRefusal::Store(error) => error.into(),
    }
}

/// Refuses, before any of its media is fetched, a request with media whose
/// account cannot pay the least it may cost: the price with every reference
/// video zero seconds long, since probing can only add billed seconds (for
/// most requests it is the whole price). Fetch slots are kept for accounts,
/// and an account without the money must not hold them while its fetches
/// run, only to be refused after. The submit's transaction still checks the
/// whole price against the balance then; this is a read, and is skipped for
/// a request without media, whose refusal costs no fetch. A submit that
/// repeats an earlier one's idempotency key never reaches here: it was
/// answered its generation first.
async fn refuse_what_the_account_cannot_pay(
    state: &AppState,
    caller: &Caller,
    endpoint: Endpoint<'_>,
    input: &ValidatedInput,
) -> Result<(), SubmitError> {
    let names_media = input.image_url().is_some()
        || input.end_image_url().is_some()
        || !input.reference_image_urls().is_empty()
        || !input.reference_video_urls().is_empty()
        || !input.reference_audio_urls().is_empty();
    if !names_media {
        return Ok(());
    }
    let least_price = endpoint.price(input, &MediaFacts::default()).amount;
    let account = state
        .store
        .accounts()
        .get(&caller.account_id)
        .await?
        .ok_or(SubmitError::AccountNotFound)?;
    if account.debt == Micros::ZERO && account.balance >= least_price {
        return Ok(());
    }
    Err(SubmitError::InsufficientBalance {
        balance: account.shown_balance(),
        price: least_price,
    })
}

/// The media URLs of a request that name one of our own stored files, as
/// the field and the stored path. Every spelling of one of our URLs is
/// recognised, not only the one we handed out: the file server and the
/// own-file shortcut answer them all.
fn own_files_named(api_base: &str, input: &ValidatedInput) -> Vec<(String, String)> {
    let mut fields: Vec<(&str, &str)> = Vec::new();
    fields.extend(input.image_url().map(|url| ("image_url", url)));
    fields.extend(input.end_image_url().map(|url| ("end_image_url", url)));
    for (name, urls) in [
        ("reference_image_urls", input.reference_image_urls()),
        ("reference_video_urls", input.reference_video_urls()),
        ("reference_audio_urls", input.reference_audio_urls()),
    ] {
        fields.extend(urls.into_iter().map(|url| (name, url)));
    }
    fields
        .into_iter()
        .filter_map(|(field, url)| {
            own_file_path(api_base, url).map(|relative_path| (field.to_owned(), relative_path))
        })
        .collect()
}

/// Refuses a request (a submit or a quote) that names kept media in any
/// spelling. Kept media is vidgate's own copy for one job, handed only to
/// model servers through signed URLs; a request naming it would reach it
/// past its URL's expiry through the own-file shortcut (a quote would probe
/// it and tell a stranger its duration).
pub fn refuse_kept_media(api_base: &str, input: &ValidatedInput) -> Result<(), SubmitError> {
    refuse_kept(&own_files_named(api_base, input))
}

fn refuse_kept(own_files: &[(String, String)]) -> Result<(), SubmitError> {
    match own_files
        .iter()
        .find(|(_, relative_path)| is_kept_media(relative_path))
    {
        Some((field, _)) => Err(SubmitError::invalid(
            field.clone(),
            format!("{field} names a file that requests may not use."),
        )),
        None => Ok(()),
    }
}

/// Refuses a request that names another account's upload: upload URLs are
/// capabilities for fetching, but using one in a generation is reserved to
/// the account that uploaded it. Kept media is refused to every account.
async fn check_upload_ownership(
    state: &AppState,
    caller: &Caller,
    input: &ValidatedInput,
) -> Result<(), SubmitError> {
    let own_files = own_files_named(&state.api_base, input);
    refuse_kept(&own_files)?;
    for (field, relative_path) in &own_files {
        let relative_path = relative_path.as_str();
        if !relative_path.starts_with("uploads/") {
            continue;
        }
        let owned = match state.store.uploads().owner(relative_path).await? {
            Some(owner) => owner == caller.account_id,
            None => match state.store.uploads().direct(relative_path).await? {
                Some(direct) if direct.account_id == caller.account_id => {
                    record_direct_upload(state, &direct, relative_path, field).await?;
                    true
                }
                _ => false,
            },
        };
        if !owned {
            // Only a refused request pays for this look-up.
            let message = match state
                .store
                .retention()
                .file_expired_at(relative_path)
                .await?
            {
                Some(_) => format!("{field} names an upload that expired and was deleted."),
                None => format!("{field} names an upload this account did not make."),
            };
            return Err(SubmitError::invalid(field.clone(), message));
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
) -> Result<(), SubmitError> {
    let reader = match state
        .storage
        .open_reader(relative_path, state.max_upload_bytes)
        .await
    {
        Ok(reader) => reader,
        Err(ReadError::NotFound) => {
            return Err(SubmitError::invalid(
                field,
                format!(
                    "{field} names direct upload {} whose file has not been uploaded: PUT the file to its upload_url first.",
                    direct.id
                ),
            ));
        }
        Err(ReadError::TooLarge { limit }) => {
            return Err(SubmitError::invalid(
                field,
                format!(
                    "{field} names direct upload {} whose file is larger than {limit} bytes.",
                    direct.id
                ),
            ));
        }
        Err(error @ ReadError::Store(_)) => return Err(SubmitError::internal(error)),
    };
    // The object is copied to a scratch file in pieces and probed there on a
    // blocking thread, so a 100 MB upload costs buffers, not 100 MB.
    let (copy, size_bytes) = copy_to_scratch(&state.storage, reader, state.max_upload_bytes)
        .await
        .map_err(|error| match error {
            ScratchCopyError::TooLarge => SubmitError::invalid(
                field,
                format!(
                    "{field} names direct upload {} whose file is larger than {} bytes.",
                    direct.id, state.max_upload_bytes
                ),
            ),
            ScratchCopyError::Io(error) => SubmitError::internal(error),
        })?;
    let info = probe_stored_file(copy.to_path_buf()).await.map_err(|error| {
        SubmitError::invalid(
            field,
            format!("{field} names direct upload {} whose file is not a readable {ACCEPTED_FORMATS} file: {error}.", direct.id),
        )
    })?;
    drop(copy);
    let found = content_type(&info);
    let declared = storage::content_type_of(relative_path);
    if declared != storage::UNKNOWN_CONTENT_TYPE && declared != found {
        return Err(SubmitError::invalid(
            field,
            format!(
                "{field} names direct upload {} declared as {declared}, but its file is {found}.",
                direct.id
            ),
        ));
    }
    state
        .store
        .uploads()
        .record_direct(&NewUpload {
            id: direct.id.clone(),
            account_id: direct.account_id.clone(),
            relative_path: relative_path.to_owned(),
            content_type: found.to_owned(),
            size_bytes: size_bytes as i64,
            media: UploadMedia::of(&info).to_json(),
            created_at: now_millis(),
        })
        .await?;
    Ok(())
}
