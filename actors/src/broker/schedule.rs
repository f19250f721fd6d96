//! Delay scheduling (RocketMQ's `ScheduleMessageService`).
//!
//! A message with a delay level is not written to its topic: the message store diverts it with
//! [`route_delayed`](crate::logic::delay::route_delayed) to [`SCHEDULE_TOPIC`], queue
//! `level - 1`, recording the real topic and queue in `REAL_TOPIC` / `REAL_QID`. That makes the
//! delay as durable as the message. The [`DelaySchedulerActor`] walks each level's queue in order
//! with a cursor (all messages of a level share one delay, so they fall due in append order): it
//! copies due messages to their real queue, then stores the cursor in the offset table (group
//! `%SCHEDULE%`), and sleeps on a tokio timer until the next one is due. After a restart each
//! level resumes from its stored cursor; due times come from the store timestamps, so time spent
//! down counts toward the delay. A crash between the copy and the cursor commit delivers that
//! batch twice, never zero times.

use crate::broker::consumer_offsets::{CommitOffset, ConsumerOffsetsActor};
use crate::broker::long_poll::NotifyArrivals;
use crate::broker::message_store::{AppendMessages, MessageStoreActor};
use crate::broker::BrokerClock;
use crate::broker_api::BrokerError;
use crate::logic::delay::{DELAY_LEVELS, SCHEDULE_QUEUE_NUMS};
use crate::logic::queue::GroupQueue;
use crate::quit::Quit;
use crate::refused::Refused;
use actix::prelude::*;
use skiff_storage::message::property::{DELAY, REAL_QID, REAL_TOPIC};
use skiff_storage::message::{decode_records, without_properties, MessageToAppend, StoredMessage};
use skiff_storage::offset_table::{OffsetKey, OffsetTable, OffsetTableError};
use skiff_storage::store::{ReadStatus, StoreReader};
use std::error::Error;
use std::time::Duration;

/// The schedule topic's name, kept reachable here for callers of the old path.
pub use crate::logic::delay::SCHEDULE_TOPIC;

/// Offset-table group under which each level's delivered cursor is stored.
pub const SCHEDULE_GROUP: &str = "%SCHEDULE%";

/// Messages read per level per step; also the batch size of one delivery append.
const BATCH: u32 = 32;
const BATCH_BYTES: u32 = 4 * 1024 * 1024;
/// Pause before retrying a level whose read or delivery failed.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Safety-net poll of idle levels, for arrival notices lost to a full mailbox.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Reads each level's stored cursor; done before the scheduler starts so that a corrupt cursor
/// stops the broker instead of re-delivering a level from 0.
pub(crate) fn load_cursors(
    table: &dyn OffsetTable,
    reader: &StoreReader,
) -> Result<Vec<u64>, OffsetTableError> {
    let key = OffsetKey::new(SCHEDULE_TOPIC, SCHEDULE_GROUP);
    (0..SCHEDULE_QUEUE_NUMS)
        .map(|queue_id| {
            Ok(table
                .query(&key, queue_id)?
                .unwrap_or_else(|| reader.min_offset(SCHEDULE_TOPIC, queue_id)))
        })
        .collect()
}

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "SchedulerSnapshot")]
pub struct Observe;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulerSnapshot {
    pub levels: Vec<LevelView>,
    /// Messages copied to their real topic since start.
    pub delivered: u64,
    /// Scheduled messages dropped as undeliverable (no real topic, or their queue is gone).
    pub skipped: u64,
    pub failures: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LevelView {
    pub level: u32,
    /// Next schedule-queue offset to deliver.
    pub cursor: u64,
    /// A timer or a delivery is outstanding for the level.
    pub busy: bool,
}

struct LevelState {
    /// The level's delay; every message of the level waits this long after it was stored.
    delay: Duration,
    cursor: u64,
    busy: bool,
}

pub struct DelaySchedulerActor {
    reader: StoreReader,
    store: Addr<MessageStoreActor>,
    offsets: Addr<ConsumerOffsetsActor>,
    clock: BrokerClock,
    default_queue_nums: u32,
    levels: Vec<LevelState>,
    snapshot: SchedulerSnapshot,
}

const MAILBOX_CAPACITY: usize = 1024;

impl DelaySchedulerActor {
    pub(crate) fn new(
        reader: StoreReader,
        store: Addr<MessageStoreActor>,
        offsets: Addr<ConsumerOffsetsActor>,
        clock: BrokerClock,
        default_queue_nums: u32,
        cursors: Vec<u64>,
    ) -> Self {
        DelaySchedulerActor {
            reader,
            store,
            offsets,
            clock,
            default_queue_nums,
            levels: cursors
                .into_iter()
                .zip(DELAY_LEVELS)
                .map(|(cursor, delay)| LevelState {
                    delay,
                    cursor,
                    busy: false,
                })
                .collect(),
            snapshot: SchedulerSnapshot::default(),
        }
    }

    fn retry_later(&mut self, level: u32, ctx: &mut Context<Self>) {
        self.snapshot.failures += 1;
        self.wake_at(level, RETRY_AFTER, ctx);
    }

    fn wake_at(&mut self, level: u32, after: Duration, ctx: &mut Context<Self>) {
        self.levels[level as usize - 1].busy = true;
        ctx.run_later(after, move |act, ctx| {
            act.levels[level as usize - 1].busy = false;
            act.process(level, ctx);
        });
    }

    /// Delivers what is due on `level` and arms the timer for the next message.
    fn process(&mut self, level: u32, ctx: &mut Context<Self>) {
        let queue_id = level - 1;
        let state = &mut self.levels[queue_id as usize];
        if state.busy {
            return;
        }
        let (cursor, delay) = (state.cursor, state.delay);
        let read =
            match self
                .reader
                .read(SCHEDULE_TOPIC, queue_id, cursor, BATCH, BATCH_BYTES, None)
            {
                Ok(read) => read,
                Err(e) => {
                    tracing::warn!(
                        level,
                        offset = cursor,
                        error = &e as &dyn Error,
                        "reading delayed messages failed"
                    );
                    return self.retry_later(level, ctx);
                }
            };
        match read.status {
            ReadStatus::Found => {}
            ReadStatus::NoMessageInQueue | ReadStatus::OffsetOverflowOne => return,
            ReadStatus::OffsetTooSmall | ReadStatus::NoMatchedMessage
                if read.next_begin_offset > cursor =>
            {
                tracing::warn!(
                    level,
                    offset = cursor,
                    next = read.next_begin_offset,
                    "delay cursor moved"
                );
                self.levels[queue_id as usize].cursor = read.next_begin_offset;
                return self.process(level, ctx);
            }
            ReadStatus::OffsetTooSmall | ReadStatus::NoMatchedMessage => {
                tracing::error!(
                    level,
                    offset = cursor,
                    "delay cursor cannot move; retrying later"
                );
                return self.retry_later(level, ctx);
            }
            ReadStatus::OffsetOverflowBadly => {
                tracing::error!(
                    level,
                    offset = cursor,
                    max = read.max_offset,
                    "delay cursor beyond the schedule queue; resuming at its end"
                );
                self.levels[queue_id as usize].cursor = read.max_offset;
                return;
            }
        }
        let messages = match decode_records(read.records) {
            Ok(messages) => messages,
            Err(e) => {
                tracing::error!(level, offset = cursor, error = %e, "undecodable delayed message");
                return self.retry_later(level, ctx);
            }
        };
        let delay_ms = delay.as_millis() as i64;
        let now = self.clock.now_ms();
        let mut due = Vec::new();
        let mut next = cursor;
        let mut wait = None;
        for message in messages {
            let due_at = message.store_timestamp.saturating_add(delay_ms);
            if due_at > now {
                wait = Some(Duration::from_millis((due_at - now) as u64));
                break;
            }
            next = message.queue_offset + 1;
            match real_message(&message) {
                Some(copy) => due.push(copy),
                None => {
                    self.snapshot.skipped += 1;
                    tracing::error!(
                        level,
                        offset = message.queue_offset,
                        "delayed message without a valid REAL_TOPIC/REAL_QID dropped"
                    );
                }
            }
        }
        if next > cursor {
            self.deliver(level, due, next, ctx);
        } else if let Some(wait) = wait {
            self.wake_at(level, wait, ctx);
        }
    }

    fn deliver(
        &mut self,
        level: u32,
        copies: Vec<MessageToAppend>,
        next: u64,
        ctx: &mut Context<Self>,
    ) {
        let queue_id = level - 1;
        self.levels[queue_id as usize].busy = true;
        let store = self.store.clone();
        let offsets = self.offsets.clone();
        let count = copies.len() as u64;
        let default_queue_nums = self.default_queue_nums;
        let now_ms = self.clock.now_ms();
        let work = async move {
            let mut skipped = 0;
            if !copies.is_empty() {
                let appended = store
                    .send(AppendMessages {
                        messages: copies,
                        default_queue_nums,
                    })
                    .await
                    .map_err(|source| BrokerError::Mailbox {
                        actor: "message store",
                        source,
                    })?;
                match appended {
                    Ok(_) => {}
                    // The real topic or queue is gone for good; retrying would wedge the level.
                    Err(BrokerError::Refused(e))
                        if matches!(e, Refused::InvalidDelay(_)) || e.is_destination_gone() =>
                    {
                        tracing::error!(
                            level,
                            error = &e as &dyn Error,
                            "delayed messages undeliverable, dropped"
                        );
                        skipped = count;
                    }
                    Err(e) => return Err(e),
                }
            }
            offsets
                .send(CommitOffset {
                    slot: GroupQueue::new(SCHEDULE_GROUP, SCHEDULE_TOPIC, queue_id),
                    offset: next,
                    now_ms,
                })
                .await
                .map_err(|source| BrokerError::Mailbox {
                    actor: "consumer offsets",
                    source,
                })??;
            Ok(skipped)
        };
        ctx.spawn(work.into_actor(self).map(move |outcome, act, ctx| {
            let state = &mut act.levels[queue_id as usize];
            state.busy = false;
            match outcome {
                Ok(skipped) => {
                    state.cursor = next;
                    act.snapshot.delivered += count - skipped;
                    act.snapshot.skipped += skipped;
                    tracing::debug!(level, offset = next, count, "delayed messages delivered");
                    act.process(level, ctx);
                }
                Err(e) => {
                    tracing::warn!(
                        level,
                        offset = next,
                        error = &e as &dyn Error,
                        "delivering delayed messages failed"
                    );
                    act.retry_later(level, ctx);
                }
            }
        }));
    }

    fn process_idle(&mut self, ctx: &mut Context<Self>) {
        for level in 1..=SCHEDULE_QUEUE_NUMS {
            let state = &self.levels[level as usize - 1];
            if !state.busy && self.reader.max_offset(SCHEDULE_TOPIC, level - 1) > state.cursor {
                self.process(level, ctx);
            }
        }
    }
}

/// The copy of a scheduled message for its real topic and queue, original properties restored.
fn real_message(message: &StoredMessage) -> Option<MessageToAppend> {
    let topic = message.property(REAL_TOPIC)?.to_string();
    let queue_id = message.property(REAL_QID)?.trim().parse().ok()?;
    if topic.is_empty() || topic == SCHEDULE_TOPIC {
        return None;
    }
    Some(MessageToAppend {
        topic,
        queue_id,
        properties: without_properties(&message.properties, &[DELAY, REAL_TOPIC, REAL_QID]),
        ..MessageToAppend::copy_of(message)
    })
}

impl Actor for DelaySchedulerActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        for level in 1..=SCHEDULE_QUEUE_NUMS {
            self.process(level, ctx);
        }
        ctx.run_interval(SWEEP_INTERVAL, |act, ctx| act.process_idle(ctx));
    }
}

impl Handler<NotifyArrivals> for DelaySchedulerActor {
    type Result = ();

    fn handle(&mut self, msg: NotifyArrivals, ctx: &mut Self::Context) {
        for arrival in msg.queues {
            if arrival.topic == SCHEDULE_TOPIC && arrival.queue_id < SCHEDULE_QUEUE_NUMS {
                self.process(arrival.queue_id + 1, ctx);
            }
        }
    }
}

/// Stops the actor and its timers. A delivery still running is abandoned: its cursor is not
/// committed, so the level re-delivers that batch after a restart (twice, never zero times).
impl Handler<Quit> for DelaySchedulerActor {
    type Result = ();

    fn handle(&mut self, _: Quit, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl Handler<Observe> for DelaySchedulerActor {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        let mut snapshot = self.snapshot.clone();
        snapshot.levels = self
            .levels
            .iter()
            .enumerate()
            .map(|(i, s)| LevelView {
                level: i as u32 + 1,
                cursor: s.cursor,
                busy: s.busy,
            })
            .collect();
        MessageResult(snapshot)
    }
}
