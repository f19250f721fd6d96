//! What the user's code sees: received messages, listener kinds and their outcomes.

use crate::logic::queue::MessageQueue;
use crate::LocalFuture;
use skiff_storage::message::{self, property, StoredMessage};
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;

/// A message handed to a listener, with the queue it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    pub queue: MessageQueue,
    pub message: StoredMessage,
}

impl ReceivedMessage {
    pub fn body(&self) -> &[u8] {
        &self.message.body
    }

    pub fn queue_offset(&self) -> u64 {
        self.message.queue_offset
    }

    pub fn reconsume_times(&self) -> i32 {
        self.message.reconsume_times
    }

    pub fn property(&self, name: &str) -> Option<&str> {
        message::property(&self.message.properties, name)
    }

    pub fn tags(&self) -> Option<&str> {
        self.property(property::TAGS)
    }

    pub fn keys(&self) -> Option<&str> {
        self.property(property::KEYS)
    }

    /// The topic a retried message was first sent to (its own topic otherwise).
    pub fn origin_topic(&self) -> &str {
        self.property(property::RETRY_TOPIC)
            .unwrap_or(&self.message.topic)
    }

    /// The producer's unique id when present, else the offset message id (as Java's client).
    pub fn msg_id(&self) -> String {
        match self.property(property::UNIQ_KEY) {
            Some(id) => id.to_string(),
            None => {
                message::offset_message_id(self.message.store_host, self.message.physical_offset)
            }
        }
    }
}

/// Outcome of a concurrent listener call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeStatus {
    /// Messages up to and including `ack_index` succeeded (all of them when `None`); the rest
    /// are retried.
    Success {
        ack_index: Option<usize>,
    },
    ReconsumeLater,
}

impl ConsumeStatus {
    pub const SUCCESS: ConsumeStatus = ConsumeStatus::Success { ack_index: None };
}

/// Outcome of an orderly listener call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderlyStatus {
    Success,
    /// Retry the same messages after `suspend` (1 s by default), keeping the queue's order.
    SuspendCurrentQueueAMoment,
}

pub type Batch = Vec<Arc<ReceivedMessage>>;

/// The user's code. Listeners are async so a slow or stuck one never blocks the arbiter; a
/// panicking listener counts as "reconsume later", as an exception does in RocketMQ.
#[derive(Clone)]
pub enum Listener {
    Concurrent(Rc<dyn Fn(Batch) -> LocalFuture<ConsumeStatus>>),
    Orderly(Rc<dyn Fn(Batch) -> LocalFuture<OrderlyStatus>>),
}

impl Listener {
    pub fn concurrent<F, Fut>(listener: F) -> Self
    where
        F: Fn(Batch) -> Fut + 'static,
        Fut: Future<Output = ConsumeStatus> + 'static,
    {
        Listener::Concurrent(Rc::new(move |batch| Box::pin(listener(batch))))
    }

    pub fn orderly<F, Fut>(listener: F) -> Self
    where
        F: Fn(Batch) -> Fut + 'static,
        Fut: Future<Output = OrderlyStatus> + 'static,
    {
        Listener::Orderly(Rc::new(move |batch| Box::pin(listener(batch))))
    }

    pub fn is_orderly(&self) -> bool {
        matches!(self, Listener::Orderly(_))
    }
}
