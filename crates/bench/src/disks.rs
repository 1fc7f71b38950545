//! Workloads on emulated disks, each reported as a fraction of its level's bound: the "% of
//! raw" yardstick. Tmpfs figures measure this machine's CPU and memory; these measure how
//! the array schedules its disks, which is what "which layout for my disks?" asks.
//!
//! The disks are an in-process model ([`ModelDisk`]), not nbdkit's `rate` and `delay`
//! filters: on a small machine nbdkit's threads and the NBD copies compete with the array
//! for the same cores, so the figure would again measure the machine; the model costs one
//! sleep per request. A disk serves requests on `channels` queues (an HDD has one, flash
//! several); a request costs its transfer at `rate`, plus `latency` unless it starts where
//! the channel's previous request ended (a sequential stream does not seek).
//!
//! Bounds, each from one model disk measured with the same requests in the same run:
//! - RAID0 reads and writes, and parity-level reads: n × one disk;
//! - RAID4/5/6 full-stripe write: (n − parity) × one disk;
//! - RAID5 4K random write: n × one disk's IOPS / 4 (read data and P, write both); RAID6:
//!   n × IOPS / 6.

use crate::array::data_disks;
use serde::Serialize;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uraid_core::geometry::Level;
use uraid_engine::array::CheckReport;
use uraid_engine::{Array, Member};
use uraid_parity::testdata::Prng;

/// How an emulated disk performs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DiskProfile {
    /// Bytes per second one channel transfers.
    pub rate_bytes_s: f64,
    /// Positioning time of a request that does not continue the previous one.
    pub latency: Duration,
    /// Requests served at once.
    pub channels: usize,
}

impl DiskProfile {
    /// `hdd` (7200 rpm: 180 MB/s, 8 ms, one head), `ssd` (SATA: 500 MB/s, 0.1 ms, 4
    /// queues), `nvme` (2 GB/s, 20 µs, 8 queues), or `RATE[:LATENCY]` (`150M:4ms`: one
    /// channel; RATE in bytes/s with K/M/G, LATENCY with ms or us).
    pub fn parse(s: &str) -> Result<DiskProfile, String> {
        let ms = |v: f64| Duration::from_secs_f64(v / 1000.0);
        Ok(match s {
            "hdd" => DiskProfile { rate_bytes_s: 180e6, latency: ms(8.0), channels: 1 },
            "ssd" => DiskProfile { rate_bytes_s: 500e6, latency: ms(0.1), channels: 4 },
            "nvme" => DiskProfile { rate_bytes_s: 2000e6, latency: ms(0.02), channels: 8 },
            custom => {
                let (rate, lat) = custom.split_once(':').unwrap_or((custom, "0ms"));
                let (digits, mult) = match rate.chars().last() {
                    Some('K' | 'k') => (&rate[..rate.len() - 1], 1e3),
                    Some('M' | 'm') => (&rate[..rate.len() - 1], 1e6),
                    Some('G' | 'g') => (&rate[..rate.len() - 1], 1e9),
                    _ => (rate, 1.0),
                };
                let rate_bytes_s =
                    digits.parse::<f64>().map_err(|_| format!("{custom}: a disk profile is hdd, ssd, nvme or RATE[:LATENCY]"))? * mult;
                let latency = if let Some(v) = lat.strip_suffix("ms") {
                    ms(v.parse::<f64>().map_err(|_| format!("{lat}: latency like 4ms or 100us"))?)
                } else if let Some(v) = lat.strip_suffix("us") {
                    ms(v.parse::<f64>().map_err(|_| format!("{lat}: latency like 4ms or 100us"))? / 1000.0)
                } else {
                    return Err(format!("{lat}: latency like 4ms or 100us"));
                };
                if rate_bytes_s.is_nan() || rate_bytes_s <= 0.0 {
                    return Err(format!("{custom}: the rate must be above 0"));
                }
                DiskProfile { rate_bytes_s, latency, channels: 1 }
            }
        })
    }

    /// What one request of `bytes` costs when the channel's previous request ended at
    /// `last_end`: nothing to position if it continues it; a short skip forward (up to
    /// [`SHORT_SKIP`]) costs the time the skipped bytes take to pass, as a head waits for
    /// them rather than seeking (RAID5's sequential reads skip every parity chunk); anything
    /// else costs `latency`.
    fn service(&self, bytes: usize, offset: u64, last_end: u64) -> Duration {
        let transfer = |n: u64| Duration::from_secs_f64(n as f64 / self.rate_bytes_s);
        let position = match offset.checked_sub(last_end) {
            Some(0) => Duration::ZERO,
            Some(gap) if gap <= SHORT_SKIP => transfer(gap).min(self.latency),
            _ => self.latency,
        };
        transfer(bytes as u64) + position
    }
}

/// Sleeps until `done`.
fn wait_until(done: Instant) {
    let wait = done.saturating_duration_since(Instant::now());
    if !wait.is_zero() {
        std::thread::sleep(wait);
    }
}

/// The longest forward skip a disk waits out instead of seeking.
const SHORT_SKIP: u64 = 1 << 20;

/// An emulated disk in memory: each request waits for a channel, then for its service time.
pub struct ModelDisk {
    label: String,
    profile: DiskProfile,
    data: Mutex<Vec<u8>>,
    /// Per channel: when it is free, and where its last request ended.
    channels: Mutex<Vec<(Instant, u64)>>,
}

impl ModelDisk {
    pub fn new(label: String, size: usize, profile: DiskProfile) -> ModelDisk {
        let now = Instant::now();
        ModelDisk { label, profile, data: Mutex::new(vec![0; size]), channels: Mutex::new(vec![(now, u64::MAX); profile.channels.max(1)]) }
    }

    /// Books the request on the channel that frees first (one that continues its previous
    /// request is taken when free as early); returns when the disk will have done it. The
    /// caller copies the bytes, then [`wait_until`]s it: the copy (and a fresh page's first
    /// touch) overlaps the modelled transfer instead of adding to it.
    fn occupy(&self, offset: u64, bytes: usize) -> Instant {
        let mut ch = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let pick = (0..ch.len()).min_by_key(|&i| (ch[i].0.max(now), ch[i].1 != offset)).unwrap_or(0);
        let start = ch[pick].0.max(now);
        let done = start + self.profile.service(bytes, offset, ch[pick].1);
        ch[pick] = (done, offset + bytes as u64);
        done
    }
}

impl Member for ModelDisk {
    fn label(&self) -> &str {
        &self.label
    }
    fn size_bytes(&self) -> u64 {
        self.data.lock().unwrap_or_else(|e| e.into_inner()).len() as u64
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        uraid_engine::member::check_range(self, offset, buf.len())?;
        let done = self.occupy(offset, buf.len());
        buf.copy_from_slice(&self.data.lock().unwrap_or_else(|e| e.into_inner())[offset as usize..offset as usize + buf.len()]);
        wait_until(done);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        uraid_engine::member::check_range(self, offset, buf.len())?;
        let done = self.occupy(offset, buf.len());
        self.data.lock().unwrap_or_else(|e| e.into_inner())[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
        wait_until(done);
        Ok(())
    }
    // A vectored request is one request to the disk (one positioning, one transfer).
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        uraid_engine::member::check_range(self, offset, total)?;
        let done = self.occupy(offset, total);
        {
            let d = self.data.lock().unwrap_or_else(|e| e.into_inner());
            let mut at = offset as usize;
            for b in bufs.iter_mut() {
                b.copy_from_slice(&d[at..at + b.len()]);
                at += b.len();
            }
        }
        wait_until(done);
        Ok(())
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        uraid_engine::member::check_range(self, offset, total)?;
        let done = self.occupy(offset, total);
        {
            let mut d = self.data.lock().unwrap_or_else(|e| e.into_inner());
            let mut at = offset as usize;
            for b in bufs {
                d[at..at + b.len()].copy_from_slice(b);
                at += b.len();
            }
        }
        wait_until(done);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
}

/// One measured point.
#[derive(Debug, Clone, Serialize)]
pub struct DiskRecord {
    pub level: String,
    pub disks: usize,
    pub workload: String,
    /// MB/s for sequential workloads, IOPS for random ones.
    pub unit: &'static str,
    pub array: f64,
    /// The same requests on one model disk, measured in this run.
    pub one_disk: f64,
    pub bound: f64,
    /// `array / bound`.
    pub fraction: f64,
}

/// An array of `level` over `n` model disks of `disk_bytes`, created assume-clean.
pub fn build(level: Level, n: usize, chunk: u32, disk_bytes: usize, profile: DiskProfile) -> Result<Array, String> {
    let members: Vec<Arc<dyn Member>> =
        (0..n).map(|i| Arc::new(ModelDisk::new(format!("disk{i}"), disk_bytes, profile)) as Arc<dyn Member>).collect();
    let array = crate::array::create_over(level, chunk, members)?;
    // The first write marks the array active: a superblock write per disk, each a seek.
    // Done here, so the workloads measure the steady state (as the `array` bench does
    // after its first request), not a one-time cost that would be a tenth of a short run.
    array.write(0, &[0u8; 4096]).map_err(|e| e.to_string())?;
    Ok(array)
}

/// Sequential requests of `request` bytes over `total` bytes from `threads` threads, each on
/// its own contiguous region; returns MB/s.
fn sequential(total: u64, request: u64, threads: usize, op: &(dyn Fn(u64, &mut [u8]) -> io::Result<()> + Sync)) -> Result<f64, String> {
    let per = total / threads as u64 / request * request;
    let start = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> io::Result<()> {
                    let mut buf = vec![0x5au8; request as usize];
                    let mut at = t as u64 * per;
                    while at < (t as u64 + 1) * per {
                        op(at, &mut buf)?;
                        at += request;
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("worker panicked"))))
    })
    .map_err(|e| e.to_string())?;
    Ok((per * threads as u64) as f64 / start.elapsed().as_secs_f64() / 1e6)
}

/// `count` random 4 KiB requests over `span` bytes from `threads` threads; returns IOPS.
fn random_4k(
    span: u64,
    count: usize,
    threads: usize,
    seed: u64,
    op: &(dyn Fn(u64, &mut [u8]) -> io::Result<()> + Sync),
) -> Result<f64, String> {
    let start = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> io::Result<()> {
                    let mut rng = Prng::new(seed ^ ((t as u64 + 1) * 0x9e37_79b9));
                    let mut buf = vec![0xa5u8; 4096];
                    for _ in 0..count / threads {
                        op(rng.below(span / 4096) * 4096, &mut buf)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("worker panicked"))))
    })
    .map_err(|e| e.to_string())?;
    Ok((count / threads * threads) as f64 / start.elapsed().as_secs_f64())
}

/// What to run.
#[derive(Debug, Clone)]
pub struct DisksConfig {
    pub profile: DiskProfile,
    pub levels: Vec<Level>,
    pub disks: usize,
    pub chunk: u32,
    /// Bytes each disk holds.
    pub disk_bytes: usize,
    /// Random 4 KiB writes per random point.
    pub random_writes: usize,
    /// Requests in flight for random writes.
    pub threads: usize,
}

/// Sequential request size: 16 data stripes (so a parity write is full-stripe and every
/// disk gets a long run per request), at least 4 MiB.
fn seq_request(level: Level, n: usize, chunk: u32) -> u64 {
    let stripe = data_disks(level, n) as u64 * chunk as u64;
    (64 * stripe).max((16u64 << 20) / stripe * stripe)
}

pub fn run(cfg: &DisksConfig, progress: &mut dyn FnMut(&str)) -> Result<Vec<DiskRecord>, String> {
    let mut out = Vec::new();
    // One disk, the same requests: its sequential rate and 4 KiB random write IOPS.
    let one = ModelDisk::new("one".into(), cfg.disk_bytes, cfg.profile);
    let one_seq_write = sequential(cfg.disk_bytes as u64 / 2, 1 << 20, 1, &|at, b| one.write_at(b, at))?;
    let one_seq_read = sequential(cfg.disk_bytes as u64 / 2, 1 << 20, 1, &|at, b| one.read_at(b, at))?;
    let one_iops = random_4k(cfg.disk_bytes as u64, cfg.random_writes / 4, cfg.threads, 1, &|at, b| one.write_at(b, at))?;
    progress(&format!("one disk: write {one_seq_write:.1} MB/s, read {one_seq_read:.1} MB/s, 4K random write {one_iops:.0} IOPS"));
    for &level in &cfg.levels {
        let n = cfg.disks;
        let dd = data_disks(level, n) as f64;
        let array = build(level, n, cfg.chunk, cfg.disk_bytes, cfg.profile)?;
        let size = array.size_bytes();
        let req = seq_request(level, n, cfg.chunk);
        let total = (size / 2 / req).max(1) * req;
        let mut record = |workload: &str, unit, value: f64, one_disk: f64, bound: f64| {
            let r = DiskRecord {
                level: level.to_string(),
                disks: n,
                workload: workload.into(),
                unit,
                array: value,
                one_disk,
                bound,
                fraction: value / bound,
            };
            progress(&format!("{} × {n} {workload}: {value:.1} {unit} = {:.2} of the bound {bound:.1}", r.level, r.fraction));
            out.push(r);
        };
        let w = sequential(total, req, 1, &|at, b| array.write(at, b).map_err(|e| io::Error::other(e.to_string())))?;
        let write_bound = match level {
            Level::Raid0 | Level::Linear => n as f64,
            _ => dd,
        } * one_seq_write;
        record("seq-write", "MB/s", w, one_seq_write, write_bound);
        let r = sequential(total, req, 1, &|at, b| array.read(at, b).map_err(|e| io::Error::other(e.to_string())))?;
        record("seq-read", "MB/s", r, one_seq_read, n as f64 * one_seq_read);
        if matches!(level, Level::Raid5 | Level::Raid6) {
            let iops = random_4k(size, cfg.random_writes, cfg.threads, 7, &|at, b| {
                array.write(at, b).map_err(|e| io::Error::other(e.to_string()))
            })?;
            let per_write = if level == Level::Raid5 { 4.0 } else { 6.0 };
            record("rand-write-4k", "IOPS", iops, one_iops, n as f64 * one_iops / per_write);
        }
    }
    Ok(out)
}

/// md's published 10-disk experiment, scaled: sequential write on RAID0 and RAID6, and a
/// RAID6 check; returns the records and the RAID6/RAID0 write ratio (md: 0.61).
pub fn ten_disk_experiment(
    profile: DiskProfile,
    disk_bytes: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<DiskRecord>, f64), String> {
    let n = 10;
    let chunk = 512 << 10;
    let one = ModelDisk::new("one".into(), disk_bytes, profile);
    let one_seq = sequential(disk_bytes as u64 / 2, 1 << 20, 1, &|at, b| one.write_at(b, at))?;
    let mut out = Vec::new();
    let mut write = |level: Level| -> Result<f64, String> {
        let array = build(level, n, chunk, disk_bytes, profile)?;
        let req = seq_request(level, n, chunk);
        let total = (array.size_bytes() / 2 / req).max(1) * req;
        let v = sequential(total, req, 1, &|at, b| array.write(at, b).map_err(|e| io::Error::other(e.to_string())))?;
        let bound = data_disks(level, n) as f64 * one_seq;
        progress(&format!("{level} × 10 seq-write: {v:.1} MB/s = {:.2} of {bound:.1}", v / bound));
        out.push(DiskRecord {
            level: level.to_string(),
            disks: n,
            workload: "seq-write".into(),
            unit: "MB/s",
            array: v,
            one_disk: one_seq,
            bound,
            fraction: v / bound,
        });
        Ok(v)
    };
    let r0 = write(Level::Raid0)?;
    let r6 = write(Level::Raid6)?;
    // The check: every member read, P and Q verified.
    let array = build(Level::Raid6, n, chunk, disk_bytes, profile)?;
    let start = Instant::now();
    let (mut pos, mut report) = (0, CheckReport::default());
    while pos < array.sync_sectors() {
        pos = array.check_step(pos, 16 << 11, false, &mut report).map_err(|e| e.to_string())?.done_sectors;
    }
    let check = array.sync_sectors() as f64 * 512.0 * n as f64 / start.elapsed().as_secs_f64() / 1e6;
    let bound = n as f64 * one_seq;
    progress(&format!("raid6 × 10 check: {check:.1} MB/s of member reads = {:.2} of {bound:.1}", check / bound));
    out.push(DiskRecord {
        level: "raid6".into(),
        disks: n,
        workload: "check".into(),
        unit: "MB/s",
        array: check,
        one_disk: one_seq,
        bound,
        fraction: check / bound,
    });
    Ok((out, r6 / r0))
}

/// A table of the records.
pub fn render(records: &[DiskRecord], profile: &str) -> String {
    let mut s = format!("Emulated disks ({profile}); fraction = array / bound, bound from one disk measured in this run\n");
    s +=
        &format!("{:<7} {:>5} {:<14} {:>12} {:>12} {:>12} {:>9}\n", "level", "disks", "workload", "array", "one disk", "bound", "fraction");
    for r in records {
        s += &format!(
            "{:<7} {:>5} {:<14} {:>8.1} {:<4}{:>8.1} {:<4}{:>8.1} {:<4}{:>8.2}\n",
            r.level, r.disks, r.workload, r.array, r.unit, r.one_disk, r.unit, r.bound, r.unit, r.fraction
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_parse() {
        assert_eq!(DiskProfile::parse("hdd").unwrap().channels, 1);
        let p = DiskProfile::parse("150M:4ms").unwrap();
        assert_eq!((p.rate_bytes_s, p.latency, p.channels), (150e6, Duration::from_millis(4), 1));
        assert_eq!(DiskProfile::parse("2G:20us").unwrap().latency, Duration::from_micros(20));
        assert!(DiskProfile::parse("fast").is_err());
        assert!(DiskProfile::parse("0M:1ms").is_err());
        assert!(DiskProfile::parse("10M:1s").is_err());
    }

    #[test]
    fn a_small_run_reports_every_point_with_its_bound() {
        // Fast disks and small sizes: this checks the plumbing, never a speed.
        let cfg = DisksConfig {
            profile: DiskProfile::parse("4G:10us").unwrap(),
            levels: vec![Level::Raid0, Level::Raid6],
            disks: 4,
            chunk: 64 << 10,
            disk_bytes: 24 << 20,
            random_writes: 64,
            threads: 4,
        };
        let records = run(&cfg, &mut |_| {}).unwrap();
        let names: Vec<String> = records.iter().map(|r| format!("{} {}", r.level, r.workload)).collect();
        assert_eq!(names, ["raid0 seq-write", "raid0 seq-read", "raid6 seq-write", "raid6 seq-read", "raid6 rand-write-4k"]);
        for r in &records {
            assert!(r.array > 0.0 && r.bound > 0.0 && (r.fraction - r.array / r.bound).abs() < 1e-9, "{r:?}");
        }
        // The bound of a RAID6 full-stripe write counts its data disks only.
        let w = &records[2];
        assert!((w.bound - 2.0 * w.one_disk).abs() < 1e-6, "{w:?}");
    }

    #[test]
    fn a_sequential_stream_does_not_seek_a_short_skip_waits_and_a_jump_seeks() {
        let p = DiskProfile { rate_bytes_s: 1e9, latency: Duration::from_millis(5), channels: 1 };
        assert_eq!(p.service(1000, 4000, 4000), Duration::from_micros(1));
        assert_eq!(p.service(1000, 4000 + 64_000, 4000), Duration::from_micros(65));
        assert_eq!(p.service(1000, 100 << 20, 4000), Duration::from_micros(5001));
        assert_eq!(p.service(1000, 0, 4000), Duration::from_micros(5001), "backwards seeks");
        assert_eq!(p.service(1000, 0, u64::MAX), Duration::from_micros(5001), "the first request seeks");
    }
}
