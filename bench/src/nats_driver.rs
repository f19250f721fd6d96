//! The workload on NATS JetStream: one file-backed stream with 4 subjects, publishes with
//! their acks awaited per batch of 100, one durable pull consumer with explicit ack per subject
//! (the 4 together are the group), fetching at most 100 per subject, every message acked; done
//! when every consumer reports num_ack_pending = 0 and num_pending = 0.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;

use crate::workload::{now_ns, progress, LatencyRecorder, LatencySummary, Pacer, PayloadGen, Workload};

const STREAM: &str = "BENCH";

fn subject(q: usize) -> String {
    format!("bench.{q}")
}

pub struct NatsDriver {
    js: jetstream::Context,
    consumers: Vec<consumer::PullConsumer>,
    subjects: Vec<String>,
}

fn e(err: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("{err}")
}

impl NatsDriver {
    pub async fn setup(addr: &str, w: &Workload) -> Result<NatsDriver> {
        let client = async_nats::connect(addr).await.map_err(e).context("connecting to nats")?;
        let js = jetstream::new(client);
        let subjects: Vec<String> = (0..w.queues).map(subject).collect();
        let stream = js
            .create_stream(stream::Config {
                name: STREAM.to_owned(),
                subjects: subjects.clone(),
                storage: stream::StorageType::File,
                ..Default::default()
            })
            .await
            .map_err(e)
            .context("creating the stream")?;
        let mut consumers = Vec::new();
        for (q, s) in subjects.iter().enumerate() {
            let name = format!("bench-group-{q}");
            let c = stream
                .create_consumer(consumer::pull::Config {
                    durable_name: Some(name),
                    filter_subject: s.clone(),
                    ack_policy: consumer::AckPolicy::Explicit,
                    deliver_policy: consumer::DeliverPolicy::All,
                    ..Default::default()
                })
                .await
                .map_err(e)
                .context("creating a consumer")?;
            consumers.push(c);
        }
        Ok(NatsDriver {
            js,
            consumers,
            subjects,
        })
    }

    async fn produce_batch(&self, gen: &mut PayloadGen, first: u64, count: usize) -> Result<()> {
        let stamp = now_ns();
        let mut acks = Vec::with_capacity(count);
        for i in first..first + count as u64 {
            let payload = gen.make(i, stamp);
            let s = &self.subjects[(i % self.subjects.len() as u64) as usize];
            acks.push(self.js.publish(s.clone(), payload.into()).await.map_err(e)?);
        }
        for a in acks {
            a.await.map_err(e).context("publish ack")?;
        }
        Ok(())
    }

    pub async fn produce(&self, w: &Workload) -> Result<Duration> {
        let mut gen = PayloadGen::new(0x5eed, w.payload);
        let start = Instant::now();
        let mut i = 0u64;
        while i < w.messages {
            let n = (w.messages - i).min(w.batch as u64) as usize;
            self.produce_batch(&mut gen, i, n).await?;
            i += n as u64;
            progress().add(n as u64);
        }
        Ok(start.elapsed())
    }

    async fn nothing_pending(&self) -> Result<bool> {
        for c in &self.consumers {
            let mut c = c.clone();
            let info = c.info().await.map_err(e)?;
            if info.num_ack_pending != 0 || info.num_pending != 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    async fn wait_nothing_pending(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.nothing_pending().await? {
            if Instant::now() > deadline {
                bail!("jetstream consumers still report pending messages after 30 s");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(())
    }

    pub async fn consume(&self, w: &Workload) -> Result<Duration> {
        let per_queue = |q: usize| (w.messages + (w.queues - 1 - q) as u64) / w.queues as u64;
        let start = Instant::now();
        let tasks = self.consumers.iter().enumerate().map(|(q, c)| async move {
            let want = per_queue(q);
            let mut got = 0u64;
            while got < want {
                let mut batch = c
                    .fetch()
                    .max_messages(w.fetch)
                    .messages()
                    .await
                    .map_err(e)?;
                let mut n = 0u64;
                while let Some(m) = batch.next().await {
                    let m = m.map_err(e)?;
                    m.ack().await.map_err(e)?;
                    n += 1;
                }
                got += n;
                progress().add(n);
            }
            anyhow::Ok(())
        });
        for r in futures::future::join_all(tasks).await {
            r?;
        }
        self.wait_nothing_pending().await?;
        Ok(start.elapsed())
    }

    pub async fn latency(&self, w: &Workload) -> Result<LatencySummary> {
        let total = w.latency_messages();
        let mut pacer = Pacer::new(w.latency_rate, total);
        let warmup = now_ns() + w.latency_warmup_secs * 1_000_000_000;
        let producer = async {
            let mut gen = PayloadGen::new(0x1a7e, w.payload);
            while let Some((first, n)) = pacer.next(w.batch).await {
                self.produce_batch(&mut gen, w.messages + first, n).await?;
            }
            anyhow::Ok(pacer.start().elapsed())
        };
        let consumer = async {
            let mut rec = LatencyRecorder::new(warmup, total);
            let mut streams = Vec::new();
            for c in &self.consumers {
                streams.push(
                    c.stream()
                        .max_messages_per_batch(w.fetch)
                        .expires(Duration::from_secs(1))
                        .messages()
                        .await
                        .map_err(e)?,
                );
            }
            let mut all = futures::stream::select_all(streams);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(w.latency_secs + 30);
            while rec.received < total {
                let m = match tokio::time::timeout_at(deadline, all.next()).await {
                    Ok(Some(Ok(m))) => m,
                    Ok(Some(Err(err))) => bail!("latency run: {err}"),
                    Ok(None) => bail!("latency run: consumer streams ended"),
                    Err(_) => bail!("latency run: received {} of {total}", rec.received),
                };
                rec.record(&m.payload, now_ns());
                m.ack().await.map_err(e)?;
                progress().add(1);
            }
            anyhow::Ok(rec)
        };
        let (p, rec) = tokio::join!(producer, consumer);
        let mut summary = rec?.summary();
        summary.produce_secs = p?.as_secs_f64();
        self.wait_nothing_pending().await?;
        Ok(summary)
    }
}
