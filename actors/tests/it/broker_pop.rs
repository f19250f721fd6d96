//! Pop consumption on the broker (`docs/offset-lifecycle.md` §1.H): popped messages stay
//! invisible until acknowledged; those nobody acknowledges come back from the group's pop retry
//! topic with one more reconsume, however often (as on Java's broker);
//! checkpoints outlive a restart; an orderly pop blocks its queue until the batch is acknowledged;
//! a priority topic's backlog pops from its highest queue down.

use skiff_actors::broker::{
    AckRequest, BrokerConfig, BrokerHandle, ExpiredReceipt, PopAnswer, PopRequest,
};
use skiff_actors::broker_api::{BrokerApi, ExpressionType, PullStatus, SendRequest};
use skiff_actors::logic::pop::{Receipt, TopicKind};
use skiff_actors::refused::Refused;
use skiff_actors::testsuite::*;
use skiff_storage::message::property::{FIRST_POP_TIME, POP_CK, PRIORITY, WAIT};
use skiff_storage::message::{decode_records, encode_properties, MessageToAppend, StoredMessage};
use skiff_storage::metadata::{SubscriptionGroupConfig, TopicConfig, TopicMessageType};
use std::time::{Duration, Instant};

const GROUP: &str = "pop-group";
const TOPIC: &str = "PopTopic";
const INVISIBLE: Duration = Duration::from_secs(10);

fn pop_request(orderly: bool) -> PopRequest {
    PopRequest {
        group: GROUP.into(),
        topic: TOPIC.into(),
        queue_id: orderly.then_some(0),
        max_messages: 32,
        invisible_ms: INVISIBLE.as_millis() as i64,
        poll: Duration::ZERO,
        from_min: true,
        expression_type: ExpressionType::Tag,
        expression: None,
        orderly,
    }
}

async fn send(broker: &BrokerHandle, bodies: &[&str]) {
    let messages = bodies
        .iter()
        .map(|body| message(TOPIC, 0, body, Some("TagA")))
        .collect();
    BrokerApi::send_messages(broker, SendRequest::new(messages))
        .await
        .unwrap();
}

fn popped(answer: &PopAnswer) -> Vec<StoredMessage> {
    decode_records(answer.records.clone()).unwrap()
}

fn bodies(messages: &[StoredMessage]) -> Vec<String> {
    let mut out: Vec<String> = messages
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    out.sort();
    out
}

/// The receipt the client builds (or the broker set) for one popped message.
fn receipt_of(answer: &PopAnswer, message: &StoredMessage) -> Receipt {
    if let Some(receipt) = message.property(POP_CK) {
        return Receipt::parse(receipt).unwrap();
    }
    Receipt {
        checkpoint_offset: 0,
        pop_time_ms: answer.pop_time_ms,
        invisible_ms: answer.invisible_ms,
        revive_queue_id: answer.revive_queue_id,
        kind: TopicKind::Normal,
        broker_name: "skiff".into(),
        queue_id: message.queue_id,
        queue_offset: Some(message.queue_offset),
    }
}

async fn ack(broker: &BrokerHandle, answer: &PopAnswer, message: &StoredMessage) -> bool {
    let receipt = receipt_of(answer, message);
    let topic = receipt.kind.stored_topic(GROUP, TOPIC);
    broker
        .ack_popped(
            GROUP,
            &topic,
            receipt.queue_id,
            message.queue_offset,
            &receipt,
        )
        .await
        .unwrap()
}

/// The acknowledgement a door builds from a receipt.
fn ack_request(answer: &PopAnswer, message: &StoredMessage, expired: ExpiredReceipt) -> AckRequest {
    let receipt = receipt_of(answer, message);
    AckRequest {
        group: GROUP.into(),
        topic: receipt.kind.stored_topic(GROUP, TOPIC),
        queue_id: receipt.queue_id as i32,
        offset: message.queue_offset as i64,
        receipt,
        expired,
    }
}

/// Waits, in real time and without moving the paused clock, until `done` holds: revivals wait
/// on store appends that run on other threads.
async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::task::yield_now().await;
    }
}

async fn pop_until_found(broker: &BrokerHandle, what: &str) -> PopAnswer {
    let mut found = None;
    wait_for(what, async || {
        let answer = broker.pop(pop_request(false)).await.unwrap();
        let hit = answer.message_count > 0;
        found = Some(answer);
        hit
    })
    .await;
    found.unwrap()
}

#[test]
fn popped_messages_stay_invisible_until_acked_and_the_rest_come_back_from_the_retry_topic() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send(&broker, &["a", "b", "c", "d"]).await;
        let first = broker.pop(pop_request(false)).await.unwrap();
        let messages = popped(&first);
        assert_eq!(bodies(&messages), ["a", "b", "c", "d"]);
        assert_eq!(first.offset_info.start_offsets(), "0 0 0");
        assert_eq!(first.offset_info.message_offsets(), "0 0 0,1,2,3");
        // The group's offset moved at once: nothing else is handed out while they are out.
        let again = broker.pop(pop_request(false)).await.unwrap();
        assert_eq!(again.message_count, 0);
        for m in messages
            .iter()
            .filter(|m| &m.body[..] == b"a" || &m.body[..] == b"c")
        {
            assert!(ack(&broker, &first, m).await, "ack of {:?}", m.body);
        }
        // Acking twice finds nothing the second time.
        assert!(!ack(&broker, &first, &messages[0]).await);

        advance(INVISIBLE - Duration::from_secs(1)).await;
        assert_eq!(
            broker.pop(pop_request(false)).await.unwrap().message_count,
            0
        );
        advance(Duration::from_secs(2)).await;
        let revived = pop_until_found(&broker, "the unacked messages to come back").await;
        let messages = popped(&revived);
        assert_eq!(bodies(&messages), ["b", "d"]);
        for m in &messages {
            assert_eq!(m.topic, TOPIC, "a retried message goes out under its topic");
            assert_eq!(m.reconsume_times, 1);
            assert!(m.property(FIRST_POP_TIME).is_some());
            let receipt = receipt_of(&revived, m);
            assert_eq!(receipt.kind, TopicKind::Retry);
            assert_eq!(receipt.pop_time_ms, revived.pop_time_ms);
            assert!(ack(&broker, &revived, m).await);
        }
        advance(INVISIBLE * 2).await;
        assert_eq!(
            broker.pop(pop_request(false)).await.unwrap().message_count,
            0
        );
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn a_message_never_acked_keeps_coming_back_past_the_groups_retry_max_as_on_java() {
    let dir = tempfile::tempdir().unwrap();
    let mut group = SubscriptionGroupConfig::new(GROUP);
    group.retry_max_times = 1;
    put_group(dir.path(), group);
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send(&broker, &["stubborn"]).await;
        assert_eq!(
            broker.pop(pop_request(false)).await.unwrap().message_count,
            1
        );
        // Pop ignores retryMaxTimes: the consumer, not the broker, gives up on a message.
        for reconsumed in 1..=3 {
            advance(INVISIBLE + Duration::from_secs(1)).await;
            let retried = pop_until_found(&broker, "a revival").await;
            let messages = popped(&retried);
            assert_eq!(bodies(&messages), ["stubborn"]);
            assert_eq!(messages[0].reconsume_times, reconsumed);
        }
        let dlq = format!("%DLQ%{GROUP}");
        assert_ne!(
            broker.pull(pull(GROUP, &dlq, 0, 0)).await.unwrap().status,
            PullStatus::Found
        );
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn a_pop_acked_in_time_writes_no_checkpoint_and_one_left_out_is_written_after_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = BrokerConfig::default();
    config.pop.checkpoint_window = Duration::from_secs(2);
    run_paused(|| async {
        let broker = start_broker(dir.path(), config);
        send(&broker, &["a", "b", "c", "d"]).await;
        let answer = broker.pop(pop_request(false)).await.unwrap();
        let messages = popped(&answer);
        assert_eq!(bodies(&messages), ["a", "b", "c", "d"]);
        let acks = messages
            .iter()
            .filter(|m| matches!(&m.body[..], b"a" | b"c"))
            .map(|m| ack_request(&answer, m, ExpiredReceipt::Refuse))
            .collect();
        for held in broker.ack_all(acks).await {
            assert!(held.unwrap(), "a and c were held");
        }
        let snapshot = broker.observe_pop().await.unwrap();
        assert_eq!(
            (snapshot.held, snapshot.unwritten, snapshot.written),
            (2, 2, 0),
            "b and d held in memory, nothing written"
        );
        let stored = async || {
            broker
                .query_offset(offset_query(GROUP, TOPIC, 0, false))
                .await
                .unwrap()
        };
        assert_eq!(stored().await, Some(1), "the stored offset stops at b");
        assert_eq!(
            broker.pop(pop_request(false)).await.unwrap().message_count,
            0,
            "the next pop reads past the batch"
        );
        advance(Duration::from_secs(3)).await;
        wait_for("b and d written, the offset past them", async || {
            stored().await == Some(4)
        })
        .await;
        let snapshot = broker.observe_pop().await.unwrap();
        assert_eq!(
            (snapshot.held, snapshot.unwritten, snapshot.written),
            (2, 0, 2)
        );
        advance(INVISIBLE).await;
        let revived = pop_until_found(&broker, "b and d revived").await;
        assert_eq!(bodies(&popped(&revived)), ["b", "d"]);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn checkpoints_outlive_a_restart_and_the_message_still_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send(&broker, &["x", "y"]).await;
        let answer = broker.pop(pop_request(false)).await.unwrap();
        let messages = popped(&answer);
        let y = messages.iter().find(|m| &m.body[..] == b"y").unwrap();
        assert!(ack(&broker, &answer, y).await);
        broker.shutdown().await.unwrap();
    });
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        assert_eq!(
            broker.pop(pop_request(false)).await.unwrap().message_count,
            0
        );
        advance(INVISIBLE + Duration::from_secs(1)).await;
        let revived = pop_until_found(&broker, "the revival after a restart").await;
        assert_eq!(bodies(&popped(&revived)), ["x"]);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn a_new_invisible_time_moves_the_revival_and_the_old_receipt_acks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send(&broker, &["slow"]).await;
        let answer = broker.pop(pop_request(false)).await.unwrap();
        let message = &popped(&answer)[0];
        let receipt = receipt_of(&answer, message);
        advance(Duration::from_secs(5)).await;
        let (pop_time, invisible) = broker
            .change_invisible(
                ack_request(&answer, message, ExpiredReceipt::Refuse),
                30_000,
            )
            .await
            .unwrap();
        assert_eq!(invisible, 30_000);
        assert!(pop_time > receipt.pop_time_ms);
        // Past the first invisible time, the message stays out.
        advance(INVISIBLE).await;
        assert_eq!(
            broker.pop(pop_request(false)).await.unwrap().message_count,
            0
        );
        assert!(
            !ack(&broker, &answer, message).await,
            "the old receipt is stale"
        );
        advance(Duration::from_secs(30)).await;
        let revived = pop_until_found(&broker, "the revival at the new time").await;
        assert_eq!(bodies(&popped(&revived)), ["slow"]);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn an_orderly_pop_blocks_its_queue_until_the_batch_is_acked_and_counts_redeliveries() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send(&broker, &["1", "2"]).await;
        let mut request = pop_request(true);
        request.max_messages = 2;
        let first = broker.pop(request.clone()).await.unwrap();
        assert_eq!(first.revive_queue_id, 999);
        assert_eq!(first.offset_info.order_counts(), "0 qo0%0 0;0 qo0%1 0");
        send(&broker, &["3"]).await;
        assert_eq!(
            broker.pop(request.clone()).await.unwrap().message_count,
            0,
            "the queue is blocked while the batch is out"
        );
        // Unacknowledged past its invisible time, the batch comes again, counted.
        advance(INVISIBLE + Duration::from_secs(1)).await;
        let again = broker.pop(request.clone()).await.unwrap();
        assert_eq!(bodies(&popped(&again)), ["1", "2"]);
        assert_eq!(again.offset_info.order_counts(), "0 qo0%0 1;0 qo0%1 1");
        for m in popped(&again) {
            let receipt = Receipt {
                revive_queue_id: 999,
                ..receipt_of(&again, &m)
            };
            broker
                .ack_popped(GROUP, TOPIC, 0, m.queue_offset, &receipt)
                .await
                .unwrap();
        }
        assert_eq!(
            broker
                .query_offset(offset_query(GROUP, TOPIC, 0, false))
                .await
                .unwrap(),
            Some(2)
        );
        let next = broker.pop(request).await.unwrap();
        assert_eq!(bodies(&popped(&next)), ["3"]);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn an_admin_reset_takes_effect_on_the_next_pop_once() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send(&broker, &["r0", "r1", "r2"]).await;
        let first = broker.pop(pop_request(false)).await.unwrap();
        for m in popped(&first) {
            assert!(ack(&broker, &first, &m).await);
        }
        broker.reset_offset(GROUP, TOPIC, 0, 1).await.unwrap();
        let again = broker.pop(pop_request(false)).await.unwrap();
        assert_eq!(bodies(&popped(&again)), ["r1", "r2"]);
        for m in popped(&again) {
            assert!(
                ack(&broker, &again, &m).await,
                "acks of the re-popped batch hold"
            );
        }
        assert_eq!(
            broker.pop(pop_request(false)).await.unwrap().message_count,
            0,
            "the reset is taken once, not on every pop"
        );
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn an_orderly_batch_out_still_blocks_its_queue_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut request = pop_request(true);
    request.max_messages = 2;
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send(&broker, &["o1", "o2"]).await;
        assert_eq!(broker.pop(request.clone()).await.unwrap().message_count, 2);
        broker.shutdown().await.unwrap();
    });
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        assert_eq!(
            broker.pop(request.clone()).await.unwrap().message_count,
            0,
            "the batch handed out before the restart is still out"
        );
        advance(INVISIBLE + Duration::from_secs(1)).await;
        let again = broker.pop(request.clone()).await.unwrap();
        assert_eq!(bodies(&popped(&again)), ["o1", "o2"]);
        assert_eq!(again.offset_info.order_counts(), "0 qo0%0 1;0 qo0%1 1");
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn two_pops_of_one_queue_at_once_never_hand_out_the_same_message() {
    let dir = tempfile::tempdir().unwrap();
    let mut request = pop_request(false);
    request.queue_id = Some(0);
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send(&broker, &["a", "b", "c", "d"]).await;
        let (one, two) = tokio::join!(broker.pop(request.clone()), broker.pop(request.clone()));
        let (one, two) = (one.unwrap(), two.unwrap());
        let mut messages = popped(&one);
        messages.extend(popped(&two));
        assert_eq!(
            bodies(&messages),
            ["a", "b", "c", "d"],
            "each message goes to one of the pops"
        );
        assert_eq!(
            one.message_count.min(two.message_count),
            0,
            "the queue is claimed by one pop; the other skips it"
        );
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn an_expired_receipt_is_judged_by_the_brokers_clock_and_refused_only_where_the_door_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send(&broker, &["late"]).await;
        let answer = broker.pop(pop_request(false)).await.unwrap();
        let message = &popped(&answer)[0];
        // The paused clock is the broker's: past the invisible time by it, whatever the wall
        // clock says.
        advance(INVISIBLE + Duration::from_secs(1)).await;
        let refused = broker
            .ack(ack_request(&answer, message, ExpiredReceipt::Refuse))
            .await;
        assert!(
            matches!(
                refused,
                Err(skiff_actors::broker_api::BrokerError::Refused(
                    Refused::ReceiptExpired { .. }
                ))
            ),
            "{refused:?}"
        );
        // Refused, it acknowledged nothing: the message comes back for its next consumer.
        let again = pop_until_found(&broker, "the revived message").await;
        assert_eq!(bodies(&popped(&again)), ["late"]);
        // The remoting door takes the same late acknowledgement, as Java's broker does; it
        // finds nothing held any more and changes nothing.
        let held = broker
            .ack(ack_request(&answer, message, ExpiredReceipt::Accept))
            .await
            .unwrap();
        assert!(!held, "the first pop's checkpoint was revived");
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn an_acknowledgement_outside_the_queue_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        send(&broker, &["one"]).await;
        let answer = broker.pop(pop_request(false)).await.unwrap();
        let message = &popped(&answer)[0];
        let mut past_the_end = ack_request(&answer, message, ExpiredReceipt::Refuse);
        past_the_end.offset = 5;
        let mut no_such_queue = ack_request(&answer, message, ExpiredReceipt::Refuse);
        no_such_queue.queue_id = 99;
        for (request, what) in [(past_the_end, "offset"), (no_such_queue, "queue")] {
            let answer = broker.ack(request).await;
            assert!(
                matches!(
                    answer,
                    Err(skiff_actors::broker_api::BrokerError::Refused(
                        Refused::OffsetOutOfQueue { .. } | Refused::IllegalQueue { .. }
                    ))
                ),
                "{what}: {answer:?}"
            );
        }
        assert!(
            ack(&broker, &answer, message).await,
            "the message is still held after the refused acknowledgements"
        );
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn a_priority_topics_backlog_pops_from_the_highest_queue_down_whatever_queue_was_asked() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        broker
            .put_topic(&TopicConfig {
                message_type: Some(TopicMessageType::Priority),
                ..TopicConfig::new(TOPIC, 4)
            })
            .unwrap();
        let mut queues = Vec::new();
        for priority in ["1", "9", "0", "2"] {
            let properties = encode_properties(&[(PRIORITY, priority), (WAIT, "true")]);
            let sent = BrokerApi::send_messages(
                &broker,
                SendRequest::new(vec![MessageToAppend {
                    properties,
                    ..message(TOPIC, 0, &format!("p{priority}"), None)
                }]),
            )
            .await
            .unwrap();
            queues.push(sent[0].queue_id);
        }
        assert_eq!(queues, [1, 3, 0, 2], "min(priority, queues - 1)");
        let mut order = Vec::new();
        for _ in 0..4 {
            let answer = broker
                .pop(PopRequest {
                    max_messages: 1,
                    ..pop_request(false)
                })
                .await
                .unwrap();
            let message = popped(&answer).remove(0);
            assert!(ack(&broker, &answer, &message).await);
            order.push(String::from_utf8_lossy(&message.body).into_owned());
        }
        assert_eq!(order, ["p9", "p2", "p1", "p0"]);
    });
}
