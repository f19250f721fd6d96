//! SyncLiteSubscription, and the lite side of a receive: what only the gRPC door adds to the
//! broker's lite requests ([`skiff_actors::broker::lite`]): the request's fields read, and the
//! NotifyUnsubscribeLiteCommand an Exclusive group's evicted client gets on its Telemetry stream.

use std::collections::BTreeSet;

use skiff_actors::broker::LiteSync;
use skiff_actors::logic::lite::{StartFrom, SyncAction};

use super::{Caller, GrpcService};
use crate::acl::rules;
use crate::grpc::pb::{self, Code};
use crate::grpc::resource;
use crate::grpc::status::{ok, status};

/// The action a request names.
fn action_of(action: i32) -> Result<SyncAction, pb::Status> {
    match pb::LiteSubscriptionAction::try_from(action) {
        Ok(pb::LiteSubscriptionAction::PartialAdd) => Ok(SyncAction::PartialAdd),
        Ok(pb::LiteSubscriptionAction::PartialRemove) => Ok(SyncAction::PartialRemove),
        Ok(pb::LiteSubscriptionAction::CompleteAdd) => Ok(SyncAction::CompleteAdd),
        Ok(pb::LiteSubscriptionAction::CompleteRemove) => Ok(SyncAction::CompleteRemove),
        Err(_) => Err(status(
            Code::BadRequest,
            format!("lite subscription action {action} is unknown"),
        )),
    }
}

/// Where an `OffsetOption` starts; an option that names none is the proxy's internal error.
fn start_of(option: &pb::OffsetOption) -> Result<StartFrom, pb::Status> {
    use pb::offset_option::{OffsetType, Policy};
    match option.offset_type {
        Some(OffsetType::Policy(policy)) => match Policy::try_from(policy) {
            Ok(Policy::Last) => Ok(StartFrom::Last),
            Ok(Policy::Min) => Ok(StartFrom::Min),
            Ok(Policy::Max) => Ok(StartFrom::Max),
            Err(_) => Err(status(
                Code::InternalServerError,
                format!("offset option policy {policy} is unknown"),
            )),
        },
        Some(OffsetType::Offset(offset)) => Ok(StartFrom::Offset(offset)),
        Some(OffsetType::TailN(n)) => Ok(StartFrom::TailN(n)),
        Some(OffsetType::Timestamp(t)) => Ok(StartFrom::Timestamp(t)),
        None => Err(status(
            Code::InternalServerError,
            "the offset option names no offset",
        )),
    }
}

impl GrpcService {
    /// SyncLiteSubscription: the client's lite topics under a parent, for its group.
    pub(super) async fn sync_lite(
        &self,
        caller: Caller,
        request: pb::SyncLiteSubscriptionRequest,
    ) -> Result<pb::SyncLiteSubscriptionResponse, pb::Status> {
        let Some(topic) = request.topic.as_ref().filter(|t| !t.name.is_empty()) else {
            return Err(status(Code::IllegalTopic, "the request names no topic"));
        };
        let Some(group) = request.group.as_ref().filter(|g| !g.name.is_empty()) else {
            return Err(status(
                Code::IllegalConsumerGroup,
                "the request names no group",
            ));
        };
        let (topic, group) = (resource::stored(topic), resource::stored(group));
        // An empty set changes nothing anyone could be refused (the proxy skips the check).
        if !request.lite_topic_set.is_empty() {
            caller.authorize(rules::consume_checks(&topic, &group))?;
        }
        let action = action_of(request.action)?;
        let start = match (&request.offset_option, action) {
            (Some(option), SyncAction::PartialAdd) => Some(start_of(option)?),
            _ => None,
        };
        let sync = LiteSync {
            client_id: caller.client_id.clone(),
            group: group.clone(),
            topic,
            action,
            lites: request.lite_topic_set.into_iter().collect::<BTreeSet<_>>(),
            start,
        };
        let outcome = self
            .broker(move |broker| async move { broker.sync_lite_subscription(sync).await })
            .await?;
        for (client, lite) in outcome.evicted {
            self.clients.notify_unsubscribe_lite(&client, &lite);
        }
        Ok(pb::SyncLiteSubscriptionResponse { status: Some(ok()) })
    }
}
