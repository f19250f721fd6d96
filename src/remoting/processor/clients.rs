//! Which client is reachable on which connection, by group: Java's `ConsumerManager` channel
//! table and `ProducerManager.groupChannelTable`, as far as the tools need them.
//!
//! The broker's membership actor decides who is in a consumer group (heartbeats, expiry,
//! rebalance notifications); this table only remembers, per group and client id, the
//! connection the client's heartbeats arrive on and what it said about itself (language,
//! version, the consumer data of its last full heartbeat). The admin answers read it:
//! GET_CONSUMER_CONNECTION_LIST (203), GET_PRODUCER_CONNECTION_LIST (204),
//! QUERY_TOPIC_CONSUME_BY_WHO (300), and the broker → client forwarding of
//! GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309), which must reach the named
//! client on its own connection. Producers are kept so that a producer group's connections can
//! be listed and a request-reply answer can reach its requester by client id; transaction
//! check-backs reach producers through the broker's registry of connections, which keeps
//! only what those need.
//!
//! Plain data, generic over the connection handle `C`, so it is tested without sockets.

use std::collections::{BTreeMap, BTreeSet};

use crate::remoting::body::{Connection, ConsumerData};
use crate::remoting::server::ConnectionId;

/// One client as seen on one connection.
#[derive(Debug, Clone)]
pub struct ClientChannel<C> {
    pub conn_id: ConnectionId,
    pub handle: C,
    pub client_id: String,
    /// `host:port` of the client's end.
    pub client_addr: String,
    pub language: String,
    pub version: i32,
}

impl<C> ClientChannel<C> {
    pub fn connection(&self) -> Connection {
        Connection {
            client_id: self.client_id.clone(),
            client_addr: self.client_addr.clone(),
            language: self.language.clone(),
            version: self.version,
        }
    }
}

/// A consumer: its channel and the consumer data of its last heartbeat that carried its
/// subscriptions.
#[derive(Debug, Clone)]
pub struct ConsumerClient<C> {
    pub channel: ClientChannel<C>,
    pub data: ConsumerData,
}

/// group → client id → client, for consumers and producers.
#[derive(Debug)]
pub struct ClientTable<C> {
    consumers: BTreeMap<String, BTreeMap<String, ConsumerClient<C>>>,
    producers: BTreeMap<String, BTreeMap<String, ClientChannel<C>>>,
}

impl<C> Default for ClientTable<C> {
    fn default() -> Self {
        ClientTable {
            consumers: BTreeMap::new(),
            producers: BTreeMap::new(),
        }
    }
}

impl<C: Clone> ClientTable<C> {
    /// A consumer heartbeat. `data` without subscriptions (a heartbeat V2 that left them out
    /// because they did not change) keeps the subscriptions already known.
    pub fn register_consumer(&mut self, channel: ClientChannel<C>, mut data: ConsumerData) {
        let group = data.group_name.clone();
        let members = self.consumers.entry(group).or_default();
        if data.subscription_data_set.is_empty() {
            if let Some(known) = members.get(&channel.client_id) {
                data.subscription_data_set = known.data.subscription_data_set.clone();
            }
        }
        members.insert(channel.client_id.clone(), ConsumerClient { channel, data });
    }

    /// A producer heartbeat for `group`.
    pub fn register_producer(&mut self, group: &str, channel: ClientChannel<C>) {
        self.producers
            .entry(group.to_owned())
            .or_default()
            .insert(channel.client_id.clone(), channel);
    }

    /// UNREGISTER_CLIENT: the client leaves the named groups.
    pub fn unregister(
        &mut self,
        client_id: &str,
        producer_group: Option<&str>,
        consumer_group: Option<&str>,
    ) {
        if let Some(group) = producer_group {
            remove_client(&mut self.producers, group, client_id);
        }
        if let Some(group) = consumer_group {
            remove_client(&mut self.consumers, group, client_id);
        }
    }

    /// A connection closed: every client registered through it is gone.
    pub fn connection_closed(&mut self, conn_id: ConnectionId) {
        for members in self.consumers.values_mut() {
            members.retain(|_, c| c.channel.conn_id != conn_id);
        }
        self.consumers.retain(|_, members| !members.is_empty());
        for members in self.producers.values_mut() {
            members.retain(|_, c| c.conn_id != conn_id);
        }
        self.producers.retain(|_, members| !members.is_empty());
    }

    /// Every connection a client is registered through.
    pub fn connection_ids(&self) -> BTreeSet<ConnectionId> {
        let consumers = self
            .consumers
            .values()
            .flatten()
            .map(|(_, c)| c.channel.conn_id);
        let producers = self.producers.values().flatten().map(|(_, c)| c.conn_id);
        consumers.chain(producers).collect()
    }

    /// The consumers of a group, by client id.
    pub fn consumers(&self, group: &str) -> Vec<&ConsumerClient<C>> {
        self.consumers
            .get(group)
            .map(|m| m.values().collect())
            .unwrap_or_default()
    }

    /// The producers of a group, by client id; `None` when the group has none.
    pub fn producers(&self, group: &str) -> Option<Vec<&ClientChannel<C>>> {
        self.producers.get(group).map(|m| m.values().collect())
    }

    /// The connection handle of one consumer of a group.
    pub fn consumer_handle(&self, group: &str, client_id: &str) -> Option<C> {
        self.consumers
            .get(group)
            .and_then(|m| m.get(client_id))
            .map(|c| c.channel.handle.clone())
    }

    /// The connection of a producer by its client id, whatever its group (Java's
    /// `ProducerManager.findChannel`): where request-reply pushes a reply to its requester.
    pub fn producer_handle(&self, client_id: &str) -> Option<C> {
        self.producers
            .values()
            .find_map(|members| members.get(client_id))
            .map(|c| c.handle.clone())
    }

    /// Groups with a connected consumer that subscribes to `topic`.
    pub fn groups_subscribing(&self, topic: &str) -> Vec<String> {
        self.consumers
            .iter()
            .filter(|(_, members)| {
                members.values().any(|c| {
                    c.data
                        .subscription_data_set
                        .iter()
                        .any(|s| s.topic == topic)
                })
            })
            .map(|(group, _)| group.clone())
            .collect()
    }
}

fn remove_client<V>(table: &mut BTreeMap<String, BTreeMap<String, V>>, group: &str, id: &str) {
    if let Some(members) = table.get_mut(group) {
        members.remove(id);
        if members.is_empty() {
            table.remove(group);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::body::SubscriptionData;

    fn channel(conn: u64, client_id: &str) -> ClientChannel<u64> {
        ClientChannel {
            conn_id: ConnectionId(conn),
            handle: conn,
            client_id: client_id.to_owned(),
            client_addr: format!("127.0.0.1:{}", 40000 + conn),
            language: "JAVA".to_owned(),
            version: 475,
        }
    }

    fn consumer(group: &str, topics: &[&str]) -> ConsumerData {
        ConsumerData {
            group_name: group.to_owned(),
            subscription_data_set: topics
                .iter()
                .map(|t| SubscriptionData {
                    topic: (*t).to_owned(),
                    ..SubscriptionData::default()
                })
                .collect(),
            ..ConsumerData::default()
        }
    }

    #[test]
    fn a_heartbeat_without_subscriptions_keeps_the_known_ones() {
        let mut table = ClientTable::default();
        table.register_consumer(channel(1, "c1"), consumer("G", &["T1", "T2"]));
        table.register_consumer(channel(1, "c1"), consumer("G", &[]));
        let members = table.consumers("G");
        assert_eq!(members.len(), 1);
        let topics: Vec<&str> = members[0]
            .data
            .subscription_data_set
            .iter()
            .map(|s| s.topic.as_str())
            .collect();
        assert_eq!(topics, ["T1", "T2"]);
        assert_eq!(table.groups_subscribing("T2"), ["G"]);
        assert!(table.groups_subscribing("T3").is_empty());
    }

    #[test]
    fn a_closed_connection_removes_only_its_clients() {
        let mut table = ClientTable::default();
        table.register_consumer(channel(1, "c1"), consumer("G", &["T"]));
        table.register_consumer(channel(2, "c2"), consumer("G", &["T"]));
        table.register_producer("P", channel(1, "c1"));
        table.connection_closed(ConnectionId(1));
        let ids: Vec<&str> = table
            .consumers("G")
            .iter()
            .map(|c| c.channel.client_id.as_str())
            .collect();
        assert_eq!(ids, ["c2"]);
        assert!(table.producers("P").is_none());
        assert_eq!(table.consumer_handle("G", "c2"), Some(2));
        assert_eq!(table.consumer_handle("G", "c1"), None);
    }

    #[test]
    fn unregister_leaves_only_the_named_groups() {
        let mut table = ClientTable::default();
        table.register_consumer(channel(1, "c1"), consumer("G", &["T"]));
        table.register_producer("P", channel(1, "c1"));
        table.unregister("c1", Some("P"), None);
        assert!(table.producers("P").is_none());
        assert_eq!(table.consumers("G").len(), 1);
        table.unregister("c1", None, Some("G"));
        assert!(table.consumers("G").is_empty());
    }

    #[test]
    fn producers_are_listed_by_group() {
        let mut table = ClientTable::default();
        table.register_producer("P", channel(1, "a"));
        table.register_producer("P", channel(2, "b"));
        let connections: Vec<Connection> = table
            .producers("P")
            .unwrap_or_default()
            .iter()
            .map(|c| c.connection())
            .collect();
        assert_eq!(connections.len(), 2);
        assert_eq!(connections[0].client_id, "a");
        assert_eq!(connections[1].client_addr, "127.0.0.1:40002");
        assert_eq!(table.producer_handle("b"), Some(2));
        assert_eq!(table.producer_handle("c"), None);
    }
}
