#!/usr/bin/env bash
# The container image's smoke test, run by CI after scripts/container-image.sh:
# the image against this machine's PostgreSQL and Redis (--network host),
# with its secrets as files and its data on a volume. It applies the
# migrations with `admin migrate`, starts `serve`, submits a generation and
# follows it to `succeeded`, downloads the clip, submits another one and
# stops the container with SIGTERM while that one is in flight, then starts
# the image again on the same database and volume: the second job finishes,
# the first clip is still served, and the account's money adds up (nothing
# held, nothing charged twice). It prints the image's size, its start-up
# time and its idle memory for BENCHMARKS.md.
#
#     VIDGATE_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
#     VIDGATE_TEST_REDIS_URL=redis://127.0.0.1:6379 scripts/container-smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."

image="${VIDGATE_IMAGE:-localhost/vidgate:dev}"
postgres_url="${VIDGATE_TEST_POSTGRES_URL:?a PostgreSQL server URL}"
redis_url="${VIDGATE_TEST_REDIS_URL:?a Redis URL}"

# This sandbox's podman needs runc with cgroupfs, and may not set rlimits
# (../shared/FACTS.md); both are harmless elsewhere.
work="$(mktemp -d)"
chmod 0755 "$work"
printf '[containers]\ndefault_ulimits = []\n' > "$work/containers.conf"
export CONTAINERS_CONF="$work/containers.conf"
podman=(podman --runtime runc --cgroup-manager cgroupfs)

name="vidgate-smoke-$$"
volume="vidgate-smoke-$$"
database="vidgate_container_smoke_$$"
cleanup() {
    "${podman[@]}" rm --force --ignore "$name" >/dev/null 2>&1 || true
    "${podman[@]}" volume rm --force "$volume" >/dev/null 2>&1 || true
    psql "$postgres_url" -qc "DROP DATABASE IF EXISTS $database" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

psql "$postgres_url" -qc "CREATE DATABASE $database"
database_url="$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$postgres_url" "$database")"

# The secrets as files, the way a platform mounts them; readable by the
# image's user (uid 10001) only through the directory given to it.
mkdir -m 0755 "$work/secrets"
printf '%s\n' "$database_url" > "$work/secrets/database_url"
printf '%s\n' "$redis_url" > "$work/secrets/redis_url"
chmod 0444 "$work/secrets/"*

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
base="http://127.0.0.1:$port"
run_options=(--network host
    -v "$work/secrets:/run/secrets/vidgate:ro"
    -v "$volume:/var/lib/vidgate"
    -e VIDGATE_DATABASE_URL_FILE=/run/secrets/vidgate/database_url
    -e VIDGATE_REDIS_URL_FILE=/run/secrets/vidgate/redis_url
    -e VIDGATE_LISTEN="127.0.0.1:$port"
    -e VIDGATE_SKIP_MIGRATIONS=true
    -e VIDGATE_DRAIN_SECONDS=1)

echo "== the image"
size_bytes="$("${podman[@]}" image inspect --format '{{.Size}}' "$image")"
user="$("${podman[@]}" image inspect --format '{{.Config.User}}' "$image")"
test "$user" = "10001:10001" || { echo "the image runs as '$user', not the non-root user" >&2; exit 1; }

echo "== admin migrate"
"${podman[@]}" run --rm "${run_options[@]}" "$image" admin migrate

start_node() {
    local started
    started="$(date +%s.%N)"
    "${podman[@]}" run -d --name "$name" "${run_options[@]}" "$image" serve --workers 1 >/dev/null
    for _ in $(seq 1 600); do
        if curl -fsS -o /dev/null "$base/readyz" 2>/dev/null; then
            startup_seconds="$(python3 -c "import sys; print(round($(date +%s.%N) - $started, 2))")"
            return 0
        fi
        sleep 0.05
    done
    "${podman[@]}" logs "$name" >&2
    echo "the container was not ready within 30 s" >&2
    exit 1
}

echo "== serve"
start_node
first_startup_seconds="$startup_seconds"
sleep 2
pid="$("${podman[@]}" inspect --format '{{.State.Pid}}' "$name")"
idle_rss_kib="$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")"

account="$("${podman[@]}" exec "$name" vidgate admin account create --name smoke --credit-usd 5)"
api_key="$(jq -r .api_key <<<"$account")"
auth=(-H "Authorization: Bearer $api_key")

submit() {
    curl -fsS "${auth[@]}" -H 'Content-Type: application/json' \
        -d "{\"prompt\":\"$1\",\"duration\":$2,\"resolution\":\"480p\"}" \
        "$base/api/v1/run/vendor_1/model_1/text-to-video" | jq -r .id
}
wait_for_success() {
    local status
    for _ in $(seq 1 600); do
        status="$(curl -fsS "${auth[@]}" "$base/api/v1/generations/$1" | jq -r .status)"
        case "$status" in
            succeeded) return 0 ;;
            failed | canceled) echo "generation $1 ended $status" >&2; exit 1 ;;
        esac
        sleep 0.2
    done
    echo "generation $1 did not succeed within 120 s" >&2
    exit 1
}
download_clip() {
    local url
    url="$(curl -fsS "${auth[@]}" "$base/api/v1/generations/$1" | jq -r .output.video_url)"
    curl -fsS "${auth[@]}" -o "$work/$1.mp4" "$url"
    # An MP4 starts with its `ftyp` box.
    test "$(head -c 8 "$work/$1.mp4" | tail -c 4)" = "ftyp" || { echo "the clip of $1 is not an MP4" >&2; exit 1; }
}

echo "== a generation, followed to its clip"
first="$(submit "a lighthouse at dusk" 2)"
wait_for_success "$first"
download_clip "$first"

echo "== SIGTERM with a job in flight"
second="$(submit "a harbour at night, slowly" 10)"
"${podman[@]}" stop --time 30 "$name" >/dev/null
exit_code="$("${podman[@]}" inspect --format '{{.State.ExitCode}}' "$name")"
test "$exit_code" = "0" || { "${podman[@]}" logs "$name" >&2; echo "vidgate exited $exit_code on SIGTERM" >&2; exit 1; }
"${podman[@]}" rm "$name" >/dev/null

echo "== started again on the same database and volume"
start_node
wait_for_success "$second"
download_clip "$second"
download_clip "$first"
money="$(curl -fsS "${auth[@]}" "$base/api/v1/account")"
# Two clips at their final price, each captured once; nothing left held.
spent="$(curl -fsS "${auth[@]}" "$base/api/v1/generations/$first" "$base/api/v1/generations/$second" |
    jq -s 'map(.cost.amount_usd) | add')"
jq -e --argjson spent "$spent" \
    '.held_usd == 0 and ((.spent_usd - $spent) | fabs) < 0.000001 and ((.balance_usd - (5 - $spent)) | fabs) < 0.000001' \
    <<<"$money" >/dev/null ||
    { echo "the account's money does not add up: $money (spent on the two clips: $spent)" >&2; exit 1; }
"${podman[@]}" stop --time 30 "$name" >/dev/null

echo "== the reference: the same binary started outside a container"
# The release binary the image was built from, on the same database, Redis
# and settings, timed the same way: the container's overhead is the ratio.
binary="${VIDGATE_REFERENCE_BINARY:-target/release/vidgate}"
reference_started="$(date +%s.%N)"
VIDGATE_DATABASE_URL="$database_url" VIDGATE_REDIS_URL="$redis_url" VIDGATE_SKIP_MIGRATIONS=true \
    "$binary" serve --listen "127.0.0.1:$port" --data-dir "$work/reference" --workers 1 \
    >"$work/reference.log" 2>&1 &
reference_pid=$!
for _ in $(seq 1 600); do
    curl -fsS -o /dev/null "$base/readyz" 2>/dev/null && break
    sleep 0.05
done
reference_startup_seconds="$(python3 -c "print(round($(date +%s.%N) - $reference_started, 2))")"
sleep 2
reference_rss_kib="$(awk '/^VmRSS:/ { print $2 }' "/proc/$reference_pid/status")"
kill "$reference_pid"
wait "$reference_pid" || true

echo "image size: $((size_bytes / 1024 / 1024)) MiB ($size_bytes bytes)"
echo "start-up to /readyz: ${first_startup_seconds} s (first start), ${startup_seconds} s (restart); the bare binary ${reference_startup_seconds} s (ratio $(python3 -c "print(round($startup_seconds / $reference_startup_seconds, 2))"))"
echo "idle memory (RSS) 2 s after start: $((idle_rss_kib / 1024)) MiB; the bare binary $((reference_rss_kib / 1024)) MiB"
echo "== the container smoke test passed"
