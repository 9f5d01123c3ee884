"""vidgate: the Python library for the vidgate video generation API.

    import vidgate

    client = vidgate.Client()  # VIDGATE_API_KEY, VIDGATE_BASE_URL
    generation = client.run("vendor_1/model_1/text-to-video", {"prompt": "a red kite"})
    print(generation.output.video_url)
"""

from . import webhooks
from ._async_client import AsyncClient
from ._client import Client
from ._version import __version__
from .errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    ConflictError,
    DirectUploadUnavailableError,
    ForbiddenError,
    GenerationFailedError,
    GoneError,
    InsufficientBalanceError,
    InternalServerError,
    InvalidRequestError,
    MethodNotAllowedError,
    ModelUnavailableError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitedError,
    UpstreamError,
    VidgateError,
    WaitTimeoutError,
    WebhookVerificationError,
)
from .types import (
    Account,
    AccountLimits,
    Cost,
    DirectUpload,
    Generation,
    GenerationError,
    GenerationOutput,
    GenerationPage,
    GenerationStatus,
    GenerationUrls,
    Model,
    ModelEndpoint,
    Quote,
    Upload,
    UploadMedia,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEvent,
    WebhookSecret,
)

__all__ = [
    "APIConnectionError",
    "APIStatusError",
    "APITimeoutError",
    "Account",
    "AccountLimits",
    "AsyncClient",
    "AuthenticationError",
    "Client",
    "ConflictError",
    "Cost",
    "DirectUpload",
    "DirectUploadUnavailableError",
    "ForbiddenError",
    "Generation",
    "GenerationError",
    "GenerationFailedError",
    "GoneError",
    "GenerationOutput",
    "GenerationPage",
    "GenerationStatus",
    "GenerationUrls",
    "InsufficientBalanceError",
    "InternalServerError",
    "InvalidRequestError",
    "MethodNotAllowedError",
    "Model",
    "ModelEndpoint",
    "ModelUnavailableError",
    "NotFoundError",
    "PayloadTooLargeError",
    "Quote",
    "RateLimitedError",
    "Upload",
    "UploadMedia",
    "UpstreamError",
    "VidgateError",
    "WaitTimeoutError",
    "WebhookAttempt",
    "WebhookDelivery",
    "WebhookEvent",
    "WebhookSecret",
    "WebhookVerificationError",
    "__version__",
    "webhooks",
]
