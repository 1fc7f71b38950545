//! `uraid grow DEV... --continue`: continue (or, with a new shape, start) a reshape on an
//! array's members, offline, with md's on-disk protocol, so md can take over at any
//! point.

use crate::util::{open_members, IoOpt, Progress};
use anyhow::{bail, Result};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use uraid_core::assemble::AssembleOptions;
use uraid_engine::reshape::{ReshapeStep, ReshapingArray};
use uraid_engine::ArrayOptions;

#[derive(Args)]
pub struct GrowArgs {
    /// Member devices or image files, in any order.
    #[arg(required = true)]
    devices: Vec<PathBuf>,
    /// Continue the reshape the superblocks record (mdadm --grow --continue).
    #[arg(long = "continue")]
    continue_reshape: bool,
    /// Stop once the reshape reaches this array sector and record it there, like md's
    /// sysfs `sync_max` (the array stays mid-reshape; md or uraid can continue it).
    #[arg(long, value_name = "SECTORS")]
    sync_max: Option<u64>,
    /// Like mdadm --force (dirty degraded arrays, stale members).
    #[arg(long)]
    force: bool,
    /// Like mdadm --run (start degraded without members recorded active).
    #[arg(long)]
    run: bool,
    /// One JSON object on stdout instead of progress and text.
    #[arg(long)]
    json: bool,
    /// Print nothing on success.
    #[arg(long, short = 'q')]
    quiet: bool,
    #[command(flatten)]
    io: IoOpt,
}

#[derive(Serialize)]
struct GrowResult {
    finished: bool,
    position_sectors: u64,
    total_sectors: u64,
    size_bytes: u64,
    seconds: f64,
    mib_per_s: f64,
}

pub fn run(a: GrowArgs) -> Result<ExitCode> {
    if !a.continue_reshape {
        bail!("say --continue to continue the reshape recorded on the devices");
    }
    let members = open_members(&a.devices, true, a.io.mode())?;
    let opts =
        ArrayOptions { assemble: AssembleOptions { array_uuid: None, force: a.force, run: a.run }, writable: true, ..Default::default() };
    let array = ReshapingArray::open(members, &opts)?;
    let quiet = a.quiet || a.json;
    let total = array.total_sectors();
    let start = array.moved_sectors();
    let progress = Progress::new("reshape", total, quiet);
    let started = std::time::Instant::now();
    let parked = |array: &ReshapingArray| match a.sync_max {
        None => false,
        Some(max) => {
            let p = array.position_sectors();
            if array.state().backwards {
                p <= max
            } else {
                p >= max
            }
        }
    };
    let step = array.run(&|| parked(&array), |_| progress.set(array.moved_sectors()))?;
    let took = progress.finish();
    array.close()?;
    let moved = array.moved_sectors() - start;
    let result = GrowResult {
        finished: step == ReshapeStep::Finished,
        position_sectors: array.position_sectors(),
        total_sectors: total,
        size_bytes: array.size_bytes(),
        seconds: took.as_secs_f64(),
        mib_per_s: moved as f64 * 512.0 / (1 << 20) as f64 / started.elapsed().as_secs_f64().max(1e-9),
    };
    if a.json {
        println!("{}", serde_json::to_string(&result)?);
    } else if !a.quiet {
        if result.finished {
            eprintln!(
                "uraid: reshape finished in {:.1} s ({:.1} MiB/s); the array is {} bytes",
                result.seconds, result.mib_per_s, result.size_bytes
            );
        } else {
            eprintln!("uraid: reshape stopped at array sector {} of {} and recorded there", result.position_sectors, total);
        }
    }
    Ok(ExitCode::SUCCESS)
}
