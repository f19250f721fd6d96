use crate::common;

use common::*;
use skiff::actors::logic::pull_from_where::ConsumeFromWhere;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

#[test]
fn produce_consume_restart_resumes_from_committed_offset() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = TestNode::open_in(dir.path())?;
        produce(&node, "TopicA", "m", 200, 20).await?;
        let seen: SeenLog = Rc::new(RefCell::new(Seen::default()));
        let consumer = node.start_consumer(
            node.push_consumer("group-a")
                .subscribe("TopicA", "*")
                .consume_from(ConsumeFromWhere::FirstOffset)
                .listener(recording_listener(&seen)),
        )?;
        advance_until("200 consumed", Duration::from_secs(30), || {
            seen.borrow().distinct() == 200
        })
        .await?;
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok::<_, anyhow::Error>(())
    })?;
    run_paused(|| async {
        let node = TestNode::open_in(dir.path())?;
        produce(&node, "TopicA", "n", 50, 10).await?;
        let seen: SeenLog = Rc::new(RefCell::new(Seen::default()));
        let consumer = node.start_consumer(
            node.push_consumer("group-a")
                .subscribe("TopicA", "*")
                .consume_from(ConsumeFromWhere::FirstOffset)
                .listener(recording_listener(&seen)),
        )?;
        advance_until("50 new consumed", Duration::from_secs(30), || {
            seen.borrow().distinct() == 50
        })
        .await?;
        advance(Duration::from_secs(5)).await;
        {
            let seen = seen.borrow();
            assert_eq!(
                seen.total(),
                50,
                "only the new messages arrive after restart"
            );
            assert!(seen.bodies.iter().all(|b| b.starts_with("n-")));
        }
        consumer.shutdown().await?;
        node.shutdown().await?;
        Ok(())
    })
}
