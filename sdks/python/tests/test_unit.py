"""The library's pure parts: backoff, Retry-After, signatures, records."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

import vidgate
from vidgate import _base, webhooks

SETTINGS = _base.resolve_settings(None, None, 60.0, 4, 1.0, 30.0, 120.0, None)

# The test vector of the Standard Webhooks specification.
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TIMESTAMP = 1614265330
SPEC_PAYLOAD = '{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_backoff_doubles_from_one_second_and_caps_at_thirty() -> None:
    no_jitter = [_base.backoff_delay(n, None, SETTINGS, lambda: 0.0) for n in range(7)]
    assert no_jitter == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    most_jitter = [_base.backoff_delay(n, None, SETTINGS, lambda: 1.0) for n in range(6)]
    assert most_jitter == [1.25, 2.5, 5.0, 10.0, 20.0, 37.5]


def test_backoff_never_undercuts_retry_after() -> None:
    assert _base.backoff_delay(0, 7.0, SETTINGS, lambda: 0.5) == 7.0
    assert _base.backoff_delay(3, 2.0, SETTINGS, lambda: 0.0) == 8.0


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert _base.parse_retry_after("3") == 3.0
    assert _base.parse_retry_after(None) is None
    assert _base.parse_retry_after("soon") is None
    now = datetime(2026, 11, 23, 12, 0, 0, tzinfo=timezone.utc)
    assert _base.parse_retry_after("Mon, 23 Nov 2026 12:00:10 GMT", now) == 10.0


def test_signature_matches_the_standard_webhooks_vector() -> None:
    signature = webhooks.sign(
        SPEC_PAYLOAD, secret=SPEC_SECRET, message_id=SPEC_ID, timestamp=SPEC_TIMESTAMP
    )
    assert signature == SPEC_SIGNATURE
    headers = {
        "webhook-id": SPEC_ID,
        "webhook-timestamp": str(SPEC_TIMESTAMP),
        "webhook-signature": "v1,bm90IG91cnM= " + SPEC_SIGNATURE,
    }
    webhooks.verify(SPEC_PAYLOAD, headers, SPEC_SECRET, now=SPEC_TIMESTAMP + 10)


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"webhook-timestamp": str(SPEC_TIMESTAMP - 301)}, "too far"),
        ({"webhook-signature": "v1,bm90IG91cnM="}, "No signature"),
        ({"webhook-id": "msg_other"}, "No signature"),
        ({"webhook-signature": "v2," + SPEC_SIGNATURE[3:]}, "No signature"),
    ],
)
def test_verification_refuses_stale_forged_or_altered_messages(
    change: dict, expected: str
) -> None:
    headers = {
        "Webhook-Id": SPEC_ID,
        "Webhook-Timestamp": str(SPEC_TIMESTAMP),
        "Webhook-Signature": SPEC_SIGNATURE,
    }
    headers = {**{k.lower(): v for k, v in headers.items()}, **change}
    with pytest.raises(vidgate.WebhookVerificationError, match=expected):
        webhooks.verify(SPEC_PAYLOAD, headers, SPEC_SECRET, now=SPEC_TIMESTAMP)


def test_verification_refuses_a_missing_header_and_a_changed_body() -> None:
    headers = {"webhook-id": SPEC_ID, "webhook-timestamp": str(SPEC_TIMESTAMP)}
    with pytest.raises(vidgate.WebhookVerificationError, match="webhook-signature"):
        webhooks.verify(SPEC_PAYLOAD, headers, SPEC_SECRET, now=SPEC_TIMESTAMP)
    headers["webhook-signature"] = SPEC_SIGNATURE
    with pytest.raises(vidgate.WebhookVerificationError):
        webhooks.verify(SPEC_PAYLOAD.replace("2", "3"), headers, SPEC_SECRET, now=SPEC_TIMESTAMP)


def test_an_error_answer_becomes_its_typed_error_with_the_request_id() -> None:
    body = {"error": {"code": "insufficient_balance", "message": "Too poor.", "param": None}}
    error = vidgate.errors.error_from_response(402, body, {"x-request-id": "req-1"})
    assert isinstance(error, vidgate.InsufficientBalanceError)
    assert (error.status, error.code, error.message, error.param, error.request_id) == (
        402,
        "insufficient_balance",
        "Too poor.",
        None,
        "req-1",
    )
    unknown = vidgate.errors.error_from_response(418, "<html>", {})
    assert type(unknown) is vidgate.APIStatusError and unknown.code == "http_418"


def test_client_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIDGATE_API_KEY", "vg_live_from_env")
    monkeypatch.setenv("VIDGATE_BASE_URL", "http://example.invalid/api/v1/")
    with vidgate.Client() as client:
        assert client.base_url == "http://example.invalid/api/v1"
        assert client._settings.api_key == "vg_live_from_env"
    with vidgate.Client(api_key="vg_live_given", base_url="http://other.invalid/api/v1") as client:
        assert client._settings.api_key == "vg_live_given"


def test_ids_are_checked_before_anything_is_sent() -> None:
    with pytest.raises(ValueError):
        _base.endpoint_path("vendor_1/model_1")
    with pytest.raises(ValueError):
        _base.model_path("vendor_1")
    assert _base.endpoint_path("vendor_1/model_1/text-to-video") == "vendor_1/model_1/text-to-video"
    assert _base.id_segment("gen_a/b") == "gen_a%2Fb"


def test_an_expired_clip_says_so_and_a_kept_one_does_not() -> None:
    kept = vidgate.GenerationOutput.from_json({"video_url": "https://x/files/a.mp4"})
    assert (kept.expired, kept.expired_at) == (False, None)
    expired = vidgate.GenerationOutput.from_json(
        {"video_url": "https://x/files/a.mp4", "expired": True, "expired_at": "2026-12-23T00:00:00Z"}
    )
    assert (expired.expired, expired.expired_at) == (True, "2026-12-23T00:00:00Z")
