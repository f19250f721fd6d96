//! One test per offset rule of `docs/offset-lifecycle.md` §1 that the consumer side
//! implements, and the rules beyond RocketMQ of `docs/architecture.md` (rules 1-4), each named
//! after its rule. Time is paused: timers fire only as the tests advance time.

use crate::common;

use common::*;
use skiff::actors::broker_api::MessageModel;
use skiff::actors::consumer::push_consumer::{PushConsumer, PushConsumerConfig};
use skiff::actors::consumer::{ConsumeStatus, Listener, OrderlyStatus};
use skiff::actors::logic::pull_from_where::ConsumeFromWhere;
use skiff::Node;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;
use tokio::sync::Notify;

const LONG: Duration = Duration::from_secs(120);

fn new_seen() -> SeenLog {
    Rc::new(RefCell::new(Seen::default()))
}

fn start(
    node: &Node,
    group: &str,
    topic: &str,
    expression: &str,
    from: ConsumeFromWhere,
    listener: Listener,
    tweak: impl FnOnce(&mut PushConsumerConfig),
) -> anyhow::Result<PushConsumer> {
    Ok(node.start_consumer(
        node.push_consumer(group)
            .subscribe(topic, expression)
            .consume_from(from)
            .listener(listener)
            .configure(tweak),
    )?)
}

/// Sends `count` messages `prefix-i` to one queue of `topic`.
async fn produce_to_queue(
    node: &Node,
    topic: &str,
    queue_id: u32,
    prefix: &str,
    count: usize,
) -> anyhow::Result<()> {
    use skiff::actors::producer::OutgoingMessage;
    let producer = node.producer("rules-producer");
    // The warm-up creates the topic with its default queue count, on queue 0.
    producer.start_round_robin_at(0);
    producer
        .send(OutgoingMessage::new(topic, "warm-up"))
        .await?;
    let messages = (0..count)
        .map(|i| OutgoingMessage::new(topic, format!("{prefix}-{i}")))
        .collect();
    let queue = producer
        .write_queues(topic)
        .await?
        .into_iter()
        .find(|q| q.queue_id == queue_id)
        .ok_or_else(|| anyhow::anyhow!("{topic} has no write queue {queue_id}"))?;
    producer.send_to_queue(&queue, messages).await?;
    Ok(())
}

#[test]
fn commit_is_the_smallest_offset_still_in_flight() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce(&node, "Hold", "m", 40, 40).await?;
        let gate = Rc::new(Notify::new());
        let seen = new_seen();
        let listener = {
            let (gate, seen) = (gate.clone(), seen.clone());
            Listener::concurrent(move |batch| {
                let (gate, seen) = (gate.clone(), seen.clone());
                async move {
                    if batch.iter().any(|m| m.body() == b"m-9") {
                        gate.notified().await;
                    }
                    record(&seen, &batch);
                    ConsumeStatus::SUCCESS
                }
            })
        };
        let consumer = start(
            &node,
            "g",
            "Hold",
            "*",
            ConsumeFromWhere::FirstOffset,
            listener,
            |_| {},
        )?;
        advance_until("all but the held message", LONG, || {
            seen.borrow().distinct() == 39
        })
        .await?;
        // m-9 went to queue 9 % 4 = 1 at queue offset 2 (round robin).
        let offsets = consumer_offsets(&consumer, "Hold").await?;
        assert_eq!(
            offsets.get(&1),
            Some(&2),
            "queue 1 is pinned at the held message: {offsets:?}"
        );
        assert_eq!(
            offsets.get(&0),
            Some(&10),
            "other queues commit max + 1: {offsets:?}"
        );
        gate.notify_one();
        advance_until("held message consumed", LONG, || {
            seen.borrow().distinct() == 40
        })
        .await?;
        advance(Duration::from_millis(100)).await;
        assert_eq!(
            consumer_offsets(&consumer, "Hold").await?.get(&1),
            Some(&10)
        );
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn last_offset_new_group_starts_at_the_end_and_retry_topic_at_zero() -> anyhow::Result<()> {
    // skiff's consumer asks with setZeroIfNotFound = false, so ConsumeFromWhere applies to every
    // new group; a RocketMQ client asking with the default still gets 0 on a young queue
    // (`docs/offset-lifecycle.md` §1.A.6, tested on the broker side).
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce(&node, "Young", "old", 12, 12).await?;
        let seen = new_seen();
        let consumer = start(
            &node,
            "g",
            "Young",
            "*",
            ConsumeFromWhere::LastOffset,
            recording_listener(&seen),
            |_| {},
        )?;
        advance(Duration::from_secs(2)).await;
        produce(&node, "Young", "new", 4, 4).await?;
        advance_until("new messages", LONG, || seen.borrow().distinct() == 4).await?;
        advance(Duration::from_secs(2)).await;
        assert!(
            seen.borrow().bodies.iter().all(|b| b.starts_with("new-")),
            "{:?}",
            seen.borrow().bodies
        );
        let retry = consumer
            .observe()
            .await?
            .queues
            .into_iter()
            .find(|q| q.queue.topic == "%RETRY%g")
            .ok_or_else(|| anyhow::anyhow!("retry queue assigned"))?;
        assert_eq!(
            retry.next_pull_offset, 0,
            "the retry topic starts at 0 under LAST_OFFSET"
        );
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn timestamp_start_skips_messages_stored_before_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce(&node, "Stamp", "old", 8, 8).await?;
        let seen = new_seen();
        let future = i64::MAX / 2;
        let consumer = start(
            &node,
            "g",
            "Stamp",
            "*",
            ConsumeFromWhere::Timestamp(future),
            recording_listener(&seen),
            |_| {},
        )?;
        advance(Duration::from_secs(2)).await;
        produce(&node, "Stamp", "new", 8, 8).await?;
        advance_until("new messages consumed", LONG, || {
            seen.borrow().distinct() == 8
        })
        .await?;
        advance(Duration::from_secs(2)).await;
        assert!(
            seen.borrow().bodies.iter().all(|b| b.starts_with("new-")),
            "{:?}",
            seen.borrow().bodies
        );
        consumer.shutdown().await?;

        let seen = new_seen();
        let consumer = start(
            &node,
            "g2",
            "Stamp",
            "*",
            ConsumeFromWhere::Timestamp(0),
            recording_listener(&seen),
            |_| {},
        )?;
        advance_until("everything from time zero", LONG, || {
            seen.borrow().distinct() == 16
        })
        .await?;
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn no_new_message_commits_past_filtered_messages() -> anyhow::Result<()> {
    use skiff::actors::producer::OutgoingMessage;
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        let producer = node.producer("p");
        let tagged = (0..20)
            .map(|i| OutgoingMessage::new("Tags", format!("b-{i}")).with_tags("TagB"))
            .collect();
        producer.send_batch(tagged).await?;
        let seen = new_seen();
        let consumer = start(
            &node,
            "g",
            "Tags",
            "TagA",
            ConsumeFromWhere::FirstOffset,
            recording_listener(&seen),
            |_| {},
        )?;
        advance(Duration::from_secs(30)).await;
        let offsets = consumer_offsets(&consumer, "Tags").await?;
        assert_eq!(
            offsets.values().sum::<u64>(),
            20,
            "every queue committed to its max: {offsets:?}"
        );
        assert_eq!(
            seen.borrow().total(),
            0,
            "no TagB message reaches a TagA listener"
        );
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn consumer_rechecks_exact_tags_after_broker_hash_filter() -> anyhow::Result<()> {
    use skiff::actors::producer::OutgoingMessage;
    // "Aa" and "BB" have the same Java hash code, so the broker's hash filter lets both through.
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        let producer = node.producer("p");
        producer
            .send_batch(vec![
                OutgoingMessage::new("Collide", "aa").with_tags("Aa"),
                OutgoingMessage::new("Collide", "bb").with_tags("BB"),
            ])
            .await?;
        let seen = new_seen();
        let consumer = start(
            &node,
            "g",
            "Collide",
            "Aa",
            ConsumeFromWhere::FirstOffset,
            recording_listener(&seen),
            |_| {},
        )?;
        advance_until("aa consumed", LONG, || seen.borrow().distinct() == 1).await?;
        advance(Duration::from_secs(5)).await;
        assert_eq!(seen.borrow().bodies, vec!["aa".to_string()]);
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn sql92_subscription_delivers_only_matching_messages() -> anyhow::Result<()> {
    use skiff::actors::producer::OutgoingMessage;
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        let producer = node.producer("p");
        let message = |body: &str, tag: &str, a: Option<&str>| {
            let m = OutgoingMessage::new("Sql", body.to_string()).with_tags(tag);
            match a {
                Some(a) => m.with_property("a", a),
                None => m,
            }
        };
        producer
            .send_batch(vec![
                message("low", "T", Some("3")),
                message("high", "T", Some("8")),
                message("high-other-tag", "U", Some("9")),
                message("not-a-number", "T", Some("x")),
                message("missing", "T", None),
                message("edge", "T", Some("6")),
            ])
            .await?;
        let seen = new_seen();
        let consumer = node.start_consumer(
            node.push_consumer("g")
                .subscribe_sql92("Sql", "a > 5 AND TAGS = 'T'")
                .consume_from(ConsumeFromWhere::FirstOffset)
                .listener(recording_listener(&seen)),
        )?;
        advance_until("matches consumed", LONG, || seen.borrow().distinct() == 2).await?;
        // Let any further pull complete: nothing else may arrive.
        advance(Duration::from_secs(5)).await;
        let mut bodies = seen.borrow().bodies.clone();
        bodies.sort();
        assert_eq!(bodies, vec!["edge".to_string(), "high".to_string()]);
        consumer.shutdown().await?;

        let refused = node.start_consumer(
            node.push_consumer("g2")
                .subscribe_sql92("Sql", "a >")
                .listener(recording_listener(&seen)),
        );
        assert!(
            matches!(
                refused,
                Err(skiff::NodeError::Consumer(
                    skiff::actors::consumer::push_consumer::ConsumerError::InvalidSubscription { .. }
                ))
            ),
            "a malformed selector fails the start"
        );
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn failed_message_returns_from_retry_topic_with_reconsume_times_incremented() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce(&node, "Fail", "m", 10, 10).await?;
        let seen = new_seen();
        let failed_once = Rc::new(Cell::new(false));
        let listener = {
            let (seen, failed_once) = (seen.clone(), failed_once.clone());
            Listener::concurrent(move |batch| {
                record(&seen, &batch);
                let fail = batch.iter().any(|m| m.body() == b"m-3") && !failed_once.replace(true);
                async move {
                    if fail {
                        ConsumeStatus::ReconsumeLater
                    } else {
                        ConsumeStatus::SUCCESS
                    }
                }
            })
        };
        let consumer = start(
            &node,
            "g",
            "Fail",
            "*",
            ConsumeFromWhere::FirstOffset,
            listener,
            |_| {},
        )?;
        advance_until("retry arrives", LONG, || {
            seen.borrow().counts.get("m-3") == Some(&2)
        })
        .await?;
        {
            let seen = seen.borrow();
            let retried = seen
                .messages
                .iter()
                .filter(|m| m.body() == b"m-3")
                .nth(1)
                .ok_or_else(|| anyhow::anyhow!("second delivery of m-3"))?;
            assert_eq!(retried.message.topic, "%RETRY%g");
            assert_eq!(retried.reconsume_times(), 1);
            assert_eq!(retried.origin_topic(), "Fail");
        }
        // The failed original does not pin its queue: the offset moved on after the send-back.
        let offsets = consumer_offsets(&consumer, "Fail").await?;
        assert_eq!(offsets.values().sum::<u64>(), 10, "{offsets:?}");
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn ack_index_commits_the_prefix_and_retries_the_rest() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce_to_queue(&node, "Ack", 2, "m", 4).await?;
        let seen = new_seen();
        let first = Rc::new(Cell::new(true));
        let listener = {
            let (seen, first) = (seen.clone(), first.clone());
            Listener::concurrent(move |batch| {
                record(&seen, &batch);
                let status = if batch.len() == 4 && first.replace(false) {
                    ConsumeStatus::Success { ack_index: Some(1) }
                } else {
                    ConsumeStatus::SUCCESS
                };
                async move { status }
            })
        };
        let consumer = start(
            &node,
            "g",
            "Ack",
            "*",
            ConsumeFromWhere::FirstOffset,
            listener,
            |config| {
                config.consume_batch_size = 4;
            },
        )?;
        advance_until("retries of m-2 and m-3", LONG, || {
            let seen = seen.borrow();
            seen.counts.get("m-2") == Some(&2) && seen.counts.get("m-3") == Some(&2)
        })
        .await?;
        {
            let seen = seen.borrow();
            assert_eq!(seen.counts.get("m-0"), Some(&1));
            assert_eq!(seen.counts.get("m-1"), Some(&1));
        }
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn send_back_failure_reconsumes_locally_after_five_seconds() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce_to_queue(&node, "Local", 0, "m", 3).await?;
        let faults = Rc::new(Faults::default());
        faults.send_back.set(1);
        let broker = Rc::new(FaultyBroker {
            inner: node.broker_api(),
            faults: faults.clone(),
        });
        let seen = new_seen();
        let failed_once = Rc::new(Cell::new(false));
        let listener = {
            let (seen, failed_once) = (seen.clone(), failed_once.clone());
            Listener::concurrent(move |batch| {
                record(&seen, &batch);
                let fail = batch.iter().any(|m| m.body() == b"m-1") && !failed_once.replace(true);
                async move {
                    if fail {
                        ConsumeStatus::ReconsumeLater
                    } else {
                        ConsumeStatus::SUCCESS
                    }
                }
            })
        };
        let consumer = node
            .push_consumer("g")
            .subscribe("Local", "*")
            .consume_from(ConsumeFromWhere::FirstOffset)
            .listener(listener)
            .start(broker)?;
        advance_until("first delivery", LONG, || {
            seen.borrow().counts.get("m-1") == Some(&1)
        })
        .await?;
        let queue_offsets = consumer_offsets(&consumer, "Local").await?;
        // Queue 0 holds warm-up, m-0, m-1, m-2: m-1 sits at offset 2.
        assert_eq!(
            queue_offsets.get(&0),
            Some(&2),
            "m-1 stays in flight and pins queue 0"
        );
        advance(Duration::from_secs(4)).await;
        assert_eq!(seen.borrow().counts.get("m-1"), Some(&1), "not before 5 s");
        advance_until("local re-consume", Duration::from_secs(2), || {
            seen.borrow().counts.get("m-1") == Some(&2)
        })
        .await?;
        {
            let seen_ref = seen.borrow();
            let again = seen_ref
                .messages
                .iter()
                .rfind(|m| m.body() == b"m-1")
                .ok_or_else(|| anyhow::anyhow!("m-1 again"))?;
            assert_eq!(
                again.message.topic, "Local",
                "re-consumed locally, not via the retry topic"
            );
            assert_eq!(again.reconsume_times(), 1);
        }
        advance(Duration::from_millis(100)).await;
        assert_eq!(
            consumer_offsets(&consumer, "Local").await?.get(&0),
            Some(&4)
        );
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn broadcasting_delivers_to_every_consumer_drops_failures_and_keeps_offsets_locally(
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let local = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce(&node, "Bcast", "m", 12, 12).await?;
        let mut consumers = Vec::new();
        let mut logs = Vec::new();
        for instance in 0..2 {
            let seen = new_seen();
            let listener = {
                let seen = seen.clone();
                Listener::concurrent(move |batch| {
                    record(&seen, &batch);
                    let fail = batch.iter().any(|m| m.body() == b"m-5");
                    async move {
                        if fail {
                            ConsumeStatus::ReconsumeLater
                        } else {
                            ConsumeStatus::SUCCESS
                        }
                    }
                })
            };
            let offsets_dir = local.path().join(format!("instance-{instance}"));
            consumers.push(start(
                &node,
                "bg",
                "Bcast",
                "*",
                ConsumeFromWhere::FirstOffset,
                listener,
                move |config| {
                    config.message_model = MessageModel::Broadcasting;
                    config.local_offset_dir = Some(offsets_dir);
                },
            )?);
            logs.push(seen);
        }
        advance_until("both consumers see all", LONG, || {
            logs.iter().all(|seen| seen.borrow().distinct() == 12)
        })
        .await?;
        advance(Duration::from_secs(30)).await;
        for seen in &logs {
            assert_eq!(
                seen.borrow().counts.get("m-5"),
                Some(&1),
                "broadcast failures are not retried"
            );
        }
        for consumer in consumers {
            consumer.shutdown().await?;
        }
        // The broker holds no offsets for a broadcasting group.
        assert!(broker_offsets(&node, "bg", "Bcast")
            .await?
            .values()
            .all(Option::is_none));
        produce(&node, "Bcast", "later", 4, 4).await?;
        let seen = new_seen();
        let offsets_dir = local.path().join("instance-0");
        let consumer = start(
            &node,
            "bg",
            "Bcast",
            "*",
            ConsumeFromWhere::FirstOffset,
            recording_listener(&seen),
            move |config| {
                config.message_model = MessageModel::Broadcasting;
                config.local_offset_dir = Some(offsets_dir);
            },
        )?;
        advance_until("only the later messages", LONG, || {
            seen.borrow().distinct() == 4
        })
        .await?;
        advance(Duration::from_secs(5)).await;
        assert_eq!(
            seen.borrow().total(),
            4,
            "local offsets survived: {:?}",
            seen.borrow().bodies
        );
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn orderly_consumes_each_queue_in_order_and_suspend_retries_in_place() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce_to_queue(&node, "Order", 3, "m", 20).await?;
        let order = Rc::new(RefCell::new(Vec::<String>::new()));
        let suspended = Rc::new(Cell::new(false));
        let listener = {
            let (order, suspended) = (order.clone(), suspended.clone());
            Listener::orderly(move |batch| {
                let mut status = OrderlyStatus::Success;
                for message in batch.iter().filter(|m| m.queue.queue_id == 3) {
                    let body = String::from_utf8_lossy(message.body()).into_owned();
                    if body == "m-7" && !suspended.replace(true) {
                        status = OrderlyStatus::SuspendCurrentQueueAMoment;
                    }
                    order.borrow_mut().push(body);
                }
                async move { status }
            })
        };
        let consumer = start(
            &node,
            "og",
            "Order",
            "*",
            ConsumeFromWhere::FirstOffset,
            listener,
            |_| {},
        )?;
        advance_until("all 20 in order", LONG, || order.borrow().len() == 21).await?;
        let expected: Vec<String> = (0..8).chain(7..20).map(|i| format!("m-{i}")).collect();
        assert_eq!(
            *order.borrow(),
            expected,
            "m-7 retried in place, order kept"
        );
        let snapshot = consumer.observe().await?;
        assert!(
            snapshot.queues.iter().all(|q| q.locked),
            "orderly queues hold broker locks"
        );
        advance(Duration::from_millis(100)).await;
        assert_eq!(
            consumer_offsets(&consumer, "Order").await?.get(&3),
            Some(&20)
        );
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn offsets_are_persisted_to_the_broker_every_five_seconds() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce(&node, "Persist", "m", 8, 8).await?;
        let seen = new_seen();
        let consumer = start(
            &node,
            "g",
            "Persist",
            "*",
            ConsumeFromWhere::FirstOffset,
            recording_listener(&seen),
            |_| {},
        )?;
        advance_until("consumed", LONG, || seen.borrow().distinct() == 8).await?;
        advance(Duration::from_secs(6)).await;
        let stored = broker_offsets(&node, "g", "Persist").await?;
        assert_eq!(
            stored.values().map(|o| o.unwrap_or(0)).sum::<u64>(),
            8,
            "{stored:?}"
        );
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn shutdown_persists_final_offsets_with_acknowledged_updates() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce(&node, "Final", "m", 8, 8).await?;
        let seen = new_seen();
        let consumer = start(
            &node,
            "g",
            "Final",
            "*",
            ConsumeFromWhere::FirstOffset,
            recording_listener(&seen),
            |config| {
                config.persist_interval = Duration::from_secs(3600);
            },
        )?;
        advance_until("consumed", LONG, || seen.borrow().distinct() == 8).await?;
        assert!(broker_offsets(&node, "g", "Final")
            .await?
            .values()
            .all(|o| o.unwrap_or(0) < 2));
        consumer.shutdown().await?;
        let stored = broker_offsets(&node, "g", "Final").await?;
        assert_eq!(
            stored.values().map(|o| o.unwrap_or(0)).sum::<u64>(),
            8,
            "{stored:?}"
        );
        node.shutdown().await?;
        Ok(())
    })
}

/// Starts a consumer of `topic` whose broker fails the next `update_offset` calls counted by
/// `faults`, with no periodic persist, and waits until it consumed `count` messages.
async fn consumed_through_faulty_broker(
    node: &Node,
    topic: &str,
    count: usize,
    faults: &Rc<Faults>,
) -> anyhow::Result<PushConsumer> {
    let broker = Rc::new(FaultyBroker {
        inner: node.broker_api(),
        faults: faults.clone(),
    });
    let seen = new_seen();
    let consumer = node
        .push_consumer("g")
        .subscribe(topic, "*")
        .consume_from(ConsumeFromWhere::FirstOffset)
        .listener(recording_listener(&seen))
        .configure(|config| config.persist_interval = Duration::from_secs(3600))
        .start(broker)?;
    advance_until("consumed", LONG, || seen.borrow().distinct() == count).await?;
    Ok(consumer)
}

#[test]
fn shutdown_retries_a_handoff_whose_offset_update_failed() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce(&node, "Retried", "m", 8, 8).await?;
        let faults = Rc::new(Faults::default());
        let consumer = consumed_through_faulty_broker(&node, "Retried", 8, &faults).await?;
        // Every handoff's acknowledged update fails; the retry at shutdown persists them.
        let handoffs = assigned_queues(&consumer).await?;
        faults.update_offset.set(u32::try_from(handoffs)?);
        consumer.shutdown().await?;
        assert_eq!(
            faults.update_offset.get(),
            0,
            "the injected failure happened"
        );
        let stored = broker_offsets(&node, "g", "Retried").await?;
        assert_eq!(
            stored.values().map(|o| o.unwrap_or(0)).sum::<u64>(),
            8,
            "{stored:?}"
        );
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn shutdown_reports_a_final_offset_it_could_not_persist() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce_to_queue(&node, "Unpersisted", 0, "m", 3).await?;
        let faults = Rc::new(Faults::default());
        let consumer = consumed_through_faulty_broker(&node, "Unpersisted", 4, &faults).await?;
        // Every acknowledged update of every queue fails twice over: handoff and retry.
        faults.update_offset.set(u32::MAX);
        let error = consumer
            .shutdown()
            .await
            .expect_err("a lost final offset is reported");
        let message = error.to_string();
        assert!(
            message.contains("could not be persisted") && message.contains("for group g"),
            "{message}"
        );
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn stuck_message_is_sent_back_after_consume_timeout_and_the_offset_moves_on() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce_to_queue(&node, "Stuck", 0, "m", 10).await?;
        let seen = new_seen();
        let listener = {
            let seen = seen.clone();
            Listener::concurrent(move |batch| {
                record(&seen, &batch);
                let hang = batch
                    .iter()
                    .any(|m| m.body() == b"m-3" && m.reconsume_times() == 0);
                async move {
                    if hang {
                        std::future::pending::<()>().await;
                    }
                    ConsumeStatus::SUCCESS
                }
            })
        };
        let consumer = start(
            &node,
            "g",
            "Stuck",
            "*",
            ConsumeFromWhere::FirstOffset,
            listener,
            |config| {
                config.consume_timeout = Duration::from_secs(30);
            },
        )?;
        advance_until("all delivered once", LONG, || {
            seen.borrow().distinct() == 11
        })
        .await?;
        assert_eq!(
            consumer_offsets(&consumer, "Stuck").await?.get(&0),
            Some(&4),
            "m-3 pins queue 0"
        );
        advance(Duration::from_secs(60)).await;
        assert_eq!(
            consumer_offsets(&consumer, "Stuck").await?.get(&0),
            Some(&11)
        );
        {
            let seen = seen.borrow();
            assert_eq!(
                seen.counts.get("m-3"),
                Some(&2),
                "re-delivered through the retry topic"
            );
            let redelivered = seen.messages.iter().rfind(|m| m.body() == b"m-3");
            assert_eq!(
                redelivered.map(|m| m.message.topic.as_str()),
                Some("%RETRY%g")
            );
        }
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn offset_read_error_skips_the_queue_and_never_rolls_back() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce(&node, "ReadErr", "first", 20, 20).await?;
        let seen = new_seen();
        let consumer = start(
            &node,
            "g",
            "ReadErr",
            "*",
            ConsumeFromWhere::FirstOffset,
            recording_listener(&seen),
            |_| {},
        )?;
        advance_until("first 20", LONG, || seen.borrow().distinct() == 20).await?;
        consumer.shutdown().await?;

        produce(&node, "ReadErr", "second", 8, 8).await?;
        let faults = Rc::new(Faults::default());
        faults.query_offset.set(6);
        let broker = Rc::new(FaultyBroker {
            inner: node.broker_api(),
            faults: faults.clone(),
        });
        let seen = new_seen();
        let consumer = node
            .push_consumer("g")
            .subscribe("ReadErr", "*")
            .consume_from(ConsumeFromWhere::FirstOffset)
            .listener(recording_listener(&seen))
            .start(broker)?;
        advance_until("the second batch", LONG, || seen.borrow().distinct() == 8).await?;
        advance(Duration::from_secs(5)).await;
        assert_eq!(
            faults.query_offset.get(),
            0,
            "the injected read errors happened"
        );
        {
            let seen = seen.borrow();
            assert_eq!(
                seen.total(),
                8,
                "nothing re-delivered from 0: {:?}",
                seen.bodies
            );
        }
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn consumer_ids_changed_rebalances_without_waiting_for_the_timer() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce(&node, "Split", "m", 4, 4).await?;
        let first = start(
            &node,
            "g",
            "Split",
            "*",
            ConsumeFromWhere::FirstOffset,
            recording_listener(&new_seen()),
            |_| {},
        )?;
        let mut first_count = 0;
        for _ in 0..100 {
            first_count = assigned_queues(&first).await?;
            if first_count == 5 {
                break;
            }
            advance(Duration::from_millis(10)).await;
        }
        // 4 queues of Split plus the group's one retry queue.
        assert_eq!(first_count, 5);
        let second = start(
            &node,
            "g",
            "Split",
            "*",
            ConsumeFromWhere::FirstOffset,
            recording_listener(&new_seen()),
            |_| {},
        )?;
        let mut counts = (0, 0);
        for _ in 0..300 {
            counts = (
                assigned_queues(&first).await?,
                assigned_queues(&second).await?,
            );
            if counts.0 + counts.1 == 5 && counts.1 >= 2 {
                break;
            }
            advance(Duration::from_millis(10)).await;
        }
        assert!(
            counts.1 >= 2 && counts.0 + counts.1 == 5,
            "split within 3 s, not 20: {counts:?}"
        );
        second.shutdown().await?;
        first.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn clean_rebalance_two_three_two_redelivers_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let mut config = node_config(dir.path());
        config.default_topic_queue_nums = 8;
        let node = Node::open(config)?;
        let seen = new_seen();
        let make = |node: &Node| {
            start(
                node,
                "g",
                "Scale",
                "*",
                ConsumeFromWhere::FirstOffset,
                recording_listener(&seen),
                |_| {},
            )
        };
        let a = make(&node)?;
        let b = make(&node)?;
        produce(&node, "Scale", "one", 400, 50).await?;
        advance_until("phase one", LONG, || seen.borrow().distinct() == 400).await?;
        let c = make(&node)?;
        produce(&node, "Scale", "two", 400, 50).await?;
        advance_until("phase two", LONG, || seen.borrow().distinct() == 800).await?;
        let assigned = assigned_queues(&c).await?;
        assert!(assigned >= 2, "the third consumer took queues: {assigned}");
        c.shutdown().await?;
        produce(&node, "Scale", "three", 400, 50).await?;
        advance_until("phase three", LONG, || seen.borrow().distinct() == 1200).await?;
        advance(Duration::from_secs(30)).await;
        assert_eq!(
            seen.borrow().duplicates(),
            0,
            "a clean rebalance re-delivers nothing"
        );
        a.shutdown().await?;
        b.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn admin_reset_rewinds_a_running_consumer() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce_to_queue(&node, "Reset", 1, "m", 10).await?;
        let seen = new_seen();
        let consumer = start(
            &node,
            "g",
            "Reset",
            "*",
            ConsumeFromWhere::FirstOffset,
            recording_listener(&seen),
            |_| {},
        )?;
        advance_until("consumed", LONG, || seen.borrow().distinct() == 11).await?;
        advance(Duration::from_secs(6)).await;
        node.broker().reset_offset("g", "Reset", 1, 4).await?;
        advance_until("re-consumed from 4", LONG, || {
            seen.borrow().counts.get("m-4") == Some(&2)
        })
        .await?;
        advance_until("re-consumed to the end", LONG, || {
            seen.borrow().counts.get("m-9") == Some(&2)
        })
        .await?;
        {
            let seen = seen.borrow();
            assert_eq!(
                seen.counts.get("m-3"),
                Some(&1),
                "nothing before the reset offset again"
            );
        }
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn lag_and_in_flight_are_visible() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce_to_queue(&node, "Lag", 2, "m", 6).await?;
        let gate = Rc::new(Notify::new());
        let listener = {
            let gate = gate.clone();
            Listener::concurrent(move |_batch| {
                let gate = gate.clone();
                async move {
                    gate.notified().await;
                    ConsumeStatus::SUCCESS
                }
            })
        };
        let consumer = start(
            &node,
            "g",
            "Lag",
            "*",
            ConsumeFromWhere::FirstOffset,
            listener,
            |config| {
                config.max_concurrency = 2;
            },
        )?;
        let mut in_flight = 0;
        for _ in 0..500 {
            let snapshot = consumer.observe().await?;
            in_flight = snapshot
                .queues
                .iter()
                .filter(|q| q.queue.topic == "Lag" && q.queue.queue_id == 2)
                .map(|q| q.in_flight)
                .sum();
            if in_flight == 6 {
                break;
            }
            advance(Duration::from_millis(10)).await;
        }
        assert_eq!(in_flight, 6);
        let progress = node.progress("g").await?;
        let row = progress
            .iter()
            .find(|row| row.topic == "Lag" && row.queue_id == 2)
            .ok_or_else(|| anyhow::anyhow!("progress row for Lag:2"))?;
        assert_eq!(row.broker_offset, 6);
        assert_eq!(row.lag, 6);
        assert_eq!(row.in_flight, 6, "pulled but not committed");
        for _ in 0..10 {
            gate.notify_one();
            advance(Duration::from_millis(10)).await;
        }
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}
