"""The official `openai` Python SDK (pinned in .ci/run) against vidgate's /v1.

`tests/it/dialects.rs` (`the_openai_sdk_drives_v1_videos`) starts two
servers on one store kind and runs this script with a Python that has
`openai==3.51.0`: one server runs its jobs, the other has no workers, so its
videos stay queued for `delete`. The script uses only what a customer would:
`OpenAI(base_url=".../v1", api_key=<vidgate key>)` and `client.videos`.

Arguments: the working server's /v1 URL and key, the idle server's /v1 URL
and key, a PNG file to send as `input_reference`, and the URL of an image
the account uploaded, for `input_reference={"image_url": ...}`.
Prints `openai: ... ok` lines and `ids: <id> ...` of what it made on the
working server.
"""

import sys
import warnings

import openai
from openai import OpenAI

BASE, KEY, IDLE_BASE, IDLE_KEY, PNG_PATH, IMAGE_URL = sys.argv[1:7]
MODEL = "vendor_1/model_1"
# `client.videos` is marked deprecated in 3.51.0; the warnings are not ours.
warnings.simplefilter("ignore", DeprecationWarning)


def check(condition, message):
    if not condition:
        raise SystemExit(f"FAILED: {message}")


def expect_error(kind, call, param=None, status=None):
    try:
        call()
    except kind as error:
        check(param is None or error.param == param, f"{kind.__name__} names {param}: {error.param} {error.body}")
        check(status is None or error.status_code == status, f"status {status}: {error.status_code}")
        check(isinstance(error.body, dict) and error.body.get("message"), f"an OpenAI error object: {error.body}")
        check("type" in error.body and "code" in error.body, f"type and code: {error.body}")
        return error
    raise SystemExit(f"FAILED: expected {kind.__name__}")


client = OpenAI(base_url=BASE, api_key=KEY)
made = []

# create_and_poll: the SDK's form, polled at the pace vidgate's header sets.
video = client.videos.create_and_poll(
    model=MODEL, prompt="a kite over a beach", seconds="2", size="854x480", extra_body={"generate_audio": False}
)
made.append(video.id)
check(video.status == "completed", f"completed: {video}")
check(video.object == "video" and video.id.startswith("gen_"), video)
check(video.progress == 100, video.progress)
check(video.seconds == "2" and video.size == "854x480", f"{video.seconds} {video.size}")
check(video.model == MODEL and video.prompt == "a kite over a beach", video)
check(isinstance(video.created_at, int) and isinstance(video.completed_at, int), video)
check(video.completed_at >= video.created_at, video)
check(video.error is None, video.error)
print("openai: create_and_poll ok")

raw = client.videos.with_raw_response.create(model=MODEL, prompt="a paced kite", seconds="2", size="480x854")
check(raw.headers.get("openai-poll-after-ms") == "5000", f"poll header: {dict(raw.headers)}")
paced = raw.parse()
made.append(paced.id)
check(paced.status in ("queued", "in_progress"), paced.status)
check(paced.size == "480x854", paced.size)
print("openai: openai-poll-after-ms ok")

content = client.videos.download_content(video.id)
mp4 = content.read()
check(len(mp4) > 1000 and mp4[4:8] == b"ftyp", f"an MP4: {mp4[:16]!r}")
print("openai: download_content ok")

with open(PNG_PATH, "rb") as png:
    from_image = client.videos.create_and_poll(
        model=MODEL,
        prompt="the picture, moving",
        input_reference=("frame.png", png.read(), "image/png"),
        seconds="2",
        size="854x480",
        poll_interval_ms=300,
    )
made.append(from_image.id)
check(from_image.status == "completed", f"image-to-video completes: {from_image}")
# The SDK's types take input_reference={"image_url": ...}, but 3.51.0's
# create() passes input_reference to extract_files, which raises on anything
# but a file; extra_body sends the same field, flattened into the form as
# input_reference[image_url].
image_url_video = client.videos.create(
    model=MODEL,
    prompt="the picture, again",
    seconds="2",
    extra_body={"input_reference": {"image_url": IMAGE_URL}},
)
made.append(image_url_video.id)
print("openai: input_reference ok")

first = client.videos.create(
    model=MODEL, prompt="once only", seconds="2", size="854x480", extra_headers={"Idempotency-Key": "sdk-retry-1"}
)
again = client.videos.create(
    model=MODEL, prompt="once only", seconds="2", size="854x480", extra_headers={"Idempotency-Key": "sdk-retry-1"}
)
made.append(first.id)
check(first.id == again.id, f"a retry under one key replays: {first.id} {again.id}")
conflict = expect_error(
    openai.ConflictError,
    lambda: client.videos.create(
        model=MODEL, prompt="another", seconds="2", extra_headers={"Idempotency-Key": "sdk-retry-1"}
    ),
    status=409,
)
check(conflict.response.headers.get("x-should-retry") == "false", dict(conflict.response.headers))
print("openai: idempotency ok")

expect_error(openai.BadRequestError, lambda: client.videos.create(model=MODEL, prompt="x", size="999x999"), "size", 400)
expect_error(openai.BadRequestError, lambda: client.videos.create(model=MODEL, prompt="x", seconds="soon"), "seconds", 400)
expect_error(openai.BadRequestError, lambda: client.videos.create(model=MODEL, prompt="x", seconds="99"), "seconds", 400)
expect_error(
    openai.BadRequestError, lambda: client.videos.create(model="vendor_2/model_2", prompt="x", size="854x480"), "size"
)
expect_error(openai.BadRequestError, lambda: client.videos.create(model="sora-2", prompt="x"), "model", 400)
expect_error(openai.BadRequestError, lambda: client.videos.create(model=MODEL, prompt=""), "prompt", 400)
expect_error(openai.NotFoundError, lambda: client.videos.retrieve("gen_nothing_here"), status=404)
expect_error(openai.AuthenticationError, lambda: OpenAI(base_url=BASE, api_key="vg_live_wrong").videos.list(), status=401)
print("openai: typed errors ok")

listed = [item.id for item in client.videos.list(limit=2)]
check(len(listed) == len(set(listed)), f"no video twice: {listed}")
check(all(video_id in listed for video_id in made), f"every video listed: {made} in {listed}")
page = client.videos.list(limit=2)
check(len(page.data) == 2 and page.has_more is True and page.last_id == page.data[-1].id, page)
check(listed.index(made[-1]) < listed.index(made[0]), "newest first")
print("openai: list auto-paging ok")

check(client.videos.retrieve(video.id).status == "completed", "retrieve")
kept = client.videos.delete(video.id)
check(kept.object == "video.deleted" and kept.id == video.id and kept.deleted is False, kept)

idle = OpenAI(base_url=IDLE_BASE, api_key=IDLE_KEY)
queued = idle.videos.create(model=MODEL, prompt="never made", seconds="2")
check(queued.status == "queued", queued.status)
gone = idle.videos.delete(queued.id)
check(gone.deleted is True and gone.id == queued.id, gone)
canceled = idle.videos.retrieve(queued.id)
check(canceled.status == "failed" and canceled.error.code == "canceled", canceled)
# poll() returns at once on a failed video, so a canceled one ends a wait.
check(idle.videos.poll(queued.id).status == "failed", "poll ends on a canceled video")
print("openai: delete ok")

print("ids: " + " ".join(made))
