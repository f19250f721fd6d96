//! RocketMQ 5's ACL 2.0 users and their ACLs, in two trees of the metadata database.
//!
//! [`AUTH_USERS_TREE`] holds one [`AuthUser`] per user name, [`AUTH_ACLS_TREE`] one [`AuthAcl`]
//! per subject (`User:name`), both with the [`crate::record`] codec and flushed before a write
//! returns, as topics are: a user created and answered survives a crash. What the records mean
//! (resource keys, actions, the decision over them) is the node's business; this layer keeps
//! them as RocketMQ writes them, so a record written by one build reads in the next.

use serde::{Deserialize, Serialize};

use crate::metadata::{MetadataError, MetadataStore, Named};
use crate::record::Decoded;

/// Name of the sled tree holding [`AuthUser`]s.
pub const AUTH_USERS_TREE: &str = "auth_users";
/// Name of the sled tree holding [`AuthAcl`]s.
pub const AUTH_ACLS_TREE: &str = "auth_acls";
const AUTH_USER_RECORD_VERSION: u8 = 1;
const AUTH_ACL_RECORD_VERSION: u8 = 1;

/// An ACL 2.0 user: its name, its secret (the key requests are signed with), whether it is a
/// super user and whether it is enabled.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthUser {
    pub username: String,
    pub password: String,
    pub super_user: bool,
    pub enabled: bool,
}

impl std::fmt::Debug for AuthUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password never reaches a log line through Debug.
        f.debug_struct("AuthUser")
            .field("username", &self.username)
            .field("super_user", &self.super_user)
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

/// One subject's policies: at most one custom and one default.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthAcl {
    /// `User:name`.
    pub subject: String,
    pub policies: Vec<AuthPolicy>,
}

/// A policy: its type and its entries, in the order they were written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthPolicy {
    /// RocketMQ's `Default` policy type; otherwise `Custom`.
    pub default: bool,
    pub entries: Vec<AuthPolicyEntry>,
}

/// One entry as RocketMQ writes it: a resource key (`*`, `Topic:orders`, `Group:g*`), action
/// names (`Pub`, `Sub`, ...), source addresses or CIDRs (none: any) and whether it allows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthPolicyEntry {
    pub resource: String,
    pub actions: Vec<String>,
    pub source_ips: Vec<String>,
    pub allow: bool,
}

impl Named for AuthUser {
    const TREE: &'static str = AUTH_USERS_TREE;
    const VERSION: u8 = AUTH_USER_RECORD_VERSION;
    fn name(&self) -> &str {
        &self.username
    }
    fn decode_older(_version: u8, _raw: &[u8]) -> Option<Decoded<Self>> {
        None
    }
}

impl Named for AuthAcl {
    const TREE: &'static str = AUTH_ACLS_TREE;
    const VERSION: u8 = AUTH_ACL_RECORD_VERSION;
    fn name(&self) -> &str {
        &self.subject
    }
    fn decode_older(_version: u8, _raw: &[u8]) -> Option<Decoded<Self>> {
        None
    }
}

impl MetadataStore {
    /// Stores `user` under its name, replacing any previous one, durably.
    pub fn put_auth_user(&self, user: &AuthUser) -> Result<(), MetadataError> {
        self.put(&self.tree_of::<AuthUser>()?, user)
    }

    /// The user named `username`, if stored.
    pub fn auth_user(&self, username: &str) -> Result<Option<AuthUser>, MetadataError> {
        self.get(&self.tree_of::<AuthUser>()?, username)
    }

    /// Removes the user; answers whether it was there.
    pub fn remove_auth_user(&self, username: &str) -> Result<bool, MetadataError> {
        self.remove::<AuthUser>(&self.tree_of::<AuthUser>()?, username)
    }

    /// Every user, sorted by name.
    pub fn auth_users(&self) -> Result<Vec<AuthUser>, MetadataError> {
        self.list(&self.tree_of::<AuthUser>()?)
    }

    /// Stores `acl` under its subject, replacing any previous one, durably.
    pub fn put_auth_acl(&self, acl: &AuthAcl) -> Result<(), MetadataError> {
        self.put(&self.tree_of::<AuthAcl>()?, acl)
    }

    /// The ACL of `subject`, if stored.
    pub fn auth_acl(&self, subject: &str) -> Result<Option<AuthAcl>, MetadataError> {
        self.get(&self.tree_of::<AuthAcl>()?, subject)
    }

    /// Removes the subject's ACL; answers whether it was there.
    pub fn remove_auth_acl(&self, subject: &str) -> Result<bool, MetadataError> {
        self.remove::<AuthAcl>(&self.tree_of::<AuthAcl>()?, subject)
    }

    /// Every ACL, sorted by subject.
    pub fn auth_acls(&self) -> Result<Vec<AuthAcl>, MetadataError> {
        self.list(&self.tree_of::<AuthAcl>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::open_db;

    fn alice() -> AuthUser {
        AuthUser {
            username: "alice".into(),
            password: "alice-secret".into(),
            super_user: false,
            enabled: true,
        }
    }

    fn alice_acl() -> AuthAcl {
        AuthAcl {
            subject: "User:alice".into(),
            policies: vec![AuthPolicy {
                default: false,
                entries: vec![AuthPolicyEntry {
                    resource: "Topic:orders".into(),
                    actions: vec!["Pub".into(), "Sub".into()],
                    source_ips: vec!["10.0.0.0/8".into()],
                    allow: true,
                }],
            }],
        }
    }

    #[test]
    fn users_and_acls_survive_reopening_the_database() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let db = open_db(dir.path()).expect("db");
            let store = MetadataStore::open(&db, dir.path().into()).expect("store");
            store.put_auth_user(&alice()).expect("put user");
            store.put_auth_acl(&alice_acl()).expect("put acl");
        }
        let db = open_db(dir.path()).expect("db");
        let store = MetadataStore::open(&db, dir.path().into()).expect("store");
        assert_eq!(store.auth_users().expect("users"), vec![alice()]);
        assert_eq!(store.auth_user("alice").expect("get"), Some(alice()));
        assert_eq!(
            store.auth_acl("User:alice").expect("get"),
            Some(alice_acl())
        );
        assert_eq!(store.auth_acls().expect("acls"), vec![alice_acl()]);
        assert!(store.remove_auth_user("alice").expect("remove"));
        assert!(!store.remove_auth_user("alice").expect("remove again"));
        assert!(store.remove_auth_acl("User:alice").expect("remove acl"));
        assert!(store.auth_users().expect("users").is_empty());
        assert!(store.auth_acls().expect("acls").is_empty());
    }

    #[test]
    fn a_users_debug_never_shows_its_password() {
        assert!(!format!("{:?}", alice()).contains("alice-secret"));
    }
}
