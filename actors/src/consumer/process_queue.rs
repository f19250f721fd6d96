//! The ProcessQueue: one actor per assigned queue.
//!
//! It pulls (long polling, piggybacked commit), applies flow control, keeps in-flight messages
//! ordered by queue offset and commits only up to the smallest offset still in flight, so a crash
//! re-delivers and never loses. On revoke or shutdown ([`Quit`]) it hands the queue off
//! gracefully (`docs/architecture.md` rule 2): no new batches, wait up to `handoff_timeout` for
//! running work, then an acknowledged persist of the final offset before the queue is released.

use super::consume_dispatcher::{
    CancelQueue, ConsumeConcurrently, ConsumeDispatcher, ConsumeOrderly, ForgetQueue,
    OffsetsConsumed, OrderlyConsumed, ProcessQueueId,
};
use super::listener::{OrderlyStatus, ReceivedMessage};
use super::offset_store::{OffsetStore, PersistQueue, RemoveQueue, UpdateOffset};
use crate::broker_api::{
    BrokerApi, MessageModel, OffsetUpdate, PullRequest, PullResponse, PullStatus,
};
use crate::logic::filter::Subscription;
use crate::logic::inflight::{FlowLimits, InFlight, Pulled};
use crate::logic::queue::MessageQueue;
use crate::quit::Quit;
use actix::prelude::*;
use skiff_storage::message::decode_records;
use std::error::Error;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Clone, Debug)]
pub struct ProcessQueueConfig {
    pub group: String,
    pub message_model: MessageModel,
    pub orderly: bool,
    pub pull_batch_size: u32,
    /// How long the broker may hold a pull that finds nothing (long polling).
    pub suspend_timeout: Duration,
    pub flow_limits: FlowLimits,
    /// Pause before pulling again when flow control holds (RocketMQ: 50 ms).
    pub flow_control_delay: Duration,
    /// Pause before pulling again after a failed pull (RocketMQ: 3 s).
    pub pull_error_delay: Duration,
    pub handoff_timeout: Duration,
    /// Messages per orderly listener call.
    pub consume_batch_size: usize,
    /// Pause before an orderly batch is retried after SUSPEND_CURRENT_QUEUE_A_MOMENT.
    pub suspend_delay: Duration,
}

/// Grants or withdraws the broker lock of an orderly (or exclusively handed-off) queue.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct SetLocked {
    pub locked: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// What a process queue answers to [`Quit`]: the offset its handoff persisted.
pub struct HandoffOutcome {
    pub final_offset: Option<u64>,
    pub persisted: bool,
    /// In-flight work was still running when `handoff_timeout` expired.
    pub timed_out: bool,
}

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "ProcessQueueSnapshot")]
pub struct Observe;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessQueueSnapshot {
    pub queue: MessageQueue,
    pub next_pull_offset: u64,
    pub committed_offset: Option<u64>,
    pub in_flight: usize,
    pub in_flight_bytes: u64,
    pub span: u64,
    pub smallest_in_flight: Option<u64>,
    /// When a listener call of this queue last finished (tokio time).
    pub last_consume: Option<Instant>,
    pub locked: bool,
    pub draining: bool,
    pub pulls: u64,
    pub flow_controlled: u64,
}

pub struct ProcessQueue {
    id: ProcessQueueId,
    queue: MessageQueue,
    config: ProcessQueueConfig,
    subscription: Subscription,
    broker: Rc<dyn BrokerApi>,
    dispatcher: Addr<ConsumeDispatcher>,
    offset_store: Addr<OffsetStore>,
    in_flight: InFlight<Arc<ReceivedMessage>>,
    next_offset: u64,
    committed: Option<u64>,
    locked: bool,
    pulling: bool,
    orderly_consuming: bool,
    draining: bool,
    last_consume: Option<Instant>,
    pulls: u64,
    flow_controlled: u64,
}

/// What a process queue starts from: the queue and its position, and the consumer's shared
/// settings and actors.
pub struct ProcessQueueSetup {
    /// This instance; a queue assigned again gets a new one.
    pub id: ProcessQueueId,
    pub queue: MessageQueue,
    /// Offset of the first pull.
    pub start_offset: u64,
    pub config: ProcessQueueConfig,
    pub subscription: Subscription,
    pub broker: Rc<dyn BrokerApi>,
    pub dispatcher: Addr<ConsumeDispatcher>,
    pub offset_store: Addr<OffsetStore>,
}

impl ProcessQueue {
    /// A process queue that may pull and consume at once: the coordinator starts one only after
    /// it holds the queue's broker lock, or when the consumer needs none. [`SetLocked`] withdraws
    /// the lock when a relock finds it lost.
    pub fn new(setup: ProcessQueueSetup) -> Self {
        ProcessQueue {
            id: setup.id,
            queue: setup.queue,
            config: setup.config,
            subscription: setup.subscription,
            broker: setup.broker,
            dispatcher: setup.dispatcher,
            offset_store: setup.offset_store,
            in_flight: InFlight::new(),
            next_offset: setup.start_offset,
            committed: None,
            locked: true,
            pulling: false,
            orderly_consuming: false,
            draining: false,
            last_consume: None,
            pulls: 0,
            flow_controlled: 0,
        }
    }

    fn may_pull(&self) -> bool {
        !self.draining && !self.pulling && (!self.config.orderly || self.locked)
    }

    fn pull(&mut self, ctx: &mut Context<Self>) {
        if !self.may_pull() {
            return;
        }
        if let Some(reason) = self.in_flight.flow_control(&self.config.flow_limits) {
            self.flow_controlled += 1;
            tracing::trace!(queue = %self.queue, ?reason, "flow control holds the pull");
            ctx.run_later(self.config.flow_control_delay, |act, ctx| act.pull(ctx));
            return;
        }
        self.pulling = true;
        self.pulls += 1;
        let commit_offset = match (self.config.message_model, self.committed) {
            (MessageModel::Clustering, Some(offset)) if offset > 0 => Some(offset),
            _ => None,
        };
        let request = PullRequest {
            group: self.config.group.clone(),
            topic: self.queue.topic.clone(),
            broker_name: self.queue.broker_name.clone(),
            queue_id: self.queue.queue_id,
            queue_offset: self.next_offset,
            max_messages: self.config.pull_batch_size,
            commit_offset,
            suspend_timeout: Some(self.config.suspend_timeout),
            subscription: Some(self.subscription.expression.clone()),
            expression_type: self.subscription.expression_type,
        };
        self.broker
            .pull(request)
            .into_actor(self)
            .map(|result, act, ctx| {
                act.pulling = false;
                match result {
                    Ok(response) => act.on_pull(response, ctx),
                    Err(error) => {
                        tracing::warn!(group = %act.config.group, queue = %act.queue,
                            offset = act.next_offset, error = &error as &dyn Error, "pull failed; retrying later");
                        ctx.run_later(act.config.pull_error_delay, |act, ctx| act.pull(ctx));
                    }
                }
            })
            .spawn(ctx);
    }

    fn on_pull(&mut self, response: PullResponse, ctx: &mut Context<Self>) {
        if self.draining {
            return;
        }
        match response.status {
            PullStatus::Found => {
                let messages = match decode_records(response.records) {
                    Ok(messages) => messages,
                    Err(error) => {
                        tracing::error!(group = %self.config.group, queue = %self.queue,
                            offset = self.next_offset, %error, "pulled records failed to decode");
                        ctx.run_later(self.config.pull_error_delay, |act, ctx| act.pull(ctx));
                        return;
                    }
                };
                self.next_offset = response.next_begin_offset;
                let batch: Vec<Arc<ReceivedMessage>> = messages
                    .into_iter()
                    // The broker filters tags by hash only, and a broker may not evaluate
                    // SQL92 as skiff does; re-check the exact tag or the selector here.
                    .filter(|message| self.subscription.matches_properties(&message.properties))
                    .map(|message| {
                        Arc::new(ReceivedMessage {
                            queue: self.queue.clone(),
                            message,
                        })
                    })
                    .collect();
                self.accept(batch, ctx);
            }
            PullStatus::NoNewMessage(_) | PullStatus::NoMatchedMessage => {
                self.next_offset = response.next_begin_offset;
                // Nothing cached: the offset may move past filtered-out or empty ranges.
                if self.in_flight.is_empty() {
                    self.commit(response.next_begin_offset, true);
                }
            }
            PullStatus::OffsetMoved(reason) => {
                tracing::warn!(group = %self.config.group, queue = %self.queue,
                    offset = self.next_offset, corrected = response.next_begin_offset, ?reason,
                    "pull offset illegal; moving to the broker's offset");
                // Work still in flight belongs to the old position and must not commit now.
                self.in_flight = InFlight::new();
                self.next_offset = response.next_begin_offset;
                self.commit(response.next_begin_offset, false);
                self.offset_store.do_send(PersistQueue {
                    queue: self.queue.clone(),
                    update: OffsetUpdate::Oneway,
                });
            }
        }
        self.pull(ctx);
    }

    fn accept(&mut self, batch: Vec<Arc<ReceivedMessage>>, ctx: &mut Context<Self>) {
        // A re-pull of a range still held (after a lost response) must not dispatch twice.
        let fresh: Vec<Arc<ReceivedMessage>> = batch
            .into_iter()
            .filter(|message| self.in_flight.get(message.queue_offset()).is_none())
            .collect();
        self.in_flight.put(fresh.iter().map(|message| Pulled {
            offset: message.queue_offset(),
            body_size: message.body().len() as u64,
            payload: message.clone(),
        }));
        if fresh.is_empty() {
            return;
        }
        if self.config.orderly {
            self.consume_orderly(ctx);
        } else {
            let batch = ConsumeConcurrently {
                pq: self.id,
                messages: fresh,
                report_to: ctx.address().recipient(),
            };
            self.dispatch(batch, ctx);
        }
    }

    fn consume_orderly(&mut self, ctx: &mut Context<Self>) {
        if self.orderly_consuming || self.draining || !self.locked {
            return;
        }
        let taken: Vec<Arc<ReceivedMessage>> = self
            .in_flight
            .take(self.config.consume_batch_size.max(1))
            .into_iter()
            .map(|(_, message)| message)
            .collect();
        if taken.is_empty() {
            return;
        }
        self.orderly_consuming = true;
        let call = ConsumeOrderly {
            pq: self.id,
            messages: taken,
            report_to: ctx.address().recipient(),
        };
        self.dispatch(call, ctx);
    }

    /// Hands work to the dispatcher, waiting for mailbox room rather than dropping it: a lost
    /// batch would pin the offset.
    fn dispatch<M>(&mut self, message: M, ctx: &mut Context<Self>)
    where
        M: Message<Result = ()> + Send + 'static,
        ConsumeDispatcher: Handler<M>,
    {
        self.dispatcher
            .send(message)
            .into_actor(self)
            .map(|result, act, _| {
                if let Err(error) = result {
                    tracing::error!(group = %act.config.group, queue = %act.queue, %error,
                        "consume dispatcher unavailable");
                }
            })
            .spawn(ctx);
    }

    /// Reports a commit offset to the offset store, which alone applies `increase_only`. Every
    /// increase-only offset this queue reports is at least the last one it reported (removals
    /// report a never-decreasing offset, and a pull's next offset is never below what was
    /// consumed), so `committed`, piggybacked on the next pull, stays what the store caches.
    fn commit(&mut self, offset: u64, increase_only: bool) {
        self.committed = Some(offset);
        self.offset_store.do_send(UpdateOffset {
            queue: self.queue.clone(),
            offset,
            increase_only,
        });
    }

    fn final_offset(&self) -> u64 {
        // Everything below next_offset was pulled; what is still held was not consumed.
        self.in_flight.first_offset().unwrap_or(self.next_offset)
    }
}

impl Actor for ProcessQueue {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(1024);
        self.pull(ctx);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        // The dispatcher drops this queue's late batches until it hears that nothing more can
        // come from here.
        self.dispatcher.do_send(ForgetQueue { pq: self.id });
    }
}

impl Handler<OffsetsConsumed> for ProcessQueue {
    type Result = ();

    fn handle(&mut self, msg: OffsetsConsumed, ctx: &mut Self::Context) {
        self.last_consume = Some(Instant::now());
        if let Some(offset) = self.in_flight.remove(&msg.offsets).commit_offset {
            self.commit(offset, true);
        }
        // Flow control may have been holding the pull back.
        self.pull(ctx);
    }
}

impl Handler<OrderlyConsumed> for ProcessQueue {
    type Result = ();

    fn handle(&mut self, msg: OrderlyConsumed, ctx: &mut Self::Context) {
        self.orderly_consuming = false;
        self.last_consume = Some(Instant::now());
        match msg.status {
            OrderlyStatus::Success => {
                if let Some(offset) = self.in_flight.commit() {
                    // Orderly commits may lower the offset (RocketMQ: increaseOnly = false).
                    self.commit(offset, false);
                }
                self.consume_orderly(ctx);
                self.pull(ctx);
            }
            OrderlyStatus::SuspendCurrentQueueAMoment => {
                self.in_flight.rollback();
                ctx.run_later(self.config.suspend_delay, |act, ctx| {
                    act.consume_orderly(ctx)
                });
            }
        }
    }
}

impl Handler<SetLocked> for ProcessQueue {
    type Result = ();

    fn handle(&mut self, msg: SetLocked, ctx: &mut Self::Context) {
        let was_locked = self.locked;
        self.locked = msg.locked;
        if msg.locked && !was_locked {
            self.pull(ctx);
            self.consume_orderly(ctx);
        }
    }
}

/// The graceful handoff of the queue, on revoke as on shutdown: no new batches, running work
/// awaited up to `handoff_timeout`, then an acknowledged persist of the final offset, then stop.
impl Handler<Quit<HandoffOutcome>> for ProcessQueue {
    type Result = ResponseActFuture<Self, HandoffOutcome>;

    fn handle(&mut self, _: Quit<HandoffOutcome>, _: &mut Self::Context) -> Self::Result {
        self.draining = true;
        let drained = self.dispatcher.send(CancelQueue { pq: self.id });
        let handoff_timeout = self.config.handoff_timeout;
        Box::pin(
            async move {
                tokio::time::timeout(handoff_timeout, drained)
                    .await
                    .is_err()
            }
            .into_actor(self)
            .then(|timed_out, act, _| {
                if act.config.orderly {
                    // A batch taken but not committed goes back: the next owner consumes it.
                    act.in_flight.rollback();
                }
                let final_offset = act.final_offset();
                act.commit(final_offset, true);
                let queue = act.queue.clone();
                let persist = act.offset_store.send(PersistQueue {
                    queue: queue.clone(),
                    update: OffsetUpdate::Acknowledged,
                });
                let store = act.offset_store.clone();
                let group = act.config.group.clone();
                async move {
                    let persisted = match persist.await {
                        Ok(Ok(())) => true,
                        Ok(Err(error)) => {
                            tracing::error!(%group, %queue, offset = final_offset, error = &error as &dyn Error,
                                    "final offset persist failed at handoff");
                            false
                        }
                        Err(error) => {
                            tracing::error!(%group, %queue, offset = final_offset, %error,
                                    "offset store unavailable at handoff");
                            false
                        }
                    };
                    let _ = store.send(RemoveQueue { queue }).await;
                    HandoffOutcome {
                        final_offset: Some(final_offset),
                        persisted,
                        timed_out,
                    }
                }
                .into_actor(act)
            })
            .map(|outcome, act, ctx| {
                tracing::info!(group = %act.config.group, queue = %act.queue,
                        offset = ?outcome.final_offset, timed_out = outcome.timed_out,
                        "queue handed off");
                ctx.stop();
                outcome
            }),
        )
    }
}

impl Handler<Observe> for ProcessQueue {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        MessageResult(ProcessQueueSnapshot {
            queue: self.queue.clone(),
            next_pull_offset: self.next_offset,
            committed_offset: self.committed,
            in_flight: self.in_flight.count(),
            in_flight_bytes: self.in_flight.bytes(),
            span: self.in_flight.span(),
            smallest_in_flight: self.in_flight.first_offset(),
            last_consume: self.last_consume,
            locked: self.locked,
            draining: self.draining,
            pulls: self.pulls,
            flow_controlled: self.flow_controlled,
        })
    }
}
