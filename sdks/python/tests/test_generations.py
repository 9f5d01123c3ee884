"""Every generation, catalog and account method against a real server."""

from __future__ import annotations

import pytest

import vidgate
from conftest import ENDPOINT, SMALL, ClientFactory
from harness import Proxy


def test_run_submits_waits_and_returns_the_clip(client: vidgate.Client, proxy: Proxy) -> None:
    generation = client.run(ENDPOINT, {"prompt": "a paper boat on a pond", **SMALL})
    assert generation.status == "succeeded"
    assert generation.output is not None and generation.output.video_url.startswith("http")
    assert generation.output.duration_s == 2 and generation.output.has_audio is False
    assert generation.cost.estimated is False and generation.cost.amount_usd == pytest.approx(0.10)
    assert generation.completed_at is not None and generation.created_at.tzinfo is not None
    # The submit carried a generated Idempotency-Key; polling followed the
    # (shortened) Retry-After of each unfinished answer.
    (submit,) = proxy.requests_to("POST", "/run/")
    assert submit.headers["Idempotency-Key"].startswith("vidgate-python-")
    assert len(proxy.requests_to("GET", f"/generations/{generation.id}")) >= 1


def test_create_get_and_wait(client: vidgate.Client) -> None:
    created = client.generations.create(ENDPOINT, {"prompt": "a lighthouse at dusk", **SMALL})
    assert created.status == "queued" and created.cost.estimated
    assert created.output is None and created.urls.get.endswith(created.id)
    fetched = client.generations.get(created.id)
    assert fetched.id == created.id and fetched.input["prompt"] == "a lighthouse at dusk"
    finished = client.generations.wait(created.id, timeout=120)
    assert finished.status == "succeeded" and finished.is_final


def test_wait_gives_up_after_its_timeout(client: vidgate.Client) -> None:
    slow = client.generations.create(ENDPOINT, {"prompt": "[sim:sleep=20000] slow", **SMALL})
    with pytest.raises(vidgate.WaitTimeoutError) as raised:
        client.generations.wait(slow.id, timeout=0.5)
    assert raised.value.generation.id == slow.id
    assert raised.value.generation.status in ("queued", "running")


def test_run_raises_when_the_generation_fails(client: vidgate.Client) -> None:
    with pytest.raises(vidgate.GenerationFailedError) as raised:
        client.run(ENDPOINT, {"prompt": "[sim:fail] doomed", **SMALL}, timeout=120)
    failed = raised.value.generation
    assert failed.status == "failed" and failed.error is not None and failed.error.code
    assert failed.cost.amount_usd == 0


def test_cancel_a_queued_generation_and_refuse_a_finished_one(
    make_client: ClientFactory,
) -> None:
    client = make_client()
    # Two slow jobs keep both workers busy, so the third stays queued.
    blockers = [
        client.generations.create(ENDPOINT, {"prompt": f"[sim:sleep=4000] blocker {n}", **SMALL})
        for n in range(2)
    ]
    queued = client.generations.create(ENDPOINT, {"prompt": "never runs", **SMALL})
    canceled = client.generations.cancel(queued.id)
    assert canceled.status == "canceled" and canceled.cost.amount_usd == 0
    finished = client.generations.wait(blockers[0].id, timeout=120)
    with pytest.raises(vidgate.ConflictError) as raised:
        client.generations.cancel(finished.id)
    assert raised.value.status == 409 and raised.value.request_id


def test_list_walks_every_page_with_filters(client: vidgate.Client, proxy: Proxy) -> None:
    created = [
        client.generations.create(ENDPOINT, {"prompt": f"page item {n}", **SMALL}) for n in range(5)
    ]
    proxy.clear()
    listed = list(client.generations.list(limit=2))
    assert [g.id for g in listed] == [g.id for g in reversed(created)]
    assert len(proxy.requests_to("GET", "/generations?")) == 3
    page = client.generations.list_page(limit=2)
    assert page.has_more and page.next_cursor and len(page.data) == 2
    for generation in created:
        client.generations.wait(generation.id, timeout=120)
    succeeded = list(client.generations.list(status="succeeded", model="vendor_1/model_1"))
    assert {g.id for g in succeeded} == {g.id for g in created}
    assert list(client.generations.list(status="failed")) == []


def test_quote_matches_the_held_price(client: vidgate.Client) -> None:
    quote = client.quote(ENDPOINT, {"duration": 3, "resolution": "720p"})
    assert quote.cost.amount_usd == pytest.approx(0.30)
    assert quote.endpoint == ENDPOINT and quote.input["duration"] == 3 and quote.breakdown
    generation = client.generations.create(
        ENDPOINT, {"prompt": "priced", "duration": 3, "resolution": "720p", "generate_audio": False}
    )
    assert generation.cost.amount_usd == quote.cost.amount_usd
    client.generations.wait(generation.id, timeout=180)


def test_public_methods_need_no_key(proxy: Proxy) -> None:
    with vidgate.Client(api_key="", base_url=proxy.base_url) as anonymous:
        models = anonymous.models.list()
        assert {model.id for model in models} >= {"vendor_1/model_1", "vendor_6/model_6"}
        model = anonymous.models.get("vendor_1/model_1")
        assert model.modes == ["text-to-video", "image-to-video", "reference-to-video"]
        endpoint = model.endpoints[0]
        assert endpoint.id == "vendor_1/model_1/text-to-video"
        assert endpoint.input_schema["properties"]["prompt"]["type"] == "string"
        assert anonymous.quote(ENDPOINT, {}).cost.amount_usd > 0
        assert anonymous.openapi()["openapi"].startswith("3.1")


def test_account_shows_balance_and_holds(client: vidgate.Client) -> None:
    before = client.account.get()
    assert before.balance_usd == 100 and before.held_usd == 0
    assert before.limits.max_concurrent_generations == 100
    generation = client.generations.create(ENDPOINT, {"prompt": "[sim:sleep=3000] held", **SMALL})
    held = client.account.get()
    assert held.held_usd == pytest.approx(0.10)
    client.generations.wait(generation.id, timeout=120)
    after = client.account.get()
    assert after.held_usd == 0 and after.balance_usd == pytest.approx(99.90)
