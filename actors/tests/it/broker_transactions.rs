//! END_TRANSACTION records a commit without flushing its state: the committed copy in the log
//! is the durable record. A restart that lost the state (a crash before sled's own flush) finds
//! the copy and treats the half as committed, so it is neither checked back nor committed twice.

use skiff_actors::broker::transaction::Observe;
use skiff_actors::broker::{BrokerConfig, BrokerHandle};
use skiff_actors::broker_api::{BrokerApi, EndTransactionRequest, PullStatus, SendRequest};
use skiff_actors::logic::transaction::{
    TransactionResolution, HALF_CONSUMER_GROUP, PRODUCER_GROUP, TRANSACTION_PREPARED_TYPE, TRAN_MSG,
};
use skiff_actors::testsuite::*;
use skiff_storage::message::decode_records;
use skiff_storage::metadata::open_db;
use skiff_storage::offset_table::{OffsetTable, SledOffsetTable};
use skiff_storage::transaction_states::TRANSACTION_STATES_TREE;

const TOPIC: &str = "TxnTopic";
const PRODUCER: &str = "txn-pg";

fn half(body: &str) -> skiff_storage::message::MessageToAppend {
    let mut message = with_property(
        with_property(message(TOPIC, 0, body, None), TRAN_MSG, "true"),
        PRODUCER_GROUP,
        PRODUCER,
    );
    message.sys_flag |= TRANSACTION_PREPARED_TYPE;
    message
}

async fn end(broker: &BrokerHandle, queue_offset: u64, physical_offset: u64, commit: bool) {
    broker
        .end_transaction(EndTransactionRequest {
            producer_group: PRODUCER.into(),
            tran_state_table_offset: queue_offset,
            commit_log_offset: physical_offset,
            resolution: if commit {
                TransactionResolution::Commit
            } else {
                TransactionResolution::Rollback
            },
            from_transaction_check: false,
            msg_id: String::new(),
            transaction_id: None,
            broker_name: "skiff".into(),
        })
        .await
        .unwrap();
}

async fn delivered(broker: &BrokerHandle) -> Vec<String> {
    let response = broker.pull(pull("g", TOPIC, 0, 0)).await.unwrap();
    if response.status != PullStatus::Found {
        return Vec::new();
    }
    decode_records(response.records)
        .unwrap()
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect()
}

#[test]
fn a_commit_whose_state_was_lost_is_recovered_from_its_copy_and_never_checked_back() {
    let dir = tempfile::tempdir().unwrap();
    let halves = run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let sent = BrokerApi::send_messages(
            &broker,
            SendRequest::new(vec![half("committed"), half("rolled")]),
        )
        .await
        .unwrap();
        end(&broker, sent[0].queue_offset, sent[0].physical_offset, true).await;
        end(
            &broker,
            sent[1].queue_offset,
            sent[1].physical_offset,
            false,
        )
        .await;
        assert_eq!(delivered(&broker).await, ["committed"]);
        // A commit is recorded once a flush covers its copy; the crash below is the one that
        // comes after both resolutions were recorded and the cursor moved past them.
        let mut recorded = false;
        for _ in 0..100 {
            let snapshot = broker.addrs().transactions.send(Observe).await.unwrap();
            recorded = snapshot.committed == 1 && snapshot.rolled_back == 1;
            if recorded {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(recorded, "both resolutions recorded");
        broker.shutdown().await.unwrap();
        sent
    });
    // What a crash before sled's flush leaves: neither state recorded, and the half-queue cursor
    // (written after the states) not moved past them.
    {
        let db = open_db(meta_dir(dir.path())).unwrap();
        let tree = db.open_tree(TRANSACTION_STATES_TREE).unwrap();
        for half in &halves {
            tree.remove(half.physical_offset.to_be_bytes()).unwrap();
        }
        let mut offsets = SledOffsetTable::open(&db, meta_dir(dir.path())).unwrap();
        assert_eq!(offsets.remove_group(HALF_CONSUMER_GROUP).unwrap(), 1);
        db.flush().unwrap();
    }
    run_paused(|| async {
        let broker = start_broker(dir.path(), BrokerConfig::default());
        let snapshot = broker.addrs().transactions.send(Observe).await.unwrap();
        assert_eq!(
            snapshot.pending,
            vec![halves[1].queue_offset],
            "only the rolled-back half, whose log holds no trace, is pending again"
        );
        // Its check-back may roll it back again; the commit is never stored a second time.
        end(
            &broker,
            halves[1].queue_offset,
            halves[1].physical_offset,
            false,
        )
        .await;
        assert_eq!(delivered(&broker).await, ["committed"]);
        broker.shutdown().await.unwrap();
    });
}
