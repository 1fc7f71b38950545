//! RAID4/5/6 stripes: degraded reads by reconstruction, and writes that keep parity right.
//!
//! A write is cut into *segments*: the part of one stripe it touches, as a member-sector
//! range `lo..hi` (the same on every member) and the data blocks written inside it. The
//! pure planner (`uraid_core::plan::parity`) decides each segment's path as md does —
//! read-modify-write, reconstruct-write, full stripe or degraded — and lists its reads
//! and writes; this file carries the plan out: the reads as one parallel batch (io_uring
//! on direct members), the parity computation, then the writes of every segment of the
//! request as one batch.
//!
//! All reads happen before any write, so a member failing during the reads only restarts
//! the segment on the degraded path; a member failing during the writes is failed and the
//! others still receive a consistent stripe.

use super::{Array, EngineError, IoMap, MemberReadFailure};
use crate::parallel::{Bufs, MemberIo, Run};
use crate::stripe_cache::{stripe_buf, StripeBuf};
use uraid_core::geometry::{Location, MemberSector, Piece, Placement, StripeRoles, SECTOR_BYTES};
use uraid_core::plan::parity::{self as plan, Compute};
use uraid_core::plan::MemberRange;
use uraid_parity::Block;

/// One data block's new bytes inside a segment.
struct BlockWrite<'a> {
    data_index: usize,
    /// First member sector written.
    sector: u64,
    bytes: &'a [u8],
}

/// Bytes to write: the caller's data or a buffer computed here (parity, rebuilt blocks).
pub(super) enum OutBytes<'a> {
    Borrowed(&'a [u8]),
    Owned(StripeBuf),
}

impl OutBytes<'_> {
    fn as_slice(&self) -> &[u8] {
        match self {
            OutBytes::Borrowed(b) => b,
            OutBytes::Owned(v) => v,
        }
    }
}

/// Member writes of one request, collected over all its stripes and issued together: one
/// vectored write per member and contiguous run (consecutive stripes are contiguous on each
/// member), instead of one write per block.
pub(super) type Outs<'a> = Vec<(usize, u64, OutBytes<'a>)>;

/// A stripe read whole: its blocks, the data slots missing, P missing, Q missing.
pub(super) type StripeRead = (StripeBuffers, Vec<usize>, bool, bool);

/// Why a segment attempt stopped.
pub(super) enum SegmentError {
    /// A member failed while reading; nothing was written. Try again on the degraded path.
    Retry,
    /// This role's member failed a read but still serves: rebuild the range around it
    /// and rewrite it there.
    Unreadable(usize),
    Fatal(EngineError),
}

impl From<EngineError> for SegmentError {
    fn from(e: EngineError) -> Self {
        SegmentError::Fatal(e)
    }
}

/// A stripe's blocks over `lo..hi`, laid out for the parity crate.
pub(super) struct StripeBuffers {
    pub data: Vec<StripeBuf>,
    pub p: StripeBuf,
    pub q: Option<StripeBuf>,
}

/// P (and Q, in md's slot order) of `data` for the stripe described by `roles`.
pub(super) fn compute_parity(roles: &StripeRoles, data: &[StripeBuf], p: &mut [u8], q: Option<&mut [u8]>) {
    let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    compute_parity_refs(roles, &refs, p, q)
}

/// [`compute_parity`] over borrowed blocks.
pub(super) fn compute_parity_refs(roles: &StripeRoles, data: &[&[u8]], p: &mut [u8], q: Option<&mut [u8]>) {
    let result = match q {
        None => uraid_parity::gen_p(data, p),
        Some(q) => {
            let zero = vec![0u8; p.len()];
            let refs: Vec<&[u8]> = roles.syndrome_sources().iter().map(|src| src.map_or(zero.as_slice(), |i| data[i])).collect();
            uraid_parity::gen_pq(&refs, p, q)
        }
    };
    // Shapes are built here from one stripe; a mismatch is a bug, not bad input. Checked in
    // release builds too: on error the kernel has written nothing, and carrying on would put
    // zero (or stale) parity on disk, to be found only when a member is lost.
    assert!(result.is_ok(), "parity kernel refused the stripe's block shapes: {result:?}");
}

/// Rebuilds the data blocks listed in `missing` (and P/Q when `p_missing`/`q_missing`)
/// from the rest of `bufs`. Returns false when too much is missing.
pub(super) fn rebuild(roles: &StripeRoles, bufs: &mut StripeBuffers, missing: &[usize], p_missing: bool, q_missing: bool) -> bool {
    let data: Vec<&mut [u8]> = bufs.data.iter_mut().map(|d| d.as_mut_slice()).collect();
    rebuild_slices(roles, data, &mut bufs.p, bufs.q.as_deref_mut(), missing, p_missing, q_missing)
}

/// [`rebuild`] over borrowed blocks (data in array order), so callers can rebuild straight
/// inside larger per-member buffers without copying.
pub(super) fn rebuild_slices(
    roles: &StripeRoles,
    mut data: Vec<&mut [u8]>,
    p: &mut [u8],
    q: Option<&mut [u8]>,
    missing: &[usize],
    p_missing: bool,
    q_missing: bool,
) -> bool {
    let lost_count = missing.len() + p_missing as usize + q_missing as usize;
    if lost_count == 0 {
        return true;
    }
    match q {
        None => {
            if lost_count > 1 {
                return false;
            }
            if let [x] = missing {
                return uraid_parity::recover_from_p(&mut data, *x, p).is_ok();
            }
            let refs: Vec<&[u8]> = data.iter().map(|d| &**d).collect();
            compute_parity_refs(roles, &refs, p, None);
            true
        }
        Some(_) if lost_count == 1 && !p_missing && !q_missing => {
            // One data block lost, P and Q read: rebuilt from P, as md's compute_block_1
            // does, leaving P and Q as they are on disk. (The kernels' data+P recovery would
            // rebuild it from Q and regenerate P in the buffer: after a crash left P stale, a
            // resync comparing that regenerated P found the stripe consistent and wrote
            // nothing, the disk's P stayed stale, and the rebuild onto a spare from P then
            // disagreed with Q; serial simulator seeds 2625, 4394 and four more.)
            let [x] = missing else { return false };
            uraid_parity::recover_from_p(&mut data, *x, p).is_ok()
        }
        Some(q) => {
            if lost_count > 2 {
                return false;
            }
            let len = p.len();
            // md's Q weights follow its slot order; DDF layouts feed zero slots.
            let mut zeros: Vec<Vec<u8>> = Vec::new();
            let sources = roles.syndrome_sources();
            for src in &sources {
                if src.is_none() {
                    zeros.push(vec![0u8; len]);
                }
            }
            let mut by_index: Vec<Option<&mut [u8]>> = data.into_iter().map(Some).collect();
            let mut zero_iter = zeros.iter_mut();
            let mut slots: Vec<&mut [u8]> = Vec::with_capacity(sources.len());
            for src in &sources {
                match src {
                    Some(i) => match by_index.get_mut(*i).and_then(|b| b.take()) {
                        Some(b) => slots.push(b),
                        None => return false,
                    },
                    None => match zero_iter.next() {
                        Some(z) => slots.push(z.as_mut_slice()),
                        None => return false,
                    },
                }
            }
            let mut lost: Vec<Block> = missing.iter().map(|&i| Block::Data(roles.q_exponents[i] as usize)).collect();
            if p_missing {
                lost.push(Block::P);
            }
            if q_missing {
                lost.push(Block::Q);
            }
            uraid_parity::recover_raid6(&mut slots, p, q, &lost).is_ok()
        }
    }
}

/// Every member's sectors `lo..hi` (which may span several stripes), by role; `None` for a
/// missing member. Consecutive stripes are contiguous on each member, so one I/O per member
/// covers a whole window.
pub(super) type Window = Vec<Option<StripeBuf>>;

/// How a batch of member operations runs: [`crate::parallel::run_all`] or [`crate::parallel::run_in_line`].
pub(super) type RunAll<T> = for<'a> fn(Vec<(usize, Box<dyn FnOnce() -> T + Send + 'a>)>) -> Vec<T>;

/// Queues a stripe's new data blocks and parity.
fn push_stripe<'a>(outs: &mut Outs<'a>, roles: &StripeRoles, lo: u64, writes: &[BlockWrite<'a>], p: StripeBuf, q: Option<StripeBuf>) {
    for w in writes {
        outs.push((roles.data[w.data_index], w.sector, OutBytes::Borrowed(w.bytes)));
    }
    outs.push((roles.p, lo, OutBytes::Owned(p)));
    if let (Some(qr), Some(q)) = (roles.q, q) {
        outs.push((qr, lo, OutBytes::Owned(q)));
    }
}

impl Array {
    /// Reads member sectors `lo..hi` of every present role, one request per member, the
    /// reads run by `run` (in parallel, or in line by a caller that runs several windows at
    /// once already). Roles in `rebuilding` are not read (left for the rebuild); a read error
    /// that leaves its member serving stops with [`SegmentError::Unreadable`], one that
    /// failed the member asks for a retry.
    pub(super) fn read_window_with(
        &self,
        io: &IoMap,
        lo: u64,
        hi: u64,
        run: RunAll<Option<Result<StripeBuf, bool>>>,
        rebuilding: &[usize],
    ) -> Result<Window, SegmentError> {
        let len = ((hi - lo) * SECTOR_BYTES) as usize;
        let results = run((0..io.read.len())
            .map(|role| {
                let f: Box<dyn FnOnce() -> Option<Result<StripeBuf, bool>> + Send> = Box::new(move || {
                    io.read[role].as_ref()?;
                    if rebuilding.contains(&role) {
                        return None;
                    }
                    let mut b = self.cache.buffer(len);
                    let ms = MemberSector { role, sector: lo };
                    Some(self.read_member_keeping(io, ms, &mut b, false).map(|_| b).map_err(|f| f.kept))
                });
                (len, f)
            })
            .collect());
        let mut win = Vec::with_capacity(results.len());
        let mut unreadable = None;
        let mut retry = false;
        for (role, r) in results.into_iter().enumerate() {
            match r {
                Some(Ok(b)) => win.push(Some(b)),
                Some(Err(true)) => {
                    unreadable.get_or_insert(role);
                    win.push(None);
                }
                Some(Err(false)) => {
                    retry = true;
                    win.push(None);
                }
                None => win.push(None),
            }
        }
        match (unreadable, retry) {
            (Some(role), _) => {
                self.recycle_window(win);
                Err(SegmentError::Unreadable(role))
            }
            (None, true) => {
                self.recycle_window(win);
                Err(SegmentError::Retry)
            }
            (None, false) => Ok(win),
        }
    }

    /// Fills every missing role of `win` (member sectors `lo..hi`) by rebuilding each stripe
    /// in place. False when some stripe has too much missing.
    pub(super) fn rebuild_window(&self, win: &mut Window, lo: u64, hi: u64) -> bool {
        let p = self.parity();
        let chunk = p.chunk_sectors();
        let len = ((hi - lo) * SECTOR_BYTES) as usize;
        let absent: Vec<usize> = (0..win.len()).filter(|r| win[*r].is_none()).collect();
        if absent.is_empty() {
            return true;
        }
        for r in &absent {
            // Rebuilt whole below, so stale contents of a pooled buffer never show.
            win[*r] = Some(self.cache.buffer(len));
        }
        let mut s_lo = lo;
        while s_lo < hi {
            let stripe = s_lo / chunk;
            let s_hi = ((stripe + 1) * chunk).min(hi);
            let (a, b) = (((s_lo - lo) * SECTOR_BYTES) as usize, ((s_hi - lo) * SECTOR_BYTES) as usize);
            let roles = p.stripe_roles(stripe);
            let mut views: Vec<Option<&mut [u8]>> = win.iter_mut().map(|w| w.as_mut().map(|v| &mut v[a..b])).collect();
            let mut take = |role: usize| views[role].take();
            let data: Option<Vec<&mut [u8]>> = roles.data.iter().map(|&r| take(r)).collect();
            let pb = take(roles.p);
            let qb = roles.q.map(take);
            let (Some(data), Some(pb)) = (data, pb) else { return false };
            let q_slice = match qb {
                Some(Some(q)) => Some(q),
                Some(None) => return false,
                None => None,
            };
            let missing: Vec<usize> = (0..roles.data.len()).filter(|i| absent.contains(&roles.data[*i])).collect();
            let p_missing = absent.contains(&roles.p);
            let q_missing = roles.q.is_some_and(|q| absent.contains(&q));
            if !rebuild_slices(&roles, data, pb, q_slice, &missing, p_missing, q_missing) {
                return false;
            }
            s_lo = s_hi;
        }
        true
    }

    /// Reads array sectors for the pieces of a parity array, several stripes at a time:
    /// healthy runs are read member by member; a run touching a missing member is read as a
    /// window over every member and rebuilt in place (one read of each survivor, not one per
    /// missing block).
    pub(super) fn read_striped_pieces(&self, pieces: &[Piece], out: &mut [u8], locks_held: bool) -> Result<(), EngineError> {
        let io = self.io_map();
        let degraded = io.read.iter().any(|r| r.is_none());
        // Roles whose members failed a read here but still serve: rebuilt from the others
        // and rewritten (md's fix_read_error).
        let mut unreadable: Vec<usize> = Vec::new();
        if !degraded {
            let targets: Vec<(usize, u64, u64)> = pieces
                .iter()
                .map(|p| match &p.placement {
                    Placement::Striped(loc) => (loc.role, loc.member_sector, p.sectors),
                    _ => unreachable!("parity geometry"),
                })
                .collect();
            match self.read_batched(&io, &targets, out) {
                Ok(()) => return Ok(()),
                // A member failed: the array is degraded now; read through reconstruction.
                Err(kept) if kept.is_empty() => return self.read_striped_pieces(pieces, out, locks_held),
                Err(kept) => unreadable = kept,
            }
        }
        let locs: Vec<(Location, u64)> = pieces
            .iter()
            .map(|p| match &p.placement {
                Placement::Striped(loc) => (*loc, p.sectors),
                _ => unreachable!("parity geometry"),
            })
            .collect();
        let (first, last) = (locs[0].0.stripe, locs[locs.len() - 1].0.stripe);
        let lo = locs.iter().map(|(l, _)| l.member_sector).min().unwrap_or(0);
        let hi = locs.iter().map(|(l, n)| l.member_sector + n).max().unwrap_or(lo);
        let _guard = (!locks_held).then(|| self.locks.lock(first, last));
        let _room = self.cache.reserve((io.read.len() as u64) * (hi - lo) * SECTOR_BYTES);
        let Some(win) = self.read_window_healing(lo, hi, crate::parallel::run_all, unreadable)? else {
            return Err(EngineError::Unreadable {
                offset: pieces[0].array_sector * SECTOR_BYTES,
                detail: format!("stripes {first}..={last} have too many members missing"),
            });
        };
        let mut at = 0usize;
        for (loc, n) in &locs {
            let len = (*n * SECTOR_BYTES) as usize;
            let off = ((loc.member_sector - lo) * SECTOR_BYTES) as usize;
            let src = win[loc.role].as_ref().map(|b| &b[off..off + len]);
            match src {
                Some(src) => out[at..at + len].copy_from_slice(src),
                None => return Err(super::Fault::Internal("rebuilt window lacks a role").into()),
            }
            at += len;
        }
        self.recycle_window(win);
        Ok(())
    }

    /// Reads member sectors `lo..hi` of every present role and rebuilds the missing ones in
    /// place, healing on the way (md's fix_read_error): a read error that leaves its member
    /// serving, and the roles in `unreadable` (known to have one), are rebuilt from the rest
    /// and rewritten there. The caller holds the stripes' locks. `None` when too much is
    /// missing; members whose bad range could not be rebuilt are failed first, as md fails
    /// them ("read error not correctable").
    pub(super) fn read_window_healing(
        &self,
        lo: u64,
        hi: u64,
        run: RunAll<Option<Result<StripeBuf, bool>>>,
        mut unreadable: Vec<usize>,
    ) -> Result<Option<Window>, EngineError> {
        // Each pass loses a member (failed, or unreadable here): at most one per role.
        for _ in 0..=2 * self.geometry.raid_disks() {
            let io = self.io_map();
            unreadable.retain(|&r| io.read[r].is_some());
            let mut win = match self.read_window_with(&io, lo, hi, run, &unreadable) {
                Ok(w) => w,
                Err(SegmentError::Retry) => continue,
                Err(SegmentError::Unreadable(role)) => {
                    unreadable.push(role);
                    continue;
                }
                Err(SegmentError::Fatal(e)) => return Err(e),
            };
            if !self.rebuild_window(&mut win, lo, hi) {
                self.recycle_window(win);
                if unreadable.is_empty() {
                    return Ok(None);
                }
                // With bad-block logs the members stay (md lists the range and returns an
                // error for it); only the data of these stripes is lost, not the members.
                if unreadable.iter().all(|&r| io.read[r].as_ref().is_some_and(|rm| self.may_record(rm.device))) {
                    return Ok(None);
                }
                // The next pass, without them, reports the data lost (or reads it, if the
                // failure changed nothing).
                for role in std::mem::take(&mut unreadable) {
                    if let Some(rm) = io.read[role].as_ref() {
                        self.fail_device(
                            rm.device,
                            &format!("read error at member sector {lo}..{hi} not correctable: too few members to rebuild it"),
                        );
                    }
                }
                continue;
            }
            for &role in &unreadable {
                if let (Some(rm), Some(content)) = (io.read[role].as_ref(), win[role].as_ref()) {
                    let _ = self.rewrite_unreadable(rm, lo, content);
                }
            }
            return Ok(Some(win));
        }
        Err(super::Fault::WindowMembersKeptFailing { first_sector: lo, end_sector: hi }.into())
    }

    /// Reads consecutive pieces of `out` — `targets[i]` = (role, member sector, sectors) of
    /// piece i — with one vectored request per member and contiguous run, members in
    /// parallel. If a read failed, the roles whose members failed it but still serve (below
    /// `max_read_errors`; the others are failed): the caller then reads on a path that
    /// rebuilds or tries another copy, and rewrites those members' ranges.
    pub(super) fn read_batched(&self, io: &IoMap, targets: &[(usize, u64, u64)], out: &mut [u8]) -> Result<(), Vec<usize>> {
        // Carve `out` into one slice per piece, grouped by the role holding it.
        let mut per_role: Vec<Vec<(u64, &mut [u8])>> = (0..io.read.len()).map(|_| Vec::new()).collect();
        let mut rest = out;
        for &(role, sector, sectors) in targets {
            let (part, tail) = rest.split_at_mut((sectors * SECTOR_BYTES) as usize);
            per_role[role].push((sector, part));
            rest = tail;
        }
        // One batch entry per present member, its runs of member-contiguous pieces one
        // request each; the batch runs on io_uring, the pool or in line (parallel.rs).
        let mut devices = Vec::new();
        let mut batch = Vec::new();
        for (role, mut parts) in per_role.into_iter().enumerate() {
            let Some(rm) = io.read[role].as_ref().filter(|_| !parts.is_empty()) else { continue };
            parts.sort_by_key(|(sector, _)| *sector);
            let mut runs = Vec::new();
            for (sector, part) in parts {
                crate::parallel::push_read(&mut runs, rm.data_offset + sector * SECTOR_BYTES, part);
            }
            devices.push((rm.device, role, rm.member.label()));
            batch.push(MemberIo { member: &*rm.member, runs });
        }
        let mut kept = Vec::new();
        let mut ok = true;
        for ((device, role, label), result) in devices.into_iter().zip(crate::parallel::run_member_io(batch)) {
            if let Err(e) = result {
                ok = false;
                if self.read_error_keeps_member(device, &format!("{label}: read: {e}"), &e) {
                    kept.push(role);
                }
            }
        }
        if ok {
            Ok(())
        } else {
            Err(kept)
        }
    }

    pub(super) fn recycle_window(&self, win: Window) {
        for b in win.into_iter().flatten() {
            self.cache.recycle(b);
        }
    }

    fn parity(&self) -> &uraid_core::geometry::ParityGeometry {
        self.geometry.as_parity().expect("striped paths run on parity geometries only")
    }

    /// Reads every present block of `stripe` over member sectors `lo..hi`. Returns the
    /// buffers (missing ones zeroed) and what is missing.
    #[allow(clippy::type_complexity)]
    pub(super) fn read_stripe_buffers(
        &self,
        io: &IoMap,
        stripe: u64,
        lo: u64,
        hi: u64,
        unreadable: &[usize],
    ) -> Result<(StripeBuffers, Vec<usize>, bool, bool), SegmentError> {
        let roles = self.parity().stripe_roles(stripe);
        let h = ((hi - lo) * SECTOR_BYTES) as usize;
        let mut all_roles: Vec<usize> = roles.data.clone();
        all_roles.push(roles.p);
        all_roles.extend(roles.q);
        let results = crate::parallel::run_all(
            all_roles
                .iter()
                .map(|&role| {
                    let f: Box<dyn FnOnce() -> Option<Result<StripeBuf, MemberReadFailure>> + Send> = Box::new(move || {
                        io.read[role].as_ref()?;
                        if unreadable.contains(&role) {
                            return None;
                        }
                        let mut b = stripe_buf(h);
                        Some(self.read_member_keeping(io, MemberSector { role, sector: lo }, &mut b, false).map(|_| b))
                    });
                    (h, f)
                })
                .collect(),
        );
        let mut blocks = Vec::with_capacity(results.len());
        let mut missing_roles = Vec::new();
        for (role, r) in all_roles.iter().zip(results) {
            match r {
                Some(Ok(b)) => blocks.push(b),
                Some(Err(f)) => return Err(if f.kept { SegmentError::Unreadable(*role) } else { SegmentError::Retry }),
                None => {
                    missing_roles.push(*role);
                    blocks.push(stripe_buf(h));
                }
            }
        }
        let q = roles.q.map(|_| blocks.pop().unwrap_or_else(|| stripe_buf(h)));
        let p = blocks.pop().unwrap_or_else(|| stripe_buf(h));
        let missing: Vec<usize> = (0..roles.data.len()).filter(|i| missing_roles.contains(&roles.data[*i])).collect();
        let p_missing = missing_roles.contains(&roles.p);
        let q_missing = roles.q.is_some_and(|q| missing_roles.contains(&q));
        Ok((StripeBuffers { data: blocks, p, q }, missing, p_missing, q_missing))
    }

    /// Reads one stripe's blocks over member sectors `lo..hi`; the caller holds the
    /// stripe's lock. A read error on a member that still serves (a scrub's or a
    /// read-modify-write's latent sector; `unreadable` lists roles known to have one) is
    /// rebuilt from the rest of the stripe and rewritten, then the stripe is read again, so
    /// the caller goes on over the corrected block. If too little is left to rebuild it, the
    /// member is failed, as md fails it. Also returns each role healed: rewritten (true) or
    /// left listed in its bad-block log (false).
    pub(super) fn read_stripe_healing(
        &self,
        stripe: u64,
        lo: u64,
        hi: u64,
        mut unreadable: Vec<usize>,
    ) -> Result<(StripeRead, Vec<(usize, bool)>), EngineError> {
        let Some(parity) = self.geometry.as_parity() else { return Err(EngineError::Invalid("not a parity array".into())) };
        let roles = parity.stripe_roles(stripe);
        // Each role healed: rewritten (true) or left listed in its bad-block log (false).
        let mut corrected: Vec<(usize, bool)> = Vec::new();
        for _ in 0..=2 * self.geometry.raid_disks() {
            let io = self.io_map();
            unreadable.retain(|&r| io.read[r].is_some());
            let (mut bufs, missing, p_missing, q_missing) = match self.read_stripe_buffers(&io, stripe, lo, hi, &unreadable) {
                Ok(read) => read,
                Err(SegmentError::Unreadable(role)) => {
                    unreadable.push(role);
                    continue;
                }
                Err(SegmentError::Retry) => continue,
                Err(SegmentError::Fatal(e)) => return Err(e),
            };
            if unreadable.is_empty() {
                return Ok(((bufs, missing, p_missing, q_missing), corrected));
            }
            let rebuilt = rebuild(&roles, &mut bufs, &missing, p_missing, q_missing);
            // Roles whose range stays listed in their bad-block log: reading again would
            // only meet the list again, so the rebuilt stripe is the answer (those roles
            // reported missing, as for a failed member).
            let mut still_listed = false;
            for role in std::mem::take(&mut unreadable) {
                let Some(rm) = io.read[role].as_ref() else { continue };
                let block = if role == roles.p {
                    Some(&bufs.p)
                } else if Some(role) == roles.q {
                    bufs.q.as_ref()
                } else {
                    roles.data.iter().position(|&r| r == role).map(|i| &bufs.data[i])
                };
                match block.filter(|_| rebuilt) {
                    Some(content) => {
                        if self.rewrite_unreadable_pieces(rm, lo, content) {
                            corrected.push((role, true));
                        } else if rm.bad_blocks.overlaps(rm.data_offset / SECTOR_BYTES + lo, hi - lo) {
                            corrected.push((role, false));
                            still_listed = true;
                        }
                    }
                    // See read_window_healing: a member with a bad-block log stays.
                    None if self.may_record(rm.device) => {
                        return Err(EngineError::Unreadable {
                            offset: parity.stripe_array_sector(stripe) * SECTOR_BYTES,
                            detail: format!("stripe {stripe}: too many members unreadable at member sectors {lo}..{hi}"),
                        })
                    }
                    None => self.fail_device(
                        rm.device,
                        &format!("read error at member sector {lo}..{hi} not correctable: too few members to rebuild it"),
                    ),
                }
            }
            if still_listed {
                return Ok(((bufs, missing, p_missing, q_missing), corrected));
            }
        }
        Err(super::Fault::MembersKeptFailing { stripe }.into())
    }

    /// Writes `data` (whole sectors, already split into `pieces`); the caller holds the
    /// stripe locks.
    pub(super) fn write_striped(&self, pieces: &[Piece], data: &[u8]) -> Result<(), EngineError> {
        let mut at = 0usize;
        let mut i = 0;
        let mut outs: Outs = Vec::new();
        while i < pieces.len() {
            let Placement::Striped(loc0) = &pieces[i].placement else { unreachable!("parity geometry") };
            let stripe = loc0.stripe;
            let mut writes = Vec::new();
            let (mut lo, mut hi) = (u64::MAX, 0u64);
            while i < pieces.len() {
                let Placement::Striped(loc) = &pieces[i].placement else { unreachable!() };
                if loc.stripe != stripe {
                    break;
                }
                let len = (pieces[i].sectors * SECTOR_BYTES) as usize;
                writes.push(BlockWrite { data_index: loc.data_index, sector: loc.member_sector, bytes: &data[at..at + len] });
                lo = lo.min(loc.member_sector);
                hi = hi.max(loc.member_sector + pieces[i].sectors);
                at += len;
                i += 1;
            }
            self.write_segment(stripe, lo, hi, &writes, &mut outs)?;
        }
        self.write_batched(outs)
            .map_err(|f| EngineError::Unreadable { offset: pieces[0].array_sector * SECTOR_BYTES, detail: f.to_string() })?;
        self.check_alive()
    }

    fn write_segment<'a>(&self, stripe: u64, lo: u64, hi: u64, writes: &[BlockWrite<'a>], outs: &mut Outs<'a>) -> Result<(), EngineError> {
        let parity = self.parity();
        let roles = parity.stripe_roles(stripe);
        let h = ((hi - lo) * SECTOR_BYTES) as usize;
        let _room = self.cache.reserve(((roles.data.len() + 2) * h) as u64);
        let stripe_end = (stripe + 1) * parity.chunk_sectors();
        let block_writes: Vec<plan::BlockWrite> = writes
            .iter()
            .map(|w| plan::BlockWrite { data_index: w.data_index, sector: w.sector, sectors: w.bytes.len() as u64 / SECTOR_BYTES })
            .collect();
        for _ in 0..=self.geometry.raid_disks() {
            self.check_alive()?;
            let io = self.io_map();
            // A role whose member lists part of lo..hi as bad cannot be read there: the
            // plan treats it as lost for this segment (and its write clears the list).
            let present: Vec<bool> = io
                .read
                .iter()
                .map(|r| r.as_ref().is_some_and(|rm| !rm.bad_blocks.overlaps(rm.data_offset / SECTOR_BYTES + lo, hi - lo)))
                .collect();
            let request = plan::SegmentRequest {
                stripe,
                roles: &roles,
                present: &present,
                parity_in_sync: stripe_end <= self.resync_position(),
                lo,
                hi,
                writes: &block_writes,
            };
            let plan = plan::plan_write(&request)?;
            let mark = outs.len();
            match self.carry_out(&io, &roles, &plan, lo, h, writes, outs) {
                Ok(()) => return self.check_alive(),
                Err(SegmentError::Retry) => {
                    outs.truncate(mark);
                    continue;
                }
                // A read the plan needs hit a bad sector on a member that stays: rebuild
                // and rewrite that block (we hold the stripe's lock), then plan again.
                Err(SegmentError::Unreadable(role)) => {
                    outs.truncate(mark);
                    self.read_stripe_healing(stripe, lo, hi, vec![role])?;
                    continue;
                }
                Err(SegmentError::Fatal(e)) => return Err(e),
            }
        }
        Err(super::Fault::MembersKeptFailing { stripe }.into())
    }

    /// Reads `ranges` as one batch, all members at once ([`crate::parallel::run_member_io`]:
    /// io_uring on direct members, else the I/O pool). A member whose read fails is failed
    /// and the caller plans again (nothing has been written yet), unless it stays below
    /// `max_read_errors`: then its role is returned as unreadable, to be rewritten.
    fn read_ranges(&self, io: &IoMap, ranges: &[MemberRange]) -> Result<Vec<StripeBuf>, SegmentError> {
        let mut bufs: Vec<StripeBuf> = ranges.iter().map(|r| self.cache.buffer((r.sectors * SECTOR_BYTES) as usize)).collect();
        let mut devices = Vec::with_capacity(ranges.len());
        let mut batch = Vec::with_capacity(ranges.len());
        for (range, buf) in ranges.iter().zip(bufs.iter_mut()) {
            // The plan was made from this map, so a planned read's role is present in it.
            let Some(rm) = io.read.get(range.role).and_then(Option::as_ref) else { return Err(SegmentError::Retry) };
            devices.push((rm.device, range.role, rm.member.label()));
            let run = Run { offset: rm.data_offset + range.sector * SECTOR_BYTES, bufs: Bufs::Read(vec![buf.as_mut_slice()]) };
            batch.push(MemberIo { member: &*rm.member, runs: vec![run] });
        }
        let (mut failed, mut unreadable) = (false, None);
        for ((device, role, label), result) in devices.into_iter().zip(crate::parallel::run_member_io(batch)) {
            if let Err(e) = result {
                if self.read_error_keeps_member(device, &format!("{label}: read: {e}"), &e) {
                    unreadable.get_or_insert(role);
                } else {
                    failed = true;
                }
            }
        }
        match (unreadable, failed) {
            (Some(role), _) => Err(SegmentError::Unreadable(role)),
            (None, true) => Err(SegmentError::Retry),
            (None, false) => Ok(bufs),
        }
    }

    /// Carries out one segment's plan: its reads as one batch, its computation, and its
    /// writes queued in `outs` (issued with the request's other segments).
    #[allow(clippy::too_many_arguments)]
    fn carry_out<'a>(
        &self,
        io: &IoMap,
        roles: &StripeRoles,
        plan: &plan::SegmentPlan,
        lo: u64,
        h: usize,
        writes: &[BlockWrite<'a>],
        outs: &mut Outs<'a>,
    ) -> Result<(), SegmentError> {
        let read = self.read_ranges(io, &plan.reads)?;
        // A plan reads each role at most once: look its buffer up by role.
        let mut by_role: Vec<Option<StripeBuf>> = vec![None; io.read.len()];
        for (range, buf) in plan.reads.iter().zip(read) {
            by_role[range.role] = Some(buf);
        }
        let mut take = |role: usize| by_role[role].take();
        match &plan.compute {
            Compute::FullStripe => {
                // Parity straight from the caller's buffers, no copies.
                let mut by_index: Vec<&[u8]> = vec![&[]; roles.data.len()];
                for w in writes {
                    by_index[w.data_index] = w.bytes;
                }
                let mut p = stripe_buf(h);
                let mut q = roles.q.map(|_| stripe_buf(h));
                compute_parity_refs(roles, &by_index, &mut p, q.as_deref_mut());
                push_stripe(outs, roles, lo, writes, p, q);
            }
            Compute::ReadModifyWrite => {
                let planned = "read-modify-write plan reads P, Q and every written range";
                let mut p = take(roles.p).expect(planned);
                let mut q = roles.q.map(|qr| take(qr).expect(planned));
                for w in writes {
                    let mut delta = take(roles.data[w.data_index]).expect(planned);
                    for (o, n) in delta.iter_mut().zip(w.bytes) {
                        *o ^= n;
                    }
                    let off = ((w.sector - lo) * SECTOR_BYTES) as usize;
                    let range = off..off + delta.len();
                    match q.as_mut() {
                        None => {
                            for (pb, d) in p[range].iter_mut().zip(delta.iter()) {
                                *pb ^= d;
                            }
                        }
                        Some(q) => {
                            let slot = roles.q_exponents[w.data_index] as usize;
                            let r = uraid_parity::update_pq(slot, &[delta.as_slice()], &mut p[range.clone()], &mut q[range]);
                            // Release builds too: a refused update would leave P and Q stale on disk.
                            assert!(r.is_ok(), "parity kernel refused the read-modify-write shapes: {r:?}");
                        }
                    }
                    self.cache.recycle(delta);
                }
                push_stripe(outs, roles, lo, writes, p, q);
            }
            Compute::ReconstructWrite => {
                // Blocks not read are overwritten whole by the writes.
                let data = roles.data.iter().map(|&r| take(r).unwrap_or_else(|| stripe_buf(h))).collect();
                self.finish_full_stripe(roles, lo, h, data, writes, outs);
            }
            Compute::Degraded { rebuild: lost, p_lost, q_lost } => {
                let mut bufs = StripeBuffers {
                    data: roles.data.iter().map(|&r| take(r).unwrap_or_else(|| stripe_buf(h))).collect(),
                    p: take(roles.p).unwrap_or_else(|| stripe_buf(h)),
                    q: roles.q.map(|qr| take(qr).unwrap_or_else(|| stripe_buf(h))),
                };
                if !rebuild(roles, &mut bufs, lost, *p_lost, *q_lost) {
                    return Err(SegmentError::Fatal(super::Fault::TooFewToRebuild { first_sector: lo }.into()));
                }
                self.finish_full_stripe(roles, lo, h, bufs.data, writes, outs);
            }
        }
        Ok(())
    }

    /// With every data block of the segment in `data`: overlay the writes, compute parity,
    /// write the written blocks, rebuilt-but-missing blocks' new state is implied, and P/Q.
    fn finish_full_stripe<'a>(
        &self,
        roles: &StripeRoles,
        lo: u64,
        h: usize,
        mut data: Vec<StripeBuf>,
        writes: &[BlockWrite<'a>],
        outs: &mut Outs<'a>,
    ) {
        for w in writes {
            let off = ((w.sector - lo) * SECTOR_BYTES) as usize;
            data[w.data_index][off..off + w.bytes.len()].copy_from_slice(w.bytes);
        }
        let mut p = stripe_buf(h);
        let mut q = roles.q.map(|_| stripe_buf(h));
        compute_parity(roles, &data, &mut p, q.as_deref_mut());
        push_stripe(outs, roles, lo, writes, p, q);
    }

    /// Issues collected writes: per member, contiguous runs as single vectored writes; members
    /// in parallel. The member map is read now, so members failed meanwhile are skipped (the
    /// stripes written stay consistent on the rest). Members whose write fails are failed.
    fn write_batched(&self, mut outs: Outs) -> Result<(), super::Fault> {
        outs.sort_by_key(|(role, sector, _)| (*role, *sector));
        let io = self.io_map();
        let mut devices: Vec<usize> = Vec::new();
        let mut batch: Vec<MemberIo> = Vec::new();
        for (role, sector, bytes) in &outs {
            // Outs are sorted by role, so each device's runs arrive in sector order; a role
            // has two devices during a hot replace, hence the lookup.
            for rm in io.writers(*role) {
                let at = match devices.iter().position(|d| *d == rm.device) {
                    Some(at) => at,
                    None => {
                        devices.push(rm.device);
                        batch.push(MemberIo { member: &*rm.member, runs: Vec::new() });
                        devices.len() - 1
                    }
                };
                crate::parallel::push_write(&mut batch[at].runs, rm.data_offset + sector * SECTOR_BYTES, bytes.as_slice());
            }
        }
        let mut listed = false;
        for (device, result) in devices.into_iter().zip(crate::parallel::run_member_io(batch)) {
            let Err(e) = result else { continue };
            // What this device was asked to write, found again only when it failed (the
            // common path keeps no second list).
            let writes: Vec<(u64, &[u8])> = outs
                .iter()
                .flat_map(|(role, sector, bytes)| {
                    io.writers(*role)
                        .filter(|rm| rm.device == device)
                        .map(move |rm| (rm.data_offset + sector * SECTOR_BYTES, bytes.as_slice()))
                })
                .collect();
            if self.write_error_keeps_member(device, &writes, &e) {
                listed = true;
            } else {
                self.fail_device_io(device, &e, &e.to_string());
            }
        }
        // Ranges listed just now are rebuilt from the other members; a stripe where too
        // many are missing or listed has lost the write.
        if listed {
            let io = self.io_map();
            let (lo, hi) =
                outs.iter().fold((u64::MAX, 0), |(lo, hi), (_, s, b)| (lo.min(*s), hi.max(s + b.as_slice().len() as u64 / SECTOR_BYTES)));
            if !self.stripes_recoverable(&io, lo, hi) {
                return Err(super::Fault::WriteUnprotected { first_sector: lo, end_sector: hi });
            }
        }
        Ok(())
    }

    /// Writes each (role, member sector, bytes) to the role's write targets, through
    /// [`Self::write_batched`]; members whose write fails are failed. Missing roles are skipped.
    pub(super) fn write_members(&self, out: &[(usize, u64, &[u8])]) -> Result<(), EngineError> {
        Ok(self.write_batched(out.iter().map(|&(role, sector, bytes)| (role, sector, OutBytes::Borrowed(bytes))).collect())?)
    }
}
