//! Test helpers for skiff's own tests and for embedders' tests (feature `testsuite`): a
//! [`TestNode`] in a temporary directory that must be shut down, a [`RawConn`] that writes and
//! reads remoting frames one by one (so a test sees what a client library would hide: pushes
//! from the broker, the absence of an answer to a oneway request), and builders for the requests
//! a RocketMQ client sends. Paused-time set-up comes from `skiff_actors::testsuite`, re-exported.

use crate::remoting::codes::{request as rc, AUTO_CREATE_TOPIC_KEY};
use crate::remoting::frame::{self, EncodeError, FrameError, RemotingCommand};
use crate::{Node, NodeConfig, NodeError};
use bytes::BytesMut;
use std::ops::Deref;
use std::path::Path;
use std::time::Duration;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub use skiff_actors::testsuite::run_paused;
pub use skiff_storage::message::encode_properties as properties;

/// How long [`RawConn::read`] waits for a frame before it gives up.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(20);

/// The born time the builders give a message: fixed, so what a test stores does not depend on
/// the clock.
pub const BORN_MS: i64 = 1_700_000_000_000;

// ---- a node the test must shut down ------------------------------------------------------------

#[derive(Debug, thiserror::Error)]
pub enum TestNodeError {
    #[error("creating the node's temporary directory")]
    TempDir {
        #[source]
        source: std::io::Error,
    },
    #[error("opening the node")]
    Open {
        #[source]
        source: NodeError,
    },
}

/// The configuration tests run a node with: its data in `dir`, 8 MiB segments, and a disk that
/// never counts as full, so the test machine's disk use neither deletes a test's segments early
/// nor refuses its sends.
pub fn test_config(dir: &Path) -> NodeConfig {
    let mut config = NodeConfig::in_dir(dir);
    config.segment_size = 8 << 20;
    config.disk_max_used_ratio = 0.999;
    config.disk_full_ratio = 1.0;
    config
}

/// A [`Node`] for a test (it dereferences to one). [`TestNode::shutdown`] consumes it; dropping
/// it without that panics, since a node dropped mid-test skips the flush the test meant to
/// check. A test that is already failing may drop it: the panic is kept for the clean path.
pub struct TestNode {
    node: Option<Node>,
    /// The directory the node owns, when it made its own ([`TestNode::open`]).
    dir: Option<TempDir>,
}

impl TestNode {
    /// A node with [`test_config`] in a fresh temporary directory, removed after the shutdown.
    pub fn open() -> Result<TestNode, TestNodeError> {
        TestNode::open_with(|_| {})
    }

    /// [`TestNode::open`] with `configure` applied to the configuration first.
    pub fn open_with(configure: impl FnOnce(&mut NodeConfig)) -> Result<TestNode, TestNodeError> {
        let dir = tempfile::tempdir().map_err(|source| TestNodeError::TempDir { source })?;
        let mut config = test_config(dir.path());
        configure(&mut config);
        let node = Node::open(config).map_err(|source| TestNodeError::Open { source })?;
        Ok(TestNode {
            node: Some(node),
            dir: Some(dir),
        })
    }

    /// A node with [`test_config`] in `dir`, which the test keeps: opening it again after a
    /// shutdown is a restart.
    pub fn open_in(dir: &Path) -> Result<TestNode, TestNodeError> {
        TestNode::open_config(test_config(dir))
    }

    /// A node with exactly `config`; its directory is the test's.
    pub fn open_config(config: NodeConfig) -> Result<TestNode, TestNodeError> {
        let node = Node::open(config).map_err(|source| TestNodeError::Open { source })?;
        Ok(TestNode {
            node: Some(node),
            dir: None,
        })
    }

    /// Shuts the node down (offsets persisted, store flushed); then its own directory, if it
    /// made one, is removed.
    pub async fn shutdown(mut self) -> Result<(), NodeError> {
        let node = self.node.take();
        let dir = self.dir.take();
        if let Some(node) = node {
            node.shutdown().await?;
        }
        drop(dir);
        Ok(())
    }
}

impl Deref for TestNode {
    type Target = Node;

    fn deref(&self) -> &Node {
        match &self.node {
            Some(node) => node,
            // `shutdown` takes the node only while consuming `self`.
            None => unreachable!("a TestNode keeps its node until shutdown consumes it"),
        }
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        if self.node.is_some() && !std::thread::panicking() {
            panic!("a TestNode was dropped without `shutdown().await`: its node was never flushed");
        }
    }
}

// ---- a connection frame by frame ---------------------------------------------------------------

#[derive(Debug, thiserror::Error)]
pub enum RawConnError {
    #[error("connecting to {addr}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("encoding a request with code {code}")]
    Encode {
        code: i32,
        #[source]
        source: EncodeError,
    },
    #[error("writing a frame")]
    Write {
        #[source]
        source: std::io::Error,
    },
    #[error("reading a frame")]
    Read {
        #[source]
        source: std::io::Error,
    },
    #[error("decoding a frame")]
    Decode {
        #[source]
        source: FrameError,
    },
    #[error("the connection closed")]
    Closed,
    #[error("no frame within {limit:?}")]
    Timeout { limit: Duration },
    #[error("a response to no request of this connection: opaque {opaque}, code {code}")]
    UnknownResponse { opaque: i32, code: i32 },
}

/// A remoting connection driven frame by frame: every frame the broker sends is read back, so
/// a response to a oneway request, or a request the broker pushes, is seen.
pub struct RawConn {
    stream: TcpStream,
    buf: BytesMut,
}

impl RawConn {
    pub async fn connect(addr: &str) -> Result<RawConn, RawConnError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|source| RawConnError::Connect {
                addr: addr.to_owned(),
                source,
            })?;
        Ok(RawConn {
            stream,
            buf: BytesMut::new(),
        })
    }

    pub async fn write(&mut self, cmd: &RemotingCommand) -> Result<(), RawConnError> {
        let mut out = BytesMut::new();
        frame::encode(cmd, &mut out).map_err(|source| RawConnError::Encode {
            code: cmd.code,
            source,
        })?;
        self.stream
            .write_all(&out)
            .await
            .map_err(|source| RawConnError::Write { source })
    }

    /// The next frame, whatever it is; fails after [`FRAME_TIMEOUT`].
    pub async fn read(&mut self) -> Result<RemotingCommand, RawConnError> {
        let next = async {
            loop {
                if let Some(cmd) = frame::decode_frame(&mut self.buf, frame::DEFAULT_MAX_FRAME_LEN)
                    .map_err(|source| RawConnError::Decode { source })?
                {
                    return Ok(cmd);
                }
                let read = self
                    .stream
                    .read_buf(&mut self.buf)
                    .await
                    .map_err(|source| RawConnError::Read { source })?;
                if read == 0 {
                    return Err(RawConnError::Closed);
                }
            }
        };
        tokio::time::timeout(FRAME_TIMEOUT, next)
            .await
            .map_err(|_| RawConnError::Timeout {
                limit: FRAME_TIMEOUT,
            })?
    }

    /// Sends a request and reads frames until its response; requests the broker sends
    /// meanwhile are skipped.
    pub async fn call(&mut self, cmd: RemotingCommand) -> Result<RemotingCommand, RawConnError> {
        self.write(&cmd).await?;
        loop {
            let frame = self.read().await?;
            if !frame.is_response() {
                continue;
            }
            if frame.opaque == cmd.opaque {
                return Ok(frame);
            }
            return Err(RawConnError::UnknownResponse {
                opaque: frame.opaque,
                code: frame.code,
            });
        }
    }
}

// ---- message bodies as clients write them ------------------------------------------------------

/// The body of a message of the trace topic as a Java client with `enableMsgTrace` writes it, in
/// the layout of rocketmq-client 5.5.0's `TraceDataEncoder.encoderFromContextBean`: a Pub,
/// SubBefore and SubAfter record of `msg_id` (producer group `PG`, topic `Orders`, consumer group
/// `GID_orders`, request `req-1`, 25 ms consume time), then a SubBefore of another message.
pub fn java_trace_body(msg_id: &str) -> String {
    let pub_record = [
        "Pub",
        "1733390000000",
        "DefaultRegion",
        "PG",
        "Orders",
        msg_id,
        "TagA",
        "k1",
        "127.0.0.1:9876",
        "12",
        "3",
        "0",
        "7F00000100002A9F0000000000000000",
        "true",
        "10.0.0.5",
    ]
    .join("\u{1}");
    let before = [
        "SubBefore",
        "1733390000100",
        "DefaultRegion",
        "GID_orders",
        "req-1",
        msg_id,
        "0",
        "k1",
    ]
    .join("\u{1}");
    let after = [
        "SubAfter",
        "req-1",
        msg_id,
        "25",
        "true",
        "k1",
        "0",
        "1733390000125",
        "GID_orders",
    ]
    .join("\u{1}");
    let other = [
        "SubBefore",
        "1733390000200",
        "R",
        "G",
        "req-2",
        "OTHER",
        "0",
        "",
    ]
    .join("\u{1}");
    format!("{pub_record}\u{2}{before}\u{2}{after}\u{2}{other}\u{2}")
}

// ---- requests as a client sends them -----------------------------------------------------------

/// A request with these header fields.
pub fn request(code: i32, ext: &[(&str, &str)]) -> RemotingCommand {
    let mut cmd = RemotingCommand::new_request(code);
    for (k, v) in ext {
        cmd.ext_fields.insert((*k).to_owned(), (*v).to_owned());
    }
    cmd
}

/// A send with the V2 header (single-letter fields), as Java's producer writes it. Defaults:
/// SEND_MESSAGE_V2, producer group `pg`, queue 0 of a topic auto-created with 4 queues, born
/// at [`BORN_MS`], no flag, no properties.
#[derive(Clone, Debug)]
pub struct SendV2 {
    pub code: i32,
    pub producer_group: String,
    pub topic: String,
    pub queue_nums: u32,
    pub queue_id: i32,
    pub sys_flag: i32,
    pub born_ms: i64,
    pub properties: String,
    pub body: Vec<u8>,
}

/// [`SendV2`] of `body` to `topic`, with its defaults.
pub fn send_v2(topic: &str, body: impl Into<Vec<u8>>) -> SendV2 {
    SendV2 {
        code: rc::SEND_MESSAGE_V2,
        producer_group: "pg".to_owned(),
        topic: topic.to_owned(),
        queue_nums: 4,
        queue_id: 0,
        sys_flag: 0,
        born_ms: BORN_MS,
        properties: String::new(),
        body: body.into(),
    }
}

impl SendV2 {
    pub fn code(self, code: i32) -> Self {
        SendV2 { code, ..self }
    }

    pub fn producer_group(self, group: &str) -> Self {
        SendV2 {
            producer_group: group.to_owned(),
            ..self
        }
    }

    pub fn queue(self, queue_id: i32) -> Self {
        SendV2 { queue_id, ..self }
    }

    /// The queue count an auto-created topic gets.
    pub fn queue_nums(self, queue_nums: u32) -> Self {
        SendV2 { queue_nums, ..self }
    }

    pub fn sys_flag(self, sys_flag: i32) -> Self {
        SendV2 { sys_flag, ..self }
    }

    pub fn born_ms(self, born_ms: i64) -> Self {
        SendV2 { born_ms, ..self }
    }

    /// The properties string as sent (see [`properties`]).
    pub fn properties(self, properties: impl Into<String>) -> Self {
        SendV2 {
            properties: properties.into(),
            ..self
        }
    }

    pub fn build(self) -> RemotingCommand {
        request(
            self.code,
            &[
                ("a", &self.producer_group),
                ("b", &self.topic),
                ("c", AUTO_CREATE_TOPIC_KEY),
                ("d", &self.queue_nums.to_string()),
                ("e", &self.queue_id.to_string()),
                ("f", &self.sys_flag.to_string()),
                ("g", &self.born_ms.to_string()),
                ("h", "0"),
                ("i", &self.properties),
            ],
        )
        .with_body(self.body)
    }
}

/// A PULL_MESSAGE of up to 32 messages carrying its subscription `*`. Defaults: no system
/// flag, no committed offset, no long poll.
#[derive(Clone, Debug)]
pub struct Pull {
    pub group: String,
    pub topic: String,
    pub queue_id: u32,
    pub offset: u64,
    pub sys_flag: i32,
    pub suspend_ms: u64,
}

/// [`Pull`] by `group` of `queue_id` of `topic` from `offset`, with its defaults.
pub fn pull(group: &str, topic: &str, queue_id: u32, offset: u64) -> Pull {
    Pull {
        group: group.to_owned(),
        topic: topic.to_owned(),
        queue_id,
        offset,
        sys_flag: 0,
        suspend_ms: 0,
    }
}

impl Pull {
    pub fn sys_flag(self, sys_flag: i32) -> Self {
        Pull { sys_flag, ..self }
    }

    /// How long the broker may hold the pull when nothing is there (a long poll).
    pub fn suspend_ms(self, suspend_ms: u64) -> Self {
        Pull { suspend_ms, ..self }
    }

    pub fn build(self) -> RemotingCommand {
        request(
            rc::PULL_MESSAGE,
            &[
                ("consumerGroup", &self.group),
                ("topic", &self.topic),
                ("queueId", &self.queue_id.to_string()),
                ("queueOffset", &self.offset.to_string()),
                ("maxMsgNums", "32"),
                ("sysFlag", &self.sys_flag.to_string()),
                ("commitOffset", "0"),
                ("suspendTimeoutMillis", &self.suspend_ms.to_string()),
                ("subscription", "*"),
                ("subVersion", "0"),
            ],
        )
    }
}

/// A POP_MESSAGE as a 5.x client sends it, with the subscription `*` (tag expression).
/// Defaults: any queue (-1), up to 32 messages, a minute invisible, no long poll, no `order`
/// field.
#[derive(Clone, Debug)]
pub struct Pop {
    pub group: String,
    pub topic: String,
    pub queue_id: i32,
    pub max: u32,
    pub invisible_ms: u64,
    pub poll_ms: u64,
    pub order: Option<bool>,
}

/// [`Pop`] by `group` from `topic`, with its defaults.
pub fn pop(group: &str, topic: &str) -> Pop {
    Pop {
        group: group.to_owned(),
        topic: topic.to_owned(),
        queue_id: -1,
        max: 32,
        invisible_ms: 60_000,
        poll_ms: 0,
        order: None,
    }
}

impl Pop {
    pub fn queue(self, queue_id: i32) -> Self {
        Pop { queue_id, ..self }
    }

    pub fn max(self, max: u32) -> Self {
        Pop { max, ..self }
    }

    /// How long popped messages stay invisible before they come back.
    pub fn invisible_ms(self, invisible_ms: u64) -> Self {
        Pop {
            invisible_ms,
            ..self
        }
    }

    /// How long the broker may hold the pop when nothing is there.
    pub fn poll_ms(self, poll_ms: u64) -> Self {
        Pop { poll_ms, ..self }
    }

    /// Sends the `order` field, which clients before 5.x leave out.
    pub fn order(self, order: bool) -> Self {
        Pop {
            order: Some(order),
            ..self
        }
    }

    pub fn build(self) -> RemotingCommand {
        let cmd = request(
            rc::POP_MESSAGE,
            &[
                ("consumerGroup", &self.group),
                ("topic", &self.topic),
                ("queueId", &self.queue_id.to_string()),
                ("maxMsgNums", &self.max.to_string()),
                ("invisibleTime", &self.invisible_ms.to_string()),
                ("pollTime", &self.poll_ms.to_string()),
                ("bornTime", &BORN_MS.to_string()),
                ("initMode", "0"),
                ("expType", "TAG"),
                ("exp", "*"),
            ],
        );
        match self.order {
            Some(order) => cmd.with_ext("order", order.to_string()),
            None => cmd,
        }
    }
}

/// A HEART_BEAT with this JSON body.
pub fn heartbeat(body: &str) -> RemotingCommand {
    RemotingCommand::new_request(rc::HEART_BEAT).with_body(body.as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_v2_defaults_are_the_header_a_java_producer_writes() {
        let cmd = send_v2("T", "body")
            .queue(3)
            .properties(properties(&[("TAGS", "a")]))
            .build();
        let field = |k: &str| cmd.ext_fields.get(k).map(String::as_str);
        assert_eq!(cmd.code, rc::SEND_MESSAGE_V2);
        assert_eq!(field("a"), Some("pg"));
        assert_eq!(field("b"), Some("T"));
        assert_eq!(field("d"), Some("4"));
        assert_eq!(field("e"), Some("3"));
        assert_eq!(field("g"), Some("1700000000000"));
        assert_eq!(field("i"), Some("TAGS\u{1}a\u{2}"));
        assert_eq!(&cmd.body[..], b"body");
    }

    #[test]
    fn pull_defaults_ask_for_32_without_a_long_poll() {
        let cmd = pull("g", "T", 1, 7).sys_flag(4).build();
        let field = |k: &str| cmd.ext_fields.get(k).map(String::as_str);
        assert_eq!(cmd.code, rc::PULL_MESSAGE);
        assert_eq!(field("queueOffset"), Some("7"));
        assert_eq!(field("sysFlag"), Some("4"));
        assert_eq!(field("suspendTimeoutMillis"), Some("0"));
        assert_eq!(field("maxMsgNums"), Some("32"));
    }

    #[test]
    #[should_panic(expected = "without `shutdown().await`")]
    fn a_test_node_dropped_without_shutdown_panics() {
        run_paused(|| async {
            let _node = TestNode::open().expect("open a test node");
        });
    }

    #[test]
    fn a_test_node_shut_down_drops_quietly() {
        run_paused(|| async {
            let node = TestNode::open().expect("open a test node");
            node.shutdown().await.expect("shut the node down");
        });
    }
}
