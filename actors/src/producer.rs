//! The producer: picks a queue per message (round robin over the topic's write queues) and
//! sends batches through the [`BrokerApi`]. It is a plain value, not an actor: sending is a
//! request/response call and needs no state beyond the route cache.
//!
//! Transactional sends ([`Producer::send_in_transaction`]) follow the Java client's
//! `TransactionMQProducer`: a half message, the local transaction, then END_TRANSACTION with
//! what it decided; the checker registered with
//! [`Producer::register_transaction_checker`] answers the broker's check-backs of halves left
//! unresolved.

use crate::broker_api::{
    BrokerApi, BrokerError, ConnectionId, EndTransactionRequest, SendRequest, SendResult,
    TopicRoute, TransactionCheck, TransactionCheckListener,
};
use crate::logic::queue::MessageQueue;
use crate::logic::transaction::{
    TransactionResolution, PRODUCER_GROUP, TRANSACTION_PREPARED_TYPE, TRAN_MSG,
};
use crate::refused::Refused;
use bytes::Bytes;
use skiff_storage::clock::epoch_millis;
use skiff_storage::message::{
    encode_properties, property, push_property, MessageToAppend, StoredMessage,
};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

/// A message to send.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutgoingMessage {
    pub topic: String,
    pub tags: Option<String>,
    pub keys: Option<String>,
    /// Delay level 1..=18 (1s .. 2h); 0 for none. A level wins over [`Self::deliver`].
    pub delay_level: u8,
    /// When the broker delivers the message (a timer message, up to 3 days ahead); `None`
    /// delivers at once.
    pub deliver: Option<DeliverTime>,
    pub properties: Vec<(String, String)>,
    pub body: Bytes,
}

impl OutgoingMessage {
    pub fn new(topic: impl Into<String>, body: impl Into<Bytes>) -> Self {
        OutgoingMessage {
            topic: topic.into(),
            body: body.into(),
            ..Default::default()
        }
    }

    pub fn with_tags(mut self, tags: impl Into<String>) -> Self {
        self.tags = Some(tags.into());
        self
    }

    /// Adds a user property (what SQL92 subscriptions select on).
    pub fn with_property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.push((name.into(), value.into()));
        self
    }

    pub fn with_keys(mut self, keys: impl Into<String>) -> Self {
        self.keys = Some(keys.into());
        self
    }

    pub fn with_delay_level(mut self, level: u8) -> Self {
        self.delay_level = level;
        self
    }

    /// Delivers the message at `epoch_ms` (milliseconds since the Unix epoch; the broker rounds
    /// it down to the second). A time already past delivers at once.
    pub fn with_deliver_time_ms(mut self, epoch_ms: i64) -> Self {
        self.deliver = Some(DeliverTime::At { epoch_ms });
        self
    }

    /// Delivers the message at `at` (never before it: the broker rounds up to the second).
    pub fn with_deliver_time(self, at: std::time::SystemTime) -> Self {
        let epoch_ms = at
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        self.with_deliver_time_ms(epoch_ms)
    }

    /// Delivers the message `delay` after the broker receives it (at most 3 days).
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.deliver = Some(DeliverTime::After(delay));
        self
    }
}

/// When a timer message is delivered ([`OutgoingMessage::deliver`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliverTime {
    /// At this time, in milliseconds since the Unix epoch (`TIMER_DELIVER_MS`).
    At { epoch_ms: i64 },
    /// This long after the broker receives the send (`TIMER_DELAY_MS`).
    After(Duration),
}

#[derive(Clone)]
pub struct Producer {
    group: String,
    /// This producer's client id: the `REPLY_TO_CLIENT` its requests name.
    client_id: String,
    broker: Rc<dyn BrokerApi>,
    routes: Rc<RefCell<HashMap<String, TopicRoute>>>,
    next_queue: Rc<Cell<u32>>,
    born_host: SocketAddr,
    /// Set once a transaction checker is registered: transactional sends need one.
    checker_registered: Rc<Cell<bool>>,
    /// This producer's connection to the broker, as the broker's registry knows it.
    connection: ConnectionId,
}

/// What [`Producer::send_in_transaction`] did: where the half message went, and what the local
/// transaction decided (and was sent to the broker).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionSendResult {
    /// The half message as stored (in the broker's half queue).
    pub half: SendResult,
    /// The transaction id: the message's `UNIQ_KEY`.
    pub transaction_id: String,
    pub resolution: TransactionResolution,
}

type Checker = dyn Fn(StoredMessage) -> Pin<Box<dyn Future<Output = TransactionResolution>>>;

/// Answers the broker's check-backs for an embedded producer: asks the checker, then sends its
/// decision with END_TRANSACTION (UNKNOW included: the half waits for the next round).
struct CheckListener {
    /// The producer's handle, held weakly: the broker keeps this listener, which must not keep
    /// the broker alive. Once the producer and its clones are dropped, check-backs go
    /// unanswered and the broker sets the halves aside after its check limit.
    broker: Weak<dyn BrokerApi>,
    checker: Rc<Checker>,
    connection: ConnectionId,
}

impl TransactionCheckListener for CheckListener {
    fn connection(&self) -> ConnectionId {
        self.connection
    }

    fn check_transaction_state(&self, check: TransactionCheck) {
        let Some(broker) = self.broker.upgrade() else {
            return;
        };
        let decided = (self.checker)(check.message.clone());
        // Called from the broker's transaction actor, which must neither wait for the checker
        // nor for itself: the answer goes back from a task of its own.
        actix::spawn(async move {
            let resolution = decided.await;
            let transaction_id = check.msg_id.clone().unwrap_or_default();
            let request = EndTransactionRequest {
                producer_group: check.producer_group,
                tran_state_table_offset: check.tran_state_table_offset,
                commit_log_offset: check.commit_log_offset,
                resolution,
                from_transaction_check: true,
                msg_id: transaction_id.clone(),
                transaction_id: Some(transaction_id),
                broker_name: check.broker_name,
            };
            if let Err(e) = broker.end_transaction(request).await {
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "answering a transaction check-back failed; the broker asks again"
                );
            }
        });
    }
}

impl Producer {
    pub fn new(group: impl Into<String>, broker: Rc<dyn BrokerApi>) -> Self {
        Producer {
            group: group.into(),
            client_id: format!("127.0.0.1@{}#{}", std::process::id(), unique_id()),
            broker,
            routes: Rc::default(),
            // A random first queue, as Java's producer starts its round robin: a short-lived
            // producer (a script sending a few messages) does not always fill queue 0 first.
            next_queue: Rc::new(Cell::new(rand::random())),
            born_host: SocketAddr::from(([127, 0, 0, 1], 0)),
            checker_registered: Rc::default(),
            connection: ConnectionId::next(),
        }
    }

    /// Registers `checker` as this producer group's answer to the broker's check-backs: a half
    /// message whose local transaction answered [`TransactionResolution::Unknown`] (or whose
    /// END_TRANSACTION was lost) is shown to it after the broker's transaction timeout, until
    /// it commits or rolls back or the broker's check limit is reached (Java's
    /// `TransactionListener.checkLocalTransaction`). Required before
    /// [`Self::send_in_transaction`].
    pub async fn register_transaction_checker<C, Fut>(&self, checker: C) -> Result<(), BrokerError>
    where
        C: Fn(StoredMessage) -> Fut + 'static,
        Fut: Future<Output = TransactionResolution> + 'static,
    {
        let checker: Rc<Checker> = Rc::new(move |half| Box::pin(checker(half)));
        // The BrokerApi takes listeners as `Arc` (a connection's is shared with its reader);
        // this one holds the node's `Rc` broker and stays on the node's thread.
        #[allow(clippy::arc_with_non_send_sync)]
        let listener: Arc<dyn TransactionCheckListener> = Arc::new(CheckListener {
            broker: Rc::downgrade(&self.broker),
            checker,
            connection: self.connection,
        });
        self.broker
            .register_producer(self.group.clone(), self.client_id.clone(), listener)
            .await?;
        self.checker_registered.set(true);
        Ok(())
    }

    /// Sends `message` as a transaction (Java's `sendMessageInTransaction`): stores it as a
    /// half message no consumer sees, runs `local_transaction` with where it went, and ends
    /// the transaction with its answer: COMMIT delivers the message, ROLLBACK drops it, UNKNOW
    /// leaves it to the checker. A delay level is dropped, as Java drops it. A failed
    /// END_TRANSACTION is logged, not returned, as in Java: the half is checked back later.
    pub async fn send_in_transaction<F, Fut>(
        &self,
        message: OutgoingMessage,
        local_transaction: F,
    ) -> Result<TransactionSendResult, BrokerError>
    where
        F: FnOnce(&SendResult) -> Fut,
        Fut: Future<Output = TransactionResolution>,
    {
        if !self.checker_registered.get() {
            return Err(Refused::NoTransactionChecker {
                group: self.group.clone(),
            }
            .into());
        }
        let queue = self.next_write_queue(&message.topic).await?;
        let mut half = self.to_append(
            OutgoingMessage {
                delay_level: 0,
                ..message
            },
            queue.queue_id,
        );
        half.sys_flag |= TRANSACTION_PREPARED_TYPE;
        push_property(&mut half.properties, TRAN_MSG, "true");
        push_property(&mut half.properties, PRODUCER_GROUP, &self.group);
        let transaction_id = property(&half.properties, property::UNIQ_KEY)
            .unwrap_or_default()
            .to_owned();
        let stored = self
            .broker
            .send_messages(SendRequest::to_broker(
                queue.broker_name.clone(),
                vec![half],
            ))
            .await?
            .pop()
            .ok_or(BrokerError::EmptyAnswer {
                call: "a transactional send",
            })?;
        let resolution = local_transaction(&stored).await;
        let end = EndTransactionRequest {
            producer_group: self.group.clone(),
            tran_state_table_offset: stored.queue_offset,
            commit_log_offset: stored.physical_offset,
            resolution,
            from_transaction_check: false,
            msg_id: transaction_id.clone(),
            transaction_id: Some(transaction_id.clone()),
            broker_name: stored.broker_name.clone(),
        };
        if let Err(e) = self.broker.end_transaction(end).await {
            tracing::warn!(
                group = %self.group,
                transaction_id = %transaction_id,
                error = &e as &dyn std::error::Error,
                "end transaction failed; the broker will check the transaction back"
            );
        }
        Ok(TransactionSendResult {
            half: stored,
            transaction_id,
            resolution,
        })
    }

    /// The write queue the next message of `topic` goes to (round robin).
    async fn next_write_queue(&self, topic: &str) -> Result<MessageQueue, BrokerError> {
        let queues = self.route(topic).await?.write_queues();
        self.take_turn(&queues).cloned().ok_or_else(|| {
            BrokerError::Refused(Refused::TopicNotExist {
                topic: topic.to_owned(),
            })
        })
    }

    /// The next queue of the producer's round robin over `queues` (`None` when there are none);
    /// every call moves the round on.
    fn take_turn<'q>(&self, queues: &'q [MessageQueue]) -> Option<&'q MessageQueue> {
        let index = self.next_queue.get() as usize;
        self.next_queue.set(self.next_queue.get().wrapping_add(1));
        queues.get(index % queues.len().max(1))
    }

    /// Starts the round robin over a topic's write queues at `index` (modulo the queue count)
    /// instead of a random queue: for callers (tests) that need to know where messages land.
    pub fn start_round_robin_at(&self, index: u32) {
        self.next_queue.set(index);
    }

    pub fn group(&self) -> &str {
        &self.group
    }

    async fn route(&self, topic: &str) -> Result<TopicRoute, BrokerError> {
        if let Some(route) = self.routes.borrow().get(topic) {
            return Ok(route.clone());
        }
        let route = self.broker.publish_route(topic.to_owned()).await?;
        self.routes
            .borrow_mut()
            .insert(topic.to_string(), route.clone());
        Ok(route)
    }

    /// Sends one message to the next queue of its topic.
    pub async fn send(&self, message: OutgoingMessage) -> Result<SendResult, BrokerError> {
        let mut results = self.send_batch(vec![message]).await?;
        results
            .pop()
            .ok_or(BrokerError::EmptyAnswer { call: "a send" })
    }

    /// Sends messages, each to the next write queue of its topic (round robin over the queues
    /// of every broker of the route). Consecutive messages for one broker go in one call.
    pub async fn send_batch(
        &self,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<SendResult>, BrokerError> {
        // Batches usually go to one topic: look its route up once, not per message.
        let mut queues_by_topic: HashMap<String, Vec<MessageQueue>> = HashMap::new();
        let mut runs: Vec<(String, Vec<MessageToAppend>)> = Vec::new();
        for message in messages {
            if !queues_by_topic.contains_key(&message.topic) {
                let queues = self.route(&message.topic).await?.write_queues();
                queues_by_topic.insert(message.topic.clone(), queues);
            }
            let queues = queues_by_topic
                .get(&message.topic)
                .map(Vec::as_slice)
                .unwrap_or_default();
            // A route without write queues: queue 0 of no broker, which the broker refuses.
            let (broker_name, queue_id) = match self.take_turn(queues) {
                Some(queue) => (queue.broker_name.clone(), queue.queue_id),
                None => (String::new(), 0),
            };
            let append = self.to_append(message, queue_id);
            match runs.last_mut() {
                Some((broker, run)) if *broker == broker_name => run.push(append),
                _ => runs.push((broker_name, vec![append])),
            }
        }
        let mut results = Vec::new();
        for (broker_name, run) in runs {
            results.extend(
                self.broker
                    .send_messages(SendRequest::to_broker(broker_name, run))
                    .await?,
            );
        }
        Ok(results)
    }

    /// The queues this producer writes to for `topic`, broker by broker (orderly producers pick
    /// one by a sharding key and pass it to [`Producer::send_to_queue`]).
    pub async fn write_queues(&self, topic: &str) -> Result<Vec<MessageQueue>, BrokerError> {
        Ok(self.route(topic).await?.write_queues())
    }

    /// Sends messages to one queue of their topic (orderly producers pick the queue by a
    /// sharding key), on the broker that owns it.
    pub async fn send_to_queue(
        &self,
        queue: &MessageQueue,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<SendResult>, BrokerError> {
        let batch = messages
            .into_iter()
            .map(|message| self.to_append(message, queue.queue_id))
            .collect();
        self.broker
            .send_messages(SendRequest::to_broker(queue.broker_name.clone(), batch))
            .await
    }

    /// Request-reply (Java's `producer.request(msg, timeout)`): sends `message` and waits up to
    /// `timeout` for the reply a consumer sends with the request's `CORRELATION_ID`, pushed back
    /// to this producer's connection. Needs a broker reached over the network (`RemoteBroker`).
    pub async fn request(
        &self,
        message: OutgoingMessage,
        timeout: Duration,
    ) -> Result<StoredMessage, BrokerError> {
        let queues = self.route(&message.topic).await?.write_queues();
        let queue = self
            .take_turn(&queues)
            .ok_or_else(|| Refused::NoWriteQueue {
                topic: message.topic.clone(),
            })?;
        let mut append = self.to_append(message, queue.queue_id);
        let correlation_id = unique_id();
        let ttl = timeout.as_millis().to_string();
        for (name, value) in [
            (property::CORRELATION_ID, correlation_id.as_str()),
            (property::REPLY_TO_CLIENT, self.client_id.as_str()),
            (property::TTL, ttl.as_str()),
        ] {
            push_property(&mut append.properties, name, value);
        }
        self.broker
            .request(append, queue.broker_name.clone(), timeout)
            .await
    }

    fn to_append(&self, message: OutgoingMessage, queue_id: u32) -> MessageToAppend {
        let delay = if message.delay_level > 0 {
            message.delay_level.to_string()
        } else {
            String::new()
        };
        let mut pairs: Vec<(&str, &str)> = message
            .properties
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        if let Some(tags) = &message.tags {
            pairs.push((property::TAGS, tags));
        }
        if let Some(keys) = &message.keys {
            pairs.push((property::KEYS, keys));
        }
        if message.delay_level > 0 {
            pairs.push((property::DELAY, &delay));
        }
        let timer = match message.deliver {
            Some(DeliverTime::At { epoch_ms }) => {
                Some((property::TIMER_DELIVER_MS, epoch_ms.to_string()))
            }
            Some(DeliverTime::After(delay)) => Some((
                property::TIMER_DELAY_MS,
                delay.as_millis().min(i64::MAX as u128).to_string(),
            )),
            None => None,
        };
        if let Some((name, value)) = &timer {
            pairs.push((name, value));
        }
        let mut properties = encode_properties(&pairs);
        // Every send carries a client message id, embedded or remote, so a consumer's
        // `msg_id` does not depend on the transport; one the caller set is kept.
        if property(&properties, property::UNIQ_KEY).is_none() {
            push_property(&mut properties, property::UNIQ_KEY, &unique_id());
        }
        MessageToAppend {
            topic: message.topic,
            queue_id,
            flag: 0,
            sys_flag: 0,
            born_timestamp: epoch_millis(),
            born_host: self.born_host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            properties,
            body: message.body,
        }
    }
}

/// A client message id (`UNIQ_KEY`, `docs/wire-protocol.md` §6.5): 16 bytes as 32 upper-case
/// hex digits: IPv4 (4), pid (2), a per-process random (4, Java: class-loader hash),
/// milliseconds (4), counter (2).
pub fn unique_id() -> String {
    static PREFIX: OnceLock<[u8; 10]> = OnceLock::new();
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let prefix = PREFIX.get_or_init(|| {
        let mut p = [0u8; 10];
        p[..4].copy_from_slice(&[127, 0, 0, 1]);
        p[4..6].copy_from_slice(&(std::process::id() as u16).to_be_bytes());
        p[6..].copy_from_slice(&rand::random::<u32>().to_be_bytes());
        p
    });
    // The field has 4 bytes: the low 32 bits of the epoch milliseconds.
    let millis = epoch_millis() as u32;
    let count = COUNTER.fetch_add(1, Ordering::Relaxed) as u16;
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut id = String::with_capacity(32);
    for b in prefix
        .iter()
        .chain(millis.to_be_bytes().iter())
        .chain(count.to_be_bytes().iter())
    {
        id.push(char::from(HEX[usize::from(b >> 4)]));
        id.push(char::from(HEX[usize::from(b & 0xF)]));
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_ids_are_32_upper_case_hex_and_distinct() {
        let a = unique_id();
        let b = unique_id();
        assert_eq!(a.len(), 32);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase()));
        assert_ne!(a, b);
    }
}
