//! What vidgate's figures are divided by: the same work done with nothing
//! of vidgate in the way, measured in the same run on the same machine.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use axum::Json;
use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode, header};
use axum::routing::get;
use serde_json::Value;

/// A document a reference serves as it is, with the entity tag vidgate
/// gave it.
pub struct Document {
    /// The reference's path for it, such as `/models`.
    pub path: String,
    pub body: Bytes,
    pub etag: HeaderValue,
}

/// A bare axum router (no middleware, no store) on its own two-thread
/// runtime, like a server process has on two cores: `GET /` serves
/// `generation` as JSON, serialised per request as a handler that builds
/// its answer does; each document's path answers its bytes as they are, and
/// `{path}/304` answers `304 Not Modified` with its tag, what a conditional
/// GET of a document the client holds costs with nothing in the way.
pub fn start_bare_handler(generation: Value, documents: &[Document]) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.set_nonblocking(true).unwrap();
    let address = listener.local_addr().unwrap();
    let mut router = axum::Router::new().route(
        "/",
        get(move || {
            let body = generation.clone();
            async move { Json(body) }
        }),
    );
    for document in documents {
        let body = document.body.clone();
        let etag = document.etag.clone();
        router = router
            .route(
                &document.path,
                get(move || {
                    let body = body.clone();
                    async move { ([(header::CONTENT_TYPE, "application/json")], body) }
                }),
            )
            .route(
                &format!("{}/304", document.path),
                get(move || {
                    let etag = etag.clone();
                    async move { (StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]) }
                }),
            );
    }
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, router).await.unwrap();
        });
    });
    address
}

/// The shape of a submit's transaction, with Python's sqlite3 on one
/// connection: lock (BEGIN IMMEDIATE), read the account, count its active
/// generations, insert the generation, take the hold, insert the ledger row,
/// commit. Prints transactions per second.
const SQLITE_SUBMIT_SHAPE: &str = r#"
import sqlite3, sys, time, uuid
path, synchronous, seconds, account = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
db = sqlite3.connect(path, isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=" + synchronous)
db.execute("PRAGMA foreign_keys=ON")
db.execute("PRAGMA busy_timeout=10000")
body = '{"prompt":"benchmark","duration":5,"resolution":"720p","aspect_ratio":"16:9","generate_audio":false}'
done = 0
started = time.monotonic()
while time.monotonic() - started < seconds:
    generation = "gen_" + uuid.uuid4().hex
    now = int(time.time() * 1000)
    db.execute("BEGIN IMMEDIATE")
    db.execute("SELECT balance_micros, max_concurrent FROM accounts WHERE id = ?", (account,)).fetchone()
    db.execute("SELECT COUNT(*) FROM generations WHERE account_id = ? AND status IN ('queued', 'running')", (account,)).fetchone()
    db.execute("INSERT INTO generations (id, account_id, model, endpoint, mode, status, input, price_micros, official_micros, source, max_attempts, created_at) VALUES (?, ?, 'vendor_1/model_1', 'vendor_1/model_1/text-to-video', 'text-to-video', 'queued', ?, 250000, 300000, 'api', 3, ?)", (generation, account, body, now))
    db.execute("UPDATE accounts SET balance_micros = balance_micros - 250000, held_micros = held_micros + 250000 WHERE id = ?", (account,))
    db.execute("INSERT INTO ledger_entries (account_id, generation_id, kind, amount_micros, created_at) VALUES (?, ?, 'hold', 250000, ?)", (account, generation, now))
    db.execute("COMMIT")
    done += 1
print(done / (time.monotonic() - started))
"#;

/// Runs the submit-shaped transaction on `database` (a vidgate SQLite file
/// with `account` in it) for `seconds`; transactions per second.
pub fn sqlite_submit_shape(database: &Path, synchronous: &str, seconds: u64, account: &str) -> f64 {
    let output = Command::new("python3")
        .arg("-c")
        .arg(SQLITE_SUBMIT_SHAPE)
        .arg(database)
        .arg(synchronous)
        .arg(seconds.to_string())
        .arg(account)
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "the SQLite reference failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("the SQLite reference prints a rate")
}

/// The same shape for pgbench, on the accounts `pgbench_1` … `pgbench_N`
/// (the account row locked with `FOR UPDATE`, as vidgate does across nodes).
/// The request body is built with `json_build_object` because pgbench reads
/// every `:name` in a statement as a variable, a JSON literal's included.
const POSTGRES_SUBMIT_SHAPE: &str = r#"\set n random(1, :accounts)
BEGIN;
SELECT balance_micros, max_concurrent FROM accounts WHERE id = 'pgbench_' || :n FOR UPDATE;
SELECT COUNT(*) FROM generations WHERE account_id = 'pgbench_' || :n AND status IN ('queued', 'running');
INSERT INTO generations (id, account_id, model, endpoint, mode, status, input, price_micros, official_micros, source, max_attempts, created_at) VALUES ('pgb_' || gen_random_uuid(), 'pgbench_' || :n, 'vendor_1/model_1', 'vendor_1/model_1/text-to-video', 'text-to-video', 'queued', json_build_object('prompt', 'benchmark', 'duration', 5, 'resolution', '720p', 'aspect_ratio', '16' || chr(58) || '9', 'generate_audio', false)::text, 250000, 300000, 'api', 3, 0) RETURNING id AS generation \gset
UPDATE accounts SET balance_micros = balance_micros - 250000, held_micros = held_micros + 250000 WHERE id = 'pgbench_' || :n;
INSERT INTO ledger_entries (account_id, generation_id, kind, amount_micros, created_at) VALUES ('pgbench_' || :n, :generation, 'hold', 250000, 0);
END;
"#;

/// Runs the submit-shaped transaction with pgbench (`clients` connections,
/// prepared statements) over `accounts` accounts; transactions per second.
/// PostgreSQL's own prepared point read of one stored generation by id and
/// account (the statement of `GET /generations/{id}`, its columns and its
/// key), by pgbench with `clients` clients: the database's limit for that
/// read on this machine.
pub fn postgres_point_read(
    database_url: &str,
    directory: &Path,
    clients: u32,
    generation_id: &str,
    account_id: &str,
    seconds: u64,
) -> f64 {
    let script = directory.join("point_read.sql");
    std::fs::write(
        &script,
        format!(
            "SELECT id, account_id, model, endpoint, mode, status, input, output, error, \
             price_micros, official_micros, source, webhook_url, attempts, created_at, \
             started_at, completed_at FROM generations \
             WHERE id = '{generation_id}' AND account_id = '{account_id}';\n"
        ),
    )
    .unwrap();
    pgbench_tps(
        &["-n", "-M", "prepared", "-j", "2"],
        clients,
        seconds,
        &script,
        database_url,
    )
}

/// Runs pgbench with `arguments`, `clients` clients for `seconds` over
/// `script`; its transactions per second.
fn pgbench_tps(
    arguments: &[&str],
    clients: u32,
    seconds: u64,
    script: &Path,
    database_url: &str,
) -> f64 {
    let output = Command::new("pgbench")
        .args(arguments)
        .arg(format!("-c{clients}"))
        .arg(format!("-T{seconds}"))
        .arg("-f")
        .arg(script)
        .arg(database_url)
        .output()
        .expect("pgbench runs (apt-get install postgresql-client)");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "pgbench failed: {report}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    report
        .lines()
        .find_map(|line| line.trim().strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("unexpected pgbench report:\n{report}"))
}

pub fn postgres_submit_shape(
    database_url: &str,
    directory: &Path,
    clients: u32,
    accounts: u32,
    seconds: u64,
) -> f64 {
    let script = directory.join("submit_shape.sql");
    std::fs::write(&script, POSTGRES_SUBMIT_SHAPE).unwrap();
    let accounts = format!("accounts={accounts}");
    pgbench_tps(
        &["-n", "-M", "prepared", "-j", "2", "-D", &accounts],
        clients,
        seconds,
        &script,
        database_url,
    )
}
