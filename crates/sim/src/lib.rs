//! Deterministic simulation of uraid: the real engine over fault-injecting in-memory disks,
//! driven by one seed and checked against a plain model (see README.md).

pub mod build;
pub mod concurrent;
pub mod disk;
pub mod episode;
pub mod model;
pub mod prng;

pub use concurrent::{run_concurrent_seed, ConcurrentLimits, ConcurrentOutcome};
pub use disk::{CrashOutcome, OpCounters, SimDisk};
pub use episode::{run_seed, Config, Failure, Limits, Outcome};
pub use prng::Prng;
