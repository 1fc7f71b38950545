//! Arrays created on SimDisks with the real create planner, for tests that build a
//! scenario by hand (the episode runner has its own, seeded, variant).

use crate::disk::SimDisk;
use std::sync::Arc;
use uraid_core::geometry::Level;
use uraid_core::metadata::create::InitialSync;
use uraid_core::metadata::MetadataVersion;
use uraid_engine::create::ArraySketch;
use uraid_engine::{Array, ArrayOptions, AssemblyReport, EngineError, Member};

/// Shape of a hand-built array.
#[derive(Debug, Clone)]
pub struct Spec {
    pub level: Level,
    pub disks: usize,
    pub spares: usize,
    pub layout: Option<u32>,
    pub chunk_kib: u32,
    pub member_bytes: u64,
    pub metadata: MetadataVersion,
    pub sync: InitialSync,
    /// Internal write-intent bitmap with this many bytes per bit.
    pub bitmap_chunk: Option<u32>,
}

impl Spec {
    pub fn new(level: Level, disks: usize) -> Spec {
        Spec {
            level,
            disks,
            spares: 0,
            layout: None,
            chunk_kib: 64,
            member_bytes: 4 << 20,
            metadata: MetadataVersion::V1_2,
            sync: InitialSync::AssumeClean,
            bitmap_chunk: None,
        }
    }
}

/// Creates the array; returns members then spares, labelled d0, d1, ...
pub fn create(spec: &Spec) -> Result<Vec<Arc<SimDisk>>, String> {
    let n = spec.disks + spec.spares;
    let disks: Vec<Arc<SimDisk>> = (0..n).map(|i| Arc::new(SimDisk::new(format!("d{i}"), spec.member_bytes, 1000 + i as u64))).collect();
    let mut sketch = ArraySketch::new(spec.level, "sim");
    sketch.layout = spec.layout;
    sketch.chunk_kib = spec.chunk_kib;
    sketch.metadata = spec.metadata;
    sketch.sync = spec.sync;
    sketch.bitmap_chunk = spec.bitmap_chunk;
    sketch.array_uuid = [0x5a; 16];
    let members: Vec<Arc<dyn Member>> = disks.iter().map(|d| d.clone() as Arc<dyn Member>).collect();
    sketch.write(&members[..spec.disks], &members[spec.disks..])?;
    Ok(disks)
}

/// Assembles writable from `disks` (`--run`, optionally `--force`).
pub fn assemble(disks: &[Arc<SimDisk>], force: bool) -> Result<(Array, AssemblyReport), EngineError> {
    let devices: Vec<Arc<dyn Member>> = disks.iter().map(|d| d.clone() as Arc<dyn Member>).collect();
    let mut opts = ArrayOptions { writable: true, recovery_lanes: 1, ..Default::default() };
    opts.assemble.run = true;
    opts.assemble.force = force;
    Array::assemble(devices, &opts)
}

/// Power loss under a running array: caches dropped, the array dropped while the disks are
/// off (so its best-effort close cannot write), then power back.
pub fn crash(array: Array, disks: &[Arc<SimDisk>]) {
    for d in disks {
        d.crash();
    }
    drop(array);
    for d in disks {
        d.power_on();
    }
}
