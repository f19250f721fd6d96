//! What a pull answers for a store read: the status, carried unchanged from the store to the
//! wire, and the offset to pull from next.

use skiff_storage::store::ReadStatus;

/// What a pull answers. The outer variant is what a consumer acts on (RocketMQ's client
/// `PullStatus`, one PULL_MESSAGE response code each); the inner one says why, as the broker's
/// `GetMessageStatus` does in the response remark (`docs/wire-protocol.md` §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullStatus {
    /// Messages were read (SUCCESS).
    Found,
    /// Messages past the offset exist but none passed the tag filter; pull again from the next
    /// offset at once (PULL_RETRY_IMMEDIATELY, remark NO_MATCHED_MESSAGE).
    NoMatchedMessage,
    /// Nothing to read at a valid offset: the consumer stays where it is (PULL_NOT_FOUND).
    NoNewMessage(NoNewMessage),
    /// The offset is not a valid place to pull from; continue at the answer's next offset
    /// (PULL_OFFSET_MOVED).
    OffsetMoved(OffsetMoved),
}

/// Why a pull at a valid offset found nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoNewMessage {
    /// The queue has never held a message and the pull asked for offset 0 (NO_MESSAGE_IN_QUEUE).
    EmptyQueue,
    /// The pull asked for the queue's max offset, the next one to be written
    /// (OFFSET_OVERFLOW_ONE).
    CaughtUp,
}

/// Why a pull's offset was moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetMoved {
    /// The queue has never held a message and the pull asked for an offset above 0; it restarts
    /// at 0 (NO_MESSAGE_IN_QUEUE).
    EmptyQueue,
    /// Below the queue's min offset; it continues at the min (OFFSET_TOO_SMALL).
    TooSmall,
    /// Beyond the queue's max offset; it continues at the max (OFFSET_OVERFLOW_BADLY).
    OverflowBadly,
    /// An admin reset was waiting for the group's next pull of the queue; it continues at the
    /// reset offset, whatever the requested one was (OFFSET_RESET).
    PendingReset,
}

/// The pull answer for a store read at `offset` (`docs/wire-protocol.md` §4.1): the status and
/// the next offset to pull from. A moved offset carries its correction
/// (`docs/offset-lifecycle.md` §1.A.12): an empty queue restarts at 0, an offset below the queue
/// at its min, one beyond it at its max. `next` is the store's next offset for a found or
/// filtered read.
pub fn pull_status(
    read: ReadStatus,
    offset: u64,
    min: u64,
    max: u64,
    next: u64,
) -> (PullStatus, u64) {
    match read {
        ReadStatus::Found => (PullStatus::Found, next),
        ReadStatus::NoMatchedMessage => (PullStatus::NoMatchedMessage, next),
        ReadStatus::NoMessageInQueue if offset == 0 => {
            (PullStatus::NoNewMessage(NoNewMessage::EmptyQueue), 0)
        }
        ReadStatus::NoMessageInQueue => (PullStatus::OffsetMoved(OffsetMoved::EmptyQueue), 0),
        ReadStatus::OffsetOverflowOne => (PullStatus::NoNewMessage(NoNewMessage::CaughtUp), offset),
        ReadStatus::OffsetOverflowBadly => {
            (PullStatus::OffsetMoved(OffsetMoved::OverflowBadly), max)
        }
        ReadStatus::OffsetTooSmall => (PullStatus::OffsetMoved(OffsetMoved::TooSmall), min),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_read_status_maps_to_a_pull_status_and_the_next_offset() {
        use super::NoNewMessage as New;
        use super::OffsetMoved as Moved;
        use PullStatus::*;
        use ReadStatus as Read;
        // skiff's store never drops old segments yet, so no queue has min > 0 to pull below in
        // the broker tests; this table is the mapping every pull goes through.
        // (store status, requested, min, max, store's next) => (pull status, next)
        #[rustfmt::skip]
        let table = [
            (Read::Found, 12, 10, 20, 15, Found, 15),
            (Read::NoMatchedMessage, 12, 10, 20, 15, NoMatchedMessage, 15),
            (Read::NoMessageInQueue, 0, 0, 0, 0, NoNewMessage(New::EmptyQueue), 0),
            (Read::NoMessageInQueue, 7, 0, 0, 0, OffsetMoved(Moved::EmptyQueue), 0),
            (Read::OffsetOverflowOne, 20, 10, 20, 0, NoNewMessage(New::CaughtUp), 20),
            (Read::OffsetOverflowBadly, 30, 10, 20, 0, OffsetMoved(Moved::OverflowBadly), 20),
            (Read::OffsetTooSmall, 3, 10, 20, 0, OffsetMoved(Moved::TooSmall), 10),
        ];
        for (read, offset, min, max, next, status, corrected) in table {
            assert_eq!(
                pull_status(read, offset, min, max, next),
                (status, corrected),
                "{read:?} at {offset} in [{min}, {max}), store next {next}"
            );
        }
    }
}
