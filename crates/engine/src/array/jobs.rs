//! The long operations md runs on an array, as steps a driver calls repeatedly (so progress,
//! speed limits and cancellation live with the caller): initial/after-crash resync,
//! recovery onto a spare, and check/repair. Each step works on whole stripes (parity levels)
//! or chunks (mirrors) under the stripe locks, so it interleaves safely with I/O.
//! [`JobPacer`] keeps a driver to md's speed limits (foreground requests first).
//! Positions are member sectors from the data offset, as md's resync/recovery offsets are.

use super::striped::compute_parity;
use super::{Array, DeviceState, EngineError};
use crate::stripe_cache::stripe_buf;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Instant;
use uraid_core::geometry::{Geometry, MemberSector, SECTOR_BYTES};
use uraid_core::metadata::MAX_SECTOR;
use uraid_core::state::SpeedLimits;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    Resync,
    Recovery,
    Check,
    Repair,
}

impl JobKind {
    pub fn name(self) -> &'static str {
        match self {
            JobKind::Resync => "resync",
            JobKind::Recovery => "recovery",
            JobKind::Check => "check",
            JobKind::Repair => "repair",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobProgress {
    pub kind: JobKind,
    pub done_sectors: u64,
    pub total_sectors: u64,
}

impl JobProgress {
    pub fn finished(&self) -> bool {
        self.done_sectors >= self.total_sectors
    }
}

/// What a check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// md's mismatch_cnt: sectors in 4 KiB rows whose redundancy disagreed.
    pub mismatch_sectors: u64,
    /// RAID6: rows where syndrome decoding named one member as wrong, per role.
    pub wrong_member_rows: BTreeMap<usize, u64>,
    /// RAID6: rows with errors in more than one block.
    pub unattributed_rows: u64,
    /// Rows rewritten (repair).
    pub repaired_rows: u64,
    /// Blocks that failed a read and were rebuilt from the stripe and rewritten.
    pub read_errors_corrected: u64,
    /// What the scrub found, where, and what it did: at most [`MAX_FINDINGS`], in array
    /// order within each region (the rest only counted in `findings_dropped`).
    pub findings: Vec<ScrubFinding>,
    pub findings_dropped: u64,
}

/// Findings a report keeps; a scrub of a badly damaged array would otherwise grow without
/// bound (the counters above still count everything).
pub const MAX_FINDINGS: usize = 1000;

/// One place where a scrub found redundancy wrong or unreadable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrubFinding {
    /// First array sector of the row (for parity, of the row's first data block).
    pub array_sector: u64,
    pub sectors: u64,
    /// The member at fault where it is known: the one RAID6's syndrome names, a mirror copy
    /// outvoted by the others, a member that failed the read. `None`: a RAID4/5 row (the
    /// parity cannot say which block is wrong) or a RAID6 row with more than one bad block.
    pub role: Option<usize>,
    pub action: ScrubAction,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScrubAction {
    /// `check`: counted in mismatch_cnt, nothing written.
    Mismatch,
    /// `repair`: parity recomputed from the data and written (md's repair).
    ParityRewritten,
    /// `repair`: the copy rewritten with the majority's (or first copy's) contents.
    CopyRewritten,
    /// The read failed; the block was rebuilt from redundancy and rewritten.
    ReadErrorRewritten,
    /// The read failed and the rewrite did not hold: listed in the bad-block log.
    Listed,
}

impl ScrubAction {
    pub fn name(self) -> &'static str {
        match self {
            ScrubAction::Mismatch => "mismatch",
            ScrubAction::ParityRewritten => "parity rewritten",
            ScrubAction::CopyRewritten => "copy rewritten",
            ScrubAction::ReadErrorRewritten => "read error rewritten",
            ScrubAction::Listed => "listed as bad block",
        }
    }
}

impl CheckReport {
    fn found(&mut self, finding: ScrubFinding) {
        if self.findings.len() < MAX_FINDINGS {
            self.findings.push(finding);
        } else {
            self.findings_dropped += 1;
        }
    }
}

const ROW_BYTES: usize = 4096;

impl Array {
    /// Member sectors a resync, recovery or check walks.
    pub fn sync_sectors(&self) -> u64 {
        match &self.geometry {
            Geometry::Parity(p) => p.member_sectors(),
            Geometry::Raid1 { array_sectors, .. } => *array_sectors,
            Geometry::Raid10(g) => g.used_member_sectors(),
            _ => 0,
        }
    }

    /// Granularity of resync/check steps: one stripe (chunk) for striped levels, 128 sectors else.
    pub(super) fn step_unit(&self) -> u64 {
        match &self.geometry {
            Geometry::Parity(p) => p.chunk_sectors(),
            Geometry::Raid10(g) => g.chunk_sectors(),
            _ => 128,
        }
    }

    /// The job md would run now, if any: recovery onto a spare first, then resync.
    pub fn pending_job(&self) -> Option<JobKind> {
        if !self.writable {
            return None;
        }
        {
            let meta = self.lock_meta();
            if meta.roster.failed().is_some() {
                return None;
            }
            if meta.roster.job_running() {
                return Some(JobKind::Recovery);
            }
        }
        // md resyncs while some redundancy is left (RAID6 missing one, mirrors with two
        // copies); without any there is nothing to compare, so the position jumps to the end.
        if self.resync_position() < self.sync_sectors() {
            if self.redundancy_left() {
                return Some(JobKind::Resync);
            }
            self.resync_pos.store(MAX_SECTOR, Ordering::Release);
        }
        None
    }

    /// Gives a spare the first missing role, as md does when a spare is present at start.
    pub fn start_recovery_if_possible(&self) -> bool {
        if !self.writable {
            return false;
        }
        let mut meta = self.lock_meta();
        if meta.roster.devices().iter().any(|d| matches!(d.state, DeviceState::Recovering { .. })) {
            return true;
        }
        if meta.roster.assign_spare_to_missing_role().is_none() {
            return false;
        }
        // The role table follows at the rebuild's first checkpoint.
        self.rebuild_io_map(&meta);
        true
    }

    /// Resyncs up to `max_sectors` member sectors from the current resync position.
    pub fn resync_step(&self, max_sectors: u64) -> Result<JobProgress, EngineError> {
        let total = self.sync_sectors();
        let unit = self.step_unit();
        let mut pos = self.resync_position();
        if !self.writable {
            return Err(EngineError::ReadOnly);
        }
        // Resync writes parity/mirrors of a not-in-sync array: marked active, as before (its
        // superblocks are not clean anyway), so no clean mark can record a position whose
        // regions are not yet flushed.
        let _write = if pos < total { Some(self.begin_write()?) } else { None };
        let end = pos.saturating_add(max_sectors.max(unit)).min(total);
        while pos < end {
            let n = (unit - pos % unit).min(end - pos);
            if !self.bitmap_allows_skip(pos, n) {
                self.sync_region(pos, n, SyncMode::Resync, &mut CheckReport::default())?;
            }
            pos += n;
            self.resync_pos.store(if pos >= total { MAX_SECTOR } else { pos }, Ordering::Release);
        }
        Ok(JobProgress { kind: JobKind::Resync, done_sectors: pos.min(total), total_sectors: total })
    }

    /// Whether a resync can still compare anything.
    fn redundancy_left(&self) -> bool {
        let missing = self.missing_roles().len();
        let n = self.geometry.raid_disks();
        match self.level {
            uraid_core::geometry::Level::Raid4 | uraid_core::geometry::Level::Raid5 => missing == 0,
            uraid_core::geometry::Level::Raid6 => missing <= 1,
            uraid_core::geometry::Level::Raid1 => n - missing >= 2,
            uraid_core::geometry::Level::Raid10 => n - missing >= 2,
            _ => false,
        }
    }

    /// Checks (or repairs) up to `max_sectors` from `from`; adds findings to `report`.
    pub fn check_step(&self, from: u64, max_sectors: u64, repair: bool, report: &mut CheckReport) -> Result<JobProgress, EngineError> {
        let total = self.sync_sectors();
        let unit = self.step_unit();
        // A check only reads; a repair rewrites parity or copies and is marked active (a
        // crash mid-repair then resyncs rather than leaving a torn stripe marked clean).
        let _write = if repair { Some(self.begin_write()?) } else { None };
        let end = from.saturating_add(max_sectors.max(unit)).min(total);
        let mut pos = from;
        while pos < end {
            let n = (unit - pos % unit).min(end - pos);
            self.sync_region(pos, n, if repair { SyncMode::Repair } else { SyncMode::Check }, report)?;
            pos += n;
        }
        Ok(JobProgress { kind: if repair { JobKind::Repair } else { JobKind::Check }, done_sectors: pos, total_sectors: total })
    }

    /// Rebuilds up to `max_sectors` of the recovering member (a missing role first, else a
    /// hot replacement's copy).
    pub fn recovery_step(&self, max_sectors: u64) -> Result<JobProgress, EngineError> {
        // Progress is checkpointed in the recovering member's recovery_offset; the array is
        // not marked active for it, so a crash during an idle rebuild needs no --force.
        let _job = self.begin_job()?;
        let total = self.sync_sectors();
        let unit = self.recovery_unit();
        let (device, role, mut done, replacing, from_bitmap) = {
            let meta = self.lock_meta();
            match meta.roster.recovery_target() {
                Some((device, role, done, replacing)) => (device, role, done, replacing, meta.roster.device(device).bitmap_recovery),
                None => return Ok(JobProgress { kind: JobKind::Recovery, done_sectors: total, total_sectors: total }),
            }
        };
        let state_at = |done| if replacing { DeviceState::Replacing { role, done } } else { DeviceState::Recovering { role, done } };
        // A re-added former member skips straight to the next region written since it left
        // (whole stripes), so a mostly clean bitmap costs few steps and checkpoints.
        let start =
            if from_bitmap { (self.bitmap_next_written(done, total) / self.step_unit() * self.step_unit()).max(done) } else { done };
        let end = start.saturating_add(max_sectors.max(unit)).min(total);
        let mut regions = Vec::new();
        let mut at = start;
        while at < end {
            let n = (unit - at % unit).min(end - at);
            regions.push((at, n));
            at += n;
        }
        if from_bitmap {
            // A re-added former member (md's bitmap-based recovery): it holds what it held
            // when it left, and a region no write touched since then (its bitmap chunks
            // clean) is still right. Every write since set its bit before its data, the bits
            // are never cleared while a role is missing, and writes from the re-add on go to
            // this member too; a bit set after this test belongs to such a write.
            regions.retain(|&(pos, n)| self.bitmap_region_written(pos, n));
        }
        self.recover_regions(role, device, &regions)?;
        // The rebuilt regions are durable before the checkpoint that records them: the
        // superblock write below could otherwise reach the disk ahead of the data.
        let target = self.lock_meta().devices[device].member.clone();
        if let Err(e) = target.flush() {
            self.fail_device(device, &format!("flush after recovery: {e}"));
            return Err(super::Fault::RecoveryTargetFailed { role, error: e }.into());
        }
        let mut meta = self.lock_meta();
        if meta.roster.recovery_progress(device, state_at(done), end).is_err() {
            // The target failed under us, or (a replacement) the member it replaces did
            // and it became an ordinary rebuild: the next step picks that up.
            return Err(super::Fault::RecoveryTargetChanged { role }.into());
        }
        done = end;
        // Checkpoint (md writes recovery_offset periodically; we do it every step: the
        // roster's round records `done`). A replacement is a spare on disk until it takes
        // the role.
        if done >= total {
            // md marks the replaced member faulty once its replacement is in sync.
            let retired = meta.roster.recovery_complete(device).expect("the target's state was checked above");
            if let Some(old) = retired {
                let why = format!("replaced by {}", meta.devices[device].member.label());
                meta.devices[old].failure = Some((super::FailureKind::Requested, why));
            }
        }
        // The I/O path follows the new roles only once they are on disk: until then a
        // write still reaches the member being replaced, which a crash during the update
        // may leave serving its role.
        let resync = self.resync_offset_for_superblock();
        self.persist(&mut meta, resync);
        self.rebuild_io_map(&meta);
        drop(meta);
        if done >= total {
            // As md re-checks its spares when a recovery ends: another missing role may be
            // waiting for a spare that was added while this rebuild ran.
            self.start_recovery_if_possible();
        }
        Ok(JobProgress { kind: JobKind::Recovery, done_sectors: done.min(total), total_sectors: total })
    }

    /// One region of a resync, check or repair.
    fn sync_region(&self, pos: u64, n: u64, mode: SyncMode, report: &mut CheckReport) -> Result<(), EngineError> {
        match &self.geometry {
            Geometry::Parity(p) => {
                let stripe = pos / p.chunk_sectors();
                let _g = self.locks.lock(stripe, stripe);
                let roles = p.stripe_roles(stripe);
                let ((bufs, missing, p_missing, q_missing), healed) = self.read_stripe_healing(stripe, pos, pos + n, Vec::new())?;
                let row_sector = |offset: u64| p.stripe_array_sector(stripe) + (pos - p.stripe_member_sector(stripe)) + offset;
                for (role, rewritten) in healed {
                    report.read_errors_corrected += rewritten as u64;
                    let action = if rewritten { ScrubAction::ReadErrorRewritten } else { ScrubAction::Listed };
                    report.found(ScrubFinding { array_sector: row_sector(0), sectors: n, role: Some(role), action });
                }
                let lost = missing.len() + p_missing as usize + q_missing as usize;
                if lost > 0 {
                    return self.sync_degraded_raid6(&roles, pos, bufs, &missing, p_missing, q_missing, mode, report);
                }
                let h = bufs.p.len();
                let mut p_new = stripe_buf(h);
                let mut q_new = bufs.q.as_ref().map(|_| stripe_buf(h));
                compute_parity(&roles, &bufs.data, &mut p_new, q_new.as_deref_mut());
                let mut rows_bad = Vec::new();
                for row in (0..h).step_by(ROW_BYTES) {
                    let r = row..(row + ROW_BYTES).min(h);
                    let bad = p_new[r.clone()] != bufs.p[r.clone()]
                        || q_new.as_ref().zip(bufs.q.as_ref()).is_some_and(|(a, b)| a[r.clone()] != b[r.clone()]);
                    if bad {
                        rows_bad.push(r);
                    }
                }
                if rows_bad.is_empty() {
                    return Ok(());
                }
                if mode != SyncMode::Resync {
                    report.mismatch_sectors += rows_bad.iter().map(|r| r.len() as u64 / SECTOR_BYTES).sum::<u64>();
                }
                let mut named: Vec<Option<usize>> = vec![None; rows_bad.len()];
                if let (Some(q_disk), SyncMode::Check | SyncMode::Repair) = (bufs.q.as_ref(), mode) {
                    for (k, r) in rows_bad.iter().enumerate() {
                        let sources = roles.syndrome_sources();
                        let zero = vec![0u8; r.len()];
                        let refs: Vec<&[u8]> = sources.iter().map(|s| s.map_or(zero.as_slice(), |i| &bufs.data[i][r.clone()])).collect();
                        match uraid_parity::verify_pq(&refs, &bufs.p[r.clone()], &q_disk[r.clone()]) {
                            Ok(uraid_parity::Verdict::Wrong(b)) => {
                                let role = match b {
                                    uraid_parity::Block::P => roles.p,
                                    uraid_parity::Block::Q => roles.q.unwrap_or(roles.p),
                                    uraid_parity::Block::Data(slot) => {
                                        let idx = sources.get(slot).copied().flatten().unwrap_or(0);
                                        roles.data[idx]
                                    }
                                };
                                *report.wrong_member_rows.entry(role).or_default() += 1;
                                named[k] = Some(role);
                            }
                            _ => report.unattributed_rows += 1,
                        }
                    }
                }
                if mode != SyncMode::Resync {
                    let action = if mode == SyncMode::Check { ScrubAction::Mismatch } else { ScrubAction::ParityRewritten };
                    for (r, role) in rows_bad.iter().zip(&named) {
                        let at = row_sector(r.start as u64 / SECTOR_BYTES);
                        report.found(ScrubFinding { array_sector: at, sectors: r.len() as u64 / SECTOR_BYTES, role: *role, action });
                    }
                }
                if mode != SyncMode::Check {
                    // md's repair/resync rewrites parity from data.
                    let mut out: Vec<(usize, u64, &[u8])> = vec![(roles.p, pos, &p_new)];
                    if let (Some(qr), Some(q)) = (roles.q, q_new.as_ref()) {
                        out.push((qr, pos, q));
                    }
                    self.bitmap_prepare_sync_write(pos, n);
                    self.write_members(&out)?;
                    report.repaired_rows += rows_bad.len() as u64;
                }
                Ok(())
            }
            Geometry::Raid1 { .. } | Geometry::Raid10(_) => self.sync_mirrors(pos, n, mode, report),
            _ => Ok(()),
        }
    }

    /// A RAID6 stripe with one block missing still has one redundant block: md resyncs it.
    /// A missing data block is taken from P (data and P are trusted, as md does), then the
    /// surviving parity is recomputed from the data. With more missing, or on RAID4/5, there
    /// is nothing left to compare.
    #[allow(clippy::too_many_arguments)]
    fn sync_degraded_raid6(
        &self,
        roles: &uraid_core::geometry::StripeRoles,
        pos: u64,
        mut bufs: super::striped::StripeBuffers,
        missing: &[usize],
        p_missing: bool,
        q_missing: bool,
        mode: SyncMode,
        report: &mut CheckReport,
    ) -> Result<(), EngineError> {
        let lost = missing.len() + p_missing as usize + q_missing as usize;
        let (Some(qr), 1) = (roles.q, lost) else { return Ok(()) };
        let h = bufs.p.len();
        if let [j] = missing {
            let mut refs: Vec<&mut [u8]> = bufs.data.iter_mut().map(|d| d.as_mut_slice()).collect();
            if uraid_parity::recover_from_p(&mut refs, *j, &bufs.p).is_err() {
                return Err(super::Fault::Internal("degraded resync: parity shape").into());
            }
        }
        let mut p_new = stripe_buf(h);
        let mut q_new = stripe_buf(h);
        compute_parity(roles, &bufs.data, &mut p_new, Some(&mut q_new));
        // The surviving parity block that data (and P) determine.
        let (role, fresh, on_disk) = if q_missing { (roles.p, &p_new, &bufs.p) } else { (qr, &q_new, bufs.q.as_ref().unwrap_or(&bufs.p)) };
        let bad_rows =
            (0..h).step_by(ROW_BYTES).filter(|&r| fresh[r..(r + ROW_BYTES).min(h)] != on_disk[r..(r + ROW_BYTES).min(h)]).count() as u64;
        if bad_rows == 0 {
            return Ok(());
        }
        if mode != SyncMode::Resync {
            report.mismatch_sectors += bad_rows * (ROW_BYTES as u64 / SECTOR_BYTES);
            report.unattributed_rows += bad_rows;
        }
        if mode != SyncMode::Check {
            self.bitmap_prepare_sync_write(pos, (h as u64) / SECTOR_BYTES);
            self.write_members(&[(role, pos, fresh.as_slice())])?;
            report.repaired_rows += bad_rows;
        }
        Ok(())
    }

    /// Mirrors: compare each in-sync copy with the first readable one; rewrite on resync/repair.
    fn sync_mirrors(&self, pos: u64, n: u64, mode: SyncMode, report: &mut CheckReport) -> Result<(), EngineError> {
        let io = self.io_map();
        let len = (n * SECTOR_BYTES) as usize;
        // Walk roles: for each role's member range, find the array sector and compare with
        // the copy md reads first. Role 0..raid_disks each visited once per region.
        let mut seen_array_sectors = std::collections::BTreeSet::new();
        for role in 0..self.geometry.raid_disks() {
            let Ok(Some(a)) = self.geometry.unmap(role, pos) else { continue };
            if !seen_array_sectors.insert(a) {
                continue;
            }
            let Ok(piece) = self.geometry.locate(a) else { continue };
            let uraid_core::geometry::Placement::Mirrored(copies) = piece.placement else { continue };
            let (lo, hi) = self.lock_span(a, n);
            let _g = self.locks.lock(lo, hi);
            // Every readable copy; copies that failed the read and still serve are a
            // scrub's latent errors, rewritten from the reference below.
            let mut read: Vec<(MemberSector, Vec<u8>)> = Vec::new();
            let mut unreadable: Vec<MemberSector> = Vec::new();
            for ms in &copies {
                if io.read[ms.role].is_none() {
                    continue;
                }
                let mut b = vec![0u8; len];
                match self.read_member_keeping(&io, MemberSector { role: ms.role, sector: ms.sector }, &mut b, false) {
                    Ok(()) => read.push((*ms, b)),
                    Err(f) if f.kept => unreadable.push(*ms),
                    Err(_) => {}
                }
            }
            let Some(reference) = majority_rows(&read) else { continue };
            for ms in unreadable {
                if let Some(rm) = io.read[ms.role].as_ref() {
                    let rewritten = self.rewrite_unreadable(rm, ms.sector, &reference);
                    report.read_errors_corrected += rewritten as u64;
                    let action = if rewritten { ScrubAction::ReadErrorRewritten } else { ScrubAction::Listed };
                    report.found(ScrubFinding { array_sector: a, sectors: n, role: Some(ms.role), action });
                }
            }
            // Copies that differ from the reference in some 4 KiB row.
            let mut stale: Vec<MemberSector> = Vec::new();
            for (ms, b) in &read {
                let mut differs = false;
                for row in (0..len).step_by(ROW_BYTES) {
                    let r = row..(row + ROW_BYTES).min(len);
                    if b[r.clone()] == reference[r.clone()] {
                        continue;
                    }
                    differs = true;
                    if mode != SyncMode::Resync {
                        report.mismatch_sectors += r.len() as u64 / SECTOR_BYTES;
                        let action = if mode == SyncMode::Check { ScrubAction::Mismatch } else { ScrubAction::CopyRewritten };
                        let at = a + row as u64 / SECTOR_BYTES;
                        report.found(ScrubFinding {
                            array_sector: at,
                            sectors: r.len() as u64 / SECTOR_BYTES,
                            role: Some(ms.role),
                            action,
                        });
                    }
                }
                if differs {
                    stale.push(*ms);
                }
            }
            if stale.is_empty() {
                continue;
            }
            if mode != SyncMode::Check {
                let out: Vec<(usize, u64, &[u8])> = stale.iter().map(|ms| (ms.role, ms.sector, reference.as_slice())).collect();
                self.bitmap_prepare_sync_write(pos, n);
                self.write_members(&out)?;
                report.repaired_rows += stale.len() as u64;
            }
        }
        Ok(())
    }
}

/// The contents a mirror scrub keeps, row by row (4 KiB): what most copies hold, and on a
/// tie the first copy's (md's choice: it keeps the first readable copy and rewrites the
/// rest). With two copies that is md's rule; with three or more, a single copy gone wrong
/// is outvoted instead of copied over the good ones. `None` when no copy was readable.
fn majority_rows(copies: &[(MemberSector, Vec<u8>)]) -> Option<Vec<u8>> {
    let (_, first) = copies.first()?;
    let mut out = first.clone();
    let len = out.len();
    for row in (0..len).step_by(ROW_BYTES) {
        let r = row..(row + ROW_BYTES).min(len);
        let votes = |b: &Vec<u8>| copies.iter().filter(|(_, c)| c[r.clone()] == b[r.clone()]).count();
        // max_by_key keeps the last of equal maxima: walk from the back to keep the first.
        if let Some((_, winner)) = copies.iter().rev().max_by_key(|(_, c)| votes(c)) {
            out[r.clone()].copy_from_slice(&winner[r]);
        }
    }
    Some(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SyncMode {
    Resync,
    Check,
    Repair,
}

/// Keeps a background job to md's speed limits: before each step [`JobPacer::next_step`]
/// says how many sectors to do (small while users are busy), after it [`JobPacer::pause`]
/// sleeps so the job runs no faster than `speed_limit_max`, or `speed_limit_min` while
/// reads or writes reached the array since the last step (md's `is_mddev_idle`). The rule
/// itself is pure: [`uraid_core::state::SpeedLimits`].
pub struct JobPacer {
    limits: SpeedLimits,
    idle_step: u64,
    seen: u64,
    busy: bool,
    /// Since the pace last changed (busy ↔ idle): when, and sectors done.
    stretch: (Instant, u64),
}

impl JobPacer {
    /// `idle_step`: sectors per step when nobody else uses the array.
    pub fn new(array: &Array, limits: SpeedLimits, idle_step: u64) -> JobPacer {
        JobPacer::counting(array.foreground_requests(), limits, idle_step)
    }

    /// A pacer for a job whose users' requests are counted elsewhere (a reshape's two
    /// sides): `seen`, the count now.
    pub fn counting(seen: u64, limits: SpeedLimits, idle_step: u64) -> JobPacer {
        JobPacer { limits, idle_step, seen, busy: false, stretch: (Instant::now(), 0) }
    }

    /// Sectors for the next step; notes whether users were busy since the last one.
    pub fn next_step(&mut self, array: &Array) -> u64 {
        self.next_step_counted(array.foreground_requests())
    }

    /// [`JobPacer::next_step`] given the users' request count now.
    pub fn next_step_counted(&mut self, now: u64) -> u64 {
        let busy = now != self.seen;
        self.seen = now;
        if busy != self.busy {
            self.busy = busy;
            self.stretch = (Instant::now(), 0);
        }
        self.limits.step_sectors(self.busy, self.idle_step)
    }

    /// After a step that moved `sectors`: sleeps so the stretch runs at the target speed
    /// (at most half a second at a time, so a caller checks its stop flag often).
    pub fn pause(&mut self, sectors: u64) {
        self.stretch.1 += sectors;
        let secs = self.limits.pause_after_s(self.busy, self.stretch.1, self.stretch.0.elapsed().as_secs_f64());
        if secs > 0.0 {
            std::thread::sleep(std::time::Duration::from_secs_f64(secs.min(0.5)));
        }
    }
}
