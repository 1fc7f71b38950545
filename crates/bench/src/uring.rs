//! `uraid bench uring`: does io_uring pay off for member I/O?
//!
//! The engine turns one array request into one operation per member (same offset, one chunk
//! each) and runs them together, waiting for all of them before it returns. This bench
//! replays exactly that shape on N member files and times five executors on the same files
//! in the same run:
//!
//! - `pool`: the N operations of a request on an 8-thread rayon pool via `scope`, pread/pwrite
//!   (the engine's pool path);
//! - `serial`: the N operations one after another on the calling thread (the engine's in-line
//!   path, taken below 128 KiB per request on buffered members);
//! - `uring`: the engine's own executor (`uraid_engine::executor::run_member_io`) over the
//!   members opened as the engine opens them: on `O_DIRECT` members the N operations go on
//!   the calling thread's ring with one `submit_and_wait`;
//! - `uring-qd`: `depth` caller threads through that executor, each with its own ring (the
//!   engine's shape under several NBD workers);
//! - `pool-qd`: `depth` caller threads sharing the pool, one request each — the same depth
//!   reached through the pool, for a fair comparison.
//!
//! The ring executors are the engine's: this bench has no io_uring code of its own (it once
//! had a second ring wrapper; the engine's is the one that ships, so it is the one measured).
//! They run on the `O_DIRECT` settings only, where the engine uses a ring; on buffered
//! members the engine never does (measured: it lost to the pool and the in-line path there,
//! docs/BENCH.md).
//!
//! Storage settings: files on tmpfs (buffered), files on a disk filesystem opened O_DIRECT, and
//! (as root, with losetup) loop devices over those files with `--direct-io=on`, opened O_DIRECT.
//! Buffers are the parity crate's `AlignedBuf` at 4 KiB alignment (O_DIRECT).

use crate::machine::{fs_type, Machine};
use crate::report::{size_label, Grid};
use crate::stats::mb_per_s;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uraid_engine::executor::{run_member_io, Bufs, MemberIo, Run};
use uraid_engine::{FileMember, IoMode, Member};
pub use uraid_parity::buffer::AlignedBuf;

/// Alignment of buffers, offsets and lengths for O_DIRECT (the largest logical block size in
/// common use).
pub const ALIGN: usize = 4096;
/// Threads of the member-I/O pool, as `engine::parallel`.
pub const POOL_THREADS: usize = 8;
/// Below this many bytes per request the engine runs the member operations in line.
pub const ENGINE_PARALLEL_MIN_BYTES: usize = 128 * 1024;

/// Why the engine does not use io_uring here, as "io_uring unavailable: <reason>", if it
/// does not.
pub fn uring_available() -> Result<(), String> {
    match uraid_engine::io_uring_unavailable() {
        None => Ok(()),
        Some(why) => Err(format!("io_uring unavailable: {why}")),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    Read,
    Write,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    Seq,
    Rand,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Executor {
    Pool,
    Serial,
    Uring,
    UringQd,
    PoolQd,
}

impl Executor {
    pub const ALL: [Executor; 5] = [Executor::Pool, Executor::Serial, Executor::Uring, Executor::UringQd, Executor::PoolQd];

    pub fn name(self) -> &'static str {
        match self {
            Executor::Pool => "pool",
            Executor::Serial => "serial",
            Executor::Uring => "uring",
            Executor::UringQd => "uring-qd",
            Executor::PoolQd => "pool-qd",
        }
    }

    pub fn uses_uring(self) -> bool {
        matches!(self, Executor::Uring | Executor::UringQd)
    }

    /// Requests in flight at once with a configured depth.
    pub fn requests_in_flight(self, depth: usize) -> usize {
        match self {
            Executor::UringQd | Executor::PoolQd => depth,
            _ => 1,
        }
    }
}

/// Which member offsets the requests visit: request `i` reads or writes chunk `offset(i)` of
/// every member. Shared by every thread of a run; stops after `limit` requests or at the
/// deadline the executor sets once it is ready.
pub struct Stream {
    pub pattern: Pattern,
    pub chunk: u64,
    pub file_bytes: u64,
    pub limit: Option<u64>,
    next: AtomicU64,
}

impl Stream {
    pub fn new(pattern: Pattern, chunk: usize, file_bytes: u64, limit: Option<u64>) -> Stream {
        assert!(file_bytes >= chunk as u64, "member files smaller than a chunk");
        Stream { pattern, chunk: chunk as u64, file_bytes, limit, next: AtomicU64::new(0) }
    }

    /// Sequential offsets wrap over the file; random ones are a fixed hash of the request
    /// number, so every executor visits the same offsets in the same order.
    pub fn offset(&self, i: u64) -> u64 {
        let slots = self.file_bytes / self.chunk;
        let k = match self.pattern {
            Pattern::Seq => i % slots,
            Pattern::Rand => uraid_parity::testdata::Prng::new(i ^ 0x5eed_1234_abcd).next_u64() % slots,
        };
        k * self.chunk
    }

    /// The deadline never refuses the first request: a timed run on a host stalled past its
    /// deadline (a slow or busy machine) still measures one request instead of none.
    fn next(&self, deadline: Option<Instant>) -> Option<u64> {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        if i > 0 && deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        if self.limit.is_some_and(|l| i >= l) {
            return None;
        }
        Some(self.offset(i))
    }
}

/// Called around each request with its member buffers (index = member) and offset: `before`
/// as it is issued (fill what a write will write), `after` once every member completed (check
/// what a read read). An `after` error ends the run once the operations in flight complete.
pub trait Hooks: Sync {
    fn before(&self, _bufs: &mut [AlignedBuf], _offset: u64) {}
    fn after(&self, _bufs: &[AlignedBuf], _offset: u64) -> Result<(), String> {
        Ok(())
    }
}

/// The bench's hooks: buffers keep whatever they hold.
pub struct NoHooks;
impl Hooks for NoHooks {}

/// Requests completed and the time they took (setup excluded).
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    pub requests: u64,
    pub secs: f64,
}

/// The member-I/O pool of the `pool` executors (the engine's shape: 8 threads).
pub fn io_pool() -> Result<rayon::ThreadPool, String> {
    rayon::ThreadPoolBuilder::new().num_threads(POOL_THREADS).thread_name(|i| format!("bench-io-{i}")).build().map_err(|e| e.to_string())
}

/// A run of requests: each reads or writes one `chunk` at the same offset of every member in
/// `files`, offsets from `stream`, `depth` requests in flight for the `-qd` executors, until
/// the stream ends or `time` has passed since the executor was ready.
pub struct Job<'a> {
    pub files: &'a [File],
    /// The same members as the engine opens them, for the engine's executor (`uring`,
    /// `uring-qd`); empty where those do not run.
    pub members: &'a [Arc<FileMember>],
    pub op: Op,
    pub chunk: usize,
    pub depth: usize,
    pub stream: &'a Stream,
    pub hooks: &'a dyn Hooks,
    pub time: Option<Duration>,
}

impl Job<'_> {
    pub fn run(&self, exec: Executor, pool: &rayon::ThreadPool) -> io::Result<Tally> {
        let depth = self.depth.max(1);
        match exec {
            Executor::Pool | Executor::Serial => {
                let mut bufs = blocks(self.files.len(), self.chunk);
                let pool = (exec == Executor::Pool).then_some(pool);
                self.sync_loop(&mut bufs, pool, self.time.map(|t| Instant::now() + t))
            }
            Executor::Uring => {
                let mut bufs = blocks(self.files.len(), self.chunk);
                self.engine_loop(&mut bufs, self.time.map(|t| Instant::now() + t))
            }
            Executor::UringQd => self.engine_qd(depth),
            Executor::PoolQd => self.pool_qd(depth, pool),
        }
    }

    /// One request at a time: member operations on the pool (as `run_all`) or in line.
    fn sync_loop(&self, bufs: &mut [AlignedBuf], pool: Option<&rayon::ThreadPool>, deadline: Option<Instant>) -> io::Result<Tally> {
        let (files, op) = (self.files, self.op);
        let start = Instant::now();
        let mut errs: Vec<Option<io::Error>> = (0..files.len()).map(|_| None).collect();
        let mut requests = 0;
        while let Some(offset) = self.stream.next(deadline) {
            self.hooks.before(bufs, offset);
            match pool {
                Some(pool) => pool.scope(|s| {
                    for ((file, buf), err) in files.iter().zip(bufs.iter_mut()).zip(errs.iter_mut()) {
                        s.spawn(move |_| *err = member_io(file, op, buf, offset).err());
                    }
                }),
                None => {
                    for ((file, buf), err) in files.iter().zip(bufs.iter_mut()).zip(errs.iter_mut()) {
                        *err = member_io(file, op, buf, offset).err();
                    }
                }
            }
            if let Some(e) = errs.iter_mut().find_map(Option::take) {
                return Err(e);
            }
            self.hooks.after(bufs, offset).map_err(io::Error::other)?;
            requests += 1;
        }
        Ok(Tally { requests, secs: start.elapsed().as_secs_f64() })
    }

    /// `depth` caller threads, each issuing one request at a time through the shared pool.
    fn pool_qd(&self, depth: usize, pool: &rayon::ThreadPool) -> io::Result<Tally> {
        let mut per_thread: Vec<Vec<AlignedBuf>> = (0..depth).map(|_| blocks(self.files.len(), self.chunk)).collect();
        let start = Instant::now();
        let deadline = self.time.map(|t| start + t);
        let results: Vec<io::Result<Tally>> = std::thread::scope(|s| {
            let handles: Vec<_> = per_thread.iter_mut().map(|bufs| s.spawn(move || self.sync_loop(bufs, Some(pool), deadline))).collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("caller thread panicked")))).collect()
        });
        let mut requests = 0;
        for r in results {
            requests += r?.requests;
        }
        Ok(Tally { requests, secs: start.elapsed().as_secs_f64() })
    }

    /// One request at a time through the engine's executor: the N member operations handed
    /// over as data, run together (on the calling thread's ring for O_DIRECT members).
    fn engine_loop(&self, bufs: &mut [AlignedBuf], deadline: Option<Instant>) -> io::Result<Tally> {
        if self.members.len() != self.files.len() {
            return Err(io::Error::other("the engine's executor needs the members opened as the engine opens them"));
        }
        let start = Instant::now();
        let mut requests = 0;
        while let Some(offset) = self.stream.next(deadline) {
            self.hooks.before(bufs, offset);
            let batch: Vec<MemberIo<'_>> = self
                .members
                .iter()
                .zip(bufs.iter_mut())
                .map(|(m, buf)| {
                    let bufs = match self.op {
                        Op::Read => Bufs::Read(vec![&mut buf[..]]),
                        Op::Write => Bufs::Write(vec![&buf[..]]),
                    };
                    MemberIo { member: m.as_ref() as &dyn Member, runs: vec![Run { offset, bufs }] }
                })
                .collect();
            if let Some(e) = run_member_io(batch).into_iter().find_map(Result::err) {
                return Err(e);
            }
            self.hooks.after(bufs, offset).map_err(io::Error::other)?;
            requests += 1;
        }
        Ok(Tally { requests, secs: start.elapsed().as_secs_f64() })
    }

    /// `depth` caller threads, each issuing one request at a time through the engine's
    /// executor (each thread has its own ring).
    fn engine_qd(&self, depth: usize) -> io::Result<Tally> {
        let mut per_thread: Vec<Vec<AlignedBuf>> = (0..depth).map(|_| blocks(self.files.len(), self.chunk)).collect();
        let start = Instant::now();
        let deadline = self.time.map(|t| start + t);
        let results: Vec<io::Result<Tally>> = std::thread::scope(|s| {
            let handles: Vec<_> = per_thread.iter_mut().map(|bufs| s.spawn(move || self.engine_loop(bufs, deadline))).collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("caller thread panicked")))).collect()
        });
        let mut requests = 0;
        for r in results {
            requests += r?.requests;
        }
        Ok(Tally { requests, secs: start.elapsed().as_secs_f64() })
    }
}

fn member_io(file: &File, op: Op, buf: &mut [u8], offset: u64) -> io::Result<()> {
    match op {
        Op::Read => file.read_exact_at(buf, offset),
        Op::Write => file.write_all_at(buf, offset),
    }
}

/// `n` buffers of `chunk` bytes aligned for O_DIRECT, every page touched now so no
/// measurement pays for faulting it in.
fn blocks(n: usize, chunk: usize) -> Vec<AlignedBuf> {
    (0..n).map(|_| aligned(chunk)).collect()
}

fn aligned(len: usize) -> AlignedBuf {
    let mut b = AlignedBuf::zeroed(len, ALIGN);
    b.fill(0xA5);
    b
}

// ---------------------------------------------------------------------------------------------
// The bench

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Storage {
    /// Files on tmpfs, buffered.
    Tmpfs,
    /// Files on a disk filesystem, O_DIRECT.
    Direct,
    /// Loop devices (`--direct-io=on`) over the `Direct` files, O_DIRECT.
    Loop,
}

impl Storage {
    pub fn name(self) -> &'static str {
        match self {
            Storage::Tmpfs => "tmpfs",
            Storage::Direct => "direct",
            Storage::Loop => "loop",
        }
    }

    pub fn parse(s: &str) -> Result<Storage, String> {
        [Storage::Tmpfs, Storage::Direct, Storage::Loop]
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| format!("unknown storage {s:?} (tmpfs, direct, loop)"))
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct UringBenchConfig {
    pub storages: Vec<Storage>,
    /// Folder (tmpfs) for the `tmpfs` setting.
    pub shm_dir: PathBuf,
    /// Folder on a disk filesystem for the `direct` and `loop` settings.
    pub direct_dir: PathBuf,
    pub members: Vec<usize>,
    pub chunks: Vec<usize>,
    /// Bytes of each member file.
    pub file_bytes: u64,
    /// Per executor and point, split over `rounds` interleaved rounds.
    pub time: Duration,
    pub rounds: usize,
    /// Requests in flight for `uring-qd` and `pool-qd`.
    pub depth: usize,
}

impl Default for UringBenchConfig {
    fn default() -> Self {
        UringBenchConfig {
            storages: vec![Storage::Tmpfs, Storage::Direct, Storage::Loop],
            shm_dir: "/dev/shm".into(),
            direct_dir: std::env::temp_dir(),
            members: vec![4, 8],
            chunks: vec![4 << 10, 64 << 10, 512 << 10],
            file_bytes: 256 << 20,
            time: Duration::from_millis(100),
            rounds: 2,
            depth: 4,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Record {
    pub storage: String,
    pub members: usize,
    pub chunk_bytes: usize,
    pub pattern: Pattern,
    pub op: Op,
    pub executor: Executor,
    pub requests_in_flight: usize,
    pub requests: u64,
    pub bytes: u64,
    pub secs: f64,
    /// 10^6 bytes/s over all members.
    pub mb_per_s: f64,
    /// Array requests per second (member operations = members × this).
    pub req_per_s: f64,
    /// This over the `pool` executor at the same point (same for MB/s and req/s).
    pub vs_pool: Option<f64>,
    /// True when the engine runs such a request in line today (below 128 KiB), i.e. its
    /// current behaviour at this point is `serial`, not `pool`.
    pub engine_in_line: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct StorageRecord {
    pub storage: Storage,
    /// Where the members were, in words.
    pub backing: String,
    /// Why this setting was not measured.
    pub skipped: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct UringReport {
    pub machine: Machine,
    pub config: UringBenchConfig,
    /// Set when io_uring could not be used: the uring rows are missing.
    pub uring_unavailable: Option<String>,
    pub storages: Vec<StorageRecord>,
    pub records: Vec<Record>,
    pub wall_secs: f64,
}

/// Member files (or devices) of one storage setting; removes what it created.
struct Members {
    files: Vec<File>,
    /// The same members as the engine opens them (direct settings only).
    members: Vec<Arc<FileMember>>,
    backing: String,
    loops: LoopDevices,
    _dir: Option<tempfile::TempDir>,
}

/// Attached loop devices, detached on drop.
#[derive(Default)]
struct LoopDevices(Vec<String>);

impl Drop for LoopDevices {
    fn drop(&mut self) {
        for dev in &self.0 {
            match Command::new("losetup").arg("-d").arg(dev).output() {
                Ok(o) if o.status.success() => {}
                Ok(o) => eprintln!("losetup -d {dev}: {}", String::from_utf8_lossy(&o.stderr).trim()),
                Err(e) => eprintln!("losetup -d {dev}: {e}"),
            }
        }
    }
}

fn open_member(path: &Path, direct: bool, create: bool) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true).write(true).create(create);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path)
}

/// Creates `count` member files of `bytes` in a new folder under `base`, filled with non-zero
/// data (no read lands on a hole), written 1 MiB at a time through the descriptors returned.
fn create_files(base: &Path, count: usize, bytes: u64, direct: bool) -> io::Result<(tempfile::TempDir, Vec<PathBuf>, Vec<File>)> {
    let dir = tempfile::Builder::new().prefix("uraid-bench-uring").tempdir_in(base)?;
    let step = 1 << 20;
    let mut block = aligned(step);
    let (mut paths, mut files) = (Vec::new(), Vec::new());
    for m in 0..count {
        let path = dir.path().join(format!("member{m}"));
        let file = open_member(&path, direct, true)?;
        let mut off = 0;
        while off < bytes {
            let len = (bytes - off).min(step as u64) as usize;
            block[..len].fill((m as u8).wrapping_mul(37) ^ (off >> 20) as u8 | 1);
            file.write_all_at(&block[..len], off)?;
            off += len as u64;
        }
        file.sync_data()?;
        paths.push(path);
        files.push(file);
    }
    Ok((dir, paths, files))
}

/// The members at `paths` opened as the engine opens them for `--io direct`.
pub fn engine_members(paths: &[PathBuf]) -> Result<Vec<Arc<FileMember>>, String> {
    paths
        .iter()
        .map(|p| FileMember::open_with(p, true, IoMode::Direct).map(Arc::new).map_err(|e| format!("{}: {e}", p.display())))
        .collect()
}

fn open_storage(storage: Storage, cfg: &UringBenchConfig, count: usize) -> Result<Members, String> {
    match storage {
        Storage::Tmpfs => {
            let fs = fs_type(&cfg.shm_dir);
            if fs != "tmpfs" {
                return Err(format!("{} is {fs}, not tmpfs", cfg.shm_dir.display()));
            }
            let (dir, _, files) = create_files(&cfg.shm_dir, count, cfg.file_bytes, false).map_err(|e| e.to_string())?;
            let backing = format!("tmpfs ({}), buffered", cfg.shm_dir.display());
            Ok(Members { files, members: Vec::new(), backing, loops: LoopDevices::default(), _dir: Some(dir) })
        }
        Storage::Direct | Storage::Loop => {
            let fs = fs_type(&cfg.direct_dir);
            if fs == "tmpfs" {
                return Err(format!("{} is tmpfs: O_DIRECT needs a disk filesystem (--direct-dir)", cfg.direct_dir.display()));
            }
            let (dir, paths, files) = create_files(&cfg.direct_dir, count, cfg.file_bytes, true)
                .map_err(|e| format!("O_DIRECT files in {}: {e}", cfg.direct_dir.display()))?;
            if storage == Storage::Direct {
                let backing = format!("{fs} ({}), O_DIRECT", cfg.direct_dir.display());
                let members = engine_members(&paths)?;
                return Ok(Members { files, members, backing, loops: LoopDevices::default(), _dir: Some(dir) });
            }
            drop(files);
            let mut loops = LoopDevices::default();
            for p in &paths {
                let out = Command::new("losetup")
                    .args(["--find", "--show", "--direct-io=on"])
                    .arg(p)
                    .output()
                    .map_err(|e| format!("losetup: {e}"))?;
                if !out.status.success() {
                    return Err(format!("losetup: {}", String::from_utf8_lossy(&out.stderr).trim()));
                }
                loops.0.push(String::from_utf8_lossy(&out.stdout).trim().to_string());
            }
            let files = loops
                .0
                .iter()
                .map(|d| open_member(Path::new(d), true, false).map_err(|e| format!("{d}: {e}")))
                .collect::<Result<_, _>>()?;
            let backing = format!("loop devices (--direct-io=on) over files on {fs} ({}), O_DIRECT", cfg.direct_dir.display());
            let members = engine_members(&loops.0.iter().map(PathBuf::from).collect::<Vec<_>>())?;
            Ok(Members { files, members, backing, loops, _dir: Some(dir) })
        }
    }
}

/// Runs every point; `progress` gets one line per point.
pub fn run(cfg: &UringBenchConfig, progress: &mut dyn FnMut(&str)) -> Result<UringReport, String> {
    let started = Instant::now();
    if !cfg.file_bytes.is_multiple_of(ALIGN as u64)
        || cfg.chunks.iter().any(|&c| c == 0 || !c.is_multiple_of(ALIGN) || c as u64 > cfg.file_bytes)
    {
        return Err(format!("chunks and file size must be multiples of {ALIGN}, chunks at most the file size"));
    }
    let uring_unavailable = uring_available().err();
    if let Some(why) = &uring_unavailable {
        progress(why);
    }
    let executors: Vec<Executor> = Executor::ALL.into_iter().filter(|e| uring_unavailable.is_none() || !e.uses_uring()).collect();
    let pool = io_pool()?;
    let count = cfg.members.iter().copied().max().unwrap_or(0);
    let mut storages = Vec::new();
    let mut records = Vec::new();
    for &storage in &cfg.storages {
        progress(&format!("{}: preparing {count} × {} MiB", storage.name(), cfg.file_bytes >> 20));
        let members = match open_storage(storage, cfg, count) {
            Ok(m) => m,
            Err(why) => {
                progress(&format!("{}: skipped: {why}", storage.name()));
                storages.push(StorageRecord { storage, backing: String::new(), skipped: Some(why) });
                continue;
            }
        };
        for &n in &cfg.members {
            for &chunk in &cfg.chunks {
                for pattern in [Pattern::Seq, Pattern::Rand] {
                    for op in [Op::Read, Op::Write] {
                        progress(&format!("{} N={n} chunk={} {pattern:?} {op:?}", storage.name(), size_label(chunk as u64)));
                        let engine = members.members.get(..n).unwrap_or_default();
                        let point = Point { storage, files: &members.files[..n], members: engine, chunk, pattern, op };
                        // The engine's ring executors where the engine uses a ring: O_DIRECT.
                        let here: Vec<Executor> = executors.iter().copied().filter(|e| !e.uses_uring() || !engine.is_empty()).collect();
                        records.extend(point.measure(cfg, &here, &pool)?);
                    }
                }
            }
        }
        storages.push(StorageRecord { storage, backing: members.backing.clone(), skipped: None });
        let detached = !members.loops.0.is_empty();
        drop(members);
        if detached {
            progress(&format!("{}: loop devices detached", storage.name()));
        }
    }
    Ok(UringReport {
        machine: Machine::probe(),
        config: cfg.clone(),
        uring_unavailable,
        storages,
        records,
        wall_secs: started.elapsed().as_secs_f64(),
    })
}

/// One point of the bench: every executor on the same members, chunk, pattern and operation.
struct Point<'a> {
    storage: Storage,
    files: &'a [File],
    members: &'a [Arc<FileMember>],
    chunk: usize,
    pattern: Pattern,
    op: Op,
}

impl Point<'_> {
    /// Runs the executors in `rounds` interleaved rounds (so drift on a noisy host spreads over
    /// all of them) and returns one record per executor.
    fn measure(&self, cfg: &UringBenchConfig, executors: &[Executor], pool: &rayon::ThreadPool) -> Result<Vec<Record>, String> {
        let rounds = cfg.rounds.max(1);
        let mut tallies = vec![Tally::default(); executors.len()];
        for _ in 0..rounds {
            for (&exec, tally) in executors.iter().zip(tallies.iter_mut()) {
                let stream = Stream::new(self.pattern, self.chunk, cfg.file_bytes, None);
                let job = Job {
                    files: self.files,
                    members: self.members,
                    op: self.op,
                    chunk: self.chunk,
                    depth: cfg.depth,
                    stream: &stream,
                    hooks: &NoHooks,
                    time: Some(cfg.time / rounds as u32),
                };
                let t = job.run(exec, pool).map_err(|e| format!("{} {} {:?}: {e}", self.storage.name(), exec.name(), self.op))?;
                tally.requests += t.requests;
                tally.secs += t.secs;
            }
        }
        let n = self.files.len();
        let pool_rate =
            executors.iter().zip(&tallies).find(|(e, _)| **e == Executor::Pool).map(|(_, t)| t.requests as f64 / t.secs.max(1e-9));
        Ok(executors
            .iter()
            .zip(&tallies)
            .map(|(&executor, t)| {
                let bytes = t.requests * (n * self.chunk) as u64;
                let req_per_s = t.requests as f64 / t.secs.max(1e-9);
                Record {
                    storage: self.storage.name().into(),
                    members: n,
                    chunk_bytes: self.chunk,
                    pattern: self.pattern,
                    op: self.op,
                    executor,
                    requests_in_flight: executor.requests_in_flight(cfg.depth),
                    requests: t.requests,
                    bytes,
                    secs: t.secs,
                    mb_per_s: mb_per_s(bytes, t.secs),
                    req_per_s,
                    vs_pool: pool_rate.filter(|&p| p > 0.0).map(|p| req_per_s / p),
                    engine_in_line: n * self.chunk < ENGINE_PARALLEL_MIN_BYTES,
                }
            })
            .collect())
    }
}

fn geomean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp())
}

/// The tables: one per storage setting (cells `MB/s · req/s (× pool)`), then a summary of the
/// ratios to `pool` per storage and executor.
pub fn grids(report: &UringReport) -> Vec<Grid> {
    let depth = report.config.depth;
    let executors: Vec<Executor> = Executor::ALL.into_iter().filter(|e| report.records.iter().any(|r| r.executor == *e)).collect();
    let mut out = Vec::new();
    for s in report.storages.iter().filter(|s| s.skipped.is_none()) {
        let recs: Vec<&Record> = report.records.iter().filter(|r| r.storage == s.storage.name()).collect();
        let mut header: Vec<String> = ["N", "chunk", "pattern", "op"].map(String::from).to_vec();
        header.extend(executors.iter().map(|e| match e.requests_in_flight(depth) {
            1 => e.name().to_string(),
            d => format!("{} ({d} req)", e.name()),
        }));
        let mut rows = Vec::new();
        let mut keys: Vec<(usize, usize, Pattern, Op)> = Vec::new();
        for r in &recs {
            let k = (r.members, r.chunk_bytes, r.pattern, r.op);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        for (n, chunk, pattern, op) in keys {
            let at =
                |e: Executor| recs.iter().find(|r| (r.members, r.chunk_bytes, r.pattern, r.op, r.executor) == (n, chunk, pattern, op, e));
            let mut row = vec![
                n.to_string(),
                format!("{}{}", size_label(chunk as u64), if n * chunk < ENGINE_PARALLEL_MIN_BYTES { "†" } else { "" }),
                format!("{pattern:?}").to_lowercase(),
                format!("{op:?}").to_lowercase(),
            ];
            row.extend(executors.iter().map(|&e| match at(e) {
                None => "-".into(),
                Some(r) => {
                    let ratio =
                        if e == Executor::Pool { String::new() } else { r.vs_pool.map_or(String::new(), |x| format!(" ({x:.2}×)")) };
                    format!("{:.0} · {}{ratio}", r.mb_per_s, kilo(r.req_per_s))
                }
            }));
            rows.push(row);
        }
        out.push(Grid { title: format!("members on {}: MB/s · requests/s (× pool)", s.backing), header, rows });
    }
    let mut rows = Vec::new();
    for s in report.storages.iter().filter(|s| s.skipped.is_none()) {
        for &e in executors.iter().filter(|&&e| e != Executor::Pool) {
            let ratios: Vec<f64> =
                report.records.iter().filter(|r| r.storage == s.storage.name() && r.executor == e).filter_map(|r| r.vs_pool).collect();
            let big: Vec<f64> = report
                .records
                .iter()
                .filter(|r| r.storage == s.storage.name() && r.executor == e && !r.engine_in_line)
                .filter_map(|r| r.vs_pool)
                .collect();
            let fmt = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.2}×"));
            rows.push(vec![
                s.storage.name().to_string(),
                e.name().to_string(),
                fmt(geomean(&ratios)),
                fmt(geomean(&big)),
                fmt(ratios.iter().copied().reduce(f64::min)),
                fmt(ratios.iter().copied().reduce(f64::max)),
            ]);
        }
    }
    out.push(Grid {
        title: "Summary: each executor over pool, all points".into(),
        header: ["storage", "executor", "geomean", "geomean, requests ≥ 128K", "worst", "best"].map(String::from).to_vec(),
        rows,
    });
    out
}

fn kilo(x: f64) -> String {
    if x >= 1000.0 {
        format!("{:.1}k", x / 1000.0)
    } else {
        format!("{x:.0}")
    }
}

/// Notes printed under the tables.
pub fn footer(report: &UringReport) -> String {
    let mut s = String::new();
    if let Some(why) = &report.uring_unavailable {
        s.push_str(&format!("{why}: only pool, serial and pool-qd were measured.\n"));
    }
    for st in &report.storages {
        if let Some(why) = &st.skipped {
            s.push_str(&format!("{}: skipped: {why}\n", st.storage.name()));
        }
    }
    s.push_str(&format!(
        "pool = the request's N member ops on an {POOL_THREADS}-thread rayon pool (engine::parallel::run_all); serial = in line on the caller; \
         uring = the engine's executor (on O_DIRECT members: one ring per caller thread, N ops per submit_and_wait(N)); \
         uring-qd / pool-qd = {} requests in flight ({} caller threads through the engine's executor / sharing the pool).\n\
         † = N × chunk < 128 KiB: on buffered members the engine runs such a request in line (`serial`); on O_DIRECT members it uses the ring.\n\
         MB/s = 10^6 bytes/s over all members; requests/s counts array requests (member ops = N × that). Writes are not synced.\n",
        report.config.depth, report.config.depth
    ));
    s
}

/// Text tables and notes.
pub fn render(report: &UringReport, markdown: bool) -> String {
    let mut s = String::new();
    for g in grids(report) {
        s.push_str(&if markdown { g.markdown() } else { g.text() });
        s.push('\n');
    }
    s.push_str(&footer(report));
    s.push_str(&format!("wall time {:.1} s\n", report.wall_secs));
    s
}
