//! What a queue's directory holds when the queue is opened: listing its files, repairing a gap
//! or a torn last entry, and moving a legacy single-file queue into the directory layout.
//!
//! Runs once per queue, at [`ConsumeQueue::open`](super::ConsumeQueue::open), before any entry is
//! read or written; kept apart from the entry reads and writes that run on every request.

use super::{queue_file_name, store_to_io, CqFile, QueueRepairs, ENTRY_SIZE};
use crate::disk::{Disk, OpenMode};
use crate::file_cache::FileCache;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Suffix of a legacy single-file queue being moved into its directory (see
/// [`ConsumeQueue::open`](super::ConsumeQueue::open)).
const MIGRATING_SUFFIX: &str = ".migrating";

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// The files of a queue directory that exists, in order, with the queue's first and next
/// offsets; a gap or a partial last entry is repaired and counted in `repairs`.
pub(super) fn existing_files(
    files_cache: &Arc<FileCache>,
    dir: &Path,
    repairs: &mut QueueRepairs,
) -> io::Result<(Vec<CqFile>, u64, u64)> {
    let disk = files_cache.disk();
    let mut bases: Vec<u64> = disk
        .read_dir(dir)?
        .into_iter()
        .filter(|e| !e.is_dir)
        .filter_map(|e| {
            e.name
                .as_deref()
                .filter(|n| n.len() == 20 && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .collect();
    bases.sort_unstable();
    let mut files: Vec<CqFile> = Vec::with_capacity(bases.len().max(1));
    let mut expected_base = None;
    for base in bases {
        let path = dir.join(queue_file_name(base));
        if expected_base.is_some_and(|b| b != base) {
            // Past a gap nothing can be trusted (a crash mid-reset); recovery re-indexes.
            disk.remove_file(&path)?;
            repairs.dropped_files += 1;
            continue;
        }
        let len = disk.file_len(&path)?;
        expected_base = Some(base + len / ENTRY_SIZE as u64);
        files.push(CqFile {
            base,
            file: files_cache.existing(path),
        });
    }
    if repairs.dropped_files > 0 {
        disk.sync_dir(dir).map_err(store_to_io)?;
    }
    if files.is_empty() {
        let path = dir.join(queue_file_name(0));
        let file = files_cache.open(path, OpenMode::Create)?;
        // An existing directory that had lost its files: the new one must outlive a crash.
        disk.sync_dir(dir).map_err(store_to_io)?;
        repairs.refilled = true;
        files.push(CqFile { base: 0, file });
    }
    // Only the last file can end in a partial entry: every earlier one was full when the
    // next was started.
    let last = files
        .last()
        .cloned()
        .ok_or_else(|| invalid("no file".into()))?;
    let len = disk.file_len(last.path())?;
    let whole = len - len % ENTRY_SIZE as u64;
    if whole != len {
        last.file.handle()?.set_len(whole)?;
        repairs.cut_bytes = len - whole;
    }
    let min = files.first().map_or(0, |f| f.base);
    let count = last.base + whole / ENTRY_SIZE as u64;
    Ok((files, min, count))
}

/// Where a legacy single-file queue at `dir` is moved while it becomes a directory.
fn legacy_aside_path(dir: &Path) -> PathBuf {
    let mut aside = dir.as_os_str().to_owned();
    aside.push(MIGRATING_SUFFIX);
    PathBuf::from(aside)
}

/// Whether the queue at `dir` has anything on disk: its directory, a legacy single file, or
/// such a file set aside by a migration cut short.
pub(crate) fn queue_on_disk(disk: &Disk, dir: &Path) -> io::Result<bool> {
    Ok(disk.kind(dir)?.is_some() || legacy_file_aside(disk, dir)?)
}

/// Whether a migration of a legacy single-file queue at `dir` was cut short, leaving the file
/// aside and no directory.
pub(super) fn legacy_file_aside(disk: &Disk, dir: &Path) -> io::Result<bool> {
    Ok(disk.kind(&legacy_aside_path(dir))? == Some(false))
}

/// Moves a legacy single-file queue at `dir` into the directory layout, as `dir/<0>`. Resumable:
/// the file is first renamed aside, so a crash leaves either the legacy file or the aside copy,
/// which the next open moves on.
pub(super) fn migrate_legacy_file(disk: &Disk, dir: &Path) -> io::Result<()> {
    let Some(parent) = dir.parent() else {
        return Ok(());
    };
    let aside = legacy_aside_path(dir);
    if disk.kind(dir)? == Some(false) {
        disk.rename(dir, &aside)?;
        disk.sync_dir(parent).map_err(store_to_io)?;
    }
    if disk.kind(&aside)? == Some(false) {
        disk.create_dir_all(dir)?;
        disk.rename(&aside, &dir.join(queue_file_name(0)))?;
        disk.sync_dir(dir).map_err(store_to_io)?;
        disk.sync_dir(parent).map_err(store_to_io)?;
        tracing::info!(dir = %dir.display(), "moved a single-file consume queue into its directory");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consume_queue::{ConsumeQueue, CqEntry};
    use crate::disk::sim::SimDisk;

    fn entry(i: u64) -> CqEntry {
        CqEntry {
            physical_offset: i * 100,
            size: 100,
            tag_hash: 0,
            store_timestamp: i as i64,
        }
    }

    #[test]
    fn a_legacy_single_file_becomes_the_first_file() -> io::Result<()> {
        let disk = Disk::Simulated(SimDisk::new());
        disk.create_dir_all(Path::new("/cq/t"))?;
        let legacy = disk.open(Path::new("/cq/t/0"), OpenMode::Create)?;
        let mut bytes = Vec::new();
        for i in 0..3 {
            entry(i).encode_into(&mut bytes);
        }
        legacy.write_all_at(&bytes, 0)?;
        let (q, _) = ConsumeQueue::open(
            &FileCache::new(disk.clone(), 8),
            "t",
            0,
            Path::new("/cq/t/0"),
            10,
        )?;
        assert_eq!(q.max_offset(), 3);
        assert_eq!(q.entry(2)?, Some(entry(2)));
        Ok(())
    }
}
