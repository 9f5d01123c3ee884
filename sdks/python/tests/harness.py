"""Test doubles and helpers: a real `vidgate serve` on port 0 with a fresh
data dir, a fault-injecting proxy in front of it, a webhook receiver, and
the admin CLI to make accounts. Nothing here is part of the library."""

from __future__ import annotations

import http.client
import http.server
import json
import os
import queue
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[3]

#: Headers a proxy must not pass on (RFC 9110 section 7.6.1), plus the
#: length, which the proxy sets for the body it sends.
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "host",
}


def vidgate_binary() -> Path:
    """`VIDGATE_BIN`, or the debug build of this checkout."""
    configured = os.environ.get("VIDGATE_BIN")
    binary = Path(configured) if configured else REPO / "target" / "debug" / "vidgate"
    if not binary.is_file():
        raise RuntimeError(
            f"no vidgate binary at {binary}: run `cargo build -p vidgate` or set VIDGATE_BIN"
        )
    return binary


@dataclass
class Account:
    account_id: str
    api_key: str
    webhook_secret: str


class Server:
    """`vidgate serve --simulation --allow-private-network` on a free port.
    With `VIDGATE_SDK_DATABASE_URL` (a fresh PostgreSQL database) it runs on
    PostgreSQL, else on SQLite in its temporary data dir."""

    def __init__(self, storage: Optional["Moto"] = None) -> None:
        self.binary = vidgate_binary()
        self.data_dir = tempfile.mkdtemp(prefix="vidgate-sdk-py-")
        self.store_args = ["--data-dir", self.data_dir]
        # A server with its own storage gets its own (SQLite) database: on a
        # shared one, the other server's workers would claim its jobs and
        # fail to read media from storage they do not have.
        database_url = None if storage else os.environ.get("VIDGATE_SDK_DATABASE_URL")
        if database_url:
            self.store_args += ["--database-url", database_url]
        storage_args = ["--storage", storage.storage_url] if storage else []
        storage_env = storage.environment if storage else {}
        self.log_path = Path(self.data_dir) / "serve.log"
        self._log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [
                str(self.binary),
                "serve",
                "--listen",
                "127.0.0.1:0",
                *self.store_args,
                "--workers",
                "2",
                "--simulation",
                "--allow-private-network",
                # The suites call the public endpoints far more often than
                # one person would; the fair-use limit is not under test here.
                "--public-rate-limit",
                "1000",
                "--public-burst",
                "1000",
                *storage_args,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **storage_env, "NO_COLOR": "1"},
        )
        self.api_base = self._wait_for_listening()

    def _wait_for_listening(self) -> str:
        for _ in range(600):
            text = self.log_path.read_text()
            for line in text.splitlines():
                if line.startswith("vidgate API base: "):
                    return line.removeprefix("vidgate API base: ").strip()
            if self.process.poll() is not None:
                raise RuntimeError(f"vidgate serve exited:\n{text}")
            time.sleep(0.1)
        raise RuntimeError(f"vidgate serve did not listen within 60 s:\n{self.log_path.read_text()}")

    def admin(self, *args: str) -> Dict[str, Any]:
        result = subprocess.run(
            [str(self.binary), "admin", *self.store_args, *args],
            check=True,
            capture_output=True,
            text=True,
        )
        parsed: Dict[str, Any] = json.loads(result.stdout)
        return parsed

    def account(
        self,
        name: str,
        *,
        credit_usd: str = "100",
        rps: int = 1000,
        burst: int = 1000,
        concurrency: int = 100,
    ) -> Account:
        """A new account with generous limits, so that tests do not trip
        over each other's requests unless they mean to."""
        created = self.admin("account", "create", "--name", name, "--credit-usd", credit_usd)
        self.admin(
            "account",
            "limits",
            created["account_id"],
            "--rps",
            str(rps),
            "--burst",
            str(burst),
            "--concurrency",
            str(concurrency),
        )
        return Account(created["account_id"], created["api_key"], created["webhook_secret"])

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()
        shutil.rmtree(self.data_dir, ignore_errors=True)


class Moto:
    """moto's S3 server (`VIDGATE_TEST_MOTO_SERVER`) on a free port with one
    bucket, for a server whose storage offers presigned uploads."""

    def __init__(self, program: str) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [program, "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # moto checks no credentials, so a plain PUT creates the bucket.
        for _ in range(300):
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                connection.request("PUT", "/vidgate-sdk")
                status = connection.getresponse().status
                connection.close()
                if status < 300:
                    break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError("moto_server never answered")
        self.storage_url = "s3://vidgate-sdk/sdk-tests"
        self.environment = {
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=20)


@dataclass
class Fault:
    """Answers the next `count` requests whose method and path match with
    `status`, or with no answer at all (the connection closed) when
    `status` is 0; after forwarding them when `forward_first` (the server
    acts, the client never hears its answer, as when a response is lost)."""

    method: str
    path_prefix: str
    status: int
    count: int
    headers: Dict[str, str] = field(default_factory=dict)
    forward_first: bool = False


@dataclass
class SeenRequest:
    method: str
    path: str
    headers: Dict[str, str]
    status: int
    injected: bool


class Proxy:
    """A tiny HTTP proxy in front of the server (stdlib only) that records
    every request, injects faults on demand, and shortens the polling hint
    (`Retry-After: 5` on an unfinished generation) to `poll_hint` seconds so
    waits in tests take a second, not five."""

    def __init__(self, upstream_base: str, poll_hint: str = "1") -> None:
        parts = urlsplit(upstream_base)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.api_prefix = parts.path.rstrip("/")
        self.poll_hint = poll_hint
        #: Request headers not passed on (lower case): dropping `prefer`
        #: makes the server look like one without waits.
        self.strip_request_headers: Set[str] = set()
        self.faults: List[Fault] = []
        self.seen: List[SeenRequest] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                proxy._serve(self, body)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}{self.api_prefix}"

    def inject(self, fault: Fault) -> None:
        with self.lock:
            self.faults.append(fault)

    def clear(self) -> None:
        with self.lock:
            self.faults.clear()
            self.seen.clear()

    def requests_to(self, method: str, path_prefix: str) -> List[SeenRequest]:
        with self.lock:
            return [
                seen
                for seen in self.seen
                if seen.method == method and seen.path.startswith(self.api_prefix + path_prefix)
            ]

    def _take_fault(self, method: str, path: str) -> Optional[Fault]:
        with self.lock:
            for fault in self.faults:
                if fault.method == method and path.startswith(self.api_prefix + fault.path_prefix):
                    fault.count -= 1
                    if fault.count <= 0:
                        self.faults.remove(fault)
                    return fault
        return None

    def _forward(
        self, method: str, path: str, headers: Dict[str, str], body: bytes
    ) -> Tuple[int, List[Tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=60)
        try:
            connection.request(method, path, body=body or None, headers=headers)
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()

    def _serve(self, handler: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
        method, path = handler.command, handler.path
        headers = {
            k: v
            for k, v in handler.headers.items()
            if k.lower() not in HOP_BY_HOP and k.lower() not in self.strip_request_headers
        }
        fault = self._take_fault(method, path)
        if fault is not None:
            if fault.forward_first:
                self._forward(method, path, headers, body)
            if fault.status == 0:
                with self.lock:
                    self.seen.append(SeenRequest(method, path, headers, 0, True))
                handler.close_connection = True
                return
            error = {"error": {"code": _code_of(fault.status), "message": "injected by the test proxy"}}
            payload = json.dumps(error).encode()
            status, response_headers = fault.status, [("Content-Type", "application/json")]
            response_headers += list(fault.headers.items())
        else:
            status, response_headers, payload = self._forward(method, path, headers, body)
            if method == "GET" and path.startswith(self.api_prefix + "/generations/"):
                response_headers = [
                    (k, self.poll_hint if k.lower() == "retry-after" else v)
                    for k, v in response_headers
                ]
        with self.lock:
            self.seen.append(SeenRequest(method, path, headers, status, fault is not None))
        handler.send_response(status)
        for key, value in response_headers:
            if key.lower() not in HOP_BY_HOP:
                handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _code_of(status: int) -> str:
    return {
        404: "not_found",
        429: "rate_limited",
        500: "internal_error",
        502: "upstream_error",
        503: "model_unavailable",
    }.get(status, "internal_error")


@dataclass
class ReceivedWebhook:
    body: bytes
    headers: Dict[str, str]


class WebhookReceiver:
    """Records the webhooks POSTed to it and answers 204."""

    def __init__(self) -> None:
        self.received: "queue.Queue[ReceivedWebhook]" = queue.Queue()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                receiver.received.put(ReceivedWebhook(body, dict(self.headers.items())))
                self.send_response(204)
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/vidgate"

    def next(self, timeout: float = 60) -> ReceivedWebhook:
        return self.received.get(timeout=timeout)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def png_bytes(width: int = 320, height: int = 240) -> bytes:
    """A valid PNG of one colour, made here so the tests ship no files."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" + b"\x30\x80\xd0" * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )
