//! Lite topics (RocketMQ 5.5, RIP-83): very many short-lived queues under one parent topic of
//! type `LITE`, each subscribed one by one by a lite push consumer.
//!
//! The facts, from Apache RocketMQ 5.5.0's proxy and broker:
//! - A lite topic `L` of parent `P` is stored as the queue 0 of `%LMQ%$P$L` (`LiteUtil
//!   .toLmqName`); it exists once it holds a message. skiff stores a lite message there only
//!   (Java also indexes it in a parent queue, which no lite consumer reads).
//! - Its name is 1 to 64 bytes of `[a-zA-Z0-9_-]` (`GrpcValidator.validateLiteTopic`).
//! - A client's subscription is the set of lite topics of one group and parent, changed by
//!   `SyncLiteSubscription`'s four actions, kept in memory, and dropped when the client has not
//!   refreshed it for a while (`LiteSubscriptionRegistryImpl`: 3 minutes; the Java client sends
//!   its whole set every 30 seconds).
//! - A group consumes a lite topic in order: one batch out at a time, the next after the ack.
//! - A new subscription may move the group's offset in the lite topic (`OffsetOption`:
//!   `resetOffset`).

use std::collections::{BTreeSet, HashMap};

use super::lite_ready::{LiteReadiness, Look};

/// What every lite queue's topic name starts with.
pub const LMQ_PREFIX: &str = "%LMQ%$";
/// The longest lite topic name, in bytes (the proxy's `maxLiteTopicSize`).
pub const MAX_LITE_TOPIC_SIZE: usize = 64;
/// A group's lite subscriptions per client when its `lite.sub.client.quota` is unset.
pub const DEFAULT_CLIENT_QUOTA: i64 = 2000;
/// How far past its quota one request's set may go before the proxy refuses it.
pub const QUOTA_SLACK: usize = 300;
/// The group attribute naming the parent topic a lite group consumes.
pub const BIND_TOPIC: &str = "lite.bind.topic";
/// The group attribute choosing Shared or Exclusive subscriptions.
pub const SUB_MODEL: &str = "lite.sub.model";
/// The group attribute bounding one client's lite subscriptions.
pub const CLIENT_QUOTA: &str = "lite.sub.client.quota";

/// A group's `lite.sub.client.quota` (by its attributes), or its default.
pub fn client_quota(attributes: &std::collections::BTreeMap<String, String>) -> i64 {
    attributes
        .get(CLIENT_QUOTA)
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CLIENT_QUOTA)
}

/// The queue a lite topic's messages are stored in: queue 0 of this topic.
pub fn lmq_name(parent: &str, lite: &str) -> String {
    format!("{LMQ_PREFIX}{parent}${lite}")
}

/// The parent and lite topic a lite queue's topic name joins; `None` for any other name.
pub fn split_lmq(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(LMQ_PREFIX)?;
    let (parent, lite) = rest.split_once('$')?;
    (!parent.is_empty() && !lite.is_empty() && !lite.contains('$')).then_some((parent, lite))
}

/// When idle lite topics expire (Java's `AbstractLiteLifecycleManager`): a lite topic whose
/// parent sets `lite.topic.expiration` goes once its newest message is older than that and
/// than `min_ttl` (Java's fixed 15 minutes); subscriptions and backlog keep none alive. Nothing
/// expires in the broker's first `min_ttl`, so clients have time to come back after a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiteExpiry {
    /// How often idle lite topics are looked for (Java's `liteTtlCheckInterval`, 2 minutes).
    pub check_interval: std::time::Duration,
    pub min_ttl: std::time::Duration,
}

impl Default for LiteExpiry {
    fn default() -> Self {
        LiteExpiry {
            check_interval: std::time::Duration::from_secs(120),
            min_ttl: std::time::Duration::from_secs(15 * 60),
        }
    }
}

impl LiteExpiry {
    /// Whether a lite topic whose newest message was stored at `newest_ms` (`None`: it holds
    /// none) has expired at `now_ms` under its parent's `ttl`, the broker up since `up_since_ms`.
    pub fn expired(
        &self,
        ttl: std::time::Duration,
        newest_ms: Option<i64>,
        now_ms: i64,
        up_since_ms: i64,
    ) -> bool {
        let min_ttl = i64::try_from(self.min_ttl.as_millis()).unwrap_or(i64::MAX);
        let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        if now_ms.saturating_sub(up_since_ms) < min_ttl {
            return false;
        }
        match newest_ms {
            None => true,
            Some(newest) => {
                let idle = now_ms.saturating_sub(newest);
                idle >= min_ttl && idle > ttl
            }
        }
    }
}

/// A refusal of a lite request, with the Java proxy's and broker's messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LiteRefusal {
    #[error("lite topic cannot be the char sequence of whitespace")]
    BlankName,
    #[error("lite topic exceed the max size {MAX_LITE_TOPIC_SIZE}")]
    NameTooLong,
    #[error("lite topic can only contain alphanumeric characters, hyphens(-), and underscores(_)")]
    NameCharacters,
    /// A lite message to a topic of another type, or another message to a lite topic.
    #[error(
        "TopicMessageType validate failed, the expected type is {expected}, but actual type is {actual}"
    )]
    TypeMismatch {
        expected: &'static str,
        actual: &'static str,
    },
    #[error("group not found: {group}")]
    GroupNotFound { group: String },
    #[error("lite group {group} is expected to bind topic {expected}, but actual is {actual}")]
    BindTopicMismatch {
        group: String,
        expected: String,
        actual: String,
    },
    #[error("regular group cannot use LITE mode: {group}")]
    NotALiteGroup { group: String },
    #[error("lite subscription quota exceeded: {quota}")]
    SubscriptionQuota { quota: i64 },
}

/// The proxy's check of a lite topic's name.
pub fn check_name(name: &str) -> Result<(), LiteRefusal> {
    if name.trim().is_empty() {
        return Err(LiteRefusal::BlankName);
    }
    if name.len() > MAX_LITE_TOPIC_SIZE {
        return Err(LiteRefusal::NameTooLong);
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(LiteRefusal::NameCharacters);
    }
    Ok(())
}

/// Where a new subscription starts in a lite topic (`OffsetOption` of `SyncLiteSubscription`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFrom {
    /// Where the group is (its offset, or the lite topic's start for a group new to it).
    Last,
    /// The oldest message.
    Min,
    /// Only messages sent from now on.
    Max,
    /// This offset.
    Offset(i64),
    /// `n` messages before the group's offset.
    TailN(i64),
    /// Java 5.5 accepts a time and does nothing with it.
    Timestamp(i64),
}

/// The offset the group's position in a lite topic moves to for `start`, given the group's
/// offset (`None`: it has none) and the lite topic's end; `None` leaves it where it is
/// (Java's `resetOffset`).
pub fn start_offset(start: StartFrom, current: Option<u64>, max: u64) -> Option<u64> {
    let target = match start {
        StartFrom::Last | StartFrom::Timestamp(_) => return None,
        StartFrom::Min => 0,
        StartFrom::Max => max,
        StartFrom::Offset(offset) => u64::try_from(offset).ok()?,
        StartFrom::TailN(n) => current?.saturating_sub(u64::try_from(n).ok()?),
    };
    (Some(target) != current).then_some(target)
}

/// One of `SyncLiteSubscription`'s actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncAction {
    /// Adds these lite topics to the client's set.
    PartialAdd,
    /// Removes these lite topics from the client's set.
    PartialRemove,
    /// The client's whole set (its periodic refresh).
    CompleteAdd,
    /// The client leaves: its whole subscription goes.
    CompleteRemove,
}

/// One client's lite subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientLites {
    pub group: String,
    pub parent: String,
    pub lites: BTreeSet<String>,
    /// When the client last changed or refreshed it (epoch ms).
    pub refreshed_ms: i64,
}

/// Every client's lite subscription, who holds each lite topic (the subscribers an arrival
/// concerns; for Exclusive groups, whom a new holder evicts), and which lite topics each
/// client's next receive looks at.
#[derive(Debug, Default)]
pub struct LiteSubscriptions {
    clients: HashMap<String, ClientLites>,
    /// `(parent, lite)` to the clients holding it.
    holders: HashMap<(String, String), BTreeSet<String>>,
    ready: LiteReadiness,
}

impl LiteSubscriptions {
    /// The client's subscription, if it has one.
    pub fn of(&self, client_id: &str) -> Option<&ClientLites> {
        self.clients.get(client_id)
    }

    /// Applies one client's change. Answers the lite topics that are new to the client, and,
    /// for an Exclusive group, the other clients that lost one of them.
    pub fn apply(&mut self, change: &Change<'_>, now_ms: i64) -> SyncOutcome {
        let Change {
            client_id,
            group,
            parent,
            action,
            lites,
            exclusive,
        } = *change;
        let mut outcome = SyncOutcome::default();
        match action {
            SyncAction::CompleteRemove => {
                self.remove_client(client_id);
                return outcome;
            }
            SyncAction::PartialRemove => {
                for lite in lites {
                    self.drop_holder(client_id, parent, lite);
                }
                if let Some(client) = self.clients.get_mut(client_id) {
                    for lite in lites {
                        client.lites.remove(lite);
                    }
                    client.refreshed_ms = now_ms;
                }
                return outcome;
            }
            SyncAction::PartialAdd | SyncAction::CompleteAdd => {}
        }
        // A client holds one subscription: a request for another group or parent replaces it.
        let same = self
            .clients
            .get(client_id)
            .is_some_and(|c| c.group == group && c.parent == parent);
        if !same {
            self.remove_client(client_id);
        }
        let entry = self
            .clients
            .entry(client_id.to_owned())
            .or_insert_with(|| ClientLites {
                group: group.to_owned(),
                parent: parent.to_owned(),
                lites: BTreeSet::new(),
                refreshed_ms: now_ms,
            });
        entry.refreshed_ms = now_ms;
        if action == SyncAction::CompleteAdd {
            let gone: Vec<String> = entry.lites.difference(lites).cloned().collect();
            for lite in &gone {
                entry.lites.remove(lite);
            }
            for lite in gone {
                self.drop_holder(client_id, parent, &lite);
            }
        }
        for lite in lites {
            let added = self
                .clients
                .get_mut(client_id)
                .is_some_and(|c| c.lites.insert(lite.clone()));
            // Java's Exclusive eviction runs on every PARTIAL_ADD, even of a topic the client
            // already holds; the client itself is not evicted here.
            if exclusive && action == SyncAction::PartialAdd {
                let key = (parent.to_owned(), lite.clone());
                let clients = &self.clients;
                let others: Vec<String> = self
                    .holders
                    .get(&key)
                    .map(|h| {
                        h.iter()
                            .filter(|c| {
                                *c != client_id && clients.get(*c).is_some_and(|o| o.group == group)
                            })
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                for other in others {
                    self.drop_holder(&other, parent, lite);
                    if let Some(client) = self.clients.get_mut(&other) {
                        client.lites.remove(lite);
                    }
                    outcome.evicted.push((other, lite.clone()));
                }
            }
            self.holders
                .entry((parent.to_owned(), lite.clone()))
                .or_default()
                .insert(client_id.to_owned());
            // A PARTIAL_ADD may move the group's offset in a lite topic the client already
            // held (its offset option): look at every one it names. A COMPLETE_ADD is the
            // client's periodic refresh of its whole set: only what is new to it.
            if added || action == SyncAction::PartialAdd {
                self.ready.mark(client_id, lite);
            }
            if added {
                outcome.added.push(lite.clone());
            }
        }
        outcome
    }

    /// Drops every subscription not refreshed since `before_ms`; answers whose.
    pub fn expire(&mut self, before_ms: i64) -> Vec<String> {
        let expired: Vec<String> = self
            .clients
            .iter()
            .filter(|(_, c)| c.refreshed_ms < before_ms)
            .map(|(id, _)| id.clone())
            .collect();
        for client in &expired {
            self.remove_client(client);
        }
        expired
    }

    /// Drops a lite topic from every subscription (it expired).
    pub fn forget_lite(&mut self, parent: &str, lite: &str) {
        let holders = self
            .holders
            .remove(&(parent.to_owned(), lite.to_owned()))
            .unwrap_or_default();
        for client_id in holders {
            if let Some(client) = self.clients.get_mut(&client_id) {
                client.lites.remove(lite);
            }
            self.ready.unmark(&client_id, lite);
        }
    }

    /// The clients subscribing `parent`'s lite topic `lite`, with their groups, sorted.
    pub fn subscribers(&self, parent: &str, lite: &str) -> Vec<(String, String)> {
        self.holders
            .get(&(parent.to_owned(), lite.to_owned()))
            .into_iter()
            .flatten()
            .filter_map(|id| self.clients.get(id).map(|c| (id.clone(), c.group.clone())))
            .collect()
    }

    /// `parent`'s lite topic `lite` may have something to receive (a message arrived, a batch
    /// was acknowledged or came due): marks it ready for each client holding it; answers them.
    pub fn mark_ready(&mut self, parent: &str, lite: &str) -> Vec<String> {
        let Some(holders) = self.holders.get(&(parent.to_owned(), lite.to_owned())) else {
            return Vec::new();
        };
        for client in holders {
            self.ready.mark(client, lite);
        }
        holders.iter().cloned().collect()
    }

    /// Marks every lite topic of every client ready (a sweep that covers an arrival notice lost
    /// to a full mailbox); answers the clients.
    pub fn mark_all_ready(&mut self) -> Vec<String> {
        for (id, client) in &self.clients {
            for lite in &client.lites {
                self.ready.mark(id, lite);
            }
        }
        self.clients.keys().cloned().collect()
    }

    /// Marks ready the lite topics due by `now_ms`; answers the clients holding them.
    pub fn mark_due_ready(&mut self, now_ms: i64) -> Vec<String> {
        let mut clients = Vec::new();
        for (parent, lite) in self.ready.take_due(now_ms) {
            clients.extend(self.mark_ready(&parent, &lite));
        }
        clients
    }

    /// Takes `lite` out of the client's ready set as its receive looks at it
    /// ([`LiteReadiness::take`]).
    pub fn take_ready(&mut self, client_id: &str, lite: &str) -> bool {
        self.ready.take(client_id, lite)
    }

    /// Records what the client's receive found in `parent`'s `lite`: a lite topic another
    /// receive was reading stays ready while the client holds it; one with a batch out comes
    /// due when the batch becomes visible.
    pub fn looked(&mut self, client_id: &str, parent: &str, lite: &str, look: Look) {
        if let Some(due_ms) = look.due_ms() {
            self.ready.due_at(due_ms, parent, lite);
        }
        let holds = self
            .clients
            .get(client_id)
            .is_some_and(|c| c.parent == parent && c.lites.contains(lite));
        if look == Look::Busy && holds {
            self.ready.mark(client_id, lite);
        }
    }

    /// Which lite topics each client's next receive looks at, and when the next comes due.
    pub fn readiness(&self) -> &LiteReadiness {
        &self.ready
    }

    /// `parent`'s `lite` is to be looked at by its subscribers at `due_ms` (a batch's invisible
    /// time changed).
    pub fn due_at(&mut self, due_ms: i64, parent: &str, lite: &str) {
        self.ready.due_at(due_ms, parent, lite);
    }

    /// How many (client, lite topic) subscriptions there are in all.
    pub fn subscription_count(&self) -> usize {
        self.clients.values().map(|c| c.lites.len()).sum()
    }

    /// How many clients hold a subscription.
    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// Drops the client's whole subscription (it ended its session).
    pub fn remove_client(&mut self, client_id: &str) {
        if let Some(client) = self.clients.remove(client_id) {
            for lite in &client.lites {
                self.drop_holder(client_id, &client.parent, lite);
            }
        }
        self.ready.forget_client(client_id);
    }

    fn drop_holder(&mut self, client_id: &str, parent: &str, lite: &str) {
        let key = (parent.to_owned(), lite.to_owned());
        if let Some(holders) = self.holders.get_mut(&key) {
            holders.remove(client_id);
            if holders.is_empty() {
                self.holders.remove(&key);
            }
        }
        self.ready.unmark(client_id, lite);
    }
}

/// One client's `SyncLiteSubscription`, as the subscriptions take it.
#[derive(Debug, Clone, Copy)]
pub struct Change<'a> {
    pub client_id: &'a str,
    pub group: &'a str,
    pub parent: &'a str,
    pub action: SyncAction,
    pub lites: &'a BTreeSet<String>,
    /// The group's `lite.sub.model` is Exclusive.
    pub exclusive: bool,
}

/// What one `SyncLiteSubscription` changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncOutcome {
    /// Lite topics the client did not hold before.
    pub added: Vec<String>,
    /// `(client, lite topic)`: another client of an Exclusive group that lost the lite topic.
    pub evicted: Vec<(String, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lite_topic_expires_once_idle_past_its_ttl_and_the_minimum_not_while_the_broker_is_young() {
        use std::time::Duration;
        let expiry = LiteExpiry {
            check_interval: Duration::from_secs(10),
            min_ttl: Duration::from_secs(60),
        };
        let minute = Duration::from_secs(60);
        let up = 0;
        let now = 10 * 60_000;
        // Idle 3 minutes against a TTL of 2: gone; of 5: kept.
        assert!(expiry.expired(2 * minute, Some(now - 180_000), now, up));
        assert!(!expiry.expired(5 * minute, Some(now - 180_000), now, up));
        // A TTL below the minimum is the minimum.
        assert!(!expiry.expired(Duration::from_secs(1), Some(now - 30_000), now, up));
        assert!(expiry.expired(Duration::from_secs(1), Some(now - 61_000), now, up));
        // An empty lite topic goes; nothing goes in the broker's first minimum.
        assert!(expiry.expired(minute, None, now, up));
        assert!(!expiry.expired(minute, None, now, now - 30_000));
        assert!(!expiry.expired(minute, Some(0), now, now - 30_000));
    }

    fn change<'a>(
        client_id: &'a str,
        group: &'a str,
        action: SyncAction,
        lites: &'a BTreeSet<String>,
        exclusive: bool,
    ) -> Change<'a> {
        Change {
            client_id,
            group,
            parent: "P",
            action,
            lites,
            exclusive,
        }
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_lite_queue_name_joins_parent_and_lite_topic() {
        assert_eq!(lmq_name("Chats", "session-1"), "%LMQ%$Chats$session-1");
        assert_eq!(
            split_lmq("%LMQ%$Chats$session-1"),
            Some(("Chats", "session-1"))
        );
        for other in [
            "Chats",
            "%LMQ%$Chats",
            "%LMQ%$$x",
            "%LMQ%$Chats$",
            "%LMQ%$a$b$c",
        ] {
            assert_eq!(split_lmq(other), None, "{other}");
        }
    }

    #[test]
    fn names_are_checked_as_the_proxy_checks_them() {
        assert_eq!(check_name("session_1-a"), Ok(()));
        assert_eq!(check_name(&"x".repeat(64)), Ok(()));
        assert_eq!(check_name(&"x".repeat(65)), Err(LiteRefusal::NameTooLong));
        assert_eq!(check_name("  "), Err(LiteRefusal::BlankName));
        for bad in ["bad.name", "bad/name", "bad$name", "é"] {
            assert_eq!(check_name(bad), Err(LiteRefusal::NameCharacters), "{bad}");
        }
        assert_eq!(
            LiteRefusal::NameTooLong.to_string(),
            "lite topic exceed the max size 64"
        );
    }

    #[test]
    fn offset_options_move_the_group_as_java_does() {
        assert_eq!(start_offset(StartFrom::Last, Some(3), 9), None);
        assert_eq!(start_offset(StartFrom::Min, Some(3), 9), Some(0));
        assert_eq!(
            start_offset(StartFrom::Min, Some(0), 9),
            None,
            "already there"
        );
        assert_eq!(start_offset(StartFrom::Max, None, 9), Some(9));
        assert_eq!(start_offset(StartFrom::Offset(5), Some(3), 9), Some(5));
        assert_eq!(start_offset(StartFrom::Offset(-1), Some(3), 9), None);
        assert_eq!(start_offset(StartFrom::TailN(2), Some(7), 9), Some(5));
        assert_eq!(
            start_offset(StartFrom::TailN(2), None, 9),
            None,
            "no offset yet"
        );
        assert_eq!(start_offset(StartFrom::Timestamp(1), Some(3), 9), None);
    }

    #[test]
    fn partial_and_complete_actions_change_the_clients_set() {
        let mut subs = LiteSubscriptions::default();
        let add = |subs: &mut LiteSubscriptions, action, names: &[&str], now| {
            subs.apply(&change("c1", "g", action, &set(names), false), now)
        };
        let outcome = add(&mut subs, SyncAction::PartialAdd, &["a", "b"], 1);
        assert_eq!(outcome.added, ["a", "b"]);
        assert_eq!(
            add(&mut subs, SyncAction::PartialAdd, &["a"], 2).added,
            Vec::<String>::new()
        );
        add(&mut subs, SyncAction::PartialRemove, &["a"], 3);
        assert_eq!(subs.of("c1").map(|c| c.lites.clone()), Some(set(&["b"])));
        let outcome = add(&mut subs, SyncAction::CompleteAdd, &["c", "d"], 4);
        assert_eq!(outcome.added, ["c", "d"]);
        assert_eq!(
            subs.of("c1").map(|c| c.lites.clone()),
            Some(set(&["c", "d"]))
        );
        assert_eq!(subs.of("c1").map(|c| c.refreshed_ms), Some(4));
        add(&mut subs, SyncAction::CompleteRemove, &[], 5);
        assert_eq!(subs.of("c1"), None);
    }

    #[test]
    fn an_exclusive_add_takes_the_lite_topic_from_the_groups_other_clients() {
        let mut subs = LiteSubscriptions::default();
        subs.apply(
            &change("c1", "g", SyncAction::PartialAdd, &set(&["a", "b"]), true),
            1,
        );
        subs.apply(
            &change("c9", "other", SyncAction::PartialAdd, &set(&["a"]), true),
            1,
        );
        let outcome = subs.apply(
            &change("c2", "g", SyncAction::PartialAdd, &set(&["a"]), true),
            2,
        );
        assert_eq!(outcome.evicted, [("c1".to_owned(), "a".to_owned())]);
        assert_eq!(subs.of("c1").map(|c| c.lites.clone()), Some(set(&["b"])));
        assert_eq!(
            subs.of("c9").map(|c| c.lites.clone()),
            Some(set(&["a"])),
            "another group keeps its own"
        );
        let shared = subs.apply(
            &change("c3", "g", SyncAction::PartialAdd, &set(&["b"]), false),
            2,
        );
        assert!(shared.evicted.is_empty(), "a Shared group evicts nobody");
    }

    #[test]
    fn subscriptions_not_refreshed_expire() {
        let mut subs = LiteSubscriptions::default();
        subs.apply(
            &change("old", "g", SyncAction::PartialAdd, &set(&["a"]), false),
            1_000,
        );
        subs.apply(
            &change("new", "g", SyncAction::CompleteAdd, &set(&["a"]), false),
            5_000,
        );
        assert_eq!(subs.expire(2_000), ["old"]);
        assert_eq!(subs.clients(), 1);
        subs.forget_lite("P", "a");
        assert_eq!(subs.of("new").map(|c| c.lites.len()), Some(0));
    }

    #[test]
    fn a_subscription_marks_its_lite_topics_ready_and_an_arrival_marks_each_holder() {
        let mut subs = LiteSubscriptions::default();
        subs.apply(
            &change("c1", "g", SyncAction::PartialAdd, &set(&["a", "b"]), false),
            0,
        );
        subs.apply(
            &change("c2", "h", SyncAction::PartialAdd, &set(&["a"]), false),
            0,
        );
        assert_eq!(subs.readiness().round("c1"), ["a", "b"]);
        for lite in ["a", "b"] {
            assert!(subs.take_ready("c1", lite));
        }
        assert!(subs.take_ready("c2", "a"));
        // The periodic refresh of the whole set marks nothing it already held...
        subs.apply(
            &change("c1", "g", SyncAction::CompleteAdd, &set(&["a", "b"]), false),
            1,
        );
        assert!(!subs.readiness().has_ready("c1"));
        // ...a PARTIAL_ADD (which may move the offset) marks what it names.
        subs.apply(
            &change("c1", "g", SyncAction::PartialAdd, &set(&["b"]), false),
            2,
        );
        assert_eq!(subs.readiness().round("c1"), ["b"]);
        // An arrival in a marks it for both holders, whatever their groups.
        assert_eq!(subs.mark_ready("P", "a"), ["c1", "c2"]);
        assert_eq!(subs.readiness().round("c2"), ["a"]);
        assert_eq!(
            subs.subscribers("P", "a"),
            [
                ("c1".to_owned(), "g".to_owned()),
                ("c2".to_owned(), "h".to_owned())
            ]
        );
        // Unsubscribed, a lite topic is neither ready nor marked by an arrival.
        subs.apply(
            &change("c2", "h", SyncAction::PartialRemove, &set(&["a"]), false),
            3,
        );
        assert!(!subs.readiness().has_ready("c2"));
        assert_eq!(subs.mark_ready("P", "a"), ["c1"]);
    }
}
