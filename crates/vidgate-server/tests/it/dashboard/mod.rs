//! The account dashboard over real HTTP, on both stores: sign-in and its
//! limits, sessions as API callers, CSRF, sign-out, keys, generations, the
//! playground's form path, webhooks, sign-up, people and passwords, and the
//! isolation of accounts.

use crate::common::{self, set_account_limits};

mod account_pages;
mod generations_pages;
mod money_pages;
mod people_keys;
mod people_pages;
mod sign_in;

use std::collections::HashMap;
use std::time::Duration;

use reqwest::header::{HeaderMap, LOCATION};
use reqwest::{Client, StatusCode, redirect};
use serde_json::Value;
use vidgate_server::ServerOptions;
use vidgate_server::application::accounts::CreatedAccount;
use vidgate_server::application::users;
use vidgate_server::store::AccountLimits;

use common::{
    M1_T2V, StoreKind, TestApp, TestSettings, on_both_stores, quick_body, spawn_app, spawn_app_with,
};

const PASSWORD: &str = "correct horse battery staple";

/// A browser without JavaScript: follows no redirects (tests look at them)
/// and keeps the cookies the server sets.
struct Browser {
    client: Client,
    base: String,
    cookies: HashMap<String, String>,
}

struct Page {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Page {
    fn location(&self) -> &str {
        self.headers
            .get(LOCATION)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
    }

    /// The page's CSRF token, from its `<meta name="csrf-token">`.
    fn csrf_token(&self) -> String {
        let marker = "<meta name=\"csrf-token\" content=\"";
        let start = self.body.find(marker).expect("a csrf-token meta tag") + marker.len();
        let end = start + self.body[start..].find('"').unwrap();
        self.body[start..end].to_owned()
    }

    fn set_cookie(&self, name: &str) -> Option<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .find(|value| value.starts_with(&format!("{name}=")))
            .map(str::to_owned)
    }
}

/// `application/x-www-form-urlencoded`, encoding every byte that is not
/// alphanumeric.
fn form_body(fields: &[(&str, &str)]) -> String {
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
    fields
        .iter()
        .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

impl Browser {
    fn new(app: &TestApp) -> Browser {
        Browser::at(&app.api_base)
    }

    fn at(api_base: &str) -> Browser {
        Browser {
            client: Client::builder()
                .redirect(redirect::Policy::none())
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            base: api_base.trim_end_matches("/api/v1").to_owned(),
            cookies: HashMap::new(),
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn finish(&mut self, response: reqwest::Response) -> Page {
        for value in response.headers().get_all("set-cookie") {
            let text = value.to_str().unwrap();
            let pair = text.split(';').next().unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            if value.is_empty() || text.contains("Max-Age=0") {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_owned(), value.to_owned());
            }
        }
        Page {
            status: response.status(),
            headers: response.headers().clone(),
            body: response.text().await.unwrap(),
        }
    }

    async fn get(&mut self, path: &str) -> Page {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .header("cookie", self.cookie_header())
            .send()
            .await
            .unwrap();
        self.finish(response).await
    }

    async fn post(&mut self, path: &str, fields: &[(&str, &str)]) -> Page {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .header("cookie", self.cookie_header())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form_body(fields))
            .send()
            .await
            .unwrap();
        self.finish(response).await
    }

    /// An API request with the session cookie only, as the playground makes.
    async fn api(
        &self,
        method: reqwest::Method,
        path: &str,
        csrf: Option<&str>,
    ) -> reqwest::Response {
        let mut request = self
            .client
            .request(method, format!("{}/api/v1{path}", self.base))
            .header("cookie", self.cookie_header());
        if let Some(csrf) = csrf {
            request = request.header("x-csrf-token", csrf);
        }
        request.send().await.unwrap()
    }

    async fn sign_in_attempt(&mut self, email: &str, password: &str) -> Page {
        let form = self.get("/dashboard/sign-in").await;
        assert_eq!(form.status, StatusCode::OK);
        let csrf = form.csrf_token();
        self.post(
            "/dashboard/sign-in",
            &[
                ("email", email),
                ("password", password),
                ("csrf_token", &csrf),
            ],
        )
        .await
    }

    /// Signs in and returns the session's CSRF token.
    async fn sign_in(&mut self, email: &str, password: &str) -> String {
        let signed_in = self.sign_in_attempt(email, password).await;
        assert_eq!(
            signed_in.status,
            StatusCode::SEE_OTHER,
            "{}",
            signed_in.body
        );
        assert_eq!(signed_in.location(), "/dashboard");
        let overview = self.get("/dashboard").await;
        assert_eq!(overview.status, StatusCode::OK);
        overview.csrf_token()
    }
}

async fn add_user(app: &TestApp, account: &CreatedAccount, email: &str) {
    users::create_user(
        app.server.store.as_ref(),
        &account.account.id,
        email,
        Some(PASSWORD.to_owned()),
    )
    .await
    .unwrap();
}

/// A browser signed in as a user of the app's account; its CSRF token.
async fn signed_in_browser(app: &TestApp) -> (Browser, String) {
    add_user(app, &app.account, "Ada@Example.com").await;
    let mut browser = Browser::new(app);
    let csrf = browser.sign_in("ada@example.com", PASSWORD).await;
    (browser, csrf)
}

async fn every_form_needs_its_csrf_token(store: StoreKind) {
    let app = spawn_app(store).await;
    add_user(&app, &app.account, "ada@example.com").await;
    let mut browser = Browser::new(&app);

    // The sign-in form needs the pre-session token of its cookie.
    browser.get("/dashboard/sign-in").await;
    let forged = browser
        .post(
            "/dashboard/sign-in",
            &[
                ("email", "ada@example.com"),
                ("password", PASSWORD),
                ("csrf_token", "forged"),
            ],
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert!(forged.set_cookie("vg_session").is_none());

    let csrf = browser.sign_in("ada@example.com", PASSWORD).await;
    let keys_before = app
        .server
        .store
        .accounts()
        .api_keys(&app.account.account.id)
        .await
        .unwrap();
    for token in ["", "wrong"] {
        let refused = browser
            .post(
                "/dashboard/keys",
                &[("name", "forged"), ("csrf_token", token)],
            )
            .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
    }
    let refused = browser.post("/dashboard/keys", &[("name", "forged")]).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(
        app.server
            .store
            .accounts()
            .api_keys(&app.account.account.id)
            .await
            .unwrap(),
        keys_before
    );
    let refused = browser
        .post("/dashboard/sign-out", &[("csrf_token", "wrong")])
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);

    // A cookie-authenticated API call that changes something needs the
    // header; reads do not.
    let submit = |csrf: Option<String>| {
        let mut request = browser
            .client
            .post(format!("{}/api/v1/run/{M1_T2V}", browser.base))
            .header("cookie", browser.cookie_header())
            .json(&quick_body("from the dashboard"));
        if let Some(csrf) = csrf {
            request = request.header("x-csrf-token", csrf);
        }
        request.send()
    };
    let missing = submit(None).await.unwrap();
    common::assert_error(missing, StatusCode::FORBIDDEN, "forbidden", None).await;
    let wrong = submit(Some("wrong".into())).await.unwrap();
    common::assert_error(wrong, StatusCode::FORBIDDEN, "forbidden", None).await;
    let accepted = submit(Some(csrf)).await.unwrap();
    assert_eq!(accepted.status(), StatusCode::ACCEPTED);
    let generation: Value = accepted.json().await.unwrap();
    assert_eq!(
        app.account_state(&app.account.account.id).await.held.0,
        (generation["cost"]["amount_usd"].as_f64().unwrap() * 1e6).round() as i64
    );
}

async fn a_session_is_an_api_caller_with_its_own_bucket(store: StoreKind) {
    let app = spawn_app(store).await;
    let (browser, _) = signed_in_browser(&app).await;
    let account = browser.api(reqwest::Method::GET, "/account", None).await;
    assert_eq!(account.status(), StatusCode::OK);
    assert!(account.headers().contains_key("x-ratelimit-limit"));
    let account: Value = account.json().await.unwrap();
    assert_eq!(account["id"], app.account.account.id.as_str());

    // A tiny bucket: the key empties its own, the session still has one.
    set_account_limits(
        &app.server.store,
        &app.account.account.id,
        AccountLimits {
            requests_per_second: 1,
            burst: 2,
            max_concurrent: 20,
        },
    )
    .await;
    let mut key_statuses = Vec::new();
    for _ in 0..3 {
        key_statuses.push(app.get("/account", app.key()).await.status());
    }
    assert_eq!(
        key_statuses.last(),
        Some(&StatusCode::TOO_MANY_REQUESTS),
        "{key_statuses:?}"
    );
    let by_session = browser.api(reqwest::Method::GET, "/account", None).await;
    assert_eq!(by_session.status(), StatusCode::OK);
    // And the session's own bucket runs out too.
    let mut session_statuses = Vec::new();
    for _ in 0..3 {
        session_statuses.push(
            browser
                .api(reqwest::Method::GET, "/account", None)
                .await
                .status(),
        );
    }
    assert!(
        session_statuses.contains(&StatusCode::TOO_MANY_REQUESTS),
        "{session_statuses:?}"
    );
}

async fn sign_out_revokes_the_session_on_the_server(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut browser, csrf) = signed_in_browser(&app).await;
    let stolen_cookie = browser.cookie_header();

    let signed_out = browser
        .post("/dashboard/sign-out", &[("csrf_token", &csrf)])
        .await;
    assert_eq!(signed_out.status, StatusCode::SEE_OTHER);
    assert_eq!(signed_out.location(), "/dashboard/sign-in");
    assert!(
        signed_out
            .set_cookie("vg_session")
            .unwrap()
            .contains("Max-Age=0")
    );

    // The old cookie, replayed, is refused by the pages and by the API.
    let page = browser
        .client
        .get(format!("{}/dashboard/keys", browser.base))
        .header("cookie", &stolen_cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::SEE_OTHER);
    let api = browser
        .client
        .get(format!("{}/api/v1/account", browser.base))
        .header("cookie", &stolen_cookie)
        .send()
        .await
        .unwrap();
    common::assert_error(api, StatusCode::UNAUTHORIZED, "unauthorized", None).await;
}

async fn a_key_is_created_shown_once_used_and_revoked(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut browser, csrf) = signed_in_browser(&app).await;
    let name = "<script>alert(1)</script>";
    let created = browser
        .post("/dashboard/keys", &[("name", name), ("csrf_token", &csrf)])
        .await;
    assert_eq!(created.status, StatusCode::OK);
    let marker = "<code id=\"new-key-secret\">";
    let start = created.body.find(marker).expect("the secret is shown") + marker.len();
    let secret = created.body[start..start + created.body[start..].find('<').unwrap()].to_owned();
    assert!(secret.starts_with("vg_live_"), "{secret}");
    assert!(created.body.contains("id=\"copy-key\""));
    assert!(!created.body.contains(name), "the name is escaped");
    assert!(
        created
            .body
            .contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
        "{}",
        created.body
    );

    let account = app.get("/account", &secret).await;
    assert_eq!(account.status(), StatusCode::OK);

    let listed = browser.get("/dashboard/keys").await;
    assert!(
        !listed.body.contains(&secret),
        "the secret is shown only once"
    );
    assert!(!listed.body.contains("new-key-secret"));
    let key = app
        .server
        .store
        .accounts()
        .api_keys(&app.account.account.id)
        .await
        .unwrap()
        .into_iter()
        .find(|key| key.name == name)
        .unwrap();
    assert!(listed.body.contains(&format!("data-key-id=\"{}\"", key.id)));
    assert!(
        key.last_used_at.is_some(),
        "the API call was recorded as a use"
    );

    // The list's Revoke leads to a page that asks; asking changes nothing.
    let revoke_path = format!("/dashboard/keys/{}/revoke", key.id);
    assert!(
        listed.body.contains(&format!(
            "<a class=\"button danger revoke-key\" href=\"{revoke_path}\""
        )),
        "{}",
        listed.body
    );
    let asked = browser.get(&revoke_path).await;
    assert_eq!(asked.status, StatusCode::OK);
    assert!(asked.body.contains("Revoke the key"), "{}", asked.body);
    assert!(asked.body.contains(&format!("{}\u{2026}", key.prefix)));
    assert!(asked.body.contains(&format!(
        "<form id=\"confirm-action\" method=\"post\" action=\"{revoke_path}\""
    )));
    assert!(asked.body.contains("href=\"/dashboard/keys\">Cancel</a>"));
    assert_eq!(app.get("/account", &secret).await.status(), StatusCode::OK);

    let revoked = browser.post(&revoke_path, &[("csrf_token", &csrf)]).await;
    assert_eq!(revoked.status, StatusCode::SEE_OTHER);
    assert_eq!(
        revoked.location(),
        format!("/dashboard/keys?revoked={}", key.id)
    );
    let refused = app.get("/account", &secret).await;
    common::assert_error(refused, StatusCode::UNAUTHORIZED, "unauthorized", None).await;
    // The page the revocation leads to says what happened.
    let listed = browser.get(revoked.location()).await;
    assert!(listed.body.contains("revoked"));
    assert!(
        listed
            .body
            .contains("<p class=\"notice\" id=\"notice\" role=\"status\">The key"),
        "{}",
        listed.body
    );
    // A revoked key is not asked about again.
    assert_eq!(
        browser.get(&revoke_path).await.status,
        StatusCode::NOT_FOUND
    );
}

async fn a_revocation_notice_names_only_a_revoked_key_of_the_account(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut browser, _) = signed_in_browser(&app).await;
    // The account's own key is active: the query cannot make the page claim
    // that it was revoked, nor put words of its own in the page.
    for query in [app.account.key_id.as_str(), "<b>anything</b>"] {
        let page = browser
            .get(&format!(
                "/dashboard/keys?{}",
                form_body(&[("revoked", query)])
            ))
            .await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(
            !page.body.contains("id=\"notice\""),
            "{query}: {}",
            page.body
        );
        assert!(!page.body.contains("<b>anything</b>"));
    }
}

async fn an_unknown_dashboard_page_keeps_the_navigation(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut browser, _) = signed_in_browser(&app).await;
    let page = browser.get("/dashboard/no-such-page").await;
    assert_eq!(page.status, StatusCode::NOT_FOUND);
    assert!(
        page.body.contains("<nav aria-label=\"Dashboard\">"),
        "{}",
        page.body
    );
    assert!(page.body.contains("id=\"sign-out\""));
    let mut anonymous = Browser::new(&app);
    let signed_out = anonymous.get("/dashboard/no-such-page").await;
    assert_eq!(signed_out.status, StatusCode::NOT_FOUND);
    assert!(!signed_out.body.contains("<nav aria-label=\"Dashboard\">"));
}

async fn pages_name_an_icon_that_is_served(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut browser, _) = signed_in_browser(&app).await;
    let page = browser.get("/dashboard").await;
    let marker = "<link rel=\"icon\" type=\"image/svg+xml\" href=\"";
    let start = page.body.find(marker).expect("the page names an icon") + marker.len();
    let path = &page.body[start..start + page.body[start..].find('"').unwrap()];
    let icon = browser
        .client
        .get(format!("{}{path}", browser.base))
        .send()
        .await
        .unwrap();
    assert_eq!(icon.status(), StatusCode::OK);
    assert_eq!(icon.headers()["content-type"], "image/svg+xml");
    assert!(icon.text().await.unwrap().starts_with("<svg"));
}

async fn another_account_sees_nothing_of_the_first(store: StoreKind) {
    let app = spawn_app(store).await;
    let generation = app.submit_ok(M1_T2V, quick_body("private")).await;
    let generation_id = generation["id"].as_str().unwrap();
    let (mut owner, _) = signed_in_browser(&app).await;
    let page = owner
        .get(&format!("/dashboard/generations/{generation_id}"))
        .await;
    assert_eq!(page.status, StatusCode::OK);

    let other = app.new_account(10).await;
    add_user(&app, &other, "eve@example.com").await;
    let mut intruder = Browser::new(&app);
    let csrf = intruder.sign_in("eve@example.com", PASSWORD).await;

    let page = intruder
        .get(&format!("/dashboard/generations/{generation_id}"))
        .await;
    assert_eq!(page.status, StatusCode::NOT_FOUND);
    assert!(!page.body.contains("private"));
    let unknown = intruder.get("/dashboard/generations/gen_unknown").await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    let list = intruder.get("/dashboard/generations").await;
    assert!(!list.body.contains(generation_id));
    let keys = intruder.get("/dashboard/keys").await;
    assert!(!keys.body.contains(&app.account.key_id));
    let via_api = intruder
        .api(
            reqwest::Method::GET,
            &format!("/generations/{generation_id}"),
            None,
        )
        .await;
    assert_eq!(via_api.status(), StatusCode::NOT_FOUND);

    let revoke = intruder
        .post(
            &format!("/dashboard/keys/{}/revoke", app.account.key_id),
            &[("csrf_token", &csrf)],
        )
        .await;
    assert_eq!(revoke.status, StatusCode::NOT_FOUND);
    assert_eq!(
        app.get("/account", app.key()).await.status(),
        StatusCode::OK
    );
}

on_both_stores!(
    every_form_needs_its_csrf_token,
    a_session_is_an_api_caller_with_its_own_bucket,
    sign_out_revokes_the_session_on_the_server,
    a_key_is_created_shown_once_used_and_revoked,
    a_revocation_notice_names_only_a_revoked_key_of_the_account,
    an_unknown_dashboard_page_keeps_the_navigation,
    pages_name_an_icon_that_is_served,
    another_account_sees_nothing_of_the_first,
);
