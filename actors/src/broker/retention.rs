//! Retention and the disk guard, run by the message store actor every `cleanup_interval`
//! (RocketMQ's `cleanResourceInterval`): measure the store's file system, delete full segments
//! older than `max_age` (or the oldest ones early past `disk_max_used_ratio`) through
//! [`MessageStore::delete_expired`](skiff_storage::store::MessageStore::delete_expired), and
//! refuse sends while the disk is past `disk_full_ratio`. The decisions here are pure; the
//! actor does the I/O.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use skiff_storage::store::RetentionRequest;

/// When old commit-log segments are deleted and when sends are refused.
#[derive(Clone, Debug, PartialEq)]
pub struct RetentionConfig {
    /// A full segment whose newest message is older than this is deleted (72 h).
    pub max_age: Duration,
    /// How often the cleanup runs (10 s).
    pub cleanup_interval: Duration,
    /// Past this share of the disk in use, the oldest segments go early, whatever their age
    /// (0.75).
    pub disk_max_used_ratio: f64,
    /// Past this share, sends are refused with SERVICE_NOT_AVAILABLE until space returns
    /// (0.90).
    pub disk_full_ratio: f64,
    /// Reads the share of the disk in use ([`measure`] unless a test fills the disk).
    pub meter: DiskMeter,
}

/// How the disk is measured: [`measure`] in production; tests give one that reports a full
/// disk and then frees it, without filling a real file system.
#[derive(Clone)]
pub struct DiskMeter(Arc<MeterFn>);

type MeterFn = dyn Fn(&Path) -> std::io::Result<f64> + Send + Sync;

impl DiskMeter {
    pub fn new(meter: impl Fn(&Path) -> std::io::Result<f64> + Send + Sync + 'static) -> Self {
        DiskMeter(Arc::new(meter))
    }

    pub fn used_ratio(&self, dir: &Path) -> std::io::Result<f64> {
        (self.0)(dir)
    }
}

impl Default for DiskMeter {
    fn default() -> Self {
        DiskMeter::new(measure)
    }
}

impl std::fmt::Debug for DiskMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DiskMeter")
    }
}

/// Two configs are equal only with the same meter.
impl PartialEq for DiskMeter {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            max_age: RetentionRequest::DEFAULT_MAX_AGE,
            cleanup_interval: Duration::from_secs(10),
            disk_max_used_ratio: RetentionRequest::DEFAULT_DISK_MAX_USED_RATIO,
            disk_full_ratio: 0.90,
            meter: DiskMeter::default(),
        }
    }
}

/// The share of a file system in use, as `df` and RocketMQ compute it: used (total minus free)
/// over used plus what this process may still use (free minus the root reserve). Blocks a
/// thin-provisioned volume reports in its total but can never hand out count for neither.
pub fn used_ratio(total: u64, free: u64, available: u64) -> f64 {
    let used = total.saturating_sub(free);
    let entire = used.saturating_add(available);
    if entire == 0 {
        return 0.0;
    }
    used as f64 / entire as f64
}

/// Measures the file system holding `dir` (an error is logged by the caller; retention then
/// runs by age only and sends are not refused on a guess).
pub fn measure(dir: &Path) -> std::io::Result<f64> {
    Ok(used_ratio(
        fs2::total_space(dir)?,
        fs2::free_space(dir)?,
        fs2::available_space(dir)?,
    ))
}

/// The disk guard's verdict for one measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskState {
    Ok,
    /// Sends are refused until a measurement is below the full ratio again.
    Full,
}

impl RetentionConfig {
    pub fn disk_state(&self, used_ratio: f64) -> DiskState {
        if used_ratio >= self.disk_full_ratio {
            DiskState::Full
        } else {
            DiskState::Ok
        }
    }

    /// What one cleanup run asks the store for.
    pub fn request(&self, now_ms: i64, used_ratio: f64) -> RetentionRequest {
        RetentionRequest {
            now_ms,
            max_age: self.max_age,
            disk_used_ratio: used_ratio,
            disk_max_used_ratio: self.disk_max_used_ratio,
            max_segments: RetentionRequest::DEFAULT_MAX_SEGMENTS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn used_ratio_is_dfs_use_percent_and_never_divides_by_zero() {
        // 252 G volume, 68 G used, 24 G available: df says 74 %, not 90 %.
        let g = 1 << 30;
        let r = used_ratio(252 * g, 184 * g, 24 * g);
        assert!((r - 68.0 / 92.0).abs() < 1e-9, "{r}");
        // The root reserve counts as used space's neighbour, not as available.
        assert_eq!(used_ratio(100, 30, 25), 70.0 / 95.0);
        assert_eq!(used_ratio(100, 100, 100), 0.0);
        assert_eq!(used_ratio(0, 0, 0), 0.0);
    }

    #[test]
    fn the_disk_is_full_from_the_full_ratio_on() {
        let c = RetentionConfig::default();
        assert_eq!(c.disk_state(0.899), DiskState::Ok);
        assert_eq!(c.disk_state(0.90), DiskState::Full);
        assert_eq!(c.disk_state(1.0), DiskState::Full);
        let r = c.request(5, 0.8);
        assert_eq!(
            (r.now_ms, r.disk_used_ratio, r.max_age),
            (5, 0.8, c.max_age)
        );
    }
}
