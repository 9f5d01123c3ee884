//! The generations pages and the playground as issue 44 asks for them: the
//! list's filters, pages and columns, a generation's billing in words, its
//! links (back to the list, curl, the playground filled in), the
//! playground's names and folded fields, and a refusal for money that
//! links to credit rather than to a generation that does not exist.

use common::spawn_app_without_workers;
use vidgate_core::Micros;
use vidgate_server::dashboard::usd;

use super::*;

/// The value of `attribute` on the element with `id="{id}"`, with the
/// escapes askama writes undone.
fn attribute_of(body: &str, id: &str, attribute: &str) -> Option<String> {
    let start = body.find(&format!("id=\"{id}\""))?;
    let tag_start = body[..start].rfind('<')?;
    let tag = &body[tag_start..tag_start + body[tag_start..].find('>')?];
    let marker = format!("{attribute}=\"");
    let value_start = tag.find(&marker)? + marker.len();
    let value = &tag[value_start..value_start + tag[value_start..].find('"')?];
    Some(
        value
            .replace("&#38;", "&")
            .replace("&#34;", "\"")
            .replace("&#39;", "'"),
    )
}

/// The generations a list page shows, in order.
fn listed_ids(body: &str) -> Vec<String> {
    body.split("<tr data-generation-id=\"")
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].to_owned())
        .collect()
}

/// The dollar amount of an API cost, as the dashboard writes it.
fn dollars(cost: &Value) -> String {
    usd(Micros(
        (cost["amount_usd"].as_f64().unwrap() * 1_000_000.0).round() as i64,
    ))
}

async fn cancel(app: &TestApp, generation_id: &str) {
    let response = app
        .post_json(
            &format!("/generations/{generation_id}/cancel"),
            app.key(),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
}

async fn the_list_filters_pages_and_keeps_the_filters(store: StoreKind) {
    // No workers: what is submitted stays queued until it is canceled, so
    // more generations than a page holds fit under the concurrency limit.
    let app = spawn_app_without_workers(store).await;
    // 53 API calls in a row: past the default burst of 20.
    set_account_limits(
        &app.server.store,
        &app.account.account.id,
        AccountLimits {
            requests_per_second: 1000,
            burst: 1000,
            max_concurrent: 20,
        },
    )
    .await;
    let mut canceled = Vec::new();
    for number in 0..26 {
        let generation = app
            .submit_ok(M1_T2V, quick_body(&format!("canceled run {number}")))
            .await;
        let id = generation["id"].as_str().unwrap().to_owned();
        cancel(&app, &id).await;
        canceled.push(id);
    }
    let queued = app
        .submit_ok(M1_T2V, quick_body("<b>bold</b> kite over the sea"))
        .await;
    let queued_id = queued["id"].as_str().unwrap();
    let (mut browser, _) = signed_in_browser(&app).await;

    // The first page: the newest 25, the queued one first, with its prompt
    // escaped, its length and size, and a link to the older ones.
    let first = browser.get("/dashboard/generations").await;
    assert_eq!(first.status, StatusCode::OK);
    let ids = listed_ids(&first.body);
    assert_eq!(ids.len(), 25);
    assert_eq!(ids[0], queued_id);
    assert!(!first.body.contains("<b>bold</b>"));
    assert!(
        first.body.contains("&#60;b&#62;bold&#60;/b&#62; kite"),
        "{}",
        first.body
    );
    assert!(
        first
            .body
            .contains("<td class=\"number duration\">2 s</td>")
    );
    assert!(first.body.contains("<td class=\"resolution\">480p</td>"));
    assert!(
        first
            .body
            .contains("<span class=\"status-badge status-queued\">queued</span>")
    );
    assert!(first.body.contains("M1 · Model 1"));
    assert!(!first.body.contains("id=\"first-page\""));
    let next = attribute_of(&first.body, "next-page", "href").expect("a link to older ones");

    // The second page: the two oldest, a way back to the newest, no further.
    // (Two generations made in the same millisecond are ordered by id, so
    // the pages are compared as sets.)
    let second = browser.get(&next).await;
    assert_eq!(second.status, StatusCode::OK);
    let second_ids = listed_ids(&second.body);
    assert_eq!(second_ids.len(), 2);
    let mut every_id: Vec<String> = ids.iter().chain(&second_ids).cloned().collect();
    every_id.sort();
    let mut expected: Vec<String> = canceled
        .iter()
        .cloned()
        .chain([queued_id.to_owned()])
        .collect();
    expected.sort();
    assert_eq!(every_id, expected, "the pages hold every generation once");
    assert!(!second.body.contains("id=\"next-page\""));
    assert_eq!(
        attribute_of(&second.body, "first-page", "href").as_deref(),
        Some("/dashboard/generations")
    );

    // Filters: by status, with the rows' links keeping them for the way back.
    let only_queued = browser.get("/dashboard/generations?status=queued").await;
    assert_eq!(listed_ids(&only_queued.body), [queued_id]);
    assert!(
        only_queued
            .body
            .contains("<option value=\"queued\" selected>")
    );
    let row_link = format!("/dashboard/generations/{queued_id}?status=queued");
    assert!(only_queued.body.contains(&format!("href=\"{row_link}\"")));
    let detail = browser.get(&row_link).await;
    assert_eq!(
        attribute_of(&detail.body, "back-to-list", "href").as_deref(),
        Some("/dashboard/generations?status=queued")
    );
    let canceled_page = browser
        .get("/dashboard/generations?status=canceled&model=vendor_1%2Fmodel_1")
        .await;
    assert_eq!(listed_ids(&canceled_page.body).len(), 25);
    let next = attribute_of(&canceled_page.body, "next-page", "href").unwrap();
    assert!(
        next.starts_with("/dashboard/generations?status=canceled&model=vendor_1%2Fmodel_1&cursor="),
        "{next}"
    );
    let mut every_canceled = listed_ids(&canceled_page.body);
    every_canceled.extend(listed_ids(&browser.get(&next).await.body));
    every_canceled.sort();
    let mut expected = canceled.clone();
    expected.sort();
    assert_eq!(every_canceled, expected);
    let other_model = browser
        .get("/dashboard/generations?model=vendor_2%2Fmodel_2")
        .await;
    assert!(listed_ids(&other_model.body).is_empty());
    assert!(
        other_model
            .body
            .contains("No generations match these filters.")
    );
    // A page link that does not decode shows the newest page, saying so.
    let garbled = browser.get("/dashboard/generations?cursor=%21%21").await;
    assert_eq!(garbled.status, StatusCode::OK);
    assert_eq!(listed_ids(&garbled.body)[0], queued_id);
    assert!(garbled.body.contains("That page link is not valid"));

    // Another account sees none of it, filtered or not.
    let other = app.new_account(10).await;
    add_user(&app, &other, "eve@example.com").await;
    let mut intruder = Browser::new(&app);
    intruder.sign_in("eve@example.com", PASSWORD).await;
    for path in [
        "/dashboard/generations",
        "/dashboard/generations?status=queued",
        "/dashboard/generations?status=canceled",
    ] {
        let page = intruder.get(path).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(listed_ids(&page.body).is_empty(), "{path}");
    }
}

async fn a_generation_says_what_was_held_charged_or_refunded(store: StoreKind) {
    let app = spawn_app(store).await;
    let succeeded = app.submit_ok(M1_T2V, quick_body("a charged kite")).await;
    let succeeded_id = succeeded["id"].as_str().unwrap();
    let done = app.wait_for_status(succeeded_id, &["succeeded"]).await;
    let (mut browser, _) = signed_in_browser(&app).await;

    let detail = browser
        .get(&format!("/dashboard/generations/{succeeded_id}"))
        .await;
    assert!(
        detail.body.contains(&format!(
            "<dd id=\"generation-charge\">Charged {}</dd>",
            dollars(&done["cost"])
        )),
        "{}",
        detail.body
    );
    assert_eq!(
        attribute_of(&detail.body, "back-to-list", "href").as_deref(),
        Some("/dashboard/generations")
    );
    assert!(
        detail
            .body
            .contains(&format!("<code id=\"generation-id\">{succeeded_id}</code>"))
    );
    assert!(detail.body.contains("id=\"copy-id\""));
    let curl = format!(
        "curl -s {}/generations/{succeeded_id} -H &#34;Authorization: Bearer $VIDGATE_API_KEY&#34;",
        app.api_base
    );
    assert!(detail.body.contains(&curl), "{}", detail.body);
    assert!(!detail.body.contains(app.key()), "no key in the page");

    // The list shows the made clip: its first frame, length and size.
    let list = browser.get("/dashboard/generations").await;
    let video_url = done["output"]["video_url"].as_str().unwrap();
    assert!(
        list.body.contains(&format!(
            "<video class=\"thumbnail\" preload=\"metadata\" muted playsinline src=\"{video_url}\""
        )),
        "{}",
        list.body
    );
    assert!(
        list.body
            .contains("<td class=\"number duration\">2.0 s</td>")
    );
    assert!(list.body.contains("<td class=\"resolution\">854×480</td>"));
    assert!(
        list.body
            .contains("<span class=\"status-badge status-succeeded\">succeeded</span>")
    );

    // A failed one: the hold was refunded in full.
    let failed = app.submit_ok(M1_T2V, quick_body("a kite [sim:fail]")).await;
    let failed_id = failed["id"].as_str().unwrap();
    app.wait_for_status(failed_id, &["failed"]).await;
    let detail = browser
        .get(&format!("/dashboard/generations/{failed_id}"))
        .await;
    assert!(
        detail.body.contains(&format!(
            "<dd id=\"generation-charge\">Hold of {} refunded</dd>",
            dollars(&failed["cost"])
        )),
        "{}",
        detail.body
    );
}

async fn a_queued_or_canceled_generation_says_what_happens_to_its_hold(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let queued = app.submit_ok(M1_T2V, quick_body("a waiting kite")).await;
    let queued_id = queued["id"].as_str().unwrap();
    let hold = dollars(&queued["cost"]);
    let (mut browser, _) = signed_in_browser(&app).await;
    let detail = browser
        .get(&format!("/dashboard/generations/{queued_id}"))
        .await;
    assert!(
        detail.body.contains(&format!(
            "<dd id=\"generation-charge\">Hold of {hold}: charged if it succeeds, refunded if not</dd>"
        )),
        "{}",
        detail.body
    );
    cancel(&app, queued_id).await;
    let detail = browser
        .get(&format!("/dashboard/generations/{queued_id}"))
        .await;
    assert!(detail.body.contains(&format!(
        "<dd id=\"generation-charge\">Hold of {hold} refunded</dd>"
    )));
    assert!(
        detail
            .body
            .contains("<dd id=\"generation-status\">canceled</dd>")
    );
}

async fn open_in_the_playground_fills_the_form_with_the_inputs(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let prompt = "a \"quoted\" <i>kite</i> & a boat";
    let generation = app
        .submit_ok(
            M1_T2V,
            serde_json::json!({
                "prompt": prompt,
                "duration": 3,
                "resolution": "480p",
                "generate_audio": false,
                "seed": 42,
            }),
        )
        .await;
    let generation_id = generation["id"].as_str().unwrap();
    let (mut browser, _) = signed_in_browser(&app).await;
    let detail = browser
        .get(&format!("/dashboard/generations/{generation_id}"))
        .await;
    let href = attribute_of(&detail.body, "open-in-playground", "href").unwrap();
    assert!(
        href.starts_with("/dashboard/playground?endpoint=vendor_1%2Fmodel_1%2Ftext-to-video&"),
        "{href}"
    );
    let playground = browser.get(&href).await;
    assert_eq!(playground.status, StatusCode::OK);
    assert!(
        playground
            .body
            .contains(&format!("<option value=\"{M1_T2V}\" selected>"))
    );
    assert!(
        playground
            .body
            .contains(">a &#34;quoted&#34; &#60;i&#62;kite&#60;/i&#62; &#38; a boat</textarea>"),
        "{}",
        playground.body
    );
    assert!(!playground.body.contains("<i>kite</i>"));
    assert_eq!(
        attribute_of(&playground.body, "field-duration", "value").as_deref(),
        Some("3")
    );
    assert_eq!(
        attribute_of(&playground.body, "field-seed", "value").as_deref(),
        Some("42")
    );
    assert!(playground.body.contains("<option value=\"480p\" selected>"));
    assert!(
        playground.body.contains(
            "name=\"generate_audio\" type=\"checkbox\" data-type=\"boolean\" aria-describedby"
        ),
        "the box is unchecked as in the generation"
    );

    // A model switch carries what the next model shares, and leaves the
    // defaults where the value does not fit it (M2 makes 4, 6 or 8 s).
    let switched = browser
        .get("/dashboard/playground?endpoint=vendor_2%2Fmodel_2%2Ftext-to-video&prompt=kept&duration=3")
        .await;
    assert_eq!(switched.status, StatusCode::OK);
    assert!(
        switched.body.contains(">kept</textarea>"),
        "{}",
        switched.body
    );
    assert!(switched.body.contains("<option value=\"8\" selected>"));
}

async fn the_playground_names_models_and_fields_in_words(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut browser, _) = signed_in_browser(&app).await;
    let page = browser
        .get(&format!("/dashboard/playground?endpoint={M1_T2V}"))
        .await;
    assert!(
        page.body.contains(&format!(
            "<option value=\"{M1_T2V}\" selected>M1 · Model 1 — text to video</option>"
        )),
        "{}",
        page.body
    );
    let model = vidgate_core::Catalog::embedded()
        .model("vendor_1/model_1")
        .unwrap()
        .description
        .clone();
    assert!(page.body.contains(&format!(
        "<p id=\"model-description\" class=\"hint\">{model} "
    )));
    assert!(page.body.contains(
        "<label for=\"field-duration\">Length in seconds <code class=\"api-name\">duration</code></label>"
    ));
    // The advanced fields are folded away, after the everyday ones.
    let advanced = page.body.find("<details id=\"advanced-fields\">").unwrap();
    assert!(page.body.find("id=\"field-seed\"").unwrap() > advanced);
    assert!(page.body.find("id=\"field-negative_prompt\"").unwrap() > advanced);
    assert!(page.body.find("id=\"field-prompt\"").unwrap() < advanced);
    assert!(page.body.find("id=\"field-duration\"").unwrap() < advanced);
}

async fn a_refusal_for_money_links_to_credit_not_to_a_generation(store: StoreKind) {
    let app = spawn_app(store).await;
    let broke = app.new_account(0).await;
    add_user(&app, &broke, "broke@example.com").await;
    let mut browser = Browser::new(&app);
    let csrf = browser.sign_in("broke@example.com", PASSWORD).await;
    let refused = browser
        .post(
            "/dashboard/playground",
            &[
                ("csrf_token", &csrf),
                ("endpoint", M1_T2V),
                ("prompt", "a kite with no money"),
                ("duration", "2"),
                ("resolution", "480p"),
            ],
        )
        .await;
    assert_eq!(refused.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(
        attribute_of(&refused.body, "add-credit-link", "href").as_deref(),
        Some("/dashboard#credit-heading")
    );
    assert!(!refused.body.contains("/dashboard/generations/gen_"));
    assert!(refused.body.contains(">a kite with no money</textarea>"));
    let list = browser.get("/dashboard/generations").await;
    assert!(listed_ids(&list.body).is_empty(), "nothing was created");
}

on_both_stores!(
    the_list_filters_pages_and_keeps_the_filters,
    a_generation_says_what_was_held_charged_or_refunded,
    a_queued_or_canceled_generation_says_what_happens_to_its_hold,
    open_in_the_playground_fills_the_form_with_the_inputs,
    the_playground_names_models_and_fields_in_words,
    a_refusal_for_money_links_to_credit_not_to_a_generation,
);
