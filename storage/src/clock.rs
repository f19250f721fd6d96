//! Wall-clock time as RocketMQ stores it: milliseconds since the Unix epoch in an `i64` (a
//! Java `long`), the unit of store timestamps, born timestamps and offset-record times.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch. A clock set before 1970 reads as 0 and one past what an
/// `i64` holds as `i64::MAX`, so the result is never negative and never wraps.
pub fn epoch_millis() -> i64 {
    millis_since_epoch(SystemTime::now())
}

/// The time since the Unix epoch at full precision (zero for a clock set before 1970), for
/// callers that add to it before rounding to milliseconds.
pub fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

fn millis_since_epoch(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn counts_milliseconds_from_the_epoch() {
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(millis_since_epoch(t), 1_700_000_000_123);
        assert!(epoch_millis() > 1_700_000_000_000);
    }

    #[test]
    fn saturates_instead_of_going_negative_or_wrapping() {
        assert_eq!(millis_since_epoch(UNIX_EPOCH - Duration::from_secs(1)), 0);
        let far = UNIX_EPOCH + Duration::from_millis(u64::MAX);
        assert_eq!(millis_since_epoch(far), i64::MAX);
    }
}
