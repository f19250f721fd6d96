//! PULL_MESSAGE on the broker handle (`docs/wire-protocol.md` §4.1): the pending admin reset,
//! the tag or SQL92 filter, the store read, the piggybacked commit and the long-poll hold.

use crate::broker::consumer_offsets::TakePendingReset;
use crate::broker::handle::{mailbox, BrokerHandle};
use crate::broker::long_poll::ParkPull;
use crate::broker::membership::LookupSubscription;
use crate::broker_api::{
    BrokerError, InvalidSelector, OffsetMoved, PullRequest, PullResponse, PullStatus,
};
use crate::logic::filter::Subscription;
use crate::logic::pull::pull_status;
use crate::logic::queue::GroupQueue;
use crate::refused::Refused;
use bytes::Bytes;
use std::error::Error;

/// Which run of a pull this is: a pull that found nothing new may be parked and then runs once
/// more. Only the first run applies the piggybacked commit: it is applied by then, and while the
/// pull was parked the consumer may have committed further, which a second commit would undo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arrival {
    First,
    Replay,
}

impl BrokerHandle {
    /// PULL_MESSAGE (`docs/wire-protocol.md` §4.1). On the request's first arrival the
    /// piggybacked commit (`commit_offset`, FLAG_COMMIT_OFFSET) is applied, and a pull that
    /// found nothing new is parked when it asks for a suspend time; a parked pull re-runs once,
    /// without the commit, when a message arrives or its suspend time passes (RocketMQ's
    /// `brokerAllowSuspend`, true on the first arrival only).
    pub async fn pull(&self, request: PullRequest) -> Result<PullResponse, BrokerError> {
        let first = self.pull_once(&request, Arrival::First).await?;
        self.record_pull_offset(&request, &first);
        let Some(suspend) = request.suspend_timeout else {
            return Ok(first);
        };
        if !matches!(first.status, PullStatus::NoNewMessage(_)) {
            return Ok(first);
        }
        let hold = if self.inner.config.long_polling {
            suspend
        } else {
            self.inner.config.short_polling
        };
        let woken = self
            .inner
            .addrs
            .long_poll
            .send(ParkPull {
                topic: request.topic.clone(),
                queue_id: request.queue_id,
                offset: request.queue_offset,
            })
            .await
            .map_err(mailbox("long poll"))?;
        tracing::trace!(group = %request.group, topic = %request.topic, queue_id = request.queue_id, offset = request.queue_offset, "pull parked");
        // Woken, timed out, or the long-poll actor went away: all end in the one re-run.
        let _ = tokio::time::timeout(hold, woken).await;
        let replay = self.pull_once(&request, Arrival::Replay).await?;
        self.record_pull_offset(&request, &replay);
        Ok(replay)
    }

    fn record_pull_offset(&self, request: &PullRequest, response: &PullResponse) {
        self.inner.pull_offsets.borrow_mut().insert(
            GroupQueue::new(&request.group, &request.topic, request.queue_id),
            response.next_begin_offset,
        );
    }

    async fn pull_once(
        &self,
        request: &PullRequest,
        arrival: Arrival,
    ) -> Result<PullResponse, BrokerError> {
        let reader = &self.inner.reader;
        let slot = GroupQueue::new(&request.group, &request.topic, request.queue_id);
        let pending = self
            .inner
            .addrs
            .offsets
            .send(TakePendingReset { slot: slot.clone() })
            .await
            .map_err(mailbox("consumer offsets"))?;
        if let Some(reset) = pending {
            tracing::info!(group = %request.group, topic = %request.topic, queue_id = request.queue_id, offset = reset, "pull answers a pending admin reset");
            return Ok(PullResponse {
                status: PullStatus::OffsetMoved(OffsetMoved::PendingReset),
                next_begin_offset: reset,
                min_offset: reader.min_offset(&request.topic, request.queue_id),
                max_offset: reader.max_offset(&request.topic, request.queue_id),
                records: Bytes::new(),
            });
        }
        let subscription = self.subscription_for(request).await?;
        let filters = subscription.store_filters();
        let max_messages = request
            .max_messages
            .clamp(1, self.inner.config.max_pull_messages.max(1));
        let read = reader.read_filtered(
            &request.topic,
            request.queue_id,
            request.queue_offset,
            max_messages,
            self.inner.config.max_pull_bytes,
            filters.tag_codes(),
            filters.properties(),
        )?;
        let offset = request.queue_offset;
        let (status, next_begin_offset) = pull_status(
            read.status,
            offset,
            read.min_offset,
            read.max_offset,
            read.next_begin_offset,
        );
        if status == PullStatus::Found {
            // The store counted what it read; walking the records again cost a pull 8%.
            self.inner.metrics.record_pulled(
                &request.group,
                &request.topic,
                request.queue_id,
                u64::from(read.message_count),
            );
        }
        if let PullStatus::OffsetMoved(reason) = status {
            tracing::info!(group = %request.group, topic = %request.topic, queue_id = request.queue_id, offset, next = next_begin_offset, ?reason, "pull offset corrected");
        }
        if arrival == Arrival::First {
            if let Some(commit_offset) = request.commit_offset {
                // The pull itself succeeded; a failed piggybacked commit is repaired by the
                // consumer's next one, so it is reported, not returned.
                if let Err(e) = self
                    .commit(
                        &request.group,
                        &request.topic,
                        request.queue_id,
                        commit_offset,
                    )
                    .await
                {
                    tracing::error!(group = %request.group, topic = %request.topic, queue_id = request.queue_id, offset = commit_offset, error = &e as &dyn Error, "piggybacked commit failed");
                }
            }
        }
        Ok(PullResponse {
            status,
            next_begin_offset,
            min_offset: read.min_offset,
            max_offset: read.max_offset,
            records: if status == PullStatus::Found {
                read.records
            } else {
                Bytes::new()
            },
        })
    }

    /// The pull's filter: the request's own subscription (FLAG_SUBSCRIPTION), else the one the
    /// group registered by heartbeat; neither is SUBSCRIPTION_NOT_EXIST, and a SQL92 expression
    /// that does not parse is SUBSCRIPTION_PARSE_FAILED.
    async fn subscription_for(&self, request: &PullRequest) -> Result<Subscription, BrokerError> {
        let (expression_type, expression) = match &request.subscription {
            Some(expression) => (request.expression_type, expression.clone()),
            None => self
                .inner
                .addrs
                .membership
                .send(LookupSubscription {
                    group: request.group.clone(),
                    topic: request.topic.clone(),
                })
                .await
                .map_err(mailbox("membership"))?
                .map(|entry| (entry.expression_type, entry.expression))
                .ok_or_else(|| {
                    BrokerError::Refused(Refused::SubscriptionNotExist {
                        group: request.group.clone(),
                        topic: request.topic.clone(),
                    })
                })?,
        };
        Subscription::new(request.topic.clone(), expression_type, &expression, 0).map_err(|error| {
            tracing::warn!(group = %request.group, topic = %request.topic, %expression, %error, "pull refused: sql92 subscription does not parse");
            BrokerError::Refused(Refused::SubscriptionParseFailed {
                group: request.group.clone(),
                topic: request.topic.clone(),
                source: Box::new(InvalidSelector { expression, error }),
            })
        })
    }
}
