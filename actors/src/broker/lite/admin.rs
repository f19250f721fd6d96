//! What the lite admin requests (RocketMQ 5.5's `mqadmin getParentTopicInfo`,
//! `getLiteTopicInfo`, `getLiteClientInfo`, `getLiteGroupInfo`) read: a parent's lite topics and
//! groups, one lite topic's offsets and subscribers, one client's subscription, a group's lag
//! across its lite topics. Read from the store's queues, the offsets and the in-memory
//! subscriptions; the doors turn them into their answers.

use std::collections::HashMap;

use super::super::handle::mailbox;
use super::super::handle::BrokerHandle;
use crate::broker::consumer_offsets::{ListGroup, QueryOffsets};
use crate::broker_api::BrokerError;
use crate::logic::attributes::lite_topic_expiration;
use crate::logic::lite::{lmq_name, split_lmq, BIND_TOPIC, LMQ_PREFIX};
use crate::logic::queue::GroupQueue;
use skiff_storage::metadata::TopicConfig;
use skiff_storage::store::StoreReader;

/// What lite receives have to look at ([`BrokerHandle::lite_readiness`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiteReadinessSnapshot {
    /// Clients with a lite topic ready for their next receive.
    pub clients: usize,
    /// Lite topics ready, over all clients.
    pub ready: usize,
    /// Lite topics to be looked at again once a batch out becomes visible.
    pub due: usize,
    /// Lite topics receives looked at, since the start.
    pub looks: u64,
}

/// A lite parent: its expiration, the groups bound to it, its lite topics and every lite
/// topic of the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentTopicInfo {
    pub topic: String,
    /// `lite.topic.expiration` in minutes; -1 for never.
    pub ttl_minutes: i64,
    pub groups: Vec<String>,
    pub lite_topics: usize,
    pub all_lite_topics: usize,
}

/// One lite topic: its queue's offsets and the clients subscribing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiteTopicInfo {
    pub parent: String,
    pub lite: String,
    pub min_offset: u64,
    pub max_offset: u64,
    /// Store time of its newest message; 0 when it holds none.
    pub last_update_ms: i64,
    /// (client id, group).
    pub subscribers: Vec<(String, String)>,
}

/// A group's progress in one lite topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiteOffset {
    pub broker_offset: u64,
    pub consumer_offset: u64,
    /// Store time of the last message consumed; 0 when none.
    pub last_consumed_ms: i64,
}

/// A lite group's lag: in one lite topic, or over all of them with the largest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiteGroupInfo {
    pub group: String,
    pub parent: String,
    pub lite: Option<String>,
    /// -1 when the lite topic asked for holds no message.
    pub total_lag: i64,
    /// Store time of the oldest message not consumed in the lite topic asked for; -1 otherwise.
    pub earliest_unconsumed_ms: i64,
    pub offset: Option<LiteOffset>,
    /// (lite topic, lag), largest first, at most the `top` asked for.
    pub lag_top: Vec<(String, u64)>,
}

/// The most lite topics one page lists.
pub const MAX_LITE_PAGE: usize = 1000;

/// One page of a parent's lite topics, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiteTopicPage {
    pub parent: String,
    /// Lite topics the parent has in all.
    pub total: usize,
    /// The groups bound to the parent, whose lag each row gives.
    pub groups: Vec<String>,
    pub rows: Vec<LiteTopicRow>,
    /// The name to ask the next page after; `None` on the last page.
    pub next_after: Option<String>,
}

/// One lite topic of a [`LiteTopicPage`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiteTopicRow {
    pub lite: String,
    pub min_offset: u64,
    pub max_offset: u64,
    /// Store time of its newest message; 0 when it holds none.
    pub last_update_ms: i64,
    /// (client id, group).
    pub subscribers: Vec<(String, String)>,
    /// Per bound group, in [`LiteTopicPage::groups`]' order: messages not consumed (all of
    /// them when the group has no offset in it).
    pub lags: Vec<u64>,
}

impl BrokerHandle {
    /// A page of `parent`'s lite topics, by name, starting after `after`: at most `limit`
    /// (capped at [`MAX_LITE_PAGE`]) with offsets, subscribers and each bound group's lag.
    pub async fn lite_topics_page(
        &self,
        parent: &TopicConfig,
        after: Option<&str>,
        limit: usize,
    ) -> Result<LiteTopicPage, BrokerError> {
        self.expire_lite_subscriptions();
        let reader = self.reader();
        let prefix = lmq_name(&parent.name, "");
        let all = reader.topics_with_queue(&prefix, 0)?;
        let start = after.map_or(0, |after| {
            all.partition_point(|t| split_lmq(t).is_none_or(|(_, lite)| lite <= after))
        });
        let limit = limit.clamp(1, MAX_LITE_PAGE);
        let page: Vec<&str> = all[start..]
            .iter()
            .filter_map(|t| split_lmq(t).map(|(_, lite)| lite))
            .take(limit)
            .collect();
        let groups: Vec<String> = self
            .groups()?
            .into_iter()
            .filter(|g| g.attributes.get(BIND_TOPIC) == Some(&parent.name))
            .map(|g| g.name)
            .collect();
        let slots = groups
            .iter()
            .flat_map(|g| {
                page.iter()
                    .map(move |lite| GroupQueue::new(g, lmq_name(&parent.name, lite), 0))
            })
            .collect();
        let consumed = self
            .inner
            .addrs
            .offsets
            .send(QueryOffsets { slots })
            .await
            .map_err(mailbox("consumer offsets"))??;
        let subscriptions = self.inner.lite.subscriptions.borrow();
        let mut rows = Vec::with_capacity(page.len());
        for (at, lite) in page.iter().enumerate() {
            let (min, max, last) = lite_queue_span(reader, &lmq_name(&parent.name, lite))?;
            let lags = (0..groups.len())
                .map(|g| {
                    let from = consumed.get(g * page.len() + at).copied().flatten();
                    max.saturating_sub(from.unwrap_or(min))
                })
                .collect();
            rows.push(LiteTopicRow {
                lite: (*lite).to_owned(),
                min_offset: min,
                max_offset: max,
                last_update_ms: last,
                subscribers: subscriptions.subscribers(&parent.name, lite),
                lags,
            });
        }
        let next_after = (start + page.len() < all.len())
            .then(|| page.last().map(|l| (*l).to_owned()))
            .flatten();
        Ok(LiteTopicPage {
            parent: parent.name.clone(),
            total: all.len(),
            groups,
            rows,
            next_after,
        })
    }

    /// GET_PARENT_TOPIC_INFO: `config` is the parent's (a LITE topic).
    pub fn parent_topic_info(&self, config: &TopicConfig) -> Result<ParentTopicInfo, BrokerError> {
        let queues = self.reader().queues()?;
        let all = queues
            .iter()
            .filter(|(t, _)| t.starts_with(LMQ_PREFIX))
            .count();
        let own = queues
            .iter()
            .filter(|(t, _)| split_lmq(t).is_some_and(|(p, _)| p == config.name))
            .count();
        let groups = self
            .groups()?
            .into_iter()
            .filter(|g| g.attributes.get(BIND_TOPIC) == Some(&config.name))
            .map(|g| g.name)
            .collect();
        Ok(ParentTopicInfo {
            topic: config.name.clone(),
            ttl_minutes: lite_topic_expiration(&config.attributes)
                .map_or(-1, |d| (d.as_secs() / 60) as i64),
            groups,
            lite_topics: own,
            all_lite_topics: all,
        })
    }

    /// GET_LITE_TOPIC_INFO.
    pub fn lite_topic_info(&self, parent: &str, lite: &str) -> Result<LiteTopicInfo, BrokerError> {
        self.expire_lite_subscriptions();
        let (min, max, last) = lite_queue_span(self.reader(), &lmq_name(parent, lite))?;
        Ok(LiteTopicInfo {
            parent: parent.to_owned(),
            lite: lite.to_owned(),
            min_offset: min,
            max_offset: max,
            last_update_ms: last,
            subscribers: self
                .inner
                .lite
                .subscriptions
                .borrow()
                .subscribers(parent, lite),
        })
    }

    /// How many (client, lite topic) subscriptions the broker holds.
    pub fn lite_subscription_count(&self) -> usize {
        self.expire_lite_subscriptions();
        self.inner.lite.subscriptions.borrow().subscription_count()
    }

    /// What lite receives have to look at, and how much they looked.
    pub fn lite_readiness(&self) -> LiteReadinessSnapshot {
        let subscriptions = self.inner.lite.subscriptions.borrow();
        let (clients, ready, due) = subscriptions.readiness().counts();
        LiteReadinessSnapshot {
            clients,
            ready,
            due,
            looks: self.inner.lite.looks.get(),
        }
    }

    /// GET_LITE_CLIENT_INFO: the client's lite topics of `parent` in `group` (`None`: it holds
    /// no subscription there), at most `max`.
    pub fn lite_client_info(
        &self,
        parent: &str,
        group: &str,
        client_id: &str,
        max: usize,
    ) -> Option<Vec<String>> {
        self.expire_lite_subscriptions();
        let subscriptions = self.inner.lite.subscriptions.borrow();
        let client = subscriptions
            .of(client_id)
            .filter(|c| c.parent == parent && c.group == group)?;
        Some(client.lites.iter().take(max).cloned().collect())
    }

    /// GET_LITE_GROUP_INFO: `group` (bound to `parent`) in `lite`, or over every lite topic it
    /// has an offset in, the `top` largest lags first.
    pub async fn lite_group_info(
        &self,
        group: &str,
        parent: &str,
        lite: Option<&str>,
        top: usize,
    ) -> Result<LiteGroupInfo, BrokerError> {
        let offsets: HashMap<String, u64> = self
            .inner
            .addrs
            .offsets
            .send(ListGroup {
                group: group.to_owned(),
            })
            .await
            .map_err(mailbox("consumer offsets"))??
            .into_iter()
            .filter(|o| o.queue_id == 0)
            .filter_map(|o| {
                let (p, l) = split_lmq(&o.topic)?;
                (p == parent).then(|| (l.to_owned(), o.offset))
            })
            .collect();
        let reader = self.reader();
        let mut info = LiteGroupInfo {
            group: group.to_owned(),
            parent: parent.to_owned(),
            lite: lite.map(str::to_owned),
            total_lag: 0,
            earliest_unconsumed_ms: -1,
            offset: None,
            lag_top: Vec::new(),
        };
        if let Some(lite) = lite {
            let lmq = lmq_name(parent, lite);
            let max = reader.max_offset(&lmq, 0);
            let Some(&consumed) = offsets.get(lite).filter(|_| max > 0) else {
                info.total_lag = if max == 0 { -1 } else { max as i64 };
                return Ok(info);
            };
            info.total_lag = max.saturating_sub(consumed) as i64;
            if consumed < max {
                info.earliest_unconsumed_ms =
                    reader.store_timestamp_at(&lmq, 0, consumed)?.unwrap_or(-1);
            }
            let last_consumed_ms = match consumed {
                0 => 0,
                n => reader.store_timestamp_at(&lmq, 0, n - 1)?.unwrap_or(0),
            };
            info.offset = Some(LiteOffset {
                broker_offset: max,
                consumer_offset: consumed,
                last_consumed_ms,
            });
            return Ok(info);
        }
        let mut lags: Vec<(String, u64)> = offsets
            .into_iter()
            .map(|(lite, consumed)| {
                let max = reader.max_offset(&lmq_name(parent, &lite), 0);
                (lite, max.saturating_sub(consumed))
            })
            .filter(|(_, lag)| *lag > 0)
            .collect();
        lags.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        info.total_lag = lags.iter().map(|(_, lag)| *lag as i64).sum();
        lags.truncate(top);
        info.lag_top = lags;
        Ok(info)
    }
}

/// A lite queue's (min offset, max offset, store time of its newest message; 0 when empty).
fn lite_queue_span(reader: &StoreReader, lmq: &str) -> Result<(u64, u64, i64), BrokerError> {
    let max = reader.max_offset(lmq, 0);
    if max == 0 {
        return Ok((0, 0, 0));
    }
    let newest = reader.store_timestamp_at(lmq, 0, max - 1)?.unwrap_or(0);
    Ok((reader.min_offset(lmq, 0), max, newest))
}
