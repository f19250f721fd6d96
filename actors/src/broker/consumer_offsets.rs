//! The consumer-offset actor: owns the broker's [`OffsetTable`] and the pending admin resets
//! (`docs/offset-lifecycle.md` §1.A).
//!
//! - A commit always writes, even a lower offset (§1.A.2); the lowering is logged.
//! - An admin reset writes the table and leaves a pending reset per (group, topic, queue):
//!   until the group's next pull of that queue takes it, commits are acknowledged and ignored
//!   (§1.A.5), so a consumer still holding the old position cannot undo the reset.
//! - A corrupt record is an error all the way up, never "not found" or 0.
//! - [`PersistNow`] (driven by the broker's [`crate::persister::Persister`]) flushes the table.

use crate::broker_api::BrokerError;
use crate::logic::delay::SCHEDULE_TOPIC;
use crate::logic::lite::LMQ_PREFIX;
use crate::logic::queue::GroupQueue;
use crate::logic::transaction::HALF_TOPIC;
use crate::persister::PersistNow;
use crate::quit::Quit;
use actix::prelude::*;
use skiff_storage::offset_table::{CommitOutcome, OffsetKey, OffsetTable, OffsetTableError};
use std::collections::HashMap;
use std::error::Error;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The offset-table key of a group's queue (the queue id is stored beside it).
fn offset_key(slot: &GroupQueue) -> OffsetKey {
    OffsetKey::new(slot.topic.clone(), slot.group.clone())
}

/// Commits a consumer offset (UPDATE_CONSUMER_OFFSET, or piggybacked on a pull).
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<CommitResult, BrokerError>")]
pub struct CommitOffset {
    pub slot: GroupQueue,
    pub offset: u64,
    /// Milliseconds since the epoch on the broker clock, kept for admin progress.
    pub now_ms: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitResult {
    Applied(CommitOutcome),
    /// An admin reset is pending for the slot; the commit was acknowledged but not stored.
    IgnoredPendingReset {
        reset_offset: u64,
    },
}

/// A pop's commit, sent by the pop actor without waiting (in order behind the checkpoint writes
/// it follows); a failure is logged, and leaves the stored offset behind, which is safe.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct CommitPopped(pub CommitOffset);

/// Where a pop of a queue starts, in one look: a pending admin reset (taken, so the next pop
/// goes on from the pop after it), else the stored offset.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<PopStart, BrokerError>")]
pub struct TakePopStart {
    pub slot: GroupQueue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PopStart {
    Reset(u64),
    Stored(Option<u64>),
}

/// Reads a stored offset: the pending reset first, then the table (§1.A.3).
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<Option<u64>, BrokerError>")]
pub struct QueryOffset {
    pub slot: GroupQueue,
}

/// [`QueryOffset`] for several slots in one look.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<Vec<Option<u64>>, BrokerError>")]
pub struct QueryOffsets {
    pub slots: Vec<GroupQueue>,
}

/// Admin reset: writes the offset (lower allowed) and records it as pending for the next pull.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<(), BrokerError>")]
pub struct ResetOffset {
    pub slot: GroupQueue,
    pub offset: u64,
}

/// Takes (and clears) the pending reset of a slot; the pull path answers with it.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Option<u64>")]
pub struct TakePendingReset {
    pub slot: GroupQueue,
}

/// Every stored offset of a group.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<Vec<GroupOffset>, BrokerError>")]
pub struct ListGroup {
    pub group: String,
}

/// The groups that have an offset stored for a topic, sorted (QUERY_TOPIC_CONSUME_BY_WHO).
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<Vec<String>, BrokerError>")]
pub struct GroupsOfTopic {
    pub topic: String,
}

/// Forgets every offset of a group (DELETE_SUBSCRIPTIONGROUP with `cleanOffset`); answers how
/// many were removed.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<usize, BrokerError>")]
pub struct RemoveGroupOffsets {
    pub group: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupOffset {
    pub topic: String,
    pub queue_id: u32,
    pub offset: u64,
    /// Broker-clock time of the last commit seen since this broker started (none kept for a
    /// lite topic's queue).
    pub last_commit_ms: Option<i64>,
}

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "ConsumerOffsetsSnapshot")]
pub struct Observe;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerOffsetsSnapshot {
    pub commits: u64,
    pub lowered: u64,
    pub ignored_by_pending_reset: u64,
    pub resets: u64,
    pub pending_resets: Vec<(GroupQueue, u64)>,
    pub flushes: u64,
    pub flush_failures: u64,
    pub closed: bool,
}

/// Whether any admin reset is pending, shared with the pop path: a queue being popped reads
/// from where its last pop ended without asking this actor, unless a reset may be waiting.
#[derive(Clone, Debug, Default)]
pub struct PendingResets(Arc<AtomicUsize>);

impl PendingResets {
    pub fn any(&self) -> bool {
        self.0.load(Ordering::Acquire) > 0
    }
}

pub struct ConsumerOffsetsActor {
    table: Option<Box<dyn OffsetTable>>,
    pending: HashMap<GroupQueue, u64>,
    pending_count: PendingResets,
    last_commit_ms: HashMap<GroupQueue, i64>,
    snapshot: ConsumerOffsetsSnapshot,
}

const MAILBOX_CAPACITY: usize = 4096;

impl ConsumerOffsetsActor {
    pub fn new(table: Box<dyn OffsetTable>) -> Self {
        ConsumerOffsetsActor {
            table: Some(table),
            pending: HashMap::new(),
            pending_count: PendingResets::default(),
            last_commit_ms: HashMap::new(),
            snapshot: ConsumerOffsetsSnapshot::default(),
        }
    }

    /// The shared view of whether a reset is pending; take it before the actor starts.
    pub fn pending_resets(&self) -> PendingResets {
        self.pending_count.clone()
    }

    /// Brings the shared view level with the pending resets, after every change to them.
    fn pending_changed(&self) {
        self.pending_count
            .0
            .store(self.pending.len(), Ordering::Release);
    }

    fn table(&mut self) -> Result<&mut Box<dyn OffsetTable>, BrokerError> {
        self.table.as_mut().ok_or(BrokerError::Closed {
            what: "offset table",
        })
    }
}

impl Actor for ConsumerOffsetsActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
    }
}

impl ConsumerOffsetsActor {
    fn commit(
        &mut self,
        slot: &GroupQueue,
        offset: u64,
        now_ms: i64,
    ) -> Result<CommitResult, BrokerError> {
        if let Some(&reset_offset) = self.pending.get(slot) {
            self.snapshot.ignored_by_pending_reset += 1;
            tracing::debug!(
                group = %slot.group, topic = %slot.topic, queue_id = slot.queue_id,
                offset, reset_offset,
                "commit ignored while an admin reset is pending"
            );
            return Ok(CommitResult::IgnoredPendingReset { reset_offset });
        }
        let outcome = self
            .table()?
            .commit(&offset_key(slot), slot.queue_id, offset)?;
        self.snapshot.commits += 1;
        if let CommitOutcome::Lowered { previous } = outcome {
            self.snapshot.lowered += 1;
            // RocketMQ's "[NOTIFYME]": legitimate for orderly consumers and client resets, a
            // bug anywhere else, so it is stored but never silent.
            tracing::warn!(
                group = %slot.group, topic = %slot.topic, queue_id = slot.queue_id,
                offset, previous,
                "consumer offset committed lower than the stored one"
            );
        }
        // Not for a lite topic's queue: there may be millions, each short-lived, and the time
        // would be memory per lite topic for as long as the broker runs (the stored record
        // keeps its own time of the write).
        if slot.topic.starts_with(LMQ_PREFIX) {
            return Ok(CommitResult::Applied(outcome));
        }
        // The slot is usually known already: no copy of its names per commit.
        match self.last_commit_ms.get_mut(slot) {
            Some(at) => *at = now_ms,
            None => {
                self.last_commit_ms.insert(slot.clone(), now_ms);
            }
        }
        Ok(CommitResult::Applied(outcome))
    }
}

impl Handler<CommitOffset> for ConsumerOffsetsActor {
    type Result = Result<CommitResult, BrokerError>;

    fn handle(&mut self, msg: CommitOffset, _: &mut Self::Context) -> Self::Result {
        self.commit(&msg.slot, msg.offset, msg.now_ms)
    }
}

impl Handler<CommitPopped> for ConsumerOffsetsActor {
    type Result = ();

    fn handle(&mut self, msg: CommitPopped, _: &mut Self::Context) {
        let CommitOffset {
            slot,
            offset,
            now_ms,
        } = msg.0;
        if let Err(e) = self.commit(&slot, offset, now_ms) {
            // The stored offset stays behind: after a restart the group pops these again.
            tracing::error!(group = %slot.group, topic = %slot.topic, queue_id = slot.queue_id, offset, error = &e as &dyn Error, "pop offset not committed");
        }
    }
}

impl Handler<TakePopStart> for ConsumerOffsetsActor {
    type Result = Result<PopStart, BrokerError>;

    fn handle(&mut self, msg: TakePopStart, _: &mut Self::Context) -> Self::Result {
        if let Some(reset) = self.pending.remove(&msg.slot) {
            self.pending_changed();
            return Ok(PopStart::Reset(reset));
        }
        let slot = msg.slot;
        Ok(PopStart::Stored(
            self.table()?.query(&offset_key(&slot), slot.queue_id)?,
        ))
    }
}

impl Handler<QueryOffset> for ConsumerOffsetsActor {
    type Result = Result<Option<u64>, BrokerError>;

    fn handle(&mut self, msg: QueryOffset, _: &mut Self::Context) -> Self::Result {
        if let Some(&offset) = self.pending.get(&msg.slot) {
            return Ok(Some(offset));
        }
        let slot = msg.slot;
        Ok(self.table()?.query(&offset_key(&slot), slot.queue_id)?)
    }
}

impl Handler<QueryOffsets> for ConsumerOffsetsActor {
    type Result = Result<Vec<Option<u64>>, BrokerError>;

    fn handle(&mut self, msg: QueryOffsets, ctx: &mut Self::Context) -> Self::Result {
        msg.slots
            .into_iter()
            .map(|slot| self.handle(QueryOffset { slot }, ctx))
            .collect()
    }
}

impl Handler<ResetOffset> for ConsumerOffsetsActor {
    type Result = Result<(), BrokerError>;

    fn handle(&mut self, msg: ResetOffset, _: &mut Self::Context) -> Self::Result {
        let slot = msg.slot;
        self.table()?
            .reset(&offset_key(&slot), slot.queue_id, msg.offset)?;
        self.snapshot.resets += 1;
        tracing::info!(
            group = %slot.group, topic = %slot.topic, queue_id = slot.queue_id,
            offset = msg.offset, "consumer offset reset by admin"
        );
        self.pending.insert(slot, msg.offset);
        self.pending_changed();
        Ok(())
    }
}

impl Handler<TakePendingReset> for ConsumerOffsetsActor {
    type Result = Option<u64>;

    fn handle(&mut self, msg: TakePendingReset, _: &mut Self::Context) -> Self::Result {
        // Cheap exit for the hot path: almost every pull finds nothing pending.
        if self.pending.is_empty() {
            return None;
        }
        let taken = self.pending.remove(&msg.slot);
        self.pending_changed();
        taken
    }
}

impl Handler<ListGroup> for ConsumerOffsetsActor {
    type Result = Result<Vec<GroupOffset>, BrokerError>;

    fn handle(&mut self, msg: ListGroup, _: &mut Self::Context) -> Self::Result {
        let entries = self.table()?.list_group(&msg.group)?;
        Ok(entries
            .into_iter()
            .map(|(key, queue_id, offset)| {
                let slot = GroupQueue::new(msg.group.clone(), key.topic.clone(), queue_id);
                GroupOffset {
                    last_commit_ms: self.last_commit_ms.get(&slot).copied(),
                    topic: key.topic,
                    queue_id,
                    offset,
                }
            })
            .collect())
    }
}

impl Handler<GroupsOfTopic> for ConsumerOffsetsActor {
    type Result = Result<Vec<String>, BrokerError>;

    fn handle(&mut self, msg: GroupsOfTopic, _: &mut Self::Context) -> Self::Result {
        let mut groups: Vec<String> = self
            .table()?
            .list_all()?
            .into_iter()
            .filter(|(key, _, _)| key.topic == msg.topic)
            .map(|(key, _, _)| key.group)
            .collect();
        groups.sort();
        groups.dedup();
        Ok(groups)
    }
}

/// Removes every group's offsets on a deleted topic; answers how many went.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<usize, BrokerError>")]
pub struct RemoveTopicOffsets {
    pub topic: String,
}

impl Handler<RemoveTopicOffsets> for ConsumerOffsetsActor {
    type Result = Result<usize, BrokerError>;

    fn handle(&mut self, msg: RemoveTopicOffsets, _: &mut Self::Context) -> Self::Result {
        let removed = self.table()?.remove_topic(&msg.topic)?;
        self.pending.retain(|slot, _| slot.topic != msg.topic);
        self.pending_changed();
        self.last_commit_ms
            .retain(|slot, _| slot.topic != msg.topic);
        tracing::info!(topic = %msg.topic, removed, "consumer offsets of a deleted topic removed");
        Ok(removed)
    }
}

impl Handler<RemoveGroupOffsets> for ConsumerOffsetsActor {
    type Result = Result<usize, BrokerError>;

    fn handle(&mut self, msg: RemoveGroupOffsets, _: &mut Self::Context) -> Self::Result {
        let removed = self.table()?.remove_group(&msg.group)?;
        self.pending.retain(|slot, _| slot.group != msg.group);
        self.pending_changed();
        self.last_commit_ms
            .retain(|slot, _| slot.group != msg.group);
        tracing::info!(group = %msg.group, removed, "consumer offsets of a deleted group removed");
        Ok(removed)
    }
}

/// Every stored offset of every group, system cursors (the schedule's, the transaction
/// checker's) left out: `(group, topic, queue id, offset)`.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "Result<Vec<(String, String, u32, u64)>, BrokerError>")]
pub struct ListAllGroups;

impl Handler<ListAllGroups> for ConsumerOffsetsActor {
    type Result = Result<Vec<(String, String, u32, u64)>, BrokerError>;

    fn handle(&mut self, _: ListAllGroups, _: &mut Self::Context) -> Self::Result {
        Ok(self
            .table()?
            .list_all()?
            .into_iter()
            .filter(|(key, _, _)| key.topic != SCHEDULE_TOPIC && key.topic != HALF_TOPIC)
            .map(|(key, queue_id, offset)| (key.group, key.topic, queue_id, offset))
            .collect())
    }
}

impl Handler<PersistNow<OffsetTableError>> for ConsumerOffsetsActor {
    type Result = Result<(), OffsetTableError>;

    fn handle(&mut self, _: PersistNow<OffsetTableError>, _: &mut Self::Context) -> Self::Result {
        let Some(table) = self.table.as_mut() else {
            // Closed: the close already flushed; nothing is left to persist.
            return Ok(());
        };
        match table.flush() {
            Ok(()) => {
                self.snapshot.flushes += 1;
                Ok(())
            }
            Err(e) => {
                self.snapshot.flush_failures += 1;
                tracing::error!(error = &e as &dyn Error, "offset table flush failed");
                Err(e)
            }
        }
    }
}

/// Flushes and releases the table, then stops; requests queued behind it fail as closed.
impl Handler<Quit<Result<(), BrokerError>>> for ConsumerOffsetsActor {
    type Result = Result<(), BrokerError>;

    fn handle(
        &mut self,
        _: Quit<Result<(), BrokerError>>,
        ctx: &mut Self::Context,
    ) -> Self::Result {
        self.snapshot.closed = true;
        ctx.stop();
        match self.table.take() {
            Some(mut table) => {
                let outcome = table.flush();
                if outcome.is_ok() {
                    self.snapshot.flushes += 1;
                }
                // Dropped here, not when the actor is collected, so the sled database is released
                // by the time the broker's shutdown answers.
                drop(table);
                Ok(outcome?)
            }
            None => Ok(()),
        }
    }
}

impl Handler<Observe> for ConsumerOffsetsActor {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        let mut snapshot = self.snapshot.clone();
        snapshot.pending_resets = self
            .pending
            .iter()
            .map(|(slot, offset)| (slot.clone(), *offset))
            .collect();
        snapshot.pending_resets.sort();
        MessageResult(snapshot)
    }
}
