"""vidgate.AsyncClient: the same surface, awaited."""

from __future__ import annotations

import asyncio

import pytest

import vidgate
from conftest import ENDPOINT, SMALL
from harness import Account, Fault, Proxy, WebhookReceiver, png_bytes


def async_client(account: Account, proxy: Proxy, **options: object) -> vidgate.AsyncClient:
    return vidgate.AsyncClient(
        api_key=account.api_key,
        base_url=proxy.base_url,
        retry_initial_delay=0.01,
        retry_max_delay=0.3,
        **options,  # type: ignore[arg-type]
    )


def test_every_method_awaited(account: Account, proxy: Proxy, receiver: WebhookReceiver) -> None:
    async def scenario() -> None:
        async with async_client(account, proxy) as client:
            models = await client.models.list()
            assert (await client.models.get(models[0].id)).id == models[0].id
            quote = await client.quote(ENDPOINT, SMALL)
            assert quote.cost.amount_usd == pytest.approx(0.10)

            done = await client.run(
                ENDPOINT, {"prompt": "async kite", **SMALL}, webhook_url=receiver.url
            )
            assert done.status == "succeeded" and done.cost.amount_usd == quote.cost.amount_usd
            delivered = await asyncio.get_running_loop().run_in_executor(None, receiver.next)
            event = client.webhooks.unwrap(delivered.body, delivered.headers, account.webhook_secret)
            assert event.data.id == done.id
            (delivery,) = await client.webhooks.deliveries(done.id)
            assert delivery.status in ("delivered", "pending")

            created = [
                await client.generations.create(ENDPOINT, {"prompt": f"async {n}", **SMALL})
                for n in range(3)
            ]
            assert (await client.generations.get(created[0].id)).id == created[0].id
            listed = [g.id async for g in client.generations.list(limit=2)]
            assert listed == [g.id for g in reversed(created)] + [done.id]
            for generation in created:
                finished = await client.generations.wait(generation.id, timeout=120)
                assert finished.status == "succeeded"
            with pytest.raises(vidgate.ConflictError):
                await client.generations.cancel(created[0].id)

            upload = await client.uploads.create(png_bytes(), filename="a.png")
            assert upload.url.startswith("http") and upload.media is not None
            account_now = await client.account.get()
            assert account_now.held_usd == 0
            rotated = await client.webhooks.rotate_secret()
            assert rotated.webhook_secret.startswith("whsec_")
            document = await client.openapi()
            assert "paths" in document

    asyncio.run(scenario())


def test_async_retries_and_errors(account: Account, proxy: Proxy) -> None:
    async def scenario() -> None:
        async with async_client(account, proxy) as client:
            proxy.inject(Fault("GET", "/account", 429, count=2, headers={"Retry-After": "0"}))
            assert (await client.account.get()).balance_usd == 100
            assert [s.status for s in proxy.requests_to("GET", "/account")] == [429, 429, 200]
            with pytest.raises(vidgate.InvalidRequestError) as raised:
                await client.generations.create(ENDPOINT, {"prompt": "x", "duration": 99})
            assert raised.value.param == "duration"
            assert len(proxy.requests_to("POST", "/run/")) == 1
            with pytest.raises(vidgate.NotFoundError):
                await client.generations.get("gen_doesnotexist")

    proxy.clear()
    asyncio.run(scenario())
