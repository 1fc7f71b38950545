//! uraid's benchmarks: workloads, the peers they are compared with, and report rendering.

pub mod isal;
pub mod array;
pub mod parity;
