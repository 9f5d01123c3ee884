"""The asynchronous client, ``vidgate.AsyncClient``: the same surface as
``vidgate.Client``, with coroutines and async iterators."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, AsyncIterator, Dict, List, Mapping, Optional, Tuple, Union

import httpx

from . import _base, webhooks
from ._base import Call, FileInput
from .errors import (
    APIConnectionError,
    APITimeoutError,
    DirectUploadUnavailableError,
    GenerationFailedError,
    NotFoundError,
    WaitTimeoutError,
)
from .types import (
    Account,
    AnyWebhookEvent,
    CheckoutSession,
    DirectUpload,
    Generation,
    GenerationPage,
    GenerationStatus,
    Model,
    Quote,
    Upload,
    WebhookDelivery,
    WebhookSecret,
)


class AsyncClient:
    """A vidgate API client for asyncio.

    ``api_key`` and ``base_url`` default to ``VIDGATE_API_KEY`` and
    ``VIDGATE_BASE_URL`` (the API's base URL, ending in ``/api/v1``).
    Requests refused with 429, 500, 502 or 503, or that get no answer, are
    retried up to ``max_retries`` times with exponential backoff (about 1, 2,
    4, 8 s, capped at 30 s, with jitter), never sooner than ``Retry-After``;
    other errors are raised at once. Use it as an async context manager, or
    await :meth:`close`.
    """

    def __init__(
        self,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        *,
        timeout: float = _base.DEFAULT_TIMEOUT_SECONDS,
        max_retries: int = _base.DEFAULT_MAX_RETRIES,
        retry_initial_delay: float = _base.DEFAULT_RETRY_INITIAL_DELAY,
        retry_max_delay: float = _base.DEFAULT_RETRY_MAX_DELAY,
        max_retry_after: float = _base.DEFAULT_MAX_RETRY_AFTER,
        webhook_secret: Optional[str] = None,
        http_client: Optional[httpx.AsyncClient] = None,
    ) -> None:
        self._settings = _base.resolve_settings(
            api_key,
            base_url,
            timeout,
            max_retries,
            retry_initial_delay,
            retry_max_delay,
            max_retry_after,
            webhook_secret,
        )
        self._http = http_client or httpx.AsyncClient(timeout=timeout)
        self._owns_http = http_client is None
        self.generations = AsyncGenerations(self)
        self.models = AsyncModels(self)
        self.uploads = AsyncUploads(self)
        self.account = AsyncAccountResource(self)
        self.webhooks = AsyncWebhooks(self)

    @property
    def base_url(self) -> str:
        return self._settings.base_url

    async def close(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _send(self, call: Call) -> httpx.Response:
        """Sends ``call``, retrying as SPEC.md section 7 advises."""
        headers = _base.headers_for(self._settings, call)
        url = _base.url_for(self._settings, call.path)
        retry = 0
        while True:
            response: Optional[httpx.Response] = None
            failure: Optional[Exception] = None
            try:
                response = await self._http.request(
                    call.method,
                    url,
                    json=call.json,
                    params=call.params,
                    headers=headers,
                    files=call.files,
                    content=call.content,
                    timeout=self._settings.timeout + call.extra_timeout,
                )
            except httpx.TimeoutException as error:
                failure = APITimeoutError(f"{call.method} {call.path} timed out: {error}")
            except httpx.TransportError as error:
                failure = APIConnectionError(f"{call.method} {call.path} failed: {error}")
            decision = _base.decide(call, response, failure, retry, self._settings)
            if decision.delay is None:
                if decision.error is not None:
                    raise decision.error
                assert response is not None
                return response
            await asyncio.sleep(decision.delay)
            retry += 1

    async def _json(self, call: Call) -> Any:
        return (await self._send(call)).json()

    async def _open_stream(self, call: Call) -> httpx.Response:
        """Sends ``call`` and returns the response with its body unread
        (close it), retrying the opening as :meth:`_send` does."""
        headers = _base.headers_for(self._settings, call)
        url = _base.url_for(self._settings, call.path)
        retry = 0
        while True:
            response: Optional[httpx.Response] = None
            failure: Optional[Exception] = None
            try:
                request = self._http.build_request(
                    call.method, url, headers=headers, timeout=self._settings.timeout
                )
                response = await self._http.send(request, stream=True)
                if response.status_code >= 400:
                    await response.aread()
                    await response.aclose()
            except httpx.TimeoutException as error:
                failure = APITimeoutError(f"{call.method} {call.path} timed out: {error}")
            except httpx.TransportError as error:
                failure = APIConnectionError(f"{call.method} {call.path} failed: {error}")
            decision = _base.decide(call, response, failure, retry, self._settings)
            if decision.delay is None:
                if decision.error is not None:
                    raise decision.error
                assert response is not None
                return response
            await asyncio.sleep(decision.delay)
            retry += 1

    async def run(
        self,
        endpoint: str,
        input: Mapping[str, Any],
        *,
        webhook_url: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> Generation:
        """Submits a generation and waits until it is finished.

        Returns the succeeded generation (``output.video_url`` is the clip);
        raises :class:`GenerationFailedError` if it failed or was canceled
        (its hold was refunded) and :class:`WaitTimeoutError` after
        ``timeout`` seconds."""
        generation = await self.generations.create(
            endpoint, input, webhook_url=webhook_url, idempotency_key=idempotency_key
        )
        finished = await self.generations.wait(generation.id, timeout=timeout)
        if finished.status != "succeeded":
            reason = f": {finished.error.code}: {finished.error.message}" if finished.error else ""
            raise GenerationFailedError(
                f"Generation {finished.id} ended {finished.status}{reason}", finished
            )
        return finished

    async def quote(self, endpoint: str, input: Mapping[str, Any]) -> Quote:
        """The price of a request without running it (no key needed)."""
        call = Call(
            "POST",
            f"/quote/{_base.endpoint_path(endpoint)}",
            json=dict(input),
            resend_unanswered=True,
        )
        return Quote.from_json(await self._json(call))

    async def openapi(self) -> Dict[str, Any]:
        """The server's OpenAPI 3.1 document."""
        document: Dict[str, Any] = await self._json(Call("GET", "/openapi.json"))
        return document


class AsyncGenerations:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def create(
        self,
        endpoint: str,
        input: Mapping[str, Any],
        *,
        webhook_url: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> Generation:
        """Submits a job to ``endpoint`` (``vendor/model/mode``) and returns
        the queued generation. The price is held until it finishes.

        The request carries an ``Idempotency-Key`` (``idempotency_key``, or
        one generated here), so retries cannot bill twice: the server
        answers a repeated key and body with the original generation."""
        call = _base.create_call(endpoint, input, webhook_url, idempotency_key)
        return Generation.from_json(await self._client._json(call))

    async def get(self, id: str) -> Generation:
        return (await self._get_with_hint(id))[0]

    async def _get_with_hint(self, id: str) -> Tuple[Generation, Optional[float]]:
        response = await self._client._send(Call("GET", f"/generations/{_base.id_segment(id)}"))
        hint = _base.parse_retry_after(response.headers.get("retry-after"))
        return Generation.from_json(response.json()), hint

    async def cancel(self, id: str) -> Generation:
        """Cancels a queued generation (its hold is refunded). A running or
        finished one raises :class:`ConflictError`."""
        call = Call("POST", f"/generations/{_base.id_segment(id)}/cancel")
        return Generation.from_json(await self._client._json(call))

    async def list_page(
        self,
        *,
        status: Optional[GenerationStatus] = None,
        model: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> GenerationPage:
        """One page of recent generations, newest first."""
        call = _base.list_call(status, model, limit, cursor)
        return GenerationPage.from_json(await self._client._json(call))

    async def list(
        self,
        *,
        status: Optional[GenerationStatus] = None,
        model: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> AsyncIterator[Generation]:
        """Every generation matching the filters, newest first, fetching
        pages of ``limit`` (1–100, default 20) as the iteration goes."""
        cursor: Optional[str] = None
        while True:
            page = await self.list_page(status=status, model=model, limit=limit, cursor=cursor)
            for generation in page.data:
                yield generation
            if not page.has_more or page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def wait(
        self,
        id: str,
        *,
        timeout: Optional[float] = None,
    ) -> Generation:
        """Returns the generation once it is succeeded, failed or canceled.

        Each read asks the server to answer only when the generation is
        final or a minute has passed (``Prefer: wait``), so the answer comes
        the moment it finishes. A server without waits answers at once; then
        this polls as often as its ``Retry-After`` asks (5 s by default).
        Raises :class:`WaitTimeoutError` after ``timeout`` seconds."""
        started = time.monotonic()
        while True:
            elapsed = time.monotonic() - started
            seconds = _base.wait_seconds(None if timeout is None else timeout - elapsed)
            if seconds > 0:
                response = await self._client._send(_base.wait_call(id, seconds))
            else:
                response = await self._client._send(
                    Call("GET", f"/generations/{_base.id_segment(id)}")
                )
            generation = Generation.from_json(response.json())
            if generation.is_final:
                return generation
            waited = _base.wait_applied(response)
            hint = _base.parse_retry_after(response.headers.get("retry-after"))
            delay = 0.0 if waited else (hint if hint is not None else _base.DEFAULT_POLL_INTERVAL)
            if timeout is not None and time.monotonic() - started + delay >= timeout:
                raise WaitTimeoutError(
                    f"Generation {id} is still {generation.status} after {timeout} s", generation
                )
            await asyncio.sleep(delay)

    async def stream(self, id: str) -> AsyncIterator[Generation]:
        """The generation now, then again at each change of its status,
        ending after its final state, from the server's event stream
        (``GET /generations/{id}/events``). A stream the server ends early
        (its shutdown) is resumed where it stopped. Against a server without
        event streams, this polls instead and yields each change it sees."""
        last_event_id: Optional[str] = None
        while True:
            try:
                response = await self._client._open_stream(_base.stream_call(id, last_event_id))
            except NotFoundError:
                # An unknown generation raises here; a known one means the
                # server has no event streams.
                await self.get(id)
                async for generation in self._changes_by_polling(id):
                    yield generation
                return
            parser = _base.EventStreamParser()
            try:
                if response.status_code == 204:
                    return
                async for line in response.aiter_lines():
                    event = parser.feed(line)
                    if event is None:
                        continue
                    event_id, data = event
                    if event_id is not None:
                        last_event_id = event_id
                    generation = Generation.from_json(json.loads(data))
                    yield generation
                    if generation.is_final:
                        return
            except (httpx.TimeoutException, httpx.TransportError):
                pass
            finally:
                await response.aclose()
            await asyncio.sleep(parser.reconnect_delay)

    async def _changes_by_polling(self, id: str) -> AsyncIterator[Generation]:
        """What :meth:`stream` yields, from plain reads: each new status,
        read as often as the server's ``Retry-After`` asks."""
        last_status: Optional[str] = None
        while True:
            generation, hint = await self._get_with_hint(id)
            if generation.status != last_status:
                yield generation
                last_status = generation.status
            if generation.is_final:
                return
            await asyncio.sleep(hint if hint is not None else _base.DEFAULT_POLL_INTERVAL)


class AsyncModels:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def list(self) -> List[Model]:
        """The catalog: every model with its endpoints and pricing."""
        body = await self._client._json(Call("GET", "/models"))
        return [Model.from_json(item) for item in body.get("data", [])]

    async def get(self, id: str) -> Model:
        """One model by id, ``vendor/model``."""
        return Model.from_json(await self._client._json(Call("GET", f"/models/{_base.model_path(id)}")))


class AsyncUploads:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._direct_unavailable = False

    async def create(
        self,
        file: FileInput,
        *,
        filename: Optional[str] = None,
        content_type: Optional[str] = None,
        direct: Optional[bool] = None,
    ) -> Upload:
        """Uploads a file (a path, bytes or a binary file object) and returns
        an :class:`Upload` whose ``url`` works in any ``*_url`` request field.

        With ``direct=None`` the bytes go straight to the deployment's bucket
        through a presigned URL when it offers one, else (501
        ``direct_upload_unavailable``, remembered by this client) as
        multipart to vidgate. ``direct=False`` always uses multipart;
        ``direct=True`` never does."""
        name, data = _base.read_file(file, filename)
        if direct is not False and not self._direct_unavailable:
            declared = content_type or _base.guess_media_type(name)
            try:
                pending = await self.initiate(content_type=declared, size_bytes=len(data))
            except DirectUploadUnavailableError:
                if direct:
                    raise
                self._direct_unavailable = True
            else:
                await self._put(pending, data)
                return Upload(
                    id=pending.id,
                    object="upload",
                    url=pending.url,
                    content_type=declared,
                    size_bytes=len(data),
                    media=None,
                    created_at=None,
                )
        call = _base.upload_call(name, data, content_type)
        return Upload.from_json(await self._client._json(call))

    async def initiate(
        self, *, content_type: Optional[str] = None, size_bytes: Optional[int] = None
    ) -> DirectUpload:
        """Starts a presigned upload: PUT the bytes to ``upload_url`` yourself.
        Raises :class:`DirectUploadUnavailableError` on deployments without
        object storage."""
        call = _base.initiate_call(content_type, size_bytes)
        return DirectUpload.from_json(await self._client._json(call))

    async def _put(self, pending: DirectUpload, data: bytes) -> None:
        # The presigned URL is the credential: the request goes to the
        # bucket without the API key (see _base.headers_for).
        call = Call(pending.method, pending.upload_url, headers=dict(pending.headers), content=data)
        await self._client._send(call)


class AsyncAccountResource:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def get(self) -> Account:
        """The caller's account: balance, held money, spend and limits."""
        return Account.from_json(await self._client._json(Call("GET", "/account")))

    async def checkout(self, amount_usd: str, *, idempotency_key: Optional[str] = None) -> CheckoutSession:
        """Starts a Stripe Checkout that adds ``amount_usd`` (``"20.00"``) of
        credit, where the deployment sells credit through Stripe; send the
        customer to the session's ``url``. A retry with the same
        ``idempotency_key`` (one is generated) answers the same session."""
        call = _base.checkout_call(amount_usd, idempotency_key)
        return CheckoutSession.from_json(await self._client._json(call))


class AsyncWebhooks:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    def _secret(self, secret: Optional[str]) -> str:
        chosen = secret or self._client._settings.webhook_secret
        if not chosen:
            raise ValueError("no webhook secret: pass one or set VIDGATE_WEBHOOK_SECRET")
        return chosen

    def verify(
        self,
        payload: Union[bytes, str],
        headers: Mapping[str, str],
        secret: Optional[str] = None,
        *,
        tolerance: float = webhooks.DEFAULT_TOLERANCE_SECONDS,
    ) -> None:
        """Raises :class:`WebhookVerificationError` unless the message is
        signed with ``secret`` (default: the client's ``webhook_secret``,
        ``VIDGATE_WEBHOOK_SECRET``) and was sent within ``tolerance`` s."""
        webhooks.verify(payload, headers, self._secret(secret), tolerance=tolerance)

    def unwrap(
        self,
        payload: Union[bytes, str],
        headers: Mapping[str, str],
        secret: Optional[str] = None,
        *,
        tolerance: float = webhooks.DEFAULT_TOLERANCE_SECONDS,
    ) -> AnyWebhookEvent:
        """Verifies the message and returns its typed event: a
        :class:`WebhookEvent` (a generation's), an
        :class:`AccountBalanceLowEvent` or an :class:`UnknownWebhookEvent`."""
        return webhooks.unwrap(payload, headers, self._secret(secret), tolerance=tolerance)

    async def deliveries(self, generation_id: str) -> List[WebhookDelivery]:
        """The generation's webhook deliveries with every attempt."""
        call = Call("GET", f"/generations/{_base.id_segment(generation_id)}/webhook-deliveries")
        return [WebhookDelivery.from_json(item) for item in (await self._client._json(call))["data"]]

    async def retry_delivery(self, generation_id: str, delivery_id: str) -> WebhookDelivery:
        """Sends a delivery again now."""
        path = (
            f"/generations/{_base.id_segment(generation_id)}"
            f"/webhook-deliveries/{_base.id_segment(delivery_id)}/retry"
        )
        return WebhookDelivery.from_json(await self._client._json(Call("POST", path)))

    async def rotate_secret(self) -> WebhookSecret:
        """A new signing secret, returned once; the old one signs for 24 h more."""
        call = Call("POST", "/account/webhook-secret/rotate")
        return WebhookSecret.from_json(await self._client._json(call))

