//! Request codes, response codes, language codes and well-known names of the RocketMQ remoting
//! protocol (`docs/wire-protocol.md` §1.5 and §2).

use skiff_actors::broker_api::SendStatus;

/// Request codes (`RequestCode`), the subset skiff knows by name.
pub mod request {
    pub const SEND_MESSAGE: i32 = 10;
    pub const PULL_MESSAGE: i32 = 11;
    pub const QUERY_MESSAGE: i32 = 12;
    pub const QUERY_CONSUMER_OFFSET: i32 = 14;
    pub const UPDATE_CONSUMER_OFFSET: i32 = 15;
    pub const UPDATE_AND_CREATE_TOPIC: i32 = 17;
    pub const GET_ALL_TOPIC_CONFIG: i32 = 21;
    pub const GET_BROKER_CONFIG: i32 = 26;
    pub const GET_BROKER_RUNTIME_INFO: i32 = 28;
    pub const SEARCH_OFFSET_BY_TIMESTAMP: i32 = 29;
    pub const GET_MAX_OFFSET: i32 = 30;
    pub const GET_MIN_OFFSET: i32 = 31;
    pub const GET_EARLIEST_MSG_STORETIME: i32 = 32;
    pub const VIEW_MESSAGE_BY_ID: i32 = 33;
    pub const HEART_BEAT: i32 = 34;
    pub const UNREGISTER_CLIENT: i32 = 35;
    pub const CONSUMER_SEND_MSG_BACK: i32 = 36;
    pub const END_TRANSACTION: i32 = 37;
    pub const GET_CONSUMER_LIST_BY_GROUP: i32 = 38;
    pub const CHECK_TRANSACTION_STATE: i32 = 39;
    pub const NOTIFY_CONSUMER_IDS_CHANGED: i32 = 40;
    pub const LOCK_BATCH_MQ: i32 = 41;
    pub const UNLOCK_BATCH_MQ: i32 = 42;
    pub const CHECK_CLIENT_CONFIG: i32 = 46;
    pub const GET_KV_CONFIG: i32 = 101;
    pub const REGISTER_BROKER: i32 = 103;
    pub const UNREGISTER_BROKER: i32 = 104;
    pub const GET_ROUTEINFO_BY_TOPIC: i32 = 105;
    pub const GET_BROKER_CLUSTER_INFO: i32 = 106;
    pub const UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: i32 = 200;
    pub const GET_ALL_SUBSCRIPTIONGROUP_CONFIG: i32 = 201;
    pub const GET_TOPIC_STATS_INFO: i32 = 202;
    pub const GET_CONSUMER_CONNECTION_LIST: i32 = 203;
    pub const GET_PRODUCER_CONNECTION_LIST: i32 = 204;
    pub const GET_ALL_TOPIC_LIST_FROM_NAMESERVER: i32 = 206;
    pub const DELETE_SUBSCRIPTIONGROUP: i32 = 207;
    pub const GET_CONSUME_STATS: i32 = 208;
    pub const DELETE_TOPIC_IN_BROKER: i32 = 215;
    pub const DELETE_TOPIC_IN_NAMESRV: i32 = 216;
    pub const RESET_CONSUMER_CLIENT_OFFSET: i32 = 220;
    pub const GET_CONSUMER_STATUS_FROM_CLIENT: i32 = 221;
    pub const INVOKE_BROKER_TO_RESET_OFFSET: i32 = 222;
    pub const QUERY_TOPIC_CONSUME_BY_WHO: i32 = 300;
    pub const GET_SYSTEM_TOPIC_LIST_FROM_NS: i32 = 304;
    pub const GET_CONSUMER_RUNNING_INFO: i32 = 307;
    /// DefaultLitePullConsumer's pull (5.x clients): the same request and answer as PULL_MESSAGE.
    pub const LITE_PULL_MESSAGE: i32 = 361;
    pub const CONSUME_MESSAGE_DIRECTLY: i32 = 309;
    pub const SEND_MESSAGE_V2: i32 = 310;
    pub const SEND_BATCH_MESSAGE: i32 = 320;
    /// A request-reply answer, sent by the replier with the SEND_MESSAGE header.
    pub const SEND_REPLY_MESSAGE: i32 = 324;
    /// A request-reply answer with the SEND_MESSAGE_V2 (single-letter) header.
    pub const SEND_REPLY_MESSAGE_V2: i32 = 325;
    /// Broker → requester: the reply, pushed on the requester's own connection.
    pub const PUSH_REPLY_MESSAGE_TO_CLIENT: i32 = 326;
    pub const GET_TOPIC_CONFIG: i32 = 351;
    /// Cancels a pending timer message by its send's recall handle (RocketMQ 5.3.2).
    pub const RECALL_MESSAGE: i32 = 370;
    /// ACL 2.0 administration (RocketMQ 5.3+): users, then ACLs; create, update, delete, get,
    /// list each.
    pub const AUTH_CREATE_USER: i32 = 3001;
    pub const AUTH_UPDATE_USER: i32 = 3002;
    pub const AUTH_DELETE_USER: i32 = 3003;
    pub const AUTH_GET_USER: i32 = 3004;
    pub const AUTH_LIST_USER: i32 = 3005;
    pub const AUTH_CREATE_ACL: i32 = 3006;
    pub const AUTH_UPDATE_ACL: i32 = 3007;
    pub const AUTH_DELETE_ACL: i32 = 3008;
    pub const AUTH_GET_ACL: i32 = 3009;
    pub const AUTH_LIST_ACL: i32 = 3010;
    pub const QUERY_ASSIGNMENT: i32 = 400;
    pub const SET_MESSAGE_REQUEST_MODE: i32 = 401;
    pub const POP_MESSAGE: i32 = 200_050;
    pub const ACK_MESSAGE: i32 = 200_051;
    pub const CHANGE_MESSAGE_INVISIBLETIME: i32 = 200_053;
    pub const NOTIFICATION: i32 = 200_054;
    pub const BATCH_ACK_MESSAGE: i32 = 200_151;
    /// RocketMQ 5.5's lite admin requests (`mqadmin getBrokerLiteInfo` ... `triggerLiteDispatch`).
    pub const GET_BROKER_LITE_INFO: i32 = 200_074;
    pub const GET_PARENT_TOPIC_INFO: i32 = 200_075;
    pub const GET_LITE_TOPIC_INFO: i32 = 200_076;
    pub const GET_LITE_CLIENT_INFO: i32 = 200_077;
    pub const GET_LITE_GROUP_INFO: i32 = 200_078;
    pub const TRIGGER_LITE_DISPATCH: i32 = 200_079;
    /// skiff's own requests, from 1,000,000 up (far above every RocketMQ code): what RocketMQ
    /// has no request for but `skiff admin` shows. A page of a parent's lite topics.
    pub const LIST_LITE_TOPICS: i32 = 1_000_001;
}

/// Response codes (`RemotingSysResponseCode` + `ResponseCode`).
pub mod response {
    pub const SUCCESS: i32 = 0;
    pub const SYSTEM_ERROR: i32 = 1;
    pub const SYSTEM_BUSY: i32 = 2;
    pub const REQUEST_CODE_NOT_SUPPORTED: i32 = 3;
    pub const TRANSACTION_FAILED: i32 = 4;
    pub const FLUSH_DISK_TIMEOUT: i32 = 10;
    pub const SLAVE_NOT_AVAILABLE: i32 = 11;
    pub const FLUSH_SLAVE_TIMEOUT: i32 = 12;
    pub const MESSAGE_ILLEGAL: i32 = 13;
    pub const SERVICE_NOT_AVAILABLE: i32 = 14;
    pub const VERSION_NOT_SUPPORTED: i32 = 15;
    pub const NO_PERMISSION: i32 = 16;
    pub const TOPIC_NOT_EXIST: i32 = 17;
    pub const TOPIC_EXIST_ALREADY: i32 = 18;
    pub const PULL_NOT_FOUND: i32 = 19;
    pub const PULL_RETRY_IMMEDIATELY: i32 = 20;
    pub const PULL_OFFSET_MOVED: i32 = 21;
    pub const QUERY_NOT_FOUND: i32 = 22;
    pub const SUBSCRIPTION_PARSE_FAILED: i32 = 23;
    pub const SUBSCRIPTION_NOT_EXIST: i32 = 24;
    pub const SUBSCRIPTION_NOT_LATEST: i32 = 25;
    pub const SUBSCRIPTION_GROUP_NOT_EXIST: i32 = 26;
    pub const FILTER_DATA_NOT_EXIST: i32 = 27;
    pub const FILTER_DATA_NOT_LATEST: i32 = 28;
    pub const INVALID_PARAMETER: i32 = 29;
    pub const TRANSACTION_SHOULD_COMMIT: i32 = 200;
    pub const TRANSACTION_SHOULD_ROLLBACK: i32 = 201;
    pub const TRANSACTION_STATE_UNKNOW: i32 = 202;
    pub const TRANSACTION_STATE_GROUP_WRONG: i32 = 203;
    pub const NO_BUYER_ID: i32 = 204;
    pub const NOT_IN_CURRENT_UNIT: i32 = 205;
    pub const CONSUMER_NOT_ONLINE: i32 = 206;
    pub const CONSUME_MSG_TIMEOUT: i32 = 207;
    pub const NO_MESSAGE: i32 = 208;
    pub const POLLING_FULL: i32 = 209;
    pub const POLLING_TIMEOUT: i32 = 210;
    pub const BROKER_NOT_EXIST: i32 = 211;
    pub const BROKER_DISPATCH_NOT_COMPLETE: i32 = 212;
    pub const BROADCAST_CONSUMPTION: i32 = 213;
    pub const FLOW_CONTROL: i32 = 215;
    pub const NOT_LEADER_FOR_QUEUE: i32 = 501;
    pub const ILLEGAL_OPERATION: i32 = 604;
    pub const GO_AWAY: i32 = 1500;
    /// Client-local codes (never sent on the wire by a broker).
    pub const RPC_UNKNOWN: i32 = -1000;
    pub const RPC_ADDR_IS_NULL: i32 = -1002;
    pub const RPC_SEND_TO_CHANNEL_FAILED: i32 = -1004;
    pub const RPC_TIME_OUT: i32 = -1006;
}

/// The answer code of a send whose message is stored, by its status (Java's `sendOK` codes).
pub fn send_status_code(status: SendStatus) -> i32 {
    match status {
        SendStatus::Ok => response::SUCCESS,
        SendStatus::FlushDiskTimeout => response::FLUSH_DISK_TIMEOUT,
        SendStatus::FlushSlaveTimeout => response::FLUSH_SLAVE_TIMEOUT,
        SendStatus::SlaveNotAvailable => response::SLAVE_NOT_AVAILABLE,
    }
}

/// The status a send answer's code says its message is stored with; `None` for a refusal.
pub fn send_status_of(code: i32) -> Option<SendStatus> {
    SendStatus::ALL
        .into_iter()
        .find(|status| send_status_code(*status) == code)
}

/// SYSTEM_BUSY's remark, Java's words when its thread pool rejects a request.
pub const OVERLOAD_REMARK: &str = "[OVERLOAD]system busy, start flow control for a while";

/// The topic producers fall back to when theirs has no route yet: the broker answers its route
/// when it auto-creates topics, and creates the real topic on the first send
/// (`TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC`). Written here as well as in the broker's
/// system-topic list (`skiff_actors::logic::names`) because the fuzz build compiles this file
/// without the actor crate; a test holds the two together.
pub const AUTO_CREATE_TOPIC_KEY: &str = "TBW102";

/// `LanguageCode` names indexed by their binary code (§1.5).
pub const LANGUAGE_NAMES: [&str; 14] = [
    "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP",
    "OMS", "RUST", "NODE_JS",
];

/// The language skiff announces in the commands it sends.
pub const LANGUAGE_RUST: &str = "RUST";
/// Fallback name for a language code that is not in [`LANGUAGE_NAMES`].
pub const LANGUAGE_OTHER: &str = "OTHER";

/// Name of a binary language code; unknown codes map to `"OTHER"`.
pub fn language_name(code: u8) -> &'static str {
    LANGUAGE_NAMES
        .get(usize::from(code))
        .copied()
        .unwrap_or(LANGUAGE_OTHER)
}

/// Binary code of a language name (exact name, case-insensitive); unknown names map to OTHER (7).
pub fn language_code(name: &str) -> u8 {
    LANGUAGE_NAMES
        .iter()
        .position(|n| n.eq_ignore_ascii_case(name))
        .and_then(|p| u8::try_from(p).ok())
        .unwrap_or(7)
}

/// `MQVersion.Version` ordinals that change protocol behaviour (§1.6).
pub mod version {
    pub const V3_4_9: i32 = 121;
    pub const V4_0_0: i32 = 213;
    /// From this version on the name server answers route data as standard JSON (§5.1).
    pub const V4_9_4: i32 = 401;
    pub const V4_9_8: i32 = 409;
    pub const V5_0_0: i32 = 413;
    pub const V5_3_3: i32 = 479;
    /// The version skiff announces (Java's CURRENT_VERSION at the reference commit).
    pub const CURRENT: i32 = V5_3_3;

    /// `MQVersion.getVersionDesc`: the name of a `MQVersion.Version` ordinal (`479` is
    /// `V5_3_3`). The enum's order: sixteen 3.0.0 pre-releases, then a `_SNAPSHOT` and a
    /// release per version: 3.0.1 to 3.0.15, 3.1.0 to 3.2.9, 3.3.1 to 3.9.9 (no x.y.0 there),
    /// 4.0.0 to 5.9.9; past the end, `HIGHER_VERSION`. A negative ordinal names no version.
    pub fn desc(ordinal: i32) -> String {
        const V3_0_0: [&str; 16] = [
            "SNAPSHOT",
            "ALPHA1",
            "BETA1",
            "BETA2",
            "BETA3",
            "BETA4",
            "BETA5",
            "BETA6_SNAPSHOT",
            "BETA6",
            "BETA7_SNAPSHOT",
            "BETA7",
            "BETA8_SNAPSHOT",
            "BETA8",
            "BETA9_SNAPSHOT",
            "BETA9",
            "FINAL",
        ];
        let Ok(n) = usize::try_from(ordinal) else {
            return format!("unknown version {ordinal}");
        };
        if let Some(tag) = V3_0_0.get(n) {
            return format!("V3_0_0_{tag}");
        }
        // Each later version is a (snapshot, release) pair: its index in the list below.
        let pair = (n - V3_0_0.len()) / 2;
        let snapshot = (n - V3_0_0.len()).is_multiple_of(2);
        let (major, minor, patch) = if pair < 15 {
            (3, 0, pair + 1)
        } else if pair < 15 + 20 {
            let k = pair - 15;
            (3, 1 + k / 10, k % 10)
        } else if pair < 15 + 20 + 63 {
            let k = pair - 35;
            (3, 3 + k / 9, 1 + k % 9)
        } else if pair < 15 + 20 + 63 + 200 {
            let k = pair - 98;
            (4 + k / 100, k / 10 % 10, k % 10)
        } else {
            return "HIGHER_VERSION".to_owned();
        };
        format!(
            "V{major}_{minor}_{patch}{}",
            if snapshot { "_SNAPSHOT" } else { "" }
        )
    }
}

/// `SerializeType` codes (§1.1).
pub mod serialize_type {
    pub const JSON: u8 = 0;
    pub const ROCKETMQ: u8 = 1;
}

/// `PullSysFlag` bits (§6.2).
pub mod pull_sys_flag {
    pub const COMMIT_OFFSET: i32 = 0x1;
    pub const SUSPEND: i32 = 0x2;
    pub const SUBSCRIPTION: i32 = 0x4;
    pub const CLASS_FILTER: i32 = 0x8;
    pub const LITE_PULL_MESSAGE: i32 = 0x10;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_auto_create_topic_is_one_of_the_brokers_system_topics() {
        assert_eq!(
            AUTO_CREATE_TOPIC_KEY,
            skiff_actors::logic::names::AUTO_CREATE_TOPIC_KEY
        );
        assert!(skiff_actors::logic::names::is_rocketmq_system_topic(
            AUTO_CREATE_TOPIC_KEY
        ));
    }

    #[test]
    fn language_names_and_codes_round_trip() {
        assert_eq!(language_name(0), "JAVA");
        assert_eq!(language_name(12), "RUST");
        assert_eq!(language_name(13), "NODE_JS");
        assert_eq!(language_name(200), "OTHER");
        assert_eq!(language_code("CPP"), 1);
        assert_eq!(language_code("rust"), 12);
        assert_eq!(language_code("COBOL"), 7);
    }

    #[test]
    fn every_send_status_round_trips_through_its_code_and_a_refusal_has_none() {
        for status in SendStatus::ALL {
            assert_eq!(send_status_of(send_status_code(status)), Some(status));
        }
        assert_eq!(send_status_code(SendStatus::FlushDiskTimeout), 10);
        assert_eq!(send_status_of(response::SYSTEM_ERROR), None);
        assert_eq!(send_status_of(response::MESSAGE_ILLEGAL), None);
    }

    #[test]
    fn version_ordinals_are_named_as_java_names_them() {
        for (ordinal, name) in [
            (0, "V3_0_0_SNAPSHOT"),
            (15, "V3_0_0_FINAL"),
            (16, "V3_0_1_SNAPSHOT"),
            (45, "V3_0_15"),
            (46, "V3_1_0_SNAPSHOT"),
            (85, "V3_2_9"),
            (86, "V3_3_1_SNAPSHOT"),
            (version::V3_4_9, "V3_4_9"),
            (version::V4_0_0, "V4_0_0"),
            (version::V4_9_4, "V4_9_4"),
            (version::V4_9_8, "V4_9_8"),
            (version::V5_0_0, "V5_0_0"),
            (version::V5_3_3, "V5_3_3"),
            (611, "V5_9_9"),
            (612, "HIGHER_VERSION"),
            (9999, "HIGHER_VERSION"),
        ] {
            assert_eq!(version::desc(ordinal), name, "ordinal {ordinal}");
        }
    }
}
