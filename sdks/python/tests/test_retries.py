"""SPEC.md section 7 against injected 429/500/502/503 answers."""

from __future__ import annotations

import logging

import pytest

import vidgate
from conftest import ENDPOINT, SMALL, ClientFactory
from harness import Fault, Proxy


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_retryable_answers_are_retried_until_success(
    make_client: ClientFactory, proxy: Proxy, status: int
) -> None:
    client = make_client()
    proxy.inject(Fault("GET", "/account", status, count=2))
    account = client.account.get()
    assert account.balance_usd == 100
    statuses = [seen.status for seen in proxy.requests_to("GET", "/account")]
    assert statuses == [status, status, 200]


def test_retries_stop_after_max_retries_with_the_typed_error(
    make_client: ClientFactory, proxy: Proxy
) -> None:
    client = make_client(max_retries=2)
    proxy.inject(Fault("GET", "/account", 503, count=10))
    with pytest.raises(vidgate.ModelUnavailableError) as raised:
        client.account.get()
    assert raised.value.status == 503
    assert len(proxy.requests_to("GET", "/account")) == 3


@pytest.mark.parametrize(
    "status, error_class",
    [
        (429, vidgate.RateLimitedError),
        (500, vidgate.InternalServerError),
        (502, vidgate.UpstreamError),
        (503, vidgate.ModelUnavailableError),
    ],
)
def test_without_retries_each_code_raises_its_class(
    make_client: ClientFactory, proxy: Proxy, status: int, error_class: type
) -> None:
    client = make_client(max_retries=0)
    proxy.inject(Fault("GET", "/account", status, count=1))
    with pytest.raises(error_class):
        client.account.get()


def test_other_client_errors_are_never_retried(
    make_client: ClientFactory, proxy: Proxy
) -> None:
    client = make_client()
    with pytest.raises(vidgate.InvalidRequestError):
        client.generations.create(ENDPOINT, {"prompt": "x", "unknown_field": 1})
    with pytest.raises(vidgate.NotFoundError):
        client.generations.get("gen_doesnotexist")
    assert len(proxy.requests_to("POST", "/run/")) == 1
    assert len(proxy.requests_to("GET", "/generations/gen_doesnotexist")) == 1


def test_retry_after_sets_the_shortest_wait(
    make_client: ClientFactory, proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    client = make_client()
    proxy.inject(Fault("GET", "/account", 429, count=1, headers={"Retry-After": "1"}))
    with caplog.at_level(logging.INFO, logger="vidgate"):
        client.account.get()
    (retry,) = [record for record in caplog.records if hasattr(record, "vidgate_retry_delay")]
    assert retry.vidgate_retry_after == 1.0
    assert retry.vidgate_retry_delay >= 1.0


def test_a_retry_after_longer_than_allowed_raises_at_once(
    make_client: ClientFactory, proxy: Proxy
) -> None:
    client = make_client(max_retry_after=5)
    proxy.inject(Fault("GET", "/account", 429, count=1, headers={"Retry-After": "3600"}))
    with pytest.raises(vidgate.RateLimitedError):
        client.account.get()
    assert len(proxy.requests_to("GET", "/account")) == 1


# The server accepts the first submit, but the client hears 502, or no
# answer at all (0), and sends it again with the same Idempotency-Key.
@pytest.mark.parametrize("lost_answer", [502, 0])
def test_a_submit_whose_answer_was_lost_is_sent_again_and_billed_once(
    make_client: ClientFactory, proxy: Proxy, lost_answer: int
) -> None:
    client = make_client()
    proxy.inject(Fault("POST", "/run/", lost_answer, count=1, forward_first=True))
    generation = client.generations.create(ENDPOINT, {"prompt": "billed once", **SMALL})
    submits = proxy.requests_to("POST", "/run/")
    assert [seen.status for seen in submits] == [lost_answer, 202]
    assert submits[0].headers["Idempotency-Key"] == submits[1].headers["Idempotency-Key"]
    assert [g.id for g in client.generations.list()] == [generation.id]
    client.generations.wait(generation.id, timeout=120)
    account = client.account.get()
    assert account.balance_usd == pytest.approx(99.90) and account.held_usd == 0


def test_a_given_idempotency_key_replays_and_a_changed_body_conflicts(
    client: vidgate.Client,
) -> None:
    first = client.generations.create(ENDPOINT, {"prompt": "keyed", **SMALL}, idempotency_key="k-1")
    again = client.generations.create(ENDPOINT, {"prompt": "keyed", **SMALL}, idempotency_key="k-1")
    assert again.id == first.id
    with pytest.raises(vidgate.ConflictError) as raised:
        client.generations.create(ENDPOINT, {"prompt": "other", **SMALL}, idempotency_key="k-1")
    assert raised.value.param == "Idempotency-Key"
    client.generations.wait(first.id, timeout=120)


def test_no_answer_at_all_is_a_connection_error_after_retries() -> None:
    # Port 9 on loopback (discard) has no listener here.
    with vidgate.Client(
        api_key="vg_live_x", base_url="http://127.0.0.1:9/api/v1", max_retries=1,
        retry_initial_delay=0.01,
    ) as client:
        with pytest.raises(vidgate.APIConnectionError):
            client.account.get()


def test_reads_are_resent_after_no_answer_but_a_rotation_is_not(
    make_client: ClientFactory, proxy: Proxy
) -> None:
    client = make_client()
    proxy.inject(Fault("GET", "/account", 0, count=1))
    assert client.account.get().balance_usd == 100
    assert [seen.status for seen in proxy.requests_to("GET", "/account")] == [0, 200]
    # A second rotation would drop the secret receivers still use, so a
    # rotation whose answer was lost is reported, not repeated.
    proxy.inject(Fault("POST", "/account/webhook-secret/rotate", 0, count=1, forward_first=True))
    with pytest.raises(vidgate.APIConnectionError):
        client.webhooks.rotate_secret()
    assert len(proxy.requests_to("POST", "/account/webhook-secret/rotate")) == 1
