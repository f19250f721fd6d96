//! Acknowledging popped messages (ACK_MESSAGE, BATCH_ACK_MESSAGE), changing their invisible
//! time (CHANGE_MESSAGE_INVISIBLETIME), and NOTIFICATION, which tells a waiting client there is
//! something to pop.

use super::actor::{AckMany, Acked, ChangeInvisible, OrderlyBlocked, QueueAcks};
use super::{PopRequest, SourcesFor};
use crate::broker::handle::{mailbox, BrokerHandle};
use crate::broker::long_poll::WakeQueue;
use crate::broker_api::{BrokerError, ExpressionType, SendBackRequest};
use crate::logic::delay::RETRY_TOPIC_PREFIX;
use crate::logic::pop::{initial_pop_offset, PopMode, Receipt};
use crate::logic::priority::PopWalk;
use crate::logic::queue::GroupQueue;
use crate::refused::Refused;
use skiff_storage::message::property::UNIQ_KEY;
use skiff_storage::message::{decode_records, StoredMessage};
use skiff_storage::metadata::TopicConfig;
use std::time::Duration;

/// What an acknowledgement of a receipt whose invisible time has ended gets. RocketMQ's two
/// front ends differ here, and skiff answers as each does: its gRPC proxy refuses one
/// (INVALID_RECEIPT_HANDLE), its broker takes one over remoting, since an acknowledgement that
/// comes after the invisible time but before the revive still keeps the message from coming back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiredReceipt {
    Refuse,
    Accept,
}

/// An acknowledgement (or invisible-time change) of one popped message, whatever door it came in
/// by: the broker checks the topic, the queue and the offset range as Java's broker does, and the
/// receipt's expiry by its own clock.
#[derive(Debug, Clone)]
pub struct AckRequest {
    pub group: String,
    /// The topic the message was read from (a pop retry topic when the receipt says so).
    pub topic: String,
    pub queue_id: i32,
    pub offset: i64,
    pub receipt: Receipt,
    pub expired: ExpiredReceipt,
}

/// What [`BrokerHandle::acked_message_with`] looked up last: the names it checked, the clock,
/// a topic's read queue count, a queue's offset bounds (read once per batch: a batch is answered
/// against one view of the queue).
#[derive(Default)]
struct AckLookups {
    names: Option<(String, String)>,
    now_ms: Option<i64>,
    read_queues: Option<(String, u32)>,
    bounds: Option<(String, u32, u64, u64)>,
}

/// One message of a batch acknowledgement: `topic` is the topic it was read from (the
/// receipt's kind resolved), `queue_offset` is within the queue, and the pop it answers is
/// the receipt's (its time and mode).
#[derive(Debug, Clone)]
pub struct PoppedAck {
    pub group: String,
    pub topic: String,
    pub queue_id: u32,
    pub queue_offset: u64,
    pub pop_time_ms: i64,
    pub mode: PopMode,
}

/// Adds one acknowledgement to `runs`: to the last run when that names the same queue and pop
/// mode (a batch's entries mostly come queue by queue), else as a run of its own.
fn push_ack(runs: &mut Vec<QueueAcks>, queue: GroupQueue, mode: PopMode, ack: (u64, i64)) {
    match runs.last_mut() {
        Some(run) if run.mode == mode && run.queue == queue => run.acks.push(ack),
        _ => runs.push(QueueAcks {
            queue,
            mode,
            acks: vec![ack],
        }),
    }
}

impl BrokerHandle {
    /// ACK_MESSAGE, one entry of a gRPC AckMessage: answers whether the message was still held.
    pub async fn ack(&self, request: AckRequest) -> Result<bool, BrokerError> {
        let (queue_id, offset) = self.acked_message(&request, true)?;
        self.ack_held(
            &request.group,
            &request.topic,
            queue_id,
            offset,
            &request.receipt,
        )
        .await
    }

    /// Every entry of a batch of acknowledgements, in one call (one hop for a door that has to
    /// hop onto the broker's arbiter), each answered on its own as [`BrokerHandle::ack`] answers.
    pub async fn ack_all(&self, requests: Vec<AckRequest>) -> Vec<Result<bool, BrokerError>> {
        let mut answers: Vec<Option<Result<bool, BrokerError>>> =
            Vec::with_capacity(requests.len());
        let mut acks = Vec::new();
        let mut lookups = AckLookups::default();
        for request in requests {
            match self.acked_message_with(&request, true, &mut lookups) {
                Ok((queue_id, offset)) => {
                    push_ack(
                        &mut acks,
                        GroupQueue::new(request.group, request.topic, queue_id),
                        request.receipt.mode(),
                        (offset, request.receipt.pop_time_ms),
                    );
                    answers.push(None);
                }
                Err(e) => answers.push(Some(Err(e))),
            }
        }
        let mut held = match self.ack_held_all(acks).await {
            Ok(held) => held.into_iter(),
            Err(e) => {
                // The pop actor is gone (the broker is stopping): every entry it did not
                // answer gets that error, the first with its cause.
                let mut first = Some(e);
                return answers
                    .into_iter()
                    .map(|a| {
                        a.unwrap_or_else(|| {
                            Err(first.take().unwrap_or(BrokerError::Closed {
                                what: "the pop actor",
                            }))
                        })
                    })
                    .collect();
            }
        };
        answers
            .into_iter()
            .map(|a| {
                a.or_else(|| held.next())
                    .unwrap_or(Err(BrokerError::Closed {
                        what: "the pop actor's answer",
                    }))
            })
            .collect()
    }

    /// CHANGE_MESSAGE_INVISIBLETIME, gRPC ChangeInvisibleDuration: the message stays invisible
    /// `invisible_ms` from now. Answers the pop time and invisible time its new receipt carries.
    pub async fn change_invisible(
        &self,
        request: AckRequest,
        invisible_ms: i64,
    ) -> Result<(i64, i64), BrokerError> {
        let (queue_id, offset) = self.acked_message(&request, false)?;
        self.change_invisible_time(
            &request.group,
            &request.topic,
            queue_id,
            offset,
            &request.receipt,
            invisible_ms,
        )
        .await
    }

    /// The queue and offset `request` names, checked as Java's ack processor checks them:
    /// the topic exists, the queue is one of its read queues, the offset is stored
    /// (`end_inclusive`: an acknowledgement may name the max offset itself), and, when the door
    /// refuses expired receipts, the receipt is still invisible by the broker's clock.
    fn acked_message(
        &self,
        request: &AckRequest,
        end_inclusive: bool,
    ) -> Result<(u32, u64), BrokerError> {
        self.acked_message_with(request, end_inclusive, &mut AckLookups::default())
    }

    /// [`Self::acked_message`] for one entry of a batch, whose entries mostly name one queue:
    /// what it looks up is kept in `lookups` for the next entry.
    fn acked_message_with(
        &self,
        request: &AckRequest,
        end_inclusive: bool,
        lookups: &mut AckLookups,
    ) -> Result<(u32, u64), BrokerError> {
        let checked = matches!(&lookups.names,
            Some((group, topic)) if *group == request.group && *topic == request.topic);
        if !checked {
            Self::check_names(&request.group, &request.topic)?;
            lookups.names = Some((request.group.clone(), request.topic.clone()));
        }
        if request.expired == ExpiredReceipt::Refuse {
            let now_ms = *lookups
                .now_ms
                .get_or_insert_with(|| self.inner.clock.now_ms());
            let expired_at_ms = request
                .receipt
                .pop_time_ms
                .saturating_add(request.receipt.invisible_ms);
            if expired_at_ms < now_ms {
                return Err(Refused::ReceiptExpired {
                    expired_at_ms,
                    now_ms,
                }
                .into());
            }
        }
        let topic = request.topic.as_str();
        let queues = match &lookups.read_queues {
            Some((known, queues)) if known == topic => *queues,
            _ => {
                let queues = self
                    .inner
                    .registry
                    .queue_nums(topic)?
                    .map(|(read, _)| read)
                    .ok_or_else(|| Refused::TopicNotExist {
                        topic: topic.to_owned(),
                    })?;
                lookups.read_queues = Some((topic.to_owned(), queues));
                queues
            }
        };
        let queue_id = u32::try_from(request.queue_id)
            .ok()
            .filter(|q| *q < queues)
            .ok_or_else(|| Refused::IllegalQueue {
                topic: topic.to_owned(),
                queue_id: request.queue_id.into(),
                queues,
            })?;
        let (min, max) = match &lookups.bounds {
            Some((known, id, min, max)) if known == topic && *id == queue_id => (*min, *max),
            _ => {
                let min = self.inner.reader.min_offset(topic, queue_id);
                let max = self.inner.reader.max_offset(topic, queue_id);
                lookups.bounds = Some((topic.to_owned(), queue_id, min, max));
                (min, max)
            }
        };
        u64::try_from(request.offset)
            .ok()
            .filter(|o| *o >= min && (*o < max || (end_inclusive && *o == max)))
            .map(|offset| (queue_id, offset))
            .ok_or_else(|| {
                Refused::OffsetOutOfQueue {
                    topic: topic.to_owned(),
                    queue_id,
                    offset: request.offset,
                    min,
                    max,
                }
                .into()
            })
    }

    /// ForwardMessageToDeadLetterQueue: the message `request` names (checked as an
    /// acknowledgement is) goes to the group's dead-letter topic, as
    /// [`BrokerHandle::dead_letter_popped`] sends it.
    pub async fn dead_letter(
        &self,
        request: AckRequest,
        max_attempts: u32,
    ) -> Result<(), BrokerError> {
        let (queue_id, offset) = self.acked_message(&request, false)?;
        let read = self
            .inner
            .reader
            .read(&request.topic, queue_id, offset, 1, 1 << 20, None)?;
        let message = decode_records(read.records)
            .ok()
            .and_then(|m| m.into_iter().next())
            .filter(|m| m.queue_offset == offset)
            .ok_or_else(|| Refused::OffsetOutOfQueue {
                topic: request.topic.clone(),
                queue_id,
                offset: request.offset,
                min: self.inner.reader.min_offset(&request.topic, queue_id),
                max: self.inner.reader.max_offset(&request.topic, queue_id),
            })?;
        self.dead_letter_popped(&request.group, &message, &request.receipt, max_attempts)
            .await
    }

    /// The proxy's rule for a message popped `max_attempts` times already: it goes to the
    /// group's dead-letter topic and its pop is acknowledged, instead of reaching the consumer
    /// again.
    pub async fn dead_letter_popped(
        &self,
        group: &str,
        message: &StoredMessage,
        receipt: &Receipt,
        max_attempts: u32,
    ) -> Result<(), BrokerError> {
        self.send_back(SendBackRequest {
            group: group.to_owned(),
            physical_offset: message.physical_offset,
            delay_level: -1,
            origin_msg_id: message.property(UNIQ_KEY).map(str::to_owned),
            origin_topic: Some(message.topic.clone()),
            max_reconsume_times: Some(max_attempts.saturating_sub(1)),
            broker_name: None,
        })
        .await?;
        let topic = receipt.kind.stored_topic(group, &message.topic);
        self.ack_popped(
            group,
            &topic,
            receipt.queue_id,
            message.queue_offset,
            receipt,
        )
        .await?;
        Ok(())
    }

    /// Each entry of BATCH_ACK_MESSAGE (whose offsets are already within the queue), and what
    /// [`BrokerHandle::ack`] does once its checks pass: `topic` is the topic the message was
    /// read from (the receipt's kind resolved). Answers whether the message was still held; an
    /// acknowledgement of one already revived is accepted and changes nothing, as in Java.
    pub async fn ack_popped(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        queue_offset: u64,
        receipt: &Receipt,
    ) -> Result<bool, BrokerError> {
        Self::check_names(group, topic)?;
        self.ack_held(group, topic, queue_id, queue_offset, receipt)
            .await
    }

    /// BATCH_ACK_MESSAGE: every entry (offsets already within their queues) in one look at the
    /// pop actor, each as [`BrokerHandle::ack_popped`] takes it; the first refusal is the answer.
    pub async fn ack_popped_all(&self, acks: Vec<PoppedAck>) -> Result<(), BrokerError> {
        let mut held = Vec::new();
        for ack in acks {
            Self::check_names(&ack.group, &ack.topic)?;
            push_ack(
                &mut held,
                GroupQueue::new(ack.group, ack.topic, ack.queue_id),
                ack.mode,
                (ack.queue_offset, ack.pop_time_ms),
            );
        }
        for answer in self.ack_held_all(held).await? {
            answer?;
        }
        Ok(())
    }

    /// Takes the message out of the group's held pops, once its names are checked.
    async fn ack_held(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        queue_offset: u64,
        receipt: &Receipt,
    ) -> Result<bool, BrokerError> {
        let ack = QueueAcks {
            queue: GroupQueue::new(group, topic, queue_id),
            mode: receipt.mode(),
            acks: vec![(queue_offset, receipt.pop_time_ms)],
        };
        self.ack_held_all(vec![ack])
            .await?
            .pop()
            .unwrap_or(Err(BrokerError::Closed {
                what: "the pop actor's answer",
            }))
    }

    /// Takes messages out of the group's held pops, in one look at the pop actor; an orderly
    /// batch completed by its last ack moves its offset.
    async fn ack_held_all(
        &self,
        acks: Vec<QueueAcks>,
    ) -> Result<Vec<Result<bool, BrokerError>>, BrokerError> {
        if acks.is_empty() {
            return Ok(Vec::new());
        }
        // Each run's queue if it is orderly (an orderly answer may move its queue's offset), and
        // how many answers it has.
        let runs: Vec<(Option<GroupQueue>, usize)> = acks
            .iter()
            .map(|run| {
                let orderly = (run.mode == PopMode::Orderly).then(|| run.queue.clone());
                (orderly, run.acks.len())
            })
            .collect();
        let orderly = runs
            .iter()
            .flat_map(|(queue, acks)| std::iter::repeat_n(queue, *acks));
        let acked = self
            .pop_actor()
            .send(AckMany(acks))
            .await
            .map_err(mailbox("pop"))?;
        let mut answers = Vec::with_capacity(acked.len());
        for (acked, queue) in acked.into_iter().zip(orderly) {
            answers.push(match (acked, queue) {
                (Err(e), _) => Err(e),
                (Ok(Acked::NotHeld), _) => Ok(false),
                (Ok(Acked::MovesOffset(offset)), Some(queue)) => {
                    self.commit(&queue.group, &queue.topic, queue.queue_id, offset)
                        .await
                        .map(|_| {
                            // A pop held on the queue while it was blocked can go on now.
                            self.lite_batch_acknowledged(&queue.topic);
                            self.inner.addrs.long_poll.do_send(WakeQueue {
                                topic: queue.topic.clone(),
                                queue_id: queue.queue_id,
                            });
                            true
                        })
                }
                (Ok(_), _) => Ok(true),
            });
        }
        Ok(answers)
    }

    /// What [`BrokerHandle::change_invisible`] does once its checks (names included) pass.
    async fn change_invisible_time(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        queue_offset: u64,
        receipt: &Receipt,
        invisible_ms: i64,
    ) -> Result<(i64, i64), BrokerError> {
        let now = self.inner.clock.now_ms();
        self.pop_actor()
            .send(ChangeInvisible {
                queue: GroupQueue::new(group, topic, queue_id),
                mode: receipt.mode(),
                offset: queue_offset,
                pop_time_ms: receipt.pop_time_ms,
                batch_start_offset: receipt.checkpoint_offset,
                now_ms: now,
                invisible_ms,
            })
            .await
            .map_err(mailbox("pop"))??;
        if receipt.mode() == PopMode::Orderly {
            self.lite_batch_visible_at(topic, now.saturating_add(invisible_ms));
        }
        // A message no longer held (acknowledged, revived) is left so; the answer is the same,
        // as Java's is.
        Ok(match receipt.mode() {
            // An orderly receipt keeps its pop time: the batch is still that pop's.
            PopMode::Orderly => (
                receipt.pop_time_ms,
                now.saturating_add(invisible_ms)
                    .saturating_sub(receipt.pop_time_ms),
            ),
            PopMode::Unordered => (now, invisible_ms),
        })
    }

    /// NOTIFICATION: whether the group has something to pop in the request's queues or its pop
    /// retry topic; when not, waits up to `poll` for an arrival and looks once more.
    pub async fn pop_notification(
        &self,
        group: &str,
        topic: &str,
        queue_id: Option<u32>,
        orderly: bool,
        poll: Duration,
    ) -> Result<bool, BrokerError> {
        let config = self.pop_topic(topic)?;
        self.pop_group(group)?;
        let request = PopRequest {
            group: group.to_owned(),
            topic: topic.to_owned(),
            queue_id,
            max_messages: 1,
            invisible_ms: 0,
            poll,
            from_min: false,
            expression_type: ExpressionType::Tag,
            expression: None,
            orderly,
        };
        let found = self.has_message(&request, &config).await?;
        if found || poll.is_zero() {
            return Ok(found);
        }
        self.wait_for_arrival(&request, &config, poll).await?;
        self.has_message(&request, &config).await
    }

    async fn has_message(
        &self,
        request: &PopRequest,
        config: &TopicConfig,
    ) -> Result<bool, BrokerError> {
        let now = self.inner.clock.now_ms();
        let sources = self.pop_sources(request, config, PopWalk::ANY_ORDER, SourcesFor::Reading)?;
        let queues = sources
            .iter()
            .map(|(source, queue_id)| GroupQueue::new(&request.group, source, *queue_id))
            .collect();
        let nexts = self.next_offsets(queues).await?;
        for ((source, queue_id), (_, next)) in sources.into_iter().zip(nexts) {
            let max = self.inner.reader.max_offset(&source, queue_id);
            let offset = match next {
                Some(offset) => offset,
                None => initial_pop_offset(
                    request.from_min,
                    source.starts_with(RETRY_TOPIC_PREFIX),
                    self.inner.reader.min_offset(&source, queue_id),
                    max,
                ),
            };
            if max <= offset {
                continue;
            }
            let blocked = request.mode() == PopMode::Orderly
                && self
                    .pop_actor()
                    .send(OrderlyBlocked {
                        queue: GroupQueue::new(&request.group, &source, queue_id),
                        now_ms: now,
                    })
                    .await
                    .map_err(mailbox("pop"))?;
            if !blocked {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
