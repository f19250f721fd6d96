//! skiff's own producer sends transactions over TCP (`RemoteBroker`) to `skiff serve`: a
//! commit is delivered, a rollback never, and a half left UNKNOW is checked back on the
//! producer's connection (CHECK_TRANSACTION_STATE) and committed by its checker's answer.

use crate::common;

use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use skiff::actors::broker_api::{BrokerApi, ExpressionType, PullRequest, PullStatus};
use skiff::actors::logic::transaction::TransactionResolution;
use skiff::prelude::*;
use skiff::remoting::remote_broker::{RemoteBroker, RemoteBrokerConfig};
use skiff::serve;
use skiff::storage::message::decode_records;

const TOPIC: &str = "RemoteTxn";
const GROUP: &str = "remote-txn-pg";

/// Every body stored in the topic's queues.
async fn delivered(broker: &RemoteBroker) -> anyhow::Result<BTreeSet<String>> {
    let mut bodies = BTreeSet::new();
    for queue_id in 0..4 {
        let mut offset = 0;
        loop {
            let response = BrokerApi::pull(
                broker,
                PullRequest {
                    group: "remote-txn-reader".into(),
                    topic: TOPIC.into(),
                    broker_name: "skiff".into(),
                    queue_id,
                    queue_offset: offset,
                    max_messages: 32,
                    commit_offset: None,
                    suspend_timeout: None,
                    subscription: Some("*".into()),
                    expression_type: ExpressionType::Tag,
                },
            )
            .await?;
            if response.status != PullStatus::Found {
                break;
            }
            offset = response.next_begin_offset;
            for m in decode_records(response.records)? {
                bodies.insert(String::from_utf8_lossy(&m.body).into_owned());
            }
        }
    }
    Ok(bodies)
}

#[actix_rt::test]
async fn commit_rollback_and_a_checked_back_unknown_through_the_remote_client() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let mut config = NodeConfig::in_dir(dir.path());
    config.listen = "127.0.0.1:0".parse()?;
    config.disk_max_used_ratio = 0.999;
    config.disk_full_ratio = 1.0;
    config.transaction_timeout = Duration::from_millis(500);
    config.transaction_check_interval = Duration::from_millis(200);
    let serving = serve::start(config).await?;
    let addr = serving.local_addr().to_string();

    let broker = RemoteBroker::connect(&addr, RemoteBrokerConfig::default())?;
    let api: Rc<dyn BrokerApi> = Rc::new(broker.clone());
    let producer = Producer::new(GROUP, api);
    producer
        .register_transaction_checker(|half| async move {
            if &half.body[..] == b"unknown-then-commit" {
                TransactionResolution::Commit
            } else {
                TransactionResolution::Rollback
            }
        })
        .await?;
    for (body, local) in [
        ("committed", TransactionResolution::Commit),
        ("rolled-back", TransactionResolution::Rollback),
        ("unknown-then-commit", TransactionResolution::Unknown),
    ] {
        let sent = producer
            .send_in_transaction(OutgoingMessage::new(TOPIC, body), |_| async move { local })
            .await?;
        anyhow::ensure!(sent.resolution == local, "{body}: {:?}", sent.resolution);
    }

    common::poll_until(
        "the committed and the checked-back messages are delivered",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async {
            let seen = delivered(&broker).await?;
            Ok(seen.contains("committed") && seen.contains("unknown-then-commit"))
        },
    )
    .await?;
    let seen = delivered(&broker).await?;
    anyhow::ensure!(
        !seen.contains("rolled-back"),
        "a rolled-back message was delivered: {seen:?}"
    );
    anyhow::ensure!(seen.len() == 2, "delivered: {seen:?}");
    broker.close();
    serving.shutdown().await?;
    Ok(())
}
