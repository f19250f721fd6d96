//! `skiff admin user ...` and `skiff admin acl ...`: ACL 2.0 users and policies through the
//! same AUTH_* requests `mqadmin createUser` ... `listAcl` send, to every master as `mqadmin -c`
//! does (changes), or read from the first master (listings).

use bytes::Bytes;
use serde_json::{json, Value};

use super::cli::{AclCommand, UserCommand};
use super::{bad, table, Admin, AdminError, Rendered};
use crate::acl::admin::{AclInfo, UserInfo};
use crate::remoting::body::decode_json;
use crate::remoting::codes::request as rc;
use crate::remoting::frame::RemotingCommand;

fn request(code: i32, fields: &[(&str, &str)], body: Option<String>) -> RemotingCommand {
    let mut request = RemotingCommand::new_request(code);
    for (key, value) in fields {
        request = request.with_ext(*key, *value);
    }
    if let Some(body) = body {
        request.body = Bytes::from(body);
    }
    request
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    // Plain structs of strings and lists: serialization cannot fail.
    serde_json::to_string(value).unwrap_or_default()
}

impl Admin {
    pub(super) async fn user(&self, command: UserCommand) -> Result<Rendered, AdminError> {
        let (code, name, info, verb) = match command {
            UserCommand::List { filter } => return self.users(filter.as_deref()).await,
            UserCommand::Create {
                name,
                password,
                super_user,
            } => {
                let info = UserInfo {
                    username: Some(name.clone()),
                    password: Some(password),
                    user_type: Some(if super_user { "Super" } else { "Normal" }.to_owned()),
                    user_status: None,
                };
                (rc::AUTH_CREATE_USER, name, Some(info), "created")
            }
            UserCommand::Update {
                name,
                password,
                user_type,
                disable,
                enable,
            } => {
                if password.is_none() && user_type.is_none() && !disable && !enable {
                    return Err(AdminError::NothingToChange {
                        options: "--password, --type, --disable, --enable",
                    });
                }
                let info = UserInfo {
                    username: Some(name.clone()),
                    password,
                    user_type: user_type
                        .map(|t| if t == "super" { "Super" } else { "Normal" }.to_owned()),
                    user_status: (disable || enable)
                        .then(|| if disable { "disable" } else { "enable" }.to_owned()),
                };
                (rc::AUTH_UPDATE_USER, name, Some(info), "updated")
            }
            UserCommand::Delete { name } => (rc::AUTH_DELETE_USER, name, None, "deleted"),
        };
        // `UserInfo` never serializes a password (the node's answers carry none): the
        // request's goes into the body here.
        let body = info.map(|info| {
            let mut wire = serde_json::to_value(&info).unwrap_or(Value::Null);
            if let (Value::Object(map), Some(password)) = (&mut wire, &info.password) {
                map.insert("password".into(), json!(password));
            }
            wire.to_string()
        });
        let mut brokers = Vec::new();
        for addr in self.all_masters().await? {
            self.call(&addr, request(code, &[("username", &name)], body.clone()))
                .await?;
            brokers.push(addr);
        }
        Ok(Rendered {
            text: format!("user {name} {verb} on {}\n", brokers.join(", ")),
            json: json!({ "user": name, "result": verb, "brokers": brokers }),
        })
    }

    async fn users(&self, filter: Option<&str>) -> Result<Rendered, AdminError> {
        let addr = self.first_master().await?;
        let fields: Vec<(&str, &str)> = filter.map(|f| ("filter", f)).into_iter().collect();
        let response = self
            .call(&addr, request(rc::AUTH_LIST_USER, &fields, None))
            .await?;
        let users: Vec<UserInfo> = if response.body.is_empty() {
            Vec::new()
        } else {
            decode_json(&response.body, "UserInfo list").map_err(|e| bad(&addr, "user list", e))?
        };
        let cell = |v: &Option<String>| v.clone().unwrap_or_default();
        let rows: Vec<Vec<String>> = users
            .iter()
            .map(|u| vec![cell(&u.username), cell(&u.user_type), cell(&u.user_status)])
            .collect();
        Ok(Rendered {
            text: table(&["USER", "TYPE", "STATUS"], &rows),
            json: serde_json::to_value(&users).unwrap_or(Value::Null),
        })
    }

    pub(super) async fn acl(&self, command: AclCommand) -> Result<Rendered, AdminError> {
        match command {
            AclCommand::List { user, resource } => {
                self.acls(user.as_deref(), resource.as_deref()).await
            }
            AclCommand::Set {
                user,
                resource,
                action,
                decision,
                source_ip,
            } => {
                let subject = format!("User:{user}");
                let body = AclInfo::entries(
                    &subject,
                    &resource,
                    &action,
                    &source_ip,
                    if decision == "deny" { "Deny" } else { "Allow" },
                );
                let mut brokers = Vec::new();
                for addr in self.all_masters().await? {
                    let set = request(
                        rc::AUTH_CREATE_ACL,
                        &[("subject", &subject)],
                        Some(to_json(&body)),
                    );
                    self.call(&addr, set).await?;
                    brokers.push(addr);
                }
                Ok(Rendered {
                    text: format!(
                        "{subject}: {} {} on {} set on {}\n",
                        decision,
                        action.join(","),
                        resource.join(","),
                        brokers.join(", ")
                    ),
                    json: json!({ "subject": subject, "result": "set", "brokers": brokers }),
                })
            }
            AclCommand::Delete { user, resource } => {
                let subject = format!("User:{user}");
                let mut fields = vec![("subject", subject.as_str())];
                if let Some(resource) = resource.as_deref() {
                    fields.push(("resource", resource));
                }
                let mut brokers = Vec::new();
                for addr in self.all_masters().await? {
                    self.call(&addr, request(rc::AUTH_DELETE_ACL, &fields, None))
                        .await?;
                    brokers.push(addr);
                }
                let what = resource.map_or_else(|| "ACL".to_owned(), |r| format!("entry {r}"));
                Ok(Rendered {
                    text: format!("{subject}: {what} deleted on {}\n", brokers.join(", ")),
                    json: json!({ "subject": subject, "result": "deleted", "brokers": brokers }),
                })
            }
        }
    }

    async fn acls(
        &self,
        user: Option<&str>,
        resource: Option<&str>,
    ) -> Result<Rendered, AdminError> {
        let addr = self.first_master().await?;
        let mut fields = Vec::new();
        if let Some(user) = user {
            fields.push(("subjectFilter", user));
        }
        if let Some(resource) = resource {
            fields.push(("resourceFilter", resource));
        }
        let response = self
            .call(&addr, request(rc::AUTH_LIST_ACL, &fields, None))
            .await?;
        let acls: Vec<AclInfo> = if response.body.is_empty() {
            Vec::new()
        } else {
            decode_json(&response.body, "AclInfo list").map_err(|e| bad(&addr, "ACL list", e))?
        };
        let mut rows = Vec::new();
        for acl in &acls {
            for policy in acl.policies.iter().flatten() {
                for entry in policy.entries.iter().flatten() {
                    rows.push(vec![
                        acl.subject.clone().unwrap_or_default(),
                        policy.policy_type.clone().unwrap_or_default(),
                        entry.resource.clone().unwrap_or_default(),
                        entry.actions.clone().unwrap_or_default().join(","),
                        entry.source_ips.clone().unwrap_or_default().join(","),
                        entry.decision.clone().unwrap_or_default(),
                    ]);
                }
            }
        }
        Ok(Rendered {
            text: table(
                &[
                    "SUBJECT",
                    "POLICY",
                    "RESOURCE",
                    "ACTIONS",
                    "SOURCE IPS",
                    "DECISION",
                ],
                &rows,
            ),
            json: serde_json::to_value(&acls).unwrap_or(Value::Null),
        })
    }

    async fn first_master(&self) -> Result<String, AdminError> {
        self.all_masters()
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| AdminError::NotFound {
                what: "broker in the cluster".to_owned(),
            })
    }
}
