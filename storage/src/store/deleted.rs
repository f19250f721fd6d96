//! Where deleted queues ended in the commit log. A deleted queue's records stay in the log until
//! retention takes their segments, and its name may take new messages from offset 0 at once
//! (an expired lite topic written to again). Whatever re-indexes a queue from the log, recovery
//! meeting a gap or settling a damaged queue, must then not take the records of an earlier,
//! deleted life of that queue for its own: that would bring deleted messages back, at offsets
//! the new ones hold.
//!
//! The file `deleted_queues` keeps one record per deletion: the topic, queue id and the
//! commit-log position at the deletion, below which the queue's records are of its deleted
//! lives. A record is appended and fsynced before the queue's directory goes, and the file is
//! read at open, where deletions whose records retention has taken are dropped and the file is
//! written again (also after a torn last record).

use std::collections::HashMap;
use std::path::Path;

use super::StoreError;
use crate::disk::{Disk, OpenMode};
use crate::error::io_err;

/// The file, in the store's directory.
pub(super) const DELETED_FILE: &str = "deleted_queues";

/// Deleted queues, by topic then queue id, to the log position at their (last) deletion.
#[derive(Debug, Default)]
pub(super) struct DeletedQueues {
    below: HashMap<String, HashMap<u32, u64>>,
}

impl DeletedQueues {
    /// Reads the store's deletions, keeping those whose records may still be in a log starting
    /// at `log_start`; writes the file again when it held anything else.
    pub(super) fn load(disk: &Disk, dir: &Path, log_start: u64) -> Result<Self, StoreError> {
        let path = dir.join(DELETED_FILE);
        let file = match disk.open(&path, OpenMode::Existing) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(io_err(&path, e)),
        };
        let len = file.len().map_err(|e| io_err(&path, e))?;
        let mut buf = vec![0u8; usize::try_from(len).unwrap_or(0)];
        file.read_exact_at(&mut buf, 0)
            .map_err(|e| io_err(&path, e))?;
        drop(file);
        let mut deleted = Self::default();
        let mut at = 0;
        let mut records = 0usize;
        while let Some((topic, queue_id, position, size)) = decode(&buf[at..]) {
            at += size;
            records += 1;
            if position > log_start {
                deleted.insert(topic, queue_id, position);
            }
        }
        if at != buf.len() || deleted.len() != records {
            if at != buf.len() {
                tracing::warn!(file = %path.display(), bytes = buf.len() - at, "dropped a torn record of the deleted queues");
            }
            deleted.write_all(disk, dir)?;
        }
        Ok(deleted)
    }

    /// Whether the record at `position` of `topic`/`queue_id` is of a deleted life of the queue.
    pub(super) fn hides(&self, topic: &str, queue_id: u32, position: u64) -> bool {
        !self.below.is_empty()
            && self
                .below
                .get(topic)
                .and_then(|q| q.get(&queue_id))
                .is_some_and(|below| position < *below)
    }

    /// Records, durably, that `queues` are deleted with the commit log at `position`.
    pub(super) fn record(
        &mut self,
        disk: &Disk,
        dir: &Path,
        queues: &[(String, u32)],
        position: u64,
    ) -> Result<(), StoreError> {
        let mut bytes = Vec::new();
        for (topic, queue_id) in queues {
            encode(&mut bytes, topic, *queue_id, position);
        }
        let path = dir.join(DELETED_FILE);
        let new = disk.kind(&path).map_err(|e| io_err(&path, e))?.is_none();
        let file = disk
            .open(&path, OpenMode::Create)
            .map_err(|e| io_err(&path, e))?;
        let end = file.len().map_err(|e| io_err(&path, e))?;
        file.write_all_at(&bytes, end)
            .map_err(|e| io_err(&path, e))?;
        file.sync_all().map_err(|e| io_err(&path, e))?;
        if new {
            disk.sync_dir(dir)?;
        }
        for (topic, queue_id) in queues {
            self.insert(topic.clone(), *queue_id, position);
        }
        Ok(())
    }

    /// Forgets deletions whose records retention took (the log now starts at `log_start`).
    pub(super) fn prune(&mut self, log_start: u64) {
        for queues in self.below.values_mut() {
            queues.retain(|_, below| *below > log_start);
        }
        self.below.retain(|_, queues| !queues.is_empty());
    }

    fn insert(&mut self, topic: String, queue_id: u32, position: u64) {
        let below = self
            .below
            .entry(topic)
            .or_default()
            .entry(queue_id)
            .or_default();
        *below = (*below).max(position);
    }

    fn len(&self) -> usize {
        self.below.values().map(HashMap::len).sum()
    }

    /// Writes the file anew ([`Disk::replace_file`]).
    fn write_all(&self, disk: &Disk, dir: &Path) -> Result<(), StoreError> {
        let mut bytes = Vec::new();
        for (topic, queues) in &self.below {
            for (queue_id, position) in queues {
                encode(&mut bytes, topic, *queue_id, *position);
            }
        }
        disk.replace_file(dir, DELETED_FILE, &bytes)
    }
}

/// `[u16 topic length][topic][u32 queue id][u64 position][u32 crc32 of what precedes]`.
fn encode(out: &mut Vec<u8>, topic: &str, queue_id: u32, position: u64) {
    let start = out.len();
    let name = topic.as_bytes();
    out.extend_from_slice(&(name.len().min(u16::MAX as usize) as u16).to_be_bytes());
    out.extend_from_slice(&name[..name.len().min(u16::MAX as usize)]);
    out.extend_from_slice(&queue_id.to_be_bytes());
    out.extend_from_slice(&position.to_be_bytes());
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// The record at the start of `buf` and its size; `None` at the end or at a torn record.
fn decode(buf: &[u8]) -> Option<(String, u32, u64, usize)> {
    let name_len = usize::from(u16::from_be_bytes(buf.get(..2)?.try_into().ok()?));
    let body = 2 + name_len + 4 + 8;
    let crc = u32::from_be_bytes(buf.get(body..body + 4)?.try_into().ok()?);
    if crc32fast::hash(&buf[..body]) != crc {
        return None;
    }
    let topic = std::str::from_utf8(&buf[2..2 + name_len]).ok()?.to_owned();
    let at = 2 + name_len;
    let queue_id = u32::from_be_bytes(buf[at..at + 4].try_into().ok()?);
    let position = u64::from_be_bytes(buf[at + 4..at + 12].try_into().ok()?);
    Some((topic, queue_id, position, body + 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletions_survive_a_reload_a_torn_tail_is_dropped_and_retention_prunes_them() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Disk::Os;
        let mut deleted = DeletedQueues::load(&disk, dir.path(), 0).unwrap();
        assert!(!deleted.hides("T", 0, 0));
        deleted
            .record(&disk, dir.path(), &[("T".into(), 0), ("U".into(), 2)], 100)
            .unwrap();
        deleted
            .record(&disk, dir.path(), &[("T".into(), 0)], 300)
            .unwrap();
        assert!(deleted.hides("T", 0, 299) && !deleted.hides("T", 0, 300));
        assert!(deleted.hides("U", 2, 99) && !deleted.hides("U", 1, 99));
        // A torn record after the two good ones.
        let path = dir.path().join(DELETED_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&[0, 1, b'V', 0, 0]);
        std::fs::write(&path, &bytes).unwrap();
        let reloaded = DeletedQueues::load(&disk, dir.path(), 0).unwrap();
        assert!(reloaded.hides("T", 0, 299) && reloaded.hides("U", 2, 99));
        assert_eq!(reloaded.len(), 2);
        // The log now starts past U's deletion: it is dropped, from the file too.
        let pruned = DeletedQueues::load(&disk, dir.path(), 150).unwrap();
        assert!(!pruned.hides("U", 2, 99) && pruned.hides("T", 0, 200));
        assert_eq!(DeletedQueues::load(&disk, dir.path(), 0).unwrap().len(), 1);
        let mut in_memory = pruned;
        in_memory.prune(400);
        assert!(!in_memory.hides("T", 0, 200));
    }
}
