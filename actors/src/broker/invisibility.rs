//! [`InvisibilityActor`]: popped messages while they are invisible (`docs/offset-lifecycle.md`
//! §1.H). It owns the durable checkpoints of unordered pops (one per message handed out and not
//! yet acknowledged), revives each one whose invisible time passed into the group's pop retry
//! topic, and keeps orderly pop's per-queue blocks (durably too).
//!
//! Checkpoints live in [`PopState`]'s sled tree and, indexed by the time they become visible, in
//! memory. The pop path writes a message's checkpoint here before it moves the group's offset
//! past the message; a revival removes the checkpoint only after the copy is appended, so a crash
//! in between revives the message once more rather than never.

use crate::broker::message_store::{AppendMessages, FlushStore, MessageStoreActor};
use crate::broker::registry::Registry;
use crate::broker::retry::copy_of;
use crate::broker::BrokerClock;
use crate::broker_api::BrokerError;
use crate::logic::pop::{revival_topic, OrderlyQueue, POP_RETRY_QUEUE_NUMS};
use crate::logic::queue::GroupQueue;
use crate::quit::Quit;
use actix::prelude::*;
use skiff_storage::message::property::FIRST_POP_TIME;
use skiff_storage::message::{decode_record, with_properties, MessageToAppend};
use skiff_storage::pop_state::{Checkpoint, CheckpointKey, CheckpointTimes, PopState};
use skiff_storage::store::StoreReader;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::error::Error;
use std::time::Duration;

/// Revivals of one round; the rest wait for the next one.
const MAX_REVIVALS_PER_ROUND: usize = 4096;
/// How long a checkpoint whose revival failed is left before it is tried again.
const FAILED_REVIVAL_BACKOFF_MS: i64 = 10_000;

/// A revived copy on its way: the checkpoint it settles and the message to append.
type Revived = (CheckpointKey, CheckpointTimes, MessageToAppend);

/// Holds the checkpoints of one unordered pop; answered once they are recorded.
#[derive(Message, Debug)]
#[rtype(result = "Result<(), BrokerError>")]
pub struct HoldPopped {
    pub checkpoints: Vec<Checkpoint>,
}

/// Acknowledges one popped message. Answers whether a checkpoint of that pop was still held; an
/// acknowledgement of a message already revived, or of an older pop of it, changes nothing.
#[derive(Message, Debug)]
#[rtype(result = "Result<bool, BrokerError>")]
pub struct AckPopped {
    pub key: CheckpointKey,
    pub pop_time_ms: i64,
}

/// Gives one popped message a new invisible time from now: its checkpoint (of whichever pop) is
/// replaced by one with `times`, as Java appends a new checkpoint and acknowledges the old.
/// Answers whether the message was still held; one acknowledged or revived already is left so.
#[derive(Message, Debug)]
#[rtype(result = "Result<bool, BrokerError>")]
pub struct ChangeInvisible {
    pub key: CheckpointKey,
    pub times: CheckpointTimes,
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

/// Records an orderly batch; answers each offset with how often it was handed out before.
#[derive(Message, Debug)]
#[rtype(result = "Vec<(u64, u32)>")]
pub struct OrderlyHandOut {
    pub queue: GroupQueue,
    pub offsets: Vec<u64>,
    pub next_offset: u64,
    pub pop_time_ms: i64,
    pub invisible_ms: i64,
}

/// Acknowledges one message of an orderly batch; answers the offset to commit, if it moves.
#[derive(Message, Debug)]
#[rtype(result = "Option<u64>")]
pub struct OrderlyAck {
    pub queue: GroupQueue,
    pub offset: u64,
    pub pop_time_ms: i64,
}

/// Moves an orderly batch's visibility; answers whether `pop_time_ms` named the batch out.
#[derive(Message, Debug)]
#[rtype(result = "bool")]
pub struct OrderlyChangeInvisible {
    pub queue: GroupQueue,
    pub pop_time_ms: i64,
    pub visible_at_ms: i64,
}

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "InvisibilitySnapshot")]
pub struct Observe;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InvisibilitySnapshot {
    /// Checkpoints held (popped, neither acknowledged nor revived).
    pub held: usize,
    pub acked: u64,
    pub revived: u64,
    /// Checkpoints dropped because their message is gone (retention deleted it).
    pub vanished: u64,
    pub failed: u64,
}

pub struct InvisibilityActor {
    state: PopState,
    reader: StoreReader,
    registry: Registry,
    store: Addr<MessageStoreActor>,
    clock: BrokerClock,
    revive_interval: Duration,
    held: HashMap<CheckpointKey, CheckpointTimes>,
    by_visible_at: BTreeSet<(i64, CheckpointKey)>,
    /// Checkpoints whose revival failed, with when to try again.
    deferred: HashMap<CheckpointKey, i64>,
    /// A revival round is appending; the next waits for it.
    round_running: bool,
    /// Checkpoints whose copy failed in a batch: appended alone from now on.
    solo: HashSet<CheckpointKey>,
    orderly: HashMap<GroupQueue, OrderlyQueue>,
    snapshot: InvisibilitySnapshot,
}

impl InvisibilityActor {
    /// Loads every checkpoint a previous run left: each is revived when due, as if the broker
    /// had never stopped.
    pub(crate) fn new(
        state: PopState,
        reader: StoreReader,
        registry: Registry,
        store: Addr<MessageStoreActor>,
        clock: BrokerClock,
        revive_interval: Duration,
    ) -> Result<Self, BrokerError> {
        let mut actor = InvisibilityActor {
            held: HashMap::new(),
            by_visible_at: BTreeSet::new(),
            deferred: HashMap::new(),
            round_running: false,
            solo: HashSet::new(),
            orderly: HashMap::new(),
            snapshot: InvisibilitySnapshot::default(),
            state,
            reader,
            registry,
            store,
            clock,
            revive_interval,
        };
        let loaded = actor.state.checkpoints()?;
        if !loaded.is_empty() {
            tracing::info!(checkpoints = loaded.len(), "pop checkpoints loaded");
        }
        for checkpoint in loaded {
            actor.index(checkpoint.key, checkpoint.times);
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

    fn index(&mut self, key: CheckpointKey, times: CheckpointTimes) {
        if let Some(old) = self.held.insert(key.clone(), times) {
            self.by_visible_at
                .remove(&(old.visible_at_ms(), key.clone()));
        }
        self.by_visible_at.insert((times.visible_at_ms(), key));
    }

    fn unindex(&mut self, key: &CheckpointKey) -> Option<CheckpointTimes> {
        let times = self.held.remove(key)?;
        self.by_visible_at
            .remove(&(times.visible_at_ms(), key.clone()));
        Some(times)
    }

    /// Revives every checkpoint whose message is visible again, in one round at a time: the
    /// copies are appended, the commit log is flushed once, and only then are the checkpoints
    /// removed, so a power cut can never keep the removal and lose the copy.
    fn revive_due(&mut self, ctx: &mut Context<Self>) {
        if self.round_running {
            return;
        }
        let now = self.clock.now_ms();
        let due: Vec<(CheckpointKey, CheckpointTimes)> = self
            .by_visible_at
            .iter()
            .take_while(|(visible_at, _)| *visible_at <= now)
            .filter(|(_, key)| self.deferred.get(key).is_none_or(|until| *until <= now))
            .take(MAX_REVIVALS_PER_ROUND)
            .filter_map(|(_, key)| self.held.get(key).map(|times| (key.clone(), *times)))
            .collect();
        let mut round = Vec::with_capacity(due.len());
        for (key, times) in due {
            match self.plan_revival(&key, times) {
                Ok(Some((copy, topic))) => round.push((key, times, copy, topic)),
                Ok(None) => {
                    // Retention deleted the message: there is nothing left to redeliver.
                    tracing::warn!(group = %key.group, topic = %key.topic, queue_id = key.queue_id, offset = key.queue_offset, "popped message no longer stored; its checkpoint is dropped");
                    self.snapshot.vanished += 1;
                    self.forget(&key, times);
                }
                Err(e) => {
                    // Set aside for a while, so it does not hold up the ones behind it.
                    self.snapshot.failed += 1;
                    self.deferred
                        .insert(key.clone(), now.saturating_add(FAILED_REVIVAL_BACKOFF_MS));
                    tracing::error!(group = %key.group, topic = %key.topic, queue_id = key.queue_id, offset = key.queue_offset, error = &e as &dyn Error, "revival of a popped message failed; retried later");
                }
            }
        }
        if round.is_empty() {
            return;
        }
        self.round_running = true;
        let store = self.store.clone();
        // One append per retry topic: a round usually revives into few topics, and one batch
        // costs one wait for durability (one fsync with the sync flush policy), not one each.
        // A copy whose batch failed goes alone next time, so one message the store refuses
        // cannot hold up the others of its topic.
        type Batches = BTreeMap<(String, Option<CheckpointKey>), Vec<Revived>>;
        let mut by_topic = Batches::new();
        for (key, times, copy, topic) in round {
            let alone = self.solo.contains(&key).then(|| key.clone());
            by_topic
                .entry((topic, alone))
                .or_default()
                .push((key, times, copy));
        }
        let work = async move {
            let mut appended = Vec::new();
            for ((topic, _), entries) in by_topic {
                let together = entries.len() > 1;
                let (keys, copies): (Vec<_>, Vec<_>) = entries
                    .into_iter()
                    .map(|(key, times, copy)| ((key, times), copy))
                    .unzip();
                let outcome = store
                    .send(AppendMessages {
                        messages: copies,
                        default_queue_nums: POP_RETRY_QUEUE_NUMS,
                    })
                    .await
                    .map_err(|source| BrokerError::Mailbox {
                        actor: "message store",
                        source,
                    })
                    .and_then(|r| r)
                    .map(|_| ())
                    .map_err(std::rc::Rc::new);
                for (key, times) in keys {
                    appended.push((key, times, topic.clone(), outcome.clone(), together));
                }
            }
            let flushed = store
                .send(FlushStore)
                .await
                .map_err(|source| BrokerError::Mailbox {
                    actor: "message store",
                    source,
                })
                .and_then(|r| r);
            (appended, flushed)
        };
        ctx.spawn(work.into_actor(self).map(|(appended, flushed), act, _| {
            act.round_running = false;
            if let Err(e) = &flushed {
                // The copies may not be durable: keep every checkpoint; the next round revives
                // those messages again rather than risk losing them.
                act.snapshot.failed += appended.len() as u64;
                tracing::error!(error = e as &dyn Error, "flush after revivals failed; their checkpoints are kept");
                return;
            }
            for (key, times, topic, outcome, together) in appended {
                match outcome {
                    Ok(_) => {
                        act.solo.remove(&key);
                        act.snapshot.revived += 1;
                        tracing::debug!(group = %key.group, topic = %key.topic, queue_id = key.queue_id, offset = key.queue_offset, retry_topic = %topic, "unacknowledged message revived");
                        act.forget(&key, times);
                    }
                    Err(e) => {
                        act.snapshot.failed += 1;
                        if together {
                            act.solo.insert(key.clone());
                        } else {
                            let until = act.clock.now_ms().saturating_add(FAILED_REVIVAL_BACKOFF_MS);
                            act.deferred.insert(key.clone(), until);
                        }
                        tracing::error!(group = %key.group, topic = %key.topic, queue_id = key.queue_id, offset = key.queue_offset, error = e.as_ref() as &dyn Error, "revival append failed; retried later");
                    }
                }
            }
        }));
    }

    /// The copy to append for a due checkpoint, and the retry topic it goes to; `None` when the
    /// message is no longer stored.
    fn plan_revival(
        &self,
        key: &CheckpointKey,
        times: CheckpointTimes,
    ) -> Result<Option<(MessageToAppend, String)>, BrokerError> {
        let read = self.reader.read(
            &key.topic,
            key.queue_id,
            key.queue_offset,
            1,
            u32::MAX,
            None,
        )?;
        if read.records.is_empty() {
            return Ok(None);
        }
        let (original, _) =
            decode_record(&read.records).map_err(|source| BrokerError::UnreadableMessage {
                topic: key.topic.clone(),
                queue_id: key.queue_id,
                queue_offset: key.queue_offset,
                source,
            })?;
        if original.queue_offset != key.queue_offset {
            return Ok(None);
        }
        let mut properties = original.properties.clone();
        if original.reconsume_times == 0 || original.property(FIRST_POP_TIME).is_none() {
            properties = with_properties(
                &properties,
                &[(FIRST_POP_TIME, &times.pop_time_ms.to_string())],
            );
        }
        let topic = revival_topic(&key.group, &key.topic);
        self.registry.ensure_topic(&topic, POP_RETRY_QUEUE_NUMS)?;
        let copy = copy_of(
            &original,
            topic.clone(),
            0,
            original.reconsume_times.saturating_add(1),
            properties,
        );
        Ok(Some((copy, topic)))
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

    /// Drops a checkpoint that is done with, unless it was changed meanwhile.
    fn forget(&mut self, key: &CheckpointKey, times: CheckpointTimes) {
        if self.held.get(key) != Some(&times) {
            return;
        }
        self.unindex(key);
        self.deferred.remove(key);
        self.solo.remove(key);
        if let Err(e) = self.state.remove_checkpoint(key) {
            tracing::error!(group = %key.group, topic = %key.topic, queue_id = key.queue_id, offset = key.queue_offset, error = &e as &dyn Error, "pop checkpoint not removed; the message may be revived again");
        }
    }
}

impl Actor for InvisibilityActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(self.revive_interval, |act, ctx| act.revive_due(ctx));
    }
}

impl Handler<HoldPopped> for InvisibilityActor {
    type Result = Result<(), BrokerError>;

    fn handle(&mut self, msg: HoldPopped, _: &mut Self::Context) -> Self::Result {
        self.state.put_checkpoints(&msg.checkpoints)?;
        for checkpoint in msg.checkpoints {
            self.index(checkpoint.key, checkpoint.times);
        }
        Ok(())
    }
}

impl Handler<AckPopped> for InvisibilityActor {
    type Result = Result<bool, BrokerError>;

    fn handle(&mut self, msg: AckPopped, _: &mut Self::Context) -> Self::Result {
        match self.held.get(&msg.key) {
            Some(times) if times.pop_time_ms == msg.pop_time_ms => {}
            _ => return Ok(false),
        }
        self.unindex(&msg.key);
        self.deferred.remove(&msg.key);
        self.solo.remove(&msg.key);
        self.state.remove_checkpoint(&msg.key)?;
        self.snapshot.acked += 1;
        Ok(true)
    }
}

impl Handler<ChangeInvisible> for InvisibilityActor {
    type Result = Result<bool, BrokerError>;

    fn handle(&mut self, msg: ChangeInvisible, _: &mut Self::Context) -> Self::Result {
        if !self.held.contains_key(&msg.key) {
            return Ok(false);
        }
        self.state.put_checkpoints(&[Checkpoint {
            key: msg.key.clone(),
            times: msg.times,
        }])?;
        self.deferred.remove(&msg.key);
        self.index(msg.key, msg.times);
        Ok(true)
    }
}

/// Forgets everything held for a deleted group.
impl Handler<ForgetGroup> for InvisibilityActor {
    type Result = Result<usize, BrokerError>;

    fn handle(&mut self, msg: ForgetGroup, _: &mut Self::Context) -> Self::Result {
        let keys: Vec<CheckpointKey> = self
            .held
            .keys()
            .filter(|k| k.group == msg.group)
            .cloned()
            .collect();
        for key in &keys {
            self.unindex(key);
            self.deferred.remove(key);
            self.solo.remove(key);
        }
        self.orderly.retain(|queue, _| queue.group != msg.group);
        self.state.remove_orderly_group(&msg.group)?;
        Ok(self.state.remove_group(&msg.group)?)
    }
}

impl Handler<OrderlyBlocked> for InvisibilityActor {
    type Result = bool;

    fn handle(&mut self, msg: OrderlyBlocked, _: &mut Self::Context) -> bool {
        self.orderly
            .get(&msg.queue)
            .is_some_and(|q| q.is_blocked(msg.now_ms))
    }
}

impl Handler<OrderlyHandOut> for InvisibilityActor {
    type Result = MessageResult<OrderlyHandOut>;

    fn handle(&mut self, msg: OrderlyHandOut, _: &mut Self::Context) -> Self::Result {
        let counts = self.orderly.entry(msg.queue.clone()).or_default().hand_out(
            &msg.offsets,
            msg.next_offset,
            msg.pop_time_ms,
            msg.invisible_ms,
        );
        self.persist_orderly(&msg.queue);
        MessageResult(counts)
    }
}

impl Handler<OrderlyAck> for InvisibilityActor {
    type Result = Option<u64>;

    fn handle(&mut self, msg: OrderlyAck, _: &mut Self::Context) -> Option<u64> {
        let commit = self
            .orderly
            .get_mut(&msg.queue)?
            .ack(msg.offset, msg.pop_time_ms);
        // Every ack, not only those that move the offset: a batch whose acks a restart forgot
        // could never complete.
        self.persist_orderly(&msg.queue);
        commit
    }
}

impl Handler<OrderlyChangeInvisible> for InvisibilityActor {
    type Result = bool;

    fn handle(&mut self, msg: OrderlyChangeInvisible, _: &mut Self::Context) -> bool {
        let changed = self
            .orderly
            .get_mut(&msg.queue)
            .is_some_and(|q| q.change_invisible(msg.pop_time_ms, msg.visible_at_ms));
        if changed {
            self.persist_orderly(&msg.queue);
        }
        changed
    }
}

/// Makes every checkpoint durable and stops; a revival still appending is answered by the
/// store, and its checkpoint, still held on disk, revives the message again after a restart.
impl Handler<Quit<Result<(), BrokerError>>> for InvisibilityActor {
    type Result = Result<(), BrokerError>;

    fn handle(
        &mut self,
        _: Quit<Result<(), BrokerError>>,
        ctx: &mut Self::Context,
    ) -> Self::Result {
        ctx.stop();
        self.state.flush()?;
        Ok(())
    }
}

impl Handler<Observe> for InvisibilityActor {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        MessageResult(InvisibilitySnapshot {
            held: self.held.len(),
            ..self.snapshot.clone()
        })
    }
}
