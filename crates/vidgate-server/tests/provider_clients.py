"""The providers' own Python clients against vidgate's fake providers.

`tests/it/providers.rs` (`the_providers_own_clients_work_against_the_fake`)
starts the fake and runs this script with a Python that has the official
`replicate` and `fal-client` packages (CI installs them). Each client
submits, polls, cancels and lists through the fake, pointed at it by base
URL, and checks what the provider's own code reads from the answers: a
fake that only agreed with vidgate's reading of the providers would fail
here.

Arguments: the fake's base URL, fal's key, Replicate's token.
"""

import sys
import time

import fal_client
import httpx
import replicate

BASE, FAL_KEY, REPLICATE_TOKEN = sys.argv[1:4]
FAL_ENDPOINT = "alibaba/wan-3.0/text-to-video"
REPLICATE_MODEL = "kwaivgi/kling-v3-video"


def check(condition, message):
    if not condition:
        raise SystemExit(f"FAILED: {message}")


def replicate_client_round_trip():
    client = replicate.Client(api_token=REPLICATE_TOKEN, base_url=f"{BASE}/replicate")
    prediction = client.models.predictions.create(
        model=REPLICATE_MODEL, input={"prompt": "a kite from replicate-python", "duration": 1}
    )
    check(prediction.status == "starting", f"a new prediction starts: {prediction.status}")
    prediction.wait()
    check(prediction.status == "succeeded", f"it succeeds: {prediction.status} {prediction.error}")
    check(isinstance(prediction.output, str) and prediction.output.endswith(".mp4"), prediction.output)

    queued = client.models.predictions.create(
        model=REPLICATE_MODEL, input={"prompt": "a kite canceled by replicate-python", "duration": 1}
    )
    client.predictions.cancel(queued.id)
    queued.reload()
    check(queued.status == "canceled", f"the cancel ends it: {queued.status}")

    listed = [item.id for item in client.predictions.list().results]
    check(prediction.id in listed and queued.id in listed, f"both are listed: {listed}")
    print("replicate: create, wait, cancel, list: ok")


class ToTheFake(httpx.HTTPTransport):
    """Sends what fal_client addresses to fal's queue host to the fake's queue."""

    def handle_request(self, request):
        if request.url.host == "queue.fal.run":
            request.url = httpx.URL(f"{BASE}/fal/queue{request.url.raw_path.decode()}")
        return super().handle_request(request)


def fal_client_round_trip():
    client = fal_client.SyncClient(key=FAL_KEY)
    # fal_client builds its queue URLs from https://queue.fal.run; its HTTP
    # client is swapped for one whose transport sends them to the fake.
    client.__dict__["_client"] = httpx.Client(
        transport=ToTheFake(),
        headers={"Authorization": f"Key {FAL_KEY}"},
        timeout=30,
    )
    handle = client.submit(FAL_ENDPOINT, {"prompt": "a kite from fal-client", "duration": 1}, start_timeout=60)
    status = handle.status()
    check(isinstance(status, (fal_client.Queued, fal_client.InProgress)), f"a new request waits: {status}")
    result = handle.get()
    check(result["video"]["url"].endswith(".mp4"), f"the result has a video: {result}")
    final = handle.status()
    check(isinstance(final, fal_client.Completed), f"it completed: {final}")

    queued = client.submit(FAL_ENDPOINT, {"prompt": "a kite canceled by fal-client", "duration": 1})
    queued.cancel()
    deadline = time.time() + 10
    while not isinstance(queued.status(), fal_client.Completed):
        check(time.time() < deadline, "the canceled request ends")
        time.sleep(0.1)

    # fal_client has no request listing; the platform API is read with the
    # same key, as fal documents it.
    listed = httpx.get(
        f"{BASE}/fal/api/v1/models/requests/by-endpoint",
        params={"endpoint_id": FAL_ENDPOINT, "expand": "payloads"},
        headers={"Authorization": f"Key {FAL_KEY}"},
    ).json()
    ids = [item["request_id"] for item in listed["items"]]
    check(handle.request_id in ids and queued.request_id in ids, f"both finished requests are listed: {ids}")
    print("fal: submit, status, result, cancel, list: ok")


replicate_client_round_trip()
fal_client_round_trip()
