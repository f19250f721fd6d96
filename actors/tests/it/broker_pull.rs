//! PULL_MESSAGE rules (`docs/wire-protocol.md` §4.1, `docs/offset-lifecycle.md` §1.A.10 and
//! §1.A.12): status mapping with offset correction, piggybacked commits, long polling, the
//! broker-side tag and SQL92 filters.

use skiff_actors::broker::{long_poll, BrokerConfig, BrokerHandle};
use skiff_actors::broker_api::{
    BrokerApi, BrokerError, ExpressionType, NoNewMessage, OffsetMoved, OffsetUpdate, PullStatus,
    SendRequest,
};
use skiff_actors::refused::Refused;
use skiff_actors::testsuite::*;
use skiff_storage::message::decode_records;
use skiff_storage::store::FlushPolicy;
use std::time::Duration;
use tokio::time::Instant;

const GROUP: &str = "g";
const TOPIC: &str = "T";

async fn send_n(broker: &BrokerHandle, queue_id: u32, n: usize) {
    let messages = (0..n)
        .map(|i| message(TOPIC, queue_id, &format!("m{i}"), None))
        .collect();
    BrokerApi::send_messages(broker, SendRequest::new(messages))
        .await
        .expect("send");
}

/// The group's stored offset of queue 0, without the zero rule.
async fn stored(broker: &BrokerHandle) -> Option<u64> {
    broker
        .query_offset(offset_query(GROUP, TOPIC, 0, false))
        .await
        .unwrap()
}

/// Waits (in actor round trips, not time) until `n` pulls are parked.
async fn until_parked(broker: &BrokerHandle, n: usize) {
    for _ in 0..1000 {
        let parked = broker
            .addrs()
            .long_poll
            .send(long_poll::Observe)
            .await
            .unwrap()
            .parked;
        if parked >= n {
            return;
        }
        settle().await;
    }
    panic!("pull never parked");
}

#[test]
fn pull_offset_overflow_badly_corrects_to_max() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send_n(&broker, 0, 2).await;
        let response = broker.pull(pull(GROUP, TOPIC, 0, 5)).await.unwrap();
        assert_eq!(
            response.status,
            PullStatus::OffsetMoved(OffsetMoved::OverflowBadly)
        );
        assert_eq!(response.next_begin_offset, 2);
        assert_eq!((response.min_offset, response.max_offset), (0, 2));
        assert!(response.records.is_empty());

        // offset == max: nothing new, stay put.
        let response = broker.pull(pull(GROUP, TOPIC, 0, 2)).await.unwrap();
        assert_eq!(
            response.status,
            PullStatus::NoNewMessage(NoNewMessage::CaughtUp)
        );
        assert_eq!(response.next_begin_offset, 2);

        // An empty queue: NO_MESSAGE_IN_QUEUE restarts at 0, illegal unless already there.
        let response = broker.pull(pull(GROUP, TOPIC, 1, 3)).await.unwrap();
        assert_eq!(
            response.status,
            PullStatus::OffsetMoved(OffsetMoved::EmptyQueue)
        );
        assert_eq!(response.next_begin_offset, 0);
        let response = broker.pull(pull(GROUP, TOPIC, 1, 0)).await.unwrap();
        assert_eq!(
            response.status,
            PullStatus::NoNewMessage(NoNewMessage::EmptyQueue)
        );
        assert_eq!(response.next_begin_offset, 0);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn pull_found_caps_at_32_messages() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send_n(&broker, 0, 40).await;
        let mut request = pull(GROUP, TOPIC, 0, 0);
        request.max_messages = 100;
        let response = broker.pull(request).await.unwrap();
        assert_eq!(response.status, PullStatus::Found);
        let records = decode_records(response.records).unwrap();
        assert_eq!(records.len(), 32);
        assert_eq!(response.next_begin_offset, 32);
        assert_eq!(records[0].body.as_ref(), b"m0");
        assert_eq!(records[31].queue_offset, 31);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn piggybacked_commit_applies_only_on_first_arrival() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send_n(&broker, 0, 3).await;

        // Without a commit offset (no FLAG_COMMIT_OFFSET) nothing is committed.
        broker.pull(pull(GROUP, TOPIC, 0, 0)).await.unwrap();
        assert_eq!(stored(&broker).await, None);

        // First arrival with a commit offset: committed, then parked at the end of the queue.
        let mut held = pull(GROUP, TOPIC, 0, 3);
        held.commit_offset = Some(2);
        held.suspend_timeout = Some(Duration::from_secs(15));
        let parked = actix_rt::spawn({
            let broker = broker.clone();
            async move { broker.pull(held).await }
        });
        until_parked(&broker, 1).await;
        assert_eq!(
            broker
                .query_offset(offset_query(GROUP, TOPIC, 0, false))
                .await
                .unwrap(),
            Some(2)
        );

        // The consumer moves on meanwhile; the woken replay must not drag it back to 2.
        broker
            .update_offset(GROUP, queue_of(TOPIC, 0), 3, OffsetUpdate::Acknowledged)
            .await
            .unwrap();
        send_n(&broker, 0, 1).await;
        let response = parked.await.unwrap().unwrap();
        assert_eq!(response.status, PullStatus::Found);
        assert_eq!(
            broker
                .query_offset(offset_query(GROUP, TOPIC, 0, false))
                .await
                .unwrap(),
            Some(3)
        );
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn long_poll_wakes_on_arrival() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send_n(&broker, 0, 1).await;
        let mut request = pull(GROUP, TOPIC, 0, 1);
        request.suspend_timeout = Some(Duration::from_secs(15));
        let started = Instant::now();
        let parked = actix_rt::spawn({
            let broker = broker.clone();
            async move { broker.pull(request).await }
        });
        until_parked(&broker, 1).await;
        advance(Duration::from_secs(3)).await;
        assert!(!parked.is_finished(), "answered before any message arrived");

        send_n(&broker, 0, 2).await;
        let response = parked.await.unwrap().unwrap();
        let waited = started.elapsed();
        assert_eq!(response.status, PullStatus::Found);
        assert_eq!(decode_records(response.records).unwrap().len(), 2);
        assert_eq!(response.next_begin_offset, 3);
        assert!(
            waited >= Duration::from_secs(3) && waited < Duration::from_secs(4),
            "woken after {waited:?}"
        );
        let holds = broker
            .addrs()
            .long_poll
            .send(long_poll::Observe)
            .await
            .unwrap();
        assert_eq!(holds.parked, 0);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn long_poll_times_out_with_no_new_message() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send_n(&broker, 0, 1).await;
        // A message on another queue must not wake this one.
        let mut request = pull(GROUP, TOPIC, 0, 1);
        request.suspend_timeout = Some(Duration::from_secs(15));
        let started = Instant::now();
        let parked = actix_rt::spawn({
            let broker = broker.clone();
            async move { broker.pull(request).await }
        });
        until_parked(&broker, 1).await;
        send_n(&broker, 1, 1).await;
        advance(Duration::from_millis(14_900)).await;
        assert!(!parked.is_finished(), "answered before the suspend timeout");
        let response = parked.await.unwrap().unwrap();
        let waited = started.elapsed();
        assert_eq!(
            response.status,
            PullStatus::NoNewMessage(NoNewMessage::CaughtUp)
        );
        assert_eq!(response.next_begin_offset, 1);
        assert!(
            waited >= Duration::from_secs(15) && waited < Duration::from_secs(16),
            "answered after {waited:?}"
        );
        // The abandoned hold does not linger.
        advance(Duration::from_secs(6)).await;
        let holds = broker
            .addrs()
            .long_poll
            .send(long_poll::Observe)
            .await
            .unwrap();
        assert_eq!((holds.parked, holds.queues), (0, 0));
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn short_polling_holds_for_one_second() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let config = BrokerConfig {
            long_polling: false,
            ..BrokerConfig::default()
        };
        let broker = start_broker(dir.path(), config);
        let mut request = pull(GROUP, TOPIC, 0, 0);
        request.suspend_timeout = Some(Duration::from_secs(15));
        let started = Instant::now();
        let response = broker.pull(request).await.unwrap();
        assert_eq!(
            response.status,
            PullStatus::NoNewMessage(NoNewMessage::EmptyQueue)
        );
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(1) && waited < Duration::from_secs(2),
            "answered after {waited:?}"
        );
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn pull_filters_by_tag_from_request_or_registered_subscription() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let messages = vec![
            message(TOPIC, 0, "a", Some("A")),
            message(TOPIC, 0, "b", Some("B")),
            message(TOPIC, 0, "c", Some("A")),
            message(TOPIC, 0, "none", None),
        ];
        BrokerApi::send_messages(&broker, SendRequest::new(messages))
            .await
            .unwrap();

        let mut request = pull(GROUP, TOPIC, 0, 0);
        request.subscription = Some("A".to_string());
        let response = broker.pull(request).await.unwrap();
        assert_eq!(response.status, PullStatus::Found);
        let bodies: Vec<_> = decode_records(response.records)
            .unwrap()
            .into_iter()
            .map(|m| m.body)
            .collect();
        assert_eq!(bodies, vec!["a", "c"]);
        assert_eq!(response.next_begin_offset, 4);

        // Without a subscription in the request the group must have registered one.
        let mut request = pull(GROUP, TOPIC, 0, 0);
        request.subscription = None;
        let missing = broker.pull(request.clone()).await;
        assert!(
            matches!(
                missing,
                Err(BrokerError::Refused(Refused::SubscriptionNotExist { .. }))
            ),
            "{missing:?}"
        );
        let n = notifier();
        broker
            .heartbeat(heartbeat("c1", GROUP, TOPIC, "B"), as_notifier(&n))
            .await
            .unwrap();
        let response = broker.pull(request.clone()).await.unwrap();
        let bodies: Vec<_> = decode_records(response.records)
            .unwrap()
            .into_iter()
            .map(|m| m.body)
            .collect();
        assert_eq!(bodies, vec!["b"]);

        // Nothing matches past the last B: the pull skips ahead (NO_MATCHED_MSG).
        request.queue_offset = 2;
        let response = broker.pull(request).await.unwrap();
        assert_eq!(response.status, PullStatus::NoMatchedMessage);
        assert_eq!(response.next_begin_offset, 4);
        broker.shutdown().await.unwrap();
    });
}

fn bodies(response: skiff_actors::broker_api::PullResponse) -> Vec<String> {
    decode_records(response.records)
        .unwrap()
        .into_iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect()
}

#[test]
fn pull_filters_by_sql92_selector_over_properties_and_tags() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let messages = vec![
            with_property(message(TOPIC, 0, "a3-red", Some("A")), "a", "3"),
            with_property(
                with_property(message(TOPIC, 0, "a7-red", Some("A")), "a", "7"),
                "color",
                "red",
            ),
            with_property(
                with_property(message(TOPIC, 0, "a9-blue", Some("B")), "a", "9"),
                "color",
                "blue",
            ),
            message(TOPIC, 0, "bare", None),
        ];
        BrokerApi::send_messages(&broker, SendRequest::new(messages))
            .await
            .unwrap();

        let mut request = pull(GROUP, TOPIC, 0, 0);
        request.expression_type = ExpressionType::Sql92;
        request.subscription = Some("a > 5 AND (color = 'red' OR TAGS = 'B')".to_string());
        let response = broker.pull(request.clone()).await.unwrap();
        assert_eq!(response.status, PullStatus::Found);
        assert_eq!(bodies(response), vec!["a7-red", "a9-blue"]);

        request.subscription = Some("color IS NULL".to_string());
        assert_eq!(
            bodies(broker.pull(request.clone()).await.unwrap()),
            vec!["a3-red", "bare"]
        );

        // Past the last match nothing is found, and the offset moves over what was examined.
        request.subscription = Some("a BETWEEN 6 AND 8".to_string());
        request.queue_offset = 2;
        let response = broker.pull(request.clone()).await.unwrap();
        assert_eq!(response.status, PullStatus::NoMatchedMessage);
        assert_eq!(response.next_begin_offset, 4);

        // A registered SQL92 subscription is used when the pull carries none.
        let mut registered = heartbeat("c1", GROUP, TOPIC, "TAGS IN ('B')");
        registered.subscriptions[0].expression_type = ExpressionType::Sql92;
        broker
            .heartbeat(registered, as_notifier(&notifier()))
            .await
            .unwrap();
        let mut from_heartbeat = pull(GROUP, TOPIC, 0, 0);
        from_heartbeat.subscription = None;
        assert_eq!(
            bodies(broker.pull(from_heartbeat).await.unwrap()),
            vec!["a9-blue"]
        );

        // A malformed selector is refused, naming the expression and the error.
        request.subscription = Some("a >> 5".to_string());
        request.queue_offset = 0;
        let refused = broker.pull(request).await;
        match refused {
            Err(BrokerError::Refused(Refused::SubscriptionParseFailed { source, .. })) => {
                assert_eq!(source.expression, "a >> 5")
            }
            other => panic!("expected a parse failure, got {other:?}"),
        }
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn sync_flush_send_acks_after_group_commit() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker_with(dir.path(), BrokerConfig::default(), FlushPolicy::Sync);
        // Concurrent senders: each answered, each with its own offset.
        let sends: Vec<_> = (0..8)
            .map(|i| {
                let broker = broker.clone();
                actix_rt::spawn(async move {
                    BrokerApi::send_messages(
                        &broker,
                        SendRequest::new(vec![message(TOPIC, 0, &format!("s{i}"), None)]),
                    )
                    .await
                })
            })
            .collect();
        let mut offsets = Vec::new();
        for send in sends {
            offsets.push(send.await.unwrap().unwrap()[0].queue_offset);
        }
        offsets.sort();
        assert_eq!(offsets, (0..8).collect::<Vec<u64>>());
        assert_eq!(broker.reader().max_offset(TOPIC, 0), 8);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn a_route_never_creates_a_topic_and_a_send_does_when_auto_creation_is_on() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let route = broker.route("fresh").await;
        assert!(
            matches!(
                route,
                Err(BrokerError::Refused(Refused::TopicNotExist { .. }))
            ),
            "{route:?}"
        );
        // A producer's route: the queues its first send would create, and nothing made yet.
        let route = broker.publish_route("fresh").await.unwrap();
        assert_eq!((route.read_queue_nums(), route.write_queue_nums()), (4, 4));
        assert_eq!(route.brokers.len(), 1);
        assert_eq!(route.brokers[0].broker_name, "skiff");
        assert!(broker.topic("fresh").unwrap().is_none());
        // A producer's own queue count wins on the send path.
        broker
            .send_messages(SendRequest {
                auto_create_queue_nums: Some(8),
                ..SendRequest::new(vec![message("eight", 5, "x", None)])
            })
            .await
            .unwrap();
        assert_eq!(broker.route("eight").await.unwrap().read_queue_nums(), 8);
        broker.shutdown().await.unwrap();
    });
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let config = BrokerConfig {
            auto_create_topic: false,
            ..BrokerConfig::default()
        };
        let broker = start_broker(dir.path(), config);
        let route = broker.route("fresh").await;
        assert!(
            matches!(
                route,
                Err(BrokerError::Refused(Refused::TopicNotExist { .. }))
            ),
            "{route:?}"
        );
        let sent = BrokerApi::send_messages(
            &broker,
            SendRequest::new(vec![message("fresh", 0, "x", None)]),
        )
        .await;
        assert!(
            matches!(
                sent,
                Err(BrokerError::Refused(Refused::TopicNotExist { .. }))
            ),
            "{sent:?}"
        );
        broker.shutdown().await.unwrap();
    });
}
