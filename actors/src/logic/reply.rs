//! Request-reply names: the topic replies are sent to and the message type that marks a reply.
//!
//! A requester sends an ordinary message carrying `CORRELATION_ID`, `REPLY_TO_CLIENT` (its client
//! id) and `TTL`; the broker stamps the stored request with its `CLUSTER`, and the replier sends
//! its answer to [`reply_topic`] of that cluster with `MSG_TYPE` = [`REPLY_MESSAGE_TYPE`]. The
//! broker pushes the answer to the requester's connection and also stores it in that topic.

/// Suffix of the cluster's reply topic (Java's `MixAll.REPLY_TOPIC_POSTFIX`).
pub const REPLY_TOPIC_POSTFIX: &str = "REPLY_TOPIC";

/// The `MSG_TYPE` value of a reply (Java's `MixAll.REPLY_MESSAGE_FLAG`).
pub const REPLY_MESSAGE_TYPE: &str = "reply";

/// Queue count of the reply topic the broker creates at start (Java creates it with one).
pub const REPLY_TOPIC_QUEUE_NUMS: u32 = 1;

/// `<cluster>_REPLY_TOPIC`: where replies to requests stored in `cluster` go.
pub fn reply_topic(cluster: &str) -> String {
    format!("{cluster}_{REPLY_TOPIC_POSTFIX}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reply_topic_is_named_after_the_cluster() {
        assert_eq!(reply_topic("DefaultCluster"), "DefaultCluster_REPLY_TOPIC");
    }
}
