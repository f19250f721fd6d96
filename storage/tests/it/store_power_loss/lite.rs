//! Lite queues in the power-loss runs that ask for them: whole `%LMQ%` queues appended to, let go
//! of from memory and deleted as expired lite topics are (`MessageStore::delete_queues`). After
//! each cut a lite queue serves what it was acknowledged since its last deletion (at least what
//! the policy made durable), and never a message from before a deletion that was answered.

use super::*;
use std::collections::HashSet;

/// The lite queues (queue 0 of each topic).
const LITE_QUEUES: [&str; 3] = ["%LMQ%$P$a", "%LMQ%$P$b", "%LMQ%$P$c"];

#[derive(Default)]
struct LiteQueue {
    /// Acknowledged since the queue's last deletion, by queue offset.
    acked: BTreeMap<u64, Acked>,
    /// Ids stored before an answered deletion: never served again.
    deleted: HashSet<u64>,
    /// A deletion was cut short: the queue may be whole or gone.
    deleting: bool,
}

pub(super) struct LiteQueues {
    rng: StdRng,
    queues: Vec<LiteQueue>,
}

impl LiteQueues {
    pub(super) fn new(seed: u64) -> LiteQueues {
        LiteQueues {
            rng: StdRng::seed_from_u64(seed ^ 0x11e0_11e0_11e0_11e0),
            queues: LITE_QUEUES.iter().map(|_| LiteQueue::default()).collect(),
        }
    }
}

impl Run {
    /// In a run with lite queues, now and then an operation on one of them in place of the
    /// run's own: `None` when it is the run's turn, else whether the store is still usable.
    pub(super) fn lite_operation(
        &mut self,
        store: &mut MessageStore,
        index: &mut KeyIndex,
    ) -> Option<bool> {
        let lite = self.lite.as_mut()?;
        if !lite.rng.gen_bool(0.25) {
            return None;
        }
        let q = lite.rng.gen_range(0..LITE_QUEUES.len());
        Some(if lite.rng.gen_bool(0.75) {
            self.append_lite(store, index, q)
        } else {
            self.delete_lite(store, q)
        })
    }

    fn append_lite(&mut self, store: &mut MessageStore, index: &mut KeyIndex, q: usize) -> bool {
        let Some(lite) = self.lite.as_mut() else {
            return true;
        };
        let id = self.next_id;
        self.next_id += 1;
        let len = lite.rng.gen_range(8..300);
        let mut body: Vec<u8> = (0..len).map(|_| lite.rng.gen()).collect();
        body[..8].copy_from_slice(&id.to_be_bytes());
        self.clock
            .fetch_add(lite.rng.gen_range(1..50), Ordering::Relaxed);
        self.sent.insert(
            id,
            Sent {
                queue_id: 0,
                body: body.clone(),
            },
        );
        let batch = [MessageToAppend {
            properties: encode_properties(&[("KEYS", &key_of(id))]),
            ..message(LITE_QUEUES[q], 0, body)
        }];
        match store.append_batch(&batch) {
            Ok(Ok(results)) => {
                let _ = index.apply(&KeyBatch::of(&batch, &results), &store.reader());
                self.tally.acked += results.len() as u64;
                self.tally.lite_appended += results.len() as u64;
                for r in results {
                    lite.queues[q].acked.insert(
                        r.queue_offset,
                        Acked {
                            id,
                            physical_offset: r.physical_offset,
                            store_timestamp: r.store_timestamp,
                        },
                    );
                }
                true
            }
            Ok(Err(rejected)) => {
                check!(self, false, "a valid lite message was rejected: {rejected}");
                false
            }
            Err(e) => self.append_failed(e),
        }
    }

    fn delete_lite(&mut self, store: &mut MessageStore, q: usize) -> bool {
        let end = store.commit_log_end();
        let deleted = store.delete_queues(&[(LITE_QUEUES[q].to_owned(), 0)]);
        let Some(lite) = self.lite.as_mut() else {
            return true;
        };
        let queue = &mut lite.queues[q];
        match deleted {
            Ok(_) => {
                queue.deleted.extend(queue.acked.values().map(|a| a.id));
                queue.acked.clear();
                // The deletion checkpointed the log's end first.
                self.flushed_end = end;
                self.tally.lite_queues_deleted += 1;
                true
            }
            Err(_) => {
                queue.deleting = true;
                false
            }
        }
    }

    /// After a cut: each lite queue against what it was acknowledged; then the store's content
    /// is the truth.
    pub(super) fn verify_lite(&mut self, store: &MessageStore) {
        let Some(mut lite) = self.lite.take() else {
            return;
        };
        let reader = store.reader();
        let log_start = reader.commit_log_start();
        for (name, queue) in LITE_QUEUES.iter().zip(&mut lite.queues) {
            let (min, max) = (reader.min_offset(name, 0), reader.max_offset(name, 0));
            let mut served: BTreeMap<u64, Acked> = BTreeMap::new();
            let mut offset = min;
            while offset < max {
                let read = reader.read(name, 0, offset, 32, u32::MAX, None);
                check!(
                    self,
                    matches!(&read, Ok(r) if r.status == ReadStatus::Found),
                    "lite queue {name} offset {offset} of {min}..{max}: {read:?}"
                );
                let records = read.map(|r| decode_records(r.records));
                check!(
                    self,
                    matches!(records, Ok(Ok(_))),
                    "lite queue {name}: served records fail to decode"
                );
                for m in records.ok().and_then(Result::ok).unwrap_or_default() {
                    let id = u64::from_be_bytes(m.body[..8].try_into().unwrap_or_default());
                    check!(
                        self,
                        m.queue_offset == offset
                            && self.sent.get(&id).is_some_and(|s| s.body[..] == m.body[..]),
                        "lite queue {name} offset {offset}: served id {id} at {}, not what was sent",
                        m.queue_offset
                    );
                    check!(
                        self,
                        !queue.deleted.contains(&id),
                        "lite queue {name} offset {offset}: id {id} came back after its queue was deleted"
                    );
                    served.insert(
                        offset,
                        Acked {
                            id,
                            physical_offset: m.physical_offset,
                            store_timestamp: m.store_timestamp,
                        },
                    );
                    offset += 1;
                }
            }
            // A deletion cut short leaves the queue whole or gone.
            let gone = queue.deleting && served.is_empty();
            for (offset, acked) in &queue.acked {
                let must_survive = !gone
                    && match self.policy {
                        FlushPolicy::Sync => true,
                        FlushPolicy::Async => acked.physical_offset < self.flushed_end,
                    };
                match served.get(offset) {
                    Some(found) => check!(
                        self,
                        found.id == acked.id && found.physical_offset == acked.physical_offset,
                        "lite queue {name} offset {offset}: acknowledged id {} at {}, found id {} at {}",
                        acked.id,
                        acked.physical_offset,
                        found.id,
                        found.physical_offset
                    ),
                    None if acked.physical_offset < log_start => check!(
                        self,
                        acked.store_timestamp < self.retention_cutoff,
                        "lite queue {name} offset {offset}: deleted by retention although stored at {}",
                        acked.store_timestamp
                    ),
                    None => check!(
                        self,
                        !must_survive,
                        "lite queue {name} offset {offset}: acknowledged id {} lost (physical {}, flushed end {})",
                        acked.id,
                        acked.physical_offset,
                        self.flushed_end
                    ),
                }
            }
            if gone {
                queue.deleted.extend(queue.acked.values().map(|a| a.id));
            }
            queue.acked = served;
            queue.deleting = false;
        }
        self.lite = Some(lite);
    }
}
