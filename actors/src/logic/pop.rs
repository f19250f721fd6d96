//! Pop consumption's rules (RocketMQ 5, `docs/offset-lifecycle.md` §1.H): the receipt a popped
//! message carries, the offset bookkeeping strings of a pop answer, the pop retry topic, where a
//! group with no offset starts, what happens to a message nobody acknowledged in time, and the
//! per-queue state of orderly pop.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};

use super::delay::RETRY_TOPIC_PREFIX;

/// The revive queue id an orderly pop's receipt carries (`KeyBuilder.POP_ORDER_REVIVE_QUEUE`);
/// an acknowledgement with it goes to the orderly bookkeeping.
pub const ORDER_REVIVE_QUEUE: i32 = 999;
/// Revive queue ids handed out round robin to unordered pops (`reviveQueueNum`); skiff keeps one
/// checkpoint table, so the id only has to look like Java's.
pub const REVIVE_QUEUE_NUM: i32 = 8;
/// Most messages one pop may ask for (Java answers INVALID_PARAMETER above it).
pub const MAX_POP_MESSAGES: i32 = 32;
/// Queue count of a pop retry topic (`PopAckConstants.retryQueueNum`).
pub const POP_RETRY_QUEUE_NUMS: u32 = 1;
/// Chance in percent that a pop reads the retry topic before the topic itself
/// (`popFromRetryProbability`); otherwise the retry topic only fills what is left.
pub const POP_FROM_RETRY_PERCENT: u32 = 20;

/// The group's pop retry topic for `topic`: `%RETRY%group_topic`, the form Java's broker uses
/// with its default `enableRetryTopicV2 = false`.
pub fn pop_retry_topic(group: &str, topic: &str) -> String {
    format!("{RETRY_TOPIC_PREFIX}{group}_{topic}")
}

fn pop_retry_topic_v2(group: &str, topic: &str) -> String {
    format!("{RETRY_TOPIC_PREFIX}{group}+{topic}")
}

/// Which kind of topic a popped message was read from, as receipts and offset infos name it:
/// `0` the topic itself, `1` the pop retry topic, `2` the `+` form of it (accepted, never made).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TopicKind {
    Normal,
    Retry,
    RetryV2,
}

impl TopicKind {
    /// The kind of a stored topic name (`ExtraInfoUtil.getRetry`).
    pub fn of(topic: &str) -> TopicKind {
        if topic.starts_with(RETRY_TOPIC_PREFIX) && topic.contains('+') {
            TopicKind::RetryV2
        } else if topic.starts_with(RETRY_TOPIC_PREFIX) {
            TopicKind::Retry
        } else {
            TopicKind::Normal
        }
    }

    pub fn mark(self) -> &'static str {
        match self {
            TopicKind::Normal => "0",
            TopicKind::Retry => "1",
            TopicKind::RetryV2 => "2",
        }
    }

    /// The kind a receipt or batch ack names by its mark.
    pub fn from_mark(mark: &str) -> Option<TopicKind> {
        match mark {
            "0" => Some(TopicKind::Normal),
            "1" => Some(TopicKind::Retry),
            "2" => Some(TopicKind::RetryV2),
            _ => None,
        }
    }

    /// The stored topic a message of this kind was read from, for a consumer of `topic`.
    pub fn stored_topic(self, group: &str, topic: &str) -> String {
        match self {
            TopicKind::Normal => topic.to_owned(),
            TopicKind::Retry => pop_retry_topic(group, topic),
            TopicKind::RetryV2 => pop_retry_topic_v2(group, topic),
        }
    }
}

/// How a pop hands messages out. Unordered: each message is held invisible by a checkpoint of
/// its own until acknowledged or revived, and the group's offset moves past it at once. Orderly:
/// the queue is blocked, its offset left where it is, until the whole batch is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PopMode {
    Unordered,
    Orderly,
}

impl PopMode {
    pub fn of(orderly: bool) -> PopMode {
        if orderly {
            PopMode::Orderly
        } else {
            PopMode::Unordered
        }
    }

    /// The mode of a pop by the revive queue id it reported: an orderly pop reports its own.
    pub fn of_revive_queue(revive_queue_id: i32) -> PopMode {
        PopMode::of(revive_queue_id == ORDER_REVIVE_QUEUE)
    }
}

/// The receipt of one popped message (the `POP_CK` property, Java's `extraInfo`): the pop's
/// checkpoint offset, pop time, invisible time, revive queue, topic kind, broker and queue, and
/// the message's own queue offset. Acknowledgements and invisible-time changes send it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub checkpoint_offset: u64,
    pub pop_time_ms: i64,
    pub invisible_ms: i64,
    pub revive_queue_id: i32,
    pub kind: TopicKind,
    pub broker_name: String,
    pub queue_id: u32,
    /// Absent in the 7-field form some clients build for the first message of a queue.
    pub queue_offset: Option<u64>,
}

/// A receipt that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the receipt {receipt:?} is not `offset popTime invisibleTime reviveQid kind broker queueId [queueOffset]`")]
pub struct InvalidReceipt {
    pub receipt: String,
}

impl Receipt {
    pub fn parse(receipt: &str) -> Result<Receipt, InvalidReceipt> {
        let invalid = || InvalidReceipt {
            receipt: receipt.to_owned(),
        };
        let fields: Vec<&str> = receipt.split(' ').collect();
        if fields.len() < 7 {
            return Err(invalid());
        }
        let num = |i: usize| fields[i].parse::<i64>().map_err(|_| invalid());
        let unsigned = |i: usize| fields[i].parse::<u64>().map_err(|_| invalid());
        Ok(Receipt {
            checkpoint_offset: unsigned(0)?,
            pop_time_ms: num(1)?,
            invisible_ms: num(2)?,
            revive_queue_id: fields[3].parse().map_err(|_| invalid())?,
            kind: TopicKind::from_mark(fields[4]).ok_or_else(invalid)?,
            broker_name: fields[5].to_owned(),
            queue_id: fields[6].parse().map_err(|_| invalid())?,
            queue_offset: fields.get(7).map(|_| unsigned(7)).transpose()?,
        })
    }

    pub fn is_orderly(&self) -> bool {
        self.revive_queue_id == ORDER_REVIVE_QUEUE
    }

    /// The mode of the pop that handed the message out.
    pub fn mode(&self) -> PopMode {
        PopMode::of_revive_queue(self.revive_queue_id)
    }
}

impl fmt::Display for Receipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {} {} {}",
            self.checkpoint_offset,
            self.pop_time_ms,
            self.invisible_ms,
            self.revive_queue_id,
            self.kind.mark(),
            self.broker_name,
            self.queue_id
        )?;
        if let Some(offset) = self.queue_offset {
            write!(f, " {offset}")?;
        }
        Ok(())
    }
}

/// A pop answer's bookkeeping, from which a client builds each message's receipt: the queues
/// read, in body order, with the offsets of their messages, and for orderly pops how often each
/// message was handed out before. The remoting door sends it as three strings
/// ([`Self::start_offsets`], [`Self::message_offsets`], [`Self::order_counts`]); the gRPC door
/// reads the data, so a pop formats nothing it does not send.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetInfo {
    pub queues: Vec<QueueShare>,
    /// Topic kind, queue, offset and how often the message was handed out before.
    pub counts: Vec<(TopicKind, u32, u64, u32)>,
}

/// One queue's share of a pop answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueShare {
    pub kind: TopicKind,
    pub queue_id: u32,
    /// Where the pop read the queue from: the checkpoint offset of its receipts.
    pub start_offset: u64,
    /// The queue offsets of its messages, in body order.
    pub offsets: Vec<u64>,
}

/// `;`-joined entries, as Java's `ExtraInfoUtil` writes them.
fn joined<T>(items: &[T], mut entry: impl FnMut(&mut String, &T)) -> String {
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(';');
        }
        entry(&mut out, item);
    }
    out
}

impl OffsetInfo {
    /// Records one queue's share of the answer.
    pub fn add_queue(&mut self, topic: &str, queue_id: u32, start_offset: u64, offsets: Vec<u64>) {
        self.queues.push(QueueShare {
            kind: TopicKind::of(topic),
            queue_id,
            start_offset,
            offsets,
        });
    }

    /// Records how often each message of an orderly pop was handed out before.
    pub fn add_order_counts(&mut self, topic: &str, queue_id: u32, counts: &[(u64, u32)]) {
        let kind = TopicKind::of(topic);
        self.counts.extend(
            counts
                .iter()
                .map(|(offset, count)| (kind, queue_id, *offset, *count)),
        );
    }

    /// `kind queueId startOffset` per queue (the remoting `startOffsetInfo`).
    pub fn start_offsets(&self) -> String {
        joined(&self.queues, |out, q| {
            // Writing to a String cannot fail.
            let _ = write!(out, "{} {} {}", q.kind.mark(), q.queue_id, q.start_offset);
        })
    }

    /// `kind queueId offset,offset,...` per queue, in body order (the remoting `msgOffsetInfo`).
    pub fn message_offsets(&self) -> String {
        joined(&self.queues, |out, q| {
            let _ = write!(out, "{} {} ", q.kind.mark(), q.queue_id);
            for (i, offset) in q.offsets.iter().enumerate() {
                let separator = if i == 0 { "" } else { "," };
                let _ = write!(out, "{separator}{offset}");
            }
        })
    }

    /// `kind qo<queueId>%<offset> count` per message of an orderly pop (the remoting
    /// `orderCountInfo`).
    pub fn order_counts(&self) -> String {
        joined(&self.counts, |out, (kind, queue_id, offset, count)| {
            let _ = write!(out, "{} qo{queue_id}%{offset} {count}", kind.mark());
        })
    }
}

/// Where a group with no stored offset starts popping a queue (`getInitOffset`): a retry topic,
/// or init mode MIN, from the oldest message; init mode MAX from the newest one, except a
/// queue that still holds its first message starts from it, as Java's broker does while that
/// message is in memory.
pub fn initial_pop_offset(from_min: bool, is_retry_topic: bool, min: u64, max: u64) -> u64 {
    if from_min || is_retry_topic || min == 0 {
        min
    } else {
        max.saturating_sub(1).max(min)
    }
}

/// Where a popped message nobody acknowledged in time is stored again: the pop retry topic of
/// the topic it came from (a message already in a retry topic stays there). As on Java's broker
/// this happens however often it was reconsumed: the group's `retryMaxTimes` does not apply to
/// pop, the consumer forwards a message it gives up on to the dead-letter topic itself
/// (CONSUMER_SEND_MSG_BACK with delay level -1, as the 5.x proxy does).
pub fn revival_topic(group: &str, stored_topic: &str) -> String {
    if stored_topic.starts_with(RETRY_TOPIC_PREFIX) {
        stored_topic.to_owned()
    } else {
        pop_retry_topic(group, stored_topic)
    }
}

/// The batch an orderly pop handed out from one queue, which blocks the queue until every
/// message is acknowledged or the invisible time passes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct OrderlyBatch {
    pop_time_ms: i64,
    visible_at_ms: i64,
    offsets: Vec<u64>,
    /// The offset after the batch: where the group continues once all is acknowledged.
    next_offset: u64,
    acked: BTreeSet<u64>,
}

/// One queue's orderly-pop state for one group (Java's `ConsumerOrderInfoManager` entry). The
/// broker keeps it durably, so a restart neither frees a queue whose batch is still out nor
/// forgets how often its messages were handed out.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OrderlyQueue {
    batch: Option<OrderlyBatch>,
    /// How often each offset was handed out; forgotten once the offset is committed past.
    handed_out: BTreeMap<u64, u32>,
}

impl OrderlyQueue {
    /// Whether a batch is still out: not all acknowledged and still invisible.
    pub fn is_blocked(&self, now_ms: i64) -> bool {
        self.blocked_until(now_ms).is_some()
    }

    /// When the batch still out becomes visible again, while it blocks the queue.
    pub fn blocked_until(&self, now_ms: i64) -> Option<i64> {
        self.batch
            .as_ref()
            .filter(|b| now_ms < b.visible_at_ms && b.acked.len() < b.offsets.len())
            .map(|b| b.visible_at_ms)
    }

    /// Hands out a batch; answers, per offset, how often it was handed out before (the
    /// message's reconsume count).
    pub fn hand_out(
        &mut self,
        offsets: &[u64],
        next_offset: u64,
        pop_time_ms: i64,
        invisible_ms: i64,
    ) -> Vec<(u64, u32)> {
        if let Some(first) = offsets.first() {
            self.handed_out = self.handed_out.split_off(first);
        }
        let counts = offsets
            .iter()
            .map(|offset| {
                let count = self.handed_out.entry(*offset).or_insert(0);
                let before = *count;
                *count += 1;
                (*offset, before)
            })
            .collect();
        self.batch = Some(OrderlyBatch {
            pop_time_ms,
            visible_at_ms: pop_time_ms.saturating_add(invisible_ms),
            offsets: offsets.to_vec(),
            next_offset,
            acked: BTreeSet::new(),
        });
        counts
    }

    /// Acknowledges one message of the batch popped at `pop_time_ms`. Answers the offset to
    /// commit when the acknowledgement moves it: the first message not yet acknowledged, or the
    /// end of the batch once all are. A receipt of an older batch changes nothing.
    pub fn ack(&mut self, offset: u64, pop_time_ms: i64) -> Option<u64> {
        let batch = self.batch.as_mut()?;
        if batch.pop_time_ms != pop_time_ms || !batch.offsets.contains(&offset) {
            return None;
        }
        if !batch.acked.insert(offset) {
            return None;
        }
        let first_open = batch.offsets.iter().find(|o| !batch.acked.contains(o));
        match first_open {
            Some(open) => (*open > batch.offsets[0]).then_some(*open),
            None => {
                let next = batch.next_offset;
                self.handed_out = self.handed_out.split_off(&next);
                self.batch = None;
                Some(next)
            }
        }
    }

    /// Whether nothing is out and nothing is counted: the entry can go.
    pub fn is_idle(&self) -> bool {
        self.batch.is_none() && self.handed_out.is_empty()
    }

    /// Moves the batch's visibility to `visible_at_ms`, when `pop_time_ms` names it.
    pub fn change_invisible(&mut self, pop_time_ms: i64, visible_at_ms: i64) -> bool {
        match self.batch.as_mut() {
            Some(batch) if batch.pop_time_ms == pop_time_ms => {
                batch.visible_at_ms = visible_at_ms;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts_round_trip_in_both_forms_and_bad_ones_are_refused() {
        let full = "12 1700000000000 60000 3 1 broker-a 0 14";
        let receipt = Receipt::parse(full).unwrap();
        assert_eq!(receipt.checkpoint_offset, 12);
        assert_eq!(receipt.kind, TopicKind::Retry);
        assert_eq!(receipt.queue_offset, Some(14));
        assert_eq!(receipt.to_string(), full);
        let short = Receipt::parse("0 5 6 999 0 b 2").unwrap();
        assert!(short.is_orderly());
        assert_eq!(short.queue_offset, None);
        assert_eq!(short.to_string(), "0 5 6 999 0 b 2");
        for bad in [
            "",
            "1 2 3",
            "x 1 2 3 0 b 0",
            "1 2 3 4 7 b 0",
            "1 2 3 4 0 b -1 5",
        ] {
            assert!(Receipt::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn topic_kinds_name_the_stored_topic_as_java_does() {
        assert_eq!(TopicKind::of("t"), TopicKind::Normal);
        assert_eq!(TopicKind::of("%RETRY%g_t"), TopicKind::Retry);
        assert_eq!(TopicKind::of("%RETRY%g+t"), TopicKind::RetryV2);
        assert_eq!(TopicKind::Retry.stored_topic("g", "t"), "%RETRY%g_t");
        assert_eq!(TopicKind::RetryV2.stored_topic("g", "t"), "%RETRY%g+t");
        assert_eq!(TopicKind::Normal.stored_topic("g", "t"), "t");
    }

    #[test]
    fn offset_info_lists_each_queue_in_body_order() {
        let mut info = OffsetInfo::default();
        info.add_queue("t", 2, 5, vec![5, 7]);
        info.add_queue("%RETRY%g_t", 0, 0, vec![0]);
        assert_eq!(info.start_offsets(), "0 2 5;1 0 0");
        assert_eq!(info.message_offsets(), "0 2 5,7;1 0 0");
        assert_eq!(info.order_counts(), "");
        info.add_order_counts("t", 2, &[(5, 0), (7, 2)]);
        assert_eq!(info.order_counts(), "0 qo2%5 0;0 qo2%7 2");
        assert_eq!(
            info.counts,
            [(TopicKind::Normal, 2, 5, 0), (TopicKind::Normal, 2, 7, 2)]
        );
    }

    #[test]
    fn a_new_group_starts_at_min_or_at_the_newest_message() {
        assert_eq!(initial_pop_offset(true, false, 3, 10), 3);
        assert_eq!(initial_pop_offset(false, true, 3, 10), 3);
        assert_eq!(initial_pop_offset(false, false, 3, 10), 9);
        // A young queue that still holds its first message starts from it.
        assert_eq!(initial_pop_offset(false, false, 0, 10), 0);
        assert_eq!(initial_pop_offset(false, false, 5, 5), 5);
    }

    #[test]
    fn unacknowledged_messages_go_to_the_retry_topic_of_where_they_came_from() {
        assert_eq!(revival_topic("g", "t"), "%RETRY%g_t");
        assert_eq!(revival_topic("g", "%RETRY%g_t"), "%RETRY%g_t");
    }

    #[test]
    fn an_orderly_queue_blocks_until_acked_or_invisible_time_passes() {
        let mut q = OrderlyQueue::default();
        assert!(!q.is_blocked(0));
        assert_eq!(
            q.hand_out(&[4, 5, 6], 7, 1_000, 10_000),
            vec![(4, 0), (5, 0), (6, 0)]
        );
        assert!(q.is_blocked(1_000));
        assert!(
            !q.is_blocked(11_000),
            "visible again after the invisible time"
        );
        // A receipt of another pop changes nothing.
        assert_eq!(q.ack(4, 999), None);
        assert_eq!(q.ack(5, 1_000), None, "offset 4 still holds the commit");
        assert_eq!(q.ack(4, 1_000), Some(6));
        assert!(q.is_blocked(1_000));
        assert_eq!(q.ack(6, 1_000), Some(7));
        assert!(!q.is_blocked(1_000));
    }

    #[test]
    fn an_orderly_batch_handed_out_again_counts_its_attempts() {
        let mut q = OrderlyQueue::default();
        q.hand_out(&[0, 1], 2, 0, 5_000);
        assert_eq!(q.ack(0, 0), Some(1));
        // Offset 1 expired unacknowledged; the next pop starts at the committed offset 1.
        assert_eq!(q.hand_out(&[1, 2], 3, 6_000, 5_000), vec![(1, 1), (2, 0)]);
        assert!(q.change_invisible(6_000, 20_000));
        assert!(!q.change_invisible(0, 50_000));
        assert!(q.is_blocked(15_000));
        assert_eq!(q.hand_out(&[1, 2], 3, 21_000, 5_000), vec![(1, 2), (2, 1)]);
    }
}
