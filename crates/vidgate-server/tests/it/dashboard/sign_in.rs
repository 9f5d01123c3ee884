//! Signing in and up: the answers, the limits on guessing a password (per
//! address, without locking the owner out, counting forwarded addresses
//! only from trusted proxies), the session cookie behind https, and
//! sign-up.

use super::*;

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
    sign_in_from_browser(app, client, email, password, None)
        .await
        .0
}

/// Signs in through a trusted proxy that says the browser is at `client`,
/// carrying `device_cookie` (`vg_device=…`) when given: the status and the
/// device cookie the answer sets, if any.
async fn sign_in_from_browser(
    app: &TestApp,
    client: &str,
    email: &str,
    password: &str,
    device_cookie: Option<&str>,
) -> (StatusCode, Option<String>) {
    let browser = Browser::new(app);
    let form = browser
        .client
        .get(format!("{}/dashboard/sign-in", browser.base))
        .header("x-forwarded-for", client)
        .send()
        .await
        .unwrap();
    let cookie_pairs = |response: &reqwest::Response| -> Vec<String> {
        response
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
            .collect()
    };
    let csrf_cookie = cookie_pairs(&form)
        .into_iter()
        .find(|pair| pair.starts_with("vg_csrf="))
        .unwrap();
    let token = csrf_cookie.trim_start_matches("vg_csrf=").to_owned();
    let cookies = match device_cookie {
        Some(device) => format!("{csrf_cookie}; {device}"),
        None => csrf_cookie,
    };
    let answer = browser
        .client
        .post(format!("{}/dashboard/sign-in", browser.base))
        .header("x-forwarded-for", client)
        .header("cookie", cookies)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[
            ("email", email),
            ("password", password),
            ("csrf_token", &token),
        ]))
        .send()
        .await
        .unwrap();
    let device = cookie_pairs(&answer)
        .into_iter()
        .find(|pair| pair.starts_with("vg_device="));
    (answer.status(), device)
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

/// Issue 50: guesses at one email from many addresses (here each from its
/// own, so no address's or pair's bucket fills, as IPv6 /64s would) are
/// bounded by the email's bucket, and the owner's browser, known to the
/// email by its device cookie, still gets in.
async fn guesses_from_many_addresses_are_bounded_and_the_owners_browser_gets_in(store: StoreKind) {
    let app = spawn_app_with(TestSettings {
        trusted_proxies: vec!["127.0.0.1/32".parse().unwrap()],
        ..TestSettings::new(store)
    })
    .await;
    add_user(&app, &app.account, "ada@example.com").await;
    // The owner signed in from this browser before the guessing started.
    let (status, device) =
        sign_in_from_browser(&app, "198.51.100.9", "ada@example.com", PASSWORD, None).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let device = device.expect("a sign-in sets the device cookie");

    let mut guesses = Vec::new();
    for stranger in 0..25 {
        guesses.push(
            sign_in_from(
                &app,
                &format!("203.0.113.{stranger}"),
                "ada@example.com",
                "guess",
            )
            .await,
        );
    }
    // The email's bucket holds 10 attempts (the owner took one) and gains
    // one every 30 s: 9 guesses are checked, then strangers are refused.
    assert!(
        guesses[..9]
            .iter()
            .all(|status| *status == StatusCode::UNAUTHORIZED),
        "{guesses:?}"
    );
    assert!(
        guesses[12..]
            .iter()
            .all(|status| *status == StatusCode::TOO_MANY_REQUESTS),
        "{guesses:?}"
    );
    // The owner's browser, from yet another address, gets in.
    let (status, _) = sign_in_from_browser(
        &app,
        "198.51.100.10",
        "ada@example.com",
        PASSWORD,
        Some(&device),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    // An altered or a forged device cookie is a stranger's.
    for forged in [
        device.replace("vg_device=", "vg_device=1"),
        "vg_device=4102444800000.forged".to_owned(),
    ] {
        let (status, _) = sign_in_from_browser(
            &app,
            "198.51.100.11",
            "ada@example.com",
            PASSWORD,
            Some(&forged),
        )
        .await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{forged}");
    }
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
        .users()
        .by_email("new@example.com")
        .await
        .unwrap()
        .unwrap();
    let account = open
        .store
        .accounts()
        .get(&user.account_id)
        .await
        .unwrap()
        .unwrap();
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
    // The one-time password was printed to a terminal: the first sign-in
    // asks for one of the developer's own before the overview.
    let signed_in = browser.sign_in_attempt(&user.user.email, &password).await;
    assert_eq!(signed_in.location(), "/dashboard/password");
    let page = browser.get("/dashboard/password").await;
    let new_password = "the developer's own password";
    let changed = browser
        .post(
            "/dashboard/password",
            &[
                ("current_password", password.as_str()),
                ("new_password", new_password),
                ("repeat_password", new_password),
                ("csrf_token", &page.csrf_token()),
            ],
        )
        .await;
    assert_eq!(changed.status, StatusCode::SEE_OTHER, "{}", changed.body);
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
    sign_in_attempts_are_rate_limited,
    a_wrong_password_elsewhere_does_not_lock_the_owner_out,
    guesses_from_many_addresses_are_bounded_and_the_owners_browser_gets_in,
    forwarded_addresses_count_only_from_trusted_proxies,
    sign_up_is_off_unless_enabled,
    the_development_account_has_a_dashboard_user,
);
