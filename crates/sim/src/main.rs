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
    concurrent: bool,
    clients: Option<usize>,
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
    let mut a = Args {
        seed: None,
        seeds: None,
        long: false,
        duration_s: 300,
        start: None,
        verbose: false,
        quick: false,
        concurrent: false,
        clients: None,
    };
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
            "--concurrent" => a.concurrent = true,
            "--clients" => a.clients = Some(parse_u64(&value("--clients")?)? as usize),
            "--help" | "-h" => {
                println!(
                    "uraid-sim --seed N [--verbose] | --seeds A..B | --long [--duration SECONDS] [--start N]\n\
                     --quick: the test suite's small episodes (levels 1/5/6/10, 2-3 MiB members)\n\
                     --concurrent [--clients N]: concurrent episodes (N clients, default 8, plus a cleaner and a job thread)"
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
    if args.concurrent {
        return concurrent_main(&args);
    }
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
    let Some((start, end, deadline)) = seed_range(&args, "") else {
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
    verdict(&failed, |s| format!("cargo run -p uraid-sim --release -- --seed {s}{}", limits.cli_flags))
}

/// `--concurrent`: the same seed selection, concurrent episodes.
fn concurrent_main(args: &Args) -> ExitCode {
    let mut limits = uraid_sim::ConcurrentLimits::default();
    if let Some(c) = args.clients {
        limits.clients = c.max(1);
    }
    let single = args.seed.map(|s| (s, s + 1, None));
    let Some((start, end, deadline)) = single.or_else(|| seed_range(args, "concurrent ")) else {
        return ExitCode::from(2);
    };
    let began = Instant::now();
    let (mut passed, mut failed) = (0u64, Vec::new());
    let (mut ops, mut ticks, mut crashes, mut member_failures, mut checks, mut max_in_flight) = (0u64, 0u64, 0u64, 0u64, 0u64, 0usize);
    let (mut replaces, mut reshapes, mut reshapes_faulted, mut reshapes_refused) = (0u64, 0u64, 0u64, 0u64);
    let (mut shrinks, mut raid10_reshapes, mut raid10_bitmap_resizes, mut in_place, mut hot_adds) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut latent_episodes, mut corrected) = (0u64, 0u64);
    let (mut unwritable_episodes, mut listed) = (0u64, 0u64);
    let mut seed = start;
    while seed < end && deadline.is_none_or(|d| Instant::now() < d) {
        match uraid_sim::run_concurrent_seed(seed, &limits) {
            Ok(o) => {
                passed += 1;
                ops += o.ops;
                ticks += o.ticks;
                crashes += o.crashed as u64;
                member_failures += o.member_failed as u64;
                checks += o.checks;
                replaces += o.replaced as u64;
                hot_adds += o.hot_added as u64;
                reshapes += o.reshaped as u64;
                shrinks += o.shrunk as u64;
                raid10_reshapes += o.raid10_reshaped as u64;
                raid10_bitmap_resizes += o.raid10_bitmap_resized as u64;
                in_place += o.in_place_reshaped as u64;
                reshapes_faulted += (o.reshaped && o.reshape_faulted) as u64;
                reshapes_refused += o.reshape_refused as u64;
                latent_episodes += o.latent_sectors as u64;
                corrected += o.read_errors_corrected;
                unwritable_episodes += o.unwritable_sectors as u64;
                listed += o.listed_ranges;
                max_in_flight = max_in_flight.max(o.max_in_flight);
                if args.verbose || args.seed.is_some() {
                    println!("seed {seed} passed: {} ({} ops, {} ticks, max in flight {})", o.config, o.ops, o.ticks, o.max_in_flight);
                }
            }
            Err(f) => {
                println!("{f}\n");
                failed.push(seed);
            }
        }
        seed = seed.wrapping_add(1);
    }
    println!(
        "concurrent: {} seeds in {:.1} s: {passed} passed, {} failed; {ops} operations, {ticks} member ticks, {crashes} crashes, \
         {member_failures} member failures, {replaces} hot replaces, {hot_adds} hot adds, {reshapes} reshapes ({shrinks} shrinks, {raid10_reshapes} RAID10 reshapes, {raid10_bitmap_resizes} of them with a bitmap resized; {in_place} 0.90 grows in place; {reshapes_faulted} with a fault during it, {reshapes_refused} more refused after a fault), {latent_episodes} with latent sectors ({corrected} read errors \
         corrected), {unwritable_episodes} with unwritable sectors ({listed} ranges listed at the end), {checks} check steps; \
         max in flight: {max_in_flight}",
        passed + failed.len() as u64,
        began.elapsed().as_secs_f64(),
        failed.len()
    );
    verdict(&failed, uraid_sim::concurrent::reproduce_concurrent)
}

/// The seeds `--seeds A..B` or `--long` select: (first, end, deadline); `None` (after saying
/// why) when neither was given.
fn seed_range(args: &Args, kind: &str) -> Option<(u64, u64, Option<Instant>)> {
    if let Some((lo, hi)) = args.seeds {
        return Some((lo, hi, None));
    }
    if !args.long {
        eprintln!("uraid-sim: give --seed N, --seeds A..B or --long (try --help)");
        return None;
    }
    // A fresh start each run covers new seeds; the start is printed so a run can be
    // repeated, and each failing seed is printed on its own anyway.
    let start = args
        .start
        .unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0));
    println!("long {kind}run from seed {start} for {} s", args.duration_s);
    Some((start, u64::MAX, Some(Instant::now() + Duration::from_secs(args.duration_s))))
}

/// Success when no seed failed; else the failing seeds and how to replay the first few.
fn verdict(failed: &[u64], reproduce: impl Fn(u64) -> String) -> ExitCode {
    if failed.is_empty() {
        return ExitCode::SUCCESS;
    }
    println!("failing seeds: {failed:?}");
    for &s in failed.iter().take(5) {
        println!("reproduce: {}", reproduce(s));
    }
    ExitCode::FAILURE
}
