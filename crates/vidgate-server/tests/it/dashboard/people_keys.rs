//! Issue 50, people and keys: keys record who made them and go with a
//! removed person (unless the owner keeps them); members manage keys and
//! the webhook secret only when the owners allow it; every such change from
//! the dashboard has its audit row naming `dashboard:<email>`; one-time
//! passwords expire.

use vidgate_server::store::{UserRole, now_millis};

use super::people_pages::{add_person, audit_rows, detail};
use super::*;

/// Creates a key on the keys page and answers its secret.
async fn create_key(browser: &mut Browser, csrf: &str, name: &str) -> String {
    let created = browser
        .post("/dashboard/keys", &[("name", name), ("csrf_token", csrf)])
        .await;
    assert_eq!(created.status, StatusCode::OK, "{}", created.body);
    let marker = "<code id=\"new-key-secret\">";
    let start = created.body.find(marker).expect("the secret is shown") + marker.len();
    created.body[start..start + created.body[start..].find('<').unwrap()].to_owned()
}

/// The status of an API request authenticated by `secret`.
async fn key_status(app: &TestApp, secret: &str) -> StatusCode {
    app.client
        .get(format!("{}/account", app.api_base))
        .bearer_auth(secret)
        .send()
        .await
        .unwrap()
        .status()
}

async fn key_id_named(app: &TestApp, name: &str) -> String {
    app.server
        .store
        .accounts()
        .api_keys(&app.account.account.id)
        .await
        .unwrap()
        .into_iter()
        .find(|key| key.name == name)
        .unwrap()
        .id
}

/// The owner (Ada, signed in) lets members manage keys and secrets.
async fn allow_members(owner: &mut Browser, csrf: &str) {
    let allowed = owner
        .post(
            "/dashboard/people/members",
            &[
                ("members_manage_keys_and_secrets", "1"),
                ("csrf_token", csrf),
            ],
        )
        .await;
    assert_eq!(allowed.status, StatusCode::SEE_OTHER, "{}", allowed.body);
}

async fn the_secret_as_fetched(browser: &Browser, csrf: &str) -> reqwest::Response {
    browser
        .client
        .get(format!("{}/dashboard/webhooks/secret", browser.base))
        .header("cookie", browser.cookie_header())
        .header("x-csrf-token", csrf)
        .send()
        .await
        .unwrap()
}

async fn a_removed_persons_keys_are_revoked_unless_the_owner_keeps_them(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut owner, owner_csrf) = signed_in_browser(&app).await;
    allow_members(&mut owner, &owner_csrf).await;
    let mia = add_person(&app, &app.account, "mia@example.com", UserRole::Member).await;
    let leo = add_person(&app, &app.account, "leo@example.com", UserRole::Member).await;
    let mut member = Browser::new(&app);
    let mia_csrf = member.sign_in("mia@example.com", PASSWORD).await;
    let mia_secret = create_key(&mut member, &mia_csrf, "mia's").await;
    let mut other = Browser::new(&app);
    let leo_csrf = other.sign_in("leo@example.com", PASSWORD).await;
    let leo_secret = create_key(&mut other, &leo_csrf, "leo's").await;
    let owner_secret = create_key(&mut owner, &owner_csrf, "ada's").await;
    for secret in [&mia_secret, &leo_secret, &owner_secret] {
        assert_eq!(key_status(&app, secret).await, StatusCode::OK);
    }
    let mia_key = key_id_named(&app, "mia's").await;
    let keys = app
        .server
        .store
        .accounts()
        .api_keys(&app.account.account.id)
        .await
        .unwrap();
    let made_by = |name: &str| {
        keys.iter()
            .find(|key| key.name == name)
            .unwrap()
            .created_by_user_id
            .clone()
    };
    assert_eq!(made_by("mia's"), Some(mia.id.clone()));
    assert_eq!(made_by("leo's"), Some(leo.id.clone()));
    assert_eq!(
        made_by("default"),
        None,
        "the operator's key records nobody"
    );
    let listed = owner.get("/dashboard/keys").await;
    assert!(
        listed
            .body
            .contains("<td class=\"made-by\">mia@example.com</td>"),
        "{}",
        listed.body
    );

    // The confirmation asks about the keys, revoking them unless told.
    let removal = format!("/dashboard/people/{}/remove", mia.id);
    let asked = owner.get(&removal).await;
    assert_eq!(asked.status, StatusCode::OK);
    assert!(
        asked.body.contains("They made 1 API key(s)"),
        "{}",
        asked.body
    );
    assert!(
        asked
            .body
            .contains("<input type=\"radio\" name=\"keys\" value=\"revoke\" checked>"),
        "{}",
        asked.body
    );
    let removed = owner
        .post(&removal, &[("keys", "revoke"), ("csrf_token", &owner_csrf)])
        .await;
    assert_eq!(removed.status, StatusCode::SEE_OTHER, "{}", removed.body);
    assert_eq!(
        removed.location(),
        "/dashboard/people?done=removed&keys_revoked=1"
    );
    assert_eq!(
        key_status(&app, &mia_secret).await,
        StatusCode::UNAUTHORIZED
    );
    let rows = audit_rows(&app, "user.remove").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].actor, "dashboard:ada@example.com");
    assert_eq!(
        detail(&rows[0])["keys_revoked"],
        serde_json::json!([mia_key])
    );
    let listed = owner.get("/dashboard/keys").await;
    assert!(
        listed
            .body
            .contains("<td class=\"made-by\">a removed person</td>"),
        "{}",
        listed.body
    );

    // Kept: the key works on after its maker is gone.
    let kept = owner
        .post(
            &format!("/dashboard/people/{}/remove", leo.id),
            &[("keys", "keep"), ("csrf_token", &owner_csrf)],
        )
        .await;
    assert_eq!(kept.status, StatusCode::SEE_OTHER, "{}", kept.body);
    assert_eq!(kept.location(), "/dashboard/people?done=removed");
    assert_eq!(key_status(&app, &leo_secret).await, StatusCode::OK);
    assert_eq!(key_status(&app, &owner_secret).await, StatusCode::OK);
    assert_eq!(key_status(&app, &app.account.api_key).await, StatusCode::OK);

    // The operator's removal revokes the keys the person made too.
    vidgate_server::operator_actions::users::create(
        app.server.store.as_ref(),
        "cli",
        &app.account.account.id,
        "bo@example.com",
        Some(PASSWORD.to_owned()),
    )
    .await
    .unwrap();
    let mut bo = Browser::new(&app);
    let bo_csrf = bo.sign_in("bo@example.com", PASSWORD).await;
    let bo_secret = create_key(&mut bo, &bo_csrf, "bo's").await;
    vidgate_server::operator_actions::users::remove(
        app.server.store.as_ref(),
        "cli",
        "bo@example.com",
    )
    .await
    .unwrap();
    assert_eq!(key_status(&app, &bo_secret).await, StatusCode::UNAUTHORIZED);
    assert_eq!(key_status(&app, &owner_secret).await, StatusCode::OK);
}

async fn a_member_manages_keys_and_the_secret_only_when_the_owners_allow(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut owner, owner_csrf) = signed_in_browser(&app).await;
    add_person(&app, &app.account, "mia@example.com", UserRole::Member).await;
    let mut member = Browser::new(&app);
    let csrf = member.sign_in("mia@example.com", PASSWORD).await;
    let default_key = app.account.key_id.clone();
    let secret_before = app
        .server
        .store
        .accounts()
        .get(&app.account.account.id)
        .await
        .unwrap()
        .unwrap()
        .webhook_secret;

    // By default a member sees the keys but none of the forms, and every
    // change and every read of the secret is refused.
    let keys_page = member.get("/dashboard/keys").await;
    assert_eq!(keys_page.status, StatusCode::OK);
    assert!(keys_page.body.contains("id=\"keys-members-note\""));
    assert!(!keys_page.body.contains("id=\"create-key\""));
    assert!(!keys_page.body.contains("revoke-key"));
    let webhooks_page = member.get("/dashboard/webhooks").await;
    assert_eq!(webhooks_page.status, StatusCode::OK);
    assert!(webhooks_page.body.contains("id=\"secret-members-note\""));
    assert!(!webhooks_page.body.contains("id=\"reveal-secret\""));
    let revoke_path = format!("/dashboard/keys/{default_key}/revoke");
    let limit_path = format!("/dashboard/keys/{default_key}/limit");
    let refused = [
        member
            .post(
                "/dashboard/keys",
                &[("name", "mine"), ("csrf_token", &csrf)],
            )
            .await,
        member.get(&revoke_path).await,
        member.post(&revoke_path, &[("csrf_token", &csrf)]).await,
        member
            .post(
                &limit_path,
                &[
                    ("spend_limit_usd", ""),
                    ("spend_limit_period", "day"),
                    ("csrf_token", &csrf),
                ],
            )
            .await,
        member.get("/dashboard/webhooks?reveal=1").await,
        member.get("/dashboard/webhooks/rotate").await,
        member
            .post("/dashboard/webhooks/rotate", &[("csrf_token", &csrf)])
            .await,
        // Nor may a member give themselves the permission.
        member
            .post(
                "/dashboard/people/members",
                &[
                    ("members_manage_keys_and_secrets", "1"),
                    ("csrf_token", &csrf),
                ],
            )
            .await,
    ];
    for page in refused {
        assert_eq!(page.status, StatusCode::FORBIDDEN, "{}", page.body);
        assert!(page.body.contains("Only an owner"), "{}", page.body);
        assert!(!page.body.contains(&secret_before));
    }
    let fetched = the_secret_as_fetched(&member, &csrf).await;
    assert_eq!(fetched.status(), StatusCode::FORBIDDEN);
    assert!(!fetched.text().await.unwrap().contains(&secret_before));
    // The API's rotation refuses every dashboard session: people rotate on
    // the page, where the owners' choice holds.
    let rotated_by_api = member
        .api(
            reqwest::Method::POST,
            "/account/webhook-secret/rotate",
            Some(&csrf),
        )
        .await;
    assert_eq!(rotated_by_api.status(), StatusCode::FORBIDDEN);
    let keys_after = app
        .server
        .store
        .accounts()
        .api_keys(&app.account.account.id)
        .await
        .unwrap();
    assert_eq!(keys_after.len(), 1);
    assert!(keys_after[0].revoked_at.is_none());
    let account = app
        .server
        .store
        .accounts()
        .get(&app.account.account.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(account.webhook_secret, secret_before);
    assert!(
        app.server
            .store
            .operator()
            .audit_log(None, 50)
            .await
            .unwrap()
            .is_empty()
    );

    // Allowed by an owner, the member does each, audited in their name.
    allow_members(&mut owner, &owner_csrf).await;
    let permission_rows = audit_rows(&app, "account.member_permissions").await;
    assert_eq!(permission_rows.len(), 1, "{permission_rows:?}");
    assert_eq!(permission_rows[0].actor, "dashboard:ada@example.com");
    assert_eq!(
        detail(&permission_rows[0])["members_manage_keys_and_secrets"],
        true
    );
    let secret = create_key(&mut member, &csrf, "mine").await;
    assert_eq!(key_status(&app, &secret).await, StatusCode::OK);
    let mine = key_id_named(&app, "mine").await;
    let limited = member
        .post(
            &format!("/dashboard/keys/{mine}/limit"),
            &[
                ("spend_limit_usd", "1.00"),
                ("spend_limit_period", "day"),
                ("csrf_token", &csrf),
            ],
        )
        .await;
    assert_eq!(limited.status, StatusCode::SEE_OTHER, "{}", limited.body);
    assert_eq!(member.get(&revoke_path).await.status, StatusCode::OK);
    let revoked = member
        .post(
            &format!("/dashboard/keys/{mine}/revoke"),
            &[("csrf_token", &csrf)],
        )
        .await;
    assert_eq!(revoked.status, StatusCode::SEE_OTHER, "{}", revoked.body);
    assert_eq!(key_status(&app, &secret).await, StatusCode::UNAUTHORIZED);
    let fetched = the_secret_as_fetched(&member, &csrf).await;
    assert_eq!(fetched.status(), StatusCode::OK);
    let rotated = member
        .post("/dashboard/webhooks/rotate", &[("csrf_token", &csrf)])
        .await;
    assert_eq!(rotated.status, StatusCode::SEE_OTHER, "{}", rotated.body);
    let account = app
        .server
        .store
        .accounts()
        .get(&app.account.account.id)
        .await
        .unwrap()
        .unwrap();
    assert_ne!(account.webhook_secret, secret_before);
    for (action, target) in [
        ("key.create", mine.as_str()),
        ("key.limit", mine.as_str()),
        ("key.revoke", mine.as_str()),
        (
            "account.rotate_webhook_secret",
            app.account.account.id.as_str(),
        ),
    ] {
        let rows = audit_rows(&app, action).await;
        assert_eq!(rows.len(), 1, "{action}: {rows:?}");
        assert_eq!(rows[0].actor, "dashboard:mia@example.com", "{action}");
        assert_eq!(rows[0].target, target, "{action}");
    }
    assert_eq!(
        detail(&audit_rows(&app, "key.limit").await[0])["spend_limit_micros"],
        1_000_000
    );

    // An owner's own changes are audited in their name too.
    create_key(&mut owner, &owner_csrf, "ada's").await;
    let rows = audit_rows(&app, "key.create").await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[1].actor, "dashboard:ada@example.com");

    // Withdrawn, the permission holds again at once.
    let withdrawn = owner
        .post("/dashboard/people/members", &[("csrf_token", &owner_csrf)])
        .await;
    assert_eq!(
        withdrawn.status,
        StatusCode::SEE_OTHER,
        "{}",
        withdrawn.body
    );
    let refused = member
        .post(
            "/dashboard/keys",
            &[("name", "again"), ("csrf_token", &csrf)],
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
}

async fn an_expired_one_time_password_is_refused(store: StoreKind) {
    let app = spawn_app(store).await;
    // A one-time password is good for 72 hours from when it is made.
    let fresh = users::create_user(
        app.server.store.as_ref(),
        &app.account.account.id,
        "fresh@example.com",
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        fresh.user.one_time_password_expires_at,
        Some(fresh.user.created_at + 72 * 60 * 60 * 1000)
    );
    // One made three days and a second ago has expired.
    let mut expired = users::prepare_user(
        app.server.store.as_ref(),
        &app.account.account.id,
        "late@example.com",
        None,
        UserRole::Member,
    )
    .await
    .unwrap();
    expired.user.one_time_password_expires_at = Some(now_millis() - 1000);
    app.server
        .store
        .users()
        .create(&expired.user)
        .await
        .unwrap()
        .unwrap();
    let mut browser = Browser::new(&app);
    let refused = browser
        .sign_in_attempt(
            "late@example.com",
            expired.one_time_password.as_deref().unwrap(),
        )
        .await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{}", refused.body);
    assert!(
        refused.body.contains("This one-time password has expired"),
        "{}",
        refused.body
    );
    assert!(refused.set_cookie("vg_session").is_none());
    // A wrong password is told only that it is wrong.
    let wrong = browser
        .sign_in_attempt("late@example.com", "not the password at all")
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(!wrong.body.contains("expired"), "{}", wrong.body);

    // The fresh one signs in, and the password the person then chooses
    // never expires.
    let signed_in = browser
        .sign_in_attempt(
            "fresh@example.com",
            fresh.one_time_password.as_deref().unwrap(),
        )
        .await;
    assert_eq!(
        signed_in.status,
        StatusCode::SEE_OTHER,
        "{}",
        signed_in.body
    );
    assert_eq!(signed_in.location(), "/dashboard/password");
    let csrf = browser.get("/dashboard/password").await.csrf_token();
    let new_password = "a password chosen by me";
    let changed = browser
        .post(
            "/dashboard/password",
            &[
                (
                    "current_password",
                    fresh.one_time_password.as_deref().unwrap(),
                ),
                ("new_password", new_password),
                ("repeat_password", new_password),
                ("csrf_token", &csrf),
            ],
        )
        .await;
    assert_eq!(changed.status, StatusCode::SEE_OTHER, "{}", changed.body);
    let user = app
        .server
        .store
        .users()
        .by_email("fresh@example.com")
        .await
        .unwrap()
        .unwrap();
    assert!(!user.must_change_password);
    assert_eq!(user.one_time_password_expires_at, None);
}

on_both_stores!(
    a_removed_persons_keys_are_revoked_unless_the_owner_keeps_them,
    a_member_manages_keys_and_the_secret_only_when_the_owners_allow,
    an_expired_one_time_password_is_refused,
);
