//! The signed-in account's pages: generations and the overview, the
//! playground's form path without JavaScript, and the webhook secret.

use super::*;

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

on_both_stores!(
    generations_and_the_overview_show_the_account,
    the_playground_form_runs_without_javascript,
    the_webhook_secret_is_revealed_and_rotated,
);
