//! The key index: which commit-log records carry a message key, for QUERY_MESSAGE (12).
//!
//! Append-only files in `<store>/keyindex/`, each named by the 20-digit physical offset of its
//! first entry, rolled every [`ENTRIES_PER_FILE`] entries. An entry is 24 bytes: a 64-bit FNV-1a
//! hash of `topic\0key`, the record's physical offset and its store timestamp (big-endian). One
//! entry per space-separated entry of the `KEYS` property and one for `UNIQ_KEY` (Java indexes
//! both in one hash space, so a query by key may also match a unique key; clients filter).
//!
//! Why files and not a tree: indexing sits beside every send, and an append of 24 bytes per
//! key costs next to nothing, where a B-tree insert per key cost a fifth of produce throughput
//! and its cache hundreds of MiB. A lookup reads the files newest first and keeps the entries
//! whose hash and time range match (a 1M-message store is about 48 MB to read: a dev broker's
//! lookup, not a hot path), then serves only records that still carry the topic and key, so a
//! hash collision or a stale entry never answers for another message.
//!
//! The index is built off the send path: [`KeyIndex::catch_up`] indexes the commit log from the
//! watermark (in memory: the end of the last record scanned) to its end. Only a full file is
//! fsynced, with the new file's directory entry (once per [`ENTRIES_PER_FILE`] entries), so a
//! crash can cost only the newest file's tail: at open the index resumes after the last entry
//! that still matches its record in the commit log (a torn or stale tail is cut), which
//! rebuilds whatever a crash lost from the commit log. Retention
//! deletes the files whose entries all point below the log's new start
//! ([`KeyIndex::prune_below`]). All file operations go through the store's [`Disk`], so the
//! power-loss test covers the index too.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::disk::{Disk, DiskFile, OpenMode};
use crate::message::{parse_record, property, MessageToAppend};
use crate::store::{AppendResult, StoreError, StoreReader};

/// The directory of the index files, inside the store directory.
pub const KEY_INDEX_DIR: &str = "keyindex";
/// Entries per file before a new file starts (24 MiB).
pub const ENTRIES_PER_FILE: u64 = 1 << 20;
const ENTRY_SIZE: u64 = 24;
/// Entries buffered in memory before they are written to the active file.
const WRITE_BUFFER: usize = 64 * 1024;

/// The key index failed.
#[derive(Debug, thiserror::Error)]
pub enum KeyIndexError {
    #[error("i/o error on the key index file {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("making the key index directory {path} durable failed")]
    Durability {
        path: PathBuf,
        #[source]
        source: StoreError,
    },
    #[error("reading the commit log for the key index failed")]
    Store(#[from] StoreError),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> KeyIndexError + '_ {
    move |source| KeyIndexError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The keys a record is indexed under: every non-empty space-separated entry of `KEYS`, then
/// `UNIQ_KEY` when present; duplicates removed.
pub fn index_keys(properties: &str) -> Vec<&str> {
    let mut keys: Vec<&str> = property(properties, property::KEYS)
        .map(|k| k.split(' ').filter(|k| !k.is_empty()).collect())
        .unwrap_or_default();
    if let Some(uniq) = property(properties, property::UNIQ_KEY).filter(|k| !k.is_empty()) {
        keys.push(uniq);
    }
    // A handful of keys: a linear check beats hashing them.
    let mut unique: Vec<&str> = Vec::with_capacity(keys.len());
    for key in keys {
        if !unique.contains(&key) {
            unique.push(key);
        }
    }
    unique
}

/// FNV-1a over `topic`, a zero byte and `key`: stable across builds and platforms, which the
/// files outlive.
pub fn key_hash(topic: &str, key: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in topic.as_bytes().iter().chain(&[0u8]).chain(key.as_bytes()) {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// Whether the stored record `raw` belongs to `topic` and is indexed under `key`.
fn record_carries(raw: &[u8], topic: &str, key: &str) -> bool {
    let Ok(layout) = parse_record(raw) else {
        return false;
    };
    let Ok(properties) = std::str::from_utf8(&raw[layout.properties.clone()]) else {
        return false;
    };
    raw[layout.topic.clone()] == *topic.as_bytes() && index_keys(properties).contains(&key)
}

/// Whether the index entry `(hash, hit)` describes the stored record `raw`: same store
/// timestamp, and one of its keys hashes to `hash`. Used at open to tell a surviving entry
/// from one a crash left half written.
fn entry_matches(raw: &[u8], hash: u64, hit: KeyHit) -> bool {
    let Ok(layout) = parse_record(raw) else {
        return false;
    };
    let (Ok(topic), Ok(properties)) = (
        std::str::from_utf8(&raw[layout.topic.clone()]),
        std::str::from_utf8(&raw[layout.properties.clone()]),
    ) else {
        return false;
    };
    layout.store_timestamp == hit.store_timestamp
        && index_keys(properties)
            .iter()
            .any(|key| key_hash(topic, key) == hash)
}

/// One query hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHit {
    pub physical_offset: u64,
    pub store_timestamp: i64,
}

fn decode_entry(e: &[u8]) -> (u64, KeyHit) {
    let word = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&e[i..i + 8]);
        b
    };
    (
        u64::from_be_bytes(word(0)),
        KeyHit {
            physical_offset: u64::from_be_bytes(word(8)),
            store_timestamp: i64::from_be_bytes(word(16)),
        },
    )
}

/// The index entries of one appended batch, built by the writer from what it just appended
/// (no re-read of the commit log): `[start, end)` is the batch's span of the commit log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyBatch {
    pub start: u64,
    pub end: u64,
    /// Records in the batch (some carry no key).
    pub records: usize,
    pub entries: Vec<(u64, KeyHit)>,
}

impl KeyBatch {
    /// The entries of `messages` as appended at `results` (same order, same length).
    pub fn of(messages: &[MessageToAppend], results: &[AppendResult]) -> KeyBatch {
        let mut batch = KeyBatch {
            start: results.first().map_or(0, |r| r.physical_offset),
            end: results
                .last()
                .map_or(0, |r| r.physical_offset + u64::from(r.stored_size)),
            records: results.len(),
            entries: Vec::with_capacity(messages.len() * 2),
        };
        for (message, result) in messages.iter().zip(results) {
            for key in index_keys(&message.properties) {
                batch.entries.push((
                    key_hash(&message.topic, key),
                    KeyHit {
                        physical_offset: result.physical_offset,
                        store_timestamp: result.store_timestamp,
                    },
                ));
            }
        }
        batch
    }

    /// Adds the batch appended right after this one (`next.start == self.end`).
    pub fn extend(&mut self, next: KeyBatch) {
        debug_assert_eq!(next.start, self.end, "key batches merge only when adjacent");
        self.end = next.end;
        self.records += next.records;
        self.entries.extend(next.entries);
    }
}

/// One index file: its first entry's physical offset and its path.
#[derive(Debug, Clone)]
struct IndexFile {
    first_offset: u64,
    path: PathBuf,
}

/// The file being appended to: entries go to `buffer`, then to the file at `written`.
struct Active {
    file: IndexFile,
    handle: DiskFile,
    written: u64,
    buffer: Vec<u8>,
    entries: u64,
}

/// The key index over one directory.
pub struct KeyIndex {
    disk: Disk,
    dir: PathBuf,
    entries_per_file: u64,
    /// Every file, oldest first; the last one is `active` once something was appended.
    files: Vec<IndexFile>,
    active: Option<Active>,
    /// The commit-log offset indexed up to.
    watermark: u64,
}

impl std::fmt::Debug for KeyIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyIndex")
            .field("dir", &self.dir)
            .field("files", &self.files.len())
            .field("watermark", &self.watermark)
            .finish()
    }
}

impl KeyIndex {
    /// Opens (creating if needed) the index in `dir` on `disk`. It resumes after the last
    /// entry that still matches its record in `reader`'s commit log, cutting whatever a crash
    /// left after it; [`Self::catch_up_all`] then rebuilds the rest from the commit log.
    pub fn open(
        disk: &Disk,
        dir: impl Into<PathBuf>,
        reader: &StoreReader,
    ) -> Result<Self, KeyIndexError> {
        let dir = dir.into();
        disk.create_dir_all(&dir).map_err(io_err(&dir))?;
        let mut files = Vec::new();
        for entry in disk.read_dir(&dir).map_err(io_err(&dir))? {
            let parsed = entry
                .name
                .as_deref()
                .and_then(|n| Some((n, n.parse::<u64>().ok()?)));
            match (parsed, entry.is_dir) {
                (Some((name, first_offset)), false) => files.push(IndexFile {
                    first_offset,
                    path: dir.join(name),
                }),
                _ => tracing::warn!(
                    dir = %dir.display(),
                    name = entry.name.as_deref().unwrap_or("<not utf-8>"),
                    "stray entry in the key index directory left alone"
                ),
            }
        }
        files.sort_by_key(|f| f.first_offset);
        // Resume after the newest entry that still describes its record. Files newer than it
        // are empty or hold only a torn tail; within its file, what follows it is cut, or
        // entries appended later would sit behind garbage (a torn 24-byte entry misaligns all
        // that follows).
        let mut watermark = reader.commit_log_start();
        for file in files.iter().rev() {
            let handle = disk
                .open(&file.path, OpenMode::Existing)
                .map_err(io_err(&file.path))?;
            let len = handle.len().map_err(io_err(&file.path))?;
            let mut keep = 0u64;
            // Backwards a window at a time: normally the very last entry matches.
            let mut end = len - len % ENTRY_SIZE;
            'file: while end > 0 {
                let start = end.saturating_sub(WRITE_BUFFER as u64 / ENTRY_SIZE * ENTRY_SIZE);
                let bytes = read_at(&handle, &file.path, start, end - start)?;
                for (i, entry) in bytes.chunks_exact(ENTRY_SIZE as usize).enumerate().rev() {
                    let (hash, hit) = decode_entry(entry);
                    if let Some(raw) = reader.raw_record_at(hit.physical_offset)? {
                        if entry_matches(&raw, hash, hit) {
                            watermark = watermark.max(hit.physical_offset + raw.len() as u64);
                            keep = start + (i as u64 + 1) * ENTRY_SIZE;
                            break 'file;
                        }
                    }
                }
                end = start;
            }
            if keep != len {
                tracing::info!(
                    file = %file.path.display(),
                    kept = keep / ENTRY_SIZE,
                    cut_bytes = len - keep,
                    "key index tail cut to the last entry that matches the commit log"
                );
                handle.set_len(keep).map_err(io_err(&file.path))?;
            }
            if keep > 0 {
                break;
            }
        }
        Ok(KeyIndex {
            disk: disk.clone(),
            dir,
            entries_per_file: ENTRIES_PER_FILE,
            files,
            active: None,
            watermark,
        })
    }

    /// Starts a new file every `entries` entries instead of every [`ENTRIES_PER_FILE`] (tests
    /// use small files to exercise rolling and pruning).
    pub fn with_entries_per_file(mut self, entries: u64) -> Self {
        self.entries_per_file = entries.max(1);
        self
    }

    /// The commit-log physical offset indexed up to.
    pub fn watermark(&self) -> u64 {
        self.watermark
    }

    fn append(&mut self, hash: u64, hit: KeyHit) -> Result<(), KeyIndexError> {
        let roll = match &self.active {
            Some(active) => active.entries >= self.entries_per_file,
            None => true,
        };
        if roll {
            self.flush()?;
            self.active = Some(self.next_file(hit.physical_offset)?);
        }
        let Some(active) = self.active.as_mut() else {
            return Ok(());
        };
        active.buffer.extend_from_slice(&hash.to_be_bytes());
        active
            .buffer
            .extend_from_slice(&hit.physical_offset.to_be_bytes());
        active
            .buffer
            .extend_from_slice(&hit.store_timestamp.to_be_bytes());
        active.entries += 1;
        if active.buffer.len() >= WRITE_BUFFER {
            self.flush()?;
        }
        Ok(())
    }

    /// The file the next entry (for the record at `physical_offset`) goes to: the newest file
    /// of a previous run while it has room, else a new one named after that record.
    fn next_file(&mut self, physical_offset: u64) -> Result<Active, KeyIndexError> {
        if self.active.is_none() {
            if let Some(last) = self.files.last().cloned() {
                let handle = self
                    .disk
                    .open(&last.path, OpenMode::Existing)
                    .map_err(io_err(&last.path))?;
                let written = handle.len().map_err(io_err(&last.path))?;
                if written / ENTRY_SIZE < self.entries_per_file {
                    return Ok(Active {
                        file: last,
                        handle,
                        written,
                        buffer: Vec::with_capacity(WRITE_BUFFER),
                        entries: written / ENTRY_SIZE,
                    });
                }
            }
        }
        // Only the newest file may lose entries in a crash: the index resumes after the newest
        // entry that survived, so a lost stretch in an older file would never be rebuilt.
        // Hence the file that is full is made durable (once per file) before the next begins.
        if let Some(full) = self.files.last() {
            let synced = match self.active.take() {
                Some(active) => active.handle.sync_data(),
                None => self
                    .disk
                    .open(&full.path, OpenMode::Existing)
                    .and_then(|f| f.sync_data()),
            };
            synced.map_err(io_err(&full.path))?;
        }
        let file = IndexFile {
            first_offset: physical_offset,
            path: self.dir.join(format!("{physical_offset:020}")),
        };
        let handle = self
            .disk
            .open(&file.path, OpenMode::Create)
            .map_err(io_err(&file.path))?;
        let written = handle.len().map_err(io_err(&file.path))?;
        // The entries are not synced, but the file's name is: without it a crash would drop
        // a whole file of a previous run while a newer one survives, and what it held would
        // never be rebuilt (the index resumes after the newest surviving entry).
        self.disk
            .sync_dir(&self.dir)
            .map_err(|source| KeyIndexError::Durability {
                path: self.dir.clone(),
                source,
            })?;
        self.files.push(file.clone());
        Ok(Active {
            file,
            handle,
            written,
            buffer: Vec::with_capacity(WRITE_BUFFER),
            entries: written / ENTRY_SIZE,
        })
    }

    /// Hands buffered entries to the file, so lookups (which read the files) see them.
    ///
    /// A failed write (a full disk) drops the buffered entries and their count. They belong to
    /// the pass that fails (every pass ends with a flush), whose watermark stays behind their
    /// records, so the next pass indexes those records again. Kept, they would be written ahead
    /// of that pass's entries at its first roll: into this file, while the new file is named
    /// after an earlier record. This file would then hold entries at or past the next file's
    /// name, the only copies once a crash takes the next file's unsynced ones, and
    /// [`Self::prune_below`] would delete them while their records are still in the log. (A
    /// short write may have put some of them on disk past `written`; the next write starts at
    /// `written` again.)
    fn flush(&mut self) -> Result<(), KeyIndexError> {
        if let Some(active) = self.active.as_mut() {
            if !active.buffer.is_empty() {
                if let Err(source) = active.handle.write_all_at(&active.buffer, active.written) {
                    active.buffer.clear();
                    active.entries = active.written / ENTRY_SIZE;
                    return Err(io_err(&active.file.path)(source));
                }
                active.written += active.buffer.len() as u64;
                active.buffer.clear();
            }
        }
        Ok(())
    }

    /// Indexes the commit log from the watermark to the reader's end, at most `max_records`
    /// records; answers how many records it indexed. A watermark past the end (a commit log
    /// cut by recovery) restarts from the end; one below the log's start (retention) from the
    /// start. A record that does not parse stops the pass where it stands (logged; the next
    /// pass retries from there).
    pub fn catch_up(
        &mut self,
        reader: &StoreReader,
        max_records: usize,
    ) -> Result<usize, KeyIndexError> {
        self.catch_up_to(reader, reader.commit_log_end(), max_records)
    }

    fn catch_up_to(
        &mut self,
        reader: &StoreReader,
        end: u64,
        max_records: usize,
    ) -> Result<usize, KeyIndexError> {
        let end = end.min(reader.commit_log_end());
        if self.watermark > end {
            tracing::warn!(
                watermark = self.watermark,
                commit_log_end = end,
                "key index watermark past the commit log end; restarting there"
            );
            self.watermark = end;
        }
        self.watermark = self.watermark.max(reader.commit_log_start());
        if self.watermark == end {
            return Ok(0);
        }
        let mut pending: Vec<(u64, KeyHit)> = Vec::new();
        let mut records = 0usize;
        let reached = reader.scan_records(
            self.watermark,
            end,
            max_records,
            |position, layout, bytes| {
                records += 1;
                let (Ok(topic), Ok(properties)) = (
                    std::str::from_utf8(&bytes[layout.topic.clone()]),
                    std::str::from_utf8(&bytes[layout.properties.clone()]),
                ) else {
                    tracing::warn!(
                        physical_offset = position,
                        "record with a non-utf-8 topic or properties left out of the key index"
                    );
                    return;
                };
                for key in index_keys(properties) {
                    pending.push((
                        key_hash(topic, key),
                        KeyHit {
                            physical_offset: position,
                            store_timestamp: layout.store_timestamp,
                        },
                    ));
                }
            },
        )?;
        if reached < end && records < max_records {
            tracing::warn!(
                position = reached,
                commit_log_end = end,
                "key index stopped at an unreadable record"
            );
        }
        for (hash, hit) in pending {
            self.append(hash, hit)?;
        }
        self.flush()?;
        self.watermark = reached;
        Ok(records)
    }

    /// Adds the entries of one appended batch. A batch past the watermark (an earlier one was
    /// dropped on the way) first has the gap indexed from the commit log; a batch the
    /// watermark already covers (indexed by a scan) is skipped.
    pub fn apply(&mut self, batch: &KeyBatch, reader: &StoreReader) -> Result<(), KeyIndexError> {
        if batch.end <= self.watermark {
            return Ok(());
        }
        while self.watermark < batch.start {
            let before = self.watermark;
            self.catch_up_to(reader, batch.start, 4096)?;
            if self.watermark == before {
                // Something unreadable lies in the gap: skip it rather than rescan it on every
                // batch (its records stay out of the index; lookups by offset id still work).
                tracing::warn!(
                    from = before,
                    to = batch.start,
                    "key index skips an unreadable stretch of the commit log"
                );
                self.watermark = batch.start;
            }
        }
        let watermark = self.watermark;
        for &(hash, hit) in batch
            .entries
            .iter()
            .filter(|(_, hit)| hit.physical_offset >= watermark)
        {
            self.append(hash, hit)?;
        }
        self.flush()?;
        self.watermark = batch.end;
        Ok(())
    }

    /// Indexes everything up to the reader's end (at open, this is the index's recovery).
    pub fn catch_up_all(&mut self, reader: &StoreReader) -> Result<usize, KeyIndexError> {
        let mut total = 0;
        loop {
            let n = self.catch_up(reader, 4096)?;
            total += n;
            if n == 0 || self.watermark >= reader.commit_log_end() {
                return Ok(total);
            }
        }
    }

    /// Records of `topic` indexed under `key` whose store timestamp lies in `[begin, end]`, the
    /// newest first, at most `max` (as Java's `IndexService`, which walks its hash chains from
    /// the newest entry and so keeps the newest `max`). Hits are candidates: [`Self::query`]
    /// checks each against its record.
    pub fn lookup(
        &self,
        topic: &str,
        key: &str,
        begin: i64,
        end: i64,
        max: usize,
    ) -> Result<Vec<KeyHit>, KeyIndexError> {
        let hash = key_hash(topic, key);
        let mut hits = Vec::new();
        let mut seen = HashSet::new();
        for file in self.files.iter().rev() {
            let handle = match self.disk.open(&file.path, OpenMode::Existing) {
                Ok(handle) => handle,
                // Pruned since the listing: nothing of it is wanted any more.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(&file.path)(e)),
            };
            let len = handle.len().map_err(io_err(&file.path))?;
            let bytes = read_at(&handle, &file.path, 0, len - len % ENTRY_SIZE)?;
            for entry in bytes.chunks_exact(ENTRY_SIZE as usize).rev() {
                if hits.len() >= max {
                    return Ok(hits);
                }
                let (entry_hash, hit) = decode_entry(entry);
                if entry_hash == hash
                    && (begin..=end).contains(&hit.store_timestamp)
                    && seen.insert(hit.physical_offset)
                {
                    hits.push(hit);
                }
            }
        }
        Ok(hits)
    }

    /// [`Self::lookup`], then each hit's stored record read back; hits whose record is gone or
    /// no longer carries the topic and key (a hash collision, a log cut and written again) are
    /// skipped.
    pub fn query(
        &self,
        reader: &StoreReader,
        topic: &str,
        key: &str,
        begin: i64,
        end: i64,
        max: usize,
    ) -> Result<Vec<Bytes>, KeyIndexError> {
        let mut out = Vec::new();
        // Candidates past `max` may be collisions; look a little further so they do not crowd
        // real hits out.
        for hit in self.lookup(topic, key, begin, end, max.saturating_mul(2).max(max))? {
            if out.len() >= max {
                break;
            }
            let Some(raw) = reader.raw_record_at(hit.physical_offset)? else {
                continue;
            };
            if record_carries(&raw, topic, key) {
                out.push(raw);
            }
        }
        Ok(out)
    }

    /// Deletes the files all of whose entries point below `physical_offset` (the commit log's
    /// new start after retention); answers how many entries went. A file's entries are taken
    /// to point below the next file's name, which [`Self::flush`] keeps true when a write fails.
    pub fn prune_below(&mut self, physical_offset: u64) -> Result<u64, KeyIndexError> {
        let mut removed = 0;
        // A file's entries end where the next file's begin; the last file is never complete.
        while self.files.len() > 1 && self.files[1].first_offset <= physical_offset {
            let file = self.files.remove(0);
            let len = self
                .disk
                .open(&file.path, OpenMode::Existing)
                .and_then(|f| f.len())
                .unwrap_or(0);
            // Not made durable: a file that comes back after a crash points only at records
            // that are gone, which lookups skip, and the next retention run deletes it again.
            self.disk
                .remove_file(&file.path)
                .map_err(io_err(&file.path))?;
            removed += len / ENTRY_SIZE;
        }
        Ok(removed)
    }
}

fn read_at(file: &DiskFile, path: &Path, offset: u64, len: u64) -> Result<Vec<u8>, KeyIndexError> {
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, offset).map_err(io_err(path))?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::sim::SimDisk;
    use crate::message::encode_properties;
    use crate::store::{FlushPolicy, MessageStore, StoreConfig};
    use crate::testsuite::{message, store_config};

    #[test]
    fn index_keys_splits_keys_and_adds_the_unique_key() {
        let p = encode_properties(&[("KEYS", "a  b a"), ("UNIQ_KEY", "U1"), ("TAGS", "t")]);
        assert_eq!(index_keys(&p), vec!["a", "b", "U1"]);
        assert_eq!(
            index_keys(&encode_properties(&[("TAGS", "t")])),
            Vec::<&str>::new()
        );
        assert_eq!(
            index_keys(&encode_properties(&[("UNIQ_KEY", "U")])),
            vec!["U"]
        );
    }

    #[test]
    fn the_hash_separates_topic_from_key_and_is_stable() {
        assert_ne!(key_hash("ab", "c"), key_hash("a", "bc"));
        assert_ne!(key_hash("T", "k"), key_hash("T", "k2"));
        // FNV-1a of the empty topic, a zero byte and the empty key: fixed for all builds.
        assert_eq!(key_hash("", ""), 0xaf63_bd4c_8601_b7df);
    }

    #[test]
    fn entries_round_trip() {
        let mut e = [0u8; 24];
        e[..8].copy_from_slice(&7u64.to_be_bytes());
        e[8..16].copy_from_slice(&300u64.to_be_bytes());
        e[16..].copy_from_slice(&(-5i64).to_be_bytes());
        assert_eq!(
            decode_entry(&e),
            (
                7,
                KeyHit {
                    physical_offset: 300,
                    store_timestamp: -5
                }
            )
        );
    }

    fn sim_config(disk: &SimDisk) -> StoreConfig {
        StoreConfig {
            disk: Disk::Simulated(disk.clone()),
            ..store_config(Path::new("/store"), 1 << 20, FlushPolicy::Sync)
        }
    }

    /// Appends one message keyed `k{id}` and answers its batch for the index.
    fn append_keyed(
        store: &mut MessageStore,
        id: u64,
    ) -> Result<KeyBatch, Box<dyn std::error::Error>> {
        let batch = [MessageToAppend {
            properties: encode_properties(&[("KEYS", &format!("k{id}"))]),
            ..message("T", 0, vec![0u8; 100])
        }];
        let results = store.append_batch(&batch)??;
        Ok(KeyBatch::of(&batch, &results))
    }

    /// A write that fails (a full disk) must not leave its entries to be written later: the
    /// next pass indexes the same records again, and the stale entries went into the older file
    /// at its roll, past the new file's name. A power cut then took the new file's copies, and
    /// pruning below the last record deleted the only entry of a record still in the log (found
    /// by the power-loss test, seed 9367625021464641759).
    #[test]
    fn a_failed_write_leaves_no_entry_past_the_next_files_name(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let sim = SimDisk::new();
        let disk = Disk::Simulated(sim.clone());
        let dir = Path::new("/store").join(KEY_INDEX_DIR);
        let mut store = MessageStore::open(sim_config(&sim))?;
        let mut index = KeyIndex::open(&disk, &dir, &store.reader())?.with_entries_per_file(4);
        disk.sync_dir(Path::new("/store"))?;
        let mut offsets = Vec::new();
        for id in 0..2 {
            let batch = append_keyed(&mut store, id)?;
            offsets.push(batch.start);
            index.apply(&batch, &store.reader())?;
        }
        // Records 2..=4 in one batch: 2 and 3 fill the first file, 4 rolls, and the write the
        // roll starts with fails.
        let mut batches = Vec::new();
        for id in 2..5 {
            let batch = append_keyed(&mut store, id)?;
            offsets.push(batch.start);
            batches.push(batch);
        }
        let failing = KeyBatch {
            start: batches[0].start,
            end: batches[2].end,
            records: 3,
            entries: batches.iter().flat_map(|b| b.entries.clone()).collect(),
        };
        sim.fail_writes(Some(io::ErrorKind::StorageFull));
        assert!(index.apply(&failing, &store.reader()).is_err());
        sim.fail_writes(None);
        // The next batch has the gap (records 2..=4) indexed again first.
        let batch = append_keyed(&mut store, 5)?;
        offsets.push(batch.start);
        index.apply(&batch, &store.reader())?;

        // The power goes before the second file (never full, never synced) reaches the disk.
        sim.kill();
        drop(index);
        drop(store);
        sim.power_cut(&mut |_| 0);
        let store = MessageStore::open(sim_config(&sim))?;
        let reader = store.reader();
        let mut index = KeyIndex::open(&disk, &dir, &reader)?.with_entries_per_file(4);
        index.catch_up_all(&reader)?;
        assert_eq!(index.watermark(), reader.commit_log_end());
        // Retention as if the log now began at record 3: its entry must outlive the pruning.
        index.prune_below(offsets[3])?;
        for id in 3..6 {
            let found = index.query(&reader, "T", &format!("k{id}"), i64::MIN, i64::MAX, 4)?;
            assert_eq!(found.len(), 1, "k{id} looked up after pruning: {found:?}");
        }
        Ok(())
    }
}
