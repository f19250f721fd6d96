//! RocketMQ remoting: wire codec, server and client.
//!
//! * [`frame`]: `RemotingCommand`, streaming frame decoder, encoder (JSON and binary headers).
//! * [`codes`]: request, response and language codes.
//! * [`headers`]: typed custom headers carried in `extFields`.
//! * [`body`]: JSON bodies (route data, heartbeat, consumer list, lock bodies).
//! * [`server`] / [`client`]: tokio transport.

pub mod body;
pub mod client;
pub mod codes;
mod conn;
pub mod frame;
pub mod headers;
pub mod server;

pub use client::{ClientConfig, ClientError, InboundRequest, RemotingClient};
pub use frame::{
    decode_frame, encode, encode_with, FrameError, RemotingCommand, SerializeType,
    DEFAULT_MAX_FRAME_LEN,
};
pub use headers::HeaderError;
pub use server::{
    ConnectionHandle, ConnectionId, RemotingServer, RequestHandler, ServerConfig, ServerError,
};
pub mod processor;
pub mod remote_broker;
