//! The md array in user space. Members sit behind the [`member::Member`] trait so the same
//! engine runs over files, block devices and simulated disks.

pub mod array;
pub mod create;
pub mod locks;
pub mod member;
mod parallel;
pub mod scan;
pub mod stripe_cache;

pub use array::{Array, ArrayOptions, AssemblyReport, DeviceInfo, DeviceState, EngineError};
pub use member::{FileMember, IoMode, MemMember, Member};
