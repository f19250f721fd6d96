//! Arbitrary bytes as each request a gRPC client sends, through what the front door does with
//! them before the broker sees them: protobuf decoding (unknown fields skipped), the message
//! conversion a send stores, receipt handles, transaction ids and names. Nothing may panic; a
//! message that converts must keep its body and id.

#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use skiff_fuzz::grpc::convert::message_to_append;
use skiff_fuzz::grpc::pb;
use skiff_fuzz::grpc::resource;
use skiff_fuzz::grpc::transaction_id::TransactionId;

const MAX_BODY: usize = 1 << 16;

fuzz_target!(|data: &[u8]| {
    if let Ok(send) = pb::SendMessageRequest::decode(data) {
        for message in &send.messages {
            let topic = message
                .topic
                .as_ref()
                .map(resource::stored)
                .unwrap_or_default();
            let peer = "127.0.0.1:1".parse().expect("a literal address");
            if let Ok(stored) = message_to_append(message, &topic, 0, peer, MAX_BODY) {
                assert!(stored.body.len() <= MAX_BODY);
                let id = &message
                    .system_properties
                    .as_ref()
                    .expect("converted")
                    .message_id;
                let stored_id = skiff::storage::message::property(&stored.properties, "UNIQ_KEY");
                assert_eq!(stored_id, Some(id.as_str()), "the id reads back as sent");
            }
            let _ = resource::resource(&topic);
        }
    }
    if let Ok(ack) = pb::AckMessageRequest::decode(data) {
        for entry in &ack.entries {
            let _ = skiff::actors::logic::pop::Receipt::parse(&entry.receipt_handle);
        }
    }
    if let Ok(end) = pb::EndTransactionRequest::decode(data) {
        if let Ok(id) = TransactionId::parse(&end.transaction_id) {
            assert_eq!(TransactionId::parse(&id.to_string()), Ok(id));
        }
    }
    let _ = pb::ReceiveMessageRequest::decode(data);
    let _ = pb::ChangeInvisibleDurationRequest::decode(data);
    let _ = pb::TelemetryCommand::decode(data);
    let _ = pb::QueryRouteRequest::decode(data);
    let _ = pb::HeartbeatRequest::decode(data);
});
