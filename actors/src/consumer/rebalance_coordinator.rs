//! The RebalanceCoordinator: decides which queues this consumer owns.
//!
//! It runs on start, every `rebalance_interval` (20 s), on NOTIFY_CONSUMER_IDS_CHANGED, and one
//! second after a round that could not finish (a lock held elsewhere, a failed offset read).
//! Allocation and diffing are the pure functions in [`crate::logic::allocate`]; this actor
//! applies the diff: revoked queues are handed off gracefully before new ones start.
//!
//! In clustering mode every queue is locked on the broker before it starts (orderly consumers
//! need it; concurrent ones use it so a new owner waits for the old owner's final persist, which
//! is what makes a clean rebalance re-deliver nothing).

use super::consume_dispatcher::ConsumeDispatcher;
use super::offset_store::{
    OffsetRead, OffsetStore, OffsetStoreError, ReadFrom, ReadOffset, RemoveQueue,
};
use super::process_queue::{
    self, HandoffOutcome, ProcessQueue, ProcessQueueConfig, ProcessQueueSetup,
    ProcessQueueSnapshot, SetLocked,
};
use crate::broker_api::{
    BrokerApi, BrokerError, BrokerFuture, ConnectionId, ConsumeType, ConsumerHeartbeat,
    ConsumerNotifier, MessageModel, SubscriptionEntry,
};
use crate::logic::allocate::{allocate, rebalance_diff, AllocateStrategy};
use crate::logic::filter::Subscription;
use crate::logic::pull_from_where::{
    compute_pull_from as decide_pull_from, ConsumeFromWhere, PullFrom, StoredOffset,
};
use crate::logic::queue::MessageQueue;
use crate::quit::Quit;
use crate::LocalFuture;
use actix::prelude::*;
use skiff_storage::store::BoundaryType;
use std::collections::{BTreeMap, BTreeSet};
use std::error::Error;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    pub client_id: String,
    pub group: String,
    pub message_model: MessageModel,
    pub consume_from: ConsumeFromWhere,
    pub strategy: AllocateStrategy,
    pub rebalance_interval: Duration,
    pub unbalanced_retry: Duration,
    pub heartbeat_interval: Duration,
    pub relock_interval: Duration,
    /// Lock queues on the broker in clustering mode even for concurrent consumption.
    pub exclusive_queues: bool,
    pub process_queue: ProcessQueueConfig,
}

/// Runs a round now (also what NOTIFY_CONSUMER_IDS_CHANGED turns into).
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct Rebalance;

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "CoordinatorSnapshot")]
pub struct Observe;

/// Every process queue's snapshot (for lag and progress display).
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "Vec<ProcessQueueSnapshot>")]
pub struct ObserveQueues;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoordinatorSnapshot {
    pub assigned: Vec<MessageQueue>,
    pub rounds: u64,
    pub unbalanced_rounds: u64,
    pub handoffs: u64,
    pub handoffs_timed_out: u64,
    pub shut_down: bool,
}

pub struct RebalanceCoordinator {
    config: CoordinatorConfig,
    subscriptions: Vec<Subscription>,
    broker: Rc<dyn BrokerApi>,
    dispatcher: Addr<ConsumeDispatcher>,
    offset_store: Addr<OffsetStore>,
    queues: BTreeMap<MessageQueue, Addr<ProcessQueue>>,
    next_pq_id: u64,
    in_round: bool,
    rerun: bool,
    shutting_down: bool,
    snapshot: CoordinatorSnapshot,
    /// This consumer's connection to the broker, as the broker's registry knows it.
    connection: ConnectionId,
}

/// The broker's way back to this coordinator, over the coordinator's own connection.
struct CoordinatorNotifier {
    connection: ConnectionId,
    coordinator: Addr<RebalanceCoordinator>,
}

impl ConsumerNotifier for CoordinatorNotifier {
    fn connection(&self) -> ConnectionId {
        self.connection
    }

    fn consumer_ids_changed(&self, group: &str) {
        tracing::debug!(%group, "consumer ids changed; rebalancing");
        let _ = self.coordinator.try_send(Rebalance);
    }
}

impl RebalanceCoordinator {
    pub fn new(
        config: CoordinatorConfig,
        subscriptions: Vec<Subscription>,
        broker: Rc<dyn BrokerApi>,
        dispatcher: Addr<ConsumeDispatcher>,
        offset_store: Addr<OffsetStore>,
    ) -> Self {
        RebalanceCoordinator {
            config,
            subscriptions,
            broker,
            dispatcher,
            offset_store,
            queues: BTreeMap::new(),
            next_pq_id: 0,
            in_round: false,
            rerun: false,
            shutting_down: false,
            snapshot: CoordinatorSnapshot::default(),
            connection: ConnectionId::next(),
        }
    }

    fn locks_queues(&self) -> bool {
        self.config.message_model == MessageModel::Clustering
            && (self.config.exclusive_queues || self.config.process_queue.orderly)
    }

    fn heartbeat_data(&self) -> ConsumerHeartbeat {
        ConsumerHeartbeat {
            client_id: self.config.client_id.clone(),
            group: self.config.group.clone(),
            consume_type: ConsumeType::Passively,
            message_model: self.config.message_model,
            consume_from_where: self.config.consume_from.rocketmq_name().to_string(),
            subscriptions: self
                .subscriptions
                .iter()
                .map(|subscription| SubscriptionEntry {
                    topic: subscription.topic.clone(),
                    expression_type: subscription.expression_type,
                    expression: subscription.expression.clone(),
                    sub_version: subscription.sub_version,
                })
                .collect(),
        }
    }

    fn heartbeat(&self, ctx: &mut Context<Self>) -> BrokerFuture<()> {
        let notifier: Arc<dyn ConsumerNotifier> = Arc::new(CoordinatorNotifier {
            connection: self.connection,
            coordinator: ctx.address(),
        });
        self.broker.heartbeat(self.heartbeat_data(), notifier)
    }

    fn start_round(&mut self, ctx: &mut Context<Self>) {
        if self.shutting_down {
            return;
        }
        if self.in_round {
            self.rerun = true;
            return;
        }
        self.in_round = true;
        self.snapshot.rounds += 1;
        self.plan()
            .into_actor(self)
            .then(|plan, act, _| act.stop_revoked(plan).into_actor(act))
            .then(|step, act, _| {
                let position = act.position_new(step.to_start);
                let complete = step.complete;
                position
                    .into_actor(act)
                    .map(move |(positioned, all), _, _| (positioned, complete && all))
            })
            .map(|(positioned, balanced), act, ctx| {
                act.in_round = false;
                if act.shutting_down {
                    // Started nothing; the positions were only read.
                    return;
                }
                for (queue, offset) in positioned {
                    act.spawn_process_queue(queue, offset);
                }
                act.snapshot.assigned = act.queues.keys().cloned().collect();
                if !balanced {
                    act.snapshot.unbalanced_rounds += 1;
                    ctx.run_later(act.config.unbalanced_retry, |act, ctx| act.start_round(ctx));
                } else if std::mem::take(&mut act.rerun) {
                    act.start_round(ctx);
                }
            })
            .spawn(ctx);
    }

    fn spawn_process_queue(&mut self, queue: MessageQueue, offset: u64) {
        let Some(subscription) = self
            .subscriptions
            .iter()
            .find(|subscription| subscription.topic == queue.topic)
            .cloned()
        else {
            return;
        };
        self.next_pq_id += 1;
        tracing::info!(group = %self.config.group, %queue, offset, "queue assigned");
        let pq = ProcessQueue::new(ProcessQueueSetup {
            id: self.next_pq_id,
            queue: queue.clone(),
            start_offset: offset,
            config: self.config.process_queue.clone(),
            subscription,
            broker: self.broker.clone(),
            dispatcher: self.dispatcher.clone(),
            offset_store: self.offset_store.clone(),
        })
        .start();
        self.queues.insert(queue, pq);
    }

    /// Asks the broker for routes and members and computes the wanted queue set.
    fn plan(&self) -> LocalFuture<Plan> {
        let broker = self.broker.clone();
        let config = self.config.clone();
        let topics: Vec<String> = self.subscriptions.iter().map(|s| s.topic.clone()).collect();
        Box::pin(async move {
            let mut plan = Plan {
                wanted: None,
                failed_topics: BTreeSet::new(),
                complete: true,
            };
            let mut by_topic: BTreeMap<String, Vec<MessageQueue>> = BTreeMap::new();
            for topic in topics {
                match broker.route(topic.clone()).await {
                    Ok(route) => {
                        by_topic.insert(topic, route.read_queues());
                    }
                    Err(error) => {
                        tracing::warn!(group = %config.group, %topic, error = &error as &dyn Error,
                            "no route for a subscribed topic this round");
                        plan.complete = false;
                        plan.failed_topics.insert(topic);
                    }
                }
            }
            let wanted = match config.message_model {
                MessageModel::Broadcasting => by_topic.into_values().flatten().collect(),
                MessageModel::Clustering => {
                    let members = match broker.consumer_list(config.group.clone()).await {
                        Ok(members) => members,
                        Err(error) => {
                            tracing::warn!(group = %config.group, error = &error as &dyn Error,
                                "consumer list unavailable; keeping the current queues");
                            plan.complete = false;
                            return plan;
                        }
                    };
                    if !members.contains(&config.client_id) {
                        // Our heartbeat has not landed yet; allocate nothing rather than guess.
                        plan.complete = false;
                    }
                    // RocketMQ allocates per topic, so every topic spreads over all members.
                    by_topic
                        .values()
                        .flat_map(|queues| {
                            allocate(config.strategy, &config.client_id, queues, &members)
                        })
                        .collect()
                }
            };
            plan.wanted = Some(wanted);
            plan
        })
    }

    /// Hands revoked queues off (each persists its final offset, acknowledged) and unlocks them.
    fn stop_revoked(&mut self, plan: Plan) -> LocalFuture<RoundStep> {
        let Some(wanted) = plan.wanted else {
            return Box::pin(std::future::ready(RoundStep {
                to_start: Vec::new(),
                complete: false,
            }));
        };
        // Queues of a topic whose route failed this round stay as they are.
        let current: BTreeSet<MessageQueue> = self
            .queues
            .keys()
            .filter(|queue| !plan.failed_topics.contains(&queue.topic))
            .cloned()
            .collect();
        let diff = rebalance_diff(&current, &wanted);
        let releases: Vec<_> = diff
            .to_stop
            .iter()
            .filter_map(|queue| {
                self.queues
                    .remove(queue)
                    .map(|pq| (queue.clone(), pq.send(Quit::new())))
            })
            .collect();
        self.snapshot.assigned = self.queues.keys().cloned().collect();
        let release_all = self.release(releases);
        let complete = plan.complete;
        Box::pin(async move {
            // A revoked queue whose handoff could not persist is not retried: its next owner
            // may already be committing, and a late write of this offset would rewind it.
            release_all.await;
            RoundStep {
                to_start: diff.to_start,
                complete,
            }
        })
    }

    /// Awaits the handoffs and unlocks the released queues; answers the queues whose final
    /// offset could not be persisted, with that offset.
    fn release(
        &mut self,
        releases: Vec<(MessageQueue, Request<ProcessQueue, Quit<HandoffOutcome>>)>,
    ) -> LocalFuture<Vec<(MessageQueue, u64)>> {
        self.snapshot.handoffs += releases.len() as u64;
        let broker = self.broker.clone();
        let group = self.config.group.clone();
        let client_id = self.config.client_id.clone();
        let locks = self.locks_queues();
        Box::pin(async move {
            let mut released = Vec::new();
            let mut unpersisted = Vec::new();
            // `send` already queued every Quit, so the handoffs run side by side; awaiting
            // them in turn only collects the outcomes.
            for (queue, release) in releases {
                match release.await {
                    Ok(outcome) => {
                        if outcome.timed_out {
                            tracing::warn!(%group, %queue, "handoff timed out with work in flight");
                        }
                        if let (false, Some(offset)) = (outcome.persisted, outcome.final_offset) {
                            unpersisted.push((queue.clone(), offset));
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%group, %queue, %error, "process queue gone before handoff")
                    }
                }
                released.push(queue);
            }
            if locks && !released.is_empty() {
                if let Err(error) = broker
                    .unlock_queues(group.clone(), client_id, released)
                    .await
                {
                    tracing::warn!(%group, error = &error as &dyn Error, "unlock after handoff failed; the locks expire");
                }
            }
            unpersisted
        })
    }

    /// Locks (when needed) and positions each new queue; answers the startable ones and whether
    /// all of them could start.
    fn position_new(
        &self,
        to_start: Vec<MessageQueue>,
    ) -> LocalFuture<(Vec<(MessageQueue, u64)>, bool)> {
        let broker = self.broker.clone();
        let offset_store = self.offset_store.clone();
        let group = self.config.group.clone();
        let client_id = self.config.client_id.clone();
        let consume_from = self.config.consume_from;
        let locks = self.locks_queues();
        Box::pin(async move {
            if to_start.is_empty() {
                return (Vec::new(), true);
            }
            let mut all_started = true;
            let startable = if locks {
                match broker
                    .lock_queues(group.clone(), client_id.clone(), to_start.clone())
                    .await
                {
                    Ok(locked) => {
                        if locked.len() < to_start.len() {
                            // The previous owner has not handed off yet: try again shortly.
                            all_started = false;
                        }
                        locked
                    }
                    Err(error) => {
                        tracing::warn!(%group, error = &error as &dyn Error, "lock request failed; retrying");
                        return (Vec::new(), false);
                    }
                }
            } else {
                to_start
            };
            let mut positioned = Vec::new();
            for queue in startable {
                // RocketMQ's removeDirtyOffset: for a new owner the stored offset is the truth.
                let _ = offset_store
                    .send(RemoveQueue {
                        queue: queue.clone(),
                    })
                    .await;
                match compute_pull_from(&*broker, &offset_store, &queue, consume_from).await {
                    Ok(offset) => positioned.push((queue, offset)),
                    Err(error) => {
                        // Never reset on an error: skip the queue this round (§1.B.5).
                        tracing::warn!(%group, %queue, error = &error as &dyn Error,
                            "cannot read the offset; skipping the queue this round");
                        all_started = false;
                        if locks {
                            let _ = broker
                                .unlock_queues(group.clone(), client_id.clone(), vec![queue])
                                .await;
                        }
                    }
                }
            }
            (positioned, all_started)
        })
    }

    fn relock(&mut self, ctx: &mut Context<Self>) {
        if !self.locks_queues() || self.queues.is_empty() || self.shutting_down {
            return;
        }
        let queues: Vec<MessageQueue> = self.queues.keys().cloned().collect();
        let request = self.broker.lock_queues(
            self.config.group.clone(),
            self.config.client_id.clone(),
            queues,
        );
        request
            .into_actor(self)
            .map(|result, act, _| match result {
                Ok(locked) => {
                    let locked: BTreeSet<MessageQueue> = locked.into_iter().collect();
                    for (queue, pq) in &act.queues {
                        let held = locked.contains(queue);
                        if !held {
                            tracing::warn!(group = %act.config.group, %queue, "queue lock lost");
                        }
                        pq.do_send(SetLocked { locked: held });
                    }
                }
                Err(error) => {
                    tracing::warn!(group = %act.config.group, error = &error as &dyn Error, "relock failed");
                }
            })
            .spawn(ctx);
    }

    fn send_heartbeat(&mut self, ctx: &mut Context<Self>) {
        let heartbeat = self.heartbeat(ctx);
        heartbeat
            .into_actor(self)
            .map(|result, act, _| {
                if let Err(error) = result {
                    tracing::warn!(group = %act.config.group, error = &error as &dyn Error, "heartbeat failed");
                }
            })
            .spawn(ctx);
    }
}

struct Plan {
    /// `None` when the member list was unavailable: change nothing this round.
    wanted: Option<Vec<MessageQueue>>,
    failed_topics: BTreeSet<String>,
    complete: bool,
}

struct RoundStep {
    to_start: Vec<MessageQueue>,
    complete: bool,
}

/// Why a newly assigned queue could not be positioned this round.
#[derive(Debug, thiserror::Error)]
enum PositionError {
    #[error("reading the stored offset failed")]
    ReadOffset(#[source] OffsetStoreError),
    #[error("the offset store is unavailable")]
    OffsetStoreUnavailable(#[source] MailboxError),
    #[error("asking the broker where the queue starts failed")]
    Broker(#[source] BrokerError),
}

/// Where a newly assigned queue starts (`docs/offset-lifecycle.md` §1.B.5).
async fn compute_pull_from(
    broker: &dyn BrokerApi,
    offset_store: &Addr<OffsetStore>,
    queue: &MessageQueue,
    consume_from: ConsumeFromWhere,
) -> Result<u64, PositionError> {
    let read = offset_store
        .send(ReadOffset {
            queue: queue.clone(),
            from: ReadFrom::Store,
        })
        .await;
    let stored = match read {
        Ok(Ok(OffsetRead::Found(offset))) => StoredOffset::Found(offset),
        Ok(Ok(OffsetRead::NotFound)) => StoredOffset::NotFound,
        Ok(Err(error)) => StoredOffset::Error(PositionError::ReadOffset(error)),
        Err(error) => StoredOffset::Error(PositionError::OffsetStoreUnavailable(error)),
    };
    match decide_pull_from(consume_from, stored, &queue.topic) {
        PullFrom::Offset(offset) => Ok(offset),
        PullFrom::MaxOffset => broker
            .max_offset(queue.clone())
            .await
            .map_err(PositionError::Broker),
        PullFrom::SearchTimestamp(timestamp) => broker
            .search_offset(queue.clone(), timestamp, BoundaryType::Lower)
            .await
            .map_err(PositionError::Broker),
        PullFrom::Skip(error) => Err(error),
    }
}

impl Actor for RebalanceCoordinator {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Heartbeat first so this consumer is in the member list of its first round.
        let heartbeat = self.heartbeat(ctx);
        heartbeat
            .into_actor(self)
            .map(|result, act, ctx| {
                if let Err(error) = result {
                    tracing::warn!(group = %act.config.group, error = &error as &dyn Error, "first heartbeat failed");
                }
                act.start_round(ctx);
            })
            .spawn(ctx);
        ctx.run_interval(self.config.rebalance_interval, |act, ctx| {
            act.start_round(ctx)
        });
        ctx.run_interval(self.config.heartbeat_interval, |act, ctx| {
            act.send_heartbeat(ctx)
        });
        ctx.run_interval(self.config.relock_interval, |act, ctx| act.relock(ctx));
    }
}

impl Handler<Rebalance> for RebalanceCoordinator {
    type Result = ();

    fn handle(&mut self, _: Rebalance, ctx: &mut Self::Context) {
        self.start_round(ctx);
    }
}

/// Stops rebalancing, hands every queue off (each persists its final offset), unlocks them and
/// stops; answers the queues whose final offset could not be persisted, with that offset.
/// Unregistering is left to the push consumer, after its last persist.
impl Handler<Quit<Vec<(MessageQueue, u64)>>> for RebalanceCoordinator {
    type Result = ResponseActFuture<Self, Vec<(MessageQueue, u64)>>;

    fn handle(&mut self, _: Quit<Vec<(MessageQueue, u64)>>, _: &mut Self::Context) -> Self::Result {
        self.shutting_down = true;
        let releases: Vec<_> = std::mem::take(&mut self.queues)
            .into_iter()
            .map(|(queue, pq)| (queue.clone(), pq.send(Quit::new())))
            .collect();
        Box::pin(
            self.release(releases)
                .into_actor(self)
                .map(|unpersisted, act, ctx| {
                    act.snapshot.assigned.clear();
                    act.snapshot.shut_down = true;
                    ctx.stop();
                    unpersisted
                }),
        )
    }
}

impl Handler<Observe> for RebalanceCoordinator {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.snapshot.clone())
    }
}

impl Handler<ObserveQueues> for RebalanceCoordinator {
    type Result = ResponseFuture<Vec<ProcessQueueSnapshot>>;

    fn handle(&mut self, _: ObserveQueues, _: &mut Self::Context) -> Self::Result {
        let requests: Vec<_> = self
            .queues
            .values()
            .map(|pq| pq.send(process_queue::Observe))
            .collect();
        Box::pin(async move {
            let mut snapshots = Vec::with_capacity(requests.len());
            for request in requests {
                if let Ok(snapshot) = request.await {
                    snapshots.push(snapshot);
                }
            }
            snapshots
        })
    }
}
