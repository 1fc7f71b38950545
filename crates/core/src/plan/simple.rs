//! Linear/RAID0 and mirror (RAID1/10) read planning: which member serves each piece of a
//! read. A single-member piece reads its member; a mirrored piece reads its first present
//! copy in md's own copy order (md's `read_balance` without the balancing). A piece whose
//! member is lost, or all of whose copies are, cannot be planned: the caller reports the
//! data as unreadable (or, on a member failing mid-read, plans again).
//!
//! Writes on these levels need no plan: every copy of every piece is written as is.

use super::{MemberRange, PlanError};
use crate::geometry::{Piece, Placement};

/// One member read per piece, in piece order; `present` is indexed by role.
pub fn plan_read(pieces: &[Piece], present: &[bool]) -> Result<Vec<MemberRange>, PlanError> {
    let is_present = |role: usize| present.get(role).copied().unwrap_or(false);
    pieces
        .iter()
        .map(|p| {
            let chosen = match &p.placement {
                Placement::Single(ms) => Some(ms).filter(|ms| is_present(ms.role)),
                Placement::Mirrored(copies) => copies.iter().find(|ms| is_present(ms.role)),
                Placement::Striped(_) => return Err(PlanError::Malformed { stripe: 0, why: "a parity piece in a simple read" }),
            };
            chosen
                .map(|ms| MemberRange { role: ms.role, sector: ms.sector, sectors: p.sectors })
                .ok_or(PlanError::NoCopy { array_sector: p.array_sector })
        })
        .collect()
}
