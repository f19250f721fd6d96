//! The OffsetStore: a consumer instance's offset cache and its backend.
//!
//! Clustering consumers keep offsets on the broker; broadcasting consumers keep them in a local
//! sled tree. A read error is never turned into "not found": that is how RocketMQ rolled offsets
//! back (`docs/offset-lifecycle.md` §2, RocketMQ #2708), so callers get the two apart and skip
//! the queue on error.

use crate::broker_api::{BrokerApi, BrokerError, OffsetUpdate, QueryOffsetRequest};
use crate::logic::queue::MessageQueue;
use crate::persister::PersistNow;
use crate::LocalFuture;
use actix::prelude::*;
use skiff_storage::offset_table::{OffsetKey, OffsetTable, OffsetTableError};
use std::collections::BTreeMap;
use std::error::Error;
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
    #[error("broker offset request for {queue} failed")]
    Broker {
        /// The queue, as `topic:broker:queue_id`.
        queue: String,
        #[source]
        source: BrokerError,
    },
    #[error("local offset store failed for {queue}")]
    Local {
        /// The queue, as `topic:broker:queue_id`.
        queue: String,
        #[source]
        source: OffsetTableError,
    },
    #[error("flushing the local offset store of group {group} failed")]
    LocalFlush {
        group: String,
        #[source]
        source: OffsetTableError,
    },
    /// A persist of every cached offset in which `failed` writes failed (each one is logged);
    /// the first failure is the source.
    #[error("{failed} offset writes of group {group} failed")]
    Persist {
        group: String,
        failed: usize,
        #[source]
        first: Box<OffsetStoreError>,
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
/// explicit resets pass `false`, and a lowering is logged (`docs/architecture.md` rule 3).
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

/// Persists one queue's cached offset; [`OffsetUpdate::Acknowledged`] waits for the broker's
/// answer (graceful handoff) instead of RocketMQ's oneway update.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<(), OffsetStoreError>")]
pub struct PersistQueue {
    pub queue: MessageQueue,
    pub update: OffsetUpdate,
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
    backend: OffsetBackend,
    offsets: BTreeMap<MessageQueue, u64>,
    snapshot: OffsetStoreSnapshot,
}

impl OffsetStore {
    pub fn new(group: impl Into<String>, backend: OffsetBackend) -> Self {
        OffsetStore {
            group: group.into(),
            backend,
            offsets: BTreeMap::new(),
            snapshot: OffsetStoreSnapshot::default(),
        }
    }

    fn key(&self, queue: &MessageQueue) -> OffsetKey {
        OffsetKey::new(queue.topic.clone(), self.group.clone())
    }

    /// Stores one offset in the backend. Local writes are synchronous; broker writes are not.
    fn write_backend(
        &mut self,
        queue: MessageQueue,
        offset: u64,
        update: OffsetUpdate,
    ) -> LocalFuture<Result<(), OffsetStoreError>> {
        let key = self.key(&queue);
        match &mut self.backend {
            OffsetBackend::Broker(broker) => {
                let call = broker.update_offset(self.group.clone(), queue.clone(), offset, update);
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

    /// Reads one stored offset from the backend, past the cache.
    fn read_backend(
        &self,
        queue: &MessageQueue,
    ) -> LocalFuture<Result<Option<u64>, OffsetStoreError>> {
        match &self.backend {
            OffsetBackend::Broker(broker) => {
                // Without the zero rule, so ConsumeFromWhere decides for a new group.
                let call = broker.query_offset(QueryOffsetRequest {
                    group: self.group.clone(),
                    queue: queue.clone(),
                    set_zero_if_not_found: false,
                });
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
                    .query(&self.key(queue), queue.queue_id)
                    .map_err(|source| OffsetStoreError::Local {
                        queue: queue.to_string(),
                        source,
                    });
                Box::pin(std::future::ready(result))
            }
        }
    }

    /// Makes a local table's writes durable; the broker backend has nothing to flush here.
    fn flush_local(&mut self) -> Result<(), OffsetStoreError> {
        if let OffsetBackend::Local(table) = &mut self.backend {
            table
                .flush()
                .map_err(|source| OffsetStoreError::LocalFlush {
                    group: self.group.clone(),
                    source,
                })?;
        }
        Ok(())
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
        let read = self.read_backend(&queue);
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
        let write = self.write_backend(msg.queue, offset, msg.update);
        let flush = self.flush_local();
        Box::pin(async move {
            write.await?;
            flush
        })
    }
}

impl Handler<PersistNow<OffsetStoreError>> for OffsetStore {
    type Result = ResponseActFuture<Self, Result<(), OffsetStoreError>>;

    fn handle(&mut self, _: PersistNow<OffsetStoreError>, _: &mut Self::Context) -> Self::Result {
        let cached: Vec<(MessageQueue, u64)> = self
            .offsets
            .iter()
            .map(|(queue, offset)| (queue.clone(), *offset))
            .collect();
        let writes: Vec<_> = cached
            .into_iter()
            .map(|(queue, offset)| self.write_backend(queue, offset, OffsetUpdate::Oneway))
            .collect();
        let flush = self.flush_local();
        let group = self.group.clone();
        Box::pin(
            async move {
                let mut failures = Vec::new();
                for write in writes {
                    if let Err(error) = write.await {
                        failures.push(error);
                    }
                }
                if let Err(error) = flush {
                    failures.push(error);
                }
                failures
            }
            .into_actor(self)
            .map(move |failures, act, _| {
                act.snapshot.persist_rounds += 1;
                let failed = failures.len();
                let mut failures = failures.into_iter();
                let Some(first) = failures.next() else {
                    return Ok(());
                };
                act.snapshot.persist_failures += 1;
                for error in failures {
                    tracing::warn!(%group, error = &error as &dyn Error, "offset write failed");
                }
                Err(OffsetStoreError::Persist {
                    group,
                    failed,
                    first: Box::new(first),
                })
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
