//! One episode: a seed decides the array's shape and a sequence of operations and faults;
//! every result is checked against [`Model`]. VOPR-style: the same seed replays the same
//! episode, so a failure is one command away from a debugger.
//!
//! Invariants (README.md explains them):
//! (a) while running, reads return the latest acknowledged writes;
//! (b) after crash + restart + resync, each sector holds its flushed value or one written
//!     since (torn at sector granularity), except md's write hole: with a role missing
//!     after a dirty shutdown, the missing role's sectors in stripes written since the last
//!     flush may hold anything;
//! (c) once resynced, check finds no mismatch;
//! (d) degraded reads (losses within the level's tolerance) return the model;
//! (e) after a rebuild, check finds no mismatch and losing another member still reads back
//!     the model;
//! plus: a dirty degraded RAID4/5/6 is refused without --force; writes since the last
//! clean mark leave the superblocks dirty (while redundancy remains); the array never
//! declares failure while losses are within its tolerance, and does when they exceed it.

use crate::disk::SimDisk;
use crate::model::{Model, SECTOR};
use crate::prng::Prng;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use uraid_core::geometry::{Geometry, Level, Placement};
use uraid_core::metadata::create::InitialSync;
use uraid_core::metadata::{MetadataVersion, MAX_SECTOR};
use uraid_engine::array::{CheckReport, DriverOptions, JobDriver, JobKind};
use uraid_engine::{Array, ArrayOptions, AssemblyReport, DeviceState, EngineError, Member};

const MIB: u64 = 1 << 20;

/// How big and how long episodes are; the seed chooses within these bounds.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Member size range, MiB (at least 2: 1.1/1.2 metadata puts data at 1 MiB).
    pub member_mib: (u64, u64),
    /// Operations per episode.
    pub ops: (u64, u64),
    /// Levels to draw from (repeats weigh).
    pub levels: Vec<Level>,
    /// Command-line flags that select these limits (for the reproduce line).
    pub cli_flags: String,
}

impl Limits {
    /// Small episodes over the levels that matter most, for the test suite.
    pub fn quick() -> Limits {
        Limits {
            member_mib: (2, 3),
            ops: (12, 30),
            levels: vec![Level::Raid1, Level::Raid5, Level::Raid6, Level::Raid10],
            cli_flags: " --quick".into(),
        }
    }

    /// Everything, bigger and longer: the binary's default.
    pub fn full() -> Limits {
        use Level::*;
        Limits {
            member_mib: (2, 8),
            ops: (40, 160),
            levels: vec![Raid1, Raid1, Raid5, Raid5, Raid5, Raid6, Raid6, Raid6, Raid10, Raid10, Raid0, Raid4, Linear],
            cli_flags: String::new(),
        }
    }
}

/// The array an episode builds.
#[derive(Debug, Clone)]
pub struct Config {
    pub level: Level,
    pub disks: usize,
    pub layout: Option<u32>,
    pub chunk_kib: u32,
    pub member_bytes: u64,
    pub spares: usize,
    pub metadata: MetadataVersion,
    pub initial_sync: InitialSync,
    pub stripe_cache_pages: u64,
    pub ops: u64,
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} disks={} layout={} chunk={}K member={}MiB spares={} metadata={} sync={:?} stripe_cache={} ops={}",
            self.level,
            self.disks,
            self.layout.map_or("default".into(), |l| format!("{l:#x}")),
            self.chunk_kib,
            self.member_bytes / MIB,
            self.spares,
            self.metadata,
            self.initial_sync,
            self.stripe_cache_pages,
            self.ops
        )
    }
}

impl Config {
    pub fn generate(rng: &mut Prng, limits: &Limits) -> Config {
        let level = *rng.pick(&limits.levels);
        let (disks, layout) = match level {
            Level::Linear | Level::Raid0 => (rng.range(2, 4) as usize, None),
            Level::Raid1 => (rng.range(2, 4) as usize, None),
            Level::Raid4 => (rng.range(3, 5) as usize, None),
            Level::Raid5 => (rng.range(3, 6) as usize, Some(rng.range(0, 5) as u32)),
            Level::Raid6 => (rng.range(4, 7) as usize, Some(*rng.pick(&[0u32, 1, 2, 3, 4, 5, 8, 9, 10, 16, 17, 18, 19, 20]))),
            Level::Raid10 => {
                let disks = rng.range(2, 6) as usize;
                let mut layouts = vec![0x102u32, 0x201, 0x10201];
                if disks >= 3 {
                    layouts.push(0x103);
                }
                (disks, Some(*rng.pick(&layouts)))
            }
        };
        let redundant = level.has_redundancy();
        let spares = if redundant { *rng.pick(&[0usize, 0, 0, 1, 1, 2]) } else { 0 };
        let metadata = match rng.below(10) {
            0..=5 => MetadataVersion::V1_2,
            6 => MetadataVersion::V1_1,
            7 | 8 => MetadataVersion::V1_0,
            _ => MetadataVersion::V0_90,
        };
        let initial_sync = match rng.below(20) {
            0..=13 => InitialSync::AssumeClean,
            14..=16 if redundant => InitialSync::Resync,
            _ => InitialSync::Mdadm,
        };
        Config {
            level,
            disks,
            layout,
            chunk_kib: *rng.pick(&[4, 8, 16, 32, 64]),
            member_bytes: rng.range(limits.member_mib.0, limits.member_mib.1) * MIB,
            spares,
            metadata,
            initial_sync,
            stripe_cache_pages: *rng.pick(&[4, 16, 256]),
            ops: rng.range(limits.ops.0, limits.ops.1),
        }
    }

    fn is_parity(&self) -> bool {
        matches!(self.level, Level::Raid4 | Level::Raid5 | Level::Raid6)
    }

    fn is_redundant(&self) -> bool {
        self.level.has_redundancy()
    }

    /// Bytes of data in one full stripe (parity) or one chunk (others).
    fn stripe_bytes(&self) -> u64 {
        let chunk = u64::from(self.chunk_kib) * 1024;
        match self.level {
            Level::Raid4 | Level::Raid5 => chunk * (self.disks as u64 - 1),
            Level::Raid6 => chunk * (self.disks as u64 - 2),
            Level::Raid0 => chunk * self.disks as u64,
            _ => chunk,
        }
    }
}

/// What went wrong, with everything needed to replay it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub seed: u64,
    /// Flags to pass with `--seed` to replay (the limits, e.g. ` --quick`).
    pub flags: String,
    pub config: String,
    pub message: String,
    pub trace: Vec<String>,
}

impl Failure {
    pub fn reproduce_command(&self) -> String {
        format!("cargo run -p uraid-sim --release -- --seed {}{}", self.seed, self.flags)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed {} FAILED: {}", self.seed, self.config)?;
        for line in &self.trace {
            writeln!(f, "  {line}")?;
        }
        writeln!(f, "violation: {}", self.message)?;
        write!(f, "reproduce: {}", self.reproduce_command())
    }
}

/// What a passing episode did.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub config: String,
    pub ops: u64,
    pub writes: u64,
    pub crashes: u64,
    pub refusals: u64,
    pub faults: u64,
    pub rebuilds: u64,
    /// Hot replaces started (`replace_device`).
    pub replaces: u64,
    pub checks: u64,
}

/// The operation log: printed on failure, streamed with `--verbose`.
struct Trace {
    lines: Vec<String>,
    verbose: bool,
}

impl Trace {
    fn push(&mut self, line: String) {
        if self.verbose {
            println!("  {line}");
        }
        self.lines.push(line);
    }
}

/// Runs the episode of `seed`. Engine panics are caught and reported as failures.
pub fn run_seed(seed: u64, limits: &Limits, verbose: bool) -> Result<Outcome, Failure> {
    let mut rng = Prng::new(seed);
    let cfg = Config::generate(&mut rng, limits);
    if verbose {
        println!("seed {seed}: {cfg}");
    }
    let mut sim = Sim::new(seed, cfg, rng, verbose);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.run()));
    let message = match result {
        Ok(Ok(())) => return Ok(sim.stats.clone()),
        Ok(Err(msg)) => msg,
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "(non-string panic)".into());
            format!("panic: {what}")
        }
    };
    let mut trace = std::mem::take(&mut sim.trace.lines);
    for d in &sim.disks {
        trace.push(format!("disk {}: {:?}", d.label(), d.counters()));
    }
    Err(Failure {
        seed,
        flags: limits.cli_flags.clone(),
        config: sim.cfg.to_string(),
        message: format!("op #{}: {message}", sim.op_index),
        trace,
    })
}

type Check = Result<(), String>;

struct Sim {
    cfg: Config,
    rng: Prng,
    disk_seeds: Prng,
    disks: Vec<Arc<SimDisk>>,
    /// Per disk: data offset in sectors (where latent errors are placed).
    data_offset_sectors: Vec<u64>,
    /// Latent errors planted: (role, first member sector, count). A crash can leave a
    /// stripe's parity stale (the write hole); a read error in it is then rebuilt from that
    /// parity: a second fault, which costs md and uraid the unreadable 4 KiB page.
    latent_planted: Vec<(usize, u64, u64)>,
    array: Option<Arc<Array>>,
    model: Model,
    trace: Trace,
    /// Data writes since the last successful clean mark: the superblocks must say dirty.
    writes_since_clean: bool,
    stats: Outcome,
    op_index: u64,
    array_uuid: [u8; 16],
}

impl Sim {
    fn new(seed: u64, cfg: Config, mut rng: Prng, verbose: bool) -> Sim {
        let disk_seeds = rng.fork();
        let mut array_uuid = [0u8; 16];
        rng.fill(&mut array_uuid);
        let _ = seed;
        Sim {
            stats: Outcome { config: cfg.to_string(), ..Default::default() },
            cfg,
            rng,
            disk_seeds,
            disks: Vec::new(),
            data_offset_sectors: Vec::new(),
            latent_planted: Vec::new(),
            array: None,
            model: Model::new(0),
            trace: Trace { lines: Vec::new(), verbose },
            writes_since_clean: false,
            op_index: 0,
            array_uuid,
        }
    }

    fn arr(&self) -> Arc<Array> {
        // Every operation runs with an assembled array; restart replaces it in one step.
        self.array.clone().expect("array assembled")
    }

    fn log(&mut self, line: String) {
        let line = format!("#{} {line}", self.op_index);
        self.trace.push(line);
    }

    fn new_disk(&mut self) -> Arc<SimDisk> {
        let i = self.disks.len();
        let d = Arc::new(SimDisk::new(format!("d{i}"), self.cfg.member_bytes, self.disk_seeds.next_u64()));
        self.disks.push(d.clone());
        self.data_offset_sectors.push(0);
        d
    }

    fn disk_index(&self, label: &str) -> Option<usize> {
        self.disks.iter().position(|d| d.label() == label)
    }

    fn record_data_offset(&mut self, i: usize) {
        if let Some((_, sb)) = uraid_engine::scan::probe(self.disks[i].as_ref()).best() {
            self.data_offset_sectors[i] = sb.data_offset_sectors();
        }
    }

    // ------------------------------------------------------------ episode

    fn run(&mut self) -> Check {
        self.create()?;
        for _ in 0..self.cfg.ops {
            self.op_index += 1;
            self.stats.ops += 1;
            self.step()?;
            self.check_not_failed()?;
        }
        self.op_index += 1;
        self.finish()
    }

    fn create(&mut self) -> Check {
        let cfg = self.cfg.clone();
        let members: Vec<Arc<SimDisk>> = (0..cfg.disks).map(|_| self.new_disk()).collect();
        let spares: Vec<Arc<SimDisk>> = (0..cfg.spares).map(|_| self.new_disk()).collect();
        let mut sketch = uraid_engine::create::ArraySketch::new(cfg.level, "sim");
        sketch.layout = cfg.layout;
        sketch.chunk_kib = cfg.chunk_kib;
        sketch.metadata = cfg.metadata;
        sketch.sync = cfg.initial_sync;
        sketch.array_uuid = self.array_uuid;
        let m: Vec<Arc<dyn Member>> = members.iter().map(|d| d.clone() as Arc<dyn Member>).collect();
        let s: Vec<Arc<dyn Member>> = spares.iter().map(|d| d.clone() as Arc<dyn Member>).collect();
        sketch.write(&m, &s).map_err(|e| format!("simulator bug: creating the array: {e}"))?;
        for i in 0..self.disks.len() {
            self.record_data_offset(i);
        }
        let all: Vec<usize> = (0..self.disks.len()).collect();
        let (a, report) = self.try_assemble(&all, false).map_err(|e| format!("first assembly failed: {e}"))?;
        self.model = Model::new(a.size_bytes() as usize);
        self.log(format!(
            "created {} ({} bytes; degraded roles {:?}, needs resync {})",
            self.cfg,
            a.size_bytes(),
            report.degraded_roles,
            report.needs_resync
        ));
        a.start_recovery_if_possible();
        self.array = Some(Arc::new(a));
        Ok(())
    }

    fn try_assemble(&self, given: &[usize], force: bool) -> Result<(Array, AssemblyReport), EngineError> {
        let devices: Vec<Arc<dyn Member>> = given.iter().map(|&i| self.disks[i].clone() as Arc<dyn Member>).collect();
        let mut opts =
            ArrayOptions { writable: true, stripe_cache_pages: self.cfg.stripe_cache_pages, recovery_lanes: 1, ..Default::default() };
        opts.assemble.force = force;
        // A member may be dead and left out: start degraded as `mdadm --run` would.
        opts.assemble.run = true;
        Array::assemble(devices, &opts)
    }

    fn step(&mut self) -> Check {
        match self.rng.below(100) {
            0..=37 => self.op_write(),
            38..=49 => self.op_read(),
            50..=59 => self.op_flush(),
            60..=65 => self.restart(true),
            66..=72 => self.op_fault(),
            73..=77 => self.op_job_step(),
            78..=81 => self.op_rebuild(),
            82..=83 => self.op_hot_add(),
            84 => self.op_replace(),
            85..=89 => self.op_check(),
            90..=92 => self.op_mark_clean(),
            93..=95 => self.restart(false),
            _ => self.verify_full("full read"),
        }
    }

    fn finish(&mut self) -> Check {
        self.log("finish: jobs to completion".into());
        self.run_jobs(&mut BTreeSet::new(), None)?;
        self.verify_full("final read")?;
        self.check_if_synced("final")?;
        // (d)/(e): one more loss within tolerance still reads back the model.
        if self.rng.chance(60) && self.fault_admin()? {
            self.verify_full("degraded final read")?;
        }
        self.restart(false)?;
        if self.rng.chance(30) {
            self.exceed_tolerance()?;
        }
        Ok(())
    }

    // ------------------------------------------------------------ state helpers

    /// Device index → state, for the current array.
    fn states(&self) -> Vec<Option<DeviceState>> {
        let mut v = vec![None; self.disks.len()];
        for info in self.arr().devices() {
            if let Some(i) = self.disk_index(&info.label) {
                v[i] = Some(info.state);
            }
        }
        v
    }

    fn faulty_count(&self) -> usize {
        self.arr().devices().iter().filter(|d| d.state == DeviceState::Faulty).count()
    }

    /// Roles lost or about to be: missing now, or served by a disk with an armed fault.
    fn bad_roles(&self) -> Vec<bool> {
        let a = self.arr();
        let mut bad = vec![false; self.cfg.disks];
        for r in a.missing_roles() {
            bad[r] = true;
        }
        for (i, st) in self.states().iter().enumerate() {
            if let Some(DeviceState::InSync(r)) = st {
                if self.disks[i].has_latent_fault() {
                    bad[*r] = true;
                }
            }
        }
        bad
    }

    /// Can the level serve all data with the roles in `bad` lost?
    fn survivable(&self, bad: &[bool]) -> bool {
        let present: Vec<bool> = bad.iter().map(|b| !b).collect();
        self.cfg.level.serves_all_data(self.cfg.layout.unwrap_or(0x102), &present)
    }

    fn check_not_failed(&self) -> Check {
        if let Some(why) = self.arr().failure() {
            return Err(format!(
                "array declared failed ({why}) although losses stayed within tolerance (missing roles {:?})",
                self.arr().missing_roles()
            ));
        }
        Ok(())
    }

    fn gen_len(&mut self, span: u64) -> (u64, bool) {
        let stripe = self.cfg.stripe_bytes();
        let (len, align) = match self.rng.below(100) {
            0..=24 => (self.rng.range(1, 511), 1),
            25..=49 => (512 * self.rng.range(1, 16), 512),
            50..=74 => (4096 * self.rng.range(1, 32), 4096),
            75..=87 => (stripe * self.rng.range(1, 2), stripe),
            _ => (self.rng.range(1, 512 * 1024), 1),
        };
        let len = len.min(span).max(1);
        (len, align > 1 && self.rng.chance(70) && align <= span)
    }

    /// A range: 40% of the time inside a small hot region, so writes pile up on the same
    /// sectors between flushes (several candidate values per sector at a crash).
    fn gen_range(&mut self) -> (u64, u64) {
        let size = self.model.size() as u64;
        let span = if self.rng.chance(40) { size.min(256 * 1024) } else { size };
        let (len, aligned) = self.gen_len(span);
        let mut off = self.rng.below(span - len + 1);
        if aligned {
            let unit = if len % 4096 == 0 { 4096 } else { 512 };
            off = off / unit * unit;
            if len % self.cfg.stripe_bytes() == 0 {
                off = off / self.cfg.stripe_bytes() * self.cfg.stripe_bytes();
            }
        }
        (off, len.min(size - off))
    }

    // ------------------------------------------------------------ operations

    fn op_write(&mut self) -> Check {
        let (off, len) = self.gen_range();
        let mut data = vec![0u8; len as usize];
        self.rng.fill(&mut data);
        self.log(format!("write {len}@{off}"));
        self.stats.writes += 1;
        self.writes_since_clean = true;
        self.arr().write(off, &data).map_err(|e| format!("write {len}@{off} failed: {e}"))?;
        self.model.write(off, &data);
        Ok(())
    }

    fn op_read(&mut self) -> Check {
        let (off, len) = self.gen_range();
        self.log(format!("read {len}@{off}"));
        let mut buf = vec![0u8; len as usize];
        self.arr().read(off, &mut buf).map_err(|e| format!("read {len}@{off} failed: {e}"))?;
        if let Some(s) = self.model.first_difference(off, &buf) {
            return Err(format!("(a/d) read {len}@{off}: sector {s} differs from the last write ({})", self.describe_sector(s)));
        }
        Ok(())
    }

    fn op_flush(&mut self) -> Check {
        self.log("flush".into());
        self.arr().flush().map_err(|e| format!("flush failed: {e}"))?;
        self.model.flush();
        Ok(())
    }

    fn op_mark_clean(&mut self) -> Check {
        self.log("mark clean (idle)".into());
        self.arr().mark_clean().map_err(|e| format!("mark_clean failed: {e}"))?;
        self.model.flush();
        self.writes_since_clean = false;
        Ok(())
    }

    fn op_fault(&mut self) -> Check {
        if !self.cfg.is_redundant() {
            return Ok(());
        }
        let bad = self.bad_roles();
        let states = self.states();
        let mut candidates = Vec::new();
        for (i, st) in states.iter().enumerate() {
            if let Some(DeviceState::InSync(r)) = st {
                let mut more = bad.clone();
                more[*r] = true;
                if !bad[*r] && self.survivable(&more) {
                    candidates.push((i, *r));
                }
            }
        }
        if candidates.is_empty() {
            self.log("fault: none within tolerance".into());
            return Ok(());
        }
        let (i, role) = *self.rng.pick(&candidates);
        self.stats.faults += 1;
        match self.rng.below(3) {
            0 => {
                self.log(format!("fault: fail role {role} ({}) by request", self.disks[i].label()));
                self.arr().fail_role(role).map_err(|e| format!("fail_role({role}): {e}"))?;
            }
            1 => {
                let after = self.rng.range(1, 60);
                self.log(format!("fault: {} (role {role}) fail-stops at its {after}th next operation", self.disks[i].label()));
                self.disks[i].fail_stop_after(after);
            }
            _ => {
                let span = self.arr().sync_sectors().max(1);
                let count = self.rng.range(1, 16).min(span);
                let first = self.data_offset_sectors[i] + self.rng.below(span - count + 1);
                self.log(format!(
                    "fault: {} (role {role}) latent read errors at sectors {first}..{}",
                    self.disks[i].label(),
                    first + count
                ));
                self.disks[i].add_bad_sectors(first, count);
                self.latent_planted.push((role, first - self.data_offset_sectors[i], count));
            }
        }
        Ok(())
    }

    /// Fails one more in-sync member by request if the level can take it. True if done.
    fn fault_admin(&mut self) -> Result<bool, String> {
        if !self.cfg.is_redundant() {
            return Ok(false);
        }
        let bad = self.bad_roles();
        let candidates: Vec<usize> = (0..self.cfg.disks)
            .filter(|&r| {
                let mut more = bad.clone();
                more[r] = true;
                !bad[r] && self.survivable(&more)
            })
            .collect();
        if candidates.is_empty() {
            return Ok(false);
        }
        let role = *self.rng.pick(&candidates);
        self.log(format!("fail role {role} by request (within tolerance)"));
        self.arr().fail_role(role).map_err(|e| format!("fail_role({role}): {e}"))?;
        self.stats.faults += 1;
        Ok(true)
    }

    fn op_job_step(&mut self) -> Check {
        let steps = self.rng.range(1, 3) as u32;
        self.run_jobs(&mut BTreeSet::new(), Some(steps))
    }

    fn op_hot_add(&mut self) -> Check {
        if !self.cfg.is_redundant() || self.disks.len() >= self.cfg.disks + self.cfg.spares + 3 {
            return Ok(());
        }
        let d = self.new_disk();
        let i = self.disks.len() - 1;
        self.log(format!("hot-add spare {}", d.label()));
        let uuid = [0xA0 + i as u8; 16];
        self.arr().add_device(d as Arc<dyn Member>, uuid).map_err(|e| format!("add_device: {e}"))?;
        self.record_data_offset(i);
        Ok(())
    }

    /// md's hot replace of a random in-sync member by a new disk, on a healthy array with no
    /// rebuild running (what `replace_device` accepts); the copy then runs with the jobs.
    fn op_replace(&mut self) -> Check {
        let a = self.arr();
        if !self.cfg.is_redundant() || !a.missing_roles().is_empty() || self.disks.len() >= self.cfg.disks + self.cfg.spares + 3 {
            return Ok(());
        }
        let devices = a.devices();
        if devices.iter().any(|d| matches!(d.state, DeviceState::Recovering { .. } | DeviceState::Replacing { .. })) {
            return Ok(());
        }
        let in_sync: Vec<(String, usize)> =
            devices.iter().filter_map(|d| if let DeviceState::InSync(r) = d.state { Some((d.label.clone(), r)) } else { None }).collect();
        if in_sync.is_empty() {
            return Ok(());
        }
        let (label, role) = self.rng.pick(&in_sync).clone();
        let d = self.new_disk();
        let i = self.disks.len() - 1;
        self.log(format!("hot replace role {role} ({label}) with {}", d.label()));
        let uuid = [0xC0 + i as u8; 16];
        self.arr().replace_device(&label, d as Arc<dyn Member>, uuid).map_err(|e| format!("replace_device: {e}"))?;
        self.record_data_offset(i);
        self.stats.replaces += 1;
        Ok(())
    }

    /// Rebuild onto a spare (adding one if a role is missing and none is there), then (e).
    fn op_rebuild(&mut self) -> Check {
        let a = self.arr();
        let missing_before = a.missing_roles();
        if missing_before.is_empty() {
            return Ok(());
        }
        let spare_or_recovering = a.devices().iter().any(|d| matches!(d.state, DeviceState::Spare | DeviceState::Recovering { .. }));
        if !spare_or_recovering {
            self.op_hot_add()?;
        }
        self.log(format!("rebuild (missing roles {missing_before:?})"));
        a.start_recovery_if_possible();
        self.run_jobs(&mut BTreeSet::new(), None)?;
        let missing_after = a.missing_roles();
        if missing_after.len() < missing_before.len() {
            self.stats.rebuilds += 1;
            self.check_if_synced("after rebuild")?;
            if self.rng.chance(50) && self.fault_admin()? {
                self.verify_full("(e) read after rebuild and another loss")?;
            }
        }
        Ok(())
    }

    fn op_check(&mut self) -> Check {
        self.check_if_synced("check")
    }

    /// (c): with redundancy in sync, check finds nothing to fix.
    fn check_if_synced(&mut self, what: &str) -> Check {
        let a = self.arr();
        if !self.cfg.is_redundant() || a.resync_position() != MAX_SECTOR {
            return Ok(());
        }
        let repair = self.rng.chance(20);
        // A repair marks the array active like a write does.
        self.writes_since_clean |= repair;
        self.log(format!("{what}: {} whole array", if repair { "repair" } else { "check" }));
        self.stats.checks += 1;
        let faulty = self.faulty_count();
        let mut report = CheckReport::default();
        let mut pos = 0;
        let total = a.sync_sectors();
        while pos < total {
            match a.check_step(pos, 1 << 14, repair, &mut report) {
                Ok(p) => pos = p.done_sectors,
                Err(e) if self.faulty_count() > faulty => {
                    self.log(format!("check stopped: a member failed ({e})"));
                    return Ok(());
                }
                Err(e) => return Err(format!("check_step at {pos} failed with no member failing: {e}")),
            }
        }
        if report.mismatch_sectors != 0 {
            return Err(format!("(c) {what}: {} mismatched sectors on an array in sync: {report:?}", report.mismatch_sectors));
        }
        Ok(())
    }

    /// Runs pending resync/recovery: `budget` steps, or to completion. Roles seen missing
    /// are added to `missing_seen`.
    fn run_jobs(&mut self, missing_seen: &mut BTreeSet<usize>, budget: Option<u32>) -> Check {
        let a = self.arr();
        let mut steps = 0u32;
        loop {
            missing_seen.extend(a.missing_roles());
            let Some(job) = a.pending_job() else { break };
            let max = self.rng.range(1, 4096);
            let faulty = self.faulty_count();
            if !matches!(job, JobKind::Recovery | JobKind::Resync) {
                return Err(format!("pending_job returned {job:?}, which is not a background job"));
            }
            // The production driver's step, with the simulator choosing each step's size.
            let driver = JobDriver::new(&a, DriverOptions { step_sectors: max, limits: None, clean_after_idle: None });
            let result = driver.step(job, 0, max, &mut CheckReport::default());
            match result {
                Ok(p) => {
                    if budget.is_some() {
                        self.log(format!("{} step: {}/{}", job.name(), p.done_sectors, p.total_sectors));
                    }
                }
                Err(e) if self.faulty_count() > faulty => self.log(format!("{} step stopped: a member failed ({e})", job.name())),
                Err(e) => return Err(format!("{} step failed with no member failing: {e}", job.name())),
            }
            steps += 1;
            if budget.is_some_and(|b| steps >= b) {
                break;
            }
            if steps > 1_000_000 {
                return Err(format!("{} never finishes", job.name()));
            }
        }
        missing_seen.extend(a.missing_roles());
        if budget.is_none() && steps > 0 {
            self.log(format!("jobs done after {steps} steps; missing roles {:?}", a.missing_roles()));
        }
        Ok(())
    }

    fn read_all(&self) -> Result<Vec<u8>, String> {
        let mut image = vec![0u8; self.model.size()];
        self.arr().read(0, &mut image).map_err(|e| format!("read of the whole array failed: {e}"))?;
        Ok(image)
    }

    fn verify_full(&mut self, what: &str) -> Check {
        self.log(what.to_string());
        let image = self.read_all()?;
        if let Some(s) = self.model.first_difference(0, &image) {
            return Err(format!("{what}: sector {s} differs from the model ({})", self.describe_sector(s)));
        }
        Ok(())
    }

    /// Where array sector `s` lives, and what the model knows of it.
    fn describe_sector(&self, s: u64) -> String {
        let placement = match self.array.as_ref().map(|a| a.geometry().locate(s)) {
            Some(Ok(p)) => format!("{:?}", p.placement),
            _ => "?".into(),
        };
        format!("{placement}; {} values written since the last flush", self.model.pending_count(s))
    }

    // ------------------------------------------------------------ restart

    /// Stops the array (power loss if `crash`, clean close otherwise), reassembles from the
    /// disks an administrator would give, finishes resync/recovery and checks (b)/(c).
    fn restart(&mut self, crash: bool) -> Check {
        let old = self.array.take().expect("array assembled");
        let mut states = vec![None; self.disks.len()];
        for info in old.devices() {
            if let Some(i) = self.disk_index(&info.label) {
                states[i] = Some(info.state);
            }
        }
        let geometry: Geometry = old.geometry().clone();
        // With no redundancy left there is nothing a resync could fix, so the engine may
        // record the array clean (md likewise has nothing to resync); the dirty-flag
        // invariant below only applies while redundancy remains.
        let missing_now = old.missing_roles().len();
        let redundancy_left = match old.level() {
            uraid_core::geometry::Level::Raid4 | uraid_core::geometry::Level::Raid5 => missing_now == 0,
            uraid_core::geometry::Level::Raid6 => missing_now <= 1,
            uraid_core::geometry::Level::Raid1 | uraid_core::geometry::Level::Raid10 => old.geometry().raid_disks() - missing_now >= 2,
            _ => false,
        };
        let pending_sectors: Vec<u64> = self.model.pending_sectors().collect();
        if crash {
            self.stats.crashes += 1;
            let mut outcomes = Vec::new();
            for d in &self.disks {
                let o = d.crash();
                outcomes.push(format!("{}: lost {} whole {} torn {}", d.label(), o.lost, o.whole, o.torn));
            }
            self.log(format!("CRASH ({} sectors unflushed) [{}]", pending_sectors.len(), outcomes.join("; ")));
            // The old array may try to close itself while dropped; the disks are off.
            drop(old);
            for d in &self.disks {
                d.power_on();
            }
        } else {
            self.log("clean shutdown".into());
            old.close().map_err(|e| format!("close failed: {e}"))?;
            self.model.flush();
            self.writes_since_clean = false;
            drop(old);
        }

        // What an administrator gives: every disk of the array that still answers.
        let mut given: Vec<usize> = (0..self.disks.len()).filter(|&i| !self.disks[i].is_dead()).collect();
        let mut newest: Option<(u64, bool)> = None;
        for &i in &given {
            if let Some((_, sb)) = uraid_engine::scan::probe(self.disks[i].as_ref()).best() {
                if newest.is_none_or(|(ev, _)| sb.events() > ev) {
                    newest = Some((sb.events(), sb.is_clean()));
                }
            }
        }
        given.retain(|&i| !self.disks[i].is_dead());
        let dirty = newest.is_some_and(|(_, clean)| !clean);
        if self.cfg.is_redundant() && redundancy_left && self.writes_since_clean && !dirty {
            return Err("superblocks say clean although data was written since the last clean mark".into());
        }

        let mut attempts = 0;
        let mut force = false;
        let (array, report, forced) = loop {
            attempts += 1;
            let expect_refusal = self.expect_refusal(&given, &states, dirty);
            match (expect_refusal, force, self.try_assemble(&given, force)) {
                (_, _, Err(EngineError::NoSuperblock { device, .. }))
                    if attempts < 10 && self.disk_index(&device).is_some_and(|i| self.disks[i].is_dead()) =>
                {
                    // The disk died while being probed: an administrator leaves it out.
                    self.log(format!("{device} died during assembly; left out"));
                    given.retain(|&i| self.disks[i].label() != device);
                }
                (_, _, Err(_)) if attempts < 10 && given.iter().any(|&i| self.disks[i].is_dead()) => {
                    // A disk died while being probed and assembly left it out as missing
                    // (its superblock no longer reads), which can make the array dirty and
                    // degraded: judge again without it, as an administrator would.
                    let dead: Vec<String> =
                        given.iter().filter(|&&i| self.disks[i].is_dead()).map(|&i| self.disks[i].label().to_string()).collect();
                    self.log(format!("{} died during assembly; left out", dead.join(", ")));
                    given.retain(|&i| !self.disks[i].is_dead());
                }
                (true, false, Err(EngineError::Refused(why))) => {
                    self.stats.refusals += 1;
                    self.log(format!("assembly refused as md does (dirty + degraded): {why}"));
                    force = true;
                }
                (true, false, Ok((a, _))) => {
                    let devs: Vec<String> = a.devices().iter().map(|d| format!("{}={:?}", d.label, d.state)).collect();
                    return Err(format!(
                        "a dirty degraded {} was assembled without --force (md refuses: parity may not match after an \
                         interrupted write); devices before the crash {:?}, assembled as [{}], missing roles {:?}",
                        self.cfg.level,
                        self.describe_states(&states),
                        devs.join(", "),
                        a.missing_roles()
                    ));
                }
                (_, true, Ok((a, r))) => break (a, r, true),
                (false, false, Ok((a, r))) => break (a, r, false),
                (_, _, Err(e)) => {
                    return Err(format!(
                        "assembly{} failed (refusal expected: {expect_refusal}): {e}",
                        if force { " with --force" } else { "" }
                    ))
                }
            }
        };
        let a = Arc::new(array);
        self.array = Some(a.clone());
        let mut missing_seen: BTreeSet<usize> = a.missing_roles().into_iter().collect();
        self.log(format!(
            "assembled{} from {:?}: missing roles {:?}, needs resync {}, events {}",
            if forced { " (--force)" } else { "" },
            given.iter().map(|&i| self.disks[i].label().to_string()).collect::<Vec<_>>(),
            missing_seen,
            report.needs_resync,
            a.events()
        ));
        if !crash && report.needs_resync && !dirty {
            return Err("clean shutdown, yet assembly asks for a resync".into());
        }
        a.start_recovery_if_possible();
        self.run_jobs(&mut missing_seen, None)?;
        // The writes before the crash are settled by this restart (resynced, or, with no
        // redundancy left to resync, recorded clean as md records it): the clean-mark
        // invariant is about writes after it (seeds 3582, 3902 flagged an array that ran
        // without redundancy after the restart, got a member back and was recorded clean).
        self.writes_since_clean = false;
        // md writes its superblocks with a flush when a resync ends; the model's "flushed"
        // values after restart assume the same.
        a.flush().map_err(|e| format!("flush after restart: {e}"))?;
        if crash {
            self.verify_after_crash(&geometry, &pending_sectors, &missing_seen)?;
        } else {
            self.verify_full("read after clean restart")?;
        }
        self.check_if_synced("after restart")
    }

    /// md's rule: a RAID4/5/6 that is dirty and misses a member is not started without
    /// --force (RAID4 missing only its parity member is fine).
    fn expect_refusal(&self, given: &[usize], states: &[Option<DeviceState>], dirty: bool) -> bool {
        if !self.cfg.is_parity() || !dirty {
            return false;
        }
        let missing: Vec<usize> =
            (0..self.cfg.disks).filter(|&r| !given.iter().any(|&i| states[i] == Some(DeviceState::InSync(r)))).collect();
        match self.cfg.level {
            Level::Raid4 => !(missing.is_empty() || missing == [self.cfg.disks - 1]),
            _ => !missing.is_empty(),
        }
    }

    fn describe_states(&self, states: &[Option<DeviceState>]) -> Vec<String> {
        states
            .iter()
            .enumerate()
            .map(|(i, s)| {
                format!(
                    "{}={}{}",
                    self.disks[i].label(),
                    s.map_or("-".into(), |s| format!("{s:?}")),
                    if self.disks[i].is_dead() { "(dead)" } else { "" }
                )
            })
            .collect()
    }

    /// (b): every sector holds its flushed value or one written since; in md's write hole
    /// (a role missing after a dirty shutdown) the missing role's sectors of stripes written
    /// since the last flush may hold anything. Then the array's contents become the model.
    fn verify_after_crash(&mut self, geometry: &Geometry, pending: &[u64], missing_seen: &BTreeSet<usize>) -> Check {
        let image = self.read_all()?;
        let hole_stripes: BTreeSet<u64> = if self.cfg.is_parity() && !missing_seen.is_empty() {
            pending
                .iter()
                .filter_map(|&s| match geometry.locate(s) {
                    Ok(p) => match p.placement {
                        Placement::Striped(loc) => Some(loc.stripe),
                        _ => None,
                    },
                    Err(_) => None,
                })
                .collect()
        } else {
            BTreeSet::new()
        };
        // Stripes written since the last flush, on parity levels: their parity may be stale.
        let written_stripes: BTreeSet<u64> = if self.cfg.is_parity() {
            pending
                .iter()
                .filter_map(|&s| match geometry.locate(s).map(|p| p.placement) {
                    Ok(Placement::Striped(loc)) => Some(loc.stripe),
                    _ => None,
                })
                .collect()
        } else {
            BTreeSet::new()
        };
        let mut in_hole = 0u64;
        let mut beside_latent = 0u64;
        for s in 0..(image.len() / SECTOR) as u64 {
            let got = &image[s as usize * SECTOR..(s as usize + 1) * SECTOR];
            if self.model.allowed_after_crash(s, got) {
                continue;
            }
            // A page of a stale-parity stripe holding a latent error: rebuilt from the stale
            // parity, the whole 4 KiB page may come out wrong (md's fix_read_error works by
            // page too); a double fault, as the concurrent simulator avoids drawing.
            let page_of_latent = match geometry.locate(s).map(|p| p.placement) {
                Ok(Placement::Striped(loc)) if written_stripes.contains(&loc.stripe) => {
                    // (Data offsets are whole pages: member pages are device pages.)
                    let page = loc.member_sector / 8;
                    self.latent_planted
                        .iter()
                        .any(|&(role, first, count)| role == loc.role && first / 8 <= page && page <= (first + count - 1) / 8)
                }
                _ => false,
            };
            if page_of_latent {
                beside_latent += 1;
                continue;
            }
            let hole = match geometry.locate(s) {
                Ok(p) => match p.placement {
                    Placement::Striped(loc) => hole_stripes.contains(&loc.stripe) && missing_seen.contains(&loc.role),
                    _ => false,
                },
                Err(_) => false,
            };
            if hole {
                in_hole += 1;
                continue;
            }
            let is_current = got == &self.model.current()[s as usize * SECTOR..(s as usize + 1) * SECTOR];
            return Err(format!(
                "(b) after crash + restart, sector {s} holds neither its flushed value nor one written since \
                 ({}; equals latest: {is_current}; roles missing during restart {missing_seen:?})",
                self.describe_sector(s)
            ));
        }
        if in_hole > 0 {
            self.log(format!("{in_hole} sectors in md's write hole (missing role, stripe written since flush) took unchecked values"));
        }
        if beside_latent > 0 {
            self.log(format!(
                "{beside_latent} sectors in a 4 KiB page with a latent error, in a stripe written since flush (a double fault), took unchecked values"
            ));
        }
        self.model.adopt(image);
        Ok(())
    }

    /// Losses beyond tolerance: the array must say it failed and refuse writes.
    fn exceed_tolerance(&mut self) -> Check {
        let a = self.arr();
        self.log("exceed tolerance: fail every role".into());
        for role in 0..self.cfg.disks {
            let _ = a.fail_role(role);
        }
        if a.failure().is_none() {
            return Err(format!("every member failed, yet failure() is None (missing roles {:?})", a.missing_roles()));
        }
        if a.write(0, &[0xEE; 512]).is_ok() {
            return Err("a failed array acknowledged a write".into());
        }
        Ok(())
    }
}
