//! Durability: when appended bytes are known to be on disk, and who is told.
//!
//! The writer and every [`SyncWaiter`] share one `CommitState`: the position known durable,
//! whether an fsync is in flight, and the sticky failure. A group-commit thread turns queued
//! durability requests into one fsync per round; a watchdog thread answers the requests an
//! fsync has kept waiting past the store's `sync_flush_timeout`; the background flusher writes
//! checkpoints.

use super::checkpoint::write_checkpoint;
use super::Shared;
use super::{lock, StoreError};
use crate::consume_queue::ConsumeQueue;
use crate::error::io_err;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Guarded by `Shared::commit`; `Shared::commit_cv` signals every change.
pub(super) struct CommitState {
    /// Commit-log position below which every byte is known fsynced.
    durable: u64,
    /// A leader is fsyncing; the others wait for its result instead of starting their own.
    syncing: bool,
    /// The sticky [`StoreError::FsyncFailed`] every wait answers once an fsync failed.
    failed: Option<StoreError>,
}

impl CommitState {
    /// Recovery found the commit log durable up to `durable`; no fsync has run or failed yet.
    pub(super) fn new(durable: u64) -> CommitState {
        CommitState {
            durable,
            syncing: false,
            failed: None,
        }
    }
}

/// How a durability request was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// The commit log is fsynced at least up to the position asked for.
    Durable,
    /// The position was written but its fsync had not finished `sync_flush_timeout` after the
    /// request (RocketMQ's FLUSH_DISK_TIMEOUT): the bytes are stored and will be durable when
    /// the fsync ends, unless the power goes first.
    TimedOut,
}

type DurableCallback = Box<dyn FnOnce(Result<Durability, StoreError>) + Send>;

/// A caller waiting for the commit log to be durable up to `position`.
struct DurabilityRequest {
    position: u64,
    /// When the watchdog answers [`Durability::TimedOut`] instead.
    deadline: Instant,
    done: DurableCallback,
}

/// Requests handed to the group-commit thread. Both vectors are in arrival order, and every
/// request waits the same timeout, so the requests past their deadline are always a prefix of
/// `serving` followed by a prefix of `requests`.
#[derive(Default)]
pub(super) struct GroupQueue {
    requests: Vec<DurabilityRequest>,
    /// The round the group-commit thread is fsyncing for, kept here so the watchdog can answer
    /// the ones it keeps waiting too long.
    serving: Vec<DurabilityRequest>,
    /// The thread is parked on `group_cv`. Only then does a new request wake it: a notify is a
    /// futex syscall even when nobody waits, and under load the thread is busy fsyncing.
    parked: bool,
    /// The watchdog waits on `timeout_cv` with no deadline to wake for: only then does a new
    /// request wake it.
    watchdog_parked: bool,
    /// Shutdown asked the thread to serve what is queued and exit.
    stopping: bool,
    /// No thread serves the queue any more; callers serve their own requests.
    exited: bool,
}

impl Shared {
    /// Group commit, leader/follower: whoever finds no fsync in flight becomes the leader and
    /// fsyncs everything written so far; the others wait for its result, which usually covers
    /// them too.
    pub(super) fn wait_durable(&self, position: u64) -> Result<(), StoreError> {
        // A position past what was written can never become durable; waiting for it would spin.
        let position = position.min(self.log.written_end());
        let mut st = lock(&self.commit);
        loop {
            if let Some(e) = &st.failed {
                return Err(e.clone());
            }
            if st.durable >= position {
                return Ok(());
            }
            if st.syncing {
                st = self.commit_cv.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            st.syncing = true;
            let from = st.durable;
            drop(st);
            let target = self.log.written_end();
            let res = self.log.sync_range(from, target);
            self.fsyncs.fetch_add(1, Ordering::Relaxed);
            st = lock(&self.commit);
            st.syncing = false;
            match &res {
                Ok(()) => st.durable = st.durable.max(target),
                Err(e) => {
                    tracing::error!(
                        error = e as &dyn std::error::Error,
                        "commit-log fsync failed"
                    );
                    st.failed = Some(StoreError::FsyncFailed {
                        source: Arc::new(e.clone()),
                    });
                }
            }
            self.commit_cv.notify_all();
        }
    }

    /// Serves requests taken off the queue at shutdown: one `wait_durable` for the furthest
    /// position answers every request (it fsyncs everything written so far, which covers all
    /// of them).
    fn serve_round(&self, round: &mut Vec<DurabilityRequest>) {
        let Some(target) = round.iter().map(|r| r.position).max() else {
            return;
        };
        let outcome = self.wait_durable(target).map(|()| Durability::Durable);
        for request in round.drain(..) {
            complete(request.done, outcome.clone());
        }
    }

    /// Makes the commit log and consume queues durable and records that in the checkpoint
    /// (see [`CheckpointPass`] for when, and when a pass may be light).
    ///
    /// With many queues written since the last checkpoint, fsyncing every one of their files
    /// each interval was most of the broker's cost per message (10,000 topics: one fsync, two
    /// opens and a close per seven sends). Then only one checkpoint per
    /// `thorough_checkpoint_interval` is thorough; between them a light pass fsyncs the
    /// commit log (the flush policy's promise) and writes the queues' buffered entries to
    /// their files without an fsync, leaving the checkpoint where it was: a crash costs
    /// recovery a longer re-index from the log, never an entry.
    pub(super) fn checkpoint(&self, pass: CheckpointPass) -> Result<(), StoreError> {
        let force = pass == CheckpointPass::Forced;
        let mut last = lock(&self.checkpoint);
        // Read the indexed end before the queues' ends and the timestamp: every record below
        // it already has its entry published, so the syncs that follow cover it.
        let indexed = self.indexed_end.load(Ordering::Acquire);
        let last_timestamp = self.last_timestamp.load(Ordering::Acquire);
        // Only the queues written since their last sync (appends, and entries a queue opened
        // after recovery re-indexed): a checkpoint's work follows what was written, not how
        // many queues exist.
        let mut queues: Vec<Arc<ConsumeQueue>> = self.open_queues_where(ConsumeQueue::needs_sync);
        if !force
            && last.position == Some(indexed)
            && queues.is_empty()
            && lock(&self.new_dirs).is_empty()
        {
            return Ok(());
        }
        // A fixed order, so a simulated power cut after the n-th file operation replays.
        queues.sort_by(|a, b| (a.topic(), a.queue_id()).cmp(&(b.topic(), b.queue_id())));
        self.wait_durable(indexed)?;
        let thorough = pass != CheckpointPass::Interval
            || queues.len() <= self.config.queues_fsynced_every_checkpoint
            || last.light_passes + 1 >= self.checkpoints_per_thorough()
            || last
                .thorough_at
                .is_some_and(|at| at.elapsed() >= self.config.thorough_checkpoint_interval);
        if !thorough {
            for q in &queues {
                q.write_buffered().map_err(|e| io_err(q.path(), e))?;
            }
            last.light_passes += 1;
            return Ok(());
        }
        self.sync_new_dirs()?;
        for q in &queues {
            q.sync().map_err(|e| io_err(q.path(), e))?;
        }
        write_checkpoint(&self.config.disk, &self.config.dir, indexed, last_timestamp)?;
        last.position = Some(indexed);
        last.light_passes = 0;
        last.thorough_at = Some(Instant::now());
        Ok(())
    }

    /// One interval pass in this many is thorough when light passes are taken: one per
    /// `thorough_checkpoint_interval` at the flush interval. Counted as well as timed (from
    /// the end of the last thorough pass): a light pass over tens of thousands of queues takes
    /// seconds, and the count alone would then stretch the interval many times over.
    fn checkpoints_per_thorough(&self) -> u32 {
        let interval = self.config.flush_interval.max(Duration::from_millis(1));
        let thorough = self.config.thorough_checkpoint_interval;
        u32::try_from(thorough.as_millis().div_ceil(interval.as_millis()))
            .unwrap_or(u32::MAX)
            .max(1)
    }
}

/// What asks for a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CheckpointPass {
    /// The flush interval came round: light when many queues were written (see
    /// [`Shared::checkpoint`]); nothing when nothing was appended.
    Interval,
    /// An explicit flush, or the store closing: thorough; nothing when nothing was appended.
    Thorough,
    /// Thorough, and the checkpoint written even when nothing was appended (at open, after
    /// retention moved the log's start).
    Forced,
}

/// The last checkpoint written, when it ended, and the light passes since.
#[derive(Debug, Default)]
pub(super) struct LastCheckpoint {
    position: Option<u64>,
    thorough_at: Option<Instant>,
    light_passes: u32,
}

/// Runs a durability callback; a panicking one must not take the group-commit thread, and with
/// it every later waiter, down.
fn complete(done: DurableCallback, result: Result<Durability, StoreError>) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || done(result))).is_err() {
        tracing::error!("durability callback panicked");
    }
}

/// The group-commit thread and its watchdog.
pub(super) struct GroupCommit {
    commit: JoinHandle<()>,
    watchdog: JoinHandle<()>,
}

/// RocketMQ's GroupCommitService: one thread turns queued durability requests into one fsync
/// per round, so a sender costs a queue push instead of a blocking-pool task and a condvar
/// hand-off of its own. Requests queued while a round fsyncs are served by the next round. A
/// second thread bounds the wait: the group-commit thread is inside an fsync exactly when a
/// request is overdue, so another thread must answer it.
pub(super) fn spawn_group_commit(shared: &Arc<Shared>) -> Result<GroupCommit, StoreError> {
    let spawn = |name: &str, run: fn(&Shared)| {
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || run(&thread_shared))
            .map_err(|e| io_err(&shared.config.dir, e))
    };
    let commit = spawn("skiff-group-commit", group_commit_loop)?;
    let watchdog = match spawn("skiff-fsync-watchdog", watchdog_loop) {
        Ok(watchdog) => watchdog,
        Err(e) => {
            stop_threads(shared, [commit]);
            return Err(e);
        }
    };
    Ok(GroupCommit { commit, watchdog })
}

fn group_commit_loop(shared: &Shared) {
    let mut round = Vec::new();
    let (mut rounds, mut requests) = (0u64, 0u64);
    loop {
        let target = {
            let mut q = lock(&shared.group);
            while q.requests.is_empty() {
                if q.stopping {
                    q.exited = true;
                    let fsyncs = shared.fsyncs.load(Ordering::Relaxed);
                    tracing::info!(rounds, requests, fsyncs, "group-commit thread stopped");
                    return;
                }
                q.parked = true;
                q = shared.group_cv.wait(q).unwrap_or_else(|e| e.into_inner());
                q.parked = false;
            }
            // Swapped, not taken: the vectors keep their capacity across rounds.
            let q = &mut *q;
            std::mem::swap(&mut q.requests, &mut q.serving);
            rounds += 1;
            requests += q.serving.len() as u64;
            q.serving.iter().map(|r| r.position).max().unwrap_or(0)
        };
        // One fsync of everything written so far covers every request of the round.
        let outcome = shared.wait_durable(target).map(|()| Durability::Durable);
        // What the watchdog left of the round: it answered the others while this fsync ran.
        std::mem::swap(&mut lock(&shared.group).serving, &mut round);
        for request in round.drain(..) {
            complete(request.done, outcome.clone());
        }
    }
}

/// Sleeps until the oldest waiting request's deadline and answers every request past its
/// deadline [`Durability::TimedOut`].
fn watchdog_loop(shared: &Shared) {
    let mut overdue = Vec::new();
    let mut q = lock(&shared.group);
    loop {
        if q.stopping {
            return;
        }
        let now = Instant::now();
        let late = |requests: &[DurabilityRequest]| {
            requests
                .iter()
                .position(|r| r.deadline > now)
                .unwrap_or(requests.len())
        };
        let late_serving = late(&q.serving);
        overdue.extend(q.serving.drain(..late_serving));
        // The queued requests are younger than every one of the round.
        if q.serving.is_empty() {
            let late_queued = late(&q.requests);
            overdue.extend(q.requests.drain(..late_queued));
        }
        if !overdue.is_empty() {
            drop(q);
            tracing::warn!(
                requests = overdue.len(),
                "commit-log fsync outlasted the sync flush timeout; answering its waiters timed out"
            );
            for request in overdue.drain(..) {
                complete(request.done, Ok(Durability::TimedOut));
            }
            q = lock(&shared.group);
            continue;
        }
        let oldest = q.serving.first().or(q.requests.first()).map(|r| r.deadline);
        q = match oldest {
            Some(deadline) => {
                shared
                    .timeout_cv
                    .wait_timeout(q, deadline.saturating_duration_since(now))
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            None => {
                q.watchdog_parked = true;
                let mut q = shared.timeout_cv.wait(q).unwrap_or_else(|e| e.into_inner());
                q.watchdog_parked = false;
                q
            }
        };
    }
}

/// Asks the group-commit threads to stop and joins them; the group-commit thread first serves
/// what is queued.
fn stop_threads<const N: usize>(shared: &Shared, handles: [JoinHandle<()>; N]) {
    lock(&shared.group).stopping = true;
    shared.group_cv.notify_all();
    shared.timeout_cv.notify_all();
    for handle in handles {
        if handle.join().is_err() {
            tracing::error!("group-commit thread panicked");
        }
    }
}

/// Lets the group-commit thread serve what is queued (durability before the answer), joins it
/// and the watchdog, then serves anything it left behind by panicking.
pub(super) fn stop_group_commit(shared: &Shared, threads: GroupCommit) {
    stop_threads(shared, [threads.commit, threads.watchdog]);
    let mut rest = {
        let mut q = lock(&shared.group);
        q.exited = true;
        let mut rest = std::mem::take(&mut q.serving);
        rest.append(&mut q.requests);
        rest
    };
    shared.serve_round(&mut rest);
}

/// The background thread that checkpoints every `flush_interval`.
pub(super) struct Flusher {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: JoinHandle<()>,
}

impl Flusher {
    /// Wakes the thread out of its wait, tells it to exit and joins it.
    pub(super) fn stop(self) {
        *lock(&self.stop.0) = true;
        self.stop.1.notify_all();
        if self.handle.join().is_err() {
            tracing::error!("store flusher thread panicked");
        }
    }
}

pub(super) fn spawn_flusher(shared: &Arc<Shared>) -> Result<Flusher, StoreError> {
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let thread_stop = stop.clone();
    // Weak, so a forgotten reader clone cannot keep a flusher running for a dropped store.
    let weak = Arc::downgrade(shared);
    let interval = shared.config.flush_interval.max(Duration::from_millis(1));
    let handle = std::thread::Builder::new()
        .name("skiff-store-flush".to_string())
        .spawn(move || loop {
            let stopped = lock(&thread_stop.0);
            let (stopped, _) = thread_stop
                .1
                .wait_timeout_while(stopped, interval, |s| !*s)
                .unwrap_or_else(|e| e.into_inner());
            if *stopped {
                return;
            }
            drop(stopped);
            let Some(shared) = weak.upgrade() else { return };
            if let Err(e) = shared.checkpoint(CheckpointPass::Interval) {
                tracing::error!(
                    error = &e as &dyn std::error::Error,
                    "background flush failed"
                );
            }
        })
        .map_err(|e| io_err(&shared.config.dir, e))?;
    Ok(Flusher { stop, handle })
}

/// Shared group-commit handle (thread-safe, cloneable).
#[derive(Clone)]
pub struct SyncWaiter {
    shared: Arc<Shared>,
}

impl SyncWaiter {
    pub(super) fn new(shared: Arc<Shared>) -> SyncWaiter {
        SyncWaiter { shared }
    }

    /// Blocks until the commit log is fsynced at least up to `position` (an end position
    /// returned by `append_batch_nowait`); one fsync serves every waiter whose position it covers.
    pub fn wait_durable(&self, position: u64) -> Result<(), StoreError> {
        self.shared.wait_durable(position)
    }

    /// Calls `done` once the commit log is fsynced at least up to `position` (an end position
    /// returned by `append_batch_nowait`), or with the error that prevents it, or with
    /// [`Durability::TimedOut`] once the store's `sync_flush_timeout` has passed first; exactly
    /// once, and never blocks on an fsync.
    ///
    /// When the position is already durable, or an earlier fsync failed, `done` runs at once on
    /// the calling thread. Otherwise it runs on the store's group-commit thread after the fsync
    /// that covers it, or on its watchdog thread, so `done` must be quick (hand the result on,
    /// don't work in it). After the store is closed, the caller's thread does the wait itself.
    pub fn notify_when_durable(
        &self,
        position: u64,
        done: impl FnOnce(Result<Durability, StoreError>) + Send + 'static,
    ) {
        let shared = &self.shared;
        // As in `wait_durable`: a position past what was written can never become durable.
        let position = position.min(shared.log.written_end());
        let st = lock(&shared.commit);
        if let Some(e) = &st.failed {
            let e = e.clone();
            drop(st);
            done(Err(e));
            return;
        }
        if st.durable >= position {
            drop(st);
            done(Ok(Durability::Durable));
            return;
        }
        drop(st);
        let mut q = lock(&shared.group);
        // Taken under the lock, so the queue is in deadline order (the watchdog relies on it).
        let deadline = Instant::now() + shared.config.sync_flush_timeout;
        if q.exited {
            drop(q);
            // Raced with shutdown: no thread is left to hand the request to. The caller waits
            // itself; the shutdown drain has usually made the position durable already.
            done(shared.wait_durable(position).map(|()| Durability::Durable));
            return;
        }
        q.requests.push(DurabilityRequest {
            position,
            deadline,
            done: Box::new(done),
        });
        let wake_watchdog = std::mem::take(&mut q.watchdog_parked);
        let wake_commit = std::mem::take(&mut q.parked);
        drop(q);
        if wake_watchdog {
            shared.timeout_cv.notify_one();
        }
        if wake_commit {
            shared.group_cv.notify_one();
        }
    }

    /// Commit-log position known durable.
    pub fn durable_position(&self) -> u64 {
        lock(&self.shared.commit).durable
    }

    /// How many group-commit fsyncs ran so far (a metric; tests check sharing with it).
    pub fn fsync_count(&self) -> u64 {
        self.shared.fsyncs.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::MessageToAppend;
    use crate::store::{FlushPolicy, MessageStore};
    use crate::testsuite::{message, store_config};
    use std::io;
    use std::path::Path;

    /// No background checkpoint: every fsync comes from the waits under test.
    fn sync_store(dir: &Path) -> MessageStore {
        MessageStore::open(store_config(dir, 1 << 20, FlushPolicy::Sync)).unwrap()
    }

    /// Message `i` of a test: 64 bytes of `i`.
    fn numbered(i: u8) -> MessageToAppend {
        message("TopicTest", 0, vec![i; 64])
    }

    /// Queues requests behind a round whose callback blocks, and releases it only once shutdown
    /// has asked the thread to stop: the requests are then certainly still queued when the
    /// store closes, and closing must answer each of them, durable.
    fn shutdown_answers_queued_requests(close: bool) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = sync_store(dir.path());
        let waiter = store.sync_waiter();
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let (_, first) = store.append_batch_nowait(&[numbered(0)]).unwrap().unwrap();
        waiter.notify_when_durable(first, move |result| {
            let _ = entered_tx.send(result.is_ok());
            let _ = gate_rx.recv();
        });
        assert_eq!(
            entered_rx.recv_timeout(Duration::from_secs(30)),
            Ok(true),
            "the first round answers"
        );
        let fsyncs = waiter.fsync_count();
        let (tx, rx) = std::sync::mpsc::channel();
        let mut positions = Vec::new();
        for i in 1..=20 {
            let (_, end) = store.append_batch_nowait(&[numbered(i)]).unwrap().unwrap();
            positions.push(end);
            let (tx, w) = (tx.clone(), waiter.clone());
            waiter.notify_when_durable(end, move |result| {
                let _ = tx.send((end, w.durable_position(), result));
            });
        }
        drop(tx);
        assert!(
            matches!(rx.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty)),
            "appended after the first fsync, so queued, not answered inline"
        );
        let shared = waiter.shared.clone();
        let releaser = std::thread::spawn(move || {
            let q = lock(&shared.group);
            let q = shared
                .group_cv
                .wait_while(q, |q| !q.stopping)
                .unwrap_or_else(|e| e.into_inner());
            assert_eq!(q.requests.len(), 20, "still queued when shutdown began");
            drop(q);
            let _ = gate_tx.send(());
        });
        if close {
            store.close().unwrap();
        } else {
            drop(store);
        }
        releaser.join().unwrap();
        let answers: Vec<_> = rx.try_iter().collect();
        assert_eq!(answers.len(), 20, "closing answered every queued request");
        for (end, durable, result) in answers {
            assert!(result.is_ok(), "{result:?}");
            assert!(durable >= end, "{end} answered with only {durable} durable");
        }
        assert_eq!(
            waiter.fsync_count(),
            fsyncs + 1,
            "one fsync served the drain"
        );
        assert!(matches!(
            rx.try_recv(),
            Err(std::sync::mpsc::TryRecvError::Disconnected)
        ));
        // After close, a request is answered on the caller's thread before the call returns.
        let (late_tx, late_rx) = std::sync::mpsc::channel();
        waiter.notify_when_durable(*positions.last().unwrap(), move |result| {
            let _ = late_tx.send(result.is_ok());
        });
        assert_eq!(late_rx.try_recv(), Ok(true));
    }

    #[test]
    fn close_answers_queued_requests_durable() {
        shutdown_answers_queued_requests(true);
    }

    #[test]
    fn drop_answers_queued_requests_durable() {
        shutdown_answers_queued_requests(false);
    }

    /// Once an fsync failed, every wait, blocking or not, answers the sticky error, whose
    /// cause chain still reaches the I/O error; nothing is reported durable again. (A real
    /// fsync failure needs a failing disk, so the failure is planted in the commit state.)
    #[test]
    fn a_failed_fsync_fails_every_later_wait() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = sync_store(dir.path());
        let waiter = store.sync_waiter();
        let (_, end) = store.append_batch_nowait(&[numbered(0)]).unwrap().unwrap();
        let cause = io_err(
            Path::new("/x/commitlog/00000000000000000000"),
            io::Error::new(io::ErrorKind::StorageFull, "no space"),
        );
        lock(&waiter.shared.commit).failed = Some(StoreError::FsyncFailed {
            source: Arc::new(cause),
        });
        let is_sticky = |result: Result<(), StoreError>| match result {
            Err(StoreError::FsyncFailed { source }) => match &*source {
                StoreError::Io { source, .. } => source.kind() == io::ErrorKind::StorageFull,
                _ => false,
            },
            _ => false,
        };
        assert!(is_sticky(waiter.wait_durable(end)));
        let (tx, rx) = std::sync::mpsc::channel();
        waiter.notify_when_durable(end, move |result| {
            let _ = tx.send(result);
        });
        assert!(
            is_sticky(rx.try_recv().expect("answered inline").map(|_| ())),
            "the callback got the sticky error"
        );
        let (_, later) = store.append_batch_nowait(&[numbered(1)]).unwrap().unwrap();
        assert!(is_sticky(waiter.wait_durable(later)));
        assert!(waiter.durable_position() < end);
    }
}
