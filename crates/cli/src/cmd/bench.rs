//! `uraid bench …`

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;
use uraid_bench::parity::{self, ParityBenchConfig};
use uraid_parity::Op;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    workload: Option<Workload>,
}

#[derive(Subcommand)]
enum Workload {
    /// In-process arrays over file-backed members: sequential write/read, degraded read,
    /// recovery, each against the same work on one plain file (the default workload).
    Array(ArrayArgs),
    /// Parity kernels per operation and stripe shape, warm and cold, against ISA-L and memcpy.
    Parity(ParityArgs),
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
    match args.workload {
        Some(Workload::Parity(p)) => run_parity(p),
        Some(Workload::Array(a)) => run_array(a),
        None => run_array(ArrayArgs::default()),
    }
}

fn run_array(a: ArrayArgs) -> Result<ExitCode> {
    let levels = a.levels.iter().map(|l| crate::cmd::create::parse_level(l)).collect::<Result<Vec<_>>>()?;
    let chunk = u32::try_from(crate::util::parse_size(&a.chunk)?)?;
    let size = crate::util::parse_size(&a.size)?;
    let base = match &a.dir {
        Some(d) => d.clone(),
        None if std::path::Path::new("/dev/shm").is_dir() => "/dev/shm".into(),
        None => std::env::temp_dir(),
    };
    let tmp = tempfile::Builder::new().prefix("uraid-bench").tempdir_in(&base)?;
    let backing = describe_backing(tmp.path());
    let cfg = uraid_bench::array::ArrayBenchConfig {
        dir: tmp.path().to_path_buf(),
        levels,
        members: a.members,
        chunk_bytes: chunk,
        data_bytes: size,
        workloads: a.workloads.clone(),
    };
    let quiet = a.json;
    let tty = std::io::stderr().is_terminal();
    // Choose parity kernels now, so the start-up measurement is not timed as array I/O.
    uraid_parity::selection();
    let records = uraid_bench::array::run(&cfg, &mut |line| {
        if !quiet {
            if tty {
                eprint!("\r\x1b[Kbench array {line}");
            } else {
                eprintln!("bench array {line}");
            }
        }
    })
    .map_err(|e| anyhow::anyhow!(e))?;
    if !quiet && tty {
        eprintln!();
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&records)?);
    } else {
        print!("{}", uraid_bench::array::render(&records, &backing));
    }
    Ok(ExitCode::SUCCESS)
}

/// "tmpfs (/dev/shm/…)" or the filesystem type, for the report.
fn describe_backing(dir: &std::path::Path) -> String {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let d = dir.display().to_string();
    let best = mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && d.starts_with(f[1])).then(|| (f[1].len(), f[2].to_string()))
        })
        .max();
    format!("{} ({d})", best.map_or("unknown".into(), |b| b.1))
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
            .map(|name| {
                Op::ALL.iter().copied().find(|o| o.name() == name).ok_or_else(|| anyhow::anyhow!("unknown op {name}"))
            })
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
    let tty = std::io::stderr().is_terminal();
    if !quiet {
        for line in uraid_parity::selection().log_lines() {
            eprintln!("{line}");
        }
        match uraid_bench::isal::isal() {
            Ok(_) => eprintln!("peer: ISA-L loaded (libisal.so.2)"),
            Err(why) => eprintln!("peer: {why}"),
        }
    }
    let records = parity::run(&cfg, &mut |line| {
        if !quiet {
            if tty {
                eprint!("\r\x1b[Kbench parity {line}");
            } else {
                eprintln!("bench parity {line}");
            }
        }
    });
    if !quiet && tty {
        eprintln!();
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&records)?);
    } else {
        print!("{}", parity::render(&records, cfg.cold_working_set_bytes));
        println!("* = kernel chosen at start-up for that operation; MB/s = 10^6 data bytes per second.");
    }
    Ok(ExitCode::SUCCESS)
}
