//! Topic and subscription-group configuration as the broker actors see it: a thin layer over
//! [`MetadataStore`] that applies the auto-create rules and can be closed at shutdown.
//!
//! Not an actor: every broker actor runs on one arbiter thread and sled calls are short, so the
//! actors share one `Rc` instead of paying a mailbox round trip per lookup.

use crate::broker_api::BrokerError;
use crate::logic::delay::{
    retry_topic, DLQ_TOPIC_PREFIX as DLQ_PREFIX, MAX_DELAY_LEVEL,
    RETRY_TOPIC_PREFIX as RETRY_PREFIX,
};
use skiff_storage::metadata::{
    MetadataError, MetadataStore, SubscriptionGroupConfig, TopicConfig, PERM_READ, PERM_WRITE,
};
use std::cell::RefCell;
use std::rc::Rc;

/// Where delayed messages wait, one queue per delay level.
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";
/// Number of delay levels, hence of schedule queues.
pub const DELAY_LEVELS: u32 = MAX_DELAY_LEVEL as u32;
/// Largest queue count an auto-created topic gets, whatever a producer asks for.
const MAX_AUTO_CREATE_QUEUES: u32 = 1024;

fn metadata_error(e: MetadataError) -> BrokerError {
    BrokerError::Metadata(e.to_string())
}

#[derive(Clone)]
pub(crate) struct Registry {
    store: Rc<RefCell<Option<MetadataStore>>>,
    // Every send looks its topic up; a sled read plus a checksummed decode per message was a
    // quarter of the send path. Topics only change through this registry, so the cache is exact.
    topics: Rc<RefCell<std::collections::HashMap<String, TopicConfig>>>,
    auto_create_topic: bool,
    auto_create_group: bool,
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
            auto_create_topic,
            auto_create_group,
        }
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&MetadataStore) -> Result<T, MetadataError>,
    ) -> Result<T, BrokerError> {
        let guard = self.store.borrow();
        let store = guard
            .as_ref()
            .ok_or_else(|| BrokerError::Metadata("metadata store is closed".to_string()))?;
        f(store).map_err(metadata_error)
    }

    pub(crate) fn topic(&self, name: &str) -> Result<Option<TopicConfig>, BrokerError> {
        if let Some(config) = self.topics.borrow().get(name) {
            return Ok(Some(config.clone()));
        }
        let loaded = self.with(|s| s.get_topic(name))?;
        if let Some(config) = &loaded {
            self.topics
                .borrow_mut()
                .insert(name.to_string(), config.clone());
        }
        Ok(loaded)
    }

    pub(crate) fn topics(&self) -> Result<Vec<TopicConfig>, BrokerError> {
        self.with(|s| s.list_topics())
    }

    fn create_topic(&self, name: &str, queues: u32) -> Result<TopicConfig, BrokerError> {
        let config = TopicConfig {
            name: name.to_string(),
            read_queue_nums: queues,
            write_queue_nums: queues,
            perm: PERM_READ | PERM_WRITE,
        };
        self.with(|s| s.put_topic(&config))?;
        self.topics
            .borrow_mut()
            .insert(name.to_string(), config.clone());
        tracing::info!(topic = %name, queues, "topic created");
        Ok(config)
    }

    /// The topic an append goes to. System topics (schedule, retry, dead-letter) are created
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
            DELAY_LEVELS
        } else if name.starts_with(DLQ_PREFIX) {
            1
        } else if let Some(group) = name.strip_prefix(RETRY_PREFIX) {
            match self.group_or_create(group)? {
                Some(group) if group.retry_queue_nums > 0 => group.retry_queue_nums,
                _ => 1,
            }
        } else if self.auto_create_topic {
            default_queue_nums.clamp(1, MAX_AUTO_CREATE_QUEUES)
        } else {
            return Err(BrokerError::TopicNotExist {
                topic: name.to_string(),
            });
        };
        Ok((self.create_topic(name, queues)?, true))
    }

    /// The topic a route lookup reports; auto-created when enabled.
    pub(crate) fn topic_for_route(
        &self,
        name: &str,
        default_queue_nums: u32,
    ) -> Result<TopicConfig, BrokerError> {
        if let Some(config) = self.topic(name)? {
            return Ok(config);
        }
        if self.auto_create_topic || is_system_topic(name) {
            return Ok(self.topic_for_append(name, default_queue_nums)?.0);
        }
        Err(BrokerError::TopicNotExist {
            topic: name.to_string(),
        })
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
        self.with(|s| s.get_subscription_group(name))
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
        tracing::info!(group = %name, "subscription group created");
        Ok(Some(config))
    }

    /// Flushes and releases the metadata store (and with it its share of the sled database).
    pub(crate) fn close(&self) -> Result<(), BrokerError> {
        let store = self.store.borrow_mut().take();
        match store {
            Some(store) => store.flush().map_err(metadata_error),
            None => Ok(()),
        }
    }
}

/// Topics the broker writes to itself.
pub fn is_system_topic(name: &str) -> bool {
    name == SCHEDULE_TOPIC || name.starts_with(RETRY_PREFIX) || name.starts_with(DLQ_PREFIX)
}
