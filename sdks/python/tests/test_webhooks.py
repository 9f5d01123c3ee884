"""A webhook from the real server, received locally and verified; and the
events of each type signed here and unwrapped (no server needed)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Dict

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
    assert isinstance(event, vidgate.WebhookEvent)
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
    assert isinstance(event, vidgate.WebhookEvent)
    assert event.type == "generation.canceled" and event.data.status == "canceled"


SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#: The body the server sends for account.balance_low (webhook_senders.rs),
#: byte for byte: serde_json's compact form, the threshold a whole number
#: of dollars written as 5.0, the balance negative while in debt.
BALANCE_LOW_BODY = (
    '{"data":{"account_id":"acct_7Hx2","balance_usd":-1.25,"object":"balance_alert",'
    '"threshold_usd":5.0},"timestamp":"2026-11-28T10:02:11.318Z","type":"account.balance_low"}'
)


def signed_headers(body: str, message_id: str = "msg_low_1") -> Dict[str, str]:
    now = int(time.time())
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(now),
        "webhook-signature": vidgate.webhooks.sign(
            body, secret=SECRET, message_id=message_id, timestamp=now
        ),
    }


def test_account_balance_low_unwraps_to_its_own_event() -> None:
    headers = signed_headers(BALANCE_LOW_BODY)
    vidgate.webhooks.verify(BALANCE_LOW_BODY, headers, SECRET)
    event = vidgate.webhooks.unwrap(BALANCE_LOW_BODY.encode(), headers, SECRET)
    assert isinstance(event, vidgate.AccountBalanceLowEvent)
    assert event.type == "account.balance_low"
    assert event.timestamp == datetime(2026, 11, 28, 10, 2, 11, 318000, tzinfo=timezone.utc)
    assert event.data == vidgate.BalanceAlert(
        object="balance_alert",
        account_id="acct_7Hx2",
        balance_usd=-1.25,
        threshold_usd=5.0,
        raw={},
    )
    assert event.data.raw == json.loads(BALANCE_LOW_BODY)["data"]
    # The client's unwrap, with the secret from its settings, is the same.
    with vidgate.Client(api_key="unused", webhook_secret=SECRET) as client:
        assert client.webhooks.unwrap(BALANCE_LOW_BODY, headers) == event


def test_account_balance_low_as_the_api_docs_show_it() -> None:
    body = json.dumps({"type": "account.balance_low", "timestamp": "2026-11-28T10:02:11.318Z",
                       "data": {"object": "balance_alert", "account_id": "acct_1",
                                "balance_usd": 4.2, "threshold_usd": 5}})
    event = vidgate.webhooks.unwrap(body, signed_headers(body), SECRET)
    assert isinstance(event, vidgate.AccountBalanceLowEvent)
    assert (event.data.balance_usd, event.data.threshold_usd) == (4.2, 5.0)
    assert isinstance(event.data.threshold_usd, float)


def test_an_altered_or_malformed_balance_low_is_refused() -> None:
    headers = signed_headers(BALANCE_LOW_BODY)
    with pytest.raises(vidgate.WebhookVerificationError, match="No signature"):
        vidgate.webhooks.unwrap(BALANCE_LOW_BODY.replace("-1.25", "100.0"), headers, SECRET)
    for data in ({"object": "balance_alert", "account_id": "acct_1", "threshold_usd": 5.0},
                 {"object": "balance_alert", "account_id": "acct_1", "balance_usd": "4.2",
                  "threshold_usd": 5.0},
                 {"object": "balance_alert", "balance_usd": 4.2, "threshold_usd": 5.0},
                 "acct_1"):
        body = json.dumps({"type": "account.balance_low",
                           "timestamp": "2026-11-28T10:02:11.318Z", "data": data})
        with pytest.raises(vidgate.WebhookVerificationError, match="not a vidgate event"):
            vidgate.webhooks.unwrap(body, signed_headers(body), SECRET)


def test_each_kind_is_told_apart_by_type() -> None:
    generation = json.dumps({"type": "generation.failed", "timestamp": "2026-11-23T12:00:00.000Z",
                             "data": {"id": "gen_1", "status": "failed",
                                      "created_at": "2026-11-23T11:59:00.000Z"}})
    later = json.dumps({"type": "account.something_new", "timestamp": "2026-12-01T00:00:00Z",
                        "data": {"object": "something", "id": "x_1"}})
    kinds: Dict[str, type] = {}
    for body in (generation, BALANCE_LOW_BODY, later):
        event = vidgate.webhooks.unwrap(body, signed_headers(body), SECRET)
        kinds[event.type] = type(event)
    assert kinds == {
        "generation.failed": vidgate.WebhookEvent,
        "account.balance_low": vidgate.AccountBalanceLowEvent,
        "account.something_new": vidgate.UnknownWebhookEvent,
    }


def test_an_unknown_type_comes_back_generic_not_refused() -> None:
    body = json.dumps({"type": "account.something_new", "timestamp": "2026-12-01T00:00:00Z",
                       "data": {"object": "something", "id": "x_1"}})
    event = vidgate.webhooks.unwrap(body, signed_headers(body), SECRET)
    assert event == vidgate.UnknownWebhookEvent(
        type="account.something_new",
        timestamp=datetime(2026, 12, 1, tzinfo=timezone.utc),
        data={"object": "something", "id": "x_1"},
    )
    # Still not an event: no type, or not an object at all.
    for unsigned in ('{"timestamp": "2026-12-01T00:00:00Z", "data": {}}', "[1, 2]",
                     '{"type": 7, "timestamp": "2026-12-01T00:00:00Z", "data": {}}'):
        with pytest.raises(vidgate.WebhookVerificationError, match="not a vidgate event"):
            vidgate.webhooks.unwrap(unsigned, signed_headers(unsigned), SECRET)
