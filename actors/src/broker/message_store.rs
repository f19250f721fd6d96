//! The message-store actor: the single writer of the commit log and consume queues.
//!
//! Appends run on the actor (they are ordered and must not interleave). The batches that reach
//! the mailbox together, one per sending connection, are validated one by one and written as
//! one append when the mailbox is drained, so many one-message sends cost one commit-log write.
//! Waiting for the fsync under the `Sync` flush policy is handed to the store's group-commit
//! thread, so every sender whose batch was appended while an fsync was pending shares the next
//! one (group commit).

use crate::broker::consumer_offsets::RemoveTopicOffsets;
use crate::broker::lite::expiry::expire_idle;
use crate::broker::long_poll::{NotifyArrivals, QueueArrival};
use crate::broker::registry::Registry;
use crate::broker::retention::{DiskState, RetentionConfig};
use crate::broker::BrokerClock;
use crate::broker_api::BrokerError;
use crate::logic::delay::route_delayed;
use crate::logic::lite::LiteExpiry;
use crate::logic::timer::{recallable, route_timer, StoredTimer, TIMER_TOPIC};
use crate::logic::transaction::route_half;
use crate::metrics::Metrics;
use crate::quit::Quit;
use crate::refused::Refused;
use actix::prelude::*;
use skiff_storage::key_index::KeyBatch;
use skiff_storage::message::MessageToAppend;
use skiff_storage::metadata::TopicConfig;
use skiff_storage::store::{AppendResult, Durability, FlushPolicy, MessageStore, SyncWaiter};
use std::collections::BTreeMap;
use std::error::Error;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::oneshot;

/// Appends a batch; answers once the batch is as durable as the flush policy promises, or,
/// under `Sync`, once the store's sync flush timeout has passed with the batch written and its
/// fsync still running ([`StoredBatch::flush_timed_out`]). Messages carrying a `DELAY` level are
/// diverted to the schedule topic first, timer messages (a future `TIMER_*` deliver time) to the
/// timer topic, half (prepared) transactional messages to the half topic.
#[derive(Message, Debug)]
#[rtype(result = "Result<StoredBatch, BrokerError>")]
pub struct AppendMessages {
    pub messages: Vec<MessageToAppend>,
    /// Queue count of a topic this append auto-creates (the producer's `defaultTopicQueueNums`).
    pub default_queue_nums: u32,
}

/// Where an appended batch's messages were stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBatch {
    /// One per message, in the batch's order.
    pub results: Vec<AppendResult>,
    /// The batch is stored, but the fsync the `Sync` flush policy waits for had not finished
    /// within the sync flush timeout (RocketMQ's FLUSH_DISK_TIMEOUT).
    pub flush_timed_out: bool,
    /// With a timer a producer may recall in the batch, one per message (what its recall handle
    /// names); empty otherwise.
    pub timers: Vec<Option<StoredTimer>>,
}

/// Registers a listener told after every append which queues got new max offsets.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SubscribeArrivals {
    pub recipient: Recipient<NotifyArrivals>,
}

/// The key entries of one appended batch, for the key index ([`SubscribeKeys`]).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct IndexBatch(pub KeyBatch);

/// Registers the one listener given the key entries of every append, built here from the
/// messages just written, so the index never re-reads the commit log on the send path's
/// heels. Sent with `try_send`: a dropped batch is a gap the index fills from the log.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SubscribeKeys {
    pub recipient: Recipient<IndexBatch>,
}

/// fsyncs the commit log and consume queues.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "Result<(), BrokerError>")]
pub struct FlushStore;

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "MessageStoreSnapshot")]
pub struct Observe;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageStoreSnapshot {
    /// Batches appended (one per caller).
    pub batches: u64,
    /// Appends written: the batches of one mailbox drain are written together.
    pub writes: u64,
    pub messages: u64,
    pub failed_batches: u64,
    /// Messages diverted to the schedule topic because they carried a delay level.
    pub delayed: u64,
    /// Transactional half messages diverted to the half topic.
    pub halves: u64,
    /// Timer messages diverted to the timer topic.
    pub timers: u64,
    /// Topics a send created (auto-creation); counted, not named: a long-lived broker may
    /// create hundreds of thousands.
    pub created_topics: u64,
    /// Arrival notices dropped because a listener's mailbox was full (its sweep catches up).
    pub dropped_notices: u64,
    /// Commit-log segments deleted by retention.
    pub deleted_segments: u64,
    /// Idle queues let go of from memory (they open again on use).
    pub queues_released: u64,
    pub closed: bool,
}

pub struct MessageStoreActor {
    store: Option<MessageStore>,
    waiter: SyncWaiter,
    flush_policy: FlushPolicy,
    registry: Registry,
    listeners: Vec<Recipient<NotifyArrivals>>,
    key_index: Option<Recipient<IndexBatch>>,
    metrics: Metrics,
    clock: BrokerClock,
    retention: RetentionConfig,
    /// Where the store lives, for measuring its file system.
    dir: PathBuf,
    /// The last measured share of the disk in use, and whether sends are refused for it.
    disk: (f64, DiskState),
    snapshot: MessageStoreSnapshot,
    /// Batches validated in this mailbox drain, written together at its end.
    pending: Vec<PendingAppend>,
    /// Key entries of recent writes not yet handed to the key index.
    keys: Option<KeyBatch>,
    /// Idle lite topics expire ([`crate::broker::lite::expiry`]); their offsets go there.
    lite: Option<(LiteExpiry, Recipient<RemoveTopicOffsets>)>,
    /// When the actor started (broker clock), as the lite expiry's uptime.
    started_ms: i64,
    /// How often idle queues are let go of (`MessageStore::release_idle_queues`); zero: never.
    idle_queue_release: Duration,
}

const MAILBOX_CAPACITY: usize = 1024;

impl MessageStoreActor {
    pub(crate) fn new(
        store: MessageStore,
        flush_policy: FlushPolicy,
        registry: Registry,
        metrics: Metrics,
        clock: BrokerClock,
        retention: RetentionConfig,
    ) -> Self {
        MessageStoreActor {
            dir: store.config().dir.clone(),
            clock,
            retention,
            disk: (0.0, DiskState::Ok),
            waiter: store.sync_waiter(),
            store: Some(store),
            flush_policy,
            registry,
            listeners: Vec::new(),
            key_index: None,
            metrics,
            snapshot: MessageStoreSnapshot::default(),
            pending: Vec::new(),
            keys: None,
            lite: None,
            started_ms: clock.now_ms(),
            idle_queue_release: Duration::ZERO,
        }
    }

    /// Lets go of idle queues every `interval` (zero: never).
    pub(crate) fn with_idle_queue_release(self, interval: Duration) -> Self {
        MessageStoreActor {
            idle_queue_release: interval,
            ..self
        }
    }

    /// Expires idle lite topics every `expiry.check_interval`, their group offsets removed by
    /// `offsets`.
    pub(crate) fn with_lite_expiry(
        self,
        expiry: LiteExpiry,
        offsets: Recipient<RemoveTopicOffsets>,
    ) -> Self {
        MessageStoreActor {
            lite: Some((expiry, offsets)),
            ..self
        }
    }

    fn expire_lite_topics(&mut self) {
        let (Some(store), Some((expiry, offsets))) = (self.store.as_mut(), &self.lite) else {
            return;
        };
        let now = self.clock.now_ms();
        match expire_idle(store, &self.registry, expiry, now, self.started_ms) {
            Ok(topics) => {
                for topic in topics {
                    offsets.do_send(RemoveTopicOffsets { topic });
                }
            }
            Err(e) => tracing::warn!(error = &e as &dyn Error, "lite topic expiry failed"),
        }
    }

    /// Validates the whole batch before writing any of it, so a bad message fails the batch
    /// without leaving half of it stored.
    fn prepare(
        &mut self,
        messages: Vec<MessageToAppend>,
        default_queue_nums: u32,
    ) -> Result<Vec<MessageToAppend>, BrokerError> {
        if let (used_ratio, DiskState::Full) = self.disk {
            return Err(BrokerError::Refused(Refused::DiskFull {
                used_ratio,
                full_ratio: self.retention.disk_full_ratio,
            }));
        }
        let mut prepared = Vec::with_capacity(messages.len());
        // A batch is one topic (a delayed message moves to the schedule topic): resolving it
        // per message cloned the same config 25 times per request.
        let mut resolved: Option<TopicConfig> = None;
        for message in messages {
            let (message, half) = route_half(message);
            if half {
                self.snapshot.halves += 1;
            }
            let timer = route_timer(message, self.clock.now_ms())?;
            if timer.deliver_ms.is_some() {
                self.snapshot.timers += 1;
            }
            let routed = route_delayed(timer.message)?;
            if routed.delayed {
                self.snapshot.delayed += 1;
            }
            let message = routed.message;
            let topic = match resolved.take() {
                Some(topic) if topic.name == message.topic => topic,
                _ => {
                    let (topic, created) = self
                        .registry
                        .topic_for_append(&message.topic, default_queue_nums)?;
                    if created {
                        self.snapshot.created_topics += 1;
                    }
                    topic
                }
            };
            if !topic.is_writable() {
                return Err(Refused::TopicNotWritable {
                    topic: topic.name.clone(),
                }
                .into());
            }
            let queues = topic.write_queue_nums.max(topic.read_queue_nums);
            if message.queue_id >= queues {
                return Err(Refused::IllegalQueue {
                    topic: topic.name.clone(),
                    queue_id: message.queue_id.into(),
                    queues,
                }
                .into());
            }
            prepared.push(message);
            resolved = Some(topic);
        }
        Ok(prepared)
    }

    fn announce(
        &mut self,
        messages: &[MessageToAppend],
        results: &[AppendResult],
        ctx: &mut Context<Self>,
    ) {
        if self.key_index.is_some() {
            self.collect_keys(KeyBatch::of(messages, results), ctx);
        }
        self.metrics.record_appends(
            messages
                .iter()
                .zip(results)
                .map(|(m, r)| (m.topic.as_str(), r.queue_id, m.body.len())),
        );
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

/// Key entries are handed to the key index once this many records have gathered, or
/// [`KEY_HANDOVER_DELAY`] after the first: a hand-over wakes the index's thread, and one per
/// write cost as much as the index's own work when every write held a few one-message sends.
/// A query never waits for them: it first indexes whatever the commit log holds past the index.
const KEY_HANDOVER_RECORDS: usize = 1024;
const KEY_HANDOVER_DELAY: std::time::Duration = std::time::Duration::from_millis(5);

impl MessageStoreActor {
    fn collect_keys(&mut self, batch: KeyBatch, ctx: &mut Context<Self>) {
        match self.keys.as_mut() {
            Some(keys) if keys.end == batch.start => keys.extend(batch),
            _ => {
                self.hand_over_keys();
                self.keys = Some(batch);
                ctx.run_later(KEY_HANDOVER_DELAY, |actor, _| actor.hand_over_keys());
            }
        }
        if self
            .keys
            .as_ref()
            .is_some_and(|k| k.records >= KEY_HANDOVER_RECORDS)
        {
            self.hand_over_keys();
        }
    }

    fn hand_over_keys(&mut self) {
        let (Some(keys), Some(key_index)) = (self.keys.take(), &self.key_index) else {
            return;
        };
        if key_index.try_send(IndexBatch(keys)).is_err() {
            self.snapshot.dropped_notices += 1;
        }
    }

    /// One retention run: measure the disk, update the guard, delete what is due.
    fn clean_up(&mut self) {
        let used_ratio = match self.retention.meter.used_ratio(&self.dir) {
            Ok(ratio) => ratio,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "measuring the disk failed; retention by age only");
                0.0
            }
        };
        let state = self.retention.disk_state(used_ratio);
        match (self.disk.1, state) {
            (DiskState::Ok, DiskState::Full) => tracing::warn!(
                used_percent = used_ratio * 100.0,
                full_percent = self.retention.disk_full_ratio * 100.0,
                "disk full: refusing sends until space returns"
            ),
            (DiskState::Full, DiskState::Ok) => tracing::info!(
                used_percent = used_ratio * 100.0,
                "disk space back: accepting sends"
            ),
            _ => {}
        }
        self.disk = (used_ratio, state);
        let Some(store) = self.store.as_mut() else {
            return;
        };
        let request = self.retention.request(self.clock.now_ms(), used_ratio);
        match store.delete_expired(&request) {
            Ok(outcome) if !outcome.segments.is_empty() => {
                self.snapshot.deleted_segments += outcome.segments.len() as u64;
                tracing::info!(
                    segments = outcome.segments.len(),
                    forced = outcome.segments.iter().filter(|s| s.forced).count(),
                    queue_files = outcome.queue_files_deleted,
                    bytes_freed = outcome.bytes_freed,
                    min_commit_log_offset = outcome.min_commit_log_offset,
                    used_percent = used_ratio * 100.0,
                    "retention deleted old segments"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = &e as &dyn Error, "retention run failed"),
        }
    }
}

impl Actor for MessageStoreActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        // Measured once now, so a node started on a full disk refuses sends from the first.
        self.clean_up();
        ctx.run_interval(self.retention.cleanup_interval, |actor, _| actor.clean_up());
        if let Some((expiry, _)) = &self.lite {
            ctx.run_interval(expiry.check_interval, |actor, _| actor.expire_lite_topics());
        }
        if !self.idle_queue_release.is_zero() {
            ctx.run_interval(self.idle_queue_release, |actor, _| {
                if let Some(store) = actor.store.as_mut() {
                    actor.snapshot.queues_released += store.release_idle_queues() as u64;
                }
            });
        }
    }
}

fn closed_error() -> BrokerError {
    BrokerError::Closed {
        what: "message store",
    }
}

type AppendAnswer = Result<StoredBatch, BrokerError>;

/// One caller's validated batch, waiting for the write that ends the mailbox drain.
struct PendingAppend {
    messages: Vec<MessageToAppend>,
    answer: oneshot::Sender<AppendAnswer>,
}

impl MessageStoreActor {
    /// Appends every batch validated since the last write as one: one commit-log write, one
    /// consume-queue write per queue, one key-index hand-over and one arrival notice for all
    /// the callers whose sends reached the mailbox together (many connections sending one
    /// message each), then answers each caller with its own results once they are as durable
    /// as the flush policy promises.
    fn write_pending(&mut self, ctx: &mut Context<Self>) {
        let pending = std::mem::take(&mut self.pending);
        if pending.is_empty() {
            return;
        }
        let Some(store) = self.store.as_mut() else {
            for p in pending {
                let _ = p.answer.send(Err(closed_error()));
            }
            return;
        };
        let counts: Vec<usize> = pending.iter().map(|p| p.messages.len()).collect();
        let (messages, answers): (Vec<Vec<MessageToAppend>>, Vec<_>) =
            pending.into_iter().map(|p| (p.messages, p.answer)).unzip();
        let messages: Vec<MessageToAppend> = messages.into_iter().flatten().collect();
        let appended = store.append_batch_nowait(&messages);
        let (results, end) = match appended {
            Ok(Ok(ok)) => ok,
            Ok(Err(rejected)) => {
                // Each batch passed `validate` alone; together they cannot be refused by content.
                self.snapshot.failed_batches += answers.len() as u64;
                for answer in answers {
                    let _ = answer.send(Err(BrokerError::Refused(Refused::Rejected(
                        rejected.clone(),
                    ))));
                }
                return;
            }
            Err(e) if answers.len() == 1 => {
                self.snapshot.failed_batches += 1;
                tracing::warn!(error = &e as &dyn Error, "append failed");
                for answer in answers {
                    let _ = answer.send(Err(BrokerError::Store(e.clone())));
                }
                return;
            }
            Err(e) => {
                // The failed write was undone (or the store now refuses writes): each caller
                // gets the outcome of its own batch, written alone.
                tracing::warn!(
                    error = &e as &dyn Error,
                    batches = answers.len(),
                    "merged append failed; appending each batch alone"
                );
                let mut messages = messages.into_iter();
                for (count, answer) in counts.into_iter().zip(answers) {
                    let messages = messages.by_ref().take(count).collect();
                    self.pending.push(PendingAppend { messages, answer });
                    self.write_pending(ctx);
                }
                return;
            }
        };
        self.snapshot.batches += answers.len() as u64;
        self.snapshot.writes += 1;
        self.snapshot.messages += results.len() as u64;
        self.announce(&messages, &results, ctx);
        let mut results = results.into_iter();
        let split: Vec<(Vec<AppendResult>, oneshot::Sender<AppendAnswer>)> = counts
            .into_iter()
            .zip(answers)
            .map(|(count, answer)| (results.by_ref().take(count).collect(), answer))
            .collect();
        let stored = |results, flush_timed_out| StoredBatch {
            results,
            flush_timed_out,
            timers: Vec::new(),
        };
        if self.flush_policy == FlushPolicy::Async {
            for (results, answer) in split {
                let _ = answer.send(Ok(stored(results, false)));
            }
            return;
        }
        // Registered after the whole drain was written: every caller of this write shares the
        // group-commit thread's next fsync.
        self.waiter.notify_when_durable(end, move |outcome| {
            for (results, answer) in split {
                let _ = answer.send(match &outcome {
                    Ok(durability) => Ok(stored(results, *durability == Durability::TimedOut)),
                    Err(e) => Err(BrokerError::Store(e.clone())),
                });
            }
        });
    }
}

impl Handler<AppendMessages> for MessageStoreActor {
    type Result = ResponseFuture<AppendAnswer>;

    /// Validates the batch now and queues it; the write happens once the mailbox is drained
    /// ([`MessageStoreActor::write_pending`]): actix polls the futures an actor spawned only
    /// after it has handled every message already in its mailbox.
    fn handle(&mut self, msg: AppendMessages, ctx: &mut Self::Context) -> Self::Result {
        let prepared = self
            .prepare(msg.messages, msg.default_queue_nums)
            .and_then(|prepared| match self.store.as_ref() {
                None => Err(closed_error()),
                Some(store) => match store.validate(&prepared) {
                    Ok(()) => Ok(prepared),
                    Err(rejected) => Err(BrokerError::Refused(Refused::Rejected(rejected))),
                },
            });
        let prepared = match prepared {
            Ok(prepared) => prepared,
            Err(e) => {
                if !matches!(e, BrokerError::Closed { .. }) {
                    self.snapshot.failed_batches += 1;
                }
                return Box::pin(async move { Err(e) });
            }
        };
        let timers: Vec<Option<StoredTimer>> = if prepared.iter().any(|m| m.topic == TIMER_TOPIC) {
            prepared.iter().map(recallable).collect()
        } else {
            Vec::new()
        };
        if self.pending.is_empty() {
            ctx.spawn(
                actix::fut::ready(()).map(|(), actor: &mut Self, ctx| actor.write_pending(ctx)),
            );
        }
        let (answer, answered) = oneshot::channel();
        self.pending.push(PendingAppend {
            messages: prepared,
            answer,
        });
        Box::pin(async move {
            match answered.await {
                Ok(outcome) => outcome.map(|batch| StoredBatch { timers, ..batch }),
                // The flusher went away with the store: the broker is shutting down.
                Err(_) => Err(BrokerError::Closed {
                    what: "the commit log's group commit",
                }),
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

impl Handler<SubscribeKeys> for MessageStoreActor {
    type Result = ();

    fn handle(&mut self, msg: SubscribeKeys, _: &mut Self::Context) {
        self.key_index = Some(msg.recipient);
    }
}

impl Handler<FlushStore> for MessageStoreActor {
    type Result = Result<(), BrokerError>;

    fn handle(&mut self, _: FlushStore, ctx: &mut Self::Context) -> Self::Result {
        self.write_pending(ctx);
        match self.store.as_mut() {
            Some(store) => store.flush().map_err(BrokerError::Store),
            None => Err(closed_error()),
        }
    }
}

/// Flushes and closes the store, then stops; appends already queued behind it fail as closed.
impl Handler<Quit<Result<(), BrokerError>>> for MessageStoreActor {
    type Result = Result<(), BrokerError>;

    fn handle(
        &mut self,
        _: Quit<Result<(), BrokerError>>,
        ctx: &mut Self::Context,
    ) -> Self::Result {
        // Batches queued ahead of the Quit are written and answered before the store closes.
        self.write_pending(ctx);
        self.snapshot.closed = true;
        let Some(store) = self.store.take() else {
            return Ok(());
        };
        let outcome = store.close().map_err(BrokerError::Store);
        if let Err(e) = &outcome {
            tracing::error!(error = e as &dyn Error, "closing the message store failed");
        }
        ctx.stop();
        outcome
    }
}

impl Handler<Observe> for MessageStoreActor {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.snapshot.clone())
    }
}
