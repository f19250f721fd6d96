//! [`BrokerHandle`]'s offset calls: a group's committed offsets (QUERY/UPDATE_CONSUMER_OFFSET,
//! with QUERY_CONSUMER_OFFSET's zero rule) and a queue's min, max and timestamp offsets.

use crate::broker::consumer_offsets::{CommitOffset, CommitResult, QueryOffset};
use crate::broker::handle::{mailbox, refuse_broker_cursor, BrokerHandle};
use crate::broker_api::{Answer, BrokerError, OffsetUpdate, QueryOffsetRequest};
use crate::logic::queue::{GroupQueue, MessageQueue};
use crate::refused::Refused;
use skiff_storage::store::BoundaryType;

impl Answer<()> for CommitResult {
    fn answer(self) -> Result<(), BrokerError> {
        Ok(())
    }
}

impl BrokerHandle {
    pub(super) async fn commit(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
        offset: u64,
    ) -> Result<CommitResult, BrokerError> {
        refuse_broker_cursor(group, topic)?;
        self.inner
            .addrs
            .offsets
            .send(CommitOffset {
                slot: GroupQueue::new(group, topic, queue_id),
                offset,
                now_ms: self.inner.clock.now_ms(),
            })
            .await
            .map_err(mailbox("consumer offsets"))?
    }

    /// QUERY_CONSUMER_OFFSET (`docs/wire-protocol.md` §4.2, `docs/offset-lifecycle.md` §1.A.6):
    /// the stored offset; when there is none and `set_zero_if_not_found`, 0 if the queue still
    /// starts at 0 and its first message is still stored (so a new group on a young queue starts
    /// from the beginning even with CONSUME_FROM_LAST_OFFSET); else `None` (QUERY_NOT_FOUND). A
    /// corrupt record is an error. skiff's embedded consumers ask without the zero rule, as the
    /// remote broker does, so ConsumeFromWhere decides for every new group of theirs; Java
    /// clients reach the rule over the wire.
    pub async fn query_offset(
        &self,
        request: QueryOffsetRequest,
    ) -> Result<Option<u64>, BrokerError> {
        let QueryOffsetRequest {
            group,
            queue,
            set_zero_if_not_found,
        } = request;
        let (topic, queue_id) = (queue.topic.as_str(), queue.queue_id);
        let stored = self
            .inner
            .addrs
            .offsets
            .send(QueryOffset {
                slot: GroupQueue::new(&group, topic, queue_id),
            })
            .await
            .map_err(mailbox("consumer offsets"))??;
        if stored.is_some() || !set_zero_if_not_found {
            return Ok(stored);
        }
        let reader = &self.inner.reader;
        if reader.min_offset(topic, queue_id) == 0
            && reader.store_timestamp_at(topic, queue_id, 0)?.is_some()
        {
            return Ok(Some(0));
        }
        Ok(None)
    }

    /// UPDATE_CONSUMER_OFFSET (`docs/wire-protocol.md` §4.3): unknown group or topic is an
    /// error; while an admin reset is pending the update is acknowledged and ignored.
    ///
    /// Waits for the commit whatever `update` says: the update is queued on the offsets actor's
    /// mailbox in order like any other, so [`OffsetUpdate::Oneway`] would only save one mailbox
    /// round trip and lose the error that the consumer's persister counts and logs.
    pub async fn update_offset(
        &self,
        group: impl Into<String>,
        queue: MessageQueue,
        offset: u64,
        _update: OffsetUpdate,
    ) -> Result<CommitResult, BrokerError> {
        let group = group.into();
        let (group, topic, queue_id) = (group.as_str(), queue.topic.as_str(), queue.queue_id);
        if self.inner.registry.group_or_create(group)?.is_none() {
            return Err(BrokerError::Refused(Refused::GroupNotExist {
                group: group.to_string(),
            }));
        }
        if self.inner.registry.topic(topic)?.is_none() {
            return Err(BrokerError::Refused(Refused::TopicNotExist {
                topic: topic.to_string(),
            }));
        }
        self.commit(group, topic, queue_id, offset).await
    }

    pub async fn min_offset(&self, queue: MessageQueue) -> Result<u64, BrokerError> {
        Ok(self.inner.reader.min_offset(&queue.topic, queue.queue_id))
    }

    pub async fn max_offset(&self, queue: MessageQueue) -> Result<u64, BrokerError> {
        Ok(self.inner.reader.max_offset(&queue.topic, queue.queue_id))
    }

    pub async fn search_offset(
        &self,
        queue: MessageQueue,
        timestamp_ms: i64,
        boundary: BoundaryType,
    ) -> Result<u64, BrokerError> {
        Ok(self.inner.reader.search_offset_by_timestamp(
            &queue.topic,
            queue.queue_id,
            timestamp_ms,
            boundary,
        )?)
    }
}
