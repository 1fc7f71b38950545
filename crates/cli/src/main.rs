//! `uraid`: user-space software RAID, byte-compatible with Linux md, that measures itself.

mod cmd;
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

#[derive(Subcommand)]
enum Command {
    /// Measure uraid: parity kernels against ISA-L and memcpy.
    Bench(cmd::bench::BenchArgs),
    /// Create a new array (md superblocks, mdadm's defaults) and run its initial sync.
    Create(cmd::create::CreateArgs),
    /// Write stdin into an array at an offset (offline, one shot).
    Write(cmd::write::WriteArgs),
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
        Command::Create(args) => cmd::create::run(args),
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
