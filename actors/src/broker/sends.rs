//! [`BrokerHandle`]'s producer-side calls: routes, a client's send whatever door it came in by
//! ([`ClientSend`]: the checks, the queue choice), sends (with the retry topic's dead-letter
//! rule), send-backs, END_TRANSACTION and producer registration.

use crate::broker::handle::{mailbox, BrokerHandle};
use crate::broker::message_store::AppendMessages;
use crate::broker::retry::{SendBackOutcome, SendMessageBack};
use crate::broker::timer::RecallTimer;
use crate::broker::transaction::{EndOutcome, EndTransaction};
use crate::broker_api::{
    Answer, BrokerError, EndTransactionRequest, SendBackRequest, SendRequest, SendResult,
    SendStatus, TopicRoute, TransactionCheckListener,
};
use crate::logic::delay::{dlq_topic, RETRY_TOPIC_PREFIX};
use crate::logic::lite::lmq_name;
use crate::logic::priority::{self, PriorityPlacement};
use crate::logic::recall::{InvalidRecall, RecallHandle};
use crate::logic::sends::{check_client_send, QueueChoice};
use crate::logic::timer::TIMER_MAX_DELAY_MS;
use crate::logic::transaction::is_prepared;
use crate::refused::Refused;
use skiff_storage::message::property::{DELAY, LITE_TOPIC, MAX_RECONSUME_TIMES, PRIORITY};
use skiff_storage::message::{
    offset_message_id, property, without_properties, MessageToAppend, StoredMessage,
};
use skiff_storage::metadata::TopicMessageType;
use std::sync::Arc;
use std::time::Duration;

/// What END_TRANSACTION did to the half at `commit_log_offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionEnded {
    pub commit_log_offset: u64,
    pub outcome: EndOutcome,
}

/// Through [`crate::broker_api::BrokerApi`] a refusal is an error, as the remote client sees an
/// error answer.
impl Answer<()> for TransactionEnded {
    fn answer(self) -> Result<(), BrokerError> {
        match self.outcome {
            EndOutcome::Refused(reason) => Err(Refused::EndTransaction {
                commit_log_offset: self.commit_log_offset,
                reason,
            }
            .into()),
            _ => Ok(()),
        }
    }
}

impl Answer<()> for SendBackOutcome {
    fn answer(self) -> Result<(), BrokerError> {
        Ok(())
    }
}

/// A send from a client, whatever door it came in by (remoting, gRPC, the console): the
/// broker refuses what Java's broker refuses of a client's send, picks the queue, and stores.
#[derive(Debug, Clone)]
pub struct ClientSend {
    /// Messages of one topic; their queue ids are set by `queue`.
    pub messages: Vec<MessageToAppend>,
    pub queue: QueueChoice,
    /// The messages came as one batch request (SEND_BATCH_MESSAGE, a gRPC request of several):
    /// a batch may not hold transaction halves nor go to a retry topic.
    pub batch: bool,
    /// Queues the topic gets if this send creates it (when auto-creation is on), as a remoting
    /// producer asks; `None`: this send never creates its topic (a gRPC send, as the proxy
    /// answers NOT_FOUND for a topic it cannot route; the console's test send).
    pub auto_create_queue_nums: Option<u32>,
}

/// [`check_client_send`] for the topic of each message (checked once per run of one topic).
fn check_topics(
    messages: &[MessageToAppend],
    batch: bool,
    transactional: bool,
) -> Result<(), BrokerError> {
    let mut checked: Option<&str> = None;
    for message in messages {
        if checked != Some(message.topic.as_str()) {
            check_client_send(&message.topic, batch, transactional).map_err(Refused::from)?;
            checked = Some(&message.topic);
        }
    }
    Ok(())
}

impl BrokerHandle {
    /// A client's send: checked, given its queue, stored (see [`ClientSend`]). Nothing is
    /// stored when any check fails.
    pub async fn send(&self, send: ClientSend) -> Result<Vec<SendResult>, BrokerError> {
        let ClientSend {
            mut messages,
            queue,
            batch,
            auto_create_queue_nums,
        } = send;
        let Some(first) = messages.first() else {
            return Ok(Vec::new());
        };
        let topic = first.topic.clone();
        let transactional = messages.iter().any(|m| is_prepared(m.sys_flag));
        check_topics(&messages, batch, transactional)?;
        if auto_create_queue_nums.is_none() && self.inner.registry.queue_nums(&topic)?.is_none() {
            return Err(Refused::TopicNotExist { topic }.into());
        }
        let queue_id = self.send_queue(&topic, &queue, auto_create_queue_nums)?;
        for message in &mut messages {
            message.queue_id = queue_id;
        }
        let single = !batch && messages.len() == 1;
        self.append_sent(messages, auto_create_queue_nums, single)
            .await
    }

    /// For a send that must know its queue before it is stored (a reply, pushed to its requester
    /// first): the checks of [`BrokerHandle::send`], the topic made as a send would make it
    /// (Java's `msgCheck`), and the queue the send then names as [`QueueChoice::Given`].
    pub async fn prepare_send(
        &self,
        topic: &str,
        choice: &QueueChoice,
        auto_create_queue_nums: Option<u32>,
    ) -> Result<u32, BrokerError> {
        check_client_send(topic, false, false).map_err(Refused::from)?;
        let queues = auto_create_queue_nums.unwrap_or(self.inner.config.default_topic_queue_nums);
        self.inner.registry.topic_for_append(topic, queues)?;
        self.send_queue(topic, choice, auto_create_queue_nums)
    }

    /// The queue a client's send to `topic` goes to. A topic that does not exist yet counts
    /// the queues the send would create it with; one with no write queue refuses the send.
    pub fn send_queue(
        &self,
        topic: &str,
        choice: &QueueChoice,
        auto_create_queue_nums: Option<u32>,
    ) -> Result<u32, BrokerError> {
        if let QueueChoice::Given(queue_id) = choice {
            // The store judges the range, as it does for every append.
            return Ok(*queue_id);
        }
        let write_queues = match self.inner.registry.queue_nums(topic)? {
            Some((_, write)) => write,
            None => auto_create_queue_nums.unwrap_or(self.inner.config.default_topic_queue_nums),
        };
        if write_queues == 0 {
            return Err(Refused::NoWriteQueue {
                topic: topic.to_owned(),
            }
            .into());
        }
        Ok(choice.pick(write_queues, rand::random()))
    }

    /// A topic's route: `TopicNotExist` for a topic that does not exist. A route query never
    /// creates a topic (Apache's name server and proxy answer "not found"), so a mistyped name
    /// fails here as it will on a real cluster; sends create topics (see [`Self::publish_route`]).
    pub async fn route(&self, topic: impl Into<String>) -> Result<TopicRoute, BrokerError> {
        let topic = topic.into();
        let config = self
            .inner
            .registry
            .topic(&topic)?
            .ok_or(Refused::TopicNotExist { topic })?;
        Ok(self.single_route(config.name, config.read_queue_nums, config.write_queue_nums))
    }

    /// The route a producer sends by: the topic's route, or, for a topic that does not exist
    /// while auto-creation is on, the queues its first send will create it with (as Java's
    /// producer falls back to the auto-create topic's route). Creates nothing itself.
    pub async fn publish_route(&self, topic: impl Into<String>) -> Result<TopicRoute, BrokerError> {
        let topic = topic.into();
        match self.route(topic.as_str()).await {
            Err(BrokerError::Refused(Refused::TopicNotExist { .. }))
                if self.inner.config.auto_create_topic =>
            {
                check_client_send(&topic, false, false).map_err(Refused::from)?;
                let queues = self.inner.config.default_topic_queue_nums;
                Ok(self.single_route(topic, queues, queues))
            }
            other => other,
        }
    }

    fn single_route(&self, topic: String, read: u32, write: u32) -> TopicRoute {
        TopicRoute::single(topic, self.inner.config.broker_name.clone(), read, write)
    }

    /// SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE: appends a batch (this broker is the
    /// only one, so `broker_name` is not read). A topic the batch auto-creates gets
    /// `auto_create_queue_nums` queues, by default `default_topic_queue_nums`. A message sent to a group's retry topic that
    /// has used up its reconsumes goes to the group's dead-letter topic instead; one carrying
    /// `DELAY` waits in the schedule topic. Answers once the batch is as durable as the flush
    /// policy promises.
    pub async fn send_messages(
        &self,
        request: SendRequest,
    ) -> Result<Vec<SendResult>, BrokerError> {
        let SendRequest {
            messages,
            broker_name: _,
            auto_create_queue_nums,
        } = request;
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        // No client, in process or not, writes the broker's own topics.
        check_topics(&messages, false, false)?;
        let single = messages.len() == 1;
        self.append_sent(messages, auto_create_queue_nums, single)
            .await
    }

    /// Stores checked messages of clients: each topic a client named made first (Java's
    /// `msgCheck`: a transaction half or a delayed message is stored elsewhere, but creates the
    /// topic it will be delivered to, with the queue count the send asks for), a `single`
    /// message's priority (a batch's are left as sent, as Java's batch send leaves them), the
    /// retry topic's dead-letter rule, then the store.
    async fn append_sent(
        &self,
        mut messages: Vec<MessageToAppend>,
        auto_create_queue_nums: Option<u32>,
        single: bool,
    ) -> Result<Vec<SendResult>, BrokerError> {
        let default_queue_nums =
            auto_create_queue_nums.unwrap_or(self.inner.config.default_topic_queue_nums);
        let registry = &self.inner.registry;
        let mut made: Option<&str> = None;
        for message in &messages {
            if made != Some(message.topic.as_str()) {
                // Every send passes here: look the topic up without copying its config.
                if registry.queue_nums(&message.topic)?.is_none() {
                    registry.topic_for_append(&message.topic, default_queue_nums)?;
                }
                made = Some(&message.topic);
            }
        }
        if single {
            if let Some(message) = messages.first_mut() {
                self.place_by_priority(message)?;
                self.place_in_lite_topic(message)?;
            }
        }
        for message in &mut messages {
            self.dead_letter_if_exhausted(message)?;
        }
        let queue_ids: Vec<u32> = messages.iter().map(|m| m.queue_id).collect();
        let stored = self
            .inner
            .addrs
            .store
            .send(AppendMessages {
                messages,
                default_queue_nums,
            })
            .await
            .map_err(mailbox("message store"))??;
        let status = if stored.flush_timed_out {
            SendStatus::FlushDiskTimeout
        } else {
            SendStatus::Ok
        };
        let broker_name = &self.inner.config.broker_name;
        let timers = stored.timers;
        Ok(stored
            .results
            .into_iter()
            .zip(queue_ids)
            .enumerate()
            .map(|(i, (r, queue_id))| SendResult {
                // A delayed message reports the queue it was sent to, as RocketMQ does, and its
                // offset in the schedule queue where it waits.
                broker_name: broker_name.clone(),
                queue_id,
                queue_offset: r.queue_offset,
                physical_offset: r.physical_offset,
                offset_msg_id: offset_message_id(self.inner.store_host, r.physical_offset),
                status,
                recall_handle: timers.get(i).and_then(Option::as_ref).map(|timer| {
                    RecallHandle::encode(&timer.topic, broker_name, timer.due_ms, &timer.message_id)
                }),
            })
            .collect())
    }

    /// RECALL_MESSAGE / RecallMessage: cancels a pending timer message by the recall handle
    /// its send answered, checked as Java's broker checks it ([`RecallHandle`]); answers the
    /// message id the handle names. Durable when answered: the message never fires.
    pub async fn recall(&self, topic: &str, handle: &str) -> Result<String, BrokerError> {
        if !self.inner.config.recall {
            return Err(Refused::Recall(InvalidRecall::Disabled).into());
        }
        if self.inner.registry.queue_nums(topic)?.is_none() {
            return Err(Refused::TopicNotExist {
                topic: topic.to_string(),
            }
            .into());
        }
        let handle = RecallHandle::decode(handle).map_err(Refused::Recall)?;
        let due_ms = handle
            .check(
                topic,
                &self.inner.config.broker_name,
                self.now_ms(),
                TIMER_MAX_DELAY_MS,
            )
            .map_err(Refused::Recall)?;
        self.inner
            .addrs
            .timer
            .send(RecallTimer {
                due_ms,
                message_id: handle.message_id.clone(),
            })
            .await
            .map_err(mailbox("timer"))??;
        tracing::debug!(topic, due_ms, message_id = %handle.message_id, "timer message recalled");
        Ok(handle.message_id)
    }

    /// A priority message goes to the queue its priority picks; a priority on a message of
    /// another kind is dropped ([`priority::placement`]).
    fn place_by_priority(&self, message: &mut MessageToAppend) -> Result<(), BrokerError> {
        if property(&message.properties, PRIORITY).is_none() {
            return Ok(());
        }
        let write_queues = match self.inner.registry.queue_nums(&message.topic)? {
            Some((_, write)) => write,
            None => return Ok(()),
        };
        match priority::placement(&message.properties, write_queues) {
            PriorityPlacement::Unchanged => {}
            PriorityPlacement::Queue(queue_id) => message.queue_id = queue_id,
            PriorityPlacement::DropProperty => {
                message.properties = without_properties(&message.properties, &[PRIORITY]);
            }
        }
        Ok(())
    }

    /// A message naming a lite topic of a LITE parent is stored in the lite topic's queue
    /// (`%LMQ%$parent$lite`, queue 0); to a topic of another type it stays an ordinary message.
    fn place_in_lite_topic(&self, message: &mut MessageToAppend) -> Result<(), BrokerError> {
        let Some(lite) = property(&message.properties, LITE_TOPIC).filter(|l| !l.is_empty()) else {
            return Ok(());
        };
        let parent = self.inner.registry.topic(&message.topic)?;
        if parent.is_some_and(|p| p.message_type == Some(TopicMessageType::Lite)) {
            message.topic = lmq_name(&message.topic, lite);
            message.queue_id = 0;
        }
        Ok(())
    }

    /// RocketMQ's `handleRetryAndDLQ`: a client that could not send back falls back to a plain
    /// send to the retry topic, so the reconsume limit is enforced here too.
    fn dead_letter_if_exhausted(&self, message: &mut MessageToAppend) -> Result<(), BrokerError> {
        let Some(group) = message.topic.strip_prefix(RETRY_TOPIC_PREFIX) else {
            return Ok(());
        };
        let group = group.to_string();
        let from_message = property(&message.properties, MAX_RECONSUME_TIMES)
            .and_then(|v| v.trim().parse::<i32>().ok());
        let max = match from_message {
            Some(max) => max,
            None => match self.inner.registry.group_or_create(&group)? {
                Some(config) => i32::try_from(config.retry_max_times).unwrap_or(i32::MAX),
                None => return Ok(()),
            },
        };
        if message.reconsume_times >= max {
            tracing::warn!(group = %group, topic = %message.topic, reconsume_times = message.reconsume_times, "retry send past max reconsume times goes to the dead-letter queue");
            message.topic = dlq_topic(&group);
            message.queue_id = 0;
            message.properties = without_properties(&message.properties, &[DELAY]);
        }
        Ok(())
    }

    /// CONSUMER_SEND_MSG_BACK (`docs/wire-protocol.md` §4.5).
    pub async fn send_back(
        &self,
        request: SendBackRequest,
    ) -> Result<SendBackOutcome, BrokerError> {
        self.inner
            .addrs
            .retry
            .send(SendMessageBack { request })
            .await
            .map_err(mailbox("retry"))?
    }

    /// END_TRANSACTION (`docs/wire-protocol.md` §3.14): commits, rolls back, or (UNKNOW) leaves a
    /// half message pending.
    pub async fn end_transaction(
        &self,
        request: EndTransactionRequest,
    ) -> Result<TransactionEnded, BrokerError> {
        let commit_log_offset = request.commit_log_offset;
        let outcome = self
            .inner
            .addrs
            .transactions
            .send(EndTransaction { request })
            .await
            .map_err(mailbox("transactions"))??;
        Ok(TransactionEnded {
            commit_log_offset,
            outcome,
        })
    }

    /// An embedded producer of `group` that answers check-backs through `listener`. A producer
    /// heartbeat over the network registers in
    /// [`Connections::register_producer`](crate::broker::connections::Connections::register_producer)
    /// directly.
    pub async fn register_producer(
        &self,
        group: String,
        client_id: String,
        listener: Arc<dyn TransactionCheckListener>,
    ) -> Result<(), BrokerError> {
        self.inner
            .connections
            .register_producer(&group, &client_id, listener);
        Ok(())
    }

    /// Request-reply needs replies pushed to the requester, which only a client reached over
    /// the network gets; in process it is refused.
    pub async fn request(
        &self,
        _message: MessageToAppend,
        _broker_name: String,
        _timeout: Duration,
    ) -> Result<StoredMessage, BrokerError> {
        Err(Refused::RequestReplyNeedsNetwork.into())
    }

    /// A producer leaves one group, or every group when `group` is `None`.
    pub fn unregister_producer(&self, client_id: &str, group: Option<&str>) {
        self.inner.connections.unregister_producer(client_id, group);
    }

    /// Client ids of the producers of `group` that answer check-backs.
    pub fn producers_of(&self, group: &str) -> Vec<String> {
        self.inner.connections.producers_of(group)
    }
}
