//! A queue's offsets in the store: GET_MIN_OFFSET, GET_MAX_OFFSET and
//! SEARCH_OFFSET_BY_TIMESTAMP, each answered `{offset}`.

use skiff_actors::broker_api::BrokerError;
use skiff_actors::logic::queue::MessageQueue;
use skiff_storage::store::BoundaryType as StoreBoundary;

use super::{answered_offset, offset_header, RemoteBroker};
use crate::remoting::codes::request as rc;
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{
    CustomHeader, GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader, SearchOffsetRequestHeader,
};
use crate::remoting::wire::clamp_i32;

impl RemoteBroker {
    pub(super) async fn min_offset(&self, queue: MessageQueue) -> Result<u64, BrokerError> {
        let header = GetMinOffsetRequestHeader {
            topic: queue.topic.clone(),
            queue_id: clamp_i32(queue.queue_id),
        };
        let request =
            RemotingCommand::new_request(rc::GET_MIN_OFFSET).with_ext_fields(header.to_ext());
        self.offset_call(&queue, request).await
    }

    pub(super) async fn max_offset(&self, queue: MessageQueue) -> Result<u64, BrokerError> {
        let header = GetMaxOffsetRequestHeader {
            topic: queue.topic.clone(),
            queue_id: clamp_i32(queue.queue_id),
            committed: true,
        };
        let request =
            RemotingCommand::new_request(rc::GET_MAX_OFFSET).with_ext_fields(header.to_ext());
        self.offset_call(&queue, request).await
    }

    pub(super) async fn search_offset(
        &self,
        queue: MessageQueue,
        timestamp_ms: i64,
        boundary: StoreBoundary,
    ) -> Result<u64, BrokerError> {
        let header = SearchOffsetRequestHeader {
            topic: queue.topic.clone(),
            queue_id: clamp_i32(queue.queue_id),
            timestamp: timestamp_ms,
            boundary_type: boundary.into(),
        };
        let request = RemotingCommand::new_request(rc::SEARCH_OFFSET_BY_TIMESTAMP)
            .with_ext_fields(header.to_ext());
        self.offset_call(&queue, request).await
    }

    /// GET_MIN_OFFSET / GET_MAX_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP: `{offset}` answers.
    async fn offset_call(
        &self,
        queue: &MessageQueue,
        request: RemotingCommand,
    ) -> Result<u64, BrokerError> {
        let addr = self.queue_addr(&queue.topic, &queue.broker_name).await?;
        let response = self.invoke_ok(&addr, request).await?;
        let offset = offset_header(&addr, &response)?;
        answered_offset(&addr, "offset answer", "offset", offset)
    }
}
