//! [`BrokerHandle`]'s membership calls: consumer heartbeats, leaving a group or closing a
//! connection, member lists, and the orderly-consumption queue locks.

use crate::broker::handle::{mailbox, BrokerHandle};
use crate::broker::membership::{
    CloseConnection, HeartbeatOutcome, ListConsumers, RecordHeartbeat, UnregisterClient,
};
use crate::broker::queue_locks::{LockBatch, UnlockBatch};
use crate::broker_api::{Answer, BrokerError, ConnectionId, ConsumerHeartbeat, ConsumerNotifier};
use crate::logic::queue::MessageQueue;
use crate::refused::Refused;
use std::sync::Arc;

impl Answer<()> for HeartbeatOutcome {
    fn answer(self) -> Result<(), BrokerError> {
        Ok(())
    }
}

/// UNREGISTER_CLIENT's count of registrations removed.
impl Answer<()> for usize {
    fn answer(self) -> Result<(), BrokerError> {
        Ok(())
    }
}

impl BrokerHandle {
    /// HEART_BEAT for one consumer group (`docs/wire-protocol.md` §4.4): auto-creates the group
    /// and its retry topic, registers the client and records what it reported for admin
    /// listings; `notifier` is how the broker reaches it (one per connection).
    pub async fn heartbeat(
        &self,
        heartbeat: ConsumerHeartbeat,
        notifier: Arc<dyn ConsumerNotifier>,
    ) -> Result<HeartbeatOutcome, BrokerError> {
        let Some(group) = self.inner.registry.group_or_create(&heartbeat.group)? else {
            tracing::warn!(group = %heartbeat.group, client_id = %heartbeat.client_id, "heartbeat for an unknown group ignored");
            return Ok(HeartbeatOutcome::default());
        };
        self.inner.registry.ensure_retry_topic(&group)?;
        let connection = notifier.connection();
        self.inner.connections.register_notifier(notifier);
        self.inner
            .connections
            .record_consumer(connection, heartbeat.clone());
        let outcome = self
            .inner
            .addrs
            .membership
            .send(RecordHeartbeat {
                heartbeat,
                connection,
            })
            .await;
        if outcome.is_err() {
            self.inner.connections.heartbeat_recorded(connection);
        }
        outcome.map_err(mailbox("membership"))
    }

    /// UNREGISTER_CLIENT: the client leaves `group`, and admin listings forget what it
    /// reported there; answers how many registrations it had.
    pub async fn unregister(
        &self,
        client_id: impl Into<String>,
        group: impl Into<String>,
    ) -> Result<usize, BrokerError> {
        let (client_id, group) = (client_id.into(), group.into());
        self.inner.connections.forget_consumer(&group, &client_id);
        self.inner
            .addrs
            .membership
            .send(UnregisterClient {
                client_id,
                group: Some(group),
            })
            .await
            .map_err(mailbox("membership"))
    }

    /// A connection closed: every client registered through it leaves its groups (and their
    /// remaining members are told), its producers no longer answer check-backs, and the
    /// registry forgets it. Answers how many consumer registrations it had.
    pub async fn connection_closed(
        &self,
        connection: impl Into<ConnectionId>,
    ) -> Result<usize, BrokerError> {
        let connection = connection.into();
        let producers = self.inner.connections.close(connection);
        if producers > 0 {
            tracing::debug!(%connection, producers, "producers of a closed connection unregistered");
        }
        self.inner
            .addrs
            .membership
            .send(CloseConnection { connection })
            .await
            .map_err(mailbox("membership"))
    }

    /// GET_CONSUMER_LIST_BY_GROUP: sorted client ids; `NoConsumer` when the group has none.
    pub async fn consumer_list(
        &self,
        group: impl Into<String>,
    ) -> Result<Vec<String>, BrokerError> {
        let group = group.into();
        let ids = self
            .inner
            .addrs
            .membership
            .send(ListConsumers {
                group: group.clone(),
            })
            .await
            .map_err(mailbox("membership"))?;
        if ids.is_empty() {
            return Err(BrokerError::Refused(Refused::NoConsumer { group }));
        }
        Ok(ids)
    }

    pub async fn lock_queues(
        &self,
        group: impl Into<String>,
        client_id: impl Into<String>,
        queues: Vec<MessageQueue>,
    ) -> Result<Vec<MessageQueue>, BrokerError> {
        self.inner
            .addrs
            .locks
            .send(LockBatch {
                group: group.into(),
                client_id: client_id.into(),
                queues,
            })
            .await
            .map_err(mailbox("queue locks"))
    }

    pub async fn unlock_queues(
        &self,
        group: impl Into<String>,
        client_id: impl Into<String>,
        queues: Vec<MessageQueue>,
    ) -> Result<(), BrokerError> {
        self.inner
            .addrs
            .locks
            .send(UnlockBatch {
                group: group.into(),
                client_id: client_id.into(),
                queues,
            })
            .await
            .map_err(mailbox("queue locks"))
    }
}
