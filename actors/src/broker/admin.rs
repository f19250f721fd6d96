//! The admin calls of the broker handle: topic list, consumer progress, offset resets and the
//! metrics snapshot.

use crate::broker::consumer_offsets::{
    GroupsOfTopic, ListAllGroups, ListGroup, RemoveGroupOffsets, RemoveTopicOffsets, ResetOffset,
};
use crate::broker::handle::{mailbox, refuse_broker_cursor, BrokerHandle};
use crate::broker::membership::{DescribeGroup, GroupView};
use crate::broker::registry::TopicsVersion;
use crate::broker_api::BrokerError;
use crate::logic::queue::GroupQueue;
use crate::metrics::{GroupLag, Metrics, MetricsSnapshot};
use crate::refused::Refused;
use skiff_storage::metadata::{SubscriptionGroupConfig, TopicConfig};
use skiff_storage::store::BoundaryType;
use std::collections::BTreeSet;

/// One row of `skiff admin progress <group>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueProgress {
    pub topic: String,
    pub queue_id: u32,
    /// The queue's max offset (next offset to be written).
    pub broker_offset: u64,
    pub consumer_offset: Option<u64>,
    /// Messages not yet committed: from the consumer offset, or from the queue's min offset
    /// when the group has none.
    pub lag: u64,
    /// Pulled by the group but not committed yet (the last pull's next offset minus the
    /// consumer offset), as RocketMQ 5's consumerProgress "Inflight" column.
    pub in_flight: u64,
    pub last_commit_ms: Option<i64>,
}

impl BrokerHandle {
    /// The counters the broker and the transport update ([`Metrics`]); the transport counts
    /// connections and requests on it.
    pub fn metrics_counters(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Every metric: the counters, plus each group's lag and in-flight messages per queue and
    /// the bytes the commit log holds, read now.
    pub async fn metrics(&self) -> Result<MetricsSnapshot, BrokerError> {
        let mut snapshot = self.inner.metrics.snapshot();
        let offsets = self
            .inner
            .addrs
            .offsets
            .send(ListAllGroups)
            .await
            .map_err(mailbox("consumer offsets"))??;
        let reader = &self.inner.reader;
        let pulled = self.inner.pull_offsets.borrow();
        snapshot.lag = offsets
            .into_iter()
            .map(|(group, topic, queue_id, consumer_offset)| {
                let broker_offset = reader.max_offset(&topic, queue_id);
                let in_flight = pulled
                    .get(&GroupQueue::new(group.as_str(), topic.as_str(), queue_id))
                    .map_or(0, |&p| p.saturating_sub(consumer_offset));
                GroupLag {
                    lag: broker_offset.saturating_sub(consumer_offset),
                    broker_offset,
                    consumer_offset,
                    in_flight,
                    group,
                    topic,
                    queue_id,
                }
            })
            .collect();
        snapshot.fsync = reader.fsync_latency();
        let files = reader.queue_file_stats();
        snapshot.queue_files_open = files.open as u64;
        snapshot.queue_files_open_max = files.capacity as u64;
        snapshot.queue_file_evictions = files.evictions;
        snapshot.store_bytes = reader
            .commit_log_end()
            .saturating_sub(reader.commit_log_start());
        Ok(snapshot)
    }

    /// Admin: every topic config, sorted by name.
    pub fn topics(&self) -> Result<Vec<TopicConfig>, BrokerError> {
        self.inner.registry.topics()
    }

    /// Admin: the topics from the `skip`-th in name order, at most `take`, and how many there
    /// are (GET_ALL_TOPIC_CONFIG in pages).
    pub fn topics_page(
        &self,
        skip: usize,
        take: usize,
    ) -> Result<(Vec<TopicConfig>, usize), BrokerError> {
        self.inner.registry.topics_page(skip, take)
    }

    /// Admin: when the topics last changed, and how many changes since the broker started.
    pub fn topics_version(&self) -> TopicsVersion {
        self.inner.registry.topics_version()
    }

    /// Admin: one topic's config, `None` when it does not exist.
    pub fn topic(&self, name: &str) -> Result<Option<TopicConfig>, BrokerError> {
        self.inner.registry.topic(name)
    }

    /// Admin (UPDATE_AND_CREATE_TOPIC): creates the topic or replaces its config.
    pub fn put_topic(&self, config: &TopicConfig) -> Result<(), BrokerError> {
        self.inner.registry.put_topic(config)
    }

    /// Admin (DELETE_TOPIC_IN_BROKER): forgets the topic's config and every group's offsets on
    /// it; answers whether it existed. Stored messages stay where they are until retention
    /// removes them with their segments.
    pub async fn remove_topic(&self, name: &str) -> Result<bool, BrokerError> {
        refuse_broker_cursor("", name)?;
        let existed = self.inner.registry.remove_topic(name)?;
        self.inner
            .addrs
            .offsets
            .send(RemoveTopicOffsets {
                topic: name.to_string(),
            })
            .await
            .map_err(mailbox("consumer offsets"))??;
        Ok(existed)
    }

    /// Admin: every subscription-group config, sorted by name.
    pub fn groups(&self) -> Result<Vec<SubscriptionGroupConfig>, BrokerError> {
        self.inner.registry.groups()
    }

    /// One subscription group's config, `None` when it does not exist (one lookup, no scan).
    pub fn group(&self, name: &str) -> Result<Option<SubscriptionGroupConfig>, BrokerError> {
        self.inner.registry.group(name)
    }

    /// Admin (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP): creates the group or replaces its config.
    pub fn put_group(&self, config: &SubscriptionGroupConfig) -> Result<(), BrokerError> {
        self.inner.registry.put_group(config)
    }

    /// Admin (DELETE_SUBSCRIPTIONGROUP): forgets the group's config and, with `clean_offsets`,
    /// its stored offsets and pop checkpoints. Answers whether the config existed.
    pub async fn remove_group(&self, name: &str, clean_offsets: bool) -> Result<bool, BrokerError> {
        refuse_broker_cursor(name, "")?;
        let existed = self.inner.registry.remove_group(name)?;
        if clean_offsets {
            self.inner
                .addrs
                .offsets
                .send(RemoveGroupOffsets {
                    group: name.to_string(),
                })
                .await
                .map_err(mailbox("consumer offsets"))??;
            // Its popped, unacknowledged messages too: nobody would acknowledge them, and their
            // revivals would bring the group's retry topics back.
            let forgotten = self
                .inner
                .addrs
                .pop
                .send(crate::broker::pop::actor::ForgetGroup {
                    group: name.to_string(),
                })
                .await
                .map_err(mailbox("pop"))??;
            if forgotten > 0 {
                tracing::info!(
                    group = name,
                    checkpoints = forgotten,
                    "pop checkpoints of a deleted group dropped"
                );
            }
        }
        Ok(existed)
    }

    /// Admin (QUERY_TOPIC_CONSUME_BY_WHO): the groups with an offset stored for `topic`.
    pub async fn groups_with_offsets(&self, topic: &str) -> Result<Vec<String>, BrokerError> {
        self.inner
            .addrs
            .offsets
            .send(GroupsOfTopic {
                topic: topic.to_string(),
            })
            .await
            .map_err(mailbox("consumer offsets"))?
    }

    /// Admin: the group's members, message model, consume type and subscriptions; `None` when
    /// no member is registered.
    pub async fn describe_group(&self, group: &str) -> Result<Option<GroupView>, BrokerError> {
        self.inner
            .addrs
            .membership
            .send(DescribeGroup {
                group: group.to_string(),
            })
            .await
            .map_err(mailbox("membership"))
    }

    /// Admin: per queue of every topic the group has offsets for or subscribes to, the broker
    /// offset, the consumer offset, the lag and the last commit time.
    pub async fn progress(&self, group: &str) -> Result<Vec<QueueProgress>, BrokerError> {
        let offsets = self
            .inner
            .addrs
            .offsets
            .send(ListGroup {
                group: group.to_string(),
            })
            .await
            .map_err(mailbox("consumer offsets"))??;
        let view = self
            .inner
            .addrs
            .membership
            .send(DescribeGroup {
                group: group.to_string(),
            })
            .await
            .map_err(mailbox("membership"))?;
        let mut topics: BTreeSet<String> = offsets.iter().map(|o| o.topic.clone()).collect();
        if let Some(view) = view {
            topics.extend(view.subscriptions.into_iter().map(|s| s.topic));
        }
        let reader = &self.inner.reader;
        let mut rows = Vec::new();
        for topic in topics {
            let known = offsets
                .iter()
                .filter(|o| o.topic == topic)
                .map(|o| o.queue_id + 1)
                .max()
                .unwrap_or(0);
            let configured = self
                .inner
                .registry
                .topic(&topic)?
                .map(|t| t.read_queue_nums.max(t.write_queue_nums))
                .unwrap_or(0);
            for queue_id in 0..configured.max(known) {
                let entry = offsets
                    .iter()
                    .find(|o| o.topic == topic && o.queue_id == queue_id);
                let broker_offset = reader.max_offset(&topic, queue_id);
                let consumer_offset = entry.map(|e| e.offset);
                let from = consumer_offset.unwrap_or_else(|| reader.min_offset(&topic, queue_id));
                let pulled = self
                    .inner
                    .pull_offsets
                    .borrow()
                    .get(&GroupQueue::new(group, topic.clone(), queue_id))
                    .copied();
                rows.push(QueueProgress {
                    topic: topic.clone(),
                    queue_id,
                    broker_offset,
                    consumer_offset,
                    lag: broker_offset.saturating_sub(from),
                    in_flight: pulled.map_or(0, |pulled| pulled.saturating_sub(from)),
                    last_commit_ms: entry.and_then(|e| e.last_commit_ms),
                });
            }
        }
        Ok(rows)
    }

    /// Admin: resets the group's offsets on every queue of `topic` to the first message stored
    /// at or after `timestamp_ms` (a negative timestamp means the queue's end). Each reset is
    /// pending until the group's next pull of the queue, which answers OFFSET_ILLEGAL with it.
    pub async fn reset_offset_by_time(
        &self,
        group: &str,
        topic: &str,
        timestamp_ms: i64,
    ) -> Result<Vec<(u32, u64)>, BrokerError> {
        refuse_broker_cursor(group, topic)?;
        let config = self.inner.registry.topic(topic)?.ok_or_else(|| {
            BrokerError::Refused(Refused::TopicNotExist {
                topic: topic.to_string(),
            })
        })?;
        let mut done = Vec::new();
        for queue_id in 0..config.read_queue_nums {
            let offset = if timestamp_ms < 0 {
                self.inner.reader.max_offset(topic, queue_id)
            } else {
                self.inner.reader.search_offset_by_timestamp(
                    topic,
                    queue_id,
                    timestamp_ms,
                    BoundaryType::Lower,
                )?
            };
            self.reset_offset(group, topic, queue_id, offset).await?;
            done.push((queue_id, offset));
        }
        Ok(done)
    }

    /// Admin: resets one queue's offset (see [`Self::reset_offset_by_time`]).
    pub async fn reset_offset(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        offset: u64,
    ) -> Result<(), BrokerError> {
        refuse_broker_cursor(group, topic)?;
        self.inner
            .addrs
            .offsets
            .send(ResetOffset {
                slot: GroupQueue::new(group, topic, queue_id),
                offset,
            })
            .await
            .map_err(mailbox("consumer offsets"))?
    }
}
