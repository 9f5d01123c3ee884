//! The account dashboard over real HTTP, on both stores: sign-in and its
//! limits, sessions as API callers, CSRF, sign-out, keys, generations, the
//! playground's form path, webhooks, sign-up, and the isolation of accounts.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use reqwest::header::{HeaderMap, LOCATION};
use reqwest::{Client, StatusCode, redirect};
use serde_json::Value;
use vidgate_server::ServerOptions;
use vidgate_server::accounts::CreatedAccount;
use vidgate_server::dashboard::users;
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

async fn sign_in_succeeds_and_fails_with_401(store: StoreKind) {
    let app = spawn_app(store).await;
    add_user(&app, &app.account, "ada@example.com").await;
    let mut browser = Browser::new(&app);

    let root = browser.get("/").await;
    assert_eq!(root.status, StatusCode::SEE_OTHER);
    assert_eq!(root.location(), "/dashboard");
    for path in [
        "/dashboard",
        "/dashboard/keys",
        "/dashboard/generations/gen_x",
    ] {
        let page = browser.get(path).await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "{path}");
        assert_eq!(page.location(), "/dashboard/sign-in", "{path}");
    }

    for (email, password) in [
        ("ada@example.com", "wrong password!"),
        ("bob@example.com", PASSWORD),
    ] {
        let refused = browser.sign_in_attempt(email, password).await;
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{email}");
        assert!(refused.body.contains("role=\"alert\""), "{}", refused.body);
        assert!(refused.set_cookie("vg_session").is_none());
    }

    let signed_in = browser.sign_in_attempt("ADA@example.com ", PASSWORD).await;
    assert_eq!(signed_in.status, StatusCode::SEE_OTHER);
    assert_eq!(signed_in.location(), "/dashboard");
    let cookie = signed_in.set_cookie("vg_session").unwrap();
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(
        !cookie.contains("Secure"),
        "plain http gets no Secure cookie: {cookie}"
    );

    let overview = browser.get("/dashboard").await;
    assert_eq!(overview.status, StatusCode::OK);
    assert!(
        overview
            .body
            .contains("<p id=\"balance\" class=\"amount\">$100.00</p>")
    );
    let csp = overview.headers["content-security-policy"]
        .to_str()
        .unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"));
    assert_eq!(overview.headers["x-frame-options"], "DENY");
    assert_eq!(overview.headers["x-content-type-options"], "nosniff");
    assert_eq!(overview.headers["cache-control"], "no-store");
    assert!(!overview.body.contains("<script>") && !overview.body.contains(" style="));
    // The stylesheet is served from the binary under a versioned path.
    let stylesheet = overview
        .body
        .split("href=\"")
        .find_map(|rest| {
            rest.split('"')
                .next()
                .filter(|href| href.ends_with("/app.css"))
        })
        .unwrap()
        .to_owned();
    let css = browser.get(&stylesheet).await;
    assert_eq!(css.status, StatusCode::OK);
    assert!(
        css.headers["cache-control"]
            .to_str()
            .unwrap()
            .contains("immutable")
    );
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
    app.server
        .store
        .set_account_limits(
            &app.account.account.id,
            AccountLimits {
                requests_per_second: 1,
                burst: 2,
                max_concurrent: 20,
            },
        )
        .await
        .unwrap();
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

async fn sign_in_attempts_are_rate_limited(store: StoreKind) {
    let app = spawn_app(store).await;
    add_user(&app, &app.account, "ada@example.com").await;
    let mut browser = Browser::new(&app);
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(
            browser
                .sign_in_attempt("ada@example.com", "not the password")
                .await
                .status,
        );
    }
    assert!(
        statuses
            .iter()
            .all(|status| *status == StatusCode::UNAUTHORIZED),
        "{statuses:?}"
    );
    // Even the right password waits now, from this address.
    let limited = browser.sign_in_attempt("ada@example.com", PASSWORD).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(limited.headers.contains_key("retry-after"));
    assert!(limited.set_cookie("vg_session").is_none());
}

/// Signs in through a trusted proxy that says the browser is at `client`.
async fn sign_in_from(app: &TestApp, client: &str, email: &str, password: &str) -> StatusCode {
    let browser = Browser::new(app);
    let form = browser
        .client
        .get(format!("{}/dashboard/sign-in", browser.base))
        .header("x-forwarded-for", client)
        .send()
        .await
        .unwrap();
    let csrf_cookie = form
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
        .find(|pair| pair.starts_with("vg_csrf="))
        .unwrap();
    let token = csrf_cookie.trim_start_matches("vg_csrf=").to_owned();
    browser
        .client
        .post(format!("{}/dashboard/sign-in", browser.base))
        .header("x-forwarded-for", client)
        .header("cookie", csrf_cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[
            ("email", email),
            ("password", password),
            ("csrf_token", &token),
        ]))
        .send()
        .await
        .unwrap()
        .status()
}

async fn a_wrong_password_elsewhere_does_not_lock_the_owner_out(store: StoreKind) {
    // The test client is the load balancer: its forwarded addresses count.
    let app = spawn_app_with(TestSettings {
        trusted_proxies: vec!["127.0.0.1/32".parse().unwrap()],
        ..TestSettings::new(store)
    })
    .await;
    add_user(&app, &app.account, "ada@example.com").await;
    let mut attacker = Vec::new();
    for _ in 0..12 {
        attacker.push(sign_in_from(&app, "203.0.113.7", "ada@example.com", "guess").await);
    }
    assert_eq!(&attacker[..5], &[StatusCode::UNAUTHORIZED; 5]);
    assert!(
        attacker[5..]
            .iter()
            .all(|status| *status == StatusCode::TOO_MANY_REQUESTS),
        "{attacker:?}"
    );
    // The owner, at another address behind the same balancer, signs in.
    assert_eq!(
        sign_in_from(&app, "198.51.100.9", "ada@example.com", PASSWORD).await,
        StatusCode::SEE_OTHER
    );
}

async fn wrong_guesses_from_many_addresses_only_slow_the_owners_right_password(store: StoreKind) {
    let app = spawn_app_with(TestSettings {
        trusted_proxies: vec!["127.0.0.1/32".parse().unwrap()],
        ..TestSettings::new(store)
    })
    .await;
    add_user(&app, &app.account, "ada@example.com").await;
    // One wrong guess from each of 25 addresses: more than the email's own
    // bucket holds, none past its address's or its pair's.
    for stranger in 0..25 {
        let status = sign_in_from(
            &app,
            &format!("203.0.113.{stranger}"),
            "ada@example.com",
            "guess",
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "guess {stranger}");
    }
    // The owner with the right password gets in (after a short delay when
    // the email's bucket is still empty).
    assert_eq!(
        sign_in_from(&app, "198.51.100.9", "ada@example.com", PASSWORD).await,
        StatusCode::SEE_OTHER
    );
    // A guess is still only wrong.
    assert_eq!(
        sign_in_from(&app, "203.0.113.200", "ada@example.com", "guess").await,
        StatusCode::UNAUTHORIZED
    );
}

async fn forwarded_addresses_count_only_from_trusted_proxies(store: StoreKind) {
    // No trusted proxy: the forwarded address is the client's own claim,
    // so a new one per attempt does not buy new attempts.
    let app = spawn_app(store).await;
    add_user(&app, &app.account, "ada@example.com").await;
    let mut statuses = Vec::new();
    for attempt in 0..6 {
        let claimed = format!("203.0.113.{attempt}");
        statuses.push(sign_in_from(&app, &claimed, "ada@example.com", "guess").await);
    }
    assert_eq!(statuses[5], StatusCode::TOO_MANY_REQUESTS, "{statuses:?}");
}

async fn generations_and_the_overview_show_the_account(store: StoreKind) {
    let app = spawn_app(store).await;
    let failed = app
        .submit_ok(M1_T2V, quick_body("<b>bold</b> [sim:fail]"))
        .await;
    let succeeded = app.submit_ok(M1_T2V, quick_body("a kite")).await;
    let succeeded_id = succeeded["id"].as_str().unwrap();
    let failed_id = failed["id"].as_str().unwrap();
    let done = app.wait_for_status(succeeded_id, &["succeeded"]).await;
    app.wait_for_status(failed_id, &["failed"]).await;
    let (mut browser, _) = signed_in_browser(&app).await;

    let list = browser.get("/dashboard/generations").await;
    assert_eq!(list.status, StatusCode::OK);
    let newest = list.body.find(succeeded_id).unwrap();
    let older = list.body.find(failed_id).unwrap();
    assert!(newest < older, "newest first");

    let detail = browser
        .get(&format!("/dashboard/generations/{succeeded_id}"))
        .await;
    assert!(
        detail
            .body
            .contains("<dd id=\"generation-status\">succeeded</dd>")
    );
    let video_url = done["output"]["video_url"].as_str().unwrap();
    assert!(
        detail.body.contains(&format!(
            "<video id=\"generation-video\" controls preload=\"metadata\" src=\"{video_url}\">"
        )),
        "{}",
        detail.body
    );
    assert!(!detail.body.contains("generation-error"));

    let detail = browser
        .get(&format!("/dashboard/generations/{failed_id}"))
        .await;
    assert!(
        detail
            .body
            .contains("<dd id=\"generation-status\">failed</dd>")
    );
    assert!(detail.body.contains("id=\"generation-error\""));
    assert!(
        detail
            .body
            .contains("<dd id=\"generation-cost\">$0.00</dd>")
    );
    assert!(!detail.body.contains("<b>bold</b>"));
    assert!(detail.body.contains("&#60;b&#62;bold"), "{}", detail.body);
    assert!(!detail.body.contains("<video"));

    let overview = browser.get("/dashboard").await;
    let account = app.account_state(&app.account.account.id).await;
    assert!(overview.body.contains(&format!(
        "<p id=\"balance\" class=\"amount\">{}</p>",
        vidgate_server::dashboard::usd(account.balance)
    )));
    for kind in ["Credit", "Hold", "Charge", "Refund"] {
        assert!(
            overview
                .body
                .contains(&format!("<td class=\"kind\">{kind}</td>")),
            "{kind}"
        );
    }
    // The newest entry's balance after it is the account's balance now, and
    // the oldest (the first credit) leaves the balance at the credit.
    let balances_after: Vec<&str> = overview
        .body
        .split("<td class=\"number balance-after\">")
        .skip(1)
        .map(|rest| &rest[..rest.find('<').unwrap()])
        .collect();
    assert_eq!(
        balances_after.first().copied(),
        Some(vidgate_server::dashboard::usd(account.balance).as_str())
    );
    assert_eq!(
        balances_after.last().copied(),
        Some(vidgate_server::dashboard::usd(account.credited).as_str()),
        "{}",
        overview.body
    );
    assert!(overview.body.contains("<td class=\"number change\">-$"));
    assert!(overview.body.contains("<td class=\"number change\">+$"));
    assert!(overview.body.contains("<svg id=\"spend-chart\""));
    // Today's bar is the only one with height, labelled with the capture.
    let captured = vidgate_server::dashboard::usd(account.captured);
    assert!(
        overview.body.contains(&format!(": {captured}</title>")),
        "{captured}"
    );
}

async fn the_playground_form_runs_without_javascript(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut browser, csrf) = signed_in_browser(&app).await;
    let page = browser
        .get(&format!("/dashboard/playground?endpoint={M1_T2V}"))
        .await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body
            .contains(&format!("<option value=\"{M1_T2V}\" selected>"))
    );
    assert!(
        page.body
            .contains("<textarea id=\"field-prompt\" name=\"prompt\"")
    );
    assert!(
        page.body
            .contains("<select id=\"field-resolution\" name=\"resolution\"")
    );
    assert!(page.body.contains("type=\"checkbox\""));
    assert!(
        page.body
            .contains("<output id=\"quote\" aria-live=\"polite\">$")
    );
    assert!(page.body.contains("id=\"run\""));

    let submitted = browser
        .post(
            "/dashboard/playground",
            &[
                ("csrf_token", &csrf),
                ("endpoint", M1_T2V),
                ("prompt", "a kite from the playground"),
                ("duration", "2"),
                ("resolution", "480p"),
            ],
        )
        .await;
    assert_eq!(
        submitted.status,
        StatusCode::SEE_OTHER,
        "{}",
        submitted.body
    );
    let generation_id = submitted
        .location()
        .strip_prefix("/dashboard/generations/")
        .unwrap()
        .to_owned();
    let generation = app.generation(&generation_id).await;
    assert_eq!(generation["input"]["prompt"], "a kite from the playground");
    assert_eq!(
        generation["input"]["generate_audio"], false,
        "an unchecked box is false"
    );

    let refused = browser
        .post(
            "/dashboard/playground",
            &[
                ("csrf_token", &csrf),
                ("endpoint", M1_T2V),
                ("prompt", "x"),
                ("duration", "99"),
            ],
        )
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(refused.body.contains("role=\"alert\""));
}

async fn the_webhook_secret_is_revealed_and_rotated(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut browser, csrf) = signed_in_browser(&app).await;
    let secret = app.account.account.webhook_secret.clone();
    let page = browser.get("/dashboard/webhooks").await;
    // The secret is not in the page until it is asked for.
    assert!(!page.body.contains(&secret));
    assert!(page.body.contains(
        "<code id=\"webhook-secret\" data-source=\"/dashboard/webhooks/secret\" hidden></code>"
    ));
    let fetched = browser
        .client
        .get(format!("{}/dashboard/webhooks/secret", browser.base))
        .header("cookie", browser.cookie_header())
        .header("x-csrf-token", &csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(fetched.status(), StatusCode::OK);
    let fetched: Value = fetched.json().await.unwrap();
    assert_eq!(fetched["webhook_secret"], secret.as_str());
    // Without the page's CSRF token, another site's request gets nothing.
    let forged = browser
        .client
        .get(format!("{}/dashboard/webhooks/secret", browser.base))
        .header("cookie", browser.cookie_header())
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert!(!forged.text().await.unwrap().contains(&secret));
    assert!(page.body.contains("id=\"reveal-secret\""));
    assert!(page.body.contains("<table id=\"deliveries\">"));
    let revealed = browser.get("/dashboard/webhooks?reveal=1").await;
    assert!(
        revealed
            .body
            .contains(&format!("<code id=\"webhook-secret\">{secret}</code>"))
    );
    assert!(
        revealed
            .body
            .contains("<button type=\"button\" id=\"copy-secret\" data-copy=\"webhook-secret\">")
    );

    // Rotate leads to a page that asks; asking changes nothing.
    assert!(
        page.body
            .contains("<a class=\"button danger\" href=\"/dashboard/webhooks/rotate\">")
    );
    let asked = browser.get("/dashboard/webhooks/rotate").await;
    assert_eq!(asked.status, StatusCode::OK);
    assert!(asked.body.contains("Rotate the signing secret?"));
    assert!(asked.body.contains("24 hours"));
    assert!(asked.body.contains(
        "<form id=\"confirm-action\" method=\"post\" action=\"/dashboard/webhooks/rotate\""
    ));
    assert_eq!(
        app.account_state(&app.account.account.id)
            .await
            .webhook_secret,
        secret
    );

    let rotated = browser
        .post("/dashboard/webhooks/rotate", &[("csrf_token", &csrf)])
        .await;
    assert_eq!(rotated.status, StatusCode::SEE_OTHER);
    assert_eq!(rotated.location(), "/dashboard/webhooks?rotated=1");
    let told = browser.get(rotated.location()).await;
    assert!(
        told.body.contains("The signing secret was rotated"),
        "{}",
        told.body
    );
    assert!(told.body.contains("keeps signing beside it until"));
    let account = app.account_state(&app.account.account.id).await;
    assert_ne!(account.webhook_secret, secret);
    assert_eq!(
        account.previous_webhook_secret.as_deref(),
        Some(secret.as_str())
    );
    let page = browser.get("/dashboard/webhooks?reveal=1").await;
    assert!(page.body.contains(&account.webhook_secret));
}

async fn sign_up_is_off_unless_enabled(store: StoreKind) {
    let app = spawn_app(store.clone()).await;
    let mut browser = Browser::new(&app);
    assert_eq!(
        browser.get("/dashboard/sign-up").await.status,
        StatusCode::NOT_FOUND
    );

    // A server of its own, started as `vidgate serve --allow-sign-up` is.
    let data_dir = tempfile::tempdir().unwrap();
    let database = common::TestDatabase::create(&store).await;
    let mut options = ServerOptions::new("127.0.0.1:0".parse().unwrap(), data_dir.path().into());
    options.database_url = Some(database.url());
    options.allow_sign_up = true;
    let open = vidgate_server::start(options).await.unwrap();
    let mut browser = Browser::at(&open.api_base);
    let form = browser.get("/dashboard/sign-up").await;
    assert_eq!(form.status, StatusCode::OK);
    let csrf = form.csrf_token();
    let short = browser
        .post(
            "/dashboard/sign-up",
            &[
                ("email", "new@example.com"),
                ("password", "short"),
                ("csrf_token", &csrf),
            ],
        )
        .await;
    assert_eq!(short.status, StatusCode::BAD_REQUEST);
    let created = browser
        .post(
            "/dashboard/sign-up",
            &[
                ("email", "New@Example.com"),
                ("password", PASSWORD),
                ("csrf_token", &csrf),
            ],
        )
        .await;
    assert_eq!(created.status, StatusCode::SEE_OTHER);
    let overview = browser.get("/dashboard").await;
    assert!(
        overview
            .body
            .contains("<p id=\"balance\" class=\"amount\">$0.00</p>")
    );
    let user = open
        .store
        .user_by_email("new@example.com")
        .await
        .unwrap()
        .unwrap();
    let account = open.store.account(&user.account_id).await.unwrap().unwrap();
    assert_eq!(account.credited.0, 0);
    let taken = browser
        .post(
            "/dashboard/sign-up",
            &[
                ("email", "new@example.com"),
                ("password", PASSWORD),
                ("csrf_token", &csrf),
            ],
        )
        .await;
    // Signed in, the browser's pre-session token still works for the form.
    assert_eq!(taken.status, StatusCode::BAD_REQUEST);
    // The answer does not tell that the email is registered.
    assert!(!taken.body.contains("already"), "{}", taken.body);
    assert!(taken.body.contains("No account could be created"));
    open.shutdown().await;
}

async fn the_development_account_has_a_dashboard_user(store: StoreKind) {
    let data_dir = tempfile::tempdir().unwrap();
    let database = common::TestDatabase::create(&store).await;
    let mut options = ServerOptions::new("127.0.0.1:0".parse().unwrap(), data_dir.path().into());
    options.database_url = Some(database.url());
    options.bootstrap_development_account = true;
    let server = vidgate_server::start(options).await.unwrap();
    let account = server.development_account.as_ref().unwrap();
    let user = server.development_user.as_ref().unwrap();
    assert_eq!(user.user.account_id, account.account.id);
    let password = user.one_time_password.clone().unwrap();
    let mut browser = Browser::at(&server.api_base);
    browser.sign_in(&user.user.email, &password).await;
    let overview = browser.get("/dashboard").await;
    assert!(
        overview
            .body
            .contains("<p id=\"balance\" class=\"amount\">$25.00</p>")
    );
    server.shutdown().await;
}

/// Issue 38, item 7: behind https the session cookie is
/// `__Host-vg_session` (Secure, Path=/, no Domain), which only this host
/// can set over https; a `vg_session` cookie, which a sibling subdomain
/// could plant to sign a browser in to the planter's account (login CSRF),
/// names no session there, even one that is live.
#[tokio::test]
async fn behind_https_the_session_cookie_is_one_no_other_host_can_set() {
    let app = spawn_app_with(TestSettings {
        public_url: Some("https://vidgate.example".into()),
        ..TestSettings::new(StoreKind::Sqlite)
    })
    .await;
    add_user(&app, &app.account, "ada@example.com").await;
    let local = format!("http://{}", app.server.local_addr.unwrap());
    let mut browser = Browser::at(&local);
    let signed_in = browser.sign_in_attempt("ada@example.com", PASSWORD).await;
    assert_eq!(
        signed_in.status,
        StatusCode::SEE_OTHER,
        "{}",
        signed_in.body
    );
    assert!(signed_in.set_cookie("vg_session").is_none());
    let cookie = signed_in.set_cookie("__Host-vg_session").unwrap();
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/", "Secure"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(!cookie.contains("Domain"), "{cookie}");
    assert_eq!(browser.get("/dashboard").await.status, StatusCode::OK);

    let token = browser.cookies["__Host-vg_session"].clone();
    let mut planted = Browser::at(&local);
    planted.cookies.insert("vg_session".into(), token);
    let page = planted.get("/dashboard").await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(page.location(), "/dashboard/sign-in");
    let api = planted.api(reqwest::Method::GET, "/account", None).await;
    assert_eq!(api.status(), StatusCode::UNAUTHORIZED);
    app.server.shutdown().await;
}

on_both_stores!(
    sign_in_succeeds_and_fails_with_401,
    every_form_needs_its_csrf_token,
    a_session_is_an_api_caller_with_its_own_bucket,
    sign_out_revokes_the_session_on_the_server,
    a_key_is_created_shown_once_used_and_revoked,
    a_revocation_notice_names_only_a_revoked_key_of_the_account,
    an_unknown_dashboard_page_keeps_the_navigation,
    pages_name_an_icon_that_is_served,
    another_account_sees_nothing_of_the_first,
    sign_in_attempts_are_rate_limited,
    a_wrong_password_elsewhere_does_not_lock_the_owner_out,
    wrong_guesses_from_many_addresses_only_slow_the_owners_right_password,
    forwarded_addresses_count_only_from_trusted_proxies,
    generations_and_the_overview_show_the_account,
    the_playground_form_runs_without_javascript,
    the_webhook_secret_is_revealed_and_rotated,
    sign_up_is_off_unless_enabled,
    the_development_account_has_a_dashboard_user,
);
