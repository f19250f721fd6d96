//! ACL 2.0 administration: the users and ACLs RocketMQ 5's admin requests create, update,
//! delete, get and list (remoting codes 3001-3010, `mqadmin createUser` ... `listAcl`), with
//! Apache 5.5.0's rules and answers (`AdminBrokerProcessor`, `AuthenticationMetadataManagerImpl`,
//! `AuthorizationMetadataManagerImpl`):
//!
//! - a user needs a name and a password; it is `Normal` and `enable` unless told otherwise;
//!   creating one that exists, or changing one that does not, is refused; deleting a missing
//!   user succeeds, and deleting a user deletes its ACL;
//! - only a super user (or an unsigned request while ACL is off) may create, change or delete a
//!   super user;
//! - creating and updating an ACL are the same request: into an existing ACL, an entry for a
//!   resource already there replaces that entry's actions, addresses and decision, a new
//!   resource is appended; a policy without a type is `Custom`;
//! - deleting an ACL with a resource removes that entry of the `Custom` (or named) policy, and
//!   the policy or the ACL once empty; without a resource it removes the whole ACL.
//!
//! Where skiff goes further: a stored password is never answered (Apache answers it in
//! plain text); accounts of the ACL file are listed but cannot be changed here; and because
//! requests must be signed as soon as one user exists, the first user must be a super user and
//! the last enabled super user cannot be deleted, demoted or disabled while other users remain
//! (either would lock every administrator out).
//!
//! Every change is stored durably (`skiff_storage::auth`) before it is answered, then a new
//! [`UserBook`] is put in force for every door.

use std::sync::{Arc, Mutex};

use skiff_storage::auth::{AuthAcl, AuthStore, AuthStoreError, AuthUser};

use super::admin_bodies::{
    acl_info, merge, parse_policy_type, parse_user_status, parse_user_type, user_info,
    validate_policies,
};
pub use super::admin_bodies::{AclInfo, PolicyEntryInfo, PolicyInfo, UserInfo};
use super::policy::PolicyResource;
use super::users::{subject_of, user_of_subject, UserBook};
use super::AclHandle;

/// Why an admin request was refused, with Apache's remarks where it has one.
#[derive(Debug, thiserror::Error)]
pub enum AuthAdminError {
    #[error("The username is blank")]
    BlankUsername,
    #[error("username can not be blank")]
    UsernameBlank,
    #[error("password can not be blank")]
    BlankPassword,
    #[error("The super user can only be {verb} by super user")]
    SuperUserOnly { verb: &'static str },
    #[error("The user is existed")]
    UserExists,
    #[error("The user is not exist")]
    UserMissing,
    #[error("User:{0} is an account of the ACL file; change it there")]
    FileAccount(String),
    #[error(
        "the first ACL 2.0 user must be a Super user: requests must be signed once a user \
         exists, and only a super user may then manage users and ACLs"
    )]
    FirstUserNotSuper,
    #[error(
        "User:{0} is the last enabled super user; other users remain, and no one could manage \
         them without it"
    )]
    LastSuperUser(String),
    #[error("The body of acl is null")]
    AclBodyMissing,
    #[error("{0}")]
    AclInvalid(&'static str),
    #[error("The subject is null.")]
    SubjectNull,
    #[error("The subject of {0} is not exist.")]
    SubjectOfAclMissing(String),
    #[error("The subject is not exist.")]
    SubjectMissing,
    #[error("The acl is not exist.")]
    AclMissing,
    #[error("storing users and ACLs failed")]
    Store(#[source] AuthStoreError),
}

impl AuthAdminError {
    /// The remoting response code Apache answers it with: INVALID_PARAMETER (29) for a blank
    /// name, SYSTEM_ERROR (1) where Java's exception escapes its handler, NO_PERMISSION (16)
    /// otherwise.
    pub fn response_code(&self) -> i32 {
        match self {
            AuthAdminError::BlankUsername => 29,
            AuthAdminError::AclBodyMissing | AuthAdminError::Store(_) => 1,
            AuthAdminError::SuperUserOnly { verb } if *verb == "create" => 1,
            _ => 16,
        }
    }
}

/// Who sends an admin request, as Apache's `isNotSuperUserLogin` sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// A super user, a file admin account, or an unsigned request (ACL off or a trusted peer).
    Super,
    Normal,
}

impl Caller {
    /// The caller a request signed with `access_key` (none: unsigned) is.
    pub fn of(acl: &AclHandle, access_key: Option<&str>) -> Caller {
        match access_key.filter(|k| !k.is_empty()) {
            None => Caller::Super,
            Some(key) => match acl.current().account(key) {
                Some(account) if account.is_admin() => Caller::Super,
                _ => Caller::Normal,
            },
        }
    }
}

/// The stored users and ACLs and the ACL that enforces them.
pub struct AuthAdmin {
    store: Arc<AuthStore>,
    acl: AclHandle,
    cluster: String,
    /// One change at a time: each reads, checks and writes whole records.
    writing: Mutex<()>,
}

impl std::fmt::Debug for AuthAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthAdmin")
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl AuthAdmin {
    /// Reads the stored users and ACLs and puts them in force in `acl`.
    pub fn open(store: Arc<AuthStore>, acl: AclHandle, cluster: &str) -> AuthAdmin {
        let admin = AuthAdmin {
            store,
            acl,
            cluster: cluster.to_owned(),
            writing: Mutex::new(()),
        };
        admin.publish();
        admin
    }

    /// Who a request signed with `access_key` (none: unsigned) comes from.
    pub fn caller(&self, access_key: Option<&str>) -> Caller {
        Caller::of(&self.acl, access_key)
    }

    fn publish(&self) {
        let book = self.store.snapshot();
        let users: Vec<AuthUser> = book.users.into_values().collect();
        let acls: Vec<AuthAcl> = book.acls.into_values().collect();
        self.acl
            .replace_users(UserBook::new(&self.cluster, &users, &acls));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writing.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn refuse_file_account(&self, name: &str) -> Result<(), AuthAdminError> {
        let acl = self.acl.current();
        if acl.file_accounts().any(|a| a.access_key == name) {
            return Err(AuthAdminError::FileAccount(name.to_owned()));
        }
        Ok(())
    }

    /// The stored users as they would be with `username`'s record replaced by `user` (added
    /// when new; `None`: removed).
    fn users_after(&self, username: &str, user: Option<&AuthUser>) -> Vec<AuthUser> {
        let mut users: Vec<AuthUser> = self
            .store
            .users()
            .into_iter()
            .filter(|u| u.username != username)
            .collect();
        users.extend(user.cloned());
        users
    }

    /// Whether an enabled super user would remain after `users` replaced the stored ones
    /// (file admin accounts count), or no stored user would remain at all.
    fn administrable(&self, users: &[AuthUser]) -> bool {
        users.is_empty()
            || users.iter().any(|u| u.super_user && u.enabled)
            || self.acl.current().file_accounts().any(|a| a.is_admin())
    }

    /// Stores `changed` (new when `creating`), given the stored users with the change made
    /// ([`Self::users_after`]).
    fn store_user_change(
        &self,
        users: Vec<AuthUser>,
        changed: &AuthUser,
        creating: bool,
    ) -> Result<(), AuthAdminError> {
        if !self.administrable(&users) {
            return Err(if creating {
                AuthAdminError::FirstUserNotSuper
            } else {
                AuthAdminError::LastSuperUser(changed.username.clone())
            });
        }
        self.store
            .put_user(changed)
            .map_err(AuthAdminError::Store)?;
        self.publish();
        Ok(())
    }

    /// AUTH_CREATE_USER (3001).
    pub fn create_user(
        &self,
        caller: Caller,
        username: &str,
        info: &UserInfo,
    ) -> Result<(), AuthAdminError> {
        if username.is_empty() {
            return Err(AuthAdminError::BlankUsername);
        }
        let super_user = parse_user_type(info.user_type.as_deref()) == Some(true);
        if super_user && caller != Caller::Super {
            return Err(AuthAdminError::SuperUserOnly { verb: "create" });
        }
        let password = info.password.as_deref().unwrap_or("");
        if password.trim().is_empty() {
            return Err(AuthAdminError::BlankPassword);
        }
        let _writing = self.lock();
        if self.acl.current().account(username).is_some() {
            return Err(AuthAdminError::UserExists);
        }
        let user = AuthUser {
            username: username.to_owned(),
            password: password.to_owned(),
            super_user,
            enabled: parse_user_status(info.user_status.as_deref()) != Some(false),
        };
        self.store_user_change(self.users_after(username, Some(&user)), &user, true)?;
        tracing::info!(user = username, super_user, "acl user created");
        Ok(())
    }

    /// AUTH_UPDATE_USER (3002): the password when given and not blank, the type and status
    /// when given.
    pub fn update_user(
        &self,
        caller: Caller,
        username: &str,
        info: &UserInfo,
    ) -> Result<(), AuthAdminError> {
        if username.is_empty() {
            return Err(AuthAdminError::BlankUsername);
        }
        let new_type = parse_user_type(info.user_type.as_deref());
        if new_type == Some(true) && caller != Caller::Super {
            return Err(AuthAdminError::SuperUserOnly { verb: "update" });
        }
        let _writing = self.lock();
        self.refuse_file_account(username)?;
        let Some(mut user) = self.store.user(username) else {
            return Err(AuthAdminError::UserMissing);
        };
        if user.super_user && caller != Caller::Super {
            return Err(AuthAdminError::SuperUserOnly { verb: "update" });
        }
        if let Some(password) = info.password.as_deref().filter(|p| !p.trim().is_empty()) {
            user.password = password.to_owned();
        }
        if let Some(super_user) = new_type {
            user.super_user = super_user;
        }
        if let Some(enabled) = parse_user_status(info.user_status.as_deref()) {
            user.enabled = enabled;
        }
        self.store_user_change(self.users_after(username, Some(&user)), &user, false)?;
        tracing::info!(user = username, "acl user updated");
        Ok(())
    }

    /// AUTH_DELETE_USER (3003): the user and its ACL; a missing user is no error.
    pub fn delete_user(&self, caller: Caller, username: &str) -> Result<(), AuthAdminError> {
        if username.trim().is_empty() {
            return Err(AuthAdminError::UsernameBlank);
        }
        let _writing = self.lock();
        self.refuse_file_account(username)?;
        let Some(user) = self.store.user(username) else {
            return Ok(());
        };
        if user.super_user && caller != Caller::Super {
            return Err(AuthAdminError::SuperUserOnly { verb: "update" });
        }
        if !self.administrable(&self.users_after(username, None)) {
            return Err(AuthAdminError::LastSuperUser(username.to_owned()));
        }
        self.store
            .remove_user(username, &subject_of(username))
            .map_err(AuthAdminError::Store)?;
        self.publish();
        tracing::info!(user = username, "acl user deleted");
        Ok(())
    }

    /// AUTH_GET_USER (3004): `None` when there is no such user.
    pub fn get_user(&self, username: &str) -> Result<Option<UserInfo>, AuthAdminError> {
        if username.trim().is_empty() {
            return Err(AuthAdminError::BlankUsername);
        }
        Ok(self
            .list_users(None)
            .into_iter()
            .find(|u| u.username.as_deref() == Some(username)))
    }

    /// AUTH_LIST_USER (3005): users whose name contains `filter`, by name; the ACL file's
    /// accounts among them.
    pub fn list_users(&self, filter: Option<&str>) -> Vec<UserInfo> {
        let acl = self.acl.current();
        let mut users: Vec<UserInfo> = acl
            .file_accounts()
            .map(|a| user_info(&a.access_key, a.is_admin(), true))
            .collect();
        for user in self.store.users() {
            if !users
                .iter()
                .any(|u| u.username.as_deref() == Some(&user.username))
            {
                users.push(user_info(&user.username, user.super_user, user.enabled));
            }
        }
        let filter = filter.map(str::trim).filter(|f| !f.is_empty());
        users.retain(|u| {
            filter.is_none_or(|f| u.username.as_deref().is_some_and(|n| n.contains(f)))
        });
        users.sort_by(|a, b| a.username.cmp(&b.username));
        users
    }

    /// AUTH_CREATE_ACL (3006) and AUTH_UPDATE_ACL (3007), which Apache serves alike: merged
    /// into the subject's ACL.
    pub fn put_acl(
        &self,
        header_subject: &str,
        body: Option<&AclInfo>,
    ) -> Result<(), AuthAdminError> {
        let body = body
            .filter(|b| b.policies.as_ref().is_some_and(|p| !p.is_empty()))
            .ok_or(AuthAdminError::AclBodyMissing)?;
        let username = body
            .subject
            .as_deref()
            .and_then(user_of_subject)
            .or_else(|| user_of_subject(header_subject))
            .ok_or(AuthAdminError::SubjectNull)?
            .to_owned();
        let policies = validate_policies(body.policies.as_deref().unwrap_or_default())
            .map_err(AuthAdminError::AclInvalid)?;
        let _writing = self.lock();
        self.refuse_file_account(&username)?;
        let subject = subject_of(&username);
        if self.store.user(&username).is_none() {
            return Err(AuthAdminError::SubjectOfAclMissing(subject));
        }
        let acl = match self.store.acl(&subject) {
            None => AuthAcl { subject, policies },
            Some(mut acl) => {
                merge(&mut acl, policies);
                acl
            }
        };
        self.store.put_acl(&acl).map_err(AuthAdminError::Store)?;
        self.publish();
        tracing::info!(user = username, "acl written");
        Ok(())
    }

    /// AUTH_DELETE_ACL (3008): one resource's entry of the policy of `policy_type` (default
    /// `Custom`), or with no resource (or one that does not parse, as in Java) the whole ACL.
    pub fn delete_acl(
        &self,
        subject: &str,
        policy_type: Option<&str>,
        resource: Option<&str>,
    ) -> Result<(), AuthAdminError> {
        let username = user_of_subject(subject).ok_or(AuthAdminError::SubjectNull)?;
        let _writing = self.lock();
        self.refuse_file_account(username)?;
        if self.store.user(username).is_none() {
            return Err(AuthAdminError::SubjectMissing);
        }
        let subject = subject_of(username);
        let Some(mut acl) = self.store.acl(&subject) else {
            return Err(AuthAdminError::AclMissing);
        };
        let resource = resource.and_then(PolicyResource::parse);
        match resource {
            None => {
                self.store
                    .remove_acl(&subject)
                    .map_err(AuthAdminError::Store)?;
            }
            Some(resource) => {
                let default = parse_policy_type(policy_type);
                for policy in acl.policies.iter_mut().filter(|p| p.default == default) {
                    policy
                        .entries
                        .retain(|e| PolicyResource::parse(&e.resource).as_ref() != Some(&resource));
                }
                acl.policies.retain(|p| !p.entries.is_empty());
                if acl.policies.is_empty() {
                    self.store
                        .remove_acl(&subject)
                        .map_err(AuthAdminError::Store)?;
                } else {
                    self.store.put_acl(&acl).map_err(AuthAdminError::Store)?;
                }
            }
        }
        self.publish();
        tracing::info!(user = username, "acl deleted");
        Ok(())
    }

    /// AUTH_GET_ACL (3009): `None` when the user has no ACL.
    pub fn get_acl(&self, subject: &str) -> Result<Option<AclInfo>, AuthAdminError> {
        let username = user_of_subject(subject).ok_or(AuthAdminError::SubjectNull)?;
        if self.store.user(username).is_none() {
            return Err(AuthAdminError::SubjectMissing);
        }
        Ok(self.store.acl(&subject_of(username)).map(|a| acl_info(&a)))
    }

    /// AUTH_LIST_ACL (3010): ACLs whose subject contains `subject_filter`, each keeping the
    /// entries whose resource contains `resource_filter`; emptied ones left out.
    pub fn list_acls(
        &self,
        subject_filter: Option<&str>,
        resource_filter: Option<&str>,
    ) -> Vec<AclInfo> {
        let subject_filter = subject_filter.map(str::trim).filter(|f| !f.is_empty());
        let resource_filter = resource_filter.map(str::trim).filter(|f| !f.is_empty());
        let mut out = Vec::new();
        for mut acl in self.store.acls() {
            if subject_filter.is_some_and(|f| !acl.subject.contains(f)) {
                continue;
            }
            if let Some(f) = resource_filter {
                for policy in &mut acl.policies {
                    policy.entries.retain(|e| e.resource.contains(f));
                }
                acl.policies.retain(|p| !p.entries.is_empty());
            }
            if !acl.policies.is_empty() {
                out.push(acl_info(&acl));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{AccountConfig, Acl, AclConfig};

    fn admin(file_admin: bool) -> (tempfile::TempDir, AuthAdmin, AclHandle) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store =
            Arc::new(AuthStore::open(&skiff_storage::disk::Disk::Os, dir.path()).expect("store"));
        let accounts = if file_admin {
            vec![AccountConfig {
                access_key: "root".into(),
                secret_key: "root-secret".into(),
                admin: true,
                ..AccountConfig::default()
            }]
        } else {
            Vec::new()
        };
        let acl = AclHandle::new(
            Acl::new(&AclConfig {
                accounts,
                ..AclConfig::default()
            })
            .expect("acl"),
        );
        let admin = AuthAdmin::open(store, acl.clone(), "DefaultCluster");
        (dir, admin, acl)
    }

    fn user(password: &str, user_type: Option<&str>) -> UserInfo {
        UserInfo {
            password: Some(password.into()),
            user_type: user_type.map(str::to_owned),
            ..UserInfo::default()
        }
    }

    fn acl_body(entries: &[(&str, &[&str], &[&str], &str)]) -> AclInfo {
        AclInfo {
            subject: Some("User:alice".into()),
            policies: Some(vec![PolicyInfo {
                policy_type: None,
                entries: Some(
                    entries
                        .iter()
                        .map(|(resource, actions, ips, decision)| PolicyEntryInfo {
                            resource: Some(resource.to_string()),
                            actions: Some(actions.iter().map(|a| a.to_string()).collect()),
                            source_ips: Some(ips.iter().map(|a| a.to_string()).collect()),
                            decision: Some(decision.to_string()),
                        })
                        .collect(),
                ),
            }]),
        }
    }

    fn rows(admin: &AuthAdmin) -> Vec<(String, Vec<String>, String)> {
        let acl = admin.get_acl("User:alice").expect("get").expect("an acl");
        acl.policies
            .unwrap_or_default()
            .into_iter()
            .flat_map(|p| p.entries.unwrap_or_default())
            .map(|e| {
                (
                    e.resource.unwrap_or_default(),
                    e.actions.unwrap_or_default(),
                    e.decision.unwrap_or_default(),
                )
            })
            .collect()
    }

    #[test]
    fn an_acl_written_twice_merges_by_resource_and_deletes_entry_by_entry() {
        let (_dir, admin, _acl) = admin(true);
        admin
            .create_user(Caller::Super, "alice", &user("pw", None))
            .expect("user");
        admin
            .put_acl(
                "",
                Some(&acl_body(&[(
                    "Topic:orders",
                    &["Pub", "Sub"],
                    &[],
                    "Allow",
                )])),
            )
            .expect("acl");
        admin
            .put_acl(
                "",
                Some(&acl_body(&[
                    ("Topic:orders", &["Sub"], &[], "Deny"),
                    ("Group:g*", &["Sub", "bogus"], &[], "Allow"),
                ])),
            )
            .expect("merge");
        let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        assert_eq!(
            rows(&admin),
            vec![
                ("Topic:orders".into(), s(&["Sub"]), "Deny".into()),
                ("Group:g*".into(), s(&["Sub"]), "Allow".into()),
            ]
        );
        admin
            .delete_acl("User:alice", None, Some("Topic:orders"))
            .expect("delete one");
        assert_eq!(rows(&admin).len(), 1);
        admin
            .delete_acl("User:alice", None, Some("Group:g*"))
            .expect("delete the last");
        assert!(admin.get_acl("User:alice").expect("get").is_none());
        assert!(matches!(
            admin.delete_acl("User:alice", None, None),
            Err(AuthAdminError::AclMissing)
        ));
    }

    #[test]
    fn invalid_acls_are_refused_with_javas_remarks_and_store_nothing() {
        let (_dir, admin, _acl) = admin(true);
        admin
            .create_user(Caller::Super, "alice", &user("pw", None))
            .expect("user");
        let refused = |body: AclInfo| match admin.put_acl("", Some(&body)) {
            Err(e) => (e.response_code(), e.to_string()),
            Ok(()) => (0, String::new()),
        };
        assert_eq!(
            refused(acl_body(&[("Queue:x", &["Pub"], &[], "Allow")])),
            (16, "The resource is null.".into())
        );
        assert_eq!(
            refused(acl_body(&[("Topic:x", &["nope"], &[], "Allow")])),
            (16, "The actions is empty.".into())
        );
        assert_eq!(
            refused(acl_body(&[("Topic:x", &["Any"], &[], "Allow")])),
            (16, "The actions can not be Any.".into())
        );
        assert_eq!(
            refused(acl_body(&[(
                "Topic:x",
                &["Pub"],
                &["10.0.0.0/33"],
                "Allow"
            )])),
            (16, "The source ip is invalid.".into())
        );
        assert_eq!(
            refused(acl_body(&[("Topic:x", &["Pub"], &[], "Maybe")])),
            (16, "The decision is null or illegal.".into())
        );
        assert_eq!(
            admin
                .put_acl("User:alice", None)
                .map_err(|e| e.response_code())
                .err(),
            Some(1)
        );
        assert!(admin.get_acl("User:alice").expect("get").is_none());
        assert!(matches!(
            admin.put_acl("", Some(&AclInfo {
                subject: Some("User:bob".into()),
                ..acl_body(&[("Topic:x", &["Pub"], &[], "Allow")])
            })),
            Err(AuthAdminError::SubjectOfAclMissing(s)) if s == "User:bob"
        ));
    }

    #[test]
    fn only_a_super_user_makes_super_users_and_file_accounts_stay_read_only() {
        let (_dir, admin, acl) = admin(true);
        assert_eq!(
            admin
                .create_user(Caller::Normal, "eve", &user("pw", Some("Super")))
                .map_err(|e| (e.response_code(), e.to_string()))
                .err(),
            Some((1, "The super user can only be create by super user".into()))
        );
        admin
            .create_user(Caller::Super, "eve", &user("pw", Some("Super")))
            .expect("by a super user");
        assert!(matches!(
            admin.update_user(Caller::Normal, "eve", &user("new", None)),
            Err(AuthAdminError::SuperUserOnly { verb: "update" })
        ));
        assert!(matches!(
            admin.create_user(Caller::Super, "root", &user("pw", None)),
            Err(AuthAdminError::UserExists)
        ));
        assert!(matches!(
            admin.delete_user(Caller::Super, "root"),
            Err(AuthAdminError::FileAccount(_))
        ));
        assert_eq!(admin.caller(Some("root")), Caller::Super);
        assert_eq!(admin.caller(Some("eve")), Caller::Super);
        assert_eq!(admin.caller(None), Caller::Super);
        admin
            .create_user(Caller::Super, "bob", &user("pw", None))
            .expect("bob");
        assert_eq!(admin.caller(Some("bob")), Caller::Normal);
        let names: Vec<_> = admin
            .list_users(None)
            .into_iter()
            .filter_map(|u| u.username)
            .collect();
        assert_eq!(names, ["bob", "eve", "root"]);
        assert!(acl.current().account("bob").is_some());
        admin.delete_user(Caller::Super, "bob").expect("delete");
        assert!(acl.current().account("bob").is_none());
        admin
            .delete_user(Caller::Super, "bob")
            .expect("a missing user is no error");
    }

    #[test]
    fn without_a_file_admin_the_first_user_is_a_super_user_and_the_last_one_stays() {
        let (_dir, admin, acl) = admin(false);
        assert!(!acl.current().is_on());
        assert!(matches!(
            admin.create_user(Caller::Super, "alice", &user("pw", None)),
            Err(AuthAdminError::FirstUserNotSuper)
        ));
        assert!(!acl.current().is_on(), "a refused user turns nothing on");
        admin
            .create_user(Caller::Super, "admin", &user("pw", Some("Super")))
            .expect("a super user first");
        assert!(acl.current().is_on());
        admin
            .create_user(Caller::Super, "alice", &user("pw", None))
            .expect("then anyone");
        assert!(matches!(
            admin.delete_user(Caller::Super, "admin"),
            Err(AuthAdminError::LastSuperUser(_))
        ));
        assert!(matches!(
            admin.update_user(
                Caller::Super,
                "admin",
                &UserInfo {
                    user_status: Some("disable".into()),
                    ..UserInfo::default()
                }
            ),
            Err(AuthAdminError::LastSuperUser(_))
        ));
        admin.delete_user(Caller::Super, "alice").expect("alice");
        admin
            .delete_user(Caller::Super, "admin")
            .expect("the last user may go");
        assert!(!acl.current().is_on());
    }
}
