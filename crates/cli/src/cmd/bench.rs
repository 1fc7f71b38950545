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
    /// Parity kernels per operation and stripe shape, warm and cold, against ISA-L and memcpy.
    Parity(ParityArgs),
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
        // Until the array engine lands, the default bench is the parity bench.
        None => run_parity(ParityArgs {
            json: false,
            time_ms: 25,
            data_blocks: vec![4, 8, 10],
            block_bytes: vec![4096, 65536],
            cold_mib: 256,
            kernels: vec![],
            ops: vec![],
        }),
    }
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
