"""Live status: ``wait`` and ``run`` hold each read on the server
(``Prefer: wait``), ``stream`` follows the event stream, and both fall back
to polling a server without them."""

from __future__ import annotations

import asyncio
from typing import List

import pytest

import vidgate
from conftest import ENDPOINT, SMALL
from harness import Account, Fault, Proxy

SLOW = {"prompt": "[sim:sleep=2500] a slow paper boat", **SMALL}


def reads_of(proxy: Proxy, id: str) -> List[str]:
    """The Prefer header of each read of the generation (empty: none)."""
    return [
        seen.headers.get("Prefer", "")
        for seen in proxy.requests_to("GET", f"/generations/{id}")
        if seen.path.endswith(id)
    ]


def test_wait_asks_the_server_to_hold_the_read(client: vidgate.Client, proxy: Proxy) -> None:
    created = client.generations.create(ENDPOINT, SLOW)
    finished = client.generations.wait(created.id, timeout=120)
    assert finished.status == "succeeded"
    # One read, held until the job ended: polling at the proxy's 1 s hint
    # would have taken at least two.
    assert reads_of(proxy, created.id) == ["wait=60"]


def test_wait_polls_a_server_without_waits(client: vidgate.Client, proxy: Proxy) -> None:
    created = client.generations.create(ENDPOINT, SLOW)
    proxy.strip_request_headers.add("prefer")
    try:
        finished = client.generations.wait(created.id, timeout=120)
    finally:
        proxy.strip_request_headers.discard("prefer")
    assert finished.status == "succeeded"
    assert len(reads_of(proxy, created.id)) >= 2


def test_wait_with_a_short_timeout_still_gives_up(client: vidgate.Client) -> None:
    created = client.generations.create(ENDPOINT, {"prompt": "[sim:sleep=20000] slow", **SMALL})
    with pytest.raises(vidgate.WaitTimeoutError):
        client.generations.wait(created.id, timeout=2)


def test_stream_yields_each_change_until_the_final_one(client: vidgate.Client) -> None:
    created = client.generations.create(ENDPOINT, SLOW)
    seen = list(client.generations.stream(created.id))
    statuses = [generation.status for generation in seen]
    assert statuses[-1] == "succeeded", statuses
    assert statuses == sorted(set(statuses), key=["queued", "running", "succeeded"].index)
    assert seen[-1].output is not None and seen[-1].output.video_url.startswith("http")
    assert all(generation.id == created.id for generation in seen)


def test_stream_polls_a_server_without_streams(client: vidgate.Client, proxy: Proxy) -> None:
    created = client.generations.create(ENDPOINT, SLOW)
    proxy.inject(Fault("GET", f"/generations/{created.id}/events", 404, 1))
    statuses = [generation.status for generation in client.generations.stream(created.id)]
    assert statuses[-1] == "succeeded", statuses
    assert len(statuses) == len(set(statuses))
    # The stream was asked for once, then the generation was read.
    assert len(proxy.requests_to("GET", f"/generations/{created.id}/events")) == 1


def test_stream_of_an_unknown_generation_raises(client: vidgate.Client) -> None:
    with pytest.raises(vidgate.NotFoundError):
        list(client.generations.stream("gen_doesnotexist"))


def test_async_wait_and_stream(account: Account, proxy: Proxy) -> None:
    async def scenario() -> None:
        async with vidgate.AsyncClient(api_key=account.api_key, base_url=proxy.base_url) as client:
            created = await client.generations.create(ENDPOINT, SLOW)
            statuses = [generation.status async for generation in client.generations.stream(created.id)]
            assert statuses[-1] == "succeeded", statuses
            finished = await client.generations.wait(created.id, timeout=60)
            assert finished.status == "succeeded"
            ran = await client.run(ENDPOINT, SLOW, timeout=120)
            assert ran.status == "succeeded"
            assert reads_of(proxy, ran.id) == ["wait=60"]

    asyncio.run(scenario())
