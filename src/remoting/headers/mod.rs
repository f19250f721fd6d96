//! Typed custom headers carried as strings in `extFields` (`docs/wire-protocol.md` §3).
//!
//! This module holds the decoding rules ([`CustomHeader`], the ext-field reader and writer) and
//! the route header; the headers themselves are in `produce` (sends, transactions, replies),
//! `consume` (pulls, offsets, groups), `admin` (tools and lookups) and `pop`, all re-exported
//! here.
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

use super::codes::version;
use super::frame::RemotingCommand;

mod admin;
mod consume;
mod pop;
mod produce;
pub use admin::{
    ClientTargetRequestHeader, ConsumerGroupField, CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader, GetConsumeStatsRequestHeader,
    GetConsumerConnectionListRequestHeader, GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader, GetKvConfigRequestHeader,
    GetProducerConnectionListRequestHeader, NameField, NameRequestHeader, ProducerGroupField,
    QueryMessageRequestHeader, QueryMessageResponseHeader, ResetOffsetRequestHeader, TopicField,
    TopicRequestHeader, ViewMessageRequestHeader,
};
pub use consume::*;
pub use pop::{
    AckMessageRequestHeader, ChangeInvisibleTimeResponseHeader, NotificationRequestHeader,
    NotificationResponseHeader, PopMessageRequestHeader, PopMessageResponseHeader, INIT_MODE_MIN,
};
pub use produce::*;

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
