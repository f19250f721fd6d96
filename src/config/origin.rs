//! Where each setting's value came from, so a refusal can say where to change it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// The source of one setting's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Nothing set it while loading: the default, or a value set in code.
    Default,
    /// The configuration file, at this path.
    File(PathBuf),
    /// This `SKIFF_*` environment variable.
    Environment(String),
    /// This command-line flag (`--segment-size`).
    Flag(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("the default or the embedding code"),
            Origin::File(path) => write!(f, "file {}", path.display()),
            Origin::Environment(name) => write!(f, "environment variable {name}"),
            Origin::Flag(flag) => write!(f, "flag {flag}"),
        }
    }
}

/// Each setting's [`Origin`], by key (`segment_size`, `flush_interval_ms`); a key no source
/// set is [`Origin::Default`].
#[derive(Clone, Debug, Default)]
pub struct Origins(BTreeMap<String, Origin>);

impl Origins {
    /// The origin of `key`; a nested key (`acl.accounts[0].access_key`) is its table's.
    pub fn of(&self, key: &str) -> Origin {
        let top = key.split(['.', '[']).next().unwrap_or(key);
        self.0.get(top).cloned().unwrap_or(Origin::Default)
    }

    /// Records that `key` was set last by `origin` (a later source overrides an earlier one).
    pub fn set(&mut self, key: impl Into<String>, origin: Origin) {
        self.0.insert(key.into(), origin);
    }
}
