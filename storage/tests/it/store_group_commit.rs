//! The group-commit thread behind `SyncWaiter::notify_when_durable`: one fsync serves every
//! request queued behind it, already-durable positions answer inline, every callback fires
//! exactly once with the position durable, and an fsync that outlasts the sync flush timeout
//! has its waiters answered timed out.

use skiff_storage::disk::sim::SimDisk;
use skiff_storage::disk::Disk;
use skiff_storage::message::MessageToAppend;
use skiff_storage::store::{
    Durability, FlushPolicy, MessageStore, StoreConfig, StoreError, SyncWaiter,
};
use skiff_storage::testsuite::{message, store_config};
use std::path::Path;
use std::sync::mpsc::{self, TryRecvError};
use std::sync::{Arc, Barrier, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

const TOPIC: &str = "TopicTest";
/// Bounds a wait that should end at once, so a lost callback fails the test instead of hanging.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// No background checkpoint: every fsync counted comes from the waits under test.
fn config(dir: &Path, policy: FlushPolicy) -> StoreConfig {
    store_config(dir, 1 << 20, policy)
}

fn msg(queue_id: u32, i: u64) -> MessageToAppend {
    message(TOPIC, queue_id, vec![i as u8; 40 + (i % 50) as usize])
}

/// What a callback saw when it fired.
struct Answer {
    position: u64,
    durable_then: u64,
    result: Result<Durability, StoreError>,
}

fn register(
    waiter: &SyncWaiter,
    position: u64,
    tx: &mpsc::Sender<Answer>,
) -> impl FnOnce(Result<Durability, StoreError>) + Send + 'static {
    let waiter = waiter.clone();
    let tx = tx.clone();
    move |result| {
        let _ = tx.send(Answer {
            position,
            durable_then: waiter.durable_position(),
            result,
        });
    }
}

fn collect(rx: &mpsc::Receiver<Answer>, n: usize) -> Vec<Answer> {
    (0..n)
        .map(|i| {
            rx.recv_timeout(ANSWER_TIMEOUT)
                .unwrap_or_else(|e| panic!("answer {i} of {n} never came: {e}"))
        })
        .collect()
}

/// Closes a store shared with appender threads that have all been joined.
fn close(store: Arc<Mutex<MessageStore>>) {
    Arc::try_unwrap(store)
        .ok()
        .expect("appender threads are joined")
        .into_inner()
        .unwrap()
        .close()
        .unwrap();
}

fn assert_durable_answers(answers: &[Answer]) {
    for a in answers {
        assert!(
            matches!(a.result, Ok(Durability::Durable)),
            "position {}: {:?}",
            a.position,
            a.result
        );
        assert!(
            a.durable_then >= a.position,
            "callback for {} fired with only {} durable",
            a.position,
            a.durable_then
        );
    }
}

#[test]
fn one_fsync_serves_every_request_registered_after_the_appends() {
    const THREADS: usize = 8;
    const BATCHES: u64 = 20;
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path(), FlushPolicy::Sync)).unwrap();
    let waiter = store.sync_waiter();
    let store = Arc::new(Mutex::new(store));
    // First barrier: every batch is appended. Second: the fsync count before any request is read.
    let appended = Arc::new(Barrier::new(THREADS + 1));
    let counted = Arc::new(Barrier::new(THREADS + 1));
    let (tx, rx) = mpsc::channel();
    let threads: Vec<_> = (0..THREADS as u32)
        .map(|t| {
            let (store, waiter, tx) = (store.clone(), waiter.clone(), tx.clone());
            let (appended, counted) = (appended.clone(), counted.clone());
            std::thread::spawn(move || {
                let ends: Vec<u64> = (0..BATCHES)
                    .map(|i| {
                        let batch = [msg(t, i), msg(t, i + 1000)];
                        let mut store = store.lock().unwrap();
                        store.append_batch_nowait(&batch).unwrap().unwrap().1
                    })
                    .collect();
                appended.wait();
                counted.wait();
                for end in ends {
                    waiter.notify_when_durable(end, register(&waiter, end, &tx));
                }
            })
        })
        .collect();
    drop(tx);
    appended.wait();
    let before = waiter.fsync_count();
    let log_end = store.lock().unwrap().commit_log_end();
    assert!(waiter.durable_position() < log_end);
    counted.wait();
    for t in threads {
        t.join().unwrap();
    }
    let requests = THREADS * BATCHES as usize;
    let answers = collect(&rx, requests);
    assert_durable_answers(&answers);
    // Whichever request the thread took first, its fsync covered every batch, since all were
    // written before any request: the others were either in the same round or answered inline.
    assert_eq!(waiter.fsync_count() - before, 1);
    assert!(waiter.fsync_count() - before < requests as u64);
    assert_eq!(waiter.durable_position(), log_end);
    close(store);
    // Every callback has run and been dropped: none is left to fire a second answer.
    assert!(matches!(rx.try_recv(), Err(TryRecvError::Disconnected)));
}

#[test]
fn concurrent_appenders_are_all_answered_durable() {
    const THREADS: u32 = 6;
    const BATCHES: u64 = 60;
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path(), FlushPolicy::Sync)).unwrap();
    let waiter = store.sync_waiter();
    let store = Arc::new(Mutex::new(store));
    let (tx, rx) = mpsc::channel();
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (store, waiter, tx) = (store.clone(), waiter.clone(), tx.clone());
            std::thread::spawn(move || {
                for i in 0..BATCHES {
                    // The actor's pattern: append, register, go on appending without waiting.
                    let end = store
                        .lock()
                        .unwrap()
                        .append_batch_nowait(&[msg(t, i)])
                        .unwrap()
                        .unwrap()
                        .1;
                    waiter.notify_when_durable(end, register(&waiter, end, &tx));
                }
            })
        })
        .collect();
    drop(tx);
    for t in threads {
        t.join().unwrap();
    }
    let requests = (THREADS as u64 * BATCHES) as usize;
    assert_durable_answers(&collect(&rx, requests));
    assert!(waiter.fsync_count() <= requests as u64);
    // A callback drops its sender only after its answer is sent: closing the store joins the
    // group-commit thread, so no callback is still running when the channel is checked.
    close(store);
    assert!(matches!(rx.try_recv(), Err(TryRecvError::Disconnected)));
}

#[test]
fn durable_position_is_answered_inline_without_an_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(config(dir.path(), FlushPolicy::Sync)).unwrap();
    let waiter = store.sync_waiter();
    let (_, end1) = store.append_batch_nowait(&[msg(0, 1)]).unwrap().unwrap();
    let (_, end2) = store.append_batch_nowait(&[msg(0, 2)]).unwrap().unwrap();
    waiter.wait_durable(end2).unwrap();
    let fsyncs = waiter.fsync_count();
    for position in [0, end1, end2] {
        let seen: Arc<Mutex<Option<(ThreadId, bool)>>> = Arc::default();
        let slot = seen.clone();
        waiter.notify_when_durable(position, move |result| {
            let durable = matches!(result, Ok(Durability::Durable));
            *slot.lock().unwrap() = Some((std::thread::current().id(), durable));
        });
        assert_eq!(
            *seen.lock().unwrap(),
            Some((std::thread::current().id(), true)),
            "position {position} is answered on the caller's thread before the call returns"
        );
    }
    assert_eq!(waiter.fsync_count(), fsyncs);
}

#[test]
fn pending_position_is_answered_by_the_group_commit_thread() {
    // Under Async too: the waiter is handed out under both policies.
    for policy in [FlushPolicy::Sync, FlushPolicy::Async] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = MessageStore::open(config(dir.path(), policy)).unwrap();
        let waiter = store.sync_waiter();
        let (_, end) = store.append_batch_nowait(&[msg(0, 1)]).unwrap().unwrap();
        let (tx, rx) = mpsc::channel();
        waiter.notify_when_durable(end, move |result| {
            let _ = tx.send((std::thread::current().name().map(str::to_string), result));
        });
        let (thread, result) = rx.recv_timeout(ANSWER_TIMEOUT).unwrap();
        assert!(
            matches!(result, Ok(Durability::Durable)),
            "{policy:?}: {result:?}"
        );
        assert_eq!(thread.as_deref(), Some("skiff-group-commit"), "{policy:?}");
        assert!(waiter.durable_position() >= end);
        store.close().unwrap();
    }
}

#[test]
fn an_fsync_past_the_sync_flush_timeout_answers_its_waiters_timed_out_once() {
    const TIMEOUT: Duration = Duration::from_millis(50);
    let disk = SimDisk::new();
    let config = StoreConfig {
        disk: Disk::Simulated(disk.clone()),
        sync_flush_timeout: TIMEOUT,
        ..config(Path::new("/store"), FlushPolicy::Sync)
    };
    let mut store = MessageStore::open(config).unwrap();
    let waiter = store.sync_waiter();
    let stall = disk.stall_fsyncs();
    let (tx, rx) = mpsc::channel();
    // The first request's round is stuck in its fsync; the second waits queued behind it.
    let (_, first) = store.append_batch_nowait(&[msg(0, 1)]).unwrap().unwrap();
    let asked = Instant::now();
    waiter.notify_when_durable(first, register(&waiter, first, &tx));
    let (_, second) = store.append_batch_nowait(&[msg(0, 2)]).unwrap().unwrap();
    waiter.notify_when_durable(second, register(&waiter, second, &tx));
    drop(tx);
    for answer in collect(&rx, 2) {
        assert!(
            matches!(answer.result, Ok(Durability::TimedOut)),
            "position {}: {:?}",
            answer.position,
            answer.result
        );
        assert!(answer.durable_then < answer.position);
    }
    assert!(asked.elapsed() >= TIMEOUT, "answered before the timeout");
    // The bytes stay written: the fsync finishes once the disk does.
    drop(stall);
    waiter.wait_durable(second).unwrap();
    assert!(waiter.durable_position() >= second);
    store.close().unwrap();
    assert!(
        matches!(rx.try_recv(), Err(TryRecvError::Disconnected)),
        "the fsync's end answered nobody a second time"
    );
}
