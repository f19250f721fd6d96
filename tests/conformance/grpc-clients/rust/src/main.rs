//! gRPC smoke with the official RocketMQ 5 Rust client (crate `rocketmq` 5.0.0).
//!
//!     grpc-smoke-rust --endpoint HOST:PORT --topic T --group G [--tls on|off] [--count 10]
//!
//! Same scenario as ../python/smoke.py: the topic (NORMAL, 4 queues) and the group exist already;
//! a SimpleConsumer starts (the crate's SimpleConsumer subscribes per `receive` call, with a tag
//! filter), then a Producer; COUNT messages (tag, two keys, a user property) are sent, received
//! with receive + ack (10 s invisible duration) and checked (message id, topic, body, tag, keys,
//! property, delivery attempt); then it keeps receiving until 13 s after the last message came in
//! and expects nothing. Prints PASS/FAIL; exit 0 iff it passed.
//!
//! Endpoints: `ClientOption::set_access_url("HOST:PORT")` is dialled for QueryRoute and the
//! Telemetry stream; sends, receives and acks go to the endpoints in the route's queues.
//! TLS: `set_enable_tls(true)` only turns the URL into `https://...`; the crate builds its tonic
//! endpoint without a TLS config (a "TODO tls config" in session.rs), so tonic (feature
//! tls-roots) connects with rustls, the platform roots (rustls-native-certs: SSL_CERT_FILE) and
//! the dialled host checked against the certificate's SANs (never its CN). grpc-clients.sh sets
//! SSL_CERT_FILE to the server's own certificate and runs --tls on only when that certificate
//! names 127.0.0.1 in a SAN.

use std::collections::{HashMap, HashSet};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rocketmq::conf::{ClientOption, LoggingFormat, ProducerOption, SimpleConsumerOption};
use rocketmq::model::common::{FilterExpression, FilterType};
use rocketmq::model::message::MessageBuilder;
use rocketmq::{Producer, SimpleConsumer};

const INVISIBLE: Duration = Duration::from_secs(10);
const QUIET_AFTER: Duration = Duration::from_secs(13);
const TAG: &str = "smoke-tag";

/// A receive whose long poll outlived its gRPC deadline: the crate uses one duration for both,
/// so a broker answering at the very end of the poll (Apache's proxy under load) can miss the
/// deadline by a hair. Up to three are retried as an empty answer; a message popped by such a
/// call is redelivered after its invisible time, which the checks below still see.
fn missed_deadline(err: &rocketmq::error::ClientError, misses: &mut u32) -> bool {
    if *misses >= 3 || !format!("{err:?}").contains("Timeout expired") {
        return false;
    }
    *misses += 1;
    log(&format!("receive missed its deadline ({} of 3 tolerated); receiving again", misses));
    true
}

fn log(msg: &str) {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() % 86400;
    eprintln!("[rust {:02}:{:02}:{:02}] {msg}", secs / 3600, secs / 60 % 60, secs % 60);
}

struct Args {
    endpoint: String,
    topic: String,
    group: String,
    tls: bool,
    count: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut m: HashMap<String, String> = HashMap::new();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let k = pair[0].trim_start_matches("--").to_string();
        let v = pair.get(1).ok_or(format!("{} needs a value", pair[0]))?.clone();
        m.insert(k, v);
    }
    let need = |k: &str| m.get(k).cloned().ok_or(format!("--{k} is required"));
    Ok(Args {
        endpoint: need("endpoint")?,
        topic: need("topic")?,
        group: need("group")?,
        tls: m.get("tls").map(|s| s == "on").unwrap_or(false),
        count: m.get("count").map(|s| s.parse().unwrap()).unwrap_or(10),
    })
}

async fn run(a: &Args, problems: &mut Vec<String>) -> Result<(), String> {
    let e = |what: &'static str| move |err: rocketmq::error::ClientError| format!("{what}: {err:?}");
    let mut client_option = ClientOption::default();
    client_option.set_access_url(a.endpoint.clone());
    client_option.set_enable_tls(a.tls);
    client_option.set_timeout(Duration::from_secs(10));
    // Also the gRPC deadline of ReceiveMessage (the crate uses it for both).
    client_option.set_long_polling_timeout(Duration::from_secs(10));

    let mut consumer_option = SimpleConsumerOption::default();
    consumer_option.set_consumer_group(a.group.clone());
    consumer_option.set_topics(vec![a.topic.clone()]);
    consumer_option.set_logging_format(LoggingFormat::Terminal);
    let mut consumer = SimpleConsumer::new(consumer_option, client_option.clone()).map_err(e("consumer new"))?;
    consumer.start().await.map_err(e("consumer start"))?;
    log(&format!("consumer started ({}, tls {})", a.endpoint, a.tls));

    let mut producer_option = ProducerOption::default();
    producer_option.set_topics(vec![a.topic.clone()]);
    producer_option.set_logging_format(LoggingFormat::Terminal);
    let mut producer = Producer::new(producer_option, client_option).map_err(e("producer new"))?;
    producer.start().await.map_err(e("producer start"))?;
    log("producer started");

    let run = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis();
    let mut sent: HashMap<String, (usize, Vec<u8>)> = HashMap::new();
    for i in 0..a.count {
        let body = format!("rust smoke {run} #{i}").into_bytes();
        let msg = MessageBuilder::builder()
            .set_topic(a.topic.clone())
            .set_tag(TAG)
            .set_keys(vec![format!("rskey-{run}-{i}"), format!("rskey-{run}")])
            .set_properties(HashMap::from([("smoke-index", i.to_string())]))
            .set_body(body.clone())
            .build()
            .map_err(e("build message"))?;
        let r = producer.send(msg).await.map_err(e("send"))?;
        let id = r.message_id().to_string();
        if id.is_empty() {
            problems.push(format!("send #{i}: empty message id"));
        }
        if sent.insert(id.clone(), (i, body)).is_some() {
            problems.push(format!("send #{i}: message id {id} repeated"));
        }
    }
    log(&format!("sent {}", sent.len()));

    let filter = FilterExpression::new(FilterType::Tag, TAG);
    let mut deadline_misses = 0;
    let mut got: HashSet<String> = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last_msg_at = Instant::now();
    while got.len() < sent.len() && Instant::now() < deadline {
        let msgs = match consumer.receive_with(a.topic.clone(), &filter, 32, INVISIBLE).await {
            Ok(msgs) => msgs,
            Err(err) if missed_deadline(&err, &mut deadline_misses) => continue,
            Err(err) => return Err(e("receive")(err)),
        };
        for m in msgs {
            last_msg_at = Instant::now();
            let id = m.message_id().to_string();
            if got.contains(&id) {
                problems.push(format!("{id}: received twice before the ack window"));
            }
            match sent.get(&id) {
                None => problems.push(format!("unexpected message {id} body {:?}", String::from_utf8_lossy(m.body()))),
                Some((i, body)) => {
                    let keys: HashSet<&str> = m.keys().iter().map(|s| s.as_str()).collect();
                    let (k1, k2) = (format!("rskey-{run}-{i}"), format!("rskey-{run}"));
                    let want_keys: HashSet<&str> = [k1.as_str(), k2.as_str()].into_iter().collect();
                    let checks: Vec<(&str, String, String)> = vec![
                        ("topic", m.topic().to_string(), a.topic.clone()),
                        ("body", String::from_utf8_lossy(m.body()).into(), String::from_utf8_lossy(body).into()),
                        ("tag", format!("{:?}", m.tag()), format!("{:?}", Some(TAG))),
                        ("keys", format!("{keys:?}"), format!("{want_keys:?}")),
                        (
                            "property smoke-index",
                            format!("{:?}", m.properties().get("smoke-index")),
                            format!("{:?}", Some(i.to_string())),
                        ),
                        ("delivery attempt", m.delivery_attempt().to_string(), "1".into()),
                    ];
                    for (what, have, want) in checks {
                        if what == "keys" && keys != want_keys || what != "keys" && have != want {
                            problems.push(format!("#{i} {id}: {what} {have}, want {want}"));
                        }
                    }
                }
            }
            got.insert(id);
            consumer.ack(&m).await.map_err(e("ack"))?;
        }
    }
    log(&format!("received and acked {}", got.len()));
    let mut missing: Vec<usize> = sent.iter().filter(|(id, _)| !got.contains(*id)).map(|(_, (i, _))| *i).collect();
    missing.sort();
    if !missing.is_empty() {
        problems.push(format!("not received within 60 s: #{missing:?}"));
    }

    while Instant::now() < last_msg_at + QUIET_AFTER {
        let msgs = match consumer.receive_with(a.topic.clone(), &filter, 32, INVISIBLE).await {
            Ok(msgs) => msgs,
            Err(err) if missed_deadline(&err, &mut deadline_misses) => continue,
            Err(err) => return Err(e("receive")(err)),
        };
        for m in msgs {
            problems.push(format!(
                "after ack: {} came again (attempt {}, body {:?})",
                m.message_id(),
                m.delivery_attempt(),
                String::from_utf8_lossy(m.body())
            ));
            consumer.ack(&m).await.map_err(e("ack"))?;
        }
    }
    log("quiet window over");
    if let Err(err) = producer.shutdown().await {
        log(&format!("producer shutdown: {err:?}"));
    }
    if let Err(err) = consumer.shutdown().await {
        log(&format!("consumer shutdown: {err:?}"));
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let a = match parse_args() {
        Ok(a) => a,
        Err(err) => {
            eprintln!("usage: grpc-smoke-rust --endpoint HOST:PORT --topic T --group G [--tls on|off] [--count N]: {err}");
            return ExitCode::from(2);
        }
    };
    let mut problems = Vec::new();
    if let Err(err) = run(&a, &mut problems).await {
        problems.push(err);
    }
    let name = format!("rust.{}", if a.tls { "tls" } else { "plain" });
    if problems.is_empty() {
        println!(
            "PASS {name}: {} sent, received with tag/keys/property, acked, none back in {} s",
            a.count,
            QUIET_AFTER.as_secs()
        );
        ExitCode::SUCCESS
    } else {
        for p in &problems {
            println!("  {p}");
        }
        println!("FAIL {name}: {} problem(s), first: {}", problems.len(), problems[0]);
        ExitCode::FAILURE
    }
}
