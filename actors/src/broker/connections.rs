//! Who is connected: the one registry of client connections, by [`ConnectionId`] (RocketMQ's
//! `ProducerManager` and `ConsumerManager`), whichever door the client came by. Per connection
//! it keeps what the client said of itself, the ways the broker calls the client back (the
//! consumer-ids-changed notifier, the transaction check listener), the producers registered
//! through it by group, and what each consumer reported on it (consume type, model, and its
//! last full subscription set: a heartbeat V2 leaves an unchanged set out). Admin listings of
//! every door read it; a door keeps only the handles that reach its own connections. A closed
//! connection is cleared here in one call ([`Connections::close`]).
//!
//! Who is in a consumer group (expiry, rebalance notifications) is the membership actor's
//! decision; its members name their connection, and it reaches them through this registry.
//!
//! Wire-free: a remoting connection and an in-process client register alike, each with the id
//! its callbacks name. Shared by the broker handle, the membership actor and the transaction
//! actor, which all live on the broker's arbiter thread; callbacks are not `Send`, hence an
//! `Rc` rather than actor messages.

use crate::broker_api::{
    ConnectionId, ConsumerHeartbeat, ConsumerNotifier, SubscriptionEntry, TransactionCheckListener,
};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;

/// What the broker holds of one client connection.
#[derive(Default)]
struct ClientConnection {
    notifier: Option<Arc<dyn ConsumerNotifier>>,
    /// Heartbeats that registered the notifier and are still on their way to the membership
    /// actor: the notifier is kept for them even when no member needs it right now.
    heartbeats_in_flight: u32,
    checker: Option<Arc<dyn TransactionCheckListener>>,
    /// Producer group → client ids registered through this connection.
    producers: BTreeMap<String, BTreeSet<String>>,
    /// What each consumer last reported, by (group, client id).
    consumers: BTreeMap<(String, String), ConsumerHeartbeat>,
    /// What the client said of itself, for admin listings.
    description: Option<ClientDescription>,
}

/// A client as admin listings show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientDescription {
    pub client_id: String,
    /// `host:port` of the client's end.
    pub address: String,
    /// `JAVA`, `PYTHON`, `GOLANG`, ...
    pub language: String,
    /// The client's version as it names it (`5.2.0`).
    pub version: String,
    /// The remoting client's version number (Java's `MQVersion` ordinal), which remoting
    /// listings carry; 0 (unknown) for a client that only names its version, as gRPC's do.
    pub version_code: i32,
    /// The protocol it speaks, `grpc` or `remoting`.
    pub protocol: &'static str,
}

/// A consumer as admin listings show it: where it reported, who it is and what it reported.
#[derive(Debug, Clone)]
pub struct ConnectedConsumer {
    pub connection: ConnectionId,
    pub description: ClientDescription,
    pub consumer: ConsumerHeartbeat,
}

/// Cheap to clone; every clone is the same registry.
#[derive(Clone, Default)]
pub struct Connections {
    table: Rc<RefCell<BTreeMap<ConnectionId, ClientConnection>>>,
}

impl Connections {
    /// Registers (or replaces) the notifier of its connection for a heartbeat on its way to the
    /// membership actor, which calls [`Self::heartbeat_recorded`] once it took it.
    pub fn register_notifier(&self, notifier: Arc<dyn ConsumerNotifier>) {
        let connection = notifier.connection();
        let mut table = self.table.borrow_mut();
        let entry = table.entry(connection).or_default();
        entry.notifier = Some(notifier);
        entry.heartbeats_in_flight += 1;
    }

    /// A heartbeat [`Self::register_notifier`] announced was recorded (or lost).
    pub fn heartbeat_recorded(&self, connection: ConnectionId) {
        if let Some(entry) = self.table.borrow_mut().get_mut(&connection) {
            entry.heartbeats_in_flight = entry.heartbeats_in_flight.saturating_sub(1);
        }
    }

    /// No consumer of `connection` is in a group any more: its notifier is dropped, unless a
    /// heartbeat that needs it is on its way (a later heartbeat registers it again).
    pub fn forget_notifier(&self, connection: ConnectionId) {
        let mut table = self.table.borrow_mut();
        let Some(entry) = table.get_mut(&connection) else {
            return;
        };
        if entry.heartbeats_in_flight > 0 {
            return;
        }
        entry.notifier = None;
        if entry.checker.is_none() && entry.producers.is_empty() && entry.consumers.is_empty() {
            table.remove(&connection);
        }
    }

    /// How the broker reaches the consumers of `connection`, while it is open.
    pub fn notifier(&self, connection: ConnectionId) -> Option<Arc<dyn ConsumerNotifier>> {
        self.table
            .borrow()
            .get(&connection)
            .and_then(|c| c.notifier.clone())
    }

    /// Registers (or refreshes) a producer of `group` reached through `listener`'s connection.
    /// A client id registered for the group through another connection moves here.
    pub fn register_producer(
        &self,
        group: &str,
        client_id: &str,
        listener: Arc<dyn TransactionCheckListener>,
    ) {
        let connection = listener.connection();
        let mut table = self.table.borrow_mut();
        for (id, other) in table.iter_mut() {
            if *id != connection {
                remove_producer(&mut other.producers, client_id, Some(group));
            }
        }
        let entry = table.entry(connection).or_default();
        entry.checker = Some(listener);
        entry
            .producers
            .entry(group.to_string())
            .or_default()
            .insert(client_id.to_string());
    }

    /// Removes a producer from one group, or from every group when `group` is `None`.
    pub fn unregister_producer(&self, client_id: &str, group: Option<&str>) {
        for connection in self.table.borrow_mut().values_mut() {
            remove_producer(&mut connection.producers, client_id, group);
        }
    }

    /// The check listener of a live producer of `group`, if any: the first by client id, so the
    /// choice is stable.
    pub fn checker_of_group(&self, group: &str) -> Option<Arc<dyn TransactionCheckListener>> {
        let table = self.table.borrow();
        table
            .values()
            .filter_map(|c| {
                let first = c.producers.get(group)?.first()?;
                Some((first, c.checker.clone()?))
            })
            .min_by(|(a, _), (b, _)| a.cmp(b))
            .map(|(_, checker)| checker)
    }

    /// Every producer group with a registered producer, sorted.
    pub fn producer_groups(&self) -> BTreeSet<String> {
        self.table
            .borrow()
            .values()
            .flat_map(|c| c.producers.keys().cloned())
            .collect()
    }

    /// Client ids of a group's registered producers, sorted.
    pub fn producers_of(&self, group: &str) -> Vec<String> {
        let table = self.table.borrow();
        let ids: BTreeSet<&String> = table
            .values()
            .filter_map(|c| c.producers.get(group))
            .flatten()
            .collect();
        ids.into_iter().cloned().collect()
    }

    /// Records what a consumer reported on `connection` in its heartbeat.
    pub fn record_consumer(&self, connection: ConnectionId, heartbeat: ConsumerHeartbeat) {
        let key = (heartbeat.group.clone(), heartbeat.client_id.clone());
        self.table
            .borrow_mut()
            .entry(connection)
            .or_default()
            .consumers
            .insert(key, heartbeat);
    }

    /// The last subscription set a consumer reported on `connection`, for a heartbeat V2 that
    /// left it out. An empty set counts as unknown, so such a client is asked for its full set
    /// rather than kept with none.
    pub fn subscriptions(
        &self,
        connection: ConnectionId,
        group: &str,
        client_id: &str,
    ) -> Option<Vec<SubscriptionEntry>> {
        self.table.borrow().get(&connection).and_then(|c| {
            c.consumers
                .get(&(group.to_string(), client_id.to_string()))
                .map(|h| h.subscriptions.clone())
                .filter(|s| !s.is_empty())
        })
    }

    /// A consumer left `group` (UNREGISTER_CLIENT, gRPC's termination notice): what it
    /// reported is forgotten on every connection, as membership forgets it by client id.
    pub fn forget_consumer(&self, group: &str, client_id: &str) {
        let key = (group.to_string(), client_id.to_string());
        for connection in self.table.borrow_mut().values_mut() {
            connection.consumers.remove(&key);
        }
    }

    /// The described consumers of `group`, one per client id, sorted by client id. A client id
    /// reported on two connections (a client that reconnected before its old connection was
    /// seen closing) is listed from the newer one. Clients that never described themselves
    /// (in-process ones) are not listed.
    pub fn consumers_of(&self, group: &str) -> Vec<ConnectedConsumer> {
        let table = self.table.borrow();
        let mut by_client: BTreeMap<&str, ConnectedConsumer> = BTreeMap::new();
        for (id, connection) in table.iter() {
            let Some(description) = &connection.description else {
                continue;
            };
            for ((g, client_id), heartbeat) in &connection.consumers {
                if g == group {
                    // Ascending connection ids: a later one replaces an earlier one.
                    by_client.insert(
                        client_id,
                        ConnectedConsumer {
                            connection: *id,
                            description: description.clone(),
                            consumer: heartbeat.clone(),
                        },
                    );
                }
            }
        }
        by_client.into_values().collect()
    }

    /// The described producers of `group`: each client id with what its connection's client
    /// said of itself, sorted by client id.
    pub fn producer_descriptions(&self, group: &str) -> Vec<(String, ClientDescription)> {
        let table = self.table.borrow();
        let mut by_client: BTreeMap<&str, ClientDescription> = BTreeMap::new();
        for connection in table.values() {
            let (Some(description), Some(ids)) =
                (&connection.description, connection.producers.get(group))
            else {
                continue;
            };
            for id in ids {
                by_client.insert(id, description.clone());
            }
        }
        by_client
            .into_iter()
            .map(|(id, d)| (id.to_owned(), d))
            .collect()
    }

    /// Groups with a consumer that reported a subscription to `topic`.
    pub fn groups_subscribing(&self, topic: &str) -> BTreeSet<String> {
        self.table
            .borrow()
            .values()
            .flat_map(|c| c.consumers.values())
            .filter(|h| h.subscriptions.iter().any(|s| s.topic == topic))
            .map(|h| h.group.clone())
            .collect()
    }

    /// The connection a consumer of `group` last reported on, for a door to reach it there.
    pub fn connection_of_consumer(&self, group: &str, client_id: &str) -> Option<ConnectionId> {
        let key = (group.to_string(), client_id.to_string());
        self.table
            .borrow()
            .iter()
            .rev()
            .find(|(_, c)| c.consumers.contains_key(&key))
            .map(|(id, _)| *id)
    }

    /// The connection a producer is registered through, whatever its group (Java's
    /// `ProducerManager.findChannel`).
    pub fn connection_of_producer(&self, client_id: &str) -> Option<ConnectionId> {
        self.table
            .borrow()
            .iter()
            .find(|(_, c)| c.producers.values().any(|ids| ids.contains(client_id)))
            .map(|(id, _)| *id)
    }

    /// Records what the client on `connection` said of itself.
    pub fn describe(&self, connection: ConnectionId, description: ClientDescription) {
        self.table
            .borrow_mut()
            .entry(connection)
            .or_default()
            .description = Some(description);
    }

    /// The description of a client id, from whichever connection it is registered through.
    pub fn description_of(&self, client_id: &str) -> Option<ClientDescription> {
        self.table
            .borrow()
            .values()
            .filter_map(|c| c.description.as_ref())
            .find(|d| d.client_id == client_id)
            .cloned()
    }

    /// What every described client said of itself, one per connection.
    pub fn descriptions(&self) -> Vec<ClientDescription> {
        self.table
            .borrow()
            .values()
            .filter_map(|c| c.description.clone())
            .collect()
    }

    /// A connection closed: everything registered through it is gone. Answers how many producer
    /// registrations it held.
    pub fn close(&self, connection: ConnectionId) -> usize {
        self.table
            .borrow_mut()
            .remove(&connection)
            .map(|c| c.producers.values().map(BTreeSet::len).sum())
            .unwrap_or(0)
    }

    /// Every connection is forgotten (the broker shut down).
    pub fn clear(&self) {
        self.table.borrow_mut().clear();
    }
}

fn remove_producer(
    producers: &mut BTreeMap<String, BTreeSet<String>>,
    client_id: &str,
    group: Option<&str>,
) {
    for (name, members) in producers.iter_mut() {
        if group.is_none_or(|g| g == name) {
            members.remove(client_id);
        }
    }
    producers.retain(|_, members| !members.is_empty());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker_api::TransactionCheck;

    struct Listener(ConnectionId);

    impl TransactionCheckListener for Listener {
        fn connection(&self) -> ConnectionId {
            self.0
        }
        fn check_transaction_state(&self, _: TransactionCheck) {}
    }

    fn listener(id: u64) -> Arc<dyn TransactionCheckListener> {
        Arc::new(Listener(ConnectionId(id)))
    }

    #[test]
    fn a_producer_is_picked_by_lowest_client_id_over_every_connection() {
        let connections = Connections::default();
        connections.register_producer("P", "b", listener(1));
        connections.register_producer("P", "a", listener(2));
        let picked = connections.checker_of_group("P").map(|l| l.connection());
        assert_eq!(picked, Some(ConnectionId(2)));
        assert_eq!(connections.producers_of("P"), ["a", "b"]);
        assert!(connections.checker_of_group("Q").is_none());
    }

    #[test]
    fn a_closed_connection_takes_only_its_producers() {
        let connections = Connections::default();
        connections.register_producer("P", "a", listener(1));
        connections.register_producer("Q", "a", listener(1));
        connections.register_producer("P", "b", listener(2));
        assert_eq!(connections.close(ConnectionId(1)), 2);
        assert_eq!(connections.producers_of("P"), ["b"]);
        assert!(connections.producers_of("Q").is_empty());
        assert_eq!(connections.close(ConnectionId(1)), 0);
    }

    #[test]
    fn a_client_id_registered_again_moves_to_its_new_connection() {
        let connections = Connections::default();
        connections.register_producer("P", "a", listener(1));
        connections.register_producer("P", "a", listener(2));
        assert_eq!(connections.close(ConnectionId(1)), 0);
        assert_eq!(connections.producers_of("P"), ["a"]);
        connections.unregister_producer("a", Some("P"));
        assert!(connections.checker_of_group("P").is_none());
    }

    struct Notifier(ConnectionId);

    impl ConsumerNotifier for Notifier {
        fn connection(&self) -> ConnectionId {
            self.0
        }
        fn consumer_ids_changed(&self, _: &str) {}
    }

    #[test]
    fn a_notifier_is_kept_while_a_heartbeat_needing_it_is_on_its_way() {
        let connections = Connections::default();
        connections.register_notifier(Arc::new(Notifier(ConnectionId(1))));
        connections.forget_notifier(ConnectionId(1));
        assert!(connections.notifier(ConnectionId(1)).is_some());
        connections.heartbeat_recorded(ConnectionId(1));
        connections.forget_notifier(ConnectionId(1));
        assert!(connections.notifier(ConnectionId(1)).is_none());
    }

    fn heartbeat(group: &str, client_id: &str, topics: &[&str]) -> ConsumerHeartbeat {
        ConsumerHeartbeat {
            client_id: client_id.into(),
            group: group.into(),
            consume_type: crate::broker_api::ConsumeType::Passively,
            message_model: crate::broker_api::MessageModel::Clustering,
            consume_from_where: "CONSUME_FROM_LAST_OFFSET".into(),
            subscriptions: topics
                .iter()
                .map(|t| SubscriptionEntry {
                    topic: (*t).into(),
                    expression_type: crate::broker_api::ExpressionType::Tag,
                    expression: "*".into(),
                    sub_version: 1,
                })
                .collect(),
        }
    }

    fn described(connections: &Connections, id: u64, client_id: &str) {
        connections.describe(
            ConnectionId(id),
            ClientDescription {
                client_id: client_id.into(),
                address: format!("127.0.0.1:{}", 40000 + id),
                language: "JAVA".into(),
                version: "V5_2_0".into(),
                version_code: 475,
                protocol: "remoting",
            },
        );
    }

    #[test]
    fn subscriptions_are_remembered_per_connection_until_it_closes() {
        let connections = Connections::default();
        let reported = heartbeat("G", "c", &["T"]);
        connections.record_consumer(ConnectionId(1), reported.clone());
        assert_eq!(
            connections.subscriptions(ConnectionId(1), "G", "c"),
            Some(reported.subscriptions)
        );
        assert_eq!(connections.subscriptions(ConnectionId(2), "G", "c"), None);
        connections.close(ConnectionId(1));
        assert_eq!(connections.subscriptions(ConnectionId(1), "G", "c"), None);
    }

    #[test]
    fn an_empty_subscription_set_is_asked_for_again() {
        let connections = Connections::default();
        connections.record_consumer(ConnectionId(1), heartbeat("G", "c", &[]));
        assert_eq!(connections.subscriptions(ConnectionId(1), "G", "c"), None);
    }

    #[test]
    fn consumers_are_listed_once_per_client_from_their_newest_connection() {
        let connections = Connections::default();
        described(&connections, 1, "b");
        described(&connections, 2, "a");
        described(&connections, 3, "b");
        connections.record_consumer(ConnectionId(1), heartbeat("G", "b", &["Old"]));
        connections.record_consumer(ConnectionId(2), heartbeat("G", "a", &["T"]));
        connections.record_consumer(ConnectionId(3), heartbeat("G", "b", &["New"]));
        // Never described: an in-process consumer.
        connections.record_consumer(ConnectionId(4), heartbeat("G", "z", &["T"]));
        let listed: Vec<(u64, String)> = connections
            .consumers_of("G")
            .into_iter()
            .map(|c| (c.connection.0, c.consumer.client_id))
            .collect();
        assert_eq!(listed, [(2, "a".to_owned()), (3, "b".to_owned())]);
        assert_eq!(
            connections.connection_of_consumer("G", "b"),
            Some(ConnectionId(3))
        );
        assert_eq!(
            connections
                .groups_subscribing("New")
                .into_iter()
                .collect::<Vec<_>>(),
            ["G"]
        );
        connections.close(ConnectionId(3));
        assert_eq!(
            connections.connection_of_consumer("G", "b"),
            Some(ConnectionId(1))
        );
        connections.forget_consumer("G", "b");
        assert_eq!(connections.connection_of_consumer("G", "b"), None);
        assert!(connections.consumers_of("H").is_empty());
    }

    #[test]
    fn producers_are_listed_with_their_connections_description() {
        let connections = Connections::default();
        described(&connections, 1, "a");
        connections.register_producer("P", "a", listener(1));
        connections.register_producer("P", "x", listener(2));
        let listed = connections.producer_descriptions("P");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].0, "a");
        assert_eq!(listed[0].1.address, "127.0.0.1:40001");
        assert_eq!(
            connections.connection_of_producer("x"),
            Some(ConnectionId(2))
        );
        assert_eq!(connections.connection_of_producer("y"), None);
    }
}
