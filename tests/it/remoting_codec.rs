//! Remoting transport over real TCP on 127.0.0.1: bad input on one connection never disturbs
//! the others, correlation by opaque, server-initiated requests, long-poll style late answers,
//! timeouts, reconnects and shutdown.
//!
//! Waits are bounded by `BOUND` only as a failure limit; ordering comes from channels.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use skiff::remoting::codes::{request, response};
use skiff::remoting::frame::{decode_frame, encode_with, SerializeType};
use skiff::remoting::headers::{CustomHeader, NotifyConsumerIdsChangedRequestHeader};
use skiff::remoting::server::HandlerFuture;
use skiff::remoting::{
    ClientConfig, ClientError, ConnectionHandle, ConnectionId, RemotingClient, RemotingCommand,
    RemotingServer, RequestHandler, ServerConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Notify};

const BOUND: Duration = Duration::from_secs(10);
const RPC: Duration = Duration::from_secs(5);

const ECHO: i32 = 1001;
const HOLD: i32 = 1002;
const CLOSE_ME: i32 = 1003;
/// Answered with a 128 KiB body.
const BIG_ANSWER: i32 = 1004;
/// The handler panics after a first poll that was pending.
const PANIC: i32 = 1005;
const PARK: i32 = request::PULL_MESSAGE;
const NOTIFY_THEN_ANSWER: i32 = request::HEART_BEAT;
const ONEWAY_SINK: i32 = request::UPDATE_CONSUMER_OFFSET;

#[derive(Debug)]
enum Event {
    Opened(ConnectionId, SocketAddr),
    Closed(ConnectionId),
    Oneway(i32),
    Parked(ConnectionHandle, RemotingCommand),
    Holding,
}

struct TestHandler {
    events: mpsc::UnboundedSender<Event>,
    release: Arc<Notify>,
}

impl RequestHandler for TestHandler {
    fn handle(&self, conn: ConnectionHandle, req: RemotingCommand) -> HandlerFuture {
        let events = self.events.clone();
        let release = self.release.clone();
        Box::pin(async move {
            match req.code {
                BIG_ANSWER => {
                    Some(RemotingCommand::success_to(&req).with_body(vec![b'x'; 128 * 1024]))
                }
                ECHO => Some(
                    RemotingCommand::success_to(&req)
                        .with_ext_fields(req.ext_fields.clone())
                        .with_body(req.body.clone()),
                ),
                NOTIFY_THEN_ANSWER => {
                    let notify = RemotingCommand::new_request(request::NOTIFY_CONSUMER_IDS_CHANGED)
                        .with_ext_fields(
                            NotifyConsumerIdsChangedRequestHeader {
                                consumer_group: "cg".into(),
                            }
                            .to_ext(),
                        )
                        .oneway();
                    conn.send(notify).await.expect("notify queued");
                    Some(RemotingCommand::success_to(&req))
                }
                ONEWAY_SINK => {
                    let _ = events.send(Event::Oneway(req.opaque));
                    // Java never answers a oneway request, whatever the processor returns.
                    Some(RemotingCommand::success_to(&req))
                }
                PARK => {
                    let _ = events.send(Event::Parked(conn, req));
                    None
                }
                HOLD => {
                    let _ = events.send(Event::Holding);
                    release.notified().await;
                    Some(RemotingCommand::success_to(&req))
                }
                CLOSE_ME => {
                    conn.close();
                    None
                }
                PANIC => {
                    tokio::task::yield_now().await;
                    panic!("handler bug for opaque {}", req.opaque);
                }
                _ => Some(RemotingCommand::not_supported(&req)),
            }
        })
    }

    fn on_open(&self, conn: &ConnectionHandle) {
        let _ = self.events.send(Event::Opened(conn.id(), conn.peer_addr()));
    }

    fn on_close(&self, conn_id: ConnectionId) {
        let _ = self.events.send(Event::Closed(conn_id));
    }
}

struct Fixture {
    server: RemotingServer,
    addr: String,
    events: mpsc::UnboundedReceiver<Event>,
    release: Arc<Notify>,
    client: RemotingClient,
}

async fn start(config: ServerConfig) -> Fixture {
    let (tx, events) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let handler = Arc::new(TestHandler {
        events: tx,
        release: release.clone(),
    });
    let server = RemotingServer::bind("127.0.0.1:0", config, handler)
        .await
        .expect("bind");
    let addr = server.local_addr().to_string();
    Fixture {
        server,
        addr,
        events,
        release,
        client: RemotingClient::new(ClientConfig::default()),
    }
}

impl Fixture {
    /// Next event matching `pred`, skipping others; fails after BOUND.
    async fn event<T>(&mut self, mut pred: impl FnMut(Event) -> Option<T>) -> T {
        let wait = async {
            loop {
                let ev = self.events.recv().await.expect("handler alive");
                if let Some(t) = pred(ev) {
                    return t;
                }
            }
        };
        tokio::time::timeout(BOUND, wait)
            .await
            .expect("expected event did not happen")
    }

    /// Connection id of the accepted connection whose peer is `local`.
    async fn opened(&mut self, local: SocketAddr) -> ConnectionId {
        self.event(|e| match e {
            Event::Opened(id, peer) if peer == local => Some(id),
            _ => None,
        })
        .await
    }

    async fn closed(&mut self, id: ConnectionId) {
        self.event(|e| match e {
            Event::Closed(c) if c == id => Some(()),
            _ => None,
        })
        .await
    }

    /// The well-behaved client still gets answers.
    async fn assert_echo_works(&self, tag: &str) {
        let resp = self
            .client
            .invoke(
                &self.addr,
                RemotingCommand::new_request(ECHO)
                    .with_ext("tag", tag)
                    .with_body(tag.as_bytes().to_vec()),
                RPC,
            )
            .await
            .expect("echo answered");
        assert_eq!(resp.code, response::SUCCESS);
        assert!(resp.is_response());
        assert_eq!(resp.ext("tag"), Some(tag));
        assert_eq!(&resp.body[..], tag.as_bytes());
    }
}

fn frame(ser: u8, header: &[u8], body: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&((4 + header.len() + body.len()) as i32).to_be_bytes());
    v.push(ser);
    v.extend_from_slice(&(header.len() as u32).to_be_bytes()[1..]);
    v.extend_from_slice(header);
    v.extend_from_slice(body);
    v
}

struct Raw {
    stream: TcpStream,
    buf: BytesMut,
}

impl Raw {
    async fn connect(f: &mut Fixture) -> (Raw, ConnectionId) {
        let stream = TcpStream::connect(&f.addr).await.expect("connect");
        let local = stream.local_addr().expect("local addr");
        let id = f.opened(local).await;
        (
            Raw {
                stream,
                buf: BytesMut::new(),
            },
            id,
        )
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Next frame, or None once the server closed the connection.
    async fn next(&mut self) -> Option<RemotingCommand> {
        let read = async {
            loop {
                if let Some(cmd) = decode_frame(&mut self.buf, 1 << 20).expect("server frame") {
                    return Some(cmd);
                }
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(BOUND, read)
            .await
            .expect("server neither answered nor closed")
    }

    async fn expect_closed(&mut self) {
        if let Some(cmd) = self.next().await {
            panic!("expected the server to close the connection, got {cmd:?}");
        }
    }
}

#[tokio::test]
async fn echo_with_json_and_binary_request_headers() {
    let mut f = start(ServerConfig::default()).await;
    f.assert_echo_works("first").await;

    // A binary (serType 1) request is answered, in JSON.
    let (mut raw, _) = Raw::connect(&mut f).await;
    let mut req = RemotingCommand::new_request(ECHO).with_ext("k", "v");
    req.opaque = 4242;
    let mut out = BytesMut::new();
    encode_with(&req, SerializeType::RocketMq, &mut out).unwrap();
    raw.send(&out).await;
    let resp = raw.next().await.expect("answer");
    assert_eq!(resp.opaque, 4242);
    assert_eq!(resp.ext("k"), Some("v"));
    assert_eq!(raw.buf.len(), 0);

    // A cpp-style JSON request: no serializeTypeCurrentRPC, a number in extFields.
    raw.send(&frame(
        0,
        br#"{"code":1001,"language":"CPP","version":0,"opaque":7,"flag":0,"extFields":{"n":5,"b":true}}"#,
        b"body",
    ))
    .await;
    let resp = raw.next().await.expect("answer");
    assert_eq!(resp.opaque, 7);
    assert_eq!(resp.ext("n"), Some("5"));
    assert_eq!(resp.ext("b"), Some("true"));
    assert_eq!(&resp.body[..], b"body");
}

#[tokio::test]
async fn truncated_frame_then_close() {
    let mut f = start(ServerConfig::default()).await;
    f.assert_echo_works("before").await;
    let (mut raw, id) = Raw::connect(&mut f).await;
    let full = frame(0, br#"{"code":1001,"opaque":1}"#, b"0123456789");
    raw.send(&full[..full.len() / 2]).await;
    drop(raw);
    f.closed(id).await;
    f.assert_echo_works("after").await;
}

#[tokio::test]
async fn an_answer_over_the_frame_cap_becomes_an_error_the_client_can_read() {
    let f = start(ServerConfig {
        max_frame_len: 64 * 1024,
        ..ServerConfig::default()
    })
    .await;
    let answer = f
        .client
        .invoke(&f.addr, RemotingCommand::new_request(BIG_ANSWER), RPC)
        .await
        .expect("an answer, not a timeout");
    assert_eq!(answer.code, response::SYSTEM_ERROR);
    let remark = answer.remark.unwrap_or_default();
    assert!(
        remark.contains("over the frame cap of 65536 bytes"),
        "{remark}"
    );
    f.assert_echo_works("after").await;
}

#[tokio::test]
async fn length_over_cap_closes_only_that_connection() {
    let mut f = start(ServerConfig {
        max_frame_len: 64 * 1024,
        ..ServerConfig::default()
    })
    .await;
    f.assert_echo_works("before").await;
    let (mut raw, id) = Raw::connect(&mut f).await;
    // 64 KiB + 1 byte announced: over the cap, rejected before the body arrives.
    raw.send(&(64 * 1024 - 3i32).to_be_bytes()).await;
    raw.expect_closed().await;
    f.closed(id).await;

    let (mut raw, id) = Raw::connect(&mut f).await;
    raw.send(&i32::MAX.to_be_bytes()).await;
    raw.expect_closed().await;
    f.closed(id).await;

    let (mut raw, id) = Raw::connect(&mut f).await;
    raw.send(&(-5i32).to_be_bytes()).await;
    raw.expect_closed().await;
    f.closed(id).await;
    f.assert_echo_works("after").await;
}

#[tokio::test]
async fn header_length_larger_than_frame_closes_connection() {
    let mut f = start(ServerConfig::default()).await;
    let (mut raw, id) = Raw::connect(&mut f).await;
    // length 8 = header word + 4 bytes, header length claims 100.
    raw.send(&[0, 0, 0, 8, 0, 0, 0, 100, b'{', b'}', b' ', b' '])
        .await;
    raw.expect_closed().await;
    f.closed(id).await;
    f.assert_echo_works("after").await;
}

#[tokio::test]
async fn invalid_json_with_recoverable_opaque_is_answered_and_connection_kept() {
    let mut f = start(ServerConfig::default()).await;
    let (mut raw, _id) = Raw::connect(&mut f).await;
    raw.send(&frame(
        0,
        br#"{"code":1001,"flag":0,"opaque":31,"extFields":{"a":"#,
        b"",
    ))
    .await;
    let resp = raw.next().await.expect("error answer");
    assert_eq!(resp.code, response::SYSTEM_ERROR);
    assert_eq!(resp.opaque, 31);
    assert!(resp.is_response());
    let remark = resp.remark.expect("remark");
    assert!(remark.contains("malformed JSON header"), "{remark}");

    // Valid JSON with a wrongly typed field: also answered.
    raw.send(&frame(0, br#"{"code":[1],"opaque":32}"#, b""))
        .await;
    let resp = raw.next().await.expect("error answer");
    assert_eq!((resp.code, resp.opaque), (response::SYSTEM_ERROR, 32));

    // The same connection keeps working.
    raw.send(&frame(0, br#"{"code":1001,"opaque":33}"#, b"ok"))
        .await;
    let resp = raw.next().await.expect("echo");
    assert_eq!((resp.code, resp.opaque), (response::SUCCESS, 33));
    assert_eq!(&resp.body[..], b"ok");
    f.assert_echo_works("after").await;
}

#[tokio::test]
async fn invalid_json_without_opaque_closes_connection() {
    let mut f = start(ServerConfig::default()).await;
    let (mut raw, id) = Raw::connect(&mut f).await;
    raw.send(&frame(0, b"not json at all", b"")).await;
    raw.expect_closed().await;
    f.closed(id).await;
    f.assert_echo_works("after").await;
}

#[tokio::test]
async fn unknown_serialize_type_closes_connection() {
    let mut f = start(ServerConfig::default()).await;
    let (mut raw, id) = Raw::connect(&mut f).await;
    raw.send(&frame(9, br#"{"code":1001,"opaque":1}"#, b""))
        .await;
    raw.expect_closed().await;
    f.closed(id).await;
    f.assert_echo_works("after").await;
}

#[tokio::test]
async fn unknown_request_code_answers_3() {
    let f = start(ServerConfig::default()).await;
    let resp = f
        .client
        .invoke(&f.addr, RemotingCommand::new_request(9999), RPC)
        .await
        .unwrap();
    assert_eq!(resp.code, response::REQUEST_CODE_NOT_SUPPORTED);
    assert_eq!(
        resp.remark.as_deref(),
        Some(" request type 9999 not supported")
    );
    f.assert_echo_works("after").await;
}

#[tokio::test]
async fn a_panicking_handler_is_answered_system_error_and_the_connection_kept() {
    let f = start(ServerConfig::default()).await;
    let conn = f.client.connection_to(&f.addr, RPC).await.expect("connect");
    let resp = conn
        .invoke(RemotingCommand::new_request(PANIC), RPC)
        .await
        .expect("an answer, not a timeout");
    assert_eq!(resp.code, response::SYSTEM_ERROR);
    let remark = resp.remark.unwrap_or_default();
    assert!(
        remark.starts_with("request handler failed: handler bug for opaque"),
        "{remark}"
    );
    let echo = conn
        .invoke(
            RemotingCommand::new_request(ECHO).with_body(b"still here".to_vec()),
            RPC,
        )
        .await
        .expect("echo after the panic");
    assert_eq!(&echo.body[..], b"still here");
}

#[tokio::test]
async fn oneway_request_is_never_answered() {
    let mut f = start(ServerConfig::default()).await;
    let (mut raw, _) = Raw::connect(&mut f).await;
    raw.send(&frame(0, br#"{"code":15,"flag":2,"opaque":50}"#, b""))
        .await;
    f.event(|e| match e {
        Event::Oneway(50) => Some(()),
        _ => None,
    })
    .await;
    raw.send(&frame(0, br#"{"code":1001,"opaque":51}"#, b""))
        .await;
    let resp = raw.next().await.expect("echo");
    assert_eq!(resp.opaque, 51, "the oneway request must get no response");

    // Through the client API too.
    f.client
        .invoke_oneway(&f.addr, RemotingCommand::new_request(ONEWAY_SINK), RPC)
        .await
        .unwrap();
    f.event(|e| matches!(e, Event::Oneway(_)).then_some(()))
        .await;
}

#[tokio::test]
async fn server_request_before_response_reaches_client_hook() {
    let f = start(ServerConfig::default()).await;
    let mut inbound = f.client.request_channel(8);
    let resp = f
        .client
        .invoke(
            &f.addr,
            RemotingCommand::new_request(NOTIFY_THEN_ANSWER),
            RPC,
        )
        .await
        .expect("response completes");
    assert_eq!(resp.code, response::SUCCESS);
    // The notify was read (and handed to the hook) before the response completed the call.
    let notify = inbound
        .try_recv()
        .expect("notify delivered before the response");
    assert_eq!(notify.request.code, request::NOTIFY_CONSUMER_IDS_CHANGED);
    assert!(notify.request.is_oneway());
    assert_eq!(notify.addr, f.addr);
    let header = NotifyConsumerIdsChangedRequestHeader::from_command(&notify.request).unwrap();
    assert_eq!(header.consumer_group, "cg");
}

#[tokio::test]
async fn parked_request_answered_later_while_others_proceed() {
    let mut f = start(ServerConfig::default()).await;
    let client = f.client.clone();
    let addr = f.addr.clone();
    let pull = tokio::spawn(async move {
        client
            .invoke(
                &addr,
                RemotingCommand::new_request(PARK).with_ext("queueId", "3"),
                RPC,
            )
            .await
    });
    let (conn, parked) = f
        .event(|e| match e {
            Event::Parked(c, r) => Some((c, r)),
            _ => None,
        })
        .await;
    // The connection is not blocked by the parked request.
    f.assert_echo_works("while parked").await;
    assert!(!pull.is_finished());
    conn.send(RemotingCommand::response_to(
        &parked,
        response::PULL_NOT_FOUND,
        None,
    ))
    .await
    .unwrap();
    let resp = tokio::time::timeout(BOUND, pull)
        .await
        .expect("bounded")
        .expect("task")
        .expect("answered");
    assert_eq!(resp.code, response::PULL_NOT_FOUND);
}

#[tokio::test]
async fn client_times_out_and_keeps_working() {
    let mut f = start(ServerConfig::default()).await;
    let err = f
        .client
        .invoke(
            &f.addr,
            RemotingCommand::new_request(PARK),
            Duration::from_millis(200),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Timeout { .. }), "{err}");
    let (conn, parked) = f
        .event(|e| match e {
            Event::Parked(c, r) => Some((c, r)),
            _ => None,
        })
        .await;
    // A late answer to the abandoned request is ignored.
    conn.send(RemotingCommand::success_to(&parked))
        .await
        .unwrap();
    f.assert_echo_works("after timeout").await;
}

#[tokio::test]
async fn client_reconnects_after_the_server_closes_its_connection() {
    let mut f = start(ServerConfig::default()).await;
    f.assert_echo_works("first").await;
    let first = f
        .event(|e| match e {
            Event::Opened(id, _) => Some(id),
            _ => None,
        })
        .await;
    let err = f
        .client
        .invoke(&f.addr, RemotingCommand::new_request(CLOSE_ME), RPC)
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::ConnectionClosed { .. }), "{err}");
    f.closed(first).await;
    f.assert_echo_works("reconnected").await;
    let second = f
        .event(|e| match e {
            Event::Opened(id, _) => Some(id),
            _ => None,
        })
        .await;
    assert_ne!(first, second);
}

#[tokio::test]
async fn busy_connection_answers_system_busy() {
    let mut f = start(ServerConfig {
        max_in_flight_per_connection: 1,
        ..ServerConfig::default()
    })
    .await;
    let client = f.client.clone();
    let addr = f.addr.clone();
    let held = tokio::spawn(async move {
        client
            .invoke(&addr, RemotingCommand::new_request(HOLD), RPC)
            .await
    });
    f.event(|e| matches!(e, Event::Holding).then_some(())).await;
    let busy = f
        .client
        .invoke(&f.addr, RemotingCommand::new_request(ECHO), RPC)
        .await
        .unwrap();
    assert_eq!(busy.code, response::SYSTEM_BUSY);
    f.release.notify_one();
    let resp = tokio::time::timeout(BOUND, held)
        .await
        .expect("bounded")
        .expect("task")
        .expect("answered");
    assert_eq!(resp.code, response::SUCCESS);
    f.assert_echo_works("after").await;
}

#[tokio::test]
async fn server_invokes_client_on_its_connection() {
    let mut f = start(ServerConfig::default()).await;
    let mut inbound = f.client.request_channel(8);
    f.assert_echo_works("connect").await;
    let client = f.client.clone();
    let addr = f.addr.clone();
    let park = tokio::spawn(async move {
        client
            .invoke(&addr, RemotingCommand::new_request(PARK), RPC)
            .await
    });
    let (conn, parked) = f
        .event(|e| match e {
            Event::Parked(c, r) => Some((c, r)),
            _ => None,
        })
        .await;
    let park_conn = conn.clone();
    let server_side = tokio::spawn(async move {
        conn.invoke(
            RemotingCommand::new_request(request::GET_CONSUMER_RUNNING_INFO),
            RPC,
        )
        .await
    });
    let req = tokio::time::timeout(BOUND, inbound.recv())
        .await
        .expect("bounded")
        .expect("request");
    assert_eq!(req.request.code, request::GET_CONSUMER_RUNNING_INFO);
    req.reply(RemotingCommand::new_response(response::SUCCESS, None).with_body(&b"info"[..]))
        .await
        .unwrap();
    let resp = tokio::time::timeout(BOUND, server_side)
        .await
        .expect("bounded")
        .expect("task")
        .expect("answered");
    assert_eq!(&resp.body[..], b"info");
    park_conn
        .send(RemotingCommand::success_to(&parked))
        .await
        .unwrap();
    let parked_resp = tokio::time::timeout(BOUND, park)
        .await
        .expect("bounded")
        .expect("task")
        .expect("answered");
    assert_eq!(parked_resp.code, response::SUCCESS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_connections_and_reports_them() {
    let mut f = start(ServerConfig::default()).await;
    f.assert_echo_works("before").await;
    let id = f
        .event(|e| match e {
            Event::Opened(id, _) => Some(id),
            _ => None,
        })
        .await;
    let (mut raw, raw_id) = Raw::connect(&mut f).await;
    tokio::time::timeout(BOUND, f.server.shutdown())
        .await
        .expect("shutdown completes");
    // on_close ran for both connections before shutdown returned.
    let mut closed = Vec::new();
    while let Ok(ev) = f.events.try_recv() {
        if let Event::Closed(c) = ev {
            closed.push(c);
        }
    }
    assert!(
        closed.contains(&id) && closed.contains(&raw_id),
        "{closed:?}"
    );
    raw.expect_closed().await;
    let err = f
        .client
        .invoke(&f.addr, RemotingCommand::new_request(ECHO), RPC)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Connect { .. } | ClientError::ConnectionClosed { .. }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn many_pipelined_requests_are_correlated() {
    let f = start(ServerConfig::default()).await;
    let mut tasks = Vec::new();
    for i in 0..200 {
        let client = f.client.clone();
        let addr = f.addr.clone();
        tasks.push(tokio::spawn(async move {
            let tag = format!("req-{i}");
            let resp = client
                .invoke(
                    &addr,
                    RemotingCommand::new_request(ECHO).with_ext("tag", tag.clone()),
                    RPC,
                )
                .await
                .expect("answered");
            assert_eq!(resp.ext("tag"), Some(tag.as_str()));
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
}

/// An echo request frame for a raw connection.
fn echo_frame(opaque: i32) -> Vec<u8> {
    let mut req = RemotingCommand::new_request(ECHO);
    req.opaque = opaque;
    let mut out = BytesMut::new();
    encode_with(&req, SerializeType::Json, &mut out).expect("encode");
    out.to_vec()
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_idle_timeout_and_a_talking_one_is_kept() {
    // Wide enough that a loaded 2-core machine never holds an echo past it.
    let idle = Duration::from_secs(2);
    let mut f = start(ServerConfig {
        idle_timeout: Some(idle),
        ..ServerConfig::default()
    })
    .await;
    let (mut silent, silent_id) = Raw::connect(&mut f).await;
    let (mut talking, talking_id) = Raw::connect(&mut f).await;
    let started = tokio::time::Instant::now();
    // The talking connection sends well inside the timeout, for more than twice the timeout.
    let mut opaque = 0;
    while started.elapsed() < idle * 5 / 2 {
        opaque += 1;
        talking.send(&echo_frame(opaque)).await;
        let answer = talking
            .next()
            .await
            .expect("the talking connection is answered");
        assert_eq!(answer.opaque, opaque);
        tokio::time::sleep(idle / 8).await;
    }
    f.closed(silent_id).await;
    silent.expect_closed().await;
    assert!(
        started.elapsed() >= idle,
        "closed after {:?}, before the idle timeout",
        started.elapsed()
    );
    talking.send(&echo_frame(opaque + 1)).await;
    assert_eq!(talking.next().await.map(|a| a.opaque), Some(opaque + 1));
    // Silent from now on, it goes too.
    f.closed(talking_id).await;
    talking.expect_closed().await;
}

#[tokio::test]
async fn at_the_cap_a_newcomer_takes_the_place_of_a_connection_that_never_sent_a_request() {
    let mut f = start(ServerConfig {
        max_connections: 2,
        ..ServerConfig::default()
    })
    .await;
    let (mut active, _) = Raw::connect(&mut f).await;
    active.send(&echo_frame(1)).await;
    assert_eq!(active.next().await.map(|a| a.opaque), Some(1));
    let (mut silent, silent_id) = Raw::connect(&mut f).await;
    let (mut newcomer, _) = Raw::connect(&mut f).await;
    silent.expect_closed().await;
    f.closed(silent_id).await;
    newcomer.send(&echo_frame(2)).await;
    assert_eq!(newcomer.next().await.map(|a| a.opaque), Some(2));
    active.send(&echo_frame(3)).await;
    assert_eq!(active.next().await.map(|a| a.opaque), Some(3));
}

#[tokio::test]
async fn at_the_cap_with_every_connection_just_active_a_newcomer_is_closed_on_accept() {
    let mut f = start(ServerConfig {
        max_connections: 2,
        ..ServerConfig::default()
    })
    .await;
    let (mut first, _) = Raw::connect(&mut f).await;
    let (mut second, _) = Raw::connect(&mut f).await;
    for (raw, opaque) in [(&mut first, 1), (&mut second, 2)] {
        raw.send(&echo_frame(opaque)).await;
        assert_eq!(raw.next().await.map(|a| a.opaque), Some(opaque));
    }
    let mut third = TcpStream::connect(&f.addr).await.expect("connect");
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(BOUND, third.read(&mut byte))
        .await
        .expect("the server neither closed nor kept the third connection");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "third connection got data: {read:?}"
    );
    first.send(&echo_frame(7)).await;
    assert_eq!(first.next().await.map(|a| a.opaque), Some(7));
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_sends_no_request_is_closed_at_the_handshake_deadline() {
    let mut f = start(ServerConfig {
        handshake_timeout: Some(Duration::from_secs(3)),
        ..ServerConfig::default()
    })
    .await;
    let started = tokio::time::Instant::now();
    let (mut silent, id) = Raw::connect(&mut f).await;
    silent.expect_closed().await;
    f.closed(id).await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(3) && waited < Duration::from_secs(4),
        "closed after {waited:?}"
    );
    f.assert_echo_works("after").await;
}

#[tokio::test(start_paused = true)]
async fn a_frame_trickled_a_byte_at_a_time_is_cut_at_the_frame_deadline() {
    let mut f = start(ServerConfig {
        frame_timeout: Some(Duration::from_secs(5)),
        ..ServerConfig::default()
    })
    .await;
    let (mut slow, id) = Raw::connect(&mut f).await;
    slow.send(&echo_frame(1)).await;
    assert_eq!(slow.next().await.map(|a| a.opaque), Some(1));
    // A byte a second: the connection is never idle, and its frame never ends.
    let started = tokio::time::Instant::now();
    slow.send(&1024i32.to_be_bytes()).await;
    let mut closed_after = None;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if slow.stream.write_all(b"x").await.is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        let mut byte = [0u8; 1];
        if let Ok(Ok(0)) =
            tokio::time::timeout(Duration::from_millis(1), slow.stream.read(&mut byte)).await
        {
            closed_after = Some(started.elapsed());
            break;
        }
    }
    f.closed(id).await;
    let closed_after = closed_after.expect("the trickling connection was never closed");
    assert!(
        closed_after >= Duration::from_secs(5) && closed_after < Duration::from_secs(7),
        "closed after {closed_after:?}"
    );
}
