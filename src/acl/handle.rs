//! [`AclHandle`]: the ACL in force, shared by every listener and door, swapped whole when the
//! ACL file is reloaded or an admin request changes the ACL 2.0 users.

use std::sync::{Arc, RwLock};

use super::{users, Acl};

/// The node's current ACL, shared by every listener and swapped whole on reload: requests
/// already being checked finish against the one they started with.
#[derive(Debug, Clone, Default)]
pub struct AclHandle(Arc<RwLock<Arc<Acl>>>);

impl AclHandle {
    pub fn new(acl: Acl) -> AclHandle {
        AclHandle(Arc::new(RwLock::new(Arc::new(acl))))
    }

    pub fn current(&self) -> Arc<Acl> {
        // A writer that panicked left a whole Acl behind: the lock only ever holds whole ones.
        match self.0.read() {
            Ok(acl) => acl.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Puts `acl`'s file accounts in force, keeping the stored users in force now.
    pub fn replace(&self, acl: Acl) {
        self.update(|current| acl.with_users(current.users.clone()));
    }

    /// Puts `users` in force as the ACL 2.0 users, keeping the file's accounts.
    pub fn replace_users(&self, users: users::UserBook) {
        self.update(|current| Acl {
            accounts: current.accounts.clone(),
            global_white: current.global_white.clone(),
            users,
        });
    }

    fn update(&self, change: impl FnOnce(&Acl) -> Acl) {
        // A writer that panicked left a whole Acl behind: the lock only ever holds whole ones.
        let mut current = match self.0.write() {
            Ok(current) => current,
            Err(poisoned) => poisoned.into_inner(),
        };
        *current = Arc::new(change(&current));
    }
}
