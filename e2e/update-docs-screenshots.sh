#!/usr/bin/env bash
# Copies the README's dashboard screenshots from the last `e2e/run.sh` on
# SQLite (target/e2e/screenshots/sqlite/, numbered in test order) into
# docs/screenshots/, under names that do not change with the numbering.
# Run it after e2e/run.sh when the dashboard's look changed, and commit the
# pictures with the change.
set -euo pipefail
cd "$(dirname "$0")/.."
shots=target/e2e/screenshots/sqlite
# docs name = the e2e screenshot's name without its number.
pictures=(
    "overview:overview-chart-44b"
    "phone-ledger:phone-ledger-44b"
    "playground:playground-44a-queued"
    "webhooks:webhooks-next-attempt-44b"
    "people:people-44b-invited"
    "phone-overview:phone-overview-44b"
)
for picture in "${pictures[@]}"; do
    name="${picture%%:*}"
    shot="${picture#*:}"
    found=("$shots"/[0-9][0-9]-"$shot".png)
    if [ ! -f "${found[0]}" ]; then
        echo "no screenshot $shot in $shots: run e2e/run.sh first" >&2
        exit 1
    fi
    cp "${found[0]}" "docs/screenshots/$name.png"
    echo "docs/screenshots/$name.png <- ${found[0]}"
done
