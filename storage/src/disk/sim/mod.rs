//! [`SimDisk`]: an in-memory disk that can lose power, for the store's power-loss and
//! disk-full tests.
//!
//! It keeps two states of everything: what the running process sees, and what is durable.
//! - File data and size become durable when the file is fsynced (`sync_data` or `sync_all`,
//!   which this disk does not tell apart: both cover data and size).
//! - A directory's entries (files created, removed or renamed in it, subdirectories made)
//!   become durable when that directory is fsynced. Until then a new file vanishes on a power
//!   cut, and a removed or renamed-over file comes back.
//!
//! [`SimDisk::power_cut`] turns the durable state into the state, as a machine that lost power
//! and booted again. Writeback that happened before the cut is modelled too: for each file a
//! random prefix of the operations since its last fsync may have reached the platter, in the
//! order they were made (as ext4's `data=ordered` writes back appended data), and the write
//! after that prefix may be torn at a 512-byte sector boundary. Every handle opened before the
//! cut fails with EIO afterwards, so a store still holding them (its drop tries to flush) cannot
//! change the rebooted disk.
//!
//! Faults: [`SimDisk::set_capacity`] bounds the bytes all files may hold (a write past it
//! stores what fits and fails with `StorageFull`, as ENOSPC does),
//! [`SimDisk::fail_writes`] makes every write fail with a given error kind until cleared, and
//! [`SimDisk::limit_open_files`] makes an open past a number of open files fail with EMFILE.
//!
//! This file holds the disk: its state, its operations, the power cut and the fault controls;
//! `handles` holds what it gives out, [`SimFile`] and [`SimLock`].

mod handles;

pub use handles::{SimFile, SimLock};

use super::{DirEntry, OpenMode};
use crate::error::EMFILE;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Sector size of the simulated device: a torn write keeps whole sectors.
pub const SECTOR: u64 = 512;

type Ino = u64;

/// An operation on a file since its last fsync, replayed in part by a power cut.
#[derive(Clone, Debug)]
enum PendingOp {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default)]
struct FileNode {
    data: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<PendingOp>,
}

#[derive(Debug, Default)]
struct DirNode {
    entries: BTreeMap<String, Ino>,
    durable: BTreeMap<String, Ino>,
}

#[derive(Debug)]
enum Node {
    File(FileNode),
    Dir(DirNode),
}

#[derive(Debug)]
struct State {
    nodes: HashMap<Ino, Node>,
    next_ino: Ino,
    /// Bumped by every power cut; handles of an older generation fail.
    generation: u64,
    capacity: Option<u64>,
    failing_writes: Option<io::ErrorKind>,
    /// Descriptors the process may hold (see [`SimDisk::limit_open_files`]).
    open_file_limit: Option<usize>,
    /// Handles of this generation alive now, each a descriptor of a real process.
    open_files: usize,
    locks: HashSet<PathBuf>,
    power_cuts: u64,
    fsyncs: u64,
    /// Mutating operations left before the power goes (see [`SimDisk::cut_power_after`]).
    fuse: Option<u64>,
    /// The power is off: every operation fails until [`SimDisk::power_cut`] boots again.
    dead: bool,
}

impl State {
    /// Fails with EMFILE when no descriptor is left under the open-file bound.
    fn take_descriptor(&self) -> io::Result<()> {
        match self.open_file_limit {
            Some(limit) if self.open_files >= limit => Err(io::Error::from_raw_os_error(EMFILE)),
            _ => Ok(()),
        }
    }

    /// Fails when the power is off; counts a mutating operation down the fuse.
    fn operate(&mut self, mutating: bool) -> io::Result<()> {
        if self.dead {
            return Err(powered_off());
        }
        if mutating {
            if let Some(left) = self.fuse.as_mut() {
                if *left == 0 {
                    self.dead = true;
                    return Err(powered_off());
                }
                *left -= 1;
            }
        }
        Ok(())
    }
}

const ROOT: Ino = 0;

/// The in-memory disk; clones share it.
#[derive(Clone)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
    /// Stalls taken by [`SimDisk::stall_fsyncs`] and not yet dropped; separate from `state`, so
    /// a stalled fsync blocks nothing but its own thread.
    stalls: Arc<(Mutex<usize>, Condvar)>,
}

/// While alive, every fsync of its [`SimDisk`] blocks (a disk that takes its time); dropping it
/// lets them finish.
#[must_use = "fsyncs are stalled only while the guard lives"]
pub struct FsyncStall {
    stalls: Arc<(Mutex<usize>, Condvar)>,
}

impl Drop for FsyncStall {
    fn drop(&mut self) {
        let (count, released) = &*self.stalls;
        *count.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        released.notify_all();
    }
}

impl std::fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SimDisk")
    }
}

impl Default for SimDisk {
    fn default() -> Self {
        Self::new()
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} does not exist", path.display()),
    )
}

fn powered_off() -> io::Error {
    io::Error::other("the simulated machine lost power; this handle is gone")
}

/// The names of a path's components after the root; only absolute, normal paths are used.
fn names(path: &Path) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    for c in path.components() {
        match c {
            Component::RootDir => {}
            Component::Normal(n) => out.push(
                n.to_str()
                    .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?
                    .to_string(),
            ),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "simulated disk needs an absolute plain path: {}",
                        path.display()
                    ),
                ))
            }
        }
    }
    Ok(out)
}

impl State {
    fn dir(&self, ino: Ino) -> Option<&DirNode> {
        match self.nodes.get(&ino) {
            Some(Node::Dir(d)) => Some(d),
            _ => None,
        }
    }

    fn dir_mut(&mut self, ino: Ino) -> Option<&mut DirNode> {
        match self.nodes.get_mut(&ino) {
            Some(Node::Dir(d)) => Some(d),
            _ => None,
        }
    }

    fn file_mut(&mut self, ino: Ino) -> Option<&mut FileNode> {
        match self.nodes.get_mut(&ino) {
            Some(Node::File(f)) => Some(f),
            _ => None,
        }
    }

    fn lookup(&self, path: &Path) -> io::Result<Option<Ino>> {
        let mut at = ROOT;
        for name in names(path)? {
            let Some(dir) = self.dir(at) else {
                return Ok(None);
            };
            match dir.entries.get(&name) {
                Some(&ino) => at = ino,
                None => return Ok(None),
            }
        }
        Ok(Some(at))
    }

    /// The directory holding `path` and the final name.
    fn parent(&self, path: &Path) -> io::Result<(Ino, String)> {
        let mut parts = names(path)?;
        let name = parts
            .pop()
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let parent: PathBuf = std::iter::once("/".to_string()).chain(parts).collect();
        match self.lookup(&parent)? {
            Some(ino) if self.dir(ino).is_some() => Ok((ino, name)),
            _ => Err(not_found(&parent)),
        }
    }

    fn add(&mut self, node: Node) -> Ino {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(ino, node);
        ino
    }

    /// Bytes held by the files reachable from the root now.
    fn used(&self) -> u64 {
        let mut total = 0;
        let mut stack = vec![ROOT];
        while let Some(ino) = stack.pop() {
            match self.nodes.get(&ino) {
                Some(Node::Dir(d)) => stack.extend(d.entries.values().copied()),
                Some(Node::File(f)) => total += f.data.len() as u64,
                None => {}
            }
        }
        total
    }
}

impl SimDisk {
    /// An empty disk holding only the root directory `/`.
    pub fn new() -> SimDisk {
        let mut nodes = HashMap::new();
        nodes.insert(ROOT, Node::Dir(DirNode::default()));
        SimDisk {
            state: Arc::new(Mutex::new(State {
                nodes,
                next_ino: ROOT + 1,
                generation: 0,
                capacity: None,
                failing_writes: None,
                open_file_limit: None,
                open_files: 0,
                locks: HashSet::new(),
                power_cuts: 0,
                fsyncs: 0,
                fuse: None,
                dead: false,
            })),
            stalls: Arc::default(),
        }
    }

    /// Makes every fsync wait until the returned guard is dropped.
    pub fn stall_fsyncs(&self) -> FsyncStall {
        *self.stalls.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        FsyncStall {
            stalls: self.stalls.clone(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bounds the bytes all files together may hold; `None` removes the bound.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.state().capacity = bytes;
    }

    /// Makes every write and `set_len` fail with `kind` (`StorageFull` for ENOSPC, `Other`
    /// for EIO) until called with `None`.
    pub fn fail_writes(&self, kind: Option<io::ErrorKind>) {
        self.state().failing_writes = kind;
    }

    /// Bounds the files open at once, as `RLIMIT_NOFILE` bounds a process's descriptors: an open
    /// (or a directory listing, which needs a descriptor while it runs) past the bound fails
    /// with EMFILE. `None` removes the bound.
    pub fn limit_open_files(&self, limit: Option<usize>) {
        self.state().open_file_limit = limit;
    }

    /// Files open now (handles not yet dropped).
    pub fn open_files(&self) -> usize {
        self.state().open_files
    }

    /// Bytes held by the files reachable now.
    pub fn used_bytes(&self) -> u64 {
        self.state().used()
    }

    /// How many file fsyncs ran (a test can check that an operation synced at all).
    pub fn fsync_count(&self) -> u64 {
        self.state().fsyncs
    }

    /// The power goes after `ops` more mutating operations (writes, `set_len`, fsyncs,
    /// creates, removes, renames): the next one and everything after it fail with EIO, and
    /// nothing more reaches the disk, until [`Self::power_cut`]. This is how a cut lands in the
    /// middle of an append, a checkpoint or a retention run.
    pub fn cut_power_after(&self, ops: u64) {
        self.state().fuse = Some(ops);
    }

    /// The power goes now (see [`Self::cut_power_after`]). Drop the store while the disk is
    /// dead, then call [`Self::power_cut`]: a store dropped afterwards would flush into the
    /// rebooted disk.
    pub fn kill(&self) {
        self.state().dead = true;
    }

    /// Whether the power is off.
    pub fn is_dead(&self) -> bool {
        self.state().dead
    }

    pub fn power_cuts(&self) -> u64 {
        self.state().power_cuts
    }

    /// The machine loses power and boots again; see the module docs. `random(n)` answers a
    /// number in `0..n` and decides how much unsynced writeback each file got before the cut.
    pub fn power_cut(&self, random: &mut dyn FnMut(u64) -> u64) {
        let mut st = self.state();
        st.generation += 1;
        st.power_cuts += 1;
        st.open_files = 0;
        st.locks.clear();
        st.dead = false;
        st.fuse = None;
        // Directory entries fall back to the last fsynced listing; what is unreachable then
        // is gone.
        let mut reachable = HashSet::new();
        let mut stack = vec![ROOT];
        while let Some(ino) = stack.pop() {
            if !reachable.insert(ino) {
                continue;
            }
            if let Some(Node::Dir(d)) = st.nodes.get_mut(&ino) {
                d.entries = d.durable.clone();
                stack.extend(d.entries.values().copied());
            }
        }
        st.nodes.retain(|ino, _| reachable.contains(ino));
        let mut inos: Vec<Ino> = st.nodes.keys().copied().collect();
        inos.sort_unstable();
        for ino in inos {
            let Some(f) = st.file_mut(ino) else { continue };
            let mut data = std::mem::take(&mut f.durable);
            let pending = std::mem::take(&mut f.pending);
            let applied = random(pending.len() as u64 + 1) as usize;
            for op in &pending[..applied] {
                apply(&mut data, op);
            }
            if let Some(PendingOp::Write { offset, bytes }) = pending.get(applied) {
                // The next write reached the device up to some sector boundary inside it.
                let end = offset + bytes.len() as u64;
                let first_boundary = (offset / SECTOR + 1) * SECTOR;
                if first_boundary < end {
                    let sectors = (end - first_boundary).div_ceil(SECTOR);
                    let cut = first_boundary + random(sectors + 1) * SECTOR;
                    let cut = cut.min(end);
                    if random(2) == 1 {
                        let torn = PendingOp::Write {
                            offset: *offset,
                            bytes: bytes[..(cut - offset) as usize].to_vec(),
                        };
                        apply(&mut data, &torn);
                    }
                }
            }
            f.durable = data.clone();
            f.data = data;
        }
    }

    pub(super) fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state();
        st.operate(true)?;
        let mut at = ROOT;
        for name in names(path)? {
            let next = match st.dir(at) {
                Some(d) => d.entries.get(&name).copied(),
                None => return Err(io::Error::from(io::ErrorKind::NotADirectory)),
            };
            at = match next {
                Some(ino) => ino,
                None => {
                    let ino = st.add(Node::Dir(DirNode::default()));
                    if let Some(d) = st.dir_mut(at) {
                        d.entries.insert(name, ino);
                    }
                    ino
                }
            };
        }
        match st.dir(at) {
            Some(_) => Ok(()),
            None => Err(io::Error::from(io::ErrorKind::NotADirectory)),
        }
    }

    pub(super) fn open(&self, path: &Path, mode: OpenMode) -> io::Result<SimFile> {
        let mut st = self.state();
        st.operate(mode != OpenMode::Existing)?;
        st.take_descriptor()?;
        let (parent, name) = st.parent(path)?;
        let existing = st.dir(parent).and_then(|d| d.entries.get(&name).copied());
        let ino = match (existing, mode) {
            (Some(_), OpenMode::CreateNew) => {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists))
            }
            (Some(ino), _) => {
                if st.file_mut(ino).is_none() {
                    return Err(io::Error::from(io::ErrorKind::IsADirectory));
                }
                ino
            }
            (None, OpenMode::Existing) => return Err(not_found(path)),
            (None, _) => {
                let ino = st.add(Node::File(FileNode::default()));
                if let Some(d) = st.dir_mut(parent) {
                    d.entries.insert(name, ino);
                }
                ino
            }
        };
        st.open_files += 1;
        Ok(SimFile {
            disk: self.clone(),
            ino,
            generation: st.generation,
        })
    }

    pub(super) fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let mut st = self.state();
        st.operate(false)?;
        st.take_descriptor()?;
        let dir = st
            .lookup(path)?
            .and_then(|ino| st.dir(ino))
            .ok_or_else(|| not_found(path))?;
        Ok(dir
            .entries
            .iter()
            .map(|(name, ino)| DirEntry {
                name: Some(name.clone()),
                is_dir: matches!(st.nodes.get(ino), Some(Node::Dir(_))),
            })
            .collect())
    }

    pub(super) fn kind(&self, path: &Path) -> io::Result<Option<bool>> {
        let mut st = self.state();
        st.operate(false)?;
        Ok(st
            .lookup(path)?
            .map(|ino| matches!(st.nodes.get(&ino), Some(Node::Dir(_)))))
    }

    pub(super) fn file_len(&self, path: &Path) -> io::Result<u64> {
        let mut st = self.state();
        st.operate(false)?;
        let ino = st.lookup(path)?.ok_or_else(|| not_found(path))?;
        let file = st
            .file_mut(ino)
            .ok_or_else(|| io::Error::from(io::ErrorKind::IsADirectory))?;
        Ok(file.data.len() as u64)
    }

    pub(super) fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state();
        st.operate(true)?;
        let (parent, name) = st.parent(path)?;
        let ino = st
            .dir(parent)
            .and_then(|d| d.entries.get(&name).copied())
            .ok_or_else(|| not_found(path))?;
        if st.file_mut(ino).is_none() {
            return Err(io::Error::from(io::ErrorKind::IsADirectory));
        }
        if let Some(d) = st.dir_mut(parent) {
            d.entries.remove(&name);
        }
        Ok(())
    }

    /// Removes an empty directory (`rmdir`); durable once its parent is fsynced.
    pub(super) fn remove_dir(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state();
        st.operate(true)?;
        let (parent, name) = st.parent(path)?;
        let ino = st
            .dir(parent)
            .and_then(|d| d.entries.get(&name).copied())
            .ok_or_else(|| not_found(path))?;
        match st.dir(ino) {
            None => return Err(io::Error::from(io::ErrorKind::NotADirectory)),
            Some(d) if !d.entries.is_empty() => {
                return Err(io::Error::from(io::ErrorKind::DirectoryNotEmpty))
            }
            Some(_) => {}
        }
        if let Some(d) = st.dir_mut(parent) {
            d.entries.remove(&name);
        }
        Ok(())
    }

    pub(super) fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.state();
        st.operate(true)?;
        let (from_dir, from_name) = st.parent(from)?;
        let (to_dir, to_name) = st.parent(to)?;
        let ino = st
            .dir_mut(from_dir)
            .and_then(|d| d.entries.remove(&from_name))
            .ok_or_else(|| not_found(from))?;
        if let Some(d) = st.dir_mut(to_dir) {
            d.entries.insert(to_name, ino);
        }
        Ok(())
    }

    pub(super) fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state();
        st.operate(true)?;
        let ino = st.lookup(path)?.ok_or_else(|| not_found(path))?;
        let d = st.dir_mut(ino).ok_or_else(|| not_found(path))?;
        d.durable = d.entries.clone();
        Ok(())
    }

    pub(super) fn lock(&self, path: &Path) -> io::Result<SimLock> {
        let mut st = self.state();
        st.operate(false)?;
        if !st.locks.insert(path.to_path_buf()) {
            return Err(super::already_open());
        }
        Ok(SimLock {
            disk: self.clone(),
            path: path.to_path_buf(),
            generation: st.generation,
        })
    }
}

fn apply(data: &mut Vec<u8>, op: &PendingOp) {
    match op {
        PendingOp::Write { offset, bytes } => {
            let end = *offset as usize + bytes.len();
            if data.len() < end {
                data.resize(end, 0);
            }
            data[*offset as usize..end].copy_from_slice(bytes);
        }
        PendingOp::SetLen(len) => data.resize(*len as usize, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn always(n: u64) -> impl FnMut(u64) -> u64 {
        move |bound| n.min(bound.saturating_sub(1))
    }

    #[test]
    fn only_fsynced_data_and_entries_survive_a_power_cut() -> io::Result<()> {
        let disk = SimDisk::new();
        disk.create_dir_all(Path::new("/d"))?;
        disk.sync_dir(Path::new("/"))?;
        let a = disk.open(Path::new("/d/a"), OpenMode::Create)?;
        a.write_all_at(b"hello", 0)?;
        a.sync()?;
        // Synced data but an unsynced directory entry: the file is gone after the cut.
        disk.power_cut(&mut always(0));
        assert_eq!(disk.kind(Path::new("/d/a"))?, None);
        assert!(a.len().is_err(), "old handles fail after a power cut");

        let a = disk.open(Path::new("/d/a"), OpenMode::Create)?;
        disk.sync_dir(Path::new("/d"))?;
        a.write_all_at(b"hello", 0)?;
        a.sync()?;
        a.write_all_at(b" world", 5)?;
        disk.remove_file(Path::new("/d/a"))?;
        disk.power_cut(&mut always(0));
        // The removal was never made durable, nor the second write.
        let a = disk.open(Path::new("/d/a"), OpenMode::Existing)?;
        assert_eq!(a.len()?, 5);
        Ok(())
    }

    #[test]
    fn a_torn_write_keeps_whole_sectors_in_order() -> io::Result<()> {
        let disk = SimDisk::new();
        let f = disk.open(Path::new("/f"), OpenMode::Create)?;
        disk.sync_dir(Path::new("/"))?;
        f.write_all_at(&[1u8; 100], 0)?;
        f.write_all_at(&[2u8; 2000], 100)?;
        // One op applied, the next torn after its first sector boundary plus one sector.
        let mut answers = vec![1u64, 1, 1].into_iter();
        disk.power_cut(&mut |_| answers.next().unwrap_or(0));
        let f = disk.open(Path::new("/f"), OpenMode::Existing)?;
        assert_eq!(f.len()?, 1024);
        Ok(())
    }
}
