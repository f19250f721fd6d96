//! Conversions between the wire's types (bodies, headers, response codes) and skiff's domain
//! types (`skiff_actors::broker_api`, `logic::queue`, the store), written once for the server
//! side ([`super::processor`]) and the client side ([`super::remote_broker`]).
//!
//! They live here rather than in `body` and `headers` because those stay free of the actor and
//! storage crates: the fuzz build compiles them on their own.

use skiff_actors::broker_api::ExpressionType;
use skiff_actors::broker_api::{
    self, ConsumerHeartbeat, NoNewMessage, OffsetMoved, PullRequest, PullStatus, SendResult,
    SendStatus,
};
use skiff_actors::logic::delay::{is_dlq_topic, is_retry_topic};
use skiff_actors::logic::filter::Subscription;
use skiff_actors::logic::queue::MessageQueue;
use skiff_storage::message::{property, property::DELAY, MessageToAppend};
use skiff_storage::pop_state::RequestMode;
use skiff_storage::store::BoundaryType as StoreBoundary;

use super::body::{
    self, BatchMessage, ConsumeFromWhere, ConsumerData, HeartbeatData, MessageQueue as WireQueue,
    MessageRequestMode, SubscriptionData,
};
use super::codes::{pull_sys_flag, response as code};
use super::headers::{BoundaryType, PullMessageRequestHeader, SendMessageResponseHeader};

/// A count, id or offset for an i32 wire field; values past `i32::MAX` saturate.
pub fn clamp_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// An offset or timestamp for an i64 wire field; values past `i64::MAX` saturate.
pub fn clamp_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl From<&MessageQueue> for WireQueue {
    fn from(queue: &MessageQueue) -> Self {
        WireQueue {
            topic: queue.topic.clone(),
            broker_name: queue.broker_name.clone(),
            queue_id: clamp_i32(queue.queue_id),
        }
    }
}

/// A wire `MessageQueue` whose queue id is negative: it names no queue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("queue id {queue_id} of topic {topic} is negative")]
pub struct NegativeQueueId {
    pub topic: String,
    pub queue_id: i32,
}

impl TryFrom<&WireQueue> for MessageQueue {
    type Error = NegativeQueueId;

    fn try_from(queue: &WireQueue) -> Result<Self, Self::Error> {
        let queue_id = u32::try_from(queue.queue_id).map_err(|_| NegativeQueueId {
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
        })?;
        Ok(MessageQueue::new(
            queue.topic.clone(),
            queue.broker_name.clone(),
            queue_id,
        ))
    }
}

/// The response code and remark a pull answer carries for `status`, as Java's broker answers:
/// the remark is the name of the store's `GetMessageStatus` (`docs/wire-protocol.md` §4.1).
pub fn pull_status_answer(status: PullStatus) -> (i32, &'static str) {
    match status {
        PullStatus::Found => (code::SUCCESS, "FOUND"),
        PullStatus::NoMatchedMessage => (code::PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE"),
        PullStatus::NoNewMessage(NoNewMessage::EmptyQueue) => {
            (code::PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE")
        }
        PullStatus::NoNewMessage(NoNewMessage::CaughtUp) => {
            (code::PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE")
        }
        PullStatus::OffsetMoved(OffsetMoved::EmptyQueue) => {
            (code::PULL_OFFSET_MOVED, "NO_MESSAGE_IN_QUEUE")
        }
        PullStatus::OffsetMoved(OffsetMoved::TooSmall) => {
            (code::PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL")
        }
        PullStatus::OffsetMoved(OffsetMoved::OverflowBadly) => {
            (code::PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY")
        }
        PullStatus::OffsetMoved(OffsetMoved::PendingReset) => {
            (code::PULL_OFFSET_MOVED, "OFFSET_RESET")
        }
    }
}

/// The pull status a response code and remark stand for; `None` for any other code, which is an
/// error answer. The code decides the outer status, as in Java's
/// `MQClientAPIImpl.processPullResponse`; the remark, the broker's `GetMessageStatus` name,
/// decides the reason. Java's statuses skiff's store never reports read as their nearest kin
/// (NO_MATCHED_LOGIC_QUEUE as an empty queue, OFFSET_FOUND_NULL as caught up). A remark this side
/// does not know, or none, reads as `CaughtUp` under PULL_NOT_FOUND and `PendingReset` under
/// PULL_OFFSET_MOVED: the broker moved the offset for its own reason. A consumer acts on the
/// outer status only, so the fallback changes nothing but logs.
pub fn pull_status_of(response_code: i32, remark: Option<&str>) -> Option<PullStatus> {
    let remark = remark.unwrap_or_default();
    match response_code {
        code::SUCCESS => Some(PullStatus::Found),
        code::PULL_RETRY_IMMEDIATELY => Some(PullStatus::NoMatchedMessage),
        code::PULL_NOT_FOUND => Some(PullStatus::NoNewMessage(match remark {
            "NO_MESSAGE_IN_QUEUE" | "NO_MATCHED_LOGIC_QUEUE" => NoNewMessage::EmptyQueue,
            _ => NoNewMessage::CaughtUp,
        })),
        code::PULL_OFFSET_MOVED => Some(PullStatus::OffsetMoved(match remark {
            "NO_MESSAGE_IN_QUEUE" | "NO_MATCHED_LOGIC_QUEUE" => OffsetMoved::EmptyQueue,
            "OFFSET_TOO_SMALL" => OffsetMoved::TooSmall,
            "OFFSET_OVERFLOW_BADLY" => OffsetMoved::OverflowBadly,
            _ => OffsetMoved::PendingReset,
        })),
        _ => None,
    }
}

impl From<broker_api::ConsumeType> for body::ConsumeType {
    fn from(kind: broker_api::ConsumeType) -> Self {
        match kind {
            broker_api::ConsumeType::Passively => body::ConsumeType::ConsumePassively,
            broker_api::ConsumeType::Actively => body::ConsumeType::ConsumeActively,
        }
    }
}

impl From<body::ConsumeType> for broker_api::ConsumeType {
    /// Pop consumers are served as push consumers: skiff has no pop path.
    fn from(kind: body::ConsumeType) -> Self {
        match kind {
            body::ConsumeType::ConsumeActively => broker_api::ConsumeType::Actively,
            body::ConsumeType::ConsumePassively | body::ConsumeType::ConsumePop => {
                broker_api::ConsumeType::Passively
            }
        }
    }
}

impl From<broker_api::MessageModel> for body::MessageModel {
    fn from(model: broker_api::MessageModel) -> Self {
        match model {
            broker_api::MessageModel::Clustering => body::MessageModel::Clustering,
            broker_api::MessageModel::Broadcasting => body::MessageModel::Broadcasting,
        }
    }
}

impl From<body::MessageModel> for broker_api::MessageModel {
    fn from(model: body::MessageModel) -> Self {
        match model {
            body::MessageModel::Clustering => broker_api::MessageModel::Clustering,
            body::MessageModel::Broadcasting => broker_api::MessageModel::Broadcasting,
        }
    }
}

impl From<StoreBoundary> for BoundaryType {
    fn from(boundary: StoreBoundary) -> Self {
        match boundary {
            StoreBoundary::Lower => BoundaryType::Lower,
            StoreBoundary::Upper => BoundaryType::Upper,
        }
    }
}

impl From<BoundaryType> for StoreBoundary {
    fn from(boundary: BoundaryType) -> Self {
        match boundary {
            BoundaryType::Lower => StoreBoundary::Lower,
            BoundaryType::Upper => StoreBoundary::Upper,
        }
    }
}

/// The PULL_MESSAGE header for a pull: its sysFlag says which of the optional parts (commit
/// offset, long-poll suspension, subscription) the request carries.
pub fn pull_request_header(request: &PullRequest, sub_version: i64) -> PullMessageRequestHeader {
    let mut sys_flag = 0;
    if request.commit_offset.is_some() {
        sys_flag |= pull_sys_flag::COMMIT_OFFSET;
    }
    if request.suspend_timeout.is_some() {
        sys_flag |= pull_sys_flag::SUSPEND;
    }
    if request.subscription.is_some() {
        sys_flag |= pull_sys_flag::SUBSCRIPTION;
    }
    let suspend = request.suspend_timeout.unwrap_or_default();
    PullMessageRequestHeader {
        consumer_group: request.group.clone(),
        topic: request.topic.clone(),
        queue_id: clamp_i32(request.queue_id),
        queue_offset: clamp_i64(request.queue_offset),
        max_msg_nums: clamp_i32(request.max_messages),
        sys_flag,
        commit_offset: request.commit_offset.map_or(0, clamp_i64),
        suspend_timeout_millis: clamp_i64(u64::try_from(suspend.as_millis()).unwrap_or(u64::MAX)),
        subscription: request.subscription.clone(),
        sub_version,
        expression_type: Some(request.expression_type.as_str().to_owned()),
        max_msg_bytes: None,
        request_source: None,
        proxy_forward_client_id: None,
    }
}

/// The HEART_BEAT body that registers one consumer.
pub fn heartbeat_data(heartbeat: &ConsumerHeartbeat) -> HeartbeatData {
    HeartbeatData {
        client_id: heartbeat.client_id.clone(),
        producer_data_set: Vec::new(),
        consumer_data_set: vec![consumer_data(heartbeat)],
        heartbeat_fingerprint: 0,
        without_sub: false,
    }
}

/// A consumer's `ConsumerData`, its subscriptions with the tags and tag hash codes Java's
/// broker filters with: what a heartbeat sends, and what a connection listing shows of a
/// consumer whichever door it came by.
pub fn consumer_data(heartbeat: &ConsumerHeartbeat) -> ConsumerData {
    let subscription_data_set = heartbeat
        .subscriptions
        .iter()
        .map(|s| {
            // A SQL92 expression travels as written, with no tags (Java's `FilterAPI.build`).
            let parsed = match s.expression_type {
                ExpressionType::Tag => {
                    Subscription::parse(s.topic.clone(), &s.expression, s.sub_version)
                }
                ExpressionType::Sql92 => Subscription {
                    topic: s.topic.clone(),
                    expression_type: ExpressionType::Sql92,
                    expression: s.expression.clone(),
                    selector: None,
                    tags: Default::default(),
                    tag_codes: Default::default(),
                    sub_version: s.sub_version,
                },
            };
            SubscriptionData {
                class_filter_mode: false,
                topic: s.topic.clone(),
                sub_string: parsed.expression.clone(),
                tags_set: parsed.tags.iter().cloned().collect(),
                // Java's String.hashCode values, stored widened; the low 32 bits are the hash.
                code_set: parsed.tag_codes.iter().map(|c| *c as i32).collect(),
                sub_version: s.sub_version,
                expression_type: s.expression_type.as_str().to_owned(),
            }
        })
        .collect();
    ConsumerData {
        group_name: heartbeat.group.clone(),
        consume_type: heartbeat.consume_type.into(),
        message_model: heartbeat.message_model.into(),
        consume_from_where: ConsumeFromWhere::from_name(&heartbeat.consume_from_where)
            .unwrap_or_default(),
        subscription_data_set,
        unit_mode: false,
    }
}

/// Splits a send into requests: runs of messages for the same topic and queue with the same
/// header fields become one batch; delayed and retry messages (which Java refuses in batches)
/// and everything else go one by one. Order is kept.
pub fn batches(messages: Vec<MessageToAppend>) -> Vec<Vec<MessageToAppend>> {
    fn batchable(m: &MessageToAppend) -> bool {
        m.reconsume_times == 0
            && !is_retry_topic(&m.topic)
            && !is_dlq_topic(&m.topic)
            && property(&m.properties, DELAY).is_none()
    }
    let mut out: Vec<Vec<MessageToAppend>> = Vec::new();
    for message in messages {
        if let Some(last) = out.last_mut() {
            let head = &last[0];
            if batchable(head)
                && batchable(&message)
                && head.topic == message.topic
                && head.queue_id == message.queue_id
                && head.sys_flag == message.sys_flag
            {
                last.push(message);
                continue;
            }
        }
        out.push(vec![message]);
    }
    out
}

/// A send answer whose queue id or offset is negative: it says nowhere the messages landed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("send answer has {field} {value}")]
pub struct NegativeSendAnswer {
    pub field: &'static str,
    pub value: i64,
}

/// Send results from a send answer: one per message, offsets consecutive from the header's,
/// offset message ids from the comma-separated `msgId` (a batch answer lists one per message),
/// each with the status the answer's code said.
pub fn send_results(
    header: &SendMessageResponseHeader,
    count: usize,
    status: SendStatus,
) -> Result<Vec<SendResult>, NegativeSendAnswer> {
    let queue_id = u32::try_from(header.queue_id).map_err(|_| NegativeSendAnswer {
        field: "queueId",
        value: i64::from(header.queue_id),
    })?;
    let first = u64::try_from(header.queue_offset).map_err(|_| NegativeSendAnswer {
        field: "queueOffset",
        value: header.queue_offset,
    })?;
    let ids: Vec<&str> = header.msg_id.split(',').map(str::trim).collect();
    (0..count)
        .map(|i| {
            let id = if ids.len() == count {
                ids[i]
            } else {
                ids.first().copied().unwrap_or_default()
            };
            Ok(SendResult {
                // The answer names no broker; the caller knows where it sent.
                broker_name: String::new(),
                queue_id,
                queue_offset: first + i as u64,
                physical_offset: physical_offset_of(id).unwrap_or(0),
                offset_msg_id: id.to_owned(),
                status,
                // A batch is never a timer: the one message of a single send.
                recall_handle: header.recall_handle.clone().filter(|_| count == 1),
            })
        })
        .collect()
}

/// The commit-log offset in an offset message id: its last 16 hex digits (§6.5).
pub(crate) fn physical_offset_of(offset_msg_id: &str) -> Option<u64> {
    let tail = offset_msg_id.get(offset_msg_id.len().checked_sub(16)?..)?;
    u64::from_str_radix(tail, 16).ok()
}

impl BatchMessage for MessageToAppend {
    fn flag(&self) -> i32 {
        self.flag
    }

    fn body(&self) -> &[u8] {
        &self.body
    }

    fn properties(&self) -> &str {
        &self.properties
    }
}

impl From<RequestMode> for MessageRequestMode {
    fn from(mode: RequestMode) -> Self {
        match mode {
            RequestMode::Pull => MessageRequestMode::Pull,
            RequestMode::Pop => MessageRequestMode::Pop,
        }
    }
}

impl From<MessageRequestMode> for RequestMode {
    fn from(mode: MessageRequestMode) -> Self {
        match mode {
            MessageRequestMode::Pull => RequestMode::Pull,
            MessageRequestMode::Pop => RequestMode::Pop,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::body::JsonBody;
    use bytes::Bytes;
    use skiff_actors::broker_api::{
        ConsumeType as ApiConsumeType, MessageModel as ApiMessageModel, SubscriptionEntry,
    };
    use skiff_actors::logic::delay::retry_topic;
    use skiff_storage::message::encode_properties;
    use std::net::SocketAddr;

    fn message(topic: &str, queue_id: u32, body: &str) -> MessageToAppend {
        MessageToAppend {
            topic: topic.to_owned(),
            queue_id,
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1,
            born_host: SocketAddr::from(([127, 0, 0, 1], 0)),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            properties: encode_properties(&[("TAGS", "a")]),
            body: Bytes::from(body.to_owned()),
        }
    }

    #[test]
    fn batches_group_runs_of_one_queue_only() {
        let mut delayed = message("T", 0, "d");
        delayed
            .properties
            .push_str(&encode_properties(&[(DELAY, "3")]));
        let groups = batches(vec![
            message("T", 0, "a"),
            message("T", 0, "b"),
            message("T", 1, "c"),
            delayed,
            message("T", 0, "e"),
            message(&retry_topic("g"), 0, "f"),
            message(&retry_topic("g"), 0, "g"),
        ]);
        let sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![2, 1, 1, 1, 1, 1]);
        let bodies: Vec<&[u8]> = groups.iter().flatten().map(|m| &m.body[..]).collect();
        assert_eq!(bodies, vec![&b"a"[..], b"b", b"c", b"d", b"e", b"f", b"g"]);
    }

    #[test]
    fn send_results_split_batch_ids() {
        let header = SendMessageResponseHeader {
            msg_id: "7F00000100002A9F00000000000001CE,7F00000100002A9F0000000000000200".into(),
            queue_id: 2,
            queue_offset: 10,
            ..Default::default()
        };
        let results = send_results(&header, 2, SendStatus::Ok).expect("valid answer");
        assert_eq!(results[0].queue_offset, 10);
        assert_eq!(results[1].queue_offset, 11);
        assert_eq!(results[0].physical_offset, 0x1CE);
        assert_eq!(results[1].physical_offset, 0x200);
        assert_eq!(results[1].queue_id, 2);
        let negative = SendMessageResponseHeader {
            queue_offset: -1,
            ..header
        };
        assert_eq!(
            send_results(&negative, 1, SendStatus::Ok).map_err(|e| e.to_string()),
            Err("send answer has queueOffset -1".to_owned())
        );
        assert_eq!(physical_offset_of("short"), None);
    }

    #[test]
    fn heartbeat_body_carries_tags_and_codes() {
        let heartbeat = ConsumerHeartbeat {
            client_id: "c1".into(),
            group: "g".into(),
            consume_type: ApiConsumeType::Passively,
            message_model: ApiMessageModel::Broadcasting,
            consume_from_where: "CONSUME_FROM_FIRST_OFFSET".into(),
            subscriptions: vec![
                SubscriptionEntry {
                    topic: "T".into(),
                    expression_type: ExpressionType::Tag,
                    expression: "TagA || TagB".into(),
                    sub_version: 7,
                },
                SubscriptionEntry {
                    topic: retry_topic("g"),
                    expression_type: ExpressionType::Tag,
                    expression: "*".into(),
                    sub_version: 7,
                },
            ],
        };
        let json: serde_json::Value =
            serde_json::from_slice(&heartbeat_data(&heartbeat).encode()).expect("json");
        let consumer = &json["consumerDataSet"][0];
        assert_eq!(json["clientID"], "c1");
        assert_eq!(consumer["consumeType"], "CONSUME_PASSIVELY");
        assert_eq!(consumer["messageModel"], "BROADCASTING");
        assert_eq!(consumer["consumeFromWhere"], "CONSUME_FROM_FIRST_OFFSET");
        let sub = &consumer["subscriptionDataSet"][0];
        assert_eq!(sub["tagsSet"], serde_json::json!(["TagA", "TagB"]));
        // Java: "TagA".hashCode() == 2598919, "TagB".hashCode() == 2598920.
        assert_eq!(sub["codeSet"], serde_json::json!([2598919, 2598920]));
        assert_eq!(sub["subVersion"], 7);
        assert_eq!(sub["expressionType"], "TAG");
        assert_eq!(consumer["subscriptionDataSet"][1]["subString"], "*");
    }

    #[test]
    fn sql92_subscriptions_travel_as_written_without_tags() {
        let heartbeat = ConsumerHeartbeat {
            client_id: "c1".into(),
            group: "g".into(),
            consume_type: ApiConsumeType::Passively,
            message_model: ApiMessageModel::Clustering,
            consume_from_where: "CONSUME_FROM_FIRST_OFFSET".into(),
            subscriptions: vec![SubscriptionEntry {
                topic: "T".into(),
                expression_type: ExpressionType::Sql92,
                expression: "a > 5 OR TAGS = 'x || y'".into(),
                sub_version: 3,
            }],
        };
        let json: serde_json::Value =
            serde_json::from_slice(&heartbeat_data(&heartbeat).encode()).expect("json");
        let sub = &json["consumerDataSet"][0]["subscriptionDataSet"][0];
        assert_eq!(sub["expressionType"], "SQL92");
        assert_eq!(sub["subString"], "a > 5 OR TAGS = 'x || y'");
        assert_eq!(sub["tagsSet"], serde_json::json!([]));
        assert_eq!(sub["codeSet"], serde_json::json!([]));

        let mut pull = PullRequest {
            group: "g".into(),
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: 0,
            queue_offset: 0,
            max_messages: 32,
            commit_offset: None,
            suspend_timeout: None,
            subscription: Some("a > 5".into()),
            expression_type: ExpressionType::Sql92,
        };
        let header = pull_request_header(&pull, 3);
        assert_eq!(header.expression_type.as_deref(), Some("SQL92"));
        assert_eq!(header.subscription.as_deref(), Some("a > 5"));
        pull.expression_type = ExpressionType::Tag;
        assert_eq!(
            pull_request_header(&pull, 3).expression_type.as_deref(),
            Some("TAG")
        );
    }

    #[test]
    fn pull_header_flags_follow_the_request() {
        let mut pull = PullRequest {
            group: "g".into(),
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: 1,
            queue_offset: 3,
            max_messages: 32,
            commit_offset: Some(5),
            suspend_timeout: Some(std::time::Duration::from_millis(100)),
            subscription: Some("*".into()),
            expression_type: ExpressionType::Tag,
        };
        let header = pull_request_header(&pull, 99);
        assert_eq!(header.sys_flag, 7);
        assert_eq!(
            (
                header.commit_offset,
                header.suspend_timeout_millis,
                header.sub_version
            ),
            (5, 100, 99)
        );
        pull.commit_offset = None;
        pull.suspend_timeout = None;
        pull.subscription = None;
        let header = pull_request_header(&pull, 0);
        assert_eq!((header.sys_flag, header.commit_offset), (0, 0));
    }

    #[test]
    fn a_message_to_append_is_batched_as_its_flag_body_and_properties() {
        let message = MessageToAppend {
            topic: "T".to_owned(),
            queue_id: 0,
            flag: 5,
            sys_flag: 0,
            born_timestamp: 1,
            born_host: SocketAddr::from(([127, 0, 0, 1], 0)),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            properties: "TAGS\u{1}a\u{2}".to_owned(),
            body: Bytes::from_static(b"hello"),
        };
        let entry = body::BatchEntry {
            flag: 5,
            body: Bytes::from_static(b"hello"),
            properties: "TAGS\u{1}a\u{2}".to_owned(),
        };
        assert_eq!(
            body::encode_batch(&[message.clone(), message]),
            body::encode_batch(&[entry.clone(), entry])
        );
    }

    #[test]
    fn every_pull_status_goes_to_the_wire_and_back() {
        use super::NoNewMessage as New;
        use super::OffsetMoved as Moved;
        use PullStatus::*;
        #[rustfmt::skip]
        let table = [
            (Found, code::SUCCESS, "FOUND"),
            (NoMatchedMessage, code::PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE"),
            (NoNewMessage(New::EmptyQueue), code::PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE"),
            (NoNewMessage(New::CaughtUp), code::PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE"),
            (OffsetMoved(Moved::EmptyQueue), code::PULL_OFFSET_MOVED, "NO_MESSAGE_IN_QUEUE"),
            (OffsetMoved(Moved::TooSmall), code::PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL"),
            (OffsetMoved(Moved::OverflowBadly), code::PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY"),
            (OffsetMoved(Moved::PendingReset), code::PULL_OFFSET_MOVED, "OFFSET_RESET"),
        ];
        for (status, answer, remark) in table {
            assert_eq!(pull_status_answer(status), (answer, remark), "{status:?}");
            assert_eq!(
                pull_status_of(answer, Some(remark)),
                Some(status),
                "{remark}"
            );
        }
    }

    #[test]
    fn pull_answers_from_java_or_unknown_remarks_read_by_their_code() {
        use super::NoNewMessage as New;
        use super::OffsetMoved as Moved;
        use PullStatus::*;
        #[rustfmt::skip]
        let table = [
            // Java statuses skiff's store never reports.
            (code::PULL_RETRY_IMMEDIATELY, Some("MESSAGE_WAS_REMOVING"), Some(NoMatchedMessage)),
            (code::PULL_NOT_FOUND, Some("OFFSET_FOUND_NULL"), Some(NoNewMessage(New::CaughtUp))),
            (code::PULL_NOT_FOUND, Some("NO_MATCHED_LOGIC_QUEUE"), Some(NoNewMessage(New::EmptyQueue))),
            (code::PULL_OFFSET_MOVED, Some("NO_MATCHED_LOGIC_QUEUE"), Some(OffsetMoved(Moved::EmptyQueue))),
            // The documented fallbacks.
            (code::SUCCESS, None, Some(Found)),
            (code::PULL_NOT_FOUND, Some("SOMETHING_NEW"), Some(NoNewMessage(New::CaughtUp))),
            (code::PULL_NOT_FOUND, None, Some(NoNewMessage(New::CaughtUp))),
            (code::PULL_OFFSET_MOVED, Some("SOMETHING_NEW"), Some(OffsetMoved(Moved::PendingReset))),
            (code::PULL_OFFSET_MOVED, None, Some(OffsetMoved(Moved::PendingReset))),
            // Error answers are no pull status.
            (code::SUBSCRIPTION_NOT_LATEST, Some("FOUND"), None),
            (code::SYSTEM_ERROR, None, None),
        ];
        for (answer, remark, status) in table {
            assert_eq!(
                pull_status_of(answer, remark),
                status,
                "{answer} {remark:?}"
            );
        }
    }

    #[test]
    fn queues_convert_and_negative_ids_name_no_queue() {
        let queue = MessageQueue::new("T", "b", 3);
        let wire = WireQueue::from(&queue);
        assert_eq!((wire.topic.as_str(), wire.queue_id), ("T", 3));
        assert_eq!(MessageQueue::try_from(&wire), Ok(queue));
        let far = WireQueue::from(&MessageQueue::new("T", "b", u32::MAX));
        assert_eq!(far.queue_id, i32::MAX);
        let negative = WireQueue {
            queue_id: -1,
            ..wire
        };
        assert!(MessageQueue::try_from(&negative).is_err());
    }

    #[test]
    fn clamps_saturate() {
        assert_eq!(clamp_i32(7), 7);
        assert_eq!(clamp_i32(u32::MAX), i32::MAX);
        assert_eq!(clamp_i64(u64::MAX), i64::MAX);
    }
}
