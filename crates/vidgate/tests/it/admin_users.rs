//! `vidgate admin user create`, and signing in to the dashboard of a real
//! `vidgate serve` with the password it printed or was given.

use crate::support;

use std::io::Write;
use std::process::{Command, Stdio};

use reqwest::{StatusCode, redirect};
use serde_json::Value;
use support::{admin, admin_output, start_node};

/// Signs in on the dashboard of the node at `api_base`; the status of the
/// form post.
async fn sign_in(api_base: &str, email: &str, password: &str) -> StatusCode {
    sign_in_with_cookie(api_base, email, password).await.0
}

/// Signs in; the status of the form post and the session cookie it set.
async fn sign_in_with_cookie(
    api_base: &str,
    email: &str,
    password: &str,
) -> (StatusCode, Option<String>) {
    let base = api_base.trim_end_matches("/api/v1");
    let client = reqwest::Client::builder()
        .redirect(redirect::Policy::none())
        .build()
        .unwrap();
    let form = client
        .get(format!("{base}/dashboard/sign-in"))
        .send()
        .await
        .unwrap();
    let cookie = form.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let csrf = cookie.split_once('=').unwrap().1.to_owned();
    let encode = |text: &str| -> String {
        text.bytes()
            .map(|byte| {
                if byte.is_ascii_alphanumeric() {
                    char::from(byte).to_string()
                } else {
                    format!("%{byte:02X}")
                }
            })
            .collect()
    };
    let posted = client
        .post(format!("{base}/dashboard/sign-in"))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "email={}&password={}&csrf_token={}",
            encode(email),
            encode(password),
            encode(&csrf)
        ))
        .send()
        .await
        .unwrap();
    let session = posted
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|value| {
            value
                .to_str()
                .unwrap()
                .split(';')
                .next()
                .unwrap()
                .to_owned()
        })
        .find(|pair| pair.starts_with("vg_session="));
    (posted.status(), session)
}

/// The status of the password page for a session cookie (200 signed in, a
/// redirect to the sign-in page otherwise). It is the page every signed-in
/// user may open: one with a one-time password is sent there from the
/// others until they choose their own.
async fn signed_in_page_status(api_base: &str, session: &str) -> StatusCode {
    let client = reqwest::Client::builder()
        .redirect(redirect::Policy::none())
        .build()
        .unwrap();
    client
        .get(format!(
            "{}/dashboard/password",
            api_base.trim_end_matches("/api/v1")
        ))
        .header("cookie", session)
        .send()
        .await
        .unwrap()
        .status()
}

/// The arguments of `vidgate admin user create` for `email` in `account_id`.
fn user_create<'a>(account_id: &'a str, email: &'a str) -> [&'a str; 6] {
    ["user", "create", "--account", account_id, "--email", email]
}

/// A fresh data directory with one account, "team", that the admin CLI
/// made.
struct TeamAccount {
    data_dir: tempfile::TempDir,
    account_id: String,
}

impl TeamAccount {
    fn create() -> TeamAccount {
        let mut team = TeamAccount {
            data_dir: tempfile::tempdir().unwrap(),
            account_id: String::new(),
        };
        let account = admin(
            &team.environment(),
            &["account", "create", "--name", "team"],
        );
        team.account_id = account["account_id"].as_str().unwrap().to_owned();
        team
    }

    /// The environment that points the CLI and the server at the data
    /// directory.
    fn environment(&self) -> [(&'static str, &str); 1] {
        [("VIDGATE_DATA_DIR", self.data_dir.path().to_str().unwrap())]
    }
}

#[tokio::test]
async fn created_users_sign_in_with_their_password() {
    let team = TeamAccount::create();
    let environment = team.environment();
    let account_id = team.account_id.as_str();

    let created = admin(&environment, &user_create(account_id, "Ada@Example.com"));
    assert!(created["id"].as_str().unwrap().starts_with("usr_"));
    assert_eq!(created["account_id"], account_id);
    assert_eq!(created["email"], "ada@example.com");
    let one_time = created["password"].as_str().unwrap().to_owned();
    assert!(one_time.len() >= 20, "{one_time}");

    // The same email in other letters is the same user.
    let duplicate = admin_output(&environment, &user_create(account_id, "ADA@example.com"));
    assert!(!duplicate.status.success());
    let missing = admin_output(&environment, &user_create("acct_missing", "x@example.com"));
    assert!(!missing.status.success());

    let mut child = Command::new(env!("CARGO_BIN_EXE_vidgate"))
        .args(["admin", "user", "create", "--account", account_id])
        .args(["--email", "bob@example.com", "--password-stdin"])
        .envs(environment)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "bob's long password").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let from_stdin: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(from_stdin["email"], "bob@example.com");
    assert!(from_stdin.get("password").is_none(), "{from_stdin}");

    let node = start_node(&environment, &[]);
    let api_base = node.api_base();
    assert_eq!(
        sign_in(api_base, "ada@example.com", &one_time).await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        sign_in(api_base, "bob@example.com", "bob's long password").await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        sign_in(api_base, "bob@example.com", "not bob's password").await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn users_are_signed_out_everywhere_and_removed() {
    let team = TeamAccount::create();
    let environment = team.environment();
    let account_id = team.account_id.as_str();
    let created = admin(&environment, &user_create(account_id, "ada@example.com"));
    let password = created["password"].as_str().unwrap().to_owned();
    let node = start_node(&environment, &[]);
    let api_base = node.api_base();

    let (_, first) = sign_in_with_cookie(api_base, "ada@example.com", &password).await;
    let (_, second) = sign_in_with_cookie(api_base, "ada@example.com", &password).await;
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(
        signed_in_page_status(api_base, &first).await,
        StatusCode::OK
    );

    let revoked = admin(
        &environment,
        &["user", "revoke-sessions", "Ada@Example.com"],
    );
    assert_eq!(revoked["sessions_revoked"], 2);
    assert_ne!(
        signed_in_page_status(api_base, &first).await,
        StatusCode::OK
    );
    assert_ne!(
        signed_in_page_status(api_base, &second).await,
        StatusCode::OK
    );

    // Signed out is not locked out: the user signs in again.
    let (status, third) = sign_in_with_cookie(api_base, "ada@example.com", &password).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let third = third.unwrap();
    assert_eq!(
        signed_in_page_status(api_base, &third).await,
        StatusCode::OK
    );

    let removed = admin(&environment, &["user", "remove", "ada@example.com"]);
    assert_eq!(removed["removed"], true);
    assert_ne!(
        signed_in_page_status(api_base, &third).await,
        StatusCode::OK
    );
    assert_eq!(
        sign_in(api_base, "ada@example.com", &password).await,
        StatusCode::UNAUTHORIZED
    );
    assert!(
        !admin_output(&environment, &["user", "remove", "ada@example.com"])
            .status
            .success()
    );
}
