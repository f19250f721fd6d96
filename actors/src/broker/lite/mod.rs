//! Lite topics on the broker (RocketMQ 5.5, [`crate::logic::lite`]): the lite groups, the
//! clients' lite subscriptions (`SyncLiteSubscription`) and lite receives, a pop across the lite
//! topics one client subscribes, each consumed in order by its group.
//!
//! A lite topic's messages live in queue 0 of its `%LMQ%$parent$lite` topic, which the registry
//! derives from the parent; a lite receive is an orderly pop of those queues, so acks, invisible
//! times, redeliveries and the dead-letter topic are the pop's.

use std::collections::BTreeSet;
use std::time::Duration;

pub mod admin;
pub(crate) mod expiry;
pub(super) mod state;

use super::handle::BrokerHandle;
use super::pop::{PopAnswer, PopRequest, BUSY_RETRY};
use crate::broker_api::{BrokerError, ExpressionType};
use crate::logic::lite::{
    check_name, client_quota, lmq_name, start_offset, Change, LiteRefusal, StartFrom, SyncAction,
    SyncOutcome, BIND_TOPIC, QUOTA_SLACK, SUB_MODEL,
};
use crate::refused::Refused;
use skiff_storage::metadata::SubscriptionGroupConfig;

/// One `SyncLiteSubscription`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiteSync {
    pub client_id: String,
    pub group: String,
    /// The parent topic.
    pub topic: String,
    pub action: SyncAction,
    pub lites: BTreeSet<String>,
    /// Where the added lite topics start (PARTIAL_ADD only, as the proxy passes it).
    pub start: Option<StartFrom>,
}

/// One lite receive: up to `max_messages` from the lite topics the client subscribes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LitePop {
    pub client_id: String,
    pub group: String,
    /// The parent topic.
    pub topic: String,
    pub max_messages: u32,
    pub invisible_ms: i64,
    /// How long to wait for a message when none is there.
    pub poll: Duration,
}

impl BrokerHandle {
    /// The lite group `group`, bound to `topic`, as the proxy checks it.
    pub fn lite_group(
        &self,
        group: &str,
        topic: &str,
    ) -> Result<SubscriptionGroupConfig, BrokerError> {
        let config = self.inner.registry.group(group)?.ok_or_else(|| {
            Refused::Lite(LiteRefusal::GroupNotFound {
                group: group.to_owned(),
            })
        })?;
        let bound = config.attributes.get(BIND_TOPIC).ok_or_else(|| {
            Refused::Lite(LiteRefusal::NotALiteGroup {
                group: group.to_owned(),
            })
        })?;
        if bound != topic {
            return Err(Refused::Lite(LiteRefusal::BindTopicMismatch {
                group: group.to_owned(),
                expected: bound.clone(),
                actual: topic.to_owned(),
            })
            .into());
        }
        Ok(config)
    }

    /// Forgets a client's lite subscription (it ended its session), and ends its waiting
    /// receive.
    pub fn forget_lite_client(&self, client_id: &str) {
        self.inner
            .lite
            .subscriptions
            .borrow_mut()
            .remove_client(client_id);
        if let Some(wake) = self.inner.lite.wakes.borrow_mut().remove(client_id) {
            wake.notify_one();
        }
    }

    /// Drops the subscriptions of clients that stopped refreshing them.
    fn expire_lite_subscriptions(&self) {
        let expiry = self.inner.config.lite_subscription_expiry;
        let before = self.inner.clock.now_ms() - i64::try_from(expiry.as_millis()).unwrap_or(0);
        for client in self.inner.lite.subscriptions.borrow_mut().expire(before) {
            tracing::info!(client_id = %client, "lite subscription expired");
        }
    }

    /// SyncLiteSubscription: changes the client's lite subscription as Java's broker does, moves
    /// the group in newly added lite topics as the request's start says, and wakes the client's
    /// waiting receive. Answers what changed, with the clients an Exclusive group evicted.
    pub async fn sync_lite_subscription(&self, sync: LiteSync) -> Result<SyncOutcome, BrokerError> {
        let group = self.lite_group(&sync.group, &sync.topic)?;
        let quota = client_quota(&group.attributes);
        if !sync.lites.is_empty()
            && quota >= 0
            && sync.lites.len() as u64 > quota as u64 + QUOTA_SLACK as u64
        {
            return Err(Refused::Lite(LiteRefusal::SubscriptionQuota { quota }).into());
        }
        if sync.action == SyncAction::PartialAdd {
            for lite in &sync.lites {
                check_name(lite).map_err(Refused::Lite)?;
            }
        }
        self.expire_lite_subscriptions();
        let exclusive = group.attributes.get(SUB_MODEL).map(String::as_str) == Some("Exclusive");
        let outcome = self.inner.lite.subscriptions.borrow_mut().apply(
            &Change {
                client_id: &sync.client_id,
                group: &sync.group,
                parent: &sync.topic,
                action: sync.action,
                lites: &sync.lites,
                exclusive,
            },
            self.inner.clock.now_ms(),
        );
        if let (SyncAction::PartialAdd, Some(start)) = (sync.action, sync.start) {
            for lite in &sync.lites {
                self.start_lite(&sync.group, &sync.topic, lite, start)
                    .await?;
            }
        }
        for (client, lite) in &outcome.evicted {
            tracing::info!(client_id = %client, group = %sync.group, lite_topic = %lite, "lite topic taken by another client of an exclusive group");
        }
        self.inner.lite.wake(&sync.client_id).notify_one();
        Ok(outcome)
    }

    /// Moves the group's position in a lite topic as `start` says.
    async fn start_lite(
        &self,
        group: &str,
        topic: &str,
        lite: &str,
        start: StartFrom,
    ) -> Result<(), BrokerError> {
        let lmq = lmq_name(topic, lite);
        let current = self
            .query_offset(crate::broker_api::QueryOffsetRequest {
                group: group.to_owned(),
                queue: crate::logic::queue::MessageQueue::new(
                    lmq.clone(),
                    self.inner.config.broker_name.clone(),
                    0,
                ),
                set_zero_if_not_found: false,
            })
            .await?;
        let max = self.inner.reader.max_offset(&lmq, 0);
        if let Some(offset) = start_offset(start, current, max) {
            self.reset_offset(group, &lmq, 0, offset).await?;
        }
        Ok(())
    }

    /// The lite topics `client_id` subscribes under `group` and `topic`.
    fn lite_topics_of(&self, client_id: &str, group: &str, topic: &str) -> Vec<String> {
        self.inner
            .lite
            .subscriptions
            .borrow()
            .of(client_id)
            .filter(|c| c.group == group && c.parent == topic)
            .map(|c| c.lites.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// A lite receive (POP_LITE_MESSAGE): an orderly pop of each lite topic the client
    /// subscribes, from a different one each time, until the batch is full; when none has
    /// anything, waits up to the poll time for an arrival in one of them or a change of the
    /// client's subscription, and looks once more.
    pub async fn pop_lite(&self, pop: LitePop) -> Result<Vec<PopAnswer>, BrokerError> {
        self.lite_group(&pop.group, &pop.topic)?;
        let deadline = tokio::time::Instant::now() + pop.poll;
        let wake = self.inner.lite.wake(&pop.client_id);
        loop {
            self.expire_lite_subscriptions();
            let lites = self.lite_topics_of(&pop.client_id, &pop.group, &pop.topic);
            let (answers, rest) = self.pop_lite_once(&pop, &lites).await?;
            let now = tokio::time::Instant::now();
            if !answers.is_empty() || now >= deadline {
                return Ok(answers);
            }
            let hold = if rest > 0 {
                BUSY_RETRY.min(deadline - now)
            } else {
                deadline - now
            };
            let queues = lites.iter().map(|l| (lmq_name(&pop.topic, l), 0)).collect();
            let waits = self.park_on(queues).await?;
            let changed = wake.notified();
            let _ = tokio::time::timeout(hold, async {
                tokio::select! {
                    _ = super::pop::any_woken(waits) => {}
                    _ = changed => {}
                }
            })
            .await;
            if !self.inner.lite.is_waking(&pop.client_id, &wake) {
                // The client ended its session while this receive waited.
                return Ok(Vec::new());
            }
        }
    }

    /// One look at the client's lite topics until the batch is full: the answers that carry
    /// messages, and how many messages the lite topics read left unread.
    async fn pop_lite_once(
        &self,
        pop: &LitePop,
        lites: &[String],
    ) -> Result<(Vec<PopAnswer>, u64), BrokerError> {
        let mut answers = Vec::new();
        let mut rest = 0;
        let mut left = pop.max_messages;
        let start = if lites.is_empty() {
            0
        } else {
            let round = self.inner.pop_rounds.get();
            self.inner.pop_rounds.set(round.wrapping_add(1));
            (round % lites.len() as u64) as usize
        };
        for lite in lites.iter().cycle().skip(start).take(lites.len()) {
            let topic = lmq_name(&pop.topic, lite);
            // A lite topic nobody sent to yet: nothing to pop, nothing to look up.
            if self.inner.reader.max_offset(&topic, 0) == 0 {
                continue;
            }
            if left == 0 {
                break;
            }
            let answer = self
                .pop(PopRequest {
                    group: pop.group.clone(),
                    topic,
                    queue_id: Some(0),
                    max_messages: left,
                    invisible_ms: pop.invisible_ms,
                    poll: Duration::ZERO,
                    from_min: true,
                    expression_type: ExpressionType::Tag,
                    expression: None,
                    orderly: true,
                })
                .await?;
            rest += answer.rest;
            if answer.message_count > 0 {
                left = left.saturating_sub(answer.message_count as u32);
                answers.push(answer);
            }
        }
        Ok((answers, rest))
    }
}
