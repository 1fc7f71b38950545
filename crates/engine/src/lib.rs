//! The md array in user space. Members sit behind the [`member::Member`] trait so the same
//! engine runs over files, block devices and simulated disks.
//!
//! The only `unsafe` is io_uring submission in `uring.rs` (buffers handed to the kernel).
#![deny(unsafe_code)]

pub mod array;
pub mod bad_blocks;
pub mod create;
pub mod locks;
pub mod member;
pub mod ownership;
mod parallel;
pub mod reshape;
pub mod scan;
pub mod stripe_cache;
#[allow(unsafe_code)]
mod uring;
pub mod volume;

pub use array::{Array, ArrayOptions, AssemblyReport, DeviceInfo, DeviceState, EngineError, FailureKind, Fault};
pub use member::{FileMember, IoMode, MemMember, Member};
pub use ownership::DeviceIdentity;
pub use uring::unavailable as io_uring_unavailable;
pub use volume::{LiveArray, Stage, Volume};

/// The one executor of member I/O, for benchmarks that measure it on their own members: a
/// request's member operations as data, run together (io_uring on `O_DIRECT` members, else
/// the I/O pool or in line).
pub mod executor {
    pub use crate::parallel::{run_member_io, Bufs, MemberIo, Run};
}
