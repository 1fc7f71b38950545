//! The array's state as pure state machines: no I/O, no clocks, no threads. The engine holds
//! them under a lock, performs the metadata writes a transition asks for, and reports back
//! when they are durable. Invariants are `assert!`ed (in release builds too): a violated one
//! means a write would put data at risk, and stopping is better than losing it.
//!
//! - [`WriteState`]: what decides crash consistency: clean/active, writes pending, the
//!   write-intent bitmap's bits and pending bitmap writes.
//! - [`Roster`]: devices and roles, events, rebuild and replacement positions, whether the
//!   array has failed, and the superblock round each change needs, in md's order.

mod pace;
mod read_errors;
mod roster;
mod write;

pub use pace::{SpeedLimits, BUSY_STEP_SECTORS};
pub use read_errors::{ReadErrorCount, ReadErrorVerdict, DEFAULT_MAX_READ_ERRORS};
pub use roster::{ArrayFailure, DeviceState, FailOutcome, Roster, RosterDevice, RosterError, SuperblockRound};
pub use write::{BeginWrite, BitmapStep, CleanStep, Mode, WriteState};
