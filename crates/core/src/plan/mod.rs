//! Stripe planners: what a request must read, compute and write on the members, decided
//! without I/O. The engine's executor carries a plan out (reads as one parallel batch, then
//! the computation, then the writes as one batch); the planner alone decides which path a
//! request takes, so that decision is tested here against a plain byte model
//! (`crates/core/tests/parity_plan.rs`) instead of through disks.
//!
//! One planner per level family, as SPDK keeps one module per level:
//! - [`parity`]: RAID4/5/6 writes (read-modify-write, reconstruct-write, full stripe,
//!   degraded);
//! - [`simple`]: linear/RAID0 and mirror (RAID1/10) reads (which member serves each piece).

pub mod parity;
pub mod simple;

/// A range of sectors on one member role, relative to the member's data offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberRange {
    pub role: usize,
    /// First sector.
    pub sector: u64,
    pub sectors: u64,
}

impl MemberRange {
    pub fn end(&self) -> u64 {
        self.sector + self.sectors
    }
}

/// Why no plan can be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// More members of the stripe are missing than the level can rebuild around.
    #[error("stripe {stripe}: {missing} members missing, the level survives {tolerated}")]
    TooManyMissing { stripe: u64, missing: usize, tolerated: usize },
    /// No present member holds this array sector (its member, or every copy, is lost).
    #[error("array sector {array_sector}: no present member holds it")]
    NoCopy { array_sector: u64 },
    /// The request does not describe one segment of one stripe (a caller bug).
    #[error("stripe {stripe}: malformed segment: {why}")]
    Malformed { stripe: u64, why: &'static str },
}
