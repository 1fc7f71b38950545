//! Recovery onto a spare: what a lost role held, rebuilt region by region.
//!
//! A region is a few whole stripes. Several regions are rebuilt at once (see
//! [`super::ArrayOptions::recovery_lanes`]), each under its own stripe locks, and a region's
//! size is cut so that all of them fit in the stripe cache together: a region larger than
//! its share would make the others wait for cache room, one region at a time.
//!
//! RAID6 missing just the role being rebuilt needs only n-2 of the n-1 survivors in every
//! stripe: a data block comes back from the other data and P, P and Q from the data. So Q
//! (or P, in stripes where Q is the lost role) is not read at all. md reads every survivor
//! during recovery; parity consistency is `check`'s business, not recovery's, in both.

use super::striped::{compute_parity_refs, Window};
use super::{Array, EngineError, IoMap};
use crate::stripe_cache::StripeBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use uraid_core::geometry::{Geometry, Level, MemberSector, SECTOR_BYTES};

/// Regions rebuilt concurrently by default: one more than the cores (so a region waiting on
/// its reads does not leave a core idle), at least two, at most four.
pub(super) fn default_lanes() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get() + 1).clamp(2, 4)
}

/// Writes rebuilt bytes at a member sector of the recovery target.
type TargetWrite<'a> = &'a dyn Fn(&[u8], u64) -> Result<(), EngineError>;

/// Largest recovery region, in sectors per member: 1 MiB reads are as fast as any larger.
const MAX_REGION_SECTORS: u64 = 2048;

/// Granularity at which a rebuild lists what it cannot rebuild (md's stripe unit).
const LIST_ROW_SECTORS: u64 = 8;

impl Array {
    /// Rebuilds `regions` (member sectors `(start, len)`) of `role` onto `device`, several at
    /// once. Each lane is a thread of its own that reads its survivors one after another:
    /// the lanes are the parallelism, and a lane is never a task of the member-I/O pool (a
    /// pool thread waiting on its own tasks may run another queued task on its stack, and a
    /// lane blocked there on cache room its own frame below holds would never wake).
    /// On error some regions may be written and others not; rebuilding them again is
    /// harmless, so the caller only advances its checkpoint on success.
    pub(super) fn recover_regions(&self, role: usize, device: usize, regions: &[(u64, u64)]) -> Result<(), EngineError> {
        let next = AtomicUsize::new(0);
        let first_error: Mutex<Option<EngineError>> = Mutex::new(None);
        let target_writes = Mutex::new(());
        let lane = || loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(&(pos, n)) = regions.get(i) else { return };
            if first_error.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
                return;
            }
            if let Err(e) = self.recover_region(role, device, pos, n, &target_writes) {
                first_error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                return;
            }
        };
        let lanes = self.recovery_lanes.min(regions.len());
        if lanes <= 1 {
            lane();
        } else {
            std::thread::scope(|s| {
                for _ in 0..lanes {
                    s.spawn(lane);
                }
            });
        }
        match first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// How a region's member reads run: in line when lanes give the parallelism, else on
    /// the member-I/O pool.
    fn lane_reads<T: Send>(&self) -> super::striped::RunAll<T> {
        if self.recovery_lanes > 1 {
            crate::parallel::run_in_line
        } else {
            crate::parallel::run_all
        }
    }

    /// Sectors per member in one recovery region: whole stripes, at most 1 MiB, and small
    /// enough that all recovery lanes' regions fit in the stripe cache at once.
    pub(super) fn recovery_unit(&self) -> u64 {
        let unit = self.step_unit();
        match &self.geometry {
            Geometry::Parity(p) => {
                let per_member = self.cache.capacity_bytes() / SECTOR_BYTES / p.raid_disks() as u64;
                let share = (per_member / self.recovery_lanes as u64).min(MAX_REGION_SECTORS);
                unit * (share / unit).max(1)
            }
            Geometry::Raid1 { .. } => MAX_REGION_SECTORS,
            _ => unit,
        }
    }

    /// Writes role `role`'s content for member sectors `pos..pos+n` onto `device`. Regions
    /// rebuilt at once take turns on `target_writes` for their write: concurrent writes to
    /// one file contend on its inode lock in the kernel, which spins for as long as the
    /// other write copies (measured: a tenth of the CPU of a tmpfs rebuild), while a waiter
    /// here sleeps and leaves the core to the other regions' reads.
    fn recover_region(&self, role: usize, device: usize, pos: u64, n: u64, target_writes: &Mutex<()>) -> Result<(), EngineError> {
        match self.recover_span(role, device, pos, n, target_writes) {
            Err(EngineError::Unreadable { .. } | EngineError::Failed(_)) if self.may_list_on_rebuild_target(device) => {
                // What no member can give (a degraded RAID5 or 2-way mirror whose source has
                // a bad sector) is listed in the rebuilt member's bad-block log, 4 KiB at a
                // time, and the rebuild goes on: md's raid1 fix_sync_read_error and raid5
                // handle_failed_sync do the same. Only those sectors are lost, not the rest
                // of the member's redundancy.
                let data_offset = self.lock_meta().devices[device].data_offset / SECTOR_BYTES;
                for row in (pos..pos + n).step_by(LIST_ROW_SECTORS as usize) {
                    let k = LIST_ROW_SECTORS.min(pos + n - row);
                    if let Err(e) = self.recover_span(role, device, row, k, target_writes) {
                        let range = uraid_core::metadata::SectorRange { start: data_offset + row, sectors: k };
                        if !self.record_bad_ranges_as(device, &[range], true) {
                            return Err(e);
                        }
                    }
                }
                Ok(())
            }
            other => other,
        }
    }

    /// [`Array::recover_region`] without the fallback.
    fn recover_span(&self, role: usize, device: usize, pos: u64, n: u64, target_writes: &Mutex<()>) -> Result<(), EngineError> {
        let (member, data_offset) = {
            let meta = self.lock_meta();
            let d = &meta.devices[device];
            (d.member.clone(), d.data_offset)
        };
        // Every rebuilt piece is written while the locks it was read under are still held:
        // a foreground write (which writes the recovering member too) must land wholly
        // before the rebuild reads or wholly after it writes. Between the two, the stale
        // rebuilt bytes would overwrite the new ones on the spare.
        let write = |bytes: &[u8], sector: u64| -> Result<(), EngineError> {
            let _turn = target_writes.lock().unwrap_or_else(|e| e.into_inner());
            member.write_at(bytes, data_offset + sector * SECTOR_BYTES).map_err(|e| {
                self.fail_device(device, &e.to_string());
                super::Fault::RecoveryTargetFailed { role, error: e }.into()
            })
        };
        match &self.geometry {
            Geometry::Parity(p) => {
                let (first, last) = (pos / p.chunk_sectors(), (pos + n - 1) / p.chunk_sectors());
                let _g = self.locks.lock(first, last);
                let _room = self.cache.reserve(p.raid_disks() as u64 * n * SECTOR_BYTES);
                let io = self.io_map();
                let only_target_lost = (0..io.read.len()).all(|r| io.read[r].is_some() || r == role);
                // Roles whose members failed a read here but still serve: rebuilt from the
                // rest and rewritten (md's fix_read_error) by the window path.
                let mut unreadable = Vec::new();
                let content = if io.read[role].is_some() {
                    // A hot replace: the member being replaced still serves; copy it. If it
                    // fails this read it is failed, and the replacement turns into an
                    // ordinary rebuild from the next step on.
                    let mut buf = self.cache.buffer((n * SECTOR_BYTES) as usize);
                    match self.read_member_keeping(&io, MemberSector { role, sector: pos }, &mut buf, false) {
                        Ok(()) => Some(buf),
                        Err(f) => {
                            if f.kept {
                                unreadable.push(role);
                            }
                            None
                        }
                    }
                } else if self.level == Level::Raid6 && only_target_lost {
                    self.raid6_single_loss_content(&io, role, pos, pos + n, &mut unreadable)
                } else {
                    None
                };
                let content = match content {
                    Some(c) => Some(c),
                    None if io.read[role].is_some() && unreadable.is_empty() => None,
                    None => self.parity_role_content(role, pos, pos + n, unreadable),
                };
                let content = content.ok_or(super::Fault::Unrebuildable { first, last })?;
                assert_eq!(content.len() as u64, n * SECTOR_BYTES, "rebuilt region has the wrong length");
                let written = write(&content, pos);
                self.cache.recycle(content);
                written
            }
            Geometry::Raid1 { .. } | Geometry::Raid10(_) => self.mirror_recover(role, pos, n, &write),
            _ => Err(EngineError::Invalid("no redundancy to recover from".into())),
        }
    }

    /// Any parity level: read every survivor over `lo..hi`, rebuild what is missing, keep
    /// `role`. A survivor's read error that leaves it serving (and the roles in
    /// `unreadable`, known to have one) is rebuilt too and rewritten there; the caller holds
    /// the stripes' locks. None when too much is missing (a member that cannot be rebuilt
    /// around is failed, as md fails it).
    fn parity_role_content(&self, role: usize, lo: u64, hi: u64, unreadable: Vec<usize>) -> Option<StripeBuf> {
        let mut win = self.read_window_healing(lo, hi, self.lane_reads(), unreadable).ok()??;
        let content = win[role].take();
        self.recycle_window(win);
        content
    }

    /// RAID6 missing only `role`: per stripe, read the n-2 survivors that suffice (all but Q,
    /// or all but P where `role` is Q) and compute `role`'s block from them.
    /// A survivor's read error that leaves it serving puts its role in `unreadable` and
    /// returns None: the caller rebuilds through [`Self::parity_role_content`].
    fn raid6_single_loss_content(&self, io: &IoMap, role: usize, lo: u64, hi: u64, unreadable: &mut Vec<usize>) -> Option<StripeBuf> {
        let p = self.geometry.as_parity()?;
        let chunk = p.chunk_sectors();
        let stripes: Vec<(u64, u64, uraid_core::geometry::StripeRoles)> = {
            let mut v = Vec::new();
            let mut s_lo = lo;
            while s_lo < hi {
                let stripe = s_lo / chunk;
                let s_hi = ((stripe + 1) * chunk).min(hi);
                v.push((s_lo, s_hi, p.stripe_roles(stripe)));
                s_lo = s_hi;
            }
            v
        };
        // The survivor left unread in a stripe.
        let unread = |roles: &uraid_core::geometry::StripeRoles| if roles.q == Some(role) { roles.p } else { roles.q.unwrap_or(roles.p) };
        let len = ((hi - lo) * SECTOR_BYTES) as usize;
        let reads = self.lane_reads()(
            (0..io.read.len())
                .map(|member_role| {
                    let stripes = &stripes;
                    let f: Box<dyn FnOnce() -> Option<Result<StripeBuf, bool>> + Send> = Box::new(move || {
                        if member_role == role {
                            return None;
                        }
                        // Unread parts keep a pooled buffer's old bytes; they are only ever
                        // used as scratch space below.
                        let mut buf = self.cache.buffer(len);
                        // Contiguous runs of the stripes this member is read in.
                        let mut run: Option<(u64, u64)> = None;
                        let mut runs = Vec::new();
                        for (s_lo, s_hi, roles) in stripes {
                            if unread(roles) == member_role {
                                runs.extend(run.take());
                            } else {
                                run = Some(run.map_or((*s_lo, *s_hi), |(a, _)| (a, *s_hi)));
                            }
                        }
                        runs.extend(run);
                        for (a, b) in runs {
                            let part = &mut buf[((a - lo) * SECTOR_BYTES) as usize..((b - lo) * SECTOR_BYTES) as usize];
                            if let Err(f) = self.read_member_keeping(io, MemberSector { role: member_role, sector: a }, part, false) {
                                return Some(Err(f.kept));
                            }
                        }
                        Some(Ok(buf))
                    });
                    (len, f)
                })
                .collect(),
        );
        let mut win: Window = Vec::with_capacity(reads.len());
        let mut failed = false;
        for (member_role, r) in reads.into_iter().enumerate() {
            match r {
                Some(Ok(b)) => win.push(Some(b)),
                Some(Err(kept)) => {
                    if kept {
                        unreadable.push(member_role);
                    }
                    failed = true;
                    win.push(None);
                }
                None => win.push(Some(self.cache.buffer(len))),
            }
        }
        if failed {
            self.recycle_window(win);
            return None;
        }
        for (s_lo, s_hi, roles) in &stripes {
            let (a, b) = (((s_lo - lo) * SECTOR_BYTES) as usize, ((s_hi - lo) * SECTOR_BYTES) as usize);
            let mut views: Vec<Option<&mut [u8]>> = win.iter_mut().map(|w| w.as_mut().map(|v| &mut v[a..b])).collect();
            let mut take = |r: usize| views[r].take().expect("every role has a buffer");
            let ok = if let Some(x) = roles.data.iter().position(|&r| r == role) {
                let mut data: Vec<&mut [u8]> = roles.data.iter().map(|&r| take(r)).collect();
                let pb = take(roles.p);
                uraid_parity::recover_from_p(&mut data, x, pb).is_ok()
            } else {
                let data: Vec<&mut [u8]> = roles.data.iter().map(|&r| take(r)).collect();
                let data: Vec<&[u8]> = data.into_iter().map(|d| &*d).collect();
                let pb = take(roles.p);
                match roles.q {
                    // Q lost: P's buffer was not read and takes the P that gen_pq also makes.
                    Some(q) if q == role => {
                        compute_parity_refs(roles, &data, pb, Some(take(q)));
                        true
                    }
                    _ => uraid_parity::gen_p(&data, pb).is_ok(),
                }
            };
            if !ok {
                self.recycle_window(win);
                return None;
            }
        }
        let content = win[role].take();
        self.recycle_window(win);
        content
    }

    /// Mirrored levels: copies what role `role` holds at member sectors `pos..pos+n` from
    /// the other copies, chunk by chunk, each under the array-range locks of its data.
    fn mirror_recover(&self, role: usize, pos: u64, n: u64, write: TargetWrite<'_>) -> Result<(), EngineError> {
        let mut buf = vec![0u8; (self.step_unit().min(n) * SECTOR_BYTES) as usize];
        let mut s = 0;
        while s < n {
            // unmap gives the array sector of one member sector; copies are contiguous
            // within a chunk, so walk chunk by chunk.
            let unit = self.step_unit().min(n - s);
            let part = &mut buf[..(unit * SECTOR_BYTES) as usize];
            match self.geometry.unmap(role, pos + s).map_err(|e| EngineError::Invalid(e.to_string()))? {
                Some(a) => {
                    let (lo, hi) = self.lock_span(a, unit);
                    let _g = self.locks.lock(lo, hi);
                    self.read_sectors(a, part, true)?;
                    write(part, pos + s)?;
                }
                // Not array data (past the end of a far/offset layout): zeros.
                None => {
                    part.fill(0);
                    write(part, pos + s)?
                }
            }
            s += unit;
        }
        Ok(())
    }
}
