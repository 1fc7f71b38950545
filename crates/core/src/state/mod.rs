//! The array's state as pure state machines: no I/O, no clocks, no threads. The engine holds
//! them under a lock, performs the metadata writes a transition asks for, and reports back
//! when they are durable. Invariants are `assert!`ed (in release builds too): a violated one
//! means a write would put data at risk, and stopping is better than losing it.
//!
//! Today this covers what decides crash consistency, [`WriteState`]: clean/active, writes
//! pending and the write-intent bitmap's bits and pending bitmap writes. Devices, roles,
//! events and job positions are still kept by the engine's `Array` (see
//! docs/ARCHITECTURE.md, "What is still to move").

mod pace;
mod read_errors;
mod write;

pub use pace::{SpeedLimits, BUSY_STEP_SECTORS};
pub use read_errors::{ReadErrorCount, ReadErrorVerdict, DEFAULT_MAX_READ_ERRORS};
pub use write::{BeginWrite, BitmapStep, CleanStep, Mode, WriteState};
