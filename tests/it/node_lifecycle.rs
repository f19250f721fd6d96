//! A node releases everything it holds: after `shutdown` (or a drop) every actor has stopped and
//! every file, lock and sled database under its directory is closed, so a new node opens on the
//! same directory at once, in the same process, embedded or with `skiff serve`'s listener on.
use crate::common;

use common::*;
use skiff::actors::logic::pull_from_where::ConsumeFromWhere;
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

/// Descriptors this process holds on files under `dir`. Other tests of the binary run in
/// parallel on their own directories, so only paths under `dir` count.
fn open_files_under(dir: &Path) -> anyhow::Result<Vec<String>> {
    let dir = dir.canonicalize()?;
    let mut held = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd")? {
        // A descriptor closed between listing and reading its link is simply gone.
        if let Ok(target) = std::fs::read_link(entry?.path()) {
            if target.starts_with(&dir) {
                held.push(target.display().to_string());
            }
        }
    }
    Ok(held)
}

/// Produces `count` messages with bodies `<prefix>-i` and consumes them with one group; fails
/// unless exactly those arrive (an earlier round's messages were committed and do not return).
async fn produce_and_consume(node: &skiff::Node, prefix: &str, count: usize) -> anyhow::Result<()> {
    produce(node, "LifecycleTopic", prefix, count, 10).await?;
    let seen: SeenLog = Rc::new(RefCell::new(Seen::default()));
    let consumer = node.start_consumer(
        node.push_consumer("lifecycle-group")
            .subscribe("LifecycleTopic", "*")
            .consume_from(ConsumeFromWhere::FirstOffset)
            .listener(recording_listener(&seen)),
    )?;
    advance_until(
        "the round's messages consumed",
        Duration::from_secs(30),
        || seen.borrow().distinct() >= count,
    )
    .await?;
    consumer.shutdown().await?;
    let seen = seen.borrow();
    anyhow::ensure!(
        seen.bodies
            .iter()
            .all(|body| body.starts_with(&format!("{prefix}-"))),
        "an earlier round's message came back: {:?}",
        seen.bodies
    );
    Ok(())
}

#[test]
fn an_embedded_node_reopens_on_its_directory_after_shutdown_many_times() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        for round in 0..5 {
            let node = open_node(dir.path())?;
            anyhow::ensure!(
                !open_files_under(dir.path())?.is_empty(),
                "an open node holds its files"
            );
            produce_and_consume(&node, &format!("round{round}"), 20).await?;
            node.shutdown().await?;
            let held = open_files_under(dir.path())?;
            anyhow::ensure!(
                held.is_empty(),
                "round {round}: still open after shutdown: {held:?}"
            );
        }
        Ok(())
    })
}

#[test]
fn a_served_node_reopens_on_its_directory_after_shutdown_many_times() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        for round in 0..3 {
            let mut config = node_config(dir.path());
            config.listen = "127.0.0.1:0".parse()?;
            config.metrics_listen = "127.0.0.1:0".to_owned();
            let serving = skiff::serve::start(config).await?;
            produce_and_consume(serving.node(), &format!("served{round}"), 20).await?;
            serving.shutdown().await?;
            let held = open_files_under(dir.path())?;
            anyhow::ensure!(
                held.is_empty(),
                "round {round}: still open after shutdown: {held:?}"
            );
        }
        Ok(())
    })
}

#[test]
fn a_dropped_node_releases_its_directory_once_the_arbiter_runs() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        produce_and_consume(&node, "before-drop", 10).await?;
        drop(node);
        // The drop starts the same shutdown `shutdown()` awaits; it runs on this arbiter.
        let mut turns = 0;
        while !open_files_under(dir.path())?.is_empty() {
            anyhow::ensure!(turns < 10_000, "files still open after the drop's shutdown");
            tokio::task::yield_now().await;
            turns += 1;
        }
        let node = open_node(dir.path())?;
        produce_and_consume(&node, "after-drop", 10).await?;
        node.shutdown().await?;
        Ok(())
    })
}

#[test]
fn a_second_node_on_an_open_directory_is_refused_with_every_cause_told() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    run_paused(|| async {
        let node = open_node(dir.path())?;
        let Err(refused) = open_node(dir.path()) else {
            anyhow::bail!("a second node opened on a directory in use");
        };
        let mut causes = Vec::new();
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(refused.as_ref());
        while let Some(error) = cause {
            causes.push(error.to_string());
            cause = error.source();
        }
        anyhow::ensure!(causes.len() > 1, "no cause given: {causes:?}");
        anyhow::ensure!(
            causes.iter().all(|c| !c.trim().is_empty()),
            "an empty cause in {causes:?}"
        );
        node.shutdown().await?;
        Ok(())
    })
}
