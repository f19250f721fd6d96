//! [`StoreError`], the error of the commit log, the consume queues and the message store.
//!
//! It sits below every module that raises it (`commit_log`, `store`), so none of them has to
//! import another to name its error.
//!
//! `Clone` is cheap (the I/O cause is shared behind an `Arc`): one failed fsync answers every
//! waiter it covered with the same error.
//!
//! The errno numbers the store tells apart live here too, with [`is_out_of_descriptors`]: the
//! file cache, the simulated disk and [`StoreError`] all need them, and this module imports
//! none of those.

use crate::message::MessageEncodeError;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    #[error("i/o error on {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    /// A commit-log fsync failed. The failure is sticky: the kernel may have dropped the dirty
    /// pages, so a later fsync that succeeds would prove nothing; every durability wait fails
    /// until the store is reopened and recovery repairs the tail.
    #[error("a commit-log fsync failed; the store must be reopened")]
    FsyncFailed {
        #[source]
        source: Arc<StoreError>,
    },
    #[error("corrupt commit-log record at physical offset {physical_offset} in {path}: {reason}")]
    CorruptRecord {
        path: PathBuf,
        physical_offset: u64,
        reason: String,
    },
    /// The device is full (ENOSPC or a quota): nothing of the batch was kept, and the store
    /// takes appends again as soon as there is room.
    #[error("no space left for {path}; the batch was not stored")]
    DiskFull {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    /// The process (EMFILE) or the system (ENFILE) ran out of file descriptors: nothing of the
    /// batch was kept, idle queue files were closed, and the next append is tried afresh.
    #[error("out of file descriptors opening {path}; the batch was not stored")]
    OutOfDescriptors {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    /// An earlier write failed, or the store was closed: it refuses further appends until it
    /// is reopened, when recovery repairs the tail.
    #[error("the store refuses writes after a failed write or close; reopen it")]
    WritesRefused,
    /// A validated message could not be encoded: an internal inconsistency, not bad input.
    #[error("a validated message could not be encoded")]
    Encode {
        #[source]
        source: MessageEncodeError,
    },
}

impl StoreError {
    /// Whether this is [`StoreError::DiskFull`]: the caller may retry once space returns.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, StoreError::DiskFull { .. })
    }

    /// Whether this is [`StoreError::OutOfDescriptors`]: the caller may retry at once.
    pub fn is_out_of_descriptors(&self) -> bool {
        matches!(self, StoreError::OutOfDescriptors { .. })
    }

    /// An I/O error whose cause is a descriptor shortage (EMFILE, ENFILE).
    pub(crate) fn io_says_out_of_descriptors(&self) -> bool {
        matches!(self, StoreError::Io { source, .. } if is_out_of_descriptors(source))
    }

    /// An I/O error whose cause is a full device (ENOSPC, or EDQUOT for a quota).
    pub(crate) fn io_says_disk_full(&self) -> bool {
        matches!(self, StoreError::Io { source, .. }
            if matches!(source.kind(), io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded))
    }
}

/// A batch the store refuses for what it contains. Expected in normal operation, apart from
/// [`StoreError`] as sled keeps them apart: the sender is told (MESSAGE_ILLEGAL on the wire),
/// nothing of the batch is appended, and the store carries on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AppendRejected {
    #[error("message body of {size} bytes exceeds the limit of {limit} bytes")]
    MessageTooLarge { size: usize, limit: usize },
    #[error("properties of {size} bytes exceed the 32767-byte limit")]
    PropertiesTooLarge { size: usize },
    #[error("invalid topic name {topic:?}")]
    InvalidTopic { topic: String },
}

/// An append's answer: fail-stop failures outside, the rejection of a batch by its content
/// inside (`store.append_batch(..)?` leaves the expected outcome to handle).
pub type Appended<T> = Result<Result<T, AppendRejected>, StoreError>;

/// "Too many open files" for the process (EMFILE) and for the system (ENFILE): the same
/// numbers on Linux and macOS.
pub(crate) const EMFILE: i32 = 24;
const ENFILE: i32 = 23;

/// Whether `error` says the process or the system has no descriptor left.
pub fn is_out_of_descriptors(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(EMFILE | ENFILE))
}

pub(crate) fn io_err(path: impl Into<PathBuf>, source: io::Error) -> StoreError {
    StoreError::Io {
        path: path.into(),
        source: Arc::new(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    fn chain(e: &dyn Error) -> Vec<String> {
        let mut out = vec![e.to_string()];
        let mut next = e.source();
        while let Some(cause) = next {
            out.push(cause.to_string());
            next = cause.source();
        }
        out
    }

    #[test]
    fn each_cause_is_told_once_down_the_source_chain() {
        let io = io_err(
            "/x/commitlog",
            io::Error::new(io::ErrorKind::StorageFull, "no space"),
        );
        assert_eq!(chain(&io), ["i/o error on /x/commitlog", "no space"]);
        let sticky = StoreError::FsyncFailed {
            source: Arc::new(io.clone()),
        };
        assert_eq!(
            chain(&sticky),
            [
                "a commit-log fsync failed; the store must be reopened",
                "i/o error on /x/commitlog",
                "no space"
            ]
        );
    }
}
