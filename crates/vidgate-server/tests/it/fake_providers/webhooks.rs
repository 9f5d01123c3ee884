//! The fake's webhooks, signed as each provider signs them.

use super::*;

pub(super) async fn send_webhook(state: &Arc<FakeState>, job: &FakeJob, event: &str) {
    let Some(url) = job.webhook_url.clone() else {
        return;
    };
    if state.switches.lock().unwrap().drop_webhooks || job.marker("drop-webhook") {
        return;
    }
    let Some(request) = (job.provider.webhook_request)(state, job, event, &url) else {
        return;
    };
    // Both providers retry a failed delivery (fal's webhooks page; Replicate
    // "a few times"); how often and how soon is GUESS webhook-retries.
    for _ in 0..3 {
        match request.try_clone().unwrap().send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                state
                    .webhooks_sent
                    .lock()
                    .unwrap()
                    .push((job.id.clone(), status));
                if response.status().is_success() {
                    if event == "completed" {
                        state
                            .completion_webhooks_taken
                            .lock()
                            .unwrap()
                            .insert(job.id.clone(), now_seconds());
                    }
                    return;
                }
            }
            Err(_) => state
                .webhooks_sent
                .lock()
                .unwrap()
                .push((job.id.clone(), 0)),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Reads an RFC 3339 date-time (`2026-11-23T12:00:01.5Z`, or with any
/// offset) as Unix seconds.
pub fn parse_rfc3339(text: &str) -> Option<f64> {
    let time =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    Some(time.unix_timestamp_nanos() as f64 / 1e9)
}
