//! Broker-side queue locks for orderly consumption (RocketMQ's `RebalanceLockManager`).
//!
//! A lock belongs to one client of a group and lives for the lock expiry (60 s) after its last
//! (re)lock; the orderly consumer re-locks every 20 s, so only a dead or partitioned holder lets
//! it lapse. A lock held by another client and not expired is refused. A client that leaves its
//! group (unregister, connection closed, heartbeat expiry) releases its locks at once, so its
//! queues do not sit idle for the rest of the minute.

use crate::logic::queue::MessageQueue;
use crate::quit::Quit;
use actix::prelude::*;
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// Locks (or renews) `queues` for `client_id`; answers the subset it now holds.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Vec<MessageQueue>")]
pub struct LockBatch {
    pub group: String,
    pub client_id: String,
    pub queues: Vec<MessageQueue>,
}

/// Releases the queues among `queues` that `client_id` holds.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct UnlockBatch {
    pub group: String,
    pub client_id: String,
    pub queues: Vec<MessageQueue>,
}

/// Releases every lock a client holds in a group (it left the group).
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct ReleaseClient {
    pub group: String,
    pub client_id: String,
}

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "QueueLocksSnapshot")]
pub struct Observe;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockView {
    pub group: String,
    pub queue: MessageQueue,
    pub client_id: String,
    pub expired: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueLocksSnapshot {
    /// Every lock entry, sorted by group then queue.
    pub locks: Vec<LockView>,
    pub granted: u64,
    pub refused: u64,
}

struct LockEntry {
    client_id: String,
    last_update: Instant,
}

pub struct QueueLocksActor {
    expiry: Duration,
    groups: HashMap<String, HashMap<MessageQueue, LockEntry>>,
    snapshot: QueueLocksSnapshot,
}

const MAILBOX_CAPACITY: usize = 1024;

impl QueueLocksActor {
    pub fn new(expiry: Duration) -> Self {
        QueueLocksActor {
            expiry,
            groups: HashMap::new(),
            snapshot: QueueLocksSnapshot::default(),
        }
    }

    fn expired(&self, entry: &LockEntry, now: Instant) -> bool {
        now.duration_since(entry.last_update) > self.expiry
    }

    fn purge_expired(&mut self) {
        let now = Instant::now();
        let expiry = self.expiry;
        for locks in self.groups.values_mut() {
            locks.retain(|_, e| now.duration_since(e.last_update) <= expiry);
        }
        self.groups.retain(|_, locks| !locks.is_empty());
    }
}

impl Actor for QueueLocksActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        // Entries of clients that never unlock would otherwise stay forever.
        ctx.run_interval(self.expiry, |act, _| act.purge_expired());
    }
}

impl Handler<LockBatch> for QueueLocksActor {
    type Result = MessageResult<LockBatch>;

    fn handle(&mut self, msg: LockBatch, _: &mut Self::Context) -> Self::Result {
        let now = Instant::now();
        let expiry = self.expiry;
        let locks = self.groups.entry(msg.group.clone()).or_default();
        let mut held = Vec::with_capacity(msg.queues.len());
        for queue in msg.queues {
            let grant = match locks.get(&queue) {
                None => true,
                Some(e) if e.client_id == msg.client_id => true,
                Some(e) => now.duration_since(e.last_update) > expiry,
            };
            if grant {
                if let Some(previous) = locks.get(&queue) {
                    if previous.client_id != msg.client_id {
                        tracing::info!(
                            group = %msg.group, topic = %queue.topic, queue_id = queue.queue_id,
                            client_id = %msg.client_id, previous = %previous.client_id,
                            "expired queue lock taken over"
                        );
                    }
                }
                locks.insert(
                    queue.clone(),
                    LockEntry {
                        client_id: msg.client_id.clone(),
                        last_update: now,
                    },
                );
                self.snapshot.granted += 1;
                held.push(queue);
            } else {
                self.snapshot.refused += 1;
            }
        }
        MessageResult(held)
    }
}

impl Handler<UnlockBatch> for QueueLocksActor {
    type Result = ();

    fn handle(&mut self, msg: UnlockBatch, _: &mut Self::Context) {
        let Some(locks) = self.groups.get_mut(&msg.group) else {
            return;
        };
        for queue in &msg.queues {
            if locks
                .get(queue)
                .is_some_and(|e| e.client_id == msg.client_id)
            {
                locks.remove(queue);
            }
        }
        if locks.is_empty() {
            self.groups.remove(&msg.group);
        }
    }
}

impl Handler<ReleaseClient> for QueueLocksActor {
    type Result = ();

    fn handle(&mut self, msg: ReleaseClient, _: &mut Self::Context) {
        let Some(locks) = self.groups.get_mut(&msg.group) else {
            return;
        };
        locks.retain(|_, e| e.client_id != msg.client_id);
        if locks.is_empty() {
            self.groups.remove(&msg.group);
        }
    }
}

/// Stops the actor and its purge timer. Locks are not persisted: clients lock again after a
/// restart.
impl Handler<Quit> for QueueLocksActor {
    type Result = ();

    fn handle(&mut self, _: Quit, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl Handler<Observe> for QueueLocksActor {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        let now = Instant::now();
        let mut locks: Vec<LockView> = self
            .groups
            .iter()
            .flat_map(|(group, locks)| locks.iter().map(move |(queue, e)| (group, queue, e)))
            .map(|(group, queue, e)| LockView {
                group: group.clone(),
                queue: queue.clone(),
                client_id: e.client_id.clone(),
                expired: self.expired(e, now),
            })
            .collect();
        locks.sort_by(|a, b| (&a.group, &a.queue).cmp(&(&b.group, &b.queue)));
        let mut snapshot = self.snapshot.clone();
        snapshot.locks = locks;
        MessageResult(snapshot)
    }
}
