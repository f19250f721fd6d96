//! Timer messages (RocketMQ 5): a message delivered at an arbitrary time rather than after one
//! of the 18 delay levels.
//!
//! A producer asks with one of three properties: `TIMER_DELIVER_MS` (absolute epoch ms),
//! `TIMER_DELAY_SEC` or `TIMER_DELAY_MS` (relative to when the broker receives the send; when
//! several are set the broker reads `TIMER_DELAY_SEC`, then `TIMER_DELAY_MS`, then
//! `TIMER_DELIVER_MS`, as Apache's broker does). [`route_timer`] decides what the store does with
//! a send, and [`delivered_copy`] what the real topic gets when the timer fires.
//!
//! The rules, all from Apache's broker (`HookUtils.checkIfTimerMessage` /
//! `transformTimerMessage` and `TimerMessageStore.convertMessage`):
//!
//! - A `DELAY` level > 0 wins: the timer properties are dropped and the level applies.
//! - A message already in the timer topic, or already carrying `TIMER_OUT_MS` (a delivered copy),
//!   is not a timer again. Prepared and rolled-back transaction messages are left alone.
//! - A value that is not a number, or a delay beyond [`TIMER_MAX_DELAY_MS`] (3 days), refuses the
//!   send (MESSAGE_ILLEGAL).
//! - A deliver time not in the future is stored in its topic at once, properties as sent.
//! - Otherwise the deliver time is rounded up to [`TIMER_PRECISION_MS`] (1 s) and the message
//!   is stored in [`TIMER_TOPIC`] queue 0 with `TIMER_OUT_MS` (the rounded time), `REAL_TOPIC`
//!   and `REAL_QID`.
//!
//! One deliberate difference: Apache rounds a deliver time down to the precision (and subtracts
//! a whole second from one that is already a multiple of it), so its slot can come due up to a
//! second before the time the producer asked for; it is usually late enough that nobody sees it.
//! skiff rounds up: a timer never fires before its time, and at most the precision (plus a
//! tick) after it.

use crate::logic::delay::RETRY_TOPIC_PREFIX;
use crate::logic::transaction::{HALF_TOPIC, TRANSACTION_COMMIT_TYPE, TRANSACTION_TYPE_MASK};
use skiff_storage::message::property::{
    DELAY, REAL_QID, REAL_TOPIC, TIMER_DELAY_MS, TIMER_DELAY_SEC, TIMER_DELIVER_MS,
    TIMER_DEQUEUE_MS, TIMER_ENQUEUE_MS, TIMER_OUT_MS, UNIQ_KEY,
};
use skiff_storage::message::{
    property, with_properties, without_properties, MessageToAppend, StoredMessage,
};
use std::num::ParseIntError;

/// Where pending timer messages wait (Apache's `TimerMessageStore.TIMER_TOPIC`).
pub const TIMER_TOPIC: &str = "rmq_sys_wheel_timer";

/// Queues of [`TIMER_TOPIC`]: one, as in Apache.
pub const TIMER_QUEUE_NUMS: u32 = 1;

/// Deliver times are rounded up to this (Apache's `timerPrecisionMs`).
pub const TIMER_PRECISION_MS: i64 = 1000;

/// The longest delay accepted: 3 days (Apache's `timerMaxDelaySec`).
pub const TIMER_MAX_DELAY_MS: i64 = 3 * 24 * 60 * 60 * 1000;

/// Why a send's timer properties are refused (answered MESSAGE_ILLEGAL, 13).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTimer {
    #[error("timer message illegal: {name} {value:?} is not a number")]
    NotANumber {
        name: &'static str,
        value: String,
        #[source]
        source: ParseIntError,
    },
    #[error(
        "timer message illegal, the delay time should not be bigger than the max delay {max_ms}ms: \
         asked for {delay_ms}ms"
    )]
    TooLong { delay_ms: i64, max_ms: i64 },
}

/// What [`route_timer`] makes of a message about to be appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerRouted {
    pub message: MessageToAppend,
    /// The rounded deliver time when the message now waits in [`TIMER_TOPIC`].
    pub deliver_ms: Option<i64>,
}

fn parse(name: &'static str, raw: &str) -> Result<i64, InvalidTimer> {
    raw.trim()
        .parse::<i64>()
        .map_err(|source| InvalidTimer::NotANumber {
            name,
            value: raw.to_string(),
            source,
        })
}

/// The deliver time a message asks for, unrounded, or `None` when it carries no timer property.
pub fn requested_deliver_ms(properties: &str, now_ms: i64) -> Result<Option<i64>, InvalidTimer> {
    if let Some(raw) = property(properties, TIMER_DELAY_SEC) {
        let secs = parse(TIMER_DELAY_SEC, raw)?;
        return Ok(Some(now_ms.saturating_add(secs.saturating_mul(1000))));
    }
    if let Some(raw) = property(properties, TIMER_DELAY_MS) {
        return Ok(Some(now_ms.saturating_add(parse(TIMER_DELAY_MS, raw)?)));
    }
    match property(properties, TIMER_DELIVER_MS) {
        Some(raw) => Ok(Some(parse(TIMER_DELIVER_MS, raw)?)),
        None => Ok(None),
    }
}

/// `deliver_ms` rounded up to [`TIMER_PRECISION_MS`]: the first slot that is not early.
pub fn round_up(deliver_ms: i64) -> i64 {
    let rounded = deliver_ms.div_euclid(TIMER_PRECISION_MS) * TIMER_PRECISION_MS;
    if rounded == deliver_ms {
        rounded
    } else {
        rounded.saturating_add(TIMER_PRECISION_MS)
    }
}

fn has_delay_level(properties: &str) -> bool {
    property(properties, DELAY)
        .and_then(|raw| raw.trim().parse::<i64>().ok())
        .is_some_and(|level| level > 0)
}

/// Diverts a timer message to [`TIMER_TOPIC`] queue 0 (see the module docs for the rules).
/// `now_ms` is the broker's clock when the send arrives.
pub fn route_timer(message: MessageToAppend, now_ms: i64) -> Result<TimerRouted, InvalidTimer> {
    let as_is = |message| {
        Ok(TimerRouted {
            message,
            deliver_ms: None,
        })
    };
    // Only plain and committed messages are timers.
    let transaction = message.sys_flag & TRANSACTION_TYPE_MASK;
    // A half message waits for its transaction first (the store routes it to the half topic
    // before this runs, clearing its prepared bits): its timer starts when the commit stores
    // the real message, which comes through here again.
    if (transaction != 0 && transaction != TRANSACTION_COMMIT_TYPE) || message.topic == HALF_TOPIC {
        return as_is(message);
    }
    if has_delay_level(&message.properties) {
        let timer_properties = [TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS];
        if timer_properties
            .iter()
            .any(|name| property(&message.properties, name).is_some())
        {
            let properties = without_properties(&message.properties, &timer_properties);
            return as_is(MessageToAppend {
                properties,
                ..message
            });
        }
        return as_is(message);
    }
    if message.topic == TIMER_TOPIC || property(&message.properties, TIMER_OUT_MS).is_some() {
        return as_is(message);
    }
    let Some(deliver_ms) = requested_deliver_ms(&message.properties, now_ms)? else {
        return as_is(message);
    };
    if deliver_ms <= now_ms {
        return as_is(message);
    }
    let delay_ms = deliver_ms - now_ms;
    if delay_ms > TIMER_MAX_DELAY_MS {
        return Err(InvalidTimer::TooLong {
            delay_ms,
            max_ms: TIMER_MAX_DELAY_MS,
        });
    }
    let deliver_ms = round_up(deliver_ms);
    let properties = with_properties(
        &message.properties,
        &[
            (TIMER_OUT_MS, &deliver_ms.to_string()),
            (REAL_TOPIC, &message.topic),
            (REAL_QID, &message.queue_id.to_string()),
        ],
    );
    Ok(TimerRouted {
        message: MessageToAppend {
            topic: TIMER_TOPIC.to_string(),
            queue_id: 0,
            properties,
            ..message
        },
        deliver_ms: Some(deliver_ms),
    })
}

/// A message stored in [`TIMER_TOPIC`] as its recall handle names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTimer {
    /// The topic it will be delivered to (`REAL_TOPIC`).
    pub topic: String,
    /// `TIMER_OUT_MS`.
    pub due_ms: i64,
    /// `UNIQ_KEY`.
    pub message_id: String,
}

/// What the recall handle of a message about to be stored names, if it is a timer a producer
/// may recall: `None` for other messages, a timer without a unique key, and a retry topic's
/// timer (a consumer's retry; Java's broker gives it no handle either).
pub fn recallable(message: &MessageToAppend) -> Option<StoredTimer> {
    if message.topic != TIMER_TOPIC {
        return None;
    }
    let topic = property(&message.properties, REAL_TOPIC)?;
    if topic.starts_with(RETRY_TOPIC_PREFIX) {
        return None;
    }
    Some(StoredTimer {
        topic: topic.to_string(),
        due_ms: property(&message.properties, TIMER_OUT_MS)?
            .trim()
            .parse()
            .ok()?,
        message_id: property(&message.properties, UNIQ_KEY)?.to_string(),
    })
}

/// The due time of a message stored in [`TIMER_TOPIC`] (its `TIMER_OUT_MS`); `None` when it has
/// none that reads as a time (such a message can never be delivered).
pub fn due_ms(message: &StoredMessage) -> Option<u64> {
    message
        .property(TIMER_OUT_MS)?
        .trim()
        .parse::<i64>()
        .ok()
        .map(|ms| u64::try_from(ms).unwrap_or(0))
}

/// Why a timer message cannot be delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Undeliverable {
    #[error("timer message has no REAL_TOPIC")]
    NoRealTopic,
    #[error("timer message has no valid REAL_QID")]
    NoRealQueue,
}

/// What the real topic gets when the timer fires: the timer message as stored (body, flags,
/// born time and host, `UNIQ_KEY` and every property, including the `TIMER_*` ones,
/// `TIMER_OUT_MS`, `REAL_TOPIC` and `REAL_QID`), plus `TIMER_ENQUEUE_MS` (when the timer message
/// was stored) and `TIMER_DEQUEUE_MS` (`dequeue_ms`, the delivery round's time), and nothing
/// else: a consumer sees what it sees from Apache. (Apache's `convertMessage` clears
/// `REAL_TOPIC` / `REAL_QID` from the property map after it has already rendered the stored
/// properties string, so its delivered messages still carry both; the conformance scenario
/// `timer_delays` shows them.) The copy is a pure function of the timer message and
/// `dequeue_ms`, which is what lets crash recovery recognise it in the commit log.
pub fn delivered_copy(
    message: &StoredMessage,
    dequeue_ms: i64,
) -> Result<MessageToAppend, Undeliverable> {
    let topic = message
        .property(REAL_TOPIC)
        .filter(|t| !t.is_empty() && *t != TIMER_TOPIC)
        .ok_or(Undeliverable::NoRealTopic)?
        .to_string();
    let queue_id = message
        .property(REAL_QID)
        .and_then(|q| q.trim().parse().ok())
        .ok_or(Undeliverable::NoRealQueue)?;
    let properties = with_properties(
        &message.properties,
        &[
            (TIMER_ENQUEUE_MS, &message.store_timestamp.to_string()),
            (TIMER_DEQUEUE_MS, &dequeue_ms.to_string()),
        ],
    );
    Ok(MessageToAppend {
        topic,
        queue_id,
        properties,
        ..MessageToAppend::copy_of(message)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use skiff_storage::message::encode_properties;
    use skiff_storage::message::property::UNIQ_KEY;
    use std::net::SocketAddr;

    const NOW: i64 = 1_700_000_000_250;

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
    fn a_relative_delay_waits_in_the_timer_topic_rounded_up_to_the_second() {
        let routed = route_timer(
            to_append("T", 3, &[("TAGS", "a"), (TIMER_DELAY_SEC, "3")]),
            NOW,
        )
        .unwrap();
        // Asked for 3 s after NOW (…003_250): the first whole second not before it.
        assert_eq!(routed.deliver_ms, Some(1_700_000_004_000));
        assert_eq!(routed.message.topic, TIMER_TOPIC);
        assert_eq!(routed.message.queue_id, 0);
        assert_eq!(
            routed.message.properties,
            encode_properties(&[
                ("TAGS", "a"),
                (TIMER_DELAY_SEC, "3"),
                (TIMER_OUT_MS, "1700000004000"),
                (REAL_TOPIC, "T"),
                (REAL_QID, "3"),
            ])
        );
    }

    #[test]
    fn a_transactional_timer_waits_for_its_commit_before_the_timer_topic() {
        use crate::logic::transaction::{route_half, TRANSACTION_PREPARED_TYPE};
        let prepared = MessageToAppend {
            sys_flag: TRANSACTION_PREPARED_TYPE,
            ..to_append("T", 2, &[(TIMER_DELAY_SEC, "5"), (UNIQ_KEY, "U1")])
        };
        // As the message store routes a send: half first, then timers.
        let (half, diverted) = route_half(prepared);
        assert!(diverted);
        let routed = route_timer(half.clone(), NOW).unwrap();
        assert_eq!(routed.deliver_ms, None, "the half stays a half");
        assert_eq!(routed.message, half);
        // The committed copy (real topic, commit type) starts its timer then.
        let committed = MessageToAppend {
            sys_flag: TRANSACTION_COMMIT_TYPE,
            ..to_append("T", 2, &[(TIMER_DELAY_SEC, "5"), (UNIQ_KEY, "U1")])
        };
        let routed = route_timer(committed, NOW).unwrap();
        assert_eq!(routed.deliver_ms, Some(1_700_000_006_000));
        assert_eq!(routed.message.topic, TIMER_TOPIC);
    }

    #[test]
    fn delay_ms_and_an_absolute_deliver_time_are_rounded_up_too() {
        let ms = route_timer(to_append("T", 0, &[(TIMER_DELAY_MS, "1999")]), NOW).unwrap();
        assert_eq!(ms.deliver_ms, Some(1_700_000_003_000));
        let at = route_timer(
            to_append("T", 0, &[(TIMER_DELIVER_MS, "1700000010000")]),
            NOW,
        )
        .unwrap();
        // On a second boundary already: kept (Apache would make it a second earlier).
        assert_eq!(at.deliver_ms, Some(1_700_000_010_000));
    }

    #[test]
    fn delay_sec_wins_over_delay_ms_which_wins_over_deliver_ms() {
        let props = [
            (TIMER_DELIVER_MS, "1700000050000"),
            (TIMER_DELAY_MS, "20000"),
            (TIMER_DELAY_SEC, "10"),
        ];
        assert_eq!(
            requested_deliver_ms(&encode_properties(&props), NOW).unwrap(),
            Some(NOW + 10_000)
        );
        assert_eq!(
            requested_deliver_ms(&encode_properties(&props[..2]), NOW).unwrap(),
            Some(NOW + 20_000)
        );
        assert_eq!(requested_deliver_ms("", NOW).unwrap(), None);
    }

    #[test]
    fn a_delay_level_wins_and_the_timer_properties_are_dropped() {
        let routed = route_timer(
            to_append("T", 1, &[(DELAY, "2"), (TIMER_DELAY_SEC, "30")]),
            NOW,
        )
        .unwrap();
        assert_eq!(routed.deliver_ms, None);
        assert_eq!(routed.message, to_append("T", 1, &[(DELAY, "2")]));
    }

    #[test]
    fn more_than_three_days_is_illegal_and_three_days_is_not() {
        let three_days = TIMER_MAX_DELAY_MS.to_string();
        assert!(route_timer(to_append("T", 0, &[(TIMER_DELAY_MS, &three_days)]), NOW).is_ok());
        let too_long = (TIMER_MAX_DELAY_MS + 1).to_string();
        let error =
            route_timer(to_append("T", 0, &[(TIMER_DELAY_MS, &too_long)]), NOW).unwrap_err();
        assert_eq!(
            error,
            InvalidTimer::TooLong {
                delay_ms: TIMER_MAX_DELAY_MS + 1,
                max_ms: TIMER_MAX_DELAY_MS
            }
        );
        assert!(error.to_string().contains("max delay 259200000ms"));
    }

    #[test]
    fn a_value_that_is_not_a_number_is_illegal() {
        let error =
            route_timer(to_append("T", 0, &[(TIMER_DELIVER_MS, "tomorrow")]), NOW).unwrap_err();
        assert!(matches!(
            error,
            InvalidTimer::NotANumber {
                name: TIMER_DELIVER_MS,
                ..
            }
        ));
    }

    #[test]
    fn a_past_or_present_deliver_time_is_stored_in_its_topic_at_once() {
        for at in [NOW, NOW - 60_000, 0] {
            let message = to_append("T", 2, &[(TIMER_DELIVER_MS, &at.to_string())]);
            let routed = route_timer(message.clone(), NOW).unwrap();
            assert_eq!(routed.deliver_ms, None);
            assert_eq!(routed.message, message);
        }
        let message = to_append("T", 2, &[(TIMER_DELAY_SEC, "-5")]);
        assert_eq!(route_timer(message.clone(), NOW).unwrap().message, message);
    }

    #[test]
    fn copies_timer_topic_messages_halves_and_plain_messages_pass_unchanged() {
        let prepared = MessageToAppend {
            sys_flag: 0x4,
            ..to_append("T", 0, &[(TIMER_DELAY_SEC, "3")])
        };
        for message in [
            to_append("T", 1, &[("TAGS", "a")]),
            to_append(TIMER_TOPIC, 0, &[(TIMER_DELAY_SEC, "3")]),
            to_append("T", 0, &[(TIMER_DELAY_SEC, "3"), (TIMER_OUT_MS, "5")]),
            prepared,
        ] {
            let routed = route_timer(message.clone(), NOW).unwrap();
            assert_eq!(routed.deliver_ms, None);
            assert_eq!(routed.message, message);
        }
    }

    fn stored(properties: &[(&str, &str)]) -> StoredMessage {
        StoredMessage {
            queue_id: 0,
            flag: 7,
            queue_offset: 4,
            physical_offset: 4096,
            sys_flag: 0,
            born_timestamp: 11,
            born_host: SocketAddr::from(([10, 0, 0, 1], 5)),
            store_timestamp: 22,
            store_host: SocketAddr::from(([127, 0, 0, 1], 9876)),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: Bytes::from_static(b"hello"),
            topic: TIMER_TOPIC.to_string(),
            properties: encode_properties(properties),
            stored_size: 0,
        }
    }

    #[test]
    fn the_delivered_copy_keeps_the_producers_message_as_apache_does() {
        let timer = stored(&[
            (UNIQ_KEY, "ABC"),
            (TIMER_DELAY_SEC, "3"),
            (TIMER_OUT_MS, "3000"),
            (REAL_TOPIC, "Orders"),
            (REAL_QID, "2"),
        ]);
        assert_eq!(due_ms(&timer), Some(3000));
        let copy = delivered_copy(&timer, 3050).unwrap();
        assert_eq!(copy.topic, "Orders");
        assert_eq!(copy.queue_id, 2);
        assert_eq!((copy.flag, copy.born_timestamp), (7, 11));
        assert_eq!(copy.body, Bytes::from_static(b"hello"));
        assert_eq!(
            copy.properties,
            encode_properties(&[
                (UNIQ_KEY, "ABC"),
                (TIMER_DELAY_SEC, "3"),
                (TIMER_OUT_MS, "3000"),
                (REAL_TOPIC, "Orders"),
                (REAL_QID, "2"),
                (TIMER_ENQUEUE_MS, "22"),
                (TIMER_DEQUEUE_MS, "3050"),
            ])
        );
        // A copy is never a timer again.
        assert_eq!(route_timer(copy.clone(), 0).unwrap().message, copy);
    }

    #[test]
    fn a_timer_without_its_real_topic_or_queue_is_undeliverable() {
        assert_eq!(
            delivered_copy(&stored(&[(REAL_QID, "1")]), 0),
            Err(Undeliverable::NoRealTopic)
        );
        assert_eq!(
            delivered_copy(&stored(&[(REAL_TOPIC, "T"), (REAL_QID, "x")]), 0),
            Err(Undeliverable::NoRealQueue)
        );
        assert_eq!(due_ms(&stored(&[(TIMER_OUT_MS, "soon")])), None);
    }

    #[test]
    fn rounding_is_up_to_the_second_so_no_timer_fires_early() {
        assert_eq!(round_up(1001), 2000);
        assert_eq!(round_up(1999), 2000);
        assert_eq!(round_up(2000), 2000);
        assert_eq!(round_up(0), 0);
        for asked in [1, 999, 1000, 1500, 86_399_999] {
            assert!(round_up(asked) >= asked && round_up(asked) - asked < TIMER_PRECISION_MS);
        }
    }
}
