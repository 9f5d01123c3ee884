//! The OpenAI Videos API at `/v1/videos`: over plain HTTP (the SDK's
//! multipart form, bracket keys and all, and a JSON body), and driven by the
//! official `openai` Python SDK (`tests/openai_videos_client.py`).

use reqwest::StatusCode;
use reqwest::multipart::Form;
use serde_json::{Value, json};

use super::{DROPIN_PYTHON, api_generation, root_url};
use crate::common::{
    StoreKind, TestApp, on_both_stores, png_of, spawn_app, spawn_app_without_workers,
};

on_both_stores!(
    openai_create_read_list_and_content_over_http,
    openai_errors_are_openai_error_objects_with_its_field_names,
    openai_idempotency_key_compares_the_parsed_fields,
    openai_delete_cancels_a_queued_video,
    the_openai_sdk_drives_v1_videos,
);

const MODEL: &str = "vendor_1/model_1";

async fn post_form(
    app: &TestApp,
    key: &str,
    fields: &[(&str, &str)],
    idempotency_key: Option<&str>,
) -> reqwest::Response {
    let mut form = Form::new();
    for (name, value) in fields {
        form = form.text(name.to_string(), value.to_string());
    }
    let mut request = app
        .client
        .post(root_url(app, "/v1/videos"))
        .bearer_auth(key)
        .multipart(form);
    if let Some(idempotency_key) = idempotency_key {
        request = request.header("Idempotency-Key", idempotency_key);
    }
    request.send().await.unwrap()
}

async fn post_json(
    app: &TestApp,
    key: &str,
    body: &Value,
    idempotency_key: Option<&str>,
) -> reqwest::Response {
    let mut request = app
        .client
        .post(root_url(app, "/v1/videos"))
        .bearer_auth(key)
        .json(body);
    if let Some(idempotency_key) = idempotency_key {
        request = request.header("Idempotency-Key", idempotency_key);
    }
    request.send().await.unwrap()
}

async fn get_v1(app: &TestApp, key: &str, path: &str) -> reqwest::Response {
    app.client
        .get(root_url(app, path))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
}

async fn created(response: reqwest::Response) -> Value {
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

/// Asserts OpenAI's error object: the status, `type`, `param` (null when
/// none) and vidgate's `code`.
async fn assert_openai_error(
    response: reqwest::Response,
    status: StatusCode,
    kind: &str,
    param: Option<&str>,
) -> Value {
    assert_eq!(response.status(), status);
    let body: Value = response.json().await.unwrap();
    let error = &body["error"];
    assert_eq!(error["type"], kind, "{body}");
    assert_eq!(
        error["param"],
        param.map_or(Value::Null, Value::from),
        "{body}"
    );
    assert!(error["code"].is_string(), "{body}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|message| !message.is_empty()),
        "{body}"
    );
    body
}

async fn openai_create_read_list_and_content_over_http(store: StoreKind) {
    let app = spawn_app(store).await;
    let key = app.key().to_owned();
    let portrait = post_json(
        &app,
        &key,
        &json!({ "model": MODEL, "prompt": "a kite", "seconds": "2", "size": "480x854", "generate_audio": false }),
        None,
    )
    .await;
    assert_eq!(
        portrait.headers()["openai-poll-after-ms"],
        "5000",
        "an unfinished video paces create_and_poll"
    );
    let portrait = created(portrait).await;
    assert_eq!(portrait["object"], "video");
    assert_eq!(portrait["size"], "480x854");
    assert_eq!(portrait["seconds"], "2");
    assert_eq!(portrait["progress"], 0);
    let portrait_id = portrait["id"].as_str().unwrap().to_owned();
    let record = api_generation(&app, &key, &portrait_id).await;
    assert_eq!(record["source"], "openai");
    assert_eq!(record["mode"], "text-to-video");
    assert_eq!(record["input"]["duration"], 2);
    assert_eq!(record["input"]["resolution"], "480p");
    assert_eq!(record["input"]["aspect_ratio"], "9:16");
    assert_eq!(record["input"]["generate_audio"], false);

    // The SDK's form: text values, the image as a bracket key.
    let image_url = app.upload_png().await["url"].as_str().unwrap().to_owned();
    let from_image = created(
        post_form(
            &app,
            &key,
            &[
                ("model", MODEL),
                ("prompt", "the card, moving"),
                ("seconds", "2"),
                ("size", "854x480"),
                ("generate_audio", "false"),
                ("input_reference[image_url]", image_url.as_str()),
            ],
            None,
        )
        .await,
    )
    .await;
    let from_image_id = from_image["id"].as_str().unwrap().to_owned();
    let record = api_generation(&app, &key, &from_image_id).await;
    assert_eq!(record["mode"], "image-to-video");
    assert_eq!(record["input"]["image_url"], image_url);
    assert_eq!(record["input"]["generate_audio"], false);
    assert_eq!(record["input"]["duration"], 2);

    for id in [&portrait_id, &from_image_id] {
        app.wait_for_status(id, &["succeeded"]).await;
    }
    let done = get_v1(&app, &key, &format!("/v1/videos/{from_image_id}")).await;
    assert!(done.headers().get("openai-poll-after-ms").is_none());
    let done: Value = done.json().await.unwrap();
    assert_eq!(done["status"], "completed");
    assert_eq!(done["progress"], 100);
    assert_eq!(done["size"], "854x480");
    assert!(done["completed_at"].as_i64().unwrap() >= done["created_at"].as_i64().unwrap());
    assert_eq!(done["error"], Value::Null);

    let content = get_v1(&app, &key, &format!("/v1/videos/{from_image_id}/content")).await;
    assert_eq!(content.status(), StatusCode::OK);
    assert_eq!(content.headers()["content-type"], "video/mp4");
    let bytes = content.bytes().await.unwrap();
    assert_eq!(&bytes[4..8], b"ftyp");

    let first = get_v1(&app, &key, "/v1/videos?limit=1").await;
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["object"], "list");
    assert_eq!(first["has_more"], true);
    assert_eq!(
        first["data"][0]["id"],
        from_image_id.as_str(),
        "newest first"
    );
    assert_eq!(first["first_id"], first["last_id"]);
    let after = first["last_id"].as_str().unwrap();
    let second: Value = get_v1(&app, &key, &format!("/v1/videos?limit=1&after={after}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(second["data"][0]["id"], portrait_id.as_str());
    assert_eq!(second["has_more"], false);
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn openai_errors_are_openai_error_objects_with_its_field_names(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let key = app.key().to_owned();
    let base = json!({ "model": MODEL, "prompt": "a kite" });
    let with = |field: &str, value: Value| {
        let mut body = base.clone();
        body[field] = value;
        body
    };
    for (body, param) in [
        (with("size", json!("999x999")), "size"),
        (with("seconds", json!("99")), "seconds"),
        (with("seconds", json!("soon")), "seconds"),
        (with("duration", json!(2)), "duration"),
        (
            with("input_reference", json!({ "file_id": "file_1" })),
            "input_reference",
        ),
        (with("model", json!("sora-2")), "model"),
        (with("prompt", json!("")), "prompt"),
    ] {
        let response = post_json(&app, &key, &body, None).await;
        assert_openai_error(
            response,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some(param),
        )
        .await;
    }
    // Model 2 makes 1280x720 and 720x1280 only.
    let response = post_json(
        &app,
        &key,
        &json!({ "model": "vendor_2/model_2", "prompt": "x", "size": "854x480" }),
        None,
    )
    .await;
    let body = assert_openai_error(
        response,
        StatusCode::BAD_REQUEST,
        "invalid_request_error",
        Some("size"),
    )
    .await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1280x720"),
        "{body}"
    );

    let unauthenticated = app
        .client
        .get(root_url(&app, "/v1/videos"))
        .send()
        .await
        .unwrap();
    assert_openai_error(
        unauthenticated,
        StatusCode::UNAUTHORIZED,
        "authentication_error",
        None,
    )
    .await;
    let missing = get_v1(&app, &key, "/v1/videos/gen_missing").await;
    assert_openai_error(missing, StatusCode::NOT_FOUND, "not_found_error", None).await;
    let queued = created(
        post_json(
            &app,
            &key,
            &json!({ "model": MODEL, "prompt": "waits", "seconds": "2" }),
            None,
        )
        .await,
    )
    .await;
    let no_content = get_v1(
        &app,
        &key,
        &format!("/v1/videos/{}/content", queued["id"].as_str().unwrap()),
    )
    .await;
    assert_openai_error(no_content, StatusCode::NOT_FOUND, "not_found_error", None).await;
    let descending_only = get_v1(&app, &key, "/v1/videos?order=asc").await;
    assert_openai_error(
        descending_only,
        StatusCode::BAD_REQUEST,
        "invalid_request_error",
        Some("order"),
    )
    .await;
}

async fn openai_idempotency_key_compares_the_parsed_fields(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let key = app.key().to_owned();
    let fields = [
        ("model", MODEL),
        ("prompt", "once only"),
        ("seconds", "2"),
        ("size", "854x480"),
    ];
    // Each form has its own random boundary, as the SDK's retries do.
    let first = created(post_form(&app, &key, &fields, Some("retry-1")).await).await;
    let retried = post_form(&app, &key, &fields, Some("retry-1")).await;
    assert_eq!(retried.headers()["idempotent-replayed"], "true");
    let retried = created(retried).await;
    assert_eq!(first["id"], retried["id"]);
    // The same fields as JSON, seconds a number: the same request.
    let as_json = created(
        post_json(
            &app,
            &key,
            &json!({ "model": MODEL, "prompt": "once only", "seconds": 2, "size": "854x480" }),
            Some("retry-1"),
        )
        .await,
    )
    .await;
    assert_eq!(first["id"], as_json["id"]);
    let other = post_form(
        &app,
        &key,
        &[("model", MODEL), ("prompt", "another"), ("seconds", "2")],
        Some("retry-1"),
    )
    .await;
    assert_eq!(
        other.headers()["x-should-retry"],
        "false",
        "the SDK must not retry it"
    );
    assert_openai_error(
        other,
        StatusCode::CONFLICT,
        "invalid_request_error",
        Some("Idempotency-Key"),
    )
    .await;
    let account = app.account_state(&app.account.account.id).await;
    let price = app
        .quoted_price(
            "vendor_1/model_1/text-to-video",
            &json!({ "prompt": "once only", "duration": 2, "resolution": "480p", "aspect_ratio": "16:9" }),
        )
        .await;
    assert_eq!(account.held, price, "held once");
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn openai_delete_cancels_a_queued_video(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let key = app.key().to_owned();
    let credit = app.account_state(&app.account.account.id).await.balance;
    let queued = created(
        post_json(
            &app,
            &key,
            &json!({ "model": MODEL, "prompt": "never", "seconds": "2" }),
            None,
        )
        .await,
    )
    .await;
    let id = queued["id"].as_str().unwrap();
    assert!(app.account_state(&app.account.account.id).await.held.0 > 0);
    for _ in 0..2 {
        let deleted = app
            .client
            .delete(root_url(&app, &format!("/v1/videos/{id}")))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(deleted.status(), StatusCode::OK);
        let deleted: Value = deleted.json().await.unwrap();
        assert_eq!(
            deleted,
            json!({ "id": id, "object": "video.deleted", "deleted": true })
        );
    }
    let account = app.account_state(&app.account.account.id).await;
    assert_eq!((account.balance, account.held.0), (credit, 0));
    let canceled: Value = get_v1(&app, &key, &format!("/v1/videos/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(canceled["status"], "failed");
    assert_eq!(canceled["error"]["code"], "canceled");
    assert_eq!(api_generation(&app, &key, id).await["status"], "canceled");
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// The official `openai` SDK (3.51.0, as `.ci/run` pins it) through
/// `create_and_poll`, `retrieve`, `list` auto-paging, `download_content`,
/// `delete` and its typed errors. It runs when `VIDGATE_TEST_DROPIN_PYTHON`
/// names a Python with it.
async fn the_openai_sdk_drives_v1_videos(store: StoreKind) {
    let Some(python) = crate::providers::program_named_by(
        DROPIN_PYTHON,
        "a Python with openai==3.51.0 to drive /v1/videos with OpenAI's own SDK",
    ) else {
        return;
    };
    let app = spawn_app(store.clone()).await;
    let idle = spawn_app_without_workers(store).await;
    let image_url = app.upload_png().await["url"].as_str().unwrap().to_owned();
    let png = app.data_dir.path().join("frame.png");
    std::fs::write(&png, png_of([200, 40, 10])).unwrap();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openai_videos_client.py");
    let mut command = std::process::Command::new(python);
    command
        .arg(script)
        .arg(root_url(&app, "/v1"))
        .arg(app.key())
        .arg(root_url(&idle, "/v1"))
        .arg(idle.key())
        .arg(&png)
        .arg(&image_url);
    let (status, printed) = crate::providers::run_program(command, "the Python runs").await;
    assert!(status.success(), "{printed}");
    for part in [
        "create_and_poll",
        "openai-poll-after-ms",
        "download_content",
        "input_reference",
        "idempotency",
        "typed errors",
        "list auto-paging",
        "delete",
    ] {
        assert!(printed.contains(&format!("openai: {part} ok")), "{printed}");
    }
    let ids = printed
        .lines()
        .find_map(|line| line.strip_prefix("ids: "))
        .expect("the script prints its ids");
    // Read from the store: the script has just spent the key's request
    // budget, and a 429 here would say nothing about the generations.
    for id in ids.split_whitespace() {
        let generation = app
            .server
            .store
            .generations()
            .get(&app.account.account.id, id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{id} is stored"));
        assert_eq!(generation.source, "openai", "{id}");
    }
    app.assert_ledger_invariant(&app.account.account.id).await;
    idle.assert_ledger_invariant(&idle.account.account.id).await;
}
