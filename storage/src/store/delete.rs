//! Deleting whole consume queues: RocketMQ's `deleteTopics` of an expired lite topic's
//! `%LMQ%` queue. The records stay in the commit log (their segments go with retention); the
//! queue's entries, files and directory go, and the next append to it starts again at offset 0.
//!
//! A deletion survives a crash and is never undone by recovery:
//! 1. a thorough checkpoint at the log's end first, so recovery's re-index (which starts at the
//!    checkpoint) never meets the deleted queue's records again;
//! 2. the queue's directory renamed to `<id>.deleted` and its topic directory fsynced: from here
//!    the queue is gone for every open (a directory whose name is no queue id is no queue);
//! 3. the renamed directory's files and itself removed, and the topic directory when empty.
//!
//! A crash between 2 and 3 leaves a `.deleted` directory, removed by the next deletion in that
//! topic. The writer calls this, so no append to the queue runs meanwhile.

use super::durability::CheckpointPass;
use super::queues::{queue_dir, queue_path, remove_from};
use super::{MessageStore, StoreError};
use crate::error::io_err;
use std::path::Path;

/// The suffix a deleted queue's directory takes while its files are removed.
const DELETED_SUFFIX: &str = ".deleted";

impl MessageStore {
    /// Deletes each queue of `queues` (topic, queue id) that exists; answers how many did.
    pub fn delete_queues(&mut self, queues: &[(String, u32)]) -> Result<usize, StoreError> {
        if queues.is_empty() {
            return Ok(0);
        }
        self.shared.checkpoint(CheckpointPass::Forced)?;
        let disk = self.shared.config.disk.clone();
        // Before any directory goes: a re-index from the log must know these records are of
        // a deleted life of the queue (`deleted.rs`).
        super::lock(&self.shared.deleted).record(
            &disk,
            &self.shared.config.dir,
            queues,
            self.write_pos,
        )?;
        let root = queue_dir(&self.shared.config.dir);
        let mut deleted = 0;
        for (topic, queue_id) in queues {
            let topic_dir = root.join(topic);
            let path = queue_path(&topic_dir, *queue_id);
            if disk.kind(&path).map_err(|e| io_err(&path, e))? != Some(true) {
                self.forget_queue(topic, *queue_id);
                continue;
            }
            let tomb = topic_dir.join(format!("{queue_id}{DELETED_SUFFIX}"));
            if disk.kind(&tomb).map_err(|e| io_err(&tomb, e))?.is_some() {
                remove_tree(&disk, &tomb)?;
            }
            disk.rename(&path, &tomb).map_err(|e| io_err(&path, e))?;
            disk.sync_dir(&topic_dir)?;
            // Forgotten once no open can find it on disk again: a reader opening it between
            // a forget and the rename would put it back in the map.
            self.forget_queue(topic, *queue_id);
            remove_tree(&disk, &tomb)?;
            if disk
                .read_dir(&topic_dir)
                .map_err(|e| io_err(&topic_dir, e))?
                .is_empty()
            {
                disk.remove_dir(&topic_dir)
                    .map_err(|e| io_err(&topic_dir, e))?;
            }
            deleted += 1;
            tracing::info!(topic, queue_id, "consume queue deleted");
        }
        // The removals themselves: a crash may bring an emptied directory back, never a queue.
        disk.sync_dir(&root)?;
        Ok(deleted)
    }

    /// Drops the queue from the writer's map and the readers'; a reader already holding it
    /// reads what it held.
    fn forget_queue(&mut self, topic: &str, queue_id: u32) {
        super::lock(&self.shared.released).take(topic, queue_id);
        remove_from(&mut self.queues, topic, queue_id);
        let mut shared = self
            .shared
            .queues
            .write()
            .unwrap_or_else(|e| e.into_inner());
        remove_from(&mut shared, topic, queue_id);
    }
}

/// Removes a queue directory's files, then the directory.
fn remove_tree(disk: &crate::disk::Disk, dir: &Path) -> Result<(), StoreError> {
    for entry in disk.read_dir(dir).map_err(|e| io_err(dir, e))? {
        let Some(name) = entry.name else {
            continue;
        };
        let path = dir.join(name);
        if entry.is_dir {
            remove_tree(disk, &path)?;
        } else {
            disk.remove_file(&path).map_err(|e| io_err(&path, e))?;
        }
    }
    disk.remove_dir(dir).map_err(|e| io_err(dir, e))
}
