//! Typed custom headers carried as strings in `extFields` (`docs/wire-protocol.md` §3).
//!
//! Parsing is lenient about content: integers are trimmed before parsing; booleans accept
//! `true`/`false`/`1`/`0` in any case (anything else is false, like Java's
//! `Boolean.parseBoolean`); unknown keys (RPC fields such as `bname`, ACL keys such as
//! `AccessKey`/`Signature`) are ignored. Required fields (Java's `@CFNotNull`) that are absent
//! give [`HeaderError::Missing`]; unparsable numbers give [`HeaderError::Invalid`].
//!
//! What Java answers (checked in apache/rocketmq `RemotingCommand.decodeCommandCustomHeaderDirectly`,
//! `FastCodesHeader.getAndCheckNotNull` and `NettyRemotingAbstract.buildProcessRequestHandler`):
//! a missing `@CFNotNull` field or an unparsable value is only logged (`the custom field <x> is
//! null`), the field stays null, and the processor then fails on it; the exception is caught by
//! the remoting layer, which answers SYSTEM_ERROR (1) with remark `exceptionSimpleDesc(e)`.
//! Some processors check explicitly, e.g. UPDATE_CONSUMER_OFFSET answers INVALID_PARAMETER (29)
//! for a missing `queueId`/`commitOffset` (§4.3). So a [`HeaderError`]'s text is the Java
//! wording, which the request processor answers as the remark of a SYSTEM_ERROR, or of the code
//! Java's processor picks, using [`HeaderError::field`].

use std::collections::BTreeMap;

use super::codes::{pull_sys_flag, version};
use super::frame::RemotingCommand;

mod admin;
mod pop;
pub use admin::{
    ClientTargetRequestHeader, ConsumerGroupField, CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader, GetConsumeStatsRequestHeader,
    GetConsumerConnectionListRequestHeader, GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader, GetKvConfigRequestHeader,
    GetProducerConnectionListRequestHeader, NameField, NameRequestHeader, ProducerGroupField,
    QueryMessageRequestHeader, QueryMessageResponseHeader, ResetOffsetRequestHeader, TopicField,
    TopicRequestHeader, ViewMessageRequestHeader,
};
pub use pop::{
    AckMessageRequestHeader, ChangeInvisibleTimeResponseHeader, NotificationRequestHeader,
    NotificationResponseHeader, PopMessageRequestHeader, PopMessageResponseHeader, INIT_MODE_MIN,
};

/// Ext fields as carried by a [`RemotingCommand`].
pub type ExtFields = BTreeMap<String, String>;

/// A custom header that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// A required field is absent.
    #[error("the custom field <{field}> is null")]
    Missing { field: &'static str },
    /// A field's value cannot be parsed as its type.
    #[error("the custom field <{field}> has an invalid value <{value}>")]
    Invalid { field: &'static str, value: String },
}

impl HeaderError {
    /// The ext key at fault.
    pub fn field(&self) -> &'static str {
        match self {
            HeaderError::Missing { field } | HeaderError::Invalid { field, .. } => field,
        }
    }
}

/// A typed custom header.
pub trait CustomHeader: Sized {
    /// Decodes the header from ext fields.
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError>;
    /// Encodes the header as ext fields (values as Java's `toString()` would write them).
    fn to_ext(&self) -> ExtFields;

    /// Decodes the header of a command.
    fn from_command(cmd: &RemotingCommand) -> Result<Self, HeaderError> {
        Self::from_ext(&cmd.ext_fields)
    }
}

/// Parses a boolean leniently: `true`/`1` are true, everything else false (Java's
/// `Boolean.parseBoolean`, plus `"1"` as rocketmq-client-cpp sends it).
pub fn parse_bool(value: &str) -> bool {
    let v = value.trim();
    v.eq_ignore_ascii_case("true") || v == "1"
}

/// Reads typed values out of ext fields.
struct Reader<'a> {
    ext: &'a ExtFields,
}

impl<'a> Reader<'a> {
    fn raw(&self, key: &'static str) -> Option<&'a str> {
        self.ext.get(key).map(String::as_str)
    }

    fn req_str(&self, key: &'static str) -> Result<String, HeaderError> {
        self.raw(key)
            .map(str::to_owned)
            .ok_or(HeaderError::Missing { field: key })
    }

    fn opt_str(&self, key: &'static str) -> Option<String> {
        self.raw(key).map(str::to_owned)
    }

    fn opt_num<T: std::str::FromStr>(&self, key: &'static str) -> Result<Option<T>, HeaderError> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse::<T>()
                .map(Some)
                .map_err(|_| HeaderError::Invalid {
                    field: key,
                    value: v.to_owned(),
                }),
        }
    }

    fn req_num<T: std::str::FromStr>(&self, key: &'static str) -> Result<T, HeaderError> {
        self.opt_num(key)?
            .ok_or(HeaderError::Missing { field: key })
    }

    fn opt_bool(&self, key: &'static str) -> Option<bool> {
        self.raw(key).map(parse_bool)
    }
}

/// Builds ext fields.
#[derive(Default)]
struct Writer {
    ext: ExtFields,
}

impl Writer {
    fn put(mut self, key: &str, value: impl ToString) -> Self {
        self.ext.insert(key.to_owned(), value.to_string());
        self
    }

    fn put_opt<T: ToString>(self, key: &str, value: Option<T>) -> Self {
        match value {
            Some(v) => self.put(key, v),
            None => self,
        }
    }

    fn done(self) -> ExtFields {
        self.ext
    }
}

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
        use super::codes::request;
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

/// PULL_MESSAGE (11) request header (§3.2).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PullMessageRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub max_msg_nums: i32,
    pub sys_flag: i32,
    pub commit_offset: i64,
    pub suspend_timeout_millis: i64,
    pub subscription: Option<String>,
    pub sub_version: i64,
    pub expression_type: Option<String>,
    pub max_msg_bytes: Option<i32>,
    pub request_source: Option<i32>,
    /// Wire key `proxyFrowardClientId` (sic).
    pub proxy_forward_client_id: Option<String>,
}

impl PullMessageRequestHeader {
    /// sysFlag FLAG_COMMIT_OFFSET.
    pub fn has_commit_offset(&self) -> bool {
        self.sys_flag & pull_sys_flag::COMMIT_OFFSET != 0
    }

    /// sysFlag FLAG_SUSPEND (long polling allowed).
    pub fn has_suspend(&self) -> bool {
        self.sys_flag & pull_sys_flag::SUSPEND != 0
    }

    /// sysFlag FLAG_SUBSCRIPTION.
    pub fn has_subscription(&self) -> bool {
        self.sys_flag & pull_sys_flag::SUBSCRIPTION != 0
    }

    /// `expressionType`, defaulting to `"TAG"`.
    pub fn expression_type_or_tag(&self) -> &str {
        self.expression_type.as_deref().unwrap_or("TAG")
    }
}

impl CustomHeader for PullMessageRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(PullMessageRequestHeader {
            consumer_group: r.req_str("consumerGroup")?,
            topic: r.req_str("topic")?,
            queue_id: r.req_num("queueId")?,
            queue_offset: r.req_num("queueOffset")?,
            max_msg_nums: r.req_num("maxMsgNums")?,
            sys_flag: r.req_num("sysFlag")?,
            commit_offset: r.req_num("commitOffset")?,
            suspend_timeout_millis: r.req_num("suspendTimeoutMillis")?,
            subscription: r.opt_str("subscription"),
            sub_version: r.req_num("subVersion")?,
            expression_type: r.opt_str("expressionType"),
            max_msg_bytes: r.opt_num("maxMsgBytes")?,
            request_source: r.opt_num("requestSource")?,
            proxy_forward_client_id: r.opt_str("proxyFrowardClientId"),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("consumerGroup", &self.consumer_group)
            .put("topic", &self.topic)
            .put("queueId", self.queue_id)
            .put("queueOffset", self.queue_offset)
            .put("maxMsgNums", self.max_msg_nums)
            .put("sysFlag", self.sys_flag)
            .put("commitOffset", self.commit_offset)
            .put("suspendTimeoutMillis", self.suspend_timeout_millis)
            .put_opt("subscription", self.subscription.as_ref())
            .put("subVersion", self.sub_version)
            .put_opt("expressionType", self.expression_type.as_ref())
            .put_opt("maxMsgBytes", self.max_msg_bytes)
            .put_opt("requestSource", self.request_source)
            .put_opt(
                "proxyFrowardClientId",
                self.proxy_forward_client_id.as_ref(),
            )
            .done()
    }
}

/// PULL_MESSAGE response header (§3.2).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PullMessageResponseHeader {
    pub suggest_which_broker_id: i64,
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
    pub offset_delta: Option<i64>,
    pub topic_sys_flag: Option<i32>,
    pub group_sys_flag: Option<i32>,
    pub forbidden_type: Option<i32>,
}

impl CustomHeader for PullMessageResponseHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(PullMessageResponseHeader {
            suggest_which_broker_id: r.req_num("suggestWhichBrokerId")?,
            next_begin_offset: r.req_num("nextBeginOffset")?,
            min_offset: r.req_num("minOffset")?,
            max_offset: r.req_num("maxOffset")?,
            offset_delta: r.opt_num("offsetDelta")?,
            topic_sys_flag: r.opt_num("topicSysFlag")?,
            group_sys_flag: r.opt_num("groupSysFlag")?,
            forbidden_type: r.opt_num("forbiddenType")?,
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("suggestWhichBrokerId", self.suggest_which_broker_id)
            .put("nextBeginOffset", self.next_begin_offset)
            .put("minOffset", self.min_offset)
            .put("maxOffset", self.max_offset)
            .put_opt("offsetDelta", self.offset_delta)
            .put_opt("topicSysFlag", self.topic_sys_flag)
            .put_opt("groupSysFlag", self.group_sys_flag)
            .put_opt("forbiddenType", self.forbidden_type)
            .done()
    }
}

/// QUERY_CONSUMER_OFFSET (14) request header (§3.3).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueryConsumerOffsetRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: i32,
    pub set_zero_if_not_found: Option<bool>,
}

impl CustomHeader for QueryConsumerOffsetRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(QueryConsumerOffsetRequestHeader {
            consumer_group: r.req_str("consumerGroup")?,
            topic: r.req_str("topic")?,
            queue_id: r.req_num("queueId")?,
            set_zero_if_not_found: r.opt_bool("setZeroIfNotFound"),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("consumerGroup", &self.consumer_group)
            .put("topic", &self.topic)
            .put("queueId", self.queue_id)
            .put_opt("setZeroIfNotFound", self.set_zero_if_not_found)
            .done()
    }
}

/// The `{offset}` response header shared by QUERY_CONSUMER_OFFSET, GET_MAX_OFFSET,
/// GET_MIN_OFFSET and SEARCH_OFFSET_BY_TIMESTAMP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OffsetResponseHeader {
    pub offset: i64,
}

/// QUERY_CONSUMER_OFFSET response header.
pub type QueryConsumerOffsetResponseHeader = OffsetResponseHeader;
/// GET_MAX_OFFSET response header.
pub type GetMaxOffsetResponseHeader = OffsetResponseHeader;
/// GET_MIN_OFFSET response header.
pub type GetMinOffsetResponseHeader = OffsetResponseHeader;
/// SEARCH_OFFSET_BY_TIMESTAMP response header.
pub type SearchOffsetResponseHeader = OffsetResponseHeader;

impl CustomHeader for OffsetResponseHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(OffsetResponseHeader {
            offset: r.req_num("offset")?,
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default().put("offset", self.offset).done()
    }
}

/// UPDATE_CONSUMER_OFFSET (15) request header (§3.4). Java's processor answers
/// INVALID_PARAMETER (29) when `queueId` or `commitOffset` is missing (§4.3).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpdateConsumerOffsetRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: i32,
    pub commit_offset: i64,
}

impl CustomHeader for UpdateConsumerOffsetRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(UpdateConsumerOffsetRequestHeader {
            consumer_group: r.req_str("consumerGroup")?,
            topic: r.req_str("topic")?,
            queue_id: r.req_num("queueId")?,
            commit_offset: r.req_num("commitOffset")?,
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("consumerGroup", &self.consumer_group)
            .put("topic", &self.topic)
            .put("queueId", self.queue_id)
            .put("commitOffset", self.commit_offset)
            .done()
    }
}

/// CONSUMER_SEND_MSG_BACK (36) request header (§3.5).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerSendMsgBackRequestHeader {
    /// Commit-log physical offset of the original message.
    pub offset: i64,
    pub group: String,
    pub delay_level: i32,
    pub origin_msg_id: Option<String>,
    pub origin_topic: Option<String>,
    pub unit_mode: bool,
    pub max_reconsume_times: Option<i32>,
}

impl ConsumerSendMsgBackRequestHeader {
    /// `maxReconsumeTimes` as the broker honours it: only from requests of version >= 121.
    pub fn effective_max_reconsume_times(&self, request_version: i32) -> Option<i32> {
        if request_version >= version::V3_4_9 {
            self.max_reconsume_times
        } else {
            None
        }
    }
}

impl CustomHeader for ConsumerSendMsgBackRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(ConsumerSendMsgBackRequestHeader {
            offset: r.req_num("offset")?,
            group: r.req_str("group")?,
            delay_level: r.req_num("delayLevel")?,
            origin_msg_id: r.opt_str("originMsgId"),
            origin_topic: r.opt_str("originTopic"),
            unit_mode: r.opt_bool("unitMode").unwrap_or(false),
            max_reconsume_times: r.opt_num("maxReconsumeTimes")?,
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("offset", self.offset)
            .put("group", &self.group)
            .put("delayLevel", self.delay_level)
            .put_opt("originMsgId", self.origin_msg_id.as_ref())
            .put_opt("originTopic", self.origin_topic.as_ref())
            .put("unitMode", self.unit_mode)
            .put_opt("maxReconsumeTimes", self.max_reconsume_times)
            .done()
    }
}

/// UNREGISTER_CLIENT (35) request header (§3.7).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UnregisterClientRequestHeader {
    /// Wire key `clientID`.
    pub client_id: String,
    pub producer_group: Option<String>,
    pub consumer_group: Option<String>,
}

impl CustomHeader for UnregisterClientRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(UnregisterClientRequestHeader {
            client_id: r.req_str("clientID")?,
            producer_group: r.opt_str("producerGroup"),
            consumer_group: r.opt_str("consumerGroup"),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("clientID", &self.client_id)
            .put_opt("producerGroup", self.producer_group.as_ref())
            .put_opt("consumerGroup", self.consumer_group.as_ref())
            .done()
    }
}

/// A header whose only field is a required `consumerGroup`.
macro_rules! consumer_group_header {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name {
            pub consumer_group: String,
        }

        impl CustomHeader for $name {
            fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
                let r = Reader { ext };
                Ok($name {
                    consumer_group: r.req_str("consumerGroup")?,
                })
            }

            fn to_ext(&self) -> ExtFields {
                Writer::default()
                    .put("consumerGroup", &self.consumer_group)
                    .done()
            }
        }
    };
}

consumer_group_header!(
    /// GET_CONSUMER_LIST_BY_GROUP (38) request header (§3.8).
    GetConsumerListByGroupRequestHeader
);
consumer_group_header!(
    /// NOTIFY_CONSUMER_IDS_CHANGED (40) request header, broker → client (§3.13).
    NotifyConsumerIdsChangedRequestHeader
);

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

/// GET_MAX_OFFSET (30) request header (§3.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetMaxOffsetRequestHeader {
    pub topic: String,
    pub queue_id: i32,
    /// Defaults to true.
    pub committed: bool,
}

impl Default for GetMaxOffsetRequestHeader {
    fn default() -> Self {
        GetMaxOffsetRequestHeader {
            topic: String::new(),
            queue_id: 0,
            committed: true,
        }
    }
}

impl CustomHeader for GetMaxOffsetRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(GetMaxOffsetRequestHeader {
            topic: r.req_str("topic")?,
            queue_id: r.req_num("queueId")?,
            committed: r.opt_bool("committed").unwrap_or(true),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("topic", &self.topic)
            .put("queueId", self.queue_id)
            .put("committed", self.committed)
            .done()
    }
}

/// GET_MIN_OFFSET (31) request header (§3.10).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GetMinOffsetRequestHeader {
    pub topic: String,
    pub queue_id: i32,
}

impl CustomHeader for GetMinOffsetRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(GetMinOffsetRequestHeader {
            topic: r.req_str("topic")?,
            queue_id: r.req_num("queueId")?,
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("topic", &self.topic)
            .put("queueId", self.queue_id)
            .done()
    }
}

/// `BoundaryType` of SEARCH_OFFSET_BY_TIMESTAMP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BoundaryType {
    #[default]
    Lower,
    Upper,
}

impl BoundaryType {
    /// Case-insensitive; anything but "upper" is LOWER (Java's `BoundaryType.getType`).
    pub fn parse(value: &str) -> Self {
        if value.trim().eq_ignore_ascii_case("upper") {
            BoundaryType::Upper
        } else {
            BoundaryType::Lower
        }
    }

    /// Wire name.
    pub fn name(self) -> &'static str {
        match self {
            BoundaryType::Lower => "LOWER",
            BoundaryType::Upper => "UPPER",
        }
    }
}

/// SEARCH_OFFSET_BY_TIMESTAMP (29) request header (§3.11).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SearchOffsetRequestHeader {
    pub topic: String,
    pub queue_id: i32,
    pub timestamp: i64,
    pub boundary_type: BoundaryType,
}

impl CustomHeader for SearchOffsetRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(SearchOffsetRequestHeader {
            topic: r.req_str("topic")?,
            queue_id: r.req_num("queueId")?,
            timestamp: r.req_num("timestamp")?,
            boundary_type: r
                .raw("boundaryType")
                .map(BoundaryType::parse)
                .unwrap_or_default(),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("topic", &self.topic)
            .put("queueId", self.queue_id)
            .put("timestamp", self.timestamp)
            .put("boundaryType", self.boundary_type.name())
            .done()
    }
}

/// GET_ROUTEINFO_BY_TOPIC (105) request header (§3.12).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GetRouteInfoRequestHeader {
    pub topic: String,
    pub accept_standard_json_only: Option<bool>,
}

impl GetRouteInfoRequestHeader {
    /// Whether the route body must be standard JSON (quoted keys): request version >= 401
    /// (V4_9_4) or `acceptStandardJsonOnly` (§5.1).
    pub fn wants_standard_json(&self, request_version: i32) -> bool {
        request_version >= version::V4_9_4 || self.accept_standard_json_only == Some(true)
    }
}

impl CustomHeader for GetRouteInfoRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(GetRouteInfoRequestHeader {
            topic: r.req_str("topic")?,
            accept_standard_json_only: r.opt_bool("acceptStandardJsonOnly"),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("topic", &self.topic)
            .put_opt("acceptStandardJsonOnly", self.accept_standard_json_only)
            .done()
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes::AUTO_CREATE_TOPIC_KEY;
    use super::*;

    fn ext(pairs: &[(&str, &str)]) -> ExtFields {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn v1_send() -> ExtFields {
        ext(&[
            ("producerGroup", "pg"),
            ("topic", "T"),
            ("defaultTopic", AUTO_CREATE_TOPIC_KEY),
            ("defaultTopicQueueNums", "4"),
            ("queueId", " 2 "),
            ("sysFlag", "0"),
            ("bornTimestamp", "1700000000000"),
            ("flag", "0"),
            ("properties", "TAGS\u{1}a\u{2}"),
            ("unitMode", "0"),
            ("batch", "1"),
            ("AccessKey", "ak"),
            ("Signature", "sig"),
        ])
    }

    #[test]
    fn send_v1_lenient_cpp_style() {
        let h = SendMessageRequestHeader::from_ext(&v1_send()).unwrap();
        assert_eq!(h.producer_group, "pg");
        assert_eq!(h.queue_id, 2);
        assert_eq!(h.born_timestamp, 1_700_000_000_000);
        assert_eq!(h.unit_mode, Some(false));
        assert_eq!(h.batch, Some(true));
        assert_eq!(h.reconsume_times, None);
        assert!(!h.properties_too_long());
    }

    #[test]
    fn send_v2_matches_v1_and_round_trips() {
        let v1 = SendMessageRequestHeader::from_ext(&v1_send()).unwrap();
        let v2_ext = v1.to_v2_ext();
        assert_eq!(v2_ext.get("b").map(String::as_str), Some("T"));
        assert_eq!(v2_ext.get("g").map(String::as_str), Some("1700000000000"));
        let v2 = SendMessageRequestHeader::from_v2_ext(&v2_ext).unwrap();
        assert_eq!(v1, v2);
        assert_eq!(
            SendMessageRequestHeader::from_ext(&v1.to_ext()).unwrap(),
            v1
        );
        let cmd = RemotingCommand::new_request(310).with_ext_fields(v2_ext.clone());
        assert_eq!(SendMessageRequestHeader::from_request(&cmd).unwrap(), v1);
        // A code-10 request with only V2 keys is read as V2.
        let cmd = RemotingCommand::new_request(10).with_ext_fields(v2_ext);
        assert_eq!(SendMessageRequestHeader::from_request(&cmd).unwrap(), v1);
    }

    #[test]
    fn reply_v2_is_read_by_code_and_the_push_header_round_trips() {
        let v1 = SendMessageRequestHeader::from_ext(&v1_send()).unwrap();
        let cmd = RemotingCommand::new_request(super::super::codes::request::SEND_REPLY_MESSAGE_V2)
            .with_ext_fields(v1.to_v2_ext());
        assert_eq!(SendMessageRequestHeader::from_request(&cmd).unwrap(), v1);
        let push = ReplyMessageRequestHeader {
            producer_group: "pg".into(),
            topic: "DefaultCluster_REPLY_TOPIC".into(),
            default_topic: AUTO_CREATE_TOPIC_KEY.into(),
            default_topic_queue_nums: 4,
            queue_id: 0,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_000,
            flag: 0,
            properties: Some("CORRELATION_ID\u{1}c\u{2}".into()),
            reconsume_times: Some(0),
            unit_mode: false,
            born_host: "127.0.0.1:5000".into(),
            store_host: "127.0.0.1:9876".into(),
            store_timestamp: 1_700_000_000_001,
        };
        let ext = push.to_ext();
        assert_eq!(
            ext.get("storeHost").map(String::as_str),
            Some("127.0.0.1:9876")
        );
        assert_eq!(ReplyMessageRequestHeader::from_ext(&ext).unwrap(), push);
        let mut missing = ext;
        missing.remove("bornHost");
        assert_eq!(
            ReplyMessageRequestHeader::from_ext(&missing),
            Err(HeaderError::Missing { field: "bornHost" })
        );
    }

    #[test]
    fn send_v2_missing_and_invalid() {
        let mut e = SendMessageRequestHeader::from_ext(&v1_send())
            .unwrap()
            .to_v2_ext();
        e.remove("b");
        assert_eq!(
            SendMessageRequestHeader::from_v2_ext(&e),
            Err(HeaderError::Missing { field: "b" })
        );
        e.insert("b".into(), "T".into());
        e.insert("e".into(), "x1".into());
        assert_eq!(
            SendMessageRequestHeader::from_v2_ext(&e),
            Err(HeaderError::Invalid {
                field: "e",
                value: "x1".into()
            })
        );
    }

    #[test]
    fn missing_field_error_matches_java_wording() {
        let err = QueryConsumerOffsetRequestHeader::from_ext(&ext(&[("topic", "T")])).unwrap_err();
        assert_eq!(err.field(), "consumerGroup");
        assert_eq!(err.to_string(), "the custom field <consumerGroup> is null");
    }

    #[test]
    fn admin_headers() {
        let stats = GetConsumeStatsRequestHeader::from_ext(&ext(&[
            ("consumerGroup", "g"),
            ("topicList", " A;;B ; "),
        ]))
        .unwrap();
        assert_eq!(
            (stats.topic.as_deref(), &stats.topic_list[..]),
            (None, &["A".to_owned(), "B".to_owned()][..])
        );
        assert_eq!(
            stats.to_ext().get("topicList").map(String::as_str),
            Some("A;B")
        );
        let only_group = GetConsumeStatsRequestHeader {
            consumer_group: "g".into(),
            ..Default::default()
        };
        assert_eq!(only_group.to_ext(), ext(&[("consumerGroup", "g")]));
        assert!(GetConsumeStatsRequestHeader::from_ext(&ext(&[("topic", "T")])).is_err());

        let reset =
            ResetOffsetRequestHeader::from_ext(&ext(&[("topic", "T"), ("group", "g")])).unwrap();
        assert_eq!(
            (
                reset.queue_id,
                reset.offset,
                reset.timestamp,
                reset.is_force
            ),
            (-1, None, None, false)
        );
        let by_time = ResetOffsetRequestHeader {
            topic: "T".into(),
            group: "g".into(),
            timestamp: Some(1000),
            is_force: true,
            ..Default::default()
        };
        assert_eq!(
            by_time.to_ext(),
            ext(&[
                ("topic", "T"),
                ("group", "g"),
                ("queueId", "-1"),
                ("timestamp", "1000"),
                ("isForce", "true"),
            ])
        );
        assert_eq!(
            ResetOffsetRequestHeader::from_ext(&by_time.to_ext()).unwrap(),
            by_time
        );
        assert_eq!(
            ResetOffsetRequestHeader::from_ext(&ext(&[
                ("topic", "T"),
                ("group", "g"),
                ("offset", "x"),
            ])),
            Err(HeaderError::Invalid {
                field: "offset",
                value: "x".into()
            })
        );
    }

    #[test]
    fn pull_header() {
        let e = ext(&[
            ("consumerGroup", "g"),
            ("topic", "T"),
            ("queueId", "1"),
            ("queueOffset", "10"),
            ("maxMsgNums", "32"),
            ("sysFlag", "7"),
            ("commitOffset", "5"),
            ("suspendTimeoutMillis", "15000"),
            ("subscription", "*"),
            ("subVersion", "1700000000000"),
            ("bname", "broker-a"),
        ]);
        let h = PullMessageRequestHeader::from_ext(&e).unwrap();
        assert!(h.has_commit_offset() && h.has_suspend() && h.has_subscription());
        assert_eq!(h.expression_type_or_tag(), "TAG");
        assert_eq!(h.suspend_timeout_millis, 15000);
        assert_eq!(PullMessageRequestHeader::from_ext(&h.to_ext()).unwrap(), h);
        let mut missing = e.clone();
        missing.remove("subVersion");
        assert_eq!(
            PullMessageRequestHeader::from_ext(&missing),
            Err(HeaderError::Missing {
                field: "subVersion"
            })
        );

        let resp = PullMessageResponseHeader {
            suggest_which_broker_id: 0,
            next_begin_offset: 11,
            min_offset: 0,
            max_offset: 11,
            offset_delta: None,
            topic_sys_flag: Some(0),
            group_sys_flag: None,
            forbidden_type: None,
        };
        let re = resp.to_ext();
        assert_eq!(re.get("nextBeginOffset").map(String::as_str), Some("11"));
        assert!(!re.contains_key("offsetDelta"));
        assert_eq!(PullMessageResponseHeader::from_ext(&re).unwrap(), resp);
    }

    #[test]
    fn booleans_are_lenient() {
        for (v, want) in [
            ("true", true),
            ("TRUE", true),
            ("1", true),
            (" True ", true),
            ("false", false),
            ("0", false),
            ("FALSE", false),
            ("yes", false),
        ] {
            assert_eq!(parse_bool(v), want, "{v}");
        }
        let h = QueryConsumerOffsetRequestHeader::from_ext(&ext(&[
            ("consumerGroup", "g"),
            ("topic", "T"),
            ("queueId", "0"),
            ("setZeroIfNotFound", "False"),
        ]))
        .unwrap();
        assert_eq!(h.set_zero_if_not_found, Some(false));
    }

    #[test]
    fn offsets_and_small_headers() {
        let u = UpdateConsumerOffsetRequestHeader {
            consumer_group: "g".into(),
            topic: "T".into(),
            queue_id: 3,
            commit_offset: 99,
        };
        assert_eq!(
            UpdateConsumerOffsetRequestHeader::from_ext(&u.to_ext()).unwrap(),
            u
        );
        let mut e = u.to_ext();
        e.remove("commitOffset");
        assert_eq!(
            UpdateConsumerOffsetRequestHeader::from_ext(&e)
                .unwrap_err()
                .field(),
            "commitOffset"
        );

        let m =
            GetMaxOffsetRequestHeader::from_ext(&ext(&[("topic", "T"), ("queueId", "1")])).unwrap();
        assert!(m.committed);
        let m =
            GetMinOffsetRequestHeader::from_ext(&ext(&[("topic", "T"), ("queueId", "1")])).unwrap();
        assert_eq!(m.queue_id, 1);
        let o = OffsetResponseHeader::from_ext(&ext(&[("offset", "-1")])).unwrap();
        assert_eq!(o.offset, -1);

        let s = SearchOffsetRequestHeader::from_ext(&ext(&[
            ("topic", "T"),
            ("queueId", "0"),
            ("timestamp", "123"),
            ("boundaryType", "upper"),
        ]))
        .unwrap();
        assert_eq!(s.boundary_type, BoundaryType::Upper);
        let s = SearchOffsetRequestHeader::from_ext(&ext(&[
            ("topic", "T"),
            ("queueId", "0"),
            ("timestamp", "123"),
        ]))
        .unwrap();
        assert_eq!(s.boundary_type, BoundaryType::Lower);
        assert_eq!(
            s.to_ext().get("boundaryType").map(String::as_str),
            Some("LOWER")
        );

        let back = ConsumerSendMsgBackRequestHeader::from_ext(&ext(&[
            ("offset", "4096"),
            ("group", "g"),
            ("delayLevel", "0"),
            ("maxReconsumeTimes", "3"),
        ]))
        .unwrap();
        assert!(!back.unit_mode);
        assert_eq!(back.effective_max_reconsume_times(479), Some(3));
        assert_eq!(back.effective_max_reconsume_times(100), None);

        let un = UnregisterClientRequestHeader::from_ext(&ext(&[("clientID", "c1")])).unwrap();
        assert_eq!(un.client_id, "c1");
        assert_eq!(un.consumer_group, None);

        let n = NotifyConsumerIdsChangedRequestHeader {
            consumer_group: "g".into(),
        };
        assert_eq!(
            n.to_ext().get("consumerGroup").map(String::as_str),
            Some("g")
        );
        assert!(GetConsumerListByGroupRequestHeader::from_ext(&ExtFields::new()).is_err());

        let route = GetRouteInfoRequestHeader::from_ext(&ext(&[("topic", "T")])).unwrap();
        assert!(!route.wants_standard_json(400));
        assert!(route.wants_standard_json(401));
        let route = GetRouteInfoRequestHeader::from_ext(&ext(&[
            ("topic", "T"),
            ("acceptStandardJsonOnly", "true"),
        ]))
        .unwrap();
        assert!(route.wants_standard_json(0));

        let end = EndTransactionRequestHeader {
            producer_group: "pg".into(),
            tran_state_table_offset: 3,
            commit_log_offset: 4096,
            commit_or_rollback: 8,
            from_transaction_check: true,
            msg_id: "U".into(),
            transaction_id: Some("U".into()),
            ..Default::default()
        };
        assert_eq!(
            EndTransactionRequestHeader::from_ext(&end.to_ext()).unwrap(),
            end
        );
        assert!(EndTransactionRequestHeader::from_ext(&ext(&[("producerGroup", "pg")])).is_err());
        let check = CheckTransactionStateRequestHeader {
            topic: Some("T".into()),
            tran_state_table_offset: 3,
            commit_log_offset: 4096,
            msg_id: Some("U".into()),
            transaction_id: Some("U".into()),
            offset_msg_id: Some("7F".into()),
            broker_name: Some("skiff".into()),
        };
        assert_eq!(
            CheckTransactionStateRequestHeader::from_ext(&check.to_ext()).unwrap(),
            check
        );

        let sr = SendMessageResponseHeader {
            msg_id: "7F00000100002A9F00000000000001CE".into(),
            queue_id: 1,
            queue_offset: 7,
            ..Default::default()
        };
        assert_eq!(
            SendMessageResponseHeader::from_ext(&sr.to_ext()).unwrap(),
            sr
        );
    }
}
