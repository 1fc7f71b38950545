//! Engine-level io_uring comparison: a RAID5 over 4 `O_DIRECT` members, the same requests
//! with the engine's io_uring member fan-out (default) and with `URAID_NO_IO_URING=1` (the
//! rayon pool). `uraid bench uring` measures member I/O alone; this measures what an array
//! request gains end to end (parity, stripe locks, bounce copies included).
//!
//! ```sh
//! cargo run --release -p uraid-engine --example uring_compare -- [--size 256M] [--time-ms 1500]
//!     [--rounds 3] [--threads 1,4] [--chunk 64K] [--storage files,loop] [--dir /tmp]
//! ```
//!
//! Storage: `files` = 4 files in `--dir` (must be a disk file system; tmpfs has no O_DIRECT
//! on older kernels and would measure memory copies); `loop` = loop devices over the same
//! files with `--direct-io=on` (root and losetup only; detached at the end). Each mode runs
//! in its own child process (io_uring's switch is read once per process), modes alternate
//! within each round, and the report gives the median over rounds of uring ÷ pool requests/s.
//! The array is created `--assume-clean` once; its files are filled first so no O_DIRECT
//! write allocates blocks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uraid_core::geometry::Level;
use uraid_engine::member::{IoMode, IoStats};
use uraid_engine::{Array, ArrayOptions, FileMember, Member};
use uraid_parity::testdata::Prng;

const MEMBERS: usize = 4;

/// (name, request bytes, random?, write?)
const WORKLOADS: [(&str, usize, bool, bool); 6] = [
    ("randread 4K", 4 << 10, true, false),
    ("randwrite 4K", 4 << 10, true, true),
    ("randread 64K", 64 << 10, true, false),
    ("randwrite 64K", 64 << 10, true, true),
    ("seqread 512K", 512 << 10, false, false),
    ("seqwrite 512K", 512 << 10, false, true),
];

fn parse_size(s: &str) -> u64 {
    let (num, mult) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 1 << 10),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 1 << 20),
        Some(b'G' | b'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().unwrap_or_else(|_| panic!("bad size {s}")) * mult
}

struct Opts {
    size: u64,
    time: Duration,
    rounds: usize,
    threads: Vec<usize>,
    chunk: u64,
    storage: Vec<String>,
    dir: PathBuf,
}

fn opts(args: &[String]) -> Opts {
    let mut o = Opts {
        size: 256 << 20,
        time: Duration::from_millis(1500),
        rounds: 3,
        threads: vec![1, 4],
        chunk: 64 << 10,
        storage: vec!["files".into(), "loop".into()],
        dir: std::env::temp_dir(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| panic!("{a} needs a value")).clone();
        match a.as_str() {
            "--size" => o.size = parse_size(&v()),
            "--time-ms" => o.time = Duration::from_millis(v().parse().expect("--time-ms")),
            "--rounds" => o.rounds = v().parse().expect("--rounds"),
            "--threads" => o.threads = v().split(',').map(|t| t.parse().expect("--threads")).collect(),
            "--chunk" => o.chunk = parse_size(&v()),
            "--storage" => o.storage = v().split(',').map(String::from).collect(),
            "--dir" => o.dir = PathBuf::from(v()),
            other => panic!("unknown option {other}"),
        }
    }
    o
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        return child(&args[1..]);
    }
    let o = opts(&args);
    let dir = tempfile::tempdir_in(&o.dir).expect("temp dir");
    let files: Vec<PathBuf> = (0..MEMBERS).map(|i| dir.path().join(format!("m{i}.img"))).collect();
    eprintln!("filling {MEMBERS} × {} MiB in {} …", o.size >> 20, dir.path().display());
    for f in &files {
        fill(f, o.size);
    }
    create(&files, o.size, o.chunk);
    let is_root = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0).unwrap_or(false);
    println!(
        "RAID5, {MEMBERS} O_DIRECT members of {} MiB, chunk {} KiB, {} ms per point, {} rounds; uring ÷ pool requests/s: median over rounds, and each round's ratio",
        o.size >> 20,
        o.chunk >> 10,
        o.time.as_millis(),
        o.rounds
    );
    for storage in &o.storage {
        let loops = match storage.as_str() {
            "files" => None,
            "loop" if !is_root => {
                println!("{storage}: skipped (needs root for losetup)");
                continue;
            }
            "loop" => match Loops::attach(&files) {
                Ok(l) => Some(l),
                Err(e) => {
                    println!("{storage}: skipped ({e})");
                    continue;
                }
            },
            other => panic!("unknown storage {other}"),
        };
        let devices = loops.as_ref().map_or(files.clone(), |l| l.0.clone());
        for &threads in &o.threads {
            // workload → per round (pool, uring) requests/s
            let mut rates: BTreeMap<usize, Vec<(f64, f64)>> = BTreeMap::new();
            for round in 0..o.rounds {
                let pool = run_child(&devices, threads, &o, true);
                let uring = run_child(&devices, threads, &o, false);
                for (i, (p, u)) in pool.iter().zip(&uring).enumerate() {
                    rates.entry(i).or_default().push((*p, *u));
                }
                eprintln!("{storage}, {threads} thread(s): round {} done", round + 1);
            }
            println!("\n{storage}, {threads} caller thread(s):");
            println!("{:<15} {:>12} {:>12} {:>8} {:>16}", "workload", "pool req/s", "uring req/s", "ratio", "per round");
            for (i, r) in &rates {
                let mut ratios: Vec<f64> = r.iter().map(|(p, u)| u / p).collect();
                let per_round = ratios.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(" ");
                ratios.sort_by(f64::total_cmp);
                let mut p: Vec<f64> = r.iter().map(|x| x.0).collect();
                let mut u: Vec<f64> = r.iter().map(|x| x.1).collect();
                p.sort_by(f64::total_cmp);
                u.sort_by(f64::total_cmp);
                println!(
                    "{:<15} {:>12.0} {:>12.0} {:>7.2}× {:>16}",
                    WORKLOADS[*i].0,
                    p[p.len() / 2],
                    u[u.len() / 2],
                    ratios[ratios.len() / 2],
                    per_round
                );
            }
        }
        drop(loops);
    }
}

/// Writes `size` bytes of data into `path` and syncs it (blocks allocated and written).
fn fill(path: &Path, size: u64) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).expect("create member file");
    let block = vec![0x6Bu8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n]).expect("fill");
        left -= n as u64;
    }
    f.sync_all().expect("sync");
}

/// A RAID5 over `files`, assumed clean (the parity of the filler is not right, which
/// does not matter for timing).
fn create(files: &[PathBuf], _size: u64, chunk: u64) {
    let members: Vec<Arc<dyn Member>> =
        files.iter().map(|f| Arc::new(FileMember::open_with(f, true, IoMode::Buffered).expect("open")) as Arc<dyn Member>).collect();
    let mut sketch = uraid_engine::create::ArraySketch::new(Level::Raid5, "bench");
    sketch.chunk_kib = (chunk / 1024) as u32;
    sketch.write(&members, &[]).expect("create");
    for m in members {
        m.flush().expect("flush");
    }
}

/// Loop devices with direct I/O over files; detached on drop.
struct Loops(Vec<PathBuf>);

impl Loops {
    fn attach(files: &[PathBuf]) -> Result<Loops, String> {
        let mut loops = Loops(Vec::new());
        for f in files {
            let out = Command::new("losetup")
                .args(["--find", "--show", "--direct-io=on"])
                .arg(f)
                .output()
                .map_err(|e| format!("losetup: {e}"))?;
            if !out.status.success() {
                return Err(format!("losetup: {}", String::from_utf8_lossy(&out.stderr).trim()));
            }
            loops.0.push(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
        }
        Ok(loops)
    }
}

impl Drop for Loops {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = Command::new("losetup").arg("-d").arg(d).status();
        }
    }
}

/// Runs every workload in a child process; requests/s per workload.
fn run_child(devices: &[PathBuf], threads: usize, o: &Opts, pool: bool) -> Vec<f64> {
    let mut cmd = Command::new(std::env::current_exe().expect("own path"));
    cmd.arg("--child")
        .arg(devices.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(","))
        .arg(threads.to_string())
        .arg(o.time.as_millis().to_string());
    if pool {
        cmd.env("URAID_NO_IO_URING", "1");
    } else {
        cmd.env_remove("URAID_NO_IO_URING");
    }
    let out = cmd.output().expect("child");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    text.lines().filter_map(|l| l.strip_prefix("RATE ")).map(|r| r.parse().expect("rate")).collect()
}

/// Child: assemble, run each workload for the given time on `threads` callers, print
/// `RATE <requests/s>` per workload, and check which path the member I/O took.
fn child(args: &[String]) {
    let devices: Vec<PathBuf> = args[0].split(',').map(PathBuf::from).collect();
    let threads: usize = args[1].parse().expect("threads");
    let time = Duration::from_millis(args[2].parse().expect("time"));
    let members: Vec<Arc<FileMember>> =
        devices.iter().map(|d| Arc::new(FileMember::open_with(d, true, IoMode::Direct).expect("O_DIRECT member"))).collect();
    let dyns: Vec<Arc<dyn Member>> = members.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
    let opts = ArrayOptions { writable: true, ..Default::default() };
    let (a, _) = Array::assemble(dyns, &opts).expect("assemble");
    let a = Arc::new(a);
    a.write(0, &[0u8; 4096]).expect("first write"); // marks the array active, outside the timing
    let size = a.size_bytes();
    for (w, &(_, block, random, write)) in WORKLOADS.iter().enumerate() {
        let done = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        std::thread::scope(|s| {
            for t in 0..threads {
                let (a, done) = (a.clone(), done.clone());
                s.spawn(move || {
                    let mut rng = Prng::new(((w * 64 + t) as u64) << 8 | 1);
                    let mut buf = rng.bytes(block);
                    let blocks = size / block as u64;
                    // Sequential callers each walk their own slice of the array.
                    let slice = blocks / threads as u64;
                    let mut next = slice * t as u64;
                    let mut n = 0u64;
                    while start.elapsed() < time {
                        let b = if random {
                            rng.below(blocks)
                        } else {
                            next += 1;
                            if next >= slice * (t as u64 + 1) {
                                next = slice * t as u64;
                            }
                            next
                        };
                        let off = b * block as u64;
                        if write {
                            a.write(off, &buf).expect("write");
                        } else {
                            a.read(off, &mut buf).expect("read");
                        }
                        n += 1;
                    }
                    done.fetch_add(n, Ordering::Relaxed);
                });
            }
        });
        let secs = start.elapsed().as_secs_f64();
        println!("RATE {}", done.load(Ordering::Relaxed) as f64 / secs);
    }
    a.flush().expect("flush");
    let stats: IoStats = members.iter().map(|m| m.io_stats()).sum();
    let pool = std::env::var_os("URAID_NO_IO_URING").is_some();
    eprintln!("{} member I/O: {stats:?}", if pool { "pool" } else { "uring" });
    assert!(stats.einval_fallbacks == 0, "{stats:?}");
    assert!(if pool { stats.uring == 0 } else { stats.uring > 0 }, "io_uring use does not match the mode: {stats:?}");
}
