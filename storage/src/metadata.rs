//! Topic and subscription-group configuration, in sled trees with the [`crate::record`] codec.
//!
//! [`MetadataStore`] keeps [`TopicConfig`]s in the tree [`TOPICS_TREE`] and
//! [`SubscriptionGroupConfig`]s in [`SUBSCRIPTION_GROUPS_TREE`], keyed by name (UTF-8 bytes).
//! A record that fails its checksum, does not decode, has an unknown version or names another
//! key is a [`MetadataError`] naming the tree, key and database path.
//!
//! Record versions: [`TOPIC_RECORD_VERSION`] is 3, [`SUBSCRIPTION_GROUP_RECORD_VERSION`] 3.
//! Older records (written before topics had a message type (1) or other attributes (2), before
//! groups had an orderly flag (1) or attributes (2)) still decode, upgraded on read: no message
//! type, not orderly, no attributes. They are rewritten in the current version the next time the config is stored.
//!
//! [`open_db`] opens the one sled database (`<data_dir>/meta`) that holds these trees and the
//! offset table ([`crate::offset_table::SledOffsetTable`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{de::DeserializeOwned, Serialize};

use crate::record::{self, Decoded};

/// RocketMQ permission bits.
pub const PERM_READ: u32 = 4;
pub const PERM_WRITE: u32 = 2;

/// Name of the sled tree holding [`TopicConfig`]s.
pub const TOPICS_TREE: &str = "topics";
/// Name of the sled tree holding [`SubscriptionGroupConfig`]s.
pub const SUBSCRIPTION_GROUPS_TREE: &str = "subscription_groups";
/// Record version of [`TopicConfig`] values (versions 1 and 2 are still read, see the module
/// docs).
pub const TOPIC_RECORD_VERSION: u8 = 3;
/// Record version of [`SubscriptionGroupConfig`] values (versions 1 and 2 are still read, see
/// the module docs).
pub const SUBSCRIPTION_GROUP_RECORD_VERSION: u8 = 3;

/// Name of the topic attribute holding the [`TopicMessageType`] (Java's
/// `TopicAttributes.TOPIC_MESSAGE_TYPE_ATTRIBUTE`).
pub const MESSAGE_TYPE_ATTRIBUTE: &str = "message.type";

/// The kind of message a topic is for (RocketMQ 5's `message.type` topic attribute, which
/// RocketMQ 5 clients check before they send).
///
/// The variant order is part of the stored record (bincode writes the variant index): add new
/// variants at the end only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum TopicMessageType {
    Normal,
    Fifo,
    Delay,
    Transaction,
    Mixed,
    /// RocketMQ 5.4's priority topic: a message's priority picks its queue, and pop consumers
    /// read the highest queue first.
    Priority,
    /// RocketMQ 5.5's lite parent topic: each message names a lite topic, a queue of its own.
    Lite,
}

impl TopicMessageType {
    /// Every type, in RocketMQ's declaration order.
    pub const ALL: [TopicMessageType; 7] = [
        TopicMessageType::Normal,
        TopicMessageType::Fifo,
        TopicMessageType::Delay,
        TopicMessageType::Transaction,
        TopicMessageType::Priority,
        TopicMessageType::Lite,
        TopicMessageType::Mixed,
    ];

    /// RocketMQ's name of the type: `NORMAL`, `FIFO`, `DELAY`, `TRANSACTION`, `PRIORITY`,
    /// `LITE` or `MIXED`.
    pub fn as_str(self) -> &'static str {
        match self {
            TopicMessageType::Normal => "NORMAL",
            TopicMessageType::Fifo => "FIFO",
            TopicMessageType::Delay => "DELAY",
            TopicMessageType::Transaction => "TRANSACTION",
            TopicMessageType::Mixed => "MIXED",
            TopicMessageType::Priority => "PRIORITY",
            TopicMessageType::Lite => "LITE",
        }
    }

    /// The type named `name`, ignoring ASCII case (`fifo` is [`TopicMessageType::Fifo`]);
    /// `None` for any other name, including RocketMQ's `UNSPECIFIED`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(name))
    }
}

impl std::fmt::Display for TopicMessageType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TopicConfig {
    pub name: String,
    pub read_queue_nums: u32,
    pub write_queue_nums: u32,
    pub perm: u32,
    /// The topic's `message.type` attribute. `None` is unspecified: the topic takes every type
    /// (what skiff's auto-created topics are).
    pub message_type: Option<TopicMessageType>,
    /// Its other RocketMQ 5 attributes (`lite.topic.expiration`), by name, as
    /// `mqadmin updateTopic -a` sets them.
    pub attributes: BTreeMap<String, String>,
}

impl TopicConfig {
    /// A read-write topic (perm 6) with `queues` read and write queues and no message type.
    pub fn new(name: impl Into<String>, queues: u32) -> Self {
        TopicConfig {
            name: name.into(),
            read_queue_nums: queues,
            write_queue_nums: queues,
            perm: PERM_READ | PERM_WRITE,
            message_type: None,
            attributes: BTreeMap::new(),
        }
    }

    pub fn is_readable(&self) -> bool {
        self.perm & PERM_READ != 0
    }

    pub fn is_writable(&self) -> bool {
        self.perm & PERM_WRITE != 0
    }
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SubscriptionGroupConfig {
    pub name: String,
    /// Reconsumes before a message goes to `%DLQ%group` (default 16).
    pub retry_max_times: u32,
    /// Queues of `%RETRY%group` (default 1; 0 drops failed messages).
    pub retry_queue_nums: u32,
    pub consume_broadcast_enable: bool,
    pub consume_from_min_enable: bool,
    /// Java's `consumeMessageOrderly`: the group consumes in order (default false).
    pub consume_message_orderly: bool,
    /// RocketMQ 5's group attributes (`priority.factor`, `lite.bind.topic`, ...), by name,
    /// as `mqadmin updateSubGroup --attributes` sets them.
    pub attributes: BTreeMap<String, String>,
}

impl SubscriptionGroupConfig {
    /// RocketMQ's defaults (`SubscriptionGroupConfig.java`): retry max times 16, one retry
    /// queue, broadcasting and consume-from-min enabled, not orderly.
    pub fn new(name: impl Into<String>) -> Self {
        SubscriptionGroupConfig {
            name: name.into(),
            retry_max_times: 16,
            retry_queue_nums: 1,
            consume_broadcast_enable: true,
            consume_from_min_enable: true,
            consume_message_orderly: false,
            attributes: BTreeMap::new(),
        }
    }
}

/// A [`TopicConfig`] record of version 1, before `message_type`.
#[derive(serde::Deserialize)]
struct TopicConfigV1 {
    name: String,
    read_queue_nums: u32,
    write_queue_nums: u32,
    perm: u32,
}

impl From<TopicConfigV1> for TopicConfig {
    fn from(v1: TopicConfigV1) -> Self {
        TopicConfig {
            name: v1.name,
            read_queue_nums: v1.read_queue_nums,
            write_queue_nums: v1.write_queue_nums,
            perm: v1.perm,
            message_type: None,
            attributes: BTreeMap::new(),
        }
    }
}

/// A [`TopicConfig`] record of version 2, before its other attributes.
#[derive(serde::Deserialize)]
struct TopicConfigV2 {
    name: String,
    read_queue_nums: u32,
    write_queue_nums: u32,
    perm: u32,
    message_type: Option<TopicMessageType>,
}

impl From<TopicConfigV2> for TopicConfig {
    fn from(v2: TopicConfigV2) -> Self {
        TopicConfig {
            name: v2.name,
            read_queue_nums: v2.read_queue_nums,
            write_queue_nums: v2.write_queue_nums,
            perm: v2.perm,
            message_type: v2.message_type,
            attributes: BTreeMap::new(),
        }
    }
}

/// A [`SubscriptionGroupConfig`] record of version 2, before `attributes`.
#[derive(serde::Deserialize)]
struct SubscriptionGroupConfigV2 {
    name: String,
    retry_max_times: u32,
    retry_queue_nums: u32,
    consume_broadcast_enable: bool,
    consume_from_min_enable: bool,
    consume_message_orderly: bool,
}

impl From<SubscriptionGroupConfigV2> for SubscriptionGroupConfig {
    fn from(v2: SubscriptionGroupConfigV2) -> Self {
        SubscriptionGroupConfig {
            name: v2.name,
            retry_max_times: v2.retry_max_times,
            retry_queue_nums: v2.retry_queue_nums,
            consume_broadcast_enable: v2.consume_broadcast_enable,
            consume_from_min_enable: v2.consume_from_min_enable,
            consume_message_orderly: v2.consume_message_orderly,
            attributes: BTreeMap::new(),
        }
    }
}

/// A [`SubscriptionGroupConfig`] record of version 1, before `consume_message_orderly`.
#[derive(serde::Deserialize)]
struct SubscriptionGroupConfigV1 {
    name: String,
    retry_max_times: u32,
    retry_queue_nums: u32,
    consume_broadcast_enable: bool,
    consume_from_min_enable: bool,
}

impl From<SubscriptionGroupConfigV1> for SubscriptionGroupConfig {
    fn from(v1: SubscriptionGroupConfigV1) -> Self {
        SubscriptionGroupConfig {
            name: v1.name,
            retry_max_times: v1.retry_max_times,
            retry_queue_nums: v1.retry_queue_nums,
            consume_broadcast_enable: v1.consume_broadcast_enable,
            consume_from_min_enable: v1.consume_from_min_enable,
            consume_message_orderly: false,
            attributes: BTreeMap::new(),
        }
    }
}

/// Opening the sled database failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot open sled database at {path}")]
pub struct OpenDbError {
    pub path: PathBuf,
    #[source]
    pub source: sled::Error,
}

/// Opens (creating if needed) the sled database at `dir`, e.g. `<data_dir>/meta`, shared by
/// [`MetadataStore`] and [`crate::offset_table::SledOffsetTable`].
pub fn open_db(dir: impl AsRef<Path>) -> Result<sled::Db, OpenDbError> {
    let dir = dir.as_ref();
    // sled's background flusher keeps its file lock for a moment after the last `Db` handle
    // is dropped, so a close-then-reopen in one process can see the lock still held. Only that
    // error is retried, for a bounded time; a lock held by another live process still fails.
    let deadline = std::time::Instant::now() + LOCK_RELEASE_WAIT;
    loop {
        match sled::Config::new()
            .path(dir)
            .cache_capacity(SLED_CACHE_BYTES)
            .open()
        {
            Ok(db) => return Ok(db),
            Err(source) if is_lock_contention(&source) && std::time::Instant::now() < deadline => {
                tracing::debug!(path = %dir.display(), "sled lock still held; retrying open");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(source) => {
                return Err(OpenDbError {
                    path: dir.to_path_buf(),
                    source,
                })
            }
        }
    }
}

/// The most memory sled's page cache holds (its default is 1 GiB). The offsets of a million
/// lite topics a consumer acknowledged once would otherwise stay resident for good; what is
/// read often (topics, groups, the offsets in use) fits many times over.
const SLED_CACHE_BYTES: u64 = 32 << 20;

/// How long `open_db` waits for a just-closed database's lock (sled flushes every 500 ms).
const LOCK_RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

fn is_lock_contention(error: &sled::Error) -> bool {
    matches!(error, sled::Error::Io(io) if io.to_string().contains("could not acquire lock"))
}

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("metadata record {key:?} in tree {tree} of {file} is corrupt: {reason}")]
    Corrupt {
        tree: &'static str,
        key: String,
        file: PathBuf,
        reason: String,
    },
    #[error("metadata record {key:?} in tree {tree} of {file} has unknown version {version}")]
    UnknownVersion {
        tree: &'static str,
        key: String,
        file: PathBuf,
        version: u8,
    },
    #[error("malformed metadata key {key:?} in tree {tree} of {file}")]
    MalformedKey {
        tree: &'static str,
        key: String,
        file: PathBuf,
    },
    #[error("sled error on tree {tree} of {file}")]
    Sled {
        tree: &'static str,
        file: PathBuf,
        #[source]
        source: sled::Error,
    },
}

/// A config stored by name in one tree.
pub(crate) trait Named: Serialize + DeserializeOwned {
    const TREE: &'static str;
    const VERSION: u8;
    fn name(&self) -> &str;
    /// Decodes a record of an older `version` this build still reads, upgraded to the current
    /// one; `None` when `version` is not one of them.
    fn decode_older(version: u8, raw: &[u8]) -> Option<Decoded<Self>>;
}

impl Named for TopicConfig {
    const TREE: &'static str = TOPICS_TREE;
    const VERSION: u8 = TOPIC_RECORD_VERSION;
    fn name(&self) -> &str {
        &self.name
    }
    fn decode_older(version: u8, raw: &[u8]) -> Option<Decoded<Self>> {
        match version {
            1 => Some(record::decode::<TopicConfigV1>(raw, 1).map(TopicConfig::from)),
            2 => Some(record::decode::<TopicConfigV2>(raw, 2).map(TopicConfig::from)),
            _ => None,
        }
    }
}

impl Named for SubscriptionGroupConfig {
    const TREE: &'static str = SUBSCRIPTION_GROUPS_TREE;
    const VERSION: u8 = SUBSCRIPTION_GROUP_RECORD_VERSION;
    fn name(&self) -> &str {
        &self.name
    }
    fn decode_older(version: u8, raw: &[u8]) -> Option<Decoded<Self>> {
        match version {
            1 => Some(
                record::decode::<SubscriptionGroupConfigV1>(raw, 1)
                    .map(SubscriptionGroupConfig::from),
            ),
            2 => Some(
                record::decode::<SubscriptionGroupConfigV2>(raw, 2)
                    .map(SubscriptionGroupConfig::from),
            ),
            _ => None,
        }
    }
}

/// Topic and subscription-group configuration in two sled trees of one database.
#[derive(Clone, Debug)]
pub struct MetadataStore {
    db: sled::Db,
    topics: sled::Tree,
    groups: sled::Tree,
    path: PathBuf,
}

impl MetadataStore {
    /// Opens (creating if needed) the [`TOPICS_TREE`] and [`SUBSCRIPTION_GROUPS_TREE`] trees
    /// of `db`. `path_for_errors` is the database directory, named in every error.
    pub fn open(db: &sled::Db, path_for_errors: PathBuf) -> Result<Self, MetadataError> {
        let open = |tree: &'static str| {
            db.open_tree(tree).map_err(|source| MetadataError::Sled {
                tree,
                file: path_for_errors.clone(),
                source,
            })
        };
        Ok(MetadataStore {
            db: db.clone(),
            topics: open(TOPICS_TREE)?,
            groups: open(SUBSCRIPTION_GROUPS_TREE)?,
            path: path_for_errors,
        })
    }

    /// The sled database these trees live in (the key index opens its tree there too).
    pub fn db(&self) -> &sled::Db {
        &self.db
    }

    /// The database path named in errors.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tree of `T` records, opened on first use (for records only some nodes keep).
    pub(crate) fn tree_of<T: Named>(&self) -> Result<sled::Tree, MetadataError> {
        self.db
            .open_tree(T::TREE)
            .map_err(|e| self.sled_error::<T>(e))
    }

    /// Stores `config` under its name, replacing any previous one, durably (flushed before it
    /// returns; so is a removal).
    pub fn put_topic(&self, config: &TopicConfig) -> Result<(), MetadataError> {
        self.put(&self.topics, config)
    }

    pub fn get_topic(&self, name: &str) -> Result<Option<TopicConfig>, MetadataError> {
        self.get(&self.topics, name)
    }

    /// Removes the topic; returns whether it was present.
    pub fn remove_topic(&self, name: &str) -> Result<bool, MetadataError> {
        self.remove::<TopicConfig>(&self.topics, name)
    }

    /// Every topic, sorted by name.
    pub fn list_topics(&self) -> Result<Vec<TopicConfig>, MetadataError> {
        self.list(&self.topics)
    }

    /// The topics from the `skip`-th in name order, at most `take` of them, and how many
    /// topics there are: a page of [`Self::list_topics`] that decodes only what it returns.
    pub fn topics_page(
        &self,
        skip: usize,
        take: usize,
    ) -> Result<(Vec<TopicConfig>, usize), MetadataError> {
        let mut page = Vec::new();
        let mut total = 0;
        for item in self.topics.iter() {
            let (raw_key, raw_value) = item.map_err(|e| self.sled_error::<TopicConfig>(e))?;
            if total >= skip && page.len() < take {
                let name =
                    std::str::from_utf8(&raw_key).map_err(|_| MetadataError::MalformedKey {
                        tree: TopicConfig::TREE,
                        key: String::from_utf8_lossy(&raw_key).into_owned(),
                        file: self.path.clone(),
                    })?;
                page.push(self.decode(name, &raw_value)?);
            }
            total += 1;
        }
        Ok((page, total))
    }

    /// Stores `config` under its name, replacing any previous one.
    pub fn put_subscription_group(
        &self,
        config: &SubscriptionGroupConfig,
    ) -> Result<(), MetadataError> {
        self.put(&self.groups, config)
    }

    pub fn get_subscription_group(
        &self,
        name: &str,
    ) -> Result<Option<SubscriptionGroupConfig>, MetadataError> {
        self.get(&self.groups, name)
    }

    /// Removes the group; returns whether it was present.
    pub fn remove_subscription_group(&self, name: &str) -> Result<bool, MetadataError> {
        self.remove::<SubscriptionGroupConfig>(&self.groups, name)
    }

    /// Every subscription group, sorted by name.
    pub fn list_subscription_groups(&self) -> Result<Vec<SubscriptionGroupConfig>, MetadataError> {
        self.list(&self.groups)
    }

    /// Makes every write so far durable.
    pub fn flush(&self) -> Result<(), MetadataError> {
        self.db.flush().map_err(|source| MetadataError::Sled {
            tree: "<all trees>",
            file: self.path.clone(),
            source,
        })?;
        Ok(())
    }

    fn sled_error<T: Named>(&self, source: sled::Error) -> MetadataError {
        MetadataError::Sled {
            tree: T::TREE,
            file: self.path.clone(),
            source,
        }
    }

    pub(crate) fn put<T: Named>(&self, tree: &sled::Tree, config: &T) -> Result<(), MetadataError> {
        let name = config.name();
        if name.is_empty() {
            return Err(MetadataError::MalformedKey {
                tree: T::TREE,
                key: String::new(),
                file: self.path.clone(),
            });
        }
        tree.insert(name.as_bytes(), record::encode(T::VERSION, config))
            .map_err(|e| self.sled_error::<T>(e))?;
        // Durable before it is answered, as RocketMQ writes topics.json and
        // subscriptionGroup.json at once: a send acknowledged into a topic the first send made
        // must find that topic after a crash. Rare writes; the flush also carries whatever
        // offsets and checkpoints sled holds by then.
        self.flush_as::<T>()
    }

    fn flush_as<T: Named>(&self) -> Result<(), MetadataError> {
        self.db.flush().map_err(|e| self.sled_error::<T>(e))?;
        Ok(())
    }

    pub(crate) fn get<T: Named>(
        &self,
        tree: &sled::Tree,
        name: &str,
    ) -> Result<Option<T>, MetadataError> {
        let raw = tree
            .get(name.as_bytes())
            .map_err(|e| self.sled_error::<T>(e))?;
        raw.map(|raw| self.decode(name, &raw)).transpose()
    }

    pub(crate) fn remove<T: Named>(
        &self,
        tree: &sled::Tree,
        name: &str,
    ) -> Result<bool, MetadataError> {
        let removed = tree
            .remove(name.as_bytes())
            .map_err(|e| self.sled_error::<T>(e))?;
        if removed.is_some() {
            self.flush_as::<T>()?;
        }
        Ok(removed.is_some())
    }

    pub(crate) fn list<T: Named>(&self, tree: &sled::Tree) -> Result<Vec<T>, MetadataError> {
        let mut out = Vec::new();
        for item in tree.iter() {
            let (raw_key, raw_value) = item.map_err(|e| self.sled_error::<T>(e))?;
            let name = std::str::from_utf8(&raw_key).map_err(|_| MetadataError::MalformedKey {
                tree: T::TREE,
                key: String::from_utf8_lossy(&raw_key).into_owned(),
                file: self.path.clone(),
            })?;
            out.push(self.decode(name, &raw_value)?);
        }
        // Byte order of UTF-8 keys is `str` order, so `out` is already sorted by name.
        Ok(out)
    }

    fn decode<T: Named>(&self, name: &str, raw: &[u8]) -> Result<T, MetadataError> {
        let corrupt = |reason| MetadataError::Corrupt {
            tree: T::TREE,
            key: name.to_owned(),
            file: self.path.clone(),
            reason,
        };
        let decoded = match record::decode::<T>(raw, T::VERSION) {
            Decoded::UnknownVersion { version } => {
                T::decode_older(version, raw).unwrap_or(Decoded::UnknownVersion { version })
            }
            decoded => decoded,
        };
        match decoded {
            Decoded::Value(v) if v.name() == name => Ok(v),
            Decoded::Value(v) => Err(corrupt(format!("record names {:?}, not its key", v.name()))),
            Decoded::Corrupt { reason } => Err(corrupt(reason)),
            Decoded::UnknownVersion { version } => Err(MetadataError::UnknownVersion {
                tree: T::TREE,
                key: name.to_owned(),
                file: self.path.clone(),
                version,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let t = TopicConfig::new("TopicTest", 4);
        assert_eq!((t.read_queue_nums, t.write_queue_nums, t.perm), (4, 4, 6));
        assert!(t.is_readable() && t.is_writable());
        let g = SubscriptionGroupConfig::new("g");
        assert_eq!(g.retry_max_times, 16);
        assert_eq!(g.retry_queue_nums, 1);
        assert!(g.consume_broadcast_enable);
        assert!(g.consume_from_min_enable);
        assert!(!g.consume_message_orderly);
        assert_eq!(t.message_type, None);
    }

    #[test]
    fn message_type_names_are_rocketmqs_and_read_in_any_case() {
        for t in TopicMessageType::ALL {
            assert_eq!(TopicMessageType::from_name(t.as_str()), Some(t));
            assert_eq!(
                TopicMessageType::from_name(&t.as_str().to_ascii_lowercase()),
                Some(t)
            );
        }
        assert_eq!(TopicMessageType::Fifo.as_str(), "FIFO");
        assert_eq!(
            TopicMessageType::from_name("Transaction"),
            Some(TopicMessageType::Transaction)
        );
        for other in ["", "UNSPECIFIED", "FIFO ", "ORDER"] {
            assert_eq!(TopicMessageType::from_name(other), None, "{other:?}");
        }
    }
}
