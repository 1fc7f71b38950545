//! md's rule for read errors on a member that still serves (`fix_read_error`,
//! `check_decay_read_errors` in raid1/raid10): every read error is counted; the count halves
//! for every whole hour since the previous error; once it passes `max_read_errors` (20 by
//! default, md's `MD_DEFAULT_MAX_CORRECTED_READ_ERRORS`) the member is failed. Below that,
//! the data is rebuilt from redundancy and written back over the bad sectors, so one
//! latent sector costs a rewrite, not a whole-member rebuild.
//!
//! Pure: the caller passes the time (seconds on any monotonic clock).

/// md's default `max_read_errors`.
pub const DEFAULT_MAX_READ_ERRORS: u32 = 20;

/// What to do about a read error that was just counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadErrorVerdict {
    /// Rebuild the data from redundancy, rewrite it over the bad range and re-read it.
    Rewrite,
    /// Too many errors lately: fail the member.
    Fail,
}

/// One member's read-error count, decayed as md decays it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadErrorCount {
    /// Errors counted, after decay (md's `rdev->read_errors`).
    count: u32,
    /// When the last error was counted (md's `rdev->last_read_error`); `None` before the first.
    last_seconds: Option<u64>,
}

impl ReadErrorCount {
    /// Counts one read error at `now_seconds` and says what to do about it.
    pub fn record(&mut self, now_seconds: u64, max_read_errors: u32) -> ReadErrorVerdict {
        if let Some(last) = self.last_seconds {
            // A clock that went backwards decays nothing (md uses a monotonic clock).
            let hours = now_seconds.saturating_sub(last) / 3600;
            self.count = if hours >= u32::BITS as u64 { 0 } else { self.count >> hours };
        }
        self.last_seconds = Some(now_seconds.max(self.last_seconds.unwrap_or(0)));
        self.count = self.count.saturating_add(1);
        if self.count > max_read_errors {
            ReadErrorVerdict::Fail
        } else {
            ReadErrorVerdict::Rewrite
        }
    }

    /// Errors counted, after decay at the last error.
    pub fn count(&self) -> u32 {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_passed_at_error_limit_plus_one_within_an_hour() {
        let mut c = ReadErrorCount::default();
        for i in 1..=DEFAULT_MAX_READ_ERRORS {
            assert_eq!(c.record(1000 + u64::from(i), DEFAULT_MAX_READ_ERRORS), ReadErrorVerdict::Rewrite, "error {i}");
        }
        assert_eq!(c.record(2000, DEFAULT_MAX_READ_ERRORS), ReadErrorVerdict::Fail);
    }

    #[test]
    fn the_count_halves_per_whole_hour() {
        let mut c = ReadErrorCount::default();
        for _ in 0..16 {
            c.record(0, 100);
        }
        c.record(3599, 100);
        assert_eq!(c.count(), 17, "less than an hour: no decay");
        c.record(3599 + 2 * 3600, 100);
        assert_eq!(c.count(), 17 / 4 + 1);
        c.record(u64::MAX / 2, 100);
        assert_eq!(c.count(), 1, "after ages the count starts again");
    }
}
