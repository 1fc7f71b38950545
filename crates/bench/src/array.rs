//! In-process array workloads over file-backed members, each next to the same work done on
//! one plain file in the same folder, measured in the same run (the peer):
//! - `seq-write` / `seq-read`: sequential requests of ~1 MiB (rounded to whole stripes, so
//!   RAID4/5/6 writes are full-stripe writes), data bytes per second;
//! - `degraded-read`: the same read with one member failed (RAID6: two);
//! - `recovery`: rebuilding a fresh spare with one member missing, against reading the
//!   surviving members' data areas alone with one thread (what `dd` of each survivor costs);
//!   RAID6 also `recovery-2lost`: the first of two lost members rebuilt while the other is
//!   still missing (every survivor needed, and the write is half of what is read).
//!
//! Arrays are created `--assume-clean` on zeroed sparse files, so no initial sync runs.

use serde::Serialize;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use uraid_core::geometry::Level;
use uraid_engine::array::{DriverOptions, JobDriver, JobKind};
use uraid_engine::{Array, FileMember, Member};

#[derive(Clone, Debug)]
pub struct ArrayBenchConfig {
    pub dir: PathBuf,
    pub levels: Vec<Level>,
    pub members: usize,
    pub chunk_bytes: u32,
    /// Bytes each workload moves.
    pub data_bytes: u64,
    pub workloads: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ArrayRecord {
    pub level: String,
    pub members: usize,
    pub chunk_bytes: u32,
    pub workload: String,
    pub request_bytes: u64,
    pub bytes: u64,
    pub mb_per_s: f64,
    /// The same bytes on one plain file in the same folder (recovery: reading the survivors).
    pub peer_mb_per_s: f64,
    pub ratio: f64,
}

/// Members needed for `level` to hold data: md's minimums.
pub fn members_for(level: Level, wanted: usize) -> usize {
    match level {
        Level::Raid6 => wanted.max(4),
        Level::Raid4 | Level::Raid5 => wanted.max(3),
        _ => wanted.max(2),
    }
}

/// Members whose chunks hold data in one stripe (what a full-stripe write moves).
pub(crate) fn data_disks(level: Level, n: usize) -> usize {
    match level {
        Level::Raid1 => 1,
        Level::Raid4 | Level::Raid5 => n - 1,
        Level::Raid6 => n - 2,
        Level::Raid10 => n / 2,
        _ => n,
    }
}

pub(crate) struct Built {
    pub(crate) array: Array,
    pub(crate) paths: Vec<PathBuf>,
    pub(crate) member_bytes: u64,
}

pub(crate) fn build(dir: &Path, level: Level, n: usize, chunk: u32, data_bytes: u64) -> Result<Built, String> {
    let dd = data_disks(level, n) as u64;
    // Room for the data plus md's 1 MiB-ish metadata headroom (data offset up to 128 MiB is
    // chosen from the size; small members get a small offset).
    let member_bytes = (data_bytes / dd + (8 << 20)).div_ceil(1 << 20) << 20;
    let mut paths = Vec::new();
    for i in 0..n {
        let p = dir.join(format!("{level}-{i}.img"));
        let f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&p).map_err(|e| e.to_string())?;
        f.set_len(member_bytes).map_err(|e| e.to_string())?;
        paths.push(p);
    }
    let members: Vec<Arc<dyn Member>> = paths
        .iter()
        .map(|p| FileMember::open(p, true).map(|m| Arc::new(m) as Arc<dyn Member>))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let array = create_over(level, chunk, members)?;
    Ok(Built { array, paths, member_bytes })
}

/// Creates an array of `level` over `members` (md's superblocks from the real create
/// planner, assume-clean, so no initial sync) and assembles it writable: every bench's
/// arrays, over files or emulated disks.
pub(crate) fn create_over(level: Level, chunk: u32, members: Vec<Arc<dyn Member>>) -> Result<Array, String> {
    let mut sketch = uraid_engine::create::ArraySketch::new(level, format!("bench-{level}"));
    sketch.chunk_kib = chunk / 1024;
    sketch.array_uuid = [7; 16];
    sketch.create(&members, &[])
}

/// ~1 MiB, rounded to a whole number of data stripes (full-stripe writes on parity levels).
fn request_bytes(level: Level, n: usize, chunk: u32) -> u64 {
    let stripe = match level {
        Level::Raid4 | Level::Raid5 | Level::Raid6 => data_disks(level, n) as u64 * chunk as u64,
        _ => 1 << 20,
    };
    ((1u64 << 20) / stripe).max(1) * stripe
}

fn mbs(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / secs.max(1e-9) / 1e6
}

/// The peer: the same requests on one plain file in `dir`.
fn peer_file(dir: &Path, total: u64, req: u64, buf: &mut [u8]) -> Result<(f64, f64), String> {
    let p = dir.join("peer.img");
    let f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&p).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let mut at = 0;
    while at < total {
        let n = req.min(total - at) as usize;
        f.write_all_at(&buf[..n], at).map_err(|e| e.to_string())?;
        at += n as u64;
    }
    f.sync_data().map_err(|e| e.to_string())?;
    let w = mbs(total, t.elapsed().as_secs_f64());
    let t = Instant::now();
    at = 0;
    while at < total {
        let n = req.min(total - at) as usize;
        f.read_exact_at(&mut buf[..n], at).map_err(|e| e.to_string())?;
        at += n as u64;
    }
    let r = mbs(total, t.elapsed().as_secs_f64());
    drop(f);
    let _ = std::fs::remove_file(&p);
    Ok((w, r))
}

pub fn run(cfg: &ArrayBenchConfig, progress: &mut dyn FnMut(&str)) -> Result<Vec<ArrayRecord>, String> {
    let mut out = Vec::new();
    let want = |w: &str| cfg.workloads.is_empty() || cfg.workloads.iter().any(|x| x == w);
    for &level in &cfg.levels {
        let n = members_for(level, cfg.members);
        progress(&format!("{level}: {n} members, creating"));
        let built = build(&cfg.dir, level, n, cfg.chunk_bytes, cfg.data_bytes)?;
        let a = &built.array;
        let total = cfg.data_bytes.min(a.size_bytes());
        let req = request_bytes(level, n, cfg.chunk_bytes);
        let total = total / req * req;
        let mut buf = vec![0u8; req as usize];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        let (peer_w, peer_r) = peer_file(&cfg.dir, total, req, &mut buf)?;
        let mut record = |workload: &str, mb: f64, peer: f64| {
            out.push(ArrayRecord {
                level: level.to_string(),
                members: n,
                chunk_bytes: cfg.chunk_bytes,
                workload: workload.into(),
                request_bytes: req,
                bytes: total,
                mb_per_s: mb,
                peer_mb_per_s: peer,
                ratio: mb / peer.max(1e-9),
            })
        };
        progress(&format!("{level}: sequential write"));
        let t = Instant::now();
        let mut at = 0;
        while at < total {
            a.write(at, &buf).map_err(|e| e.to_string())?;
            at += req;
        }
        a.flush().map_err(|e| e.to_string())?;
        if want("seq-write") {
            record("seq-write", mbs(total, t.elapsed().as_secs_f64()), peer_w);
        }
        let read_all = |a: &Array, buf: &mut [u8]| -> Result<f64, String> {
            let t = Instant::now();
            let mut at = 0;
            while at < total {
                a.read(at, buf).map_err(|e| e.to_string())?;
                at += req;
            }
            Ok(mbs(total, t.elapsed().as_secs_f64()))
        };
        progress(&format!("{level}: sequential read"));
        let r = read_all(a, &mut buf)?;
        if want("seq-read") {
            record("seq-read", r, peer_r);
        }
        let redundant = level.has_redundancy();
        let mut spares = Vec::new();
        if redundant && (want("degraded-read") || want("recovery")) {
            let lose: Vec<usize> = if level == Level::Raid6 { vec![0, 1] } else { vec![0] };
            for &r in &lose {
                a.fail_role(r).map_err(|e| e.to_string())?;
            }
            progress(&format!("{level}: degraded read ({} lost)", lose.len()));
            let r = read_all(a, &mut buf)?;
            if want("degraded-read") {
                record(&format!("degraded-read-{}", lose.len()), r, peer_r);
            }
            if want("recovery") {
                // RAID6 first rebuilds one member while the other is still missing (every
                // survivor needed), then the second with only it missing (the usual case).
                let mut files = built.paths.clone();
                for (k, &r) in lose.iter().enumerate() {
                    let still_lost = &lose[k..];
                    let survivors: Vec<PathBuf> =
                        files.iter().enumerate().filter(|(i, _)| !still_lost.contains(i)).map(|(_, p)| p.clone()).collect();
                    progress(&format!("{level}: recovery onto a spare ({} lost)", still_lost.len()));
                    // A rebuild takes a fraction of a second here: it is run RECOVERY_ROUNDS
                    // times (failing and removing the rebuilt member in between) and the
                    // median round by ratio is kept, each next to its own peer run.
                    let mut rounds = Vec::new();
                    for round in 0..RECOVERY_ROUNDS {
                        let spare = cfg.dir.join(format!("{level}-spare{r}-{round}.img"));
                        rounds.push(time_recovery(a, &survivors, &spare, built.member_bytes)?);
                        spares.push(spare.clone());
                        if round + 1 < RECOVERY_ROUNDS {
                            a.fail_role(r).map_err(|e| e.to_string())?;
                            a.remove_device(&spare.display().to_string()).map_err(|e| e.to_string())?;
                            let _ = std::fs::remove_file(&spare);
                        } else {
                            files[r] = spare;
                        }
                    }
                    rounds.sort_by(|x, y| (x.0 / x.1).total_cmp(&(y.0 / y.1)));
                    let (ours, peer) = rounds[rounds.len() / 2];
                    let name = if still_lost.len() == 1 { "recovery".to_string() } else { format!("recovery-{}lost", still_lost.len()) };
                    record(&name, ours, peer);
                }
            }
        }
        built.array.close().map_err(|e| e.to_string())?;
        drop(built.array);
        for p in built.paths.iter().chain(&spares) {
            let _ = std::fs::remove_file(p);
        }
    }
    Ok(out)
}

/// Rebuilds of each recovery case; the median is reported.
const RECOVERY_ROUNDS: usize = 3;

/// Rebuilds the array's first missing role onto a fresh spare at `spare`; returns MB/s of
/// surviving data for the rebuild and for its peer: reading every survivor's data area once
/// with one thread, 1 MiB at a time, as `dd` of each member would.
fn time_recovery(a: &Array, survivors: &[PathBuf], spare: &Path, member_bytes: u64) -> Result<(f64, f64), String> {
    let sync_bytes = a.sync_sectors() * 512;
    let t = Instant::now();
    let mut big = vec![0u8; 1 << 20];
    for p in survivors {
        let f = std::fs::File::open(p).map_err(|e| e.to_string())?;
        let mut at = 0u64;
        while at < sync_bytes {
            let n = (1u64 << 20).min(sync_bytes - at) as usize;
            f.read_exact_at(&mut big[..n], (1 << 20) + at).map_err(|e| e.to_string())?;
            at += n as u64;
        }
    }
    let peer_secs = t.elapsed().as_secs_f64();
    // The spare is allocated up front, as a real spare disk exists before it is rebuilt
    // onto: the rebuild is timed writing to a device, not growing a sparse file (on tmpfs
    // that would add zeroing fresh pages, which no disk pays).
    let f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(spare).map_err(|e| e.to_string())?;
    rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, member_bytes)
        .map_err(|e| format!("{}: fallocate: {e}", spare.display()))?;
    drop(f);
    let member: Arc<dyn Member> = Arc::new(FileMember::open(spare, true).map_err(|e| e.to_string())?);
    a.add_device(member, [0x55; 16]).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let driver = JobDriver::new(a, DriverOptions { step_sectors: 8 << 11, limits: None, clean_after_idle: None });
    while a.pending_job() == Some(JobKind::Recovery) {
        driver.run(JobKind::Recovery, &|| false, |_| {}).map_err(|e| e.to_string())?;
    }
    let secs = t.elapsed().as_secs_f64();
    let survivor_bytes = sync_bytes * survivors.len() as u64;
    // Both as MB/s of surviving data read: ratio = peer time / our time.
    Ok((mbs(survivor_bytes, secs), mbs(survivor_bytes, peer_secs)))
}

/// Human table.
pub fn render(records: &[ArrayRecord], backing: &str) -> String {
    use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec!["level", "members", "chunk", "workload", "request", "MB/s", "peer MB/s", "ratio"]);
    for r in records {
        let right = |s: String| Cell::new(s).set_alignment(CellAlignment::Right);
        t.add_row(vec![
            Cell::new(&r.level),
            right(r.members.to_string()),
            right(format!("{}K", r.chunk_bytes / 1024)),
            Cell::new(&r.workload),
            right(format!("{}K", r.request_bytes / 1024)),
            right(format!("{:.0}", r.mb_per_s)),
            right(format!("{:.0}", r.peer_mb_per_s)),
            right(format!("{:.2}×", r.ratio)),
        ]);
    }
    format!("In-process arrays, members as files on {backing}; peer = one plain file there (recovery: reading the survivors)\n{t}\n")
}
