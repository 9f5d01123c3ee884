#!/usr/bin/env bash
# Tests of the client libraries in sdks/: type checks (mypy --strict, tsc),
# each library's tests against a real `vidgate serve` that the tests start
# (port 0, fresh data dir), and a build of each package (python -m build,
# npm pack) installed into a clean environment.
#
#   sdks/run-tests.sh [python|typescript|all]
#
# VIDGATE_BIN names the server binary (default target/debug/vidgate, built
# here if missing). With VIDGATE_SDK_POSTGRES_URL (a PostgreSQL server, e.g.
# postgres://postgres@127.0.0.1:5432/test) the library tests run a second
# time with the server on a fresh database `vidgate_sdk_…` created there and
# dropped afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
which="${1:-all}"

export VIDGATE_BIN="${VIDGATE_BIN:-$root/target/debug/vidgate}"
if [ ! -x "$VIDGATE_BIN" ]; then
    cargo build -p vidgate
fi
echo "sdks: server binary $VIDGATE_BIN ($(date -r "$VIDGATE_BIN" -u '+built %Y-%m-%d %H:%M UTC'))"
dist="$root/target/sdk-dist"
mkdir -p "$dist"

pg_server="${VIDGATE_SDK_POSTGRES_URL:-}"
pg_database=""
drop_database() {
    if [ -n "$pg_database" ]; then
        psql "$pg_server" -q -c "DROP DATABASE IF EXISTS $pg_database" >/dev/null || true
        pg_database=""
    fi
}
trap drop_database EXIT

# on_each_store COMMAND…: runs COMMAND on SQLite, then on a fresh PostgreSQL
# database when VIDGATE_SDK_POSTGRES_URL is set.
on_each_store() {
    echo "sdks: $* (SQLite)"
    env -u VIDGATE_SDK_DATABASE_URL "$@"
    if [ -n "$pg_server" ]; then
        pg_database="vidgate_sdk_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
        psql "$pg_server" -q -c "CREATE DATABASE $pg_database" >/dev/null
        database_url="$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$pg_server" "$pg_database")"
        echo "sdks: $* (PostgreSQL)"
        VIDGATE_SDK_DATABASE_URL="$database_url" "$@"
        drop_database
    fi
}

python_suite() {
    local venv="$root/target/sdk-venv"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        'httpx==0.28.1' 'pytest==9.2.0' 'mypy==2.4.1' 'build==1.6.1'
    cd "$root/sdks/python"
    echo "sdks: mypy --strict on the Python package and its examples"
    "$venv/bin/mypy" --strict --cache-dir "$root/target/sdk-mypy-cache" src examples
    on_each_store env PYTHONPATH=src "$venv/bin/pytest" -q -p no:cacheprovider tests

    echo "sdks: python -m build, and the wheel installed into a clean environment"
    rm -rf "$dist/python"
    "$venv/bin/python" -m build --outdir "$dist/python" . >/dev/null
    # The oldest Python the package supports, when pyenv has it.
    local python=python3
    if command -v pyenv >/dev/null && [ -n "$(pyenv root)" ]; then
        python="$(ls -d "$(pyenv root)"/versions/3.9*/bin/python3.9 2>/dev/null | head -1)"
        [ -n "$python" ] || python=python3
    fi
    local clean="$root/target/sdk-clean-venv"
    rm -rf "$clean"
    "$python" -m venv "$clean"
    "$clean/bin/pip" install --quiet --disable-pip-version-check "$dist"/python/vidgate-*.whl
    (cd "$dist" && "$clean/bin/python" - <<'EOF'
import sys

import vidgate

assert vidgate.webhooks.sign(
    '{"test": 2432232314}',
    secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    message_id="msg_p5jXN8AQM9LWM0D4loKWxJek",
    timestamp=1614265330,
) == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
with vidgate.Client(api_key="vg_live_x") as client:
    assert client.base_url.endswith("/api/v1")
print(f"sdks: vidgate {vidgate.__version__} from the wheel works on Python {sys.version.split()[0]}")
EOF
    )
    cd "$root"
}

typescript_suite() {
    cd "$root/sdks/typescript"
    npm ci --no-audit --no-fund --loglevel=error
    echo "sdks: tsc on the TypeScript package, its tests and its examples"
    npm run --silent build
    npm run --silent typecheck
    on_each_store npm test --silent

    echo "sdks: npm pack, and the tarball installed into a clean project"
    rm -rf "$dist/typescript"
    mkdir -p "$dist/typescript"
    npm pack --silent --pack-destination "$dist/typescript" >/dev/null
    local clean
    clean="$(mktemp -d -t vidgate-sdk-clean.XXXXXX)"
    (
        cd "$clean"
        npm init -y >/dev/null
        npm pkg set type=module >/dev/null
        npm install --no-audit --no-fund --loglevel=error "$dist"/typescript/vidgate-*.tgz
        cat >consumer.ts <<'EOF'
import { Vidgate, webhooks, type Generation, RateLimitedError } from "vidgate";

const client = new Vidgate({ apiKey: "vg_live_x", baseUrl: "http://127.0.0.1:1/api/v1" });
const signature: string = await webhooks.sign('{"test": 2432232314}', "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330);
if (signature !== "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=") throw new Error(`wrong signature ${signature}`);
const describe = (generation: Generation): string => `${generation.id} ${generation.status}`;
console.log(`sdks: the packed library works in a clean project (${client.baseUrl}, ${typeof describe}, ${RateLimitedError.name})`);
EOF
        cat >tsconfig.json <<'EOF'
{ "compilerOptions": { "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext",
  "lib": ["ES2022", "DOM"], "types": [], "strict": true, "outDir": "out" }, "files": ["consumer.ts"] }
EOF
        "$root/sdks/typescript/node_modules/.bin/tsc" -p tsconfig.json
        cp package.json out/
        node out/consumer.js
    )
    rm -rf "$clean"
    cd "$root"
}

case "$which" in
    python) python_suite ;;
    typescript) typescript_suite ;;
    all) python_suite; typescript_suite ;;
    *) echo "usage: $0 [python|typescript|all]" >&2; exit 2 ;;
esac
echo "sdks: all passed"
