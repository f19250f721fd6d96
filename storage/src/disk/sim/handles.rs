//! The handles a [`SimDisk`] gives out: [`SimFile`], an open file, and [`SimLock`], the store's
//! lock file.
//!
//! Each remembers the power-cut generation it was opened in and fails (or lets go of nothing)
//! once the machine has rebooted, so a store still holding handles from before a cut cannot
//! change the rebooted disk. Kept apart from the disk's operations (the parent module): a handle
//! touches the disk's state only through the [`SimDisk`] it came from.

use super::{apply, powered_off, Ino, PendingOp, SimDisk, State};
use std::io;
use std::path::PathBuf;

/// An open file of a [`SimDisk`]; keeps working after its name is removed, until a power cut.
#[derive(Debug)]
pub struct SimFile {
    pub(super) disk: SimDisk,
    pub(super) ino: Ino,
    pub(super) generation: u64,
}

impl SimFile {
    /// The file's node, or EIO when the handle predates a power cut.
    fn with<T>(
        &self,
        mutating: bool,
        f: impl FnOnce(&mut State, Ino) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut st = self.disk.state();
        if st.generation != self.generation {
            return Err(powered_off());
        }
        st.operate(mutating)?;
        f(&mut st, self.ino)
    }

    pub(in crate::disk) fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.with(false, |st, ino| {
            let file = st.file_mut(ino).ok_or_else(powered_off)?;
            let start = offset as usize;
            let src = file
                .data
                .get(start..start + buf.len())
                .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
            buf.copy_from_slice(src);
            Ok(())
        })
    }

    pub(in crate::disk) fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.with(true, |st, ino| {
            if let Some(kind) = st.failing_writes {
                return Err(io::Error::new(kind, "injected write failure"));
            }
            let room = match st.capacity {
                Some(cap) => {
                    let used = st.used();
                    let len = st.file_mut(ino).map_or(0, |f| f.data.len() as u64);
                    let end = offset + buf.len() as u64;
                    let growth = end.saturating_sub(len);
                    if used + growth > cap {
                        // Like a short pwrite followed by ENOSPC: what fits is written.
                        Some((cap.saturating_sub(used) + len).saturating_sub(offset))
                    } else {
                        None
                    }
                }
                None => None,
            };
            let file = st.file_mut(ino).ok_or_else(powered_off)?;
            let written = room.map_or(buf.len(), |r| (r as usize).min(buf.len()));
            if written > 0 {
                let op = PendingOp::Write {
                    offset,
                    bytes: buf[..written].to_vec(),
                };
                apply(&mut file.data, &op);
                file.pending.push(op);
            }
            if room.is_some() {
                return Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    "no space left on the simulated device",
                ));
            }
            Ok(())
        })
    }

    pub(in crate::disk) fn len(&self) -> io::Result<u64> {
        self.with(false, |st, ino| {
            Ok(st.file_mut(ino).ok_or_else(powered_off)?.data.len() as u64)
        })
    }

    pub(in crate::disk) fn set_len(&self, len: u64) -> io::Result<()> {
        self.with(true, |st, ino| {
            if let Some(kind) = st.failing_writes {
                return Err(io::Error::new(kind, "injected write failure"));
            }
            let used = st.used();
            let capacity = st.capacity;
            let file = st.file_mut(ino).ok_or_else(powered_off)?;
            let growth = len.saturating_sub(file.data.len() as u64);
            if capacity.is_some_and(|cap| used + growth > cap) {
                return Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    "no space left on the simulated device",
                ));
            }
            let op = PendingOp::SetLen(len);
            apply(&mut file.data, &op);
            file.pending.push(op);
            Ok(())
        })
    }

    pub(in crate::disk) fn sync(&self) -> io::Result<()> {
        let (count, released) = &*self.disk.stalls;
        let stalled = count.lock().unwrap_or_else(|e| e.into_inner());
        drop(
            released
                .wait_while(stalled, |stalls| *stalls > 0)
                .unwrap_or_else(|e| e.into_inner()),
        );
        self.with(true, |st, ino| {
            st.fsyncs += 1;
            let file = st.file_mut(ino).ok_or_else(powered_off)?;
            file.durable = file.data.clone();
            file.pending.clear();
            Ok(())
        })
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut st = self.disk.state();
        if st.generation == self.generation {
            st.open_files = st.open_files.saturating_sub(1);
        }
    }
}

/// The simulated lock file: released when dropped, and by a power cut.
#[derive(Debug)]
pub struct SimLock {
    pub(super) disk: SimDisk,
    pub(super) path: PathBuf,
    pub(super) generation: u64,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut st = self.disk.state();
        if st.generation == self.generation {
            st.locks.remove(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::OpenMode;
    use std::path::Path;

    #[test]
    fn a_full_disk_stores_what_fits_and_says_so() -> io::Result<()> {
        let disk = SimDisk::new();
        disk.set_capacity(Some(10));
        let f = disk.open(Path::new("/f"), OpenMode::Create)?;
        let err = f.write_all_at(&[7u8; 16], 0).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        assert_eq!(f.len()?, 10);
        f.set_len(0)?;
        f.write_all_at(&[7u8; 8], 0)?;
        Ok(())
    }
}
