//! Access control: who may connect and what each user may do, as RocketMQ's ACL offers.
//!
//! With no account configured, ACL is off and every request is served (protected mode still
//! guards a node that listens beyond loopback). With one or more accounts, every request must
//! be signed with an account's secret key, the way RocketMQ's clients sign them:
//!
//! * remoting: the `AccessKey` and `Signature` extension fields `AclClientRPCHook` adds
//!   ([`signature::remoting`]);
//! * gRPC: the `authorization` metadata of the 5.x clients ([`signature::GrpcAuthorization`]).
//!
//! Then the request's topics and groups are checked against the account's permissions
//! ([`rules`] says what each request needs). Both protocols call the same [`Acl`]; neither
//! holds a rule of its own.
//!
//! The configuration is RocketMQ's `plain_acl.yml`: a global white list and accounts with an
//! access key, a secret key, an admin flag, default topic and group permissions, per-resource
//! permissions (`Name=PUB|SUB`, with `*` and `prefix*` patterns) and an address allow-list. It
//! comes from `skiff.toml`'s `[acl]` table or from the YAML file `acl_file` names, in
//! `plain_acl.yml`'s own format; [`AclHandle`] swaps a reloaded one in without touching
//! connections.
//!
//! RocketMQ 5's ACL 2.0 lives beside it: users and their ACLs made by the admin requests
//! (`mqadmin createUser`, `createAcl`, ...; [`admin`], the bodies in `admin_bodies`), kept in the
//! node's store and put in force as a [`users::UserBook`]; [`policy`] decides one request of such
//! a user with Apache's precedence rules. A request signed by a file account is decided by the
//! file, one signed by a stored user by its policies; ACL is on as soon as either exists.

pub mod address;
pub mod admin;
mod admin_bodies;
mod handle;
pub mod policy;
pub mod rules;
pub mod signature;
pub mod users;

pub use handle::AclHandle;

use address::AddressSet;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Errors loading an ACL configuration.
#[derive(Debug, thiserror::Error)]
pub enum AclError {
    #[error("reading ACL file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing ACL file {path}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_norway::Error,
    },
    #[error("ACL account {access_key:?}: {reason}")]
    Account { access_key: String, reason: String },
    #[error("ACL global_white_remote_addresses: {reason}")]
    GlobalWhiteList { reason: String },
}

/// The ACL as written: `skiff.toml`'s `[acl]` table or a `plain_acl.yml` file. Keys are
/// accepted in `skiff.toml`'s snake case and in `plain_acl.yml`'s camel case.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AclConfig {
    /// Peers from these addresses are served without credentials (RocketMQ's
    /// `globalWhiteRemoteAddresses`).
    #[serde(alias = "globalWhiteRemoteAddresses")]
    pub global_white_remote_addresses: Vec<String>,
    pub accounts: Vec<AccountConfig>,
    /// RocketMQ's record of updates made through its admin requests (`dataVersion`), which a
    /// `plain_acl.yml` it wrote carries; read and ignored.
    #[serde(alias = "dataVersion", skip_serializing)]
    pub data_version: Option<Vec<std::collections::BTreeMap<String, u64>>>,
}

/// One account as written.
#[derive(Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AccountConfig {
    #[serde(alias = "accessKey", deserialize_with = "lenient_string")]
    pub access_key: String,
    #[serde(alias = "secretKey", deserialize_with = "lenient_string")]
    pub secret_key: String,
    /// Addresses this account may be used from (empty: any).
    #[serde(alias = "whiteRemoteAddress", deserialize_with = "lenient_string")]
    pub white_remote_address: String,
    /// May do anything: admin requests and every topic and group.
    pub admin: bool,
    /// For topics no entry of `topic_perms` names (default `DENY`).
    #[serde(alias = "defaultTopicPerm")]
    pub default_topic_perm: Option<String>,
    /// For groups no entry of `group_perms` names (default `DENY`).
    #[serde(alias = "defaultGroupPerm")]
    pub default_group_perm: Option<String>,
    /// `Name=PERM`, `prefix*=PERM` or `*=PERM`; PERM is DENY, PUB, SUB or PUB|SUB.
    #[serde(alias = "topicPerms")]
    pub topic_perms: Vec<String>,
    #[serde(alias = "groupPerms")]
    pub group_perms: Vec<String>,
}

/// A string as `plain_acl.yml` writes one: YAML reads `secretKey: 12345678` as a number and an
/// empty `whiteRemoteAddress:` as null.
fn lenient_string<'de, D: serde::Deserializer<'de>>(de: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Scalar {
        Text(String),
        Integer(i64),
        Float(f64),
        Flag(bool),
        Null(()),
    }
    Ok(match Option::<Scalar>::deserialize(de)? {
        Some(Scalar::Text(s)) => s,
        Some(Scalar::Integer(n)) => n.to_string(),
        Some(Scalar::Float(x)) => x.to_string(),
        Some(Scalar::Flag(b)) => b.to_string(),
        Some(Scalar::Null(())) | None => String::new(),
    })
}

impl fmt::Debug for AccountConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The secret key never reaches a log line through Debug.
        f.debug_struct("AccountConfig")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .field("white_remote_address", &self.white_remote_address)
            .field("admin", &self.admin)
            .field("default_topic_perm", &self.default_topic_perm)
            .field("default_group_perm", &self.default_group_perm)
            .field("topic_perms", &self.topic_perms)
            .field("group_perms", &self.group_perms)
            .finish()
    }
}

impl AclConfig {
    /// Reads a `plain_acl.yml`-format file.
    pub fn from_yaml_file(path: &Path) -> Result<AclConfig, AclError> {
        let text = std::fs::read_to_string(path).map_err(|source| AclError::Read {
            path: path.to_owned(),
            source,
        })?;
        serde_norway::from_str(&text).map_err(|source| AclError::Parse {
            path: path.to_owned(),
            source,
        })
    }

    /// This configuration's accounts and white list followed by `other`'s (a file's accounts
    /// join `skiff.toml`'s).
    pub fn merged(mut self, other: AclConfig) -> AclConfig {
        self.global_white_remote_addresses
            .extend(other.global_white_remote_addresses);
        self.accounts.extend(other.accounts);
        self
    }
}

/// What a user may do with a topic or a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Perm {
    Deny,
    Pub,
    Sub,
    PubSub,
}

impl Perm {
    fn parse(text: &str) -> Option<Perm> {
        match text.trim().to_ascii_uppercase().as_str() {
            "DENY" => Some(Perm::Deny),
            "PUB" => Some(Perm::Pub),
            "SUB" => Some(Perm::Sub),
            "PUB|SUB" | "SUB|PUB" => Some(Perm::PubSub),
            _ => None,
        }
    }

    fn allows(self, action: Action) -> bool {
        matches!(
            (self, action),
            (Perm::PubSub, _) | (Perm::Pub, Action::Pub) | (Perm::Sub, Action::Sub)
        )
    }
}

/// What a request does with a resource. The ACL file (RocketMQ 4's ACL 1.0) knows PUB and SUB
/// only; ACL 2.0 tells reading a topic's or group's state (`Get`) and changing a group's offsets
/// (`Update`) from consuming, so those reads and changes name both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Pub,
    Sub,
    /// Looks a topic's route up: either permission is enough.
    PubOrSub,
    /// Reads state a consumer also reads (its offsets, its group's members): SUB in the file,
    /// `Sub` or `Get` for an ACL 2.0 user.
    SubOrGet,
    /// Changes a group's committed offsets: SUB in the file, `Sub` or `Update` for an ACL 2.0
    /// user.
    SubOrUpdate,
    /// Reads a topic's or group's state (offsets, stats, config): SUB in the file, `Get` for an
    /// ACL 2.0 user.
    Get,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::Pub => "PUB",
            Action::Sub => "SUB",
            Action::PubOrSub => "PUB|SUB",
            Action::SubOrGet | Action::SubOrUpdate | Action::Get => "SUB",
        })
    }
}

/// A topic or a consumer group, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    Topic(String),
    Group(String),
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resource::Topic(name) => write!(f, "Topic:{name}"),
            Resource::Group(name) => write!(f, "Group:{name}"),
        }
    }
}

/// One thing a request needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub resource: Resource,
    pub action: Action,
}

impl Check {
    pub fn topic(name: &str, action: Action) -> Check {
        Check {
            resource: Resource::Topic(name.to_owned()),
            action,
        }
    }

    /// A group, named plainly or by its retry topic (`%RETRY%group`).
    pub fn group(name: &str, action: Action) -> Check {
        let name = name
            .strip_prefix(skiff_actors::logic::delay::RETRY_TOPIC_PREFIX)
            .unwrap_or(name);
        Check {
            resource: Resource::Group(name.to_owned()),
            action,
        }
    }
}

/// What serving a request takes beyond a valid signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// Nothing at all, not even a signature: name-server lookups, which RocketMQ's name
    /// server serves to everyone.
    Nothing,
    /// A valid signature and these permissions (none: any user).
    Access(Vec<Check>),
    /// A valid signature of an admin account of the ACL file, or an ACL 2.0 user allowed these
    /// (none: any user).
    Admin(Vec<AdminCheck>),
}

/// One thing an admin request needs of an ACL 2.0 user: an action on a resource, which may be
/// the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminCheck {
    pub kind: policy::ResourceType,
    pub name: String,
    pub action: policy::Action,
}

/// Why a request was refused. The remark the client reads is this type's `Display`; it names
/// the user and the resource, never a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the request is not signed: it has no access key (ACL is on; sign requests with an account's access key and secret key)")]
    Unsigned,
    #[error("User:{0} is not found.")]
    UnknownUser(String),
    #[error("User:{0} is disabled.")]
    DisabledUser(String),
    #[error("check signature failed.")]
    BadSignature,
    #[error("{0}")]
    MalformedCredentials(String),
    #[error("User:{user} may not be used from {peer}.")]
    AddressNotAllowed { user: String, peer: IpAddr },
    #[error(
        "User:{user} has no permission to access {resource} from {peer}, no matched policies."
    )]
    Denied {
        user: String,
        resource: Resource,
        peer: IpAddr,
    },
    #[error("User:{user} is not an admin; request code {code} needs an admin account.")]
    AdminRequired { user: String, code: i32 },
    /// An ACL 2.0 user's policies refused it.
    #[error("{0}")]
    Policy(policy::Refusal),
}

/// Who a request comes from, once its signature checked out.
#[derive(Debug, Clone)]
pub enum Identity {
    /// A peer in the global white list: served without credentials.
    Trusted,
    User(Arc<Account>),
}

/// One account, ready to check requests against: written in the ACL file (RocketMQ 4's ACL
/// 1.0) or an ACL 2.0 user kept in the node's store ([`users`]).
pub struct Account {
    pub access_key: String,
    secret_key: String,
    /// An ACL file's `admin = true`, or an ACL 2.0 super user: may do anything.
    admin: bool,
    rights: Rights,
}

/// What an account may do beyond what `admin` grants.
enum Rights {
    /// ACL 1.0: permissions per topic and group, and where the account may be used from.
    File {
        allowed_from: Option<AddressSet>,
        topics: ResourcePerms,
        groups: ResourcePerms,
    },
    /// ACL 2.0: the user's status and policies, decided by [`policy::decide`].
    Policies {
        status: policy::UserStatus,
        acl: Option<policy::Acl>,
    },
}

impl fmt::Debug for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Account")
            .field("access_key", &self.access_key)
            .field("admin", &self.admin)
            .finish_non_exhaustive()
    }
}

impl Account {
    pub fn secret_key(&self) -> &str {
        &self.secret_key
    }

    pub fn is_admin(&self) -> bool {
        self.admin
    }

    /// Whether the account was written in the ACL file (read-only for the admin requests).
    pub fn is_from_file(&self) -> bool {
        matches!(self.rights, Rights::File { .. })
    }
}

/// Permissions for one kind of resource: exact names first, then the longest matching
/// prefix pattern, then the default.
#[derive(Debug, Default)]
struct ResourcePerms {
    exact: HashMap<String, Perm>,
    /// `(prefix, perm)`, longest prefix first; `*` is the empty prefix.
    prefixes: Vec<(String, Perm)>,
    default: Option<Perm>,
}

impl ResourcePerms {
    fn parse(
        entries: &[String],
        default: Option<&str>,
        kind: &str,
        access_key: &str,
    ) -> Result<ResourcePerms, AclError> {
        let invalid = |reason: String| AclError::Account {
            access_key: access_key.to_owned(),
            reason,
        };
        let mut perms = ResourcePerms {
            default: match default {
                Some(text) => Some(Perm::parse(text).ok_or_else(|| {
                    invalid(format!(
                        "default {kind} permission {text:?} is not DENY, PUB, SUB or PUB|SUB"
                    ))
                })?),
                None => None,
            },
            ..ResourcePerms::default()
        };
        for entry in entries {
            let (name, perm_text) = entry
                .rsplit_once('=')
                .ok_or_else(|| invalid(format!("{kind} permission {entry:?} is not NAME=PERM")))?;
            let perm = Perm::parse(perm_text).ok_or_else(|| {
                invalid(format!(
                    "{kind} permission {entry:?}: {perm_text:?} is not DENY, PUB, SUB or PUB|SUB"
                ))
            })?;
            let name = name.trim();
            if name.is_empty() {
                return Err(invalid(format!(
                    "{kind} permission {entry:?} names nothing"
                )));
            }
            match name.strip_suffix('*') {
                Some(prefix) => perms.prefixes.push((prefix.to_owned(), perm)),
                None => {
                    perms.exact.insert(name.to_owned(), perm);
                }
            }
        }
        perms
            .prefixes
            .sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        Ok(perms)
    }

    fn perm_for(&self, name: &str) -> Perm {
        if let Some(perm) = self.exact.get(name) {
            return *perm;
        }
        self.prefixes
            .iter()
            .find(|(prefix, _)| name.starts_with(prefix.as_str()))
            .map(|(_, perm)| *perm)
            .or(self.default)
            .unwrap_or(Perm::Deny)
    }
}

/// The ACL a node checks requests against: the ACL file's accounts and the ACL 2.0 users of
/// the node's store. A name in both is the file's account.
#[derive(Debug, Default)]
pub struct Acl {
    accounts: HashMap<String, Arc<Account>>,
    global_white: AddressSet,
    users: users::UserBook,
}

impl Acl {
    /// Compiles `config`; every account and pattern is checked, so a bad entry is an error
    /// here rather than a request refused later.
    pub fn new(config: &AclConfig) -> Result<Acl, AclError> {
        let global_white = AddressSet::parse_all(&config.global_white_remote_addresses)
            .map_err(|reason| AclError::GlobalWhiteList { reason })?;
        let mut accounts = HashMap::new();
        for written in &config.accounts {
            let access_key = written.access_key.trim();
            let invalid = |reason: &str| AclError::Account {
                access_key: access_key.to_owned(),
                reason: reason.to_owned(),
            };
            if access_key.is_empty() {
                return Err(invalid("access_key is empty"));
            }
            if written.secret_key.is_empty() {
                return Err(invalid("secret_key is empty"));
            }
            let allowed_from = if written.white_remote_address.trim().is_empty() {
                None
            } else {
                Some(
                    AddressSet::parse_all(std::slice::from_ref(&written.white_remote_address))
                        .map_err(|reason| invalid(&format!("white_remote_address: {reason}")))?,
                )
            };
            let account = Account {
                access_key: access_key.to_owned(),
                secret_key: written.secret_key.clone(),
                admin: written.admin,
                rights: Rights::File {
                    allowed_from,
                    topics: ResourcePerms::parse(
                        &written.topic_perms,
                        written.default_topic_perm.as_deref(),
                        "topic",
                        access_key,
                    )?,
                    groups: ResourcePerms::parse(
                        &written.group_perms,
                        written.default_group_perm.as_deref(),
                        "group",
                        access_key,
                    )?,
                },
            };
            if accounts
                .insert(access_key.to_owned(), Arc::new(account))
                .is_some()
            {
                return Err(invalid("the access key is configured twice"));
            }
        }
        Ok(Acl {
            accounts,
            global_white,
            users: users::UserBook::default(),
        })
    }

    /// This ACL with `users` as its ACL 2.0 users (the file's accounts unchanged).
    pub fn with_users(self, users: users::UserBook) -> Acl {
        Acl { users, ..self }
    }

    /// The ACL 2.0 users and ACLs in force.
    pub fn users(&self) -> &users::UserBook {
        &self.users
    }

    /// Whether requests must be signed: at least one account is configured or one user stored.
    pub fn is_on(&self) -> bool {
        !self.accounts.is_empty() || !self.users.is_empty()
    }

    pub fn account_count(&self) -> usize {
        self.accounts.len() + self.users.len()
    }

    /// The account `access_key` names: the ACL file's, else the stored user's.
    pub fn account(&self, access_key: &str) -> Option<Arc<Account>> {
        self.accounts
            .get(access_key)
            .cloned()
            .or_else(|| self.users.account(access_key))
    }

    /// The file's accounts, by access key.
    pub fn file_accounts(&self) -> impl Iterator<Item = &Arc<Account>> {
        self.accounts.values()
    }

    /// Who `access_key` is, from `peer`; `verify` checks the request's signature with the
    /// account's secret key.
    pub fn authenticate(
        &self,
        access_key: Option<&str>,
        peer: IpAddr,
        verify: impl FnOnce(&str) -> bool,
    ) -> Result<Identity, Refusal> {
        let Some(access_key) = access_key.filter(|k| !k.is_empty()) else {
            if self.global_white.contains(peer) {
                return Ok(Identity::Trusted);
            }
            return Err(Refusal::Unsigned);
        };
        let Some(account) = self.account(access_key) else {
            return Err(Refusal::UnknownUser(access_key.to_owned()));
        };
        match &account.rights {
            Rights::File {
                allowed_from: Some(allowed),
                ..
            } if !allowed.contains(peer) => {
                return Err(Refusal::AddressNotAllowed {
                    user: account.access_key.clone(),
                    peer,
                });
            }
            Rights::Policies {
                status: policy::UserStatus::Disable,
                ..
            } => return Err(Refusal::DisabledUser(account.access_key.clone())),
            _ => {}
        }
        if !verify(&account.secret_key) {
            return Err(Refusal::BadSignature);
        }
        Ok(Identity::User(account))
    }

    /// Whether `identity` may do what `need` asks; `code` names the request in a refusal.
    pub fn authorize(
        identity: &Identity,
        need: &Need,
        code: i32,
        peer: IpAddr,
    ) -> Result<(), Refusal> {
        let account = match identity {
            Identity::Trusted => return Ok(()),
            Identity::User(account) if account.admin => return Ok(()),
            Identity::User(account) => account,
        };
        match (&account.rights, need) {
            (_, Need::Nothing) => Ok(()),
            (Rights::File { .. }, Need::Admin(_)) => Err(Refusal::AdminRequired {
                user: account.access_key.clone(),
                code,
            }),
            (Rights::File { topics, groups, .. }, Need::Access(checks)) => {
                checks.iter().try_for_each(|check| {
                    let perm = match &check.resource {
                        Resource::Topic(name) => topics.perm_for(name),
                        Resource::Group(name) => groups.perm_for(name),
                    };
                    let allowed = match check.action {
                        Action::Pub => perm.allows(Action::Pub),
                        Action::PubOrSub => perm.allows(Action::Pub) || perm.allows(Action::Sub),
                        Action::Sub | Action::SubOrGet | Action::SubOrUpdate | Action::Get => {
                            perm.allows(Action::Sub)
                        }
                    };
                    if allowed {
                        Ok(())
                    } else {
                        Err(Refusal::Denied {
                            user: account.access_key.clone(),
                            resource: check.resource.clone(),
                            peer,
                        })
                    }
                })
            }
            (Rights::Policies { status, acl }, need) => {
                users::authorize(account, *status, acl.as_ref(), need, peer)
            }
        }
    }
}

impl Acl {
    /// Checks a remoting request: its signature, then what it needs ([`rules`]).
    pub fn check_remoting(
        &self,
        request: &crate::remoting::RemotingCommand,
        peer: IpAddr,
    ) -> Result<(), Refusal> {
        let need = rules::remoting_need(request, self.users.cluster());
        if need == Need::Nothing {
            return Ok(());
        }
        let identity = self.authenticate(request.ext(signature::ACCESS_KEY), peer, |secret| {
            signature::verify_remoting(secret, &request.ext_fields, &request.body, request.version)
        })?;
        Acl::authorize(&identity, &need, request.code, peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn alice() -> AccountConfig {
        AccountConfig {
            access_key: "alice".into(),
            secret_key: "alice-secret".into(),
            topic_perms: vec![
                "orders=PUB|SUB".into(),
                "audit=DENY".into(),
                "log-*=PUB".into(),
                "log-secret-*=DENY".into(),
            ],
            group_perms: vec!["GID_orders=SUB".into()],
            default_group_perm: Some("DENY".into()),
            ..AccountConfig::default()
        }
    }

    fn acl(accounts: Vec<AccountConfig>) -> Acl {
        Acl::new(&AclConfig {
            global_white_remote_addresses: vec!["10.1.1.*".into()],
            accounts,
            ..AclConfig::default()
        })
        .expect("valid acl")
    }

    fn user(acl: &Acl, key: &str) -> Identity {
        acl.authenticate(Some(key), ip("127.0.0.1"), |_| true)
            .expect("known user")
    }

    #[test]
    fn exact_names_win_over_prefixes_and_the_longest_prefix_wins() {
        let acl = acl(vec![alice()]);
        let alice = user(&acl, "alice");
        let allowed = |check: Check| {
            Acl::authorize(&alice, &Need::Access(vec![check]), 10, ip("127.0.0.1")).is_ok()
        };
        assert!(allowed(Check::topic("orders", Action::Pub)));
        assert!(allowed(Check::topic("orders", Action::Sub)));
        assert!(!allowed(Check::topic("audit", Action::Sub)));
        assert!(allowed(Check::topic("log-app", Action::Pub)));
        assert!(!allowed(Check::topic("log-app", Action::Sub)));
        assert!(!allowed(Check::topic("log-secret-1", Action::Pub)));
        assert!(!allowed(Check::topic("other", Action::Pub)), "default DENY");
        assert!(allowed(Check::topic("log-app", Action::PubOrSub)));
        assert!(allowed(Check::group("GID_orders", Action::Sub)));
        assert!(
            allowed(Check::group("%RETRY%GID_orders", Action::Sub)),
            "a retry topic names its group"
        );
        assert!(!allowed(Check::group("GID_other", Action::Sub)));
    }

    #[test]
    fn every_check_of_a_request_must_pass_and_the_refusal_names_the_first_that_fails() {
        let acl = acl(vec![alice()]);
        let alice = user(&acl, "alice");
        let need = Need::Access(vec![
            Check::topic("orders", Action::Sub),
            Check::group("GID_denied", Action::Sub),
        ]);
        let refused = Acl::authorize(&alice, &need, 11, ip("127.0.0.1")).expect_err("denied");
        assert_eq!(
            refused.to_string(),
            "User:alice has no permission to access Group:GID_denied from 127.0.0.1, no matched policies."
        );
    }

    #[test]
    fn admin_requests_need_an_admin_account_and_admins_may_do_anything() {
        let root = AccountConfig {
            access_key: "root".into(),
            secret_key: "root-secret".into(),
            admin: true,
            ..AccountConfig::default()
        };
        let acl = acl(vec![alice(), root]);
        let peer = ip("127.0.0.1");
        assert_eq!(
            Acl::authorize(&user(&acl, "alice"), &Need::Admin(Vec::new()), 17, peer),
            Err(Refusal::AdminRequired {
                user: "alice".into(),
                code: 17
            })
        );
        let root = user(&acl, "root");
        assert!(Acl::authorize(&root, &Need::Admin(Vec::new()), 17, peer).is_ok());
        let anything = Need::Access(vec![Check::topic("audit", Action::Pub)]);
        assert!(Acl::authorize(&root, &anything, 10, peer).is_ok());
    }

    #[test]
    fn authentication_refuses_unsigned_unknown_and_badly_signed_requests() {
        let acl = acl(vec![alice()]);
        let peer = ip("127.0.0.1");
        assert_eq!(
            acl.authenticate(None, peer, |_| true).err(),
            Some(Refusal::Unsigned)
        );
        assert_eq!(
            acl.authenticate(Some("bob"), peer, |_| true).err(),
            Some(Refusal::UnknownUser("bob".into()))
        );
        assert_eq!(
            acl.authenticate(Some("alice"), peer, |secret| secret == "wrong")
                .err(),
            Some(Refusal::BadSignature)
        );
        assert!(acl
            .authenticate(Some("alice"), peer, |secret| secret == "alice-secret")
            .is_ok());
    }

    #[test]
    fn the_global_white_list_serves_unsigned_peers_and_an_account_list_restricts_its_user() {
        let mut restricted = alice();
        restricted.white_remote_address = "192.168.0.*".into();
        let acl = acl(vec![restricted]);
        assert!(matches!(
            acl.authenticate(None, ip("10.1.1.7"), |_| false),
            Ok(Identity::Trusted)
        ));
        assert!(acl
            .authenticate(Some("alice"), ip("192.168.0.9"), |_| true)
            .is_ok());
        assert_eq!(
            acl.authenticate(Some("alice"), ip("192.168.1.9"), |_| true)
                .err(),
            Some(Refusal::AddressNotAllowed {
                user: "alice".into(),
                peer: ip("192.168.1.9")
            })
        );
    }

    #[test]
    fn a_bad_entry_is_an_error_at_load_naming_the_account() {
        let mut bad = alice();
        bad.topic_perms = vec!["orders=WRITE".into()];
        let err = Acl::new(&AclConfig {
            accounts: vec![bad],
            ..AclConfig::default()
        })
        .expect_err("invalid perm");
        assert!(err.to_string().contains("alice"), "{err}");
        let twice = Acl::new(&AclConfig {
            accounts: vec![alice(), alice()],
            ..AclConfig::default()
        });
        assert!(twice.is_err());
        let no_secret = AccountConfig {
            access_key: "x".into(),
            ..AccountConfig::default()
        };
        assert!(Acl::new(&AclConfig {
            accounts: vec![no_secret],
            ..AclConfig::default()
        })
        .is_err());
    }

    #[test]
    fn plain_acl_yml_loads_with_its_own_key_names() {
        let yaml = r#"
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
    groupPerms:
      - groupA=DENY
  - accessKey: rocketmq2
    secretKey: "12345678"
    admin: true
dataVersion:
  - counter: 3
    timestamp: 1733390000000
"#;
        let config: AclConfig = serde_norway::from_str(yaml).expect("plain_acl.yml");
        assert_eq!(config.accounts.len(), 2);
        assert_eq!(config.accounts[0].secret_key, "12345678");
        let acl = Acl::new(&config).expect("valid");
        let user = user(&acl, "RocketMQ");
        let peer = ip("127.0.0.1");
        let check = |c| Acl::authorize(&user, &Need::Access(vec![c]), 10, peer).is_ok();
        assert!(check(Check::topic("topicB", Action::Pub)));
        assert!(!check(Check::topic("topicA", Action::Sub)));
        assert!(
            check(Check::group("anyGroup", Action::Sub)),
            "defaultGroupPerm SUB"
        );
        assert!(!check(Check::group("groupA", Action::Sub)));
    }

    #[test]
    fn a_secret_key_never_shows_in_debug_output() {
        let config = alice();
        assert!(!format!("{config:?}").contains("alice-secret"));
        let acl = acl(vec![config]);
        assert!(!format!("{acl:?}").contains("alice-secret"));
    }
}
