//! Where a newly assigned queue starts (RocketMQ `computePullFromWhere`).
//!
//! `ConsumeFromWhere` only matters when the group has no stored offset for the queue; a stored
//! offset always wins. A failed read is not "no offset": treating it as such is how RocketMQ
//! rolled offsets back to the queue start (#2708), so it skips the queue for this round.

use std::time::Duration;

use super::delay::is_retry_topic;

/// Where a group with no stored offset starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConsumeFromWhere {
    /// From the newest message (RocketMQ's default). Note the broker already answers 0 instead
    /// of "not found" for a young topic whose first message is still in memory.
    #[default]
    LastOffset,
    /// From the oldest message still stored.
    FirstOffset,
    /// From the first message stored at or after this time (millis since the epoch).
    Timestamp(i64),
}

impl ConsumeFromWhere {
    /// RocketMQ's default `consumeTimestamp` is half an hour before the consumer starts.
    pub const DEFAULT_TIMESTAMP_LOOKBACK: Duration = Duration::from_secs(30 * 60);

    /// RocketMQ's name of the setting, as heartbeats carry it.
    pub fn rocketmq_name(self) -> &'static str {
        match self {
            ConsumeFromWhere::LastOffset => "CONSUME_FROM_LAST_OFFSET",
            ConsumeFromWhere::FirstOffset => "CONSUME_FROM_FIRST_OFFSET",
            ConsumeFromWhere::Timestamp(_) => "CONSUME_FROM_TIMESTAMP",
        }
    }
}

/// The outcome of reading the stored offset from the offset store (read from the store, not
/// the memory cache, as RocketMQ's `READ_FROM_STORE`). `E` is the read's failure, handed back in
/// [`PullFrom::Skip`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredOffset<E = ()> {
    Found(u64),
    NotFound,
    /// The read failed (RPC error, timeout). Never read as "not found".
    Error(E),
}

/// What to pull from; the two middle cases need one more broker call by the actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullFrom<E = ()> {
    Offset(u64),
    /// Ask the broker for the queue's max offset and start there.
    MaxOffset,
    /// Ask the broker to search the queue for this timestamp (millis).
    SearchTimestamp(i64),
    /// Do not start this queue this round, because the stored offset could not be read; the
    /// next rebalance tries again. (A failed follow-up max-offset or search call skips too.)
    Skip(E),
}

/// The §1.B.5 decision. `topic` decides the retry-topic special cases: a `%RETRY%` topic under
/// `LastOffset` starts at 0 (retries already waiting must not be skipped), and under
/// `Timestamp` at the max offset (old retries are not replayed by a time-based start).
pub fn compute_pull_from<E>(
    from: ConsumeFromWhere,
    stored: StoredOffset<E>,
    topic: &str,
) -> PullFrom<E> {
    let retry = is_retry_topic(topic);
    match stored {
        StoredOffset::Found(offset) => PullFrom::Offset(offset),
        StoredOffset::Error(error) => PullFrom::Skip(error),
        StoredOffset::NotFound => match from {
            ConsumeFromWhere::LastOffset if retry => PullFrom::Offset(0),
            ConsumeFromWhere::LastOffset => PullFrom::MaxOffset,
            ConsumeFromWhere::FirstOffset => PullFrom::Offset(0),
            ConsumeFromWhere::Timestamp(_) if retry => PullFrom::MaxOffset,
            ConsumeFromWhere::Timestamp(ts) => PullFrom::SearchTimestamp(ts),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logic::delay::retry_topic;

    const TS: i64 = 1_700_000_000_000;

    fn all_modes() -> [ConsumeFromWhere; 3] {
        [
            ConsumeFromWhere::LastOffset,
            ConsumeFromWhere::FirstOffset,
            ConsumeFromWhere::Timestamp(TS),
        ]
    }

    #[test]
    fn stored_offset_always_wins() {
        for from in all_modes() {
            for topic in ["orders".to_string(), retry_topic("g")] {
                assert_eq!(
                    compute_pull_from(from, StoredOffset::<()>::Found(42), &topic),
                    PullFrom::Offset(42)
                );
            }
        }
        assert_eq!(
            compute_pull_from(
                ConsumeFromWhere::LastOffset,
                StoredOffset::<()>::Found(0),
                "orders"
            ),
            PullFrom::Offset(0)
        );
    }

    #[test]
    fn read_error_skips_the_queue_never_resets() {
        for from in all_modes() {
            for topic in ["orders".to_string(), retry_topic("g")] {
                assert_eq!(
                    compute_pull_from(from, StoredOffset::Error(()), &topic),
                    PullFrom::Skip(())
                );
            }
        }
    }

    #[test]
    fn last_offset_without_stored_offset_starts_at_max() {
        assert_eq!(
            compute_pull_from(
                ConsumeFromWhere::LastOffset,
                StoredOffset::<()>::NotFound,
                "orders"
            ),
            PullFrom::MaxOffset
        );
    }

    #[test]
    fn last_offset_on_retry_topic_starts_at_zero() {
        assert_eq!(
            compute_pull_from(
                ConsumeFromWhere::LastOffset,
                StoredOffset::<()>::NotFound,
                &retry_topic("g")
            ),
            PullFrom::Offset(0)
        );
    }

    #[test]
    fn first_offset_without_stored_offset_starts_at_zero() {
        for topic in ["orders".to_string(), retry_topic("g")] {
            assert_eq!(
                compute_pull_from(
                    ConsumeFromWhere::FirstOffset,
                    StoredOffset::<()>::NotFound,
                    &topic
                ),
                PullFrom::Offset(0)
            );
        }
    }

    #[test]
    fn timestamp_without_stored_offset_searches_by_time() {
        assert_eq!(
            compute_pull_from(
                ConsumeFromWhere::Timestamp(TS),
                StoredOffset::<()>::NotFound,
                "orders"
            ),
            PullFrom::SearchTimestamp(TS)
        );
    }

    #[test]
    fn timestamp_on_retry_topic_starts_at_max() {
        assert_eq!(
            compute_pull_from(
                ConsumeFromWhere::Timestamp(TS),
                StoredOffset::<()>::NotFound,
                &retry_topic("g")
            ),
            PullFrom::MaxOffset
        );
    }

    #[test]
    fn heartbeats_carry_rocketmq_names() {
        assert_eq!(
            ConsumeFromWhere::LastOffset.rocketmq_name(),
            "CONSUME_FROM_LAST_OFFSET"
        );
        assert_eq!(
            ConsumeFromWhere::FirstOffset.rocketmq_name(),
            "CONSUME_FROM_FIRST_OFFSET"
        );
        assert_eq!(
            ConsumeFromWhere::Timestamp(TS).rocketmq_name(),
            "CONSUME_FROM_TIMESTAMP"
        );
    }

    #[test]
    fn default_is_last_offset_with_half_hour_lookback() {
        assert_eq!(ConsumeFromWhere::default(), ConsumeFromWhere::LastOffset);
        assert_eq!(
            ConsumeFromWhere::DEFAULT_TIMESTAMP_LOOKBACK,
            Duration::from_secs(1800)
        );
    }
}
