#!/usr/bin/env python3
"""Issue 52's question: does PostgreSQL's submit function
(`migrations/postgres/functions/vidgate_submit_generation.sql`, and the batch
`vidgate_submit_generations.sql`) earn its keep over the same statements
sent one by one in one transaction, as `store/submit.rs` sends them on SQLite?

It writes pgbench scripts for both (a lone submit, and a batch of 16 or 64
as group commit makes them), seeds 1,000 accounts with 200 finished
generations each (so the planner has the statistics of a service in use:
after an ANALYZE of an empty table the function's cached plans were several
times slower, which is not what production sees), and runs each shape with
the function and with the statements in turns, three rounds, resetting the
new rows before every run. It prints every run and the best of each.

    target/debug/vidgate serve --database-url postgres://…/<fresh db>   # migrates; stop it
    python3 scripts/submit_function_bench.py postgres://…/<fresh db>

Figures are printed, never asserted; they go in BENCHMARKS.md (session 21).
"""

import argparse
import collections
import os
import re
import subprocess
import tempfile

INPUT = ('{"prompt":"a red fox running through fresh snow at dawn, cinematic, slow motion",'
         '"duration":5,"resolution":"720p","aspect_ratio":"16:9"}')
NOW = "(extract(epoch from clock_timestamp())*1000)::bigint"
ACCOUNT_COLUMNS = (
    "id, name, balance_micros, held_micros, captured_micros, credited_micros, debt_micros, "
    "rate_per_second, rate_burst, max_concurrent, webhook_secret, previous_webhook_secret, "
    "previous_webhook_secret_expires_at, created_at, deleted_at, low_balance_threshold_micros, "
    "low_balance_webhook_url, low_balance_alerted")
ACCOUNTS = 1000

SEED = f"""
TRUNCATE ledger_entries, generation_media, webhook_deliveries, provider_jobs,
    provider_webhook_deliveries, generations, api_keys, accounts CASCADE;
INSERT INTO accounts (id, name, balance_micros, max_concurrent, webhook_secret, created_at)
    SELECT g::text, 'bench ' || g, 1000000000000000, 1000000000, 'whsec', 0
    FROM generate_series(1, {ACCOUNTS}) g;
INSERT INTO api_keys (id, account_id, name, prefix, secret_sha256, created_at)
    SELECT g::text, g::text, 'k', 'vg_' || g, md5(g::text), 0 FROM generate_series(1, {ACCOUNTS}) g;
INSERT INTO generations (id, account_id, api_key_id, model, endpoint, mode, status, input, output,
    price_micros, official_micros, source, idempotency_key, request_sha256, attempts,
    max_attempts, created_at, started_at, completed_at)
    SELECT 'old_' || g, (g % {ACCOUNTS} + 1)::text, (g % {ACCOUNTS} + 1)::text, 'vendor/model',
        'text-to-video', 'standard', 'succeeded', '{INPUT}', '{{"video_url":"https://example.com/v.mp4"}}',
        1000, 800, 'api', CASE WHEN g % 3 = 0 THEN 'old' || g END,
        CASE WHEN g % 3 = 0 THEN 'abc' END, 1, 3, 1700000000000 + g, 1700000000000 + g,
        1700000000000 + g
    FROM generate_series(1, 200 * {ACCOUNTS}) g;
INSERT INTO ledger_entries (account_id, generation_id, kind, amount_micros, created_at)
    SELECT account_id, id, 'capture', 1000, created_at FROM generations;
"""

RESET = """
DELETE FROM ledger_entries WHERE generation_id NOT LIKE 'old_%';
DELETE FROM generations WHERE id NOT LIKE 'old_%';
UPDATE accounts SET balance_micros = 1000000000000000, held_micros = 0;
VACUUM ANALYZE generations;
VACUUM ANALYZE ledger_entries;
VACUUM ANALYZE accounts;
"""


def idempotency(item, keyed):
    """The key and digest a submit binds: both NULL without a key."""
    if not keyed:
        return "NULL", "NULL"
    return f"'idem' || :r{item}", "'0123456789abcdef0123456789abcdef'"


def statements(item, keyed):
    """What store/submit.rs sends for one submit that is created: the
    account locked, the replay (with a key), the cap, the key's limit, the
    insert, the hold (`Movement::Hold`), its ledger row, the announcement."""
    account, generation = f":a{item}", f":r{item}"
    key, digest = idempotency(item, keyed)
    sent = [f"SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE id = {account} FOR UPDATE;"]
    if keyed:
        sent += [
            f"UPDATE generations SET idempotency_key = NULL WHERE account_id = {account} "
            f"AND idempotency_key = {key} AND created_at < {NOW} - 86400000;",
            f"SELECT id, request_sha256 FROM generations WHERE account_id = {account} "
            f"AND idempotency_key = {key};",
        ]
    return sent + [
        f"SELECT COUNT(*) FROM generations WHERE account_id = {account} "
        "AND status IN ('queued', 'running');",
        f"SELECT spend_limit_micros, spend_limit_period FROM api_keys WHERE id = {account};",
        "INSERT INTO generations (id, account_id, api_key_id, model, endpoint, mode, status, "
        "input, price_micros, official_micros, source, webhook_url, idempotency_key, "
        "request_sha256, max_attempts, created_at) "
        f"VALUES ({generation}, {account}, {account}, 'vendor/model', 'text-to-video', "
        f"'standard', 'queued', '{INPUT}', 1000, 800, 'api', NULL, {key}, {digest}, 3, {NOW});",
        "UPDATE accounts SET balance_micros = balance_micros - 1000, held_micros = held_micros "
        f"+ 1000 WHERE id = {account} RETURNING balance_micros - debt_micros, "
        "low_balance_threshold_micros, low_balance_alerted;",
        "INSERT INTO ledger_entries (account_id, generation_id, kind, amount_micros, created_at, "
        f"reference) VALUES ({account}, {generation}, 'hold', 1000, {NOW}, NULL);",
        f"SELECT pg_notify('vidgate_work', {generation});",
    ]


def variables(accounts, batch):
    """A lone submit picks an account at random; a batch's items take
    consecutive accounts, so every batch locks accounts in one order (as the
    function's account order does) and two batches cannot deadlock."""
    lines = []
    for item in range(1, batch + 1):
        if batch == 1:
            lines.append(f"\\set a{item} random(1, {accounts})")
        elif accounts == 1:
            lines.append(f"\\set a{item} 1")
        else:
            if item == 1:
                lines.append(f"\\set base random(0, {accounts - batch})")
            lines.append(f"\\set a{item} :base + {item}")
        lines.append(f"\\set r{item} random(1, 1000000000000000)")
    return lines


def function_script(accounts, batch, keyed):
    lines = variables(accounts, batch)
    if batch == 1:
        key, digest = idempotency(1, keyed)
        lines.append(
            "SELECT outcome, generation_id, balance, concurrency_limit FROM "
            f"vidgate_submit_generation(:r1, :a1, :a1, 'vendor/model', 'text-to-video', "
            f"'standard', '{INPUT}', 1000, 800, NULL, {key}, {digest}, 3, {NOW}, 86400000, "
            "'vidgate_work', NULL);")
        return lines
    items = range(1, batch + 1)

    def array(values, sql_type):
        return "ARRAY[" + ", ".join(values) + f"]::{sql_type}[]"

    def same(value):
        return [value] * batch

    keys = [idempotency(item, keyed) for item in items]
    arguments = [
        array([f":r{item}" for item in items], "text"),
        array([f":a{item}" for item in items], "text"),
        array([f":a{item}" for item in items], "text"),
        array(same("'vendor/model'"), "text"),
        array(same("'text-to-video'"), "text"),
        array(same("'standard'"), "text"),
        array(same(f"'{INPUT}'"), "text"),
        array(same("1000"), "bigint"),
        array(same("800"), "bigint"),
        array(same("NULL"), "text"),
        array([key for key, _ in keys], "text"),
        array([digest for _, digest in keys], "text"),
        array(same("3"), "bigint"),
        NOW, "86400000", "'vidgate_work'",
        array(same("NULL"), "text"),
    ]
    lines.append("SELECT item, outcome, generation_id, balance, concurrency_limit FROM "
                 "vidgate_submit_generations(" + ", ".join(arguments) + ");")
    return lines


def statements_script(accounts, batch, keyed):
    lines = variables(accounts, batch) + ["BEGIN;"]
    for item in range(1, batch + 1):
        lines += statements(item, keyed)
    return lines + ["COMMIT;"]


# (accounts, submits per transaction, with an idempotency key, pgbench clients):
# ten clients are the PostgreSQL pool's connections; one and two clients are
# one and two nodes' batch tasks (group commit sends one batch at a time).
SHAPES = [
    (ACCOUNTS, 1, False, 1),
    (ACCOUNTS, 1, False, 10),
    (1, 1, False, 10),
    (ACCOUNTS, 1, True, 10),
    (ACCOUNTS, 16, False, 1),
    (ACCOUNTS, 64, False, 1),
    (1, 64, False, 1),
    (ACCOUNTS, 64, False, 2),
]


def psql(url, text):
    subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", url], input=text, text=True,
                   check=True, capture_output=True)


def pgbench(url, script, clients, seconds):
    result = subprocess.run(
        ["pgbench", "-n", "-M", "prepared", f"-c{clients}", f"-j{min(clients, 2)}",
         f"-T{seconds}", "-f", script, url], text=True, capture_output=True, check=True)
    tps = float(re.search(r"tps = ([\d.]+)", result.stdout).group(1))
    latency = float(re.search(r"latency average = ([\d.]+)", result.stdout).group(1))
    return tps, latency


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("database_url", help="a fresh database migrated by vidgate")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    psql(arguments.database_url, SEED)
    best = collections.defaultdict(lambda: (0.0, float("inf")))
    with tempfile.TemporaryDirectory() as directory:
        for round_number in range(arguments.rounds):
            for accounts, batch, keyed, clients in SHAPES:
                ways = [("function", function_script), ("statements", statements_script)]
                if round_number % 2:
                    ways.reverse()
                for way, script in ways:
                    path = os.path.join(directory, f"{way}.sql")
                    with open(path, "w") as file:
                        file.write("\n".join(script(accounts, batch, keyed)) + "\n")
                    psql(arguments.database_url, RESET)
                    tps, latency = pgbench(arguments.database_url, path, clients,
                                           arguments.seconds)
                    shape = (f"{accounts} account(s), {batch} a transaction"
                             f"{', keyed' if keyed else ''}, {clients} client(s)")
                    print(f"{shape:50} {way:10} {tps * batch:8.0f} submits/s "
                          f"{latency:7.1f} ms a transaction", flush=True)
                    tps_best, latency_best = best[(shape, way)]
                    best[(shape, way)] = (max(tps_best, tps * batch), min(latency_best, latency))
    print("\nbest of each:")
    for (shape, way), (submits, latency) in best.items():
        print(f"{shape:50} {way:10} {submits:8.0f} submits/s {latency:7.1f} ms")


if __name__ == "__main__":
    main()
