//! Delay levels, where a delayed message waits, the broker's send-back decision for a failed
//! message, and the retry / dead-letter topic names.

use skiff_storage::message::property::{DELAY, REAL_QID, REAL_TOPIC};
use skiff_storage::message::{property, with_properties, MessageToAppend};
use std::num::ParseIntError;
use std::time::Duration;

/// RocketMQ's default `messageDelayLevel`: `1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m
/// 1h 2h`. Level `n` (1-based) is `DELAY_LEVELS[n - 1]`; level 0 means "not delayed".
pub const DELAY_LEVELS: [Duration; 18] = [
    Duration::from_secs(1),
    Duration::from_secs(5),
    Duration::from_secs(10),
    Duration::from_secs(30),
    Duration::from_secs(60),
    Duration::from_secs(2 * 60),
    Duration::from_secs(3 * 60),
    Duration::from_secs(4 * 60),
    Duration::from_secs(5 * 60),
    Duration::from_secs(6 * 60),
    Duration::from_secs(7 * 60),
    Duration::from_secs(8 * 60),
    Duration::from_secs(9 * 60),
    Duration::from_secs(10 * 60),
    Duration::from_secs(20 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(60 * 60),
    Duration::from_secs(2 * 60 * 60),
];

/// The highest level; higher requested levels are lowered to it (as the store does).
pub const MAX_DELAY_LEVEL: u8 = DELAY_LEVELS.len() as u8;

/// Where delayed messages wait (RocketMQ's `ScheduleMessageService`): level `n` in queue `n - 1`.
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";

/// Queues of [`SCHEDULE_TOPIC`]: one per delay level.
pub const SCHEDULE_QUEUE_NUMS: u32 = MAX_DELAY_LEVEL as u32;

/// The first retry's level: a failed message first comes back after 10 s, then 30 s, 1 m, ...
/// (level `3 + reconsume_times`).
pub const FIRST_RETRY_DELAY_LEVEL: i32 = 3;

/// A group's default `retryMaxTimes`: the 16 retries run at 10 s ... 2 h, then the DLQ.
pub const DEFAULT_MAX_RECONSUME_TIMES: i32 = 16;

pub const RETRY_TOPIC_PREFIX: &str = "%RETRY%";
pub const DLQ_TOPIC_PREFIX: &str = "%DLQ%";

/// The delay of `level` (1..=18); `None` for anything else, including 0 ("no delay").
pub fn delay_of_level(level: i32) -> Option<Duration> {
    usize::try_from(level)
        .ok()
        .and_then(|l| l.checked_sub(1))
        .and_then(|i| DELAY_LEVELS.get(i).copied())
}

/// Transaction bits of the message sys flag; only plain and committed messages are delayed.
const TRANSACTION_MASK: i32 = 0xC;
const TRANSACTION_COMMIT: i32 = 0x8;

/// A `DELAY` property the store cannot read as a level.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("delay level {value:?} is not a number")]
pub struct InvalidDelayLevel {
    pub value: String,
    #[source]
    source: ParseIntError,
}

/// What [`route_delayed`] makes of a message about to be appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed {
    pub message: MessageToAppend,
    /// The message now goes to [`SCHEDULE_TOPIC`] instead of its own topic.
    pub delayed: bool,
}

/// Diverts a message carrying `DELAY` = level > 0 to [`SCHEDULE_TOPIC`], queue `level - 1`
/// (a level above 18 counts as 18), recording its real topic and queue in `REAL_TOPIC` /
/// `REAL_QID`; that makes the delay as durable as the message. Messages already in the schedule
/// topic, prepared or rolled-back transaction messages and level 0 pass unchanged.
pub fn route_delayed(message: MessageToAppend) -> Result<Routed, InvalidDelayLevel> {
    let as_is = |message| {
        Ok(Routed {
            message,
            delayed: false,
        })
    };
    // A half message waits for its commit, not for a delay (Java's client drops DELAY from it).
    if message.topic == SCHEDULE_TOPIC || message.topic == crate::logic::transaction::HALF_TOPIC {
        return as_is(message);
    }
    let transaction = message.sys_flag & TRANSACTION_MASK;
    if transaction != 0 && transaction != TRANSACTION_COMMIT {
        return as_is(message);
    }
    let Some(raw) = property(&message.properties, DELAY) else {
        return as_is(message);
    };
    let level: i64 = raw.trim().parse().map_err(|source| InvalidDelayLevel {
        value: raw.to_string(),
        source,
    })?;
    if level <= 0 {
        return as_is(message);
    }
    let level = level.min(i64::from(SCHEDULE_QUEUE_NUMS)) as u32;
    let real_queue = message.queue_id.to_string();
    let properties = with_properties(
        &message.properties,
        &[
            (DELAY, &level.to_string()),
            (REAL_TOPIC, &message.topic),
            (REAL_QID, &real_queue),
        ],
    );
    Ok(Routed {
        message: MessageToAppend {
            topic: SCHEDULE_TOPIC.to_string(),
            queue_id: level - 1,
            properties,
            ..message
        },
        delayed: true,
    })
}

/// Where the broker puts a message a consumer sends back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendBackTarget {
    /// `%RETRY%group`, delivered again after `delay_level` (always 1..=18).
    Retry { delay_level: u8 },
    /// `%DLQ%group` (one queue), never delivered again by itself.
    DeadLetter,
}

/// The broker's `consumerSendMsgBack` decision.
///
/// - `reconsume_times` (how often the message was already re-delivered) `>= max_reconsume_times`
///   → dead letter.
/// - `requested_delay_level < 0` → dead letter now (the listener's `delayLevelWhenNextConsume`
///   of -1).
/// - `0` → the broker picks `3 + reconsume_times`; a positive level is kept. Either is lowered to
///   18, and raised to 1 should a negative `reconsume_times` arrive off the wire.
///
/// `max_reconsume_times` must already be resolved: a client's -1 means 16 in concurrent mode and
/// `i32::MAX` in orderly mode (see [`resolve_max_reconsume_times`]). A group with
/// `retryQueueNums <= 0` drops the message instead; that is broker configuration, checked before.
pub fn send_back_decision(
    reconsume_times: i32,
    max_reconsume_times: i32,
    requested_delay_level: i32,
) -> SendBackTarget {
    if reconsume_times >= max_reconsume_times || requested_delay_level < 0 {
        return SendBackTarget::DeadLetter;
    }
    let level = if requested_delay_level == 0 {
        FIRST_RETRY_DELAY_LEVEL.saturating_add(reconsume_times)
    } else {
        requested_delay_level
    };
    let level = level.clamp(1, i32::from(MAX_DELAY_LEVEL));
    SendBackTarget::Retry {
        delay_level: u8::try_from(level).expect("clamped to 1..=18"),
    }
}

/// The client's `maxReconsumeTimes` setting as the send-back rule uses it: -1 (the default)
/// means 16 for a concurrent consumer and `i32::MAX` (retry locally forever) for an orderly one.
pub fn resolve_max_reconsume_times(configured: i32, orderly: bool) -> i32 {
    match (configured, orderly) {
        (-1, false) => DEFAULT_MAX_RECONSUME_TIMES,
        (-1, true) => i32::MAX,
        (n, _) => n,
    }
}

/// `%RETRY%{group}`: where a clustering group's failed messages wait; every clustering consumer
/// subscribes to it automatically.
pub fn retry_topic(group: &str) -> String {
    format!("{RETRY_TOPIC_PREFIX}{group}")
}

/// `%DLQ%{group}`: where messages go after the last retry.
pub fn dlq_topic(group: &str) -> String {
    format!("{DLQ_TOPIC_PREFIX}{group}")
}

pub fn is_retry_topic(topic: &str) -> bool {
    topic.starts_with(RETRY_TOPIC_PREFIX)
}

pub fn is_dlq_topic(topic: &str) -> bool {
    topic.starts_with(DLQ_TOPIC_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use skiff_storage::message::encode_properties;
    use std::net::SocketAddr;

    fn to_append(topic: &str, queue_id: u32, properties: &[(&str, &str)]) -> MessageToAppend {
        MessageToAppend {
            topic: topic.to_string(),
            queue_id,
            flag: 0,
            sys_flag: 0,
            born_timestamp: 0,
            born_host: SocketAddr::from(([127, 0, 0, 1], 0)),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            properties: encode_properties(properties),
            body: Bytes::from_static(b"m"),
        }
    }

    #[test]
    fn a_delayed_message_waits_in_its_level_queue_of_the_schedule_topic() {
        let routed = route_delayed(to_append("T", 2, &[("TAGS", "a"), (DELAY, "3")])).unwrap();
        assert!(routed.delayed);
        assert_eq!(routed.message.topic, SCHEDULE_TOPIC);
        assert_eq!(routed.message.queue_id, 2);
        assert_eq!(
            routed.message.properties,
            encode_properties(&[
                ("TAGS", "a"),
                (DELAY, "3"),
                (REAL_TOPIC, "T"),
                (REAL_QID, "2")
            ])
        );
    }

    #[test]
    fn a_delay_level_above_18_counts_as_18() {
        let routed = route_delayed(to_append("T", 0, &[(DELAY, " 40 ")])).unwrap();
        assert_eq!(routed.message.queue_id, 17);
        assert_eq!(property(&routed.message.properties, DELAY), Some("18"));
    }

    #[test]
    fn undelayed_messages_pass_unchanged() {
        let prepared = MessageToAppend {
            sys_flag: 0x4,
            ..to_append("T", 0, &[(DELAY, "3")])
        };
        for message in [
            to_append("T", 1, &[("TAGS", "a")]),
            to_append("T", 1, &[(DELAY, "0")]),
            to_append("T", 1, &[(DELAY, "-2")]),
            to_append(SCHEDULE_TOPIC, 1, &[(DELAY, "3")]),
            prepared,
        ] {
            let routed = route_delayed(message.clone()).unwrap();
            assert!(!routed.delayed);
            assert_eq!(routed.message, message);
        }
    }

    #[test]
    fn a_delay_level_that_is_not_a_number_is_an_error() {
        let error = route_delayed(to_append("T", 0, &[(DELAY, "soon")])).unwrap_err();
        assert_eq!(error.value, "soon");
        assert_eq!(error.to_string(), "delay level \"soon\" is not a number");
    }

    #[test]
    fn delay_levels_are_rocketmq_defaults() {
        let secs: Vec<u64> = DELAY_LEVELS.iter().map(Duration::as_secs).collect();
        assert_eq!(
            secs,
            [
                1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600,
                7200
            ]
        );
        assert_eq!(delay_of_level(1), Some(Duration::from_secs(1)));
        assert_eq!(delay_of_level(3), Some(Duration::from_secs(10)));
        assert_eq!(delay_of_level(18), Some(Duration::from_secs(7200)));
    }

    #[test]
    fn delay_level_outside_1_to_18_has_no_delay() {
        assert_eq!(delay_of_level(0), None);
        assert_eq!(delay_of_level(-1), None);
        assert_eq!(delay_of_level(19), None);
    }

    #[test]
    fn send_back_at_max_reconsume_times_goes_to_dlq() {
        assert_eq!(send_back_decision(16, 16, 0), SendBackTarget::DeadLetter);
        assert_eq!(send_back_decision(17, 16, 0), SendBackTarget::DeadLetter);
        assert_eq!(
            send_back_decision(15, 16, 0),
            SendBackTarget::Retry { delay_level: 18 }
        );
    }

    #[test]
    fn send_back_with_negative_delay_level_goes_to_dlq() {
        assert_eq!(send_back_decision(0, 16, -1), SendBackTarget::DeadLetter);
    }

    #[test]
    fn send_back_with_delay_zero_uses_three_plus_reconsume_times() {
        assert_eq!(
            send_back_decision(0, 16, 0),
            SendBackTarget::Retry { delay_level: 3 }
        );
        assert_eq!(
            send_back_decision(4, 16, 0),
            SendBackTarget::Retry { delay_level: 7 }
        );
    }

    #[test]
    fn send_back_delay_level_is_capped_at_18() {
        assert_eq!(
            send_back_decision(20, 32, 0),
            SendBackTarget::Retry { delay_level: 18 }
        );
        assert_eq!(
            send_back_decision(0, 16, 40),
            SendBackTarget::Retry { delay_level: 18 }
        );
    }

    #[test]
    fn send_back_keeps_a_requested_positive_level() {
        assert_eq!(
            send_back_decision(5, 16, 1),
            SendBackTarget::Retry { delay_level: 1 }
        );
    }

    #[test]
    fn sixteen_default_retries_run_from_10s_to_2h() {
        let delays: Vec<Duration> = (0..DEFAULT_MAX_RECONSUME_TIMES)
            .map(
                |n| match send_back_decision(n, DEFAULT_MAX_RECONSUME_TIMES, 0) {
                    SendBackTarget::Retry { delay_level } => {
                        delay_of_level(i32::from(delay_level)).unwrap()
                    }
                    SendBackTarget::DeadLetter => panic!("retry {n} went to the DLQ"),
                },
            )
            .collect();
        assert_eq!(delays.first(), Some(&Duration::from_secs(10)));
        assert_eq!(delays.last(), Some(&Duration::from_secs(7200)));
        assert_eq!(delays.len(), 16);
    }

    #[test]
    fn max_reconsume_times_minus_one_means_16_concurrent_and_unbounded_orderly() {
        assert_eq!(resolve_max_reconsume_times(-1, false), 16);
        assert_eq!(resolve_max_reconsume_times(-1, true), i32::MAX);
        assert_eq!(resolve_max_reconsume_times(3, true), 3);
    }

    #[test]
    fn retry_and_dlq_topic_names() {
        assert_eq!(retry_topic("g1"), "%RETRY%g1");
        assert_eq!(dlq_topic("g1"), "%DLQ%g1");
        assert!(is_retry_topic(&retry_topic("g1")));
        assert!(!is_retry_topic("orders"));
        assert!(!is_retry_topic(&dlq_topic("g1")));
        assert!(is_dlq_topic(&dlq_topic("g1")));
    }
}
