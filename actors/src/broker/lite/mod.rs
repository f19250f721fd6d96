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
pub mod arrivals;
pub(crate) mod expiry;
pub(super) mod state;

use super::handle::BrokerHandle;
use super::pop::{PopAnswer, PopRequest, BUSY_RETRY};
use crate::broker_api::{BrokerError, ExpressionType};
use crate::logic::lite::{
    check_name, client_quota, lmq_name, split_lmq, start_offset, Change, LiteRefusal, StartFrom,
    SyncAction, SyncOutcome, BIND_TOPIC, QUOTA_SLACK, SUB_MODEL,
};
use crate::logic::lite_ready::Look;
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

    /// Drops the subscriptions of clients that stopped refreshing them. Expiry has no timer of
    /// its own: whatever reads the subscriptions (syncs, lite receives, the admin requests)
    /// calls this first, so none sees a subscription past its time.
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

    /// An orderly batch of `topic` was acknowledged: when it is a lite topic, its subscribers'
    /// next receives look at it.
    pub(in crate::broker) fn lite_batch_acknowledged(&self, topic: &str) {
        if let Some((parent, lite)) = split_lmq(topic) {
            self.inner.lite.mark_ready(parent, lite);
        }
    }

    /// An orderly batch of `topic` becomes visible at `visible_at_ms` (its invisible time was
    /// changed): when it is a lite topic, its subscribers look at it then.
    pub(in crate::broker) fn lite_batch_visible_at(&self, topic: &str, visible_at_ms: i64) {
        if let Some((parent, lite)) = split_lmq(topic) {
            self.inner
                .lite
                .subscriptions
                .borrow_mut()
                .due_at(visible_at_ms, parent, lite);
        }
    }

    /// A lite receive (POP_LITE_MESSAGE): an orderly pop of each lite topic ready for the
    /// client (a message arrived, a batch was acknowledged or became visible again, the
    /// subscription was added), from a different one each time, until the batch is full; when
    /// none has anything, waits up to the poll time for one to become ready or the client's
    /// subscription to change, and looks again. The other subscribed lite topics are not looked
    /// at: they hold nothing for the client.
    pub async fn pop_lite(&self, pop: LitePop) -> Result<Vec<PopAnswer>, BrokerError> {
        self.lite_group(&pop.group, &pop.topic)?;
        let deadline = tokio::time::Instant::now() + pop.poll;
        let wake = self.inner.lite.wake(&pop.client_id);
        loop {
            self.expire_lite_subscriptions();
            self.inner.lite.mark_due_ready(self.inner.clock.now_ms());
            let (answers, busy) = self.pop_lite_once(&pop).await?;
            let now = tokio::time::Instant::now();
            if !answers.is_empty() || now >= deadline {
                return Ok(answers);
            }
            let mut hold = deadline - now;
            if busy {
                hold = hold.min(BUSY_RETRY);
            }
            let next_due = self
                .inner
                .lite
                .subscriptions
                .borrow()
                .readiness()
                .next_due_ms();
            if let Some(due_ms) = next_due {
                let wait = due_ms.saturating_sub(self.inner.clock.now_ms()).max(0);
                hold = hold.min(Duration::from_millis(wait as u64));
            }
            let _ = tokio::time::timeout(hold, wake.notified()).await;
            if !self.inner.lite.is_waking(&pop.client_id, &wake) {
                // The client ended its session while this receive waited.
                return Ok(Vec::new());
            }
        }
    }

    /// One look at the lite topics ready for the client until the batch is full: the answers
    /// that carry messages, and whether a lite topic was left because another receive of the
    /// group was reading it.
    async fn pop_lite_once(&self, pop: &LitePop) -> Result<(Vec<PopAnswer>, bool), BrokerError> {
        let lites = self
            .inner
            .lite
            .subscriptions
            .borrow()
            .readiness()
            .round(&pop.client_id);
        let mut answers = Vec::new();
        let mut busy = false;
        let mut left = pop.max_messages;
        for lite in &lites {
            if left == 0 {
                break;
            }
            let taken = self
                .inner
                .lite
                .subscriptions
                .borrow_mut()
                .take_ready(&pop.client_id, lite);
            if !taken {
                // Unsubscribed, or taken by a concurrent receive of the client, meanwhile.
                continue;
            }
            self.inner.lite.looks.set(self.inner.lite.looks.get() + 1);
            let topic = lmq_name(&pop.topic, lite);
            // A lite topic nobody sent to yet: nothing to pop, nothing to look up.
            let look = if self.inner.reader.max_offset(&topic, 0) == 0 {
                Look::Empty
            } else {
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
                let look = if answer.message_count > 0 {
                    Look::HandedOut {
                        visible_at_ms: answer.pop_time_ms.saturating_add(pop.invisible_ms),
                    }
                } else if let Some(visible_at_ms) = answer.blocked_until_ms {
                    Look::Blocked { visible_at_ms }
                } else if answer.rest > 0 {
                    busy = true;
                    Look::Busy
                } else {
                    Look::Empty
                };
                if answer.message_count > 0 {
                    left = left.saturating_sub(answer.message_count as u32);
                    answers.push(answer);
                }
                look
            };
            self.inner.lite.subscriptions.borrow_mut().looked(
                &pop.client_id,
                &pop.topic,
                lite,
                look,
            );
        }
        Ok((answers, busy))
    }
}
