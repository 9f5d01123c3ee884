//! The public representation of a generation (SPEC.md section 2), shared by
//! the API's answers and the webhook senders' event bodies, so that a
//! webhook carries exactly what `GET /generations/{id}` returns. It sits
//! below the HTTP layer because the senders, which run beside the workers,
//! must not reach up into it.
//!
//! Each record derives `ToSchema` beside `Serialize`: the OpenAPI document's
//! component schemas are generated from these same types
//! (`http/openapi/`), so the document cannot describe fields the answers
//! do not have, or miss fields they do.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use utoipa::openapi::schema::{Object, ObjectBuilder, SchemaType, Type};
use vidgate_core::{GenerationStatus, Micros, Mode, Price};

pub use crate::store::rfc3339;
use crate::store::{Generation, GenerationView, Rfc3339, StoredJson};

/// A string schema that allows only the given values: the schema of a
/// field whose values come from a list the code already has (such as
/// `MediaFormat::ALL`), so the list is not written twice.
pub fn one_of_strings<'a>(values: impl IntoIterator<Item = &'a str>) -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .enum_values(Some(values))
        .build()
}

/// The schema of a timestamp that is always present and may be null.
pub fn nullable_time_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
            utoipa::openapi::KnownFormat::DateTime,
        )))
        .build()
}

/// The `object` field of every record: which kind of record it is. Each
/// record's field takes the one variant it may hold (`#[schema(inline)]`
/// with a one-variant enum gives `"enum": ["generation"]`). The enums have
/// no doc comments, which the derive would publish as descriptions.
macro_rules! object_kind {
    ($name:ident, $variant:ident) => {
        #[derive(Clone, Copy, Debug, ::serde::Serialize, ::utoipa::ToSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $variant,
        }
    };
}

pub(crate) use object_kind;

// `"object": "generation"`, `"object": "list"` (a page or list of
// records), and `"currency": "usd"` (every amount is in US dollars).
object_kind!(GenerationKind, Generation);
object_kind!(ListKind, List);
object_kind!(Currency, Usd);

/// The cost: an estimate while the generation is pending, the captured
/// price once it succeeded, zero once it failed or was canceled (the hold
/// was refunded).
#[derive(Serialize, ToSchema)]
pub struct Cost {
    #[schema(minimum = 0)]
    amount_usd: f64,
    #[schema(inline)]
    currency: Currency,
    estimated: bool,
    #[schema(required = true)]
    official_usd: Option<f64>,
    #[schema(required = true)]
    saved_usd: Option<f64>,
}

impl Cost {
    fn of(generation: &GenerationView<'_>) -> Cost {
        let (amount, estimated, official) = match generation.status {
            GenerationStatus::Queued | GenerationStatus::Running => (generation.price, true, None),
            GenerationStatus::Succeeded => {
                (generation.price, false, Some(generation.official_price))
            }
            GenerationStatus::Failed | GenerationStatus::Canceled => (Micros::ZERO, false, None),
        };
        Cost::new(amount, estimated, official)
    }

    /// The price of a quote: an estimate, with the official price beside it.
    pub fn quoted(price: &Price) -> Cost {
        Cost::new(price.amount, true, Some(price.official))
    }

    fn new(amount: Micros, estimated: bool, official: Option<Micros>) -> Cost {
        Cost {
            amount_usd: amount.to_usd(),
            currency: Currency::Usd,
            estimated,
            official_usd: official.map(|official| official.to_usd()),
            saved_usd: official.map(|official| (official - amount).to_usd()),
        }
    }
}

#[derive(Serialize, ToSchema)]
struct Urls {
    #[schema(format = Uri)]
    cancel: String,
    #[schema(format = Uri)]
    get: String,
}

// The worker writes this record into the store as JSON, and the answer
// serialises the stored value: the record is what writes that value, and
// what the document describes. The retention sweep adds `expired` and
// `expired_at` to the stored value.
/// The clip of a succeeded generation.
#[derive(Serialize, ToSchema)]
pub struct GenerationOutput {
    pub content_type: &'static str,
    pub duration_s: f64,
    /// Present once the retention time (--retain-days) passed: the clip was deleted and video_url answers 410 gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub expired: Option<bool>,
    /// When the clip expired; present with expired.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, format = DateTime)]
    pub expired_at: Option<String>,
    pub fps: u32,
    pub has_audio: bool,
    pub height: u32,
    /// The seed the clip was made with, as the model was sent it; absent when the model that made it takes no seed (reproduce such a clip by its request alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub seed: Option<u64>,
    pub size_bytes: u64,
    #[schema(format = Uri)]
    pub video_url: String,
    pub width: u32,
}

// The store records a failure's `FailureDetail` as this object.
/// Why a generation failed.
#[derive(Serialize, ToSchema)]
pub struct GenerationError {
    code: String,
    message: String,
}

// Borrowed from the stored generation and written straight to JSON (the hot
// reads send it without building a `Value` first). The fields are in
// alphabetical order, the order of a `serde_json::Value` object, so both
// ways write the same bytes.
/// A generation, as every endpoint and webhook presents it (SPEC.md
/// section 2).
#[derive(Serialize, ToSchema)]
#[schema(as = Generation)]
pub struct GenerationRecord<'a> {
    #[schema(schema_with = nullable_time_schema, required = true)]
    completed_at: Option<Rfc3339>,
    cost: Cost,
    #[schema(value_type = String, format = DateTime)]
    created_at: Rfc3339,
    endpoint: &'a str,
    #[schema(value_type = Option<GenerationError>, required = true)]
    error: &'a Option<StoredJson>,
    #[schema(pattern = "^gen_")]
    id: &'a str,
    /// The accepted request parameters, with defaults filled in.
    #[schema(value_type = Object)]
    input: &'a StoredJson,
    #[schema(value_type = Mode, inline)]
    mode: &'a str,
    model: &'a str,
    #[schema(inline)]
    object: GenerationKind,
    #[schema(value_type = Option<GenerationOutput>, required = true)]
    output: &'a Option<StoredJson>,
    source: &'a str,
    #[schema(schema_with = nullable_time_schema, required = true)]
    started_at: Option<Rfc3339>,
    #[schema(inline)]
    status: GenerationStatus,
    #[schema(inline)]
    urls: Urls,
}

impl<'a> GenerationRecord<'a> {
    pub fn new(generation: &'a Generation, api_base: &str) -> GenerationRecord<'a> {
        let url = format!("{api_base}/generations/{}", generation.id);
        GenerationRecord {
            completed_at: generation.completed_at.map(Rfc3339),
            cost: Cost::of(&generation.view()),
            created_at: Rfc3339(generation.created_at),
            endpoint: &generation.endpoint,
            error: &generation.error,
            id: &generation.id,
            input: &generation.input,
            mode: &generation.mode,
            model: &generation.model,
            object: GenerationKind::Generation,
            output: &generation.output,
            source: &generation.source,
            started_at: generation.started_at.map(Rfc3339),
            status: generation.status,
            urls: Urls {
                cancel: format!("{url}/cancel"),
                get: url,
            },
        }
    }
}

/// Writes `generation`'s record into `out` as JSON: the bytes that
/// `GenerationRecord`'s derived `Serialize` writes (a test holds the two
/// equal for every state), for the two hot reads, `GET /generations/{id}`
/// and the list (issue 42). Writing by hand saves what the derive does per
/// field: escaping each key, making the URLs as strings first, and checking
/// that the stored input, output and error are JSON, which the store wrote
/// from a `Value` (`StoredJson`). Strings and numbers are still written
/// by serde_json.
pub fn write_generation_json(out: &mut Vec<u8>, generation: &GenerationView<'_>, api_base: &str) {
    out.extend_from_slice(b"{\"completed_at\":");
    write_optional_time(out, generation.completed_at);
    out.extend_from_slice(b",\"cost\":");
    write_cost(out, &Cost::of(generation));
    out.extend_from_slice(b",\"created_at\":");
    write_optional_time(out, Some(generation.created_at));
    out.extend_from_slice(b",\"endpoint\":");
    write_string(out, generation.endpoint);
    out.extend_from_slice(b",\"error\":");
    write_optional_stored(out, generation.error);
    out.extend_from_slice(b",\"id\":");
    write_string(out, generation.id);
    out.extend_from_slice(b",\"input\":");
    out.extend_from_slice(generation.input.as_bytes());
    out.extend_from_slice(b",\"mode\":");
    write_string(out, generation.mode);
    out.extend_from_slice(b",\"model\":");
    write_string(out, generation.model);
    out.extend_from_slice(b",\"object\":\"generation\",\"output\":");
    write_optional_stored(out, generation.output);
    out.extend_from_slice(b",\"source\":");
    write_string(out, generation.source);
    out.extend_from_slice(b",\"started_at\":");
    write_optional_time(out, generation.started_at);
    out.extend_from_slice(b",\"status\":");
    write_string(out, generation.status.as_str());
    // The URLs, written in pieces without being made into strings first.
    out.extend_from_slice(b",\"urls\":{\"cancel\":\"");
    write_url_of(out, api_base, generation.id);
    out.extend_from_slice(b"/cancel\",\"get\":\"");
    write_url_of(out, api_base, generation.id);
    out.extend_from_slice(b"\"}}");
}

/// `text` as a JSON string. Most of a record's strings (ids, names, URLs)
/// have nothing to escape, and are copied between their quotes; any other
/// goes through serde_json's escaping.
fn write_string(out: &mut Vec<u8>, text: &str) {
    if needs_no_escape(text) {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(out, text).expect("writing JSON into a Vec does not fail");
    }
}

/// Whether `text` is written in a JSON string as it is: no quote, no
/// backslash and no control character, which serde_json would escape.
fn needs_no_escape(text: &str) -> bool {
    text.bytes()
        .all(|byte| byte >= 0x20 && byte != b'"' && byte != b'\\')
}

/// The contents of the string `{api_base}/generations/{id}`, without its
/// quotes.
fn write_url_of(out: &mut Vec<u8>, api_base: &str, id: &str) {
    for piece in [api_base, "/generations/", id] {
        if needs_no_escape(piece) {
            out.extend_from_slice(piece.as_bytes());
        } else {
            let quoted = serde_json::to_string(piece).expect("a string is JSON");
            out.extend_from_slice(&quoted.as_bytes()[1..quoted.len() - 1]);
        }
    }
}

fn write_optional_time(out: &mut Vec<u8>, unix_millis: Option<i64>) {
    use std::io::Write as _;
    match unix_millis {
        // Digits, dashes, colons, a dot and letters: nothing to escape.
        Some(unix_millis) => {
            write!(out, "\"{}\"", Rfc3339(unix_millis)).expect("writing into a Vec does not fail")
        }
        None => out.extend_from_slice(b"null"),
    }
}

/// A JSON text the store wrote (`StoredJson`), as it is.
fn write_optional_stored(out: &mut Vec<u8>, stored: Option<&str>) {
    match stored {
        Some(stored) => out.extend_from_slice(stored.as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
}

/// `cost` as its derived `Serialize` writes it, the amounts' digits by
/// serde_json.
fn write_cost(out: &mut Vec<u8>, cost: &Cost) {
    let write_amount = |out: &mut Vec<u8>, amount: Option<f64>| match amount {
        Some(amount) => {
            serde_json::to_writer(out, &amount).expect("writing JSON into a Vec does not fail")
        }
        None => out.extend_from_slice(b"null"),
    };
    out.extend_from_slice(b"{\"amount_usd\":");
    write_amount(out, Some(cost.amount_usd));
    out.extend_from_slice(b",\"currency\":\"usd\",\"estimated\":");
    out.extend_from_slice(if cost.estimated { b"true" } else { b"false" });
    out.extend_from_slice(b",\"official_usd\":");
    write_amount(out, cost.official_usd);
    out.extend_from_slice(b",\"saved_usd\":");
    write_amount(out, cost.saved_usd);
    out.push(b'}');
}

/// A page of the generations list written as JSON while its generations
/// are read (`Store::visit_generations`): the bytes `http::generations::
/// ListPage` describes, each record by `write_generation_json`. The list is
/// read with one generation more than the page, which is not written but
/// tells that another page exists, as `one_page` does for a collected list.
pub struct GenerationPageWriter<'a> {
    out: Vec<u8>,
    page_size: usize,
    written: usize,
    has_more: bool,
    /// The position of the last generation written, for the next page's
    /// cursor; its id is copied into the same buffer each time.
    last_created_at: i64,
    last_id: String,
    api_base: &'a str,
}

/// Room for a Generation record's JSON (about 900 bytes with a short
/// prompt), so that most answers are written without growing their buffer.
pub const RECORD_BYTES: usize = 1024;

impl<'a> GenerationPageWriter<'a> {
    pub fn new(page_size: usize, api_base: &'a str) -> GenerationPageWriter<'a> {
        let mut out = Vec::with_capacity((page_size + 1) * RECORD_BYTES);
        out.extend_from_slice(b"{\"data\":[");
        GenerationPageWriter {
            out,
            page_size,
            written: 0,
            has_more: false,
            last_created_at: 0,
            last_id: String::new(),
            api_base,
        }
    }

    /// Adds the next generation, newest first.
    pub fn push(&mut self, generation: GenerationView<'_>) {
        if self.written == self.page_size {
            self.has_more = true;
            return;
        }
        if self.written > 0 {
            self.out.push(b',');
        }
        write_generation_json(&mut self.out, &generation, self.api_base);
        self.written += 1;
        self.last_created_at = generation.created_at;
        self.last_id.clear();
        self.last_id.push_str(generation.id);
    }

    /// The page's JSON.
    pub fn finish(mut self) -> Vec<u8> {
        let out = &mut self.out;
        out.extend_from_slice(b"],\"has_more\":");
        if self.has_more {
            let cursor = encode_cursor(self.last_created_at, &self.last_id);
            out.extend_from_slice(b"true,\"next_cursor\":");
            write_string(out, &cursor);
        } else {
            out.extend_from_slice(b"false,\"next_cursor\":null");
        }
        out.extend_from_slice(b",\"object\":\"list\"}");
        self.out
    }
}

/// A page of `page_size` generations out of a list read with one row more
/// than the page, and the cursor of the next page when that row was there.
/// The API's lists (the account's and the operator's) and the dashboard's
/// page with it, so every page link carries the same cursors.
pub fn one_page(
    mut generations: Vec<Generation>,
    page_size: usize,
) -> (Vec<Generation>, Option<String>) {
    let has_more = generations.len() > page_size;
    generations.truncate(page_size);
    let next_cursor = has_more
        .then(|| {
            generations
                .last()
                .map(|last| encode_cursor(last.created_at, &last.id))
        })
        .flatten();
    (generations, next_cursor)
}

/// A list cursor: the position after the generation of `created_at` and
/// `id`, opaque to clients.
fn encode_cursor(created_at: i64, id: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{created_at}:{id}"))
}

/// The position a cursor of `encode_cursor` names, or `None` for one this
/// API did not return.
pub fn decode_cursor(cursor: &str) -> Option<(i64, String)> {
    let decoded = String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    let (created_at, id) = decoded.split_once(':')?;
    Some((created_at.parse().ok()?, id.to_owned()))
}

/// The Generation record as a JSON value, for answers and event bodies
/// that add to it or embed it.
pub fn generation_json(generation: &Generation, api_base: &str) -> Value {
    serde_json::to_value(GenerationRecord::new(generation, api_base))
        .expect("a generation record is plain JSON")
}

/// A generation as the store answers it, for the unit tests of the
/// modules that present one (here and `http/openapi/`).
#[cfg(test)]
pub(crate) fn sample_generation(status: GenerationStatus) -> Generation {
    Generation {
        id: "gen_1".into(),
        account_id: "acct_1".into(),
        model: "vendor_1/model_1".into(),
        endpoint: "vendor_1/model_1/text-to-video".into(),
        mode: "text-to-video".into(),
        status,
        input: StoredJson::from_value(&serde_json::json!({ "prompt": "a fox", "duration": 5 })),
        output: Some(StoredJson::from_value(
            &serde_json::json!({ "video_url": "https://x/y.mp4" }),
        )),
        error: None,
        price: vidgate_core::Micros(500_000),
        official_price: vidgate_core::Micros(600_000),
        source: "api".into(),
        webhook_url: None,
        attempts: 1,
        created_at: 1_795_000_000_000,
        started_at: Some(1_795_000_001_000),
        completed_at: None,
    }
}

/// A key's spend limit as the operator API and `vidgate admin key limit`
/// answer it: the amount as `"1.00"` and the period, both null without one.
#[derive(Serialize, ToSchema)]
#[schema(as = KeySpendLimit)]
pub struct SpendLimitRecord<'a> {
    key_id: &'a str,
    #[schema(value_type = Option<String>, required = true)]
    spend_limit_period: Option<&'static str>,
    /// `"1.00"`.
    #[schema(required = true)]
    spend_limit_usd: Option<String>,
}

impl<'a> SpendLimitRecord<'a> {
    pub fn new(
        key_id: &'a str,
        limit: Option<crate::spend_limits::SpendLimit>,
    ) -> SpendLimitRecord<'a> {
        SpendLimitRecord {
            key_id,
            spend_limit_period: limit.map(|limit| limit.period.as_str()),
            spend_limit_usd: limit.map(|limit| limit.amount.usd_text()),
        }
    }
}

/// The spend limit record as a JSON value, for `vidgate admin`.
pub fn spend_limit_json(
    key_id: &str,
    limit: Option<crate::spend_limits::SpendLimit>,
) -> serde_json::Value {
    serde_json::to_value(SpendLimitRecord::new(key_id, limit))
        .expect("a spend limit record is plain JSON")
}

/// An account's low-balance alert as the operator API and `vidgate admin
/// account low-balance` answer it: the threshold as `"5.00"`, the URL its
/// event goes to, and whether the balance is below it now.
#[derive(Serialize, ToSchema)]
#[schema(as = LowBalanceAlert)]
pub struct LowBalanceAlertRecord<'a> {
    below: bool,
    /// `"5.00"`.
    threshold_usd: String,
    #[schema(required = true, format = Uri)]
    webhook_url: Option<&'a str>,
}

impl<'a> LowBalanceAlertRecord<'a> {
    /// The account's alert; `None` without one.
    pub fn new(account: &'a crate::store::Account) -> Option<LowBalanceAlertRecord<'a>> {
        let alert = account.low_balance_alert.as_ref()?;
        Some(LowBalanceAlertRecord {
            below: account.is_below_low_balance_threshold(),
            threshold_usd: alert.threshold.usd_text(),
            webhook_url: alert.webhook_url.as_deref(),
        })
    }
}

/// The alert as a JSON value, null without one, for `vidgate admin`.
pub fn low_balance_alert_json(account: &crate::store::Account) -> serde_json::Value {
    serde_json::to_value(LowBalanceAlertRecord::new(account))
        .expect("a low-balance alert record is plain JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let encoded = URL_SAFE_NO_PAD.encode("1700000000000:gen_abc");
        assert_eq!(
            decode_cursor(&encoded),
            Some((1_700_000_000_000, "gen_abc".into()))
        );
        assert_eq!(decode_cursor("!!!"), None);
        assert_eq!(decode_cursor(&URL_SAFE_NO_PAD.encode("nope")), None);
    }

    #[test]
    fn timestamps_are_rfc3339_utc_with_milliseconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_000_000_123), "2026-11-18T11:06:40.123Z");
    }

    /// The hot reads write the record directly and webhooks send it as a
    /// value: both must be the same bytes, so a field added out of
    /// alphabetical order fails here.
    #[test]
    fn the_record_writes_the_bytes_of_its_value() {
        for status in [GenerationStatus::Running, GenerationStatus::Succeeded] {
            let generation = sample_generation(status);
            let record = GenerationRecord::new(&generation, "https://api.example/api/v1");
            let direct = serde_json::to_string(&record).unwrap();
            let value = generation_json(&generation, "https://api.example/api/v1");
            assert_eq!(direct, value.to_string());
            assert_eq!(
                value["cost"]["estimated"],
                status == GenerationStatus::Running
            );
            assert_eq!(
                value["urls"]["cancel"],
                "https://api.example/api/v1/generations/gen_1/cancel"
            );
        }
    }

    /// Generations of every state, with and without an output and an
    /// error, with strings that need escaping and times at the ends of
    /// what RFC 3339 writes.
    fn generations_of_every_shape() -> Vec<Generation> {
        let output = StoredJson::from_value(&serde_json::json!({
            "content_type": "video/mp4", "duration_s": 5.0, "fps": 24, "has_audio": false,
            "height": 720, "seed": 7, "size_bytes": 1_843_200,
            "video_url": "https://x/files/a.mp4", "width": 1280,
        }));
        let error = StoredJson::from_value(
            &serde_json::json!({ "code": "generation_failed", "message": "a \"quoted\"\nline" }),
        );
        let mut generations = Vec::new();
        for status in GenerationStatus::ALL.iter().copied() {
            let mut generation = sample_generation(status);
            generation.id = format!("gen_{}\u{2028}\"é", status.as_str());
            generation.input = StoredJson::from_value(&serde_json::json!({
                "prompt": "two\nlines, \"quoted\", tab\t, é, \u{1F600}", "duration": 5,
                "resolution": "720p", "ratio": 0.5,
            }));
            generation.output = (status == GenerationStatus::Succeeded).then(|| output.clone());
            generation.error = (status == GenerationStatus::Failed).then(|| error.clone());
            generation.started_at = (status != GenerationStatus::Queued).then_some(0);
            generation.completed_at = status.is_final().then_some(i64::MAX);
            generation.price = Micros(1);
            generations.push(generation);
        }
        generations
    }

    /// The hot reads' hand-written JSON is the derived `Serialize`'s, byte
    /// for byte: a field added to the record and not to the writer, or
    /// written differently, fails here.
    #[test]
    fn the_hot_reads_write_the_bytes_of_the_derived_record() {
        let api_base = "https://api.example/api/v1";
        let generations = generations_of_every_shape();
        // The second base has characters to escape (no real one has).
        for base in [api_base, "https://api.example/\"odd\"\\base"] {
            for generation in &generations {
                let mut written = Vec::new();
                write_generation_json(&mut written, &generation.view(), base);
                let derived =
                    serde_json::to_string(&GenerationRecord::new(generation, base)).unwrap();
                assert_eq!(String::from_utf8(written).unwrap(), derived);
            }
        }
        // Pages of every size around the number of generations read: the
        // fields of `ListPage`, with the cursor `one_page` gives.
        for page_size in 1..=generations.len() {
            let mut writer = GenerationPageWriter::new(page_size, api_base);
            for generation in &generations {
                writer.push(generation.view());
            }
            let written = String::from_utf8(writer.finish()).unwrap();
            let (page, next_cursor) = one_page(generations.clone(), page_size);
            let expected = serde_json::json!({
                "data": page
                    .iter()
                    .map(|generation| generation_json(generation, api_base))
                    .collect::<Vec<_>>(),
                "has_more": next_cursor.is_some(),
                "next_cursor": next_cursor,
                "object": "list",
            });
            assert_eq!(written, expected.to_string(), "a page of {page_size}");
            assert_eq!(next_cursor.is_some(), page_size < generations.len());
        }
    }
}
