//! Timer messages on the broker (RocketMQ 5's `TimerMessageStore`).
//!
//! **Where timers wait.** The message store diverts a timer message to [`TIMER_TOPIC`] queue 0
//! ([`route_timer`](crate::logic::timer::route_timer)), so it is a durable commit-log record
//! no consumer of its real topic sees. The [`TimerActor`] reads that queue from its ingest
//! cursor and appends one 16-byte record per message to the [`TimerIndex`]: append-only files,
//! one per due second, with a small state file (cursor, delivery position, delivery in flight).
//! Pending timers cost disk, not memory. At the start of each second, every [`TICK`] and on each
//! arrival in the timer topic it reads only the due slot, at most [`DELIVER_BATCH`] entries,
//! copies those messages to their real topics and moves the slot's position past them.
//!
//! **Exactly once across crashes**, in three steps per delivery round:
//!
//! 1. The round's entries, the commit-log end and the round's delivery time (`dequeue_ms`) are
//!    written to the index as the delivery in flight
//!    ([`InFlight`](skiff_storage::timer_index::InFlight)), and the index is flushed.
//! 2. The copies are appended to their real topics and made durable (the store is flushed
//!    unless the sync flush policy already waited for it).
//! 3. The slot position moves past the entries and the in-flight record is dropped (durable
//!    with the next round's flush; until then a crash settles the round as below).
//!
//! A copy is appended only while an in-flight record naming it is durable, and an entry leaves
//! the index only after its copy is durable. So after a crash ([`resolve_in_flight`], run before
//! the actor starts, and again after a failed round) the records from the in-flight `log_from`
//! to the commit-log end say exactly which entries of the interrupted round were delivered.
//! A copy is a pure function of its timer message and `dequeue_ms`
//! ([`delivered_copy`]), so recovery rebuilds each entry's copy and looks for it (topic, queue,
//! properties, body) in that window: found, the entry is done; not found, it is indexed again
//! in the current slot and fires again. Nothing is lost (the position passes an entry only
//! after its copy is durable) and nothing fires twice (a durable copy is always found). Two entries with identical copies (a producer's resend) are
//! counted as a multiset, so each copy found settles one entry. The scan is short: it covers
//! only what was appended during the interrupted round.
//!
//! **Recall** ([`RecallTimer`]): a recalled timer's due time and message id go into the index's
//! recall file before the recall is answered; the round that meets the timer drops its message
//! instead of copying it (counted as `recalled`). A round already running when the recall
//! arrives delivers what it read: the broker refuses a recall whose due time has come, so only
//! one landing in the due second's first millisecond can be that late.
//!
//! Why not mark each copy with its origin offset, or keep delivered offsets? A marker property
//! would show on every delivered message, which Apache's copies do not carry, and a set of
//! delivered offsets would grow for ever; the rebuilt copy needs neither. Ingest is flushed by
//! step 1, or once a second when no round runs (the slot files are fsynced before the state
//! records the cursor); a timer indexed after the last flush is recognised when it is ingested
//! again after a crash (see [`TimerIndex`]), so each timer is indexed once.

use crate::broker::long_poll::NotifyArrivals;
use crate::broker::message_store::{AppendMessages, FlushStore, MessageStoreActor};
use crate::broker::release::Holder;
use crate::broker::BrokerClock;
use crate::broker_api::BrokerError;
use crate::logic::timer::{delivered_copy, due_ms, TIMER_TOPIC};
use crate::quit::Quit;
use actix::prelude::*;
use bytes::Bytes;
use skiff_storage::message::property::UNIQ_KEY;
use skiff_storage::message::{decode_record, decode_records, MessageToAppend};
use skiff_storage::store::{FlushPolicy, ReadStatus, StoreError, StoreReader};
use skiff_storage::timer_index::{TimerEntry, TimerIndex};
use std::collections::HashMap;
use std::error::Error;
use std::time::Duration;

/// How often the due window is read besides the start of each second, when a slot falls due
/// (ingest and flushes also run on it).
pub const TICK: Duration = Duration::from_millis(100);
/// Entries delivered per round (one append, one flush of each store): a second of 10,000 timers
/// goes in three rounds, not twenty, so its last timer is not held back by the rounds before.
pub const DELIVER_BATCH: usize = 4096;
/// How often timers indexed since the last flush are made durable when no round flushes them.
const INGEST_FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Timer-queue messages indexed per step.
const INGEST_BATCH: u32 = 1024;
const INGEST_BATCH_BYTES: u32 = 8 * 1024 * 1024;
/// Records visited per step of the recovery scan.
const RECOVERY_SCAN_STEP: usize = 4096;
const MAILBOX_CAPACITY: usize = 1024;

/// What identifies a delivered copy in the commit log.
type CopyKey = (String, u32, String, Bytes);

fn copy_key(topic: &str, queue_id: u32, properties: &str, body: &Bytes) -> CopyKey {
    (
        topic.to_string(),
        queue_id,
        properties.to_string(),
        body.clone(),
    )
}

/// Settles a delivery interrupted by a crash or a failure: entries whose copy is in the commit
/// log past the in-flight record's `log_from` were delivered; entries whose message cannot be
/// read or copied would be dropped again; the others are indexed again to fire. Answers how
/// many were found delivered. Flushes the index.
pub fn resolve_in_flight(index: &TimerIndex, reader: &StoreReader) -> Result<usize, BrokerError> {
    let Some(in_flight) = index.in_flight()? else {
        return Ok(0);
    };
    // Each entry's copy, rebuilt exactly as the interrupted round built it.
    let mut expected: HashMap<CopyKey, Vec<TimerEntry>> = HashMap::new();
    for entry in &in_flight.entries {
        let Some(message) = reader.read_by_physical_offset(entry.physical_offset)? else {
            continue;
        };
        if let Ok(copy) = delivered_copy(&message, in_flight.dequeue_ms) {
            expected
                .entry(copy_key(
                    &copy.topic,
                    copy.queue_id,
                    &copy.properties,
                    &copy.body,
                ))
                .or_default()
                .push(*entry);
        }
    }
    let mut delivered = 0;
    let end = reader.commit_log_end();
    let mut position = in_flight.log_from.max(reader.commit_log_start());
    while position < end && !expected.is_empty() {
        let reached = reader.scan_records(position, end, RECOVERY_SCAN_STEP, |_, _, bytes| {
            // A record that does not decode was not written by a delivery that completed.
            let Ok((message, _)) = decode_record(bytes) else {
                return;
            };
            let key = copy_key(
                &message.topic,
                message.queue_id,
                &message.properties,
                &message.body,
            );
            if let Some(entries) = expected.get_mut(&key) {
                if entries.pop().is_some() {
                    delivered += 1;
                }
                if entries.is_empty() {
                    expected.remove(&key);
                }
            }
        })?;
        if reached <= position {
            break;
        }
        position = reached;
    }
    let again: Vec<TimerEntry> = expected.into_values().flatten().collect();
    index.finish_delivery(&again)?;
    index.flush()?;
    tracing::info!(
        interrupted = in_flight.entries.len(),
        already_delivered = delivered,
        again = again.len(),
        log_from = in_flight.log_from,
        "timer delivery in flight resolved"
    );
    Ok(delivered)
}

/// The ingest cursor to start from: the stored one, or the start of the timer queue; never
/// past the queue's end (a cursor from before a power cut that lost the queue's tail would
/// skip the timers written there since).
pub fn load_cursor(index: &TimerIndex, reader: &StoreReader) -> Result<u64, BrokerError> {
    let end = reader.max_offset(TIMER_TOPIC, 0);
    Ok(index
        .cursor()?
        .unwrap_or_else(|| reader.min_offset(TIMER_TOPIC, 0))
        .min(end))
}

/// Makes the commit log durable, then the timer index: every timer message an index entry or
/// the stored cursor names must survive whatever the index survives.
async fn flush_index_after_store(
    store: Addr<MessageStoreActor>,
    index: TimerIndex,
) -> Result<(), BrokerError> {
    store
        .send(FlushStore)
        .await
        .map_err(|source| BrokerError::Mailbox {
            actor: "message store",
            source,
        })??;
    index.flush_async().await?;
    Ok(())
}

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "TimerSnapshot")]
pub struct Observe;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimerSnapshot {
    /// Next timer-queue offset to index.
    pub cursor: u64,
    /// Timers indexed since start.
    pub indexed: u64,
    /// Timers copied to their real topic since start.
    pub delivered: u64,
    /// Timers dropped as undeliverable (no real topic or queue, unreadable, or gone).
    pub skipped: u64,
    pub failures: u64,
    /// Timers whose message was dropped at delivery because it was recalled.
    pub recalled: u64,
    /// A delivery round is running.
    pub delivering: bool,
}

/// Recalls the timer of message `message_id` (its `UNIQ_KEY`) due at `due_ms` (its
/// `TIMER_OUT_MS`): durable when answered, and its message is never delivered.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<(), BrokerError>")]
pub struct RecallTimer {
    pub due_ms: i64,
    pub message_id: String,
}

pub struct TimerActor {
    reader: StoreReader,
    store: Addr<MessageStoreActor>,
    index: TimerIndex,
    clock: BrokerClock,
    flush_policy: FlushPolicy,
    default_queue_nums: u32,
    snapshot: TimerSnapshot,
    /// The last round failed: settle its in-flight record before the next.
    unresolved: bool,
    /// Timers were indexed since the index was last flushed, and when that was.
    ingested_since_flush: bool,
    /// A flush of what was ingested is running (see [`Self::flush_ingested`]).
    flushing_ingested: bool,
    last_flush: tokio::time::Instant,
    _holder: Holder,
}

impl TimerActor {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        reader: StoreReader,
        store: Addr<MessageStoreActor>,
        index: TimerIndex,
        clock: BrokerClock,
        flush_policy: FlushPolicy,
        default_queue_nums: u32,
        cursor: u64,
        holder: Holder,
    ) -> Self {
        TimerActor {
            _holder: holder,
            reader,
            store,
            index,
            clock,
            flush_policy,
            default_queue_nums,
            snapshot: TimerSnapshot {
                cursor,
                ..TimerSnapshot::default()
            },
            unresolved: false,
            ingested_since_flush: false,
            flushing_ingested: false,
            last_flush: tokio::time::Instant::now(),
        }
    }

    /// Indexes what the timer queue holds past the cursor.
    fn ingest(&mut self) {
        loop {
            let cursor = self.snapshot.cursor;
            if self.reader.max_offset(TIMER_TOPIC, 0) <= cursor {
                return;
            }
            let read = match self.reader.read(
                TIMER_TOPIC,
                0,
                cursor,
                INGEST_BATCH,
                INGEST_BATCH_BYTES,
                None,
            ) {
                Ok(read) => read,
                Err(e) => {
                    self.snapshot.failures += 1;
                    tracing::warn!(
                        offset = cursor,
                        error = &e as &dyn Error,
                        "reading timer messages failed"
                    );
                    return;
                }
            };
            match read.status {
                ReadStatus::Found => {}
                ReadStatus::NoMessageInQueue | ReadStatus::OffsetOverflowOne => return,
                _ if read.next_begin_offset > cursor => {
                    tracing::warn!(
                        offset = cursor,
                        next = read.next_begin_offset,
                        "timer cursor moved past missing messages"
                    );
                    if let Err(e) = self.index.ingest(&[], read.next_begin_offset) {
                        self.snapshot.failures += 1;
                        tracing::error!(error = &e as &dyn Error, "moving the timer cursor failed");
                        return;
                    }
                    self.snapshot.cursor = read.next_begin_offset;
                    continue;
                }
                status => {
                    self.snapshot.failures += 1;
                    tracing::error!(offset = cursor, ?status, "timer cursor cannot move");
                    return;
                }
            }
            let messages = match decode_records(read.records) {
                Ok(messages) => messages,
                Err(e) => {
                    self.snapshot.failures += 1;
                    tracing::error!(
                        offset = cursor,
                        error = &e as &dyn Error,
                        "undecodable timer message"
                    );
                    return;
                }
            };
            let mut entries = Vec::with_capacity(messages.len());
            let mut next = cursor;
            for message in &messages {
                next = message.queue_offset + 1;
                match due_ms(message) {
                    Some(deliver_ms) => entries.push(TimerEntry {
                        deliver_ms,
                        physical_offset: message.physical_offset,
                    }),
                    None => {
                        self.snapshot.skipped += 1;
                        tracing::error!(
                            offset = message.queue_offset,
                            "timer message without a valid TIMER_OUT_MS dropped"
                        );
                    }
                }
            }
            if next <= cursor {
                return;
            }
            if let Err(e) = self.index.ingest(&entries, next) {
                self.snapshot.failures += 1;
                tracing::error!(error = &e as &dyn Error, "indexing timer messages failed");
                return;
            }
            self.snapshot.indexed += entries.len() as u64;
            self.ingested_since_flush = true;
            self.snapshot.cursor = next;
        }
    }

    /// Makes what was indexed durable once per [`INGEST_FLUSH_INTERVAL`] when no round does it:
    /// timers due far ahead would otherwise wait for the next delivery round to record their
    /// cursor, and a restart would read them all again.
    fn flush_ingested(&mut self, ctx: &mut Context<Self>) {
        if !self.ingested_since_flush
            || self.snapshot.delivering
            || self.flushing_ingested
            || self.last_flush.elapsed() < INGEST_FLUSH_INTERVAL
        {
            return;
        }
        self.flushing_ingested = true;
        self.ingested_since_flush = false;
        let work = flush_index_after_store(self.store.clone(), self.index.clone());
        ctx.spawn(work.into_actor(self).map(|outcome, act, _| {
            act.flushing_ingested = false;
            match outcome {
                Ok(()) => act.last_flush = tokio::time::Instant::now(),
                Err(e) => {
                    act.ingested_since_flush = true;
                    act.snapshot.failures += 1;
                    tracing::warn!(error = &e as &dyn Error, "flushing the timer index failed");
                }
            }
        }));
    }

    /// Starts a delivery round for what is due, unless one is running.
    fn deliver_due(&mut self, ctx: &mut Context<Self>) {
        if self.snapshot.delivering {
            return;
        }
        if self.unresolved {
            match resolve_in_flight(&self.index, &self.reader) {
                Ok(_) => self.unresolved = false,
                Err(e) => {
                    tracing::error!(
                        error = &e as &dyn Error,
                        "settling a failed timer delivery failed"
                    );
                    return;
                }
            }
        }
        let now_ms = self.clock.now_ms();
        let due = match self
            .index
            .due(u64::try_from(now_ms).unwrap_or(0), DELIVER_BATCH)
        {
            Ok(due) => due,
            Err(e) => {
                self.snapshot.failures += 1;
                tracing::error!(error = &e as &dyn Error, "reading due timers failed");
                return;
            }
        };
        if due.is_empty() {
            return;
        }
        let mut copies = Vec::with_capacity(due.len());
        for entry in &due {
            match self.reader.read_by_physical_offset(entry.physical_offset) {
                // An entry names a record by position only: make sure it is still the timer
                // message it was made for (a commit log cut by a power cut and written again
                // holds other records there).
                Ok(Some(message))
                    if message.topic != TIMER_TOPIC
                        || due_ms(&message) != Some(entry.deliver_ms) =>
                {
                    self.snapshot.skipped += 1;
                    tracing::error!(
                        offset = entry.physical_offset,
                        topic = %message.topic,
                        "timer index entry names another record, skipped"
                    );
                }
                Ok(Some(message))
                    if message
                        .property(UNIQ_KEY)
                        .is_some_and(|id| self.index.is_recalled(entry.deliver_ms, id)) =>
                {
                    self.snapshot.recalled += 1;
                    tracing::debug!(
                        offset = entry.physical_offset,
                        deliver_ms = entry.deliver_ms,
                        "recalled timer message dropped"
                    );
                }
                Ok(Some(message)) => match delivered_copy(&message, now_ms) {
                    Ok(copy) => copies.push(copy),
                    Err(e) => {
                        self.snapshot.skipped += 1;
                        tracing::error!(
                            offset = entry.physical_offset,
                            error = &e as &dyn Error,
                            "undeliverable timer message dropped"
                        );
                    }
                },
                Ok(None) => {
                    self.snapshot.skipped += 1;
                    tracing::error!(
                        offset = entry.physical_offset,
                        "timer message no longer in the commit log, dropped"
                    );
                }
                // One damaged record must not hold back every timer due after it.
                Err(e @ StoreError::CorruptRecord { .. }) => {
                    self.snapshot.skipped += 1;
                    tracing::error!(
                        offset = entry.physical_offset,
                        error = &e as &dyn Error,
                        "damaged timer message dropped"
                    );
                }
                Err(e) => {
                    self.snapshot.failures += 1;
                    tracing::warn!(
                        offset = entry.physical_offset,
                        error = &e as &dyn Error,
                        "reading a due timer message failed"
                    );
                    return;
                }
            }
        }
        let log_from = self.reader.commit_log_end();
        if let Err(e) = self.index.begin_delivery(log_from, now_ms, due) {
            self.snapshot.failures += 1;
            self.unresolved = true;
            tracing::error!(
                error = &e as &dyn Error,
                "recording a timer delivery failed"
            );
            return;
        }
        self.snapshot.delivering = true;
        // The round's first step flushes the index, ingested timers included.
        self.ingested_since_flush = false;
        self.last_flush = tokio::time::Instant::now();
        let index = self.index.clone();
        let store = self.store.clone();
        let default_queue_nums = self.default_queue_nums;
        let flush_store = self.flush_policy == FlushPolicy::Async;
        let count = copies.len() as u64;
        let work = async move {
            flush_index_after_store(store.clone(), index.clone()).await?;
            let dropped = append_copies(&store, copies, default_queue_nums).await?;
            if flush_store {
                store
                    .send(FlushStore)
                    .await
                    .map_err(|source| BrokerError::Mailbox {
                        actor: "message store",
                        source,
                    })??;
            }
            index.finish_delivery(&[])?;
            Ok::<_, BrokerError>(dropped)
        };
        ctx.spawn(work.into_actor(self).map(move |outcome, act, ctx| {
            act.snapshot.delivering = false;
            match outcome {
                Ok(dropped) => {
                    act.snapshot.delivered += count - dropped;
                    act.snapshot.skipped += dropped;
                    tracing::debug!(count, "timer messages delivered");
                    // More may be due already (a backlog after a restart, or a busy second).
                    act.deliver_due(ctx);
                }
                Err(e) => {
                    act.snapshot.failures += 1;
                    act.unresolved = true;
                    tracing::warn!(
                        error = &e as &dyn Error,
                        "delivering timer messages failed; retrying"
                    );
                }
            }
        }));
    }
}

/// Appends the copies in one batch. A batch the store refuses for a message's topic or queue
/// (deleted since) is appended one by one instead, dropping only the refused ones; answers
/// how many were dropped.
async fn append_copies(
    store: &Addr<MessageStoreActor>,
    copies: Vec<MessageToAppend>,
    default_queue_nums: u32,
) -> Result<u64, BrokerError> {
    if copies.is_empty() {
        return Ok(0);
    }
    let append = |messages: Vec<MessageToAppend>| {
        store.send(AppendMessages {
            messages,
            default_queue_nums,
        })
    };
    let mailbox = |source| BrokerError::Mailbox {
        actor: "message store",
        source,
    };
    match append(copies.clone()).await.map_err(mailbox)? {
        Ok(_) => return Ok(0),
        Err(BrokerError::Refused(refused)) if refused.is_destination_gone() => {}
        Err(e) => return Err(e),
    }
    let mut dropped = 0;
    for copy in copies {
        let topic = copy.topic.clone();
        match append(vec![copy]).await.map_err(mailbox)? {
            Ok(_) => {}
            Err(BrokerError::Refused(e)) if e.is_destination_gone() => {
                dropped += 1;
                tracing::error!(
                    topic,
                    error = &e as &dyn Error,
                    "timer message undeliverable, dropped"
                );
            }
            Err(e) => return Err(e),
        }
    }
    Ok(dropped)
}

impl Actor for TimerActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        self.ingest();
        self.deliver_due(ctx);
        ctx.run_interval(TICK, |act, ctx| {
            act.flush_ingested(ctx);
            act.ingest();
            act.deliver_due(ctx);
        });
        self.wake_at_next_second(ctx);
    }
}

impl TimerActor {
    /// Timers are filed by the second they fall due: look at the very start of each second,
    /// rather than up to a tick after it.
    fn wake_at_next_second(&mut self, ctx: &mut Context<Self>) {
        let now_ms = self.clock.now_ms();
        let wait_ms = 1000 - now_ms.rem_euclid(1000);
        ctx.run_later(Duration::from_millis(wait_ms as u64), |act, ctx| {
            act.ingest();
            act.deliver_due(ctx);
            act.wake_at_next_second(ctx);
        });
    }
}

impl Handler<NotifyArrivals> for TimerActor {
    type Result = ();

    fn handle(&mut self, msg: NotifyArrivals, ctx: &mut Self::Context) {
        if msg.queues.iter().any(|q| q.topic == TIMER_TOPIC) {
            self.ingest();
            self.deliver_due(ctx);
        }
    }
}

/// Flushes what was indexed and stops. A round still running is abandoned; its in-flight
/// record is settled at the next start.
impl Handler<Quit> for TimerActor {
    type Result = ();

    fn handle(&mut self, _: Quit, ctx: &mut Self::Context) {
        if let Err(e) = self.index.flush() {
            tracing::warn!(
                error = &e as &dyn Error,
                "flushing the timer index at shutdown failed"
            );
        }
        ctx.stop();
    }
}

impl Handler<RecallTimer> for TimerActor {
    type Result = Result<(), BrokerError>;

    fn handle(&mut self, msg: RecallTimer, _: &mut Self::Context) -> Self::Result {
        let due_ms = u64::try_from(msg.due_ms).unwrap_or(0);
        self.index.recall(due_ms, &msg.message_id)?;
        Ok(())
    }
}

impl Handler<Observe> for TimerActor {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.snapshot.clone())
    }
}
