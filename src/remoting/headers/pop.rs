//! Headers of pop consumption (`docs/wire-protocol.md` §4.6): POP_MESSAGE, ACK_MESSAGE,
//! CHANGE_MESSAGE_INVISIBLETIME and NOTIFICATION, with Java's field names.

use super::{CustomHeader, ExtFields, HeaderError, Reader, Writer};

/// POP_MESSAGE (200050) request header (Java's `PopMessageRequestHeader`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PopMessageRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    /// -1: every queue of the topic.
    pub queue_id: i32,
    pub max_msg_nums: i32,
    pub invisible_time: i64,
    /// How long the broker may hold the pop when nothing is there (ms); 0 answers at once.
    pub poll_time: i64,
    pub born_time: i64,
    /// `ConsumeInitMode`: 0 MIN (oldest message), 1 MAX (newest).
    pub init_mode: i32,
    pub exp_type: Option<String>,
    pub exp: Option<String>,
    pub order: bool,
    pub attempt_id: Option<String>,
}

/// `ConsumeInitMode.MIN`.
pub const INIT_MODE_MIN: i32 = 0;

impl CustomHeader for PopMessageRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(PopMessageRequestHeader {
            consumer_group: r.req_str("consumerGroup")?,
            topic: r.req_str("topic")?,
            queue_id: r.req_num("queueId")?,
            max_msg_nums: r.req_num("maxMsgNums")?,
            invisible_time: r.req_num("invisibleTime")?,
            poll_time: r.req_num("pollTime")?,
            born_time: r.req_num("bornTime")?,
            init_mode: r.req_num("initMode")?,
            exp_type: r.opt_str("expType"),
            exp: r.opt_str("exp"),
            order: r.opt_bool("order").unwrap_or(false),
            attempt_id: r.opt_str("attemptId"),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("consumerGroup", &self.consumer_group)
            .put("topic", &self.topic)
            .put("queueId", self.queue_id)
            .put("maxMsgNums", self.max_msg_nums)
            .put("invisibleTime", self.invisible_time)
            .put("pollTime", self.poll_time)
            .put("bornTime", self.born_time)
            .put("initMode", self.init_mode)
            .put_opt("expType", self.exp_type.as_ref())
            .put_opt("exp", self.exp.as_ref())
            .put("order", self.order)
            .put_opt("attemptId", self.attempt_id.as_ref())
            .done()
    }
}

/// POP_MESSAGE response header: what the client builds each message's receipt from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PopMessageResponseHeader {
    pub pop_time: i64,
    pub invisible_time: i64,
    pub revive_qid: i32,
    pub rest_num: i64,
    pub start_offset_info: String,
    pub msg_offset_info: String,
    pub order_count_info: Option<String>,
}

impl CustomHeader for PopMessageResponseHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(PopMessageResponseHeader {
            pop_time: r.req_num("popTime")?,
            invisible_time: r.req_num("invisibleTime")?,
            revive_qid: r.req_num("reviveQid")?,
            rest_num: r.req_num("restNum")?,
            start_offset_info: r.opt_str("startOffsetInfo").unwrap_or_default(),
            msg_offset_info: r.opt_str("msgOffsetInfo").unwrap_or_default(),
            order_count_info: r.opt_str("orderCountInfo"),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("popTime", self.pop_time)
            .put("invisibleTime", self.invisible_time)
            .put("reviveQid", self.revive_qid)
            .put("restNum", self.rest_num)
            .put("startOffsetInfo", &self.start_offset_info)
            .put("msgOffsetInfo", &self.msg_offset_info)
            .put_opt("orderCountInfo", self.order_count_info.as_ref())
            .done()
    }
}

/// ACK_MESSAGE (200051) request header; with `invisible_time`, CHANGE_MESSAGE_INVISIBLETIME's
/// (200053). `topic` is the topic the message was read from (the client resolves the receipt's
/// kind); `extra_info` is the receipt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AckMessageRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: i32,
    pub extra_info: String,
    pub offset: i64,
    /// Only in CHANGE_MESSAGE_INVISIBLETIME.
    pub invisible_time: Option<i64>,
}

impl CustomHeader for AckMessageRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(AckMessageRequestHeader {
            consumer_group: r.req_str("consumerGroup")?,
            topic: r.req_str("topic")?,
            queue_id: r.req_num("queueId")?,
            extra_info: r.req_str("extraInfo")?,
            offset: r.req_num("offset")?,
            invisible_time: r.opt_num("invisibleTime")?,
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("consumerGroup", &self.consumer_group)
            .put("topic", &self.topic)
            .put("queueId", self.queue_id)
            .put("extraInfo", &self.extra_info)
            .put("offset", self.offset)
            .put_opt("invisibleTime", self.invisible_time)
            .done()
    }
}

/// CHANGE_MESSAGE_INVISIBLETIME response header: the new receipt's times.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChangeInvisibleTimeResponseHeader {
    pub pop_time: i64,
    pub invisible_time: i64,
    pub revive_qid: i32,
}

impl CustomHeader for ChangeInvisibleTimeResponseHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(ChangeInvisibleTimeResponseHeader {
            pop_time: r.req_num("popTime")?,
            invisible_time: r.req_num("invisibleTime")?,
            revive_qid: r.req_num("reviveQid")?,
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("popTime", self.pop_time)
            .put("invisibleTime", self.invisible_time)
            .put("reviveQid", self.revive_qid)
            .done()
    }
}

/// NOTIFICATION (200054) request header.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NotificationRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: i32,
    pub poll_time: i64,
    pub born_time: i64,
    pub order: bool,
    pub attempt_id: Option<String>,
}

impl CustomHeader for NotificationRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(NotificationRequestHeader {
            consumer_group: r.req_str("consumerGroup")?,
            topic: r.req_str("topic")?,
            queue_id: r.req_num("queueId")?,
            poll_time: r.req_num("pollTime")?,
            born_time: r.req_num("bornTime")?,
            order: r.opt_bool("order").unwrap_or(false),
            attempt_id: r.opt_str("attemptId"),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("consumerGroup", &self.consumer_group)
            .put("topic", &self.topic)
            .put("queueId", self.queue_id)
            .put("pollTime", self.poll_time)
            .put("bornTime", self.born_time)
            .put("order", self.order)
            .put_opt("attemptId", self.attempt_id.as_ref())
            .done()
    }
}

/// NOTIFICATION response header.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NotificationResponseHeader {
    pub has_msg: bool,
    pub polling_full: bool,
}

impl CustomHeader for NotificationResponseHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(NotificationResponseHeader {
            has_msg: r.opt_bool("hasMsg").unwrap_or(false),
            polling_full: r.opt_bool("pollingFull").unwrap_or(false),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("hasMsg", self.has_msg)
            .put("pollingFull", self.polling_full)
            .done()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(pairs: &[(&str, &str)]) -> ExtFields {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_java_pop_request_decodes_and_round_trips() {
        let fields = ext(&[
            ("consumerGroup", "g"),
            ("topic", "t"),
            ("queueId", "-1"),
            ("maxMsgNums", "32"),
            ("invisibleTime", "60000"),
            ("pollTime", "15000"),
            ("bornTime", "1700000000000"),
            ("initMode", "0"),
            ("expType", "TAG"),
            ("exp", "*"),
            ("order", "false"),
            ("bname", "broker-a"),
        ]);
        let header = PopMessageRequestHeader::from_ext(&fields).unwrap();
        assert_eq!(header.queue_id, -1);
        assert_eq!(header.poll_time, 15_000);
        assert!(!header.order);
        assert_eq!(
            PopMessageRequestHeader::from_ext(&header.to_ext()).unwrap(),
            header
        );
        let mut missing = fields.clone();
        missing.remove("invisibleTime");
        assert_eq!(
            PopMessageRequestHeader::from_ext(&missing),
            Err(HeaderError::Missing {
                field: "invisibleTime"
            })
        );
    }

    #[test]
    fn ack_and_change_invisible_share_one_header() {
        let ack = AckMessageRequestHeader {
            consumer_group: "g".into(),
            topic: "%RETRY%g_t".into(),
            queue_id: 0,
            extra_info: "0 1 2 3 1 b 0 0".into(),
            offset: 0,
            invisible_time: None,
        };
        assert_eq!(
            AckMessageRequestHeader::from_ext(&ack.to_ext()).unwrap(),
            ack
        );
        let change = AckMessageRequestHeader {
            invisible_time: Some(5_000),
            ..ack
        };
        assert_eq!(
            AckMessageRequestHeader::from_ext(&change.to_ext()).unwrap(),
            change
        );
    }
}
