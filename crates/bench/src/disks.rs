//! Workloads on emulated disks, each reported as a fraction of its level's bound: the "% of
//! raw" yardstick. Tmpfs figures measure this machine's CPU and memory; these measure how
//! the array schedules its disks, which is what "which layout for my disks?" asks.
//!
//! The disks are an in-process model ([`ModelDisk`]), not nbdkit's `rate` and `delay`
//! filters: on a small machine nbdkit's threads and the NBD copies compete with the array
//! for the same cores, so the figure would again measure the machine; the model costs one
//! sleep per request. A disk's requests join one queue that `channels` heads serve (an HDD
//! has one, flash several), each taking the request that continues its last one first, as
//! a disk's command queue or the kernel's elevator orders them; a request costs its
//! transfer at `rate`, plus `latency` unless it starts where the channel's previous request
//! ended (a sequential stream does not seek). A request's runs on one member join the
//! queue together ([`Member::run_batch`]), as md's bios do.
//!
//! Bounds, each from one model disk measured with the same requests in the same run:
//! - RAID0 reads and writes, and parity-level reads: n × one disk;
//! - RAID4/5/6 full-stripe write: (n − parity) × one disk;
//! - RAID5 4K random write: n × one disk's IOPS / 4 (read data and P, write both); RAID6:
//!   n × IOPS / 6.

use crate::array::data_disks;
use serde::Serialize;
use std::io;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use uraid_core::geometry::Level;
use uraid_engine::array::CheckReport;
use uraid_engine::member::{Bufs, Run};
use uraid_engine::{Array, Member};
use uraid_parity::testdata::Prng;

/// How an emulated disk performs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DiskProfile {
    /// Bytes per second the disk transfers (its channels share it, as they share one
    /// interface: a 4-queue SATA SSD still moves 500 MB/s).
    pub rate_bytes_s: f64,
    /// Positioning time of a request that does not continue the previous one.
    pub latency: Duration,
    /// Requests positioned at once (their transfers share the rate).
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

    /// The positioning a request at `offset` costs when the channel's previous request
    /// ended at `last_end`: nothing if it continues it; a short skip forward (up to
    /// [`SHORT_SKIP`]) costs the time the skipped bytes take to pass, as a head waits for
    /// them rather than seeking (RAID5's sequential reads skip every parity chunk); anything
    /// else costs `latency`.
    fn position(&self, offset: u64, last_end: u64) -> Duration {
        match offset.checked_sub(last_end) {
            Some(0) => Duration::ZERO,
            Some(gap) if gap <= SHORT_SKIP => self.transfer(gap).min(self.latency),
            _ => self.latency,
        }
    }

    /// The time `bytes` take at the disk's rate.
    fn transfer(&self, bytes: u64) -> Duration {
        Duration::from_secs_f64(bytes as f64 / self.rate_bytes_s)
    }

    /// What one request costs alone on a channel: its positioning, then its transfer.
    #[cfg(test)]
    fn service(&self, bytes: usize, offset: u64, last_end: u64) -> Duration {
        self.position(offset, last_end) + self.transfer(bytes as u64)
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

/// A request waiting in a disk's queue.
struct Queued {
    id: u64,
    offset: u64,
    bytes: usize,
    enqueued: Instant,
}

/// A disk's queue: what waits, and when each request picked from it will be done.
#[derive(Default)]
struct DiskQueue {
    waiting: Vec<Queued>,
    done_at: std::collections::HashMap<u64, Instant>,
    /// When the disk's interface is free for the next transfer.
    transfer_free: Option<Instant>,
    next_id: u64,
    shutdown: bool,
}

struct DiskShared {
    profile: DiskProfile,
    queue: Mutex<DiskQueue>,
    /// A request joined the queue (the channels wait on it).
    arrived: Condvar,
    /// A channel picked a request (its submitter waits on it).
    picked: Condvar,
}

impl DiskShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, DiskQueue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One channel: whenever it is free, it takes the queued request that continues where
    /// its last one ended, else the nearest one ahead, else the lowest (an elevator, as a
    /// disk with a command queue or the kernel's scheduler orders them), books its
    /// positioning from when the channel was free (or the request came, if later), then its
    /// transfer once the disk's interface is free, and waits that out. Times are booked, not
    /// slept: a late wake-up does not slow the disk down.
    fn channel(&self) {
        let mut free_at = Instant::now();
        let mut end = u64::MAX;
        loop {
            let mut q = self.lock();
            while q.waiting.is_empty() && !q.shutdown {
                q = self.arrived.wait(q).unwrap_or_else(|e| e.into_inner());
            }
            if q.shutdown {
                return;
            }
            let pick = next_request(&q.waiting, end);
            let r = q.waiting.swap_remove(pick);
            let done = book(&self.profile, free_at, end, &mut q.transfer_free, r.offset, r.bytes, r.enqueued);
            q.done_at.insert(r.id, done);
            drop(q);
            self.picked.notify_all();
            (free_at, end) = (done, r.offset + r.bytes as u64);
            wait_until(done);
        }
    }
}

/// Which waiting request a channel whose last request ended at `end` takes: the one that
/// continues it, else the nearest ahead, else the lowest (C-LOOK); the first request of a
/// channel (`end` unknown, `u64::MAX`) takes the lowest.
fn next_request(waiting: &[Queued], end: u64) -> usize {
    waiting.iter().enumerate().min_by_key(|(_, r)| (r.offset != end, r.offset < end && end != u64::MAX, r.offset)).map_or(0, |(i, _)| i)
}

/// When a request of `bytes` at `offset`, queued at `enqueued`, is done on a channel free
/// since `free_at` whose last request ended at `end`: positioned from then, transferred once
/// the disk's interface (`transfer_free`, updated) is free.
fn book(
    profile: &DiskProfile,
    free_at: Instant,
    end: u64,
    transfer_free: &mut Option<Instant>,
    offset: u64,
    bytes: usize,
    enqueued: Instant,
) -> Instant {
    let positioned = free_at.max(enqueued) + profile.position(offset, end);
    let done = transfer_free.map_or(positioned, |t| t.max(positioned)) + profile.transfer(bytes as u64);
    *transfer_free = Some(done);
    done
}

/// An emulated disk in memory: requests join one queue that `channels` threads serve (see
/// [`DiskShared::channel`]); each request waits for its booked service time.
pub struct ModelDisk {
    label: String,
    /// Requests queued so far.
    submitted: std::sync::atomic::AtomicU64,
    data: Mutex<Vec<u8>>,
    shared: Arc<DiskShared>,
    channels: Vec<std::thread::JoinHandle<()>>,
}

impl ModelDisk {
    pub fn new(label: String, size: usize, profile: DiskProfile) -> ModelDisk {
        let shared = Arc::new(DiskShared { profile, queue: Mutex::default(), arrived: Condvar::new(), picked: Condvar::new() });
        let channels = (0..profile.channels.max(1))
            .map(|_| {
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || shared.channel())
            })
            .collect();
        ModelDisk { label, submitted: Default::default(), data: Mutex::new(vec![0; size]), shared, channels }
    }

    /// Queues requests of `(offset, bytes)` together; their ids.
    fn submit(&self, requests: impl Iterator<Item = (u64, usize)>) -> Vec<u64> {
        self.submitted.fetch_add(1, std::sync::atomic::Ordering::Release);
        let mut q = self.shared.lock();
        let now = Instant::now();
        let ids = requests
            .map(|(offset, bytes)| {
                let id = q.next_id;
                q.next_id += 1;
                q.waiting.push(Queued { id, offset, bytes, enqueued: now });
                id
            })
            .collect();
        drop(q);
        self.shared.arrived.notify_all();
        ids
    }

    /// Waits until a channel picked request `id`; when it will be done. The caller copies
    /// the bytes, then [`wait_until`]s it: the copy overlaps the modelled transfer.
    fn picked(&self, id: u64) -> Instant {
        let mut q = self.shared.lock();
        loop {
            if let Some(done) = q.done_at.remove(&id) {
                return done;
            }
            q = self.shared.picked.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn copy_out(&self, bufs: &mut [&mut [u8]], offset: u64) {
        let d = self.data.lock().unwrap_or_else(|e| e.into_inner());
        let mut at = offset as usize;
        for b in bufs.iter_mut() {
            b.copy_from_slice(&d[at..at + b.len()]);
            at += b.len();
        }
    }

    fn copy_in(&self, bufs: &[&[u8]], offset: u64) {
        let mut d = self.data.lock().unwrap_or_else(|e| e.into_inner());
        let mut at = offset as usize;
        for b in bufs {
            d[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        }
    }
}

impl Drop for ModelDisk {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.arrived.notify_all();
        for c in self.channels.drain(..) {
            let _ = c.join();
        }
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
        self.read_vectored_at(&mut [buf], offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_vectored_at(&[buf], offset)
    }
    // A vectored request is one request to the disk (one positioning, one transfer).
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        self.run_batch(&mut [Run { offset, bufs: Bufs::Read(bufs.iter_mut().map(|b| &mut **b).collect()) }])
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.run_batch(&mut [Run { offset, bufs: Bufs::Write(bufs.to_vec()) }])
    }
    // A request's runs join the queue together, as md's bios do.
    fn run_batch(&self, runs: &mut [Run<'_>]) -> io::Result<()> {
        for r in runs.iter() {
            uraid_engine::member::check_range(self, r.offset, r.bufs.bytes())?;
        }
        let ids = self.submit(runs.iter().map(|r| (r.offset, r.bufs.bytes())));
        let mut last = Instant::now();
        for (r, id) in runs.iter_mut().zip(ids) {
            last = last.max(self.picked(id));
            match &mut r.bufs {
                Bufs::Read(b) => self.copy_out(b, r.offset),
                Bufs::Write(b) => self.copy_in(b, r.offset),
            }
        }
        wait_until(last);
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
pub fn build(level: Level, n: usize, chunk: u32, disk_bytes: usize, profile: DiskProfile) -> Result<(Array, Vec<Arc<ModelDisk>>), String> {
    let disks: Vec<Arc<ModelDisk>> = (0..n).map(|i| Arc::new(ModelDisk::new(format!("disk{i}"), disk_bytes, profile))).collect();
    let members = disks.iter().map(|d| Arc::clone(d) as Arc<dyn Member>).collect();
    let array = crate::array::create_over(level, chunk, members)?;
    // The first write marks the array active: a superblock write per disk, each a seek.
    // Done here, so the workloads measure the steady state (as the `array` bench does
    // after its first request), not a one-time cost that would be a tenth of a short run.
    array.write(0, &[0u8; 4096]).map_err(|e| e.to_string())?;
    Ok((array, disks))
}

/// Sequential requests of `request` bytes over `total` bytes, `depth` of them in flight: one
/// stream, as fio's `iodepth` keeps it (each worker takes the next request of the one
/// stream, so every disk sees one ascending run and a request is queued behind the one
/// in service instead of the disks idling between requests); returns MB/s.
///
/// The stream starts as an application's does: the first request reaches the `disks` before
/// the second is issued. Issued at the same instant, the second could reach a disk first,
/// and each disk would seek three times at the start, a few percent of a short run.
fn sequential(
    total: u64,
    request: u64,
    depth: usize,
    disks: &[&ModelDisk],
    op: &(dyn Fn(u64, &mut [u8]) -> io::Result<()> + Sync),
) -> Result<f64, String> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let count = total / request;
    let next = AtomicU64::new(0);
    let first_done = AtomicBool::new(false);
    let before: Vec<u64> = disks.iter().map(|d| d.submitted.load(Ordering::Acquire)).collect();
    let first_reached_disks = || disks.iter().zip(&before).all(|(d, b)| d.submitted.load(Ordering::Acquire) > *b);
    let start = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..depth.max(1))
            .map(|worker| {
                let (next, first_done, first_reached_disks) = (&next, &first_done, &first_reached_disks);
                s.spawn(move || -> io::Result<()> {
                    let mut buf = vec![0x5au8; request as usize];
                    if worker > 0 {
                        // Bounded by the first request: it reaches the disks, or it ends.
                        while !first_reached_disks() && !first_done.load(Ordering::Acquire) {
                            std::thread::sleep(Duration::from_micros(20));
                        }
                    }
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= count {
                            return Ok(());
                        }
                        let result = op(i * request, &mut buf);
                        if i == 0 {
                            first_done.store(true, Ordering::Release);
                        }
                        result?;
                    }
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("worker panicked"))))
    })
    .map_err(|e| e.to_string())?;
    Ok((count * request) as f64 / start.elapsed().as_secs_f64() / 1e6)
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
    /// Requests in flight for sequential reads and writes (one stream).
    pub seq_depth: usize,
}

/// One disk's sequential rate in 1 MiB requests: the better of one request in flight and
/// `depth` of them, so the bound is never lowered by a queue the disk serves worse (two
/// requests of one stream booked out of order cost a seek) nor by the sleep between
/// requests that a queue hides.
fn one_disk_sequential(one: &ModelDisk, total: u64, depth: usize, write: bool) -> Result<f64, String> {
    let op = |at: u64, b: &mut [u8]| if write { one.write_at(b, at) } else { one.read_at(b, at) };
    let single = sequential(total, 1 << 20, 1, &[one], &op)?;
    let queued = if depth > 1 { sequential(total, 1 << 20, depth, &[one], &op)? } else { 0.0 };
    Ok(single.max(queued))
}

pub fn run(cfg: &DisksConfig, progress: &mut dyn FnMut(&str)) -> Result<Vec<DiskRecord>, String> {
    let mut out = Vec::new();
    // One disk, the same requests: its sequential rate and 4 KiB random write IOPS.
    let one = ModelDisk::new("one".into(), cfg.disk_bytes, cfg.profile);
    let one_seq_write = one_disk_sequential(&one, cfg.disk_bytes as u64, cfg.seq_depth, true)?;
    let one_seq_read = one_disk_sequential(&one, cfg.disk_bytes as u64, cfg.seq_depth, false)?;
    let one_iops = random_4k(cfg.disk_bytes as u64, cfg.random_writes / 4, cfg.threads, 1, &|at, b| one.write_at(b, at))?;
    progress(&format!("one disk: write {one_seq_write:.1} MB/s, read {one_seq_read:.1} MB/s, 4K random write {one_iops:.0} IOPS"));
    for &level in &cfg.levels {
        let n = cfg.disks;
        let dd = data_disks(level, n) as f64;
        let (array, disks) = build(level, n, cfg.chunk, cfg.disk_bytes, cfg.profile)?;
        let disks: Vec<&ModelDisk> = disks.iter().map(|d| &**d).collect();
        let size = array.size_bytes();
        // One request per write group of the engine (full stripes, a long run on every disk).
        let req = array.write_group_bytes();
        let total = (size / req).max(1) * req;
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
        let w = sequential(total, req, cfg.seq_depth, &disks, &|at, b| array.write(at, b).map_err(|e| io::Error::other(e.to_string())))?;
        let write_bound = match level {
            Level::Raid0 | Level::Linear => n as f64,
            _ => dd,
        } * one_seq_write;
        record("seq-write", "MB/s", w, one_seq_write, write_bound);
        let r = sequential(total, req, cfg.seq_depth, &disks, &|at, b| array.read(at, b).map_err(|e| io::Error::other(e.to_string())))?;
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
    seq_depth: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<DiskRecord>, f64), String> {
    let n = 10;
    let chunk = 512 << 10;
    let one = ModelDisk::new("one".into(), disk_bytes, profile);
    let one_seq = one_disk_sequential(&one, disk_bytes as u64, seq_depth, true)?;
    let mut out = Vec::new();
    let mut write = |level: Level| -> Result<f64, String> {
        let (array, disks) = build(level, n, chunk, disk_bytes, profile)?;
        let disks: Vec<&ModelDisk> = disks.iter().map(|d| &**d).collect();
        let req = array.write_group_bytes();
        let total = (array.size_bytes() / req).max(1) * req;
        let v = sequential(total, req, seq_depth, &disks, &|at, b| array.write(at, b).map_err(|e| io::Error::other(e.to_string())))?;
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
    let (array, _disks) = build(Level::Raid6, n, chunk, disk_bytes, profile)?;
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
            seq_depth: 2,
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
    fn a_channel_takes_the_continuing_request_then_the_nearest_ahead_then_the_lowest() {
        let now = Instant::now();
        let q = |offsets: &[u64]| -> Vec<Queued> {
            offsets.iter().enumerate().map(|(i, &offset)| Queued { id: i as u64, offset, bytes: 4096, enqueued: now }).collect()
        };
        assert_eq!(next_request(&q(&[900, 100, 500]), u64::MAX), 1, "first request: the lowest");
        assert_eq!(next_request(&q(&[900, 100, 500]), 500), 2, "continuing");
        assert_eq!(next_request(&q(&[900, 100, 600]), 500), 2, "nearest ahead");
        assert_eq!(next_request(&q(&[300, 100, 200]), 500), 1, "nothing ahead: the lowest");
    }

    #[test]
    fn channels_position_at_once_and_share_the_transfer_rate() {
        // 1 GB/s, 5 ms: two requests of 1 MB booked on two channels at the same instant.
        let p = DiskProfile { rate_bytes_s: 1e9, latency: Duration::from_millis(5), channels: 2 };
        let t0 = Instant::now();
        let mut bus = None;
        let a = book(&p, t0, u64::MAX, &mut bus, 0, 1_000_000, t0);
        let b = book(&p, t0, u64::MAX, &mut bus, 50 << 20, 1_000_000, t0);
        assert_eq!(a - t0, Duration::from_millis(6), "positioned, then transferred");
        assert_eq!(b - t0, Duration::from_millis(7), "positioned alongside, transferred after the first");
        // A request continuing the channel's last one is not positioned; one queued later
        // than the channel was free starts when it came.
        let c = book(&p, a, 1_000_000, &mut bus, 1_000_000, 1_000_000, a);
        assert_eq!(c - a, Duration::from_millis(2), "waits for the interface (busy until b), then transfers");
        let late = c + Duration::from_millis(10);
        let d = book(&p, c, 2_000_000, &mut bus, 2_000_000, 1_000_000, late);
        assert_eq!(d - late, Duration::from_millis(1));
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
