//! The file-system seam under the store: the few operations the commit log, the consume
//! queues, the checkpoint and recovery perform, with errors naming the path.
//!
//! [`Disk`] is the file system and [`DiskFile`] an open file. Both are enums rather than trait
//! objects: with only the real disk compiled in (production builds), every match has one arm
//! and the per-write cost is the `pwrite` itself; with the `testsuite` feature a second arm
//! routes to [`sim::SimDisk`], an in-memory disk that can lose power (see its docs).
//!
//! The store only ever needs: open or create a file for reading and writing, `pread`,
//! `pwrite`, length, `set_len`, `fdatasync`/`fsync`, create a directory, list a directory,
//! remove and rename a file, fsync a directory, and take the store's lock file.

#[cfg(any(test, feature = "testsuite"))]
pub mod sim;

use crate::error::{io_err, StoreError};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The file system the store lives on.
#[derive(Clone, Debug, Default)]
pub enum Disk {
    /// The operating system's file system (`std::fs`).
    #[default]
    Os,
    /// An in-memory disk for power-loss and disk-full tests.
    #[cfg(any(test, feature = "testsuite"))]
    Simulated(sim::SimDisk),
}

/// How [`Disk::open`] treats a missing or existing file. Files are always opened for reading
/// and writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// The file must exist.
    Existing,
    /// Created empty when missing, opened as it is otherwise.
    Create,
    /// Created empty; an existing file is an error (`AlreadyExists`).
    CreateNew,
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name; `None` when it is not valid UTF-8 (the store names nothing so).
    pub name: Option<String>,
    pub is_dir: bool,
}

/// An open file of a [`Disk`].
#[derive(Debug)]
pub enum DiskFile {
    Os(File),
    #[cfg(any(test, feature = "testsuite"))]
    Simulated(sim::SimFile),
}

impl DiskFile {
    #[inline]
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match self {
            DiskFile::Os(f) => f.read_exact_at(buf, offset),
            #[cfg(any(test, feature = "testsuite"))]
            DiskFile::Simulated(f) => f.read_exact_at(buf, offset),
        }
    }

    #[inline]
    pub fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        match self {
            DiskFile::Os(f) => f.write_all_at(buf, offset),
            #[cfg(any(test, feature = "testsuite"))]
            DiskFile::Simulated(f) => f.write_all_at(buf, offset),
        }
    }

    // No `is_empty`: the length is an I/O call, and nothing asks for emptiness alone.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> io::Result<u64> {
        match self {
            DiskFile::Os(f) => f.metadata().map(|m| m.len()),
            #[cfg(any(test, feature = "testsuite"))]
            DiskFile::Simulated(f) => f.len(),
        }
    }

    pub fn set_len(&self, len: u64) -> io::Result<()> {
        match self {
            DiskFile::Os(f) => f.set_len(len),
            #[cfg(any(test, feature = "testsuite"))]
            DiskFile::Simulated(f) => f.set_len(len),
        }
    }

    /// fdatasync: the data and the file size survive a power cut.
    pub fn sync_data(&self) -> io::Result<()> {
        match self {
            DiskFile::Os(f) => f.sync_data(),
            #[cfg(any(test, feature = "testsuite"))]
            DiskFile::Simulated(f) => f.sync(),
        }
    }

    /// fsync: [`Self::sync_data`] plus the rest of the inode's metadata.
    pub fn sync_all(&self) -> io::Result<()> {
        match self {
            DiskFile::Os(f) => f.sync_all(),
            #[cfg(any(test, feature = "testsuite"))]
            DiskFile::Simulated(f) => f.sync(),
        }
    }
}

/// The store's exclusive lock on its directory, held while this value lives.
#[derive(Debug)]
pub enum DirLock {
    Os(#[allow(dead_code)] File),
    #[cfg(any(test, feature = "testsuite"))]
    Simulated(#[allow(dead_code)] sim::SimLock),
}

impl Disk {
    pub fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        match self {
            Disk::Os => std::fs::create_dir_all(path),
            #[cfg(any(test, feature = "testsuite"))]
            Disk::Simulated(d) => d.create_dir_all(path),
        }
    }

    pub fn open(&self, path: &Path, mode: OpenMode) -> io::Result<DiskFile> {
        match self {
            Disk::Os => {
                let mut options = OpenOptions::new();
                options.read(true).write(true);
                match mode {
                    OpenMode::Existing => {}
                    OpenMode::Create => {
                        options.create(true).truncate(false);
                    }
                    OpenMode::CreateNew => {
                        options.create_new(true);
                    }
                }
                options.open(path).map(DiskFile::Os)
            }
            #[cfg(any(test, feature = "testsuite"))]
            Disk::Simulated(d) => d.open(path, mode).map(DiskFile::Simulated),
        }
    }

    /// The entries of a directory, in no particular order.
    pub fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        match self {
            Disk::Os => {
                let mut out = Vec::new();
                for entry in std::fs::read_dir(path)? {
                    let entry = entry?;
                    out.push(DirEntry {
                        name: entry.file_name().to_str().map(str::to_string),
                        is_dir: entry.file_type()?.is_dir(),
                    });
                }
                Ok(out)
            }
            #[cfg(any(test, feature = "testsuite"))]
            Disk::Simulated(d) => d.read_dir(path),
        }
    }

    /// Whether `path` names a file (`Some(false)`), a directory (`Some(true)`) or nothing.
    pub fn kind(&self, path: &Path) -> io::Result<Option<bool>> {
        match self {
            Disk::Os => match std::fs::metadata(path) {
                Ok(m) => Ok(Some(m.is_dir())),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            },
            #[cfg(any(test, feature = "testsuite"))]
            Disk::Simulated(d) => d.kind(path),
        }
    }

    /// The length of the file at `path`, read without opening it (no descriptor needed).
    pub fn file_len(&self, path: &Path) -> io::Result<u64> {
        match self {
            Disk::Os => std::fs::metadata(path).map(|m| m.len()),
            #[cfg(any(test, feature = "testsuite"))]
            Disk::Simulated(d) => d.file_len(path),
        }
    }

    pub fn remove_file(&self, path: &Path) -> io::Result<()> {
        match self {
            Disk::Os => std::fs::remove_file(path),
            #[cfg(any(test, feature = "testsuite"))]
            Disk::Simulated(d) => d.remove_file(path),
        }
    }

    /// Removes an empty directory.
    pub fn remove_dir(&self, path: &Path) -> io::Result<()> {
        match self {
            Disk::Os => std::fs::remove_dir(path),
            #[cfg(any(test, feature = "testsuite"))]
            Disk::Simulated(d) => d.remove_dir(path),
        }
    }

    pub fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        match self {
            Disk::Os => std::fs::rename(from, to),
            #[cfg(any(test, feature = "testsuite"))]
            Disk::Simulated(d) => d.rename(from, to),
        }
    }

    /// fsyncs a directory, so a file created, removed or renamed inside survives a power cut.
    pub fn sync_dir(&self, dir: &Path) -> Result<(), StoreError> {
        match self {
            Disk::Os => File::open(dir).and_then(|d| d.sync_all()),
            #[cfg(any(test, feature = "testsuite"))]
            Disk::Simulated(d) => d.sync_dir(dir),
        }
        .map_err(|e| io_err(dir, e))
    }

    /// Replaces `dir/name` with `bytes` so a crash leaves the old file or the new one: written to
    /// `name.tmp`, fsynced, renamed over it, the directory fsynced.
    pub fn replace_file(&self, dir: &Path, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let tmp = dir.join(format!("{name}.tmp"));
        let f = self
            .open(&tmp, OpenMode::Create)
            .map_err(|e| io_err(&tmp, e))?;
        f.set_len(0).map_err(|e| io_err(&tmp, e))?;
        f.write_all_at(bytes, 0).map_err(|e| io_err(&tmp, e))?;
        f.sync_all().map_err(|e| io_err(&tmp, e))?;
        let path = dir.join(name);
        self.rename(&tmp, &path).map_err(|e| io_err(&path, e))?;
        self.sync_dir(dir)
    }

    /// Takes the exclusive lock file `dir/lock`, held for as long as the returned value lives:
    /// two writers on one directory would interleave records.
    pub fn lock_dir(&self, dir: &Path) -> Result<DirLock, StoreError> {
        let path = dir.join("lock");
        match self {
            Disk::Os => {
                let file = OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&path)
                    .map_err(|e| io_err(&path, e))?;
                match file.try_lock() {
                    Ok(()) => Ok(DirLock::Os(file)),
                    Err(std::fs::TryLockError::WouldBlock) => Err(io_err(&path, already_open())),
                    Err(std::fs::TryLockError::Error(e)) => Err(io_err(&path, e)),
                }
            }
            #[cfg(any(test, feature = "testsuite"))]
            Disk::Simulated(d) => d
                .lock(&path)
                .map(DirLock::Simulated)
                .map_err(|e| io_err(&path, e)),
        }
    }
}

fn already_open() -> io::Error {
    io::Error::new(
        io::ErrorKind::WouldBlock,
        "the store directory is already open in another store",
    )
}
