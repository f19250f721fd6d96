//! ACL 2.0 administration over remoting (AUTH_CREATE_USER 3001 ... AUTH_LIST_ACL 3010), as
//! `mqadmin createUser` ... `listAcl` and the dashboard send them: header fields name the user
//! or subject, bodies are JSON `UserInfo` / `AclInfo`, get and list answer JSON (no body when
//! nothing is found). The rules are [`AuthAdmin`]'s; this file only reads and writes the wire.

use bytes::Bytes;
use serde::Serialize;

use super::{body_failure, code, rc, success, Failure, Outcome, Processor};
use crate::acl::admin::{AclInfo, AuthAdminError, UserInfo};
use crate::acl::signature::ACCESS_KEY;
use crate::remoting::body::decode_json;
use crate::remoting::RemotingCommand;

impl Processor {
    /// One of the ten ACL 2.0 admin requests.
    pub(super) fn auth_admin(&self, request: &RemotingCommand) -> Outcome {
        let Some(admin) = self.auth.as_deref() else {
            return Err(Failure::system(
                "this node keeps no ACL 2.0 users: it was started without a store for them",
            ));
        };
        let field = |name: &str| request.ext(name).filter(|v| !v.is_empty());
        let caller = admin.caller(request.ext(ACCESS_KEY));
        let username = field("username").map(str::trim).unwrap_or("");
        let subject = field("subject").unwrap_or("");
        match request.code {
            rc::AUTH_CREATE_USER => {
                let info = user_body(request, username)?;
                admin
                    .create_user(caller, username, &info)
                    .map_err(refused)?;
                Ok(success())
            }
            rc::AUTH_UPDATE_USER => {
                let info = user_body(request, username)?;
                admin
                    .update_user(caller, username, &info)
                    .map_err(refused)?;
                Ok(success())
            }
            rc::AUTH_DELETE_USER => {
                admin.delete_user(caller, username).map_err(refused)?;
                Ok(success())
            }
            rc::AUTH_GET_USER => json_answer(admin.get_user(username).map_err(refused)?),
            rc::AUTH_LIST_USER => {
                let users = admin.list_users(field("filter"));
                json_answer((!users.is_empty()).then_some(users))
            }
            rc::AUTH_CREATE_ACL | rc::AUTH_UPDATE_ACL => {
                let body: Option<AclInfo> = if request.body.is_empty() {
                    None
                } else {
                    Some(decode_json(&request.body, "AclInfo").map_err(body_failure)?)
                };
                admin.put_acl(subject, body.as_ref()).map_err(refused)?;
                Ok(success())
            }
            rc::AUTH_DELETE_ACL => {
                admin
                    .delete_acl(subject, field("policyType"), field("resource"))
                    .map_err(refused)?;
                Ok(success())
            }
            rc::AUTH_GET_ACL => json_answer(admin.get_acl(subject).map_err(refused)?),
            rc::AUTH_LIST_ACL => {
                let acls = admin.list_acls(field("subjectFilter"), field("resourceFilter"));
                json_answer((!acls.is_empty()).then_some(acls))
            }
            other => Err(Failure::system(format!(
                "request code {other} is not an ACL 2.0 admin request"
            ))),
        }
    }
}

/// The request's `UserInfo`; the header's user name wins over the body's, as in Java.
fn user_body(request: &RemotingCommand, username: &str) -> Result<UserInfo, Failure> {
    if username.is_empty() {
        return Err(refused(AuthAdminError::BlankUsername));
    }
    if request.body.is_empty() {
        return Ok(UserInfo::default());
    }
    let mut info: UserInfo = decode_json(&request.body, "UserInfo").map_err(body_failure)?;
    info.username = Some(username.to_owned());
    Ok(info)
}

fn refused(e: AuthAdminError) -> Failure {
    Failure::new(e.response_code(), crate::error_text::error_chain(&e))
}

/// SUCCESS with `value` as JSON, or with no body when there is nothing to answer.
fn json_answer<T: Serialize>(value: Option<T>) -> Outcome {
    let mut response = success();
    if let Some(value) = value {
        let json = serde_json::to_vec(&value)
            .map_err(|e| Failure::new(code::SYSTEM_ERROR, format!("encoding the answer: {e}")))?;
        response.body = Bytes::from(json);
    }
    Ok(response)
}
