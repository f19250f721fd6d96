//! The OffsetStore: a consumer instance's offset cache and its backend.
//!
//! Clustering consumers keep offsets on the broker; broadcasting consumers keep them in a local
//! sled tree. A read error is never turned into "not found": that is how RocketMQ rolled offsets
//! back (offset-lifecycle §2, #2708), so callers get the two apart and skip the queue on error.

use crate::broker_api::{BrokerApi, BrokerError};
use crate::logic::queue::MessageQueue;
use crate::persister::PersistNow;
use actix::prelude::*;
use skiff_storage::offset_table::{OffsetKey, OffsetTable, OffsetTableError};
use std::collections::BTreeMap;
use std::rc::Rc;

/// Where a read looks (RocketMQ's ReadOffsetType).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFrom {
    Memory,
    Store,
    MemoryThenStore,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetRead {
    Found(u64),
    NotFound,
}

#[derive(Debug, thiserror::Error)]
pub enum OffsetStoreError {
    #[error("broker offset request for {queue} failed: {source}")]
    Broker {
        queue: String,
        #[source]
        source: BrokerError,
    },
    #[error("local offset store failed for {queue}: {source}")]
    Local {
        queue: String,
        #[source]
        source: OffsetTableError,
    },
}

/// Where offsets live beyond the cache.
pub enum OffsetBackend {
    /// Clustering: the broker's offset table.
    Broker(Rc<dyn BrokerApi>),
    /// Broadcasting: a local table, keyed by the queue's topic and the consumer group.
    Local(Box<dyn OffsetTable>),
}

/// Sets the cached offset. With `increase_only` a lower offset is ignored; orderly commits and
/// explicit resets pass `false`, and a lowering is logged (DESIGN rule 3).
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct UpdateOffset {
    pub queue: MessageQueue,
    pub offset: u64,
    pub increase_only: bool,
}

#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<OffsetRead, OffsetStoreError>")]
pub struct ReadOffset {
    pub queue: MessageQueue,
    pub from: ReadFrom,
}

/// Persists one queue's cached offset; `acknowledged` waits for the broker's answer (graceful
/// handoff) instead of RocketMQ's oneway update.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<(), OffsetStoreError>")]
pub struct PersistQueue {
    pub queue: MessageQueue,
    pub acknowledged: bool,
}

/// Forgets a queue after it was released.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct RemoveQueue {
    pub queue: MessageQueue,
}

#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "OffsetStoreSnapshot")]
pub struct Observe;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetStoreSnapshot {
    pub offsets: BTreeMap<MessageQueue, u64>,
    pub persist_rounds: u64,
    pub persist_failures: u64,
    pub lowered: u64,
}

pub struct OffsetStore {
    group: String,
    backend: Rc<std::cell::RefCell<OffsetBackend>>,
    offsets: BTreeMap<MessageQueue, u64>,
    snapshot: OffsetStoreSnapshot,
}

impl OffsetStore {
    pub fn new(group: impl Into<String>, backend: OffsetBackend) -> Self {
        OffsetStore {
            group: group.into(),
            backend: Rc::new(std::cell::RefCell::new(backend)),
            offsets: BTreeMap::new(),
            snapshot: OffsetStoreSnapshot::default(),
        }
    }

    fn key(&self, queue: &MessageQueue) -> OffsetKey {
        OffsetKey::new(queue.topic.clone(), self.group.clone())
    }

    /// Stores one offset in the backend. Local writes are synchronous; broker writes are not.
    fn write_backend(
        &self,
        queue: MessageQueue,
        offset: u64,
        acknowledged: bool,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), OffsetStoreError>>>> {
        let key = self.key(&queue);
        let group = self.group.clone();
        let backend = self.backend.clone();
        let mut guard = backend.borrow_mut();
        match &mut *guard {
            OffsetBackend::Broker(broker) => {
                let call = broker.update_offset(&group, &queue, offset, acknowledged);
                Box::pin(async move {
                    call.await.map_err(|source| OffsetStoreError::Broker {
                        queue: queue.to_string(),
                        source,
                    })
                })
            }
            OffsetBackend::Local(table) => {
                let result = table
                    .commit(&key, queue.queue_id, offset)
                    .map(|_| ())
                    .map_err(|source| OffsetStoreError::Local {
                        queue: queue.to_string(),
                        source,
                    });
                Box::pin(std::future::ready(result))
            }
        }
    }
}

impl Actor for OffsetStore {
    type Context = Context<Self>;
}

impl Handler<UpdateOffset> for OffsetStore {
    type Result = ();

    fn handle(&mut self, msg: UpdateOffset, _: &mut Self::Context) {
        let group = &self.group;
        match self.offsets.get_mut(&msg.queue) {
            None => {
                self.offsets.insert(msg.queue, msg.offset);
            }
            Some(current) if msg.offset >= *current => *current = msg.offset,
            Some(current) if msg.increase_only => {
                tracing::debug!(%group, queue = %msg.queue, offset = msg.offset, current = *current,
                    "ignored lower offset for an increase-only update");
            }
            Some(current) => {
                tracing::info!(%group, queue = %msg.queue, offset = msg.offset, previous = *current,
                    "offset lowered by an explicit update");
                self.snapshot.lowered += 1;
                *current = msg.offset;
            }
        }
    }
}

impl Handler<ReadOffset> for OffsetStore {
    type Result = ResponseActFuture<Self, Result<OffsetRead, OffsetStoreError>>;

    fn handle(&mut self, msg: ReadOffset, _: &mut Self::Context) -> Self::Result {
        if msg.from != ReadFrom::Store {
            if let Some(offset) = self.offsets.get(&msg.queue) {
                return Box::pin(fut::ready(Ok(OffsetRead::Found(*offset))));
            }
            if msg.from == ReadFrom::Memory {
                return Box::pin(fut::ready(Ok(OffsetRead::NotFound)));
            }
        }
        let queue = msg.queue;
        let read: std::pin::Pin<Box<dyn std::future::Future<Output = _>>> =
            match &*self.backend.borrow() {
                OffsetBackend::Broker(broker) => {
                    let call = broker.query_offset(&self.group, &queue);
                    let name = queue.to_string();
                    Box::pin(async move {
                        call.await.map_err(|source| OffsetStoreError::Broker {
                            queue: name,
                            source,
                        })
                    })
                }
                OffsetBackend::Local(table) => {
                    let result = table
                        .query(&self.key(&queue), queue.queue_id)
                        .map_err(|source| OffsetStoreError::Local {
                            queue: queue.to_string(),
                            source,
                        });
                    Box::pin(std::future::ready(result))
                }
            };
        Box::pin(read.into_actor(self).map(move |result, act, _| {
            let stored = result?;
            Ok(match stored {
                Some(offset) => {
                    // A read from the store replaces the cache, as RocketMQ's READ_FROM_STORE does.
                    act.offsets.insert(queue, offset);
                    OffsetRead::Found(offset)
                }
                None => OffsetRead::NotFound,
            })
        }))
    }
}

impl Handler<PersistQueue> for OffsetStore {
    type Result = ResponseFuture<Result<(), OffsetStoreError>>;

    fn handle(&mut self, msg: PersistQueue, _: &mut Self::Context) -> Self::Result {
        let Some(offset) = self.offsets.get(&msg.queue).copied() else {
            return Box::pin(std::future::ready(Ok(())));
        };
        let write = self.write_backend(msg.queue, offset, msg.acknowledged);
        let flush = self.flush_local();
        Box::pin(async move {
            write.await?;
            flush
        })
    }
}

impl OffsetStore {
    fn flush_local(&self) -> Result<(), OffsetStoreError> {
        if let OffsetBackend::Local(table) = &mut *self.backend.borrow_mut() {
            table.flush().map_err(|source| OffsetStoreError::Local {
                queue: format!("group {}", self.group),
                source,
            })?;
        }
        Ok(())
    }
}

impl Handler<PersistNow> for OffsetStore {
    type Result = ResponseActFuture<Self, Result<(), String>>;

    fn handle(&mut self, _: PersistNow, _: &mut Self::Context) -> Self::Result {
        let acknowledged = matches!(&*self.backend.borrow(), OffsetBackend::Local(_));
        let writes: Vec<_> = self
            .offsets
            .iter()
            .map(|(queue, offset)| self.write_backend(queue.clone(), *offset, acknowledged))
            .collect();
        let flush = self.flush_local();
        Box::pin(
            async move {
                let mut failures = Vec::new();
                for write in writes {
                    if let Err(error) = write.await {
                        failures.push(error.to_string());
                    }
                }
                if let Err(error) = flush {
                    failures.push(error.to_string());
                }
                failures
            }
            .into_actor(self)
            .map(|failures, act, _| {
                act.snapshot.persist_rounds += 1;
                if failures.is_empty() {
                    Ok(())
                } else {
                    act.snapshot.persist_failures += 1;
                    Err(failures.join("; "))
                }
            }),
        )
    }
}

impl Handler<RemoveQueue> for OffsetStore {
    type Result = ();

    fn handle(&mut self, msg: RemoveQueue, _: &mut Self::Context) {
        self.offsets.remove(&msg.queue);
    }
}

impl Handler<Observe> for OffsetStore {
    type Result = MessageResult<Observe>;

    fn handle(&mut self, _: Observe, _: &mut Self::Context) -> Self::Result {
        let mut snapshot = self.snapshot.clone();
        snapshot.offsets = self.offsets.clone();
        MessageResult(snapshot)
    }
}
