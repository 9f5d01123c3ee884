"""Typed records of the API's resources.

Each record is a frozen dataclass built from the JSON the API answers with.
Fields the API may leave out are optional here; timestamps are timezone-aware
``datetime`` values; money is in US dollars as the API gives it. ``raw`` keeps
the whole JSON object, so a field added to the API after this library is
still there to read.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any, Dict, List, Literal, Mapping, Optional, Tuple, Union

#: The values of ``Generation.status``, and of the ``status`` filter of a list.
GenerationStatus = Literal["queued", "running", "succeeded", "failed", "canceled"]

#: The ``type`` of each webhook event a generation's ``webhook_url`` receives
#: (a :class:`WebhookEvent`).
GENERATION_EVENT_TYPES: Tuple[str, ...] = (
    "generation.succeeded",
    "generation.failed",
    "generation.canceled",
)

#: The ``type`` of the event an account's low-balance alert sends (an
#: :class:`AccountBalanceLowEvent`).
ACCOUNT_BALANCE_LOW = "account.balance_low"

#: The statuses after which a generation never changes again.
FINAL_STATUSES: Tuple[str, ...] = ("succeeded", "failed", "canceled")

JSON = Dict[str, Any]


def _time(value: Any) -> Optional[datetime]:
    """An RFC 3339 timestamp (``2026-11-21T20:41:07.512Z``) as a datetime;
    ``fromisoformat`` before Python 3.11 does not read the ``Z``."""
    if not isinstance(value, str):
        return None
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    return datetime.fromisoformat(value)


def _required_time(value: Any) -> datetime:
    parsed = _time(value)
    if parsed is None:
        raise ValueError(f"expected a timestamp, got {value!r}")
    return parsed


def _str(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> Optional[float]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _required_float(value: Any) -> float:
    parsed = _float(value)
    if parsed is None:
        raise ValueError(f"expected a number, got {value!r}")
    return parsed


def _mapping(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a JSON object, got {value!r}")
    return value


def _bool(value: Any) -> Optional[bool]:
    return value if isinstance(value, bool) else None


def _dict(value: Any) -> JSON:
    return dict(value) if isinstance(value, Mapping) else {}


@dataclasses.dataclass(frozen=True)
class Cost:
    """What a generation costs: an estimate (the held amount) until it
    succeeds, then the captured price; 0 once failed or canceled."""

    amount_usd: float
    currency: str
    estimated: bool
    official_usd: Optional[float]
    saved_usd: Optional[float]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Cost":
        return cls(
            amount_usd=_float(data.get("amount_usd")) or 0.0,
            currency=str(data.get("currency", "usd")),
            estimated=bool(data.get("estimated")),
            official_usd=_float(data.get("official_usd")),
            saved_usd=_float(data.get("saved_usd")),
        )


@dataclasses.dataclass(frozen=True)
class GenerationOutput:
    """The finished clip. ``video_url`` plays in a browser and supports Range
    until the server's retention time passes; then ``expired`` is true,
    ``expired_at`` says when, and ``video_url`` answers 410 gone."""

    video_url: str
    content_type: Optional[str]
    duration_s: Optional[float]
    width: Optional[int]
    height: Optional[int]
    fps: Optional[int]
    has_audio: Optional[bool]
    size_bytes: Optional[int]
    seed: Optional[int]
    expired: bool
    expired_at: Optional[str]
    raw: JSON = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "GenerationOutput":
        return cls(
            video_url=str(data.get("video_url", "")),
            content_type=_str(data.get("content_type")),
            duration_s=_float(data.get("duration_s")),
            width=_int(data.get("width")),
            height=_int(data.get("height")),
            fps=_int(data.get("fps")),
            has_audio=_bool(data.get("has_audio")),
            size_bytes=_int(data.get("size_bytes")),
            seed=_int(data.get("seed")),
            expired=data.get("expired") is True,
            expired_at=_str(data.get("expired_at")),
            raw=dict(data),
        )


@dataclasses.dataclass(frozen=True)
class GenerationError:
    """Why an accepted generation failed (its hold was refunded)."""

    code: str
    message: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "GenerationError":
        return cls(code=str(data.get("code", "")), message=str(data.get("message", "")))


@dataclasses.dataclass(frozen=True)
class GenerationUrls:
    get: str
    cancel: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "GenerationUrls":
        return cls(get=str(data.get("get", "")), cancel=str(data.get("cancel", "")))


@dataclasses.dataclass(frozen=True)
class Generation:
    """One generation job (SPEC.md section 2)."""

    id: str
    object: str
    model: str
    endpoint: str
    mode: str
    status: str
    input: JSON
    output: Optional[GenerationOutput]
    error: Optional[GenerationError]
    cost: Cost
    source: str
    started_at: Optional[datetime]
    completed_at: Optional[datetime]
    urls: GenerationUrls
    created_at: datetime
    raw: JSON = dataclasses.field(repr=False, compare=False)

    @property
    def is_final(self) -> bool:
        """True once the status is succeeded, failed or canceled."""
        return self.status in FINAL_STATUSES

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Generation":
        output = data.get("output")
        error = data.get("error")
        return cls(
            id=str(data["id"]),
            object=str(data.get("object", "generation")),
            model=str(data.get("model", "")),
            endpoint=str(data.get("endpoint", "")),
            mode=str(data.get("mode", "")),
            status=str(data["status"]),
            input=_dict(data.get("input")),
            output=GenerationOutput.from_json(output) if isinstance(output, Mapping) else None,
            error=GenerationError.from_json(error) if isinstance(error, Mapping) else None,
            cost=Cost.from_json(_dict(data.get("cost"))),
            source=str(data.get("source", "")),
            started_at=_time(data.get("started_at")),
            completed_at=_time(data.get("completed_at")),
            urls=GenerationUrls.from_json(_dict(data.get("urls"))),
            created_at=_required_time(data.get("created_at")),
            raw=dict(data),
        )


@dataclasses.dataclass(frozen=True)
class GenerationPage:
    """One page of ``GET /generations``; ``generations.list`` walks them all."""

    object: str
    data: List[Generation]
    has_more: bool
    next_cursor: Optional[str]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "GenerationPage":
        return cls(
            object=str(data.get("object", "list")),
            data=[Generation.from_json(item) for item in data.get("data", [])],
            has_more=bool(data.get("has_more")),
            next_cursor=_str(data.get("next_cursor")),
        )


@dataclasses.dataclass(frozen=True)
class AccountLimits:
    requests_per_second: int
    burst: int
    max_concurrent_generations: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "AccountLimits":
        return cls(
            requests_per_second=_int(data.get("requests_per_second")) or 0,
            burst=_int(data.get("burst")) or 0,
            max_concurrent_generations=_int(data.get("max_concurrent_generations")) or 0,
        )


@dataclasses.dataclass(frozen=True)
class Account:
    """The caller's account: balance, held and spent money, limits."""

    id: str
    object: str
    name: Optional[str]
    balance_usd: float
    held_usd: float
    spent_usd: Optional[float]
    credited_usd: Optional[float]
    limits: AccountLimits
    raw: JSON = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Account":
        return cls(
            id=str(data["id"]),
            object=str(data.get("object", "account")),
            name=_str(data.get("name")),
            balance_usd=_float(data.get("balance_usd")) or 0.0,
            held_usd=_float(data.get("held_usd")) or 0.0,
            spent_usd=_float(data.get("spent_usd")),
            credited_usd=_float(data.get("credited_usd")),
            limits=AccountLimits.from_json(_dict(data.get("limits"))),
            raw=dict(data),
        )


@dataclasses.dataclass(frozen=True)
class Quote:
    """A price without running: ``cost`` is what a submit would hold."""

    object: str
    endpoint: str
    model: str
    mode: str
    input: JSON
    cost: Cost
    breakdown: JSON

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Quote":
        return cls(
            object=str(data.get("object", "quote")),
            endpoint=str(data.get("endpoint", "")),
            model=str(data.get("model", "")),
            mode=str(data.get("mode", "")),
            input=_dict(data.get("input")),
            cost=Cost.from_json(_dict(data.get("cost"))),
            breakdown=_dict(data.get("breakdown")),
        )


@dataclasses.dataclass(frozen=True)
class ModelEndpoint:
    """One mode of a model: where to submit and quote, and its input schema."""

    id: str
    mode: str
    url: str
    quote_url: str
    input_schema: JSON

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ModelEndpoint":
        return cls(
            id=str(data.get("id", "")),
            mode=str(data.get("mode", "")),
            url=str(data.get("url", "")),
            quote_url=str(data.get("quote_url", "")),
            input_schema=_dict(data.get("input_schema")),
        )


@dataclasses.dataclass(frozen=True)
class Model:
    """A model of the catalog, with its endpoints and pricing."""

    id: str
    object: Optional[str]
    label: str
    name: Optional[str]
    description: Optional[str]
    description_version: Optional[str]
    modes: List[str]
    endpoints: List[ModelEndpoint]
    reference_media: JSON
    pricing: JSON
    raw: JSON = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Model":
        return cls(
            id=str(data["id"]),
            object=_str(data.get("object")),
            label=str(data.get("label", "")),
            name=_str(data.get("name")),
            description=_str(data.get("description")),
            description_version=_str(data.get("description_version")),
            modes=[str(mode) for mode in data.get("modes", [])],
            endpoints=[ModelEndpoint.from_json(item) for item in data.get("endpoints", [])],
            reference_media=_dict(data.get("reference_media")),
            pricing=_dict(data.get("pricing")),
            raw=dict(data),
        )


@dataclasses.dataclass(frozen=True)
class UploadMedia:
    """What the server found in an uploaded file."""

    format: str
    width: Optional[int]
    height: Optional[int]
    duration_s: Optional[float]
    fps: Optional[float]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "UploadMedia":
        return cls(
            format=str(data.get("format", "")),
            width=_int(data.get("width")),
            height=_int(data.get("height")),
            duration_s=_float(data.get("duration_s")),
            fps=_float(data.get("fps")),
        )


@dataclasses.dataclass(frozen=True)
class Upload:
    """An uploaded file: use ``url`` in any ``*_url`` field of a request.

    After a presigned (direct) upload the server has not probed the file yet,
    so ``media`` and ``created_at`` are ``None`` and ``content_type`` is the
    declared one; the first request that uses ``url`` probes it."""

    id: str
    object: str
    url: str
    content_type: Optional[str]
    size_bytes: Optional[int]
    media: Optional[UploadMedia]
    created_at: Optional[datetime]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Upload":
        media = data.get("media")
        return cls(
            id=str(data["id"]),
            object=str(data.get("object", "upload")),
            url=str(data["url"]),
            content_type=_str(data.get("content_type")),
            size_bytes=_int(data.get("size_bytes")),
            media=UploadMedia.from_json(media) if isinstance(media, Mapping) else None,
            created_at=_time(data.get("created_at")),
        )


@dataclasses.dataclass(frozen=True)
class DirectUpload:
    """A pending presigned upload: PUT the bytes to ``upload_url`` with
    ``headers`` before ``expires_at``, then use ``url`` in requests."""

    id: str
    object: str
    upload_url: str
    method: str
    headers: Dict[str, str]
    url: str
    expires_at: datetime

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "DirectUpload":
        return cls(
            id=str(data["id"]),
            object=str(data.get("object", "upload")),
            upload_url=str(data["upload_url"]),
            method=str(data.get("method", "PUT")),
            headers={str(k): str(v) for k, v in _dict(data.get("headers")).items()},
            url=str(data["url"]),
            expires_at=_required_time(data.get("expires_at")),
        )


@dataclasses.dataclass(frozen=True)
class WebhookAttempt:
    """One attempt of a webhook delivery."""

    attempt: Optional[int]
    started_at: Optional[datetime]
    duration_ms: Optional[int]
    status_code: Optional[int]
    error: Optional[str]
    response_body: Optional[str]
    next_attempt_at: Optional[datetime]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "WebhookAttempt":
        return cls(
            attempt=_int(data.get("attempt")),
            started_at=_time(data.get("started_at")),
            duration_ms=_int(data.get("duration_ms")),
            status_code=_int(data.get("status_code")),
            error=_str(data.get("error")),
            response_body=_str(data.get("response_body")),
            next_attempt_at=_time(data.get("next_attempt_at")),
        )


@dataclasses.dataclass(frozen=True)
class WebhookDelivery:
    """A webhook delivery of a generation, with every attempt. ``id`` is the
    ``webhook-id`` header of each attempt."""

    id: str
    object: str
    generation_id: str
    event_type: str
    url: str
    status: str
    in_flight: Optional[bool]
    attempt_count: int
    next_attempt_at: Optional[datetime]
    created_at: datetime
    completed_at: Optional[datetime]
    attempts: List[WebhookAttempt]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "WebhookDelivery":
        return cls(
            id=str(data["id"]),
            object=str(data.get("object", "webhook_delivery")),
            generation_id=str(data.get("generation_id", "")),
            event_type=str(data.get("event_type", "")),
            url=str(data.get("url", "")),
            status=str(data.get("status", "")),
            in_flight=_bool(data.get("in_flight")),
            attempt_count=_int(data.get("attempt_count")) or 0,
            next_attempt_at=_time(data.get("next_attempt_at")),
            created_at=_required_time(data.get("created_at")),
            completed_at=_time(data.get("completed_at")),
            attempts=[WebhookAttempt.from_json(item) for item in data.get("attempts", [])],
        )


@dataclasses.dataclass(frozen=True)
class WebhookSecret:
    """A new signing secret, shown once; the previous one signs until
    ``previous_secret_expires_at``."""

    object: str
    webhook_secret: str
    previous_secret_expires_at: Optional[datetime]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "WebhookSecret":
        return cls(
            object=str(data.get("object", "webhook_secret")),
            webhook_secret=str(data["webhook_secret"]),
            previous_secret_expires_at=_time(data.get("previous_secret_expires_at")),
        )


@dataclasses.dataclass(frozen=True)
class CheckoutSession:
    """A Stripe Checkout started to add credit: send the customer to
    ``url``; the credit arrives once Stripe reports the payment."""

    id: str
    object: str
    url: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CheckoutSession":
        return cls(
            id=str(data["id"]),
            object=str(data.get("object", "checkout_session")),
            url=str(data["url"]),
        )


@dataclasses.dataclass(frozen=True)
class WebhookEvent:
    """A verified webhook body about a generation (``generation.succeeded``,
    ``generation.failed``, ``generation.canceled``): the event type, when it
    happened, and the generation as ``generations.get`` returns it."""

    type: str
    timestamp: datetime
    data: Generation

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "WebhookEvent":
        return cls(
            type=str(data["type"]),
            timestamp=_required_time(data.get("timestamp")),
            data=Generation.from_json(data["data"]),
        )


@dataclasses.dataclass(frozen=True)
class BalanceAlert:
    """The ``data`` of ``account.balance_low``: the account, its balance as
    ``account.get`` shows it (negative while it owes a debt) and the
    threshold it fell below, in US dollars, both as they were when the
    balance crossed the threshold."""

    object: str
    account_id: str
    balance_usd: float
    threshold_usd: float
    raw: JSON = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "BalanceAlert":
        return cls(
            object=str(data.get("object", "balance_alert")),
            account_id=str(data["account_id"]),
            balance_usd=_required_float(data.get("balance_usd")),
            threshold_usd=_required_float(data.get("threshold_usd")),
            raw=dict(data),
        )


@dataclasses.dataclass(frozen=True)
class AccountBalanceLowEvent:
    """A verified ``account.balance_low`` body: sent once each time the
    account's balance falls below its low-balance threshold, with when it
    crossed (``timestamp``) and the balance and threshold then."""

    type: Literal["account.balance_low"]
    timestamp: datetime
    data: BalanceAlert

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "AccountBalanceLowEvent":
        if data["type"] != ACCOUNT_BALANCE_LOW:
            raise ValueError(f"not an {ACCOUNT_BALANCE_LOW} event: {data['type']!r}")
        return cls(
            type="account.balance_low",
            timestamp=_required_time(data.get("timestamp")),
            data=BalanceAlert.from_json(_mapping(data["data"])),
        )


@dataclasses.dataclass(frozen=True)
class UnknownWebhookEvent:
    """A verified webhook body of a type this version of the library does
    not know (one the server added later): its ``type``, when it happened,
    and its ``data`` as the JSON object it is. Answer it with a 2xx (or
    upgrade the library) rather than an error, or it is retried for a day."""

    type: str
    timestamp: datetime
    data: JSON

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "UnknownWebhookEvent":
        return cls(
            type=str(data["type"]),
            timestamp=_required_time(data.get("timestamp")),
            data=dict(_mapping(data.get("data", {}))),
        )


#: What ``webhooks.unwrap`` returns: tell the kinds apart with
#: ``isinstance`` (or by ``type``).
AnyWebhookEvent = Union[WebhookEvent, AccountBalanceLowEvent, UnknownWebhookEvent]


def webhook_event_from_json(data: Mapping[str, Any]) -> AnyWebhookEvent:
    """The event of a webhook body, by its ``type``: a generation's
    :class:`WebhookEvent`, an :class:`AccountBalanceLowEvent`, or an
    :class:`UnknownWebhookEvent` for a type this library does not know.
    Raises ``KeyError``, ``TypeError`` or ``ValueError`` when the body is not
    an event, or a known type's body is not that event's."""
    kind = _mapping(data)["type"]
    if not isinstance(kind, str):
        raise TypeError(f"the event type is not a string: {kind!r}")
    if kind in GENERATION_EVENT_TYPES:
        return WebhookEvent.from_json(data)
    if kind == ACCOUNT_BALANCE_LOW:
        return AccountBalanceLowEvent.from_json(data)
    return UnknownWebhookEvent.from_json(data)
