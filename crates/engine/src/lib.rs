//! The md array in user space. Members sit behind the [`member::Member`] trait so the same
//! engine runs over files, block devices and simulated disks.

pub mod array;
pub mod member;
pub mod scan;

pub use array::{Array, AssemblyReport, EngineError};
pub use member::{FileMember, MemMember, Member};
