//! skiff's own producer and consumers (`RemoteBroker`) against an Apache RocketMQ cluster of two
//! brokers, `broker-a` and `broker-b`, behind one name server. Run by
//! `tests/conformance/cluster.sh`, which starts the cluster, creates the topics below on both
//! brokers and sets the environment; each test is `#[ignore]`d and fails without
//! `SKIFF_CLUSTER_NAMESRV` (and the restart test without `SKIFF_CLUSTER_DIR`).
//!
//! * `messages_spread_over_both_brokers_are_all_consumed`: a producer's messages land on the
//!   queues of both brokers; one push consumer consumes all of them; each queue's offset is
//!   committed to the broker that owns it (QUERY_CONSUMER_OFFSET against each broker).
//! * `two_consumers_split_the_queues_of_both_brokers`: no overlap, union = every queue.
//! * `orderly_consumer_locks_on_the_owning_broker`: a lock probe from another client is refused
//!   by each broker for its own queues; each queue's messages arrive in the order sent.
//! * `transactions_end_on_the_broker_that_holds_each_half`: transactional sends spread over
//!   both brokers; commits are delivered, rollbacks never, and halves left UNKNOW are checked
//!   back by their own broker on the producer's connection and committed by the checker.
//! * `consumption_survives_a_broker_restart`: `restart-broker.sh DIR broker-b` while messages are
//!   sent (until it is done; a failed send is tried again on the next queue, as Java's producer
//!   retries); everything sent is received, and broker-b's queues are consumed after the
//!   restart.
//!
//! Waiting is always bounded and on a condition, never a fixed sleep.

use crate::common;

use skiff::actors::broker_api::BrokerApi;
use skiff::actors::consumer::push_consumer::{PushConsumer, PushConsumerBuilder};
use skiff::actors::logic::queue::MessageQueue;
use skiff::prelude::*;
use skiff::remoting::body::{
    JsonBody, LockBatchRequestBody, LockBatchResponseBody, MessageQueue as WireQueue,
};
use skiff::remoting::codes::{request as rc, response as code};
use skiff::remoting::frame::RemotingCommand;
use skiff::remoting::headers::{
    CustomHeader, GetMaxOffsetRequestHeader, OffsetResponseHeader, QueryConsumerOffsetRequestHeader,
};
use skiff::remoting::remote_broker::{RemoteBroker, RemoteBrokerConfig};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

const NAMESRV_ENV: &str = "SKIFF_CLUSTER_NAMESRV";
const DIR_ENV: &str = "SKIFF_CLUSTER_DIR";
const BROKERS: [&str; 2] = ["broker-a", "broker-b"];
/// Created with 4 queues on each broker by `cluster.sh` (keep the lists equal).
const SPREAD_TOPIC: &str = "SkiffClusterSpread";
const SPLIT_TOPIC: &str = "SkiffClusterSplit";
const ORDERLY_TOPIC: &str = "SkiffClusterOrderly";
const RESTART_TOPIC: &str = "SkiffClusterRestart";
const TXN_TOPIC: &str = "SkiffClusterTxn";
const TIMEOUT: Duration = Duration::from_secs(90);

fn env(name: &str) -> anyhow::Result<String> {
    std::env::var(name).map_err(|_| {
        anyhow::anyhow!("{name} is unset: run these tests with tests/conformance/cluster.sh")
    })
}

fn run<F, Fut>(test: F) -> anyhow::Result<()>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let namesrv = env(NAMESRV_ENV)?;
    actix_rt::System::new().block_on(test(namesrv))
}

fn remote(namesrv: &str) -> anyhow::Result<Rc<RemoteBroker>> {
    Ok(Rc::new(RemoteBroker::connect(
        namesrv,
        RemoteBrokerConfig::default(),
    )?))
}

/// (queue, queue offset, body) of every delivery, in order.
type Received = Rc<RefCell<Vec<(MessageQueue, u64, String)>>>;

fn record(received: &Received, topic: &'static str, batch: &[Arc<ReceivedMessage>]) {
    for message in batch {
        if message.queue.topic == topic {
            received.borrow_mut().push((
                message.queue.clone(),
                message.queue_offset(),
                String::from_utf8_lossy(message.body()).into_owned(),
            ));
        }
    }
}

fn recording_listener(received: &Received, topic: &'static str) -> Listener {
    let received = received.clone();
    Listener::concurrent(move |batch| {
        record(&received, topic, &batch);
        async { ConsumeStatus::SUCCESS }
    })
}

fn builder(group: &str, topic: &str, listener: Listener) -> PushConsumerBuilder {
    PushConsumerBuilder::new(group)
        .subscribe(topic, "*")
        .consume_from(ConsumeFromWhere::FirstOffset)
        .listener(listener)
        .configure(|c| {
            c.rebalance_interval = Duration::from_secs(2);
            c.heartbeat_interval = Duration::from_secs(2);
            c.persist_interval = Duration::from_millis(500);
            c.suspend_timeout = Duration::from_secs(2);
        })
}

async fn assigned(consumer: &PushConsumer, topic: &str) -> anyhow::Result<BTreeSet<MessageQueue>> {
    Ok(consumer
        .observe()
        .await?
        .coordinator
        .assigned
        .into_iter()
        .filter(|q| q.topic == topic)
        .collect())
}

/// Polls `condition` every 50 ms until it holds; fails after `limit`.
async fn wait_until<F, Fut>(what: &str, limit: Duration, condition: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    common::poll_until(what, limit, Duration::from_millis(50), condition).await
}

/// The topic's route lists both brokers with 4 read and write queues each (`cluster.sh`
/// created it); the queues, broker by broker.
async fn both_brokers(broker: &RemoteBroker, topic: &str) -> anyhow::Result<Vec<MessageQueue>> {
    let route = BrokerApi::route(broker, topic.to_owned()).await?;
    let mut names: Vec<&str> = route
        .brokers
        .iter()
        .map(|b| b.broker_name.as_str())
        .collect();
    names.sort_unstable();
    anyhow::ensure!(
        names == BROKERS && route.brokers.iter().all(|b| b.read_queue_nums == 4 && b.write_queue_nums == 4),
        "route of {topic} is {route:?}: expected 4 queues on each of {BROKERS:?} (cluster.sh creates it)"
    );
    Ok(route.read_queues())
}

/// Sends `count` messages `{prefix}-{i}` one by one; a failed send is tried again (on the next
/// queue) up to 30 times, as Java's producer retries on another broker. Returns where each
/// landed.
async fn produce(
    producer: &Producer,
    topic: &str,
    prefix: &str,
    count: usize,
) -> anyhow::Result<BTreeMap<String, MessageQueue>> {
    let mut landed = BTreeMap::new();
    for i in 0..count {
        let body = format!("{prefix}-{i}");
        let mut attempt = 0;
        let sent = loop {
            match producer
                .send(OutgoingMessage::new(topic, body.clone()))
                .await
            {
                Ok(sent) => break sent,
                Err(e) if attempt < 30 => {
                    attempt += 1;
                    tracing::debug!(body = %body, attempt, error = %e, "send failed; trying again");
                }
                Err(e) => return Err(anyhow::Error::new(e).context(format!("sending {body}"))),
            }
        };
        landed.insert(
            body,
            MessageQueue::new(topic, &sent.broker_name, sent.queue_id),
        );
    }
    Ok(landed)
}

fn distinct(received: &Received) -> BTreeSet<String> {
    received
        .borrow()
        .iter()
        .map(|(_, _, b)| b.clone())
        .collect()
}

fn brokers_of<'a>(queues: impl IntoIterator<Item = &'a MessageQueue>) -> BTreeSet<String> {
    queues.into_iter().map(|q| q.broker_name.clone()).collect()
}

fn all_brokers() -> BTreeSet<String> {
    BROKERS.iter().map(|b| (*b).to_owned()).collect()
}

/// A request straight to `addr` whose answer must be SUCCESS (QUERY_NOT_FOUND passes too).
async fn ask(
    broker: &RemoteBroker,
    addr: &str,
    request: RemotingCommand,
) -> anyhow::Result<RemotingCommand> {
    let response = broker
        .client()
        .invoke(addr, request, Duration::from_secs(5))
        .await?;
    anyhow::ensure!(
        response.code == code::SUCCESS || response.code == code::QUERY_NOT_FOUND,
        "{addr} answered {} ({:?})",
        response.code,
        response.remark
    );
    Ok(response)
}

/// (committed offset, max offset) of `queue` as its broker reports them; the committed one is
/// `None` when the broker has none.
async fn offsets_at(
    broker: &RemoteBroker,
    group: &str,
    queue: &MessageQueue,
) -> anyhow::Result<(Option<i64>, i64)> {
    let addr = broker.queue_addr(&queue.topic, &queue.broker_name).await?;
    let queue_id = i32::try_from(queue.queue_id)?;
    let query = RemotingCommand::new_request(rc::QUERY_CONSUMER_OFFSET).with_ext_fields(
        QueryConsumerOffsetRequestHeader {
            consumer_group: group.to_owned(),
            topic: queue.topic.clone(),
            queue_id,
            set_zero_if_not_found: Some(false),
        }
        .to_ext(),
    );
    let answer = ask(broker, &addr, query).await?;
    let committed = match answer.code {
        code::SUCCESS => Some(OffsetResponseHeader::from_command(&answer)?.offset),
        code::QUERY_NOT_FOUND => None,
        // Anything else is the broker refusing or failing, not "nothing committed".
        other => anyhow::bail!(
            "{queue}: QUERY_CONSUMER_OFFSET for {group} answered {other} {:?}",
            answer.remark
        ),
    };
    let max = RemotingCommand::new_request(rc::GET_MAX_OFFSET).with_ext_fields(
        GetMaxOffsetRequestHeader {
            topic: queue.topic.clone(),
            queue_id,
            committed: true,
        }
        .to_ext(),
    );
    let max = OffsetResponseHeader::from_command(&ask(broker, &addr, max).await?)?.offset;
    Ok((committed, max))
}

// ---- scenarios ---------------------------------------------------------------------------------

#[test]
#[ignore = "needs an Apache cluster: tests/conformance/cluster.sh"]
fn transactions_end_on_the_broker_that_holds_each_half() -> anyhow::Result<()> {
    use skiff::actors::logic::transaction::TransactionResolution;
    run(|namesrv| async move {
        let broker = remote(&namesrv)?;
        both_brokers(&broker, TXN_TOPIC).await?;
        let producer = Producer::new("skiff-cluster-txn-producer", broker.clone());
        let asked = Rc::new(RefCell::new(BTreeSet::new()));
        let asked_by_checker = asked.clone();
        producer
            .register_transaction_checker(move |half| {
                let body = String::from_utf8_lossy(&half.body).into_owned();
                let commit = body.starts_with("unknown");
                asked_by_checker.borrow_mut().insert(body);
                async move {
                    if commit {
                        TransactionResolution::Commit
                    } else {
                        TransactionResolution::Rollback
                    }
                }
            })
            .await?;
        let mut expected = BTreeSet::new();
        let mut brokers_used = BTreeSet::new();
        for i in 0..12 {
            let (body, local) = match i % 3 {
                0 => (format!("commit-{i}"), TransactionResolution::Commit),
                1 => (format!("rollback-{i}"), TransactionResolution::Rollback),
                _ => (format!("unknown-{i}"), TransactionResolution::Unknown),
            };
            let sent = producer
                .send_in_transaction(
                    OutgoingMessage::new(TXN_TOPIC, body.clone()),
                    |_| async move { local },
                )
                .await?;
            brokers_used.insert(sent.half.broker_name.clone());
            if local != TransactionResolution::Rollback {
                expected.insert(body);
            }
        }
        anyhow::ensure!(
            brokers_used.len() == 2,
            "halves went to {brokers_used:?}, not to both brokers"
        );
        let got = Received::default();
        let consumer = builder(
            "skiff-cluster-txn",
            TXN_TOPIC,
            recording_listener(&got, TXN_TOPIC),
        )
        .start(remote(&namesrv)?)?;
        let (got_ref, expected_ref) = (&got, &expected);
        wait_until(
            "commits and checked-back commits are consumed",
            TIMEOUT,
            || async move { Ok(distinct(got_ref).is_superset(expected_ref)) },
        )
        .await?;
        consumer.shutdown().await?;
        anyhow::ensure!(
            distinct(&got) == expected,
            "consumed {:?}, expected {expected:?}",
            distinct(&got)
        );
        let unknown: BTreeSet<String> = expected
            .iter()
            .filter(|b| b.starts_with("unknown"))
            .cloned()
            .collect();
        anyhow::ensure!(
            *asked.borrow() == unknown,
            "the checker was asked about {:?}, the halves left UNKNOW are {unknown:?}",
            asked.borrow()
        );
        broker.close();
        Ok(())
    })
}

#[test]
#[ignore = "needs an Apache cluster: tests/conformance/cluster.sh"]
fn messages_spread_over_both_brokers_are_all_consumed() -> anyhow::Result<()> {
    run(|namesrv| async move {
        let broker = remote(&namesrv)?;
        let queues = both_brokers(&broker, SPREAD_TOPIC).await?;
        let producer = Producer::new("skiff-cluster-producer", broker.clone());
        let landed = produce(&producer, SPREAD_TOPIC, "spread", 200).await?;
        let used: BTreeSet<&MessageQueue> = landed.values().collect();
        anyhow::ensure!(
            used.len() == queues.len(),
            "messages landed on {used:?}, not on every queue {queues:?}"
        );

        let group = "skiff-cluster-spread";
        let got = Received::default();
        let consumer = builder(group, SPREAD_TOPIC, recording_listener(&got, SPREAD_TOPIC))
            .start(remote(&namesrv)?)?;
        let (got_ref, landed_ref) = (&got, &landed);
        wait_until("every message is consumed", TIMEOUT, || async move {
            Ok(distinct(got_ref).len() == landed_ref.len())
        })
        .await?;
        anyhow::ensure!(
            distinct(&got) == landed.keys().cloned().collect(),
            "unexpected bodies consumed"
        );
        for (queue, _, body) in got.borrow().iter() {
            anyhow::ensure!(
                landed.get(body) == Some(queue),
                "{body} was consumed from {queue}, sent to {:?}",
                landed.get(body)
            );
        }
        // What the consumer held before it stopped, for a failure below to say where an offset
        // went missing: assigned, cached in its offset store, or persisted and lost.
        let before = consumer.observe().await?;
        consumer.shutdown().await?;

        // Every queue's offset is committed to the broker that owns it: its committed offset
        // equals its own max offset, and the max offsets add up to everything sent.
        let mut total = 0;
        for queue in &queues {
            let (committed, max) = offsets_at(&broker, group, queue).await?;
            anyhow::ensure!(
                committed == Some(max),
                "{queue}: committed {committed:?} on its broker, max offset {max}; before \
                 shutdown the consumer had it assigned: {}, cached offset {:?}, {} persist \
                 rounds, {} failed",
                before.coordinator.assigned.contains(queue),
                before.offsets.offsets.get(queue),
                before.offsets.persist_rounds,
                before.offsets.persist_failures,
            );
            total += max;
        }
        anyhow::ensure!(total == 200, "max offsets add up to {total}, 200 were sent");
        broker.close();
        Ok(())
    })
}

#[test]
#[ignore = "needs an Apache cluster: tests/conformance/cluster.sh"]
fn two_consumers_split_the_queues_of_both_brokers() -> anyhow::Result<()> {
    run(|namesrv| async move {
        let broker = remote(&namesrv)?;
        let queues: BTreeSet<MessageQueue> = both_brokers(&broker, SPLIT_TOPIC)
            .await?
            .into_iter()
            .collect();
        let group = "skiff-cluster-split";
        let (got_a, got_b) = (Received::default(), Received::default());
        let a = builder(group, SPLIT_TOPIC, recording_listener(&got_a, SPLIT_TOPIC))
            .start(remote(&namesrv)?)?;
        let b = builder(group, SPLIT_TOPIC, recording_listener(&got_b, SPLIT_TOPIC))
            .start(remote(&namesrv)?)?;
        let (a_ref, b_ref, queues_ref) = (&a, &b, &queues);
        wait_until("the queues are split 4/4", TIMEOUT, || async move {
            let (qa, qb) = (
                assigned(a_ref, SPLIT_TOPIC).await?,
                assigned(b_ref, SPLIT_TOPIC).await?,
            );
            let union: BTreeSet<MessageQueue> = qa.union(&qb).cloned().collect();
            Ok(qa.len() == 4 && qb.len() == 4 && qa.is_disjoint(&qb) && union == *queues_ref)
        })
        .await?;
        let (qa, qb) = (
            assigned(&a, SPLIT_TOPIC).await?,
            assigned(&b, SPLIT_TOPIC).await?,
        );

        let producer = Producer::new("skiff-cluster-producer", broker.clone());
        let landed = produce(&producer, SPLIT_TOPIC, "split", 200).await?;
        let (got_a_ref, got_b_ref, landed_ref) = (&got_a, &got_b, &landed);
        wait_until("every message is consumed", TIMEOUT, || async move {
            Ok(distinct(got_a_ref).union(&distinct(got_b_ref)).count() == landed_ref.len())
        })
        .await?;
        for (got, owned, name) in [(&got_a, &qa, "first"), (&got_b, &qb, "second")] {
            let from: BTreeSet<MessageQueue> =
                got.borrow().iter().map(|(q, _, _)| q.clone()).collect();
            anyhow::ensure!(
                from.is_subset(owned),
                "the {name} consumer received from {from:?} but owns {owned:?}"
            );
        }
        let total = got_a.borrow().len() + got_b.borrow().len();
        anyhow::ensure!(total == 200, "{total} deliveries of 200 messages");
        a.shutdown().await?;
        b.shutdown().await?;
        broker.close();
        Ok(())
    })
}

#[test]
#[ignore = "needs an Apache cluster: tests/conformance/cluster.sh"]
fn orderly_consumer_locks_on_the_owning_broker() -> anyhow::Result<()> {
    run(|namesrv| async move {
        let broker = remote(&namesrv)?;
        both_brokers(&broker, ORDERLY_TOPIC).await?;
        let producer = Producer::new("skiff-cluster-orderly-producer", broker.clone());
        let queues = producer.write_queues(ORDERLY_TOPIC).await?;
        anyhow::ensure!(queues.len() == 8, "write queues {queues:?}");
        for step in 0..10 {
            for (order, queue) in queues.iter().enumerate() {
                let message = OutgoingMessage::new(ORDERLY_TOPIC, format!("order-{order}-{step}"));
                let sent = producer.send_to_queue(queue, vec![message]).await?;
                anyhow::ensure!(
                    sent.iter().all(|s| s.broker_name == queue.broker_name && s.queue_id == queue.queue_id),
                    "sent to {queue}, landed {sent:?}"
                );
            }
        }

        let group = "skiff-cluster-orderly";
        let got = Received::default();
        let sink = got.clone();
        let listener = Listener::orderly(move |batch| {
            record(&sink, ORDERLY_TOPIC, &batch);
            async { OrderlyStatus::Success }
        });
        let consumer = builder(group, ORDERLY_TOPIC, listener).start(remote(&namesrv)?)?;
        let got_ref = &got;
        wait_until("every order is consumed", TIMEOUT, || async move {
            Ok(distinct(got_ref).len() == 80)
        })
        .await?;

        // Each broker holds the locks of its own queues for the consumer: another client's
        // lock of them is refused there.
        for name in BROKERS {
            let own: Vec<&MessageQueue> = queues.iter().filter(|q| q.broker_name == name).collect();
            let addr = broker.queue_addr(ORDERLY_TOPIC, name).await?;
            let body = LockBatchRequestBody {
                consumer_group: group.to_owned(),
                client_id: "skiff-lock-probe".to_owned(),
                only_this_broker: true,
                mq_set: own.iter().map(|q| WireQueue::from(*q)).collect(),
            };
            let request = RemotingCommand::new_request(rc::LOCK_BATCH_MQ).with_body(body.encode());
            let answer = ask(&broker, &addr, request).await?;
            let stolen = LockBatchResponseBody::decode(&answer.body)?.lock_ok_mq_set;
            anyhow::ensure!(
                stolen.is_empty(),
                "{name} let another client lock {stolen:?}: the consumer's locks are not there"
            );
        }
        consumer.shutdown().await?;

        for (order, queue) in queues.iter().enumerate() {
            let steps: Vec<String> = got
                .borrow()
                .iter()
                .filter(|(q, _, _)| q == queue)
                .map(|(_, _, body)| body.clone())
                .collect();
            let expected: Vec<String> = (0..10).map(|s| format!("order-{order}-{s}")).collect();
            anyhow::ensure!(steps == expected, "{queue} arrived as {steps:?}");
        }
        broker.close();
        Ok(())
    })
}

#[test]
#[ignore = "needs an Apache cluster: tests/conformance/cluster.sh"]
fn consumption_survives_a_broker_restart() -> anyhow::Result<()> {
    let dir = PathBuf::from(env(DIR_ENV)?);
    run(|namesrv| async move {
        let broker = remote(&namesrv)?;
        both_brokers(&broker, RESTART_TOPIC).await?;
        let producer = Producer::new("skiff-cluster-restart-producer", broker.clone());
        let group = "skiff-cluster-restart";
        let got = Received::default();
        let consumer = builder(
            group,
            RESTART_TOPIC,
            recording_listener(&got, RESTART_TOPIC),
        )
        .start(remote(&namesrv)?)?;

        let mut landed = produce(&producer, RESTART_TOPIC, "before", 100).await?;
        let (got_ref, landed_ref) = (&got, &landed);
        wait_until("the first messages are consumed", TIMEOUT, || async move {
            Ok(distinct(got_ref).len() == landed_ref.len())
        })
        .await?;

        // Restart broker-b while messages are sent (to broker-a while broker-b is away).
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/conformance/apache/restart-broker.sh");
        let restart = tokio::task::spawn_blocking(move || {
            std::process::Command::new("bash")
                .arg(script)
                .arg(dir)
                .arg("broker-b")
                .status()
        });
        // Sends go on, paced at about 100 a second, until the restart is over: some hit
        // broker-b while it is away.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
        let mut round = 0;
        while !restart.is_finished() || round < 10 {
            let prefix = format!("during{round}");
            landed.extend(produce(&producer, RESTART_TOPIC, &prefix, 5).await?);
            round += 1;
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "restart-broker.sh did not finish within 180 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let status = restart.await??;
        anyhow::ensure!(status.success(), "restart-broker.sh broker-b: {status}");

        let after = produce(&producer, RESTART_TOPIC, "after", 100).await?;
        anyhow::ensure!(
            brokers_of(after.values()) == all_brokers(),
            "after the restart messages landed only on {:?}",
            brokers_of(after.values())
        );
        landed.extend(after.clone());
        let (landed_ref, after_ref) = (&landed, &after);
        let all = wait_until("everything sent is consumed", TIMEOUT, || async move {
            Ok(distinct(got_ref).is_superset(&landed_ref.keys().cloned().collect()))
        })
        .await;
        if let Err(e) = all {
            let missing: Vec<&String> = landed
                .keys()
                .filter(|b| !distinct(&got).contains(*b))
                .take(20)
                .collect();
            let snapshot = consumer.observe().await?;
            anyhow::bail!(
                "{e}: missing e.g. {missing:?}; assigned {:?}",
                snapshot.coordinator.assigned
            );
        }
        let from_b_after = got
            .borrow()
            .iter()
            .filter(|(q, _, body)| q.broker_name == "broker-b" && after_ref.contains_key(body))
            .count();
        anyhow::ensure!(
            from_b_after > 0,
            "nothing consumed from broker-b after its restart"
        );
        anyhow::ensure!(
            distinct(&got) == landed.keys().cloned().collect(),
            "unexpected bodies consumed"
        );
        consumer.shutdown().await?;
        broker.close();
        Ok(())
    })
}
