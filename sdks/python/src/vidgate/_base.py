"""What the synchronous and asynchronous clients share: settings, the retry
rules of SPEC.md section 7, and each API call as data (method, path, body),
so the two clients differ only in how they send and sleep."""

from __future__ import annotations

import dataclasses
import email.utils
import logging
import mimetypes
import os
import random
import uuid
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union
from urllib.parse import quote as quote_segment

import httpx

from ._version import __version__
from .errors import APIStatusError, error_from_response

logger = logging.getLogger("vidgate")

DEFAULT_BASE_URL = "http://127.0.0.1:8080/api/v1"
DEFAULT_TIMEOUT_SECONDS = 60.0
DEFAULT_MAX_RETRIES = 4
#: The first wait before a retry; each further retry waits twice as long.
DEFAULT_RETRY_INITIAL_DELAY = 1.0
#: The longest backoff before jitter, as SPEC.md section 7 advises.
DEFAULT_RETRY_MAX_DELAY = 30.0
#: A ``Retry-After`` longer than this is not waited out: the error is raised.
DEFAULT_MAX_RETRY_AFTER = 120.0
#: SPEC.md section 6: poll a video no tighter than every 5 seconds. Used when
#: an unfinished generation's answer carries no ``Retry-After``.
DEFAULT_POLL_INTERVAL = 5.0

#: The longest ``Prefer: wait`` a server grants: a read that waits is
#: answered once the generation is final or after this many seconds.
MAX_WAIT_SECONDS = 60
#: How long a stream that ended without a final state waits before it
#: reconnects, unless the server's ``retry:`` field says otherwise.
DEFAULT_STREAM_RECONNECT_DELAY = 1.0

#: The statuses SPEC.md section 7 says to retry with backoff; never others.
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503})

#: The media types vidgate accepts, by the extensions `mimetypes` may miss.
UPLOAD_MEDIA_TYPES = {
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".png": "image/png",
    ".webp": "image/webp",
    ".mp4": "video/mp4",
    ".mov": "video/quicktime",
    ".mp3": "audio/mpeg",
    ".wav": "audio/wav",
}

FileInput = Union[str, "os.PathLike[str]", bytes, Any]


@dataclasses.dataclass(frozen=True)
class Settings:
    """A client's options after reading the environment."""

    api_key: Optional[str]
    base_url: str
    timeout: float
    max_retries: int
    retry_initial_delay: float
    retry_max_delay: float
    max_retry_after: float
    webhook_secret: Optional[str]


def resolve_settings(
    api_key: Optional[str],
    base_url: Optional[str],
    timeout: float,
    max_retries: int,
    retry_initial_delay: float,
    retry_max_delay: float,
    max_retry_after: float,
    webhook_secret: Optional[str],
) -> Settings:
    if max_retries < 0:
        raise ValueError("max_retries must be 0 or more")
    return Settings(
        api_key=api_key if api_key is not None else os.environ.get("VIDGATE_API_KEY"),
        base_url=(base_url or os.environ.get("VIDGATE_BASE_URL") or DEFAULT_BASE_URL).rstrip("/"),
        timeout=timeout,
        max_retries=max_retries,
        retry_initial_delay=retry_initial_delay,
        retry_max_delay=retry_max_delay,
        max_retry_after=max_retry_after,
        webhook_secret=(
            webhook_secret
            if webhook_secret is not None
            else os.environ.get("VIDGATE_WEBHOOK_SECRET")
        ),
    )


def default_headers(settings: Settings) -> Dict[str, str]:
    headers = {"User-Agent": f"vidgate-python/{__version__}", "Accept": "application/json"}
    if settings.api_key:
        headers["Authorization"] = f"Bearer {settings.api_key}"
    return headers


def parse_retry_after(value: Optional[str], now: Optional[datetime] = None) -> Optional[float]:
    """Seconds from a ``Retry-After`` header: a number or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    current = now or datetime.now(timezone.utc)
    return max(0.0, (when - current).total_seconds())


def backoff_delay(
    retry: int,
    retry_after: Optional[float],
    settings: Settings,
    random_fraction: Callable[[], float] = random.random,
) -> float:
    """The wait before retry number ``retry`` (0-based): about 1, 2, 4, 8 s,
    capped at 30 s, plus up to 25 % jitter so that many clients refused at
    once do not come back at once; never shorter than ``Retry-After``."""
    base = min(settings.retry_max_delay, settings.retry_initial_delay * (2.0**retry))
    delay = base + base * 0.25 * random_fraction()
    if retry_after is not None:
        delay = max(delay, retry_after)
    return delay


@dataclasses.dataclass
class Call:
    """One API request, before it is sent."""

    method: str
    path: str
    json: Any = None
    params: Optional[Dict[str, str]] = None
    headers: Dict[str, str] = dataclasses.field(default_factory=dict)
    files: Optional[Dict[str, Tuple[str, bytes, Optional[str]]]] = None
    content: Optional[bytes] = None
    #: Whether the request may be sent again after it got no answer (it may
    #: have been carried out): reads, submits (their Idempotency-Key makes
    #: the server replay the first) and uploads may; a cancel, a webhook
    #: re-send or a secret rotation may not, as a second one would differ.
    resend_unanswered: Optional[bool] = None
    #: Seconds the server may take beyond the client's timeout (a wait).
    extra_timeout: float = 0.0

    def may_resend_unanswered(self) -> bool:
        if self.resend_unanswered is not None:
            return self.resend_unanswered
        return self.method in ("GET", "HEAD", "PUT") or "Idempotency-Key" in self.headers


class RetryDecision:
    """What to do with an answer or a transport failure: give up with
    ``error`` (None: success), or wait ``delay`` seconds and send again."""

    def __init__(self, error: Optional[Exception], delay: Optional[float]) -> None:
        self.error = error
        self.delay = delay


def decide(
    call: Call,
    response: Optional[httpx.Response],
    failure: Optional[Exception],
    retry: int,
    settings: Settings,
) -> RetryDecision:
    """The retry rule, for both clients. Retries 429/500/502/503 and
    connection failures; other 4xx never. A submit always carries an
    Idempotency-Key, so sending it again cannot create a second generation."""
    if response is not None and response.status_code < 400:
        return RetryDecision(None, None)
    error: Exception
    retry_after: Optional[float] = None
    if response is not None:
        error = error_from_response(response.status_code, _json_or_none(response), response.headers)
        if response.status_code not in RETRYABLE_STATUSES:
            return RetryDecision(error, None)
        retry_after = parse_retry_after(response.headers.get("retry-after"))
    else:
        assert failure is not None
        error = failure
        if not call.may_resend_unanswered():
            return RetryDecision(error, None)
    if retry >= settings.max_retries:
        return RetryDecision(error, None)
    if retry_after is not None and retry_after > settings.max_retry_after:
        return RetryDecision(error, None)
    delay = backoff_delay(retry, retry_after, settings)
    reason = (
        error.code if isinstance(error, APIStatusError) else type(failure).__name__
    )
    logger.info(
        "vidgate: %s %s got %s; retry %d of %d in %.2f s",
        call.method,
        call.path,
        reason,
        retry + 1,
        settings.max_retries,
        delay,
        extra={"vidgate_retry_delay": delay, "vidgate_retry_after": retry_after},
    )
    return RetryDecision(error, delay)


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def is_absolute(path: str) -> bool:
    return path.startswith(("http://", "https://"))


def url_for(settings: Settings, path: str) -> str:
    return path if is_absolute(path) else settings.base_url + path


def headers_for(settings: Settings, call: "Call") -> Dict[str, str]:
    """The API's headers, or for an absolute URL (a presigned upload, whose
    URL is the credential) only the call's own: the key never leaves for
    another host."""
    if is_absolute(call.path):
        return dict(call.headers)
    return {**default_headers(settings), **call.headers}


def endpoint_path(endpoint: str) -> str:
    """``vendor/model/mode`` as path segments, each percent-encoded."""
    segments = endpoint.strip("/").split("/")
    if len(segments) != 3 or not all(segments):
        raise ValueError(f"an endpoint id is vendor/model/mode, not {endpoint!r}")
    return "/".join(quote_segment(segment, safe="") for segment in segments)


def model_path(model_id: str) -> str:
    segments = model_id.strip("/").split("/")
    if len(segments) != 2 or not all(segments):
        raise ValueError(f"a model id is vendor/model, not {model_id!r}")
    return "/".join(quote_segment(segment, safe="") for segment in segments)


def id_segment(identifier: str) -> str:
    if not identifier:
        raise ValueError("an id must not be empty")
    return quote_segment(identifier, safe="")


def create_call(
    endpoint: str,
    input: Mapping[str, Any],
    webhook_url: Optional[str],
    idempotency_key: Optional[str],
) -> Call:
    body = dict(input)
    if webhook_url is not None:
        body["webhook_url"] = webhook_url
    # A key generated here stays the same on every retry of this call, so a
    # retry after a timeout replays the first generation instead of billing
    # a second one.
    key = idempotency_key or f"vidgate-python-{uuid.uuid4()}"
    return Call("POST", f"/run/{endpoint_path(endpoint)}", json=body, headers={"Idempotency-Key": key})


def checkout_call(amount_usd: str, idempotency_key: Optional[str]) -> Call:
    """A Checkout of ``amount_usd``, with an ``Idempotency-Key`` so that a
    retry after a lost answer reaches the same session."""
    key = idempotency_key or f"vidgate-python-{uuid.uuid4()}"
    return Call("POST", "/account/checkout", json={"amount_usd": amount_usd}, headers={"Idempotency-Key": key})


def wait_call(id: str, seconds: int) -> Call:
    """A read of a generation that the server holds until it is final or
    ``seconds`` pass (``Prefer: wait``); a server without waits answers it
    at once, as a plain read."""
    return Call(
        "GET",
        f"/generations/{id_segment(id)}",
        headers={"Prefer": f"wait={seconds}"},
        extra_timeout=float(seconds),
    )


def wait_applied(response: httpx.Response) -> bool:
    """Whether the server honoured the request's ``Prefer: wait``."""
    applied: str = response.headers.get("preference-applied", "")
    return applied.strip().startswith("wait=")


def wait_seconds(remaining: Optional[float]) -> int:
    """The wait to ask for with ``remaining`` seconds left (None: no
    limit); 0 when less than a second is left, too little to wait on."""
    if remaining is None:
        return MAX_WAIT_SECONDS
    return int(max(0.0, min(float(MAX_WAIT_SECONDS), remaining)))


def stream_call(id: str, last_event_id: Optional[str]) -> Call:
    headers = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    # The server sends a comment every 15 s, so a read that waits longer
    # than the client's timeout has lost the stream and reconnects.
    return Call("GET", f"/generations/{id_segment(id)}/events", headers=headers)


class EventStreamParser:
    """Reads a ``text/event-stream`` line by line: ``feed`` returns each
    event's ``(id, data)`` when its blank line arrives, and remembers the
    ``retry:`` the server asked for."""

    def __init__(self) -> None:
        self.event_id: Optional[str] = None
        self.data: List[str] = []
        self.reconnect_delay = DEFAULT_STREAM_RECONNECT_DELAY

    def feed(self, line: str) -> Optional[Tuple[Optional[str], str]]:
        line = line.rstrip("\r\n")
        if not line:
            if not self.data:
                return None
            event = (self.event_id, "\n".join(self.data))
            self.data = []
            return event
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "id":
            self.event_id = value
        elif field == "data":
            self.data.append(value)
        elif field == "retry" and value.isdigit():
            self.reconnect_delay = int(value) / 1000.0
        return None


def list_call(
    status: Optional[str], model: Optional[str], limit: Optional[int], cursor: Optional[str]
) -> Call:
    params: Dict[str, str] = {}
    if status is not None:
        params["status"] = status
    if model is not None:
        params["model"] = model
    if limit is not None:
        params["limit"] = str(limit)
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", "/generations", params=params)


def read_file(file: FileInput, filename: Optional[str]) -> Tuple[str, bytes]:
    """The name and bytes of a path, bytes or binary file object."""
    if isinstance(file, (str, os.PathLike)):
        path = os.fspath(file)
        with open(path, "rb") as handle:
            return filename or os.path.basename(path), handle.read()
    if isinstance(file, (bytes, bytearray)):
        return filename or "upload", bytes(file)
    data = file.read()
    if not isinstance(data, bytes):
        raise TypeError("uploads.create needs a path, bytes or a file opened in binary mode")
    name = filename or os.path.basename(str(getattr(file, "name", "upload")))
    return name, data


def guess_media_type(filename: str) -> Optional[str]:
    """The declared type of a direct upload, from the file name; None when
    unknown (then the server finds it when it probes the file)."""
    extension = os.path.splitext(filename)[1].lower()
    guessed = UPLOAD_MEDIA_TYPES.get(extension) or mimetypes.guess_type(filename)[0]
    return guessed if guessed in UPLOAD_MEDIA_TYPES.values() else None


def upload_call(filename: str, data: bytes, content_type: Optional[str]) -> Call:
    # A second upload of the same file only leaves an unused copy.
    return Call(
        "POST", "/uploads", files={"file": (filename, data, content_type)}, resend_unanswered=True
    )


def initiate_call(content_type: Optional[str], size_bytes: Optional[int]) -> Call:
    body: Dict[str, Any] = {}
    if content_type is not None:
        body["content_type"] = content_type
    if size_bytes is not None:
        body["size_bytes"] = size_bytes
    return Call("POST", "/uploads/initiate", json=body, resend_unanswered=True)
