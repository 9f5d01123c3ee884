//! The account's people (`/dashboard/people`): who signs in to it, in what
//! role, since when. Owners invite people (a one-time password shown once,
//! as a new key's secret is), change roles, remove people after a
//! confirmation page that asks whether the keys they made are revoked
//! with them, and choose whether members manage keys and secrets; members
//! see the list only. The decisions and their audit rows are
//! `users::invite`, `users::set_role`, `users::remove` and
//! `users::set_members_manage_keys_and_secrets`.

use askama::Template;
use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::session::SignedIn;
use super::{
    ConfirmChoice, Confirmation, Layout, Section, confirm_page, display_time, error_page, render,
};
use crate::application::state::AppState;
use crate::application::users::{self, PeopleError, UserError};
use crate::store::{KeysOfRemovedPerson, User, UserRole};

struct PersonRow {
    id: String,
    email: String,
    role: &'static str,
    since: String,
    /// The signed-in user's own row.
    is_you: bool,
}

/// A person just invited, with the one-time password shown this once.
struct Invited {
    email: String,
    one_time_password: String,
}

#[derive(Template)]
#[template(path = "people.html")]
struct PeoplePage {
    layout: Layout,
    people: Vec<PersonRow>,
    /// Only owners see the forms that change people.
    is_owner: bool,
    /// Whether the account's owners let members create and revoke keys,
    /// change spend limits and read or rotate the webhook secret.
    members_manage_keys_and_secrets: bool,
    invited: Option<Invited>,
    alert: Option<String>,
    notice: Option<String>,
    /// The invite form's values, kept after a refusal.
    invite_email: String,
    invite_role: &'static str,
}

/// What the people page shows besides the list.
struct PeoplePageExtras {
    invited: Option<Invited>,
    alert: Option<String>,
    notice: Option<String>,
    invite_email: String,
    invite_role: UserRole,
}

impl Default for PeoplePageExtras {
    fn default() -> PeoplePageExtras {
        PeoplePageExtras {
            invited: None,
            alert: None,
            notice: None,
            invite_email: String::new(),
            // Most people invited use the account; fewer run it.
            invite_role: UserRole::Member,
        }
    }
}

/// Whether the signed-in user is an owner, as the account's list says.
fn is_owner(people: &[User], signed_in: &SignedIn) -> bool {
    people
        .iter()
        .any(|user| user.id == signed_in.0.user_id && user.role == UserRole::Owner)
}

async fn people_page(
    state: &AppState,
    signed_in: &SignedIn,
    status: StatusCode,
    extras: PeoplePageExtras,
) -> Response {
    let session = &signed_in.0;
    let store = state.store.as_ref();
    let loaded = async {
        Ok::<_, crate::store::StoreError>((
            store.users().account_users(&session.account_id).await?,
            store
                .users()
                .members_manage_keys_and_secrets(&session.account_id)
                .await?,
        ))
    };
    let (people, members_manage_keys_and_secrets) = match loaded.await {
        Ok(loaded) => loaded,
        Err(error) => return super::internal_error(error),
    };
    let is_owner = is_owner(&people, signed_in);
    let people = people
        .into_iter()
        .map(|user| PersonRow {
            is_you: user.id == session.user_id,
            id: user.id,
            email: user.email,
            role: user.role.as_str(),
            since: display_time(user.created_at),
        })
        .collect();
    render(
        status,
        &PeoplePage {
            layout: Layout::signed_in(session, "People", Section::People),
            people,
            is_owner,
            members_manage_keys_and_secrets,
            invited: extras.invited,
            alert: extras.alert,
            notice: extras.notice,
            invite_email: extras.invite_email,
            invite_role: extras.invite_role.as_str(),
        },
    )
}

#[derive(Deserialize)]
pub struct PeopleQuery {
    #[serde(default)]
    done: Option<String>,
    /// After a removal: how many keys were revoked with the person.
    #[serde(default)]
    keys_revoked: Option<u32>,
}

pub async fn list(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Query(query): Query<PeopleQuery>,
) -> Response {
    // Fixed words for each change (and a number): the query cannot put its
    // own words on the page.
    let notice = match query.done.as_deref() {
        Some("role") => Some("The role was changed.".to_owned()),
        Some("removed") => Some(match query.keys_revoked {
            Some(revoked @ 1..) => format!(
                "The person was removed and signed out everywhere, and the {revoked} API \
                 key(s) they made were revoked."
            ),
            _ => "The person was removed and signed out everywhere.".to_owned(),
        }),
        Some("members") => {
            Some("What members may do with keys and secrets was changed.".to_owned())
        }
        _ => None,
    };
    let extras = PeoplePageExtras {
        notice,
        ..PeoplePageExtras::default()
    };
    people_page(&state, &signed_in, StatusCode::OK, extras).await
}

/// The answer to a refused change: a 403 page for a member, not found for
/// a person of another account (as for an unknown id), and the people page
/// with what to do otherwise.
async fn refused(
    state: &AppState,
    signed_in: &SignedIn,
    error: PeopleError,
    mut extras: PeoplePageExtras,
) -> Response {
    let status = match &error {
        PeopleError::NotAnOwner => {
            return error_page(
                StatusCode::FORBIDDEN,
                Some(&signed_in.0),
                "Owners only",
                &error.to_string(),
            );
        }
        PeopleError::UserNotFound => return super::not_found(Some(&signed_in.0)),
        PeopleError::LastOwner | PeopleError::EmailTaken => StatusCode::CONFLICT,
        PeopleError::User(UserError::InvalidEmail(_)) => StatusCode::BAD_REQUEST,
        PeopleError::User(user_error) => match user_error.busy_retry_after() {
            Some(wait) => {
                extras.alert = Some(super::hashing_busy_alert(wait));
                let page =
                    people_page(state, signed_in, StatusCode::SERVICE_UNAVAILABLE, extras).await;
                return super::with_retry_after(page, wait);
            }
            None => return super::internal_error(error),
        },
        PeopleError::Store(_) => return super::internal_error(error),
    };
    extras.alert = Some(error.to_string());
    people_page(state, signed_in, status, extras).await
}

/// The role a form names, or the people page that asks for one.
async fn role_of_form(
    state: &AppState,
    signed_in: &SignedIn,
    role: &str,
    extras: PeoplePageExtras,
) -> Result<UserRole, Response> {
    match UserRole::parse(role) {
        Some(role) => Ok(role),
        None => {
            let extras = PeoplePageExtras {
                alert: Some("Choose a role: owner or member.".to_owned()),
                ..extras
            };
            Err(people_page(state, signed_in, StatusCode::BAD_REQUEST, extras).await)
        }
    }
}

#[derive(Deserialize)]
pub struct InviteForm {
    #[serde(default)]
    email: String,
    #[serde(default)]
    role: String,
    #[serde(default)]
    csrf_token: String,
}

/// Invites a person and answers the people page itself (no redirect), the
/// only response that ever holds their one-time password.
pub async fn invite(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Form(form): Form<InviteForm>,
) -> Response {
    if let Some(refused) = signed_in.csrf_refusal(&form.csrf_token) {
        return refused;
    }
    let kept = || PeoplePageExtras {
        invite_email: form.email.trim().to_owned(),
        ..PeoplePageExtras::default()
    };
    let role = match role_of_form(&state, &signed_in, &form.role, kept()).await {
        Ok(role) => role,
        Err(response) => return response,
    };
    match users::invite(state.store.as_ref(), &signed_in.0, &form.email, role).await {
        Ok(created) => {
            let invited = created.one_time_password.map(|one_time_password| Invited {
                email: created.user.email,
                one_time_password,
            });
            let extras = PeoplePageExtras {
                invited,
                ..PeoplePageExtras::default()
            };
            people_page(&state, &signed_in, StatusCode::OK, extras).await
        }
        Err(error) => {
            let extras = PeoplePageExtras {
                invite_role: role,
                ..kept()
            };
            refused(&state, &signed_in, error, extras).await
        }
    }
}

#[derive(Deserialize)]
pub struct RoleForm {
    #[serde(default)]
    role: String,
    #[serde(default)]
    csrf_token: String,
}

pub async fn set_role(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Path(user_id): Path<String>,
    Form(form): Form<RoleForm>,
) -> Response {
    if let Some(refused) = signed_in.csrf_refusal(&form.csrf_token) {
        return refused;
    }
    let role = match role_of_form(&state, &signed_in, &form.role, Default::default()).await {
        Ok(role) => role,
        Err(response) => return response,
    };
    match users::set_role(state.store.as_ref(), &signed_in.0, &user_id, role).await {
        Ok(_) => Redirect::to("/dashboard/people?done=role").into_response(),
        Err(error) => refused(&state, &signed_in, error, Default::default()).await,
    }
}

/// Asks before a person is removed: they are signed out at once and cannot
/// sign in again. Only owners are asked; a person of another account, or
/// an unknown id, is not found.
pub async fn confirm_remove(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Path(user_id): Path<String>,
) -> Response {
    let session = &signed_in.0;
    let people = match state.store.users().account_users(&session.account_id).await {
        Ok(people) => people,
        Err(error) => return super::internal_error(error),
    };
    if !is_owner(&people, &signed_in) {
        return refused(
            &state,
            &signed_in,
            PeopleError::NotAnOwner,
            Default::default(),
        )
        .await;
    }
    let Some(person) = people.into_iter().find(|user| user.id == user_id) else {
        return super::not_found(Some(session));
    };
    let keys_made = match state.store.accounts().api_keys(&session.account_id).await {
        Ok(keys) => keys
            .into_iter()
            .filter(|key| {
                key.revoked_at.is_none() && key.created_by_user_id.as_deref() == Some(&person.id)
            })
            .count(),
        Err(error) => return super::internal_error(error),
    };
    let (question, mut consequence) = if person.id == session.user_id {
        (
            "Remove yourself from this account?".to_owned(),
            "You are signed out at once and cannot sign in to this account again unless an \
             owner invites you. The account's generations and money stay."
                .to_owned(),
        )
    } else {
        (
            format!("Remove {}?", person.email),
            format!(
                "{} is signed out at once, everywhere, and cannot sign in to this account \
                 again unless an owner invites them. The account's generations and money \
                 stay.",
                person.email
            ),
        )
    };
    // The person's keys are revoked unless the owner keeps them: whoever
    // leaves may still hold their secrets.
    let choice = (keys_made > 0).then(|| {
        consequence.push_str(&format!(
            " They made {keys_made} API key(s) that still work: revoke them with the removal \
             unless programs of the account need them."
        ));
        ConfirmChoice {
            legend: "The API keys they made",
            name: "keys",
            options: vec![
                ("revoke", "Revoke them: every request with them is refused"),
                ("keep", "Keep them working"),
            ],
        }
    });
    let action = format!("/dashboard/people/{}/remove", person.id);
    confirm_page(
        session,
        Section::People,
        Confirmation {
            question: &question,
            consequence: &consequence,
            action: &action,
            confirm_label: "Remove",
            cancel_href: "/dashboard/people",
            choice,
        },
    )
}

#[derive(Deserialize)]
pub struct RemoveForm {
    /// `keep` keeps the keys the person made; anything else, or nothing,
    /// revokes them.
    #[serde(default)]
    keys: String,
    #[serde(default)]
    csrf_token: String,
}

/// Removes a person of the account (the confirmation page's form), with
/// the keys they made unless the form keeps them. Someone who removed
/// themselves has no session left, and goes to the sign-in page.
pub async fn remove(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Path(user_id): Path<String>,
    Form(form): Form<RemoveForm>,
) -> Response {
    if let Some(refused) = signed_in.csrf_refusal(&form.csrf_token) {
        return refused;
    }
    let keys = if form.keys == "keep" {
        KeysOfRemovedPerson::Keep
    } else {
        KeysOfRemovedPerson::Revoke
    };
    match users::remove(state.store.as_ref(), &signed_in.0, &user_id, keys).await {
        Ok(removed) if removed.user.id == signed_in.0.user_id => {
            Redirect::to("/dashboard/sign-in").into_response()
        }
        Ok(removed) if removed.revoked_key_ids.is_empty() => {
            Redirect::to("/dashboard/people?done=removed").into_response()
        }
        Ok(removed) => Redirect::to(&format!(
            "/dashboard/people?done=removed&keys_revoked={}",
            removed.revoked_key_ids.len()
        ))
        .into_response(),
        Err(error) => refused(&state, &signed_in, error, Default::default()).await,
    }
}

#[derive(Deserialize)]
pub struct MembersForm {
    /// Present (a checked box) when members may manage keys and secrets.
    #[serde(default)]
    members_manage_keys_and_secrets: Option<String>,
    #[serde(default)]
    csrf_token: String,
}

/// An owner lets members create and revoke keys, change spend limits and
/// read or rotate the webhook secret, or stops them.
pub async fn set_members_manage_keys_and_secrets(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Form(form): Form<MembersForm>,
) -> Response {
    if let Some(refused) = signed_in.csrf_refusal(&form.csrf_token) {
        return refused;
    }
    let allowed = form.members_manage_keys_and_secrets.is_some();
    match users::set_members_manage_keys_and_secrets(state.store.as_ref(), &signed_in.0, allowed)
        .await
    {
        Ok(()) => Redirect::to("/dashboard/people?done=members").into_response(),
        Err(error) => refused(&state, &signed_in, error, Default::default()).await,
    }
}
