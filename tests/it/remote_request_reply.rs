//! skiff's own producer as a request-reply requester over TCP (`RemoteBroker`): its request is
//! stored with `CORRELATION_ID`, `REPLY_TO_CLIENT` and `TTL`; a replier (raw frames, as a Java
//! consumer's `MessageUtil.createReplyMessage` + SEND_REPLY_MESSAGE) answers; the broker pushes
//! the reply to the requester's connection and `Producer::request` returns it. Without a reply
//! the request times out.

use crate::common;

use std::rc::Rc;
use std::time::Duration;

use anyhow::{ensure, Context};
use common::request;
use skiff::actors::broker_api::{BrokerApi, BrokerError, ExpressionType, PullRequest, PullStatus};
use skiff::prelude::*;
use skiff::remoting::codes::{request as rc, response as code};
use skiff::remoting::remote_broker::{RemoteBroker, RemoteBrokerConfig};
use skiff::remoting::{ClientConfig, RemotingClient};
use skiff::serve;
use skiff::storage::message::{decode_records, property, StoredMessage};

const TOPIC: &str = "RemoteRequests";

/// The first message in queue 0..4 of the topic, once one is there.
async fn the_request(broker: &RemoteBroker) -> anyhow::Result<StoredMessage> {
    for _ in 0..300 {
        for queue_id in 0..4 {
            let response = BrokerApi::pull(
                broker,
                PullRequest {
                    group: "replier".into(),
                    topic: TOPIC.into(),
                    broker_name: "skiff".into(),
                    queue_id,
                    queue_offset: 0,
                    max_messages: 1,
                    commit_offset: None,
                    suspend_timeout: None,
                    subscription: Some("*".into()),
                    expression_type: ExpressionType::Tag,
                },
            )
            .await?;
            if response.status == PullStatus::Found {
                return decode_records(response.records)?
                    .pop()
                    .context("a found pull without records");
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("the request never reached the topic")
}

#[actix_rt::test]
async fn a_request_gets_the_reply_a_replier_sends_and_times_out_without_one() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let mut config = NodeConfig::in_dir(dir.path());
    config.listen = "127.0.0.1:0".parse()?;
    config.disk_max_used_ratio = 0.999;
    config.disk_full_ratio = 1.0;
    let serving = serve::start(config).await?;
    let addr = serving.local_addr().to_string();

    let requester_broker = RemoteBroker::connect(&addr, RemoteBrokerConfig::default())?;
    let api: Rc<dyn BrokerApi> = Rc::new(requester_broker.clone());
    let producer = Producer::new("requesters", api);
    let asking = actix_rt::spawn({
        let producer = producer.clone();
        async move {
            producer
                .request(
                    OutgoingMessage::new(TOPIC, "what time is it?"),
                    Duration::from_secs(20),
                )
                .await
        }
    });

    // The replier: reads the request, answers with SEND_REPLY_MESSAGE_V2 to the reply topic.
    let replier_broker = RemoteBroker::connect(&addr, RemoteBrokerConfig::default())?;
    let asked = the_request(&replier_broker).await?;
    let correlation_id = asked
        .property(property::CORRELATION_ID)
        .context("no CORRELATION_ID")?;
    let reply_to = asked
        .property(property::REPLY_TO_CLIENT)
        .context("no REPLY_TO_CLIENT")?;
    ensure!(asked.property(property::TTL) == Some("20000"), "{asked:?}");
    let cluster = asked.property(property::CLUSTER).context("no CLUSTER")?;
    let properties: String = [
        ("MSG_TYPE", "reply"),
        ("CORRELATION_ID", correlation_id),
        ("REPLY_TO_CLIENT", reply_to),
        ("TTL", "20000"),
    ]
    .iter()
    .map(|(k, v)| format!("{k}\u{1}{v}\u{2}"))
    .collect();
    let reply_topic = format!("{cluster}_REPLY_TOPIC");
    let reply = request(
        rc::SEND_REPLY_MESSAGE_V2,
        &[
            ("a", "replier"),
            ("b", &reply_topic),
            ("c", "TBW102"),
            ("d", "4"),
            ("e", "0"),
            ("f", "0"),
            ("g", "1700000000000"),
            ("h", "0"),
            ("i", &properties),
        ],
    )
    .with_body(b"noon".to_vec());
    let client = RemotingClient::new(ClientConfig::default());
    let answer = client.invoke(&addr, reply, Duration::from_secs(20)).await?;
    ensure!(answer.code == code::SUCCESS, "reply refused: {answer:?}");

    let got = asking.await??;
    ensure!(&got.body[..] == b"noon", "reply body {:?}", got.body);
    ensure!(got.property(property::CORRELATION_ID) == Some(correlation_id));
    ensure!(got.topic == reply_topic, "reply topic {}", got.topic);

    // Nobody answers this one.
    let unanswered = producer
        .request(
            OutgoingMessage::new(TOPIC, "anyone?"),
            Duration::from_millis(300),
        )
        .await;
    ensure!(
        matches!(unanswered, Err(BrokerError::Remote(_))),
        "an unanswered request: {unanswered:?}"
    );
    requester_broker.close();
    replier_broker.close();
    serving.shutdown().await?;
    Ok(())
}
