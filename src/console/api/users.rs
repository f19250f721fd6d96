//! ACL 2.0 users and their policies: `GET /users` (every user with its ACL entries, never a
//! password), `POST /users` (create), `PUT /users/{name}` (password, type, status),
//! `DELETE /users/{name}`, `POST /users/{name}/acl` (set entries) and
//! `DELETE /users/{name}/acl?resource=R` (one entry, or the whole ACL without `resource`).
//! The rules are [`AuthAdmin`]'s, the same the AUTH_* remoting requests follow; reading needs
//! an admin login when ACL is on (the list shows who may do what), changing one too (the
//! console's guard).

use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{ApiError, ApiJson, ApiQuery, ApiResult};
use crate::acl::admin::{AclInfo, AuthAdmin, AuthAdminError, Caller, UserInfo};
use crate::acl::Identity;
use crate::console::{Console, ConsoleUser};

fn admin(console: &Console) -> Result<&AuthAdmin, ApiError> {
    console.auth.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "this node keeps no ACL 2.0 users (it was embedded without their store)",
        )
    })
}

/// Who is asking: with ACL off there is no login, and the console may do what an unsigned
/// admin request may.
fn caller(user: Option<&ConsoleUser>) -> Caller {
    match user.map(|u| &u.0) {
        None | Some(Identity::Trusted) => Caller::Super,
        Some(Identity::User(account)) if account.is_admin() => Caller::Super,
        Some(Identity::User(_)) => Caller::Normal,
    }
}

fn refused(e: AuthAdminError) -> ApiError {
    match e {
        AuthAdminError::Store(_) => {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "console user change failed"
            );
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                crate::error_text::error_chain(&e),
            )
        }
        AuthAdminError::UserMissing
        | AuthAdminError::SubjectMissing
        | AuthAdminError::SubjectOfAclMissing(_)
        | AuthAdminError::AclMissing => ApiError::not_found(e.to_string()),
        AuthAdminError::UserExists => ApiError::new(StatusCode::CONFLICT, e.to_string()),
        AuthAdminError::SuperUserOnly { .. }
        | AuthAdminError::FileAccount(_)
        | AuthAdminError::FirstUserNotSuper
        | AuthAdminError::LastSuperUser(_) => ApiError::forbidden(e.to_string()),
        _ => ApiError::bad_request(e.to_string()),
    }
}

pub(super) async fn users(
    State(console): State<Console>,
    user: Option<Extension<ConsoleUser>>,
) -> ApiResult<Value> {
    let admin = admin(&console)?;
    if caller(user.as_deref()) != Caller::Super {
        return Err(ApiError::forbidden(
            "users and their policies are shown to admin accounts and super users only",
        ));
    }
    let acl = console.acl.current();
    let users: Vec<Value> = admin
        .list_users(None)
        .into_iter()
        .map(|u| {
            let name = u.username.clone().unwrap_or_default();
            let from_file = acl.account(&name).is_some_and(|a| a.is_from_file());
            json!({
                "name": name,
                "type": u.user_type,
                "status": u.user_status,
                "source": if from_file { "file" } else { "store" },
            })
        })
        .collect();
    let mut entries = Vec::new();
    for acl in admin.list_acls(None, None) {
        let subject = acl.subject.unwrap_or_default();
        for policy in acl.policies.into_iter().flatten() {
            for entry in policy.entries.into_iter().flatten() {
                entries.push(json!({
                    "user": subject.strip_prefix("User:").unwrap_or(&subject),
                    "policy": policy.policy_type,
                    "resource": entry.resource,
                    "actions": entry.actions.unwrap_or_default(),
                    "source_ips": entry.source_ips.unwrap_or_default(),
                    "decision": entry.decision,
                }));
            }
        }
    }
    Ok(Json(json!({
        "acl_on": acl.is_on(),
        "users": users,
        "entries": entries,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NewUser {
    name: String,
    password: String,
    #[serde(default, rename = "super")]
    super_user: bool,
}

pub(super) async fn create_user(
    State(console): State<Console>,
    user: Option<Extension<ConsoleUser>>,
    ApiJson(new): ApiJson<NewUser>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let info = UserInfo {
        username: Some(new.name.clone()),
        password: Some(new.password),
        user_type: Some(if new.super_user { "Super" } else { "Normal" }.to_owned()),
        user_status: None,
    };
    admin(&console)?
        .create_user(caller(user.as_deref()), new.name.trim(), &info)
        .map_err(refused)?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "name": new.name.trim() })),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UserChange {
    password: Option<String>,
    #[serde(rename = "super")]
    super_user: Option<bool>,
    enabled: Option<bool>,
}

pub(super) async fn update_user(
    State(console): State<Console>,
    user: Option<Extension<ConsoleUser>>,
    Path(name): Path<String>,
    ApiJson(change): ApiJson<UserChange>,
) -> ApiResult<Value> {
    let info = UserInfo {
        username: Some(name.clone()),
        password: change.password,
        user_type: change
            .super_user
            .map(|s| if s { "Super" } else { "Normal" }.to_owned()),
        user_status: change
            .enabled
            .map(|e| if e { "enable" } else { "disable" }.to_owned()),
    };
    admin(&console)?
        .update_user(caller(user.as_deref()), &name, &info)
        .map_err(refused)?;
    Ok(Json(json!({ "name": name })))
}

pub(super) async fn delete_user(
    State(console): State<Console>,
    user: Option<Extension<ConsoleUser>>,
    Path(name): Path<String>,
) -> ApiResult<Value> {
    admin(&console)?
        .delete_user(caller(user.as_deref()), &name)
        .map_err(refused)?;
    Ok(Json(json!({ "name": name, "deleted": true })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AclEntries {
    resources: Vec<String>,
    actions: Vec<String>,
    decision: String,
    #[serde(default)]
    source_ips: Vec<String>,
}

pub(super) async fn set_acl(
    State(console): State<Console>,
    Path(name): Path<String>,
    ApiJson(set): ApiJson<AclEntries>,
) -> ApiResult<Value> {
    let subject = format!("User:{name}");
    let body = AclInfo::entries(
        &subject,
        &set.resources,
        &set.actions,
        &set.source_ips,
        &set.decision,
    );
    admin(&console)?
        .put_acl(&subject, Some(&body))
        .map_err(refused)?;
    Ok(Json(json!({ "user": name })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EntryQuery {
    resource: Option<String>,
}

pub(super) async fn delete_acl(
    State(console): State<Console>,
    Path(name): Path<String>,
    ApiQuery(query): ApiQuery<EntryQuery>,
) -> ApiResult<Value> {
    admin(&console)?
        .delete_acl(&format!("User:{name}"), None, query.resource.as_deref())
        .map_err(refused)?;
    Ok(Json(json!({ "user": name, "deleted": true })))
}
