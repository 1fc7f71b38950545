//! `uraid`: user-space software RAID, byte-compatible with Linux md, that measures itself.

mod cmd;
mod control;
mod serve;
mod util;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "uraid", version, about = "User-space software RAID, byte-compatible with Linux md")]
struct Cli {
    /// Force one parity kernel (see `uraid bench parity`); same as URAID_PARITY_KERNEL.
    #[arg(long, global = true, value_name = "NAME")]
    parity_kernel: Option<String>,
    #[command(subcommand)]
    command: Command,
}

// Parsed once per run: boxing the large argument structs would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Measure uraid: level comparison, seq/rand/mixed/throughput/degraded/rebuild workloads
    /// against a plain file, parity kernels against ISA-L (see docs/BENCH.md).
    Bench(cmd::bench::BenchArgs),
    /// Create a new array (md superblocks, mdadm's defaults) and run its initial sync.
    Create(cmd::create::CreateArgs),
    /// Write stdin into an array at an offset (offline, one shot).
    Write(cmd::write::WriteArgs),
    /// Assemble an array and hold it: background resync/recovery, control socket.
    Serve(serve::ServeArgs),
    /// Every served array, /proc/mdstat style.
    Status(cmd::ctl::StatusArgs),
    /// One served array in detail, like `mdadm --detail`.
    Detail(cmd::ctl::NameArgs),
    /// Mark a member faulty (like `mdadm --fail`).
    Fail(cmd::ctl::DeviceArgs),
    /// List a range of a member as bad in its bad-block log (md's sysfs `bad_blocks`).
    Badblocks(cmd::ctl::BadBlocksArgs),
    /// Remove a faulty or spare device (like `mdadm --remove`).
    Remove(cmd::ctl::DeviceArgs),
    /// Add a device as a spare; it is rebuilt at once if a member is missing.
    Add(cmd::ctl::AddArgs),
    /// Replace an in-sync member by a new device while it keeps serving (md's hot replace).
    Replace(cmd::ctl::ReplaceArgs),
    /// Scrub: count mismatches (RAID6: name the member at fault).
    Check(cmd::ctl::CheckArgs),
    /// Scrub and rewrite redundancy where it disagrees.
    Repair(cmd::ctl::CheckArgs),
    /// Stop serving an array (flush, mark clean).
    Stop(cmd::ctl::NameArgs),
    /// Continue a reshape recorded on an array's members (md's protocol; md can take over).
    Grow(cmd::grow::GrowArgs),
    /// Show the md superblock of each device, like `mdadm --examine`.
    Examine(cmd::examine::ExamineArgs),
    /// Assemble read-only and write the array's contents (or a range) to stdout.
    Read(cmd::read::ReadArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(k) = &cli.parity_kernel {
        // Read once by the parity dispatcher at first use, which has not happened yet.
        std::env::set_var("URAID_PARITY_KERNEL", k);
    }
    let result = match cli.command {
        Command::Bench(args) => cmd::bench::run(args),
        Command::Examine(args) => cmd::examine::run(args),
        Command::Grow(args) => cmd::grow::run(args),
        Command::Create(args) => cmd::create::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Status(args) => cmd::ctl::status(args),
        Command::Detail(args) => cmd::ctl::detail(args),
        Command::Fail(args) => cmd::ctl::fail(args),
        Command::Badblocks(args) => cmd::ctl::bad_blocks(args),
        Command::Remove(args) => cmd::ctl::remove(args),
        Command::Add(args) => cmd::ctl::add(args),
        Command::Replace(args) => cmd::ctl::replace(args),
        Command::Check(args) => cmd::ctl::check(args, false),
        Command::Repair(args) => cmd::ctl::check(args, true),
        Command::Stop(args) => cmd::ctl::stop(args),
        Command::Write(args) => cmd::write::run(args),
        Command::Read(args) => cmd::read::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("uraid: {e:#}");
            ExitCode::FAILURE
        }
    }
}
