//! The message-store actor: the single writer of the commit log and consume queues.
//!
//! Appends run on the actor (they are ordered and must not interleave); waiting for the fsync
//! under the `Sync` flush policy is handed to the store's group-commit thread, so every sender
//! whose batch was appended while an fsync was pending shares the next one (group commit).

use crate::broker::long_poll::{NotifyArrivals, QueueArrival};
use crate::broker::registry::Registry;
use crate::broker::schedule::route_delayed;
use crate::broker::Stop;
use crate::broker_api::BrokerError;
use actix::prelude::*;
use skiff_storage::message::MessageToAppend;
use skiff_storage::metadata::TopicConfig;
use skiff_storage::store::{AppendResult, FlushPolicy, MessageStore, StoreError, SyncWaiter};
use std::collections::BTreeMap;
use tokio::sync::oneshot;

/// Appends a batch; answers once the batch is as durable as the flush policy promises.
/// Messages carrying a `DELAY` level are diverted to the schedule topic first.
#[derive(Message, Debug)]
#[rtype(result = "Result<Vec<AppendResult>, BrokerError>")]
pub struct AppendMessages {
    pub messages: Vec<MessageToAppend>,
    /// Queue count of a topic this append auto-creates (the producer's `defaultTopicQueueNums`).
    pub default_queue_nums: u32,
}

/// Registers a listener told after every append which queues got new max offsets.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SubscribeArrivals {
    pub recipient: Recipient<NotifyArrivals>,
}

/// fsyncs the commit log and consume queues.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "Result<(), BrokerError>")]
pub struct FlushStore;

/// Flushes and closes the store; later appends fail.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "Result<(), BrokerError>")]
pub struct CloseStore;

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "MessageStoreSnapshot")]
pub struct Observe;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageStoreSnapshot {
    pub batches: u64,
    pub messages: u64,
    pub failed_batches: u64,
    /// Messages diverted to the schedule topic because they carried a delay level.
    pub delayed: u64,
    pub created_topics: Vec<String>,
    /// Arrival notices dropped because a listener's mailbox was full (its sweep catches up).
    pub dropped_notices: u64,
    pub closed: bool,
}

pub struct MessageStoreActor {
    store: Option<MessageStore>,
    waiter: SyncWaiter,
    flush_policy: FlushPolicy,
    registry: Registry,
    listeners: Vec<Recipient<NotifyArrivals>>,
    snapshot: MessageStoreSnapshot,
}

const MAILBOX_CAPACITY: usize = 1024;

impl MessageStoreActor {
    pub(crate) fn new(store: MessageStore, flush_policy: FlushPolicy, registry: Registry) -> Self {
        MessageStoreActor {
            waiter: store.sync_waiter(),
            store: Some(store),
            flush_policy,
            registry,
            listeners: Vec::new(),
            snapshot: MessageStoreSnapshot::default(),
        }
    }

    /// Validates the whole batch before writing any of it, so a bad message fails the batch
    /// without leaving half of it stored.
    fn prepare(
        &mut self,
        messages: Vec<MessageToAppend>,
        default_queue_nums: u32,
    ) -> Result<Vec<MessageToAppend>, BrokerError> {
        let mut prepared = Vec::with_capacity(messages.len());
        // A batch is one topic (a delayed message moves to the schedule topic): resolving it
        // per message cloned the same config 25 times per request.
        let mut resolved: Option<TopicConfig> = None;
        for message in messages {
            let message = match route_delayed(message) {
                Ok((message, delayed)) => {
                    if delayed {
                        self.snapshot.delayed += 1;
                    }
                    message
                }
                Err(reason) => return Err(BrokerError::InvalidRequest { reason }),
            };
            let topic = match resolved.take() {
                Some(topic) if topic.name == message.topic => topic,
                _ => {
                    let (topic, created) = self
                        .registry
                        .topic_for_append(&message.topic, default_queue_nums)?;
                    if created {
                        self.snapshot.created_topics.push(topic.name.clone());
                    }
                    topic
                }
            };
            if !topic.is_writable() {
                return Err(BrokerError::InvalidRequest {
                    reason: format!("topic {} is not writable", topic.name),
                });
            }
            let queues = topic.write_queue_nums.max(topic.read_queue_nums);
            if message.queue_id >= queues {
                return Err(BrokerError::InvalidRequest {
                    reason: format!(
                        "queue id {} is illegal: topic {} has {} queues",
                        message.queue_id, topic.name, queues
                    ),
                });
            }
            prepared.push(message);
            resolved = Some(topic);
        }
        Ok(prepared)
    }

    fn announce(&mut self, messages: &[MessageToAppend], results: &[AppendResult]) {
        let mut maxima: BTreeMap<(&str, u32), u64> = BTreeMap::new();
        for (message, result) in messages.iter().zip(results) {
            let entry = maxima
                .entry((message.topic.as_str(), result.queue_id))
                .or_default();
            *entry = (*entry).max(result.queue_offset + 1);
        }
        let queues: Vec<QueueArrival> = maxima
            .into_iter()
            .map(|((topic, queue_id), max_offset)| QueueArrival {
                topic: topic.to_string(),
                queue_id,
                max_offset,
            })
            .collect();
        for listener in &self.listeners {
            // A full listener mailbox must not stall the writer; each listener also sweeps the
            // store on a timer, so a dropped notice costs latency, never a message.
            if let Err(e) = listener.try_send(NotifyArrivals {
                queues: queues.clone(),
            }) {
                self.snapshot.dropped_notices += 1;
                tracing::debug!(error = %e, "arrival notice dropped");
            }
        }
    }
}

impl Actor for MessageStoreActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
    }
}

fn closed_error() -> BrokerError {
    BrokerError::Store(StoreError::Io {
        path: "<message store>".into(),
        source: std::io::Error::new(std::io::ErrorKind::NotConnected, "message store is closed"),
    })
}

impl Handler<AppendMessages> for MessageStoreActor {
    type Result = ResponseFuture<Result<Vec<AppendResult>, BrokerError>>;

    fn handle(&mut self, msg: AppendMessages, _: &mut Self::Context) -> Self::Result {
        let prepared = match self.prepare(msg.messages, msg.default_queue_nums) {
            Ok(prepared) => prepared,
            Err(e) => {
                self.snapshot.failed_batches += 1;
                return Box::pin(async move { Err(e) });
            }
        };
        let Some(store) = self.store.as_mut() else {
            return Box::pin(async { Err(closed_error()) });
        };
        let appended = match self.flush_policy {
            FlushPolicy::Async => store.append_batch(&prepared).map(|r| (r, None)),
            FlushPolicy::Sync => store
                .append_batch_nowait(&prepared)
                .map(|(r, end)| (r, Some(end))),
        };
        let (results, durable_at) = match appended {
            Ok(ok) => ok,
            Err(e) => {
                self.snapshot.failed_batches += 1;
                tracing::warn!(error = %e, "append failed");
                return Box::pin(async move { Err(BrokerError::Store(e)) });
            }
        };
        self.snapshot.batches += 1;
        self.snapshot.messages += results.len() as u64;
        self.announce(&prepared, &results);
        let Some(end) = durable_at else {
            return Box::pin(async move { Ok(results) });
        };
        let waiter = self.waiter.clone();
        Box::pin(async move {
            // Registered on the first poll, not in the handler: actix spawns a response future
            // and polls it only after the actor has handled every message already in its
            // mailbox, so a client's concurrent sends are all appended before the group-commit
            // thread starts the fsync that covers them. Registering in the handler woke it after
            // the first append and cost a second fsync per burst (a third of produce throughput).
            let (durable_tx, durable_rx) = oneshot::channel();
            waiter.notify_when_durable(end, move |outcome| {
                // A closed receiver means the sender gave up on the answer; nobody is left to tell.
                let _ = durable_tx.send(outcome);
            });
            match durable_rx.await {
                Ok(Ok(())) => Ok(results),
                Ok(Err(e)) => Err(BrokerError::Store(e)),
                Err(_) => Err(BrokerError::Store(StoreError::Io {
                    path: "<commit log>".into(),
                    source: std::io::Error::other(
                        "group-commit wait failed: the durability request was dropped unanswered",
                    ),
                })),
            }
        })
    }
}

impl Handler<SubscribeArrivals> for MessageStoreActor {
    type Result = ();

    fn handle(&mut self, msg: SubscribeArrivals, _: &mut Self::Context) {
        self.listeners.push(msg.recipient);
    }
}

impl Handler<FlushStore> for MessageStoreActor {
    type Result = Result<(), BrokerError>;

    fn handle(&mut self, _: FlushStore, _: &mut Self::Context) -> Self::Result {
        match self.store.as_mut() {
            Some(store) => store.flush().map_err(BrokerError::Store),
            None => Err(closed_error()),
        }
    }
}

impl Handler<CloseStore> for MessageStoreActor {
    type Result = Result<(), BrokerError>;

    fn handle(&mut self, _: CloseStore, ctx: &mut Self::Context) -> Self::Result {
        self.snapshot.closed = true;
        let Some(store) = self.store.take() else {
            return Ok(());
        };
        let outcome = store.close().map_err(BrokerError::Store);
        if let Err(e) = &outcome {
            tracing::error!(error = %e, "closing the message store failed");
        }
        ctx.stop();
        outcome
    }
}

impl Handler<Stop> for MessageStoreActor {
    type Result = ();

    fn handle(&mut self, _: Stop, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl Handler<Observe> for MessageStoreActor {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.snapshot.clone())
    }
}
