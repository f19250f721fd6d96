//! A bounded set of open consume-queue files.
//!
//! A store may hold hundreds of thousands of queues, each with files of its own. Holding a
//! descriptor for every one of them would run the process out of descriptors (`RLIMIT_NOFILE`
//! is 1,024 on many desktops, 256 on macOS) long before the disk fills, so queue files are
//! opened when read or written and closed when others need the room: at most `capacity` are
//! held at once (a reader still using a handle that was let go keeps it a moment longer).
//!
//! Eviction is CLOCK (second chance): a file used since the hand last passed keeps its
//! descriptor for another round, so hot queues keep theirs and a hit costs one atomic load.
//! A file is closed without an fsync of its own: an fsync through a descriptor opened later
//! covers the writes made through this one (the page cache belongs to the file, not the
//! descriptor), and the store fsyncs queue files before every checkpoint.
//!
//! When an open fails for lack of descriptors (EMFILE, ENFILE), every file not in use is
//! closed and the open is tried once more.

use crate::disk::{Disk, DiskFile, OpenMode};
use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};

// Still public at its path from before it moved down to `error`, where `StoreError` needs it
// without importing this module.
pub use crate::error::is_out_of_descriptors;

/// Counters of a [`FileCache`], for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileCacheStats {
    /// Files open now.
    pub open: usize,
    /// The most files held open at once, by design.
    pub capacity: usize,
    /// The most files open at once so far.
    pub peak_open: usize,
    /// Opens since the cache was made (first opens and re-opens after eviction).
    pub opens: u64,
    /// Files closed to make room.
    pub evictions: u64,
}

/// The bounded set of open files; see the module docs.
#[derive(Debug)]
pub struct FileCache {
    disk: Disk,
    capacity: usize,
    /// Open files in CLOCK order; entries of files dropped since are skipped.
    ring: Mutex<VecDeque<Weak<CachedFile>>>,
    open: AtomicUsize,
    peak_open: AtomicUsize,
    opens: AtomicU64,
    evictions: AtomicU64,
}

/// One file of a [`FileCache`]: its path, and its descriptor while it holds one.
#[derive(Debug)]
pub struct CachedFile {
    cache: Arc<FileCache>,
    /// Boxed: exactly as long as the path, where a joined `PathBuf` keeps spare capacity
    /// (a store may hold hundreds of thousands of these).
    path: Box<Path>,
    handle: RwLock<Option<Arc<DiskFile>>>,
    /// Used since the clock hand last passed.
    referenced: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl FileCache {
    /// A cache holding at most `capacity` (at least 1) files open.
    pub fn new(disk: Disk, capacity: usize) -> Arc<FileCache> {
        Arc::new(FileCache {
            disk,
            capacity: capacity.max(1),
            ring: Mutex::new(VecDeque::new()),
            open: AtomicUsize::new(0),
            peak_open: AtomicUsize::new(0),
            opens: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        })
    }

    pub fn disk(&self) -> &Disk {
        &self.disk
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn stats(&self) -> FileCacheStats {
        FileCacheStats {
            open: self.open.load(Ordering::Relaxed),
            capacity: self.capacity,
            peak_open: self.peak_open.load(Ordering::Relaxed),
            opens: self.opens.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }

    /// A file that exists on disk, opened on first use.
    pub fn existing(self: &Arc<Self>, path: PathBuf) -> Arc<CachedFile> {
        Arc::new(CachedFile {
            cache: self.clone(),
            path: path.into_boxed_path(),
            handle: RwLock::new(None),
            referenced: AtomicBool::new(false),
        })
    }

    /// Opens (creating, per `mode`) the file now and keeps it open.
    pub fn open(self: &Arc<Self>, path: PathBuf, mode: OpenMode) -> io::Result<Arc<CachedFile>> {
        let file = self.open_descriptor(&path, mode)?;
        let cached = self.existing(path);
        *cached.handle.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(file));
        self.admit(&cached);
        Ok(cached)
    }

    fn open_descriptor(&self, path: &Path, mode: OpenMode) -> io::Result<DiskFile> {
        self.make_room();
        let file = match self.disk.open(path, mode) {
            Err(e) if is_out_of_descriptors(&e) => {
                let closed = self.shed();
                tracing::warn!(file = %path.display(), closed, "out of file descriptors; closed idle queue files and retrying");
                self.disk.open(path, mode)?
            }
            other => other?,
        };
        self.opens.fetch_add(1, Ordering::Relaxed);
        Ok(file)
    }

    /// Closes files until one more fits under the capacity.
    fn make_room(&self) {
        let open = self.open.load(Ordering::Acquire);
        if open >= self.capacity {
            let mut ring = lock(&self.ring);
            self.evict(&mut ring, open + 1 - self.capacity, true);
        }
    }

    /// Counts a newly opened file in.
    fn admit(&self, file: &Arc<CachedFile>) {
        let mut ring = lock(&self.ring);
        if ring.len() > 2 * self.capacity {
            ring.retain(|w| w.strong_count() > 0);
        }
        ring.push_back(Arc::downgrade(file));
        let open = self.open.fetch_add(1, Ordering::AcqRel) + 1;
        self.peak_open.fetch_max(open, Ordering::Relaxed);
    }

    /// Closes up to `wanted` files, sparing those used since the hand passed when
    /// `second_chance` holds; answers how many it closed. Two rounds at most: the first may
    /// only clear reference bits.
    fn evict(
        &self,
        ring: &mut VecDeque<Weak<CachedFile>>,
        wanted: usize,
        second_chance: bool,
    ) -> usize {
        let mut closed = 0;
        let mut steps = 2 * ring.len();
        while closed < wanted && steps > 0 {
            steps -= 1;
            let Some(weak) = ring.pop_front() else {
                break;
            };
            let Some(file) = weak.upgrade() else {
                continue;
            };
            if second_chance && file.referenced.swap(false, Ordering::Relaxed) {
                ring.push_back(weak);
                continue;
            }
            // An opener holds the write lock while it admits: never wait on it here.
            let Ok(mut handle) = file.handle.try_write() else {
                ring.push_back(weak);
                continue;
            };
            if handle.take().is_some() {
                self.open.fetch_sub(1, Ordering::AcqRel);
                self.evictions.fetch_add(1, Ordering::Relaxed);
                closed += 1;
            }
        }
        closed
    }

    /// Closes every open file no one is opening right now; answers how many. The store calls
    /// this when the process runs short of descriptors.
    pub fn shed(&self) -> usize {
        let mut ring = lock(&self.ring);
        let wanted = ring.len();
        self.evict(&mut ring, wanted, false)
    }
}

impl CachedFile {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file, opening it (and evicting another) when it holds no descriptor.
    pub fn handle(self: &Arc<Self>) -> io::Result<Arc<DiskFile>> {
        if !self.referenced.load(Ordering::Relaxed) {
            self.referenced.store(true, Ordering::Relaxed);
        }
        if let Some(h) = self
            .handle
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            return Ok(h.clone());
        }
        let mut slot = self.handle.write().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = slot.as_ref() {
            return Ok(h.clone());
        }
        let h = Arc::new(self.cache.open_descriptor(&self.path, OpenMode::Existing)?);
        *slot = Some(h.clone());
        drop(slot);
        self.cache.admit(self);
        Ok(h)
    }
}

impl Drop for CachedFile {
    fn drop(&mut self) {
        let handle = self.handle.get_mut().unwrap_or_else(|e| e.into_inner());
        if handle.take().is_some() {
            self.cache.open.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::sim::SimDisk;

    fn files(cache: &Arc<FileCache>, disk: &Disk, n: usize) -> io::Result<Vec<Arc<CachedFile>>> {
        disk.create_dir_all(Path::new("/q"))?;
        let mut out = Vec::new();
        for i in 0..n {
            let path = PathBuf::from(format!("/q/{i}"));
            drop(disk.open(&path, OpenMode::Create)?);
            out.push(cache.existing(path));
        }
        Ok(out)
    }

    #[test]
    fn never_more_open_than_the_capacity_and_a_hot_file_keeps_its_descriptor() -> io::Result<()> {
        let sim = SimDisk::new();
        let disk = Disk::Simulated(sim.clone());
        let cache = FileCache::new(disk.clone(), 4);
        let all = files(&cache, &disk, 40)?;
        let hot = &all[0];
        for (i, f) in all.iter().enumerate() {
            f.handle()?.write_all_at(&[i as u8], 0)?;
            hot.handle()?;
            assert!(cache.stats().open <= 4);
            assert!(sim.open_files() <= 4, "{} files open", sim.open_files());
        }
        let opens_before = cache.stats().opens;
        hot.handle()?;
        assert_eq!(
            cache.stats().opens,
            opens_before,
            "the hot file stayed open"
        );
        // Every file reads back what was written through a descriptor since closed.
        for (i, f) in all.iter().enumerate() {
            let mut b = [0u8; 1];
            f.handle()?.read_exact_at(&mut b, 0)?;
            assert_eq!(b[0], i as u8);
        }
        assert_eq!(cache.stats().peak_open, 4);
        Ok(())
    }

    #[test]
    fn out_of_descriptors_closes_idle_files_and_retries() -> io::Result<()> {
        let sim = SimDisk::new();
        let disk = Disk::Simulated(sim.clone());
        let cache = FileCache::new(disk.clone(), 100);
        let all = files(&cache, &disk, 10)?;
        for f in &all[..8] {
            f.handle()?;
        }
        // Someone else holds the last descriptors: the cache's next open meets EMFILE.
        sim.limit_open_files(Some(8));
        all[9].handle()?;
        assert_eq!(sim.open_files(), 1, "idle files were closed to make room");
        // Nothing left to close and nothing free: the error reaches the caller.
        let outsider = disk.open(Path::new("/q/8"), OpenMode::Existing);
        sim.limit_open_files(Some(1));
        let err = all[0].handle().map(|_| ()).err();
        assert!(err.as_ref().is_some_and(is_out_of_descriptors), "{err:?}");
        drop(outsider);
        Ok(())
    }

    #[test]
    fn dropping_a_file_gives_its_descriptor_back() -> io::Result<()> {
        let disk = Disk::Simulated(SimDisk::new());
        let cache = FileCache::new(disk.clone(), 4);
        let mut all = files(&cache, &disk, 3)?;
        for f in &all {
            f.handle()?;
        }
        assert_eq!(cache.stats().open, 3);
        all.truncate(1);
        assert_eq!(cache.stats().open, 1);
        Ok(())
    }
}
