//! Timer messages (RocketMQ 5 `TIMER_DELIVER_MS` / `TIMER_DELAY_SEC` / `TIMER_DELAY_MS`): they
//! wait in the timer topic, reach their topic in due order and never before their (rounded)
//! time, and each fires exactly once across restarts and across a delivery cut short.

use skiff_actors::broker::timer::{self, resolve_in_flight};
use skiff_actors::broker::{BrokerConfig, BrokerHandle};
use skiff_actors::broker_api::{BrokerApi, BrokerError, PullStatus, SendRequest};
use skiff_actors::logic::recall::InvalidRecall;
use skiff_actors::logic::timer::{delivered_copy, TIMER_TOPIC};
use skiff_actors::producer::{OutgoingMessage, Producer};
use skiff_actors::refused::Refused;
use skiff_actors::testsuite::*;
use skiff_storage::message::property::{
    DELAY, TIMER_DELAY_MS, TIMER_DELAY_SEC, TIMER_DELIVER_MS, TIMER_OUT_MS, UNIQ_KEY,
};
use skiff_storage::message::{decode_records, StoredMessage};
use skiff_storage::store::{MessageStore, StoreConfig};
use skiff_storage::timer_index::{TimerEntry, TimerIndex};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

const GROUP: &str = "g";
const TOPIC: &str = "Timed";

async fn read_all(broker: &BrokerHandle, topic: &str, queue_id: u32) -> Vec<StoredMessage> {
    let mut all = Vec::new();
    loop {
        let offset = all.len() as u64;
        let response = broker
            .pull(pull(GROUP, topic, queue_id, offset))
            .await
            .unwrap();
        if response.status != PullStatus::Found {
            return all;
        }
        all.extend(decode_records(response.records).unwrap());
    }
}

/// Waits, in real time and without moving the paused clock, until `done` holds: deliveries
/// wait on fsyncs that run on other threads.
async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::task::yield_now().await;
    }
}

fn timed(body: &str, name: &str, value: &str) -> skiff_storage::message::MessageToAppend {
    with_property(
        with_property(message(TOPIC, 0, body, None), name, value),
        UNIQ_KEY,
        &format!("ID-{body}"),
    )
}

fn bodies(messages: &[StoredMessage]) -> Vec<String> {
    messages
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect()
}

#[test]
fn timers_reach_their_topic_in_due_order_never_early_with_the_senders_message() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let now = broker.now_ms();
        // The deliver times asked for, and as the broker rounds them: up to the second.
        let asked = |delay_ms: i64| now + delay_ms;
        let at = |delay_ms: i64| (now + delay_ms + 999) / 1000 * 1000;
        let sent = BrokerApi::send_messages(
            &broker,
            SendRequest::new(vec![
                timed("3s", TIMER_DELAY_SEC, "3"),
                timed("1s", TIMER_DELAY_MS, "1000"),
                timed("5s", TIMER_DELIVER_MS, &(now + 5000).to_string()),
                timed("past", TIMER_DELIVER_MS, &(now - 60_000).to_string()),
                // A level (3: 10 s) wins over the timer properties.
                with_property(timed("level", TIMER_DELAY_SEC, "1"), DELAY, "3"),
            ]),
        )
        .await
        .unwrap();
        assert_eq!(sent.len(), 5);
        assert_eq!(
            broker.reader().max_offset(TIMER_TOPIC, 0),
            3,
            "three wait as timers"
        );
        let due = BTreeMap::from([
            ("1s".to_string(), asked(1000)),
            ("3s".to_string(), asked(3000)),
            ("5s".to_string(), asked(5000)),
        ]);

        let mut seen: Vec<String> = Vec::new();
        for _ in 0..120 {
            advance(Duration::from_millis(100)).await;
            let now = broker.now_ms();
            let delivered = read_all(&broker, TOPIC, 0).await;
            for message in &delivered {
                let body = String::from_utf8_lossy(&message.body).into_owned();
                if let Some(due) = due.get(&body) {
                    assert!(
                        message.store_timestamp >= *due,
                        "{body} stored at {} before its time {due}",
                        message.store_timestamp
                    );
                }
            }
            // Whatever was asked for a second and a tick ago has arrived.
            for (body, due) in &due {
                if now >= due + 1100 {
                    wait_for(body, async || {
                        bodies(&read_all(&broker, TOPIC, 0).await).contains(body)
                    })
                    .await;
                }
            }
            seen = bodies(&read_all(&broker, TOPIC, 0).await);
        }
        assert_eq!(seen, ["past", "1s", "3s", "5s", "level"]);

        let delivered = read_all(&broker, TOPIC, 0).await;
        let three = &delivered[2];
        assert_eq!(three.property(UNIQ_KEY), Some("ID-3s"), "same message id");
        assert_eq!(three.property(TIMER_DELAY_SEC), Some("3"));
        assert_eq!(
            three.property(TIMER_OUT_MS),
            Some(at(3000).to_string().as_str())
        );
        // As Apache's delivered copies do.
        assert_eq!(three.property("REAL_TOPIC"), Some(TOPIC));
        assert!(three.property("TIMER_ENQUEUE_MS").is_some());
        assert!(three.property("TIMER_DEQUEUE_MS").is_some());
        assert_eq!(delivered[4].property(TIMER_DELAY_SEC), None, "level won");
        assert_eq!(delivered[4].property(TIMER_OUT_MS), None, "never a timer");
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn a_delay_beyond_three_days_is_refused_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let four_days = (4 * 24 * 3600).to_string();
        let error = BrokerApi::send_messages(
            &broker,
            SendRequest::new(vec![timed("far", TIMER_DELAY_SEC, &four_days)]),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(error, BrokerError::Refused(Refused::IllegalTimer(_))),
            "{error:?}"
        );
        assert_eq!(broker.reader().max_offset(TIMER_TOPIC, 0), 0);
        assert_eq!(broker.reader().max_offset(TOPIC, 0), 0);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn pending_timers_fire_once_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let messages = (1..=6)
            .map(|i| timed(&format!("t{i}"), TIMER_DELAY_MS, &(i * 1000).to_string()))
            .collect();
        BrokerApi::send_messages(&broker, SendRequest::new(messages))
            .await
            .unwrap();
        // t2, asked for 2 s ahead, is due by 3 s at the latest (rounded up to the second).
        advance(Duration::from_millis(3_100)).await;
        wait_for("t1 and t2", async || {
            read_all(&broker, TOPIC, 0).await.len() >= 2
        })
        .await;
        broker.shutdown().await.unwrap();
    });
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        // Each run's clock starts at the wall clock, which barely moved; the rest fall due
        // within 7 s of this start (6 s, rounded up to the second).
        advance(Duration::from_secs(8)).await;
        wait_for("all six", async || {
            read_all(&broker, TOPIC, 0).await.len() >= 6
        })
        .await;
        // A few more ticks: nothing comes twice.
        advance(Duration::from_secs(2)).await;
        let delivered = bodies(&read_all(&broker, TOPIC, 0).await);
        assert_eq!(delivered, ["t1", "t2", "t3", "t4", "t5", "t6"]);
        let snapshot = broker.addrs().timer.send(timer::Observe).await.unwrap();
        assert_eq!(
            snapshot.indexed, 0,
            "nothing indexed twice after the restart"
        );
        broker.shutdown().await.unwrap();
    });
}

/// A crash between appending a round's copies and recording the round's end: recovery finds
/// the copies that made it to the log; the others fire again, each once.
#[test]
fn a_delivery_cut_short_is_settled_against_the_commit_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MessageStore::open(StoreConfig::new(store_dir(dir.path()))).unwrap();
    let reader = store.reader();
    let index_dir = dir.path().join("timerindex");
    let index = TimerIndex::open_dir(&index_dir).unwrap();

    // Three timer messages in the timer topic, indexed.
    let routed = [1u64, 2, 3].map(|i| {
        let m = timed(&format!("t{i}"), TIMER_DELAY_SEC, "1");
        skiff_actors::logic::timer::route_timer(m, 1_000)
            .unwrap()
            .message
    });
    let appended = store.append_batch(&routed).unwrap().unwrap();
    let entries: Vec<TimerEntry> = appended
        .iter()
        .map(|r| TimerEntry {
            deliver_ms: 2_000,
            physical_offset: r.physical_offset,
        })
        .collect();
    index.ingest(&entries, 3).unwrap();

    // The round starts; only the first copy reaches the log before the "crash".
    let due = index.due(2_100, 10).unwrap();
    assert_eq!(due, entries);
    index
        .begin_delivery(reader.commit_log_end(), 2_100, due)
        .unwrap();
    index.flush().unwrap();
    let first = reader
        .read_by_physical_offset(entries[0].physical_offset)
        .unwrap()
        .unwrap();
    let unrelated = message(TOPIC, 0, "other", None);
    store
        .append_batch(&[unrelated, delivered_copy(&first, 2_100).unwrap()])
        .unwrap()
        .unwrap();
    drop(index);

    let index = TimerIndex::open_dir(&index_dir).unwrap();
    assert_eq!(resolve_in_flight(&index, &reader).unwrap(), 1);
    assert_eq!(index.in_flight().unwrap(), None);
    let mut again = index.due(2_100, 10).unwrap();
    again.sort();
    assert_eq!(again, entries[1..].to_vec());
    // Settling again is a no-op, also after a reopen.
    assert_eq!(resolve_in_flight(&index, &reader).unwrap(), 0);
    drop(index);
    let index = TimerIndex::open_dir(&index_dir).unwrap();
    assert_eq!(index.pending().unwrap(), 2);
}

#[test]
fn an_embedded_producer_schedules_with_a_delay_or_a_deliver_time() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let producer = Producer::new("pg", Rc::new(broker.clone()));
        let now = broker.now_ms();
        producer
            .send(OutgoingMessage::new(TOPIC, "in-2s").with_delay(Duration::from_secs(2)))
            .await
            .unwrap();
        producer
            .send(OutgoingMessage::new(TOPIC, "at-4s").with_deliver_time_ms(now + 4000))
            .await
            .unwrap();
        assert_eq!(broker.reader().max_offset(TIMER_TOPIC, 0), 2);
        let all = async || {
            let mut got = Vec::new();
            for queue_id in 0..4 {
                got.extend(bodies(&read_all(&broker, TOPIC, queue_id).await));
            }
            got
        };
        advance(Duration::from_millis(900)).await;
        assert!(all().await.is_empty(), "delivered early");
        advance(Duration::from_millis(4_200)).await;
        wait_for("both", async || all().await.len() >= 2).await;
        let mut got = all().await;
        got.sort();
        assert_eq!(got, ["at-4s", "in-2s"]);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn timers_far_ahead_are_indexed_once_across_a_restart_without_any_delivery() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let messages = (1..=3)
            .map(|i| timed(&format!("far{i}"), TIMER_DELAY_SEC, "30"))
            .collect();
        BrokerApi::send_messages(&broker, SendRequest::new(messages))
            .await
            .unwrap();
        advance(Duration::from_millis(1_500)).await;
        let snapshot = broker.addrs().timer.send(timer::Observe).await.unwrap();
        assert_eq!((snapshot.indexed, snapshot.cursor), (3, 3));
        broker.shutdown().await.unwrap();
    });
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let snapshot = broker.addrs().timer.send(timer::Observe).await.unwrap();
        assert_eq!((snapshot.indexed, snapshot.cursor), (0, 3), "indexed again");
        advance(Duration::from_secs(31)).await;
        wait_for("all three", async || {
            read_all(&broker, TOPIC, 0).await.len() >= 3
        })
        .await;
        advance(Duration::from_secs(2)).await;
        assert_eq!(
            bodies(&read_all(&broker, TOPIC, 0).await),
            ["far1", "far2", "far3"]
        );
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn a_recalled_timer_never_fires_also_after_a_restart_and_its_neighbour_does() {
    let dir = tempfile::tempdir().unwrap();
    let handles = run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let sent = BrokerApi::send_messages(
            &broker,
            SendRequest::new(vec![
                timed("recalled", TIMER_DELAY_MS, "3000"),
                timed("kept", TIMER_DELAY_MS, "3000"),
                timed("plain", "NOT_A_TIMER", "x"),
            ]),
        )
        .await
        .unwrap();
        let handles: Vec<Option<String>> = sent.iter().map(|r| r.recall_handle.clone()).collect();
        assert!(handles[0].is_some() && handles[1].is_some(), "{handles:?}");
        assert_eq!(handles[2], None, "a plain message has no recall handle");
        let id = broker
            .recall(TOPIC, handles[0].as_deref().unwrap())
            .await
            .unwrap();
        assert_eq!(id, "ID-recalled");
        broker.shutdown().await.unwrap();
        handles
    });
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        advance(Duration::from_secs(5)).await;
        wait_for("the kept timer", async || {
            !read_all(&broker, TOPIC, 0).await.is_empty()
        })
        .await;
        // More rounds: the recalled one stays away.
        advance(Duration::from_secs(2)).await;
        assert_eq!(
            bodies(&read_all(&broker, TOPIC, 0).await),
            ["plain", "kept"]
        );
        let snapshot = broker.addrs().timer.send(timer::Observe).await.unwrap();
        assert_eq!(snapshot.recalled, 1);
        // Its time has passed: a recall now is refused, as Java's broker refuses it.
        let late = broker.recall(TOPIC, handles[1].as_deref().unwrap()).await;
        assert!(
            matches!(
                late,
                Err(BrokerError::Refused(Refused::Recall(
                    InvalidRecall::TimestampInvalid
                )))
            ),
            "{late:?}"
        );
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn a_recall_is_refused_when_switched_off_forged_or_for_another_topic_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let off = BrokerConfig {
            recall: false,
            ..BrokerConfig::default()
        };
        let broker = start_broker(dir.path(), off);
        let sent = BrokerApi::send_messages(
            &broker,
            SendRequest::new(vec![timed("t", TIMER_DELAY_MS, "2000")]),
        )
        .await
        .unwrap();
        let handle = sent[0].recall_handle.clone().unwrap();
        let refusal = |r: Result<String, BrokerError>| match r {
            Err(BrokerError::Refused(Refused::Recall(why))) => Some(why),
            _ => None,
        };
        assert_eq!(
            refusal(broker.recall(TOPIC, &handle).await),
            Some(InvalidRecall::Disabled)
        );
        broker.shutdown().await.unwrap();

        let broker = start_broker(dir.path(), BrokerConfig::default());
        assert_eq!(
            refusal(broker.recall(TOPIC, "garbage").await),
            Some(InvalidRecall::InvalidHandle)
        );
        BrokerApi::send_messages(
            &broker,
            SendRequest::new(vec![message("Other", 0, "o", None)]),
        )
        .await
        .unwrap();
        assert_eq!(
            refusal(broker.recall("Other", &handle).await),
            Some(InvalidRecall::TopicMismatch)
        );
        assert!(matches!(
            broker.recall("Missing", &handle).await,
            Err(BrokerError::Refused(Refused::TopicNotExist { .. }))
        ));
        advance(Duration::from_secs(4)).await;
        wait_for("the timer nobody recalled", async || {
            !read_all(&broker, TOPIC, 0).await.is_empty()
        })
        .await;
        broker.shutdown().await.unwrap();
    });
}
