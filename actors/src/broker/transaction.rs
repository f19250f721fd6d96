//! Transactional messages on the broker (RocketMQ's `TransactionalMessageService`, its
//! `EndTransactionProcessor` and `TransactionalMessageCheckService`).
//!
//! **Where halves live.** The message store diverts a half (prepared) message to
//! [`HALF_TOPIC`] queue 0 ([`route_half`](crate::logic::transaction::route_half)), so it is a
//! durable commit-log record with a real offset message id, and no consumer of its real topic
//! sees it. What became of each half is kept in the sled tree of
//! [`TransactionStates`] (in place of Java's op topic): checked n times, committed, rolled back,
//! or set aside. A half with no final state is pending.
//!
//! **The actor.** [`TransactionActor`] keeps the pending halves in memory, ordered by half-queue
//! offset, learning of new ones from the store's arrival notices (it reads the half queue from
//! where it last stopped). END_TRANSACTION looks the half up by commit-log offset in the store
//! (not in memory, so it works even before the actor has read the half). COMMIT appends the
//! committed copy to the real queue and answers; it records `Committed` once the copy is durable
//! (with the async flush policy, after the next of the flushes `settle_commits` runs every 20 ms
//! for all commits waiting), without flushing the state: the copy in the log is the durable
//! record. ROLLBACK records `RolledBack` and flushes it before answering, since nothing in the
//! log records it. Every `check_interval` the pending halves
//! older than their immunity are checked back, by CHECK_TRANSACTION_STATE on a live producer of
//! their group ([`Connections`]), at most `check_max` times, then set aside.
//!
//! **Restarts.** The half queue's cursor (every half below it is final) is stored in the offset
//! table under [`HALF_CONSUMER_GROUP`]. At start the broker reads the half queue from the cursor
//! and rebuilds the pending set from the states tree, then marks committed every pending half
//! whose copy is in the log (`recover_commits`), so a rolled-back half is never delivered, a
//! committed one is neither lost nor committed twice, and a pending one is checked again.
//!
//! Layout: this file holds the actor and its messages; `recovery` reads the half queue at
//! start-up (`load_halves`) and as halves arrive.

use crate::broker::connections::Connections;
use crate::broker::consumer_offsets::{CommitOffset, ConsumerOffsetsActor};
use crate::broker::long_poll::NotifyArrivals;
use crate::broker::message_store::{AppendMessages, FlushStore, MessageStoreActor};
use crate::broker::release::Holder;
use crate::broker::BrokerClock;
use crate::broker_api::{
    BrokerError, EndTransactionRequest, TransactionCheck, TransactionResolution,
};
use crate::logic::queue::GroupQueue;
use crate::logic::transaction::{
    check_decision, committed_message, end_is_too_late, message_to_check, CheckDecision,
    HALF_CONSUMER_GROUP, HALF_TOPIC, PRODUCER_GROUP,
};
use crate::quit::Quit;
use actix::prelude::*;
use skiff_storage::message::property::UNIQ_KEY;
use skiff_storage::store::{FlushPolicy, StoreReader};
use skiff_storage::transaction_states::{HalfState, TransactionStates};
use std::collections::HashSet;
use std::error::Error;
use std::time::Duration;

/// How often the commits awaiting a flush of their copies are recorded (one flush for all).
const COMMIT_SETTLE_INTERVAL: Duration = Duration::from_millis(20);
const MAILBOX_CAPACITY: usize = 1024;

/// Transaction settings (Java's `transactionTimeOut`, `transactionCheckInterval`,
/// `transactionCheckMax`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionConfig {
    /// A half younger than this (from its born time) is not checked back.
    pub timeout: Duration,
    /// How often pending halves are considered for a check-back.
    pub check_interval: Duration,
    /// Check-backs per half before it is set aside.
    pub check_max: u32,
}

impl Default for TransactionConfig {
    /// Java's timeout and maximum; a 5 s interval instead of Java's 30 s, since a dev broker
    /// wants check-backs within a test's patience.
    fn default() -> Self {
        TransactionConfig {
            timeout: Duration::from_secs(6),
            check_interval: Duration::from_secs(5),
            check_max: 15,
        }
    }
}

mod recovery;

use recovery::scan_halves;
pub(crate) use recovery::{load_halves, LoadedHalves};

// ---- messages -------------------------------------------------------------------------------

/// END_TRANSACTION.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<EndOutcome, BrokerError>")]
pub struct EndTransaction {
    pub request: EndTransactionRequest,
}

/// What an END_TRANSACTION did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndOutcome {
    /// UNKNOW: nothing changes; the half waits for a check-back (no answer on the wire).
    LeftPending,
    Committed,
    RolledBack,
    /// The half was already resolved this way; nothing is stored twice.
    AlreadyResolved(HalfState),
    /// Refused with Java's code and remark.
    Refused(EndRefusal),
}

pub use crate::logic::transaction::EndRefusal;

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "TransactionSnapshot")]
pub struct Observe;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransactionSnapshot {
    /// Half-queue offsets of the pending halves.
    pub pending: Vec<u64>,
    /// Every half below this half-queue offset is final.
    pub cursor: u64,
    pub committed: u64,
    pub rolled_back: u64,
    /// CHECK_TRANSACTION_STATE requests handed to a producer.
    pub checks_sent: u64,
    /// Checks due while no producer of the group was registered.
    pub checks_without_producer: u64,
    pub set_aside: u64,
}

// ---- the actor ------------------------------------------------------------------------------

pub struct TransactionActor {
    reader: StoreReader,
    store: Addr<MessageStoreActor>,
    offsets: Addr<ConsumerOffsetsActor>,
    states: TransactionStates,
    producers: Connections,
    clock: BrokerClock,
    config: TransactionConfig,
    broker_name: String,
    halves: LoadedHalves,
    /// Commit-log offsets of halves a commit or rollback is working on.
    resolving: HashSet<u64>,
    /// The store's flush policy: with `Async` a committed copy is durable only after a flush.
    flush_policy: FlushPolicy,
    /// Committed halves whose copies were appended but may not be durable yet.
    awaiting_flush: Vec<u64>,
    /// A flush for `awaiting_flush` is running.
    settling: bool,
    /// The cursor last handed to the offset table.
    stored_cursor: u64,
    snapshot: TransactionSnapshot,
    _holder: Holder,
}

impl TransactionActor {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        reader: StoreReader,
        store: Addr<MessageStoreActor>,
        offsets: Addr<ConsumerOffsetsActor>,
        states: TransactionStates,
        producers: Connections,
        clock: BrokerClock,
        config: TransactionConfig,
        broker_name: String,
        halves: LoadedHalves,
        flush_policy: FlushPolicy,
        holder: Holder,
    ) -> Self {
        TransactionActor {
            _holder: holder,
            flush_policy,
            awaiting_flush: Vec::new(),
            settling: false,
            reader,
            store,
            offsets,
            states,
            producers,
            clock,
            config,
            broker_name,
            stored_cursor: halves.cursor,
            halves,
            resolving: HashSet::new(),
            snapshot: TransactionSnapshot::default(),
        }
    }

    /// Records the commits whose copies were appended since the last call, after one flush of
    /// the commit log covers them all.
    fn settle_commits(&mut self, ctx: &mut Context<Self>) {
        if self.settling || self.awaiting_flush.is_empty() {
            return;
        }
        self.settling = true;
        let batch = std::mem::take(&mut self.awaiting_flush);
        let store = self.store.clone();
        let flush = async move {
            store
                .send(FlushStore)
                .await
                .map_err(|source| BrokerError::Mailbox {
                    actor: "message store",
                    source,
                })?
        };
        ctx.spawn(flush.into_actor(self).map(move |flushed, act, _| {
            act.settling = false;
            if let Err(e) = flushed {
                tracing::warn!(
                    error = &e as &dyn Error,
                    commits = batch.len(),
                    "flush before recording commits failed; tried again"
                );
                act.awaiting_flush.extend(batch);
                return;
            }
            for physical_offset in batch {
                if let Err(e) = act.states.put(physical_offset, HalfState::Committed) {
                    // The copy is in the log: the next start recovers the commit from it.
                    tracing::warn!(
                        error = &e as &dyn Error,
                        physical_offset,
                        "recording a commit failed"
                    );
                }
                act.record_resolution(physical_offset, HalfState::Committed);
            }
        }));
    }

    fn scan(&mut self) {
        if let Err(e) = scan_halves(
            &self.reader,
            &self.states,
            self.config.timeout,
            &mut self.halves,
        ) {
            // The next arrival or check round scans again from the same offset.
            tracing::warn!(
                error = &e as &dyn Error,
                offset = self.halves.scanned,
                "reading half messages failed"
            );
        }
    }

    /// Moves the cursor past the final halves at the head of the queue and stores it.
    fn advance_cursor(&mut self) {
        let cursor = self
            .halves
            .pending
            .keys()
            .next()
            .copied()
            .unwrap_or(self.halves.scanned);
        if cursor <= self.stored_cursor {
            return;
        }
        self.stored_cursor = cursor;
        self.halves.cursor = cursor;
        // An unstored cursor only means a longer scan after a restart; the states stay.
        if let Err(e) = self.offsets.try_send(CommitOffset {
            slot: GroupQueue::new(HALF_CONSUMER_GROUP, HALF_TOPIC, 0),
            offset: cursor,
            now_ms: self.clock.now_ms(),
        }) {
            tracing::debug!(error = %e, cursor, "half-queue cursor not stored this time");
        }
    }

    /// One check round: every pending half past its immunity is checked back or set aside.
    fn check_round(&mut self) {
        self.scan();
        let now = self.clock.now_ms();
        let due: Vec<(u64, CheckDecision)> = self
            .halves
            .pending
            .iter()
            .filter(|(_, half)| !self.resolving.contains(&half.physical_offset))
            .map(|(offset, half)| {
                (
                    *offset,
                    check_decision(
                        half.born_timestamp,
                        half.immunity,
                        half.checks,
                        self.config.check_max,
                        now,
                    ),
                )
            })
            .filter(|(_, decision)| *decision != CheckDecision::Wait)
            .collect();
        for (queue_offset, decision) in due {
            match decision {
                CheckDecision::Wait => {}
                CheckDecision::SetAside => self.set_aside(queue_offset),
                CheckDecision::Check { times } => self.check(queue_offset, times),
            }
        }
        self.advance_cursor();
    }

    fn set_aside(&mut self, queue_offset: u64) {
        let Some(half) = self.halves.pending.get(&queue_offset) else {
            return;
        };
        if let Err(e) = self.states.put(half.physical_offset, HalfState::SetAside) {
            tracing::warn!(
                error = &e as &dyn Error,
                "recording a set-aside half failed"
            );
            return;
        }
        tracing::warn!(
            queue_offset,
            physical_offset = half.physical_offset,
            group = %half.producer_group,
            checks = half.checks,
            "half message checked the maximum number of times, set aside"
        );
        self.halves.pending.remove(&queue_offset);
        self.snapshot.set_aside += 1;
    }

    fn check(&mut self, queue_offset: u64, times: u32) {
        let Some(half) = self.halves.pending.get_mut(&queue_offset) else {
            return;
        };
        // Counted even when no producer is online, as Java does: a group gone for good ends
        // set aside instead of pending forever.
        if let Err(e) = self
            .states
            .put(half.physical_offset, HalfState::Checked { times })
        {
            tracing::warn!(error = &e as &dyn Error, "recording a check-back failed");
            return;
        }
        half.checks = times;
        let (physical_offset, group) = (half.physical_offset, half.producer_group.clone());
        let Some(listener) = self.producers.checker_of_group(&group) else {
            self.snapshot.checks_without_producer += 1;
            tracing::warn!(group = %group, queue_offset, "no producer of the group online for a transaction check");
            return;
        };
        let stored = match self.reader.read_by_physical_offset(physical_offset) {
            Ok(Some(stored)) => stored,
            Ok(None) => {
                tracing::warn!(physical_offset, "half message vanished from the commit log");
                return;
            }
            Err(e) => {
                tracing::warn!(
                    error = &e as &dyn Error,
                    physical_offset,
                    "reading a half message failed"
                );
                return;
            }
        };
        let message = match message_to_check(&stored, times) {
            Ok(message) => message,
            Err(e) => {
                tracing::error!(error = &e as &dyn Error, "half message cannot be checked");
                return;
            }
        };
        let check = TransactionCheck {
            producer_group: group.clone(),
            broker_name: self.broker_name.clone(),
            tran_state_table_offset: stored.queue_offset,
            commit_log_offset: physical_offset,
            offset_msg_id: stored.offset_msg_id(),
            msg_id: stored.property(UNIQ_KEY).map(str::to_owned),
            message,
        };
        tracing::info!(group = %group, queue_offset, physical_offset, times, "checking transaction state");
        listener.check_transaction_state(check);
        self.snapshot.checks_sent += 1;
    }

    fn record_resolution(&mut self, physical_offset: u64, state: HalfState) {
        self.resolving.remove(&physical_offset);
        let queue_offset = self
            .halves
            .pending
            .iter()
            .find(|(_, h)| h.physical_offset == physical_offset)
            .map(|(offset, _)| *offset);
        if let Some(queue_offset) = queue_offset {
            self.halves.pending.remove(&queue_offset);
        }
        match state {
            HalfState::Committed => self.snapshot.committed += 1,
            HalfState::RolledBack => self.snapshot.rolled_back += 1,
            _ => {}
        }
        self.advance_cursor();
    }
}

impl Actor for TransactionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        ctx.run_interval(self.config.check_interval, |act, _| act.check_round());
        ctx.run_interval(COMMIT_SETTLE_INTERVAL, |act, ctx| act.settle_commits(ctx));
    }
}

impl Handler<NotifyArrivals> for TransactionActor {
    type Result = ();

    fn handle(&mut self, msg: NotifyArrivals, _: &mut Self::Context) {
        if msg.queues.iter().any(|q| q.topic == HALF_TOPIC) {
            self.scan();
        }
    }
}

impl Handler<EndTransaction> for TransactionActor {
    type Result = ResponseActFuture<Self, Result<EndOutcome, BrokerError>>;

    fn handle(&mut self, msg: EndTransaction, _: &mut Self::Context) -> Self::Result {
        let request = msg.request;
        let done = |outcome: Result<EndOutcome, BrokerError>| -> Self::Result {
            Box::pin(actix::fut::ready(outcome))
        };
        if request.resolution == TransactionResolution::Unknown {
            tracing::debug!(group = %request.producer_group, offset = request.commit_log_offset, from_check = request.from_transaction_check, "transaction state unknown, left for check-back");
            return done(Ok(EndOutcome::LeftPending));
        }
        let physical_offset = request.commit_log_offset;
        let half = match self.reader.read_by_physical_offset(physical_offset) {
            Ok(Some(half)) if half.topic == HALF_TOPIC => half,
            Ok(_) => return done(Ok(EndOutcome::Refused(EndRefusal::NotFound))),
            Err(e) => return done(Err(e.into())),
        };
        if self.resolving.contains(&physical_offset) {
            return done(Ok(EndOutcome::Refused(EndRefusal::InProgress)));
        }
        let state = match self.states.get(physical_offset) {
            Ok(state) => state,
            Err(e) => return done(Err(e.into())),
        };
        let wanted = match request.resolution {
            TransactionResolution::Commit => HalfState::Committed,
            _ => HalfState::RolledBack,
        };
        match state {
            Some(s) if s == wanted => return done(Ok(EndOutcome::AlreadyResolved(s))),
            Some(s) if s.is_final() => {
                return done(Ok(EndOutcome::Refused(EndRefusal::Conflicting(s))))
            }
            _ => {}
        }
        if end_is_too_late(
            &half.properties,
            half.born_timestamp,
            self.clock.now_ms(),
            self.config.timeout,
            request.from_transaction_check,
        ) {
            return done(Ok(EndOutcome::Refused(EndRefusal::TooLate)));
        }
        if half.property(PRODUCER_GROUP) != Some(request.producer_group.as_str()) {
            return done(Ok(EndOutcome::Refused(EndRefusal::WrongProducerGroup)));
        }
        if half.queue_offset != request.tran_state_table_offset {
            return done(Ok(EndOutcome::Refused(
                EndRefusal::WrongTranStateTableOffset,
            )));
        }
        let checks = match state {
            Some(HalfState::Checked { times }) => times,
            _ => 0,
        };
        let committed = if wanted == HalfState::Committed {
            match committed_message(&half, checks) {
                Ok(message) => Some(message),
                Err(e) => {
                    return done(Err(BrokerError::UnusableHalf {
                        queue_offset: half.queue_offset,
                        source: e.into(),
                    }))
                }
            }
        } else {
            None
        };
        self.resolving.insert(physical_offset);
        let store = self.store.clone();
        let states = self.states.clone();
        let copy_waits_for_flush = self.flush_policy == FlushPolicy::Async;
        let work = async move {
            if let Some(message) = committed {
                // Answered once the copy is as durable as the flush policy promises a send.
                store
                    .send(AppendMessages {
                        messages: vec![message],
                        default_queue_nums: 1,
                    })
                    .await
                    .map_err(|source| BrokerError::Mailbox {
                        actor: "message store",
                        source,
                    })??;
            }
            if wanted == HalfState::Committed && copy_waits_for_flush {
                // Recorded once a flush covers the copy (`settle_commits`): a state (or the
                // cursor past it) durable before its copy could, after a power cut, stand for
                // a message that is gone. Until then the half stays in `resolving`.
                return Ok::<bool, BrokerError>(false);
            }
            states.put(physical_offset, wanted)?;
            // A commit's state is not flushed here (sled flushes on its own and at shutdown): a
            // crash that loses it leaves the copy in the log, from which the start recovers it
            // (`recover_commits`). A rollback leaves no trace in the log, and a lost one would
            // be checked back, where a checker answering COMMIT would deliver a rolled-back
            // message: its state is durable before the answer.
            if wanted == HalfState::RolledBack {
                states.flush_async().await?;
            }
            Ok(true)
        };
        Box::pin(
            work.into_actor(self)
                .map(move |outcome, act, _| match outcome {
                    Ok(recorded) => {
                        if recorded {
                            act.record_resolution(physical_offset, wanted);
                        } else {
                            act.awaiting_flush.push(physical_offset);
                        }
                        tracing::debug!(physical_offset, state = ?wanted, "transaction ended");
                        Ok(match wanted {
                            HalfState::Committed => EndOutcome::Committed,
                            _ => EndOutcome::RolledBack,
                        })
                    }
                    Err(e) => {
                        act.resolving.remove(&physical_offset);
                        Err(e)
                    }
                }),
        )
    }
}

/// Stops the actor; a resolution still running finishes in the store but its answer is lost,
/// and the half is checked again after a restart if its state was not recorded.
impl Handler<Quit> for TransactionActor {
    type Result = ();

    fn handle(&mut self, _: Quit, ctx: &mut Self::Context) {
        if let Err(e) = self.states.flush() {
            tracing::warn!(
                error = &e as &dyn Error,
                "flushing transaction states at shutdown failed"
            );
        }
        ctx.stop();
    }
}

impl Handler<Observe> for TransactionActor {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        let mut snapshot = self.snapshot.clone();
        snapshot.pending = self.halves.pending.keys().copied().collect();
        snapshot.cursor = self.halves.cursor;
        MessageResult(snapshot)
    }
}
