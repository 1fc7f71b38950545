//! `uraid examine DEV...`: what md's superblock on each device says, like `mdadm --examine`.

use anyhow::Result;
use clap::Args;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use uraid_core::geometry::{Algorithm, Level};
use uraid_core::metadata::badblocks::decode_entries;
use uraid_core::metadata::check::{SB090_MAX_DISKS, SB1_MAX_DISKS};
use uraid_core::metadata::{
    superblock_locations, DeviceRole, DiskDescriptor090, FeatureMap, MetadataError, MetadataVersion, Superblock, Superblock090, Superblock1,
};

#[derive(Args)]
pub struct ExamineArgs {
    /// Member devices or image files (opened read-only).
    #[arg(required = true)]
    devices: Vec<PathBuf>,
    /// Print a JSON array (one object per device) and nothing else on stdout.
    #[arg(long)]
    json: bool,
    /// Print each device's bad-block log, as `mdadm --examine-badblocks` does (with
    /// --json, every object has a `bad_blocks` list either way).
    #[arg(long)]
    badblocks: bool,
}

/// A reshape in progress, as `mdadm --examine` shows it.
#[derive(Serialize)]
struct ReshapeExamined {
    position_sectors: u64,
    delta_devices: i32,
    raid_devices_before: i64,
    new_offset_sectors: Option<i64>,
    new_level: String,
    new_layout: String,
    new_chunk_size_kib: u64,
    backwards: bool,
}

/// One device's superblock, in mdadm's terms.
#[derive(Serialize)]
struct Examined {
    device: String,
    has_superblock: bool,
    /// Why no usable superblock was found (e.g. a checksum mismatch), if so.
    error: Option<String>,
    version: Option<String>,
    super_offset_sectors: Option<u64>,
    feature_map: Option<String>,
    array_uuid: Option<String>,
    name: Option<String>,
    creation_time: Option<u64>,
    update_time: Option<u64>,
    level: Option<String>,
    layout: Option<String>,
    layout_raw: Option<u32>,
    chunk_size_kib: Option<u64>,
    raid_devices: Option<u32>,
    avail_dev_size_sectors: Option<u64>,
    used_dev_size_sectors: Option<u64>,
    data_offset_sectors: Option<u64>,
    state: Option<String>,
    device_uuid: Option<String>,
    events: Option<u64>,
    checksum: Option<String>,
    checksum_correct: Option<bool>,
    role: Option<String>,
    array_state: Option<String>,
    bitmap_offset_sectors: Option<i64>,
    bad_block_log: Option<String>,
    /// A reshape in progress (mdadm's "Reshape pos'n", "Delta Devices", "New …" rows).
    reshape: Option<ReshapeExamined>,
    /// The bad-block log's entries as stored: [first sector, sectors], absolute device
    /// sectors. `None` when the device has no log configured.
    bad_blocks: Option<Vec<(u64, u64)>>,
    /// Why the log could not be read, if so.
    bad_blocks_error: Option<String>,
}

impl Examined {
    fn empty(device: String) -> Self {
        Examined {
            device,
            has_superblock: false,
            error: None,
            version: None,
            super_offset_sectors: None,
            feature_map: None,
            array_uuid: None,
            name: None,
            creation_time: None,
            update_time: None,
            level: None,
            layout: None,
            layout_raw: None,
            chunk_size_kib: None,
            raid_devices: None,
            avail_dev_size_sectors: None,
            used_dev_size_sectors: None,
            data_offset_sectors: None,
            state: None,
            device_uuid: None,
            events: None,
            checksum: None,
            checksum_correct: None,
            role: None,
            array_state: None,
            bitmap_offset_sectors: None,
            bad_block_log: None,
            reshape: None,
            bad_blocks: None,
            bad_blocks_error: None,
        }
    }
}

pub fn layout_name(level: i32, layout: u32) -> String {
    match Level::from_md(level) {
        Ok(Level::Raid5 | Level::Raid6) => Algorithm::from_md(layout).map_or(format!("unknown ({layout})"), |a| a.name().to_string()),
        Ok(Level::Raid10) => {
            let (near, far, offset) = (layout & 0xff, (layout >> 8) & 0xff, layout & 0x10000 != 0);
            let mut parts = Vec::new();
            if near > 1 {
                parts.push(format!("near={near}"));
            }
            if far > 1 {
                parts.push(format!("{}={far}", if offset { "offset" } else { "far" }));
            }
            parts.join(", ")
        }
        Ok(Level::Raid0) => match layout {
            1 => "original".into(),
            2 => "alternate".into(),
            _ => "-unknown-".into(),
        },
        Ok(Level::Linear) => format!("rounding {}K", layout),
        _ => "-".into(),
    }
}

fn role_name(role: DeviceRole) -> String {
    match role {
        DeviceRole::Active(n) => format!("Active device {n}"),
        DeviceRole::Spare => "spare".into(),
        DeviceRole::Faulty => "faulty".into(),
        DeviceRole::Journal => "journal".into(),
        DeviceRole::Unknown(r) => format!("unknown role {r:#x}"),
    }
}

fn fill_v1(e: &mut Examined, sb: &Superblock1, dev_size: u64) {
    let name_end = sb.set_name.iter().position(|&b| b == 0).unwrap_or(sb.set_name.len());
    e.name = Some(String::from_utf8_lossy(&sb.set_name[..name_end]).into_owned());
    e.feature_map = Some(format!("{:#x}", sb.feature_map.0));
    e.creation_time = Some(sb.ctime.seconds());
    e.update_time = Some(sb.utime.seconds());
    e.level = Some(level_name(sb.level));
    e.layout = Some(layout_name(sb.level, sb.layout));
    e.layout_raw = Some(sb.layout);
    e.chunk_size_kib = (sb.chunksize_sectors > 0).then_some(sb.chunksize_sectors as u64 / 2);
    e.raid_devices = Some(sb.raid_disks);
    e.avail_dev_size_sectors = Some(sb.data_size_sectors);
    e.used_dev_size_sectors = Some(sb.size_sectors);
    e.data_offset_sectors = Some(sb.data_offset_sectors);
    e.super_offset_sectors = Some(sb.super_offset_sectors);
    e.device_uuid = Some(uraid_core::metadata::MdUuid(sb.device_uuid).to_string());
    e.events = Some(sb.events);
    let computed = sb.compute_checksum();
    e.checksum = Some(format!("{:x}", sb.sb_csum));
    e.checksum_correct = Some(computed == sb.sb_csum);
    e.state = Some(if sb.resync_offset_sectors == u64::MAX { "clean" } else { "active" }.into());
    e.bitmap_offset_sectors = sb.bitmap_offset_sectors().map(i64::from);
    if sb.bblog_size_sectors > 0 && sb.bblog_offset_sectors != 0 {
        let present = if sb.feature_map.contains(FeatureMap::BAD_BLOCKS) { " - bad blocks present." } else { "" };
        e.bad_block_log = Some(format!(
            "{} entries available at offset {} sectors{present}",
            sb.bblog_size_sectors as u64 * 512 / 8,
            sb.bblog_offset_sectors
        ));
    }
    let _ = dev_size;
    if sb.feature_map.contains(FeatureMap::RESHAPE_ACTIVE) {
        e.reshape = Some(ReshapeExamined {
            position_sectors: sb.reshape_position_sectors,
            delta_devices: sb.delta_disks,
            raid_devices_before: i64::from(sb.raid_disks) - i64::from(sb.delta_disks),
            new_offset_sectors: sb
                .feature_map
                .contains(FeatureMap::NEW_OFFSET)
                .then(|| sb.data_offset_sectors as i64 + i64::from(sb.new_offset_sectors)),
            new_level: level_name(sb.new_level),
            new_layout: layout_name(sb.new_level, sb.new_layout),
            new_chunk_size_kib: u64::from(sb.new_chunk_sectors) / 2,
            backwards: sb.feature_map.contains(FeatureMap::RESHAPE_BACKWARDS),
        });
    }
    // Array state as mdadm prints it: one letter per role, A = active, . = missing. Only
    // for a role count md allows: a damaged superblock's raid_disks sizes nothing.
    e.array_state = array_state(
        sb.raid_disks,
        SB1_MAX_DISKS,
        sb.dev_roles.iter().filter_map(|r| match DeviceRole::from_raw(*r) {
            DeviceRole::Active(n) => Some(n),
            _ => None,
        }),
    );
}

/// One letter per role (`A` active, `.` missing), or `None` when `raid_disks` is beyond md's
/// `limit` (the superblock is then reported as unusable anyway).
fn array_state(raid_disks: u32, limit: u32, active: impl Iterator<Item = u32>) -> Option<String> {
    if raid_disks > limit {
        return None;
    }
    let mut state = vec!['.'; raid_disks as usize];
    for n in active {
        if let Some(c) = state.get_mut(n as usize) {
            *c = 'A';
        }
    }
    Some(state.into_iter().collect())
}

fn fill_v090(e: &mut Examined, sb: &Superblock090) {
    e.creation_time = Some(sb.ctime as u64);
    e.update_time = Some(sb.utime as u64);
    e.level = Some(level_name(sb.level));
    e.layout = Some(layout_name(sb.level, sb.layout));
    e.layout_raw = Some(sb.layout);
    e.chunk_size_kib = (sb.chunk_size_bytes > 0).then_some(sb.chunk_size_bytes as u64 / 1024);
    e.raid_devices = Some(sb.raid_disks);
    e.used_dev_size_sectors = Some(sb.size_kib as u64 * 2);
    e.data_offset_sectors = Some(0);
    e.events = Some(sb.events);
    e.checksum = Some(format!("{:x}", sb.sb_csum));
    e.checksum_correct = Some(sb.compute_checksum() == sb.sb_csum);
    e.state = Some(if sb.state & Superblock090::STATE_CLEAN != 0 { "clean" } else { "active" }.into());
    // md's 0.91: the same reshape rows as v1 (mdadm's examine_super0), the data never moved.
    if sb.reshape_active() {
        e.reshape = Some(ReshapeExamined {
            position_sectors: sb.reshape_position_sectors,
            delta_devices: sb.delta_disks,
            raid_devices_before: i64::from(sb.raid_disks) - i64::from(sb.delta_disks),
            new_offset_sectors: None,
            new_level: level_name(sb.new_level),
            new_layout: layout_name(sb.new_level, sb.new_layout),
            new_chunk_size_kib: u64::from(sb.new_chunk_bytes) / 1024,
            backwards: sb.delta_disks < 0,
        });
    }
    let active = sb.disks.iter().filter(|d| d.state & DiskDescriptor090::STATE_ACTIVE != 0).map(|d| d.raid_disk);
    e.array_state = array_state(sb.raid_disks, SB090_MAX_DISKS, active);
}

/// As mdadm prints it: 0.90 with its patch level ("0.90.00"), 1.x as is.
fn version_name(v: MetadataVersion) -> String {
    match v {
        MetadataVersion::V0_90 => "0.90.00".into(),
        other => other.to_string(),
    }
}

fn level_name(level: i32) -> String {
    Level::from_md(level).map_or(format!("unknown ({level})"), |l| l.to_string())
}

fn examine_one(path: &Path) -> Examined {
    let mut e = Examined::empty(path.display().to_string());
    let member = match crate::util::open_member(path, false, uraid_engine::IoMode::Buffered) {
        Ok(m) => m,
        Err(err) => {
            e.error = Some(err.to_string());
            return e;
        }
    };
    // examine takes no lock (it must never block a server), but says when what it shows
    // is live.
    if let Some(h) = std::fs::metadata(path).ok().and_then(|m| uraid_engine::ownership::holder(&m)) {
        eprintln!("uraid: warning: {} is in use by {h}: the array is live, its superblock may change", path.display());
    }
    let probe = uraid_engine::scan::probe(&*member);
    if let Some((loc, sb)) = probe.best() {
        e.has_superblock = true;
        e.version = Some(version_name(loc.version));
        e.array_uuid = Some(sb.array_uuid().to_string());
        e.role = Some(role_name(sb.role()));
        match sb {
            Superblock::V1(v1) => {
                fill_v1(&mut e, v1, member.size_bytes());
                read_bad_blocks(&mut e, &*member, v1);
            }
            Superblock::V090(v0) => {
                e.super_offset_sectors = Some(loc.offset_bytes / 512);
                fill_v090(&mut e, v0)
            }
        }
        return e;
    }
    // Nothing valid: show what a damaged superblock says, with the reason it was rejected.
    for loc in superblock_locations(member.size_bytes()) {
        let mut bytes = vec![0u8; loc.len_bytes];
        if member.read_at(&mut bytes, loc.offset_bytes).is_err() {
            continue;
        }
        let damaged = match loc.version {
            MetadataVersion::V0_90 => Superblock090::decode_unverified(&bytes).map(|sb| {
                fill_v090(&mut e, &sb);
                e.array_uuid = Some(Superblock::V090(sb).array_uuid().to_string());
            }),
            _ => Superblock1::decode_unverified(&bytes).map(|sb| {
                fill_v1(&mut e, &sb, member.size_bytes());
                e.array_uuid = Some(uraid_core::metadata::MdUuid(sb.set_uuid).to_string());
            }),
        };
        if damaged.is_ok() {
            e.version = Some(version_name(loc.version));
            e.super_offset_sectors.get_or_insert(loc.offset_bytes / 512);
            break;
        }
        if !matches!(damaged, Err(MetadataError::BadMagic { .. })) {
            break;
        }
    }
    let reasons: Vec<String> = probe.rejected.iter().map(|(v, off, why)| format!("{v} superblock at byte {off}: {why}")).collect();
    e.error = Some(if reasons.is_empty() { "no md superblock found".into() } else { reasons.join("; ") });
    e
}

/// The bad-block log's stored entries, read as mdadm's `examine_badblocks_super1` reads
/// them (same conditions for "no log configured" and "empty").
fn read_bad_blocks(e: &mut Examined, member: &dyn uraid_engine::member::Member, sb: &Superblock1) {
    if sb.bblog_size_sectors == 0 || sb.bblog_size_sectors > 100 || sb.bblog_offset_sectors == 0 {
        return;
    }
    if !sb.feature_map.contains(FeatureMap::BAD_BLOCKS) {
        e.bad_blocks = Some(Vec::new());
        return;
    }
    let at = (sb.super_offset_sectors as i64 + i64::from(sb.bblog_offset_sectors)) * 512;
    let mut log = vec![0u8; usize::from(sb.bblog_size_sectors) * 512];
    let read = u64::try_from(at).map_err(|_| "the log lies before the device start".to_string()).and_then(|at| {
        member.read_at(&mut log, at).map_err(|err| format!("cannot read the bad-block log: {err}"))?;
        decode_entries(&log, sb.bblog_shift).map_err(|err| err.to_string())
    });
    match read {
        Ok(entries) => e.bad_blocks = Some(entries.iter().map(|r| (r.start, r.sectors)).collect()),
        Err(why) => e.bad_blocks_error = Some(why),
    }
}

/// mdadm --examine-badblocks's text for one device.
fn print_bad_blocks(e: &Examined) {
    let dev = &e.device;
    match (&e.bad_blocks, &e.bad_blocks_error) {
        (_, Some(why)) => println!("{dev}: {why}"),
        (None, None) => println!("No bad-blocks list configured on {dev}"),
        (Some(list), None) if list.is_empty() => println!("Bad-blocks list is empty in {dev}"),
        (Some(list), None) => {
            println!("Bad-blocks on {dev}:");
            for (sector, count) in list {
                println!("{sector:>20} for {count} sectors");
            }
        }
    }
}

pub fn run(a: ExamineArgs) -> Result<ExitCode> {
    let results: Vec<Examined> = a.devices.iter().map(|p| examine_one(p)).collect();
    let all_ok = results.iter().all(|e| e.has_superblock);
    for e in results.iter().filter(|e| !e.has_superblock) {
        let error = e.error.as_deref().unwrap_or("no md superblock found");
        // Errors from opening the device already start with its name.
        if error.starts_with(&format!("{}: ", e.device)) {
            eprintln!("uraid: {error}");
        } else {
            eprintln!("uraid: {}: {error}", e.device);
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else if a.badblocks {
        for e in results.iter().filter(|e| e.has_superblock) {
            print_bad_blocks(e);
        }
    } else {
        for e in &results {
            print_text(e);
        }
    }
    Ok(if all_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn print_text(e: &Examined) {
    println!("{}:", e.device);
    let row = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            println!("{k:>16} : {v}");
        }
    };
    if !e.has_superblock {
        row("Error", e.error.clone());
    }
    row("Magic", e.version.as_ref().map(|_| "a92b4efc".to_string()));
    row("Version", e.version.clone());
    row("Feature Map", e.feature_map.clone());
    row("Array UUID", e.array_uuid.clone());
    row("Name", e.name.clone());
    row("Creation Time", e.creation_time.map(|t| t.to_string()));
    row("Raid Level", e.level.clone());
    row("Raid Devices", e.raid_devices.map(|v| v.to_string()));
    row("Avail Dev Size", e.avail_dev_size_sectors.map(|s| format!("{s} sectors ({:.2} MiB)", s as f64 / 2048.0)));
    row("Used Dev Size", e.used_dev_size_sectors.map(|s| format!("{s} sectors ({:.2} MiB)", s as f64 / 2048.0)));
    row("Data Offset", e.data_offset_sectors.map(|s| format!("{s} sectors")));
    row("New Offset", e.reshape.as_ref().and_then(|r| r.new_offset_sectors).map(|s| format!("{s} sectors")));
    row("Super Offset", e.super_offset_sectors.map(|s| format!("{s} sectors")));
    row("State", e.state.clone());
    row("Device UUID", e.device_uuid.clone());
    if let Some(r) = &e.reshape {
        let bytes = r.position_sectors * 512;
        row("Reshape pos'n", Some(format!("{} ({:.2} MiB {:.2} MB)", bytes / 1024, bytes as f64 / 1048576.0, bytes as f64 / 1e6)));
        if r.delta_devices != 0 {
            row(
                "Delta Devices",
                Some(format!("{} ({}->{})", r.delta_devices, r.raid_devices_before, r.raid_devices_before + i64::from(r.delta_devices))),
            );
        }
        if e.level.as_deref() != Some(r.new_level.as_str()) {
            row("New Level", Some(r.new_level.clone()));
        }
        if e.layout.as_deref() != Some(r.new_layout.as_str()) {
            row("New Layout", Some(r.new_layout.clone()));
        }
        if e.chunk_size_kib != Some(r.new_chunk_size_kib) {
            row("New Chunksize", Some(format!("{}K", r.new_chunk_size_kib)));
        }
    }
    row("Internal Bitmap", e.bitmap_offset_sectors.map(|s| format!("{s} sectors from superblock")));
    row("Update Time", e.update_time.map(|t| t.to_string()));
    row("Bad Block Log", e.bad_block_log.clone());
    row("Checksum", e.checksum.as_ref().map(|c| format!("{c} - {}", if e.checksum_correct == Some(true) { "correct" } else { "WRONG" })));
    row("Events", e.events.map(|v| v.to_string()));
    row("Layout", e.layout.clone().filter(|l| !l.is_empty() && l != "-"));
    row("Chunk Size", e.chunk_size_kib.map(|k| format!("{k}K")));
    row("Device Role", e.role.clone());
    row("Array State", e.array_state.clone().map(|s| format!("{s} ('A' == active, '.' == missing)")));
    println!();
}
