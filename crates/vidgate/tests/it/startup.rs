//! `vidgate serve` as an operator deploys it: options that belong to it
//! alone, what it prints when it is ready, secrets from files that never
//! show up in its output, and TLS to PostgreSQL and Redis (with throwaway
//! servers that trust only a private certificate authority).

use crate::test_database;

use crate::support;

use std::path::Path;
use std::process::Command;

use support::services::{
    Certificates, POSTGRES_BIN_VARIABLE, PasswordRedis, REDIS_SERVER_VARIABLE, TlsPostgres,
    test_variable,
};
use test_database::{PostgresTestDatabase, postgres_server_url};

/// A password that must never appear in anything vidgate prints.
const PASSWORD: &str = "hunter2-never-printed";

fn vidgate(arguments: &[&str], environment: &[(&str, &str)]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vidgate"))
        .args(arguments)
        .envs(environment.iter().copied())
        .output()
        .expect("vidgate runs")
}

fn printed(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn text(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

#[test]
fn serve_help_lists_only_its_own_options_and_no_secret() {
    let database_url = format!("postgres://vidgate:{PASSWORD}@db.internal/vidgate");
    let redis_url = format!("redis://:{PASSWORD}@cache.internal:6379");
    let environment = [
        ("VIDGATE_DATABASE_URL", database_url.as_str()),
        ("VIDGATE_REDIS_URL", redis_url.as_str()),
    ];
    let serve_help = vidgate(&["serve", "--help"], &environment);
    assert!(serve_help.status.success());
    let serve_help = printed(&serve_help);
    assert!(serve_help.contains("--database-url"), "{serve_help}");
    assert!(serve_help.contains("--redis-url"), "{serve_help}");
    for client_option in ["--base-url", "--api-key", "--json"] {
        assert!(!serve_help.contains(client_option), "{serve_help}");
    }
    assert!(!serve_help.contains(PASSWORD), "{serve_help}");

    let admin_help = printed(&vidgate(&["admin", "--help"], &environment));
    assert!(!admin_help.contains("--base-url"), "{admin_help}");
    assert!(!admin_help.contains(PASSWORD), "{admin_help}");

    let client_help = printed(&vidgate(&["models", "--help"], &[]));
    for client_option in ["--base-url", "--api-key", "--json"] {
        assert!(client_help.contains(client_option), "{client_help}");
    }
}

/// `--workers 0` used to start one worker anyway; a node that runs no jobs
/// is `--role api`, and asking for none is refused before anything starts.
#[test]
fn zero_workers_is_refused_naming_the_option() {
    let data_dir = tempfile::tempdir().unwrap();
    for (arguments, environment) in [
        (vec!["serve", "--workers", "0"], vec![]),
        (vec!["serve"], vec![("VIDGATE_WORKERS", "0")]),
    ] {
        let mut arguments = arguments.clone();
        arguments.extend([
            "--data-dir",
            text(data_dir.path()),
            "--listen",
            "127.0.0.1:0",
        ]);
        let output = vidgate(&arguments, &environment);
        assert!(!output.status.success(), "{arguments:?} {environment:?}");
        let printed = printed(&output);
        assert!(printed.contains("--workers"), "{printed}");
        assert!(printed.contains("'0'"), "{printed}");
    }
    assert!(
        std::fs::read_dir(data_dir.path()).unwrap().next().is_none(),
        "nothing was created"
    );
}

#[tokio::test]
async fn a_node_prints_its_bound_address_and_its_public_url_labelled() {
    let data_dir = tempfile::tempdir().unwrap();
    let node = support::start_node(
        &[("VIDGATE_DATA_DIR", text(data_dir.path()))],
        &["--public-url", "https://api.example.com"],
    );
    assert_eq!(node.api_base(), "https://api.example.com/api/v1");
    let listening = node
        .announcements
        .iter()
        .find_map(|line| line.strip_prefix("vidgate is listening on "))
        .expect("a listening line");
    let (bound, public) = listening
        .split_once(' ')
        .expect("the bound address, then the public URL");
    assert_eq!(public, "(public URL https://api.example.com)");
    let bound: std::net::SocketAddr = bound.parse().expect("a socket address");
    assert_ne!(bound.port(), 0);
    // The bound address is where this node really answers.
    let models = reqwest::get(format!("http://{bound}/api/v1/models"))
        .await
        .unwrap();
    assert_eq!(models.status(), reqwest::StatusCode::OK);
}

/// A node whose cap on waits and event streams is lowered alone starts: the
/// cap per account defaults to a part of it, where the fixed default of 256
/// per account refused every node cap up to 256.
#[tokio::test]
async fn a_node_cap_on_waits_lowered_alone_starts() {
    let data_dir = tempfile::tempdir().unwrap();
    let node = support::start_node(
        &[("VIDGATE_DATA_DIR", text(data_dir.path()))],
        &["--max-waits-per-node", "64"],
    );
    let models = reqwest::get(format!("{}/models", node.api_base()))
        .await
        .unwrap();
    assert_eq!(models.status(), reqwest::StatusCode::OK);
}

/// A node whose standard output nobody reads any more (the reader of its
/// pipe went away before it announced itself) still starts and serves: its
/// announcements are for people, not a condition of running.
#[tokio::test]
async fn a_node_whose_output_is_closed_still_serves() {
    let data_dir = tempfile::tempdir().unwrap();
    let port = support::services::free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_vidgate"))
        .args([
            "serve",
            "--role",
            "api",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .env("VIDGATE_DATA_DIR", text(data_dir.path()))
        .env("VIDGATE_LOG", "error")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("vidgate serve starts");
    // Closing the read end makes every announcement fail with a broken pipe.
    drop(child.stdout.take());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let answered = loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the node exited ({status}) when its output was closed");
        }
        match reqwest::get(format!("http://127.0.0.1:{port}/healthz")).await {
            Ok(response) => break response.status(),
            Err(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(error) => panic!("the node never answered: {error}"),
        }
    };
    assert_eq!(answered, reqwest::StatusCode::OK);
    // Still up after it has announced everything it announces at start.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(child.try_wait().unwrap().is_none(), "the node exited");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Starts a node and an admin command with the database URL in a file
/// (`VIDGATE_DATABASE_URL_FILE`) and checks they used it.
fn database_url_from_a_file(database_url: &str) {
    let data_dir = tempfile::tempdir().unwrap();
    let secret_file = data_dir.path().join("database_url");
    std::fs::write(&secret_file, format!("{database_url}\n")).unwrap();
    let environment = [
        ("VIDGATE_DATA_DIR", text(data_dir.path())),
        ("VIDGATE_DATABASE_URL_FILE", text(&secret_file)),
    ];
    let _node = support::start_node(&environment, &[]);
    let created = support::admin(
        &environment,
        &[
            "account",
            "create",
            "--name",
            "from-file",
            "--credit-usd",
            "1",
        ],
    );
    let account_id = created["account_id"].as_str().unwrap();
    // The same database, reached with the plain variable, has the account.
    let shown = support::admin(
        &[("VIDGATE_DATABASE_URL", database_url)],
        &["account", "show", account_id],
    );
    assert_eq!(shown["account_id"], account_id);

    // A value in the plain variable as well is refused, naming both.
    let both = [
        ("VIDGATE_DATA_DIR", text(data_dir.path())),
        ("VIDGATE_DATABASE_URL_FILE", text(&secret_file)),
        ("VIDGATE_DATABASE_URL", database_url),
    ];
    let refusal = support::serve_refused(&both, &[]);
    assert!(
        refusal.contains("VIDGATE_DATABASE_URL and VIDGATE_DATABASE_URL_FILE"),
        "{refusal}"
    );
}

#[test]
fn the_database_url_comes_from_a_file_on_sqlite() {
    let directory = tempfile::tempdir().unwrap();
    let database = directory.path().join("from-file.sqlite");
    database_url_from_a_file(&format!("sqlite://{}", text(&database)));
    assert!(database.exists());
}

#[tokio::test]
async fn the_database_url_comes_from_a_file_on_postgres() {
    let Some(server_url) = postgres_server_url("the_database_url_comes_from_a_file") else {
        return;
    };
    let database = PostgresTestDatabase::create(&server_url).await;
    let url = database.url.clone();
    tokio::task::spawn_blocking(move || database_url_from_a_file(&url))
        .await
        .unwrap();
}

/// `serve` and `admin` with a bad database URL holding a password fail
/// without printing the password, whether the URL comes from the
/// environment or from a file.
fn refused_without_the_password(database_url: &str) {
    let data_dir = tempfile::tempdir().unwrap();
    let secret_file = data_dir.path().join("database_url");
    std::fs::write(&secret_file, database_url).unwrap();
    for (variable, value) in [
        ("VIDGATE_DATABASE_URL", database_url),
        ("VIDGATE_DATABASE_URL_FILE", text(&secret_file)),
    ] {
        let environment = [
            ("VIDGATE_DATA_DIR", text(data_dir.path())),
            (variable, value),
        ];
        let refusal = support::serve_refused(&environment, &[]);
        assert!(!refusal.contains(PASSWORD), "{refusal}");
        assert!(!refusal.trim().is_empty());
        let admin = support::admin_output(&environment, &["account", "show", "acct_x"]);
        assert!(!admin.status.success());
        assert!(!printed(&admin).contains(PASSWORD), "{}", printed(&admin));
    }
}

#[test]
fn a_bad_database_url_is_refused_without_printing_its_password() {
    refused_without_the_password(&format!(
        "postgres://vidgate:{PASSWORD}@127.0.0.1:99999/vidgate"
    ));
    refused_without_the_password(&format!("mysql://vidgate:{PASSWORD}@127.0.0.1/vidgate"));
    refused_without_the_password(&format!(
        "postgres://vidgate:{PASSWORD}@/vidgate?sslmode=bad"
    ));
}

#[test]
fn an_unknown_postgres_user_is_refused_without_printing_the_password() {
    let Some(server_url) = postgres_server_url("an_unknown_postgres_user_is_refused") else {
        return;
    };
    let mut url = reqwest::Url::parse(&server_url).unwrap();
    url.set_username("vidgate_no_such_role").unwrap();
    url.set_password(Some(PASSWORD)).unwrap();
    refused_without_the_password(url.as_str());
}

#[test]
fn postgres_over_tls_verified_against_a_private_authority() {
    let Some(bin) = test_variable(POSTGRES_BIN_VARIABLE, "the PostgreSQL TLS test") else {
        return;
    };
    let certificates = Certificates::new();
    let postgres = TlsPostgres::start(&bin, &certificates);
    let data_dir = tempfile::tempdir().unwrap();
    let verified = postgres.url(&format!(
        "sslmode=verify-full&sslrootcert={}",
        text(&certificates.authority)
    ));
    let environment = [
        ("VIDGATE_DATA_DIR", text(data_dir.path())),
        ("VIDGATE_DATABASE_URL", verified.as_str()),
    ];
    // The cluster refuses every connection without TLS, so a node that
    // starts (and migrates) and an admin command that writes used TLS.
    let _node = support::start_node(&environment, &[]);
    let created = support::admin(
        &environment,
        &["account", "create", "--name", "tls", "--credit-usd", "1"],
    );
    assert!(created["account_id"].as_str().unwrap().starts_with("acct_"));

    // Without TLS the server refuses the node.
    let plain = postgres.url("sslmode=disable");
    let refusal = support::serve_refused(
        &[
            ("VIDGATE_DATA_DIR", text(data_dir.path())),
            ("VIDGATE_DATABASE_URL", plain.as_str()),
        ],
        &[],
    );
    assert!(refusal.contains("no encryption"), "{refusal}");

    // A certificate from an authority the node was not told to trust is
    // refused: the certificate is verified, not only encrypted with.
    let strangers = Certificates::new();
    let unverifiable = postgres.url(&format!(
        "sslmode=verify-full&sslrootcert={}",
        text(&strangers.authority)
    ));
    let refusal = support::serve_refused(
        &[
            ("VIDGATE_DATA_DIR", text(data_dir.path())),
            ("VIDGATE_DATABASE_URL", unverifiable.as_str()),
        ],
        &[],
    );
    assert!(refusal.to_lowercase().contains("certificate"), "{refusal}");
}

#[tokio::test]
async fn redis_with_a_password_over_tls_from_a_file() {
    let Some(program) = test_variable(REDIS_SERVER_VARIABLE, "the Redis password test") else {
        return;
    };
    let certificates = Certificates::new();
    let redis = PasswordRedis::start(&program, PASSWORD, &certificates);
    let data_dir = tempfile::tempdir().unwrap();
    let secret_file = data_dir.path().join("redis_url");
    std::fs::write(
        &secret_file,
        format!("rediss://:{PASSWORD}@127.0.0.1:{}/\n", redis.tls_port),
    )
    .unwrap();
    let environment = [
        ("VIDGATE_DATA_DIR", text(data_dir.path())),
        ("VIDGATE_REDIS_URL_FILE", text(&secret_file)),
        // rustls-native-certs reads the trusted authorities from here.
        ("SSL_CERT_FILE", text(&certificates.authority)),
    ];
    let node = support::start_node(&environment, &[]);
    assert!(
        node.announcements
            .iter()
            .all(|line| !line.contains(PASSWORD)),
        "{:?}",
        node.announcements
    );
    let created = support::admin(
        &environment,
        &["account", "create", "--name", "redis", "--credit-usd", "1"],
    );
    let key = created["api_key"].as_str().unwrap();
    let account = reqwest::Client::new()
        .get(format!("{}/account", node.api_base()))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(account.status(), reqwest::StatusCode::OK);
    // The request's bucket is in this Redis.
    let buckets = Command::new("redis-cli")
        .args([
            "-p",
            &redis.plain_port.to_string(),
            "--no-auth-warning",
            "-a",
        ])
        .args([PASSWORD, "--scan", "--pattern", "vidgate:rate:*"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&buckets.stdout).trim().is_empty(),
        "no rate-limit bucket in Redis"
    );
    drop(node);

    // The plain port takes the same password.
    let plain = format!("redis://:{PASSWORD}@127.0.0.1:{}", redis.plain_port);
    let _plain_node = support::start_node(
        &[
            ("VIDGATE_DATA_DIR", text(data_dir.path())),
            ("VIDGATE_REDIS_URL", plain.as_str()),
        ],
        &[],
    );

    // A wrong password, and an authority the node does not trust, are
    // refused at start without printing the password.
    let wrong = format!("redis://:{PASSWORD}-wrong@127.0.0.1:{}", redis.plain_port);
    let untrusted = format!("rediss://:{PASSWORD}@127.0.0.1:{}", redis.tls_port);
    for redis_url in [wrong, untrusted] {
        let refusal = support::serve_refused(
            &[
                ("VIDGATE_DATA_DIR", text(data_dir.path())),
                ("VIDGATE_REDIS_URL", redis_url.as_str()),
            ],
            &[],
        );
        assert!(!refusal.contains(PASSWORD), "{refusal}");
    }
}
