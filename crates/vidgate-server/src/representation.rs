//! The public representation of a generation (SPEC.md section 2), shared by
//! the API's answers and the webhook senders' event bodies, so that a
//! webhook carries exactly what `GET /generations/{id}` returns. It sits
//! below the HTTP layer because the senders, which run beside the workers,
//! must not reach up into it.

use serde::Serialize;
use serde_json::Value;
use vidgate_core::GenerationStatus;

use crate::store::Generation;
pub use crate::store::rfc3339;

/// The cost object: an estimate while the job is pending, the captured price
/// once it succeeded, zero once it failed or was canceled (the hold was
/// refunded).
#[derive(Serialize)]
struct Cost {
    amount_usd: f64,
    currency: &'static str,
    estimated: bool,
    official_usd: Option<f64>,
    saved_usd: Option<f64>,
}

impl Cost {
    fn of(generation: &Generation) -> Cost {
        let (amount, estimated, official) = match generation.status {
            GenerationStatus::Queued | GenerationStatus::Running => (generation.price, true, None),
            GenerationStatus::Succeeded => {
                (generation.price, false, Some(generation.official_price))
            }
            GenerationStatus::Failed | GenerationStatus::Canceled => {
                (vidgate_core::Micros::ZERO, false, None)
            }
        };
        Cost {
            amount_usd: amount.to_usd(),
            currency: "usd",
            estimated,
            official_usd: official.map(|official| official.to_usd()),
            saved_usd: official.map(|official| (official - amount).to_usd()),
        }
    }
}

#[derive(Serialize)]
struct Urls {
    cancel: String,
    get: String,
}

/// The Generation record of SPEC.md section 2, as every endpoint returns
/// it, borrowed from the stored generation and written straight to JSON
/// (the hot reads send it without building a `Value` first). The fields
/// are in alphabetical order, the order of a `serde_json::Value` object, so
/// both ways write the same bytes.
#[derive(Serialize)]
pub struct GenerationRecord<'a> {
    completed_at: Option<String>,
    cost: Cost,
    created_at: String,
    endpoint: &'a str,
    error: &'a Option<Value>,
    id: &'a str,
    input: &'a Value,
    mode: &'a str,
    model: &'a str,
    object: &'static str,
    output: &'a Option<Value>,
    source: &'a str,
    started_at: Option<String>,
    status: GenerationStatus,
    urls: Urls,
}

impl<'a> GenerationRecord<'a> {
    pub fn new(generation: &'a Generation, api_base: &str) -> GenerationRecord<'a> {
        let url = format!("{api_base}/generations/{}", generation.id);
        GenerationRecord {
            completed_at: generation.completed_at.map(rfc3339),
            cost: Cost::of(generation),
            created_at: rfc3339(generation.created_at),
            endpoint: &generation.endpoint,
            error: &generation.error,
            id: &generation.id,
            input: &generation.input,
            mode: &generation.mode,
            model: &generation.model,
            object: "generation",
            output: &generation.output,
            source: &generation.source,
            started_at: generation.started_at.map(rfc3339),
            status: generation.status,
            urls: Urls {
                cancel: format!("{url}/cancel"),
                get: url,
            },
        }
    }
}

/// The Generation record as a JSON value, for answers and event bodies
/// that add to it or embed it.
pub fn generation_json(generation: &Generation, api_base: &str) -> Value {
    serde_json::to_value(GenerationRecord::new(generation, api_base))
        .expect("a generation record is plain JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc_with_milliseconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_000_000_123), "2026-11-18T11:06:40.123Z");
    }

    fn generation(status: GenerationStatus) -> Generation {
        Generation {
            id: "gen_1".into(),
            account_id: "acct_1".into(),
            model: "vendor_1/model_1".into(),
            endpoint: "vendor_1/model_1/text-to-video".into(),
            mode: "text-to-video".into(),
            status,
            input: serde_json::json!({ "prompt": "a fox", "duration": 5 }),
            output: Some(serde_json::json!({ "video_url": "https://x/y.mp4" })),
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

    /// The hot reads write the record directly and webhooks send it as a
    /// value: both must be the same bytes, so a field added out of
    /// alphabetical order fails here.
    #[test]
    fn the_record_writes_the_bytes_of_its_value() {
        for status in [GenerationStatus::Running, GenerationStatus::Succeeded] {
            let generation = generation(status);
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
}
