//! The workload on Redis Streams: 4 streams, XADD pipelined 100 per round trip, one group and
//! consumer reading with XREADGROUP COUNT 100 over the 4 streams, XACK of every id, done when
//! XPENDING is empty for every stream and everything was read.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;

use crate::resp::Resp;
use crate::workload::{now_ns, progress, LatencyRecorder, LatencySummary, Pacer, PayloadGen, Workload};

const GROUP: &[u8] = b"bench-group";
const CONSUMER: &[u8] = b"bench-consumer";
const FIELD: &[u8] = b"p";

fn stream_name(q: usize) -> Vec<u8> {
    format!("bench-{q}").into_bytes()
}

pub struct RedisDriver {
    addr: String,
    streams: Vec<Vec<u8>>,
}

impl RedisDriver {
    pub async fn setup(addr: &str, w: &Workload) -> Result<RedisDriver> {
        let mut c = Resp::connect(addr).await?;
        let streams: Vec<Vec<u8>> = (0..w.queues).map(stream_name).collect();
        for s in &streams {
            c.call(&[b"XGROUP", b"CREATE", s, GROUP, b"0", b"MKSTREAM"])
                .await?
                .ok()
                .context("XGROUP CREATE")?;
        }
        Ok(RedisDriver {
            addr: addr.to_owned(),
            streams,
        })
    }

    /// Produces messages `first..first+count` in one pipeline of XADDs and waits for every id.
    async fn produce_batch(
        &self,
        c: &mut Resp,
        gen: &mut PayloadGen,
        first: u64,
        count: usize,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        let stamp = now_ns();
        for i in first..first + count as u64 {
            buf.clear();
            gen.append(buf, i, stamp);
            let s = &self.streams[(i % self.streams.len() as u64) as usize];
            c.cmd(&[b"XADD", s, b"*", FIELD, buf]);
        }
        let n = c.flush().await?;
        for _ in 0..n {
            c.read().await?.into_bulk().context("XADD")?;
        }
        Ok(())
    }

    pub async fn produce(&self, w: &Workload) -> Result<Duration> {
        let mut c = Resp::connect(&self.addr).await?;
        let mut gen = PayloadGen::new(0x5eed, w.payload);
        let mut buf = Vec::with_capacity(w.payload);
        let start = Instant::now();
        let mut i = 0u64;
        while i < w.messages {
            let n = (w.messages - i).min(w.batch as u64) as usize;
            self.produce_batch(&mut c, &mut gen, i, n, &mut buf).await?;
            i += n as u64;
            progress().add(n as u64);
        }
        Ok(start.elapsed())
    }

    /// One fetch round: XACKs for what the last round read, then XREADGROUP COUNT `fetch` over
    /// every stream, in one round trip. Returns the payloads read.
    async fn fetch_round(
        &self,
        c: &mut Resp,
        acks: &mut [Vec<Bytes>],
        fetch: usize,
        block_ms: Option<u64>,
    ) -> Result<Vec<(usize, Bytes)>> {
        let mut ack_cmds = 0;
        for (q, ids) in acks.iter_mut().enumerate() {
            if ids.is_empty() {
                continue;
            }
            let mut args: Vec<&[u8]> = vec![b"XACK", &self.streams[q], GROUP];
            args.extend(ids.iter().map(|b| b.as_ref()));
            c.cmd(&args);
            ack_cmds += 1;
        }
        let count = fetch.to_string();
        let block = block_ms.map(|b| b.to_string());
        let mut args: Vec<&[u8]> = vec![b"XREADGROUP", b"GROUP", GROUP, CONSUMER, b"COUNT", count.as_bytes()];
        if let Some(b) = &block {
            args.push(b"BLOCK");
            args.push(b.as_bytes());
        }
        args.push(b"STREAMS");
        for s in &self.streams {
            args.push(s);
        }
        for _ in &self.streams {
            args.push(b">");
        }
        c.cmd(&args);
        c.flush().await?;
        for (q, ids) in acks.iter_mut().enumerate() {
            if ids.is_empty() {
                continue;
            }
            let n = c.read().await?.as_int().context("XACK")?;
            if n as usize != ids.len() {
                bail!("XACK on stream {q} acknowledged {n} of {}", ids.len());
            }
            ids.clear();
            ack_cmds -= 1;
        }
        debug_assert_eq!(ack_cmds, 0);
        let reply = c.read().await?;
        let mut out = Vec::new();
        for per_stream in reply.into_array().context("XREADGROUP")? {
            let mut kv = per_stream.into_array()?.into_iter();
            let name = kv.next().context("stream name")?.into_bulk()?;
            let q = self
                .streams
                .iter()
                .position(|s| s[..] == name[..])
                .context("unknown stream in reply")?;
            let entries = kv.next().context("entries")?.into_array()?;
            for e in entries {
                let mut e = e.into_array()?.into_iter();
                let id = e.next().context("entry id")?.into_bulk()?;
                let fields = e.next().context("entry fields")?.into_array()?;
                let payload = match fields.into_iter().nth(1) {
                    Some(v) => v.into_bulk()?,
                    None => bail!("entry without payload"),
                };
                acks[q].push(id);
                out.push((q, payload));
            }
        }
        Ok(out)
    }

    async fn nothing_pending(&self, c: &mut Resp) -> Result<bool> {
        for s in &self.streams {
            let summary = c.call(&[b"XPENDING", s, GROUP]).await?.into_array()?;
            let pending = summary.first().context("XPENDING summary")?.as_int()?;
            if pending != 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    pub async fn consume(&self, w: &Workload) -> Result<Duration> {
        let mut c = Resp::connect(&self.addr).await?;
        let mut acks: Vec<Vec<Bytes>> = vec![Vec::new(); self.streams.len()];
        let start = Instant::now();
        let mut read = 0u64;
        while read < w.messages {
            let got = self.fetch_round(&mut c, &mut acks, w.fetch, None).await?;
            if got.is_empty() {
                bail!("XREADGROUP returned nothing after {read} of {} messages", w.messages);
            }
            read += got.len() as u64;
            progress().add(got.len() as u64);
        }
        // The last XACKs ride with one more (empty) read.
        let extra = self.fetch_round(&mut c, &mut acks, w.fetch, None).await?;
        if !extra.is_empty() {
            bail!("read {} messages more than produced", extra.len());
        }
        if !self.nothing_pending(&mut c).await? {
            bail!("XPENDING not empty after acknowledging everything");
        }
        Ok(start.elapsed())
    }

    pub async fn latency(&self, w: &Workload) -> Result<LatencySummary> {
        let total = w.latency_messages();
        let mut pacer = Pacer::new(w.latency_rate, total);
        let warmup = now_ns() + w.latency_warmup_secs * 1_000_000_000;
        let mut pc = Resp::connect(&self.addr).await?;
        let mut cc = Resp::connect(&self.addr).await?;
        let producer = async {
            let mut gen = PayloadGen::new(0x1a7e, w.payload);
            let mut buf = Vec::with_capacity(w.payload);
            // Sequence numbers continue after the throughput run so queues stay i mod 4.
            while let Some((first, n)) = pacer.next(w.batch).await {
                self.produce_batch(&mut pc, &mut gen, w.messages + first, n, &mut buf)
                    .await?;
            }
            anyhow::Ok(pacer.start().elapsed())
        };
        let consumer = async {
            let mut rec = LatencyRecorder::new(warmup, total);
            let mut acks: Vec<Vec<Bytes>> = vec![Vec::new(); self.streams.len()];
            let deadline = Instant::now() + Duration::from_secs(w.latency_secs + 30);
            while rec.received < total {
                if Instant::now() > deadline {
                    bail!("latency run: received {} of {total}", rec.received);
                }
                let got = self.fetch_round(&mut cc, &mut acks, w.fetch, Some(100)).await?;
                let now = now_ns();
                for (_, p) in &got {
                    rec.record(p, now);
                }
                progress().add(got.len() as u64);
            }
            self.fetch_round(&mut cc, &mut acks, w.fetch, None).await?;
            Ok(rec)
        };
        let (p, rec) = tokio::join!(producer, consumer);
        let mut summary = rec?.summary();
        summary.produce_secs = p?.as_secs_f64();
        Ok(summary)
    }
}
