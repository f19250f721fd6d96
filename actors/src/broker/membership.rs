//! Consumer-group membership (RocketMQ's `ConsumerManager`): heartbeats register clients, a
//! channel silent for longer than the expiry (120 s) is dropped by a periodic sweep, clients
//! unregister or lose their connection. Whenever a group's member set changes, every remaining
//! member is told (NOTIFY_CONSUMER_IDS_CHANGED) so it rebalances at once instead of at its next
//! 20 s round. The group's subscriptions (for the broker-side tag filter of pulls that carry none)
//! and message model are kept here too.
//!
//! A member names the connection its heartbeats came over; the notifier that reaches it is
//! kept in the broker's registry of connections ([`Connections`]), where the broker handle put
//! it (notifiers are not `Send`, so they cannot travel in a message).

use crate::broker::connections::Connections;
use crate::broker::queue_locks::ReleaseClient;
use crate::broker_api::{
    ConnectionId, ConsumeType, ConsumerHeartbeat, MessageModel, SubscriptionEntry,
};
use crate::quit::Quit;
use actix::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::time::Instant;

/// A consumer heartbeat that came over `connection`.
#[derive(Message, Debug, Clone)]
#[rtype(result = "HeartbeatOutcome")]
pub struct RecordHeartbeat {
    pub heartbeat: ConsumerHeartbeat,
    pub connection: ConnectionId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeartbeatOutcome {
    /// The client joined its group (members were notified).
    pub joined: bool,
    /// The group's subscription set differs from before (RocketMQ's `IS_SUB_CHANGE`).
    pub subscriptions_changed: bool,
}

/// Removes a client from one group, or from every group when `group` is `None`.
#[derive(Message, Debug, Clone)]
#[rtype(result = "usize")]
pub struct UnregisterClient {
    pub client_id: String,
    pub group: Option<String>,
}

/// Removes every client registered through a connection that closed.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "usize")]
pub struct CloseConnection {
    pub connection: ConnectionId,
}

/// Client ids of a group, sorted (what every member must agree on to allocate queues).
#[derive(Message, Debug, Clone)]
#[rtype(result = "Vec<String>")]
pub struct ListConsumers {
    pub group: String,
}

/// The group's registered subscription of a topic.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Option<SubscriptionEntry>")]
pub struct LookupSubscription {
    pub group: String,
    pub topic: String,
}

/// One group's view, `None` when it has no members.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Option<GroupView>")]
pub struct DescribeGroup {
    pub group: String,
}

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "MembershipSnapshot")]
pub struct Observe;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupView {
    pub group: String,
    pub members: Vec<String>,
    pub message_model: MessageModel,
    pub consume_type: ConsumeType,
    /// Subscribed topics with their expressions, sorted by topic.
    pub subscriptions: Vec<SubscriptionEntry>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MembershipSnapshot {
    pub groups: Vec<GroupView>,
    /// NOTIFY_CONSUMER_IDS_CHANGED calls made, one per member told.
    pub notifications: u64,
    pub expired: u64,
    pub unregistered: u64,
}

struct Member {
    connection: ConnectionId,
    last_seen: Instant,
    heartbeat: ConsumerHeartbeat,
}

#[derive(Default)]
struct Group {
    members: BTreeMap<String, Member>,
    subscriptions: BTreeMap<String, SubscriptionEntry>,
}

impl Group {
    /// The group's subscription per topic: the newest `sub_version` any member reported.
    fn recompute_subscriptions(&mut self) -> bool {
        let mut merged: BTreeMap<String, SubscriptionEntry> = BTreeMap::new();
        for member in self.members.values() {
            for entry in &member.heartbeat.subscriptions {
                match merged.get(&entry.topic) {
                    Some(existing) if existing.sub_version >= entry.sub_version => {}
                    _ => {
                        merged.insert(entry.topic.clone(), entry.clone());
                    }
                }
            }
        }
        let changed = merged != self.subscriptions;
        self.subscriptions = merged;
        changed
    }

    fn view(&self, name: &str) -> Option<GroupView> {
        // The newest heartbeat speaks for the group's model and type.
        let newest = self.members.values().max_by_key(|m| m.last_seen)?;
        Some(GroupView {
            group: name.to_string(),
            members: self.members.keys().cloned().collect(),
            message_model: newest.heartbeat.message_model,
            consume_type: newest.heartbeat.consume_type,
            subscriptions: self.subscriptions.values().cloned().collect(),
        })
    }
}

pub struct MembershipActor {
    connections: Connections,
    expiry: Duration,
    locks: Recipient<ReleaseClient>,
    groups: BTreeMap<String, Group>,
    snapshot: MembershipSnapshot,
}

const MAILBOX_CAPACITY: usize = 1024;

impl MembershipActor {
    pub(crate) fn new(
        connections: Connections,
        expiry: Duration,
        locks: Recipient<ReleaseClient>,
    ) -> Self {
        MembershipActor {
            connections,
            expiry,
            locks,
            groups: BTreeMap::new(),
            snapshot: MembershipSnapshot::default(),
        }
    }

    /// RocketMQ scans channels every 10 s; a shorter expiry (tests) scans proportionally.
    fn sweep_interval(&self) -> Duration {
        (self.expiry / 12).clamp(Duration::from_millis(10), Duration::from_secs(10))
    }

    fn notify_group(&mut self, group: &str) {
        let Some(g) = self.groups.get(group) else {
            return;
        };
        for (client_id, member) in &g.members {
            // A member whose connection closed has no notifier left; the close removes it.
            let Some(notifier) = self.connections.notifier(member.connection) else {
                continue;
            };
            tracing::debug!(group, client_id = %client_id, "notifying consumer ids changed");
            notifier.consumer_ids_changed(group);
            self.snapshot.notifications += 1;
        }
    }

    /// Removes the members `leaving` selects from every group, then notifies the groups that
    /// lost someone and frees the queue locks the leavers held.
    fn remove_where(
        &mut self,
        reason: &'static str,
        mut leaving: impl FnMut(&str, &str, &Member) -> bool,
    ) -> usize {
        let mut changed_groups = Vec::new();
        let mut removed = Vec::new();
        for (name, group) in self.groups.iter_mut() {
            let before = group.members.len();
            group.members.retain(|client_id, member| {
                let leave = leaving(name, client_id, member);
                if leave {
                    removed.push((name.clone(), client_id.clone(), member.connection));
                }
                !leave
            });
            if group.members.len() != before {
                group.recompute_subscriptions();
                changed_groups.push(name.clone());
            }
        }
        self.groups.retain(|_, g| !g.members.is_empty());
        // A notifier lives as long as a member needs it, as when members held their own.
        let in_use: BTreeSet<ConnectionId> = self
            .groups
            .values()
            .flat_map(|g| g.members.values().map(|m| m.connection))
            .collect();
        for (_, _, connection) in &removed {
            if !in_use.contains(connection) {
                self.connections.forget_notifier(*connection);
            }
        }
        for (group, client_id, _) in &removed {
            tracing::info!(group = %group, client_id = %client_id, reason, "consumer left group");
            // Best effort: a lock not released here expires on its own.
            if let Err(e) = self.locks.try_send(ReleaseClient {
                group: group.clone(),
                client_id: client_id.clone(),
            }) {
                tracing::debug!(group = %group, client_id = %client_id, error = %e, "lock release not delivered");
            }
        }
        for group in changed_groups {
            self.notify_group(&group);
        }
        removed.len()
    }

    fn sweep(&mut self) {
        let now = Instant::now();
        let expiry = self.expiry;
        let expired = self.remove_where("expired", |_, _, m| {
            now.duration_since(m.last_seen) > expiry
        });
        self.snapshot.expired += expired as u64;
    }
}

impl Actor for MembershipActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        ctx.run_interval(self.sweep_interval(), |act, _| act.sweep());
    }
}

impl Handler<RecordHeartbeat> for MembershipActor {
    type Result = MessageResult<RecordHeartbeat>;

    fn handle(&mut self, msg: RecordHeartbeat, _: &mut Self::Context) -> Self::Result {
        self.connections.heartbeat_recorded(msg.connection);
        let heartbeat = msg.heartbeat;
        let group_name = heartbeat.group.clone();
        let client_id = heartbeat.client_id.clone();
        let group = self.groups.entry(group_name.clone()).or_default();
        let member = Member {
            connection: msg.connection,
            last_seen: Instant::now(),
            heartbeat,
        };
        let joined = group.members.insert(client_id.clone(), member).is_none();
        let subscriptions_changed = group.recompute_subscriptions();
        if joined {
            tracing::info!(group = %group_name, client_id = %client_id, "consumer joined group");
            self.notify_group(&group_name);
        }
        MessageResult(HeartbeatOutcome {
            joined,
            subscriptions_changed,
        })
    }
}

impl Handler<UnregisterClient> for MembershipActor {
    type Result = usize;

    fn handle(&mut self, msg: UnregisterClient, _: &mut Self::Context) -> usize {
        let removed = self.remove_where("unregistered", |group, client_id, _| {
            client_id == msg.client_id && msg.group.as_deref().is_none_or(|g| g == group)
        });
        self.snapshot.unregistered += removed as u64;
        removed
    }
}

impl Handler<CloseConnection> for MembershipActor {
    type Result = usize;

    fn handle(&mut self, msg: CloseConnection, _: &mut Self::Context) -> usize {
        let removed = self.remove_where("connection closed", |_, _, m| {
            m.connection == msg.connection
        });
        self.snapshot.unregistered += removed as u64;
        removed
    }
}

impl Handler<ListConsumers> for MembershipActor {
    type Result = MessageResult<ListConsumers>;

    fn handle(&mut self, msg: ListConsumers, _: &mut Self::Context) -> Self::Result {
        MessageResult(
            self.groups
                .get(&msg.group)
                .map(|g| g.members.keys().cloned().collect())
                .unwrap_or_default(),
        )
    }
}

impl Handler<LookupSubscription> for MembershipActor {
    type Result = MessageResult<LookupSubscription>;

    fn handle(&mut self, msg: LookupSubscription, _: &mut Self::Context) -> Self::Result {
        MessageResult(
            self.groups
                .get(&msg.group)
                .and_then(|g| g.subscriptions.get(&msg.topic).cloned()),
        )
    }
}

impl Handler<DescribeGroup> for MembershipActor {
    type Result = MessageResult<DescribeGroup>;

    fn handle(&mut self, msg: DescribeGroup, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.groups.get(&msg.group).and_then(|g| g.view(&msg.group)))
    }
}

/// Stops the actor and its expiry sweep. Membership is not persisted: clients register again by
/// heartbeat after a restart.
impl Handler<Quit> for MembershipActor {
    type Result = ();

    fn handle(&mut self, _: Quit, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl Handler<Observe> for MembershipActor {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        let mut snapshot = self.snapshot.clone();
        snapshot.groups = self
            .groups
            .iter()
            .filter_map(|(name, g)| g.view(name))
            .collect();
        MessageResult(snapshot)
    }
}
