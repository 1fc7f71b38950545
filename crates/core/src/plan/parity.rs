//! RAID4/5/6 write planning for one *segment*: the part of one stripe a request writes, as a
//! member-sector range `lo..hi` (the same on every member) and the data blocks written
//! inside it.
//!
//! The choice is md's (`handle_stripe_dirtying`): on a healthy stripe whose parity is known
//! to be in sync, read-modify-write or reconstruct-write, whichever reads fewer sectors; a
//! stripe not yet resynced never folds a change into its parity (it may be wrong), so it
//! reconstructs; a degraded stripe reads every present member, rebuilds what the write
//! needs, and writes every block it changes (a lost role's share goes to its spare, if one
//! is being rebuilt).

use super::{MemberRange, PlanError};
use crate::geometry::StripeRoles;

/// One data block's new sectors inside a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockWrite {
    /// Index of the data block in the stripe (array order).
    pub data_index: usize,
    /// First member sector written.
    pub sector: u64,
    pub sectors: u64,
}

/// What a segment asks of the planner.
#[derive(Debug, Clone, Copy)]
pub struct SegmentRequest<'a> {
    pub stripe: u64,
    pub roles: &'a StripeRoles,
    /// By role: does the member hold readable, current data? Missing, failed and
    /// still-rebuilding members are `false`.
    pub present: &'a [bool],
    /// Is this stripe's parity known to match its data (resync has passed it)?
    pub parity_in_sync: bool,
    /// The segment's member-sector range; every write lies inside it and together they
    /// reach both ends.
    pub lo: u64,
    pub hi: u64,
    /// At most one write per data block, each inside `lo..hi`.
    pub writes: &'a [BlockWrite],
}

/// How the new parity is found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compute {
    /// Every data block is written whole: P/Q from the new data alone. No reads.
    FullStripe,
    /// Old P/Q and the old contents of the written ranges are read; each change is folded
    /// into P/Q (`P ^= old ^ new`, `Q ^= g^k (old ^ new)`).
    ReadModifyWrite,
    /// The data blocks not written whole are read over `lo..hi`, the writes laid over
    /// them, and P/Q computed afresh. Also the degraded path when every lost data block
    /// is written whole (nothing to rebuild).
    ReconstructWrite,
    /// Some lost data block is only partly written: every present member is read over
    /// `lo..hi`, `rebuild` (every lost data index) is rebuilt, then as
    /// [`Compute::ReconstructWrite`].
    Degraded { rebuild: Vec<usize>, p_lost: bool, q_lost: bool },
}

/// A segment's plan: `reads` (one parallel batch), then `compute`, then `writes` (one batch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentPlan {
    pub compute: Compute,
    pub reads: Vec<MemberRange>,
    /// Data writes (as requested), then P over `lo..hi`, then Q; lost roles included.
    pub writes: Vec<MemberRange>,
}

impl SegmentPlan {
    pub fn read_sectors(&self) -> u64 {
        self.reads.iter().map(|r| r.sectors).sum()
    }
}

/// Plans one segment. Pure: the same request always gets the same plan.
pub fn plan_write(req: &SegmentRequest<'_>) -> Result<SegmentPlan, PlanError> {
    let roles = req.roles;
    let malformed = |why| PlanError::Malformed { stripe: req.stripe, why };
    let n = roles.data.len();
    if req.lo >= req.hi {
        return Err(malformed("empty range"));
    }
    let mut seen = vec![false; n];
    for w in req.writes {
        if w.data_index >= n || std::mem::replace(&mut seen[w.data_index], true) {
            return Err(malformed("data index out of range or written twice"));
        }
        if w.sectors == 0 || w.sector < req.lo || w.sector + w.sectors > req.hi {
            return Err(malformed("write outside the segment"));
        }
    }
    let all_roles = roles.data.iter().copied().chain([roles.p]).chain(roles.q);
    if all_roles.clone().any(|r| r >= req.present.len()) {
        return Err(malformed("role without a member state"));
    }
    let present = |role: usize| req.present[role];
    let tolerated = 1 + roles.q.is_some() as usize;
    let missing = all_roles.clone().filter(|&r| !present(r)).count();
    if missing > tolerated {
        return Err(PlanError::TooManyMissing { stripe: req.stripe, missing, tolerated });
    }

    let h = req.hi - req.lo;
    let whole = |i: usize| req.writes.iter().any(|w| w.data_index == i && w.sectors == h);
    let span = |role: usize| MemberRange { role, sector: req.lo, sectors: h };

    // Lost roles are written too: a spare being rebuilt takes the new data (the executor
    // skips a role no member takes writes for). Every compute path knows the whole new
    // stripe over `lo..hi` when a role is lost, so their contents are always computable.
    let mut writes: Vec<MemberRange> =
        req.writes.iter().map(|w| MemberRange { role: roles.data[w.data_index], sector: w.sector, sectors: w.sectors }).collect();
    writes.extend([roles.p].into_iter().chain(roles.q).map(span));

    let (compute, reads) = if (0..n).all(whole) {
        (Compute::FullStripe, Vec::new())
    } else if missing == 0 {
        let rcw: Vec<MemberRange> = (0..n).filter(|&i| !whole(i)).map(|i| span(roles.data[i])).collect();
        let rcw_sectors: u64 = rcw.iter().map(|r| r.sectors).sum();
        let parity_sectors = h * (1 + roles.q.is_some() as u64);
        let rmw_sectors: u64 = req.writes.iter().map(|w| w.sectors).sum::<u64>() + parity_sectors;
        // md prefers reconstruct-write on a tie (fewer parity-update passes); and never
        // read-modify-write on a stripe whose parity may be stale.
        if req.parity_in_sync && rmw_sectors < rcw_sectors {
            let mut reads: Vec<MemberRange> =
                req.writes.iter().map(|w| MemberRange { role: roles.data[w.data_index], sector: w.sector, sectors: w.sectors }).collect();
            reads.extend([roles.p].into_iter().chain(roles.q).map(span));
            (Compute::ReadModifyWrite, reads)
        } else {
            (Compute::ReconstructWrite, rcw)
        }
    } else {
        let lost: Vec<usize> = (0..n).filter(|&i| !present(roles.data[i])).collect();
        if lost.iter().all(|&i| whole(i)) {
            // Every lost data block is overwritten whole: its old contents do not matter.
            let reads = (0..n).filter(|&i| !whole(i) && present(roles.data[i])).map(|i| span(roles.data[i])).collect();
            (Compute::ReconstructWrite, reads)
        } else {
            let reads = all_roles.filter(|&r| present(r)).map(span).collect();
            // Rebuilding one lost block needs the old contents of every other, so all
            // lost data blocks are rebuilt, the wholly overwritten ones included.
            let compute = Compute::Degraded { rebuild: lost, p_lost: !present(roles.p), q_lost: roles.q.is_some_and(|q| !present(q)) };
            (compute, reads)
        }
    };
    Ok(SegmentPlan { compute, reads, writes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::{Level, ParityGeometry};

    fn raid5(disks: usize) -> StripeRoles {
        ParityGeometry::new(Level::Raid5, 2, 8, disks, 1024).unwrap().stripe_roles(0)
    }

    #[test]
    fn small_write_on_a_wide_raid5_reads_old_data_and_parity() {
        let roles = raid5(6);
        let present = [true; 6];
        let writes = [BlockWrite { data_index: 1, sector: 2, sectors: 1 }];
        let req = SegmentRequest { stripe: 0, roles: &roles, present: &present, parity_in_sync: true, lo: 2, hi: 3, writes: &writes };
        let plan = plan_write(&req).unwrap();
        assert_eq!(plan.compute, Compute::ReadModifyWrite);
        assert_eq!(plan.read_sectors(), 2);
        // Not in sync: never fold into parity that may be wrong.
        let plan = plan_write(&SegmentRequest { parity_in_sync: false, ..req }).unwrap();
        assert_eq!(plan.compute, Compute::ReconstructWrite);
        assert_eq!(plan.read_sectors(), 4);
    }

    #[test]
    fn three_disk_raid5_prefers_reconstruct_write_on_a_tie() {
        let roles = raid5(3);
        let present = [true; 3];
        let writes = [BlockWrite { data_index: 0, sector: 0, sectors: 8 }];
        let req = SegmentRequest { stripe: 0, roles: &roles, present: &present, parity_in_sync: true, lo: 0, hi: 8, writes: &writes };
        let plan = plan_write(&req).unwrap();
        // rmw reads 8 + 8, rcw reads the other data block: 8.
        assert_eq!(plan.compute, Compute::ReconstructWrite);
        assert_eq!(plan.reads, vec![MemberRange { role: roles.data[1], sector: 0, sectors: 8 }]);
    }

    #[test]
    fn two_lost_members_on_raid5_get_no_plan() {
        let roles = raid5(4);
        let mut present = [true; 4];
        present[0] = false;
        present[3] = false;
        let writes = [BlockWrite { data_index: 0, sector: 0, sectors: 1 }];
        let req = SegmentRequest { stripe: 7, roles: &roles, present: &present, parity_in_sync: true, lo: 0, hi: 1, writes: &writes };
        assert_eq!(plan_write(&req), Err(PlanError::TooManyMissing { stripe: 7, missing: 2, tolerated: 1 }));
    }
}
