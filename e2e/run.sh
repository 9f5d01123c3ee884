#!/usr/bin/env bash
# Browser end-to-end tests of the dashboard: starts a throwaway `vidgate serve`
# on a free port, creates two accounts with dashboard users through the
# admin CLI, and runs e2e/dashboard.test.mjs (node's test runner driving
# Debian's chromium through playwright-core), with a fake Stripe
# (e2e/fake-stripe.mjs) for "Add credit". Screenshots of every page go to
# target/e2e/screenshots/<store>/. Run it from anywhere: `e2e/run.sh`.
# With VIDGATE_E2E_POSTGRES_URL (a PostgreSQL server URL, e.g.
# postgres://postgres@127.0.0.1:5432/test) the server runs on a fresh database
# `vidgate_e2e_…` created there and dropped afterwards; without it, on SQLite.
set -euo pipefail
cd "$(dirname "$0")/.."

chromium="${VIDGATE_E2E_CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$chromium" ]; then
    echo "no browser at $chromium: install Debian's chromium (apt-get install chromium)" >&2
    exit 1
fi

# The lockfile pins playwright-core; it has no install script and never
# downloads a browser of its own.
if [ ! -f e2e/node_modules/playwright-core/package.json ]; then
    (cd e2e && npm ci --no-audit --no-fund)
fi

# CI has just built the binary with `cargo test`; a developer who changed the
# code rebuilds it with `cargo build -p vidgate` before running this.
vidgate=target/debug/vidgate
if [ ! -x "$vidgate" ]; then
    cargo build -p vidgate
fi
echo "e2e: using $vidgate ($(date -r "$vidgate" -u '+built %Y-%m-%d %H:%M UTC'))"

data_dir="$(mktemp -d -t vidgate-e2e.XXXXXX)"
server_log="$data_dir/serve.log"
server_pid=""
stripe_pid=""
pg_server="${VIDGATE_E2E_POSTGRES_URL:-}"
pg_database=""
cleanup() {
    if [ -n "$stripe_pid" ]; then
        kill "$stripe_pid" 2>/dev/null || true
        wait "$stripe_pid" 2>/dev/null || true
    fi
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    if [ -n "$pg_database" ]; then
        psql "$pg_server" -q -c "DROP DATABASE IF EXISTS $pg_database" >/dev/null || true
    fi
    rm -rf "$data_dir"
}
trap cleanup EXIT
fail() {
    echo "e2e: $*" >&2
    echo "---- last 60 lines of the server log ($server_log)" >&2
    tail -n 60 "$server_log" >&2 || true
    exit 1
}

store_args=(--data-dir "$data_dir")
store=sqlite
if [ -n "$pg_server" ]; then
    store=postgres
    pg_database="vidgate_e2e_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
    psql "$pg_server" -q -c "CREATE DATABASE $pg_database" >/dev/null
    database_url="$(node -e 'const u = new URL(process.argv[1]); u.pathname = "/" + process.argv[2];
                             process.stdout.write(u.href);' "$pg_server" "$pg_database")"
    store_args+=(--database-url "$database_url")
fi

# A fake Stripe (e2e/fake-stripe.mjs) for "Add credit": the server creates
# its Checkout Sessions there, the browser pays on its page, and it sends the
# signed event to the server's /webhooks/stripe.
stripe_log="$data_dir/fake-stripe.log"
export VIDGATE_STRIPE_SECRET_KEY="sk_test_e2e_$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
export VIDGATE_STRIPE_WEBHOOK_SECRET="whsec_e2e_$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
FAKE_STRIPE_SECRET_KEY="$VIDGATE_STRIPE_SECRET_KEY" FAKE_STRIPE_WEBHOOK_SECRET="$VIDGATE_STRIPE_WEBHOOK_SECRET" \
    node e2e/fake-stripe.mjs >"$stripe_log" 2>&1 &
stripe_pid=$!
stripe_url=""
for _ in $(seq 1 100); do
    stripe_url="$(sed -n 's/^fake Stripe at //p' "$stripe_log")"
    [ -n "$stripe_url" ] && break
    kill -0 "$stripe_pid" 2>/dev/null || fail "the fake Stripe exited: $(cat "$stripe_log")"
    sleep 0.1
done
[ -n "$stripe_url" ] || fail "the fake Stripe did not start within 10 s"
export VIDGATE_STRIPE_API_URL="$stripe_url"

# Private addresses are allowed so the test's own webhook receiver on
# 127.0.0.1 gets deliveries for the webhooks page.
NO_COLOR=1 "$vidgate" serve --listen 127.0.0.1:0 "${store_args[@]}" --workers 2 \
    --allow-private-network >"$server_log" 2>&1 &
server_pid=$!
api_base=""
for _ in $(seq 1 300); do
    api_base="$(sed -n 's/^vidgate API base: //p' "$server_log")"
    [ -n "$api_base" ] && break
    kill -0 "$server_pid" 2>/dev/null || fail "the server exited before listening"
    sleep 0.1
done
[ -n "$api_base" ] || fail "the server did not say it was listening within 30 s"

admin() {
    "$vidgate" admin "${store_args[@]}" "$@"
}
# field JSON NAME: one top-level field of the admin CLI's JSON output.
field() {
    node -e 'const v = JSON.parse(process.argv[1])[process.argv[2]];
             if (typeof v !== "string") process.exit(1);
             process.stdout.write(v);' "$1" "$2"
}

# The users of accounts A and B get passwords chosen here (from stdin), so the
# tests sign them straight in. A second user of account B, C, signs in with the
# one-time password the CLI prints, which its first sign-in must replace (the
# people-and-passwords block checks that). Both paths are covered.
a_password="e2e-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
a_account="$(admin account create --name e2e-a --credit-usd 100)" || fail "account create failed"
a_user="$(printf '%s\n' "$a_password" |
    admin user create --account "$(field "$a_account" account_id)" --email a@e2e.test \
        --password-stdin)" || fail "user create (password from stdin) failed"
b_password="e2e-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
b_account="$(admin account create --name e2e-b --credit-usd 100)" || fail "account create failed"
b_user="$(printf '%s\n' "$b_password" |
    admin user create --account "$(field "$b_account" account_id)" --email b@e2e.test \
        --password-stdin)" || fail "user create (password from stdin) failed"
c_user="$(admin user create --account "$(field "$b_account" account_id)" --email c@e2e.test)" ||
    fail "user create (one-time password) failed"

a_account_id="$(field "$a_account" account_id)" || fail "no account_id in: $a_account"
a_api_key="$(field "$a_account" api_key)" || fail "no api_key in: $a_account"
a_key_id="$(field "$a_account" key_id)" || fail "no key_id in: $a_account"
a_webhook_secret="$(field "$a_account" webhook_secret)" || fail "no webhook_secret in: $a_account"
a_email="$(field "$a_user" email)" || fail "no email in: $a_user"
b_account_id="$(field "$b_account" account_id)" || fail "no account_id in: $b_account"
b_email="$(field "$b_user" email)" || fail "no email in: $b_user"
c_email="$(field "$c_user" email)" || fail "no email in: $c_user"
c_password="$(field "$c_user" password)" || fail "user create printed no password"

export VIDGATE_E2E_API_BASE="$api_base"
export VIDGATE_E2E_BASE_URL="${api_base%/api/v1}"
export VIDGATE_E2E_CHROMIUM="$chromium"
export VIDGATE_E2E_STRIPE_URL="$stripe_url"
export VIDGATE_E2E_SCREENSHOTS="$PWD/target/e2e/screenshots/$store"
export VIDGATE_E2E_A_ACCOUNT_ID="$a_account_id" VIDGATE_E2E_A_API_KEY="$a_api_key"
export VIDGATE_E2E_A_KEY_ID="$a_key_id"
export VIDGATE_E2E_A_WEBHOOK_SECRET="$a_webhook_secret"
export VIDGATE_E2E_A_EMAIL="$a_email" VIDGATE_E2E_A_PASSWORD="$a_password"
export VIDGATE_E2E_B_ACCOUNT_ID="$b_account_id"
export VIDGATE_E2E_B_EMAIL="$b_email" VIDGATE_E2E_B_PASSWORD="$b_password"
export VIDGATE_E2E_C_EMAIL="$c_email" VIDGATE_E2E_C_PASSWORD="$c_password"

rm -rf "$VIDGATE_E2E_SCREENSHOTS"
mkdir -p "$VIDGATE_E2E_SCREENSHOTS"
echo "e2e: server at $VIDGATE_E2E_BASE_URL on $store (data in $data_dir)"
# A hung step fails after five minutes instead of holding CI.
if ! node --test --test-timeout=300000 e2e/dashboard.test.mjs; then
    echo "e2e: screenshots taken so far are in $VIDGATE_E2E_SCREENSHOTS" >&2
    fail "browser tests failed"
fi
echo "e2e: screenshots of each page are in $VIDGATE_E2E_SCREENSHOTS"
