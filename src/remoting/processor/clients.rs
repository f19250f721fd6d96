//! The remoting connections clients registered through, by [`ConnectionId`]: what the broker →
//! client requests need to reach a live connection. GET_CONSUMER_RUNNING_INFO (307) and
//! CONSUME_MESSAGE_DIRECTLY (309) are forwarded to the named consumer on its own connection,
//! and a request-reply answer is pushed to its requester's.
//!
//! Who is connected and what each client reported (description, producer groups, consumer
//! data) is the broker's registry (`skiff_actors::broker::connections`), which every door
//! shares; it names the connection a client is on, and this index turns that id into the
//! handle to write to. Ids of other doors (a gRPC client session) are not here, so a request
//! for such a client finds it not reachable over remoting.
//!
//! Plain data, generic over the connection handle `C`, so it is tested without sockets.

use std::collections::BTreeMap;

use crate::remoting::server::ConnectionId;

/// Connection id → handle, for the connections a client registered through.
#[derive(Debug)]
pub struct ClientHandles<C> {
    by_id: BTreeMap<ConnectionId, C>,
}

impl<C> Default for ClientHandles<C> {
    fn default() -> Self {
        ClientHandles {
            by_id: BTreeMap::new(),
        }
    }
}

impl<C: Clone> ClientHandles<C> {
    /// A client registered (a heartbeat) through the connection `id`.
    pub fn register(&mut self, id: ConnectionId, handle: C) {
        self.by_id.insert(id, handle);
    }

    /// The connection closed: nothing can reach it any more.
    pub fn connection_closed(&mut self, id: ConnectionId) {
        self.by_id.remove(&id);
    }

    /// The handle of a connection a client registered through, while it is open.
    pub fn handle(&self, id: ConnectionId) -> Option<C> {
        self.by_id.get(&id).cloned()
    }

    /// Every connection a client registered through.
    pub fn connection_ids(&self) -> Vec<ConnectionId> {
        self.by_id.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_connection_is_no_longer_reached() {
        let mut handles = ClientHandles::default();
        handles.register(ConnectionId(1), 1);
        handles.register(ConnectionId(2), 2);
        handles.connection_closed(ConnectionId(1));
        assert_eq!(handles.handle(ConnectionId(1)), None);
        assert_eq!(handles.handle(ConnectionId(2)), Some(2));
        assert_eq!(handles.connection_ids(), [ConnectionId(2)]);
    }
}
