//! Properties of queue allocation: every member of a group computes its own share from the same
//! (unsorted, possibly duplicated) inputs, and the shares must form a partition.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::sample::select;
use skiff_actors::logic::allocate::{allocate, AllocateStrategy};
use skiff_actors::logic::delay::retry_topic;
use skiff_actors::logic::MessageQueue;

fn queue() -> impl Strategy<Value = MessageQueue> {
    (
        select(vec![
            "orders".to_string(),
            "audit".to_string(),
            retry_topic("g"),
        ]),
        select(vec!["broker-a", "broker-b"]),
        0u32..12,
    )
        .prop_map(|(topic, broker, id)| MessageQueue::new(topic, broker, id))
}

fn client_id() -> impl Strategy<Value = String> {
    "[0-9]{1,3}\\.[0-9]{1,3}@[0-9]{1,5}"
}

fn strategy() -> impl Strategy<Value = AllocateStrategy> {
    prop_oneof![
        Just(AllocateStrategy::Averagely),
        Just(AllocateStrategy::AveragelyByCircle),
        (0usize..24).prop_map(|virtual_nodes| AllocateStrategy::ConsistentHash { virtual_nodes }),
    ]
}

/// Each member's share, computed as each member would: independently.
fn shares(
    strategy: AllocateStrategy,
    queues: &[MessageQueue],
    clients: &[String],
) -> BTreeMap<String, Vec<MessageQueue>> {
    clients
        .iter()
        .map(|c| (c.clone(), allocate(strategy, c, queues, clients)))
        .collect()
}

/// Two shuffled copies of the same list.
fn shuffled_pair<T: Clone + std::fmt::Debug>(
    items: impl Strategy<Value = Vec<T>>,
) -> impl Strategy<Value = (Vec<T>, Vec<T>)> {
    items.prop_flat_map(|v| (Just(v.clone()).prop_shuffle(), Just(v).prop_shuffle()))
}

proptest! {
    #[test]
    fn every_queue_is_allocated_to_exactly_one_client(
        strategy in strategy(),
        queues in prop::collection::vec(queue(), 0..40),
        clients in prop::collection::vec(client_id(), 1..8),
    ) {
        let unique: BTreeSet<MessageQueue> = queues.iter().cloned().collect();
        let mut owner: BTreeMap<MessageQueue, String> = BTreeMap::new();
        for (client, share) in shares(strategy, &queues, &clients) {
            for mq in share {
                prop_assert!(unique.contains(&mq), "allocated a queue that does not exist");
                if let Some(other) = owner.insert(mq.clone(), client.clone()) {
                    prop_assert!(false, "{mq} allocated to both {other} and {client}");
                }
            }
        }
        prop_assert_eq!(owner.len(), unique.len(), "some queue has no owner");
    }

    #[test]
    fn averagely_sizes_differ_by_at_most_one(
        circle in any::<bool>(),
        queues in prop::collection::vec(queue(), 0..40),
        clients in prop::collection::vec(client_id(), 1..8),
    ) {
        let strategy = if circle {
            AllocateStrategy::AveragelyByCircle
        } else {
            AllocateStrategy::Averagely
        };
        let sizes: Vec<usize> = shares(strategy, &queues, &clients).values().map(Vec::len).collect();
        let max = sizes.iter().max().copied().unwrap_or(0);
        let min = sizes.iter().min().copied().unwrap_or(0);
        prop_assert!(max - min <= 1, "sizes {sizes:?}");
    }

    #[test]
    fn averagely_shares_are_contiguous_in_sorted_order(
        queues in prop::collection::vec(queue(), 0..40),
        clients in prop::collection::vec(client_id(), 1..8),
    ) {
        // Concatenating the shares in sorted member order gives the sorted queue list back, and
        // the larger shares come first.
        let by_client = shares(AllocateStrategy::Averagely, &queues, &clients);
        let concatenated: Vec<MessageQueue> = by_client.values().flatten().cloned().collect();
        let sorted: Vec<MessageQueue> =
            queues.iter().cloned().collect::<BTreeSet<_>>().into_iter().collect();
        prop_assert_eq!(concatenated, sorted);
        let sizes: Vec<usize> = by_client.values().map(Vec::len).collect();
        prop_assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "sizes {sizes:?}");
    }

    #[test]
    fn allocation_is_deterministic_regardless_of_input_order(
        strategy in strategy(),
        (queues_a, queues_b) in shuffled_pair(prop::collection::vec(queue(), 0..40)),
        (clients_a, clients_b) in shuffled_pair(prop::collection::vec(client_id(), 1..8)),
    ) {
        for client in &clients_a {
            prop_assert_eq!(
                allocate(strategy, client, &queues_a, &clients_a),
                allocate(strategy, client, &queues_b, &clients_b)
            );
        }
    }

    #[test]
    fn client_not_in_the_list_gets_nothing(
        strategy in strategy(),
        queues in prop::collection::vec(queue(), 0..40),
        clients in prop::collection::vec(client_id(), 1..8),
    ) {
        // Client ids generated above always contain '@'.
        prop_assert!(allocate(strategy, "not-a-member", &queues, &clients).is_empty());
    }

    #[test]
    fn consistent_hash_only_moves_the_leaving_clients_queues(
        virtual_nodes in 1usize..24,
        queues in prop::collection::vec(queue(), 1..40),
        clients in prop::collection::btree_set(client_id(), 2..8),
        leaving in any::<prop::sample::Index>(),
    ) {
        let strategy = AllocateStrategy::ConsistentHash { virtual_nodes };
        let before: Vec<String> = clients.iter().cloned().collect();
        let gone = leaving.get(&before).clone();
        let after: Vec<String> = before.iter().filter(|c| **c != gone).cloned().collect();
        let old = shares(strategy, &queues, &before);
        let new = shares(strategy, &queues, &after);
        for client in &after {
            let kept: BTreeSet<_> = old[client].iter().collect();
            let now: BTreeSet<_> = new[client].iter().collect();
            prop_assert!(kept.is_subset(&now), "{client} lost a queue when {gone} left");
            for mq in now.difference(&kept) {
                prop_assert!(old[&gone].contains(mq), "{mq} moved between staying members");
            }
        }
    }
}
