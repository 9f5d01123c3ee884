//! Issue 44, people and passwords: the forced change of a one-time
//! password, the password page, and the people page's invitations, roles
//! and removals, with the account's refusals (members, the last owner,
//! other accounts' people, taken emails, forms without their CSRF token)
//! and the audit rows of every change.

use vidgate_server::store::{AuditEntry, User, UserRole};

use super::*;

const NEW_PASSWORD: &str = "a brand new password of mine";

/// A user of `account` with `role` and the test password.
pub(super) async fn add_person(
    app: &TestApp,
    account: &CreatedAccount,
    email: &str,
    role: UserRole,
) -> User {
    let prepared = users::prepare_user(
        app.server.store.as_ref(),
        &account.account.id,
        email,
        Some(PASSWORD.to_owned()),
        role,
    )
    .await
    .unwrap();
    app.server
        .store
        .users()
        .create(&prepared.user)
        .await
        .unwrap()
        .unwrap()
}

async fn user(app: &TestApp, email: &str) -> Option<User> {
    app.server.store.users().by_email(email).await.unwrap()
}

/// The audit rows of one action, oldest first.
pub(super) async fn audit_rows(app: &TestApp, action: &str) -> Vec<AuditEntry> {
    let mut rows: Vec<AuditEntry> = app
        .server
        .store
        .operator()
        .audit_log(None, 500)
        .await
        .unwrap()
        .into_iter()
        .filter(|entry| entry.action == action)
        .collect();
    rows.reverse();
    rows
}

pub(super) fn detail(entry: &AuditEntry) -> Value {
    serde_json::from_str(&entry.detail).unwrap()
}

async fn post_password_change(
    browser: &mut Browser,
    csrf: &str,
    current: &str,
    new: &str,
    repeat: &str,
) -> Page {
    browser
        .post(
            "/dashboard/password",
            &[
                ("current_password", current),
                ("new_password", new),
                ("repeat_password", repeat),
                ("csrf_token", csrf),
            ],
        )
        .await
}

/// Signs in a user who must change their password: the sign-in leads to
/// the password page, whose CSRF token is returned.
async fn sign_in_held_at_password_page(
    browser: &mut Browser,
    email: &str,
    password: &str,
) -> String {
    let signed_in = browser.sign_in_attempt(email, password).await;
    assert_eq!(
        signed_in.status,
        StatusCode::SEE_OTHER,
        "{}",
        signed_in.body
    );
    assert_eq!(signed_in.location(), "/dashboard/password");
    let page = browser.get("/dashboard/password").await;
    assert_eq!(page.status, StatusCode::OK);
    page.csrf_token()
}

/// The one-time password an invitation's page shows.
fn one_time_password_of(page: &Page) -> String {
    let marker = "<code id=\"one-time-password\">";
    let start = page.body.find(marker).expect("the password is shown") + marker.len();
    page.body[start..start + page.body[start..].find('<').unwrap()].to_owned()
}

async fn a_one_time_password_holds_the_user_at_the_password_page(store: StoreKind) {
    let app = spawn_app(store).await;
    let created = users::create_user(
        app.server.store.as_ref(),
        &app.account.account.id,
        "otp@example.com",
        None,
    )
    .await
    .unwrap();
    assert!(created.user.must_change_password);
    let one_time_password = created.one_time_password.unwrap();
    let mut browser = Browser::new(&app);
    let csrf =
        sign_in_held_at_password_page(&mut browser, "otp@example.com", &one_time_password).await;

    // Every page sends the user back; the password page says why and
    // offers no navigation that would only lead back to it.
    for path in [
        "/dashboard",
        "/dashboard/keys",
        "/dashboard/people",
        "/dashboard/webhooks",
        "/dashboard/generations",
    ] {
        let page = browser.get(path).await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "{path}");
        assert_eq!(page.location(), "/dashboard/password", "{path}");
    }
    let held = browser
        .post(
            "/dashboard/keys",
            &[("name", "held"), ("csrf_token", &csrf)],
        )
        .await;
    assert_eq!(held.location(), "/dashboard/password");
    // The API the pages call is held alike, with a 403 that says where to go.
    let held_api = browser.api(reqwest::Method::GET, "/account", None).await;
    assert_eq!(held_api.status(), StatusCode::FORBIDDEN);
    let refusal: Value = held_api.json().await.unwrap();
    assert_eq!(refusal["error"]["code"], "forbidden");
    assert!(
        refusal["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/dashboard/password"),
        "{refusal}"
    );
    let page = browser.get("/dashboard/password").await;
    assert!(
        page.body.contains("id=\"must-change-password\""),
        "{}",
        page.body
    );
    assert!(!page.body.contains("href=\"/dashboard/keys\""));
    assert!(page.body.contains("id=\"sign-out\""));
    // Its stylesheet and script are served all the same.
    let marker = "<link rel=\"stylesheet\" href=\"";
    let start = page.body.find(marker).unwrap() + marker.len();
    let stylesheet = &page.body[start..start + page.body[start..].find('"').unwrap()];
    assert_eq!(browser.get(stylesheet).await.status, StatusCode::OK);

    // Signing out is allowed before the change, in a second browser.
    let mut second = Browser::new(&app);
    let second_csrf =
        sign_in_held_at_password_page(&mut second, "otp@example.com", &one_time_password).await;
    let signed_out = second
        .post("/dashboard/sign-out", &[("csrf_token", &second_csrf)])
        .await;
    assert_eq!(signed_out.status, StatusCode::SEE_OTHER);
    assert_eq!(signed_out.location(), "/dashboard/sign-in");

    let changed = post_password_change(
        &mut browser,
        &csrf,
        &one_time_password,
        NEW_PASSWORD,
        NEW_PASSWORD,
    )
    .await;
    assert_eq!(changed.status, StatusCode::SEE_OTHER, "{}", changed.body);
    assert_eq!(changed.location(), "/dashboard/password?changed=1");
    let told = browser.get(changed.location()).await;
    assert!(
        told.body.contains("Your password was changed"),
        "{}",
        told.body
    );
    assert!(!told.body.contains("id=\"must-change-password\""));
    assert!(told.body.contains("href=\"/dashboard/keys\""));
    assert_eq!(browser.get("/dashboard").await.status, StatusCode::OK);
    assert_eq!(browser.get("/dashboard/keys").await.status, StatusCode::OK);
    assert_eq!(
        browser
            .api(reqwest::Method::GET, "/account", None)
            .await
            .status(),
        StatusCode::OK
    );
    assert!(
        !user(&app, "otp@example.com")
            .await
            .unwrap()
            .must_change_password
    );

    // The next sign-in goes straight to the overview, with the new password
    // only.
    let mut later = Browser::new(&app);
    let refused = later
        .sign_in_attempt("otp@example.com", &one_time_password)
        .await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    later.sign_in("otp@example.com", NEW_PASSWORD).await;
}

async fn a_refused_password_change_names_the_field_and_changes_nothing(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut browser, csrf) = signed_in_browser(&app).await;
    let before = user(&app, "ada@example.com").await.unwrap();
    let page = browser.get("/dashboard/password").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("<form id=\"change-password\""));
    // The page is linked from the signed-in user's email.
    assert!(
        page.body
            .contains("<a class=\"who\" id=\"your-password\" href=\"/dashboard/password\" aria-current=\"page\""),
        "{}",
        page.body
    );

    let cases = [
        (
            "wrong current password",
            ["not my password at all", NEW_PASSWORD, NEW_PASSWORD],
            "The current password is wrong.",
            "current-password",
        ),
        (
            "short new password",
            [PASSWORD, "short", "short"],
            "at least 10 characters",
            "new-password",
        ),
        (
            "repeat mismatch",
            [PASSWORD, NEW_PASSWORD, "a different new password"],
            "The repeated password is not the same",
            "repeat-password",
        ),
        (
            "new equals current",
            [PASSWORD, PASSWORD, PASSWORD],
            "must differ from the current one",
            "new-password",
        ),
    ];
    for (case, [current, new, repeat], message, field) in cases {
        let refused = post_password_change(&mut browser, &csrf, current, new, repeat).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{case}");
        assert!(refused.body.contains(message), "{case}: {}", refused.body);
        assert!(refused.body.contains("role=\"alert\""), "{case}");
        let input = format!("<input id=\"{field}\"");
        let start = refused.body.find(&input).unwrap();
        let tag = &refused.body[start..start + refused.body[start..].find('>').unwrap()];
        assert!(tag.contains("aria-invalid=\"true\""), "{case}: {tag}");
    }
    assert_eq!(user(&app, "ada@example.com").await.unwrap(), before);
    assert!(audit_rows(&app, "user.password").await.is_empty());
}

async fn a_password_change_ends_the_other_sessions_only(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut browser, csrf) = signed_in_browser(&app).await;
    let mut elsewhere = Browser::new(&app);
    elsewhere.sign_in("ada@example.com", PASSWORD).await;
    let ada = user(&app, "ada@example.com").await.unwrap();

    let changed =
        post_password_change(&mut browser, &csrf, PASSWORD, NEW_PASSWORD, NEW_PASSWORD).await;
    assert_eq!(changed.status, StatusCode::SEE_OTHER, "{}", changed.body);
    let told = browser.get(changed.location()).await;
    assert!(
        told.body.contains("signed out everywhere else"),
        "{}",
        told.body
    );

    // This session goes on; the other one is over, pages and API alike.
    assert_eq!(browser.get("/dashboard").await.status, StatusCode::OK);
    let other = elsewhere.get("/dashboard").await;
    assert_eq!(other.status, StatusCode::SEE_OTHER);
    assert_eq!(other.location(), "/dashboard/sign-in");
    let api = elsewhere.api(reqwest::Method::GET, "/account", None).await;
    assert_eq!(api.status(), StatusCode::UNAUTHORIZED);

    let rows = audit_rows(&app, "user.password").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].actor, "dashboard:ada@example.com");
    assert_eq!(rows[0].target, ada.id);
    assert_eq!(detail(&rows[0])["sessions_revoked"], 1);
    assert_eq!(
        detail(&rows[0])["account_id"],
        app.account.account.id.as_str()
    );

    let mut again = Browser::new(&app);
    assert_eq!(
        again
            .sign_in_attempt("ada@example.com", PASSWORD)
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    again.sign_in("ada@example.com", NEW_PASSWORD).await;
}

async fn an_invited_person_signs_in_with_a_one_time_password_and_must_change_it(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut owner, csrf) = signed_in_browser(&app).await;
    let page = owner.get("/dashboard/people").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("<form id=\"invite-person\""),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("href=\"/dashboard/people\" aria-current=\"page\"")
    );
    assert!(page.body.contains("<span class=\"badge you\">you</span>"));

    let invited = owner
        .post(
            "/dashboard/people",
            &[
                ("email", " Bob@Example.com "),
                ("role", "member"),
                ("csrf_token", &csrf),
            ],
        )
        .await;
    assert_eq!(invited.status, StatusCode::OK, "{}", invited.body);
    let one_time_password = one_time_password_of(&invited);
    assert!(one_time_password.len() >= 20, "{one_time_password}");
    assert!(invited.body.contains("data-copy=\"one-time-password\""));
    let bob = user(&app, "bob@example.com").await.unwrap();
    assert_eq!(bob.role, UserRole::Member);
    assert_eq!(bob.account_id, app.account.account.id);
    assert!(bob.must_change_password);
    // The list shows the person, and never the password again.
    let listed = owner.get("/dashboard/people").await;
    assert!(
        listed
            .body
            .contains(&format!("<tr data-user-id=\"{}\">", bob.id))
    );
    assert!(listed.body.contains("bob@example.com"));
    assert!(!listed.body.contains(&one_time_password));
    assert!(!listed.body.contains("one-time-password"));

    let rows = audit_rows(&app, "user.create").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].actor, "dashboard:ada@example.com");
    assert_eq!(rows[0].target, bob.id);
    assert_eq!(detail(&rows[0])["email"], "bob@example.com");
    assert_eq!(detail(&rows[0])["role"], "member");

    let mut invitee = Browser::new(&app);
    let invitee_csrf =
        sign_in_held_at_password_page(&mut invitee, "bob@example.com", &one_time_password).await;
    assert_eq!(
        invitee.get("/dashboard").await.location(),
        "/dashboard/password"
    );
    let changed = post_password_change(
        &mut invitee,
        &invitee_csrf,
        &one_time_password,
        NEW_PASSWORD,
        NEW_PASSWORD,
    )
    .await;
    assert_eq!(changed.status, StatusCode::SEE_OTHER, "{}", changed.body);
    assert_eq!(invitee.get("/dashboard").await.status, StatusCode::OK);
    let account: Value = invitee
        .api(reqwest::Method::GET, "/account", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(account["id"], app.account.account.id.as_str());
}

async fn a_member_is_refused_every_change_with_403(store: StoreKind) {
    let app = spawn_app(store).await;
    add_user(&app, &app.account, "ada@example.com").await;
    let ada = user(&app, "ada@example.com").await.unwrap();
    add_person(&app, &app.account, "mia@example.com", UserRole::Member).await;
    let mut member = Browser::new(&app);
    let csrf = member.sign_in("mia@example.com", PASSWORD).await;

    let page = member.get("/dashboard/people").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("ada@example.com"));
    assert!(page.body.contains("id=\"members-note\""));
    assert!(!page.body.contains("id=\"invite-person\""));
    assert!(!page.body.contains("remove-person"));

    let people_before = app
        .server
        .store
        .users()
        .account_users(&app.account.account.id)
        .await
        .unwrap();
    let role_path = format!("/dashboard/people/{}/role", ada.id);
    let remove_path = format!("/dashboard/people/{}/remove", ada.id);
    let attempts = [
        member
            .post(
                "/dashboard/people",
                &[
                    ("email", "new@example.com"),
                    ("role", "owner"),
                    ("csrf_token", &csrf),
                ],
            )
            .await,
        member
            .post(&role_path, &[("role", "member"), ("csrf_token", &csrf)])
            .await,
        member.get(&remove_path).await,
        member.post(&remove_path, &[("csrf_token", &csrf)]).await,
    ];
    for attempt in attempts {
        assert_eq!(attempt.status, StatusCode::FORBIDDEN, "{}", attempt.body);
        assert!(attempt.body.contains("Only an owner"), "{}", attempt.body);
    }
    assert_eq!(
        app.server
            .store
            .users()
            .account_users(&app.account.account.id)
            .await
            .unwrap(),
        people_before
    );
    assert!(user(&app, "new@example.com").await.is_none());
    assert!(
        app.server
            .store
            .operator()
            .audit_log(None, 50)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn the_last_owner_cannot_remove_or_demote_themselves(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut owner, csrf) = signed_in_browser(&app).await;
    let ada = user(&app, "ada@example.com").await.unwrap();
    let mia = add_person(&app, &app.account, "mia@example.com", UserRole::Member).await;
    let own_role = format!("/dashboard/people/{}/role", ada.id);
    let own_removal = format!("/dashboard/people/{}/remove", ada.id);

    let demoted = owner
        .post(&own_role, &[("role", "member"), ("csrf_token", &csrf)])
        .await;
    assert_eq!(demoted.status, StatusCode::CONFLICT, "{}", demoted.body);
    assert!(
        demoted.body.contains("must keep an owner"),
        "{}",
        demoted.body
    );
    let asked = owner.get(&own_removal).await;
    assert_eq!(asked.status, StatusCode::OK);
    assert!(asked.body.contains("Remove yourself"), "{}", asked.body);
    assert!(asked.body.contains(&format!(
        "<form id=\"confirm-action\" method=\"post\" action=\"{own_removal}\""
    )));
    let removed = owner.post(&own_removal, &[("csrf_token", &csrf)]).await;
    assert_eq!(removed.status, StatusCode::CONFLICT, "{}", removed.body);
    assert!(removed.body.contains("must keep an owner"));
    assert_eq!(user(&app, "ada@example.com").await.unwrap(), ada);
    assert_eq!(owner.get("/dashboard").await.status, StatusCode::OK);
    assert!(audit_rows(&app, "user.role").await.is_empty());
    assert!(audit_rows(&app, "user.remove").await.is_empty());

    // With a second owner, the first may step down.
    let promoted = owner
        .post(
            &format!("/dashboard/people/{}/role", mia.id),
            &[("role", "owner"), ("csrf_token", &csrf)],
        )
        .await;
    assert_eq!(promoted.status, StatusCode::SEE_OTHER, "{}", promoted.body);
    assert_eq!(promoted.location(), "/dashboard/people?done=role");
    let stepped_down = owner
        .post(&own_role, &[("role", "member"), ("csrf_token", &csrf)])
        .await;
    assert_eq!(stepped_down.status, StatusCode::SEE_OTHER);
    assert_eq!(
        user(&app, "ada@example.com").await.unwrap().role,
        UserRole::Member
    );
    assert_eq!(
        user(&app, "mia@example.com").await.unwrap().role,
        UserRole::Owner
    );
    let rows = audit_rows(&app, "user.role").await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0].target, mia.id);
    assert_eq!(detail(&rows[0])["to"], "owner");
    assert_eq!(rows[1].target, ada.id);
    assert_eq!(detail(&rows[1])["from"], "owner");
    assert_eq!(detail(&rows[1])["to"], "member");
    assert!(
        rows.iter()
            .all(|row| row.actor == "dashboard:ada@example.com")
    );
}

async fn two_owners_demoting_each_other_at_once_leave_an_owner(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut ada_browser, ada_csrf) = signed_in_browser(&app).await;
    let ada = user(&app, "ada@example.com").await.unwrap();
    let bea = add_person(&app, &app.account, "bea@example.com", UserRole::Owner).await;
    let mut bea_browser = Browser::new(&app);
    let bea_csrf = bea_browser.sign_in("bea@example.com", PASSWORD).await;
    let ada_path = format!("/dashboard/people/{}/role", bea.id);
    let bea_path = format!("/dashboard/people/{}/role", ada.id);
    let ada_form = [("role", "member"), ("csrf_token", ada_csrf.as_str())];
    let bea_form = [("role", "member"), ("csrf_token", bea_csrf.as_str())];
    let (by_ada, by_bea) = tokio::join!(
        ada_browser.post(&ada_path, &ada_form),
        bea_browser.post(&bea_path, &bea_form),
    );
    let mut statuses = [by_ada.status, by_bea.status];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::SEE_OTHER, StatusCode::FORBIDDEN]);
    let owners = app
        .server
        .store
        .users()
        .account_users(&app.account.account.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|person| person.role == UserRole::Owner)
        .count();
    assert_eq!(owners, 1);
    assert_eq!(audit_rows(&app, "user.role").await.len(), 1);
}

async fn a_removed_person_is_signed_out_at_once(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut owner, csrf) = signed_in_browser(&app).await;
    let mia = add_person(&app, &app.account, "mia@example.com", UserRole::Member).await;
    let mut member = Browser::new(&app);
    member.sign_in("mia@example.com", PASSWORD).await;

    let removal = format!("/dashboard/people/{}/remove", mia.id);
    let listed = owner.get("/dashboard/people").await;
    assert!(
        listed.body.contains(&format!(
            "<a class=\"button danger remove-person\" href=\"{removal}\""
        )),
        "{}",
        listed.body
    );
    let asked = owner.get(&removal).await;
    assert_eq!(asked.status, StatusCode::OK);
    assert!(
        asked.body.contains("Remove mia@example.com?"),
        "{}",
        asked.body
    );
    assert!(asked.body.contains("href=\"/dashboard/people\">Cancel</a>"));
    assert_eq!(
        member.get("/dashboard").await.status,
        StatusCode::OK,
        "asking removes nobody"
    );

    let removed = owner.post(&removal, &[("csrf_token", &csrf)]).await;
    assert_eq!(removed.status, StatusCode::SEE_OTHER, "{}", removed.body);
    assert_eq!(removed.location(), "/dashboard/people?done=removed");
    let told = owner.get(removed.location()).await;
    assert!(
        told.body.contains("The person was removed"),
        "{}",
        told.body
    );
    assert!(!told.body.contains("mia@example.com"));
    assert!(user(&app, "mia@example.com").await.is_none());
    let page = member.get("/dashboard").await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(page.location(), "/dashboard/sign-in");
    assert_eq!(
        member
            .api(reqwest::Method::GET, "/account", None)
            .await
            .status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        member
            .sign_in_attempt("mia@example.com", PASSWORD)
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    let rows = audit_rows(&app, "user.remove").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].actor, "dashboard:ada@example.com");
    assert_eq!(rows[0].target, mia.id);
    assert_eq!(detail(&rows[0])["email"], "mia@example.com");
    assert_eq!(owner.get(&removal).await.status, StatusCode::NOT_FOUND);
}

async fn another_accounts_person_is_not_found_and_emails_are_refused_alike(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut owner, csrf) = signed_in_browser(&app).await;
    add_person(&app, &app.account, "mia@example.com", UserRole::Member).await;
    let other = app.new_account(10).await;
    let eve = add_person(&app, &other, "eve@example.com", UserRole::Owner).await;

    for (path, fields) in [
        (
            format!("/dashboard/people/{}/role", eve.id),
            vec![("role", "member"), ("csrf_token", csrf.as_str())],
        ),
        (
            format!("/dashboard/people/{}/remove", eve.id),
            vec![("csrf_token", csrf.as_str())],
        ),
        (
            "/dashboard/people/usr_unknown/remove".to_owned(),
            vec![("csrf_token", csrf.as_str())],
        ),
    ] {
        let attempt = owner.post(&path, &fields).await;
        assert_eq!(
            attempt.status,
            StatusCode::NOT_FOUND,
            "{path}: {}",
            attempt.body
        );
    }
    let asked = owner
        .get(&format!("/dashboard/people/{}/remove", eve.id))
        .await;
    assert_eq!(asked.status, StatusCode::NOT_FOUND);
    assert!(!asked.body.contains("eve@example.com"));
    assert!(
        !owner
            .get("/dashboard/people")
            .await
            .body
            .contains("eve@example.com")
    );
    assert_eq!(user(&app, "eve@example.com").await.unwrap(), eve);

    // An email of this account and one of another get the same words.
    let mut alerts = Vec::new();
    for email in ["mia@example.com", "EVE@example.com"] {
        let refused = owner
            .post(
                "/dashboard/people",
                &[("email", email), ("role", "member"), ("csrf_token", &csrf)],
            )
            .await;
        assert_eq!(
            refused.status,
            StatusCode::CONFLICT,
            "{email}: {}",
            refused.body
        );
        let marker = "<p class=\"alert\" id=\"people-alert\" role=\"alert\">";
        let start = refused.body.find(marker).unwrap() + marker.len();
        alerts
            .push(refused.body[start..start + refused.body[start..].find('<').unwrap()].to_owned());
        assert!(!refused.body.contains("one-time-password"));
    }
    assert_eq!(alerts[0], alerts[1]);
    assert!(alerts[0].contains("cannot be invited"), "{}", alerts[0]);
    let too_long = format!("{}@example.com", "a".repeat(260));
    for (email, role) in [
        ("not an email", "member"),
        (too_long.as_str(), "member"),
        ("zoe@example.com", "admin"),
    ] {
        let refused = owner
            .post(
                "/dashboard/people",
                &[("email", email), ("role", role), ("csrf_token", &csrf)],
            )
            .await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{email} {role}");
        assert!(refused.body.contains("role=\"alert\""));
    }
    assert!(user(&app, "zoe@example.com").await.is_none());
    assert!(audit_rows(&app, "user.create").await.is_empty());
    assert_eq!(
        user(&app, "eve@example.com").await.unwrap().account_id,
        other.account.id
    );
}

async fn people_and_password_forms_need_their_csrf_token(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut owner, _) = signed_in_browser(&app).await;
    let mia = add_person(&app, &app.account, "mia@example.com", UserRole::Member).await;
    let people_before = app
        .server
        .store
        .users()
        .account_users(&app.account.account.id)
        .await
        .unwrap();
    let role_path = format!("/dashboard/people/{}/role", mia.id);
    let remove_path = format!("/dashboard/people/{}/remove", mia.id);
    for token in [None, Some("wrong")] {
        let with_token = |mut fields: Vec<(&'static str, &'static str)>| {
            if let Some(token) = token {
                fields.push(("csrf_token", token));
            }
            fields
        };
        let attempts = [
            owner
                .post(
                    "/dashboard/people",
                    &with_token(vec![("email", "new@example.com"), ("role", "owner")]),
                )
                .await,
            owner
                .post(&role_path, &with_token(vec![("role", "owner")]))
                .await,
            owner.post(&remove_path, &with_token(vec![])).await,
            owner
                .post(
                    "/dashboard/password",
                    &with_token(vec![
                        ("current_password", PASSWORD),
                        ("new_password", NEW_PASSWORD),
                        ("repeat_password", NEW_PASSWORD),
                    ]),
                )
                .await,
        ];
        for attempt in attempts {
            assert_eq!(
                attempt.status,
                StatusCode::FORBIDDEN,
                "{token:?}: {}",
                attempt.body
            );
            assert!(attempt.body.contains("Form expired"));
        }
    }
    assert_eq!(
        app.server
            .store
            .users()
            .account_users(&app.account.account.id)
            .await
            .unwrap(),
        people_before
    );
    assert!(
        app.server
            .store
            .operator()
            .audit_log(None, 50)
            .await
            .unwrap()
            .is_empty()
    );
    let mut again = Browser::new(&app);
    again.sign_in("ada@example.com", PASSWORD).await;
}

on_both_stores!(
    a_one_time_password_holds_the_user_at_the_password_page,
    a_refused_password_change_names_the_field_and_changes_nothing,
    a_password_change_ends_the_other_sessions_only,
    an_invited_person_signs_in_with_a_one_time_password_and_must_change_it,
    a_member_is_refused_every_change_with_403,
    the_last_owner_cannot_remove_or_demote_themselves,
    two_owners_demoting_each_other_at_once_leave_an_owner,
    a_removed_person_is_signed_out_at_once,
    another_accounts_person_is_not_found_and_emails_are_refused_alike,
    people_and_password_forms_need_their_csrf_token,
);
