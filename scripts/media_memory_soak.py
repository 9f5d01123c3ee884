#!/usr/bin/env python3
"""Issue 16's memory figure: peak RSS of `vidgate serve` while 64 concurrent
quotes and 64 concurrent submits point at slow 100 MB reference videos, and
the p99 of an authenticated GET before and during that load.

It starts a throttled media server on 127.0.0.1 and a throwaway
`vidgate serve` (with --allow-private-network, so that media server may be
fetched), renders a 2 s clip with the server itself and pads it to 100 MB
with a `free` box (a valid MP4 whose header comes first), then fires the
requests and samples the server's RSS from /proc every 50 ms.

    cargo build -p vidgate            # or --release, then --binary target/release/vidgate
    python3 scripts/media_memory_soak.py --binary target/debug/vidgate

Figures are printed, never asserted; they go in BENCHMARKS.md.
"""

import argparse
import collections
import json
import os
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MEDIA_BYTES = 100_000_000


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def request(method, url, body=None, key=None, timeout=300):
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    started = time.monotonic()
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, data=data, headers=headers, method=method),
            timeout=timeout,
        ) as response:
            payload = response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        payload = error.read()
        status = error.code
    return status, payload, time.monotonic() - started


def slow_media_server(clip, bytes_per_second):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "video/mp4")
            self.send_header("Content-Length", str(len(clip)))
            self.end_headers()
            chunk = 64 * 1024
            pause = chunk / bytes_per_second
            try:
                for start in range(0, len(clip), chunk):
                    self.wfile.write(clip[start : start + chunk])
                    time.sleep(pause)
            except (BrokenPipeError, ConnectionResetError):
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def rss_kib(pid, field):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="target/debug/vidgate")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--media-bytes-per-second", type=int, default=5_000_000)
    parser.add_argument("--max-media-fetches", type=int, default=16)
    args = parser.parse_args()

    data_dir = tempfile.mkdtemp(prefix="vidgate-soak-")
    port = free_port()
    api = f"http://127.0.0.1:{port}/api/v1"
    environment = dict(
        os.environ,
        VIDGATE_DATA_DIR=data_dir,
        VIDGATE_LOG="warn",
    )
    server = subprocess.Popen(
        [
            args.binary,
            "serve",
            "--listen",
            f"127.0.0.1:{port}",
            "--allow-private-network",
            "--max-media-fetches",
            str(args.max_media_fetches),
            # One stranger's address sends every quote here; lift the
            # per-address limit so the quotes reach the media fetches.
            "--public-rate-limit",
            "100000",
        ],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            if server.poll() is not None:
                raise SystemExit(f"vidgate serve exited: {server.stderr.read().decode()[-2000:]}")
            try:
                if request("GET", f"{api}/models", timeout=2)[0] == 200:
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        account = json.loads(
            subprocess.check_output(
                [args.binary, "admin", "account", "create", "--name", "soak", "--credit-usd", "100000"],
                env=environment,
            )
        )
        subprocess.check_output(
            [args.binary, "admin", "account", "limits", account["account_id"], "--rps", "10000", "--burst", "10000", "--concurrency", "1000"],
            env=environment,
        )
        key = account["api_key"]

        status, payload, _ = request(
            "POST",
            f"{api}/run/vendor_1/model_1/text-to-video",
            {"prompt": "soak reference", "duration": 2, "resolution": "480p", "generate_audio": False},
            key,
        )
        assert status == 202, payload
        generation_id = json.loads(payload)["id"]
        while True:
            generation = json.loads(request("GET", f"{api}/generations/{generation_id}", key=key)[1])
            if generation["status"] in ("succeeded", "failed"):
                break
            time.sleep(0.5)
        assert generation["status"] == "succeeded", generation
        with urllib.request.urlopen(generation["output"]["video_url"]) as response:
            clip = response.read()
        padding = MEDIA_BYTES - len(clip)
        clip += padding.to_bytes(4, "big") + b"free" + bytes(padding - 8)
        media = slow_media_server(clip, args.media_bytes_per_second)
        media_url = f"http://127.0.0.1:{media.server_address[1]}/ref.mp4"

        def get_latencies(count):
            return [request("GET", f"{api}/generations/{generation_id}", key=key)[2] for _ in range(count)]

        idle = get_latencies(200)
        baseline_rss = rss_kib(server.pid, "VmRSS")
        peak = {"rss": baseline_rss}
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak["rss"] = max(peak["rss"], rss_kib(server.pid, "VmRSS"))
                time.sleep(0.05)

        answers = collections.Counter()
        lock = threading.Lock()

        def fire(kind, index):
            # A new query string per request defeats the probe cache, as an
            # attacker would.
            url = f"{media_url}?{kind}={index}"
            body = {"prompt": "p", "duration": 2, "resolution": "480p", "reference_video_urls": [url]}
            if kind == "quote":
                status, _, _ = request("POST", f"{api}/quote/vendor_1/model_1/reference-to-video", body)
            else:
                status, _, _ = request("POST", f"{api}/run/vendor_1/model_1/reference-to-video", body, key)
            with lock:
                answers[(kind, status)] += 1

        sampler = threading.Thread(target=sample)
        sampler.start()
        started = time.monotonic()
        threads = [
            threading.Thread(target=fire, args=(kind, index))
            for index in range(args.clients)
            for kind in ("quote", "submit")
        ]
        for thread in threads:
            thread.start()
        loaded = get_latencies(200)
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        done.set()
        sampler.join()

        print(f"binary: {args.binary}; media: {MEDIA_BYTES} bytes at {args.media_bytes_per_second} B/s per connection")
        print(f"requests: {args.clients} quotes + {args.clients} submits, all started at once; {elapsed:.1f} s until the last answer")
        for (kind, status), count in sorted(answers.items()):
            print(f"  {kind}: {count} x HTTP {status}")
        print(f"RSS before the load: {baseline_rss / 1024:.0f} MB; peak RSS during it: {peak['rss'] / 1024:.0f} MB; VmHWM: {rss_kib(server.pid, 'VmHWM') / 1024:.0f} MB")
        print(
            "GET /generations/{id}: idle p50 %.1f ms p99 %.1f ms; under load p50 %.1f ms p99 %.1f ms"
            % (
                percentile(idle, 0.5) * 1000,
                percentile(idle, 0.99) * 1000,
                percentile(loaded, 0.5) * 1000,
                percentile(loaded, 0.99) * 1000,
            )
        )
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
