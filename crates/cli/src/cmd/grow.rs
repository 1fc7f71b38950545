//! `uraid grow DEV... --raid-devices N | --chunk C | --layout L`, or `--continue`: start or
//! continue a reshape on an array's members, offline, with md's on-disk protocol, so md can take over at any
//! point.

use crate::cmd::ctl::{call, follow};
use crate::control::Request;
use crate::util::{open_members, IoOpt, Progress};
use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use uraid_core::assemble::AssembleOptions;
use uraid_core::geometry::Level;
use uraid_core::metadata::grow::{GrowRequest, LayoutWord};
use uraid_core::metadata::resize::SizeAsk;
use uraid_engine::reshape::{resize, take_over, ReshapeBackup, ReshapeStep, ReshapingArray};
use uraid_engine::{Array, ArrayOptions, IoMode};

#[derive(Args)]
pub struct GrowArgs {
    /// A served array's name (the reshape runs online in its `uraid serve`), or the member
    /// devices or image files of a stopped array, in any order.
    #[arg(required = true)]
    devices: Vec<PathBuf>,
    /// With a served array: wait until the reshape is done, showing its progress.
    #[arg(long)]
    wait: bool,
    /// Continue the reshape the superblocks record (mdadm --grow --continue).
    #[arg(long = "continue", conflicts_with_all = ["level", "raid_devices", "chunk", "layout", "size", "array_size"])]
    continue_reshape: bool,
    /// New used size of each member (mdadm -z/--size): `max` (every device to its end,
    /// after members were replaced by larger ones) or a size such as 40M. The new part is
    /// resynced. A change of its own: with no other option.
    #[arg(long, short = 'z', conflicts_with_all = ["level", "raid_devices", "chunk", "layout", "array_size"])]
    size: Option<String>,
    /// New level (mdadm -l/--level): the takeovers md makes in place (RAID1 with 2 members
    /// <-> RAID5, RAID4 <-> RAID5 parity-last, RAID5 <-> RAID6 with Q on a spare, RAID0 <->
    /// RAID4/5 parity-last with parity on a spare or missing).
    #[arg(long, short = 'l')]
    level: Option<String>,
    /// New member count (mdadm -n/--raid-devices); the added members are taken from the
    /// array's spares, so add them first (uraid add), as with mdadm.
    #[arg(long, short = 'n')]
    raid_devices: Option<u32>,
    /// The array size a shrink cuts the array to (mdadm --array-size), e.g. 80M: at most its
    /// capacity with fewer members; whatever lies beyond is dropped. md takes it as a step
    /// of its own before `--raid-devices`; uraid takes both in one command (offline there
    /// is no running array to hold the setting in between), and refuses a shrink without it.
    #[arg(long, requires = "raid_devices")]
    array_size: Option<String>,
    /// New devices for a RAID0 that gets more members (mdadm --grow -n N --add DEV),
    /// blank (as for create); one per member added. Offline, or online on a served RAID0.
    #[arg(long = "add", value_name = "DEV", requires = "raid_devices")]
    add: Vec<PathBuf>,
    /// New chunk size, e.g. 512K (mdadm -c/--chunk).
    #[arg(long, short = 'c')]
    chunk: Option<String>,
    /// New layout, by mdadm's name (mdadm --layout), e.g. left-asymmetric; or `preserve`
    /// (RAID5 -> RAID6: keep the *-6 layout, the default) or `normalise` (RAID6: restripe
    /// a *-6 layout to md's rotating one, after the takeover from RAID5).
    #[arg(long)]
    layout: Option<String>,
    /// Stop once this many array sectors are in the new shape and record the position
    /// there, like md's sysfs `sync_max` (the array stays mid-reshape; md or uraid can
    /// continue it). Counted from where the reshape starts: the array's start, or its end
    /// for one that runs backwards.
    #[arg(long, value_name = "SECTORS")]
    sync_max: Option<u64>,
    /// The reshape's backup file (mdadm --backup-file), for a 0.90 array, which reshapes in
    /// place (it has no data offset to move): starting a grow by members, the critical
    /// section is saved there first (created new, in mdadm's format, so `mdadm --assemble
    /// --backup-file` can restore it too) and the file is removed when the reshape ends;
    /// with --continue, a reshape stopped inside it is restored from it.
    #[arg(long, value_name = "FILE")]
    backup_file: Option<PathBuf>,
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

/// `--chunk C` in sectors.
fn chunk_sectors(c: &str) -> Result<u32> {
    let bytes = crate::util::parse_size(c).map_err(|e| anyhow::anyhow!("--chunk {c}: {e}"))?;
    u32::try_from(bytes / 512).map_err(|_| anyhow::anyhow!("--chunk {c}: too large"))
}

/// `--array-size S` in sectors.
fn array_size(a: &GrowArgs) -> Result<Option<u64>> {
    a.array_size
        .as_deref()
        .map(|s| crate::util::parse_size(s).map(|b| b / 512).map_err(|e| anyhow::anyhow!("--array-size {s}: {e}")))
        .transpose()
}

/// `--level L` as md's level number.
pub fn parse_level(s: &str) -> Result<i32> {
    Ok(crate::cmd::create::parse_level(s)?.to_md())
}

fn nothing_asked(a: &GrowArgs) -> bool {
    a.level.is_none() && a.raid_devices.is_none() && a.chunk.is_none() && a.layout.is_none() && a.size.is_none()
}

/// `--size max|S` as asked.
pub fn size_ask(size: &str) -> Result<SizeAsk> {
    Ok(if size.eq_ignore_ascii_case("max") {
        SizeAsk::Max
    } else {
        SizeAsk::Sectors(crate::util::parse_size(size).map_err(|e| anyhow::anyhow!("--size {size}: {e}"))? / 512)
    })
}

/// `--size max|S` on a stopped array: the superblocks get the new size, then the new part
/// is resynced here (offline, nothing else runs), as md resyncs it.
fn grow_size(a: &GrowArgs, size: &str, members: Vec<std::sync::Arc<dyn uraid_engine::Member>>, opts: &ArrayOptions) -> Result<ExitCode> {
    let plan = resize(&members, opts, size_ask(size)?)?;
    let quiet = a.quiet || a.json;
    if !quiet {
        eprintln!("uraid: members now use {} sectors each (were {}); resyncing the new part", plan.size_sectors, plan.old_sectors);
    }
    let (array, _) = Array::assemble(members, opts)?;
    crate::util::run_pending_jobs(&array, quiet)?;
    array.close()?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"finished": true, "size_sectors": plan.size_sectors, "old_size_sectors": plan.old_sectors, "size_bytes": array.size_bytes()})
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `--layout L` for a change to `target` on an array whose level and layout are `level`
/// and `layout` now: a layout of the target level (name or number), or mdadm's `preserve`
/// or `normalise` ([`LayoutWord`]).
pub fn grow_layout(s: &str, level: Level, layout: u32, target: Level) -> Result<Option<u32>> {
    match LayoutWord::parse(s) {
        Some(word) => Ok(word.layout(level.to_md(), layout, target.to_md())?),
        None => Ok(Some(crate::cmd::create::parse_layout(target, s)?)),
    }
}

/// The change asked for, or `None` for --continue. `level`, `layout`: the array's now (the
/// layout asked is read as one of the target level's).
fn request(a: &GrowArgs, level: Level, layout: u32) -> Result<Option<GrowRequest>> {
    if a.continue_reshape {
        return Ok(None);
    }
    if nothing_asked(a) {
        bail!("say what to change (--level, --raid-devices, --chunk, --layout, --size), or --continue a reshape in progress");
    }
    let new_level = a.level.as_deref().map(parse_level).transpose()?;
    let target = new_level.map(Level::from_md).transpose().map_err(|e| anyhow::anyhow!("{e}"))?.unwrap_or(level);
    let chunk_sectors = a.chunk.as_deref().map(chunk_sectors).transpose()?;
    let layout = match a.layout.as_deref() {
        Some(l) => grow_layout(l, level, layout, target)?,
        None => None,
    };
    Ok(Some(GrowRequest { level: new_level, raid_disks: a.raid_devices, layout, chunk_sectors, array_size_sectors: array_size(a)? }))
}

/// The refusal of `--add` outside a RAID0 grow (offline and served).
pub const ADD_IS_FOR_RAID0: &str =
    "--add gives the new devices of a RAID0 that gets more members; other arrays take theirs as spares first (uraid add)";

/// A RAID0 grow's counts, as mdadm checks them: members are only added, one new device
/// (`--add`) per member added.
pub fn check_raid0_grow(raid_disks: u32, asked: u32, given: usize) -> Result<()> {
    if asked <= raid_disks {
        bail!("a RAID0 of {raid_disks} members cannot go to {asked}: uraid (as md) only adds members to a RAID0");
    }
    if given as u32 != asked - raid_disks {
        bail!(
            "growing the RAID0 from {raid_disks} to {asked} members needs {} new device(s) with --add; {given} given",
            asked - raid_disks
        );
    }
    Ok(())
}

/// `uraid grow NAME ...`: the serving process starts the reshape and runs it online.
fn grow_served(a: &GrowArgs, name: &str) -> Result<ExitCode> {
    if a.continue_reshape {
        bail!("{name} is served: a served array continues its reshape by itself (uraid status shows it)");
    }
    if nothing_asked(a) {
        bail!("say what to change (--level, --raid-devices, --chunk, --layout, --size)");
    }
    let chunk_sectors = a.chunk.as_deref().map(chunk_sectors).transpose()?;
    // The serving process opens the new devices: it gets their absolute paths.
    let add = a
        .add
        .iter()
        .map(|p| std::path::absolute(p).map(|p| p.to_string_lossy().into_owned()).with_context(|| format!("{}", p.display())))
        .collect::<Result<Vec<_>>>()?;
    let req = Request::Grow {
        level: a.level.clone(),
        raid_devices: a.raid_devices,
        chunk_sectors,
        layout: a.layout.clone(),
        size: a.size.clone(),
        array_size_sectors: array_size(a)?,
        add,
    };
    let st = call(name, req)?;
    if !a.quiet && !a.json {
        match st.state.as_str() {
            "reshaping" => eprintln!("uraid: {}: reshape started", st.name),
            _ if a.size.is_some() => eprintln!("uraid: {}: now {} bytes; the new part is being resynced", st.name, st.size_bytes),
            _ => eprintln!("uraid: {}: now {} with {} members", st.name, st.level, st.raid_disks),
        }
    }
    let st = match (a.wait, a.size.is_some()) {
        (false, _) => st,
        (true, false) => follow(name, a.json, |st| st.state != "reshaping")?,
        (true, true) => follow(name, a.json, |st| st.job.is_none())?,
    };
    if a.json {
        println!("{}", serde_json::to_string(&st)?);
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(a: GrowArgs) -> Result<ExitCode> {
    if let [one] = &a.devices[..] {
        let name = one.to_string_lossy();
        if !one.exists() && crate::control::find(&name).is_ok() {
            return grow_served(&a, &name);
        }
    }
    let members = open_members(&a.devices, true, a.io.mode())?;
    let opts =
        ArrayOptions { assemble: AssembleOptions { array_uuid: None, force: a.force, run: a.run }, writable: true, ..Default::default() };
    if let Some(size) = &a.size {
        return grow_size(&a, size, members, &opts);
    }
    let (level, layout, raid_disks) = match uraid_engine::scan::probe(members[0].as_ref()).best() {
        Some((_, sb)) => (Level::from_md(sb.level().raw()).map_err(|e| anyhow::anyhow!("{e}"))?, sb.shape().layout, sb.raid_disks()),
        None => bail!("{}: no md superblock found", members[0].label()),
    };
    let req = request(&a, level, layout)?;
    let raid0_grow = level == Level::Raid0 && req.is_some_and(|r| r.level.is_none() && r.raid_disks.is_some());
    if !a.add.is_empty() && !raid0_grow {
        bail!("{ADD_IS_FOR_RAID0}");
    }
    // A RAID0 grow's new devices, opened once the count is checked.
    let new_devices = if raid0_grow {
        check_raid0_grow(raid_disks, req.and_then(|r| r.raid_disks).unwrap_or(raid_disks), a.add.len())?;
        open_members(&a.add, true, a.io.mode())?
    } else {
        Vec::new()
    };
    // Members and new devices, for the takeover back to RAID0 at the end.
    let raid0_all: Vec<_> = members.iter().chain(&new_devices).cloned().collect();
    let array = match req {
        _ if raid0_grow => {
            let new = new_devices.iter().map(|d| (d.clone(), crate::util::random_uuid())).collect();
            let r = uraid_engine::reshape::start_raid0_grow(&members, new, &opts)?;
            if !a.quiet && !a.json {
                eprintln!(
                    "uraid: taken over as RAID4 (parity missing, as md does it); reshaping to {} data members",
                    a.raid_devices.unwrap_or(0)
                );
            }
            r
        }
        None => match &a.backup_file {
            Some(path) => ReshapingArray::open_with_backup(members, &opts, Some(&existing_backup(path, a.io.mode())?))?,
            None => ReshapingArray::open(members, &opts)?,
        },
        Some(req) => {
            let rest = match take_over(&members, &opts, &req)? {
                None => req,
                Some(t) => {
                    if !a.quiet && !a.json {
                        eprintln!("uraid: taken over as RAID{} with {} members", t.level, t.raid_disks);
                        if level == Level::Raid0 && t.rebuilt.is_none() {
                            eprintln!("uraid: it has no parity member yet (degraded, as md leaves it): add one (uraid add) to rebuild it");
                        }
                    }
                    if t.rebuilt.is_some() {
                        // RAID5 -> RAID6: Q is rebuilt on the spare now (offline, nothing else runs).
                        let (array, _) = Array::assemble(members.clone(), &opts)?;
                        crate::util::run_pending_jobs(&array, a.quiet || a.json)?;
                        array.close()?;
                    }
                    match req.after_takeover(&t) {
                        Some(rest) => rest,
                        None => {
                            if a.json {
                                println!("{}", serde_json::json!({"finished": true, "level": t.level, "raid_disks": t.raid_disks}));
                            }
                            return Ok(ExitCode::SUCCESS);
                        }
                    }
                }
            };
            match &a.backup_file {
                Some(path) => {
                    let backup = new_backup(path, &members, a.io.mode())?;
                    ReshapingArray::start_in_place(&members, &opts, &rest, &backup)?;
                    if a.sync_max == Some(0) {
                        // Stopped before anything moves, as md with sync_max 0: the
                        // critical section is in the backup only (md's state right after
                        // mdadm saved it); a continue, or mdadm --assemble, restores it.
                        return stopped_in_critical_section(&a, members, &opts);
                    }
                    ReshapingArray::open_with_backup(members, &opts, Some(&backup))?
                }
                None => ReshapingArray::start(members, &opts, &rest)?,
            }
        }
    };
    let quiet = a.quiet || a.json;
    let total = array.total_sectors();
    let start = array.moved_sectors();
    let progress = Progress::new("reshape", total, quiet);
    let started = std::time::Instant::now();
    let parked = |array: &ReshapingArray| a.sync_max.is_some_and(|max| array.moved_sectors() >= max);
    let step = array.run(&|| parked(&array), |_| progress.set(array.moved_sectors()))?;
    let took = progress.finish();
    array.close()?;
    let finished = step == ReshapeStep::Finished;
    if raid0_grow && finished {
        drop(array);
        let n = uraid_engine::reshape::finish_raid0_grow(&raid0_all, &opts)?;
        let (plain, _) = Array::assemble(raid0_all, &ArrayOptions { writable: false, ..opts })?;
        if a.json {
            println!("{}", serde_json::json!({"finished": true, "level": 0, "raid_disks": n, "size_bytes": plain.size_bytes()}));
        } else if !a.quiet {
            eprintln!(
                "uraid: reshape finished in {:.1} s; taken back as RAID0 with {n} members, {} bytes",
                took.as_secs_f64(),
                plain.size_bytes()
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let moved = array.moved_sectors() - start;
    let result = GrowResult {
        finished,
        position_sectors: array.position_sectors(),
        total_sectors: total,
        size_bytes: array.size_bytes(),
        seconds: took.as_secs_f64(),
        mib_per_s: moved as f64 * 512.0 / (1 << 20) as f64 / started.elapsed().as_secs_f64().max(1e-9),
    };
    if let (true, Some(path)) = (finished, &a.backup_file) {
        // As mdadm removes it once the reshape is done.
        std::fs::remove_file(path).with_context(|| format!("removing the backup file {}", path.display()))?;
    }
    if finished {
        // A degraded shrink leaves the member it removed a spare: it rebuilds the missing
        // role now, as md's `remove_and_add_spares` does once the reshape is done.
        let devices = array.device_handles();
        drop(array);
        let mut run = opts;
        run.assemble.run = true;
        let (plain, _) = Array::assemble(devices, &ArrayOptions { writable: true, ..run })?;
        if plain.start_recovery_if_possible() {
            crate::util::run_pending_jobs(&plain, quiet)?;
        }
        plain.close()?;
    }
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

/// A new backup file for a reshape in place, created as mdadm creates it (it must not exist:
/// an old backup must never be taken for this one), large enough for any critical section
/// of the array (its members' size is a bound: the section spans a few stripes).
fn new_backup(path: &std::path::Path, members: &[std::sync::Arc<dyn uraid_engine::Member>], mode: IoMode) -> Result<ReshapeBackup> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("creating the backup file {} (it must not exist yet)", path.display()))?;
    // mdadm's file: 8 sectors, then the section; 64 MiB holds any section of md's chunks.
    let len = (64u64 << 20).min(members.iter().map(|m| m.size_bytes()).max().unwrap_or(0)) + 4096;
    file.set_len(len).with_context(|| format!("sizing the backup file {}", path.display()))?;
    drop(file);
    existing_backup(path, mode)
}

/// The backup file of a reshape in place, as given.
fn existing_backup(path: &std::path::Path, mode: IoMode) -> Result<ReshapeBackup> {
    let member = open_members(&[path.to_path_buf()], true, mode)?;
    Ok(ReshapeBackup::new(member.into_iter().next().context("the backup file")?))
}

/// `--sync-max 0` on a reshape started in place: reports the start, reading the array only
/// (a writable open would write the critical section back).
fn stopped_in_critical_section(
    a: &GrowArgs,
    members: Vec<std::sync::Arc<dyn uraid_engine::Member>>,
    opts: &ArrayOptions,
) -> Result<ExitCode> {
    let array = ReshapingArray::open(members, &ArrayOptions { writable: false, ..*opts })?;
    let result = GrowResult {
        finished: false,
        position_sectors: array.position_sectors(),
        total_sectors: array.total_sectors(),
        size_bytes: array.size_bytes(),
        seconds: 0.0,
        mib_per_s: 0.0,
    };
    if a.json {
        println!("{}", serde_json::to_string(&result)?);
    } else if !a.quiet {
        eprintln!("uraid: reshape started and recorded at array sector 0; its critical section is in the backup file only");
    }
    Ok(ExitCode::SUCCESS)
}
