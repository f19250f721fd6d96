//! Finding stored messages: VIEW_MESSAGE_BY_ID (33), by the commit-log offset inside an offset
//! message id (`docs/wire-protocol.md` §6.5), and QUERY_MESSAGE (12), by key or unique key
//! through the key index (§8).

use super::{broker_failure, success, Failure, Outcome, Processor};
use crate::remoting::codes::response as code;
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{
    CustomHeader, QueryMessageRequestHeader, QueryMessageResponseHeader, ViewMessageRequestHeader,
};

/// Ext field (outside the header) marking a QUERY_MESSAGE by unique key (Java's
/// `MixAll.UNIQUE_MSG_QUERY_FLAG`).
pub(super) const UNIQUE_KEY_QUERY: &str = "_UNIQUE_KEY_QUERY";
/// `maxNum` of a query by unique key (Java's `defaultQueryMaxNum`).
const DEFAULT_QUERY_MAX_NUM: usize = 32;
/// Most records one query answers (Java's `maxMsgsNumBatch`).
const MAX_QUERY_NUM: usize = 64;

impl Processor {
    /// QUERY_MESSAGE (12), as Java's `QueryMessageProcessor.queryMessage` answers it: the stored
    /// records of the topic indexed under the key with a store timestamp in
    /// `[beginTimestamp, endTimestamp]`, back to back in the body; QUERY_NOT_FOUND when none.
    /// By unique key (`_UNIQUE_KEY_QUERY` = `true`) `maxNum` becomes 32.
    pub(super) async fn query_message(&self, request: &RemotingCommand) -> Outcome {
        let header = QueryMessageRequestHeader::from_command(request)?;
        let by_unique_key = request
            .ext_fields
            .get(UNIQUE_KEY_QUERY)
            .is_some_and(|v| v == "true");
        let max = if by_unique_key {
            DEFAULT_QUERY_MAX_NUM
        } else {
            usize::try_from(header.max_num).unwrap_or(0)
        }
        .min(MAX_QUERY_NUM);
        let found = self
            .broker
            .query_by_key(
                &header.topic,
                &header.key,
                header.begin_timestamp,
                header.end_timestamp,
                max,
            )
            .await
            .map_err(broker_failure)?;
        let response_header = QueryMessageResponseHeader {
            index_last_update_timestamp: self.broker.now_ms(),
            index_last_update_phyoffset: i64::try_from(found.indexed_to).unwrap_or(i64::MAX),
        }
        .to_ext();
        if found.records.is_empty() {
            return Ok(RemotingCommand::new_response(
                code::QUERY_NOT_FOUND,
                Some("can not find message, maybe time range not correct".to_string()),
            )
            .with_ext_fields(response_header));
        }
        let body: Vec<u8> = found.records.concat();
        Ok(success().with_ext_fields(response_header).with_body(body))
    }

    /// VIEW_MESSAGE_BY_ID (33): the stored record at the offset, as its bytes (the body a client
    /// decodes with `MessageDecoder.decode`); SYSTEM_ERROR with Java's remark when no record
    /// starts there.
    pub(super) fn view_message(&self, request: &RemotingCommand) -> Outcome {
        let header = ViewMessageRequestHeader::from_command(request)?;
        let not_found = || {
            Failure::system(format!(
                "can not find message by the offset, {}",
                header.offset
            ))
        };
        let Ok(offset) = u64::try_from(header.offset) else {
            return Err(not_found());
        };
        let raw = self
            .broker
            .reader()
            .raw_record_at(offset)
            .map_err(|e| broker_failure(e.into()))?;
        match raw {
            Some(record) => Ok(success().with_body(record)),
            None => Err(not_found()),
        }
    }
}
