//! Lite topics (RocketMQ 5.5) on the broker: a lite message is stored in its lite topic's
//! queue; a client receives only the lite topics it subscribes, each in order (the next batch
//! after the ack); a new subscription may start at the end; a subscription nobody refreshes
//! expires; an Exclusive group's second subscriber takes the lite topic from the first.

use skiff_actors::broker::{
    AckRequest, BrokerConfig, BrokerHandle, ClientSend, ExpiredReceipt, LitePop, LiteSync,
    PopAnswer,
};
use skiff_actors::broker_api::BrokerError;
use skiff_actors::logic::lite::{lmq_name, LiteRefusal, StartFrom, SyncAction, SyncOutcome};
use skiff_actors::logic::sends::QueueChoice;
use skiff_actors::refused::Refused;
use skiff_actors::testsuite::*;
use skiff_storage::message::decode_records;
use skiff_storage::message::property::LITE_TOPIC;
use skiff_storage::metadata::{SubscriptionGroupConfig, TopicConfig, TopicMessageType};
use std::collections::BTreeSet;
use std::time::Duration;

const PARENT: &str = "Chats";
const GROUP: &str = "chat-readers";
const EXPIRY: Duration = Duration::from_secs(60);

fn lite_broker(dir: &std::path::Path, model: &str) -> BrokerHandle {
    let config = BrokerConfig {
        lite_subscription_expiry: EXPIRY,
        ..BrokerConfig::default()
    };
    let broker = start_broker(dir, config);
    broker
        .put_topic(&TopicConfig {
            message_type: Some(TopicMessageType::Lite),
            ..TopicConfig::new(PARENT, 4)
        })
        .unwrap();
    let mut group = SubscriptionGroupConfig::new(GROUP);
    group
        .attributes
        .insert("lite.bind.topic".to_owned(), PARENT.to_owned());
    group
        .attributes
        .insert("lite.sub.model".to_owned(), model.to_owned());
    broker.put_group(&group).unwrap();
    broker
}

async fn send(broker: &BrokerHandle, lite: &str, body: &str) -> u32 {
    let message = with_property(message(PARENT, 0, body, None), LITE_TOPIC, lite);
    let sent = broker
        .send(ClientSend {
            messages: vec![message],
            queue: QueueChoice::Random,
            batch: false,
            auto_create_queue_nums: None,
        })
        .await
        .unwrap();
    sent[0].queue_id
}

async fn subscribe(
    broker: &BrokerHandle,
    client: &str,
    action: SyncAction,
    lites: &[&str],
    start: Option<StartFrom>,
) -> Result<SyncOutcome, BrokerError> {
    broker
        .sync_lite_subscription(LiteSync {
            client_id: client.to_owned(),
            group: GROUP.to_owned(),
            topic: PARENT.to_owned(),
            action,
            lites: lites
                .iter()
                .map(|l| (*l).to_owned())
                .collect::<BTreeSet<_>>(),
            start,
        })
        .await
}

async fn receive(broker: &BrokerHandle, client: &str) -> Vec<PopAnswer> {
    receive_waiting(broker, client, Duration::ZERO).await
}

/// A receive that waits up to `poll` for a message, invisible `INVISIBLE` once handed out.
async fn receive_waiting(broker: &BrokerHandle, client: &str, poll: Duration) -> Vec<PopAnswer> {
    broker
        .pop_lite(LitePop {
            client_id: client.to_owned(),
            group: GROUP.to_owned(),
            topic: PARENT.to_owned(),
            max_messages: 32,
            invisible_ms: INVISIBLE.as_millis() as i64,
            poll,
        })
        .await
        .unwrap()
}

/// Not a multiple of the broker's 30 s sweep, which marks every lite topic ready.
const INVISIBLE: Duration = Duration::from_secs(10);

/// `lite:body` of every message received, acknowledging each when `ack`.
async fn taken(broker: &BrokerHandle, answers: &[PopAnswer], ack: bool) -> Vec<String> {
    let mut out = Vec::new();
    for answer in answers {
        for message in decode_records(answer.records.clone()).unwrap() {
            let lite = message.property(LITE_TOPIC).unwrap_or("?").to_owned();
            out.push(format!("{lite}:{}", String::from_utf8_lossy(&message.body)));
            if ack {
                let receipt = answer.receipt(&message, "skiff").unwrap();
                broker
                    .ack(AckRequest {
                        group: GROUP.to_owned(),
                        topic: message.topic.clone(),
                        queue_id: 0,
                        offset: message.queue_offset as i64,
                        receipt,
                        expired: ExpiredReceipt::Refuse,
                    })
                    .await
                    .unwrap();
            }
        }
    }
    out
}

#[test]
fn a_client_receives_only_its_lite_topics_each_in_order_one_batch_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = lite_broker(dir.path(), "Shared");
        subscribe(&broker, "c1", SyncAction::PartialAdd, &["s1"], None)
            .await
            .unwrap();
        assert_eq!(
            send(&broker, "s1", "a").await,
            0,
            "a lite topic is one queue"
        );
        send(&broker, "s1", "b").await;
        send(&broker, "s2", "other").await;
        assert_eq!(
            broker
                .topic(&lmq_name(PARENT, "s1"))
                .unwrap()
                .map(|t| t.read_queue_nums),
            Some(1)
        );
        let first = receive(&broker, "c1").await;
        assert_eq!(taken(&broker, &first, false).await, ["s1:a", "s1:b"]);
        send(&broker, "s1", "c").await;
        assert!(
            receive(&broker, "c1").await.is_empty(),
            "the lite topic's next batch waits for the ack of the one out"
        );
        taken(&broker, &first, true).await;
        let next = receive(&broker, "c1").await;
        assert_eq!(taken(&broker, &next, true).await, ["s1:c"]);
        assert!(receive(&broker, "c1").await.is_empty());
        // The unsubscribed lite topic arrives once subscribed, from its start.
        subscribe(&broker, "c1", SyncAction::PartialAdd, &["s2"], None)
            .await
            .unwrap();
        let late = receive(&broker, "c1").await;
        assert_eq!(taken(&broker, &late, true).await, ["s2:other"]);
        subscribe(&broker, "c1", SyncAction::PartialRemove, &["s1"], None)
            .await
            .unwrap();
        send(&broker, "s1", "d").await;
        assert!(
            receive(&broker, "c1").await.is_empty(),
            "s1 was unsubscribed"
        );
    });
}

#[test]
fn a_subscription_from_the_end_skips_the_backlog_and_an_unrefreshed_one_expires() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = lite_broker(dir.path(), "Shared");
        send(&broker, "s1", "old").await;
        subscribe(
            &broker,
            "c1",
            SyncAction::PartialAdd,
            &["s1"],
            Some(StartFrom::Max),
        )
        .await
        .unwrap();
        send(&broker, "s1", "new").await;
        let got = receive(&broker, "c1").await;
        assert_eq!(taken(&broker, &got, true).await, ["s1:new"]);
        tokio::time::advance(EXPIRY / 2).await;
        subscribe(&broker, "c1", SyncAction::CompleteAdd, &["s1"], None)
            .await
            .unwrap();
        tokio::time::advance(EXPIRY / 2 + Duration::from_secs(1)).await;
        send(&broker, "s1", "refreshed").await;
        let got = receive(&broker, "c1").await;
        assert_eq!(
            taken(&broker, &got, true).await,
            ["s1:refreshed"],
            "refreshed half-way, still subscribed"
        );
        let subscribers = |broker: &BrokerHandle| {
            broker
                .lite_topic_info(PARENT, "s1")
                .expect("lite topic info")
                .subscribers
        };
        assert_eq!(subscribers(&broker).len(), 1);
        tokio::time::advance(EXPIRY + Duration::from_secs(1)).await;
        assert!(
            subscribers(&broker).is_empty(),
            "an admin read sees the expiry before any sync or receive"
        );
        send(&broker, "s1", "after-expiry").await;
        assert!(receive(&broker, "c1").await.is_empty(), "expired");
    });
}

#[test]
fn an_exclusive_subscriber_takes_the_lite_topic_and_bad_requests_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = lite_broker(dir.path(), "Exclusive");
        subscribe(&broker, "c1", SyncAction::PartialAdd, &["solo"], None)
            .await
            .unwrap();
        let outcome = subscribe(&broker, "c2", SyncAction::PartialAdd, &["solo"], None)
            .await
            .unwrap();
        assert_eq!(outcome.evicted, [("c1".to_owned(), "solo".to_owned())]);
        send(&broker, "solo", "x").await;
        assert!(receive(&broker, "c1").await.is_empty());
        let got = receive(&broker, "c2").await;
        assert_eq!(taken(&broker, &got, true).await, ["solo:x"]);

        let refusal = |r: Result<SyncOutcome, BrokerError>| match r {
            Err(BrokerError::Refused(Refused::Lite(refusal))) => refusal,
            other => panic!("expected a lite refusal, got {other:?}"),
        };
        let long = "x".repeat(65);
        assert_eq!(
            refusal(subscribe(&broker, "c1", SyncAction::PartialAdd, &[&long], None).await),
            LiteRefusal::NameTooLong
        );
        let many: Vec<String> = (0..2301).map(|i| format!("t{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            refusal(subscribe(&broker, "c1", SyncAction::CompleteAdd, &many, None).await),
            LiteRefusal::SubscriptionQuota { quota: 2000 }
        );
        let wrong_parent = broker
            .sync_lite_subscription(LiteSync {
                client_id: "c1".to_owned(),
                group: GROUP.to_owned(),
                topic: "Other".to_owned(),
                action: SyncAction::PartialAdd,
                lites: BTreeSet::from(["a".to_owned()]),
                start: None,
            })
            .await;
        assert_eq!(
            refusal(wrong_parent),
            LiteRefusal::BindTopicMismatch {
                group: GROUP.to_owned(),
                expected: PARENT.to_owned(),
                actual: "Other".to_owned()
            }
        );
    });
}

/// A lite topic idle past its parent's `lite.topic.expiration` (and the broker's minimum)
/// expires: its queue is deleted (the next message starts it again at offset 0) and its group's
/// offset is forgotten; one written to within the time stays, and so does what it holds.
#[test]
fn an_idle_lite_topic_expires_with_its_offsets_and_a_busy_one_stays() {
    use skiff_actors::broker_api::QueryOffsetRequest;
    use skiff_actors::logic::lite::LiteExpiry;
    use skiff_actors::logic::queue::MessageQueue;
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let config = BrokerConfig {
            lite_expiry: LiteExpiry {
                check_interval: Duration::from_secs(10),
                min_ttl: Duration::from_secs(60),
            },
            ..BrokerConfig::default()
        };
        let broker = start_broker(dir.path(), config);
        let mut parent = TopicConfig {
            message_type: Some(TopicMessageType::Lite),
            ..TopicConfig::new(PARENT, 4)
        };
        parent
            .attributes
            .insert("lite.topic.expiration".to_owned(), "1".to_owned());
        broker.put_topic(&parent).unwrap();
        let mut group = SubscriptionGroupConfig::new(GROUP);
        group
            .attributes
            .insert("lite.bind.topic".to_owned(), PARENT.to_owned());
        broker.put_group(&group).unwrap();
        subscribe(
            &broker,
            "c1",
            SyncAction::PartialAdd,
            &["idle", "busy"],
            None,
        )
        .await
        .unwrap();
        for body in ["i0", "i1"] {
            send(&broker, "idle", body).await;
        }
        send(&broker, "busy", "b0").await;
        let got = receive(&broker, "c1").await;
        assert_eq!(taken(&broker, &got, true).await.len(), 3);
        let offset = |lite: &str| {
            broker.query_offset(QueryOffsetRequest {
                group: GROUP.to_owned(),
                queue: MessageQueue::new(lmq_name(PARENT, lite), "skiff", 0),
                set_zero_if_not_found: false,
            })
        };
        assert_eq!(offset("idle").await.unwrap(), Some(2));
        let max = |lite: &str| broker.reader().max_offset(&lmq_name(PARENT, lite), 0);
        // 50 s on, busy gets a message and idle is kept (idle less than a minute); 90 s on,
        // idle has been idle longer than a minute, busy 40 s.
        tokio::time::advance(Duration::from_secs(50)).await;
        send(&broker, "busy", "b1").await;
        assert_eq!(max("idle"), 2, "idle 50 s of its minute");
        tokio::time::advance(Duration::from_secs(40)).await;
        // A round trip through the store actor, whose checks the advance let run.
        send(&broker, "other", "o").await;
        assert_eq!(max("idle"), 0, "the idle lite topic's queue is deleted");
        assert_eq!(max("busy"), 2, "the busy one stays");
        assert_eq!(offset("idle").await.unwrap(), None, "its group offset goes");
        assert_eq!(offset("busy").await.unwrap(), Some(1));
        // A new message brings it back from offset 0, delivered to its subscriber.
        send(&broker, "idle", "again").await;
        assert_eq!(max("idle"), 1);
        let got = receive(&broker, "c1").await;
        let bodies = taken(&broker, &got, true).await;
        assert!(bodies.contains(&"idle:again".to_owned()), "{bodies:?}");
    });
}

#[test]
fn a_parents_lite_topics_are_listed_by_name_a_page_at_a_time_with_subscribers_and_lag() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = lite_broker(dir.path(), "Shared");
        for (lite, count) in [("s3", 1), ("s1", 2), ("s2", 3)] {
            for i in 0..count {
                send(&broker, lite, &format!("m{i}")).await;
            }
        }
        subscribe(&broker, "c1", SyncAction::PartialAdd, &["s1"], None)
            .await
            .unwrap();
        let first = receive(&broker, "c1").await;
        assert_eq!(taken(&broker, &first, true).await, ["s1:m0", "s1:m1"]);
        let parent = broker.topic(PARENT).unwrap().unwrap();
        let page = broker.lite_topics_page(&parent, None, 2).await.unwrap();
        assert_eq!(
            (page.total, page.groups.clone()),
            (3, vec![GROUP.to_owned()])
        );
        let rows: Vec<_> = page
            .rows
            .iter()
            .map(|r| {
                (
                    r.lite.as_str(),
                    r.max_offset,
                    r.subscribers.len(),
                    r.lags.clone(),
                )
            })
            .collect();
        assert_eq!(rows, [("s1", 2, 1, vec![0]), ("s2", 3, 0, vec![3])]);
        assert_eq!(
            page.rows[0].subscribers,
            [("c1".to_owned(), GROUP.to_owned())]
        );
        assert_eq!(page.next_after.as_deref(), Some("s2"));
        let last = broker
            .lite_topics_page(&parent, Some("s2"), 2)
            .await
            .unwrap();
        let names: Vec<_> = last.rows.iter().map(|r| r.lite.as_str()).collect();
        assert_eq!((names, last.next_after), (vec!["s3"], None));
    });
}

#[test]
fn a_receive_looks_only_at_the_lite_topics_that_have_something_for_the_client() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = lite_broker(dir.path(), "Shared");
        let names: Vec<String> = (0..300).map(|i| format!("s{i}")).collect();
        let lites: Vec<&str> = names.iter().map(String::as_str).collect();
        subscribe(&broker, "c1", SyncAction::PartialAdd, &lites, None)
            .await
            .unwrap();
        // A new subscription is looked at once (all 300 empty), then not again.
        assert!(receive(&broker, "c1").await.is_empty());
        let after_first = broker.lite_readiness();
        assert_eq!((after_first.looks, after_first.ready), (300, 0));
        send(&broker, "s7", "a").await;
        send(&broker, "s150", "b").await;
        let mut got = Vec::new();
        while got.len() < 2 {
            let answers = receive_waiting(&broker, "c1", Duration::from_secs(5)).await;
            assert!(!answers.is_empty(), "the arrivals wake the waiting receive");
            got.extend(taken(&broker, &answers, true).await);
        }
        got.sort();
        assert_eq!(got, ["s150:b", "s7:a"]);
        // Nothing more: the acknowledged lite topics are looked at once more, then the receive
        // waits its poll time out without a look at the other 298.
        assert!(receive_waiting(&broker, "c1", Duration::from_secs(5))
            .await
            .is_empty());
        let looks = broker.lite_readiness().looks - after_first.looks;
        assert!(
            (2..=6).contains(&looks),
            "{looks} lite topics looked at for two messages among 300 subscribed"
        );
    });
}

#[test]
fn a_batch_not_acknowledged_is_received_again_once_its_invisible_time_passes_or_is_shortened() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = lite_broker(dir.path(), "Shared");
        subscribe(&broker, "c1", SyncAction::PartialAdd, &["s1"], None)
            .await
            .unwrap();
        send(&broker, "s1", "a").await;
        let first = receive_waiting(&broker, "c1", Duration::from_secs(5)).await;
        assert_eq!(taken(&broker, &first, false).await, ["s1:a"]);
        assert_eq!(
            broker.lite_readiness().due,
            1,
            "due when the batch is visible"
        );
        // The receive waits past the invisible time and gets the message again.
        let started = tokio::time::Instant::now();
        let again = receive_waiting(&broker, "c1", INVISIBLE * 2).await;
        assert_eq!(taken(&broker, &again, false).await, ["s1:a"]);
        let waited = started.elapsed();
        assert!(
            waited >= INVISIBLE - Duration::from_secs(5)
                && waited <= INVISIBLE + Duration::from_secs(1),
            "received again after {waited:?}"
        );
        // A shorter invisible time (a client's nack) brings it back sooner.
        let message = decode_records(again[0].records.clone()).unwrap().remove(0);
        let receipt = again[0].receipt(&message, "skiff").unwrap();
        broker
            .change_invisible(
                AckRequest {
                    group: GROUP.to_owned(),
                    topic: message.topic.clone(),
                    queue_id: 0,
                    offset: message.queue_offset as i64,
                    receipt,
                    expired: ExpiredReceipt::Refuse,
                },
                1_000,
            )
            .await
            .unwrap();
        let started = tokio::time::Instant::now();
        let third = receive_waiting(&broker, "c1", INVISIBLE).await;
        assert_eq!(taken(&broker, &third, true).await, ["s1:a"]);
        assert!(
            started.elapsed() <= Duration::from_secs(2),
            "received again after {:?}",
            started.elapsed()
        );
        // Each delivery counts: the consumer sees attempts 1, 2, 3 and the dead-letter rule
        // (reconsume times against the group's maximum) can apply.
        let reconsumes: Vec<i32> = [&first, &again, &third]
            .iter()
            .map(|answers| {
                let message = decode_records(answers[0].records.clone())
                    .unwrap()
                    .remove(0);
                answers[0].reconsume_times(&message)
            })
            .collect();
        assert_eq!(reconsumes, [0, 1, 2]);
    });
}
