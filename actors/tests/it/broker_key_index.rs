//! The key index behind QUERY_MESSAGE (`docs/wire-protocol.md` §8): lookups by `KEYS` entry and
//! by `UNIQ_KEY`, the time range, the cap, and the rebuild at open.

use skiff_actors::broker::{key_index, BrokerConfig, BrokerHandle};
use skiff_actors::broker_api::{BrokerApi, SendRequest};
use skiff_actors::testsuite::*;
use skiff_storage::key_index::KEY_INDEX_DIR;
use skiff_storage::message::{decode_records, property};
use std::time::Duration;

const TOPIC: &str = "KeyTopic";

async fn send_keyed(broker: &BrokerHandle) {
    let messages = (0..3)
        .map(|i| {
            let m = message(TOPIC, 0, &format!("m{i}"), None);
            let m = with_property(m, property::KEYS, &format!("order-{i} shared"));
            with_property(m, property::UNIQ_KEY, &format!("UNIQ{i}"))
        })
        .collect();
    BrokerApi::send_messages(broker, SendRequest::new(messages))
        .await
        .expect("send");
}

async fn index_snapshot(broker: &BrokerHandle) -> key_index::KeyIndexSnapshot {
    broker
        .addrs()
        .key_index
        .send(key_index::Observe)
        .await
        .expect("key index actor")
}

async fn bodies(broker: &BrokerHandle, key: &str, max: usize) -> Vec<String> {
    let raw = broker
        .query_by_key(TOPIC, key, 0, i64::MAX, max)
        .await
        .expect("query");
    raw.records
        .into_iter()
        .flat_map(|r| decode_records(r).expect("decode"))
        .map(|m| String::from_utf8(m.body.to_vec()).expect("utf-8 body"))
        .collect()
}

#[test]
fn finds_messages_by_key_and_unique_key_and_after_a_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send_keyed(&broker).await;
        assert_eq!(bodies(&broker, "order-1", 32).await, vec!["m1"]);
        assert_eq!(bodies(&broker, "UNIQ2", 32).await, vec!["m2"]);
        // The newest first, and the cap keeps the newest (as Java's index walks it).
        assert_eq!(bodies(&broker, "shared", 32).await, vec!["m2", "m1", "m0"]);
        assert_eq!(bodies(&broker, "shared", 2).await, vec!["m2", "m1"]);
        assert!(bodies(&broker, "absent", 32).await.is_empty());
        let none = broker
            .query_by_key(TOPIC, "shared", 0, 1, 32)
            .await
            .expect("query");
        assert!(
            none.records.is_empty(),
            "store timestamps are far past 1 ms"
        );
        let other_topic = broker
            .query_by_key("Other", "shared", 0, i64::MAX, 32)
            .await
            .expect("query");
        assert!(other_topic.records.is_empty());
        assert_eq!(other_topic.indexed_to, broker.reader().commit_log_end());
        broker.shutdown().await.unwrap();
    });

    // Delete the whole index: the next start must rebuild it from the commit log.
    std::fs::remove_dir_all(store_dir(dir.path()).join(KEY_INDEX_DIR)).expect("delete the index");
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let snapshot = index_snapshot(&broker).await;
        assert_eq!(snapshot.indexed_records, 0);
        assert_eq!(bodies(&broker, "order-0", 32).await, vec!["m0"]);
        assert_eq!(bodies(&broker, "UNIQ1", 32).await, vec!["m1"]);
        // The rebuild happened at start: the queries found nothing left to index.
        let snapshot = index_snapshot(&broker).await;
        assert_eq!(snapshot.indexed_records, 0);
        assert_eq!(snapshot.queries, 2);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn appends_are_indexed_without_a_query() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send_keyed(&broker).await;
        // The store hands the entries over within a few milliseconds of the write.
        advance(Duration::from_millis(10)).await;
        let snapshot = index_snapshot(&broker).await;
        assert_eq!(snapshot.indexed_records, 3);
        assert_eq!(snapshot.queries, 0);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn a_disabled_index_finds_nothing_and_catches_up_once_enabled() {
    let dir = tempfile::tempdir().unwrap();
    let off = BrokerConfig {
        key_index: false,
        ..BrokerConfig::default()
    };
    run_paused(|| async {
        let broker = start_broker(dir.path(), off);
        send_keyed(&broker).await;
        assert!(bodies(&broker, "order-1", 32).await.is_empty());
        let snapshot = index_snapshot(&broker).await;
        assert_eq!(snapshot.indexed_records, 0);
        broker.shutdown().await.unwrap();
    });
    // Enabled again, the start indexes what was appended while it was off.
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        assert_eq!(bodies(&broker, "order-1", 32).await, vec!["m1"]);
        broker.shutdown().await.unwrap();
    });
}
