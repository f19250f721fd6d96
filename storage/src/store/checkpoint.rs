//! The checkpoint file: the commit-log position below which every record is durable and
//! indexed in durable consume-queue files, and the newest store timestamp below it.
//!
//! Layout (version 2): magic, version, commit-log position, newest store timestamp, then a
//! CRC32 of the preceding bytes. Version 1 listed every queue's entry count after the position;
//! it is read for its position alone. Its size no longer grows with the number of queues: a
//! checkpoint costs the same with ten queues or a million. Written to a temporary file,
//! fsynced and renamed over the old one, so a crash leaves either checkpoint intact.

use super::StoreError;
use crate::disk::{Disk, OpenMode};
use crate::error::io_err;
use std::io;
use std::path::Path;

const CHECKPOINT_FILE: &str = "checkpoint";
const CHECKPOINT_MAGIC: &[u8; 4] = b"SKCP";
const CHECKPOINT_VERSION: u32 = 2;
/// The version that listed per-queue entry counts.
const CHECKPOINT_VERSION_COUNTS: u32 = 1;

pub(super) struct Checkpoint {
    pub(super) position: u64,
    /// The newest store timestamp below `position` (0 when a version 1 file did not say).
    pub(super) last_timestamp: i64,
}

pub(super) fn write_checkpoint(
    disk: &Disk,
    dir: &Path,
    position: u64,
    last_timestamp: i64,
) -> Result<(), StoreError> {
    let mut buf = Vec::with_capacity(32);
    buf.extend_from_slice(CHECKPOINT_MAGIC);
    buf.extend_from_slice(&CHECKPOINT_VERSION.to_be_bytes());
    buf.extend_from_slice(&position.to_be_bytes());
    buf.extend_from_slice(&last_timestamp.to_be_bytes());
    let crc = crc32fast::hash(&buf);
    buf.extend_from_slice(&crc.to_be_bytes());
    disk.replace_file(dir, CHECKPOINT_FILE, &buf)
}

fn parse_checkpoint(buf: &[u8]) -> Option<Checkpoint> {
    let (body, crc) = buf.split_at(buf.len().checked_sub(4)?);
    if crc32fast::hash(body).to_be_bytes() != crc {
        return None;
    }
    let mut pos = 0usize;
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = body.get(pos..pos.checked_add(n)?)?;
        pos += n;
        Some(s)
    };
    if take(4)? != CHECKPOINT_MAGIC {
        return None;
    }
    let version = u32::from_be_bytes(take(4)?.try_into().ok()?);
    let position = u64::from_be_bytes(take(8)?.try_into().ok()?);
    let last_timestamp = match version {
        CHECKPOINT_VERSION => {
            let t = i64::from_be_bytes(take(8)?.try_into().ok()?);
            if pos != body.len() {
                return None;
            }
            t
        }
        // Its counts told what a store that opens every queue at start checked; the position
        // (covered by the CRC above) is all recovery needs now.
        CHECKPOINT_VERSION_COUNTS => 0,
        _ => return None,
    };
    Some(Checkpoint {
        position,
        last_timestamp,
    })
}

pub(super) fn read_checkpoint(disk: &Disk, dir: &Path) -> Result<Option<Checkpoint>, StoreError> {
    let path = dir.join(CHECKPOINT_FILE);
    let file = match disk.open(&path, OpenMode::Existing) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(&path, e)),
    };
    let len = file.len().map_err(|e| io_err(&path, e))?;
    // A checkpoint is small (a version 1 file a few kilobytes); a huge length is damage, not
    // something to allocate.
    let len = usize::try_from(len).unwrap_or(usize::MAX).min(64 << 20);
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, 0)
        .map_err(|e| io_err(&path, e))?;
    let ck = parse_checkpoint(&buf);
    if ck.is_none() {
        tracing::warn!(file = %path.display(), "checkpoint fails its checksum, recovering from the start of the commit log");
    }
    Ok(ck)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_round_trips_and_rejects_damage() {
        let dir = tempfile::tempdir().unwrap();
        write_checkpoint(&Disk::Os, dir.path(), 1234, 1_700_000_000_123).unwrap();
        let ck = read_checkpoint(&Disk::Os, dir.path()).unwrap().unwrap();
        assert_eq!(ck.position, 1234);
        assert_eq!(ck.last_timestamp, 1_700_000_000_123);
        let path = dir.path().join(CHECKPOINT_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[12] ^= 1;
        assert!(parse_checkpoint(&bytes).is_none());
        for cut in 0..bytes.len() {
            assert!(parse_checkpoint(&bytes[..cut]).is_none());
        }
    }

    #[test]
    fn a_version_1_checkpoint_gives_its_position() {
        // Version 1: magic, version, position, queue count, (topic, queue id, count) per queue.
        let mut buf = Vec::new();
        buf.extend_from_slice(CHECKPOINT_MAGIC);
        buf.extend_from_slice(&1u32.to_be_bytes());
        buf.extend_from_slice(&777u64.to_be_bytes());
        buf.extend_from_slice(&1u32.to_be_bytes());
        buf.extend_from_slice(&1u16.to_be_bytes());
        buf.extend_from_slice(b"A");
        buf.extend_from_slice(&0u32.to_be_bytes());
        buf.extend_from_slice(&5u64.to_be_bytes());
        let crc = crc32fast::hash(&buf);
        buf.extend_from_slice(&crc.to_be_bytes());
        let ck = parse_checkpoint(&buf).unwrap();
        assert_eq!((ck.position, ck.last_timestamp), (777, 0));
    }
}
