//! Which messages of a concurrently consumed batch succeeded (RocketMQ `ackIndex`).
//!
//! The listener acknowledges a prefix of its batch: messages `0..=ack_index` succeeded, the rest
//! failed. What happens to failures is the caller's business: clustering sends them back to
//! `%RETRY%group` (re-consuming locally after 5 s if that fails), broadcasting drops them. Either
//! way every message of the batch is then removed from the process queue, so the offset moves on.
//! If the process queue was dropped while the listener ran, the caller discards the result.

use std::ops::Range;

/// What the listener returned for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeOutcome {
    /// `CONSUME_SUCCESS`. `ack_index` is the last index that succeeded; `None` means the whole
    /// batch (RocketMQ's default `Integer.MAX_VALUE`). An index past the end means the whole
    /// batch too. To acknowledge nothing, return `ReconsumeLater`.
    Success { ack_index: Option<usize> },
    /// `RECONSUME_LATER`: the whole batch failed, whatever `ack_index` was set to.
    ReconsumeLater,
    /// The listener panicked, returned an error or returned nothing: treated as
    /// `ReconsumeLater`, as RocketMQ does with an exception or a null status.
    Failed,
}

/// Index ranges of the batch: `succeeded` is always a prefix and `failed` the rest, so together
/// they cover `0..batch_size` exactly once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckSplit {
    pub succeeded: Range<usize>,
    pub failed: Range<usize>,
}

/// Split a batch of `batch_size` messages by the listener's outcome.
pub fn split_ack(batch_size: usize, outcome: ConsumeOutcome) -> AckSplit {
    let ok = match outcome {
        ConsumeOutcome::Success { ack_index } => {
            ack_index.map_or(batch_size, |i| i.saturating_add(1).min(batch_size))
        }
        ConsumeOutcome::ReconsumeLater | ConsumeOutcome::Failed => 0,
    };
    AckSplit {
        succeeded: 0..ok,
        failed: ok..batch_size,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(n: usize, o: ConsumeOutcome) -> (Range<usize>, Range<usize>) {
        let s = split_ack(n, o);
        (s.succeeded, s.failed)
    }

    #[test]
    fn success_without_ack_index_acknowledges_the_whole_batch() {
        assert_eq!(
            split(4, ConsumeOutcome::Success { ack_index: None }),
            (0..4, 4..4)
        );
    }

    #[test]
    fn ack_index_past_the_end_is_clipped_to_size_minus_one() {
        assert_eq!(
            split(
                4,
                ConsumeOutcome::Success {
                    ack_index: Some(10)
                }
            ),
            (0..4, 4..4)
        );
        assert_eq!(
            split(
                4,
                ConsumeOutcome::Success {
                    ack_index: Some(usize::MAX)
                }
            ),
            (0..4, 4..4)
        );
    }

    #[test]
    fn ack_index_splits_succeeded_prefix_from_failed_rest() {
        assert_eq!(
            split(4, ConsumeOutcome::Success { ack_index: Some(1) }),
            (0..2, 2..4)
        );
        assert_eq!(
            split(4, ConsumeOutcome::Success { ack_index: Some(0) }),
            (0..1, 1..4)
        );
    }

    #[test]
    fn reconsume_later_fails_the_whole_batch() {
        assert_eq!(split(3, ConsumeOutcome::ReconsumeLater), (0..0, 0..3));
    }

    #[test]
    fn panic_or_error_counts_as_reconsume_later() {
        assert_eq!(split(3, ConsumeOutcome::Failed), (0..0, 0..3));
    }

    #[test]
    fn empty_batch_has_nothing_to_split() {
        for o in [
            ConsumeOutcome::Success { ack_index: None },
            ConsumeOutcome::ReconsumeLater,
            ConsumeOutcome::Failed,
        ] {
            assert_eq!(split(0, o), (0..0, 0..0));
        }
    }
}
