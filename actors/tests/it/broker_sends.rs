//! Sends from many callers at once: the batches that reach the message store together are
//! written as one append, and each caller is answered with its own offsets, or refused alone.
//! Under `Sync` flush a send waits for its fsync at most the sync flush timeout.

use skiff_actors::broker::message_store::Observe;
use skiff_actors::broker::retention::DiskMeter;
use skiff_actors::broker::{BrokerConfig, BrokerHandle};
use skiff_actors::broker_api::{BrokerApi, BrokerError, SendRequest, SendResult, SendStatus};
use skiff_actors::refused::Refused;
use skiff_actors::testsuite::*;
use skiff_storage::disk::sim::SimDisk;
use skiff_storage::disk::Disk;
use skiff_storage::message::{decode_records, MessageToAppend};
use skiff_storage::store::{FlushPolicy, StoreConfig};
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

const TOPIC: &str = "T";

/// Polls every future in turn until all are done, so each send's first poll (which puts it in
/// the store's mailbox) happens before the store actor runs.
async fn join_all<F: Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    poll_fn(|cx| {
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                if let Poll::Ready(value) = future.as_mut().poll(cx) {
                    *output = Some(value);
                }
            }
        }
        if outputs.iter().all(Option::is_some) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

async fn send(
    broker: &BrokerHandle,
    messages: Vec<MessageToAppend>,
) -> Result<Vec<SendResult>, BrokerError> {
    BrokerApi::send_messages(broker, SendRequest::new(messages)).await
}

async fn writes_and_batches(broker: &BrokerHandle) -> (u64, u64) {
    let snapshot = broker
        .addrs()
        .store
        .send(Observe)
        .await
        .expect("store snapshot");
    (snapshot.writes, snapshot.batches)
}

/// One send that creates the topic, so the sends after it find it.
async fn send_first(broker: &BrokerHandle) {
    send(broker, vec![message(TOPIC, 0, "first", None)])
        .await
        .expect("first send");
}

/// The bodies stored in queue `queue_id` of the test topic, read by one pull from offset 0.
async fn queue_bodies(broker: &BrokerHandle, queue_id: u32) -> Vec<bytes::Bytes> {
    let records = broker
        .pull(pull("g", TOPIC, queue_id, 0))
        .await
        .expect("pull")
        .records;
    decode_records(records)
        .expect("records")
        .into_iter()
        .map(|m| m.body)
        .collect()
}

type Answers = Vec<Result<Vec<SendResult>, BrokerError>>;

/// After [`send_first`], twenty one-message sends in flight together (as twenty connections each
/// with one send, message i to queue i mod 2); their answers, and the (writes, batches) the store
/// counted for them.
async fn twenty_concurrent_sends(broker: &BrokerHandle) -> (Answers, (u64, u64)) {
    send_first(broker).await;
    let before = writes_and_batches(broker).await;
    let answers = join_all(
        (0..20).map(|i| send(broker, vec![message(TOPIC, i % 2, &format!("m{i}"), None)])),
    )
    .await;
    let after = writes_and_batches(broker).await;
    (answers, (after.0 - before.0, after.1 - before.1))
}

#[test]
fn concurrent_sends_share_one_write_and_each_get_their_own_offsets() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let (answers, counted) = twenty_concurrent_sends(&broker).await;
        assert_eq!(counted, (1, 20), "(writes, batches) of the twenty sends");
        let mut offsets = [Vec::new(), Vec::new()];
        for (i, answer) in answers.into_iter().enumerate() {
            let results = answer.expect("send");
            assert_eq!(results.len(), 1);
            assert_eq!(results[0].queue_id, i as u32 % 2);
            offsets[i % 2].push(results[0].queue_offset);
        }
        // Queue 0 held "first"; each queue's offsets follow the callers' order without gaps.
        assert_eq!(offsets[0], (1..11).collect::<Vec<u64>>());
        assert_eq!(offsets[1], (0..10).collect::<Vec<u64>>());
        assert_eq!(queue_bodies(&broker, 1).await.len(), 10);
    });
}

#[test]
fn an_invalid_batch_among_concurrent_sends_is_refused_alone() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send_first(&broker).await;
        let too_large = message(TOPIC, 0, &"x".repeat(5 << 20), None);
        let answers = join_all([
            send(&broker, vec![message(TOPIC, 0, "a", None)]),
            send(&broker, vec![message(TOPIC, 0, "b", None), too_large]),
            send(&broker, vec![message(TOPIC, 0, "c", None)]),
        ])
        .await;
        assert_eq!(answers[0].as_ref().expect("a")[0].queue_offset, 1);
        assert!(
            matches!(&answers[1], Err(BrokerError::Refused(Refused::Rejected(_)))),
            "the batch with a too-large message: {:?}",
            answers[1]
        );
        // Nothing of the refused batch was stored: "c" follows "a".
        assert_eq!(answers[2].as_ref().expect("c")[0].queue_offset, 2);
        assert_eq!(
            queue_bodies(&broker, 0).await,
            ["first", "a", "c"].map(bytes::Bytes::from)
        );
    });
}

#[test]
fn concurrent_sync_sends_are_answered_after_one_shared_write() {
    let dir = tempfile::tempdir().unwrap();
    actix_rt::System::new().block_on(async {
        let broker = start_broker_with(dir.path(), BrokerConfig::default(), FlushPolicy::Sync);
        let (answers, counted) = twenty_concurrent_sends(&broker).await;
        assert!(answers.iter().all(Result::is_ok), "{answers:?}");
        assert_eq!(counted, (1, 20), "(writes, batches) of the twenty sends");
    });
}

#[test]
fn a_sync_send_whose_fsync_outlasts_the_timeout_is_answered_flush_disk_timeout_and_stays_stored() {
    const TIMEOUT: Duration = Duration::from_millis(50);
    let dir = tempfile::tempdir().unwrap();
    let disk = SimDisk::new();
    run_paused(|| async {
        let mut config = BrokerConfig::default();
        config.retention.meter = DiskMeter::new(|_| Ok(0.0));
        let broker = start_broker_on(
            dir.path(),
            config,
            StoreConfig {
                disk: Disk::Simulated(disk.clone()),
                flush_policy: FlushPolicy::Sync,
                sync_flush_timeout: TIMEOUT,
                // The preparer's fsyncs would share the stall and, on the simulated disk (whose
                // fsync copies the whole file), the sends' real-clock timeout.
                prepare_in_background: false,
                ..StoreConfig::new("/store")
            },
        );
        send_first(&broker).await;
        let stall = disk.stall_fsyncs();
        // The store's wait is on the real clock, the runtime's is paused: measure the real one.
        let asked = Instant::now();
        let late = send(&broker, vec![message(TOPIC, 0, "late", None)])
            .await
            .expect("a timed-out flush still answers the send");
        assert!(asked.elapsed() >= TIMEOUT, "answered before the timeout");
        assert_eq!(late[0].status, SendStatus::FlushDiskTimeout);
        assert_eq!(late[0].queue_offset, 1);
        drop(stall);
        let next = send(&broker, vec![message(TOPIC, 0, "next", None)])
            .await
            .expect("send after the disk caught up");
        assert_eq!(next[0].status, SendStatus::Ok);
        assert_eq!(next[0].queue_offset, 2);
        assert_eq!(
            queue_bodies(&broker, 0).await,
            ["first", "late", "next"].map(bytes::Bytes::from)
        );
        broker.shutdown().await.unwrap();
    });
}
