//! The public representation of a generation (SPEC.md section 2), shared by
//! the API's answers and the webhook senders' event bodies, so that a
//! webhook carries exactly what `GET /generations/{id}` returns. It sits
//! below the HTTP layer because the senders, which run beside the workers,
//! must not reach up into it.

use serde_json::{Value, json};
use vidgate_core::GenerationStatus;

use crate::store::Generation;
pub use crate::store::rfc3339;

/// The cost object: an estimate while the job is pending, the captured price
/// once it succeeded, zero once it failed or was canceled (the hold was
/// refunded).
fn cost_json(generation: &Generation) -> Value {
    let (amount, estimated, official) = match generation.status {
        GenerationStatus::Queued | GenerationStatus::Running => (generation.price, true, None),
        GenerationStatus::Succeeded => (generation.price, false, Some(generation.official_price)),
        GenerationStatus::Failed | GenerationStatus::Canceled => {
            (vidgate_core::Micros::ZERO, false, None)
        }
    };
    json!({
        "amount_usd": amount.to_usd(),
        "currency": "usd",
        "estimated": estimated,
        "official_usd": official.map(|official| official.to_usd()),
        "saved_usd": official.map(|official| (official - amount).to_usd()),
    })
}

/// The Generation record of SPEC.md section 2, as every endpoint returns it.
pub fn generation_json(generation: &Generation, api_base: &str) -> Value {
    let url = format!("{api_base}/generations/{}", generation.id);
    json!({
        "id": generation.id,
        "object": "generation",
        "model": generation.model,
        "endpoint": generation.endpoint,
        "mode": generation.mode,
        "status": generation.status,
        "input": generation.input,
        "output": generation.output,
        "error": generation.error,
        "cost": cost_json(generation),
        "source": generation.source,
        "started_at": generation.started_at.map(rfc3339),
        "completed_at": generation.completed_at.map(rfc3339),
        "urls": { "get": url, "cancel": format!("{url}/cancel") },
        "created_at": rfc3339(generation.created_at),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc_with_milliseconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_000_000_123), "2026-11-18T11:06:40.123Z");
    }
}
