//! Topic and subscription-group configuration as the broker actors see it: a thin layer over
//! [`MetadataStore`] that applies the auto-create rules and can be closed at shutdown.
//!
//! Not an actor: every broker actor runs on one arbiter thread and sled calls are short, so the
//! actors share one `Rc` instead of paying a mailbox round trip per lookup.

use crate::broker_api::BrokerError;
use crate::logic::delay::{
    retry_topic, DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX, SCHEDULE_QUEUE_NUMS, SCHEDULE_TOPIC,
};
use crate::logic::lite::split_lmq;
use crate::logic::timer::{TIMER_QUEUE_NUMS, TIMER_TOPIC};
use crate::logic::transaction::HALF_TOPIC;
use crate::refused::Refused;
use skiff_storage::metadata::{
    MetadataError, MetadataStore, SubscriptionGroupConfig, TopicConfig, TopicMessageType,
};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// Names of missing topics remembered at most; past it the set starts afresh.
const MAX_MISSING_TOPICS: usize = 4096;

/// Largest queue count an auto-created topic gets, whatever a producer asks for.
const MAX_AUTO_CREATE_QUEUES: u32 = 1024;

#[derive(Clone)]
pub(crate) struct Registry {
    store: Rc<RefCell<Option<MetadataStore>>>,
    // Every send looks its topic up; a sled read plus a checksummed decode per message was a
    // quarter of the send path. Topics only change through this registry, so the cache is exact.
    topics: Rc<RefCell<HashMap<String, TopicConfig>>>,
    /// Names looked up and not stored: every pop looks for its group's retry topic, which does
    /// not exist until a message is first revived. Exact for the same reason as `topics`;
    /// bounded, since clients name what they like.
    missing_topics: Rc<RefCell<HashSet<String>>>,
    /// Every pop and heartbeat looks its group up; groups too change only through here.
    groups: Rc<RefCell<HashMap<String, SubscriptionGroupConfig>>>,
    /// Moves on every change to the set of topics or their configs (RocketMQ's `DataVersion`):
    /// a client reading the topics in pages starts over when it changes.
    topics_version: Rc<Cell<TopicsVersion>>,
    auto_create_topic: bool,
    auto_create_group: bool,
}

/// When the topics last changed and how many changes there have been since the registry opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicsVersion {
    pub changed_at_ms: i64,
    pub changes: i64,
}

impl Registry {
    pub(crate) fn new(
        store: MetadataStore,
        auto_create_topic: bool,
        auto_create_group: bool,
    ) -> Self {
        Registry {
            store: Rc::new(RefCell::new(Some(store))),
            topics: Rc::default(),
            missing_topics: Rc::default(),
            groups: Rc::default(),
            topics_version: Rc::new(Cell::new(TopicsVersion {
                changed_at_ms: skiff_storage::clock::epoch_millis(),
                changes: 0,
            })),
            auto_create_topic,
            auto_create_group,
        }
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&MetadataStore) -> Result<T, MetadataError>,
    ) -> Result<T, BrokerError> {
        let guard = self.store.borrow();
        let store = guard.as_ref().ok_or(BrokerError::Closed {
            what: "metadata store",
        })?;
        Ok(f(store)?)
    }

    /// A topic's config. A lite topic's queue (`%LMQ%$parent$lite`, see [`crate::logic::lite`])
    /// is a topic of one queue whenever its parent is a LITE topic: derived from the parent,
    /// never stored nor cached, so a million lite topics cost no metadata.
    pub(crate) fn topic(&self, name: &str) -> Result<Option<TopicConfig>, BrokerError> {
        if let Some((parent, _)) = split_lmq(name) {
            return Ok(self.topic(parent)?.and_then(|parent| {
                (parent.message_type == Some(TopicMessageType::Lite)).then(|| TopicConfig {
                    perm: parent.perm,
                    ..TopicConfig::new(name, 1)
                })
            }));
        }
        if let Some(config) = self.topics.borrow().get(name) {
            return Ok(Some(config.clone()));
        }
        if self.missing_topics.borrow().contains(name) {
            return Ok(None);
        }
        let loaded = self.with(|s| s.get_topic(name))?;
        match &loaded {
            Some(config) => {
                self.topics
                    .borrow_mut()
                    .insert(name.to_string(), config.clone());
            }
            None => {
                let mut missing = self.missing_topics.borrow_mut();
                if missing.len() >= MAX_MISSING_TOPICS {
                    missing.clear();
                }
                missing.insert(name.to_string());
            }
        }
        Ok(loaded)
    }

    /// The topic's read and write queue counts, without copying its config (every
    /// acknowledgement and every send that names no queue asks).
    pub(crate) fn queue_nums(&self, name: &str) -> Result<Option<(u32, u32)>, BrokerError> {
        let counts = |c: &TopicConfig| (c.read_queue_nums, c.write_queue_nums);
        if let Some(config) = self.topics.borrow().get(name) {
            return Ok(Some(counts(config)));
        }
        Ok(self.topic(name)?.as_ref().map(counts))
    }

    pub(crate) fn topics(&self) -> Result<Vec<TopicConfig>, BrokerError> {
        self.with(|s| s.list_topics())
    }

    /// A page of the topics in name order, and how many there are.
    pub(crate) fn topics_page(
        &self,
        skip: usize,
        take: usize,
    ) -> Result<(Vec<TopicConfig>, usize), BrokerError> {
        self.with(|s| s.topics_page(skip, take))
    }

    pub(crate) fn topics_version(&self) -> TopicsVersion {
        self.topics_version.get()
    }

    fn topics_changed(&self) {
        let version = self.topics_version.get();
        self.topics_version.set(TopicsVersion {
            changed_at_ms: skiff_storage::clock::epoch_millis().max(version.changed_at_ms),
            changes: version.changes + 1,
        });
    }

    fn create_topic(&self, name: &str, queues: u32) -> Result<TopicConfig, BrokerError> {
        // No message type: an auto-created topic takes every kind of message.
        let config = TopicConfig::new(name, queues);
        self.with(|s| s.put_topic(&config))?;
        self.missing_topics.borrow_mut().remove(name);
        self.topics
            .borrow_mut()
            .insert(name.to_string(), config.clone());
        self.topics_changed();
        tracing::info!(topic = %name, queues, "topic created");
        Ok(config)
    }

    /// The topic an append goes to. System topics (schedule, retry, dead-letter, half) are created
    /// whatever `auto_create_topic` says, because the broker itself writes to them; other topics
    /// only when auto-creation is on, with `default_queue_nums` queues (the producer's ask).
    pub(crate) fn topic_for_append(
        &self,
        name: &str,
        default_queue_nums: u32,
    ) -> Result<(TopicConfig, bool), BrokerError> {
        if let Some(config) = self.topic(name)? {
            return Ok((config, false));
        }
        let queues = if name == SCHEDULE_TOPIC {
            SCHEDULE_QUEUE_NUMS
        } else if name == TIMER_TOPIC {
            TIMER_QUEUE_NUMS
        } else if name.starts_with(DLQ_TOPIC_PREFIX) || name == HALF_TOPIC {
            1
        } else if let Some(group) = name.strip_prefix(RETRY_TOPIC_PREFIX) {
            match self.group_or_create(group)? {
                Some(group) if group.retry_queue_nums > 0 => group.retry_queue_nums,
                _ => 1,
            }
        } else if self.auto_create_topic {
            default_queue_nums.clamp(1, MAX_AUTO_CREATE_QUEUES)
        } else {
            return Err(BrokerError::Refused(Refused::TopicNotExist {
                topic: name.to_string(),
            }));
        };
        Ok((self.create_topic(name, queues)?, true))
    }

    /// Creates a topic the broker keeps for itself with `queues` queues if it is missing
    /// (at start, whatever `auto_create_topic` says); an existing config is left as it is.
    pub(crate) fn ensure_topic(&self, name: &str, queues: u32) -> Result<TopicConfig, BrokerError> {
        if let Some(config) = self.topic(name)? {
            return Ok(config);
        }
        self.create_topic(name, queues)
    }

    /// Creates `%RETRY%group` with the group's retry queue count if it is missing (heartbeat).
    pub(crate) fn ensure_retry_topic(
        &self,
        group: &SubscriptionGroupConfig,
    ) -> Result<Option<TopicConfig>, BrokerError> {
        if group.retry_queue_nums == 0 {
            return Ok(None);
        }
        let name = retry_topic(&group.name);
        if let Some(config) = self.topic(&name)? {
            return Ok(Some(config));
        }
        Ok(Some(self.create_topic(&name, group.retry_queue_nums)?))
    }

    pub(crate) fn group(&self, name: &str) -> Result<Option<SubscriptionGroupConfig>, BrokerError> {
        if let Some(config) = self.groups.borrow().get(name) {
            return Ok(Some(config.clone()));
        }
        let loaded = self.with(|s| s.get_subscription_group(name))?;
        if let Some(config) = &loaded {
            self.groups
                .borrow_mut()
                .insert(name.to_string(), config.clone());
        }
        Ok(loaded)
    }

    /// Whether the group is known already (a cheap look before [`Self::group_or_create`]).
    pub(crate) fn has_group(&self, name: &str) -> bool {
        self.groups.borrow().contains_key(name)
    }

    /// The group's config, created with RocketMQ's defaults when missing and auto-creation is on.
    pub(crate) fn group_or_create(
        &self,
        name: &str,
    ) -> Result<Option<SubscriptionGroupConfig>, BrokerError> {
        if let Some(config) = self.group(name)? {
            return Ok(Some(config));
        }
        if !self.auto_create_group {
            return Ok(None);
        }
        let config = SubscriptionGroupConfig::new(name);
        self.with(|s| s.put_subscription_group(&config))?;
        self.groups
            .borrow_mut()
            .insert(name.to_string(), config.clone());
        tracing::info!(group = %name, "subscription group created");
        Ok(Some(config))
    }

    /// Admin (UPDATE_AND_CREATE_TOPIC): stores `config` as given, creating or replacing the
    /// topic's configuration.
    pub(crate) fn put_topic(&self, config: &TopicConfig) -> Result<(), BrokerError> {
        self.with(|s| s.put_topic(config))?;
        self.missing_topics.borrow_mut().remove(&config.name);
        self.topics
            .borrow_mut()
            .insert(config.name.clone(), config.clone());
        self.topics_changed();
        tracing::info!(topic = %config.name, read_queues = config.read_queue_nums, write_queues = config.write_queue_nums, perm = config.perm, "topic configured by admin request");
        Ok(())
    }

    /// Admin (DELETE_TOPIC_IN_BROKER): forgets the topic's configuration; answers whether it
    /// existed.
    pub(crate) fn remove_topic(&self, name: &str) -> Result<bool, BrokerError> {
        self.topics.borrow_mut().remove(name);
        let removed = self.with(|s| s.remove_topic(name))?;
        self.topics_changed();
        tracing::info!(topic = %name, existed = removed, "topic deleted by admin request");
        Ok(removed)
    }

    /// Every subscription-group config, sorted by name.
    pub(crate) fn groups(&self) -> Result<Vec<SubscriptionGroupConfig>, BrokerError> {
        self.with(|s| s.list_subscription_groups())
    }

    /// Admin (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP): stores `config`, creating or replacing it.
    pub(crate) fn put_group(&self, config: &SubscriptionGroupConfig) -> Result<(), BrokerError> {
        self.with(|s| s.put_subscription_group(config))?;
        self.groups
            .borrow_mut()
            .insert(config.name.clone(), config.clone());
        tracing::info!(group = %config.name, retry_max_times = config.retry_max_times, retry_queues = config.retry_queue_nums, "subscription group configured by admin request");
        Ok(())
    }

    /// Admin (DELETE_SUBSCRIPTIONGROUP): forgets the group's configuration; answers whether it
    /// existed.
    pub(crate) fn remove_group(&self, name: &str) -> Result<bool, BrokerError> {
        let removed = self.with(|s| s.remove_subscription_group(name))?;
        self.groups.borrow_mut().remove(name);
        tracing::info!(group = %name, existed = removed, "subscription group deleted by admin request");
        Ok(removed)
    }

    /// Flushes and releases the metadata store (and with it its share of the sled database).
    pub(crate) fn close(&self) -> Result<(), BrokerError> {
        let store = self.store.borrow_mut().take();
        match store {
            Some(store) => Ok(store.flush()?),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_storage::metadata::open_db;

    fn registry(dir: &std::path::Path) -> Registry {
        let db = open_db(dir.join("meta")).expect("db");
        let store = MetadataStore::open(&db, dir.into()).expect("metadata");
        Registry::new(store, false, false)
    }

    #[test]
    fn a_topic_looked_up_before_it_existed_is_found_once_created() {
        let dir = tempfile::tempdir().expect("tempdir");
        let registry = registry(dir.path());
        assert!(registry.topic("Orders").expect("lookup").is_none());
        assert!(registry.queue_nums("Orders").expect("lookup").is_none());

        registry
            .put_topic(&TopicConfig::new("Orders", 8))
            .expect("put");
        assert_eq!(registry.queue_nums("Orders").expect("lookup"), Some((8, 8)));

        // The broker itself creates a pop retry topic on a first revival.
        let retry = "%RETRY%g_Orders";
        assert!(registry.topic(retry).expect("lookup").is_none());
        let (created, new) = registry.topic_for_append(retry, 4).expect("append");
        assert!(new);
        assert_eq!(
            registry.topic(retry).expect("lookup").map(|t| t.name),
            Some(created.name)
        );

        registry.remove_topic("Orders").expect("remove");
        assert!(registry.topic("Orders").expect("lookup").is_none());
    }

    #[test]
    fn missing_topic_names_are_remembered_up_to_a_bound() {
        let dir = tempfile::tempdir().expect("tempdir");
        let registry = registry(dir.path());
        for i in 0..MAX_MISSING_TOPICS + 10 {
            assert!(registry
                .topic(&format!("typo-{i}"))
                .expect("lookup")
                .is_none());
        }
        assert!(registry.missing_topics.borrow().len() <= MAX_MISSING_TOPICS);
    }
}
