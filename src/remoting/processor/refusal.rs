//! The one table from the broker's answers that are not results to RocketMQ remoting's codes and
//! remarks: [`refusal_answer`] for a typed [`Refused`], by the request it answers where Java's
//! processors word the same refusal differently, and [`broker_failure`] for every
//! [`BrokerError`]. Handlers never choose a code for a broker error themselves.

use skiff_actors::broker_api::BrokerError;
use skiff_actors::logic::names::NameProblem;
use skiff_actors::logic::recall::InvalidRecall;
use skiff_actors::logic::sends::IllegalSend;
use skiff_actors::logic::transaction::EndRefusal;
use skiff_actors::refused::Refused;
use skiff_storage::transaction_states::HalfState;
use tracing::warn;

use super::consume::sql92_parse_remark;
use super::{suggest_todo, Failure};
use crate::error_text::error_chain;
use crate::remoting::codes::{request as rc, response as code};

/// The answer for a broker error to any request.
pub(super) fn broker_failure(e: BrokerError) -> Failure {
    failure_answering(e, None)
}

/// The answer for a broker error to the request with code `request`.
pub(super) fn failure_to(request: i32) -> impl FnOnce(BrokerError) -> Failure {
    move |e| failure_answering(e, Some(request))
}

fn failure_answering(e: BrokerError, request: Option<i32>) -> Failure {
    match e {
        BrokerError::Refused(refused) => refusal_answer(&refused, request),
        BrokerError::Store(e) if e.is_out_of_descriptors() => Failure::new(
            code::SYSTEM_BUSY,
            format!(
                "broker busy: out of file descriptors, nothing was stored; retry ({})",
                error_chain(&e)
            ),
        ),
        BrokerError::Store(e) if e.is_disk_full() => Failure::new(
            code::SERVICE_NOT_AVAILABLE,
            format!(
                "service not available now: the broker's disk is full ({})",
                error_chain(&e)
            ),
        ),
        other => {
            // The whole chain: the remark is all a client learns of the cause.
            let chain = error_chain(&other);
            warn!(error = %chain, "broker call failed");
            Failure::system(chain)
        }
    }
}

/// The code and remark of `refused` in answer to `request` (any request when `None`).
pub(super) fn refusal_answer(refused: &Refused, request: Option<i32>) -> Failure {
    match (refused, request) {
        (Refused::TopicNotExist { topic }, Some(rc::GET_ROUTEINFO_BY_TOPIC)) => Failure::new(
            code::TOPIC_NOT_EXIST,
            format!(
                "No topic route info in name server for the topic: {topic}{}",
                suggest_todo()
            ),
        ),
        (Refused::TopicNotExist { topic }, Some(rc::UPDATE_CONSUMER_OFFSET)) => {
            Failure::new(code::TOPIC_NOT_EXIST, format!("Topic {topic} not exist!"))
        }
        (Refused::TopicNotExist { topic }, Some(rc::SET_MESSAGE_REQUEST_MODE)) => {
            Failure::new(code::TOPIC_NOT_EXIST, format!("topic[{topic}] not exist"))
        }
        (Refused::TopicNotExist { topic }, Some(rc::RECALL_MESSAGE)) => Failure::new(
            code::TOPIC_NOT_EXIST,
            format!("recall failed, the topic[{topic}] not exist"),
        ),
        (Refused::TopicNotExist { topic }, _) => Failure::new(
            code::TOPIC_NOT_EXIST,
            format!(
                "topic[{topic}] not exist, apply first please!{}",
                suggest_todo()
            ),
        ),
        (Refused::GroupNotExist { group }, Some(rc::UPDATE_CONSUMER_OFFSET)) => Failure::new(
            code::SUBSCRIPTION_GROUP_NOT_EXIST,
            format!("Group {group} not exist!"),
        ),
        (Refused::GroupNotExist { group }, Some(rc::CONSUMER_SEND_MSG_BACK)) => Failure::new(
            code::SUBSCRIPTION_GROUP_NOT_EXIST,
            format!("subscription group not exist, {group} {}", suggest_todo()),
        ),
        (Refused::GroupNotExist { .. }, Some(rc::SET_MESSAGE_REQUEST_MODE)) => Failure::new(
            code::SUBSCRIPTION_GROUP_NOT_EXIST,
            "subscription group does not exist",
        ),
        (Refused::GroupNotExist { group }, _) => Failure::new(
            code::SUBSCRIPTION_GROUP_NOT_EXIST,
            format!(
                "subscription group [{group}] does not exist, {}",
                suggest_todo()
            ),
        ),
        (Refused::SubscriptionParseFailed { source, .. }, _) => Failure::new(
            code::SUBSCRIPTION_PARSE_FAILED,
            sql92_parse_remark(&source.expression, &source.error),
        ),
        (Refused::SubscriptionNotExist { .. }, _) => Failure::new(
            code::SUBSCRIPTION_NOT_EXIST,
            format!("the consumer's subscription not exist{}", suggest_todo()),
        ),
        (Refused::NoConsumer { group }, _) => {
            Failure::system(format!("no consumer for this group, {group}"))
        }
        (Refused::MessageNotFound { physical_offset }, _) => {
            Failure::system(format!("look message by offset failed, {physical_offset}"))
        }
        (Refused::Recall(InvalidRecall::Disabled), _) => {
            Failure::new(code::NO_PERMISSION, InvalidRecall::Disabled.to_string())
        }
        (Refused::Recall(invalid), _) => Failure::new(code::ILLEGAL_OPERATION, invalid.to_string()),
        // The broker's lite requests (POP_LITE_MESSAGE, LITE_SUBSCRIPTION_CTL) come from Java's
        // proxy, which skiff does not serve remoting-side; a lite refusal is a bad parameter.
        (Refused::Lite(refusal), _) => Failure::new(code::INVALID_PARAMETER, refusal.to_string()),
        (Refused::IllegalTimer(illegal), _) => {
            Failure::new(code::MESSAGE_ILLEGAL, illegal.to_string())
        }
        (Refused::Rejected(rejected), _) => {
            Failure::new(code::MESSAGE_ILLEGAL, rejected.to_string())
        }
        (
            Refused::DiskFull {
                used_ratio,
                full_ratio,
            },
            _,
        ) => Failure::new(
            code::SERVICE_NOT_AVAILABLE,
            format!(
                "service not available now. It may be caused by one of the following reasons: the broker's disk is full [{:.1}% used, sends refused from {:.1}%], messages are put to the slave, message store has been shut down, etc.",
                used_ratio * 100.0,
                full_ratio * 100.0
            ),
        ),
        (
            Refused::IllegalQueue {
                topic,
                queue_id,
                queues,
            },
            Some(rc::POP_MESSAGE | rc::NOTIFICATION),
        ) => Failure::new(
            code::INVALID_PARAMETER,
            format!(
                "queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{queues}]"
            ),
        ),
        (
            Refused::IllegalQueue {
                topic,
                queue_id,
                queues,
            },
            Some(rc::ACK_MESSAGE | rc::CHANGE_MESSAGE_INVISIBLETIME),
        ) => Failure::new(
            code::MESSAGE_ILLEGAL,
            format!(
                "queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{queues}]"
            ),
        ),
        (
            Refused::OffsetOutOfQueue {
                topic,
                queue_id,
                offset,
                min,
                max,
            },
            _,
        ) => Failure::new(
            code::NO_MESSAGE,
            format!("offset is illegal, key:{topic}@{queue_id}, commit:{offset}, store:{min}~{max}"),
        ),
        (Refused::ReceiptExpired { .. }, _) => {
            Failure::new(code::NO_MESSAGE, refused.to_string())
        }
        (Refused::IllegalSend(illegal), _) => illegal_send_answer(illegal),
        (Refused::InvalidName { .. }, Some(rc::POP_MESSAGE | rc::NOTIFICATION)) => {
            Failure::new(code::INVALID_PARAMETER, refused.to_string())
        }
        (Refused::EndTransaction { reason, .. }, _) => end_transaction_answer(*reason),
        (Refused::ModeForbidden { rule, .. }, _) => {
            Failure::new(code::NO_PERMISSION, rule.to_string())
        }
        (other, _) => Failure::system(error_chain(other)),
    }
}

/// Java's codes and remarks for a refused send (`msgCheck`, the batch checks).
fn illegal_send_answer(illegal: &IllegalSend) -> Failure {
    match illegal {
        IllegalSend::TopicName {
            problem: NameProblem::Blank,
            ..
        } => Failure::system("The specified topic is blank."),
        IllegalSend::TopicName {
            topic,
            problem: NameProblem::IllegalCharacters,
        } => Failure::system(format!(
            "The specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        )),
        IllegalSend::TopicName {
            problem: NameProblem::TooLong { .. },
            ..
        } => Failure::system("The specified topic is longer than topic max length."),
        IllegalSend::Forbidden { topic } => Failure::new(
            code::NO_PERMISSION,
            format!("Sending message to topic[{topic}] is forbidden."),
        ),
        IllegalSend::BatchWithTransaction => Failure::new(
            code::MESSAGE_ILLEGAL,
            "batch message does not support transaction",
        ),
        IllegalSend::BatchToRetryTopic { .. } => Failure::new(
            code::MESSAGE_ILLEGAL,
            "batch request does not support retry group",
        ),
    }
}

/// Java's codes and remarks for a refused END_TRANSACTION.
fn end_transaction_answer(reason: EndRefusal) -> Failure {
    match reason {
        EndRefusal::NotFound => Failure::system("Find prepared transaction message failed"),
        EndRefusal::WrongProducerGroup => Failure::system("The producer group wrong"),
        EndRefusal::WrongTranStateTableOffset => {
            Failure::system("The transaction state table offset wrong")
        }
        EndRefusal::TooLate => Failure::new(code::ILLEGAL_OPERATION, ""),
        EndRefusal::InProgress => {
            Failure::system("the transaction is being ended by another request")
        }
        EndRefusal::Conflicting(state) => Failure::system(match state {
            HalfState::Committed => "the transaction was already committed",
            HalfState::RolledBack => "the transaction was already rolled back",
            _ => "the transaction was set aside after too many checks",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic_not_exist() -> Refused {
        Refused::TopicNotExist {
            topic: "T".to_owned(),
        }
    }

    #[test]
    fn a_refusal_is_worded_as_the_java_processor_of_the_request_words_it() {
        let cases = [
            (
                topic_not_exist(),
                None,
                code::TOPIC_NOT_EXIST,
                "topic[T] not exist, apply first",
            ),
            (
                topic_not_exist(),
                Some(rc::UPDATE_CONSUMER_OFFSET),
                code::TOPIC_NOT_EXIST,
                "Topic T not exist!",
            ),
            (
                topic_not_exist(),
                Some(rc::GET_ROUTEINFO_BY_TOPIC),
                code::TOPIC_NOT_EXIST,
                "No topic route info",
            ),
            (
                Refused::IllegalQueue {
                    topic: "T".to_owned(),
                    queue_id: 9,
                    queues: 4,
                },
                Some(rc::POP_MESSAGE),
                code::INVALID_PARAMETER,
                "queueId[9] is illegal, topic:[T] topicConfig.readQueueNums:[4]",
            ),
            (
                Refused::IllegalQueue {
                    topic: "T".to_owned(),
                    queue_id: 9,
                    queues: 4,
                },
                Some(rc::SEND_MESSAGE),
                code::SYSTEM_ERROR,
                "queue 9 of topic T is out of range",
            ),
            (
                Refused::ModeForbidden {
                    topic: "%RETRY%G".to_owned(),
                    rule: skiff_actors::refused::ModeRule::RetryTopic,
                },
                Some(rc::SET_MESSAGE_REQUEST_MODE),
                code::NO_PERMISSION,
                "retry topic is not allowed to set mode",
            ),
            (
                Refused::EndTransaction {
                    commit_log_offset: 7,
                    reason: EndRefusal::TooLate,
                },
                Some(rc::END_TRANSACTION),
                code::ILLEGAL_OPERATION,
                "",
            ),
            (
                Refused::EndTransaction {
                    commit_log_offset: 7,
                    reason: EndRefusal::NotFound,
                },
                Some(rc::END_TRANSACTION),
                code::SYSTEM_ERROR,
                "Find prepared transaction message failed",
            ),
            (
                IllegalSend::Forbidden {
                    topic: "SCHEDULE_TOPIC_XXXX".to_owned(),
                }
                .into(),
                Some(rc::SEND_MESSAGE_V2),
                code::NO_PERMISSION,
                "Sending message to topic[SCHEDULE_TOPIC_XXXX] is forbidden.",
            ),
            (
                IllegalSend::BatchWithTransaction.into(),
                Some(rc::SEND_BATCH_MESSAGE),
                code::MESSAGE_ILLEGAL,
                "batch message does not support transaction",
            ),
            (
                Refused::IllegalQueue {
                    topic: "T".to_owned(),
                    queue_id: -1,
                    queues: 4,
                },
                Some(rc::ACK_MESSAGE),
                code::MESSAGE_ILLEGAL,
                "queueId[-1] is illegal",
            ),
            (
                Refused::OffsetOutOfQueue {
                    topic: "T".to_owned(),
                    queue_id: 1,
                    offset: 9,
                    min: 0,
                    max: 3,
                },
                Some(rc::ACK_MESSAGE),
                code::NO_MESSAGE,
                "offset is illegal, key:T@1, commit:9, store:0~3",
            ),
            (
                Refused::DiskFull {
                    used_ratio: 0.95,
                    full_ratio: 0.9,
                },
                Some(rc::SEND_MESSAGE),
                code::SERVICE_NOT_AVAILABLE,
                "[95.0% used, sends refused from 90.0%]",
            ),
        ];
        for (refused, request, expected_code, remark) in cases {
            let answer = refusal_answer(&refused, request);
            assert_eq!(answer.code, expected_code, "{refused:?} to {request:?}");
            assert!(
                answer.remark.contains(remark),
                "{refused:?} to {request:?}: {:?}",
                answer.remark
            );
        }
    }
}
