//! The producer: picks a queue per message (round robin over the topic's write queues) and
//! sends batches through the [`BrokerApi`]. It is a plain value, not an actor: sending is a
//! request/response call and needs no state beyond the route cache.

use crate::broker_api::{BrokerApi, BrokerError, SendResult, TopicRoute};
use bytes::Bytes;
use skiff_storage::message::{encode_properties, property, MessageToAppend};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A message to send.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutgoingMessage {
    pub topic: String,
    pub tags: Option<String>,
    pub keys: Option<String>,
    /// Delay level 1..=18 (1s .. 2h); 0 for none.
    pub delay_level: u8,
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

    pub fn with_keys(mut self, keys: impl Into<String>) -> Self {
        self.keys = Some(keys.into());
        self
    }

    pub fn with_delay_level(mut self, level: u8) -> Self {
        self.delay_level = level;
        self
    }
}

#[derive(Clone)]
pub struct Producer {
    group: String,
    broker: Rc<dyn BrokerApi>,
    routes: Rc<RefCell<HashMap<String, TopicRoute>>>,
    next_queue: Rc<Cell<u32>>,
    born_host: SocketAddr,
}

impl Producer {
    pub fn new(group: impl Into<String>, broker: Rc<dyn BrokerApi>) -> Self {
        Producer {
            group: group.into(),
            broker,
            routes: Rc::default(),
            next_queue: Rc::default(),
            born_host: SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }

    pub fn group(&self) -> &str {
        &self.group
    }

    async fn route(&self, topic: &str) -> Result<TopicRoute, BrokerError> {
        if let Some(route) = self.routes.borrow().get(topic) {
            return Ok(route.clone());
        }
        let route = self.broker.route(topic).await?;
        self.routes
            .borrow_mut()
            .insert(topic.to_string(), route.clone());
        Ok(route)
    }

    /// Sends one message to the next queue of its topic.
    pub async fn send(&self, message: OutgoingMessage) -> Result<SendResult, BrokerError> {
        let mut results = self.send_batch(vec![message]).await?;
        results.pop().ok_or_else(|| BrokerError::InvalidRequest {
            reason: "the broker answered an empty send".to_string(),
        })
    }

    /// Sends messages, each to the next queue of its topic (round robin), in one request.
    pub async fn send_batch(
        &self,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<SendResult>, BrokerError> {
        let mut batch = Vec::with_capacity(messages.len());
        // Batches usually go to one topic: look its route up once, not per message.
        let mut queue_counts: HashMap<String, u32> = HashMap::new();
        for message in messages {
            let queues = match queue_counts.get(&message.topic) {
                Some(queues) => *queues,
                None => {
                    let queues = self.route(&message.topic).await?.write_queue_nums.max(1);
                    queue_counts.insert(message.topic.clone(), queues);
                    queues
                }
            };
            let queue_id = self.next_queue.get() % queues;
            self.next_queue.set(self.next_queue.get().wrapping_add(1));
            batch.push(self.to_append(message, queue_id));
        }
        self.broker.send(batch).await
    }

    /// Sends messages to one queue (orderly producers pick the queue by a sharding key).
    pub async fn send_to_queue(
        &self,
        queue_id: u32,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<SendResult>, BrokerError> {
        let batch = messages
            .into_iter()
            .map(|message| self.to_append(message, queue_id))
            .collect();
        self.broker.send(batch).await
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
        MessageToAppend {
            topic: message.topic,
            queue_id,
            flag: 0,
            sys_flag: 0,
            born_timestamp: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
            born_host: self.born_host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            properties: encode_properties(&pairs),
            body: message.body,
        }
    }
}
