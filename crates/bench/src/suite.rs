//! The workloads people post about software RAID, each run on in-process arrays (members
//! are files) and on the peer (one plain file, or `--target PATH`) through the same code:
//! - `seq`: sequential write then read, chunk size × request size;
//! - `rand`: random reads and writes, `jobs × iodepth` requests in flight, latency percentiles;
//! - `mixed`: 1..=N random readers while one writer appends small writes to ten "files";
//! - `throughput`: `iozone -t`-like: N jobs on own regions, six phases, per-job spread;
//! - `degraded`: seq and rand with one member failed (RAID6: two);
//! - `rebuild`: recovery onto a spare in a thread while random reads run in the foreground.
//!
//! The engine's API is synchronous, so "iodepth" is carried by threads: `jobs × iodepth`
//! threads each keep one request outstanding (the same concurrency fio's
//! `numjobs × iodepth` gives an asynchronous device).

use crate::array::{build, members_for, Built};
use crate::stats::{bucketed_p99, mb_per_s, JobSpread, LatHist, Latency};
use crate::target::{FileTarget, Target};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uraid_core::geometry::Level;
use uraid_core::state::SpeedLimits;
use uraid_engine::array::{DriverOptions, JobDriver, JobKind};
use uraid_engine::{FileMember, Member};
use uraid_parity::testdata::Prng;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    Seq,
    Rand,
    Mixed,
    Throughput,
    Degraded,
    Rebuild,
}

impl Workload {
    pub const ALL: [Workload; 6] =
        [Workload::Seq, Workload::Rand, Workload::Mixed, Workload::Throughput, Workload::Degraded, Workload::Rebuild];
    pub fn name(self) -> &'static str {
        match self {
            Workload::Seq => "seq",
            Workload::Rand => "rand",
            Workload::Mixed => "mixed",
            Workload::Throughput => "throughput",
            Workload::Degraded => "degraded",
            Workload::Rebuild => "rebuild",
        }
    }
    pub fn parse(s: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == s)
    }
}

#[derive(Clone, Debug)]
pub struct SuiteConfig {
    /// Folder for member files and the default peer file.
    pub dir: PathBuf,
    /// Peer: this file/device instead of a new plain file in `dir` (overwritten!).
    pub target: Option<PathBuf>,
    /// Run the peer at all.
    pub peer: bool,
    pub levels: Vec<Level>,
    pub members: usize,
    /// Chunk of the arrays every workload but `seq`'s sweep uses.
    pub chunk_bytes: u32,
    /// Bytes of array (and peer) the workloads spread over; written once before measuring so
    /// no read lands on a hole.
    pub region_bytes: u64,
    pub workloads: Vec<Workload>,
    /// Cap on each timed point (a sequential pass stops early when it runs out).
    pub time_per_point: Duration,
    pub seq_chunks: Vec<u32>,
    pub seq_blocks: Vec<u64>,
    /// Random request size (rand, degraded, rebuild).
    pub rand_block: u64,
    pub jobs: usize,
    pub iodepth: usize,
    pub mixed_max_readers: usize,
    pub mixed_read_sizes: Vec<u64>,
    /// The mixed writer's append size and interval.
    pub mixed_append_bytes: u64,
    pub mixed_append_interval: Duration,
    /// throughput: bytes per job and record size.
    pub tp_bytes_per_job: u64,
    pub tp_record: u64,
    /// Sectors per recovery step in the rebuild thread while no foreground request runs.
    pub rebuild_step_sectors: u64,
    /// md's speed limits for the rebuild (`JobPacer`): max when idle, min under load.
    pub rebuild_speed: SpeedLimits,
}

impl SuiteConfig {
    /// The defaults of `uraid bench`: ~1-2 minutes on 2 cores for five levels.
    pub fn defaults(dir: PathBuf) -> SuiteConfig {
        SuiteConfig {
            dir,
            target: None,
            peer: true,
            levels: vec![Level::Raid0, Level::Raid1, Level::Raid5, Level::Raid6, Level::Raid10],
            members: 4,
            chunk_bytes: 512 << 10,
            region_bytes: 256 << 20,
            workloads: Workload::ALL.to_vec(),
            time_per_point: Duration::from_millis(400),
            seq_chunks: vec![64 << 10, 512 << 10],
            seq_blocks: vec![4 << 10, 64 << 10, 1 << 20],
            rand_block: 4 << 10,
            jobs: 2,
            iodepth: 2,
            mixed_max_readers: 5,
            mixed_read_sizes: vec![1 << 20],
            mixed_append_bytes: 16 << 10,
            mixed_append_interval: Duration::from_millis(100),
            tp_bytes_per_job: 32 << 20,
            tp_record: 64 << 10,
            rebuild_step_sectors: 8192,
            // md's speed_limit_max; a min of 50 MiB/s instead of md's 1 MiB/s so the
            // bench's rebuild ends in seconds while the foreground runs.
            rebuild_speed: SpeedLimits { min_kib_s: 50 << 10, max_kib_s: 200_000 },
        }
    }

    /// The settings as recorded in a report.
    pub fn record(&self) -> ConfigRecord {
        ConfigRecord {
            levels: self.levels.iter().map(|l| l.to_string()).collect(),
            members: self.members,
            chunk_bytes: self.chunk_bytes as u64,
            region_bytes: self.region_bytes,
            workloads: self.workloads.iter().map(|w| w.name().to_string()).collect(),
            time_per_point_ms: self.time_per_point.as_millis() as u64,
            seq_chunks: self.seq_chunks.iter().map(|c| *c as u64).collect(),
            seq_blocks: self.seq_blocks.clone(),
            rand_block: self.rand_block,
            jobs: self.jobs,
            iodepth: self.iodepth,
            mixed_max_readers: self.mixed_max_readers,
            mixed_read_sizes: self.mixed_read_sizes.clone(),
            mixed_append_bytes: self.mixed_append_bytes,
            mixed_append_interval_ms: self.mixed_append_interval.as_millis() as u64,
            tp_bytes_per_job: self.tp_bytes_per_job,
            tp_record: self.tp_record,
            target: self.target.as_ref().map(|p| p.display().to_string()),
        }
    }

    fn threads(&self) -> usize {
        (self.jobs * self.iodepth).max(1)
    }

    fn has(&self, w: Workload) -> bool {
        self.workloads.contains(&w)
    }
}

/// [`SuiteConfig`] as a report records it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ConfigRecord {
    pub levels: Vec<String>,
    pub members: usize,
    pub chunk_bytes: u64,
    pub region_bytes: u64,
    pub workloads: Vec<String>,
    pub time_per_point_ms: u64,
    pub seq_chunks: Vec<u64>,
    pub seq_blocks: Vec<u64>,
    pub rand_block: u64,
    pub jobs: usize,
    pub iodepth: usize,
    pub mixed_max_readers: usize,
    pub mixed_read_sizes: Vec<u64>,
    pub mixed_append_bytes: u64,
    pub mixed_append_interval_ms: u64,
    pub tp_bytes_per_job: u64,
    pub tp_record: u64,
    pub target: Option<String>,
}

/// One measured point. Fields that do not apply are 0 / None.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Measurement {
    /// seq | rand | mixed | throughput | degraded | rebuild
    pub workload: String,
    /// "raid5", … or "peer".
    pub target: String,
    pub members: usize,
    /// healthy | degraded-1 | degraded-2 | rebuilding | after-rebuild
    pub state: String,
    /// write | read | randread | randwrite | initial-write | rewrite | reread | mixed-read |
    /// recovery
    pub op: String,
    pub chunk_bytes: u64,
    pub block_bytes: u64,
    /// Requests in flight (threads).
    pub threads: usize,
    /// mixed: concurrent readers.
    pub readers: usize,
    pub bytes: u64,
    pub ops: u64,
    pub secs: f64,
    pub mb_per_s: f64,
    pub iops: f64,
    pub latency: Option<Latency>,
    /// throughput: per-job spread; mixed: per-reader spread.
    pub per_job: Option<JobSpread>,
    /// This target's MB/s over the peer's for the same op, block and concurrency.
    pub peer_ratio: Option<f64>,
    /// Set when the phase was too short to measure (e.g. a rebuild that finished before
    /// enough foreground requests completed during it): why, in words. Such a row has zero
    /// bytes, ops and rates, and tables print the reason instead of numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_measured: Option<String>,
}

impl Measurement {
    /// What two reports match on (`bench compare`) and the peer lookup is built from.
    pub fn key(&self) -> String {
        format!(
            "{} {} {} {} chunk={} block={} threads={} readers={}",
            self.workload, self.target, self.state, self.op, self.chunk_bytes, self.block_bytes, self.threads, self.readers
        )
    }
}

/// p99 latency over time while a rebuild runs (t = 0 at the spare's addition).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Timeline {
    pub target: String,
    pub rebuild_secs: f64,
    pub bucket_secs: f64,
    /// (t seconds, p99 µs, requests/s) per bucket.
    pub points: Vec<(f64, f64, f64)>,
}

#[derive(Default)]
pub struct Results {
    pub measurements: Vec<Measurement>,
    pub timelines: Vec<Timeline>,
}

pub(crate) struct Io {
    pub(crate) ops: u64,
    pub(crate) bytes: u64,
    pub(crate) secs: f64,
    hist: LatHist,
}

/// A deterministic pattern buffer (not zeros, so nothing can special-case it).
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Sequential `block` requests over `start..start+len`, wrapping to the start, until `cap`
/// has passed (at least one request): short passes over a fast target would otherwise be
/// measured in milliseconds and be mostly noise. Writes end with a flush, inside the timing
/// (the data is durable when the clock stops). `Io::bytes` counts every request; the span
/// covered is `min(bytes, len)`.
pub(crate) fn seq_pass(t: &dyn Target, start: u64, len: u64, block: u64, write: bool, cap: Duration) -> Result<Io, String> {
    let mut buf = pattern(block as usize, 7);
    let mut hist = LatHist::new();
    let span = (len / block).max(1) * block;
    let t0 = Instant::now();
    let (mut at, mut ops) = (0u64, 0u64);
    while ops == 0 || t0.elapsed() < cap {
        let s = Instant::now();
        if write {
            t.write_at(start + at, &buf)?;
        } else {
            t.read_at(start + at, &mut buf)?;
        }
        hist.record(s.elapsed());
        at = (at + block) % span;
        ops += 1;
    }
    if write {
        t.flush()?;
    }
    Ok(Io { ops, bytes: ops * block, secs: t0.elapsed().as_secs_f64(), hist })
}

pub(crate) struct RandSpec {
    pub(crate) start: u64,
    pub(crate) len: u64,
    pub(crate) block: u64,
    pub(crate) threads: usize,
    pub(crate) write: bool,
    pub(crate) seed: u64,
}

pub(crate) struct RandOut {
    pub(crate) io: Io,
    /// (seconds since `origin`, latency ns) of every request, when asked for.
    samples: Vec<(f64, u64)>,
    /// The instant the samples' times count from.
    origin: Instant,
    per_thread_mb_s: Vec<f64>,
}

/// One load thread's result: its I/O totals and (time, bytes) samples.
type ThreadOutcome = Result<(Io, Vec<(f64, u64)>), String>;

/// `threads` threads, each with one request outstanding at a random block-aligned offset,
/// until `stop()` says so; every thread makes at least one request, so no run is empty
/// however fast or slow the machine is.
pub(crate) fn rand_run(t: &dyn Target, s: &RandSpec, stop: &(dyn Fn() -> bool + Sync), keep_samples: bool) -> Result<RandOut, String> {
    let slots = (s.len / s.block).max(1);
    let t0 = Instant::now();
    let results: Vec<ThreadOutcome> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..s.threads)
            .map(|i| {
                sc.spawn(move || {
                    let mut rng = Prng::new(s.seed ^ ((i as u64 + 1) * 0x1234_5678_9ABC_DEF1));
                    let mut buf = pattern(s.block as usize, i as u8);
                    let mut hist = LatHist::new();
                    let mut samples = Vec::new();
                    let mut ops = 0u64;
                    let mine = Instant::now();
                    while ops == 0 || !stop() {
                        let off = s.start + rng.below(slots) * s.block;
                        let st = Instant::now();
                        if s.write {
                            t.write_at(off, &buf)?;
                        } else {
                            t.read_at(off, &mut buf)?;
                        }
                        let d = st.elapsed();
                        hist.record(d);
                        if keep_samples {
                            samples.push(((st - t0).as_secs_f64(), d.as_nanos() as u64));
                        }
                        ops += 1;
                    }
                    Ok((Io { ops, bytes: ops * s.block, secs: mine.elapsed().as_secs_f64(), hist }, samples))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("worker thread panicked".into()))).collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    let mut io = Io { ops: 0, bytes: 0, secs, hist: LatHist::new() };
    let mut samples = Vec::new();
    let mut per_thread_mb_s = Vec::new();
    for r in results {
        let (one, s) = r?;
        io.ops += one.ops;
        io.bytes += one.bytes;
        io.hist.merge(&one.hist);
        per_thread_mb_s.push(mb_per_s(one.bytes, one.secs));
        samples.extend(s);
    }
    Ok(RandOut { io, samples, origin: t0, per_thread_mb_s })
}

pub(crate) fn deadline(d: Duration) -> impl Fn() -> bool + Sync {
    let end = Instant::now() + d;
    move || Instant::now() >= end
}

/// Runs the workloads for one target and collects its measurements.
struct Runner<'a> {
    cfg: &'a SuiteConfig,
    label: String,
    members: usize,
    chunk: u64,
    out: &'a mut Results,
}

impl Runner<'_> {
    // One row's fields, named at every call site; a struct would only repeat them.
    #[allow(clippy::too_many_arguments)]
    fn push(&mut self, workload: &str, state: &str, op: &str, block: u64, threads: usize, readers: usize, io: &Io) -> &mut Measurement {
        self.out.measurements.push(Measurement {
            workload: workload.into(),
            target: self.label.clone(),
            members: self.members,
            state: state.into(),
            op: op.into(),
            chunk_bytes: self.chunk,
            block_bytes: block,
            threads,
            readers,
            bytes: io.bytes,
            ops: io.ops,
            secs: io.secs,
            mb_per_s: mb_per_s(io.bytes, io.secs),
            iops: io.ops as f64 / io.secs.max(1e-9),
            latency: io.hist.summary(),
            per_job: None,
            peer_ratio: None,
            not_measured: None,
        });
        self.out.measurements.last_mut().expect("just pushed")
    }

    fn seq(&mut self, t: &dyn Target, workload: &str, state: &str, blocks: &[u64], region: u64) -> Result<(), String> {
        for &b in blocks {
            let w = seq_pass(t, 0, region, b, true, self.cfg.time_per_point)?;
            self.push(workload, state, "write", b, 1, 0, &w);
            // Off tmpfs, what was just written sits in the page cache: drop it (root only) so
            // the read reaches the members; the report's backing note says whether it could.
            crate::machine::drop_page_cache_unless_tmpfs(&self.cfg.dir);
            // Read back the span just written (the whole region was prefilled, so never a hole).
            let r = seq_pass(t, 0, w.bytes.min(region).max(b), b, false, self.cfg.time_per_point)?;
            self.push(workload, state, "read", b, 1, 0, &r);
        }
        Ok(())
    }

    fn rand(&mut self, t: &dyn Target, workload: &str, state: &str, region: u64) -> Result<(), String> {
        let threads = self.cfg.threads();
        for (op, write) in [("randread", false), ("randwrite", true)] {
            let spec = RandSpec { start: 0, len: region, block: self.cfg.rand_block, threads, write, seed: 1 };
            let r = rand_run(t, &spec, &deadline(self.cfg.time_per_point), false)?;
            self.push(workload, state, op, spec.block, threads, 0, &r.io);
        }
        Ok(())
    }

    /// Readers over the first 80 % of the region; the writer appends to one of ten "files"
    /// carved out of the last 20 %, every `mixed_append_interval`.
    fn mixed(&mut self, t: &dyn Target, region: u64) -> Result<(), String> {
        let cfg = self.cfg;
        let area = region / 5 * 4 / (1 << 20) * (1 << 20);
        let file_len = (region - area) / 10 / cfg.mixed_append_bytes.max(1) * cfg.mixed_append_bytes.max(1);
        for &size in &cfg.mixed_read_sizes {
            for readers in 1..=cfg.mixed_max_readers {
                let stop = AtomicBool::new(false);
                let spec = RandSpec { start: 0, len: area, block: size.min(area), threads: readers, write: false, seed: readers as u64 };
                let (r, w) = std::thread::scope(|sc| {
                    let writer = sc.spawn(|| -> Result<Io, String> {
                        let buf = pattern(cfg.mixed_append_bytes as usize, 9);
                        let mut pos = [0u64; 10];
                        let mut rng = Prng::new(0xC0FFEE);
                        let mut hist = LatHist::new();
                        let (t0, mut ops) = (Instant::now(), 0u64);
                        // At least one append, so the row is never empty on a fast machine.
                        while file_len >= cfg.mixed_append_bytes && (ops == 0 || !stop.load(Ordering::Relaxed)) {
                            let f = rng.below(10) as usize;
                            let st = Instant::now();
                            t.write_at(area + f as u64 * file_len + pos[f], &buf)?;
                            hist.record(st.elapsed());
                            pos[f] = (pos[f] + cfg.mixed_append_bytes) % file_len;
                            ops += 1;
                            std::thread::sleep(cfg.mixed_append_interval.saturating_sub(st.elapsed()));
                        }
                        Ok(Io { ops, bytes: ops * cfg.mixed_append_bytes, secs: t0.elapsed().as_secs_f64(), hist })
                    });
                    let r = rand_run(t, &spec, &deadline(cfg.time_per_point), false);
                    stop.store(true, Ordering::Relaxed);
                    (r, writer.join().unwrap_or_else(|_| Err("writer panicked".into())))
                });
                let (r, w) = (r?, w?);
                let m = self.push("mixed", "healthy", "mixed-read", spec.block, readers, readers, &r.io);
                m.per_job = JobSpread::of(&r.per_thread_mb_s);
                self.push("mixed", "healthy", "append", cfg.mixed_append_bytes, 1, readers, &w);
            }
        }
        Ok(())
    }

    /// `iozone -t`: every job on its own region, all jobs at once, phase after phase.
    fn throughput(&mut self, t: &dyn Target, region: u64) -> Result<(), String> {
        let cfg = self.cfg;
        let jobs = cfg.jobs.max(1);
        let rec = cfg.tp_record;
        let per_job = (cfg.tp_bytes_per_job.min(region / jobs as u64) / rec * rec).max(rec);
        let min_phase = cfg.time_per_point / 2;
        for (op, write, random) in [
            ("initial-write", true, false),
            ("rewrite", true, false),
            ("read", false, false),
            ("reread", false, false),
            ("randread", false, true),
            ("randwrite", true, true),
        ] {
            let results: Vec<Result<Io, String>> = std::thread::scope(|sc| {
                let hs: Vec<_> = (0..jobs)
                    .map(|j| {
                        sc.spawn(move || -> Result<Io, String> {
                            let start = j as u64 * per_job;
                            let mut buf = pattern(rec as usize, j as u8);
                            let mut rng = Prng::new(j as u64 * 7919 + 17);
                            let mut hist = LatHist::new();
                            let n = per_job / rec;
                            let t0 = Instant::now();
                            // iozone moves the file size once; on RAM-backed members that is a
                            // few ms, so whole passes repeat until half a point's time is spent.
                            let mut passes = 0u64;
                            while passes == 0 || t0.elapsed() < min_phase {
                                for i in 0..n {
                                    let off = start + if random { rng.below(n) } else { i } * rec;
                                    let st = Instant::now();
                                    if write {
                                        t.write_at(off, &buf)?;
                                    } else {
                                        t.read_at(off, &mut buf)?;
                                    }
                                    hist.record(st.elapsed());
                                }
                                passes += 1;
                            }
                            Ok(Io { ops: n * passes, bytes: n * passes * rec, secs: t0.elapsed().as_secs_f64(), hist })
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("job panicked".into()))).collect()
            });
            let mut all = Io { ops: 0, bytes: 0, secs: 0.0, hist: LatHist::new() };
            let mut per = Vec::new();
            for r in results {
                let r = r?;
                per.push(mb_per_s(r.bytes, r.secs));
                all.ops += r.ops;
                all.bytes += r.bytes;
                all.secs = all.secs.max(r.secs);
                all.hist.merge(&r.hist);
            }
            let spread = JobSpread::of(&per);
            let m = self.push("throughput", "healthy", op, rec, jobs, 0, &all);
            // iozone's headline is the sum of the children's rates.
            if let Some(s) = &spread {
                m.mb_per_s = s.sum_mb_per_s;
            }
            m.per_job = spread;
        }
        Ok(())
    }
}

/// Writes `region` bytes once in 1 MiB requests, so reads never land on holes (tmpfs holes
/// read as the shared zero page and would flatter every read figure).
pub(crate) fn prefill(t: &dyn Target, region: u64) -> Result<(), String> {
    let buf = pattern(1 << 20, 3);
    let mut at = 0;
    while at < region {
        let n = (1u64 << 20).min(region - at) as usize;
        t.write_at(at, &buf[..n])?;
        at += n as u64;
    }
    t.flush()
}

fn remove_members(built: &Built) {
    for p in &built.paths {
        let _ = std::fs::remove_file(p);
    }
}

/// Runs the suite: the peer first, then every level. `progress` gets one line per step.
pub fn run(cfg: &SuiteConfig, progress: &mut dyn FnMut(&str)) -> Result<Results, String> {
    let mut out = Results::default();
    let region_of = |t: &dyn Target| cfg.region_bytes.min(t.size()) / (1 << 20) * (1 << 20);
    let peer_workloads = [Workload::Seq, Workload::Rand, Workload::Mixed, Workload::Throughput];
    let any_peer_work = peer_workloads.iter().any(|w| cfg.has(*w)) || cfg.has(Workload::Degraded) || cfg.has(Workload::Rebuild);
    if cfg.peer && any_peer_work {
        let peer_path = cfg.dir.join("peer.img");
        let target = match &cfg.target {
            Some(p) => FileTarget::open_existing(p)?,
            None => FileTarget::create(&peer_path, cfg.region_bytes)?,
        };
        let region = region_of(&target);
        progress("peer: writing the region");
        prefill(&target, region)?;
        let mut r = Runner { cfg, label: "peer".into(), members: 1, chunk: 0, out: &mut out };
        // degraded/rebuild rows are compared with the peer's healthy seq/rand, so run those too.
        if cfg.has(Workload::Seq) || cfg.has(Workload::Degraded) {
            progress("peer: seq");
            r.seq(&target, "seq", "healthy", &cfg.seq_blocks, region)?;
        }
        if cfg.has(Workload::Rand) || cfg.has(Workload::Degraded) || cfg.has(Workload::Rebuild) {
            progress("peer: rand");
            r.rand(&target, "rand", "healthy", region)?;
        }
        if cfg.has(Workload::Mixed) {
            progress("peer: mixed");
            r.mixed(&target, region)?;
        }
        if cfg.has(Workload::Throughput) {
            progress("peer: throughput");
            r.throughput(&target, region)?;
        }
        drop(target);
        if cfg.target.is_none() {
            let _ = std::fs::remove_file(&peer_path);
        }
    }
    for &level in &cfg.levels {
        let n = members_for(level, cfg.members);
        let chunk_of = |c: u32| if level == Level::Raid1 { 0 } else { c as u64 };
        // The main array (default chunk) carries every workload; the others only `seq`.
        let mut chunks = vec![cfg.chunk_bytes];
        if cfg.has(Workload::Seq) && level != Level::Raid1 {
            chunks.extend(cfg.seq_chunks.iter().filter(|c| **c != cfg.chunk_bytes));
        }
        for (ci, &chunk) in chunks.iter().enumerate() {
            let main = ci == 0;
            let tag = format!("{level} chunk {}K", chunk_of(chunk) / 1024);
            progress(&format!("{tag}: creating {n} members, writing the region"));
            let built = build(&cfg.dir, level, n, chunk, cfg.region_bytes)?;
            let a: &uraid_engine::Array = &built.array;
            let region = region_of(a);
            prefill(a, region)?;
            let mut r = Runner { cfg, label: level.to_string(), members: n, chunk: chunk_of(chunk), out: &mut out };
            if cfg.has(Workload::Seq) {
                progress(&format!("{tag}: seq"));
                r.seq(a, "seq", "healthy", &cfg.seq_blocks, region)?;
            }
            if main {
                if cfg.has(Workload::Rand) {
                    progress(&format!("{tag}: rand"));
                    r.rand(a, "rand", "healthy", region)?;
                }
                if cfg.has(Workload::Mixed) {
                    progress(&format!("{tag}: mixed"));
                    r.mixed(a, region)?;
                }
                if cfg.has(Workload::Throughput) {
                    progress(&format!("{tag}: throughput"));
                    r.throughput(a, region)?;
                }
                let redundant = level.has_redundancy();
                if redundant && (cfg.has(Workload::Degraded) || cfg.has(Workload::Rebuild)) {
                    let lose: Vec<usize> = if level == Level::Raid6 { vec![0, 1] } else { vec![0] };
                    for &role in &lose {
                        a.fail_role(role).map_err(|e| e.to_string())?;
                    }
                    let state = format!("degraded-{}", lose.len());
                    if cfg.has(Workload::Degraded) {
                        progress(&format!("{tag}: degraded ({} lost)", lose.len()));
                        let big = *cfg.seq_blocks.iter().max().unwrap_or(&(1 << 20));
                        r.seq(a, "degraded", &state, &[big], region)?;
                        r.rand(a, "degraded", &state, region)?;
                    }
                    if cfg.has(Workload::Rebuild) {
                        progress(&format!("{tag}: rebuild onto a spare under random reads"));
                        rebuild(&mut r, &built, region, &state)?;
                    }
                }
            }
            built.array.close().map_err(|e| e.to_string())?;
            remove_members(&built);
        }
    }
    fill_peer_ratios(&mut out.measurements);
    Ok(out)
}

/// Fewer foreground requests than this in a phase and the phase is reported as not measured:
/// a p99 or a rate from a handful of requests says nothing.
const MIN_PHASE_OPS: u64 = 32;

/// Random reads before (degraded), during, and after a rebuild onto a fresh spare; the
/// recovery runs in its own thread as `uraid serve`'s job thread would.
///
/// The phases are delimited by events, never by the clock: the recovery starts only once the
/// foreground is issuing requests, and the foreground goes on after the recovery has ended
/// until it has made at least [`MIN_PHASE_OPS`] requests *and* spent `time_per_point` there.
/// A rebuild too short to overlap [`MIN_PHASE_OPS`] foreground requests (a fast machine, a
/// small region) is reported as not measured, with the reason, instead of as a zero.
fn rebuild(r: &mut Runner, built: &Built, region: u64, degraded_state: &str) -> Result<(), String> {
    let cfg = r.cfg;
    let a = &built.array;
    let threads = cfg.threads();
    let spec = RandSpec { start: 0, len: region, block: cfg.rand_block, threads, write: false, seed: 5 };
    let before = rand_run(a, &spec, &deadline(cfg.time_per_point), false)?;
    r.push("rebuild", degraded_state, "randread", spec.block, threads, 0, &before.io);

    let sp = cfg.dir.join(format!("{}-spare.img", a.level()));
    FileTarget::create(&sp, built.member_bytes)?;
    let spare: Arc<dyn Member> = Arc::new(FileMember::open(&sp, true).map_err(|e| e.to_string())?);
    let sync_bytes = a.sync_sectors() * 512;
    a.add_device(spare, [0x55; 16]).map_err(|e| e.to_string())?;
    // Foreground requests started so far (each `stop()` call starts one, or ends a thread).
    let fg_started = AtomicU64::new(0);
    // Requests started after the recovery ended.
    let fg_after = AtomicU64::new(0);
    let recovered: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let stop = || {
        fg_started.fetch_add(1, Ordering::Relaxed);
        match recovered.get() {
            None => false,
            Some(end) => fg_after.fetch_add(1, Ordering::Relaxed) >= MIN_PHASE_OPS && end.elapsed() >= cfg.time_per_point,
        }
    };
    let (fg, window) = std::thread::scope(|sc| {
        let job = sc.spawn(|| -> Result<(Instant, Instant), String> {
            // Wait for the event "the foreground is running" (bounded by the foreground
            // itself: its first request starts as soon as its threads are scheduled).
            while fg_started.load(Ordering::Relaxed) == 0 {
                std::thread::yield_now();
            }
            let start = Instant::now();
            let res = (|| {
                // Driven and paced as `uraid serve` drives it: foreground requests first.
                let opts =
                    DriverOptions { step_sectors: cfg.rebuild_step_sectors, limits: Some(cfg.rebuild_speed), clean_after_idle: None };
                let driver = JobDriver::new(a, opts);
                while a.pending_job() == Some(JobKind::Recovery) {
                    driver.run(JobKind::Recovery, &|| false, |_| {}).map_err(|e| e.to_string())?;
                }
                Ok(())
            })();
            // Set even on error, so the foreground winds down either way.
            let end = *recovered.get_or_init(Instant::now);
            res.map(|()| (start, end))
        });
        let fg = rand_run(a, &spec, &stop, true);
        (fg, job.join().unwrap_or_else(|_| Err("rebuild thread panicked".into())))
    });
    let (fg, (start, end)) = (fg?, window?);
    let _ = std::fs::remove_file(&sp);
    let rebuild_secs = (end - start).as_secs_f64().max(f64::MIN_POSITIVE);
    // Sample times re-based on the recovery's start (t = 0), as the timeline promises.
    let shift = fg.origin.saturating_duration_since(start).as_secs_f64() - start.saturating_duration_since(fg.origin).as_secs_f64();
    let samples: Vec<(f64, u64)> = fg.samples.iter().map(|&(t, ns)| (t + shift, ns)).filter(|&(t, _)| t >= 0.0).collect();
    let (mut during, mut after) = (LatHist::new(), LatHist::new());
    let (mut n_during, mut n_after) = (0u64, 0u64);
    let mut last_after = rebuild_secs;
    for &(t, ns) in &samples {
        if t < rebuild_secs {
            during.record_ns(ns);
            n_during += 1;
        } else {
            after.record_ns(ns);
            n_after += 1;
            last_after = last_after.max(t + ns as f64 * 1e-9);
        }
    }
    let io = |ops: u64, secs: f64, hist: LatHist| Io { ops, bytes: ops * spec.block, secs, hist };
    let too_short = |phase: &str, n: u64| {
        format!(
            "{n} random reads completed {phase} (fewer than {MIN_PHASE_OPS}): the rebuild of {} MiB took {:.1} ms; use a larger region (--size) to measure it",
            sync_bytes >> 20,
            rebuild_secs * 1e3
        )
    };
    for (state, n, secs, hist, phase) in [
        ("rebuilding", n_during, rebuild_secs, during, "during the rebuild"),
        ("after-rebuild", n_after, last_after - rebuild_secs, after, "after the rebuild"),
    ] {
        if n >= MIN_PHASE_OPS && secs > 0.0 {
            r.push("rebuild", state, "randread", spec.block, threads, 0, &io(n, secs, hist));
        } else {
            let reason = too_short(phase, n);
            let m = r.push("rebuild", state, "randread", spec.block, threads, 0, &io(0, 0.0, LatHist::new()));
            (m.secs, m.mb_per_s, m.iops, m.latency) = (0.0, 0.0, 0.0, None);
            m.not_measured = Some(reason);
        }
    }
    r.push("rebuild", "rebuilding", "recovery", 0, 1, 0, &io(1, rebuild_secs, LatHist::new())).bytes = sync_bytes;
    if let Some(m) = r.out.measurements.last_mut() {
        m.mb_per_s = mb_per_s(sync_bytes, rebuild_secs);
        m.iops = 0.0;
    }
    let bucket = (rebuild_secs / 20.0).clamp(0.01, 0.25);
    r.out.timelines.push(Timeline { target: r.label.clone(), rebuild_secs, bucket_secs: bucket, points: bucketed_p99(&samples, bucket) });
    Ok(())
}

/// The peer row a measurement is compared with: the same op, request size and concurrency
/// on the plain file (degraded/rebuild rows against the peer's healthy seq/rand).
pub fn peer_key(m: &Measurement) -> String {
    let workload = match m.workload.as_str() {
        "degraded" | "rebuild" => {
            if m.op.starts_with("rand") {
                "rand"
            } else {
                "seq"
            }
        }
        w => w,
    };
    format!("{workload} {} block={} threads={} readers={}", m.op, m.block_bytes, m.threads, m.readers)
}

pub fn fill_peer_ratios(ms: &mut [Measurement]) {
    let peers: std::collections::HashMap<String, f64> =
        ms.iter().filter(|m| m.target == "peer" && m.state == "healthy").map(|m| (peer_key(m), m.mb_per_s)).collect();
    for m in ms.iter_mut().filter(|m| m.target != "peer" && m.op != "recovery" && m.not_measured.is_none()) {
        m.peer_ratio = peers.get(&peer_key(m)).filter(|p| **p > 0.0).map(|p| m.mb_per_s / p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(target: &str, workload: &str, state: &str, op: &str, mbs: f64) -> Measurement {
        Measurement {
            workload: workload.into(),
            target: target.into(),
            state: state.into(),
            op: op.into(),
            block_bytes: 4096,
            threads: 4,
            mb_per_s: mbs,
            ..Default::default()
        }
    }

    #[test]
    fn peer_ratio_matches_op_block_and_threads() {
        let mut ms = vec![
            m("peer", "rand", "healthy", "randread", 200.0),
            m("raid5", "rand", "healthy", "randread", 100.0),
            m("raid5", "degraded", "degraded-1", "randread", 50.0),
            m("raid5", "rebuild", "rebuilding", "randread", 20.0),
            m("raid5", "rand", "healthy", "randwrite", 10.0),
        ];
        fill_peer_ratios(&mut ms);
        assert_eq!(ms[0].peer_ratio, None);
        assert_eq!(ms[1].peer_ratio, Some(0.5));
        assert_eq!(ms[2].peer_ratio, Some(0.25));
        assert_eq!(ms[3].peer_ratio, Some(0.1));
        assert_eq!(ms[4].peer_ratio, None, "no peer randwrite measured");
    }

    #[test]
    fn workload_names_round_trip() {
        for w in Workload::ALL {
            assert_eq!(Workload::parse(w.name()), Some(w));
        }
        assert_eq!(Workload::parse("nope"), None);
    }

    #[test]
    fn rng_stays_in_range() {
        let mut r = Prng::new(42);
        assert!((0..10_000).all(|_| r.below(7) < 7));
    }
}
