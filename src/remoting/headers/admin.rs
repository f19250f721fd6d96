//! Headers of the requests tools send: consume stats and offset resets (`skiff admin`,
//! `mqadmin`), and message lookup (`docs/wire-protocol.md` §3).

use super::{CustomHeader, ExtFields, GetMinOffsetRequestHeader, HeaderError, Reader, Writer};

/// GET_CONSUME_STATS (208) request header (Java's `GetConsumeStatsRequestHeader`): the group,
/// narrowed to `topicList` (`;` separated) when given, else to `topic` when given.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GetConsumeStatsRequestHeader {
    pub consumer_group: String,
    pub topic: Option<String>,
    /// Trimmed, without empty entries.
    pub topic_list: Vec<String>,
}

impl CustomHeader for GetConsumeStatsRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(GetConsumeStatsRequestHeader {
            consumer_group: r.req_str("consumerGroup")?,
            topic: r.opt_str("topic"),
            topic_list: r.raw("topicList").map_or_else(Vec::new, |list| {
                list.split(';')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned)
                    .collect()
            }),
        })
    }

    fn to_ext(&self) -> ExtFields {
        let topic_list = (!self.topic_list.is_empty()).then(|| self.topic_list.join(";"));
        Writer::default()
            .put("consumerGroup", &self.consumer_group)
            .put_opt("topic", self.topic.as_ref())
            .put_opt("topicList", topic_list)
            .done()
    }
}

/// INVOKE_BROKER_TO_RESET_OFFSET (222) request header (Java's `ResetOffsetRequestHeader`). Java
/// declares `timestamp` and `isForce` required; skiff needs `timestamp` only without `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetOffsetRequestHeader {
    pub topic: String,
    pub group: String,
    /// A negative id (the default, -1) resets every queue of the topic.
    pub queue_id: i32,
    /// The offset to reset one queue to; absent or -1 resets by `timestamp`.
    pub offset: Option<i64>,
    pub timestamp: Option<i64>,
    pub is_force: bool,
}

impl Default for ResetOffsetRequestHeader {
    fn default() -> Self {
        ResetOffsetRequestHeader {
            topic: String::new(),
            group: String::new(),
            queue_id: -1,
            offset: None,
            timestamp: None,
            is_force: false,
        }
    }
}

impl CustomHeader for ResetOffsetRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(ResetOffsetRequestHeader {
            topic: r.req_str("topic")?,
            group: r.req_str("group")?,
            queue_id: r.opt_num("queueId")?.unwrap_or(-1),
            offset: r.opt_num("offset")?,
            timestamp: r.opt_num("timestamp")?,
            is_force: r.opt_bool("isForce").unwrap_or(false),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("topic", &self.topic)
            .put("group", &self.group)
            .put("queueId", self.queue_id)
            .put_opt("offset", self.offset)
            .put_opt("timestamp", self.timestamp)
            .put("isForce", self.is_force)
            .done()
    }
}

/// GET_EARLIEST_MSG_STORETIME (32) request header: the same fields as GET_MIN_OFFSET's.
pub type GetEarliestMsgStoretimeRequestHeader = GetMinOffsetRequestHeader;

/// GET_EARLIEST_MSG_STORETIME (32) response header.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GetEarliestMsgStoretimeResponseHeader {
    /// Store time (epoch ms) of the queue's first message, -1 when the queue has none.
    pub timestamp: i64,
}

impl CustomHeader for GetEarliestMsgStoretimeResponseHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(GetEarliestMsgStoretimeResponseHeader {
            timestamp: r.req_num("timestamp")?,
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default().put("timestamp", self.timestamp).done()
    }
}

/// VIEW_MESSAGE_BY_ID (33) request header: the commit-log offset the client read out of an
/// offset message id.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ViewMessageRequestHeader {
    pub offset: i64,
}

impl CustomHeader for ViewMessageRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(ViewMessageRequestHeader {
            offset: r.req_num("offset")?,
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default().put("offset", self.offset).done()
    }
}

/// QUERY_MESSAGE (12) request header (Java's `QueryMessageRequestHeader`, every field required).
/// The ext field `_UNIQUE_KEY_QUERY` = `true`, outside the header, asks by unique key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueryMessageRequestHeader {
    pub topic: String,
    pub key: String,
    pub max_num: i32,
    pub begin_timestamp: i64,
    pub end_timestamp: i64,
}

impl CustomHeader for QueryMessageRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(QueryMessageRequestHeader {
            topic: r.req_str("topic")?,
            key: r.req_str("key")?,
            max_num: r.req_num("maxNum")?,
            begin_timestamp: r.req_num("beginTimestamp")?,
            end_timestamp: r.req_num("endTimestamp")?,
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("topic", &self.topic)
            .put("key", &self.key)
            .put("maxNum", self.max_num)
            .put("beginTimestamp", self.begin_timestamp)
            .put("endTimestamp", self.end_timestamp)
            .done()
    }
}

/// QUERY_MESSAGE (12) response header (Java's `QueryMessageResponseHeader`), on both answers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueryMessageResponseHeader {
    pub index_last_update_timestamp: i64,
    pub index_last_update_phyoffset: i64,
}

impl CustomHeader for QueryMessageResponseHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(QueryMessageResponseHeader {
            index_last_update_timestamp: r.req_num("indexLastUpdateTimestamp")?,
            index_last_update_phyoffset: r.req_num("indexLastUpdatePhyoffset")?,
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("indexLastUpdateTimestamp", self.index_last_update_timestamp)
            .put("indexLastUpdatePhyoffset", self.index_last_update_phyoffset)
            .done()
    }
}

/// Every admin request whose header is one required name: `topic` (DELETE_TOPIC_IN_BROKER 215,
/// DELETE_TOPIC_IN_NAMESRV 216, GET_TOPIC_CONFIG 351, GET_TOPIC_STATS_INFO 202,
/// QUERY_TOPIC_CONSUME_BY_WHO 300), `consumerGroup` (GET_CONSUMER_CONNECTION_LIST 203) or
/// `producerGroup` (GET_PRODUCER_CONNECTION_LIST 204). The field name is the type parameter's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NameRequestHeader<F: NameField> {
    pub name: String,
    field: std::marker::PhantomData<F>,
}

impl<F: NameField> NameRequestHeader<F> {
    pub fn new(name: impl Into<String>) -> Self {
        NameRequestHeader {
            name: name.into(),
            field: std::marker::PhantomData,
        }
    }
}

/// The ext field a [`NameRequestHeader`] carries its name in.
pub trait NameField {
    const FIELD: &'static str;
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicField;
impl NameField for TopicField {
    const FIELD: &'static str = "topic";
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerGroupField;
impl NameField for ConsumerGroupField {
    const FIELD: &'static str = "consumerGroup";
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducerGroupField;
impl NameField for ProducerGroupField {
    const FIELD: &'static str = "producerGroup";
}

/// `topic` only (Java's `DeleteTopicRequestHeader`, `GetTopicStatsInfoRequestHeader`, ...).
pub type TopicRequestHeader = NameRequestHeader<TopicField>;
/// GET_CONSUMER_CONNECTION_LIST (203) request header.
pub type GetConsumerConnectionListRequestHeader = NameRequestHeader<ConsumerGroupField>;
/// GET_PRODUCER_CONNECTION_LIST (204) request header.
pub type GetProducerConnectionListRequestHeader = NameRequestHeader<ProducerGroupField>;

impl<F: NameField> CustomHeader for NameRequestHeader<F> {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(NameRequestHeader::new(r.req_str(F::FIELD)?))
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default().put(F::FIELD, &self.name).done()
    }
}

/// UPDATE_AND_CREATE_TOPIC (17) request header (Java's `CreateTopicRequestHeader`). Java
/// requires `topic`, `defaultTopic`, `readQueueNums`, `writeQueueNums`, `perm` and
/// `topicFilterType`; skiff needs the first and defaults the queue counts to 8 and `perm` to 6
/// as `mqadmin updateTopic` does. `order` is accepted and not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTopicRequestHeader {
    pub topic: String,
    pub read_queue_nums: i32,
    pub write_queue_nums: i32,
    pub perm: i32,
    pub order: bool,
    /// Attribute changes, `+key=value,-key` (`mqadmin updateTopic -a`); empty for none. See
    /// [`skiff_actors::logic::attributes`].
    pub attributes: String,
}

impl Default for CreateTopicRequestHeader {
    fn default() -> Self {
        CreateTopicRequestHeader {
            topic: String::new(),
            read_queue_nums: 8,
            write_queue_nums: 8,
            perm: 6,
            order: false,
            attributes: String::new(),
        }
    }
}

impl CustomHeader for CreateTopicRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        let defaults = CreateTopicRequestHeader::default();
        Ok(CreateTopicRequestHeader {
            topic: r.req_str("topic")?,
            read_queue_nums: r
                .opt_num("readQueueNums")?
                .unwrap_or(defaults.read_queue_nums),
            write_queue_nums: r
                .opt_num("writeQueueNums")?
                .unwrap_or(defaults.write_queue_nums),
            perm: r.opt_num("perm")?.unwrap_or(defaults.perm),
            order: r.opt_bool("order").unwrap_or(false),
            attributes: r.opt_str("attributes").unwrap_or_default(),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("topic", &self.topic)
            .put(
                "defaultTopic",
                crate::remoting::codes::AUTO_CREATE_TOPIC_KEY,
            )
            .put("readQueueNums", self.read_queue_nums)
            .put("writeQueueNums", self.write_queue_nums)
            .put("perm", self.perm)
            .put("topicFilterType", "SINGLE_TAG")
            .put("topicSysFlag", 0)
            .put("order", self.order)
            .put_opt(
                "attributes",
                Some(&self.attributes).filter(|a| !a.is_empty()),
            )
            .done()
    }
}

/// DELETE_SUBSCRIPTIONGROUP (207) request header (Java's `DeleteSubscriptionGroupRequestHeader`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteSubscriptionGroupRequestHeader {
    pub group_name: String,
    /// Also forget the group's stored offsets.
    pub clean_offset: bool,
}

impl CustomHeader for DeleteSubscriptionGroupRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(DeleteSubscriptionGroupRequestHeader {
            group_name: r.req_str("groupName")?,
            clean_offset: r.opt_bool("cleanOffset").unwrap_or(false),
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("groupName", &self.group_name)
            .put("cleanOffset", self.clean_offset)
            .done()
    }
}

/// The addressing part of GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309)
/// request headers: which client of which group the broker forwards the request to. The other
/// fields (`jstackEnable`, `msgId`, `topic`, ...) travel on unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientTargetRequestHeader {
    pub consumer_group: String,
    pub client_id: String,
}

impl CustomHeader for ClientTargetRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(ClientTargetRequestHeader {
            consumer_group: r.req_str("consumerGroup")?,
            client_id: r.req_str("clientId")?,
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("consumerGroup", &self.consumer_group)
            .put("clientId", &self.client_id)
            .done()
    }
}

/// GET_KV_CONFIG (101) request header (Java's `GetKVConfigRequestHeader`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GetKvConfigRequestHeader {
    pub namespace: String,
    pub key: String,
}

impl CustomHeader for GetKvConfigRequestHeader {
    fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        let r = Reader { ext };
        Ok(GetKvConfigRequestHeader {
            namespace: r.req_str("namespace")?,
            key: r.req_str("key")?,
        })
    }

    fn to_ext(&self) -> ExtFields {
        Writer::default()
            .put("namespace", &self.namespace)
            .put("key", &self.key)
            .done()
    }
}
