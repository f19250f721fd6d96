//! skiff's producer gives every message a client message id (`UNIQ_KEY`) whichever broker it
//! sends to, embedded or over TCP, so what a consumer's `ReceivedMessage::msg_id` answers does
//! not depend on the transport. A node and its remoting listener run in the test (an actix
//! system, real time).

use std::rc::Rc;

use anyhow::{ensure, Context};
use skiff::actors::broker_api::{BrokerApi, PullRequest, PullStatus};
use skiff::actors::logic::queue::MessageQueue;
use skiff::prelude::*;
use skiff::remoting::remote_broker::{RemoteBroker, RemoteBrokerConfig};
use skiff::serve;
use skiff::storage::message::{decode_records, property::UNIQ_KEY};

const TOPIC: &str = "Ids";

/// Sends `body` through a producer over `broker` (with `id` as its UNIQ_KEY when given) and
/// reads it back as a consumer receives it.
async fn send_and_receive(
    broker: Rc<dyn BrokerApi>,
    body: &str,
    id: Option<&str>,
) -> anyhow::Result<ReceivedMessage> {
    let producer = Producer::new("id-producer", broker.clone());
    let mut message = OutgoingMessage::new(TOPIC, body.to_owned());
    if let Some(id) = id {
        message
            .properties
            .push((UNIQ_KEY.to_owned(), id.to_owned()));
    }
    let sent = producer.send(message).await?;
    let response = broker
        .pull(PullRequest {
            group: "id-reader".to_owned(),
            topic: TOPIC.to_owned(),
            broker_name: sent.broker_name.clone(),
            queue_id: sent.queue_id,
            queue_offset: sent.queue_offset,
            max_messages: 1,
            commit_offset: None,
            suspend_timeout: None,
            subscription: Some("*".to_owned()),
            expression_type: skiff_actors::broker_api::ExpressionType::Tag,
        })
        .await?;
    ensure!(response.status == PullStatus::Found, "{response:?}");
    let message = decode_records(response.records)?
        .into_iter()
        .next()
        .context("a found pull has a record")?;
    ensure!(message.body == body.as_bytes(), "{message:?}");
    Ok(ReceivedMessage {
        queue: MessageQueue::new(TOPIC, "skiff", sent.queue_id),
        message,
    })
}

#[test]
fn embedded_and_remote_sends_carry_a_client_message_id() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    actix_rt::System::new().block_on(async {
        let mut config = NodeConfig::in_dir(dir.path());
        config.listen = "127.0.0.1:0".parse()?;
        let serving = serve::start(config).await?;
        let embedded = serving.node().broker_api();
        let remote: Rc<dyn BrokerApi> = Rc::new(RemoteBroker::connect(
            &serving.local_addr().to_string(),
            RemoteBrokerConfig::default(),
        )?);
        let mut ids = Vec::new();
        for (transport, broker) in [("embedded", embedded), ("remote", remote.clone())] {
            let received = send_and_receive(broker.clone(), transport, None).await?;
            let id = received
                .property(UNIQ_KEY)
                .with_context(|| format!("{transport} send carries no UNIQ_KEY"))?
                .to_owned();
            ensure!(
                id.len() == 32
                    && id
                        .chars()
                        .all(|c| c.is_ascii_digit() || ('A'..='F').contains(&c)),
                "{transport}: {id}"
            );
            ensure!(
                received.msg_id() == id,
                "{transport}: {}",
                received.msg_id()
            );
            ids.push(id);

            // An id the caller set is kept.
            let own = send_and_receive(broker, transport, Some("CALLER-ID")).await?;
            ensure!(own.msg_id() == "CALLER-ID", "{transport}: {}", own.msg_id());
        }
        ensure!(ids[0] != ids[1], "{ids:?}");
        drop(remote);
        serving.shutdown().await?;
        Ok(())
    })
}
