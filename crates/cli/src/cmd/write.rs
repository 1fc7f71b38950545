//! `uraid write DEV... --offset N < data`: offline one-shot write of stdin into the array.

use crate::util::{open_members, IoOpt};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use uraid_core::assemble::AssembleOptions;
use uraid_engine::{Array, ArrayOptions};

#[derive(Args)]
pub struct WriteArgs {
    /// Member devices or image files, in any order.
    #[arg(required = true)]
    devices: Vec<PathBuf>,
    /// Array byte offset where stdin is written (K, M, G, T suffixes).
    #[arg(long, default_value = "0", value_parser = crate::util::parse_size)]
    offset: u64,
    /// Like mdadm --force (dirty degraded arrays, stale members).
    #[arg(long)]
    force: bool,
    /// Like mdadm --run (start degraded without members recorded active).
    #[arg(long)]
    run: bool,
    /// Print nothing on success.
    #[arg(long, short = 'q')]
    quiet: bool,
    #[command(flatten)]
    io: IoOpt,
}

pub fn run(a: WriteArgs) -> Result<ExitCode> {
    let members = open_members(&a.devices, true, a.io.mode())?;
    let opts =
        ArrayOptions { assemble: AssembleOptions { array_uuid: None, force: a.force, run: a.run }, writable: true, ..Default::default() };
    let (array, report) = Array::assemble(members, &opts)?;
    for w in &report.warnings {
        eprintln!("uraid: warning: {w}");
    }
    let size = array.size_bytes();
    if a.offset > size {
        bail!("--offset {} is beyond the array end ({size} bytes)", a.offset);
    }
    let mut stdin = std::io::stdin().lock();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = a.offset;
    loop {
        let n = read_full(&mut stdin, &mut buf).context("reading stdin")?;
        if n == 0 {
            break;
        }
        if at + n as u64 > size {
            // Like dd onto a device: what fits is written (and flushed), then the error says
            // how much that was.
            let fits = (size - at) as usize;
            array.write(at, &buf[..fits])?;
            at += fits as u64;
            array.flush()?;
            bail!(
                "input runs past the array end ({size} bytes): wrote {} bytes (array bytes {}..{}); the rest of the input was not written",
                at - a.offset,
                a.offset,
                at
            );
        }
        array.write(at, &buf[..n])?;
        at += n as u64;
    }
    array.close()?;
    if !a.quiet {
        eprintln!("uraid: wrote {} bytes at offset {}", at - a.offset, a.offset);
    }
    Ok(ExitCode::SUCCESS)
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}
