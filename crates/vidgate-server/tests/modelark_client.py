"""BytePlus's own Python client against vidgate's fake ModelArk.

`tests/it/providers.rs` (`modelarks_own_client_works_against_the_fake`)
starts the fake and runs this script with a Python that has the official
`byteplus-python-sdk-v2` (its `byteplussdkarkruntime` package; CI installs
it beside the other providers' clients). The SDK creates, reads, lists and
deletes content-generation tasks through the fake, pointed at it by base
URL, and reads the answers into its own types: a fake that only agreed with
vidgate's reading of ModelArk would fail here.

Arguments: the fake's ModelArk API root (ending in /api/v3), the API key.
"""

import sys
import time

from byteplussdkarkruntime import Ark
from byteplussdkarkruntime._exceptions import ArkAuthenticationError, ArkNotFoundError

BASE, API_KEY = sys.argv[1:3]
MODEL = "dreamina-seedance-2-0-260128"


def check(condition, message):
    if not condition:
        raise SystemExit(f"FAILED: {message}")


def wait_until_final(client, task_id):
    deadline = time.time() + 30
    while time.time() < deadline:
        task = client.content_generation.tasks.get(task_id=task_id)
        if task.status not in ("queued", "running"):
            return task
        time.sleep(0.1)
    raise SystemExit(f"FAILED: {task_id} did not finish")


def main():
    # No retries: the SDK retries 429 and 5xx on its own, creates included,
    # which vidgate never does (a create has no idempotency key).
    client = Ark(base_url=BASE, api_key=API_KEY, max_retries=0)
    created = client.content_generation.tasks.create(
        model=MODEL,
        content=[{"type": "text", "text": "a kite from the ModelArk SDK"}],
        ratio="16:9",
        duration=5,
        resolution="720p",
        safety_identifier="vg-sdk-check",
    )
    check(created.id.startswith("cgt-"), f"a task id: {created.id}")
    task = wait_until_final(client, created.id)
    check(task.status == "succeeded", f"it succeeds: {task.status} {task.error}")
    check(task.content.video_url.startswith("http"), task.content.video_url)
    check(task.safety_identifier == "vg-sdk-check", f"the identifier is kept: {task.safety_identifier}")
    check(task.ratio == "16:9" and task.duration == 5, f"its settings: {task}")

    queued = client.content_generation.tasks.create(
        model=MODEL, content=[{"type": "text", "text": "a kite canceled by the ModelArk SDK"}]
    )
    client.content_generation.tasks.delete(queued.id)
    canceled = client.content_generation.tasks.get(task_id=queued.id)
    check(canceled.status == "cancelled", f"a queued task is canceled: {canceled.status}")

    listed = client.content_generation.tasks.list(page_num=1, page_size=10)
    ids = [item.id for item in listed.items]
    check(created.id in ids and queued.id in ids and listed.total >= 2, f"both are listed: {ids}")
    only_canceled = client.content_generation.tasks.list(status="cancelled", task_ids=[queued.id])
    check([item.id for item in only_canceled.items] == [queued.id], "the filters apply")

    try:
        client.content_generation.tasks.get(task_id="cgt-unknown")
        raise SystemExit("FAILED: an unknown task is found")
    except ArkNotFoundError as error:
        check(error.code == "ResourceNotFound", f"the error's code: {error.code}")
    try:
        Ark(base_url=BASE, api_key="wrong", max_retries=0).content_generation.tasks.get(task_id=created.id)
        raise SystemExit("FAILED: a wrong key is taken")
    except ArkAuthenticationError:
        pass
    print("modelark: create, get, delete, list, errors: ok")


main()
