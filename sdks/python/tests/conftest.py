"""Fixtures: one real server, proxy and webhook receiver for the session;
a fresh account and a client through the proxy for each test."""

from __future__ import annotations

import itertools
from typing import Callable, Iterator

import pytest

import vidgate
from harness import Account, Proxy, Server, WebhookReceiver

#: Cheap and quick: 2 s of 480p without audio costs $0.10 and renders in
#: about a second.
ENDPOINT = "vendor_1/model_1/text-to-video"
SMALL = {"duration": 2, "resolution": "480p", "generate_audio": False}

_names = itertools.count(1)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    running = Server()
    yield running
    running.stop()


@pytest.fixture(scope="session")
def proxy(server: Server) -> Iterator[Proxy]:
    running = Proxy(server.api_base)
    yield running
    running.stop()


@pytest.fixture(scope="session")
def receiver() -> Iterator[WebhookReceiver]:
    running = WebhookReceiver()
    yield running
    running.stop()


@pytest.fixture
def account(server: Server) -> Account:
    return server.account(f"sdk-py-{next(_names)}")


ClientFactory = Callable[..., vidgate.Client]


@pytest.fixture
def make_client(proxy: Proxy, account: Account) -> Iterator[ClientFactory]:
    """Clients through the proxy for this test's account, with retry waits
    a hundred times shorter than the defaults."""
    made = []

    def make(**options: object) -> vidgate.Client:
        settings: dict = {
            "api_key": account.api_key,
            "base_url": proxy.base_url,
            "retry_initial_delay": 0.01,
            "retry_max_delay": 0.3,
        }
        settings.update(options)
        client = vidgate.Client(**settings)
        made.append(client)
        return client

    proxy.clear()
    yield make
    for client in made:
        client.close()
    proxy.clear()


@pytest.fixture
def client(make_client: ClientFactory) -> vidgate.Client:
    return make_client()
