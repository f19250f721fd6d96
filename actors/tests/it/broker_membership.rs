//! Group membership (heartbeats, expiry, NOTIFY_CONSUMER_IDS_CHANGED, consumer list) and
//! orderly queue locks (`docs/offset-lifecycle.md` §1.B.1, §1.F).

use skiff_actors::broker::{membership, queue_locks, BrokerConfig};
use skiff_actors::broker_api::{BrokerError, MessageModel};
use skiff_actors::logic::delay::retry_topic;
use skiff_actors::logic::queue::MessageQueue;
use skiff_actors::refused::Refused;
use skiff_actors::testsuite::*;
use std::time::Duration;

const GROUP: &str = "g";
const TOPIC: &str = "T";

#[test]
fn heartbeat_expiry_notifies_members() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let a = notifier();
        let b = notifier();
        broker
            .heartbeat(heartbeat("client-a", GROUP, TOPIC, "*"), as_notifier(&a))
            .await
            .unwrap();
        assert_eq!(a.count(), 1, "a joining notifies the group, a included");
        broker
            .heartbeat(heartbeat("client-b", GROUP, TOPIC, "*"), as_notifier(&b))
            .await
            .unwrap();
        assert_eq!((a.count(), b.count()), (2, 1));
        // A repeated heartbeat changes nothing.
        broker
            .heartbeat(heartbeat("client-a", GROUP, TOPIC, "*"), as_notifier(&a))
            .await
            .unwrap();
        assert_eq!((a.count(), b.count()), (2, 1));

        // b keeps heartbeating every 30 s, a goes silent.
        for _ in 0..3 {
            advance(Duration::from_secs(30)).await;
            broker
                .heartbeat(heartbeat("client-b", GROUP, TOPIC, "*"), as_notifier(&b))
                .await
                .unwrap();
        }
        advance(Duration::from_secs(25)).await;
        broker
            .heartbeat(heartbeat("client-b", GROUP, TOPIC, "*"), as_notifier(&b))
            .await
            .unwrap();
        // 115 s after a's last heartbeat: still a member.
        assert_eq!(
            broker.consumer_list(GROUP).await.unwrap(),
            vec!["client-a", "client-b"]
        );
        assert_eq!(b.count(), 1);
        // The sweep after 120 s of silence drops a (sweeps run every 10 s).
        advance(Duration::from_secs(16)).await;
        assert_eq!(broker.consumer_list(GROUP).await.unwrap(), vec!["client-b"]);
        assert_eq!(b.count(), 2, "the remaining member was not told");
        assert_eq!(a.count(), 2, "the expired member was told");
        let snapshot = broker
            .addrs()
            .membership
            .send(membership::Observe)
            .await
            .unwrap();
        assert_eq!(snapshot.expired, 1);
        assert_eq!(snapshot.groups.len(), 1);
        assert_eq!(snapshot.groups[0].message_model, MessageModel::Clustering);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn consumer_list_is_sorted_and_empty_group_is_no_consumer() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let missing = broker.consumer_list(GROUP).await;
        assert!(
            matches!(
                missing,
                Err(BrokerError::Refused(Refused::NoConsumer { .. }))
            ),
            "{missing:?}"
        );
        let n = notifier();
        for id in ["c3", "c1", "c2"] {
            broker
                .heartbeat(heartbeat(id, GROUP, TOPIC, "*"), as_notifier(&n))
                .await
                .unwrap();
        }
        assert_eq!(
            broker.consumer_list(GROUP).await.unwrap(),
            vec!["c1", "c2", "c3"]
        );
        // Heartbeats create the group's retry topic.
        assert!(broker
            .topics()
            .unwrap()
            .iter()
            .any(|t| t.name == retry_topic("g")));
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn unregister_and_connection_close_notify_remaining_members() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let a = notifier();
        let b = notifier();
        let c = notifier();
        for (id, n) in [("a", &a), ("b", &b), ("c", &c)] {
            broker
                .heartbeat(heartbeat(id, GROUP, TOPIC, "*"), as_notifier(n))
                .await
                .unwrap();
        }
        let before = (a.count(), b.count(), c.count());
        broker.unregister("a", GROUP).await.unwrap();
        assert_eq!(broker.consumer_list(GROUP).await.unwrap(), vec!["b", "c"]);
        assert_eq!((b.count(), c.count()), (before.1 + 1, before.2 + 1));
        assert_eq!(a.count(), before.0);

        // c's connection drops: it leaves without unregistering.
        let removed = broker.connection_closed(&as_notifier(&c)).await.unwrap();
        assert_eq!(removed, 1);
        assert_eq!(broker.consumer_list(GROUP).await.unwrap(), vec!["b"]);
        assert_eq!(b.count(), before.1 + 2);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn queue_lock_expires_after_60s() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let queues = vec![
            MessageQueue::new(TOPIC, "skiff", 0),
            MessageQueue::new(TOPIC, "skiff", 1),
        ];
        let lock = |client: &'static str| broker.lock_queues(GROUP, client, queues.clone());
        assert_eq!(lock("a").await.unwrap(), queues);
        assert_eq!(lock("b").await.unwrap(), vec![], "held by a");
        advance(Duration::from_secs(30)).await;
        assert_eq!(lock("a").await.unwrap(), queues, "the holder renews");
        advance(Duration::from_secs(40)).await;
        assert_eq!(lock("b").await.unwrap(), vec![], "renewed 40 s ago");
        advance(Duration::from_secs(21)).await;
        assert_eq!(lock("b").await.unwrap(), queues, "61 s without renewal");
        assert_eq!(lock("a").await.unwrap(), vec![], "now b holds them");

        // Unlocking frees only what the caller holds.
        broker
            .unlock_queues(GROUP, "a", queues.clone())
            .await
            .unwrap();
        assert_eq!(lock("a").await.unwrap(), vec![]);
        broker
            .unlock_queues(GROUP, "b", vec![queues[0].clone()])
            .await
            .unwrap();
        assert_eq!(lock("a").await.unwrap(), vec![queues[0].clone()]);
        let snapshot = broker
            .addrs()
            .locks
            .send(queue_locks::Observe)
            .await
            .unwrap();
        let holders: Vec<_> = snapshot
            .locks
            .iter()
            .map(|l| (l.queue.queue_id, l.client_id.as_str()))
            .collect();
        assert_eq!(holders, vec![(0, "a"), (1, "b")]);
        broker.shutdown().await.unwrap();
    });
}

#[test]
fn leaving_the_group_releases_queue_locks() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let n = notifier();
        broker
            .heartbeat(heartbeat("a", GROUP, TOPIC, "*"), as_notifier(&n))
            .await
            .unwrap();
        let queues = vec![MessageQueue::new(TOPIC, "skiff", 0)];
        assert_eq!(
            broker
                .lock_queues(GROUP, "a", queues.clone())
                .await
                .unwrap(),
            queues
        );
        broker.unregister("a", GROUP).await.unwrap();
        settle().await;
        assert_eq!(
            broker
                .lock_queues(GROUP, "b", queues.clone())
                .await
                .unwrap(),
            queues
        );
        broker.shutdown().await.unwrap();
    });
}
