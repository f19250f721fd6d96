//! Transactional sends through the embedded node: `Producer::send_in_transaction` and the
//! transaction checker, with the broker's check-backs on paused time.

use crate::common;

use common::*;
use skiff::actors::logic::pull_from_where::ConsumeFromWhere;
use skiff::actors::logic::transaction::{TransactionResolution, TRANSACTION_ID};
use skiff::actors::producer::OutgoingMessage;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

const TOPIC: &str = "Payments";

fn open_transactional_node(dir: &std::path::Path) -> anyhow::Result<TestNode> {
    let mut config = node_config(dir);
    config.transaction_timeout = Duration::from_millis(1_000);
    config.transaction_check_interval = Duration::from_millis(500);
    Ok(TestNode::open_config(config)?)
}

#[test]
fn committed_and_checked_back_commits_are_delivered_once_and_rollbacks_never() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_transactional_node(dir.path())?;
        let producer = node.producer("payments-tx");
        // The checker decides by body; it records what it was asked about.
        let checked: Rc<RefCell<BTreeMap<String, usize>>> = Rc::default();
        let asked = checked.clone();
        producer
            .register_transaction_checker(move |half| {
                let body = String::from_utf8_lossy(&half.body).into_owned();
                *asked.borrow_mut().entry(body.clone()).or_default() += 1;
                let decision = match body.as_str() {
                    "unknown-then-commit" => TransactionResolution::Commit,
                    "unknown-then-rollback" => TransactionResolution::Rollback,
                    _ => TransactionResolution::Unknown,
                };
                async move { decision }
            })
            .await?;

        let mut transaction_ids = BTreeMap::new();
        for (body, local) in [
            ("commit", TransactionResolution::Commit),
            ("rollback", TransactionResolution::Rollback),
            ("unknown-then-commit", TransactionResolution::Unknown),
            ("unknown-then-rollback", TransactionResolution::Unknown),
        ] {
            let sent = producer
                .send_in_transaction(OutgoingMessage::new(TOPIC, body), |half| {
                    assert!(!half.offset_msg_id.is_empty(), "the half was stored");
                    async move { local }
                })
                .await?;
            assert_eq!(sent.resolution, local);
            transaction_ids.insert(body.to_owned(), sent.transaction_id);
        }

        let seen: SeenLog = Rc::new(RefCell::new(Seen::default()));
        let consumer = node.start_consumer(
            node.push_consumer("payments-reader")
                .subscribe(TOPIC, "*")
                .consume_from(ConsumeFromWhere::FirstOffset)
                .listener(recording_listener(&seen)),
        )?;
        advance_until(
            "the committed and the checked-back commit delivered",
            Duration::from_secs(30),
            || seen.borrow().distinct() == 2,
        )
        .await?;
        // Several more check rounds: nothing else may arrive, and the resolved halves are not
        // asked about again.
        advance(Duration::from_secs(10)).await;
        {
            let seen = seen.borrow();
            let mut bodies = seen.bodies.clone();
            bodies.sort();
            assert_eq!(bodies, ["commit", "unknown-then-commit"]);
            for message in &seen.messages {
                let body = String::from_utf8_lossy(message.body()).into_owned();
                assert_eq!(
                    message.property(TRANSACTION_ID),
                    transaction_ids.get(&body).map(String::as_str),
                    "{body} carries its transaction id"
                );
            }
        }
        let checked = checked.borrow().clone();
        assert_eq!(checked.get("unknown-then-commit"), Some(&1), "{checked:?}");
        assert_eq!(
            checked.get("unknown-then-rollback"),
            Some(&1),
            "{checked:?}"
        );
        assert!(
            !checked.contains_key("commit") && !checked.contains_key("rollback"),
            "halves resolved by their sender are never checked back: {checked:?}"
        );

        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn a_transactional_send_without_a_checker_is_refused_before_anything_is_stored(
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_transactional_node(dir.path())?;
        let producer = node.producer("no-checker");
        let mut ran = false;
        let refused = producer
            .send_in_transaction(OutgoingMessage::new(TOPIC, "x"), |_| {
                ran = true;
                async { TransactionResolution::Commit }
            })
            .await;
        let error = refused.expect_err("refused without a checker");
        assert!(error.to_string().contains("transaction checker"), "{error}");
        assert!(!ran, "the local transaction did not run");
        node.shutdown().await?;
        Ok(())
    })
}
