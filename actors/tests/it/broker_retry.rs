//! Send-back, dead letters and delayed delivery (`docs/wire-protocol.md` §4.5,
//! `docs/offset-lifecycle.md` §1.E).

use skiff_actors::broker::retry::SendBackOutcome;
use skiff_actors::broker::{schedule, BrokerConfig, BrokerHandle};
use skiff_actors::broker_api::{BrokerApi, PullStatus, SendBackRequest, SendRequest};
use skiff_actors::logic::delay::{dlq_topic, retry_topic, SCHEDULE_TOPIC};
use skiff_actors::refused::Refused;
use skiff_actors::testsuite::*;
use skiff_storage::message::{decode_records, StoredMessage};
use skiff_storage::metadata::SubscriptionGroupConfig;
use std::time::Duration;

const GROUP: &str = "g";
const TOPIC: &str = "T";

fn send_back(physical_offset: u64, delay_level: i32) -> SendBackRequest {
    SendBackRequest {
        group: GROUP.to_string(),
        physical_offset,
        delay_level,
        origin_msg_id: None,
        origin_topic: None,
        max_reconsume_times: None,
        broker_name: None,
    }
}

async fn read_all(broker: &BrokerHandle, topic: &str, queue_id: u32) -> Vec<StoredMessage> {
    let response = broker.pull(pull(GROUP, topic, queue_id, 0)).await.unwrap();
    if response.status != PullStatus::Found {
        return Vec::new();
    }
    decode_records(response.records).unwrap()
}

#[test]
fn send_back_goes_to_retry_with_delay_level_3_plus_reconsume_times() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let sent = BrokerApi::send_messages(
            &broker,
            SendRequest::new(vec![message(TOPIC, 1, "payload", Some("A"))]),
        )
        .await
        .unwrap();
        let original_id = sent[0].offset_msg_id.clone();

        let outcome = broker
            .send_back(send_back(sent[0].physical_offset, 0))
            .await
            .unwrap();
        assert_eq!(
            outcome,
            SendBackOutcome::Retry {
                topic: retry_topic(GROUP),
                queue_id: 0,
                delay_level: 3,
                reconsume_times: 1,
            }
        );
        // Level 3 waits in schedule queue 2 for 10 s.
        assert_eq!(broker.reader().max_offset(SCHEDULE_TOPIC, 2), 1);
        assert_eq!(broker.reader().max_offset(&retry_topic(GROUP), 0), 0);
        advance(Duration::from_millis(9_500)).await;
        assert_eq!(
            broker.reader().max_offset(&retry_topic(GROUP), 0),
            0,
            "delivered early"
        );
        advance(Duration::from_millis(1_000)).await;
        assert_eq!(
            broker.reader().max_offset(&retry_topic(GROUP), 0),
            1,
            "not delivered at 10 s"
        );

        let retried = read_all(&broker, &retry_topic(GROUP), 0).await.remove(0);
        assert_eq!(retried.body.as_ref(), b"payload");
        assert_eq!(retried.reconsume_times, 1);
        assert_eq!(retried.property("RETRY_TOPIC"), Some(TOPIC));
        assert_eq!(
            retried.property("ORIGIN_MESSAGE_ID"),
            Some(original_id.as_str())
        );
        assert_eq!(retried.property("TAGS"), Some("A"));
        assert_eq!(retried.property("DELAY"), None);
        assert_eq!(retried.property("REAL_TOPIC"), None);

        // It fails again: the next delay is level 3 + 1 = 30 s; the origin stays the first one.
        let outcome = broker
            .send_back(send_back(retried.physical_offset, 0))
            .await
            .unwrap();
        assert!(
            matches!(
                outcome,
                SendBackOutcome::Retry {
                    delay_level: 4,
                    reconsume_times: 2,
                    ..
                }
            ),
            "{outcome:?}"
        );
        advance(Duration::from_secs(29)).await;
        assert_eq!(broker.reader().max_offset(&retry_topic(GROUP), 0), 1);
        advance(Duration::from_secs(2)).await;
        let again = read_all(&broker, &retry_topic(GROUP), 0).await;
        assert_eq!(again.len(), 2);
        assert_eq!(again[1].reconsume_times, 2);
        assert_eq!(again[1].property("RETRY_TOPIC"), Some(TOPIC));
        assert_eq!(
            again[1].property("ORIGIN_MESSAGE_ID"),
            Some(original_id.as_str())
        );

        // A consumer-chosen level wins over the broker's choice.
        let outcome = broker
            .send_back(send_back(sent[0].physical_offset, 1))
            .await
            .unwrap();
        assert!(
            matches!(outcome, SendBackOutcome::Retry { delay_level: 1, .. }),
            "{outcome:?}"
        );
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn send_back_after_max_reconsume_goes_to_dlq() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let mut worn = message(TOPIC, 0, "worn", None);
        worn.reconsume_times = 16;
        let mut young = message(TOPIC, 0, "young", None);
        young.reconsume_times = 2;
        let sent = BrokerApi::send_messages(&broker, SendRequest::new(vec![worn, young]))
            .await
            .unwrap();

        let outcome = broker
            .send_back(send_back(sent[0].physical_offset, 0))
            .await
            .unwrap();
        assert!(
            matches!(&outcome, SendBackOutcome::DeadLetter { topic, .. } if *topic == dlq_topic(GROUP)),
            "{outcome:?}"
        );
        // Straight in, no delay, one queue.
        let dead = read_all(&broker, &dlq_topic(GROUP), 0).await;
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].body.as_ref(), b"worn");
        assert_eq!(dead[0].property("RETRY_TOPIC"), Some(TOPIC));
        assert_eq!(
            broker
                .route(&dlq_topic(GROUP))
                .await
                .unwrap()
                .read_queue_nums(),
            1
        );

        // The request's own limit (client maxReconsumeTimes) applies when given.
        let mut request = send_back(sent[1].physical_offset, 0);
        request.max_reconsume_times = Some(2);
        let outcome = broker.send_back(request).await.unwrap();
        assert!(
            matches!(outcome, SendBackOutcome::DeadLetter { .. }),
            "{outcome:?}"
        );
        // A negative level is the listener's "dead-letter now".
        let outcome = broker
            .send_back(send_back(sent[1].physical_offset, -1))
            .await
            .unwrap();
        assert!(
            matches!(outcome, SendBackOutcome::DeadLetter { .. }),
            "{outcome:?}"
        );
        assert_eq!(broker.reader().max_offset(&dlq_topic(GROUP), 0), 3);
        assert_eq!(broker.reader().max_offset(&retry_topic(GROUP), 0), 0);

        // A client that sends to the retry topic itself past the limit lands in the &dlq_topic(GROUP) too.
        let mut fallback = message(&retry_topic(GROUP), 0, "fallback", None);
        fallback.reconsume_times = 16;
        BrokerApi::send_messages(&broker, SendRequest::new(vec![fallback]))
            .await
            .unwrap();
        assert_eq!(broker.reader().max_offset(&dlq_topic(GROUP), 0), 4);
        assert_eq!(broker.reader().max_offset(&retry_topic(GROUP), 0), 0);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn retry_queue_nums_zero_drops() {
    let dir = tempfile::tempdir().unwrap();
    let mut group = SubscriptionGroupConfig::new(GROUP);
    group.retry_queue_nums = 0;
    put_group(dir.path(), group);
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let sent = BrokerApi::send_messages(
            &broker,
            SendRequest::new(vec![message(TOPIC, 0, "x", None)]),
        )
        .await
        .unwrap();
        let outcome = broker
            .send_back(send_back(sent[0].physical_offset, 0))
            .await
            .unwrap();
        assert_eq!(outcome, SendBackOutcome::Dropped);
        advance(Duration::from_secs(20)).await;
        let topics: Vec<String> = broker
            .topics()
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert!(
            !topics
                .iter()
                .any(|t| *t == retry_topic(GROUP) || *t == dlq_topic(GROUP)),
            "{topics:?}"
        );
        assert_eq!(broker.reader().max_offset(SCHEDULE_TOPIC, 2), 0);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn send_back_of_unknown_offset_is_message_not_found() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        BrokerApi::send_messages(
            &broker,
            SendRequest::new(vec![message(TOPIC, 0, "x", None)]),
        )
        .await
        .unwrap();
        let missing = broker.send_back(send_back(1 << 40, 0)).await;
        assert!(
            matches!(
                missing,
                Err(skiff_actors::broker_api::BrokerError::Refused(
                    Refused::MessageNotFound { .. }
                ))
            ),
            "{missing:?}"
        );
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn delayed_message_delivered_when_due_and_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let delayed = with_property(message(TOPIC, 1, "five", None), "DELAY", "2");
        let sent = BrokerApi::send_messages(&broker, SendRequest::new(vec![delayed]))
            .await
            .unwrap();
        assert_eq!(sent[0].queue_id, 1, "a delayed send reports its real queue");
        assert_eq!(broker.reader().max_offset(SCHEDULE_TOPIC, 1), 1);
        assert_eq!(broker.reader().max_offset(TOPIC, 1), 0);
        advance(Duration::from_millis(4_500)).await;
        assert_eq!(broker.reader().max_offset(TOPIC, 1), 0, "delivered early");
        advance(Duration::from_millis(1_000)).await;
        assert_eq!(
            broker.reader().max_offset(TOPIC, 1),
            1,
            "not delivered at 5 s"
        );
        let delivered = read_all(&broker, TOPIC, 1).await.remove(0);
        assert_eq!(delivered.body.as_ref(), b"five");
        assert_eq!(delivered.property("DELAY"), None);
        assert_eq!(delivered.property("REAL_TOPIC"), None);
        assert_eq!(delivered.property("REAL_QID"), None);
        assert_eq!(delivered.property("WAIT"), Some("true"));

        // A 10 s message that the broker does not live to deliver.
        let delayed = with_property(message(TOPIC, 1, "ten", None), "DELAY", "3");
        BrokerApi::send_messages(&broker, SendRequest::new(vec![delayed]))
            .await
            .unwrap();
        advance(Duration::from_secs(3)).await;
        assert_eq!(broker.reader().max_offset(TOPIC, 1), 1);
        broker.shutdown().await.unwrap();
    });
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let levels = broker
            .addrs()
            .scheduler
            .send(schedule::Observe)
            .await
            .unwrap()
            .levels;
        assert_eq!(
            levels[1].cursor, 1,
            "level 2 resumes past what it delivered"
        );
        assert_eq!(
            levels[2].cursor, 0,
            "level 3 resumes at its undelivered message"
        );
        // Due 10 s after its store timestamp, which was 5.5 s of paused time after the first
        // broker started; the wall clock the new broker starts from has barely moved, so it is
        // due about 15.5 s from now.
        advance(Duration::from_secs(4)).await;
        assert_eq!(
            broker.reader().max_offset(TOPIC, 1),
            1,
            "delivered early after restart"
        );
        advance(Duration::from_secs(14)).await;
        assert_eq!(
            broker.reader().max_offset(TOPIC, 1),
            2,
            "not delivered after restart"
        );
        // Nothing is delivered twice.
        advance(Duration::from_secs(30)).await;
        let bodies: Vec<_> = read_all(&broker, TOPIC, 1)
            .await
            .into_iter()
            .map(|m| m.body)
            .collect();
        assert_eq!(bodies, vec!["five", "ten"]);
        broker.shutdown().await.unwrap();
    });
}
