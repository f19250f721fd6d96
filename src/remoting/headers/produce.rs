//! Headers of the produce side (`docs/wire-protocol.md` §3.1, §3.14, §3.15): sends, their
//! answer, transactions' END_TRANSACTION and CHECK_TRANSACTION_STATE, and the reply a broker
//! pushes to a requester.

use super::{CustomHeader, ExtFields, HeaderError, Reader, Writer};
use crate::remoting::codes;
use crate::remoting::frame::RemotingCommand;

/// SEND_MESSAGE (10) V1 header and SEND_MESSAGE_V2 (310) / SEND_BATCH_MESSAGE (320) V2 header
/// (single-letter keys), as one struct (§3.1).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SendMessageRequestHeader {
    pub producer_group: String,
    pub topic: String,
    pub default_topic: String,
    pub default_topic_queue_nums: i32,
    pub queue_id: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub flag: i32,
    pub properties: Option<String>,
    pub reconsume_times: Option<i32>,
    pub unit_mode: Option<bool>,
    pub max_reconsume_times: Option<i32>,
    pub batch: Option<bool>,
    /// V2 `n`; V1 carries it as the RPC field `bname`.
    pub broker_name: Option<String>,
}

/// Java's properties length limit (i16 length prefix in the stored message, §6.4).
pub const MAX_PROPERTIES_LEN: usize = 32767;

impl SendMessageRequestHeader {
    /// Decodes the V2 (single-letter) form.
    pub fn from_v2_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(SendMessageRequestHeader {
            producer_group: r.req_str("a")?,
            topic: r.req_str("b")?,
            default_topic: r.req_str("c")?,
            default_topic_queue_nums: r.req_num("d")?,
            queue_id: r.req_num("e")?,
            sys_flag: r.req_num("f")?,
            born_timestamp: r.req_num("g")?,
            flag: r.req_num("h")?,
            properties: r.opt_str("i"),
            reconsume_times: r.opt_num("j")?,
            unit_mode: r.opt_bool("k"),
            max_reconsume_times: r.opt_num("l")?,
            batch: r.opt_bool("m"),
            broker_name: r.opt_str("n"),
        })
    }

    /// Encodes the V2 (single-letter) form.
    pub fn to_v2_ext(&self) -> ExtFields {
        Writer::default()
            .put("a", &self.producer_group)
            .put("b", &self.topic)
            .put("c", &self.default_topic)
            .put("d", self.default_topic_queue_nums)
            .put("e", self.queue_id)
            .put("f", self.sys_flag)
            .put("g", self.born_timestamp)
            .put("h", self.flag)
            .put_opt("i", self.properties.as_ref())
            .put_opt("j", self.reconsume_times)
            .put_opt("k", self.unit_mode)
            .put_opt("l", self.max_reconsume_times)
            .put_opt("m", self.batch)
            .put_opt("n", self.broker_name.as_ref())
            .done()
    }

    /// Decodes by request code: V2 for SEND_MESSAGE_V2, SEND_BATCH_MESSAGE and
    /// SEND_REPLY_MESSAGE_V2, V1 otherwise;
    /// a V1 code carrying only V2 keys is read as V2.
    pub fn from_request(cmd: &RemotingCommand) -> Result<Self, HeaderError> {
        use codes::request;
        let ext = &cmd.ext_fields;
        let v2 = matches!(
            cmd.code,
            request::SEND_MESSAGE_V2 | request::SEND_BATCH_MESSAGE | request::SEND_REPLY_MESSAGE_V2
        ) || (!ext.contains_key("producerGroup") && ext.contains_key("a"));
        if v2 {
            Self::from_v2_ext(ext)
        } else {
            Self::from_ext(ext)
        }
    }

    /// True when `properties` is longer than Java accepts (answer MESSAGE_ILLEGAL 13).
    pub fn properties_too_long(&self) -> bool {
        self.properties
            .as_ref()
            .is_some_and(|p| p.len() > MAX_PROPERTIES_LEN)
    }
}

impl CustomHeader for SendMessageRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(SendMessageRequestHeader {
            producer_group: r.req_str("producerGroup")?,
            topic: r.req_str("topic")?,
            default_topic: r.req_str("defaultTopic")?,
            default_topic_queue_nums: r.req_num("defaultTopicQueueNums")?,
            queue_id: r.req_num("queueId")?,
            sys_flag: r.req_num("sysFlag")?,
            born_timestamp: r.req_num("bornTimestamp")?,
            flag: r.req_num("flag")?,
            properties: r.opt_str("properties"),
            reconsume_times: r.opt_num("reconsumeTimes")?,
            unit_mode: r.opt_bool("unitMode"),
            max_reconsume_times: r.opt_num("maxReconsumeTimes")?,
            batch: r.opt_bool("batch"),
            broker_name: r.opt_str("bname"),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("producerGroup", &self.producer_group)
            .put("topic", &self.topic)
            .put("defaultTopic", &self.default_topic)
            .put("defaultTopicQueueNums", self.default_topic_queue_nums)
            .put("queueId", self.queue_id)
            .put("sysFlag", self.sys_flag)
            .put("bornTimestamp", self.born_timestamp)
            .put("flag", self.flag)
            .put_opt("properties", self.properties.as_ref())
            .put_opt("reconsumeTimes", self.reconsume_times)
            .put_opt("unitMode", self.unit_mode)
            .put_opt("maxReconsumeTimes", self.max_reconsume_times)
            .put_opt("batch", self.batch)
            .put_opt("bname", self.broker_name.as_ref())
            .done()
    }
}

/// SEND_MESSAGE response header (§3.1). The broker also adds `MSG_REGION` and `TRACE_ON`
/// ext fields, which are not part of this header.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SendMessageResponseHeader {
    pub msg_id: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub transaction_id: Option<String>,
    pub batch_uniq_id: Option<String>,
    pub recall_handle: Option<String>,
}

impl CustomHeader for SendMessageResponseHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(SendMessageResponseHeader {
            msg_id: r.req_str("msgId")?,
            queue_id: r.req_num("queueId")?,
            queue_offset: r.req_num("queueOffset")?,
            transaction_id: r.opt_str("transactionId"),
            batch_uniq_id: r.opt_str("batchUniqId"),
            recall_handle: r.opt_str("recallHandle"),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("msgId", &self.msg_id)
            .put("queueId", self.queue_id)
            .put("queueOffset", self.queue_offset)
            .put_opt("transactionId", self.transaction_id.as_ref())
            .put_opt("batchUniqId", self.batch_uniq_id.as_ref())
            .put_opt("recallHandle", self.recall_handle.as_ref())
            .done()
    }
}

/// RECALL_MESSAGE (370) request header: the timer message a producer recalls, by the recall
/// handle its send answered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecallMessageRequestHeader {
    pub producer_group: Option<String>,
    pub topic: String,
    pub recall_handle: String,
    pub broker_name: Option<String>,
}

impl CustomHeader for RecallMessageRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(RecallMessageRequestHeader {
            producer_group: r.opt_str("producerGroup"),
            topic: r.req_str("topic")?,
            recall_handle: r.req_str("recallHandle")?,
            broker_name: r.opt_str("bname"),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put_opt("producerGroup", self.producer_group.as_ref())
            .put("topic", &self.topic)
            .put("recallHandle", &self.recall_handle)
            .put_opt("bname", self.broker_name.as_ref())
            .done()
    }
}

/// RECALL_MESSAGE (370) response header: the id of the message the handle named.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecallMessageResponseHeader {
    pub msg_id: String,
}

impl CustomHeader for RecallMessageResponseHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(RecallMessageResponseHeader {
            msg_id: r.req_str("msgId")?,
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default().put("msgId", &self.msg_id).done()
    }
}

/// END_TRANSACTION (37) request header (§3.14): what a producer decided about a half message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EndTransactionRequestHeader {
    pub topic: Option<String>,
    pub producer_group: String,
    /// The half's offset in the half queue (the half send's `queueOffset`).
    pub tran_state_table_offset: i64,
    /// The half's commit-log offset (from the half send's offset message id).
    pub commit_log_offset: i64,
    /// 8 commit, 12 rollback, 0 unknown.
    pub commit_or_rollback: i32,
    pub from_transaction_check: bool,
    pub msg_id: String,
    pub transaction_id: Option<String>,
    pub broker_name: Option<String>,
}

impl CustomHeader for EndTransactionRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(EndTransactionRequestHeader {
            topic: r.opt_str("topic"),
            producer_group: r.req_str("producerGroup")?,
            tran_state_table_offset: r.req_num("tranStateTableOffset")?,
            commit_log_offset: r.req_num("commitLogOffset")?,
            commit_or_rollback: r.req_num("commitOrRollback")?,
            from_transaction_check: r.opt_bool("fromTransactionCheck").unwrap_or(false),
            msg_id: r.req_str("msgId")?,
            transaction_id: r.opt_str("transactionId"),
            broker_name: r.opt_str("bname"),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put_opt("topic", self.topic.as_ref())
            .put("producerGroup", &self.producer_group)
            .put("tranStateTableOffset", self.tran_state_table_offset)
            .put("commitLogOffset", self.commit_log_offset)
            .put("commitOrRollback", self.commit_or_rollback)
            .put("fromTransactionCheck", self.from_transaction_check)
            .put("msgId", &self.msg_id)
            .put_opt("transactionId", self.transaction_id.as_ref())
            .put_opt("bname", self.broker_name.as_ref())
            .done()
    }
}

/// CHECK_TRANSACTION_STATE (39) request header, broker → producer (§3.14).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CheckTransactionStateRequestHeader {
    pub topic: Option<String>,
    pub tran_state_table_offset: i64,
    pub commit_log_offset: i64,
    pub msg_id: Option<String>,
    pub transaction_id: Option<String>,
    pub offset_msg_id: Option<String>,
    pub broker_name: Option<String>,
}

impl CustomHeader for CheckTransactionStateRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(CheckTransactionStateRequestHeader {
            topic: r.opt_str("topic"),
            tran_state_table_offset: r.req_num("tranStateTableOffset")?,
            commit_log_offset: r.req_num("commitLogOffset")?,
            msg_id: r.opt_str("msgId"),
            transaction_id: r.opt_str("transactionId"),
            offset_msg_id: r.opt_str("offsetMsgId"),
            broker_name: r.opt_str("bname").or_else(|| r.opt_str("brokerName")),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put_opt("topic", self.topic.as_ref())
            .put("tranStateTableOffset", self.tran_state_table_offset)
            .put("commitLogOffset", self.commit_log_offset)
            .put_opt("msgId", self.msg_id.as_ref())
            .put_opt("transactionId", self.transaction_id.as_ref())
            .put_opt("offsetMsgId", self.offset_msg_id.as_ref())
            .put_opt("bname", self.broker_name.as_ref())
            .done()
    }
}

/// PUSH_REPLY_MESSAGE_TO_CLIENT (326) request header, broker → requester: the reply's send
/// header as the replier sent it, plus where and when the broker took it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplyMessageRequestHeader {
    pub producer_group: String,
    pub topic: String,
    pub default_topic: String,
    pub default_topic_queue_nums: i32,
    pub queue_id: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub flag: i32,
    pub properties: Option<String>,
    pub reconsume_times: Option<i32>,
    pub unit_mode: bool,
    /// `ip:port` of the replier's connection.
    pub born_host: String,
    /// `ip:port` of the broker.
    pub store_host: String,
    pub store_timestamp: i64,
}

impl CustomHeader for ReplyMessageRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(ReplyMessageRequestHeader {
            producer_group: r.req_str("producerGroup")?,
            topic: r.req_str("topic")?,
            default_topic: r.req_str("defaultTopic")?,
            default_topic_queue_nums: r.req_num("defaultTopicQueueNums")?,
            queue_id: r.req_num("queueId")?,
            sys_flag: r.req_num("sysFlag")?,
            born_timestamp: r.req_num("bornTimestamp")?,
            flag: r.req_num("flag")?,
            properties: r.opt_str("properties"),
            reconsume_times: r.opt_num("reconsumeTimes")?,
            unit_mode: r.opt_bool("unitMode").unwrap_or(false),
            born_host: r.req_str("bornHost")?,
            store_host: r.req_str("storeHost")?,
            store_timestamp: r.req_num("storeTimestamp")?,
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("producerGroup", &self.producer_group)
            .put("topic", &self.topic)
            .put("defaultTopic", &self.default_topic)
            .put("defaultTopicQueueNums", self.default_topic_queue_nums)
            .put("queueId", self.queue_id)
            .put("sysFlag", self.sys_flag)
            .put("bornTimestamp", self.born_timestamp)
            .put("flag", self.flag)
            .put_opt("properties", self.properties.as_ref())
            .put_opt("reconsumeTimes", self.reconsume_times)
            .put("unitMode", self.unit_mode)
            .put("bornHost", &self.born_host)
            .put("storeHost", &self.store_host)
            .put("storeTimestamp", self.store_timestamp)
            .done()
    }
}
