//! `uraid bench …`

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;
use uraid_bench::parity::{self, ParityBenchConfig};
use uraid_parity::Op;

/// With no subcommand: every workload below on RAID 0/1/5/6/10 and the peer, then a summary.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    workload: Option<Workload>,
    #[command(flatten)]
    suite: SuiteArgs,
}

#[derive(Subcommand)]
enum Workload {
    /// Every workload (what `uraid bench` runs with no subcommand).
    All(SuiteArgs),
    /// Sequential write then read, sweeping chunk size × request size.
    Seq(SuiteArgs),
    /// Random reads and writes, --jobs × --iodepth in flight, latency percentiles.
    Rand(SuiteArgs),
    /// 1..=N random readers while one writer appends small writes to ten "files".
    Mixed(SuiteArgs),
    /// iozone -t style: N jobs on own regions; write, rewrite, read, reread, random read/write.
    Throughput(SuiteArgs),
    /// seq and rand with one member failed (RAID6: two).
    Degraded(SuiteArgs),
    /// Rebuild onto a spare in a thread while random reads run: rebuild time, latency.
    Rebuild(SuiteArgs),
    /// Ratios of the matching measurements of two JSON reports (B over A).
    Compare(CompareArgs),
    /// Per level: stripe-aligned ~1 MiB seq write/read, degraded read, recovery onto a spare,
    /// each against a plain file (the engine targets in README).
    Array(ArrayArgs),
    /// Workloads on emulated disks (`--disks hdd|ssd|nvme|RATE[:LATENCY]`), each as a
    /// fraction of its level's bound; `--ten-disk` reproduces md's 10-disk experiment.
    Disks(DisksArgs),
    /// Parity kernels per operation and stripe shape, warm and cold, against ISA-L and memcpy.
    Parity(ParityArgs),
    /// The same fio jobs in-process, through NBD, through the FUSE file and on a plain file.
    Exports(ExportsArgs),
    /// A reshape (more members, or another chunk) against its bound: reading the old shape
    /// and writing the new one at the members' speed; 4K read latency during it.
    Reshape(ReshapeArgs),
    /// Member I/O of one request: rayon pool (the engine's) vs serial vs io_uring, on tmpfs,
    /// O_DIRECT files and loop devices (docs/BENCH.md, "io_uring: where it pays off").
    Uring(UringArgs),
}

/// One array of a bench: where, which level, how many members, chunk and size.
#[derive(Args, Clone)]
struct OneArrayArgs {
    /// Folder for the member files (default: a new folder in /dev/shm if it is tmpfs, else
    /// in the system temp dir).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// RAID level.
    #[arg(long, default_value = "5")]
    level: String,
    /// Members.
    #[arg(long, default_value_t = 4)]
    members: usize,
    /// Chunk size.
    #[arg(long, default_value = "64K")]
    chunk: String,
    /// Array size (the region the workload covers).
    #[arg(long, default_value = "256M")]
    size: String,
}

#[derive(Args, Clone)]
struct ReshapeArgs {
    /// The array before the reshape (level 4, 5 or 6).
    #[command(flatten)]
    array: OneArrayArgs,
    /// Members after the reshape (default: one more), unless --to-chunk is given.
    #[arg(long)]
    to_members: Option<u32>,
    /// Chunk after the reshape (a chunk change with the same members).
    #[arg(long)]
    to_chunk: Option<String>,
    /// Print one JSON record and nothing else on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Clone)]
struct DisksArgs {
    /// Disk profile: hdd (180 MB/s, 8 ms, one head), ssd (500 MB/s, 0.1 ms, 4 queues), nvme
    /// (2 GB/s, 20 µs, 8 queues), or RATE[:LATENCY] with one queue, e.g. 150M:4ms.
    #[arg(long, default_value = "hdd")]
    disks: String,
    /// Levels (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = ["0".to_string(), "5".into(), "6".into()])]
    levels: Vec<String>,
    /// Disks per array.
    #[arg(long, default_value_t = 4)]
    members: usize,
    /// Chunk size.
    #[arg(long, default_value = "64K")]
    chunk: String,
    /// Bytes per disk, held in memory (default 128M; 256M with --ten-disk, whose requests
    /// are 64 MiB). Sequential workloads cover the whole array once; on smaller disks they
    /// are a few requests long and the start and end of the stream weigh.
    #[arg(long)]
    disk_size: Option<String>,
    /// 4 KiB random writes per random point.
    #[arg(long, default_value_t = 800)]
    random_writes: usize,
    /// Random writes in flight.
    #[arg(long, default_value_t = 32)]
    threads: usize,
    /// Sequential requests in flight (one stream, as fio's iodepth).
    #[arg(long, default_value_t = 2)]
    seq_depth: usize,
    /// Instead: md's 10-disk experiment (RAID0 and RAID6 sequential write, RAID6 check) on
    /// disks of this profile, scaled to what this machine carries (default 50M:8ms).
    #[arg(long, num_args = 0..=1, default_missing_value = "50M:8ms")]
    ten_disk: Option<String>,
    /// Print one JSON document and nothing else on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Clone)]
struct UringArgs {
    /// Storage settings: tmpfs (buffered), direct (O_DIRECT files), loop (loop devices, root).
    #[arg(long, value_delimiter = ',', default_values_t = ["tmpfs".to_string(), "direct".into(), "loop".into()])]
    storage: Vec<String>,
    /// Folder on tmpfs for the tmpfs setting.
    #[arg(long, default_value = "/dev/shm")]
    shm_dir: std::path::PathBuf,
    /// Folder on a disk filesystem for the direct and loop settings (default: the temp dir).
    #[arg(long)]
    direct_dir: Option<std::path::PathBuf>,
    /// Member counts (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [4usize, 8])]
    members: Vec<usize>,
    /// Chunk sizes: the bytes each request moves per member.
    #[arg(long, value_delimiter = ',', default_values_t = ["4K".to_string(), "64K".into(), "512K".into()])]
    chunks: Vec<String>,
    /// Size of each member file.
    #[arg(long, default_value = "256M")]
    size: String,
    /// Milliseconds per executor and point (split over two interleaved rounds).
    #[arg(long, default_value_t = 100)]
    time_ms: u64,
    /// Requests in flight for uring-qd and pool-qd.
    #[arg(long, default_value_t = 4)]
    depth: usize,
    /// Print the tables as Markdown.
    #[arg(long)]
    markdown: bool,
    /// Print one JSON document and nothing else on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Clone)]
struct ExportsArgs {
    #[command(flatten)]
    array: OneArrayArgs,
    /// Seconds per job.
    #[arg(long, default_value_t = 3)]
    seconds: u64,
    /// Print one JSON array of records and nothing else on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Clone)]
struct ArrayArgs {
    /// Folder for the member files (default: a new folder in /dev/shm if it is tmpfs, else
    /// in the system temp dir).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Levels to compare (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = ["0".to_string(), "1".into(), "5".into(), "6".into(), "10".into()])]
    levels: Vec<String>,
    /// Members per array (raised to a level's minimum).
    #[arg(long, default_value_t = 4)]
    members: usize,
    /// Chunk size.
    #[arg(long, default_value = "64K")]
    chunk: String,
    /// Bytes each workload moves.
    #[arg(long, default_value = "256M")]
    size: String,
    /// Only these workloads: seq-write, seq-read, degraded-read, recovery.
    #[arg(long, value_delimiter = ',')]
    workloads: Vec<String>,
    /// Print one JSON array of records and nothing else on stdout.
    #[arg(long)]
    json: bool,
}

impl Default for ArrayArgs {
    fn default() -> Self {
        ArrayArgs {
            dir: None,
            levels: ["0", "1", "5", "6", "10"].map(String::from).to_vec(),
            members: 4,
            chunk: "64K".into(),
            size: "256M".into(),
            workloads: vec![],
            json: false,
        }
    }
}

#[derive(Args, Clone)]
struct SuiteArgs {
    /// Folder for the member files (default: a new folder in /dev/shm if it is tmpfs, else
    /// in the system temp dir).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Run the peer workloads on this file or block device instead of a new plain file.
    /// Its contents are OVERWRITTEN.
    #[arg(long)]
    target: Option<std::path::PathBuf>,
    /// Skip the peer.
    #[arg(long)]
    no_peer: bool,
    /// Levels to compare (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = ["0".to_string(), "1".into(), "5".into(), "6".into(), "10".into()])]
    levels: Vec<String>,
    /// Members per array (raised to a level's minimum).
    #[arg(long, default_value_t = 4)]
    members: usize,
    /// Chunk of the arrays (mdadm's default); seq also sweeps --seq-chunks.
    #[arg(long, default_value = "512K")]
    chunk: String,
    /// Bytes of array (and peer) the workloads spread over; written once before measuring.
    #[arg(long, default_value = "256M")]
    size: String,
    /// Milliseconds per measured point (a sequential pass also stops at the region's end).
    #[arg(long, default_value_t = 400)]
    time_ms: u64,
    /// seq: chunk sizes to sweep (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = ["64K".to_string(), "512K".into()])]
    seq_chunks: Vec<String>,
    /// seq: request sizes to sweep (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = ["4K".to_string(), "64K".into(), "1M".into()])]
    seq_blocks: Vec<String>,
    /// rand/degraded/rebuild: request size.
    #[arg(long, default_value = "4K")]
    block: String,
    /// Jobs (threads) for rand and throughput.
    #[arg(long, default_value_t = 2)]
    jobs: usize,
    /// Requests each job keeps outstanding (the engine is synchronous: carried by threads,
    /// jobs × iodepth in all).
    #[arg(long, default_value_t = 2)]
    iodepth: usize,
    /// mixed: up to this many concurrent readers.
    #[arg(long, default_value_t = 5)]
    readers: usize,
    /// mixed: read sizes to sweep (comma-separated), e.g. 16K,64K,256K,1M,5M.
    #[arg(long, value_delimiter = ',', default_values_t = ["1M".to_string()])]
    read_sizes: Vec<String>,
    /// mixed: the writer's append size and milliseconds between appends.
    #[arg(long, default_value = "16K")]
    append_size: String,
    #[arg(long, default_value_t = 100)]
    append_interval_ms: u64,
    /// throughput: bytes per job and record size.
    #[arg(long, default_value = "32M")]
    job_size: String,
    #[arg(long, default_value = "64K")]
    record: String,
    /// Write report.json, measurements.csv, plots (PNG+SVG), fio jobs and index.html here.
    #[arg(long)]
    report: Option<std::path::PathBuf>,
    /// Print the JSON report only (no progress, no tables).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct CompareArgs {
    /// Baseline report (report.json or `--json` output).
    a: std::path::PathBuf,
    /// Report compared with it.
    b: std::path::PathBuf,
}

#[derive(Args)]
struct ParityArgs {
    /// Print one JSON array of records and nothing else on stdout.
    #[arg(long)]
    json: bool,
    /// Milliseconds per measurement point.
    #[arg(long, default_value_t = 25)]
    time_ms: u64,
    /// Data blocks per stripe (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [4usize, 8, 10])]
    data_blocks: Vec<usize>,
    /// Block sizes in bytes (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [4096usize, 65536])]
    block_bytes: Vec<usize>,
    /// Working set of the cold runs in MiB (0 skips them).
    #[arg(long, default_value_t = 256)]
    cold_mib: usize,
    /// Only these kernels (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    kernels: Vec<String>,
    /// Only these operations: gen_p, gen_pq, update_pq, recov_2data, recov_datap, recov_dataq.
    #[arg(long, value_delimiter = ',')]
    ops: Vec<String>,
}

pub fn run(args: BenchArgs) -> Result<ExitCode> {
    use uraid_bench::suite::Workload as W;
    match args.workload {
        Some(Workload::Parity(p)) => run_parity(p),
        Some(Workload::Array(a)) => run_array(a),
        Some(Workload::Disks(a)) => run_disks(a),
        Some(Workload::Exports(a)) => run_exports(a),
        Some(Workload::Uring(a)) => run_uring(a),
        Some(Workload::Reshape(a)) => run_reshape(a),
        Some(Workload::Compare(c)) => run_compare(c),
        Some(Workload::All(s)) => run_suite(s, &W::ALL),
        Some(Workload::Seq(s)) => run_suite(s, &[W::Seq]),
        Some(Workload::Rand(s)) => run_suite(s, &[W::Rand]),
        Some(Workload::Mixed(s)) => run_suite(s, &[W::Mixed]),
        Some(Workload::Throughput(s)) => run_suite(s, &[W::Throughput]),
        Some(Workload::Degraded(s)) => run_suite(s, &[W::Degraded]),
        Some(Workload::Rebuild(s)) => run_suite(s, &[W::Rebuild]),
        None => run_suite(args.suite, &W::ALL),
    }
}

fn run_reshape(a: ReshapeArgs) -> Result<ExitCode> {
    use uraid_core::metadata::grow::GrowRequest;
    let dir = bench_dir(&a.array.dir)?;
    let level = crate::cmd::create::parse_level(&a.array.level)?;
    let chunk_bytes = u32::try_from(crate::util::parse_size(&a.array.chunk)?)?;
    let change = match (&a.to_chunk, a.to_members) {
        (Some(c), _) => GrowRequest { chunk_sectors: Some(u32::try_from(crate::util::parse_size(c)? / 512)?), ..Default::default() },
        (None, m) => GrowRequest { raid_disks: Some(m.unwrap_or(a.array.members as u32 + 1)), ..Default::default() },
    };
    let cfg = uraid_bench::reshape::ReshapeBenchConfig {
        dir: dir.path().to_path_buf(),
        level,
        members: a.array.members,
        chunk_bytes,
        data_bytes: crate::util::parse_size(&a.array.size)?,
        change,
    };
    let quiet = a.json;
    let r = uraid_bench::reshape::run(&cfg, &mut |m| {
        if !quiet {
            eprintln!("bench reshape: {m}");
        }
    })
    .map_err(anyhow::Error::msg)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
    let p99 = |l: &Option<uraid_bench::stats::Latency>| l.as_ref().map_or("-".to_string(), |l| format!("{:.0} µs", l.p99_us));
    println!("{} {}: {} MiB -> {} MiB", r.level, r.change, r.array_bytes_before >> 20, r.array_bytes_after >> 20);
    println!("  reshape      {:>8.2} s  {:>8.1} MB/s of new-shape array", r.seconds, r.mb_per_s);
    println!("  bound        {:>8.2} s  (read old + write new on every member at once, same folder)", r.bound_seconds);
    println!("  ratio        {:>8.2}    (bound / reshape; 1.0 = the members' speed)", r.ratio);
    println!("  4K read p99  {} idle, {} while reshaping", p99(&r.read_idle), p99(&r.read_reshaping));
    Ok(ExitCode::SUCCESS)
}

fn sizes(v: &[String]) -> Result<Vec<u64>> {
    v.iter().map(|s| crate::util::parse_size(s)).collect()
}

fn bench_dir(dir: &Option<std::path::PathBuf>) -> Result<tempfile::TempDir> {
    let base = match dir {
        Some(d) => d.clone(),
        None if std::path::Path::new("/dev/shm").is_dir() => "/dev/shm".into(),
        None => std::env::temp_dir(),
    };
    Ok(tempfile::Builder::new().prefix("uraid-bench").tempdir_in(&base)?)
}

fn run_suite(a: SuiteArgs, workloads: &[uraid_bench::suite::Workload]) -> Result<ExitCode> {
    use uraid_bench::machine::{parity_kernels, Backing, Machine};
    use uraid_bench::suite::{self, SuiteConfig};
    let wall = std::time::Instant::now();
    let started_unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let tmp = bench_dir(&a.dir)?;
    let mut cfg = SuiteConfig::defaults(tmp.path().to_path_buf());
    cfg.target = a.target.clone();
    cfg.peer = !a.no_peer;
    cfg.levels = a.levels.iter().map(|l| crate::cmd::create::parse_level(l)).collect::<Result<Vec<_>>>()?;
    cfg.members = a.members;
    cfg.chunk_bytes = u32::try_from(crate::util::parse_size(&a.chunk)?)?;
    cfg.region_bytes = crate::util::parse_size(&a.size)?;
    cfg.workloads = workloads.to_vec();
    cfg.time_per_point = Duration::from_millis(a.time_ms.max(1));
    cfg.seq_chunks = sizes(&a.seq_chunks)?.into_iter().map(u32::try_from).collect::<Result<_, _>>()?;
    cfg.seq_blocks = sizes(&a.seq_blocks)?;
    cfg.rand_block = crate::util::parse_size(&a.block)?;
    cfg.jobs = a.jobs.max(1);
    cfg.iodepth = a.iodepth.max(1);
    cfg.mixed_max_readers = a.readers.max(1);
    cfg.mixed_read_sizes = sizes(&a.read_sizes)?;
    cfg.mixed_append_bytes = crate::util::parse_size(&a.append_size)?;
    cfg.mixed_append_interval = Duration::from_millis(a.append_interval_ms);
    cfg.tp_bytes_per_job = crate::util::parse_size(&a.job_size)?;
    cfg.tp_record = crate::util::parse_size(&a.record)?;
    for (what, v) in [("--block", cfg.rand_block), ("--record", cfg.tp_record), ("--append-size", cfg.mixed_append_bytes)]
        .into_iter()
        .chain(cfg.seq_blocks.iter().map(|b| ("--seq-blocks", *b)))
        .chain(cfg.mixed_read_sizes.iter().map(|b| ("--read-sizes", *b)))
    {
        if v == 0 || v % 512 != 0 || v > cfg.region_bytes / 4 {
            bail!("{what} {v}: must be a non-zero multiple of 512 and at most a quarter of --size");
        }
    }
    let machine = Machine::probe();
    let peer = match &cfg.target {
        Some(p) => format!("{} (given with --target)", p.display()),
        None if cfg.peer => "one plain file next to the members".into(),
        None => "none (--no-peer)".into(),
    };
    let backing = Backing::describe(tmp.path(), cfg.region_bytes * 2, machine.mem_total_mib, peer);
    let quiet = a.json;
    let tty = std::io::stderr().is_terminal();
    // Choose parity kernels now, so the start-up measurement is not timed as array I/O.
    let kernels = parity_kernels();
    if !quiet {
        eprintln!(
            "uraid bench: {} in {} ({})",
            workloads.iter().map(|w| w.name()).collect::<Vec<_>>().join(","),
            tmp.path().display(),
            backing.fs_type
        );
    }
    let res = suite::run(&cfg, &mut |line| {
        if !quiet {
            let t = wall.elapsed().as_secs_f64();
            if tty {
                eprint!("\r\x1b[K[{t:5.1}s] {line}");
            } else {
                eprintln!("[{t:5.1}s] {line}");
            }
        }
    })
    .map_err(|e| anyhow::anyhow!(e))?;
    if !quiet && tty {
        eprint!("\r\x1b[K");
    }
    let report = uraid_bench::report::Report {
        schema: uraid_bench::report::SCHEMA,
        uraid_version: env!("CARGO_PKG_VERSION").into(),
        started_unix,
        wall_secs: wall.elapsed().as_secs_f64(),
        machine,
        backing,
        parity_kernels: kernels,
        config: cfg.record(),
        measurements: res.measurements,
        rebuild_timelines: res.timelines,
    };
    if let Some(dir) = &a.report {
        let plots = report.write_dir(dir).map_err(|e| anyhow::anyhow!(e))?;
        if !quiet {
            eprintln!("report: {} ({} plots, index.html)", dir.display(), plots.len());
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.text());
    }
    Ok(ExitCode::SUCCESS)
}

fn run_compare(c: CompareArgs) -> Result<ExitCode> {
    let load = |p: &std::path::Path| -> Result<uraid_bench::report::Report> {
        let text = std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: not a uraid bench report: {e}", p.display()))
    };
    let (a, b) = (load(&c.a)?, load(&c.b)?);
    print!("{}", uraid_bench::report::compare(&a, &b).map_err(|e| anyhow::anyhow!(e))?);
    Ok(ExitCode::SUCCESS)
}

/// Progress of a long bench on stderr: one line rewritten in place on a terminal, plain
/// lines otherwise, nothing in --json mode.
struct StatusLine {
    what: &'static str,
    quiet: bool,
    tty: bool,
}

impl StatusLine {
    fn new(what: &'static str, quiet: bool) -> StatusLine {
        StatusLine { what, quiet, tty: std::io::stderr().is_terminal() }
    }
    fn show(&self, line: &str) {
        match (self.quiet, self.tty) {
            (true, _) => {}
            (false, true) => eprint!("\r\x1b[K{} {line}", self.what),
            (false, false) => eprintln!("{} {line}", self.what),
        }
    }
    fn done(&self) {
        if !self.quiet && self.tty {
            eprintln!();
        }
    }
}

fn run_exports(a: ExportsArgs) -> Result<ExitCode> {
    let tmp = bench_dir(&a.array.dir)?;
    let cfg = uraid_bench::exports::ExportsConfig {
        dir: tmp.path().to_path_buf(),
        level: crate::cmd::create::parse_level(&a.array.level)?,
        members: a.array.members,
        chunk_bytes: u32::try_from(crate::util::parse_size(&a.array.chunk)?)?,
        region_bytes: crate::util::parse_size(&a.array.size)?,
        time: Duration::from_secs(a.seconds),
    };
    uraid_parity::selection();
    let status = StatusLine::new("bench exports", a.json);
    let records = uraid_bench::exports::run(&cfg, &mut |line| status.show(line)).map_err(|e| anyhow::anyhow!(e))?;
    status.done();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&records)?);
    } else {
        print!("{}", uraid_bench::exports::render(&records, &uraid_bench::exports::describe(tmp.path())));
    }
    Ok(ExitCode::SUCCESS)
}

fn run_uring(a: UringArgs) -> Result<ExitCode> {
    use uraid_bench::uring;
    let cfg = uring::UringBenchConfig {
        storages: a.storage.iter().map(|s| uring::Storage::parse(s)).collect::<Result<_, _>>().map_err(|e| anyhow::anyhow!(e))?,
        shm_dir: a.shm_dir,
        direct_dir: a.direct_dir.unwrap_or_else(std::env::temp_dir),
        members: a.members,
        chunks: sizes(&a.chunks)?.into_iter().map(usize::try_from).collect::<Result<_, _>>()?,
        file_bytes: crate::util::parse_size(&a.size)?,
        time: Duration::from_millis(a.time_ms),
        depth: a.depth,
        ..Default::default()
    };
    let status = StatusLine::new("bench uring", a.json);
    let report = uring::run(&cfg, &mut |line| status.show(line)).map_err(|e| anyhow::anyhow!(e))?;
    status.done();
    if let Some(why) = report.uring_unavailable.as_ref().filter(|_| !a.json) {
        eprintln!("{why}");
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", uring::render(&report, a.markdown));
    }
    Ok(ExitCode::SUCCESS)
}

fn run_array(a: ArrayArgs) -> Result<ExitCode> {
    let levels = a.levels.iter().map(|l| crate::cmd::create::parse_level(l)).collect::<Result<Vec<_>>>()?;
    let chunk = u32::try_from(crate::util::parse_size(&a.chunk)?)?;
    let size = crate::util::parse_size(&a.size)?;
    let tmp = bench_dir(&a.dir)?;
    let backing = format!("{} ({})", uraid_bench::machine::fs_type(tmp.path()), tmp.path().display());
    let cfg = uraid_bench::array::ArrayBenchConfig {
        dir: tmp.path().to_path_buf(),
        levels,
        members: a.members,
        chunk_bytes: chunk,
        data_bytes: size,
        workloads: a.workloads.clone(),
    };
    // Choose parity kernels now, so the start-up measurement is not timed as array I/O.
    uraid_parity::selection();
    let status = StatusLine::new("bench array", a.json);
    let records = uraid_bench::array::run(&cfg, &mut |line| status.show(line)).map_err(|e| anyhow::anyhow!(e))?;
    status.done();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&records)?);
    } else {
        print!("{}", uraid_bench::array::render(&records, &backing));
    }
    Ok(ExitCode::SUCCESS)
}

fn run_disks(a: DisksArgs) -> Result<ExitCode> {
    use uraid_bench::disks;
    uraid_parity::selection();
    let default_size = if a.ten_disk.is_some() { "256M" } else { "128M" };
    let disk_bytes = usize::try_from(crate::util::parse_size(a.disk_size.as_deref().unwrap_or(default_size))?)?;
    let status = StatusLine::new("bench disks", a.json);
    if let Some(profile) = &a.ten_disk {
        let p = disks::DiskProfile::parse(profile).map_err(|e| anyhow::anyhow!(e))?;
        let (records, ratio) =
            disks::ten_disk_experiment(p, disk_bytes, a.seq_depth, &mut |line| status.show(line)).map_err(|e| anyhow::anyhow!(e))?;
        status.done();
        if a.json {
            println!(
                "{}",
                serde_json::json!({ "profile": profile, "records": records, "raid6_over_raid0_write": ratio, "md_raid6_over_raid0_write": 0.61 })
            );
        } else {
            print!("{}", disks::render(&records, profile));
            println!("RAID6/RAID0 sequential write: {ratio:.2} (md on 10 × 7200 rpm disks: 1.1/1.8 GB/s = 0.61)");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let cfg = disks::DisksConfig {
        profile: disks::DiskProfile::parse(&a.disks).map_err(|e| anyhow::anyhow!(e))?,
        levels: a.levels.iter().map(|l| crate::cmd::create::parse_level(l)).collect::<Result<Vec<_>>>()?,
        disks: a.members,
        chunk: u32::try_from(crate::util::parse_size(&a.chunk)?)?,
        disk_bytes,
        random_writes: a.random_writes,
        threads: a.threads.max(1),
        seq_depth: a.seq_depth.max(1),
    };
    let records = disks::run(&cfg, &mut |line| status.show(line)).map_err(|e| anyhow::anyhow!(e))?;
    status.done();
    if a.json {
        println!("{}", serde_json::json!({ "profile": a.disks, "records": records }));
    } else {
        print!("{}", disks::render(&records, &a.disks));
    }
    Ok(ExitCode::SUCCESS)
}

fn run_parity(a: ParityArgs) -> Result<ExitCode> {
    for &n in &a.data_blocks {
        if !(2..=32).contains(&n) {
            bail!("--data-blocks {n}: the bench supports 2..=32 data blocks");
        }
    }
    for &b in &a.block_bytes {
        if b == 0 || b % 64 != 0 {
            bail!("--block-bytes {b}: must be a non-zero multiple of 64 (ISA-L's requirement)");
        }
    }
    let ops = if a.ops.is_empty() {
        Op::ALL.to_vec()
    } else {
        a.ops
            .iter()
            .map(|name| Op::ALL.iter().copied().find(|o| o.name() == name).ok_or_else(|| anyhow::anyhow!("unknown op {name}")))
            .collect::<Result<_>>()?
    };
    let cfg = ParityBenchConfig {
        data_blocks: a.data_blocks,
        block_bytes: a.block_bytes,
        cold_working_set_bytes: a.cold_mib << 20,
        time_per_point: Duration::from_millis(a.time_ms),
        kernels: a.kernels,
        ops,
    };
    let quiet = a.json;
    if !quiet {
        for line in uraid_parity::selection().log_lines() {
            eprintln!("{line}");
        }
        match uraid_bench::isal::isal() {
            Ok(_) => eprintln!("peer: ISA-L loaded (libisal.so.2)"),
            Err(why) => eprintln!("peer: {why}"),
        }
    }
    let status = StatusLine::new("bench parity", quiet);
    let records = parity::run(&cfg, &mut |line| status.show(line));
    status.done();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&records)?);
    } else {
        print!("{}", parity::render(&records, cfg.cold_working_set_bytes));
        println!("* = kernel chosen at start-up for that operation; MB/s = 10^6 data bytes per second.");
    }
    Ok(ExitCode::SUCCESS)
}
