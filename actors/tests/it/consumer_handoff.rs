//! A rebalance hands queues off between two embedded push consumers of one group, and the
//! consumer that gave queues away keeps no trace of them in its dispatcher.

use skiff_actors::broker::BrokerConfig;
use skiff_actors::broker_api::{BrokerApi, SendRequest};
use skiff_actors::consumer::push_consumer::PushConsumer;
use skiff_actors::consumer::{ConsumeStatus, Listener};
use skiff_actors::testsuite::*;
use skiff_storage::metadata::TopicConfig;
use std::rc::Rc;
use std::time::Duration;

const GROUP: &str = "g";
const TOPIC: &str = "T";

fn consumer(client_id: &str, broker: &Rc<dyn BrokerApi>) -> PushConsumer {
    let client_id = client_id.to_string();
    PushConsumer::builder(GROUP)
        .subscribe(TOPIC, "*")
        .listener(Listener::concurrent(|_| async { ConsumeStatus::SUCCESS }))
        .configure(move |config| config.client_id = client_id)
        .start(broker.clone())
        .expect("start consumer")
}

#[test]
fn a_handed_off_queue_is_forgotten_by_the_dispatcher() {
    let dir = tempfile::tempdir().unwrap();
    run_paused(|| async {
        let handle = start_broker(dir.path(), BrokerConfig::default());
        // The topic exists before its consumers start: a route query creates nothing.
        handle.put_topic(&TopicConfig::new(TOPIC, 4)).unwrap();
        let broker: Rc<dyn BrokerApi> = Rc::new(handle.clone());
        let first = consumer("c1", &broker);
        advance(Duration::from_secs(3)).await;
        // Sent once the queues are positioned (a new group starts at the end of each queue).
        let messages = (0..8)
            .map(|i| message(TOPIC, i % 4, &format!("m{i}"), None))
            .collect();
        broker
            .send_messages(SendRequest::new(messages))
            .await
            .expect("send");
        advance(Duration::from_secs(1)).await;
        let alone = first.observe().await.unwrap();
        assert_eq!(
            alone.coordinator.assigned.len(),
            5,
            "4 queues of T and the retry queue"
        );
        assert_eq!(alone.dispatcher.consumed_ok, 8);

        let second = consumer("c2", &broker);
        advance(Duration::from_secs(5)).await;
        let shared = first.observe().await.unwrap();
        assert_eq!(
            shared.coordinator.assigned.len(),
            3,
            "{:?}",
            shared.coordinator
        );
        assert_eq!(shared.coordinator.handoffs, 2);
        assert_eq!(
            shared.dispatcher.cancelled_queues, 0,
            "the stopped process queues are forgotten"
        );
        assert_eq!(
            second.observe().await.unwrap().coordinator.assigned.len(),
            2
        );

        second.shutdown().await.unwrap();
        first.shutdown().await.unwrap();
        handle.shutdown().await.unwrap();
    });
}
