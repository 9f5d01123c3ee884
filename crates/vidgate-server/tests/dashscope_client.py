"""DashScope's own Python SDK against vidgate's fake DashScope.

`tests/it/providers.rs` (`dashscopes_own_sdk_works_against_the_fake`)
starts the fake and runs this script with a Python that has the official
`dashscope` package (CI installs it). The SDK, pointed at the fake by its
base URL (`dashscope.base_http_api_url`, which it also reads from
`DASHSCOPE_HTTP_BASE_URL`), creates a Wan task, waits for it, cancels a
queued one and lists both (through the 1.x call and the v2 client's
`JobList`), and checks what the SDK's own code reads from
the answers: a fake that only agreed with vidgate's reading of DashScope
would fail here.

Arguments: the fake's API root (`…/api/v1`) and its key.
"""

import sys

import dashscope
from dashscope import VideoSynthesis

API_URL, KEY = sys.argv[1:3]
MODEL = "wan2.6-t2v"


def check(condition, message):
    if not condition:
        raise SystemExit(f"FAILED: {message}")


def round_trip():
    dashscope.base_http_api_url = API_URL
    created = VideoSynthesis.async_call(
        model=MODEL,
        prompt="a kite from the dashscope SDK",
        duration=5,
        resolution="720P",
        api_key=KEY,
    )
    check(created.status_code == 200, f"the create is taken: {created}")
    check(created.output.task_status == "PENDING", f"a new task waits: {created.output}")
    done = VideoSynthesis.wait(created, api_key=KEY)
    check(done.status_code == 200, f"the wait ends: {done}")
    check(done.output.task_status == "SUCCEEDED", f"it succeeds: {done.output}")
    check(done.output.video_url.endswith(".mp4"), f"with a video: {done.output.video_url}")

    queued = VideoSynthesis.async_call(
        model=MODEL,
        prompt="a kite canceled by the dashscope SDK [fake:never-start]",
        duration=5,
        api_key=KEY,
    )
    canceled = VideoSynthesis.cancel(queued, api_key=KEY)
    check(canceled.status_code == 200, f"a PENDING task is canceled: {canceled}")
    fetched = VideoSynthesis.fetch(queued, api_key=KEY)
    check(fetched.output.task_status == "CANCELED", f"the cancel ends it: {fetched.output}")
    again = VideoSynthesis.cancel(queued, api_key=KEY)
    check(again.status_code != 200, f"a task no longer PENDING is not canceled: {again}")

    # The list, as the v2 SDK's own type reads it (`JobList`: a flat
    # `tasks` list with `total`, `page_no` and `page_size`), which is the
    # reading the fake answers by default.
    client = dashscope.Client(api_key=KEY, base_url=API_URL)
    page = client.videos.jobs.list(model_name=MODEL, page_size=10)
    ids = [task.task_id for task in page.tasks]
    check(
        created.output.task_id in ids and queued.output.task_id in ids,
        f"both are listed by the v2 SDK: {ids}",
    )
    check(page.total == len(page.tasks), f"the total counts them: {page.total}")
    check(page.page_no == 1 and page.page_size == 10, f"the page: {page}")
    statuses = {task.task_id: task.status for task in page.tasks}
    check(statuses[queued.output.task_id] == "CANCELED", f"with their status: {statuses}")

    # The 1.x SDK hands the list's answer back whole.
    listed = VideoSynthesis.list(model_name=MODEL, page_size=10, api_key=KEY)
    check(listed.status_code == 200, f"the list answers: {listed}")
    ids = [task["task_id"] for task in listed.output["tasks"]]
    check(
        created.output.task_id in ids and queued.output.task_id in ids,
        f"both are listed: {ids}",
    )

    # A succeeded task's usage, as the SDK's `VideoSynthesisUsage` reads it.
    check(done.usage.video_duration == 5, f"its duration: {done.usage}")
    check(done.usage.video_count == 1, f"one video: {done.usage}")

    refused = VideoSynthesis.async_call(model=MODEL, prompt="a kite", api_key="sk-wrong")
    check(refused.status_code == 401, f"a wrong key is refused: {refused}")
    check(refused.code == "InvalidApiKey", f"with its code: {refused.code}")
    print("dashscope: async_call, wait, cancel, fetch, list: ok")


round_trip()
