"""A webhook from the real server, received locally and verified."""

from __future__ import annotations

import json
import time

import pytest

import vidgate
from conftest import ENDPOINT, SMALL
from harness import Account, WebhookReceiver


def test_a_delivered_webhook_verifies_and_unwraps(
    client: vidgate.Client, account: Account, receiver: WebhookReceiver
) -> None:
    generation = client.run(
        ENDPOINT, {"prompt": "a kite with a webhook", **SMALL}, webhook_url=receiver.url
    )
    delivered = receiver.next()
    client.webhooks.verify(delivered.body, delivered.headers, account.webhook_secret)
    event = client.webhooks.unwrap(delivered.body, delivered.headers, account.webhook_secret)
    assert event.type == "generation.succeeded"
    assert event.data.id == generation.id and event.data.output is not None
    assert event.data.output.video_url == generation.output.video_url  # type: ignore[union-attr]

    # The same message altered, or checked with another secret, is refused.
    tampered = json.loads(delivered.body)
    tampered["data"]["output"]["video_url"] = "https://evil.example/clip.mp4"
    with pytest.raises(vidgate.WebhookVerificationError):
        client.webhooks.verify(json.dumps(tampered), delivered.headers, account.webhook_secret)
    with pytest.raises(vidgate.WebhookVerificationError):
        client.webhooks.verify(
            delivered.body, delivered.headers, "whsec_" + "QUJD" * 8
        )
    # A replay long after it was sent is refused by the timestamp check.
    with pytest.raises(vidgate.WebhookVerificationError, match="too far"):
        vidgate.webhooks.verify(
            delivered.body, delivered.headers, account.webhook_secret, now=time.time() + 600
        )

    (delivery,) = client.webhooks.deliveries(generation.id)
    assert delivery.id == delivered.headers["webhook-id"]
    assert delivery.event_type == "generation.succeeded" and delivery.url == receiver.url
    again = client.webhooks.retry_delivery(generation.id, delivery.id)
    assert again.id == delivery.id
    resent = receiver.next()
    assert resent.headers["webhook-id"] == delivery.id
    client.webhooks.verify(resent.body, resent.headers, account.webhook_secret)


def test_a_rotated_secret_signs_alongside_the_old_one(
    client: vidgate.Client, account: Account, receiver: WebhookReceiver
) -> None:
    rotated = client.webhooks.rotate_secret()
    assert rotated.webhook_secret.startswith("whsec_")
    assert rotated.previous_secret_expires_at is not None
    client.run(ENDPOINT, {"prompt": "after rotation", **SMALL}, webhook_url=receiver.url)
    delivered = receiver.next()
    client.webhooks.verify(delivered.body, delivered.headers, rotated.webhook_secret)
    client.webhooks.verify(delivered.body, delivered.headers, account.webhook_secret)


def test_the_client_secret_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    monkeypatch.setenv("VIDGATE_WEBHOOK_SECRET", secret)
    body = json.dumps({"type": "generation.canceled", "timestamp": "2026-11-23T12:00:00.000Z",
                       "data": {"id": "gen_1", "status": "canceled",
                                "created_at": "2026-11-23T11:59:00.000Z"}})
    now = int(time.time())
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(now),
        "webhook-signature": vidgate.webhooks.sign(body, secret=secret, message_id="msg_1",
                                                   timestamp=now),
    }
    with vidgate.Client(api_key="unused") as client:
        event = client.webhooks.unwrap(body, headers)
    assert event.type == "generation.canceled" and event.data.status == "canceled"
