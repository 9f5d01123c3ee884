"""Checking webhooks: the Standard Webhooks signature vidgate sends.

vidgate signs each attempt with HMAC-SHA256 over
``{webhook-id}.{webhook-timestamp}.{body}``, keyed with the base64 part of the
account's ``whsec_…`` secret, and sends ``v1,<base64>`` in
``webhook-signature`` (two, space-separated, for 24 hours after a rotation).
Pass the raw body bytes, not JSON parsed and serialised again.

:func:`unwrap` returns the event by its ``type``: a :class:`WebhookEvent`
for ``generation.succeeded``, ``generation.failed`` and
``generation.canceled``, an :class:`AccountBalanceLowEvent` for
``account.balance_low``, and, as Stripe's and Svix's libraries do with event
types they do not know, an :class:`UnknownWebhookEvent` (its ``data`` the
JSON object) for a type added to the server after this library, rather than
an error: a receiver should answer 2xx to events it does not handle, or they
are retried for a day.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from typing import Mapping, Optional, Union

from .errors import WebhookVerificationError
from .types import AnyWebhookEvent, webhook_event_from_json

#: How far a ``webhook-timestamp`` may be from now, either way, in seconds:
#: an older message may be a replay, as Standard Webhooks advises.
DEFAULT_TOLERANCE_SECONDS = 300

SECRET_PREFIX = "whsec_"


def _header(headers: Mapping[str, str], name: str) -> str:
    """A header by case-insensitive name, as web frameworks spell them
    variously (``Webhook-Id``, ``webhook-id``, ``HTTP_WEBHOOK_ID``)."""
    wanted = {name, name.upper().replace("-", "_"), "HTTP_" + name.upper().replace("-", "_")}
    for key, value in headers.items():
        if key.lower() in wanted or key in wanted:
            return value
    raise WebhookVerificationError(f"The {name} header is missing.")


def _key(secret: str) -> bytes:
    encoded = secret[len(SECRET_PREFIX) :] if secret.startswith(SECRET_PREFIX) else secret
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as error:
        raise WebhookVerificationError(
            "The webhook secret is not a whsec_… secret (base64 after the prefix)."
        ) from error


def sign(payload: Union[bytes, str], *, secret: str, message_id: str, timestamp: int) -> str:
    """The ``webhook-signature`` value vidgate sends for this message: for a
    receiver's own tests."""
    body = payload.encode() if isinstance(payload, str) else payload
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def verify(
    payload: Union[bytes, str],
    headers: Mapping[str, str],
    secret: str,
    *,
    tolerance: float = DEFAULT_TOLERANCE_SECONDS,
    now: Optional[float] = None,
) -> None:
    """Raises :class:`WebhookVerificationError` unless one of the message's
    signatures is ``secret``'s and its timestamp is within ``tolerance``
    seconds of ``now`` (default: the clock)."""
    message_id = _header(headers, "webhook-id")
    timestamp_text = _header(headers, "webhook-timestamp")
    signatures = _header(headers, "webhook-signature")
    try:
        timestamp = int(timestamp_text)
    except ValueError as error:
        raise WebhookVerificationError("The webhook-timestamp header is not a number.") from error
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise WebhookVerificationError(
            "The webhook-timestamp is too far from now: an old message may be a replay."
        )
    expected = sign(payload, secret=secret, message_id=message_id, timestamp=timestamp)
    expected_digest = expected.split(",", 1)[1]
    for candidate in signatures.split():
        version, _, digest = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(digest, expected_digest):
            return
    raise WebhookVerificationError("No signature of the message matches the secret.")


def unwrap(
    payload: Union[bytes, str],
    headers: Mapping[str, str],
    secret: str,
    *,
    tolerance: float = DEFAULT_TOLERANCE_SECONDS,
    now: Optional[float] = None,
) -> AnyWebhookEvent:
    """Verifies the message (see :func:`verify`) and returns its event: a
    :class:`WebhookEvent` (a generation's), an
    :class:`AccountBalanceLowEvent`, or an :class:`UnknownWebhookEvent` for a
    type this library does not know; tell them apart with ``isinstance``.
    Raises :class:`WebhookVerificationError` when the message is not signed
    with ``secret``, or its signed body is not a vidgate event."""
    verify(payload, headers, secret, tolerance=tolerance, now=now)
    try:
        body = json.loads(payload)
        return webhook_event_from_json(body)
    except (ValueError, KeyError, TypeError) as error:
        raise WebhookVerificationError("The signed body is not a vidgate event.") from error
