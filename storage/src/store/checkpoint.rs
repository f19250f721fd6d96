//! The checkpoint file: the commit-log position and per-queue entry counts known durable.
//!
//! Layout: magic, version, commit-log position, then (topic, queue id, entry count) per queue,
//! all followed by a CRC32 of the preceding bytes. Written to a temporary file, fsynced and
//! renamed over the old one, so a crash leaves either checkpoint intact.

use super::StoreError;
use crate::disk::{Disk, OpenMode};
use crate::error::io_err;
use std::collections::HashMap;
use std::io;
use std::path::Path;

const CHECKPOINT_FILE: &str = "checkpoint";
const CHECKPOINT_MAGIC: &[u8; 4] = b"SKCP";
const CHECKPOINT_VERSION: u32 = 1;

pub(super) struct Checkpoint {
    pub(super) position: u64,
    pub(super) counts: HashMap<(String, u32), u64>,
}

pub(super) fn write_checkpoint(
    disk: &Disk,
    dir: &Path,
    position: u64,
    counts: &[(String, u32, u64)],
) -> Result<(), StoreError> {
    let mut buf = Vec::with_capacity(24 + counts.len() * 32);
    buf.extend_from_slice(CHECKPOINT_MAGIC);
    buf.extend_from_slice(&CHECKPOINT_VERSION.to_be_bytes());
    buf.extend_from_slice(&position.to_be_bytes());
    buf.extend_from_slice(&(counts.len() as u32).to_be_bytes());
    for (topic, queue_id, count) in counts {
        buf.extend_from_slice(&(topic.len() as u16).to_be_bytes());
        buf.extend_from_slice(topic.as_bytes());
        buf.extend_from_slice(&queue_id.to_be_bytes());
        buf.extend_from_slice(&count.to_be_bytes());
    }
    let crc = crc32fast::hash(&buf);
    buf.extend_from_slice(&crc.to_be_bytes());
    let tmp = dir.join("checkpoint.tmp");
    let f = disk
        .open(&tmp, OpenMode::Create)
        .map_err(|e| io_err(&tmp, e))?;
    f.set_len(0).map_err(|e| io_err(&tmp, e))?;
    f.write_all_at(&buf, 0).map_err(|e| io_err(&tmp, e))?;
    f.sync_all().map_err(|e| io_err(&tmp, e))?;
    let path = dir.join(CHECKPOINT_FILE);
    disk.rename(&tmp, &path).map_err(|e| io_err(&path, e))?;
    disk.sync_dir(dir)
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
    if u32::from_be_bytes(take(4)?.try_into().ok()?) != CHECKPOINT_VERSION {
        return None;
    }
    let position = u64::from_be_bytes(take(8)?.try_into().ok()?);
    let n = u32::from_be_bytes(take(4)?.try_into().ok()?);
    let mut counts = HashMap::new();
    for _ in 0..n {
        let len = u16::from_be_bytes(take(2)?.try_into().ok()?);
        let topic = std::str::from_utf8(take(len.into())?).ok()?.to_string();
        let queue_id = u32::from_be_bytes(take(4)?.try_into().ok()?);
        let count = u64::from_be_bytes(take(8)?.try_into().ok()?);
        counts.insert((topic, queue_id), count);
    }
    Some(Checkpoint { position, counts })
}

pub(super) fn read_checkpoint(disk: &Disk, dir: &Path) -> Result<Option<Checkpoint>, StoreError> {
    let path = dir.join(CHECKPOINT_FILE);
    let file = match disk.open(&path, OpenMode::Existing) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(&path, e)),
    };
    let len = file.len().map_err(|e| io_err(&path, e))?;
    // A checkpoint is a few kilobytes; a huge length is damage, not something to allocate.
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
        let counts = vec![("A".to_string(), 0, 5), ("%RETRY%g".to_string(), 3, 9)];
        write_checkpoint(&Disk::Os, dir.path(), 1234, &counts).unwrap();
        let ck = read_checkpoint(&Disk::Os, dir.path()).unwrap().unwrap();
        assert_eq!(ck.position, 1234);
        assert_eq!(ck.counts[&("A".to_string(), 0)], 5);
        assert_eq!(ck.counts[&("%RETRY%g".to_string(), 3)], 9);
        let path = dir.path().join(CHECKPOINT_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[12] ^= 1;
        assert!(parse_checkpoint(&bytes).is_none());
        for cut in 0..bytes.len() {
            assert!(parse_checkpoint(&bytes[..cut]).is_none());
        }
    }
}
