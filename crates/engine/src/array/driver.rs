//! The one job driver: runs resync, recovery, check and repair step by step, with md's
//! speed limits (foreground requests first), and md's safe mode (the clean mark after the
//! array has been idle) between steps. `uraid serve`, the offline commands, the bench and
//! both simulators drive jobs through it; each only says how far to go and what to do with
//! progress.

use super::jobs::{CheckReport, JobKind, JobPacer, JobProgress};
use super::{Array, EngineError};
use std::time::Duration;
use uraid_core::state::SpeedLimits;

/// How a driver runs its jobs.
#[derive(Debug, Clone, Copy)]
pub struct DriverOptions {
    /// Member sectors per step when nobody else uses the array (the pacer's idle step).
    pub step_sectors: u64,
    /// md's `speed_limit_min`/`speed_limit_max`; `None`: no pacing (offline, simulators),
    /// every step `step_sectors`.
    pub limits: Option<SpeedLimits>,
    /// md's safe mode: between steps, mark the array clean once no write has come for
    /// this long. `None`: leave the clean mark to the caller.
    pub clean_after_idle: Option<Duration>,
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOutcome {
    pub kind: JobKind,
    /// Ran to its end, or the array no longer needs it (false: stopped by the caller).
    pub finished: bool,
    /// Member sectors done.
    pub done_sectors: u64,
    pub total_sectors: u64,
    /// What a check or repair found.
    pub report: CheckReport,
}

/// Runs jobs on one array (each `run` paces itself with a `JobPacer` of its own).
pub struct JobDriver<'a> {
    array: &'a Array,
    opts: DriverOptions,
}

impl<'a> JobDriver<'a> {
    pub fn new(array: &'a Array, opts: DriverOptions) -> JobDriver<'a> {
        JobDriver { array, opts }
    }

    /// The job to run now: `requested` (a check or repair asked for), else what md would
    /// run ([`Array::pending_job`]).
    pub fn next_job(&self, requested: Option<JobKind>) -> Option<JobKind> {
        requested.or_else(|| self.array.pending_job())
    }

    /// One step of `kind` from `pos` (resync and recovery keep their own position; check and
    /// repair start where the caller says), at most `max_sectors`.
    pub fn step(&self, kind: JobKind, pos: u64, max_sectors: u64, report: &mut CheckReport) -> Result<JobProgress, EngineError> {
        match kind {
            JobKind::Resync => self.array.resync_step(max_sectors),
            JobKind::Recovery => self.array.recovery_step(max_sectors),
            JobKind::Check => self.array.check_step(pos, max_sectors, false, report),
            JobKind::Repair => self.array.check_step(pos, max_sectors, true, report),
        }
    }

    /// Runs `kind` from its start (resync: its checkpoint) until it is done, `stop()` says so,
    /// or the array no longer needs it (a recovery whose target failed, a resync made moot).
    /// `on_step` sees each step's progress. An error ends the job and is returned.
    pub fn run(&self, kind: JobKind, stop: &dyn Fn() -> bool, mut on_step: impl FnMut(&JobProgress)) -> Result<JobOutcome, EngineError> {
        let array = self.array;
        let total = array.sync_sectors();
        let mut pos = if kind == JobKind::Resync { array.resync_position().min(total) } else { 0 };
        let mut report = CheckReport::default();
        let mut pacer = self.opts.limits.map(|limits| JobPacer::new(array, limits, self.opts.step_sectors));
        let mut finished = false;
        while !stop() {
            let step = pacer.as_mut().map_or(self.opts.step_sectors, |p| p.next_step(array));
            let before = pos;
            let p = self.step(kind, pos, step, &mut report)?;
            pos = p.done_sectors;
            // md's safe mode runs during a rebuild too: user writes that stopped leave the
            // array active only for the idle delay, not until the job ends.
            self.clean_if_idle();
            on_step(&p);
            if p.finished() || (matches!(kind, JobKind::Resync | JobKind::Recovery) && array.pending_job() != Some(kind)) {
                finished = true;
                break;
            }
            if let Some(p) = pacer.as_mut() {
                // md's limits: speed_max when idle, speed_min while clients are busy.
                p.pause(pos.saturating_sub(before));
            }
        }
        Ok(JobOutcome { kind, finished, done_sectors: pos.min(total), total_sectors: total, report })
    }

    /// Runs every pending resync and recovery to its end (a spare given a missing role
    /// first), as md does after assembly; `on_step` sees each step.
    pub fn run_pending(&self, stop: &dyn Fn() -> bool, mut on_step: impl FnMut(&JobProgress)) -> Result<(), EngineError> {
        self.array.start_recovery_if_possible();
        while let Some(kind @ (JobKind::Resync | JobKind::Recovery)) = self.array.pending_job() {
            if stop() {
                break;
            }
            self.run(kind, stop, &mut on_step)?;
        }
        Ok(())
    }

    /// md's safe mode: marks the array clean when it has been idle long enough.
    pub fn clean_if_idle(&self) {
        if let Some(idle) = self.opts.clean_after_idle {
            if self.array.dirty_and_idle(idle) {
                // A failure to mark clean leaves the array active: safe, and the next idle
                // moment tries again.
                let _ = self.array.mark_clean();
            }
        }
    }
}
