//! [`PopActor`]: the one owner of pop state (`docs/offset-lifecycle.md` §1.H).
//!
//! - The queues a pop is reading right now: a pop claims a (group, topic, queue) before it reads
//!   and releases it after, so two pops of one group never read the same offset.
//! - The durable checkpoints of unordered pops (one per message handed out and not yet
//!   acknowledged); each whose invisible time passed is revived into the group's pop retry topic.
//! - Orderly pop's per-queue blocks (durably too).
//! - Each topic and group's request mode (pull or pop), which QUERY_ASSIGNMENT answers.
//!
//! Checkpoints live in memory, indexed by the time they become visible, and in [`PopState`]'s
//! sled tree once written. An unordered pop's checkpoints are written only if their messages are
//! still unacknowledged a window later ([`CheckpointBuffer`]); the actor, not the pop path,
//! commits a popped queue's offset, and never past a message whose checkpoint is in memory only,
//! so a crash pops those messages again instead of losing them. A revival removes the
//! checkpoint only after the copy is appended, so a crash in between revives the message once
//! more rather than never. The revival rounds are in `actor/revive.rs`.

mod held;
mod revive;

use crate::broker::consumer_offsets::{CommitOffset, CommitPopped, ConsumerOffsetsActor};
use crate::broker::message_store::MessageStoreActor;
use crate::broker::registry::Registry;
use crate::broker::release::Holder;
use crate::broker::BrokerClock;
use crate::broker_api::BrokerError;
use crate::logic::pop::{OrderlyQueue, PopMode};
use crate::logic::pop_buffer::{CheckpointBuffer, Writes};
use crate::logic::queue::GroupQueue;
use crate::quit::Quit;
use actix::prelude::*;
use fxhash::FxHashSet;
use held::HeldCheckpoints;
use skiff_storage::pop_state::{
    Checkpoint, CheckpointKey, CheckpointTimes, PopState, RequestModeEntry,
};
use skiff_storage::store::StoreReader;
use std::collections::{HashMap, HashSet};
use std::error::Error;
use std::time::Duration;

fn checkpoint_key(queue: &GroupQueue, queue_offset: u64) -> CheckpointKey {
    CheckpointKey {
        group: queue.group.clone(),
        topic: queue.topic.clone(),
        queue_id: queue.queue_id,
        queue_offset,
    }
}

/// Claims a queue for one pop before it reads it; answered [`Claim::Claimed`], the pop must send
/// [`ReleaseQueue`] when done.
/// Answered with the claim and, for each queue of `look_ahead`, where the group's next pop of
/// it reads while it is being popped (as [`NextOffsets`] answers).
#[derive(Message, Debug)]
#[rtype(result = "(Claim, Vec<(GroupQueue, Option<u64>)>)")]
pub struct ClaimQueue {
    pub queue: GroupQueue,
    pub mode: PopMode,
    pub now_ms: i64,
    pub look_ahead: Vec<GroupQueue>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The pop may read the queue; nobody else of the group does until it is released. `next`:
    /// where the group's last pop of the queue ended, while the stored offset lags behind it.
    Claimed { next: Option<u64> },
    /// Another pop of the group is reading the queue (Java skips it the same way).
    Busy { next: Option<u64> },
    /// An orderly batch is still out on the queue until `visible_at_ms`; it is not claimed.
    Blocked { visible_at_ms: i64 },
}

/// Where the group's next pop of each queue reads, for those being popped (the stored offset
/// may lag behind them); answered with the queues given.
#[derive(Message, Debug)]
#[rtype(result = "Vec<(GroupQueue, Option<u64>)>")]
pub struct NextOffsets {
    pub queues: Vec<GroupQueue>,
}

/// Frees a claimed queue.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct ReleaseQueue {
    pub queue: GroupQueue,
}

/// Records what one pop hands out of a claimed queue, and frees the queue: an unordered pop's
/// checkpoints (one per offset; none when everything read was filtered out) and its offset,
/// which the actor commits; or an orderly pop's batch. Answered once recorded; an orderly pop's
/// answer is each offset with how often it was handed out before, an unordered pop's is empty.
#[derive(Message, Debug)]
#[rtype(result = "Result<Vec<(u64, u32)>, BrokerError>")]
pub struct HandOut {
    pub queue: GroupQueue,
    pub mode: PopMode,
    pub offsets: Vec<u64>,
    /// The offset the pop read from (the receipts' checkpoint offset).
    pub batch_start_offset: u64,
    /// The offset after the last one read.
    pub next_offset: u64,
    pub pop_time_ms: i64,
    pub invisible_ms: i64,
}

/// Acknowledgements of popped messages of one queue, each naming the pop it answers by that
/// pop's time: the consecutive entries of a batch that name one queue, so the actor looks the
/// queue up once for all of them. An acknowledgement of a message already revived, or of an
/// older pop of it, changes nothing.
#[derive(Debug)]
pub struct QueueAcks {
    pub queue: GroupQueue,
    pub mode: PopMode,
    /// Each message's queue offset and the time of the pop it answers.
    pub acks: Vec<(u64, i64)>,
}

/// The acknowledgements of a batch (a remoting batch ack, a gRPC AckMessage, or one alone),
/// answered each, in order.
#[derive(Message, Debug)]
#[rtype(result = "Vec<Result<Acked, BrokerError>>")]
pub struct AckMany(pub Vec<QueueAcks>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acked {
    /// Unordered: the message was no longer held by that pop. Orderly: its batch is not out or
    /// not complete yet, and the offset stays.
    NotHeld,
    /// Unordered: the message was held and is not any more.
    Held,
    /// Orderly: the batch is complete and the group's offset moves to this one.
    MovesOffset(u64),
}

/// Gives one popped message a new invisible time from `now_ms`. Unordered: its checkpoint (of
/// whichever pop) is replaced by one popped at `now_ms`, as Java appends a new checkpoint and
/// acknowledges the old. Orderly: the batch of the pop at `pop_time_ms` becomes visible then.
/// Answers whether the message was still held; one acknowledged or revived already is left so.
#[derive(Message, Debug)]
#[rtype(result = "Result<bool, BrokerError>")]
pub struct ChangeInvisible {
    pub queue: GroupQueue,
    pub mode: PopMode,
    pub offset: u64,
    /// The pop time and checkpoint offset of the receipt.
    pub pop_time_ms: i64,
    pub batch_start_offset: u64,
    pub now_ms: i64,
    pub invisible_ms: i64,
}

/// SET_MESSAGE_REQUEST_MODE: records how the group reads the topic.
#[derive(Message, Debug)]
#[rtype(result = "Result<(), BrokerError>")]
pub struct SetRequestMode {
    pub topic: String,
    pub group: String,
    pub entry: RequestModeEntry,
}

/// The request mode recorded for a topic and group, if any.
#[derive(Message, Debug)]
#[rtype(result = "Result<Option<RequestModeEntry>, BrokerError>")]
pub struct RequestModeOf {
    pub topic: String,
    pub group: String,
}

/// Drops every checkpoint and orderly block of a group (the group was deleted).
#[derive(Message, Debug)]
#[rtype(result = "Result<usize, BrokerError>")]
pub struct ForgetGroup {
    pub group: String,
}

/// Whether an orderly queue is blocked by a batch still out.
#[derive(Message, Debug)]
#[rtype(result = "bool")]
pub struct OrderlyBlocked {
    pub queue: GroupQueue,
    pub now_ms: i64,
}

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "PopSnapshot")]
pub struct Observe;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PopSnapshot {
    /// Checkpoints held (popped, neither acknowledged nor revived).
    pub held: usize,
    /// Of those, checkpoints in memory only (not written to the store yet).
    pub unwritten: usize,
    /// Checkpoints written to the store (their messages were not acknowledged in the window).
    pub written: u64,
    pub acked: u64,
    pub revived: u64,
    /// Checkpoints dropped because their message is gone (retention deleted it).
    pub vanished: u64,
    pub failed: u64,
}

pub struct PopActor {
    state: PopState,
    reader: StoreReader,
    registry: Registry,
    store: Addr<MessageStoreActor>,
    offsets: Addr<ConsumerOffsetsActor>,
    clock: BrokerClock,
    revive_interval: Duration,
    held: HeldCheckpoints,
    buffer: CheckpointBuffer,
    /// Checkpoints whose revival failed, with when to try again.
    deferred: HashMap<CheckpointKey, i64>,
    /// A revival round is appending; the next waits for it.
    round_running: bool,
    /// Checkpoints whose copy failed in a batch: appended alone from now on.
    solo: HashSet<CheckpointKey>,
    orderly: HashMap<GroupQueue, OrderlyQueue>,
    /// Queues a pop is reading right now.
    claimed: FxHashSet<GroupQueue>,
    snapshot: PopSnapshot,
    _holder: Holder,
}

impl PopActor {
    /// Loads every checkpoint a previous run left: each is revived when due, as if the broker
    /// had never stopped.
    pub(crate) fn new(
        state: PopState,
        reader: StoreReader,
        registry: Registry,
        stores: (Addr<MessageStoreActor>, Addr<ConsumerOffsetsActor>),
        clock: BrokerClock,
        config: &PopConfig,
        holder: Holder,
    ) -> Result<Self, BrokerError> {
        let (store, offsets) = stores;
        let mut actor = PopActor {
            _holder: holder,
            held: HeldCheckpoints::default(),
            buffer: CheckpointBuffer::new(config.checkpoint_window, config.checkpoint_capacity),
            offsets,
            deferred: HashMap::new(),
            round_running: false,
            solo: HashSet::new(),
            orderly: HashMap::new(),
            claimed: FxHashSet::default(),
            snapshot: PopSnapshot::default(),
            state,
            reader,
            registry,
            store,
            clock,
            revive_interval: config.revive_interval,
        };
        let loaded = actor.state.checkpoints()?;
        if !loaded.is_empty() {
            tracing::info!(checkpoints = loaded.len(), "pop checkpoints loaded");
        }
        for Checkpoint { key, times } in loaded {
            let queue = GroupQueue::new(key.group, key.topic, key.queue_id);
            actor.held.insert(&queue, key.queue_offset, times);
        }
        for (group, topic, queue_id, state) in actor.state.orderly_states::<OrderlyQueue>()? {
            actor.orderly.insert(
                GroupQueue {
                    group,
                    topic,
                    queue_id,
                },
                state,
            );
        }
        Ok(actor)
    }

    /// Records one orderly queue's state as it now is (forgotten once idle); a failed write only
    /// costs the state a restart would have found, so it is logged.
    fn persist_orderly(&mut self, queue: &GroupQueue) {
        let state = self.orderly.get(queue).filter(|q| !q.is_idle());
        if let Err(e) = self
            .state
            .put_orderly(&queue.group, &queue.topic, queue.queue_id, state)
        {
            tracing::error!(group = %queue.group, topic = %queue.topic, queue_id = queue.queue_id, error = &e as &dyn Error, "orderly pop state not recorded");
        }
        if state.is_none() {
            self.orderly.remove(queue);
        }
    }

    fn orderly_blocked(&self, queue: &GroupQueue, now_ms: i64) -> bool {
        self.orderly_blocked_until(queue, now_ms).is_some()
    }

    fn orderly_blocked_until(&self, queue: &GroupQueue, now_ms: i64) -> Option<i64> {
        self.orderly.get(queue)?.blocked_until(now_ms)
    }

    /// Drops a checkpoint that is done with, unless it was changed meanwhile.
    fn forget(&mut self, key: &CheckpointKey, times: CheckpointTimes) {
        let queue = GroupQueue::new(&key.group, &key.topic, key.queue_id);
        if self.held.get(&queue, key.queue_offset) != Some(times) {
            return;
        }
        let settled = self.settle(&queue, key.queue_offset);
        if let Ok(true) = settled {
            self.commit(&queue);
        }
        if let Err(e) = settled {
            tracing::error!(group = %key.group, topic = %key.topic, queue_id = key.queue_id, offset = key.queue_offset, error = &e as &dyn Error, "pop checkpoint not removed; the message may be revived again");
        }
    }

    /// Takes a held checkpoint away (its message acknowledged or revived): from memory, and from
    /// the store if it was written. Answers whether it was in memory only: then the queue's
    /// offset may move on, with one [`Self::commit`] however many settle together.
    fn settle(&mut self, queue: &GroupQueue, offset: u64) -> Result<bool, BrokerError> {
        self.held.remove(queue, offset);
        self.release_all(queue, &[offset])
            .pop()
            .unwrap_or(Ok(false))
    }

    /// Settles the checkpoints of `offsets` of `queue`, already taken out of `held`: answers
    /// each whether it was in memory only (else its stored copy is removed).
    fn release_all(
        &mut self,
        queue: &GroupQueue,
        offsets: &[u64],
    ) -> Vec<Result<bool, BrokerError>> {
        // Almost always empty: no key built for nothing.
        if !self.deferred.is_empty() || !self.solo.is_empty() {
            for offset in offsets {
                let key = checkpoint_key(queue, *offset);
                self.deferred.remove(&key);
                self.solo.remove(&key);
            }
        }
        let in_memory = self.buffer.settle_all(queue, offsets);
        offsets
            .iter()
            .zip(in_memory)
            .map(|(offset, in_memory)| {
                if !in_memory {
                    self.state
                        .remove_checkpoint(&checkpoint_key(queue, *offset))?;
                }
                Ok(in_memory)
            })
            .collect()
    }

    /// Sends the queue's commit, if its stored offset may move on. The checkpoint writes it
    /// depends on are made already (synchronously, in this actor), and the commit lands in the
    /// same sled database after them.
    fn commit(&mut self, queue: &GroupQueue) {
        if let Some(offset) = self.buffer.commit_for(queue) {
            self.offsets.do_send(CommitPopped(CommitOffset {
                slot: queue.clone(),
                offset,
                now_ms: self.clock.now_ms(),
            }));
        }
    }

    /// Writes checkpoints that waited in memory, all in one batch, then commits their queues.
    fn write(&mut self, writes: Writes) -> Result<(), BrokerError> {
        if writes.is_empty() {
            return Ok(());
        }
        let checkpoints: Vec<Checkpoint> = writes
            .iter()
            .flat_map(|(queue, offsets)| {
                offsets.iter().filter_map(|offset| {
                    let times = self.held.get(queue, *offset)?;
                    Some(Checkpoint {
                        key: checkpoint_key(queue, *offset),
                        times,
                    })
                })
            })
            .collect();
        self.state.put_checkpoints(&checkpoints)?;
        self.snapshot.written += checkpoints.len() as u64;
        for (queue, offsets) in &writes {
            self.buffer.written(queue, offsets);
            self.commit(queue);
        }
        Ok(())
    }

    /// Writes the checkpoints whose window has passed (or beyond the buffer's capacity); those
    /// a failed write leaves in memory keep holding their queues' offsets back.
    fn write_due(&mut self) {
        let now_ms = self.clock.now_ms();
        self.buffer.forget_idle(now_ms);
        let writes = self.buffer.due(now_ms);
        if let Err(e) = self.write(writes) {
            tracing::error!(
                error = &e as &dyn Error,
                "pop checkpoints not written; their queues' offsets stay behind them"
            );
        }
    }

    /// Each queue with where the group's next pop of it reads, while it is being popped.
    fn next_offsets(&self, queues: Vec<GroupQueue>) -> Vec<(GroupQueue, Option<u64>)> {
        queues
            .into_iter()
            .map(|q| {
                let next = self.buffer.next_offset(&q);
                (q, next)
            })
            .collect()
    }

    /// The acknowledgements of one queue, answered in order into `answers`; the queue's offset
    /// is committed once after them if it may move on.
    fn ack_queue(&mut self, run: QueueAcks, answers: &mut Vec<Result<Acked, BrokerError>>) {
        let QueueAcks { queue, mode, acks } = run;
        if mode == PopMode::Orderly {
            for (offset, pop_time_ms) in acks {
                answers.push(Ok(self.ack_orderly(&queue, offset, pop_time_ms)));
            }
            return;
        }
        let slot = self.held.slot_of(&queue);
        let mut taken = Vec::with_capacity(acks.len());
        let was_held: Vec<bool> = acks
            .iter()
            .map(|&(offset, pop_time_ms)| {
                let held = slot.is_some_and(|slot| {
                    self.held
                        .remove_from_slot(slot, offset, |t| t.pop_time_ms == pop_time_ms)
                        .is_some()
                });
                if held {
                    taken.push(offset);
                }
                held
            })
            .collect();
        let mut released = self.release_all(&queue, &taken).into_iter();
        let mut may_commit = false;
        for held in was_held {
            answers.push(match held.then(|| released.next()).flatten() {
                None => Ok(Acked::NotHeld),
                Some(Ok(in_memory)) => {
                    may_commit |= in_memory;
                    self.snapshot.acked += 1;
                    Ok(Acked::Held)
                }
                Some(Err(e)) => Err(e),
            });
        }
        if may_commit {
            self.commit(&queue);
        }
    }

    /// One acknowledgement of an orderly pop: every ack is persisted, not only those that move
    /// the offset, since a batch whose acks a restart forgot could never complete.
    fn ack_orderly(&mut self, queue: &GroupQueue, offset: u64, pop_time_ms: i64) -> Acked {
        let Some(held) = self.orderly.get_mut(queue) else {
            return Acked::NotHeld;
        };
        let commit = held.ack(offset, pop_time_ms);
        self.persist_orderly(queue);
        commit.map_or(Acked::NotHeld, Acked::MovesOffset)
    }
}

/// How the pop actor keeps checkpoints and revives their messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopConfig {
    /// How often popped messages past their invisible time are looked for (Java's
    /// `reviveInterval`); checkpoints past their window are written at the same tick.
    pub revive_interval: Duration,
    /// How long an unordered pop's checkpoint waits in memory for its ack before it is written
    /// (Java's `popCkStayBufferTime`); zero writes each at the next tick.
    pub checkpoint_window: Duration,
    /// Checkpoints kept in memory at most; past it the oldest are written (`popCkMaxBufferSize`).
    pub checkpoint_capacity: usize,
}

impl Actor for PopActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(self.revive_interval, |act, ctx| {
            act.write_due();
            act.revive_due(ctx);
        });
    }
}

impl Handler<ClaimQueue> for PopActor {
    type Result = MessageResult<ClaimQueue>;

    fn handle(&mut self, msg: ClaimQueue, _: &mut Self::Context) -> Self::Result {
        let ahead = self.next_offsets(msg.look_ahead);
        let next = self.buffer.next_offset(&msg.queue);
        let blocked = match msg.mode {
            PopMode::Orderly => self.orderly_blocked_until(&msg.queue, msg.now_ms),
            PopMode::Unordered => None,
        };
        let claim = if self.claimed.contains(&msg.queue) {
            Claim::Busy { next }
        } else if let Some(visible_at_ms) = blocked {
            Claim::Blocked { visible_at_ms }
        } else {
            self.claimed.insert(msg.queue);
            Claim::Claimed { next }
        };
        MessageResult((claim, ahead))
    }
}

impl Handler<NextOffsets> for PopActor {
    type Result = MessageResult<NextOffsets>;

    fn handle(&mut self, msg: NextOffsets, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.next_offsets(msg.queues))
    }
}

impl Handler<ReleaseQueue> for PopActor {
    type Result = ();

    fn handle(&mut self, msg: ReleaseQueue, _: &mut Self::Context) {
        self.claimed.remove(&msg.queue);
    }
}

impl Handler<HandOut> for PopActor {
    type Result = Result<Vec<(u64, u32)>, BrokerError>;

    fn handle(&mut self, msg: HandOut, _: &mut Self::Context) -> Self::Result {
        self.claimed.remove(&msg.queue);
        if msg.mode == PopMode::Orderly {
            let counts = self.orderly.entry(msg.queue.clone()).or_default().hand_out(
                &msg.offsets,
                msg.next_offset,
                msg.pop_time_ms,
                msg.invisible_ms,
            );
            self.persist_orderly(&msg.queue);
            return Ok(counts);
        }
        let times = CheckpointTimes {
            pop_time_ms: msg.pop_time_ms,
            invisible_ms: msg.invisible_ms,
            batch_start_offset: msg.batch_start_offset,
        };
        self.held.insert_all(&msg.queue, &msg.offsets, times);
        self.buffer.hand_out(
            &msg.queue,
            msg.batch_start_offset,
            &msg.offsets,
            msg.next_offset,
            msg.pop_time_ms,
        );
        self.commit(&msg.queue);
        if self.buffer.over_capacity() {
            self.write_due();
        }
        Ok(Vec::new())
    }
}

impl Handler<AckMany> for PopActor {
    type Result = Vec<Result<Acked, BrokerError>>;

    fn handle(&mut self, msg: AckMany, _: &mut Self::Context) -> Self::Result {
        let mut answers = Vec::with_capacity(msg.0.iter().map(|run| run.acks.len()).sum());
        for run in msg.0 {
            self.ack_queue(run, &mut answers);
        }
        answers
    }
}

impl Handler<ChangeInvisible> for PopActor {
    type Result = Result<bool, BrokerError>;

    fn handle(&mut self, msg: ChangeInvisible, _: &mut Self::Context) -> Self::Result {
        if msg.mode == PopMode::Orderly {
            let visible_at_ms = msg.now_ms.saturating_add(msg.invisible_ms);
            let changed = self
                .orderly
                .get_mut(&msg.queue)
                .is_some_and(|q| q.change_invisible(msg.pop_time_ms, visible_at_ms));
            if changed {
                self.persist_orderly(&msg.queue);
            }
            return Ok(changed);
        }
        if self.held.get(&msg.queue, msg.offset).is_none() {
            return Ok(false);
        }
        let key = checkpoint_key(&msg.queue, msg.offset);
        let times = CheckpointTimes {
            pop_time_ms: msg.now_ms,
            invisible_ms: msg.invisible_ms,
            batch_start_offset: msg.batch_start_offset,
        };
        if !self.buffer.is_unwritten(&msg.queue, msg.offset) {
            self.state.put_checkpoints(&[Checkpoint {
                key: key.clone(),
                times,
            }])?;
        }
        self.deferred.remove(&key);
        self.held.insert(&msg.queue, msg.offset, times);
        Ok(true)
    }
}

impl Handler<SetRequestMode> for PopActor {
    type Result = Result<(), BrokerError>;

    fn handle(&mut self, msg: SetRequestMode, _: &mut Self::Context) -> Self::Result {
        Ok(self
            .state
            .put_request_mode(&msg.topic, &msg.group, msg.entry)?)
    }
}

impl Handler<RequestModeOf> for PopActor {
    type Result = Result<Option<RequestModeEntry>, BrokerError>;

    fn handle(&mut self, msg: RequestModeOf, _: &mut Self::Context) -> Self::Result {
        Ok(self.state.request_mode(&msg.topic, &msg.group)?)
    }
}

/// Forgets everything held for a deleted group.
impl Handler<ForgetGroup> for PopActor {
    type Result = Result<usize, BrokerError>;

    fn handle(&mut self, msg: ForgetGroup, _: &mut Self::Context) -> Self::Result {
        for (queue, offset) in self.held.of_group(&msg.group) {
            self.held.remove(&queue, offset);
        }
        self.deferred.retain(|key, _| key.group != msg.group);
        self.solo.retain(|key| key.group != msg.group);
        self.buffer.forget_group(&msg.group);
        self.orderly.retain(|queue, _| queue.group != msg.group);
        self.state.remove_orderly_group(&msg.group)?;
        Ok(self.state.remove_group(&msg.group)?)
    }
}

impl Handler<OrderlyBlocked> for PopActor {
    type Result = bool;

    fn handle(&mut self, msg: OrderlyBlocked, _: &mut Self::Context) -> bool {
        self.orderly_blocked(&msg.queue, msg.now_ms)
    }
}

/// Writes every checkpoint still in memory, commits every popped queue's offset behind them,
/// makes both durable and stops; a revival still appending is answered by the store, and its
/// checkpoint, still held on disk, revives the message again after a restart.
impl Handler<Quit<Result<(), BrokerError>>> for PopActor {
    type Result = Result<(), BrokerError>;

    fn handle(
        &mut self,
        _: Quit<Result<(), BrokerError>>,
        ctx: &mut Self::Context,
    ) -> Self::Result {
        ctx.stop();
        // Every other queue's commit went out with the change that allowed it; `write` sends
        // those its writes allow.
        let writes = self.buffer.drain();
        self.write(writes)?;
        self.state.flush()?;
        Ok(())
    }
}

impl Handler<Observe> for PopActor {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        MessageResult(PopSnapshot {
            held: self.held.len(),
            unwritten: self.buffer.unwritten(),
            ..self.snapshot.clone()
        })
    }
}
