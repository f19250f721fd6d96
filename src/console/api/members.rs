//! A group's members as the group page lists them: each client's address, language, version and
//! protocol as its connection reported them, and the queues it holds.
//!
//! A RocketMQ consumer chooses its queues itself (rebalance), so the broker cannot read them off
//! anything; the page shows what the clients' default strategy, `AllocateMessageQueueAveragely`,
//! gives each member of the group as the broker sees it (every queue to each member of a
//! broadcasting group), and says so.

use serde_json::{json, Value};

use skiff_actors::broker::BrokerHandle;
use skiff_actors::broker_api::MessageModel;

use super::ApiError;

/// The queue indexes (into the sorted queue list of `queues`) that member `index` of `members`
/// receives from `AllocateMessageQueueAveragely`.
fn averaged_share(index: usize, members: usize, queues: usize) -> Vec<usize> {
    if members == 0 || queues == 0 || index >= members {
        return Vec::new();
    }
    let rest = queues % members;
    let size = if queues <= members {
        1
    } else if rest > 0 && index < rest {
        queues / members + 1
    } else {
        queues / members
    };
    let start = if rest > 0 && index < rest {
        index * size
    } else {
        index * size + rest
    };
    let count = size.min(queues.saturating_sub(start));
    (0..count).map(|i| (start + i) % queues).collect()
}

/// Every member with its connection's description and the queues it holds by the default
/// allocation: `[{client_id, address, language, version, protocol, queues: [{topic, queue_id}]}]`.
pub(super) fn describe(
    broker: &BrokerHandle,
    members: &[String],
    model: MessageModel,
    topics: &[String],
) -> Result<Vec<Value>, ApiError> {
    let mut sorted: Vec<&String> = members.iter().collect();
    sorted.sort();
    let mut queues_of_topic = Vec::new();
    for topic in topics {
        let count = broker.topic(topic)?.map_or(0, |c| c.read_queue_nums);
        queues_of_topic.push((topic, count));
    }
    let mut out = Vec::with_capacity(sorted.len());
    for (index, client_id) in sorted.iter().enumerate() {
        let description = broker.connections().description_of(client_id);
        let mut held = Vec::new();
        for (topic, count) in &queues_of_topic {
            let count = usize::try_from(*count).unwrap_or(0);
            let share: Vec<usize> = match model {
                MessageModel::Broadcasting => (0..count).collect(),
                MessageModel::Clustering => averaged_share(index, sorted.len(), count),
            };
            held.extend(
                share
                    .into_iter()
                    .map(|queue_id| json!({ "topic": topic, "queue_id": queue_id })),
            );
        }
        out.push(json!({
            "client_id": client_id,
            "address": description.as_ref().map(|d| d.address.clone()),
            "language": description.as_ref().map(|d| d.language.clone()),
            "version": description.as_ref().map(|d| d.version.clone()),
            "protocol": description.as_ref().map(|d| d.protocol),
            "queues": held,
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::averaged_share;

    #[test]
    fn averaged_share_splits_as_the_java_strategy_does() {
        // 4 queues over 3 members: the first gets two, the others one each, in order.
        assert_eq!(averaged_share(0, 3, 4), vec![0, 1]);
        assert_eq!(averaged_share(1, 3, 4), vec![2]);
        assert_eq!(averaged_share(2, 3, 4), vec![3]);
        // More members than queues: the last ones get none.
        assert_eq!(averaged_share(1, 3, 2), vec![1]);
        assert_eq!(averaged_share(2, 3, 2), Vec::<usize>::new());
        assert_eq!(averaged_share(0, 1, 3), vec![0, 1, 2]);
    }
}
