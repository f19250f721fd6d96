//! The route cache of a [`RemoteBroker`]: each topic's route and the master address of each of
//! its brokers as the name server last answered, asked again after
//! [`route_ttl`](super::RemoteBrokerConfig::route_ttl) or once a transport failure marked it
//! stale, and still used while the name server cannot be reached.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, warn};

use skiff_actors::broker_api::{BrokerError, BrokerQueues, RemoteError, TopicRoute};
use skiff_actors::logic::delay::{is_dlq_topic, is_retry_topic, retry_topic};

use super::{bad_answer, RemoteBroker};
use crate::remoting::body::{JsonBody, TopicRouteData};
use crate::remoting::codes::{request as rc, response as code, AUTO_CREATE_TOPIC_KEY};
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{CustomHeader, GetRouteInfoRequestHeader};

/// A cached route and the master address of each of its brokers.
#[derive(Debug, Clone)]
pub(super) struct CachedRoute {
    pub(super) route: TopicRoute,
    /// Broker name → master address, for every broker of `route` (route order in `route`).
    pub(super) addrs: BTreeMap<String, String>,
    fetched: Instant,
    /// Marked when a call to one of `addrs` failed in transport, or when the route is the
    /// auto-create topic's fallback: the next lookup asks the name server again.
    stale: bool,
}

impl CachedRoute {
    /// The master address of the route's first broker.
    pub(super) fn first_addr(&self) -> Option<&String> {
        self.route
            .brokers
            .first()
            .and_then(|b| self.addrs.get(&b.broker_name))
    }

    /// Every master address of the route.
    pub(super) fn all_addrs(&self) -> impl Iterator<Item = &String> {
        self.addrs.values()
    }
}

/// Routes by topic, the master address of every broker name seen, and the address last
/// resolved.
#[derive(Default)]
pub(super) struct RouteCache {
    routes: RefCell<HashMap<String, CachedRoute>>,
    /// Broker name → master address from every route fetched (Java's `brokerAddrTable`), so a
    /// queue whose broker left a topic's latest route can still be reached.
    brokers: RefCell<HashMap<String, String>>,
    /// The broker address last resolved, for calls that name no topic.
    last_addr: RefCell<Option<String>>,
}

impl RouteCache {
    /// The cached route of `topic`, and whether it is still fresh (within `ttl`, not stale).
    fn get(&self, topic: &str, ttl: Duration) -> Option<(CachedRoute, bool)> {
        let routes = self.routes.borrow();
        let cached = routes.get(topic)?;
        let fresh = !cached.stale && cached.fetched.elapsed() < ttl;
        Some((cached.clone(), fresh))
    }

    fn store(&self, topic: &str, route: CachedRoute) {
        if let Some(first) = route.first_addr() {
            *self.last_addr.borrow_mut() = Some(first.clone());
        }
        self.brokers.borrow_mut().extend(
            route
                .addrs
                .iter()
                .map(|(name, addr)| (name.clone(), addr.clone())),
        );
        self.routes.borrow_mut().insert(topic.to_owned(), route);
    }

    /// Marks every route through `addr` stale: the next lookup asks the name server again.
    pub(super) fn mark_stale(&self, addr: &str) {
        for cached in self.routes.borrow_mut().values_mut() {
            if cached.addrs.values().any(|a| a == addr) {
                cached.stale = true;
            }
        }
    }

    /// The master address last seen for `broker_name` in any route.
    pub(super) fn broker(&self, broker_name: &str) -> Option<String> {
        self.brokers.borrow().get(broker_name).cloned()
    }

    pub(super) fn last_addr(&self) -> Option<String> {
        self.last_addr.borrow().clone()
    }

    /// Every broker address currently known (for unregistering everywhere).
    pub(super) fn known_addrs(&self) -> BTreeSet<String> {
        let mut addrs: BTreeSet<String> = self.brokers.borrow().values().cloned().collect();
        if let Some(last) = self.last_addr() {
            addrs.insert(last);
        }
        addrs
    }
}

impl RemoteBroker {
    pub(super) async fn route(&self, topic: String) -> Result<TopicRoute, BrokerError> {
        Ok(self.route_entry(&topic).await?.route)
    }

    /// A producer's route is the route: a topic the name server does not know already gets the
    /// auto-create topic's brokers (see [`Self::route_entry`]).
    pub(super) async fn publish_route(&self, topic: String) -> Result<TopicRoute, BrokerError> {
        self.route(topic).await
    }

    /// The master address of the first broker of `topic` (from its cached or fresh route).
    pub async fn broker_addr(&self, topic: &str) -> Result<String, BrokerError> {
        Ok(self.first_broker(topic).await?.1)
    }

    /// The name and master address of the first broker of `topic`.
    pub(super) async fn first_broker(&self, topic: &str) -> Result<(String, String), BrokerError> {
        let entry = self.route_entry(topic).await?;
        entry
            .route
            .brokers
            .first()
            .and_then(|b| {
                let addr = entry.addrs.get(&b.broker_name)?;
                Some((b.broker_name.clone(), addr.clone()))
            })
            .ok_or_else(|| {
                RemoteError::NoBroker {
                    namesrv: self.inner.namesrv.clone(),
                    topic: topic.to_owned(),
                }
                .into()
            })
    }

    /// The master address of `broker_name`, which owns a queue of `topic`: from the topic's
    /// route, else from any route that named the broker (it may have left the topic's route
    /// while it restarts; calls to it then fail in transport, as they should).
    pub async fn queue_addr(&self, topic: &str, broker_name: &str) -> Result<String, BrokerError> {
        let entry = self.route_entry(topic).await;
        if let Ok(entry) = &entry {
            if let Some(addr) = entry.addrs.get(broker_name) {
                return Ok(addr.clone());
            }
        }
        if let Some(addr) = self.inner.routes.broker(broker_name) {
            return Ok(addr);
        }
        entry?;
        Err(RemoteError::UnknownBroker {
            broker_name: broker_name.to_owned(),
            topic: topic.to_owned(),
        }
        .into())
    }

    /// Every master address of `topic`'s route.
    pub(super) async fn topic_addrs(&self, topic: &str) -> Result<Vec<String>, BrokerError> {
        Ok(self
            .route_entry(topic)
            .await?
            .all_addrs()
            .cloned()
            .collect())
    }

    pub(super) async fn route_entry(&self, topic: &str) -> Result<CachedRoute, BrokerError> {
        let routes = &self.inner.routes;
        let cached = match routes.get(topic, self.inner.config.route_ttl) {
            Some((cached, true)) => return Ok(cached),
            Some((stale, false)) => Some(stale),
            None => None,
        };
        match self.fetch_route(topic).await {
            Ok(fresh) => {
                routes.store(topic, fresh.clone());
                Ok(fresh)
            }
            Err(e) => match cached {
                Some(stale) => {
                    warn!(
                        topic,
                        error = &e as &dyn std::error::Error,
                        "route refresh failed; using the last known route"
                    );
                    Ok(stale)
                }
                None => Err(e),
            },
        }
    }

    /// Asks the name server; a topic it does not know gets the auto-create topic's broker
    /// (marked stale, so the real route is picked up once the topic exists).
    async fn fetch_route(&self, topic: &str) -> Result<CachedRoute, BrokerError> {
        match self.query_route(topic).await {
            // Retry and dead-letter topics are made by the broker, never by a send.
            Err(BrokerError::Remote(RemoteError::Answered { code: c, .. }))
                if c == code::TOPIC_NOT_EXIST
                    && topic != AUTO_CREATE_TOPIC_KEY
                    && !is_retry_topic(topic)
                    && !is_dlq_topic(topic) =>
            {
                let mut fallback = self.query_route(AUTO_CREATE_TOPIC_KEY).await?;
                debug!(
                    topic,
                    brokers = fallback.route.brokers.len(),
                    "no route yet; using the auto-create topic's brokers"
                );
                // Each broker auto-creates the topic with the queues a send asks for, at most
                // its default topic's (Java's producer does the same per broker).
                let default = self.inner.config.default_topic_queue_nums;
                fallback.route.topic = topic.to_owned();
                for broker in &mut fallback.route.brokers {
                    let queues = default.min(broker.write_queue_nums).max(1);
                    broker.read_queue_nums = queues;
                    broker.write_queue_nums = queues;
                }
                fallback.stale = true;
                Ok(fallback)
            }
            other => other,
        }
    }

    async fn query_route(&self, topic: &str) -> Result<CachedRoute, BrokerError> {
        let namesrv = self.inner.namesrv.clone();
        let request = RemotingCommand::new_request(rc::GET_ROUTEINFO_BY_TOPIC).with_ext_fields(
            GetRouteInfoRequestHeader {
                topic: topic.to_owned(),
                accept_standard_json_only: None,
            }
            .to_ext(),
        );
        let response = self.invoke_ok(&namesrv, request).await?;
        let data = TopicRouteData::decode(&response.body)
            .map_err(|e| bad_answer(&namesrv, "route data", e))?;
        let (route, addrs) = route_from(topic, &data).ok_or_else(|| RemoteError::NoBroker {
            namesrv: namesrv.clone(),
            topic: topic.to_owned(),
        })?;
        Ok(CachedRoute {
            route,
            addrs,
            fetched: Instant::now(),
            stale: false,
        })
    }

    /// The broker for calls that name only a group: the last broker resolved, else the broker
    /// of the group's retry topic.
    pub(super) async fn group_addr(&self, group: &str) -> Result<String, BrokerError> {
        match self.inner.routes.last_addr() {
            Some(addr) => Ok(addr),
            None => self.broker_addr(&retry_topic(group)).await,
        }
    }
}

/// PermName bits of a queue data.
const PERM_WRITE: i32 = 2;
const PERM_READ: i32 = 4;

/// The route of `topic` from route data: every broker data with a master (id 0) and queue data,
/// in route order, with the master addresses by broker name (as Java's client builds its
/// message queues); queues of a broker whose permission forbids reading or writing count 0 for
/// that side. `None` when no broker qualifies.
fn route_from(
    topic: &str,
    data: &TopicRouteData,
) -> Option<(TopicRoute, BTreeMap<String, String>)> {
    let mut brokers = Vec::new();
    let mut addrs = BTreeMap::new();
    for broker in &data.broker_datas {
        let Some(addr) = broker.broker_addrs.get(&0) else {
            continue;
        };
        let Some(queues) = data
            .queue_datas
            .iter()
            .find(|q| q.broker_name == broker.broker_name)
        else {
            continue;
        };
        if addrs.contains_key(&broker.broker_name) {
            continue;
        }
        let count = |n: i32, bit: i32| {
            if queues.perm & bit == 0 {
                0
            } else {
                u32::try_from(n).unwrap_or(0)
            }
        };
        brokers.push(BrokerQueues {
            broker_name: broker.broker_name.clone(),
            read_queue_nums: count(queues.read_queue_nums, PERM_READ),
            write_queue_nums: count(queues.write_queue_nums, PERM_WRITE),
        });
        addrs.insert(broker.broker_name.clone(), addr.clone());
    }
    if brokers.is_empty() {
        return None;
    }
    Some((
        TopicRoute {
            topic: topic.to_owned(),
            brokers,
        },
        addrs,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_from_reads_unquoted_and_quoted_broker_ids() {
        for body in [
            r#"{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"b","cluster":"c"}],"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":4}]}"#,
            r#"{"brokerDatas":[{"brokerAddrs":{"1":"10.0.0.2:10911","0":"10.0.0.1:10911"},"brokerName":"b","cluster":"c"}],"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":"8","writeQueueNums":4}]}"#,
        ] {
            let data = TopicRouteData::decode(body.as_bytes()).expect("route data decodes");
            let (route, addrs) = route_from("T", &data).expect("a master with queues");
            assert_eq!(addrs.get("b").map(String::as_str), Some("10.0.0.1:10911"));
            assert_eq!(route, TopicRoute::single("T", "b", 8, 4));
        }
        let slave_only = TopicRouteData::decode(
            br#"{"brokerDatas":[{"brokerAddrs":{1:"h:1"},"brokerName":"b"}],"queueDatas":[{"brokerName":"b"}]}"#,
        )
        .expect("decodes");
        assert!(route_from("T", &slave_only).is_none());
    }

    #[test]
    fn route_from_lists_every_master_broker_and_its_queues() {
        // broker-c has no master, broker-d no queue data, broker-e is read-only (perm 4).
        let data = TopicRouteData::decode(
            br#"{"brokerDatas":[
                {"brokerAddrs":{0:"h:1"},"brokerName":"broker-b"},
                {"brokerAddrs":{0:"h:2",1:"h:3"},"brokerName":"broker-a"},
                {"brokerAddrs":{1:"h:4"},"brokerName":"broker-c"},
                {"brokerAddrs":{0:"h:5"},"brokerName":"broker-d"},
                {"brokerAddrs":{0:"h:6"},"brokerName":"broker-e"}],
              "queueDatas":[
                {"brokerName":"broker-a","perm":6,"readQueueNums":4,"writeQueueNums":4},
                {"brokerName":"broker-b","perm":6,"readQueueNums":2,"writeQueueNums":3},
                {"brokerName":"broker-c","perm":6,"readQueueNums":4,"writeQueueNums":4},
                {"brokerName":"broker-e","perm":4,"readQueueNums":1,"writeQueueNums":1}]}"#,
        )
        .expect("decodes");
        let (route, addrs) = route_from("T", &data).expect("masters with queues");
        let names: Vec<&str> = route
            .brokers
            .iter()
            .map(|b| b.broker_name.as_str())
            .collect();
        assert_eq!(names, ["broker-b", "broker-a", "broker-e"]);
        assert_eq!((route.read_queue_nums(), route.write_queue_nums()), (7, 7));
        let writes: Vec<String> = route
            .write_queues()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            writes,
            [
                "T:broker-b:0",
                "T:broker-b:1",
                "T:broker-b:2",
                "T:broker-a:0",
                "T:broker-a:1",
                "T:broker-a:2",
                "T:broker-a:3"
            ]
        );
        assert_eq!(route.read_queues().len(), 7);
        assert_eq!(addrs.get("broker-a").map(String::as_str), Some("h:2"));
        assert_eq!(addrs.get("broker-e").map(String::as_str), Some("h:6"));
        assert_eq!(addrs.len(), 3);
    }
}
