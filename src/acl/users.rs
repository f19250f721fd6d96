//! ACL 2.0 users as requests are checked against them: [`UserBook`], built from the users and
//! ACLs the node stores (`skiff_storage::auth`), and [`authorize`], the decision for one of
//! them by [`policy::decide`]. [`super::admin`] changes the stored records and swaps a new book
//! into the node's [`super::AclHandle`].
//!
//! How they combine with the ACL file: a file account (`skiff.toml`'s `[acl]`, `plain_acl.yml`)
//! keeps its ACL 1.0 rights and cannot be changed by the admin requests; a stored user of the
//! same name is shadowed by it. Requests must be signed as soon as there is one account or one
//! stored user.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use skiff_storage::auth::{AuthAcl, AuthUser};

use super::policy::{self, Decision, PolicyEntry, PolicyResource, UserAccess, UserStatus};
use super::{Account, Action, Need, Refusal, Resource, Rights};

/// The cluster the ACL 2.0 rules name when the node's is not known (RocketMQ's default).
pub const DEFAULT_CLUSTER: &str = "DefaultCluster";

/// The stored ACL 2.0 users, ready to authenticate and authorize requests.
#[derive(Debug, Clone)]
pub struct UserBook {
    cluster: String,
    users: HashMap<String, Arc<Account>>,
}

impl Default for UserBook {
    fn default() -> Self {
        UserBook {
            cluster: DEFAULT_CLUSTER.to_owned(),
            users: HashMap::new(),
        }
    }
}

impl UserBook {
    /// The book of `users` with their `acls`, for a node of `cluster`.
    pub fn new(cluster: &str, users: &[AuthUser], acls: &[AuthAcl]) -> UserBook {
        let acls: HashMap<&str, &AuthAcl> = acls.iter().map(|a| (a.subject.as_str(), a)).collect();
        let users = users
            .iter()
            .map(|user| {
                let acl = acls
                    .get(subject_of(&user.username).as_str())
                    .map(|acl| policy_acl(acl));
                let account = Account {
                    access_key: user.username.clone(),
                    secret_key: user.password.clone(),
                    admin: user.super_user,
                    rights: Rights::Policies {
                        status: if user.enabled {
                            UserStatus::Enable
                        } else {
                            UserStatus::Disable
                        },
                        acl,
                    },
                };
                (user.username.clone(), Arc::new(account))
            })
            .collect();
        UserBook {
            cluster: cluster.to_owned(),
            users,
        }
    }

    /// The node's cluster, which the ACL 2.0 rules of admin requests name.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub(super) fn account(&self, name: &str) -> Option<Arc<Account>> {
        self.users.get(name).cloned()
    }
}

/// The subject key of a user: `User:name`.
pub fn subject_of(username: &str) -> String {
    format!("User:{username}")
}

/// The user a subject key names (`User:alice`, the type in any case, as Java's `Subject.of`).
pub fn user_of_subject(subject: &str) -> Option<&str> {
    let (kind, name) = subject.trim().split_once(':')?;
    (kind.eq_ignore_ascii_case("User") && !name.is_empty()).then_some(name)
}

/// A stored ACL as the decision reads it: entries whose resource or decision does not parse
/// are left out (the admin requests never store one), unknown action names dropped.
fn policy_acl(acl: &AuthAcl) -> policy::Acl {
    let mut out = policy::Acl::default();
    for stored in &acl.policies {
        let entries = stored.entries.iter().filter_map(|entry| {
            Some(PolicyEntry {
                resource: PolicyResource::parse(&entry.resource)?,
                actions: entry
                    .actions
                    .iter()
                    .filter_map(|a| policy::Action::parse(a))
                    .collect(),
                source_ips: entry.source_ips.clone(),
                decision: if entry.allow {
                    Decision::Allow
                } else {
                    Decision::Deny
                },
            })
        });
        if stored.default {
            out.default.extend(entries);
        } else {
            out.custom.extend(entries);
        }
    }
    out
}

/// Whether `account`, an ACL 2.0 user who is not a super user, may do what `need` asks.
pub(super) fn authorize(
    account: &Account,
    status: UserStatus,
    acl: Option<&policy::Acl>,
    need: &Need,
    peer: IpAddr,
) -> Result<(), Refusal> {
    let user = UserAccess {
        name: account.access_key.clone(),
        user_type: policy::UserType::Normal,
        status,
    };
    let decide = |kind, name: &str, actions: &[policy::Action]| {
        policy::decide(
            Some(&user),
            acl,
            &policy::Request {
                user: &user.name,
                kind,
                name,
                actions,
                source_ip: peer,
            },
        )
        .map_err(Refusal::Policy)
    };
    match need {
        Need::Nothing => Ok(()),
        Need::Access(checks) => checks.iter().try_for_each(|check| {
            use policy::Action as A;
            let actions: &[policy::Action] = match check.action {
                Action::Pub => &[A::Pub],
                Action::Sub => &[A::Sub],
                Action::PubOrSub => &[A::Pub, A::Sub],
                Action::SubOrGet => &[A::Sub, A::Get],
                Action::SubOrUpdate => &[A::Sub, A::Update],
                Action::Get => &[A::Get],
            };
            match &check.resource {
                Resource::Topic(name) => decide(policy::ResourceType::Topic, name, actions),
                Resource::Group(name) => decide(policy::ResourceType::Group, name, actions),
            }
        }),
        Need::Admin(checks) => checks
            .iter()
            .try_for_each(|check| decide(check.kind, &check.name, &[check.action])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{Acl, AdminCheck, Check, Identity};
    use skiff_storage::auth::{AuthPolicy, AuthPolicyEntry};

    fn user(name: &str, super_user: bool, enabled: bool) -> AuthUser {
        AuthUser {
            username: name.into(),
            password: format!("{name}-secret"),
            super_user,
            enabled,
        }
    }

    fn entry(resource: &str, actions: &[&str], ips: &[&str], allow: bool) -> AuthPolicyEntry {
        AuthPolicyEntry {
            resource: resource.into(),
            actions: actions.iter().map(|a| a.to_string()).collect(),
            source_ips: ips.iter().map(|a| a.to_string()).collect(),
            allow,
        }
    }

    fn acl_with(users: &[AuthUser], acls: &[AuthAcl]) -> Acl {
        Acl::default().with_users(UserBook::new("DefaultCluster", users, acls))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn login(acl: &Acl, name: &str) -> Result<Identity, Refusal> {
        let secret = format!("{name}-secret");
        acl.authenticate(Some(name), ip("127.0.0.1"), |s| s == secret)
    }

    #[test]
    fn a_stored_user_signs_with_its_password_and_a_disabled_one_is_refused() {
        let acl = acl_with(
            &[user("alice", false, true), user("bob", false, false)],
            &[],
        );
        assert!(acl.is_on());
        assert!(login(&acl, "alice").is_ok());
        assert_eq!(
            login(&acl, "bob").err(),
            Some(Refusal::DisabledUser("bob".into()))
        );
        assert_eq!(
            acl.authenticate(Some("alice"), ip("127.0.0.1"), |_| false)
                .err(),
            Some(Refusal::BadSignature)
        );
        assert_eq!(
            login(&acl, "carol").err(),
            Some(Refusal::UnknownUser("carol".into()))
        );
    }

    #[test]
    fn a_stored_users_requests_are_decided_by_its_policies() {
        let acls = [AuthAcl {
            subject: "User:alice".into(),
            policies: vec![AuthPolicy {
                default: false,
                entries: vec![
                    entry("Topic:orders", &["Pub", "Sub"], &[], true),
                    entry("Topic:order*", &["All"], &["10.0.0.0/8"], false),
                    entry("Group:GID_orders", &["Sub"], &[], true),
                    entry("Cluster:DefaultCluster", &["Get"], &[], true),
                ],
            }],
        }];
        let acl = acl_with(
            &[user("alice", false, true), user("root", true, true)],
            &acls,
        );
        let alice = login(&acl, "alice").expect("alice");
        let allowed = |need: Need, peer: &str| Acl::authorize(&alice, &need, 10, ip(peer)).is_ok();
        let access = |check| Need::Access(vec![check]);
        assert!(allowed(
            access(Check::topic("orders", Action::Pub)),
            "10.1.2.3"
        ));
        // The prefix's Deny applies from 10/8 only, and a literal name beats it anyway.
        assert!(!allowed(
            access(Check::topic("order-audit", Action::Sub)),
            "10.1.2.3"
        ));
        assert!(!allowed(
            access(Check::topic("order-audit", Action::Sub)),
            "127.0.0.1"
        ));
        assert!(allowed(
            access(Check::group("%RETRY%GID_orders", Action::Sub)),
            "127.0.0.1"
        ));
        let cluster = |action| {
            Need::Admin(vec![AdminCheck {
                kind: policy::ResourceType::Cluster,
                name: "DefaultCluster".into(),
                action,
            }])
        };
        assert!(allowed(cluster(policy::Action::Get), "127.0.0.1"));
        assert!(!allowed(cluster(policy::Action::Update), "127.0.0.1"));
        let root = login(&acl, "root").expect("root");
        assert!(
            Acl::authorize(&root, &cluster(policy::Action::Update), 3001, ip("1.2.3.4")).is_ok()
        );
    }

    #[test]
    fn reading_a_topics_state_needs_get_where_consuming_needs_sub() {
        let acls = [AuthAcl {
            subject: "User:reader".into(),
            policies: vec![AuthPolicy {
                default: false,
                entries: vec![
                    entry("Topic:orders", &["Sub"], &[], true),
                    entry("Group:G", &["Sub"], &[], true),
                    entry("Topic:stats", &["Get"], &[], true),
                ],
            }],
        }];
        let acl = acl_with(&[user("reader", false, true)], &acls);
        let reader = login(&acl, "reader").expect("reader");
        let need = |code: i32, fields: &[(&str, &str)]| {
            let mut r = crate::remoting::RemotingCommand::new_request(code);
            for (k, v) in fields {
                r = r.with_ext(*k, *v);
            }
            crate::acl::rules::remoting_need(&r, DEFAULT_CLUSTER)
        };
        let allowed = |need: Need| Acl::authorize(&reader, &need, 0, ip("127.0.0.1")).is_ok();
        use crate::remoting::codes::request as rc;
        let offsets = [("topic", "orders"), ("consumerGroup", "G")];
        assert!(allowed(need(rc::QUERY_CONSUMER_OFFSET, &offsets)));
        assert!(allowed(need(rc::UPDATE_CONSUMER_OFFSET, &offsets)));
        assert!(allowed(need(rc::PULL_MESSAGE, &offsets)));
        // Apache asks Get for these: Sub on the topic is not enough.
        assert!(!allowed(need(rc::GET_MAX_OFFSET, &[("topic", "orders")])));
        assert!(allowed(need(rc::GET_MAX_OFFSET, &[("topic", "stats")])));
        assert!(!allowed(need(
            rc::PULL_MESSAGE,
            &[("topic", "stats"), ("consumerGroup", "G")]
        )));
    }

    #[test]
    fn subjects_name_users_by_the_user_type_in_any_case() {
        assert_eq!(user_of_subject("User:alice"), Some("alice"));
        assert_eq!(user_of_subject("user:alice"), Some("alice"));
        assert_eq!(user_of_subject("alice"), None);
        assert_eq!(user_of_subject("Group:alice"), None);
        assert_eq!(subject_of("alice"), "User:alice");
    }
}
