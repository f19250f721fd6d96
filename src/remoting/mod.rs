//! RocketMQ remoting: wire codec, server and client.
