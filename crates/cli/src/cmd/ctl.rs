//! Client commands for served arrays: status, detail, fail, remove, add, replace, check,
//! repair, stop. They talk to `uraid serve` over its control socket.

use crate::control::{self, ArrayStatus, Reply, Request};
use crate::util::human_bytes;
use anyhow::{bail, Result};
use clap::Args;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args)]
pub struct StatusArgs {
    /// JSON array of every served array's status.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct NameArgs {
    /// Array name or uuid.
    name: String,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct DeviceArgs {
    /// Array name or uuid.
    name: String,
    /// Member device or image file.
    device: String,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct AddArgs {
    /// Array name or uuid.
    name: String,
    /// Device or image file to add as a spare (it rebuilds a missing role at once).
    device: String,
    /// Add it even if it holds another array's superblock or a filesystem (overwritten).
    #[arg(long)]
    force: bool,
    /// Take back a former member of this array (failed and removed): with a write-intent
    /// bitmap it gets its old role back and only the regions written since it left are
    /// rebuilt (md's bitmap-based re-add); otherwise it is rebuilt in full. Says which.
    #[arg(long)]
    re_add: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ReplaceArgs {
    /// Array name or uuid.
    name: String,
    /// Member to replace.
    device: String,
    /// New device: a blank one, or a spare already in the array.
    #[arg(long)]
    with: String,
    /// Use the new device even if it holds another array's superblock or a filesystem.
    #[arg(long)]
    force: bool,
    #[arg(long)]
    json: bool,
    /// Return at once instead of following the rebuild.
    #[arg(long)]
    no_wait: bool,
}

#[derive(Args)]
pub struct CheckArgs {
    /// Array name or uuid.
    name: String,
    #[arg(long)]
    json: bool,
    /// Return at once; `uraid status` shows progress and the result.
    #[arg(long)]
    no_wait: bool,
}

fn level_digits(level: &str) -> &str {
    level.trim_start_matches("raid")
}

/// /proc/mdstat style.
fn mdstat(st: &ArrayStatus) -> String {
    let mut members: Vec<String> = st
        .devices
        .iter()
        .map(|d| {
            let flag = match d.state.as_str() {
                "faulty" => "(F)",
                "spare" => "(S)",
                _ => "",
            };
            format!("{}[{}]{}", d.device, d.dev_number, flag)
        })
        .collect();
    members.reverse();
    let present: String = (0..st.raid_disks).map(|r| if st.missing_roles.contains(&r) { '_' } else { 'U' }).collect();
    let mut s = format!(
        "{} : {} {} {}\n      {} blocks super 1.x level {}, {}k chunk, algorithm {} [{}/{}] [{}]\n",
        st.name,
        if st.state == "failed" { "inactive" } else { "active" },
        st.level,
        members.join(" "),
        st.size_bytes / 1024,
        level_digits(&st.level),
        st.chunk_kib,
        st.layout,
        st.raid_disks,
        st.raid_disks - st.missing_roles.len(),
        present
    );
    if let Some(j) = &st.job {
        let pct = if j.total_sectors > 0 { j.done_sectors as f64 * 100.0 / j.total_sectors as f64 } else { 100.0 };
        let filled = (pct / 5.0) as usize;
        s += &format!(
            "      [{}>{}]  {} = {:.1}% ({}/{}) finish={} speed={:.0}K/sec\n",
            "=".repeat(filled.min(20)),
            ".".repeat(20 - filled.min(20)),
            j.kind,
            pct,
            j.done_sectors / 2,
            j.total_sectors / 2,
            j.eta_seconds.map_or("?".into(), |e| format!("{:.1}min", e / 60.0)),
            j.speed_kib_per_s
        );
    }
    if let Some(c) = &st.last_check {
        s += &format!("      last {}: mismatch_cnt={}{}\n", c.kind, c.mismatch_cnt, if c.finished { "" } else { " (interrupted)" });
    }
    for e in &st.exports {
        s += &format!("      export {e}\n");
    }
    s
}

pub fn status(a: StatusArgs) -> Result<ExitCode> {
    let all = control::discover();
    if a.json {
        let v: Vec<&ArrayStatus> = all.iter().map(|(_, s)| s).collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut levels: Vec<&str> = all.iter().map(|(_, s)| s.level.as_str()).collect();
    levels.sort();
    levels.dedup();
    println!("Personalities : {}", levels.iter().map(|l| format!("[{l}]")).collect::<Vec<_>>().join(" "));
    if all.is_empty() {
        println!("unused devices: <none>\n(no arrays are being served)");
    }
    for (_, st) in &all {
        print!("{}", mdstat(st));
    }
    Ok(ExitCode::SUCCESS)
}

fn print_status(st: &ArrayStatus, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(st)?);
    } else {
        print!("{}", detail_text(st));
    }
    Ok(())
}

fn detail_text(st: &ArrayStatus) -> String {
    let mut s = format!(
        "{}:\n        Raid Level : {}\n        Array Size : {} ({})\n      Raid Devices : {}\n             State : {}\n              UUID : {}\n            Events : {}\n",
        st.name,
        st.level,
        st.size_bytes / 1024,
        human_bytes(st.size_bytes),
        st.raid_disks,
        st.state,
        st.uuid,
        st.events
    );
    if st.chunk_kib > 0 {
        s += &format!("        Chunk Size : {}K\n            Layout : {}\n", st.chunk_kib, st.layout);
    }
    s += "\n    Number   RaidDevice State\n";
    for d in &st.devices {
        let role = d.role.map_or("-".to_string(), |r| r.to_string());
        let state = match (d.state.as_str(), d.recovered_sectors) {
            ("recovering", Some(done)) => format!("spare rebuilding ({done} sectors done)"),
            ("replacing", Some(done)) => format!("replacement ({done} sectors copied)"),
            ("in_sync", _) => "active sync".into(),
            (other, _) => other.to_string(),
        };
        s += &format!("    {:>6}   {:>10} {:<30} {}\n", d.dev_number, role, state, d.device);
        if let Some(why) = &d.failure {
            s += &format!("             failed: {why}\n");
        }
        if d.read_errors > 0 {
            s += &format!("             read errors: {} ({} corrected from redundancy)\n", d.read_errors, d.read_errors_corrected);
        }
        if !d.bad_blocks.is_empty() {
            let list: Vec<String> = d.bad_blocks.iter().map(|(start, n)| format!("{start}+{n}")).collect();
            s += &format!("             bad blocks (sector+count): {}\n", list.join(" "));
        }
    }
    s + &mdstat(st)
}

pub(crate) fn call(name: &str, req: Request) -> Result<ArrayStatus> {
    let (sock, _) = control::find(name)?;
    match control::call(&sock, &req)? {
        Reply { ok: true, status: Some(st), .. } => Ok(st),
        Reply { error, .. } => bail!("{}", error.unwrap_or_else(|| "request failed".into())),
    }
}

pub fn detail(a: NameArgs) -> Result<ExitCode> {
    print_status(&call(&a.name, Request::Status)?, a.json)?;
    Ok(ExitCode::SUCCESS)
}

pub fn fail(a: DeviceArgs) -> Result<ExitCode> {
    let st = call(&a.name, Request::Fail { device: absolute(&a.device) })?;
    if !a.json {
        eprintln!("uraid: set {} faulty in {}", a.device, a.name);
    }
    print_status(&st, a.json)?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
pub struct BadBlocksArgs {
    /// Array name or uuid.
    name: String,
    /// Member device or image file.
    device: String,
    /// The range to list as bad: FIRST+COUNT in absolute device sectors (as
    /// `examine --badblocks` prints them), e.g. 4096+8.
    #[arg(long, value_parser = parse_sector_range)]
    add: (u64, u64),
    #[arg(long)]
    json: bool,
}

fn parse_sector_range(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s.split_once('+').ok_or("expected FIRST+COUNT, e.g. 4096+8")?;
    let first = a.trim().parse().map_err(|e| format!("first sector {a:?}: {e}"))?;
    let count = b.trim().parse().map_err(|e| format!("count {b:?}: {e}"))?;
    Ok((first, count))
}

/// `uraid badblocks NAME DEV --add FIRST+COUNT`: md's `echo FIRST COUNT > dev-*/bad_blocks`.
pub fn bad_blocks(a: BadBlocksArgs) -> Result<ExitCode> {
    let (start, sectors) = a.add;
    let st = call(&a.name, Request::BadBlocks { device: absolute(&a.device), start, sectors })?;
    print_status(&st, a.json)?;
    Ok(ExitCode::SUCCESS)
}

pub fn remove(a: DeviceArgs) -> Result<ExitCode> {
    let st = call(&a.name, Request::Remove { device: absolute(&a.device) })?;
    print_status(&st, a.json)?;
    Ok(ExitCode::SUCCESS)
}

/// The path as the server should see it: absolute (symlinks resolved) when it exists here,
/// so the server matches it by identity whatever its own directory; as typed otherwise (a
/// member's label, e.g. a file that is gone).
fn absolute(p: &str) -> String {
    std::fs::canonicalize(p).map(|p| p.display().to_string()).unwrap_or_else(|_| p.to_string())
}

pub fn add(a: AddArgs) -> Result<ExitCode> {
    let (sock, _) = control::find(&a.name)?;
    let st = match control::call(&sock, &Request::Add { device: absolute(&a.device), force: a.force, re_add: a.re_add })? {
        Reply { ok: true, status: Some(st), message, .. } => {
            // A re-add says whether it resyncs from the bitmap or rebuilds in full, and why.
            if let Some(m) = message {
                eprintln!("uraid: {}: {m}", a.device);
            }
            st
        }
        Reply { error, .. } => bail!("{}", error.unwrap_or_else(|| "request failed".into())),
    };
    print_status(&st, a.json)?;
    Ok(ExitCode::SUCCESS)
}

pub fn replace(a: ReplaceArgs) -> Result<ExitCode> {
    call(&a.name, Request::Replace { device: absolute(&a.device), with: absolute(&a.with), force: a.force })?;
    let st = if a.no_wait { call(&a.name, Request::Status)? } else { follow(&a.name, a.json, |st| st.job.is_none())? };
    print_status(&st, a.json)?;
    Ok(ExitCode::SUCCESS)
}

pub fn check(a: CheckArgs, repair: bool) -> Result<ExitCode> {
    call(&a.name, Request::Check { repair })?;
    if a.no_wait {
        return Ok(ExitCode::SUCCESS);
    }
    let st = follow(&a.name, a.json, |st| st.job.is_none() && st.last_check.is_some())?;
    let c = st.last_check.clone().unwrap_or_default();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&c)?);
    } else {
        println!("{}: {} {}: mismatch_cnt={}", st.name, c.kind, if c.finished { "finished" } else { "interrupted" }, c.mismatch_cnt);
        for (role, rows) in &c.wrong_member_rows {
            println!("  role {role}: {rows} 4K rows wrong (syndrome names this member)");
        }
        if c.unattributed_rows > 0 {
            println!("  {} rows with errors in more than one block", c.unattributed_rows);
        }
        if c.repaired_rows > 0 {
            println!("  {} rows rewritten", c.repaired_rows);
        }
        for f in &c.findings {
            let who = match (&f.device, f.role) {
                (Some(d), Some(r)) => format!("role {r} ({d})"),
                (None, Some(r)) => format!("role {r}"),
                _ => "member unknown".into(),
            };
            println!("  array sector {} (+{}): {who}: {}", f.array_sector, f.sectors, f.action);
        }
        if c.findings_dropped > 0 {
            println!("  ... and {} more findings", c.findings_dropped);
        }
    }
    Ok(if c.finished { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Polls the array until `done`, showing the job's progress on a terminal.
pub(crate) fn follow(name: &str, json: bool, done: impl Fn(&ArrayStatus) -> bool) -> Result<ArrayStatus> {
    let tty = !json && std::io::stderr().is_terminal();
    loop {
        let st = call(name, Request::Status)?;
        if done(&st) {
            if tty {
                eprint!("\r\x1b[K");
            }
            return Ok(st);
        }
        if tty {
            if let Some(j) = &st.job {
                let pct = j.done_sectors as f64 * 100.0 / j.total_sectors.max(1) as f64;
                eprint!("\r\x1b[K{}: {} {:.1}% speed={:.0}K/sec", st.name, j.kind, pct, j.speed_kib_per_s);
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Whether process `pid` has exited (gone, or a zombie: its descriptors, and so its hold
/// on the members, are released either way).
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

/// Returns once the serving process has marked the array clean and exited, so the members
/// are free (another command may open them for writing at once).
pub fn stop(a: NameArgs) -> Result<ExitCode> {
    let (sock, _) = control::find(&a.name)?;
    let st = call(&a.name, Request::Stop)?;
    // A hang guard: the process flushes and marks clean before it exits.
    let start = std::time::Instant::now();
    while sock.exists() || !exited(st.pid) {
        if start.elapsed() > Duration::from_secs(300) {
            bail!("{} (process {}) has not exited 300 s after being asked to stop", a.name, st.pid);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if !a.json {
        eprintln!("uraid: stopped {}", a.name);
    }
    Ok(ExitCode::SUCCESS)
}
