//! `uraid create`: make a new md array on files or block devices, as `mdadm --create` does.

use crate::util::{human_bytes, open_members, parse_size, random_uuid, run_pending_jobs, IoOpt};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use uraid_core::geometry::{Algorithm, Level};
use uraid_core::metadata::create::{plan_create, BitmapRequest, CreateRequest, InitialSync, NewDevice};
use uraid_core::metadata::sb1::MdTime;
use uraid_core::metadata::MetadataVersion;
use uraid_engine::create::{check_device_is_free, write_plan};
use uraid_engine::{Array, ArrayOptions, Member};

#[derive(Args)]
pub struct CreateArgs {
    /// RAID level: linear, 0, 1, 4, 5, 6, 10 (or raid0, raid5, …).
    #[arg(long, short = 'l')]
    level: String,
    /// Number of active members (DEVs beyond that are spares, see --spare-devices).
    #[arg(long, short = 'n')]
    raid_devices: usize,
    /// Number of hot spares among the DEVs (the last ones).
    #[arg(long, short = 'x', default_value_t = 0)]
    spare_devices: usize,
    /// Chunk size, e.g. 64K, 512K (mdadm's default 512K).
    #[arg(long, short = 'c')]
    chunk: Option<String>,
    /// Layout: left-symmetric (default), left-asymmetric, right-symmetric, right-asymmetric,
    /// parity-first, parity-last, *-6, ddf-*; raid10 n2 (default), f2, o2, n3…; or a number.
    #[arg(long, short = 'p')]
    layout: Option<String>,
    /// Superblock version: 1.2 (default), 1.1, 1.0, 0.90.
    #[arg(long, short = 'e', default_value = "1.2")]
    metadata: String,
    /// Array name stored in the superblock (default "md0").
    #[arg(long, short = 'N', default_value = "md0")]
    name: String,
    /// Write-intent bitmap: internal or none.
    #[arg(long, short = 'b', default_value = "none")]
    bitmap: String,
    /// Data per bitmap bit, e.g. 4M (mdadm's --bitmap-chunk; default: 64M, or more if the
    /// bitmap would not fit). Smaller chunks make resyncs after a crash and re-adds shorter.
    #[arg(long)]
    bitmap_chunk: Option<String>,
    /// Skip the initial sync: only right when the members are known consistent (e.g. zero).
    #[arg(long)]
    assume_clean: bool,
    /// Size of device files that do not exist yet (created sparse), e.g. 64M.
    #[arg(long)]
    size: Option<String>,
    /// Bytes of each member to use (mdadm's --size); default: all that fits the smallest.
    #[arg(long)]
    component_size: Option<String>,
    /// Overwrite devices that hold an md superblock or a filesystem signature.
    #[arg(long, short = 'f')]
    force: bool,
    /// Do not run the initial resync/recovery now (it runs when the array is served).
    #[arg(long)]
    no_sync: bool,
    /// Print a JSON summary and nothing else on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    io: IoOpt,
    /// Member devices or files, in role order; `missing` leaves a slot empty.
    #[arg(required = true)]
    devices: Vec<String>,
}

pub fn parse_level(s: &str) -> Result<Level> {
    Ok(s.parse::<Level>()?)
}

pub fn parse_layout(level: Level, s: &str) -> Result<u32> {
    if let Ok(n) = s.parse::<u32>() {
        return Ok(n);
    }
    let t = s.to_ascii_lowercase();
    if level == Level::Raid10 {
        let (kind, n) = t.split_at(1);
        let copies: u32 = n.parse().with_context(|| format!("raid10 layout {s:?}: use n2, f2, o2, n3…"))?;
        return Ok(match kind {
            "n" => 0x100 | copies,
            "f" => (copies << 8) | 1,
            "o" => 0x10000 | (copies << 8) | 1,
            _ => bail!("raid10 layout {s:?}: use n2, f2, o2, n3…"),
        });
    }
    let aliases = [("ls", "left-symmetric"), ("la", "left-asymmetric"), ("rs", "right-symmetric"), ("ra", "right-asymmetric")];
    let t = aliases.iter().find(|(a, _)| *a == t).map_or(t.clone(), |(_, full)| full.to_string());
    (0..=20u32)
        .filter_map(Algorithm::from_md)
        .find(|a| a.name().eq_ignore_ascii_case(&t))
        .map(|a| a.to_md())
        .with_context(|| format!("unknown layout {s:?} for {level}"))
}

fn parse_metadata(s: &str) -> Result<MetadataVersion> {
    Ok(match s {
        "1.2" | "1" | "default" => MetadataVersion::V1_2,
        "1.1" => MetadataVersion::V1_1,
        "1.0" => MetadataVersion::V1_0,
        "0.90" | "0.9" | "0" => MetadataVersion::V0_90,
        _ => bail!("unknown metadata {s:?}: use 1.2, 1.1, 1.0 or 0.90"),
    })
}

pub fn run(a: CreateArgs) -> Result<ExitCode> {
    let level = parse_level(&a.level)?;
    if a.devices.len() != a.raid_devices + a.spare_devices {
        bail!(
            "{} devices given, but --raid-devices {} + --spare-devices {} = {}",
            a.devices.len(),
            a.raid_devices,
            a.spare_devices,
            a.raid_devices + a.spare_devices
        );
    }
    let metadata = parse_metadata(&a.metadata)?;
    let layout = a.layout.as_deref().map(|l| parse_layout(level, l)).transpose()?;
    let chunk_bytes = a
        .chunk
        .as_deref()
        .map(|c| {
            parse_size(c)
                .and_then(|b| u32::try_from(b).map_err(|_| anyhow::anyhow!("--chunk {c}: too large (md chunks are at most 2 GiB)")))
        })
        .transpose()?;
    if let Some(c) = chunk_bytes {
        // md's rules: chunks are whole 4 KiB pages, and a power of two for the striped
        // levels with parity or copies (raid5.c and raid10.c check is_power_of_2).
        let needs_power_of_two = matches!(level, Level::Raid4 | Level::Raid5 | Level::Raid6 | Level::Raid10);
        if c == 0 || c % 4096 != 0 || (needs_power_of_two && !c.is_power_of_two()) {
            bail!(
                "--chunk {}: a chunk must be a non-zero multiple of 4K{} (e.g. 64K, 512K)",
                a.chunk.as_deref().unwrap_or_default(),
                if needs_power_of_two { " and a power of two" } else { "" }
            );
        }
    }
    if a.raid_devices == 1 && !a.force {
        // mdadm: "'1' is an unusual number of drives for an array, so it is probably a mistake."
        bail!("--raid-devices 1 is an unusual number of drives for an array, so it is probably a mistake; add --force if you mean it");
    }
    let bitmap_chunk = match a.bitmap_chunk.as_deref() {
        None => None,
        Some(text) => match u32::try_from(parse_size(text)?) {
            Ok(bytes) => Some(bytes),
            Err(_) => bail!("--bitmap-chunk {text}: too large"),
        },
    };
    let bitmap = match a.bitmap.as_str() {
        "none" if bitmap_chunk.is_some() => bail!("--bitmap-chunk needs --bitmap internal"),
        "none" => None,
        "internal" => Some(BitmapRequest { chunk_bytes: bitmap_chunk }),
        other => bail!("--bitmap {other:?}: use internal or none"),
    };
    let file_size = a.size.as_deref().map(parse_size).transpose()?;
    let component = a.component_size.as_deref().map(parse_size).transpose()?;

    // Before anything is created or written: each device once, by any spelling.
    crate::util::refuse_duplicate_devices(&a.devices.iter().filter(|d| *d != "missing").collect::<Vec<_>>())?;
    // Create missing device files; remember them so a refused create removes them again
    // (bad input changes nothing).
    let mut created: Vec<PathBuf> = Vec::new();
    let result = (|| -> Result<ExitCode> {
        let mut paths: Vec<Option<PathBuf>> = Vec::new();
        for d in &a.devices {
            if d == "missing" {
                paths.push(None);
                continue;
            }
            let p = PathBuf::from(d);
            if !p.exists() && crate::util::nbd_uri(&p)?.is_none() {
                let Some(size) = file_size else {
                    bail!("{d} does not exist; give --size to create it as a sparse file");
                };
                let f = std::fs::OpenOptions::new().write(true).create_new(true).open(&p).with_context(|| format!("creating {d}"))?;
                f.set_len(size).with_context(|| format!("sizing {d}"))?;
                created.push(p.clone());
            }
            paths.push(Some(p));
        }
        let present: Vec<PathBuf> = paths.iter().flatten().cloned().collect();
        let opened = open_members(&present, true, a.io.mode())?;
        let mut it = opened.into_iter();
        let members: Vec<Option<Arc<dyn Member>>> = paths.iter().map(|p| p.as_ref().and_then(|_| it.next())).collect();
        if !a.force {
            for m in members.iter().flatten() {
                if !created.iter().any(|c| c.display().to_string() == m.label()) {
                    check_device_is_free(m.as_ref())?;
                }
            }
        }
        let new = |m: &Arc<dyn Member>| NewDevice { size_bytes: m.size_bytes(), device_uuid: random_uuid() };
        let (active, spares) = members.split_at(a.raid_devices);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let mut req = CreateRequest::new(
            level,
            a.name.clone(),
            active.iter().map(|m| m.as_ref().map(new)).collect(),
            random_uuid(),
            MdTime::from_parts(now, 0),
        );
        req.spares = spares.iter().flatten().map(new).collect();
        if spares.iter().any(|s| s.is_none()) {
            bail!("a spare cannot be `missing`");
        }
        req.layout = layout;
        req.chunk_bytes = chunk_bytes;
        req.metadata = metadata;
        req.bitmap = bitmap;
        req.size_bytes = component;
        req.initial_sync = if a.assume_clean { InitialSync::AssumeClean } else { InitialSync::Mdadm };
        let plan = plan_create(&req)?;
        let spare_members: Vec<Arc<dyn Member>> = spares.iter().flatten().cloned().collect();
        write_plan(&plan, active, &spare_members)?;
        let summary = serde_json::json!({
            "name": a.name,
            "level": level.to_string(),
            "raid_devices": a.raid_devices,
            "spare_devices": a.spare_devices,
            "layout": plan.layout,
            "chunk_bytes": plan.chunk_sectors as u64 * 512,
            "metadata": metadata.to_string(),
            "array_size_bytes": plan.array_size_sectors * 512,
            "component_size_bytes": plan.component_size_sectors * 512,
            "uuid": uraid_core::metadata::MdUuid(req.array_uuid).to_string(),
            "initial_sync": if a.assume_clean { "none (assume-clean)" } else if plan.needs_resync { "resync" } else if !plan.recovering_slots.is_empty() { "recovery" } else { "none" },
        });
        if !a.json {
            eprintln!(
                "uraid: created {} {level} array {:?} ({}), {} members{}, uuid {}",
                human_bytes(plan.array_size_sectors * 512),
                a.name,
                metadata,
                a.raid_devices,
                if a.spare_devices > 0 { format!(" + {} spare(s)", a.spare_devices) } else { String::new() },
                summary["uuid"].as_str().unwrap_or("")
            );
        }
        if !a.no_sync && !a.assume_clean && (plan.needs_resync || !plan.recovering_slots.is_empty()) {
            let all: Vec<Arc<dyn Member>> = members.iter().flatten().cloned().collect();
            let (array, _) = Array::assemble(all, &ArrayOptions { writable: true, ..Default::default() })?;
            run_pending_jobs(&array, a.json)?;
            array.close()?;
        }
        if a.json {
            println!("{}", serde_json::to_string_pretty(&summary)?);
        }
        Ok(ExitCode::SUCCESS)
    })();
    if result.is_err() {
        for p in &created {
            let _ = std::fs::remove_file(p);
        }
    }
    result
}
