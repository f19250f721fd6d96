//! The revival of popped messages nobody acknowledged in time: each round appends a copy of
//! every due message to the group's pop retry topic, flushes, and only then drops their
//! checkpoints.

use super::PopActor;
use crate::broker::message_store::{AppendMessages, FlushStore};
use crate::broker_api::BrokerError;
use crate::logic::pop::{revival_topic, POP_RETRY_QUEUE_NUMS};
use actix::prelude::*;
use skiff_storage::message::property::FIRST_POP_TIME;
use skiff_storage::message::{decode_record, with_properties, MessageToAppend};
use skiff_storage::pop_state::{CheckpointKey, CheckpointTimes};
use std::collections::BTreeMap;
use std::error::Error;

/// Revivals of one round; the rest wait for the next one.
const MAX_REVIVALS_PER_ROUND: usize = 4096;
/// How long a checkpoint whose revival failed is left before it is tried again.
const FAILED_REVIVAL_BACKOFF_MS: i64 = 10_000;

/// A revived copy on its way: the checkpoint it settles and the message to append.
type Revived = (CheckpointKey, CheckpointTimes, MessageToAppend);

impl PopActor {
    /// Revives every checkpoint whose message is visible again, in one round at a time: the
    /// copies are appended, the commit log is flushed once, and only then are the checkpoints
    /// removed, so a power cut can never keep the removal and lose the copy.
    pub(super) fn revive_due(&mut self, ctx: &mut Context<Self>) {
        if self.round_running {
            return;
        }
        let now = self.clock.now_ms();
        let due: Vec<(CheckpointKey, CheckpointTimes)> = self
            .held
            .visible_by(now)
            .map(|(queue, offset, times)| {
                let key = CheckpointKey {
                    group: queue.group.clone(),
                    topic: queue.topic.clone(),
                    queue_id: queue.queue_id,
                    queue_offset: offset,
                };
                (key, times)
            })
            .filter(|(key, _)| self.deferred.get(key).is_none_or(|until| *until <= now))
            .take(MAX_REVIVALS_PER_ROUND)
            .collect();
        let mut round = Vec::with_capacity(due.len());
        for (key, times) in due {
            match self.plan_revival(&key, times) {
                Ok(Some((copy, topic))) => round.push((key, times, copy, topic)),
                Ok(None) => {
                    // Retention deleted the message: there is nothing left to redeliver.
                    tracing::warn!(group = %key.group, topic = %key.topic, queue_id = key.queue_id, offset = key.queue_offset, "popped message no longer stored; its checkpoint is dropped");
                    self.snapshot.vanished += 1;
                    self.forget(&key, times);
                }
                Err(e) => {
                    // Set aside for a while, so it does not hold up the ones behind it.
                    self.snapshot.failed += 1;
                    self.deferred
                        .insert(key.clone(), now.saturating_add(FAILED_REVIVAL_BACKOFF_MS));
                    tracing::error!(group = %key.group, topic = %key.topic, queue_id = key.queue_id, offset = key.queue_offset, error = &e as &dyn Error, "revival of a popped message failed; retried later");
                }
            }
        }
        if round.is_empty() {
            return;
        }
        self.round_running = true;
        let store = self.store.clone();
        // One append per retry topic: a round usually revives into few topics, and one batch
        // costs one wait for durability (one fsync with the sync flush policy), not one each.
        // A copy whose batch failed goes alone next time, so one message the store refuses
        // cannot hold up the others of its topic.
        type Batches = BTreeMap<(String, Option<CheckpointKey>), Vec<Revived>>;
        let mut by_topic = Batches::new();
        for (key, times, copy, topic) in round {
            let alone = self.solo.contains(&key).then(|| key.clone());
            by_topic
                .entry((topic, alone))
                .or_default()
                .push((key, times, copy));
        }
        let work = async move {
            let mut appended = Vec::new();
            for ((topic, _), entries) in by_topic {
                let together = entries.len() > 1;
                let (keys, copies): (Vec<_>, Vec<_>) = entries
                    .into_iter()
                    .map(|(key, times, copy)| ((key, times), copy))
                    .unzip();
                let outcome = store
                    .send(AppendMessages {
                        messages: copies,
                        default_queue_nums: POP_RETRY_QUEUE_NUMS,
                    })
                    .await
                    .map_err(|source| BrokerError::Mailbox {
                        actor: "message store",
                        source,
                    })
                    .and_then(|r| r)
                    .map(|_| ())
                    .map_err(std::rc::Rc::new);
                for (key, times) in keys {
                    appended.push((key, times, topic.clone(), outcome.clone(), together));
                }
            }
            let flushed = store
                .send(FlushStore)
                .await
                .map_err(|source| BrokerError::Mailbox {
                    actor: "message store",
                    source,
                })
                .and_then(|r| r);
            (appended, flushed)
        };
        ctx.spawn(work.into_actor(self).map(|(appended, flushed), act, _| {
            act.round_running = false;
            if let Err(e) = &flushed {
                // The copies may not be durable: keep every checkpoint; the next round revives
                // those messages again rather than risk losing them.
                act.snapshot.failed += appended.len() as u64;
                tracing::error!(error = e as &dyn Error, "flush after revivals failed; their checkpoints are kept");
                return;
            }
            for (key, times, topic, outcome, together) in appended {
                match outcome {
                    Ok(_) => {
                        act.solo.remove(&key);
                        act.snapshot.revived += 1;
                        tracing::debug!(group = %key.group, topic = %key.topic, queue_id = key.queue_id, offset = key.queue_offset, retry_topic = %topic, "unacknowledged message revived");
                        act.forget(&key, times);
                    }
                    Err(e) => {
                        act.snapshot.failed += 1;
                        if together {
                            act.solo.insert(key.clone());
                        } else {
                            let until = act.clock.now_ms().saturating_add(FAILED_REVIVAL_BACKOFF_MS);
                            act.deferred.insert(key.clone(), until);
                        }
                        tracing::error!(group = %key.group, topic = %key.topic, queue_id = key.queue_id, offset = key.queue_offset, error = e.as_ref() as &dyn Error, "revival append failed; retried later");
                    }
                }
            }
        }));
    }

    /// The copy to append for a due checkpoint, and the retry topic it goes to; `None` when the
    /// message is no longer stored.
    fn plan_revival(
        &self,
        key: &CheckpointKey,
        times: CheckpointTimes,
    ) -> Result<Option<(MessageToAppend, String)>, BrokerError> {
        let read = self.reader.read(
            &key.topic,
            key.queue_id,
            key.queue_offset,
            1,
            u32::MAX,
            None,
        )?;
        if read.records.is_empty() {
            return Ok(None);
        }
        let (original, _) =
            decode_record(&read.records).map_err(|source| BrokerError::UnreadableMessage {
                topic: key.topic.clone(),
                queue_id: key.queue_id,
                queue_offset: key.queue_offset,
                source,
            })?;
        if original.queue_offset != key.queue_offset {
            return Ok(None);
        }
        let mut properties = original.properties.clone();
        if original.reconsume_times == 0 || original.property(FIRST_POP_TIME).is_none() {
            properties = with_properties(
                &properties,
                &[(FIRST_POP_TIME, &times.pop_time_ms.to_string())],
            );
        }
        let topic = revival_topic(&key.group, &key.topic);
        self.registry.ensure_topic(&topic, POP_RETRY_QUEUE_NUMS)?;
        let copy = MessageToAppend {
            topic: topic.clone(),
            queue_id: 0,
            reconsume_times: original.reconsume_times.saturating_add(1),
            properties,
            ..MessageToAppend::copy_of(&original)
        };
        Ok(Some((copy, topic)))
    }
}
