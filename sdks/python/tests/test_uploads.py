"""Uploads: multipart to vidgate, and the fallback from presigned uploads."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Iterator

import pytest

import vidgate
from harness import Moto, Proxy, Server, png_bytes


def test_upload_a_path_and_use_it_in_a_request(
    client: vidgate.Client, proxy: Proxy, tmp_path: Path
) -> None:
    picture = tmp_path / "opening.png"
    picture.write_bytes(png_bytes())
    upload = client.uploads.create(picture)
    assert upload.id.startswith("upl_") and upload.content_type == "image/png"
    assert upload.media is not None and (upload.media.width, upload.media.height) == (320, 240)
    # On local disk the presigned flow answers 501 once, then this client
    # goes straight to multipart.
    assert [seen.status for seen in proxy.requests_to("POST", "/uploads/initiate")] == [501]
    client.uploads.create(io.BytesIO(png_bytes()), filename="again.png")
    assert len(proxy.requests_to("POST", "/uploads/initiate")) == 1
    generation = client.run(
        "vendor_1/model_1/image-to-video",
        {"prompt": "slow zoom", "image_url": upload.url, "duration": 2, "resolution": "480p",
         "generate_audio": False},
    )
    assert generation.status == "succeeded"


def test_upload_bytes_with_multipart_only(client: vidgate.Client, proxy: Proxy) -> None:
    upload = client.uploads.create(png_bytes(), filename="still.png", direct=False)
    assert upload.size_bytes == len(png_bytes()) and upload.created_at is not None
    assert proxy.requests_to("POST", "/uploads/initiate") == []


def test_direct_only_raises_where_the_deployment_has_no_bucket(client: vidgate.Client) -> None:
    with pytest.raises(vidgate.DirectUploadUnavailableError):
        client.uploads.create(png_bytes(), filename="still.png", direct=True)


def test_a_file_that_is_not_media_is_refused(client: vidgate.Client) -> None:
    with pytest.raises(vidgate.InvalidRequestError) as raised:
        client.uploads.create(b"just text", filename="notes.txt", direct=False)
    assert raised.value.param == "file"


@pytest.fixture(scope="module")
def bucket_server() -> Iterator[Server]:
    """A second server whose clips and uploads live in moto's S3 bucket."""
    program = os.environ.get("VIDGATE_TEST_MOTO_SERVER")
    if not program:
        pytest.skip("VIDGATE_TEST_MOTO_SERVER is not set (see .ci/run)")
    moto = Moto(program)
    server = Server(storage=moto)
    yield server
    server.stop()
    moto.stop()


def test_a_presigned_upload_goes_to_the_bucket_and_renders(bucket_server: Server) -> None:
    account = bucket_server.account("sdk-py-bucket")
    with vidgate.Client(api_key=account.api_key, base_url=bucket_server.api_base) as client:
        upload = client.uploads.create(png_bytes(), filename="opening.png")
        assert upload.id.startswith("upl_") and upload.content_type == "image/png"
        # Not probed yet: the server probes it when a request first uses it.
        assert upload.media is None
        generation = client.run(
            "vendor_1/model_1/image-to-video",
            {"prompt": "from the bucket", "image_url": upload.url, "duration": 2,
             "resolution": "480p", "generate_audio": False},
            timeout=180,
        )
        assert generation.status == "succeeded"
        pending = client.uploads.initiate(content_type="image/png", size_bytes=10)
        assert pending.method == "PUT" and pending.headers == {"Content-Type": "image/png"}
