//! Accounts across the service: `GET /admin/v1/accounts` (list),
//! `POST /admin/v1/accounts` (create, with its first API key),
//! `GET /admin/v1/accounts/{id}` (show),
//! `POST /admin/v1/accounts/{id}/credit` (a credit adjustment, applied once
//! per `Idempotency-Key`), `POST /admin/v1/accounts/{id}/debit` (the same,
//! taking money back), `POST /admin/v1/accounts/{id}/limits`,
//! `POST /admin/v1/accounts/{id}/low-balance` (the low-balance alert),
//! `POST /admin/v1/accounts/{id}/webhook-secret/rotate` and
//! `DELETE /admin/v1/accounts/{id}` (its media and personal data; the
//! tombstone keeps the money figures). Each calls its operator action
//! (`operator_actions::accounts`) and shows what it answers.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use vidgate_core::Micros;

use super::{ACCOUNT_DELETED, NOT_FOUND, Operator, PAGE_LIMIT, answer, page_limit};
use crate::application::state::AppState;
use crate::application::submit::IDEMPOTENCY_KEY;
use crate::http::account::AccountRecord;
use crate::http::openapi::{
    Field, Operation, Parameter, Refusal, RequestBody, Schema, Success, record,
};
use crate::http::webhooks::WebhookSecretRecord;
use crate::http::{ApiError, rfc3339};
use crate::operator_actions::accounts::{
    self, Adjusted, AdjustmentRequest, LimitChanges, MAX_ADJUSTMENT, MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_LIMIT_FIGURE, MAX_NAME_LENGTH, MAX_REASON_LENGTH,
};
use crate::representation::{LowBalanceAlertRecord, nullable_time_schema, object_kind};
use crate::store::{Account, AdjustmentKind};

/// The account as operators see it: the customer's view plus when it was
/// made, for a tombstone when it was deleted, and its low-balance alert
/// (never its webhook secret).
#[derive(Serialize, ToSchema)]
#[schema(as = OperatorAccount)]
pub struct OperatorAccountRecord<'a> {
    #[serde(flatten)]
    account: AccountRecord<'a>,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(schema_with = nullable_time_schema, required = true)]
    deleted_at: Option<String>,
    #[schema(required = true)]
    low_balance_alert: Option<LowBalanceAlertRecord<'a>>,
}

impl<'a> OperatorAccountRecord<'a> {
    fn new(account: &'a Account) -> OperatorAccountRecord<'a> {
        OperatorAccountRecord {
            account: AccountRecord::new(account),
            created_at: rfc3339(account.created_at),
            deleted_at: account.deleted_at.map(rfc3339),
            low_balance_alert: LowBalanceAlertRecord::new(account),
        }
    }
}

/// A page of accounts in id order, and the id the next page starts after.
#[derive(Serialize, ToSchema)]
#[schema(as = OperatorAccountList)]
pub struct AccountPage<'a> {
    data: Vec<OperatorAccountRecord<'a>>,
    #[schema(required = true)]
    next_after: Option<String>,
}

/// A new account, with its first API key and its webhook secret, both
/// shown once.
#[derive(Serialize, ToSchema)]
#[schema(as = CreatedAccount)]
pub struct CreatedAccountRecord<'a> {
    #[serde(flatten)]
    account: OperatorAccountRecord<'a>,
    api_key: &'a str,
    key_id: &'a str,
    #[schema(pattern = "^whsec_")]
    webhook_secret: &'a str,
}

// `"object": "credit_adjustment"`.
object_kind!(CreditAdjustmentKind, CreditAdjustment);

/// A credit adjustment and the account after it.
#[derive(Serialize, ToSchema)]
#[schema(as = CreditAdjustment)]
pub struct AdjustmentRecord<'a> {
    account: OperatorAccountRecord<'a>,
    account_id: &'a str,
    actor: &'a str,
    amount_micros: i64,
    #[schema(format = DateTime)]
    created_at: String,
    idempotency_key: &'a str,
    #[schema(value_type = String, pattern = "^(credit|debit)$")]
    kind: &'static str,
    #[schema(inline)]
    object: CreditAdjustmentKind,
    reason: &'a str,
}

impl<'a> AdjustmentRecord<'a> {
    fn new(
        Adjusted {
            adjustment,
            account,
            ..
        }: &'a Adjusted,
    ) -> AdjustmentRecord<'a> {
        AdjustmentRecord {
            account: OperatorAccountRecord::new(account),
            account_id: &adjustment.account_id,
            actor: &adjustment.actor,
            amount_micros: adjustment.amount.0,
            created_at: rfc3339(adjustment.created_at),
            idempotency_key: &adjustment.idempotency_key,
            kind: adjustment.kind.as_str(),
            object: CreditAdjustmentKind::CreditAdjustment,
            reason: &adjustment.reason,
        }
    }
}

/// An account's new webhook secret, and when the previous one stops
/// signing.
#[derive(Serialize, ToSchema)]
#[schema(as = OperatorWebhookSecret)]
pub struct RotatedSecretRecord<'a> {
    account_id: &'a str,
    #[serde(flatten)]
    secret: WebhookSecretRecord<'a>,
}

/// The schema of the answers that show one account.
const ACCOUNT: Schema = Schema::Of(record::<OperatorAccountRecord<'static>>);

const ACCOUNT_PATH: [Parameter; 2] = [Parameter::Operator, Parameter::Path("account_id")];

pub const DELETE: Operation = Operation {
    id: "operator_delete_account",
    summary: "Delete an account's media and personal data; the tombstone keeps its money figures",
    parameters: &ACCOUNT_PATH,
    body: None,
    success: Success::json(
        "200",
        "The tombstone (deleted_at set), also when it was deleted before.",
        ACCOUNT,
    ),
    refusals: &[
        NOT_FOUND,
        Refusal {
            status: "409",
            description: "conflict: generations of the account are queued or running; cancel them or wait.",
        },
    ],
    ..Operation::PLAIN
};

/// Deletes an account's media and personal data, or answers the tombstone
/// of an account deleted before; 409 while generations are queued or
/// running.
pub async fn delete(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let deleted = accounts::delete(state.store.as_ref(), &actor, &account_id).await?;
    Ok(answer(OperatorAccountRecord::new(&deleted.account)))
}

pub const LIST: Operation = Operation {
    id: "operator_list_accounts",
    summary: "Every account, in id order",
    parameters: &[
        Parameter::Query {
            name: "after",
            description: Some("An account id: the page starts after it."),
            schema: Schema::TEXT,
        },
        PAGE_LIMIT,
    ],
    body: None,
    success: Success::json(
        "200",
        "A page of accounts and `next_after`.",
        Schema::Of(record::<AccountPage<'static>>),
    ),
    refusals: &[],
    ..Operation::PLAIN
};

#[derive(Deserialize)]
pub struct ListQuery {
    after: Option<String>,
    limit: Option<u32>,
}

pub async fn list(
    State(state): State<AppState>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = page_limit(query.limit)?;
    let accounts = state
        .store
        .operator()
        .list_accounts(query.after.as_deref(), limit)
        .await?;
    let next_after = (accounts.len() == limit as usize)
        .then(|| accounts.last().map(|account| account.id.clone()))
        .flatten();
    Ok(answer(AccountPage {
        data: accounts.iter().map(OperatorAccountRecord::new).collect(),
        next_after,
    }))
}

pub const SHOW: Operation = Operation {
    id: "operator_get_account",
    summary: "One account",
    parameters: &ACCOUNT_PATH,
    body: None,
    success: Success::json("200", "The account.", ACCOUNT),
    refusals: &[NOT_FOUND],
    ..Operation::PLAIN
};

pub async fn show(
    State(state): State<AppState>,
    Path(account_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let account = accounts::show(state.store.as_ref(), &account_id).await?;
    Ok(answer(OperatorAccountRecord::new(&account)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    name: String,
}

pub const CREATE: Operation = Operation {
    id: "operator_create_account",
    summary: "Create an account (no credit) with its first API key, shown once",
    parameters: &[Parameter::Operator],
    body: Some(RequestBody::fields(&[Field {
        name: "name",
        required: true,
        schema: Schema::text_up_to(MAX_NAME_LENGTH),
    }])),
    success: Success::json(
        "201",
        "The account, its API key and its webhook secret.",
        Schema::Of(record::<CreatedAccountRecord<'static>>),
    ),
    refusals: &[],
    ..Operation::PLAIN
};

/// Creates an account with no credit and its first API key (shown once);
/// credit is added with a credit adjustment, so money always has a reason.
pub async fn create(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Json(body): Json<CreateBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let created = accounts::create(state.store.as_ref(), &actor, &body.name, Micros::ZERO).await?;
    let shown = CreatedAccountRecord {
        account: OperatorAccountRecord::new(&created.account),
        api_key: &created.api_key,
        key_id: &created.key_id,
        webhook_secret: &created.account.webhook_secret,
    };
    Ok((StatusCode::CREATED, answer(shown)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdjustmentBody {
    /// Exact integer micro-dollars, more than zero.
    amount_micros: i64,
    reason: String,
}

/// What a credit and a debit take: the account, the key that applies it
/// once, the amount and the reason.
const ADJUSTMENT_PARAMETERS: [Parameter; 3] = [
    Parameter::Operator,
    Parameter::Path("account_id"),
    Parameter::Header {
        name: IDEMPOTENCY_KEY,
        required: true,
        description: None,
        schema: Schema::text_up_to(MAX_IDEMPOTENCY_KEY_LENGTH),
        example: None,
    },
];
const ADJUSTMENT_FIELDS: [Field; 2] = [
    Field {
        name: "amount_micros",
        required: true,
        schema: Schema::Integer {
            minimum: Some(1),
            maximum: Some(MAX_ADJUSTMENT.0),
            default: None,
            description: Some("Exact integer micro-dollars."),
        },
    },
    Field {
        name: "reason",
        required: true,
        schema: Schema::text_up_to(MAX_REASON_LENGTH),
    },
];
const ADJUSTMENT_APPLIED: Success = Success::json(
    "201",
    "Applied. A repeated key for the same account and amount answers 200 with the first adjustment.",
    Schema::Of(record::<AdjustmentRecord<'static>>),
);
const ADJUSTMENT_CONFLICT: Refusal = Refusal {
    status: "409",
    description: "conflict: the Idempotency-Key was used for another account, kind or amount, or the account was deleted.",
};

pub const CREDIT: Operation = Operation {
    id: "operator_credit_account",
    summary: "Add credit once per Idempotency-Key (a payment system's top-up)",
    parameters: &ADJUSTMENT_PARAMETERS,
    body: Some(RequestBody::fields(&ADJUSTMENT_FIELDS)),
    success: ADJUSTMENT_APPLIED,
    refusals: &[NOT_FOUND, ADJUSTMENT_CONFLICT],
    ..Operation::PLAIN
};

/// Adds credit once per `Idempotency-Key` (required): a payment system's
/// webhook delivered twice tops the account up once, and the second
/// delivery gets the first one's answer with 200 instead of 201.
pub async fn credit(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
    headers: HeaderMap,
    Json(body): Json<AdjustmentBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    adjust(
        &state,
        actor,
        account_id,
        &headers,
        body,
        AdjustmentKind::Credit,
    )
    .await
}

pub const DEBIT: Operation = Operation {
    id: "operator_debit_account",
    summary: "Take credit back once per Idempotency-Key (a chargeback, a correction), never below a zero balance",
    parameters: &ADJUSTMENT_PARAMETERS,
    body: Some(RequestBody::fields(&ADJUSTMENT_FIELDS)),
    success: ADJUSTMENT_APPLIED,
    refusals: &[
        NOT_FOUND,
        ADJUSTMENT_CONFLICT,
        Refusal {
            status: "402",
            description: "insufficient_balance: the debit is larger than the balance; nothing was taken.",
        },
    ],
    ..Operation::PLAIN
};

/// Takes credit back (a chargeback, a correction) once per
/// `Idempotency-Key`, as `credit` adds it. A debit larger than the balance
/// is refused with 402 and takes nothing: money held for running jobs and
/// money already spent are not the operator's to take, and a balance below
/// zero would break the books.
pub async fn debit(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
    headers: HeaderMap,
    Json(body): Json<AdjustmentBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    adjust(
        &state,
        actor,
        account_id,
        &headers,
        body,
        AdjustmentKind::Debit,
    )
    .await
}

async fn adjust(
    state: &AppState,
    actor: String,
    account_id: String,
    headers: &HeaderMap,
    body: AdjustmentBody,
    kind: AdjustmentKind,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    // A missing or unreadable header is refused by the action as an empty
    // key, with the same message as one too long.
    let idempotency_key = headers
        .get(IDEMPOTENCY_KEY)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    let adjusted = accounts::adjust_credit(
        state.store.as_ref(),
        &actor,
        AdjustmentRequest {
            account_id: &account_id,
            kind,
            amount: Micros(body.amount_micros),
            reason: &body.reason,
            idempotency_key,
        },
    )
    .await?;
    // A replay answers the first adjustment again, with 200 instead of 201.
    let status = if adjusted.replayed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, answer(AdjustmentRecord::new(&adjusted))))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsBody {
    requests_per_second: Option<u32>,
    burst: Option<u32>,
    max_concurrent_generations: Option<u32>,
}

pub const LIMITS: Operation = Operation {
    id: "operator_set_limits",
    summary: "Change an account's limits; figures left out stay as they are",
    parameters: &ACCOUNT_PATH,
    body: Some(RequestBody::fields(&[
        Field {
            name: "requests_per_second",
            required: false,
            schema: Schema::integer(1, MAX_LIMIT_FIGURE as i64),
        },
        Field {
            name: "burst",
            required: false,
            schema: Schema::integer(1, MAX_LIMIT_FIGURE as i64),
        },
        Field {
            name: "max_concurrent_generations",
            required: false,
            schema: Schema::integer(0, MAX_LIMIT_FIGURE as i64),
        },
    ])),
    success: Success::json("200", "The account.", ACCOUNT),
    refusals: &[NOT_FOUND, ACCOUNT_DELETED],
    ..Operation::PLAIN
};

/// Changes an account's limits; figures left out stay as they are.
pub async fn limits(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
    Json(body): Json<LimitsBody>,
) -> Result<Json<Value>, ApiError> {
    let changes = LimitChanges {
        requests_per_second: body.requests_per_second,
        burst: body.burst,
        max_concurrent: body.max_concurrent_generations,
    };
    let account = accounts::set_limits(state.store.as_ref(), &actor, &account_id, changes).await?;
    Ok(answer(OperatorAccountRecord::new(&account)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LowBalanceBody {
    /// `"5.00"`; `null` (or left out) removes the alert.
    low_balance_threshold_usd: Option<String>,
    low_balance_webhook_url: Option<String>,
}

pub const LOW_BALANCE: Operation = Operation {
    id: "operator_set_low_balance_alert",
    summary: "Set or remove an account's low-balance alert: the threshold the dashboard warns below, and the URL the account.balance_low event goes to",
    parameters: &ACCOUNT_PATH,
    body: Some(RequestBody::fields(&[
        Field {
            name: "low_balance_threshold_usd",
            required: false,
            schema: Schema::TEXT,
        },
        Field {
            name: "low_balance_webhook_url",
            required: false,
            schema: Schema::TEXT,
        },
    ])),
    success: Success::json(
        "200",
        "The account, with its low_balance_alert (null when removed).",
        ACCOUNT,
    ),
    refusals: &[NOT_FOUND, ACCOUNT_DELETED],
    ..Operation::PLAIN
};

/// `POST /accounts/{account_id}/low-balance` `{"low_balance_threshold_usd":
/// "5.00", "low_balance_webhook_url": "https://…"}`: sets the alert, or
/// removes it without a threshold.
pub async fn low_balance(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
    Json(body): Json<LowBalanceBody>,
) -> Result<Json<Value>, ApiError> {
    let account = accounts::set_low_balance_alert(
        state.store.as_ref(),
        &actor,
        &account_id,
        body.low_balance_threshold_usd.as_deref(),
        body.low_balance_webhook_url.as_deref(),
    )
    .await?;
    Ok(answer(OperatorAccountRecord::new(&account)))
}

pub const ROTATE_WEBHOOK_SECRET: Operation = Operation {
    id: "operator_rotate_webhook_secret",
    summary: "Issue a new webhook signing secret (shown once); deliveries are signed with the previous one too for 24 hours",
    parameters: &ACCOUNT_PATH,
    body: None,
    success: Success::json(
        "200",
        "The account's id, its new webhook_secret and when the previous one stops signing.",
        Schema::Of(record::<RotatedSecretRecord<'static>>),
    ),
    refusals: &[NOT_FOUND, ACCOUNT_DELETED],
    ..Operation::PLAIN
};

/// Issues a new webhook signing secret (shown once); deliveries carry
/// signatures with both the old and the new secret for 24 hours.
pub async fn rotate_webhook_secret(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let account =
        accounts::rotate_webhook_secret(state.store.as_ref(), &actor, &account_id).await?;
    Ok(answer(RotatedSecretRecord {
        account_id: &account.id,
        secret: WebhookSecretRecord::new(&account),
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::http::openapi::tests::{account, problems_of};
    use crate::store::LowBalanceAlert;

    fn problems(name: &str, record: impl Serialize) -> Vec<String> {
        problems_of(name, &serde_json::to_value(record).unwrap())
    }

    /// The operator's account answers against the schemas the document
    /// derives from them: a live account, one with a low-balance alert and
    /// a tombstone, a new account and a rotated secret.
    #[test]
    fn every_field_of_an_operator_account_answer_is_in_its_schema() {
        let mut account = account();
        assert_eq!(
            problems("OperatorAccount", OperatorAccountRecord::new(&account)),
            Vec::<String>::new()
        );
        account.low_balance_alert = Some(LowBalanceAlert {
            threshold: Micros(5_000_000),
            webhook_url: Some("https://receiver.example/alerts".into()),
            raised: false,
        });
        account.deleted_at = Some(1_795_000_001_000);
        assert_eq!(
            problems("OperatorAccount", OperatorAccountRecord::new(&account)),
            Vec::<String>::new()
        );
        let created = CreatedAccountRecord {
            account: OperatorAccountRecord::new(&account),
            api_key: "vg_live_1",
            key_id: "key_1",
            webhook_secret: &account.webhook_secret,
        };
        assert_eq!(problems("CreatedAccount", created), Vec::<String>::new());
        let rotated = RotatedSecretRecord {
            account_id: &account.id,
            secret: WebhookSecretRecord::new(&account),
        };
        assert_eq!(
            problems("OperatorWebhookSecret", rotated),
            Vec::<String>::new()
        );
    }

    /// A record that flattens another is checked against both records'
    /// fields: one neither lists is found.
    #[test]
    fn the_check_finds_a_field_missing_from_a_flattened_schema() {
        let account = account();
        let mut record = serde_json::to_value(OperatorAccountRecord::new(&account)).unwrap();
        record["webhook_secret"] = json!("whsec_1");
        assert_eq!(
            problems_of("OperatorAccount", &record),
            ["OperatorAccount.webhook_secret: a field the schema does not list"]
        );
    }
}
