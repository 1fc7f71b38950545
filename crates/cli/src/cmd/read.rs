//! `uraid read DEV...`: assemble read-only and stream the array's contents to stdout.

use crate::util::{open_members, IoOpt};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use uraid_core::assemble::AssembleOptions;
use uraid_engine::reshape::ReshapingArray;
use uraid_engine::{Array, ArrayOptions, EngineError, IoMode};

#[derive(Args)]
pub struct ReadArgs {
    /// Member devices or image files, in any order (opened read-only; never written).
    #[arg(required = true)]
    devices: Vec<PathBuf>,
    /// First array byte to read (suffixes K, M, G, T: binary units).
    #[arg(long, default_value = "0", value_parser = crate::util::parse_size)]
    offset: u64,
    /// Bytes to read (default: to the end of the array; K, M, G, T suffixes).
    #[arg(long, value_parser = crate::util::parse_size)]
    length: Option<u64>,
    /// Like mdadm --force: start a dirty degraded array, or use stale members if needed.
    #[arg(long)]
    force: bool,
    /// Like mdadm --run: start although members recorded as active were not given.
    #[arg(long)]
    run: bool,
    #[command(flatten)]
    io: IoOpt,
}

/// Opens `paths` read-only and assembles them; warnings go to stderr.
pub fn assemble_read_only(paths: &[PathBuf], force: bool, run: bool, mode: IoMode) -> Result<Array> {
    let members = open_members(paths, false, mode)?;
    let opts = ArrayOptions { assemble: AssembleOptions { array_uuid: None, force, run }, ..Default::default() };
    let (array, report) = Array::assemble(members, &opts)?;
    for w in &report.warnings {
        eprintln!("uraid: warning: {w}");
    }
    if !report.degraded_roles.is_empty() {
        eprintln!("uraid: array is degraded (roles {:?} missing); reconstructing from parity/copies", report.degraded_roles);
    }
    Ok(array)
}

/// What `read` reads from: an array, or one md left in the middle of a reshape.
enum Source {
    Array(Box<Array>),
    Reshaping(Box<ReshapingArray>),
}

impl Source {
    fn size_bytes(&self) -> u64 {
        match self {
            Source::Array(a) => a.size_bytes(),
            Source::Reshaping(v) => v.size_bytes(),
        }
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), EngineError> {
        match self {
            Source::Array(a) => a.read(offset, buf),
            Source::Reshaping(v) => v.read(offset, buf),
        }
    }
}

fn open_source(a: &ReadArgs) -> Result<Source> {
    match assemble_read_only(&a.devices, a.force, a.run, a.io.mode()) {
        Ok(array) => Ok(Source::Array(Box::new(array))),
        Err(e) => match e.downcast_ref::<EngineError>() {
            Some(EngineError::ReshapeInProgress { position_sectors }) => {
                let members = open_members(&a.devices, false, a.io.mode())?;
                let opts =
                    ArrayOptions { assemble: AssembleOptions { array_uuid: None, force: a.force, run: a.run }, ..Default::default() };
                let view = ReshapingArray::open(members, &opts)?;
                let s = view.state();
                eprintln!(
                    "uraid: reading an array in the middle of a reshape ({} members -> {}, at array sector {position_sectors}, {:.1}% moved)",
                    s.old.raid_disks,
                    s.new.raid_disks,
                    100.0 * s.done_fraction(view.size_bytes() / 512)
                );
                Ok(Source::Reshaping(Box::new(view)))
            }
            _ => Err(e),
        },
    }
}

pub fn run(a: ReadArgs) -> Result<ExitCode> {
    let array = open_source(&a)?;
    let size = array.size_bytes();
    if a.offset > size {
        bail!("--offset {} is beyond the array end ({size} bytes)", a.offset);
    }
    let length = a.length.unwrap_or(size - a.offset);
    if a.offset.checked_add(length).is_none_or(|end| end > size) {
        bail!("--offset {} --length {length} runs past the array end ({size} bytes)", a.offset);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    while done < length {
        let n = (length - done).min(buf.len() as u64) as usize;
        array.read(a.offset + done, &mut buf[..n])?;
        out.write_all(&buf[..n]).context("writing to stdout")?;
        done += n as u64;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
