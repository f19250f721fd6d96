//! Headers of the consume side (`docs/wire-protocol.md` §3.2-§3.11, §3.13): pulls, offsets,
//! send-back, unregistering, the group-only headers and the offset lookups.

use super::{CustomHeader, ExtFields, HeaderError, Reader, Writer};
use crate::remoting::codes::{pull_sys_flag, version};

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
