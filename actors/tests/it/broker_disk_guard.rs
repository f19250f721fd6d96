//! The disk guard: past `disk_full_ratio` sends are refused with [`BrokerError::Refused(Refused::DiskFull)`] (the
//! wire answers SERVICE_NOT_AVAILABLE), nothing acknowledged is lost, and sends are accepted
//! again once a measurement shows space. The meter is a test's, so no file system is filled.

use skiff_actors::refused::Refused;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use skiff_actors::broker::retention::{DiskMeter, RetentionConfig};
use skiff_actors::broker::BrokerConfig;
use skiff_actors::broker_api::{BrokerApi, BrokerError, SendRequest};
use skiff_actors::testsuite::*;
use skiff_storage::store::FlushPolicy;

const TOPIC: &str = "Guarded";

#[test]
fn sends_are_refused_while_the_disk_is_full_and_accepted_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    // Per mille in use, as the meter reports it.
    let used = Arc::new(AtomicU64::new(500));
    let reading = used.clone();
    let interval = Duration::from_secs(10);
    let config = BrokerConfig {
        retention: RetentionConfig {
            cleanup_interval: interval,
            meter: DiskMeter::new(move |_| Ok(reading.load(Ordering::SeqCst) as f64 / 1000.0)),
            ..RetentionConfig::default()
        },
        ..BrokerConfig::default()
    };
    run_paused(|| async {
        let broker = start_broker_measured(dir.path(), config, FlushPolicy::Async);
        let send = |body: &str| {
            BrokerApi::send_messages(
                &broker,
                SendRequest::new(vec![message(TOPIC, 0, body, None)]),
            )
        };
        send("before").await.expect("accepted at 50%");

        used.store(950, Ordering::SeqCst);
        advance(interval).await;
        match send("while-full").await {
            Err(BrokerError::Refused(Refused::DiskFull {
                used_ratio,
                full_ratio,
            })) => {
                assert!((used_ratio - 0.95).abs() < 1e-9, "{used_ratio}");
                assert_eq!(full_ratio, 0.90);
            }
            other => panic!("a send on a full disk answered {other:?}"),
        }

        used.store(700, Ordering::SeqCst);
        advance(interval).await;
        send("after").await.expect("accepted once space returned");

        // What was acknowledged is all there, and the refused send is not.
        assert_eq!(broker.reader().max_offset(TOPIC, 0), 2);
        let read = broker
            .reader()
            .read(TOPIC, 0, 0, 32, 1 << 20, None)
            .expect("read");
        let bodies: Vec<String> = skiff_storage::message::decode_records(read.records)
            .expect("decode")
            .into_iter()
            .map(|m| String::from_utf8_lossy(&m.body).into_owned())
            .collect();
        assert_eq!(bodies, ["before", "after"]);
        broker.shutdown().await.unwrap();
    });
}
