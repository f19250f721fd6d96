//! Send-back of failed messages (CONSUMER_SEND_MSG_BACK, `docs/wire-protocol.md` §4.5,
//! `docs/offset-lifecycle.md` §1.E).
//!
//! The consumer names the failed message by commit-log offset; the broker re-reads it, so what
//! goes to the retry topic is exactly what was stored, whatever the client did to its copy.
//! A retried message gets delay level `3 + reconsume_times` (10 s, 30 s, 1 m, ... 2 h) unless the
//! consumer asked for one; past the group's `retry_max_times` (16), or when the consumer asks for
//! a negative level, it goes to `%DLQ%group` instead, where nothing consumes it automatically.

use crate::broker::message_store::{AppendMessages, MessageStoreActor};
use crate::broker::registry::Registry;
use crate::broker_api::{BrokerError, SendBackRequest};
use crate::logic::delay::{dlq_topic, retry_topic, send_back_decision, SendBackTarget};
use crate::quit::Quit;
use crate::refused::Refused;
use actix::prelude::*;
use skiff_storage::message::property::{DELAY, ORIGIN_MESSAGE_ID, RETRY_TOPIC};
use skiff_storage::message::{with_properties, without_properties, MessageToAppend};
use skiff_storage::store::StoreReader;

/// Sends a consumed-and-failed message back for a later retry (or to the dead-letter queue).
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<SendBackOutcome, BrokerError>")]
pub struct SendMessageBack {
    pub request: SendBackRequest,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendBackOutcome {
    Retry {
        topic: String,
        queue_id: u32,
        delay_level: u32,
        reconsume_times: i32,
    },
    DeadLetter {
        topic: String,
        reconsume_times: i32,
    },
    /// The group has no retry queues: RocketMQ answers success and drops the message.
    Dropped,
}

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "RetrySnapshot")]
pub struct Observe;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetrySnapshot {
    pub retried: u64,
    pub dead_lettered: u64,
    pub dropped: u64,
    pub failed: u64,
}

pub struct RetryActor {
    reader: StoreReader,
    registry: Registry,
    store: Addr<MessageStoreActor>,
    snapshot: RetrySnapshot,
}

const MAILBOX_CAPACITY: usize = 1024;

impl RetryActor {
    pub(crate) fn new(
        reader: StoreReader,
        registry: Registry,
        store: Addr<MessageStoreActor>,
    ) -> Self {
        RetryActor {
            reader,
            registry,
            store,
            snapshot: RetrySnapshot::default(),
        }
    }

    /// Decides where the message goes and builds the copy to append.
    fn plan(
        &self,
        request: &SendBackRequest,
    ) -> Result<Option<(MessageToAppend, SendBackOutcome)>, BrokerError> {
        let group = self
            .registry
            .group_or_create(&request.group)?
            .ok_or_else(|| {
                BrokerError::Refused(Refused::GroupNotExist {
                    group: request.group.clone(),
                })
            })?;
        if group.retry_queue_nums == 0 {
            tracing::info!(group = %request.group, offset = request.physical_offset, "retry queues disabled; failed message dropped");
            return Ok(None);
        }
        let original = self
            .reader
            .read_by_physical_offset(request.physical_offset)?
            .ok_or(BrokerError::Refused(Refused::MessageNotFound {
                physical_offset: request.physical_offset,
            }))?;
        let max_reconsume_times = request.max_reconsume_times.unwrap_or(group.retry_max_times);
        let reconsume_times = original.reconsume_times;
        let target = send_back_decision(
            reconsume_times,
            i32::try_from(max_reconsume_times).unwrap_or(i32::MAX),
            request.delay_level,
        );
        // Java counts the send-back itself as a reconsume, whichever topic it lands in.
        let next_times = reconsume_times.saturating_add(1);
        let mut properties = original.properties.clone();
        if original.property(RETRY_TOPIC).is_none() {
            properties = with_properties(&properties, &[(RETRY_TOPIC, &original.topic)]);
        }
        if original.property(ORIGIN_MESSAGE_ID).is_none() {
            properties = with_properties(
                &properties,
                &[(ORIGIN_MESSAGE_ID, &original.offset_msg_id())],
            );
        }
        let delay_level = match target {
            SendBackTarget::Retry { delay_level } => u32::from(delay_level),
            SendBackTarget::DeadLetter => {
                let topic = dlq_topic(&request.group);
                let copy = MessageToAppend {
                    topic: topic.clone(),
                    queue_id: 0,
                    reconsume_times: next_times,
                    properties: without_properties(&properties, &[DELAY]),
                    ..MessageToAppend::copy_of(&original)
                };
                return Ok(Some((
                    copy,
                    SendBackOutcome::DeadLetter {
                        topic,
                        reconsume_times: next_times,
                    },
                )));
            }
        };
        let topic = retry_topic(&request.group);
        let queue_id = rand::random::<u32>() % group.retry_queue_nums;
        let copy = MessageToAppend {
            topic: topic.clone(),
            queue_id,
            reconsume_times: next_times,
            properties: with_properties(&properties, &[(DELAY, &delay_level.to_string())]),
            ..MessageToAppend::copy_of(&original)
        };
        Ok(Some((
            copy,
            SendBackOutcome::Retry {
                topic,
                queue_id,
                delay_level,
                reconsume_times: next_times,
            },
        )))
    }
}

impl Actor for RetryActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
    }
}

impl Handler<SendMessageBack> for RetryActor {
    type Result = ResponseActFuture<Self, Result<SendBackOutcome, BrokerError>>;

    fn handle(&mut self, msg: SendMessageBack, _: &mut Self::Context) -> Self::Result {
        let request = msg.request;
        let (copy, outcome) = match self.plan(&request) {
            Ok(Some(plan)) => plan,
            Ok(None) => {
                self.snapshot.dropped += 1;
                return Box::pin(fut::ready(Ok(SendBackOutcome::Dropped)));
            }
            Err(e) => {
                self.snapshot.failed += 1;
                return Box::pin(fut::ready(Err(e)));
            }
        };
        let store = self.store.clone();
        let append = async move {
            store
                .send(AppendMessages {
                    messages: vec![copy],
                    default_queue_nums: 1,
                })
                .await
                .map_err(|source| BrokerError::Mailbox {
                    actor: "message store",
                    source,
                })?
        };
        Box::pin(append.into_actor(self).map(move |appended, act, _| {
            match appended {
                Ok(_) => {
                    match &outcome {
                        SendBackOutcome::DeadLetter { topic, reconsume_times } => {
                            act.snapshot.dead_lettered += 1;
                            tracing::warn!(group = %request.group, topic = %topic, offset = request.physical_offset, reconsume_times, "message moved to the dead-letter queue");
                        }
                        SendBackOutcome::Retry { topic, queue_id, delay_level, reconsume_times } => {
                            act.snapshot.retried += 1;
                            tracing::debug!(group = %request.group, topic = %topic, queue_id, offset = request.physical_offset, delay_level, reconsume_times, "message sent back for retry");
                        }
                        SendBackOutcome::Dropped => {}
                    }
                    Ok(outcome)
                }
                Err(e) => {
                    act.snapshot.failed += 1;
                    Err(e)
                }
            }
        }))
    }
}

/// Stops the actor. Nothing is persisted here: a send-back still appending is answered by the
/// store or fails.
impl Handler<Quit> for RetryActor {
    type Result = ();

    fn handle(&mut self, _: Quit, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl Handler<Observe> for RetryActor {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.snapshot.clone())
    }
}
