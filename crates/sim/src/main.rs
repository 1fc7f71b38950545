//! `uraid-sim`: run one seed, a range of seeds, or seeds for a while.
//!
//! ```text
//! cargo run -p uraid-sim --release -- --seed 42 [--verbose]
//! cargo run -p uraid-sim --release -- --seeds 0..1000
//! cargo run -p uraid-sim --release -- --long [--duration 600] [--start N]
//! cargo run -p uraid-sim --release -- --quick ...   (the test suite's small episodes)
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};
use uraid_sim::{run_seed, Limits};

struct Args {
    seed: Option<u64>,
    seeds: Option<(u64, u64)>,
    long: bool,
    duration_s: u64,
    start: Option<u64>,
    verbose: bool,
    quick: bool,
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let s = s.replace('_', "");
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("{s}: {e}"))
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args { seed: None, seeds: None, long: false, duration_s: 300, start: None, verbose: false, quick: false };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--seed" => a.seed = Some(parse_u64(&value("--seed")?)?),
            "--seeds" => {
                let v = value("--seeds")?;
                let (lo, hi) = v.split_once("..").ok_or("--seeds takes A..B")?;
                a.seeds = Some((parse_u64(lo)?, parse_u64(hi)?));
            }
            "--long" => a.long = true,
            "--duration" => a.duration_s = parse_u64(value("--duration")?.trim_end_matches('s'))?,
            "--start" => a.start = Some(parse_u64(&value("--start")?)?),
            "--verbose" | "-v" => a.verbose = true,
            "--quick" => a.quick = true,
            "--help" | "-h" => {
                println!(
                    "uraid-sim --seed N [--verbose] | --seeds A..B | --long [--duration SECONDS] [--start N]\n\
                     --quick: the test suite's small episodes (levels 1/5/6/10, 2-3 MiB members)"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other} (try --help)")),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("uraid-sim: {e}");
            return ExitCode::from(2);
        }
    };
    let limits = if args.quick { Limits::quick() } else { Limits::full() };
    if let Some(seed) = args.seed {
        return match run_seed(seed, &limits, args.verbose) {
            Ok(o) => {
                println!(
                    "seed {seed} passed: {} ({} ops, {} crashes, {} refusals, {} faults, {} rebuilds, {} checks)",
                    o.config, o.ops, o.crashes, o.refusals, o.faults, o.rebuilds, o.checks
                );
                ExitCode::SUCCESS
            }
            Err(f) => {
                println!("{f}");
                ExitCode::FAILURE
            }
        };
    }
    let (start, end, deadline) = if let Some((lo, hi)) = args.seeds {
        (lo, hi, None)
    } else if args.long {
        // A fresh start each run covers new seeds; the start is printed so a run can be
        // repeated, and each failing seed is printed on its own anyway.
        let start = args.start.unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
        });
        println!("long run from seed {start} for {} s", args.duration_s);
        (start, u64::MAX, Some(Instant::now() + Duration::from_secs(args.duration_s)))
    } else {
        eprintln!("uraid-sim: give --seed N, --seeds A..B or --long (try --help)");
        return ExitCode::from(2);
    };
    let began = Instant::now();
    let (mut passed, mut failed) = (0u64, Vec::new());
    let (mut crashes, mut refusals, mut faults, mut rebuilds, mut replaces) = (0, 0, 0, 0, 0);
    let mut seed = start;
    while seed < end && deadline.is_none_or(|d| Instant::now() < d) {
        match run_seed(seed, &limits, args.verbose) {
            Ok(o) => {
                passed += 1;
                crashes += o.crashes;
                refusals += o.refusals;
                faults += o.faults;
                rebuilds += o.rebuilds;
                replaces += o.replaces;
            }
            Err(f) => {
                println!("{f}\n");
                failed.push(seed);
            }
        }
        seed = seed.wrapping_add(1);
    }
    println!(
        "{} seeds in {:.1} s: {passed} passed, {} failed; {crashes} crashes, {refusals} refused assemblies, {faults} faults, {rebuilds} rebuilds, {replaces} hot replaces",
        passed + failed.len() as u64,
        began.elapsed().as_secs_f64(),
        failed.len()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!("failing seeds: {failed:?}");
        for s in failed.iter().take(5) {
            println!("reproduce: cargo run -p uraid-sim --release -- --seed {s}{}", limits.cli_flags);
        }
        ExitCode::FAILURE
    }
}
