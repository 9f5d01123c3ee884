"""Each spec error code the server can be made to answer, as its class."""

from __future__ import annotations

import pytest

import vidgate
from conftest import ENDPOINT, SMALL, ClientFactory
from harness import Proxy, Server


def test_invalid_request_names_the_parameter(client: vidgate.Client) -> None:
    with pytest.raises(vidgate.InvalidRequestError) as raised:
        client.generations.create(ENDPOINT, {"prompt": "x", "duration": 99})
    assert raised.value.status == 400 and raised.value.param == "duration"
    with pytest.raises(vidgate.InvalidRequestError) as raised:
        client.quote(ENDPOINT, {"bogus": True})
    assert raised.value.param == "bogus"


def test_unauthorized(proxy: Proxy) -> None:
    with vidgate.Client(api_key="vg_live_not_a_key", base_url=proxy.base_url) as client:
        with pytest.raises(vidgate.AuthenticationError) as raised:
            client.account.get()
    assert raised.value.status == 401 and raised.value.code == "unauthorized"


def test_insufficient_balance_holds_nothing(server: Server, proxy: Proxy) -> None:
    poor = server.account("sdk-py-poor", credit_usd="0")
    with vidgate.Client(api_key=poor.api_key, base_url=proxy.base_url) as client:
        with pytest.raises(vidgate.InsufficientBalanceError) as raised:
            client.generations.create(ENDPOINT, {"prompt": "too dear", **SMALL})
        assert raised.value.status == 402
        assert client.account.get().held_usd == 0


def test_not_found(client: vidgate.Client) -> None:
    with pytest.raises(vidgate.NotFoundError):
        client.generations.get("gen_doesnotexist")
    with pytest.raises(vidgate.NotFoundError):
        client.models.get("vendor_9/model_9")
    with pytest.raises(vidgate.NotFoundError):
        client.generations.create("vendor_9/model_9/text-to-video", {"prompt": "x"})


def test_another_accounts_generation_is_not_found(
    client: vidgate.Client, server: Server, proxy: Proxy
) -> None:
    generation = client.generations.create(ENDPOINT, {"prompt": "mine", **SMALL})
    other = server.account("sdk-py-other")
    with vidgate.Client(api_key=other.api_key, base_url=proxy.base_url) as stranger:
        with pytest.raises(vidgate.NotFoundError):
            stranger.generations.get(generation.id)
    client.generations.wait(generation.id, timeout=120)


def test_payload_too_large(client: vidgate.Client) -> None:
    with pytest.raises(vidgate.PayloadTooLargeError) as raised:
        client.generations.create(ENDPOINT, {"prompt": "x" * 300_000})
    assert raised.value.status == 413


def test_rate_limited_by_request_rate(server: Server, proxy: Proxy) -> None:
    slow = server.account("sdk-py-rate", rps=1, burst=1)
    with vidgate.Client(api_key=slow.api_key, base_url=proxy.base_url, max_retries=0) as client:
        with pytest.raises(vidgate.RateLimitedError) as raised:
            for _ in range(10):
                client.account.get()
    assert raised.value.status == 429


def test_rate_limited_by_concurrency(server: Server, proxy: Proxy) -> None:
    busy = server.account("sdk-py-busy", concurrency=1)
    with vidgate.Client(api_key=busy.api_key, base_url=proxy.base_url, max_retries=0) as client:
        first = client.generations.create(ENDPOINT, {"prompt": "[sim:sleep=3000] one", **SMALL})
        with pytest.raises(vidgate.RateLimitedError) as raised:
            client.generations.create(ENDPOINT, {"prompt": "two", **SMALL})
        assert "1" in raised.value.message
        client.generations.wait(first.id, timeout=120)


def test_model_unavailable_while_paused(make_client: ClientFactory, server: Server) -> None:
    client = make_client(max_retries=1)
    server.admin("model", "pause", "vendor_3/model_3")
    try:
        with pytest.raises(vidgate.ModelUnavailableError) as raised:
            client.generations.create("vendor_3/model_3/text-to-video", {"prompt": "paused"})
        assert raised.value.status == 503
    finally:
        server.admin("model", "resume", "vendor_3/model_3")


def test_direct_upload_unavailable_on_local_disk(client: vidgate.Client) -> None:
    with pytest.raises(vidgate.DirectUploadUnavailableError) as raised:
        client.uploads.initiate(content_type="image/png", size_bytes=10)
    assert raised.value.status == 501
