//! uraid's benchmarks: workloads, the peers they are compared with, and report rendering.

pub mod array;
pub mod disks;
pub mod exports;
pub mod fio;
pub mod isal;
pub mod machine;
pub mod parity;
pub mod plot;
pub mod report;
pub mod reshape;
pub mod stats;
pub mod suite;
pub mod target;
pub mod uring;
