//! A gRPC client generated from RocketMQ 5's schema, as the gRPC tests call `skiff serve` with
//! it: the connection, the metadata every call carries, resources and messages.

use std::time::Duration;

use anyhow::Context;
use tonic::transport::{Channel, Endpoint};
use tonic::Request;

use skiff::grpc::pb::messaging_service_client::MessagingServiceClient;
use skiff::grpc::pb::{self, Code};

pub const CLIENT_ID: &str = "grpc-test-client@1";

pub async fn connect(
    addr: std::net::SocketAddr,
) -> anyhow::Result<MessagingServiceClient<Channel>> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    Ok(MessagingServiceClient::new(channel))
}

/// `message` with the client id every RocketMQ 5 client sends, and a deadline.
pub fn call<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert("x-mq-client-id", CLIENT_ID.parse().expect("ascii"));
    request.set_timeout(Duration::from_secs(15));
    request
}

pub fn resource(name: &str) -> Option<pb::Resource> {
    Some(pb::Resource {
        resource_namespace: String::new(),
        name: name.to_owned(),
    })
}

pub fn code_of(status: &Option<pb::Status>) -> Option<Code> {
    status.as_ref().and_then(|s| Code::try_from(s.code).ok())
}

pub fn message(topic: &str, body: &str, tag: &str, key: &str, id: &str) -> pb::Message {
    pb::Message {
        topic: resource(topic),
        user_properties: [("origin".to_owned(), "grpc".to_owned())].into(),
        system_properties: Some(pb::SystemProperties {
            tag: Some(tag.to_owned()),
            keys: vec![key.to_owned()],
            message_id: id.to_owned(),
            message_type: pb::MessageType::Normal as i32,
            ..Default::default()
        }),
        body: body.as_bytes().to_vec().into(),
    }
}
