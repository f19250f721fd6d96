//! RocketMQ 5's ACL 2.0 users and their ACLs, kept in one small file written whole for each
//! change.
//!
//! [`AuthStore`] holds every [`AuthUser`] by name and every [`AuthAcl`] by subject (`User:name`)
//! in memory, and `auth/users_and_acls` on the [`Disk`] seam as one [`crate::record`] (version,
//! CRC, bincode). A change is written to a temporary file, fsynced and renamed over the old one
//! ([`Disk::replace_file`]) before it is answered or takes effect, so after a crash or a power cut
//! the file holds every answered change and either all or none of one in progress: the store's
//! power-loss suite cuts the power inside those writes. A user and its ACL go in one write.
//! What the records mean (resource keys, actions, the decision over them) is the node's
//! business; this layer keeps them as RocketMQ writes them.
//!
//! Users are few (accounts of people and applications, not of sessions), so a whole-file write
//! per change costs less than keeping a log of them would.

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use crate::disk::{Disk, OpenMode};
use crate::error::{io_err, StoreError};
use crate::metadata::{MetadataError, MetadataStore, Named};
use crate::record::{self, Decoded, EncodeError};

/// The directory, in the node's data directory.
pub const AUTH_DIR: &str = "auth";
/// The file, in [`AUTH_DIR`].
pub const AUTH_FILE: &str = "users_and_acls";
const AUTH_FILE_VERSION: u8 = 1;

/// Names of the sled trees where builds before the file kept users and ACLs; read once, moved
/// into the file and emptied ([`AuthStore::take_from_metadata`]).
const LEGACY_USERS_TREE: &str = "auth_users";
const LEGACY_ACLS_TREE: &str = "auth_acls";
const LEGACY_RECORD_VERSION: u8 = 1;

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

/// What the file holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthBook {
    /// By user name.
    pub users: BTreeMap<String, AuthUser>,
    /// By subject (`User:name`).
    pub acls: BTreeMap<String, AuthAcl>,
}

/// Reading or writing the users and ACLs failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthStoreError {
    #[error("cannot write the users and ACLs")]
    Write(#[source] StoreError),
    #[error("cannot read the users and ACLs")]
    Read(#[source] StoreError),
    #[error("the users and ACLs in {path} are damaged ({reason}); restore the file from a backup or remove it to start without users")]
    Damaged { path: PathBuf, reason: String },
    #[error("the users and ACLs in {path} are of version {version}, newer than this build reads")]
    UnknownVersion { path: PathBuf, version: u8 },
    #[error("cannot encode the users and ACLs")]
    Encode(#[source] EncodeError),
    #[error("cannot move the users and ACLs out of the metadata database")]
    Legacy(#[source] MetadataError),
}

/// The users and ACLs, in memory and in their file.
pub struct AuthStore {
    disk: Disk,
    dir: PathBuf,
    book: Mutex<AuthBook>,
}

impl std::fmt::Debug for AuthStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthStore")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl AuthStore {
    /// Opens the users and ACLs in `dir` (made when missing): none when there is no file yet.
    /// A damaged file is an error, never read as "no users": that would switch signing off.
    pub fn open(disk: &Disk, dir: &Path) -> Result<AuthStore, AuthStoreError> {
        if disk
            .kind(dir)
            .map_err(|e| AuthStoreError::Read(io_err(dir, e)))?
            .is_none()
        {
            disk.create_dir_all(dir)
                .map_err(|e| AuthStoreError::Write(io_err(dir, e)))?;
            if let Some(parent) = dir.parent() {
                disk.sync_dir(parent).map_err(AuthStoreError::Write)?;
            }
        }
        let path = dir.join(AUTH_FILE);
        let book = match disk.open(&path, OpenMode::Existing) {
            Ok(file) => {
                let read = |e| AuthStoreError::Read(io_err(&path, e));
                let len = file.len().map_err(read)?;
                let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
                file.read_exact_at(&mut bytes, 0).map_err(read)?;
                match record::decode::<AuthBook>(&bytes, AUTH_FILE_VERSION) {
                    Decoded::Value(book) => book,
                    Decoded::Corrupt { reason } => {
                        return Err(AuthStoreError::Damaged { path, reason })
                    }
                    Decoded::UnknownVersion { version } => {
                        return Err(AuthStoreError::UnknownVersion { path, version })
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => AuthBook::default(),
            Err(e) => return Err(AuthStoreError::Read(io_err(&path, e))),
        };
        Ok(AuthStore {
            disk: disk.clone(),
            dir: dir.to_owned(),
            book: Mutex::new(book),
        })
    }

    /// Moves users and ACLs an earlier build kept in the metadata database into the file (when
    /// the file has none), then empties those trees; answers how many records moved.
    pub fn take_from_metadata(&self, metadata: &MetadataStore) -> Result<usize, AuthStoreError> {
        let users_tree = metadata
            .tree_of::<AuthUser>()
            .map_err(AuthStoreError::Legacy)?;
        let acls_tree = metadata
            .tree_of::<AuthAcl>()
            .map_err(AuthStoreError::Legacy)?;
        let users: Vec<AuthUser> = metadata.list(&users_tree).map_err(AuthStoreError::Legacy)?;
        let acls: Vec<AuthAcl> = metadata.list(&acls_tree).map_err(AuthStoreError::Legacy)?;
        let moved = users.len() + acls.len();
        if moved == 0 {
            return Ok(0);
        }
        let empty = {
            let book = self.lock();
            book.users.is_empty() && book.acls.is_empty()
        };
        if empty {
            self.change(|book| {
                book.users = users
                    .iter()
                    .map(|u| (u.username.clone(), u.clone()))
                    .collect();
                book.acls = acls
                    .iter()
                    .map(|a| (a.subject.clone(), a.clone()))
                    .collect();
            })?;
        }
        for user in &users {
            metadata
                .remove::<AuthUser>(&users_tree, &user.username)
                .map_err(AuthStoreError::Legacy)?;
        }
        for acl in &acls {
            metadata
                .remove::<AuthAcl>(&acls_tree, &acl.subject)
                .map_err(AuthStoreError::Legacy)?;
        }
        Ok(moved)
    }

    /// Every user and ACL as they are now.
    pub fn snapshot(&self) -> AuthBook {
        self.lock().clone()
    }

    /// Every user, by name.
    pub fn users(&self) -> Vec<AuthUser> {
        self.lock().users.values().cloned().collect()
    }

    /// The user named `username`, if any.
    pub fn user(&self, username: &str) -> Option<AuthUser> {
        self.lock().users.get(username).cloned()
    }

    /// Every ACL, by subject.
    pub fn acls(&self) -> Vec<AuthAcl> {
        self.lock().acls.values().cloned().collect()
    }

    /// The ACL of `subject`, if any.
    pub fn acl(&self, subject: &str) -> Option<AuthAcl> {
        self.lock().acls.get(subject).cloned()
    }

    /// Stores `user` under its name, replacing any previous one, durably.
    pub fn put_user(&self, user: &AuthUser) -> Result<(), AuthStoreError> {
        self.change(|book| {
            book.users.insert(user.username.clone(), user.clone());
        })
    }

    /// Removes the user and the ACL of `subject` together, durably; answers whether the user
    /// was there.
    pub fn remove_user(&self, username: &str, subject: &str) -> Result<bool, AuthStoreError> {
        let mut found = false;
        self.change(|book| {
            found = book.users.remove(username).is_some();
            book.acls.remove(subject);
        })?;
        Ok(found)
    }

    /// Stores `acl` under its subject, replacing any previous one, durably.
    pub fn put_acl(&self, acl: &AuthAcl) -> Result<(), AuthStoreError> {
        self.change(|book| {
            book.acls.insert(acl.subject.clone(), acl.clone());
        })
    }

    /// Removes the subject's ACL, durably; answers whether it was there.
    pub fn remove_acl(&self, subject: &str) -> Result<bool, AuthStoreError> {
        let mut found = false;
        self.change(|book| found = book.acls.remove(subject).is_some())?;
        Ok(found)
    }

    /// Applies `edit` to a copy, writes the copy, and only then makes it the current state: a
    /// failed write changes nothing.
    fn change(&self, edit: impl FnOnce(&mut AuthBook)) -> Result<(), AuthStoreError> {
        let mut book = self.lock();
        let mut next = book.clone();
        edit(&mut next);
        if next == *book {
            return Ok(());
        }
        let bytes = record::try_encode(AUTH_FILE_VERSION, &next).map_err(AuthStoreError::Encode)?;
        self.disk
            .replace_file(&self.dir, AUTH_FILE, &bytes)
            .map_err(AuthStoreError::Write)?;
        *book = next;
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, AuthBook> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }
}

// The records as earlier builds kept them in sled trees, read only to move them.
impl Named for AuthUser {
    const TREE: &'static str = LEGACY_USERS_TREE;
    const VERSION: u8 = LEGACY_RECORD_VERSION;
    fn name(&self) -> &str {
        &self.username
    }
    fn decode_older(_version: u8, _raw: &[u8]) -> Option<Decoded<Self>> {
        None
    }
}

impl Named for AuthAcl {
    const TREE: &'static str = LEGACY_ACLS_TREE;
    const VERSION: u8 = LEGACY_RECORD_VERSION;
    fn name(&self) -> &str {
        &self.subject
    }
    fn decode_older(_version: u8, _raw: &[u8]) -> Option<Decoded<Self>> {
        None
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
    fn users_and_acls_survive_reopening_and_a_user_goes_with_its_acl() {
        let dir = tempfile::tempdir().expect("tempdir");
        let auth_dir = dir.path().join(AUTH_DIR);
        {
            let store = AuthStore::open(&Disk::Os, &auth_dir).expect("open");
            store.put_user(&alice()).expect("put user");
            store.put_acl(&alice_acl()).expect("put acl");
        }
        let store = AuthStore::open(&Disk::Os, &auth_dir).expect("reopen");
        assert_eq!(store.users(), vec![alice()]);
        assert_eq!(store.user("alice"), Some(alice()));
        assert_eq!(store.acl("User:alice"), Some(alice_acl()));
        assert_eq!(store.acls(), vec![alice_acl()]);
        assert!(store.remove_user("alice", "User:alice").expect("remove"));
        assert!(!store.remove_user("alice", "User:alice").expect("again"));
        let store = AuthStore::open(&Disk::Os, &auth_dir).expect("reopen");
        assert_eq!(store.snapshot(), AuthBook::default());
    }

    #[test]
    fn a_damaged_file_is_refused_not_read_as_no_users() {
        let dir = tempfile::tempdir().expect("tempdir");
        let auth_dir = dir.path().join(AUTH_DIR);
        AuthStore::open(&Disk::Os, &auth_dir)
            .expect("open")
            .put_user(&alice())
            .expect("put");
        let path = auth_dir.join(AUTH_FILE);
        let mut bytes = std::fs::read(&path).expect("read");
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, bytes).expect("write");
        let err = AuthStore::open(&Disk::Os, &auth_dir).expect_err("damaged");
        assert!(matches!(err, AuthStoreError::Damaged { .. }), "{err:?}");
    }

    #[test]
    fn users_kept_in_the_metadata_database_move_into_the_file_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = open_db(dir.path().join("meta")).expect("db");
        let metadata = MetadataStore::open(&db, dir.path().into()).expect("metadata");
        let users = metadata.tree_of::<AuthUser>().expect("tree");
        let acls = metadata.tree_of::<AuthAcl>().expect("tree");
        metadata.put(&users, &alice()).expect("legacy user");
        metadata.put(&acls, &alice_acl()).expect("legacy acl");
        let store = AuthStore::open(&Disk::Os, &dir.path().join(AUTH_DIR)).expect("open");
        assert_eq!(store.take_from_metadata(&metadata).expect("move"), 2);
        assert_eq!(store.users(), vec![alice()]);
        assert_eq!(store.acls(), vec![alice_acl()]);
        assert_eq!(store.take_from_metadata(&metadata).expect("again"), 0);
        let store = AuthStore::open(&Disk::Os, &dir.path().join(AUTH_DIR)).expect("reopen");
        assert_eq!(store.users(), vec![alice()]);
    }

    #[test]
    fn a_users_debug_never_shows_its_password() {
        assert!(!format!("{:?}", alice()).contains("alice-secret"));
    }
}
