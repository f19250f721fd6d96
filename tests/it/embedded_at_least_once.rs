//! At-least-once delivery through the embedded node under failures (issue "The actor system and
//! the embedded Node", must-show 2): a listener failing a seeded ~10% of deliveries, a send-back
//! path failing a seeded 20% of the time, retries through the group's retry topic with growing
//! `reconsume_times`, local re-consumption when the send-back fails, and the dead-letter queue
//! after 16 reconsumes. Time is paused: the retry delays (10 s … 2 h) pass in test time.

use crate::common;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use skiff::actors::broker_api::{PullRequest, PullStatus};
use skiff::actors::consumer::push_consumer::PushConsumer;
use skiff::actors::consumer::{ConsumeStatus, Listener, ReceivedMessage};
use skiff::actors::logic::delay::{delay_of_level, dlq_topic, retry_topic};
use skiff::actors::logic::pull_from_where::ConsumeFromWhere;
use skiff::storage::message::{decode_records, property};
use skiff::Node;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

/// One listener call's view of one message.
#[derive(Debug, Clone)]
struct Delivery {
    topic: String,
    origin_topic: String,
    physical_offset: u64,
    reconsume_times: i32,
    succeeded: bool,
    at: tokio::time::Instant,
}

impl Delivery {
    fn of(message: &ReceivedMessage, succeeded: bool) -> Self {
        Delivery {
            topic: message.message.topic.clone(),
            origin_topic: message.origin_topic().to_string(),
            physical_offset: message.message.physical_offset,
            reconsume_times: message.reconsume_times(),
            succeeded,
            at: tokio::time::Instant::now(),
        }
    }
}

/// Every delivery per message index (bodies are `m-<index>`), plus counters the wait loops read.
#[derive(Default)]
struct Ledger {
    deliveries: HashMap<usize, Vec<Delivery>>,
    succeeded_distinct: usize,
    deliveries_total: usize,
    unknown_bodies: Vec<String>,
}

impl Ledger {
    fn record(&mut self, message: &ReceivedMessage, succeeded: bool) {
        self.deliveries_total += 1;
        let body = String::from_utf8_lossy(message.body()).into_owned();
        let Some(index) = body.strip_prefix("m-").and_then(|i| i.parse().ok()) else {
            self.unknown_bodies.push(body);
            return;
        };
        let history = self.deliveries.entry(index).or_default();
        if succeeded && !history.iter().any(|d| d.succeeded) {
            self.succeeded_distinct += 1;
        }
        history.push(Delivery::of(message, succeeded));
    }
}

/// A concurrent listener that fails a seeded `failure_rate` of deliveries and records all of
/// them. In a batch, the messages before the first failure succeed (ackIndex) and the rest are
/// retried, exactly as the dispatcher treats them.
fn flaky_listener(ledger: &Rc<RefCell<Ledger>>, seed: u64, failure_rate: f64) -> Listener {
    let ledger = ledger.clone();
    let rng = Rc::new(RefCell::new(StdRng::seed_from_u64(seed)));
    Listener::concurrent(move |batch| {
        let first_failure = batch
            .iter()
            .position(|_| rng.borrow_mut().gen_bool(failure_rate));
        let mut ledger = ledger.borrow_mut();
        for (index, message) in batch.iter().enumerate() {
            ledger.record(message, first_failure.is_none_or(|f| index < f));
        }
        let status = match first_failure {
            None => ConsumeStatus::SUCCESS,
            Some(0) => ConsumeStatus::ReconsumeLater,
            Some(f) => ConsumeStatus::Success {
                ack_index: Some(f - 1),
            },
        };
        async move { status }
    })
}

/// Advances paused time in `step`s until `condition` holds; fails after `limit` of test time.
async fn advance_in_steps(
    what: &str,
    step: Duration,
    limit: Duration,
    mut condition: impl FnMut() -> bool,
) -> anyhow::Result<Duration> {
    let started = tokio::time::Instant::now();
    while !condition() {
        if started.elapsed() >= limit {
            anyhow::bail!("{what}: not reached within {limit:?} of test time");
        }
        tokio::time::sleep(step).await;
    }
    Ok(started.elapsed())
}

/// Waits until the broker's committed offsets of `group` reach the end of every queue of
/// `topics` (what a restart would resume from).
async fn wait_committed_to_end(node: &Node, group: &str, topics: &[&str]) -> anyhow::Result<()> {
    let started = tokio::time::Instant::now();
    loop {
        let rows = node.progress(group).await?;
        let behind: Vec<_> = rows
            .iter()
            .filter(|row| topics.contains(&row.topic.as_str()))
            .filter(|row| row.consumer_offset.unwrap_or(0) < row.broker_offset)
            .collect();
        let covered = topics
            .iter()
            .all(|topic| rows.iter().any(|row| row.topic == *topic));
        if covered && behind.is_empty() {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(120) {
            anyhow::bail!("offsets of {group} not committed to the end: {behind:?}");
        }
        advance(Duration::from_millis(500)).await;
    }
}

async fn shut_down(consumer: PushConsumer, node: Node) -> anyhow::Result<()> {
    consumer.shutdown().await?;
    node.shutdown().await?;
    Ok(())
}

const MESSAGES: usize = 100_000;
const TOPIC: &str = "TopicAtLeastOnce";
const GROUP: &str = "group-alo";

#[test]
fn every_message_succeeds_at_least_once_despite_failures() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let wall = std::time::Instant::now();
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce(&node, TOPIC, "m", MESSAGES, 500).await?;
        let produced: u64 = (0..4)
            .map(|q| node.broker().reader().max_offset(TOPIC, q))
            .sum();
        assert_eq!(produced, MESSAGES as u64, "every message is stored");

        let ledger = Rc::new(RefCell::new(Ledger::default()));
        let faults = Rc::new(Faults::flaky_send_back(0x5eed_0002, 0.2));
        let broker = Rc::new(FaultyBroker {
            inner: node.broker_api(),
            faults: faults.clone(),
        });
        let consumer = node
            .push_consumer(GROUP)
            .subscribe(TOPIC, "*")
            .consume_from(ConsumeFromWhere::FirstOffset)
            .configure(|config| config.consume_batch_size = 1)
            .listener(flaky_listener(&ledger, 0x5eed_0001, 0.1))
            .start(broker.clone())?;

        let took = advance_in_steps(
            "every message succeeded",
            Duration::from_millis(100),
            Duration::from_secs(4 * 3600),
            || ledger.borrow().succeeded_distinct == MESSAGES,
        )
        .await?;
        let retry = retry_topic(GROUP);
        wait_committed_to_end(&node, GROUP, &[TOPIC, &retry]).await?;
        // Nothing else arrives: every redelivery so far was caused by a failure.
        let total_at_end = ledger.borrow().deliveries_total;
        advance(Duration::from_secs(120)).await;
        assert_eq!(
            ledger.borrow().deliveries_total,
            total_at_end,
            "no delivery after everything succeeded and was committed"
        );

        let snapshot = consumer.observe().await?;
        {
            let ledger = ledger.borrow();
            assert!(
                ledger.unknown_bodies.is_empty(),
                "unexpected bodies: {:?}",
                &ledger.unknown_bodies[..ledger.unknown_bodies.len().min(5)]
            );
            assert_eq!(ledger.deliveries.len(), MESSAGES, "every message delivered");

            let mut failures = 0u64;
            let mut broker_retries = 0u64;
            let mut local_retries = 0u64;
            let mut max_reconsume = 0;
            for index in 0..MESSAGES {
                let history = ledger
                    .deliveries
                    .get(&index)
                    .ok_or_else(|| anyhow::anyhow!("m-{index} never delivered"))?;
                let last = history.last().expect("a recorded history is not empty");
                assert!(last.succeeded, "m-{index} never succeeded: {history:?}");
                assert!(
                    history[..history.len() - 1].iter().all(|d| !d.succeeded),
                    "m-{index} delivered again after it succeeded: {history:?}"
                );
                failures += history.len() as u64 - 1;
                let first = &history[0];
                assert_eq!(
                    (first.topic.as_str(), first.reconsume_times),
                    (TOPIC, 0),
                    "m-{index} first arrives from its own topic: {history:?}"
                );
                // reconsume_times as stored with the record the latest delivery came from.
                let mut stored_times = first.reconsume_times;
                for pair in history.windows(2) {
                    let (before, after) = (&pair[0], &pair[1]);
                    assert_eq!(after.origin_topic, TOPIC, "m-{index}: {history:?}");
                    if after.physical_offset == before.physical_offset {
                        // Send-back failed: consumed again locally, counted one more time.
                        local_retries += 1;
                        assert_eq!(after.topic, before.topic, "m-{index}: {history:?}");
                        assert_eq!(
                            after.reconsume_times,
                            before.reconsume_times + 1,
                            "m-{index} local retry counts one more reconsume: {history:?}"
                        );
                        assert!(
                            after.at.duration_since(before.at) >= Duration::from_secs(5),
                            "m-{index} local retry waits 5 s: {history:?}"
                        );
                    } else {
                        // Sent back: the broker re-read the stored record and counted one more.
                        broker_retries += 1;
                        assert_eq!(
                            after.topic, retry,
                            "m-{index} retried from the retry topic: {history:?}"
                        );
                        assert_eq!(
                            after.reconsume_times,
                            stored_times + 1,
                            "m-{index} retry counts one more reconsume: {history:?}"
                        );
                        let level = 3 + stored_times;
                        let delay = delay_of_level(level).expect("a retry delay level");
                        assert!(
                        after.at.duration_since(before.at) >= delay,
                        "m-{index} retried no earlier than level {level} ({delay:?}): {history:?}"
                    );
                        stored_times = after.reconsume_times;
                    }
                    max_reconsume = max_reconsume.max(after.reconsume_times);
                }
            }
            let dispatcher = &snapshot.dispatcher;
            assert_eq!(dispatcher.consume_failed, failures, "{dispatcher:?}");
            assert_eq!(dispatcher.sent_back, broker_retries, "{dispatcher:?}");
            assert_eq!(dispatcher.local_retries, local_retries, "{dispatcher:?}");
            assert_eq!(dispatcher.send_back_failed, local_retries, "{dispatcher:?}");
            assert_eq!(
                faults.send_backs_failed.get(),
                local_retries,
                "injected failures"
            );
            assert_eq!(
                ledger.deliveries_total as u64,
                MESSAGES as u64 + failures,
                "every redelivery is explained by a failure"
            );
            // The seeds make these exact; the bounds only check the injection did its job.
            assert!(
                failures > MESSAGES as u64 / 20 && failures < MESSAGES as u64 / 5,
                "~10% failed: {failures}"
            );
            assert!(broker_retries > 0 && local_retries > 0);
            eprintln!(
                "{MESSAGES} messages: {failures} failed deliveries, {broker_retries} retried via \
             {retry}, {local_retries} re-consumed locally after a failed send-back, max \
             reconsume_times {max_reconsume}; {took:?} of test time, {:?} wall",
                wall.elapsed()
            );
        }
        shut_down(consumer, node).await
    })
}

#[test]
fn message_failing_sixteen_times_goes_to_dlq() -> anyhow::Result<()> {
    const GROUP: &str = "group-dlq";
    const TOPIC: &str = "TopicPoison";
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        let producer = node.producer("poison-producer");
        producer
            .send(skiff::actors::producer::OutgoingMessage::new(
                TOPIC, "poison",
            ))
            .await?;
        produce(&node, TOPIC, "m", 20, 10).await?;

        let poison: Rc<RefCell<Vec<Delivery>>> = Rc::default();
        let others = Rc::new(RefCell::new(Ledger::default()));
        let listener = {
            let poison = poison.clone();
            let others = others.clone();
            Listener::concurrent(move |batch| {
                let mut status = ConsumeStatus::SUCCESS;
                for message in &batch {
                    if message.body() == b"poison".as_slice() {
                        poison.borrow_mut().push(Delivery::of(message, false));
                        status = ConsumeStatus::ReconsumeLater;
                    } else {
                        others.borrow_mut().record(message, true);
                    }
                }
                async move { status }
            })
        };
        let consumer = node.start_consumer(
            node.push_consumer(GROUP)
                .subscribe(TOPIC, "*")
                .consume_from(ConsumeFromWhere::FirstOffset)
                .listener(listener),
        )?;
        let dlq = dlq_topic(GROUP);
        let retry = retry_topic(GROUP);
        // The 16 retries wait 10 s, 30 s, 1 m, … 2 h: about 4 h 46 min in all.
        let took = advance_in_steps(
            "poison message dead-lettered",
            Duration::from_secs(1),
            Duration::from_secs(6 * 3600),
            || node.broker().reader().max_offset(&dlq, 0) > 0,
        )
        .await?;
        // Another 3 h: past the longest retry delay, nothing comes back.
        advance(Duration::from_secs(3 * 3600)).await;

        let poison = poison.borrow().clone();
        let times: Vec<i32> = poison.iter().map(|d| d.reconsume_times).collect();
        assert_eq!(
            times,
            (0..=16).collect::<Vec<_>>(),
            "delivered once, then reconsumed 16 times, and never a 17th"
        );
        assert_eq!(poison[0].topic, TOPIC);
        for (r, pair) in poison.windows(2).enumerate() {
            let after = &pair[1];
            assert_eq!(
                after.topic,
                retry,
                "reconsume {} from the retry topic",
                r + 1
            );
            assert_eq!(after.origin_topic, TOPIC);
            let level = 3 + r as i32;
            let delay = delay_of_level(level).expect("a retry delay level");
            let waited = after.at.duration_since(pair[0].at);
            assert!(
                waited >= delay,
                "reconsume {} came after {waited:?}, before level {level}'s {delay:?}",
                r + 1
            );
        }
        {
            let others = others.borrow();
            assert_eq!(others.succeeded_distinct, 20, "other messages unaffected");
            assert_eq!(
                others.deliveries_total, 20,
                "each other message exactly once"
            );
        }

        assert_eq!(
            node.broker().reader().max_offset(&dlq, 0),
            1,
            "one dead letter"
        );
        let response = node
            .broker_api()
            .pull(PullRequest {
                group: "dlq-reader".to_string(),
                topic: dlq.clone(),
                broker_name: String::new(),
                queue_id: 0,
                queue_offset: 0,
                max_messages: 32,
                commit_offset: None,
                suspend_timeout: None,
                subscription: Some("*".to_string()),
                expression_type: skiff_actors::broker_api::ExpressionType::Tag,
            })
            .await?;
        assert_eq!(response.status, PullStatus::Found);
        let letters = decode_records(response.records)?;
        assert_eq!(letters.len(), 1);
        let letter = &letters[0];
        assert_eq!(letter.topic, dlq);
        assert_eq!(letter.body.as_ref(), b"poison");
        assert_eq!(letter.property(property::RETRY_TOPIC), Some(TOPIC));
        assert_eq!(
            letter.reconsume_times, 17,
            "the send-back to the DLQ counts as one more reconsume"
        );
        assert!(letter.property(property::DELAY).is_none());
        let snapshot = consumer.observe().await?;
        assert_eq!(
            snapshot.dispatcher.sent_back, 17,
            "{:?}",
            snapshot.dispatcher
        );
        assert_eq!(snapshot.dispatcher.send_back_failed, 0);
        eprintln!("poison dead-lettered after {took:?} of test time; deliveries {times:?}");
        shut_down(consumer, node).await
    })
}
