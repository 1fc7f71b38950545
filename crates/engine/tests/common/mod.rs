//! Shared helpers: arrays created in memory with the real create planner.
#![allow(dead_code)]

use std::sync::Arc;
use uraid_core::geometry::Level;
use uraid_core::metadata::create::InitialSync;
use uraid_engine::array::{CheckReport, DriverOptions, JobDriver, JobKind};
use uraid_engine::create::{as_members, mem_devices, ArraySketch};
use uraid_engine::{Array, ArrayOptions, MemMember, Member};

#[derive(Clone)]
pub struct Shape {
    pub level: Level,
    pub disks: usize,
    pub chunk_kib: u32,
    pub layout: Option<u32>,
    pub member_bytes: usize,
    pub spares: usize,
    pub sync: InitialSync,
    /// Internal bitmap with this chunk (bytes).
    pub bitmap_chunk: Option<u32>,
}

impl Shape {
    pub fn new(level: Level, disks: usize) -> Shape {
        Shape {
            level,
            disks,
            chunk_kib: 64,
            layout: None,
            member_bytes: 4 << 20,
            spares: 0,
            sync: InitialSync::AssumeClean,
            bitmap_chunk: None,
        }
    }
    pub fn layout(mut self, l: u32) -> Shape {
        self.layout = Some(l);
        self
    }
    pub fn spares(mut self, n: usize) -> Shape {
        self.spares = n;
        self
    }
    pub fn bitmap(mut self, chunk: u32) -> Shape {
        self.bitmap_chunk = Some(chunk);
        self
    }
    pub fn sync(mut self, s: InitialSync) -> Shape {
        self.sync = s;
        self
    }
}

pub struct Made {
    pub members: Vec<Arc<MemMember>>,
    pub spares: Vec<Arc<MemMember>>,
}

pub fn make(shape: &Shape) -> Made {
    let members = mem_devices(shape.disks, shape.member_bytes, "m");
    let spares = mem_devices(shape.spares, shape.member_bytes, "s");
    write_created(shape, &as_members(&members), &as_members(&spares));
    Made { members, spares }
}

/// Plans an array of `shape` with the real create planner and writes it onto `members` and
/// `spares` (any backend, each `shape.member_bytes` long).
pub fn write_created(shape: &Shape, members: &[Arc<dyn Member>], spares: &[Arc<dyn Member>]) {
    let mut sketch = ArraySketch::new(shape.level, "test");
    sketch.layout = shape.layout;
    sketch.chunk_kib = shape.chunk_kib;
    sketch.sync = shape.sync;
    sketch.bitmap_chunk = shape.bitmap_chunk;
    sketch.write(members, spares).expect("create");
}

pub fn open(devs: &[Arc<MemMember>], run: bool) -> Array {
    let d: Vec<Arc<dyn Member>> = devs.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
    let mut opts = ArrayOptions { writable: true, ..Default::default() };
    opts.assemble.run = run;
    Array::assemble(d, &opts).map(|(a, _)| a).unwrap_or_else(|e| panic!("assemble: {e}"))
}

/// Seeded test data: the parity crate's generator, shared by every test suite.
pub use uraid_parity::testdata::Prng as Rng;

pub fn read_all(a: &Array) -> Vec<u8> {
    let mut v = vec![0u8; a.size_bytes() as usize];
    a.read(0, &mut v).expect("read all");
    v
}

/// Random writes of mixed sizes (sub-sector, small, multi-stripe) checked against a model.
pub fn random_writes(a: &Array, model: &mut [u8], rng: &mut Rng, count: usize) {
    let size = model.len() as u64;
    for _ in 0..count {
        let len = match rng.below(4) {
            0 => 1 + rng.below(700),
            1 => 512 * (1 + rng.below(16)),
            2 => 4096 * (1 + rng.below(64)),
            _ => 1 + rng.below(300_000),
        }
        .min(size);
        let off = rng.below(size - len + 1);
        let data = rng.bytes(len as usize);
        a.write(off, &data).unwrap_or_else(|e| panic!("write {len}@{off}: {e}"));
        model[off as usize..(off + len) as usize].copy_from_slice(&data);
    }
}

/// Writes of 1..=`max_sectors` whole sectors at random sectors (not aligned to 4 KiB),
/// mirrored in the model.
pub fn sector_writes(a: &Array, model: &mut [u8], rng: &mut Rng, count: usize, max_sectors: u64) {
    for _ in 0..count {
        let len = 512 * (1 + rng.below(max_sectors)) as usize;
        let off = 512 * rng.below((model.len() - len) as u64 / 512) as usize;
        let data = rng.bytes(len);
        a.write(off as u64, &data).unwrap_or_else(|e| panic!("write {len}@{off}: {e}"));
        model[off..off + len].copy_from_slice(&data);
    }
}

/// Checks the whole array's redundancy without repairing it.
pub fn check_clean(a: &Array) -> CheckReport {
    scrub(a, false)
}

/// A whole check (or repair) through the job driver; its report.
pub fn scrub(a: &Array, repair: bool) -> CheckReport {
    let kind = if repair { JobKind::Repair } else { JobKind::Check };
    let outcome = driver(a).run(kind, &|| false, |_| {}).expect("scrub");
    assert!(outcome.finished && outcome.done_sectors == a.sync_sectors(), "{outcome:?}");
    outcome.report
}

/// The job driver as the offline commands use it: big steps, no pacing.
pub fn driver(a: &Array) -> JobDriver<'_> {
    JobDriver::new(a, DriverOptions { step_sectors: 1 << 20, limits: None, clean_after_idle: None })
}

/// Every write that reached a set of members, in the order it reached them: the members'
/// history, so that a test can rebuild what the disks held at each instant of an operation
/// (what a crash there would have left, when each write is durable before the next one
/// starts, as the engine's superblock updates are: write, flush, next member).
#[derive(Default)]
pub struct WriteJournal {
    recording: std::sync::atomic::AtomicBool,
    writes: std::sync::Mutex<Vec<(usize, u64, Vec<u8>)>>,
}

impl WriteJournal {
    pub fn start(&self) {
        self.writes.lock().unwrap().clear();
        self.recording.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    /// Stops recording; returns the writes since [`WriteJournal::start`].
    pub fn stop(&self) -> Vec<(usize, u64, Vec<u8>)> {
        self.recording.store(false, std::sync::atomic::Ordering::SeqCst);
        std::mem::take(&mut *self.writes.lock().unwrap())
    }
}

/// What a test member does before its in-memory image serves a write or a flush: watch,
/// record, or hold the I/O until the test lets it go.
pub trait Hooks: Send + Sync + 'static {
    fn before_read(&self, _image: &MemMember, _len: usize, _offset: u64) -> std::io::Result<()> {
        Ok(())
    }
    fn before_write(&self, _image: &MemMember, _buf: &[u8], _offset: u64) {}
    /// Fails a write before it reaches the image (nothing of it is written).
    fn fail_write(&self, _buf: &[u8], _offset: u64) -> std::io::Result<()> {
        Ok(())
    }
    fn before_flush(&self, _image: &MemMember) {}
}

/// A member over an in-memory image whose writes and flushes go through [`Hooks`] first;
/// the one forwarding `Member` that every test's watching member builds on.
pub struct Hooked<H> {
    pub image: Arc<MemMember>,
    pub hooks: H,
}

impl<H: Hooks> Hooked<H> {
    pub fn new(image: Arc<MemMember>, hooks: H) -> Arc<Hooked<H>> {
        Arc::new(Hooked { image, hooks })
    }
}

impl<H> std::ops::Deref for Hooked<H> {
    type Target = H;
    fn deref(&self) -> &H {
        &self.hooks
    }
}

impl<H: Hooks> Member for Hooked<H> {
    fn label(&self) -> &str {
        self.image.label()
    }
    fn size_bytes(&self) -> u64 {
        self.image.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.hooks.before_read(&self.image, buf.len(), offset)?;
        self.image.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.hooks.fail_write(buf, offset)?;
        self.hooks.before_write(&self.image, buf, offset);
        self.image.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.hooks.before_flush(&self.image);
        self.image.flush()
    }
}

/// Records a member's writes in a shared [`WriteJournal`] under its index.
pub struct Journaled {
    pub index: usize,
    pub journal: Arc<WriteJournal>,
}

impl Hooks for Journaled {
    fn before_write(&self, _image: &MemMember, buf: &[u8], offset: u64) {
        if self.journal.recording.load(std::sync::atomic::Ordering::SeqCst) {
            self.journal.writes.lock().unwrap().push((self.index, offset, buf.to_vec()));
        }
    }
}

/// Rewrites a v1.2 test member's superblock as one made without a bad-block log (as mdadm
/// makes when there is no room, or 0.90 metadata): md then fails a member on a write error.
pub fn without_bad_block_log(m: &MemMember) {
    let mut raw = vec![0u8; 4096];
    m.read_at(&mut raw, 4096).unwrap();
    let mut sb = uraid_core::metadata::Superblock1::decode(&raw).unwrap();
    sb.bblog_offset_sectors = 0;
    sb.bblog_size_sectors = 0;
    sb.sb_csum = sb.compute_checksum();
    m.write_at(&sb.encode(), 4096).unwrap();
}
