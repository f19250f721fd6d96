//! Broker-side actors.
