//! skiff: a single-node message-queue node that speaks RocketMQ's remoting protocol.

pub mod remoting;
