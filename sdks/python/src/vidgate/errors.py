"""Typed errors: one class per error code of the API (SPEC.md section 7).

Every class carries the answer's ``status``, ``code``, ``message``, ``param``
(the request field at fault, when one was) and ``request_id`` (the
``x-request-id`` header, to quote when asking for support). Catch
:class:`APIStatusError` for every refused request, or a subclass for one code.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type


class VidgateError(Exception):
    """The base of every error this library raises."""


class APIConnectionError(VidgateError):
    """The request got no HTTP answer (connection refused, reset, timed out)
    after every retry. A submit that ends here may or may not have been
    accepted: list recent generations, or retry with the same
    ``idempotency_key``, before submitting again."""


class APITimeoutError(APIConnectionError):
    """The request timed out after every retry."""


class WaitTimeoutError(VidgateError):
    """``generations.wait`` gave up before the generation was finished.

    The generation goes on; ``generation`` is its latest state."""

    def __init__(self, message: str, generation: Any) -> None:
        super().__init__(message)
        self.generation = generation


class GenerationFailedError(VidgateError):
    """``run`` waited for a generation that ended ``failed`` or ``canceled``.

    It is not an HTTP error: the submit was accepted and its hold refunded.
    ``generation`` is the finished record, with its ``error`` object."""

    def __init__(self, message: str, generation: Any) -> None:
        super().__init__(message)
        self.generation = generation


class WebhookVerificationError(VidgateError):
    """A webhook's signature, timestamp or headers did not check out."""


class APIStatusError(VidgateError):
    """The API refused the request with an error answer. Nothing was charged."""

    #: The error code this class stands for (``None`` on the base class).
    error_code: Optional[str] = None

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str,
        param: Optional[str] = None,
        request_id: Optional[str] = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.request_id = request_id
        self.body = body

    def __str__(self) -> str:
        text = f"{self.status} {self.code}: {self.message}"
        if self.param is not None:
            text += f" (param: {self.param})"
        if self.request_id is not None:
            text += f" [request {self.request_id}]"
        return text


class InvalidRequestError(APIStatusError):
    """400: the request is invalid; ``param`` names the field. Fix it first."""

    error_code = "invalid_request"


class AuthenticationError(APIStatusError):
    """401: the API key is missing, malformed, unknown or revoked."""

    error_code = "unauthorized"


class InsufficientBalanceError(APIStatusError):
    """402: the balance does not cover the price. Nothing is held."""

    error_code = "insufficient_balance"


class ForbiddenError(APIStatusError):
    """403: a dashboard session's change without its CSRF token."""

    error_code = "forbidden"


class NotFoundError(APIStatusError):
    """404: no such endpoint, model, file or generation in this account."""

    error_code = "not_found"


class MethodNotAllowedError(APIStatusError):
    """405: the route exists, but not with this method."""

    error_code = "method_not_allowed"


class ConflictError(APIStatusError):
    """409: canceling a running or finished generation, or an idempotency key
    reused with a different body (``param == "Idempotency-Key"``)."""

    error_code = "conflict"


class GoneError(APIStatusError):
    """410: a generation's clip or an upload deleted after the retention time."""

    error_code = "gone"


class PayloadTooLargeError(APIStatusError):
    """413: the body or the uploaded file is over the limit."""

    error_code = "payload_too_large"


class RateLimitedError(APIStatusError):
    """429: over the key's request rate or the account's concurrent
    generations. Raised once retries are used up. Nothing was charged."""

    error_code = "rate_limited"


class InternalServerError(APIStatusError):
    """500: a failure on the service side. Raised once retries are used up."""

    error_code = "internal_error"


class DirectUploadUnavailableError(APIStatusError):
    """501: this deployment has no presigned uploads; use multipart."""

    error_code = "direct_upload_unavailable"


class UpstreamError(APIStatusError):
    """502: the model refused the job. Raised once retries are used up."""

    error_code = "upstream_error"


class ModelUnavailableError(APIStatusError):
    """503: the model is not accepting generations now. Raised once retries
    are used up."""

    error_code = "model_unavailable"


#: The class of each error code. A code not listed here (one added to the
#: API after this library) becomes a plain :class:`APIStatusError`.
ERROR_CLASSES: Dict[str, Type[APIStatusError]] = {
    cls.error_code: cls
    for cls in (
        InvalidRequestError,
        AuthenticationError,
        InsufficientBalanceError,
        ForbiddenError,
        NotFoundError,
        MethodNotAllowedError,
        ConflictError,
        GoneError,
        PayloadTooLargeError,
        RateLimitedError,
        InternalServerError,
        DirectUploadUnavailableError,
        UpstreamError,
        ModelUnavailableError,
    )
    if cls.error_code is not None
}


def error_from_response(
    status: int, body: Any, headers: Mapping[str, str]
) -> APIStatusError:
    """The typed error for an error answer, whatever its body looks like
    (a proxy in between may answer with HTML)."""
    error: Mapping[str, Any] = {}
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        error = body["error"]
    code = error.get("code")
    if not isinstance(code, str):
        code = f"http_{status}"
    message = error.get("message")
    if not isinstance(message, str):
        message = f"The API answered HTTP {status}."
    param = error.get("param")
    cls = ERROR_CLASSES.get(code, APIStatusError)
    return cls(
        message,
        status=status,
        code=code,
        param=param if isinstance(param, str) else None,
        request_id=headers.get("x-request-id"),
        body=body,
    )
