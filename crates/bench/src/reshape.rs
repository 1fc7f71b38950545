//! `uraid bench reshape`: how fast a reshape moves an array, against its bound, and what it
//! costs foreground reads.
//!
//! The bound is what any reshape must do at the members' speed: read the old shape's data
//! area of every member and write the new shape's area of every member (data and parity),
//! every member at once. It is measured in the same run on scratch files of the members'
//! size in the same folder (so the array's data is not touched), one thread per member,
//! 1 MiB requests. The reshape is the real one (`ReshapingArray::start` then `run`), with a
//! reader doing 4 KiB random reads through the reshaping array meanwhile (1000 a second, a
//! light steady client that does not take a core from the reshape); its p99 is set
//! next to the same reads on the idle array before the reshape. The array's content is
//! checked after the reshape, so a fast but wrong reshape cannot score.

use crate::stats::{LatHist, Latency};
use serde::Serialize;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use uraid_core::geometry::Level;
use uraid_core::metadata::create::{plan_create, CreateRequest, InitialSync, NewDevice};
use uraid_core::metadata::grow::GrowRequest;
use uraid_core::metadata::sb1::MdTime;
use uraid_engine::reshape::{ReshapeStep, ReshapingArray};
use uraid_engine::{Array, ArrayOptions, FileMember, Member};

#[derive(Clone, Debug)]
pub struct ReshapeBenchConfig {
    pub dir: PathBuf,
    pub level: Level,
    /// Members before the reshape.
    pub members: usize,
    pub chunk_bytes: u32,
    /// Array bytes before the reshape.
    pub data_bytes: u64,
    /// The change: more members, or another chunk.
    pub change: GrowRequest,
}

#[derive(Clone, Debug, Serialize)]
pub struct ReshapeRecord {
    pub level: String,
    pub change: String,
    pub members_before: usize,
    pub array_bytes_before: u64,
    pub array_bytes_after: u64,
    pub seconds: f64,
    /// New-shape array bytes moved per second.
    pub mb_per_s: f64,
    /// Seconds the bound takes (read old + write new on every member at once).
    pub bound_seconds: f64,
    /// bound_seconds / seconds: 1.0 is the members' speed.
    pub ratio: f64,
    /// 4 KiB random reads on the idle array, then during the reshape.
    pub read_idle: Option<Latency>,
    pub read_reshaping: Option<Latency>,
}

fn pattern(offset: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        let x = offset + i as u64;
        *b = (x ^ (x >> 8) ^ (x >> 17)).wrapping_mul(31) as u8;
    }
}

fn open_file(p: &Path, len: u64) -> Result<std::fs::File, String> {
    let f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(p).map_err(|e| e.to_string())?;
    f.set_len(len).map_err(|e| e.to_string())?;
    Ok(f)
}

/// Writes `byte` over the whole file, so every block exists before anything is timed.
fn fill_file(f: &std::fs::File, len: u64, byte: u8) -> Result<(), String> {
    let buf = vec![byte; 1 << 20];
    let mut at = 0;
    while at < len {
        let n = (1u64 << 20).min(len - at) as usize;
        f.write_all_at(&buf[..n], at).map_err(|e| e.to_string())?;
        at += n as u64;
    }
    Ok(())
}

/// The bound: each member's `read_bytes` read and `write_bytes` written, all members at
/// once, on scratch files; seconds for the slowest.
fn bound_seconds(dir: &Path, per_member: &[(u64, u64)], file_bytes: u64) -> Result<f64, String> {
    let files: Vec<std::fs::File> =
        (0..per_member.len()).map(|i| open_file(&dir.join(format!("bound-{i}.img")), file_bytes)).collect::<Result<_, _>>()?;
    for f in &files {
        fill_file(f, file_bytes, 0x5a)?;
    }
    let t = Instant::now();
    std::thread::scope(|s| -> Result<(), String> {
        let handles: Vec<_> = files
            .iter()
            .zip(per_member)
            .map(|(f, &(read, write))| {
                s.spawn(move || -> Result<(), String> {
                    let mut buf = vec![0u8; 1 << 20];
                    let (mut r, mut w) = (0, 0);
                    while r < read || w < write {
                        if r < read {
                            let n = (1u64 << 20).min(read - r) as usize;
                            f.read_exact_at(&mut buf[..n], r % file_bytes).map_err(|e| e.to_string())?;
                            r += n as u64;
                        }
                        if w < write {
                            let n = (1u64 << 20).min(write - w) as usize;
                            f.write_all_at(&buf[..n], w % file_bytes).map_err(|e| e.to_string())?;
                            w += n as u64;
                        }
                    }
                    f.sync_data().map_err(|e| e.to_string())
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| "bound thread panicked".to_string())??;
        }
        Ok(())
    })?;
    let secs = t.elapsed().as_secs_f64();
    for i in 0..per_member.len() {
        let _ = std::fs::remove_file(dir.join(format!("bound-{i}.img")));
    }
    Ok(secs)
}

/// Foreground 4 KiB random reads sampled at this rate (fio's `rate_iops`): a light,
/// steady client whose latency shows what the reshape costs it. A reader issuing reads
/// back to back would instead take a whole core from the reshape on a small machine, and
/// the ratio would measure the reader, not the reshape.
pub const FOREGROUND_READS_PER_S: u64 = 1000;

/// 4 KiB random reads until `stop`, through `read`, [`FOREGROUND_READS_PER_S`] a second.
fn random_reads(size: u64, stop: &AtomicBool, mut read: impl FnMut(u64, &mut [u8]) -> Result<(), String>) -> Result<LatHist, String> {
    let mut hist = LatHist::new();
    let mut buf = vec![0u8; 4096];
    let mut rng = uraid_parity::testdata::Prng::new(0x5eed);
    let interval = std::time::Duration::from_nanos(1_000_000_000 / FOREGROUND_READS_PER_S);
    let mut next = Instant::now();
    while !stop.load(Ordering::Acquire) {
        let at = rng.below(size / 4096) * 4096;
        let t = Instant::now();
        read(at, &mut buf)?;
        hist.record(t.elapsed());
        next += interval;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            // Fell behind (the read waited for a window): no burst to catch up.
            next = now;
        }
    }
    Ok(hist)
}

pub fn run(cfg: &ReshapeBenchConfig, progress: &mut dyn FnMut(&str)) -> Result<ReshapeRecord, String> {
    let (level, n) = (cfg.level, cfg.members);
    let parity = match level {
        Level::Raid4 | Level::Raid5 => 1,
        Level::Raid6 => 2,
        _ => return Err(format!("uraid reshapes RAID4/5/6, not {level}")),
    };
    let component = (cfg.data_bytes / (n - parity) as u64).div_ceil(1 << 20) << 20;
    let member_bytes = component + (8 << 20);
    let total = n.max(cfg.change.raid_disks.map_or(0, |m| m as usize));
    progress(&format!("{level}: creating {n} members + {} spare(s) of {} MiB", total - n, member_bytes >> 20));
    let paths: Vec<PathBuf> = (0..total).map(|i| cfg.dir.join(format!("reshape-{i}.img"))).collect();
    // Every block written once, as the bound's scratch files are: a disk has all its
    // blocks, and a sparse tmpfs file would charge the reshape (not the bound) for
    // allocating pages on the spare.
    for p in &paths {
        fill_file(&open_file(p, member_bytes)?, member_bytes, 0)?;
    }
    let devs: Vec<Arc<dyn Member>> = paths
        .iter()
        .map(|p| FileMember::open(p, true).map(|m| Arc::new(m) as Arc<dyn Member>))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let mut req = CreateRequest::new(
        level,
        "bench-reshape",
        devs[..n].iter().enumerate().map(|(i, m)| Some(NewDevice { size_bytes: m.size_bytes(), device_uuid: [i as u8 + 1; 16] })).collect(),
        [9; 16],
        MdTime::from_parts(1_700_000_000, 0),
    );
    req.spares =
        devs[n..].iter().enumerate().map(|(i, m)| NewDevice { size_bytes: m.size_bytes(), device_uuid: [0x80 + i as u8; 16] }).collect();
    req.chunk_bytes = Some(cfg.chunk_bytes);
    req.size_bytes = Some(component);
    req.initial_sync = InitialSync::AssumeClean;
    let plan = plan_create(&req).map_err(|e| e.to_string())?;
    let opt: Vec<Option<Arc<dyn Member>>> = devs[..n].iter().cloned().map(Some).collect();
    uraid_engine::create::write_plan(&plan, &opt, &devs[n..]).map_err(|e| e.to_string())?;
    let opts = ArrayOptions { writable: true, ..Default::default() };
    let (array, _) = Array::assemble(devs.clone(), &opts).map_err(|e| e.to_string())?;
    let size_before = array.size_bytes();
    progress(&format!("{level}: filling {} MiB", size_before >> 20));
    let mut buf = vec![0u8; 4 << 20];
    let mut at = 0;
    while at < size_before {
        let len = (buf.len() as u64).min(size_before - at) as usize;
        pattern(at, &mut buf[..len]);
        array.write(at, &buf[..len]).map_err(|e| e.to_string())?;
        at += len as u64;
    }
    array.flush().map_err(|e| e.to_string())?;
    let stop = AtomicBool::new(false);
    let idle = std::thread::scope(|s| {
        let h = s.spawn(|| random_reads(size_before, &stop, |at, b| array.read(at, b).map_err(|e| e.to_string())));
        std::thread::sleep(std::time::Duration::from_millis(500));
        stop.store(true, Ordering::Release);
        h.join().map_err(|_| "reader panicked".to_string())?
    })?;
    array.close().map_err(|e| e.to_string())?;
    drop(array);

    progress(&format!("{level}: reshaping"));
    let reshaping = ReshapingArray::start(devs.clone(), &opts, &cfg.change).map_err(|e| e.to_string())?;
    let new_members = cfg.change.raid_disks.map_or(n, |m| m as usize);
    let stop = AtomicBool::new(false);
    let t = Instant::now();
    let (during, seconds) = std::thread::scope(|s| -> Result<(LatHist, f64), String> {
        let h = s.spawn(|| random_reads(size_before, &stop, |at, b| reshaping.read(at, b).map_err(|e| e.to_string())));
        let step = reshaping.run(&|| false, |_| {}).map_err(|e| e.to_string());
        let seconds = t.elapsed().as_secs_f64();
        stop.store(true, Ordering::Release);
        let hist = h.join().map_err(|_| "reader panicked".to_string())??;
        if step? != ReshapeStep::Finished {
            return Err("the reshape did not finish".into());
        }
        Ok((hist, seconds))
    })?;
    reshaping.close().map_err(|e| e.to_string())?;
    drop(reshaping);
    let (array, _) = Array::assemble(devs.clone(), &opts).map_err(|e| e.to_string())?;
    let size_after = array.size_bytes();
    progress(&format!("{level}: checking the content"));
    let mut want = vec![0u8; 4 << 20];
    let mut at = 0;
    while at < size_after {
        let len = (buf.len() as u64).min(size_after - at) as usize;
        array.read(at, &mut buf[..len]).map_err(|e| e.to_string())?;
        if at < size_before {
            let keep = len.min((size_before - at) as usize);
            pattern(at, &mut want[..keep]);
            want[keep..len].fill(0);
        } else {
            want[..len].fill(0);
        }
        if buf[..len] != want[..len] {
            return Err(format!("the reshaped array differs from what was written near byte {at}"));
        }
        at += len as u64;
    }
    drop(array);
    progress(&format!("{level}: the bound (read old + write new on every member at once)"));
    // Old members read their component; every member of the new shape writes its own.
    let per_member: Vec<(u64, u64)> = (0..new_members).map(|i| (if i < n { component } else { 0 }, component)).collect();
    let bound = bound_seconds(&cfg.dir, &per_member, member_bytes)?;
    for p in &paths {
        let _ = std::fs::remove_file(p);
    }
    let change = match (cfg.change.raid_disks, cfg.change.chunk_sectors) {
        (Some(m), _) => format!("{n} -> {m} members"),
        (None, Some(c)) => format!("chunk {}K -> {}K", cfg.chunk_bytes / 1024, c / 2),
        _ => "layout".into(),
    };
    Ok(ReshapeRecord {
        level: level.to_string(),
        change,
        members_before: n,
        array_bytes_before: size_before,
        array_bytes_after: size_after,
        seconds,
        mb_per_s: size_after as f64 / seconds / 1e6,
        bound_seconds: bound,
        ratio: bound / seconds,
        read_idle: idle.summary(),
        read_reshaping: during.summary(),
    })
}
