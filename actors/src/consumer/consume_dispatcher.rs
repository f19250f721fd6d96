//! The ConsumeDispatcher: runs the user's listener with bounded concurrency.
//!
//! Concurrent mode splits each pulled batch into listener calls of `consume_batch_size`,
//! applies the ackIndex rule, sends failures back to `%RETRY%group` (re-consuming locally after
//! `local_retry_delay` when the send-back fails) and reports finished offsets to the process
//! queue. A call running longer than `consume_timeout` is aborted and its messages sent back, so
//! a stuck message never pins the committed offset (`docs/architecture.md` rule 1). Orderly mode
//! runs one call per request; the process queue keeps the per-queue order and locks.

use super::listener::{Batch, ConsumeStatus, Listener, OrderlyStatus};
use crate::broker_api::{BrokerApi, MessageModel, SendBackRequest};
use crate::logic::ack;
use crate::logic::delay::FIRST_RETRY_DELAY_LEVEL;
use actix::prelude::*;
use std::collections::{HashMap, VecDeque};
use std::error::Error;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Identifies one process-queue instance (a queue assigned again gets a new id).
pub type ProcessQueueId = u64;

/// Offsets whose consumption is over (succeeded, sent back, dropped or timed out): the process
/// queue removes them and commits.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct OffsetsConsumed {
    pub offsets: Vec<u64>,
}

/// Outcome of an orderly call, for the process queue to commit or roll back the batch it took.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct OrderlyConsumed {
    pub status: OrderlyStatus,
}

/// A pulled batch for concurrent consumption.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ConsumeConcurrently {
    pub pq: ProcessQueueId,
    pub messages: Batch,
    pub report_to: Recipient<OffsetsConsumed>,
}

/// One orderly call.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ConsumeOrderly {
    pub pq: ProcessQueueId,
    pub messages: Batch,
    pub report_to: Recipient<OrderlyConsumed>,
}

/// Drops a process queue's not-yet-started work and resolves once its running calls (and their
/// send-backs) are over: the first half of a graceful handoff.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct CancelQueue {
    pub pq: ProcessQueueId,
}

/// The process queue has stopped, so nothing more can arrive from it: its cancellation is
/// forgotten once its last open work item is done.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct ForgetQueue {
    pub pq: ProcessQueueId,
}

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "DispatcherSnapshot")]
pub struct Observe;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DispatcherSnapshot {
    pub pending_calls: usize,
    pub running_calls: usize,
    pub consumed_ok: u64,
    pub consume_failed: u64,
    pub sent_back: u64,
    pub send_back_failed: u64,
    pub local_retries: u64,
    pub timed_out: u64,
    /// Handed-off process queues whose late batches are still being dropped.
    pub cancelled_queues: usize,
}

#[derive(Clone, Debug)]
pub struct DispatcherConfig {
    pub group: String,
    pub message_model: MessageModel,
    pub max_concurrency: usize,
    pub consume_batch_size: usize,
    pub consume_timeout: Duration,
    pub local_retry_delay: Duration,
}

enum Reply {
    Concurrent(Recipient<OffsetsConsumed>),
    Orderly(Recipient<OrderlyConsumed>),
}

struct Call {
    pq: ProcessQueueId,
    messages: Batch,
    reply: Reply,
}

struct Running {
    pq: ProcessQueueId,
    started: Instant,
    abort: tokio::task::AbortHandle,
    messages: Batch,
    orderly: bool,
    reply: Option<Reply>,
}

pub struct ConsumeDispatcher {
    config: DispatcherConfig,
    broker: Rc<dyn BrokerApi>,
    listener: Listener,
    pending: VecDeque<Call>,
    running: HashMap<u64, Running>,
    next_call_id: u64,
    // Calls plus send-backs still open per process queue; a handoff waits for zero.
    open_work: HashMap<ProcessQueueId, usize>,
    idle_waiters: HashMap<ProcessQueueId, Vec<oneshot::Sender<()>>>,
    // Process queues being handed off: batches that arrive for them are dropped (the next owner
    // consumes those messages). An entry lives until its process queue has stopped and its last
    // open work item is done.
    cancelled: HashMap<ProcessQueueId, Handoff>,
    snapshot: DispatcherSnapshot,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handoff {
    /// The process queue may still send batches that were under way when it was cancelled.
    Draining,
    /// The process queue has stopped; only this dispatcher's own open work remains.
    QueueStopped,
}

impl ConsumeDispatcher {
    pub fn new(config: DispatcherConfig, broker: Rc<dyn BrokerApi>, listener: Listener) -> Self {
        ConsumeDispatcher {
            config,
            broker,
            listener,
            pending: VecDeque::new(),
            running: HashMap::new(),
            next_call_id: 0,
            open_work: HashMap::new(),
            idle_waiters: HashMap::new(),
            cancelled: HashMap::new(),
            snapshot: DispatcherSnapshot::default(),
        }
    }

    fn enqueue(&mut self, call: Call) {
        *self.open_work.entry(call.pq).or_default() += 1;
        self.pending.push_back(call);
    }

    fn work_done(&mut self, pq: ProcessQueueId) {
        let remaining = match self.open_work.get_mut(&pq) {
            Some(count) => {
                *count = count.saturating_sub(1);
                *count
            }
            None => 0,
        };
        if remaining == 0 {
            self.open_work.remove(&pq);
            for waiter in self.idle_waiters.remove(&pq).unwrap_or_default() {
                let _ = waiter.send(());
            }
            if self.cancelled.get(&pq) == Some(&Handoff::QueueStopped) {
                self.cancelled.remove(&pq);
            }
        }
    }

    fn pump(&mut self, ctx: &mut Context<Self>) {
        while self.running.len() < self.config.max_concurrency {
            let Some(call) = self.pending.pop_front() else {
                break;
            };
            let id = self.next_call_id;
            self.next_call_id += 1;
            let messages = call.messages.clone();
            let (task, orderly) = match &self.listener {
                Listener::Concurrent(listener) => {
                    let future = listener(messages.clone());
                    (
                        actix_rt::spawn(async move { CallOutcome::Concurrent(future.await) }),
                        false,
                    )
                }
                Listener::Orderly(listener) => {
                    let future = listener(messages.clone());
                    (
                        actix_rt::spawn(async move { CallOutcome::Orderly(future.await) }),
                        true,
                    )
                }
            };
            self.running.insert(
                id,
                Running {
                    pq: call.pq,
                    started: Instant::now(),
                    abort: task.abort_handle(),
                    messages,
                    orderly,
                    reply: Some(call.reply),
                },
            );
            task.into_actor(self)
                .map(move |joined, act, ctx| act.call_finished(id, joined, ctx))
                .spawn(ctx);
        }
    }

    fn call_finished(
        &mut self,
        id: u64,
        joined: Result<CallOutcome, tokio::task::JoinError>,
        ctx: &mut Context<Self>,
    ) {
        // Absent when the timeout sweep already took the call over.
        let Some(mut running) = self.running.remove(&id) else {
            return;
        };
        let reply = running.reply.take();
        let outcome = joined.unwrap_or_else(|error| {
            tracing::warn!(group = %self.config.group, %error, "listener panicked; consuming later");
            if running.orderly {
                CallOutcome::Orderly(OrderlyStatus::SuspendCurrentQueueAMoment)
            } else {
                CallOutcome::Concurrent(ConsumeStatus::ReconsumeLater)
            }
        });
        match (outcome, reply) {
            (CallOutcome::Orderly(status), Some(Reply::Orderly(report_to))) => {
                if status == OrderlyStatus::Success {
                    self.snapshot.consumed_ok += running.messages.len() as u64;
                } else {
                    self.snapshot.consume_failed += running.messages.len() as u64;
                }
                let pq = running.pq;
                report_to
                    .send(OrderlyConsumed { status })
                    .into_actor(self)
                    .map(move |_, act, _| act.work_done(pq))
                    .spawn(ctx);
            }
            (CallOutcome::Concurrent(status), Some(Reply::Concurrent(report_to))) => {
                let split = ack::split_ack(running.messages.len(), status_to_ack(status));
                let mut succeeded = Vec::with_capacity(split.succeeded.len());
                let mut failed = Vec::new();
                for index in split.succeeded {
                    succeeded.push(running.messages[index].queue_offset());
                }
                for index in split.failed {
                    failed.push(running.messages[index].clone());
                }
                self.snapshot.consumed_ok += succeeded.len() as u64;
                self.snapshot.consume_failed += failed.len() as u64;
                self.settle(running.pq, succeeded, failed, 0, report_to, ctx);
            }
            _ => self.work_done(running.pq),
        }
        self.pump(ctx);
    }

    /// Reports succeeded offsets and deals with failed messages (send back, or retry locally
    /// when the send-back fails; broadcasting drops them as RocketMQ does).
    fn settle(
        &mut self,
        pq: ProcessQueueId,
        mut done: Vec<u64>,
        failed: Batch,
        delay_level: i32,
        report_to: Recipient<OffsetsConsumed>,
        ctx: &mut Context<Self>,
    ) {
        if failed.is_empty() || self.config.message_model == MessageModel::Broadcasting {
            done.extend(failed.iter().map(|m| m.queue_offset()));
            self.report_and_finish(
                pq,
                Some((report_to, OffsetsConsumed { offsets: done })),
                ctx,
            );
            return;
        }
        let sends: Vec<_> = failed
            .iter()
            .map(|message| {
                self.broker.send_back(SendBackRequest {
                    group: self.config.group.clone(),
                    physical_offset: message.message.physical_offset,
                    delay_level,
                    origin_msg_id: Some(message.msg_id()),
                    origin_topic: Some(message.origin_topic().to_string()),
                    max_reconsume_times: None,
                    broker_name: Some(message.queue.broker_name.clone()),
                })
            })
            .collect();
        async move {
            let mut results = Vec::with_capacity(sends.len());
            for send in sends {
                results.push(send.await);
            }
            results
        }
        .into_actor(self)
        .map(move |results, act, ctx| {
            let mut retry_locally = Vec::new();
            for (message, result) in failed.into_iter().zip(results) {
                match result {
                    Ok(()) => {
                        act.snapshot.sent_back += 1;
                        done.push(message.queue_offset());
                    }
                    Err(error) => {
                        act.snapshot.send_back_failed += 1;
                        tracing::warn!(group = %act.config.group, queue = %message.queue,
                            offset = message.queue_offset(), error = &error as &dyn Error,
                            "send-back failed; consuming again locally");
                        retry_locally.push(message);
                    }
                }
            }
            if !retry_locally.is_empty() {
                act.retry_locally(pq, retry_locally, report_to.clone(), ctx);
            }
            act.report_and_finish(
                pq,
                Some((report_to, OffsetsConsumed { offsets: done })),
                ctx,
            );
        })
        .spawn(ctx);
    }

    /// Delivers a report and only then closes the work item, so a handoff waiting for idle
    /// sees every report already applied by the process queue.
    fn report_and_finish(
        &mut self,
        pq: ProcessQueueId,
        report: Option<(Recipient<OffsetsConsumed>, OffsetsConsumed)>,
        ctx: &mut Context<Self>,
    ) {
        let Some((report_to, report)) = report.filter(|(_, r)| !r.offsets.is_empty()) else {
            self.work_done(pq);
            return;
        };
        // Waiting (not try_send) because a lost report would pin the offset forever.
        report_to
            .send(report)
            .into_actor(self)
            .map(move |_, act, _| act.work_done(pq))
            .spawn(ctx);
    }

    /// Re-consumes messages whose send-back failed after `local_retry_delay`; they stay in the
    /// process queue meanwhile, so the offset cannot pass them.
    fn retry_locally(
        &mut self,
        pq: ProcessQueueId,
        messages: Batch,
        report_to: Recipient<OffsetsConsumed>,
        ctx: &mut Context<Self>,
    ) {
        self.snapshot.local_retries += messages.len() as u64;
        *self.open_work.entry(pq).or_default() += 1;
        let messages: Batch = messages
            .into_iter()
            .map(|message| {
                let mut again = (*message).clone();
                again.message.reconsume_times += 1;
                Arc::new(again)
            })
            .collect();
        ctx.run_later(self.config.local_retry_delay, move |act, ctx| {
            // Asked before `work_done`, which may forget a stopped queue's cancellation.
            let cancelled = act.cancelled.contains_key(&pq);
            act.work_done(pq);
            if cancelled {
                return;
            }
            act.enqueue(Call {
                pq,
                messages,
                reply: Reply::Concurrent(report_to),
            });
            act.pump(ctx);
        });
    }

    /// Aborts concurrent calls older than `consume_timeout` and sends their messages back (at
    /// the first retry level, as RocketMQ's cleanExpiredMsg) so the offset moves on.
    fn sweep_timed_out(&mut self, ctx: &mut Context<Self>) {
        let now = Instant::now();
        let timeout = self.config.consume_timeout;
        let expired: Vec<u64> = self
            .running
            .iter()
            .filter(|(_, running)| {
                !running.orderly && now.duration_since(running.started) >= timeout
            })
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            let Some(mut running) = self.running.remove(&id) else {
                continue;
            };
            running.abort.abort();
            self.snapshot.timed_out += running.messages.len() as u64;
            for message in &running.messages {
                tracing::warn!(group = %self.config.group, queue = %message.queue,
                    offset = message.queue_offset(), timeout_ms = timeout.as_millis() as u64,
                    "consume timed out; sending the message back so the offset can move on");
            }
            if let Some(Reply::Concurrent(report_to)) = running.reply.take() {
                self.settle(
                    running.pq,
                    Vec::new(),
                    running.messages,
                    FIRST_RETRY_DELAY_LEVEL,
                    report_to,
                    ctx,
                );
            } else {
                self.work_done(running.pq);
            }
        }
        self.pump(ctx);
    }
}

enum CallOutcome {
    Concurrent(ConsumeStatus),
    Orderly(OrderlyStatus),
}

fn status_to_ack(status: ConsumeStatus) -> ack::ConsumeOutcome {
    match status {
        ConsumeStatus::Success { ack_index } => ack::ConsumeOutcome::Success { ack_index },
        ConsumeStatus::ReconsumeLater => ack::ConsumeOutcome::ReconsumeLater,
    }
}

impl Actor for ConsumeDispatcher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let sweep = (self.config.consume_timeout / 4)
            .clamp(Duration::from_millis(100), Duration::from_secs(60));
        ctx.run_interval(sweep, |act, ctx| act.sweep_timed_out(ctx));
    }
}

impl Handler<ConsumeConcurrently> for ConsumeDispatcher {
    type Result = ();

    fn handle(&mut self, msg: ConsumeConcurrently, ctx: &mut Self::Context) {
        if self.cancelled.contains_key(&msg.pq) {
            // Arrived after its queue was handed off: the next owner consumes these.
            return;
        }
        let batch_size = self.config.consume_batch_size.max(1);
        let mut messages = msg.messages;
        while !messages.is_empty() {
            let rest = messages.split_off(batch_size.min(messages.len()));
            self.enqueue(Call {
                pq: msg.pq,
                messages,
                reply: Reply::Concurrent(msg.report_to.clone()),
            });
            messages = rest;
        }
        self.pump(ctx);
    }
}

impl Handler<ConsumeOrderly> for ConsumeDispatcher {
    type Result = ();

    fn handle(&mut self, msg: ConsumeOrderly, ctx: &mut Self::Context) {
        self.enqueue(Call {
            pq: msg.pq,
            messages: msg.messages,
            reply: Reply::Orderly(msg.report_to),
        });
        self.pump(ctx);
    }
}

impl Handler<CancelQueue> for ConsumeDispatcher {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: CancelQueue, _: &mut Self::Context) -> Self::Result {
        self.cancelled.insert(msg.pq, Handoff::Draining);
        let before = self.pending.len();
        self.pending.retain(|call| call.pq != msg.pq);
        for _ in self.pending.len()..before {
            self.work_done(msg.pq);
        }
        if !self.open_work.contains_key(&msg.pq) {
            return Box::pin(std::future::ready(()));
        }
        let (sender, receiver) = oneshot::channel();
        self.idle_waiters.entry(msg.pq).or_default().push(sender);
        Box::pin(async move {
            let _ = receiver.await;
        })
    }
}

impl Handler<ForgetQueue> for ConsumeDispatcher {
    type Result = ();

    fn handle(&mut self, msg: ForgetQueue, _: &mut Self::Context) {
        if self.open_work.contains_key(&msg.pq) {
            // A handoff that timed out left work running; `work_done` forgets the queue later.
            if let Some(handoff) = self.cancelled.get_mut(&msg.pq) {
                *handoff = Handoff::QueueStopped;
            }
        } else {
            self.cancelled.remove(&msg.pq);
        }
    }
}

impl Handler<Observe> for ConsumeDispatcher {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        let mut snapshot = self.snapshot.clone();
        snapshot.pending_calls = self.pending.len();
        snapshot.running_calls = self.running.len();
        snapshot.cancelled_queues = self.cancelled.len();
        MessageResult(snapshot)
    }
}
