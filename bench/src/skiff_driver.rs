//! The workload on skiff and on Apache RocketMQ, spoken as a RocketMQ client speaks it (skiff's
//! own remoting client and header codecs, JSON headers), to the broker address the route of
//! `TBW102` named (see startup.rs; skiff is its own name server):
//!
//! * setup: UPDATE_AND_CREATE_TOPIC `bench` with 4 read/write queues (Apache takes it; skiff
//!   does not serve admin requests, so there the first send auto-creates the topic from
//!   `TBW102` with defaultTopicQueueNums 4), then HEART_BEAT.
//! * produce: each batch of 100 messages (i..i+100) is split by queue (i mod 4) into 4
//!   SEND_BATCH_MESSAGE (320) requests of 25 messages, sent together on one connection; the
//!   next batch starts when all 4 are answered SUCCESS. Every message carries a `UNIQ_KEY`
//!   property as real clients set it. (`--skiff-send single`: SEND_MESSAGE_V2 (310), one request
//!   per message, 100 in flight per batch.)
//! * consume: HEART_BEAT registers group `bench-group` (CLUSTERING, CONSUME_FROM_FIRST_OFFSET,
//!   subscription `*`); one pull loop per queue, all on one connection, PULL_MESSAGE with
//!   maxMsgNums 100, FLAG_SUSPEND | FLAG_SUBSCRIPTION, and FLAG_COMMIT_OFFSET carrying the
//!   offset consumed so far (Java's push consumer's piggybacked commit); after the last pull an
//!   acknowledged UPDATE_CONSUMER_OFFSET per queue; the run ends when QUERY_CONSUMER_OFFSET
//!   answers committed = max offset (GET_MAX_OFFSET) for all 4 queues. Before the clock starts,
//!   GET_MAX_OFFSET must add up to N on the 4 queues (Apache's consume queues are built from
//!   its commit log asynchronously, a few ms behind the last send's ack).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use bytes::Bytes;

use skiff::remoting::body::{
    ConsumeFromWhere, ConsumeType, ConsumerData, HeartbeatData, JsonBody, MessageModel,
    ProducerData, SubscriptionData,
};
use skiff::remoting::codes::{pull_sys_flag, request, response, AUTO_CREATE_TOPIC_KEY};
use skiff::remoting::headers::{
    CustomHeader, GetMaxOffsetRequestHeader, OffsetResponseHeader, PullMessageRequestHeader,
    PullMessageResponseHeader, QueryConsumerOffsetRequestHeader, SendMessageRequestHeader,
    UpdateConsumerOffsetRequestHeader,
};
use skiff::remoting::{ClientConfig, ConnectionHandle, RemotingClient, RemotingCommand};

use crate::workload::{now_ns, progress, LatencyRecorder, LatencySummary, Pacer, PayloadGen, Workload};

const TOPIC: &str = "bench";
const GROUP: &str = "bench-group";
const PRODUCER_GROUP: &str = "bench-producer";
pub const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendMode {
    /// SEND_BATCH_MESSAGE (320), one request per queue per batch.
    Batch,
    /// SEND_MESSAGE_V2 (310), one request per message.
    Single,
}

pub struct SkiffDriver {
    addr: String,
    client: RemotingClient,
    queues: usize,
    mode: SendMode,
    /// Every message carries a `KEYS` property too ([`Workload::keys`]).
    keys: bool,
    client_id: String,
}

fn millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Client message ids the way `MessageClientIDSetter` shapes them: 32 hex chars.
fn uniq_key(out: &mut Vec<u8>, seq: u64) {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let prefix = PREFIX.get_or_init(|| format!("7F000001{:04X}{:08X}", std::process::id() & 0xFFFF, 0x5eed_u32));
    out.extend_from_slice(prefix.as_bytes());
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for shift in (0..12).rev() {
        out.push(HEX[((seq >> (shift * 4)) & 0xF) as usize]);
    }
}

/// Properties string of one message: `UNIQ_KEY\x01<id>\x02`, with `keys` first
/// `KEYS\x01order-<seq>\x02`.
pub fn properties(out: &mut Vec<u8>, seq: u64, keys: bool) {
    if keys {
        out.extend_from_slice(b"KEYS\x01order-");
        out.extend_from_slice(seq.to_string().as_bytes());
        out.push(2);
    }
    out.extend_from_slice(b"UNIQ_KEY\x01");
    uniq_key(out, seq);
    out.push(2);
}

/// Appends one message in `MessageDecoder.encodeMessage` form (a batch body record).
pub fn encode_batch_record(out: &mut Vec<u8>, gen: &mut PayloadGen, seq: u64, stamp: u64, keys: bool) {
    let start = out.len();
    out.extend_from_slice(&[0u8; 4]); // total size, patched below
    out.extend_from_slice(&0i32.to_be_bytes()); // magic
    out.extend_from_slice(&0i32.to_be_bytes()); // body crc
    out.extend_from_slice(&0i32.to_be_bytes()); // flag
    out.extend_from_slice(&(gen.len() as i32).to_be_bytes());
    gen.append(out, seq, stamp);
    let props_at = out.len();
    out.extend_from_slice(&[0u8; 2]);
    properties(out, seq, keys);
    let props_len = (out.len() - props_at - 2) as i16;
    out[props_at..props_at + 2].copy_from_slice(&props_len.to_be_bytes());
    let total = (out.len() - start) as i32;
    out[start..start + 4].copy_from_slice(&total.to_be_bytes());
}

/// Walks a pull body (stored-message records back to back) and calls `f` with each body.
pub fn for_each_body(buf: &[u8], mut f: impl FnMut(&[u8])) -> Result<usize> {
    let mut pos = 0;
    let mut n = 0;
    while pos < buf.len() {
        let rec = &buf[pos..];
        if rec.len() < 4 {
            bail!("truncated record header at {pos}");
        }
        let total = i32::from_be_bytes(rec[0..4].try_into().unwrap());
        if total <= 0 || total as usize > rec.len() {
            bail!("bad record size {total} at {pos}");
        }
        let rec = &rec[..total as usize];
        let sys_flag = i32::from_be_bytes(rec[36..40].try_into()?);
        let born_host = if sys_flag & 0x10 != 0 { 20 } else { 8 };
        let store_host = if sys_flag & 0x20 != 0 { 20 } else { 8 };
        let body_len_at = 48 + born_host + 8 + store_host + 4 + 8;
        let body_len =
            i32::from_be_bytes(rec.get(body_len_at..body_len_at + 4).context("short record")?.try_into()?) as usize;
        let body = rec
            .get(body_len_at + 4..body_len_at + 4 + body_len)
            .context("short body")?;
        f(body);
        pos += total as usize;
        n += 1;
    }
    Ok(n)
}

/// HEART_BEAT as a RocketMQ client sends it: one producer group and at most one consumer group
/// (clustering, from the first offset, subscribing to `*` of one topic).
pub async fn heartbeat(
    conn: &ConnectionHandle,
    client_id: &str,
    producer_group: &str,
    consumer: Option<(&str, &str)>,
) -> Result<()> {
    let hb = HeartbeatData {
        client_id: client_id.to_owned(),
        producer_data_set: vec![ProducerData {
            group_name: producer_group.to_owned(),
        }],
        consumer_data_set: consumer
            .map(|(group, topic)| ConsumerData {
                group_name: group.to_owned(),
                consume_type: ConsumeType::ConsumePassively,
                message_model: MessageModel::Clustering,
                consume_from_where: ConsumeFromWhere::ConsumeFromFirstOffset,
                subscription_data_set: vec![SubscriptionData {
                    topic: topic.to_owned(),
                    sub_string: "*".to_owned(),
                    ..Default::default()
                }],
                unit_mode: false,
            })
            .into_iter()
            .collect(),
        heartbeat_fingerprint: 0,
        without_sub: false,
    };
    let req = RemotingCommand::new_request(request::HEART_BEAT).with_body(hb.encode());
    let resp = conn.invoke(req, TIMEOUT).await.map_err(e)?;
    check(&resp, "HEART_BEAT")
}

/// The send header of one message (or batch) to `topic`:`queue`, auto-creating the topic with
/// `queues` queues.
pub fn send_header(topic: &str, queues: usize, queue: usize, batch: bool, props: Option<String>) -> SendMessageRequestHeader {
    SendMessageRequestHeader {
        producer_group: PRODUCER_GROUP.to_owned(),
        topic: topic.to_owned(),
        default_topic: AUTO_CREATE_TOPIC_KEY.to_owned(),
        default_topic_queue_nums: queues as i32,
        queue_id: queue as i32,
        sys_flag: 0,
        born_timestamp: millis(),
        flag: 0,
        properties: props,
        reconsume_times: Some(0),
        unit_mode: Some(false),
        max_reconsume_times: None,
        batch: Some(batch),
        broker_name: None,
    }
}

/// A long-polling PULL_MESSAGE header of `group` on `topic`:`queue` from `offset`, committing
/// `committed` on the way (the push consumer's piggybacked commit) once it is past 0.
pub fn pull_header(
    group: &str,
    topic: &str,
    queue: usize,
    offset: i64,
    committed: i64,
    fetch: usize,
    suspend_ms: i64,
) -> PullMessageRequestHeader {
    let mut sys_flag = pull_sys_flag::SUSPEND | pull_sys_flag::SUBSCRIPTION;
    if committed > 0 {
        sys_flag |= pull_sys_flag::COMMIT_OFFSET;
    }
    PullMessageRequestHeader {
        consumer_group: group.to_owned(),
        topic: topic.to_owned(),
        queue_id: queue as i32,
        queue_offset: offset,
        max_msg_nums: fetch as i32,
        sys_flag,
        commit_offset: committed,
        suspend_timeout_millis: suspend_ms,
        subscription: Some("*".to_owned()),
        sub_version: 0,
        expression_type: Some("TAG".to_owned()),
        ..Default::default()
    }
}

pub fn check(resp: &RemotingCommand, what: &str) -> Result<()> {
    if resp.code != response::SUCCESS {
        bail!(
            "{what}: response code {} ({})",
            resp.code,
            resp.remark.as_deref().unwrap_or("")
        );
    }
    Ok(())
}

pub fn e(err: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("{err}")
}

impl SkiffDriver {
    pub async fn setup(addr: &str, w: &Workload, mode: SendMode) -> Result<SkiffDriver> {
        let client = RemotingClient::new(ClientConfig::default());
        let d = SkiffDriver {
            addr: addr.to_owned(),
            client,
            queues: w.queues,
            mode,
            keys: w.keys,
            client_id: format!("127.0.0.1@bench-{}", std::process::id()),
        };
        // Create the topic with 4 queues when the broker takes admin requests; otherwise the
        // first send auto-creates it (defaultTopicQueueNums = 4).
        let conn = d.conn().await?;
        let create = RemotingCommand::new_request(request::UPDATE_AND_CREATE_TOPIC)
            .with_ext("topic", TOPIC)
            .with_ext("defaultTopic", AUTO_CREATE_TOPIC_KEY)
            .with_ext("readQueueNums", w.queues.to_string())
            .with_ext("writeQueueNums", w.queues.to_string())
            .with_ext("perm", "6")
            .with_ext("topicFilterType", "SINGLE_TAG")
            .with_ext("topicSysFlag", "0")
            .with_ext("order", "false");
        let _ = conn.invoke(create, TIMEOUT).await.map_err(e)?;
        d.heartbeat(&conn).await?;
        Ok(d)
    }

    async fn conn(&self) -> Result<ConnectionHandle> {
        self.client.connection_to(&self.addr, TIMEOUT).await.map_err(e)
    }

    async fn heartbeat(&self, conn: &ConnectionHandle) -> Result<()> {
        heartbeat(conn, &self.client_id, PRODUCER_GROUP, Some((GROUP, TOPIC))).await
    }

    fn send_header(&self, queue: usize, batch: bool, props: Option<String>) -> SendMessageRequestHeader {
        send_header(TOPIC, self.queues, queue, batch, props)
    }

    /// Sends messages `first..first+count`, split by queue, and waits for every answer.
    async fn produce_batch(
        &self,
        conn: &ConnectionHandle,
        gen: &mut PayloadGen,
        first: u64,
        count: usize,
    ) -> Result<()> {
        let stamp = now_ns();
        let q = self.queues as u64;
        let mut reqs = Vec::new();
        match self.mode {
            SendMode::Batch => {
                let mut bodies: Vec<Vec<u8>> = (0..self.queues)
                    .map(|_| Vec::with_capacity(count / self.queues * 180 + 180))
                    .collect();
                for i in first..first + count as u64 {
                    encode_batch_record(&mut bodies[(i % q) as usize], gen, i, stamp, self.keys);
                }
                for (queue, body) in bodies.into_iter().enumerate() {
                    if body.is_empty() {
                        continue;
                    }
                    let header = self.send_header(queue, true, None);
                    reqs.push(
                        RemotingCommand::new_request(request::SEND_BATCH_MESSAGE)
                            .with_ext_fields(header.to_v2_ext())
                            .with_body(body),
                    );
                }
            }
            SendMode::Single => {
                for i in first..first + count as u64 {
                    let mut props = Vec::with_capacity(48);
                    properties(&mut props, i, self.keys);
                    let header = self.send_header(
                        (i % q) as usize,
                        false,
                        Some(String::from_utf8(props).expect("ascii")),
                    );
                    reqs.push(
                        RemotingCommand::new_request(request::SEND_MESSAGE_V2)
                            .with_ext_fields(header.to_v2_ext())
                            .with_body(gen.make(i, stamp)),
                    );
                }
            }
        }
        let answers = futures::future::join_all(reqs.into_iter().map(|r| conn.invoke(r, TIMEOUT))).await;
        for a in answers {
            check(&a.map_err(e)?, "send")?;
        }
        Ok(())
    }

    pub async fn produce(&self, w: &Workload) -> Result<Duration> {
        let conn = self.conn().await?;
        let mut gen = PayloadGen::new(0x5eed, w.payload);
        let start = Instant::now();
        let mut i = 0u64;
        while i < w.messages {
            let n = (w.messages - i).min(w.batch as u64) as usize;
            self.produce_batch(&conn, &mut gen, i, n).await?;
            i += n as u64;
            progress().add(n as u64);
        }
        Ok(start.elapsed())
    }

    async fn max_offset(&self, conn: &ConnectionHandle, queue: usize) -> Result<i64> {
        let h = GetMaxOffsetRequestHeader {
            topic: TOPIC.to_owned(),
            queue_id: queue as i32,
            ..Default::default()
        };
        let resp = conn
            .invoke(
                RemotingCommand::new_request(request::GET_MAX_OFFSET).with_ext_fields(h.to_ext()),
                TIMEOUT,
            )
            .await
            .map_err(e)?;
        check(&resp, "GET_MAX_OFFSET")?;
        Ok(OffsetResponseHeader::from_command(&resp).map_err(e)?.offset)
    }

    async fn committed_offset(&self, conn: &ConnectionHandle, queue: usize) -> Result<Option<i64>> {
        let h = QueryConsumerOffsetRequestHeader {
            consumer_group: GROUP.to_owned(),
            topic: TOPIC.to_owned(),
            queue_id: queue as i32,
            set_zero_if_not_found: Some(false),
        };
        let resp = conn
            .invoke(
                RemotingCommand::new_request(request::QUERY_CONSUMER_OFFSET)
                    .with_ext_fields(h.to_ext()),
                TIMEOUT,
            )
            .await
            .map_err(e)?;
        if resp.code == response::QUERY_NOT_FOUND {
            return Ok(None);
        }
        check(&resp, "QUERY_CONSUMER_OFFSET")?;
        Ok(Some(OffsetResponseHeader::from_command(&resp).map_err(e)?.offset))
    }

    async fn commit(&self, conn: &ConnectionHandle, queue: usize, offset: i64) -> Result<()> {
        let h = UpdateConsumerOffsetRequestHeader {
            consumer_group: GROUP.to_owned(),
            topic: TOPIC.to_owned(),
            queue_id: queue as i32,
            commit_offset: offset,
        };
        let resp = conn
            .invoke(
                RemotingCommand::new_request(request::UPDATE_CONSUMER_OFFSET)
                    .with_ext_fields(h.to_ext()),
                TIMEOUT,
            )
            .await
            .map_err(e)?;
        check(&resp, "UPDATE_CONSUMER_OFFSET")
    }

    /// Pulls one queue from `offset` to `until`, committing as it goes; calls `on_body` for
    /// every message body. Returns the final offset.
    async fn pull_queue(
        &self,
        conn: &ConnectionHandle,
        queue: usize,
        mut offset: i64,
        until: i64,
        fetch: usize,
        suspend_ms: i64,
        on_bodies: &mut dyn FnMut(&Bytes) -> Result<usize>,
    ) -> Result<i64> {
        let mut committed = offset;
        while offset < until {
            let h = pull_header(GROUP, TOPIC, queue, offset, committed, fetch, suspend_ms);
            let resp = conn
                .invoke(
                    RemotingCommand::new_request(request::PULL_MESSAGE).with_ext_fields(h.to_ext()),
                    Duration::from_millis(suspend_ms as u64) + TIMEOUT,
                )
                .await
                .map_err(e)?;
            let rh = PullMessageResponseHeader::from_command(&resp).ok();
            match resp.code {
                response::SUCCESS => {
                    let rh = rh.context("pull response header")?;
                    let n = on_bodies(&resp.body)?;
                    if n == 0 {
                        bail!("pull SUCCESS without messages on queue {queue} at {offset}");
                    }
                    offset = rh.next_begin_offset;
                    // Consumed: the next pull commits it.
                    committed = offset;
                    progress().add(n as u64);
                }
                response::PULL_NOT_FOUND | response::PULL_RETRY_IMMEDIATELY => {}
                response::PULL_OFFSET_MOVED => {
                    let rh = rh.context("pull response header")?;
                    bail!(
                        "PULL_OFFSET_MOVED on queue {queue} at {offset} (next {})",
                        rh.next_begin_offset
                    );
                }
                other => bail!(
                    "PULL_MESSAGE on queue {queue}: code {other} ({})",
                    resp.remark.as_deref().unwrap_or("")
                ),
            }
        }
        Ok(offset)
    }

    /// Acked commit of every queue, then waits until the broker reports committed = max.
    async fn commit_all_and_confirm(&self, conn: &ConnectionHandle, finals: &[i64]) -> Result<()> {
        let commits = finals
            .iter()
            .enumerate()
            .map(|(q, &off)| self.commit(conn, q, off));
        for r in futures::future::join_all(commits).await {
            r?;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut all = true;
            for q in 0..self.queues {
                let max = self.max_offset(conn, q).await?;
                let committed = self.committed_offset(conn, q).await?;
                if committed != Some(max) {
                    all = false;
                    if Instant::now() > deadline {
                        bail!("queue {q}: committed {committed:?}, max {max} after 30 s");
                    }
                }
            }
            if all {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    pub async fn consume(&self, w: &Workload) -> Result<Duration> {
        let conn = self.conn().await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let maxes = loop {
            let mut maxes = Vec::new();
            for q in 0..self.queues {
                maxes.push(self.max_offset(&conn, q).await?);
            }
            let total: i64 = maxes.iter().sum();
            if total as u64 == w.messages {
                break maxes;
            }
            if total as u64 > w.messages || Instant::now() > deadline {
                bail!("queues hold {total} messages (max offsets {maxes:?}), expected {}", w.messages);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let start = Instant::now();
        let loops = maxes.iter().enumerate().map(|(q, &max)| {
            let conn = conn.clone();
            async move {
                let mut count = |body: &Bytes| for_each_body(body, |_| {});
                self.pull_queue(&conn, q, 0, max, w.fetch, 15_000, &mut count).await
            }
        });
        let mut finals = Vec::new();
        for r in futures::future::join_all(loops).await {
            finals.push(r?);
        }
        self.commit_all_and_confirm(&conn, &finals).await?;
        Ok(start.elapsed())
    }

    pub async fn latency(&self, w: &Workload) -> Result<LatencySummary> {
        let total = w.latency_messages();
        let pconn = self.conn().await?;
        // Pulls hold their long polls on their own connection, as a consumer process would.
        let cclient = RemotingClient::new(ClientConfig::default());
        let cconn = cclient.connection_to(&self.addr, TIMEOUT).await.map_err(e)?;
        self.heartbeat(&cconn).await?;
        let q = self.queues as u64;
        let first_seq = w.messages;
        let mut starts = Vec::new();
        for queue in 0..self.queues {
            starts.push(self.max_offset(&cconn, queue).await?);
        }
        // Messages of the latency run per queue (sequence first_seq + k goes to its mod q).
        let per_queue: Vec<i64> = (0..q)
            .map(|queue| (first_seq..first_seq + total).filter(|s| s % q == queue).count() as i64)
            .collect();
        let mut pacer = Pacer::new(w.latency_rate, total);
        let warmup = now_ns() + w.latency_warmup_secs * 1_000_000_000;
        let producer = async {
            let mut gen = PayloadGen::new(0x1a7e, w.payload);
            while let Some((first, n)) = pacer.next(w.batch).await {
                self.produce_batch(&pconn, &mut gen, first_seq + first, n).await?;
            }
            anyhow::Ok(pacer.start().elapsed())
        };
        let received = AtomicU64::new(0);
        let rec = std::cell::RefCell::new(LatencyRecorder::new(warmup, total));
        let loops = (0..self.queues).map(|queue| {
            let cconn = cconn.clone();
            let (rec, received) = (&rec, &received);
            let (start, until) = (starts[queue], starts[queue] + per_queue[queue]);
            async move {
                let mut record = |body: &Bytes| {
                    let now = now_ns();
                    let mut r = rec.borrow_mut();
                    let n = for_each_body(body, |b| r.record(b, now))?;
                    received.fetch_add(n as u64, Ordering::Relaxed);
                    Ok(n)
                };
                self.pull_queue(&cconn, queue, start, until, w.fetch, 15_000, &mut record)
                    .await
            }
        });
        let consumer = async {
            let mut finals = Vec::new();
            for r in futures::future::join_all(loops).await {
                finals.push(r?);
            }
            self.commit_all_and_confirm(&cconn, &finals).await?;
            anyhow::Ok(())
        };
        let deadline = Duration::from_secs(w.latency_secs + 60);
        let (p, c) = tokio::time::timeout(deadline, async { tokio::join!(producer, consumer) })
            .await
            .map_err(|_| {
                anyhow!(
                    "latency run: received {} of {total} within {deadline:?}",
                    received.load(Ordering::Relaxed)
                )
            })?;
        let produce_secs = p?.as_secs_f64();
        c?;
        cclient.shutdown();
        let mut summary = rec.into_inner().summary();
        summary.produce_secs = produce_secs;
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_record_layout() {
        let mut gen = PayloadGen::new(1, 100);
        let mut out = Vec::new();
        encode_batch_record(&mut out, &mut gen, 5, 9, false);
        let total = i32::from_be_bytes(out[0..4].try_into().unwrap()) as usize;
        assert_eq!(total, out.len());
        let body_len = i32::from_be_bytes(out[16..20].try_into().unwrap()) as usize;
        assert_eq!(body_len, 100);
        let props_len = i16::from_be_bytes(out[120..122].try_into().unwrap()) as usize;
        assert_eq!(122 + props_len, total);
        assert_eq!(&out[122..131], b"UNIQ_KEY\x01");
        assert_eq!(out[total - 1], 2);
        assert_eq!(props_len, 9 + 32 + 1);
    }
}
