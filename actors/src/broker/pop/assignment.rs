//! The broker-side assignment: SET_MESSAGE_REQUEST_MODE records whether a group pulls or pops
//! a topic, and QUERY_ASSIGNMENT answers a client which queues to read and how.

use super::actor::{RequestModeOf, SetRequestMode};
use super::Assignment;
use crate::broker::handle::{mailbox, BrokerHandle};
use crate::broker_api::BrokerError;
use crate::logic::allocate::{allocate, pop_share_assignment, AllocateStrategy};
use crate::logic::delay::RETRY_TOPIC_PREFIX;
use crate::logic::queue::MessageQueue;
use crate::refused::{ModeRule, Refused};
use skiff_storage::pop_state::{RequestMode, RequestModeEntry};

impl BrokerHandle {
    /// SET_MESSAGE_REQUEST_MODE: from now on QUERY_ASSIGNMENT answers `entry` for the group's
    /// queues of `topic`.
    pub async fn set_request_mode(
        &self,
        topic: &str,
        group: &str,
        entry: RequestModeEntry,
    ) -> Result<(), BrokerError> {
        if topic.starts_with(RETRY_TOPIC_PREFIX) {
            return Err(Refused::ModeForbidden {
                topic: topic.to_owned(),
                rule: ModeRule::RetryTopic,
            }
            .into());
        }
        self.pop_topic(topic)?;
        self.pop_group(group)?;
        self.pop_actor()
            .send(SetRequestMode {
                topic: topic.to_owned(),
                group: group.to_owned(),
                entry,
            })
            .await
            .map_err(mailbox("pop"))??;
        tracing::info!(topic, group, mode = ?entry.mode, pop_share_queue_num = entry.pop_share_queue_num, "request mode set");
        Ok(())
    }

    /// QUERY_ASSIGNMENT: the queues of `topic` the broker gives `client_id` and how to read them.
    /// Pull mode (the default, and always for retry topics) splits the queues among the group's
    /// consumers by `strategy`; pop mode gives every consumer every queue as one entry with queue
    /// id -1 per broker, unless `pop_share_queue_num` narrows it. `None` when the topic does not
    /// exist, the group has no consumer online or the strategy is unknown (Java answers no
    /// assignment then).
    pub async fn query_assignment(
        &self,
        topic: &str,
        group: &str,
        client_id: &str,
        strategy_name: &str,
        broadcasting: bool,
    ) -> Result<Option<Assignment>, BrokerError> {
        let Some(config) = self.inner.registry.topic(topic)? else {
            return Ok(None);
        };
        let recorded = self
            .pop_actor()
            .send(RequestModeOf {
                topic: topic.to_owned(),
                group: group.to_owned(),
            })
            .await
            .map_err(mailbox("pop"))??;
        let entry = match recorded {
            Some(entry) if !topic.starts_with(RETRY_TOPIC_PREFIX) => entry,
            _ => RequestModeEntry {
                mode: RequestMode::Pull,
                pop_share_queue_num: 0,
            },
        };
        let broker = &self.inner.config.broker_name;
        let all: Vec<MessageQueue> = (0..config.read_queue_nums)
            .map(|q| MessageQueue::new(topic, broker.as_str(), q))
            .collect();
        let assigned = |queues: Vec<MessageQueue>| Assignment {
            mode: entry.mode,
            queue_ids: queues.into_iter().map(|q| Some(q.queue_id)).collect(),
        };
        if broadcasting {
            return Ok(Some(assigned(all)));
        }
        let Some(strategy) = AllocateStrategy::from_name(strategy_name) else {
            tracing::warn!(
                group,
                topic,
                strategy = strategy_name,
                "query assignment: unsupported strategy"
            );
            return Ok(None);
        };
        // Like Java's broker: no consumer of the group online, no assignment.
        let mut clients = match self.consumer_list(group.to_owned()).await {
            Ok(clients) => clients,
            Err(BrokerError::Refused(Refused::NoConsumer { .. })) => return Ok(None),
            Err(e) => return Err(e),
        };
        clients.sort();
        let queues = if entry.mode == RequestMode::Pop {
            let share = entry.pop_share_queue_num;
            match pop_share_assignment(strategy, client_id, &all, &clients, share) {
                Some(queues) => queues,
                None => {
                    return Ok(Some(Assignment {
                        mode: entry.mode,
                        queue_ids: vec![None],
                    }))
                }
            }
        } else {
            allocate(strategy, client_id, &all, &clients)
        };
        Ok(Some(assigned(queues)))
    }
}
