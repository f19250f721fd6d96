//! Broker offset-table rules (`docs/offset-lifecycle.md` §1.A), one test per rule.

use skiff_actors::broker::consumer_offsets::{self, CommitResult};
use skiff_actors::broker::BrokerConfig;
use skiff_actors::broker_api::{
    BrokerApi, BrokerError, OffsetMoved, OffsetUpdate, PullStatus, QueryOffsetRequest, SendRequest,
};
use skiff_actors::logic::queue::MessageQueue;
use skiff_actors::refused::Refused;
use skiff_actors::testsuite::*;
use skiff_storage::metadata::TopicConfig;
use skiff_storage::offset_table::{
    CommitOutcome, OffsetKey, OffsetTable, OffsetTableError, SledOffsetTable, OFFSETS_TREE,
};
use std::time::Duration;

const GROUP: &str = "g";
const TOPIC: &str = "T";

fn mq(queue_id: u32) -> MessageQueue {
    MessageQueue::new(TOPIC, "skiff", queue_id)
}

async fn send_n(broker: &skiff_actors::broker::BrokerHandle, queue_id: u32, n: usize) {
    let messages = (0..n)
        .map(|i| message(TOPIC, queue_id, &format!("m{i}"), None))
        .collect();
    BrokerApi::send_messages(broker, SendRequest::new(messages))
        .await
        .expect("send");
}

#[test]
fn commit_offset_always_writes_lower_offset() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send_n(&broker, 0, 3).await;
        let first = broker
            .update_offset(GROUP, queue_of(TOPIC, 0), 10, OffsetUpdate::Acknowledged)
            .await
            .unwrap();
        assert_eq!(first, CommitResult::Applied(CommitOutcome::Inserted));
        let lower = broker
            .update_offset(GROUP, queue_of(TOPIC, 0), 4, OffsetUpdate::Acknowledged)
            .await
            .unwrap();
        assert_eq!(
            lower,
            CommitResult::Applied(CommitOutcome::Lowered { previous: 10 })
        );
        assert_eq!(
            broker
                .query_offset(offset_query(GROUP, TOPIC, 0, false))
                .await
                .unwrap(),
            Some(4)
        );
        let snapshot = broker
            .addrs()
            .offsets
            .send(consumer_offsets::Observe)
            .await
            .unwrap();
        assert_eq!(snapshot.commits, 2);
        assert_eq!(snapshot.lowered, 1);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn query_offset_not_found_is_distinct() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        broker.put_topic(&TopicConfig::new(TOPIC, 4)).unwrap();
        // Queue 1 is empty, so not even the zero rule applies: not found, not 0.
        assert_eq!(
            broker
                .query_offset(offset_query(GROUP, TOPIC, 1, false))
                .await
                .unwrap(),
            None
        );
        assert_eq!(
            broker
                .query_offset(offset_query(GROUP, TOPIC, 1, false))
                .await
                .unwrap(),
            None
        );
        broker
            .update_offset(GROUP, queue_of(TOPIC, 1), 0, OffsetUpdate::Acknowledged)
            .await
            .unwrap();
        assert_eq!(
            broker
                .query_offset(offset_query(GROUP, TOPIC, 1, false))
                .await
                .unwrap(),
            Some(0)
        );
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn query_offset_zero_if_not_found_on_young_queue() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send_n(&broker, 0, 2).await;
        // Queue 0 still holds its message at offset 0: a new group starts there (§1.A.6),
        // even though it would otherwise start at the max offset.
        assert_eq!(
            broker
                .query_offset(offset_query(GROUP, TOPIC, 0, true))
                .await
                .unwrap(),
            Some(0)
        );
        // Without setZeroIfNotFound the same queue is QUERY_NOT_FOUND.
        assert_eq!(
            broker
                .query_offset(offset_query(GROUP, TOPIC, 0, false))
                .await
                .unwrap(),
            None
        );
        // An empty queue has no message at 0: not found.
        assert_eq!(
            broker
                .query_offset(offset_query(GROUP, TOPIC, 2, true))
                .await
                .unwrap(),
            None
        );
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn pending_reset_ignores_updates_and_answers_offset_illegal() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send_n(&broker, 0, 5).await;
        broker
            .update_offset(GROUP, queue_of(TOPIC, 0), 5, OffsetUpdate::Acknowledged)
            .await
            .unwrap();
        broker.reset_offset(GROUP, TOPIC, 0, 1).await.unwrap();
        assert_eq!(
            broker
                .query_offset(offset_query(GROUP, TOPIC, 0, false))
                .await
                .unwrap(),
            Some(1)
        );

        // A consumer still at 5 commits: acknowledged, not stored.
        let ignored = broker
            .update_offset(GROUP, queue_of(TOPIC, 0), 5, OffsetUpdate::Acknowledged)
            .await
            .unwrap();
        assert_eq!(
            ignored,
            CommitResult::IgnoredPendingReset { reset_offset: 1 }
        );
        BrokerApi::update_offset(&broker, GROUP.into(), mq(0), 5, OffsetUpdate::Oneway)
            .await
            .unwrap();
        assert_eq!(
            broker
                .query_offset(offset_query(GROUP, TOPIC, 0, false))
                .await
                .unwrap(),
            Some(1)
        );

        // Its next pull is told to move to the reset offset, commit piggyback ignored too.
        let mut request = pull(GROUP, TOPIC, 0, 5);
        request.commit_offset = Some(5);
        let response = broker.pull(request).await.unwrap();
        assert_eq!(
            response.status,
            PullStatus::OffsetMoved(OffsetMoved::PendingReset)
        );
        assert_eq!(response.next_begin_offset, 1);
        assert_eq!(
            broker
                .query_offset(offset_query(GROUP, TOPIC, 0, false))
                .await
                .unwrap(),
            Some(1)
        );

        // The reset was taken: commits apply again and the queue reads normally.
        broker
            .update_offset(GROUP, queue_of(TOPIC, 0), 2, OffsetUpdate::Acknowledged)
            .await
            .unwrap();
        assert_eq!(
            broker
                .query_offset(offset_query(GROUP, TOPIC, 0, false))
                .await
                .unwrap(),
            Some(2)
        );
        let response = broker.pull(pull(GROUP, TOPIC, 0, 1)).await.unwrap();
        assert_eq!(response.status, PullStatus::Found);
        assert_eq!(response.next_begin_offset, 5);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn reset_offset_by_time_resets_every_queue_of_the_topic() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send_n(&broker, 0, 3).await;
        send_n(&broker, 1, 2).await;
        for q in 0..4 {
            broker
                .update_offset(
                    GROUP,
                    queue_of(TOPIC, q),
                    broker.reader().max_offset(TOPIC, q),
                    OffsetUpdate::Acknowledged,
                )
                .await
                .unwrap();
        }
        // Every message is newer than the epoch: each queue goes back to its start.
        let reset = broker.reset_offset_by_time(GROUP, TOPIC, 0).await.unwrap();
        assert_eq!(reset, vec![(0, 0), (1, 0), (2, 0), (3, 0)]);
        assert_eq!(
            broker
                .query_offset(offset_query(GROUP, TOPIC, 0, false))
                .await
                .unwrap(),
            Some(0)
        );
        let to_end = broker.reset_offset_by_time(GROUP, TOPIC, -1).await.unwrap();
        assert_eq!(to_end, vec![(0, 3), (1, 2), (2, 0), (3, 0)]);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn offsets_flush_periodically_and_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send_n(&broker, 0, 3).await;
        broker
            .update_offset(GROUP, queue_of(TOPIC, 0), 2, OffsetUpdate::Acknowledged)
            .await
            .unwrap();
        let observe = || broker.addrs().offsets.send(consumer_offsets::Observe);
        assert_eq!(observe().await.unwrap().flushes, 0);
        advance(Duration::from_millis(4_900)).await;
        assert_eq!(observe().await.unwrap().flushes, 0, "flushed before 5 s");
        advance(Duration::from_millis(200)).await;
        assert_eq!(observe().await.unwrap().flushes, 1, "no flush at 5 s");
        advance(Duration::from_secs(5)).await;
        assert_eq!(observe().await.unwrap().flushes, 2, "no flush at 10 s");

        broker
            .update_offset(GROUP, queue_of(TOPIC, 0), 3, OffsetUpdate::Acknowledged)
            .await
            .unwrap();
        broker
            .update_offset(GROUP, queue_of(TOPIC, 1), 7, OffsetUpdate::Acknowledged)
            .await
            .unwrap();
        broker.shutdown().await.unwrap();
    });
    // The broker released the database at shutdown; what it committed last is on disk.
    let table = SledOffsetTable::open_path(meta_dir(dir.path())).unwrap();
    let key = OffsetKey::new(TOPIC, GROUP);
    assert_eq!(table.query(&key, 0).unwrap(), Some(3));
    assert_eq!(table.query(&key, 1).unwrap(), Some(7));
}

#[test]
fn corrupt_offset_record_is_an_error_not_zero() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send_n(&broker, 0, 3).await;
        broker
            .update_offset(GROUP, queue_of(TOPIC, 0), 2, OffsetUpdate::Acknowledged)
            .await
            .unwrap();
        broker.shutdown().await.unwrap();
    });
    {
        let db = skiff_storage::metadata::open_db(meta_dir(dir.path())).unwrap();
        let tree = db.open_tree(OFFSETS_TREE).unwrap();
        let key = OffsetKey::new(TOPIC, GROUP).stored_key(0);
        assert!(tree.get(&key).unwrap().is_some(), "offset record not found");
        tree.insert(key, &b"\x01garbage"[..]).unwrap();
        db.flush().unwrap();
    }
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        // Every way of reading the offset reports the corruption; none answers 0 or "absent"
        // (which a LAST_OFFSET consumer would turn into the zero rule or the max offset).
        let queried = broker
            .query_offset(offset_query(GROUP, TOPIC, 0, true))
            .await;
        assert!(
            matches!(
                queried,
                Err(BrokerError::OffsetTable(OffsetTableError::Corrupt { .. }))
            ),
            "{queried:?}"
        );
        let via_api = BrokerApi::query_offset(
            &broker,
            QueryOffsetRequest {
                group: GROUP.into(),
                queue: mq(0),
                set_zero_if_not_found: false,
            },
        )
        .await;
        assert!(
            matches!(via_api, Err(BrokerError::OffsetTable(_))),
            "{via_api:?}"
        );
        let progress = broker.progress(GROUP).await;
        assert!(
            matches!(progress, Err(BrokerError::OffsetTable(_))),
            "{progress:?}"
        );
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn progress_reports_broker_offset_consumer_offset_and_lag() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send_n(&broker, 0, 5).await;
        send_n(&broker, 1, 2).await;
        broker
            .update_offset(GROUP, queue_of(TOPIC, 0), 3, OffsetUpdate::Acknowledged)
            .await
            .unwrap();
        let rows = broker.progress(GROUP).await.unwrap();
        assert_eq!(rows.len(), 4, "{rows:?}");
        assert_eq!(rows[0].broker_offset, 5);
        assert_eq!(rows[0].consumer_offset, Some(3));
        assert_eq!(rows[0].lag, 2);
        assert!(rows[0].last_commit_ms.is_some());
        assert_eq!(rows[1].consumer_offset, None);
        assert_eq!(rows[1].lag, 2);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn a_deleted_topic_takes_every_groups_offsets_on_it_and_no_others() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send_n(&broker, 0, 3).await;
        BrokerApi::send_messages(
            &broker,
            SendRequest::new(vec![message("Other", 0, "o", None)]),
        )
        .await
        .expect("send");
        broker
            .update_offset(GROUP, queue_of(TOPIC, 0), 2, OffsetUpdate::Acknowledged)
            .await
            .unwrap();
        broker
            .update_offset("g2", queue_of(TOPIC, 0), 1, OffsetUpdate::Acknowledged)
            .await
            .unwrap();
        broker
            .update_offset(GROUP, queue_of("Other", 0), 1, OffsetUpdate::Acknowledged)
            .await
            .unwrap();
        assert!(broker.remove_topic(TOPIC).await.unwrap());
        let left: Vec<(String, String)> = broker
            .metrics()
            .await
            .unwrap()
            .lag
            .into_iter()
            .map(|l| (l.group, l.topic))
            .collect();
        assert_eq!(left, vec![(GROUP.to_owned(), "Other".to_owned())]);
        // The broker's own cursors are not a client's to delete.
        assert!(matches!(
            broker.remove_topic("SCHEDULE_TOPIC_XXXX").await,
            Err(BrokerError::Refused(Refused::BrokerCursor { .. }))
        ));
        broker.shutdown().await.unwrap();
    });
}
