//! Long-poll holds (RocketMQ's `PullRequestHoldService`): a pull that found nothing new parks a
//! waiter here keyed by (topic, queue id) with the offset it needs; a message arrival for that
//! queue wakes every waiter whose offset is below the new max offset.
//!
//! The waiting side owns the timeout (tokio time) and re-runs its pull once when woken or when
//! the timeout passes. This actor only wakes. A waiter whose pull was abandoned (timed out,
//! connection closed) is dropped on the next park of its queue or on the periodic sweep, so the
//! table cannot grow without bound. The sweep also re-checks the store, covering an arrival
//! notice lost to a full mailbox.

use crate::quit::Quit;
use actix::prelude::*;
use skiff_storage::store::StoreReader;
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::oneshot;

/// One queue whose max offset moved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueArrival {
    pub topic: String,
    pub queue_id: u32,
    /// Next offset to be written, after the append.
    pub max_offset: u64,
}

/// Sent by the message store after every append.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct NotifyArrivals {
    pub queues: Vec<QueueArrival>,
}

/// Parks a pull that needs `offset` of a queue. The receiver fires when a message at or past
/// `offset` exists (at once if one already does); it never fires on timeout.
#[derive(Message, Debug, Clone)]
#[rtype(result = "oneshot::Receiver<()>")]
pub struct ParkPull {
    pub topic: String,
    pub queue_id: u32,
    pub offset: u64,
}

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "LongPollSnapshot")]
pub struct Observe;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LongPollSnapshot {
    /// Waiters currently parked (including abandoned ones not yet swept).
    pub parked: usize,
    /// Queues with at least one waiter.
    pub queues: usize,
    pub woken: u64,
    /// Abandoned waiters dropped.
    pub pruned: u64,
}

struct Waiter {
    offset: u64,
    wake: oneshot::Sender<()>,
}

pub struct LongPollActor {
    reader: StoreReader,
    sweep_interval: Duration,
    waiters: HashMap<(String, u32), Vec<Waiter>>,
    snapshot: LongPollSnapshot,
}

const MAILBOX_CAPACITY: usize = 4096;

impl LongPollActor {
    pub fn new(reader: StoreReader, sweep_interval: Duration) -> Self {
        LongPollActor {
            reader,
            sweep_interval,
            waiters: HashMap::new(),
            snapshot: LongPollSnapshot::default(),
        }
    }

    fn sweep(&mut self) {
        let keys: Vec<(String, u32)> = self.waiters.keys().cloned().collect();
        for key in keys {
            let max = self.reader.max_offset(&key.0, key.1);
            self.wake_queue(&key, max);
        }
    }

    /// Splits the queue's waiters into woken (sent), abandoned (dropped) and still waiting.
    fn wake_queue(&mut self, key: &(String, u32), max_offset: u64) {
        let Some(waiters) = self.waiters.remove(key) else {
            return;
        };
        let mut keep = Vec::with_capacity(waiters.len());
        for waiter in waiters {
            if waiter.wake.is_closed() {
                self.snapshot.pruned += 1;
            } else if waiter.offset < max_offset {
                self.snapshot.woken += 1;
                // The receiver may have gone in the meantime; nothing to do then.
                let _ = waiter.wake.send(());
            } else {
                keep.push(waiter);
            }
        }
        if !keep.is_empty() {
            self.waiters.insert(key.clone(), keep);
        }
    }
}

impl Actor for LongPollActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        ctx.run_interval(self.sweep_interval, |act, _| act.sweep());
    }
}

impl Handler<ParkPull> for LongPollActor {
    type Result = MessageResult<ParkPull>;

    fn handle(&mut self, msg: ParkPull, _: &mut Self::Context) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        // The pull read the queue before this park reached us; an append in between already
        // sent its notice, so look at the store once more instead of waiting for the next one.
        if self.reader.max_offset(&msg.topic, msg.queue_id) > msg.offset {
            let _ = tx.send(());
            self.snapshot.woken += 1;
            return MessageResult(rx);
        }
        let key = (msg.topic, msg.queue_id);
        let waiters = self.waiters.entry(key).or_default();
        let before = waiters.len();
        waiters.retain(|w| !w.wake.is_closed());
        self.snapshot.pruned += (before - waiters.len()) as u64;
        waiters.push(Waiter {
            offset: msg.offset,
            wake: tx,
        });
        MessageResult(rx)
    }
}

impl Handler<NotifyArrivals> for LongPollActor {
    type Result = ();

    fn handle(&mut self, msg: NotifyArrivals, _: &mut Self::Context) {
        for arrival in msg.queues {
            let key = (arrival.topic, arrival.queue_id);
            self.wake_queue(&key, arrival.max_offset);
        }
    }
}

/// Wakes every waiter of one queue whatever its offset: the queue was unblocked without a new
/// message (an orderly pop's batch was acknowledged).
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct WakeQueue {
    pub topic: String,
    pub queue_id: u32,
}

impl Handler<WakeQueue> for LongPollActor {
    type Result = ();

    fn handle(&mut self, msg: WakeQueue, _: &mut Self::Context) {
        self.wake_queue(&(msg.topic, msg.queue_id), u64::MAX);
    }
}

/// Stops the actor and its sweep. Parked pulls are not answered: their waiters time out and
/// re-run once.
impl Handler<Quit> for LongPollActor {
    type Result = ();

    fn handle(&mut self, _: Quit, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl Handler<Observe> for LongPollActor {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        let mut snapshot = self.snapshot.clone();
        snapshot.parked = self.waiters.values().map(Vec::len).sum();
        snapshot.queues = self.waiters.len();
        MessageResult(snapshot)
    }
}
