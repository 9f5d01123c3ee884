//! Start-up checks and upgrades, as an operator meets them: a node refuses
//! to start with one line naming the setting at fault (database not
//! migrated, bucket missing, Redis password missing, backends file broken),
//! `serve --check-config` runs the same checks and changes nothing,
//! `vidgate admin migrate` applies migrations on its own, a node of the
//! previous version serves a schema the next one grew, and nodes starting
//! together on a fresh database log nothing alarming. On both stores where
//! the check involves the database.

use crate::test_database;

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use sqlx::{AssertSqlSafe, Connection};
use support::services::{Certificates, Moto, PasswordRedis, REDIS_SERVER_VARIABLE};
use support::services::{moto_program, test_variable};
use test_database::{PostgresTestDatabase, postgres_server_url};

/// A fresh database of either store, kept until dropped.
struct TestDatabase {
    url: String,
    label: &'static str,
    _sqlite_directory: Option<tempfile::TempDir>,
    _postgres: Option<PostgresTestDatabase>,
}

/// A fresh SQLite database, and a fresh PostgreSQL one when
/// `VIDGATE_TEST_POSTGRES_URL` is set.
async fn fresh_databases(test_name: &str) -> Vec<TestDatabase> {
    let directory = tempfile::tempdir().unwrap();
    let mut databases = vec![TestDatabase {
        url: format!(
            "sqlite://{}",
            directory.path().join("vidgate.sqlite").display()
        ),
        label: "SQLite",
        _sqlite_directory: Some(directory),
        _postgres: None,
    }];
    if let Some(server_url) = postgres_server_url(test_name) {
        let database = PostgresTestDatabase::create(&server_url).await;
        databases.push(TestDatabase {
            url: database.url.clone(),
            label: "PostgreSQL",
            _sqlite_directory: None,
            _postgres: Some(database),
        });
    }
    databases
}

fn text(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

fn vidgate(arguments: &[&str], environment: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vidgate"))
        .args(arguments)
        .envs(environment.iter().copied())
        .env("VIDGATE_LOG", "warn")
        .output()
        .expect("vidgate runs")
}

fn printed(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Asserts that a refusal is one line naming `setting` and returns it.
fn one_line_refusal(refusal: &str, setting: &str) -> String {
    let lines: Vec<&str> = refusal.trim().lines().collect();
    assert_eq!(lines.len(), 1, "not one line: {refusal}");
    let prefix = format!("vidgate: refusing to start: {setting}: ");
    assert!(lines[0].starts_with(&prefix), "{refusal}");
    lines[0].to_owned()
}

/// `serve --check-config`: its exit status and what it printed.
fn check_config(environment: &[(&str, &str)], extra_arguments: &[&str]) -> (bool, String) {
    let mut arguments = vec!["serve", "--check-config"];
    arguments.extend_from_slice(extra_arguments);
    let output = vidgate(&arguments, environment);
    (output.status.success(), printed(&output))
}

#[tokio::test]
async fn with_skip_migrations_a_node_waits_for_admin_migrate() {
    for database in fresh_databases("with_skip_migrations_a_node_waits_for_admin_migrate").await {
        let data_dir = tempfile::tempdir().unwrap();
        let environment = [
            ("VIDGATE_DATA_DIR", text(data_dir.path())),
            ("VIDGATE_DATABASE_URL", database.url.as_str()),
        ];
        let refusal = support::serve_refused(&environment, &["--skip-migrations"]);
        let line = one_line_refusal(&refusal, "--database-url (VIDGATE_DATABASE_URL)");
        assert!(
            line.contains("vidgate admin migrate"),
            "{}: {line}",
            database.label
        );

        let (passed, report) = check_config(&environment, &["--skip-migrations"]);
        assert!(!passed, "{report}");
        assert!(report.contains("FAILED  --database-url"), "{report}");
        // Without --skip-migrations the pending migrations are no failure:
        // the node would apply them.
        let (passed, report) = check_config(&environment, &[]);
        assert!(passed, "{}: {report}", database.label);
        assert!(report.contains("will be applied at start"), "{report}");

        // The checks changed nothing: migrate still finds all of them.
        let applied = support::admin(&environment, &["migrate"]);
        let applied = applied["applied"].as_array().unwrap();
        assert!(!applied.is_empty());
        assert_eq!(applied[0]["version"], 1);
        assert!(applied[0]["description"].is_string());
        let again = support::admin(&environment, &["migrate"]);
        assert_eq!(again["applied"], Value::Array(Vec::new()));

        let node = support::start_node(&environment, &["--skip-migrations"]);
        assert!(node.api_base.is_some());
        let (passed, report) = check_config(&environment, &["--skip-migrations"]);
        assert!(passed, "{report}");
    }
}

/// Grows the schema as the next version would (a column and its
/// migration), with a connection of the test's own.
async fn grow_schema_as_the_next_version(database_url: &str) {
    const NEXT_VERSION: i64 = 9_999;
    let statements = [
        "ALTER TABLE accounts ADD COLUMN added_by_the_next_version TEXT".to_owned(),
        format!(
            "INSERT INTO _sqlx_migrations \
             (version, description, success, checksum, execution_time) \
             VALUES ({NEXT_VERSION}, 'the next version', TRUE, x'00', 0)"
        ),
    ];
    if database_url.starts_with("sqlite:") {
        let mut connection = sqlx::SqliteConnection::connect(database_url).await.unwrap();
        for statement in statements {
            sqlx::query(AssertSqlSafe(statement))
                .execute(&mut connection)
                .await
                .unwrap();
        }
    } else {
        let mut connection = sqlx::PgConnection::connect(database_url).await.unwrap();
        for statement in statements {
            // PostgreSQL writes a byte string as '\x00'.
            let statement = statement.replace("x'00'", "'\\x00'");
            sqlx::query(AssertSqlSafe(statement))
                .execute(&mut connection)
                .await
                .unwrap();
        }
    }
}

#[tokio::test]
async fn a_node_serves_a_schema_the_next_version_grew() {
    for database in fresh_databases("a_node_serves_a_schema_the_next_version_grew").await {
        let data_dir = tempfile::tempdir().unwrap();
        let environment = [
            ("VIDGATE_DATA_DIR", text(data_dir.path())),
            ("VIDGATE_DATABASE_URL", database.url.as_str()),
        ];
        support::admin(&environment, &["migrate"]);
        grow_schema_as_the_next_version(&database.url).await;

        let (passed, report) = check_config(&environment, &["--skip-migrations"]);
        assert!(passed, "{}: {report}", database.label);
        let node = support::start_node(&environment, &[]);
        let created = support::admin(
            &environment,
            &["account", "create", "--name", "old", "--credit-usd", "1"],
        );
        let account = reqwest::Client::new()
            .get(format!("{}/account", node.api_base()))
            .bearer_auth(created["api_key"].as_str().unwrap())
            .send()
            .await
            .unwrap();
        assert_eq!(
            account.status(),
            reqwest::StatusCode::OK,
            "{}",
            database.label
        );
    }
}

#[tokio::test]
async fn a_missing_bucket_is_refused_naming_the_storage_setting() {
    let Some(program) = moto_program("a_missing_bucket_is_refused") else {
        return;
    };
    let moto = Moto::start(&program, "vidgate-present").await;
    let data_dir = tempfile::tempdir().unwrap();
    let environment = |storage: &'static str| {
        [
            ("VIDGATE_DATA_DIR", text(data_dir.path()).to_owned()),
            ("VIDGATE_STORAGE", storage.to_owned()),
            ("AWS_ENDPOINT_URL", moto.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".to_owned()),
            ("AWS_REGION", "us-east-1".to_owned()),
            ("AWS_ACCESS_KEY_ID", "test".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
        ]
    };
    let missing = environment("s3://vidgate-missing/media");
    let missing: Vec<(&str, &str)> = missing
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    let refusal = support::serve_refused(&missing, &[]);
    let line = one_line_refusal(&refusal, "--storage (VIDGATE_STORAGE)");
    assert!(line.contains("probe"), "{line}");
    let (passed, report) = check_config(&missing, &[]);
    assert!(!passed);
    assert!(
        report.contains("FAILED  --storage (VIDGATE_STORAGE)"),
        "{report}"
    );

    let present = environment("s3://vidgate-present/media");
    let present: Vec<(&str, &str)> = present
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    let (passed, report) = check_config(&present, &[]);
    assert!(passed, "{report}");
    assert!(
        report.contains("ok      --storage (VIDGATE_STORAGE)"),
        "{report}"
    );
    // The probe object was deleted again.
    assert_eq!(
        moto.keys("vidgate-present", "media/").await,
        Vec::<String>::new()
    );
}

#[test]
fn redis_without_its_password_is_refused_naming_the_redis_setting() {
    let Some(program) = test_variable(REDIS_SERVER_VARIABLE, "the Redis password check") else {
        return;
    };
    let certificates = Certificates::new();
    let redis = PasswordRedis::start(&program, "the-redis-password", &certificates);
    let data_dir = tempfile::tempdir().unwrap();
    let without_password = format!("redis://127.0.0.1:{}", redis.plain_port);
    let environment = [
        ("VIDGATE_DATA_DIR", text(data_dir.path())),
        ("VIDGATE_REDIS_URL", without_password.as_str()),
    ];
    let refusal = support::serve_refused(&environment, &[]);
    one_line_refusal(&refusal, "--redis-url (VIDGATE_REDIS_URL)");
    let (passed, report) = check_config(&environment, &[]);
    assert!(!passed);
    assert!(report.contains("FAILED  --redis-url"), "{report}");
}

#[test]
fn a_broken_backends_file_is_refused_naming_it() {
    let data_dir = tempfile::tempdir().unwrap();
    let backends_file = data_dir.path().join("backends.json");
    std::fs::write(&backends_file, r#"{"models": {"vendor_9/model_9": {}}}"#).unwrap();
    let environment = [
        ("VIDGATE_DATA_DIR", text(data_dir.path())),
        ("VIDGATE_BACKENDS_FILE", text(&backends_file)),
    ];
    let refusal = support::serve_refused(&environment, &[]);
    one_line_refusal(&refusal, "--backends-file (VIDGATE_BACKENDS_FILE)");
    let (passed, report) = check_config(&environment, &[]);
    assert!(!passed);
    assert!(report.contains("FAILED  --backends-file"), "{report}");
}

/// An operator token on a node whose public URL is not loopback is allowed,
/// but `--check-config` warns: `/admin/v1` then answers where clients reach,
/// unless the proxy blocks it.
#[test]
fn an_operator_token_with_a_public_url_is_warned_about_not_refused() {
    let data_dir = tempfile::tempdir().unwrap();
    let token = "an-operator-token-that-is-long-enough-0123456789";
    let environment = [
        ("VIDGATE_DATA_DIR", text(data_dir.path())),
        ("VIDGATE_ADMIN_TOKEN", token),
    ];
    let (passed, report) = check_config(&environment, &["--public-url", "https://api.example.com"]);
    assert!(passed, "{report}");
    let warnings: Vec<&str> = report
        .lines()
        .filter(|line| line.starts_with("WARNING"))
        .collect();
    assert_eq!(warnings.len(), 1, "{report}");
    assert!(warnings[0].contains("/admin/v1") && warnings[0].contains("api.example.com"));
    assert!(!report.contains(token), "{report}");
    let (passed, report) = check_config(&environment, &["--public-url", "http://127.0.0.1:8080"]);
    assert!(passed, "{report}");
    assert!(!report.contains("WARNING"), "{report}");
}

/// Issue 40: a newcomer starts at a model maker's own API with its key
/// and one flag, the maker's example file as shipped. With only the key
/// set, the binary's own check of the file passes (the maker publishes no
/// schema, so its targets are shown for a comparison by hand, which is no
/// failure), and the key is never printed.
#[test]
fn a_makers_example_file_needs_only_its_key() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hosted");
    for (file, variable) in [
        ("modelark.json", "ARK_API_KEY"),
        ("dashscope.json", "DASHSCOPE_API_KEY"),
    ] {
        let data_dir = tempfile::tempdir().unwrap();
        let key = "a-newcomers-own-key-0123456789";
        let environment = [("VIDGATE_DATA_DIR", text(data_dir.path())), (variable, key)];
        let example = examples.join(file);
        let (passed, report) = check_config(&environment, &["--backends-file", text(&example)]);
        assert!(passed, "{file}: {report}");
        assert!(
            report.contains("ok      --backends-file"),
            "{file}: {report}"
        );
        assert!(!report.contains(key), "{file}: {report}");
    }
}

#[test]
fn a_sound_single_node_configuration_passes_every_check() {
    let data_dir = tempfile::tempdir().unwrap();
    let (passed, report) = check_config(&[("VIDGATE_DATA_DIR", text(data_dir.path()))], &[]);
    assert!(passed, "{report}");
    for setting in ["--database-url", "--storage"] {
        assert!(report.contains(&format!("ok      {setting}")), "{report}");
    }
}

#[tokio::test]
async fn nodes_starting_together_on_a_fresh_database_log_nothing_alarming() {
    let Some(server_url) = postgres_server_url("nodes_starting_together") else {
        return;
    };
    let database = PostgresTestDatabase::create(&server_url).await;
    let directory = tempfile::tempdir().unwrap();
    let nodes: Vec<_> = (0..3)
        .map(|index| {
            let url = database.url.clone();
            let data_dir = directory.path().join(format!("node-{index}"));
            let log = directory.path().join(format!("node-{index}.log"));
            std::thread::spawn(move || {
                let node = support::start_node_logging_to(
                    &[
                        ("VIDGATE_DATABASE_URL", url.as_str()),
                        ("VIDGATE_DATA_DIR", text(&data_dir)),
                    ],
                    &[],
                    &log,
                );
                (node, log)
            })
        })
        .collect();
    let nodes: Vec<_> = nodes.into_iter().map(|node| node.join().unwrap()).collect();
    for (_node, log) in &nodes {
        let log = std::fs::read_to_string(log).unwrap();
        assert!(log.contains("vidgate started"), "{log}");
        for alarming in ["WARN", "ERROR", "already exists"] {
            assert!(!log.contains(alarming), "{alarming} in:\n{log}");
        }
    }
}
