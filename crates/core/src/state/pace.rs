//! md's speed limits for background jobs (resync, recovery, check), as a pure rule.
//!
//! md (`md_do_sync`) lets a job run up to `speed_limit_max`; while other I/O reaches the
//! array (`is_mddev_idle` false) it holds the job down to `speed_limit_min`, so foreground
//! requests come first and the job still moves. Here the pace is kept per step: a step of
//! `sectors` must take at least as long as `sectors` take at the target speed, and the job
//! sleeps for the difference. Per step, not since the job began, so a long idle stretch at
//! full speed does not turn into a long stall when a client arrives. While the array is
//! busy the steps are also small, so a foreground request never queues behind a large one.

/// md's `sync_speed_min`/`sync_speed_max`, KiB/s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpeedLimits {
    pub min_kib_s: u64,
    pub max_kib_s: u64,
}

impl Default for SpeedLimits {
    /// md's defaults (`/proc/sys/dev/raid/speed_limit_{min,max}`).
    fn default() -> Self {
        SpeedLimits { min_kib_s: 1000, max_kib_s: 200_000 }
    }
}

/// Sectors per job step while foreground requests are running: 128 KiB per member.
pub const BUSY_STEP_SECTORS: u64 = 256;

impl SpeedLimits {
    /// The speed a job may run at now: `max` when idle, `min` while the array is busy. A
    /// `min` above `max` raises the ceiling to `min` (the floor is a promise).
    pub fn target_kib_s(&self, busy: bool) -> u64 {
        let max = self.max_kib_s.max(self.min_kib_s).max(1);
        if busy {
            // md throttles only a job running above the minimum, so the minimum is a
            // floor: aim a tenth above it, so sleep overshoot never takes the job below.
            (self.min_kib_s + self.min_kib_s / 10).clamp(1, max)
        } else {
            max
        }
    }

    /// Sectors for the next step: `idle_step` when idle, [`BUSY_STEP_SECTORS`] (or less)
    /// while busy.
    pub fn step_sectors(&self, busy: bool, idle_step: u64) -> u64 {
        if busy {
            idle_step.clamp(1, BUSY_STEP_SECTORS)
        } else {
            idle_step.max(1)
        }
    }

    /// Seconds to pause when `sectors` were done in `took_s` (since the pace last changed:
    /// counted over the whole stretch, so one oversleep is made up by the next pauses), to
    /// stay at the target speed.
    pub fn pause_after_s(&self, busy: bool, sectors: u64, took_s: f64) -> f64 {
        let at_target_s = sectors as f64 / 2.0 / self.target_kib_s(busy) as f64;
        (at_target_s - took_s).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_arrays_hold_jobs_to_the_minimum() {
        let l = SpeedLimits { min_kib_s: 1000, max_kib_s: 200_000 };
        // 256 sectors = 128 KiB: 128 ms at 1000 KiB/s (aimed at 1100), 0.64 ms at 200 MB/s.
        assert!((l.pause_after_s(true, 256, 0.0) - 128.0 / 1100.0).abs() < 1e-9);
        assert!((l.pause_after_s(false, 256, 0.0) - 0.00064).abs() < 1e-9);
        // A step slower than the target pauses not at all.
        assert_eq!(l.pause_after_s(false, 256, 1.0), 0.0);
        assert_eq!(l.step_sectors(true, 8192), BUSY_STEP_SECTORS);
        assert_eq!(l.step_sectors(false, 8192), 8192);
    }

    #[test]
    fn a_minimum_above_the_maximum_raises_the_ceiling() {
        let l = SpeedLimits { min_kib_s: 5000, max_kib_s: 1000 };
        assert_eq!(l.target_kib_s(false), 5000);
        assert_eq!(l.target_kib_s(true), 5000, "a tenth above the minimum, within the ceiling");
        let zero = SpeedLimits { min_kib_s: 0, max_kib_s: 0 };
        assert_eq!(zero.target_kib_s(true), 1, "never a division by zero");
    }
}
