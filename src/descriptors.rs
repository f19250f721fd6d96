//! The file-descriptor budget of `skiff serve`: the process's `RLIMIT_NOFILE`, raised at start,
//! and how it is shared between client connections and the store's queue files.
//!
//! Every connection holds a descriptor, and so does every consume-queue file the store keeps
//! open. Neither may starve the other: a flood of idle connections must not stop the store
//! from opening the queue a producer writes to. So the budget is split up front: a fixed
//! reserve for what the node holds whatever its load (commit-log segments, the metadata
//! database, the key and timer indexes, the listeners, standard streams), a share for queue
//! files (the store closes idle ones to stay under it), and the rest for connections (over the
//! cap a new connection is closed at once, with a log line and a metric).

use std::io;

/// Descriptors kept for what the node holds whatever its load.
pub const RESERVED: u64 = 64;
/// The queue files' share is a quarter of what is left, within these bounds.
pub const MIN_QUEUE_FILES: u64 = 16;
pub const MAX_QUEUE_FILES: u64 = 4096;
/// No soft limit beyond this is asked for (a hard limit of "unlimited" is not a number to use).
pub const MAX_OPEN_FILES: u64 = 1 << 20;

/// `RLIMIT_NOFILE` as start-up left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFileLimit {
    /// The soft limit found at start.
    pub soft_before: u64,
    /// The soft limit now: the budget.
    pub soft: u64,
    pub hard: u64,
}

/// How a budget of descriptors is shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescriptorShares {
    /// Consume-queue files the store may hold open.
    pub queue_files: usize,
    /// Client connections open at once.
    pub connections: usize,
}

/// Splits a budget of `limit` descriptors (see the module docs).
pub fn shares(limit: u64) -> DescriptorShares {
    let spare = limit.saturating_sub(RESERVED);
    let queue_files = (spare / 4).clamp(MIN_QUEUE_FILES, MAX_QUEUE_FILES);
    let connections = spare.saturating_sub(queue_files).max(1);
    DescriptorShares {
        queue_files: queue_files as usize,
        connections: usize::try_from(connections).unwrap_or(usize::MAX),
    }
}

/// Raises the soft `RLIMIT_NOFILE` to `wanted` (0: the hard limit), never past the hard limit
/// or [`MAX_OPEN_FILES`], and never lowers it. Answers the limits as they stand after.
#[cfg(unix)]
pub fn raise_open_file_limit(wanted: u64) -> io::Result<OpenFileLimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // rlim_t is u64 on Linux and macOS, but not on every unix.
    #[allow(clippy::unnecessary_cast)]
    let (soft_before, hard) = (limit.rlim_cur as u64, limit.rlim_max as u64);
    let target = match wanted {
        0 => hard,
        n => n.min(hard),
    }
    .min(MAX_OPEN_FILES);
    if target > soft_before {
        let raised = libc::rlimit {
            rlim_cur: target as libc::rlim_t,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads one rlimit through a valid pointer.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Ok(OpenFileLimit {
                soft_before,
                soft: target,
                hard,
            });
        }
        // macOS refuses soft limits past OPEN_MAX whatever the hard limit says: keep what is.
        tracing::warn!(wanted = target, soft = soft_before, error = %io::Error::last_os_error(), "could not raise the open-file limit");
    }
    Ok(OpenFileLimit {
        soft_before,
        soft: soft_before,
        hard,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_budget_keeps_room_for_both_connections_and_queue_files() {
        // macOS's default soft limit.
        assert_eq!(
            shares(256),
            DescriptorShares {
                queue_files: 48,
                connections: 144
            }
        );
        // A common Linux desktop soft limit.
        assert_eq!(
            shares(1024),
            DescriptorShares {
                queue_files: 240,
                connections: 720
            }
        );
        // Large budgets: queue files stop at their cap, connections take the rest.
        let big = shares(1 << 20);
        assert_eq!(big.queue_files, MAX_QUEUE_FILES as usize);
        assert_eq!(
            big.connections as u64,
            (1 << 20) - RESERVED - MAX_QUEUE_FILES
        );
        // Even a budget below the reserve leaves the store some files and one connection.
        assert_eq!(
            shares(32),
            DescriptorShares {
                queue_files: 16,
                connections: 1
            }
        );
    }

    #[test]
    fn the_limit_is_never_lowered() -> io::Result<()> {
        let first = raise_open_file_limit(0)?;
        assert!(first.soft >= first.soft_before);
        assert!(first.soft <= first.hard);
        // Asking for less than the soft limit now changes nothing.
        let again = raise_open_file_limit(1)?;
        assert_eq!(again.soft, first.soft);
        Ok(())
    }
}
