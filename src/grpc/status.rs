//! The one table from the broker's answers that are not results to gRPC `Code`s. Every RPC's
//! response carries a `Status{code, message}`; handlers never pick a code for a broker error
//! themselves. The codes are those the Apache proxy answers for the same refusal.

use skiff_actors::broker_api::BrokerError;
use skiff_actors::logic::lite::LiteRefusal;
use skiff_actors::logic::sends::IllegalSend;
use skiff_actors::refused::{NameKind, Refused};
use skiff_storage::error::AppendRejected;
use tracing::warn;

use super::pb::{self, Code};
use crate::error_text::error_chain;

pub fn ok() -> pb::Status {
    status(Code::Ok, "OK")
}

pub fn status(code: Code, message: impl Into<String>) -> pb::Status {
    pb::Status {
        code: code as i32,
        message: message.into(),
    }
}

/// The code of a typed refusal.
pub fn refusal_code(refused: &Refused) -> Code {
    match refused {
        Refused::TopicNotExist { .. } => Code::TopicNotFound,
        Refused::GroupNotExist { .. } | Refused::NoConsumer { .. } => Code::ConsumerGroupNotFound,
        Refused::SubscriptionNotExist { .. } | Refused::NothingSubscribed { .. } => {
            Code::BadRequest
        }
        Refused::SubscriptionParseFailed { .. } => Code::IllegalFilterExpression,
        Refused::MessageNotFound { .. } => Code::MessageNotFound,
        Refused::TopicNotWritable { .. }
        | Refused::NoWriteQueue { .. }
        | Refused::ModeForbidden { .. }
        | Refused::BrokerCursor { .. } => Code::Forbidden,
        Refused::IllegalQueue { .. } => Code::BadRequest,
        // The offsets of a gRPC acknowledgement come from its receipt handle: one outside the
        // queue is a handle this broker did not hand out.
        Refused::OffsetOutOfQueue { .. } | Refused::ReceiptExpired { .. } => {
            Code::InvalidReceiptHandle
        }
        Refused::IllegalSend(IllegalSend::TopicName { .. }) => Code::IllegalTopic,
        Refused::IllegalSend(IllegalSend::Forbidden { .. }) => Code::Forbidden,
        Refused::IllegalSend(
            IllegalSend::BatchWithTransaction | IllegalSend::BatchToRetryTopic { .. },
        ) => Code::BadRequest,
        Refused::InvalidName {
            kind: NameKind::Topic,
            ..
        } => Code::IllegalTopic,
        Refused::InvalidName {
            kind: NameKind::Group,
            ..
        } => Code::IllegalConsumerGroup,
        Refused::DiskFull { .. } => Code::InternalServerError,
        Refused::Rejected(AppendRejected::MessageTooLarge { .. }) => Code::MessageBodyTooLarge,
        Refused::Rejected(AppendRejected::PropertiesTooLarge { .. }) => {
            Code::MessagePropertiesTooLarge
        }
        Refused::Rejected(AppendRejected::InvalidTopic { .. }) => Code::IllegalTopic,
        Refused::IllegalTimer(_) | Refused::InvalidDelay(_) => Code::IllegalDeliveryTime,
        Refused::InvalidReceipt(_) => Code::InvalidReceiptHandle,
        Refused::EndTransaction { .. } => Code::InvalidTransactionId,
        Refused::NoTransactionChecker { .. } | Refused::MissingProperty { .. } => Code::BadRequest,
        Refused::RequestReplyNeedsNetwork => Code::NotImplemented,
        // Apache's proxy maps none of the broker's recall answers: each reaches the client as
        // INTERNAL_SERVER_ERROR, with the broker's remark.
        Refused::Recall(_) => Code::InternalServerError,
        Refused::Lite(refusal) => match refusal {
            LiteRefusal::BlankName | LiteRefusal::NameTooLong | LiteRefusal::NameCharacters => {
                Code::IllegalLiteTopic
            }
            LiteRefusal::TypeMismatch { .. } => Code::MessagePropertyConflictWithType,
            LiteRefusal::GroupNotFound { .. } | LiteRefusal::NotALiteGroup { .. } => {
                Code::IllegalConsumerGroup
            }
            LiteRefusal::BindTopicMismatch { .. } => Code::IllegalTopic,
            LiteRefusal::SubscriptionQuota { .. } => Code::LiteSubscriptionQuotaExceeded,
        },
    }
}

/// The status for any broker error: a refusal by its code, the rest INTERNAL_SERVER_ERROR with
/// the whole cause chain (all a client learns of the cause) and a log line.
pub fn broker_status(e: &BrokerError) -> pb::Status {
    match e {
        BrokerError::Refused(refused) => status(refusal_code(refused), refused.to_string()),
        BrokerError::Store(store) if store.is_out_of_descriptors() => status(
            Code::TooManyRequests,
            format!(
                "the broker is out of file descriptors, nothing was stored; retry: {}",
                error_chain(store)
            ),
        ),
        BrokerError::Store(store) if store.is_disk_full() => status(
            Code::InternalServerError,
            format!("the broker's disk is full: {}", error_chain(store)),
        ),
        other => {
            let chain = error_chain(other);
            warn!(error = %chain, "broker call failed");
            status(Code::InternalServerError, chain)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_get_the_proxys_codes() {
        let topic = Refused::TopicNotExist { topic: "T".into() };
        assert_eq!(refusal_code(&topic), Code::TopicNotFound);
        let answer = broker_status(&BrokerError::Refused(topic));
        assert_eq!(answer.code, Code::TopicNotFound as i32);
        assert!(answer.message.contains('T'), "{}", answer.message);
        assert_eq!(
            refusal_code(&Refused::Rejected(AppendRejected::MessageTooLarge {
                size: 5,
                limit: 4
            })),
            Code::MessageBodyTooLarge
        );
    }
}
