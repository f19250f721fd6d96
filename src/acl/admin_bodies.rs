//! What the ACL 2.0 admin requests carry (Java's `UserInfo` and `AclInfo`, JSON) and how a
//! written ACL is read: checked in the order and with the remarks of Apache 5.5.0's
//! `AuthorizationMetadataManagerImpl.validate`, and merged into a stored one as its
//! `Acl.updatePolicy` and `Policy.updateEntry` merge. [`super::admin`] applies them.

use serde::{Deserialize, Serialize};
use skiff_storage::auth::{AuthAcl, AuthPolicy, AuthPolicyEntry};

use super::policy::{self, PolicyResource};

/// A user as the admin requests carry it (Java's `UserInfo`, JSON). Its `Debug` leaves the
/// password out, so no log line can carry it.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UserInfo {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Read from requests; never answered.
    #[serde(skip_serializing)]
    pub password: Option<String>,
    /// `Super` or `Normal`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_type: Option<String>,
    /// `enable` or `disable`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_status: Option<String>,
}

impl std::fmt::Debug for UserInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserInfo")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("user_type", &self.user_type)
            .field("user_status", &self.user_status)
            .finish()
    }
}

/// A subject's ACL as the admin requests carry it (Java's `AclInfo`, JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AclInfo {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policies: Option<Vec<PolicyInfo>>,
}

impl AclInfo {
    /// One custom policy of `subject` with an entry per resource, each with the same actions,
    /// source addresses (none: any) and decision: what `mqadmin createAcl -r A,B -a ... -d ...`
    /// sends (Java's `AclInfo.of`).
    pub fn entries(
        subject: &str,
        resources: &[String],
        actions: &[String],
        source_ips: &[String],
        decision: &str,
    ) -> AclInfo {
        let trimmed = |v: &[String]| v.iter().map(|x| x.trim().to_owned()).collect::<Vec<_>>();
        AclInfo {
            subject: Some(subject.to_owned()),
            policies: Some(vec![PolicyInfo {
                policy_type: None,
                entries: Some(
                    resources
                        .iter()
                        .map(|resource| PolicyEntryInfo {
                            resource: Some(resource.trim().to_owned()),
                            actions: Some(trimmed(actions)),
                            source_ips: (!source_ips.is_empty()).then(|| trimmed(source_ips)),
                            decision: Some(decision.to_owned()),
                        })
                        .collect(),
                ),
            }]),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PolicyInfo {
    /// `Custom` or `Default`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entries: Option<Vec<PolicyEntryInfo>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PolicyEntryInfo {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actions: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_ips: Option<Vec<String>>,
    /// `Allow` or `Deny`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
}

pub(super) fn user_info(name: &str, super_user: bool, enabled: bool) -> UserInfo {
    UserInfo {
        username: Some(name.to_owned()),
        password: None,
        user_type: Some(if super_user { "Super" } else { "Normal" }.to_owned()),
        user_status: Some(if enabled { "enable" } else { "disable" }.to_owned()),
    }
}

/// `Super` → true, `Normal` → false, in any case; anything else is no change (as Java reads an
/// unknown name as null).
pub(super) fn parse_user_type(text: Option<&str>) -> Option<bool> {
    match text?.trim() {
        t if t.eq_ignore_ascii_case("Super") => Some(true),
        t if t.eq_ignore_ascii_case("Normal") => Some(false),
        _ => None,
    }
}

/// `enable` → true, `disable` → false, in any case.
pub(super) fn parse_user_status(text: Option<&str>) -> Option<bool> {
    match text?.trim() {
        t if t.eq_ignore_ascii_case("enable") => Some(true),
        t if t.eq_ignore_ascii_case("disable") => Some(false),
        _ => None,
    }
}

/// Whether a policy type names the `Default` policy (anything else is `Custom`).
pub(super) fn parse_policy_type(text: Option<&str>) -> bool {
    text.is_some_and(|t| t.trim().eq_ignore_ascii_case("Default"))
}

/// The policies of a create or update, checked as Java's `AuthorizationMetadataManagerImpl.
/// validate` checks them, in its order and with its remarks.
pub(super) fn validate_policies(policies: &[PolicyInfo]) -> Result<Vec<AuthPolicy>, &'static str> {
    let mut out: Vec<AuthPolicy> = Vec::new();
    for policy in policies {
        // Java's converter skips a policy without entries.
        let Some(entries) = policy.entries.as_ref().filter(|e| !e.is_empty()) else {
            continue;
        };
        let mut checked = Vec::with_capacity(entries.len());
        for entry in entries {
            let resource = entry
                .resource
                .as_deref()
                .and_then(PolicyResource::parse)
                .ok_or("The resource is null.")?;
            let actions: Vec<policy::Action> = entry
                .actions
                .iter()
                .flatten()
                .filter_map(|a| policy::Action::parse(a))
                .collect();
            if actions.is_empty() {
                return Err("The actions is empty.");
            }
            if actions.contains(&policy::Action::Any) {
                return Err("The actions can not be Any.");
            }
            let source_ips: Vec<String> = entry
                .source_ips
                .iter()
                .flatten()
                .map(|ip| ip.trim().to_owned())
                .collect();
            if source_ips.iter().any(|ip| ip.is_empty()) {
                return Err("The source ip is empty.");
            }
            if !source_ips.iter().all(|ip| valid_ip_or_cidr(ip)) {
                return Err("The source ip is invalid.");
            }
            let allow = match entry.decision.as_deref().map(str::trim) {
                Some(d) if d.eq_ignore_ascii_case("Allow") => true,
                Some(d) if d.eq_ignore_ascii_case("Deny") => false,
                _ => return Err("The decision is null or illegal."),
            };
            checked.push(AuthPolicyEntry {
                resource: resource.to_string(),
                actions: actions.iter().map(|a| a.as_str().to_owned()).collect(),
                source_ips,
                allow,
            });
        }
        let default = parse_policy_type(policy.policy_type.as_deref());
        match out.iter_mut().find(|p| p.default == default) {
            Some(same) => merge_entries(&mut same.entries, checked),
            None => out.push(AuthPolicy {
                default,
                entries: checked,
            }),
        }
    }
    if out.is_empty() {
        return Err("The policies is empty.");
    }
    Ok(out)
}

fn valid_ip_or_cidr(text: &str) -> bool {
    match text.split_once('/') {
        None => text.parse::<std::net::IpAddr>().is_ok(),
        Some((base, prefix)) => match (base.parse::<std::net::IpAddr>(), prefix.parse::<u8>()) {
            (Ok(std::net::IpAddr::V4(_)), Ok(p)) => p <= 32,
            (Ok(std::net::IpAddr::V6(_)), Ok(p)) => p <= 128,
            _ => false,
        },
    }
}

/// Java's `Acl.updatePolicy`: a policy of a new type is appended, else its entries merged.
pub(super) fn merge(acl: &mut AuthAcl, policies: Vec<AuthPolicy>) {
    for policy in policies {
        match acl
            .policies
            .iter_mut()
            .find(|p| p.default == policy.default)
        {
            Some(same) => merge_entries(&mut same.entries, policy.entries),
            None => acl.policies.push(policy),
        }
    }
}

/// Java's `Policy.updateEntry`: an entry for a resource already there replaces its actions,
/// addresses and decision; another is appended.
fn merge_entries(entries: &mut Vec<AuthPolicyEntry>, new: Vec<AuthPolicyEntry>) {
    for entry in new {
        match entries.iter_mut().find(|e| e.resource == entry.resource) {
            Some(same) => *same = entry,
            None => entries.push(entry),
        }
    }
}

pub(super) fn acl_info(acl: &AuthAcl) -> AclInfo {
    AclInfo {
        subject: Some(acl.subject.clone()),
        policies: Some(
            acl.policies
                .iter()
                .map(|p| PolicyInfo {
                    policy_type: Some(if p.default { "Default" } else { "Custom" }.to_owned()),
                    entries: Some(
                        p.entries
                            .iter()
                            .map(|e| PolicyEntryInfo {
                                resource: Some(e.resource.clone()),
                                actions: (!e.actions.is_empty()).then(|| e.actions.clone()),
                                source_ips: (!e.source_ips.is_empty())
                                    .then(|| e.source_ips.clone()),
                                decision: Some(if e.allow { "Allow" } else { "Deny" }.to_owned()),
                            })
                            .collect(),
                    ),
                })
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_users_debug_never_shows_its_password() {
        let user: UserInfo =
            serde_json::from_str(r#"{"username":"alice","password":"alice-secret-1"}"#)
                .expect("a user body");
        let shown = format!("{user:?}");
        assert!(
            shown.contains("alice") && shown.contains("<hidden>"),
            "{shown}"
        );
        assert!(!shown.contains("alice-secret-1"), "{shown}");
    }
}
