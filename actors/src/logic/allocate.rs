//! Queue allocation for clustering consumers, the diff a rebalance applies, and the broker's
//! pop-mode share of queues (QUERY_ASSIGNMENT).
//!
//! Every consumer of a group runs [`allocate`] on its own, with the same queue list and the same
//! member list (both fetched from the broker), and must arrive at a partition of the queues: each
//! queue owned by exactly one member. No coordination is needed because the inputs are sorted
//! first and the strategies are deterministic, as in RocketMQ's `RebalanceImpl`.

use std::collections::{BTreeMap, BTreeSet};

use super::queue::MessageQueue;

/// How the sorted queue list is split among the sorted member list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AllocateStrategy {
    /// Contiguous ranges; the first `queues % members` members get one extra queue.
    /// RocketMQ's default (`AllocateMessageQueueAveragely`, name "AVG").
    #[default]
    Averagely,
    /// Round robin: member `i` gets queues `i`, `i + n`, `i + 2n`, ...
    /// (`AllocateMessageQueueAveragelyByCircle`, "AVG_BY_CIRCLE").
    AveragelyByCircle,
    /// A hash ring with `virtual_nodes` points per member; a queue goes to the first point at or
    /// after its own hash, wrapping around. Adding or removing a member only moves the queues that
    /// member gains or loses. (`AllocateMessageQueueConsistentHash`, "CONSISTENT_HASH").
    ConsistentHash { virtual_nodes: usize },
}

impl AllocateStrategy {
    /// RocketMQ's default number of virtual nodes per member.
    pub const DEFAULT_VIRTUAL_NODES: usize = 10;

    /// Consistent hashing with RocketMQ's default of 10 virtual nodes.
    pub fn consistent_hash() -> Self {
        AllocateStrategy::ConsistentHash {
            virtual_nodes: Self::DEFAULT_VIRTUAL_NODES,
        }
    }

    /// RocketMQ's strategy name, as reported in consumer running info and logs.
    pub fn name(&self) -> &'static str {
        match self {
            AllocateStrategy::Averagely => "AVG",
            AllocateStrategy::AveragelyByCircle => "AVG_BY_CIRCLE",
            AllocateStrategy::ConsistentHash { .. } => "CONSISTENT_HASH",
        }
    }

    /// The strategy RocketMQ's name stands for (QUERY_ASSIGNMENT's `strategyName`); consistent
    /// hashing with the default virtual nodes. `None` for a name skiff does not know.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "AVG" => Some(AllocateStrategy::Averagely),
            "AVG_BY_CIRCLE" => Some(AllocateStrategy::AveragelyByCircle),
            "CONSISTENT_HASH" => Some(AllocateStrategy::consistent_hash()),
            _ => None,
        }
    }
}

/// The queues `current_client_id` should own.
///
/// Queues and client ids are sorted and de-duplicated first (RocketMQ sorts; it holds queues in a
/// set and the broker sends each member once, so de-duplicating changes nothing there and keeps
/// "each queue exactly once" true for any input). The result is sorted.
///
/// A client id that is not in `all_client_ids` gets nothing (RocketMQ logs this as "[BUG]": the
/// broker does not know us yet, typically before our first heartbeat landed).
///
/// Empty `all_queues` or `all_client_ids` also give nothing. RocketMQ throws there and leaves its
/// process queues alone for that round, so the coordinator should treat an empty (or failed)
/// member or route list as "skip this round", not diff against an empty allocation.
pub fn allocate<S: AsRef<str>>(
    strategy: AllocateStrategy,
    current_client_id: &str,
    all_queues: &[MessageQueue],
    all_client_ids: &[S],
) -> Vec<MessageQueue> {
    let queues: Vec<&MessageQueue> = all_queues
        .iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let clients: Vec<&str> = all_client_ids
        .iter()
        .map(AsRef::as_ref)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let Ok(index) = clients.binary_search(&current_client_id) else {
        return Vec::new();
    };
    if queues.is_empty() {
        return Vec::new();
    }

    let picked: Vec<&MessageQueue> = match strategy {
        AllocateStrategy::Averagely => {
            let (start, len) = averagely_range(queues.len(), clients.len(), index);
            queues[start..start + len].to_vec()
        }
        AllocateStrategy::AveragelyByCircle => queues
            .iter()
            .skip(index)
            .step_by(clients.len())
            .copied()
            .collect(),
        AllocateStrategy::ConsistentHash { virtual_nodes } => {
            let ring = HashRing::new(&clients, virtual_nodes);
            queues
                .iter()
                .filter(|mq| ring.route(&queue_ring_key(mq)) == current_client_id)
                .copied()
                .collect()
        }
    };
    picked.into_iter().cloned().collect()
}

/// The queues a pop-mode consumer is assigned (QUERY_ASSIGNMENT, Java's
/// `QueryAssignmentProcessor.doLoadBalance`), `client_ids` sorted. `None`: every queue, popped as
/// one (queue id -1), which is what a `pop_share_queue_num` of zero or below, or one that covers
/// every other consumer, gives. Otherwise each consumer pops its own allocation and those of the
/// `pop_share_queue_num` consumers after it; with more consumers than queues it gets only its own.
pub fn pop_share_assignment(
    strategy: AllocateStrategy,
    client_id: &str,
    all_queues: &[MessageQueue],
    client_ids: &[String],
    pop_share_queue_num: i32,
) -> Option<Vec<MessageQueue>> {
    let share = usize::try_from(pop_share_queue_num)
        .ok()
        .filter(|share| *share > 0 && *share < client_ids.len().saturating_sub(1))?;
    if client_ids.len() > all_queues.len() {
        return Some(allocate(strategy, client_id, all_queues, client_ids));
    }
    let mut mine = allocate(strategy, client_id, all_queues, client_ids);
    if let Some(index) = client_ids.iter().position(|c| c == client_id) {
        for step in 1..=share {
            let other = &client_ids[(index + step) % client_ids.len()];
            mine.extend(allocate(strategy, other, all_queues, client_ids));
        }
    }
    mine.sort();
    mine.dedup();
    Some(mine)
}

/// Start index and length of member `index`'s contiguous range among `queues` queues shared by
/// `clients` members. The first `queues % clients` members take `queues / clients + 1`, the rest
/// `queues / clients`; with fewer queues than members, the first `queues` members get one each
/// and the others none (same numbers as `AllocateMessageQueueAveragely`).
fn averagely_range(queues: usize, clients: usize, index: usize) -> (usize, usize) {
    let base = queues / clients;
    let extra = queues % clients;
    if index < extra {
        (index * (base + 1), base + 1)
    } else {
        (index * base + extra, base)
    }
}

/// The key a queue is hashed by: Java's `MessageQueue.toString()`, which is what RocketMQ hashes,
/// so queues land where a Java consumer of the same group puts them.
fn queue_ring_key(mq: &MessageQueue) -> String {
    format!(
        "MessageQueue [topic={}, brokerName={}, queueId={}]",
        mq.topic, mq.broker_name, mq.queue_id
    )
}

/// The hash ring: point -> member. Built from members in sorted order and virtual node `i` keyed
/// `"{client_id}-{i}"`, as RocketMQ's `ConsistentHashRouter`/`VirtualNode` do; on a point
/// collision the later insert wins, which sorted insertion makes deterministic.
struct HashRing<'a> {
    points: BTreeMap<u32, &'a str>,
}

impl<'a> HashRing<'a> {
    fn new(sorted_clients: &[&'a str], virtual_nodes: usize) -> Self {
        // RocketMQ accepts 0, which leaves an empty ring and every queue unowned. Nobody wants
        // that: one point per member is the least that keeps the partition total.
        let virtual_nodes = virtual_nodes.max(1);
        let mut points = BTreeMap::new();
        for client in sorted_clients {
            for i in 0..virtual_nodes {
                points.insert(ring_hash(&format!("{client}-{i}")), *client);
            }
        }
        HashRing { points }
    }

    /// The owner of `key`: the first point at or after its hash, wrapping to the smallest point.
    /// The ring always has a point because `new` gets at least one member and one node each.
    fn route(&self, key: &str) -> &'a str {
        let hash = ring_hash(key);
        self.points
            .range(hash..)
            .next()
            .or_else(|| self.points.iter().next())
            .map(|(_, client)| *client)
            .expect("hash ring built from at least one member")
    }
}

/// Position on the ring: the first 4 bytes of the key's MD5 digest, big-endian, as RocketMQ's
/// `ConsistentHashRouter` places nodes and queues. Using Java's exact hash lets skiff and Java
/// consumers share one consistent-hash group: every member must compute the same ring.
fn ring_hash(key: &str) -> u32 {
    use md5::{Digest, Md5};
    let digest = Md5::digest(key.as_bytes());
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// What a rebalance round changes for one topic, all three lists sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RebalanceDiff {
    /// Owned now but no longer allocated: stop pulling, hand off (persist the final offset), drop.
    pub to_stop: Vec<MessageQueue>,
    /// Newly allocated: compute where to pull from, (orderly: lock first), start.
    pub to_start: Vec<MessageQueue>,
    /// Owned and still allocated: leave running.
    pub kept: Vec<MessageQueue>,
}

impl RebalanceDiff {
    /// True when something was started or stopped. RocketMQ then runs `messageQueueChanged`
    /// (bump the subscription version, re-split per-topic flow limits, send a heartbeat).
    pub fn changed(&self) -> bool {
        !self.to_stop.is_empty() || !self.to_start.is_empty()
    }
}

/// Compare the queues this consumer runs (`current`, for one topic) with a fresh allocation.
/// `allocated` may be unsorted and hold duplicates.
pub fn rebalance_diff(
    current: &BTreeSet<MessageQueue>,
    allocated: &[MessageQueue],
) -> RebalanceDiff {
    let allocated: BTreeSet<&MessageQueue> = allocated.iter().collect();
    RebalanceDiff {
        to_stop: current
            .iter()
            .filter(|mq| !allocated.contains(mq))
            .cloned()
            .collect(),
        to_start: allocated
            .iter()
            .filter(|mq| !current.contains(**mq))
            .map(|mq| (*mq).clone())
            .collect(),
        kept: current
            .iter()
            .filter(|mq| allocated.contains(mq))
            .cloned()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues(n: u32) -> Vec<MessageQueue> {
        (0..n).map(|i| MessageQueue::new("t", "b", i)).collect()
    }

    fn ids(v: &[MessageQueue]) -> Vec<u32> {
        v.iter().map(|mq| mq.queue_id).collect()
    }

    fn clients(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("c{i}")).collect()
    }

    #[test]
    fn strategy_names_are_rocketmqs() {
        let table = [
            ("AVG", Some(AllocateStrategy::Averagely)),
            ("AVG_BY_CIRCLE", Some(AllocateStrategy::AveragelyByCircle)),
            ("CONSISTENT_HASH", Some(AllocateStrategy::consistent_hash())),
            ("avg", None),
            ("MACHINE_ROOM", None),
            ("", None),
        ];
        for (name, strategy) in table {
            assert_eq!(AllocateStrategy::from_name(name), strategy, "{name:?}");
            if let Some(strategy) = strategy {
                assert_eq!(strategy.name(), name);
            }
        }
    }

    #[test]
    fn pop_share_gives_each_consumer_its_queues_and_its_next_neighbours() {
        use AllocateStrategy::Averagely;
        // (queues, clients, pop_share_queue_num, queue ids each client gets; None: all as one)
        type Shares<'a> = &'a [Option<&'a [u32]>];
        let table: [(u32, usize, i32, Shares); 7] = [
            (8, 4, 0, &[None, None, None, None]),
            (8, 4, -1, &[None, None, None, None]),
            // Sharing with every other consumer is every queue.
            (8, 4, 3, &[None, None, None, None]),
            (8, 3, 2, &[None, None, None]),
            (
                8,
                4,
                1,
                &[
                    Some(&[0, 1, 2, 3]),
                    Some(&[2, 3, 4, 5]),
                    Some(&[4, 5, 6, 7]),
                    Some(&[0, 1, 6, 7]),
                ],
            ),
            (
                8,
                4,
                2,
                &[
                    Some(&[0, 1, 2, 3, 4, 5]),
                    Some(&[2, 3, 4, 5, 6, 7]),
                    Some(&[0, 1, 4, 5, 6, 7]),
                    Some(&[0, 1, 2, 3, 6, 7]),
                ],
            ),
            // More consumers than queues: each keeps its own allocation only.
            (2, 4, 1, &[Some(&[0]), Some(&[1]), Some(&[]), Some(&[])]),
        ];
        for (queue_count, client_count, share, expected) in table {
            let qs = queues(queue_count);
            let cs = clients(client_count);
            let got: Vec<Option<Vec<u32>>> = cs
                .iter()
                .map(|c| pop_share_assignment(Averagely, c, &qs, &cs, share).map(|q| ids(&q)))
                .collect();
            let expected: Vec<Option<Vec<u32>>> =
                expected.iter().map(|q| q.map(<[u32]>::to_vec)).collect();
            assert_eq!(
                got, expected,
                "{queue_count} queues, {client_count} clients, share {share}"
            );
        }
    }

    #[test]
    fn averagely_strategies_split_queues_as_rocketmq_does() {
        use AllocateStrategy::{Averagely, AveragelyByCircle};
        // (strategy, queues, clients, queue ids each client gets, in client order)
        let table: [(AllocateStrategy, u32, usize, &[&[u32]]); 6] = [
            (Averagely, 8, 2, &[&[0, 1, 2, 3], &[4, 5, 6, 7]]),
            // The first `queues % clients` members get one extra (the example in RocketMQ's docs).
            (Averagely, 8, 3, &[&[0, 1, 2], &[3, 4, 5], &[6, 7]]),
            // More members than queues: the last ones stay idle.
            (Averagely, 2, 4, &[&[0], &[1], &[], &[]]),
            (AveragelyByCircle, 8, 3, &[&[0, 3, 6], &[1, 4, 7], &[2, 5]]),
            (AveragelyByCircle, 2, 4, &[&[0], &[1], &[], &[]]),
            (AveragelyByCircle, 4, 1, &[&[0, 1, 2, 3]]),
        ];
        for (strategy, queue_count, client_count, expected) in table {
            let qs = queues(queue_count);
            let cs = clients(client_count);
            let got: Vec<Vec<u32>> = cs
                .iter()
                .map(|c| ids(&allocate(strategy, c, &qs, &cs)))
                .collect();
            assert_eq!(
                got, expected,
                "{strategy:?}: {queue_count} queues over {client_count} clients"
            );
        }
    }

    #[test]
    fn allocation_sorts_queues_and_client_ids_first() {
        let mut qs = queues(6);
        qs.reverse();
        let cs = vec!["c1".to_string(), "c0".to_string()];
        assert_eq!(
            ids(&allocate(AllocateStrategy::Averagely, "c0", &qs, &cs)),
            [0, 1, 2]
        );
        // Sorting is by topic, then broker, then queue id, not by queue id alone.
        let mixed = vec![
            MessageQueue::new("t", "b2", 0),
            MessageQueue::new("t", "b1", 1),
            MessageQueue::new("t", "b1", 0),
            MessageQueue::new("t", "b2", 1),
        ];
        assert_eq!(
            allocate(AllocateStrategy::Averagely, "c0", &mixed, &cs),
            vec![
                MessageQueue::new("t", "b1", 0),
                MessageQueue::new("t", "b1", 1)
            ]
        );
    }

    #[test]
    fn client_not_in_list_gets_nothing() {
        let qs = queues(4);
        let cs = clients(2);
        for strategy in [
            AllocateStrategy::Averagely,
            AllocateStrategy::AveragelyByCircle,
            AllocateStrategy::consistent_hash(),
        ] {
            assert!(allocate(strategy, "stranger", &qs, &cs).is_empty());
        }
    }

    #[test]
    fn empty_queue_or_client_list_allocates_nothing() {
        let none: [&str; 0] = [];
        assert!(allocate(AllocateStrategy::Averagely, "c0", &queues(4), &none).is_empty());
        assert!(allocate(AllocateStrategy::Averagely, "c0", &[], &["c0"]).is_empty());
    }

    #[test]
    fn duplicate_queues_and_client_ids_count_once() {
        let mut qs = queues(4);
        qs.extend(queues(4));
        let cs = ["c0", "c1", "c1", "c0"];
        assert_eq!(
            ids(&allocate(AllocateStrategy::Averagely, "c1", &qs, &cs)),
            [2, 3]
        );
    }

    #[test]
    fn consistent_hash_partitions_queues() {
        let qs = queues(32);
        let cs = clients(5);
        let mut seen = BTreeSet::new();
        for c in &cs {
            for mq in allocate(AllocateStrategy::consistent_hash(), c, &qs, &cs) {
                assert!(seen.insert(mq), "queue allocated twice");
            }
        }
        assert_eq!(seen.len(), qs.len());
    }

    #[test]
    fn consistent_hash_only_moves_queues_to_a_joining_client() {
        let qs = queues(64);
        let before = clients(4);
        let after = clients(5);
        let strategy = AllocateStrategy::consistent_hash();
        let joined = "c4";
        let gained: BTreeSet<_> = allocate(strategy, joined, &qs, &after)
            .into_iter()
            .collect();
        for c in &before {
            let old: BTreeSet<_> = allocate(strategy, c, &qs, &before).into_iter().collect();
            let new: BTreeSet<_> = allocate(strategy, c, &qs, &after).into_iter().collect();
            assert!(
                new.is_subset(&old),
                "{c} gained a queue from another old member"
            );
            assert!(old.difference(&new).all(|mq| gained.contains(mq)));
        }
    }

    #[test]
    fn consistent_hash_with_zero_virtual_nodes_still_allocates_every_queue() {
        let qs = queues(8);
        let cs = clients(2);
        let strategy = AllocateStrategy::ConsistentHash { virtual_nodes: 0 };
        let total: usize = cs
            .iter()
            .map(|c| allocate(strategy, c, &qs, &cs).len())
            .sum();
        assert_eq!(total, 8);
    }

    #[test]
    fn ring_hash_is_stable() {
        // MD5("") = d41d8cd9..., MD5("abc") = 90015098...: Java's first-4-bytes-big-endian.
        assert_eq!(ring_hash(""), 0xd41d_8cd9);
        assert_eq!(ring_hash("abc"), 0x9001_5098);
        assert_ne!(ring_hash("c0-0"), ring_hash("c0-1"));
    }

    #[test]
    fn strategy_names_match_rocketmq() {
        assert_eq!(AllocateStrategy::default().name(), "AVG");
        assert_eq!(AllocateStrategy::AveragelyByCircle.name(), "AVG_BY_CIRCLE");
        assert_eq!(
            AllocateStrategy::consistent_hash().name(),
            "CONSISTENT_HASH"
        );
        assert_eq!(
            AllocateStrategy::consistent_hash(),
            AllocateStrategy::ConsistentHash { virtual_nodes: 10 }
        );
    }

    #[test]
    fn rebalance_diff_splits_into_stop_start_kept() {
        let current: BTreeSet<_> = queues(4).into_iter().take(3).collect(); // 0, 1, 2
        let allocated = vec![
            MessageQueue::new("t", "b", 3),
            MessageQueue::new("t", "b", 1),
            MessageQueue::new("t", "b", 2),
            MessageQueue::new("t", "b", 3),
        ];
        let diff = rebalance_diff(&current, &allocated);
        assert_eq!(ids(&diff.to_stop), [0]);
        assert_eq!(ids(&diff.to_start), [3]);
        assert_eq!(ids(&diff.kept), [1, 2]);
        assert!(diff.changed());
    }

    #[test]
    fn rebalance_diff_unchanged_when_allocation_is_the_same() {
        let current: BTreeSet<_> = queues(3).into_iter().collect();
        let diff = rebalance_diff(&current, &queues(3));
        assert!(!diff.changed());
        assert_eq!(diff.kept.len(), 3);
    }
}
