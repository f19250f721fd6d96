//! RocketMQ remoting: wire codec, transport, and both ends of skiff's use of it.
//!
//! From the bytes up; each module uses only those above it:
//!
//! * [`codes`]: request, response and language codes, and well-known names.
//! * [`frame`]: `RemotingCommand`, streaming frame decoder, encoder (JSON and binary headers).
//! * [`headers`]: typed custom headers carried in `extFields`.
//! * [`body`]: request and response bodies (JSON bodies, the batch body, the admin bodies).
//! * `conn`: one connection, shared by [`server`] and [`client`], the tokio transport (the
//!   ports, admission and connection cap under [`server`] are [`crate::listener`]'s).
//! * [`wire`]: conversions between the wire types and skiff's domain types.
//! * [`processor`]: the server side, every request code skiff serves mapped to broker calls.
//! * [`remote_broker`]: the client side, the `BrokerApi` over TCP for skiff's own consumers
//!   and producers.
//!
//! `codes`, `frame`, `headers` and `body` do not depend on the actor or storage crates (the fuzz
//! build compiles them alone); conversions that need those live in [`wire`].

pub mod body;
pub mod client;
pub mod codes;
mod conn;
pub mod frame;
pub mod headers;
pub mod processor;
pub mod remote_broker;
pub mod server;
pub mod wire;

pub use client::{ClientConfig, ClientError, InboundRequest, RemotingClient};
pub use frame::{
    decode_frame, encode, encode_with, FrameError, RemotingCommand, SerializeType,
    DEFAULT_MAX_FRAME_LEN,
};
pub use headers::HeaderError;
pub use server::{
    ConnectionHandle, ConnectionId, RemotingServer, RequestHandler, ServerConfig, ServerError,
};
