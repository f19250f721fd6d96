//! Arbitrary bytes through the frame decoder, header parsing, typed headers and the JSON body
//! decoders. Nothing may panic; decoded commands must survive a JSON re-encode unchanged.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use skiff_fuzz::body::{
    normalize_fastjson, ConsumerListBody, HeartbeatData, JsonBody, LockBatchRequestBody,
    LockBatchResponseBody, MessageQueue, TopicRouteData, UnlockBatchRequestBody,
};
use skiff_fuzz::frame::{
    decode_frame, decode_json_header, decode_rocketmq_header, encode, RemotingCommand,
};
use skiff_fuzz::headers::*;

const MAX_FRAME: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    // 1. The stream decoder, fed the input in two pieces.
    let split = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
    let mut buf = BytesMut::from(&data[..split]);
    let mut fed_rest = false;
    loop {
        match decode_frame(&mut buf, MAX_FRAME) {
            Ok(Some(cmd)) => check_command(&cmd),
            Ok(None) => {
                if fed_rest {
                    break;
                }
                buf.extend_from_slice(&data[split..]);
                fed_rest = true;
            }
            Err(e) => {
                let _ = e.error_response();
                if e.is_fatal() {
                    break;
                }
            }
        }
    }

    // 2. Header parsers on the raw bytes.
    if let Ok(cmd) = decode_json_header(data) {
        check_command(&cmd);
    }
    if let Ok(cmd) = decode_rocketmq_header(data) {
        check_command(&cmd);
    }

    // 3. Body decoders on the raw bytes.
    check_bodies(data);
});

fn check_command(cmd: &RemotingCommand) {
    let mut out = BytesMut::new();
    if encode(cmd, &mut out).is_ok() {
        let again = decode_frame(&mut out, usize::MAX)
            .expect("re-encoded frame decodes")
            .expect("re-encoded frame is whole");
        assert_eq!(&again, cmd, "json re-encode changed the command");
        assert!(out.is_empty());
    }
    let ext = &cmd.ext_fields;
    let _ = SendMessageRequestHeader::from_ext(ext).map(|h| {
        assert_eq!(
            SendMessageRequestHeader::from_ext(&h.to_ext()).as_ref(),
            Ok(&h)
        );
        assert_eq!(
            SendMessageRequestHeader::from_v2_ext(&h.to_v2_ext()).as_ref(),
            Ok(&h)
        );
    });
    let _ = SendMessageRequestHeader::from_v2_ext(ext);
    let _ = SendMessageRequestHeader::from_request(cmd);
    let _ = SendMessageResponseHeader::from_ext(ext);
    let _ = PullMessageRequestHeader::from_ext(ext).map(|h| {
        assert_eq!(
            PullMessageRequestHeader::from_ext(&h.to_ext()).as_ref(),
            Ok(&h)
        );
    });
    let _ = PullMessageResponseHeader::from_ext(ext);
    let _ = QueryConsumerOffsetRequestHeader::from_ext(ext);
    let _ = OffsetResponseHeader::from_ext(ext);
    let _ = UpdateConsumerOffsetRequestHeader::from_ext(ext);
    let _ = ConsumerSendMsgBackRequestHeader::from_ext(ext);
    let _ = UnregisterClientRequestHeader::from_ext(ext);
    let _ = GetConsumerListByGroupRequestHeader::from_ext(ext);
    let _ = NotifyConsumerIdsChangedRequestHeader::from_ext(ext);
    let _ = GetMaxOffsetRequestHeader::from_ext(ext);
    let _ = GetMinOffsetRequestHeader::from_ext(ext);
    let _ = SearchOffsetRequestHeader::from_ext(ext);
    let _ = GetRouteInfoRequestHeader::from_ext(ext);
    if let Err(e) = QueryConsumerOffsetRequestHeader::from_ext(ext) {
        let _ = (e.field(), e.to_string());
    }
    let _ = RemotingCommand::not_supported(cmd);
    check_bodies(&cmd.body);
}

fn check_bodies(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = normalize_fastjson(text);
    }
    if let Ok(route) = TopicRouteData::decode(data) {
        let standard =
            TopicRouteData::decode(&route.encode_route(true)).expect("standard route re-decodes");
        let legacy =
            TopicRouteData::decode(&route.encode_route(false)).expect("legacy route re-decodes");
        assert_eq!(standard, legacy, "route forms differ");
    }
    if let Ok(hb) = HeartbeatData::decode(data) {
        HeartbeatData::decode(&hb.encode()).expect("heartbeat re-decodes");
    }
    let _ = ConsumerListBody::decode(data);
    let _ = LockBatchRequestBody::decode(data);
    let _ = UnlockBatchRequestBody::decode(data);
    let _ = LockBatchResponseBody::decode(data);
    let _ = MessageQueue::decode(data);
}
