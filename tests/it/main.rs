//! The root crate's integration tests, as one binary (one link instead of one per file). Each
//! module is one subject; run one with `cargo test -p skiff --test it MODULE::`.
//!
//! - `cli_admin`: `skiff admin` as a user runs it, against a `skiff serve` child.
//! - `common`: the helpers the modules share (paused-time systems, nodes in temporary
//!   directories, `skiff serve` children, raw requests).
//! - `embedded_*`: the embedded `Node`: smoke tests, at-least-once under failures, crash and
//!   restart (re-runs this binary as its child), offset rules, transactions.
//! - `node_lifecycle`: a node releases every file it holds at shutdown, and reopens at once.
//! - `message_ids`: client message ids whichever broker a producer sends to.
//! - `remote_*`: skiff's own producer and consumers over TCP (`RemoteBroker`) against `skiff
//!   serve`; `remote_cluster` (ignored) against an Apache cluster, run by
//!   `tests/conformance/cluster.sh`.
//! - `remoting_codec`: the remoting transport over real TCP.
//! - `serve_*`: `skiff serve` driven with raw frames: protocol, pop, request-reply, the binary
//!   as a process, and the `*_crash` modules that SIGKILL it; `serve_grpc` drives its gRPC
//!   front door with a client generated from the same schema.

mod cli_admin;
mod common;
mod door_parity;
mod embedded_at_least_once;
mod embedded_crash;
mod embedded_offset_rules;
mod embedded_smoke;
mod embedded_transactions;
mod house_rules;
mod message_ids;
mod node_lifecycle;
mod remote_cluster;
mod remote_consumers;
mod remote_request_reply;
mod remote_transactions;
mod remoting_codec;
mod serve_acl;
mod serve_acl_users;
mod serve_console;
mod serve_flood;
mod serve_grpc;
mod serve_lite_admin;
mod serve_pop;
mod serve_pop_crash;
mod serve_process;
mod serve_protected;
mod serve_protocol;
mod serve_reply;
mod serve_timer_crash;
mod serve_tls;
mod serve_topic_pages;
mod serve_transaction_crash;
