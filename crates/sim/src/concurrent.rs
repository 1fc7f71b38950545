//! Concurrent episodes: the production engine with many requests in flight, member
//! operations completing out of order on a seeded virtual clock, crashes at any tick.
//!
//! The serial episodes ([`crate::episode`]) issue one request at a time, so they cannot see
//! a race between requests. Here `clients` threads (8 by default) each run a seeded stream
//! of writes, reads and flushes against one `Array`, a cleaner thread marks the array clean
//! whenever it can (md's safe mode, racing the writers), and a job thread runs resync,
//! recovery and check steps. Every member operation stops at a gate ([`GatedDisk`]) and
//! gets a completion tick (`now + 1..=max_latency`, drawn from a hash of the seed and the
//! operation, not from arrival order). The driver waits until every thread of the episode
//! is blocked — at a gate, or on an engine lock held by a thread at a gate — and then lets
//! the pending operation with the earliest tick run. So requests overlap as far as the
//! engine lets them, and operations complete in an order the seed picks, not the
//! scheduler. "Blocked" is read from `/proc/self/task/*/{stat,schedstat}`: every thread
//! sleeping, in two readings between which none of them ran.
//!
//! Replay: the order of releases is a function of the seed as long as the set of pending
//! operations at each quiet point is; when two woken threads race for the same engine lock
//! the winner may differ between runs, so a seed replays the same faults and operations but
//! not always the same interleaving (README.md, "Concurrent episodes").
//!
//! Checks:
//! - a client's read of its own block returns its latest acknowledged write (each block
//!   has one writer, so this is exact under any interleaving);
//! - a check of an array in sync, run concurrently with the writers, finds no mismatch;
//! - a crash at a seeded tick keeps only durable writes (each unflushed one lost, applied or
//!   torn); after restart (and the resync the superblocks or bitmap ask for), every sector
//!   holds its last flushed value or one written since, and a full check finds no mismatch
//!   (a clean mark that raced a write, or a bitmap bit not durable before its data, shows
//!   up here);
//! - a hot replace of a member by a spare, started while the clients run, completes (the
//!   old member leaves) and costs no acknowledged write; check steps that repair find
//!   nothing to repair on a whole array;
//! - a member failed at a seeded tick (fail-stop or a latent sector error) costs no
//!   acknowledged write: the degraded array reads back every block; a spare is rebuilt
//!   concurrently with the writers, and once it is in, a whole-array check finds no mismatch;
//! - with no spare, a blank device hot-added (`add_device`) while the clients run takes the
//!   missing role, is rebuilt under them and is in sync at the end.

use crate::build::{self, Spec};
use crate::disk::SimDisk;
use crate::model::SECTOR;
use crate::prng::Prng;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use uraid_core::geometry::Level;
use uraid_core::metadata::create::InitialSync;
use uraid_core::metadata::grow::GrowRequest;
use uraid_engine::array::{CheckReport, DriverOptions, JobDriver, JobKind};
use uraid_engine::reshape::ReshapingArray;
use uraid_engine::{Array, ArrayOptions, Member};
use uraid_engine::{LiveArray, Stage, Volume};

const BLOCK: usize = 4096;
/// A thread that has made no progress for this long (real time) is reported as hung: a
/// deadlock, not slowness (a tick takes microseconds).
const HANG_GUARD: Duration = Duration::from_secs(60);

/// How big concurrent episodes are.
#[derive(Debug, Clone)]
pub struct ConcurrentLimits {
    pub clients: usize,
    /// Operations per client.
    pub ops: (u64, u64),
    /// Completion ticks are drawn from `1..=max_latency`.
    pub max_latency: u64,
}

impl Default for ConcurrentLimits {
    fn default() -> Self {
        ConcurrentLimits { clients: 8, ops: (6, 24), max_latency: 16 }
    }
}

/// What an episode did.
#[derive(Debug, Clone, Default)]
pub struct ConcurrentOutcome {
    pub config: String,
    pub ops: u64,
    pub ticks: u64,
    pub crashed: bool,
    pub member_failed: bool,
    /// A hot replace ran (and completed) during the episode.
    pub replaced: bool,
    /// A blank device was hot-added to the degraded array while the clients ran, and
    /// rebuilt (md's `mdadm --add`).
    pub hot_added: bool,
    /// A few latent bad sectors were planted on a member that stays (md's fix_read_error).
    pub latent_sectors: bool,
    /// Read errors on that member that were rebuilt and rewritten.
    pub read_errors_corrected: u64,
    /// Sectors no write can fix were planted on a member that stays.
    pub unwritable_sectors: bool,
    /// Ranges that member's bad-block log lists at the end.
    pub listed_ranges: u64,
    pub checks: u64,
    /// A reshape (more members, another chunk or layout) ran under the clients, finished
    /// before the end or after a crash and restart.
    pub reshaped: bool,
    /// That reshape removed a member (a shrink, run backwards).
    pub shrunk: bool,
    /// That reshape was a RAID10 one (more members, another chunk, or near <-> offset:
    /// chunks copied to every copy of the new shape).
    pub raid10_reshaped: bool,
    /// That RAID10 reshape changed the members of an array with a write-intent bitmap
    /// (which counts array sectors, so it was resized, as md resizes it).
    pub raid10_bitmap_resized: bool,
    /// That reshape was a 0.90 grow in place, its critical section in a backup.
    pub in_place_reshaped: bool,
    /// A fault (a member failing, latent or unwritable sectors) was injected while the
    /// reshape ran.
    pub reshape_faulted: bool,
    /// The reshape was refused because a fault injected before it began had already
    /// degraded the array or listed a bad range (uraid reshapes whole arrays only).
    pub reshape_refused: bool,
    /// The most requests (client calls into the array) in flight at once.
    pub max_in_flight: usize,
}

// ------------------------------------------------------------------ the gate and clock

#[derive(Default)]
struct Clock {
    now: u64,
    ticks: u64,
    next_id: u64,
    /// (completion tick, tie-break hash, id) of every operation waiting at a gate.
    pending: BTreeMap<(u64, u64, u64), ()>,
    /// The operation allowed to run now.
    released: Option<u64>,
    /// Gates open for good (after a crash, or while the driver restarts the array).
    open: bool,
    /// Bumped at every gate entry and exit, so the driver can tell a quiet moment.
    activity: u64,
    /// Threads waiting at a gate now. When every live thread is, the moment is quiet
    /// without asking /proc (most ticks).
    waiting: usize,
    /// How often each (disk, kind, offset, len) was seen: part of the latency hash, so the
    /// draw depends on the operation, not on when it arrived.
    seen: HashMap<(usize, u8, u64, usize), u64>,
}

struct Gate {
    seed: u64,
    max_latency: u64,
    clock: Mutex<Clock>,
    changed: Condvar,
}

/// splitmix64's finalizer of `z`, a well-mixed hash of it, taken from the simulator's one
/// PRNG: its step adds the golden-ratio constant before mixing, so that is undone first
/// (keeping every concurrent seed recorded so far the same episode).
fn mix(z: u64) -> u64 {
    Prng::new(z.wrapping_sub(0x9E37_79B9_7F4A_7C15)).next_u64()
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, Clock> {
        self.clock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `op` when the driver releases it (at once when the gates are open).
    fn pass<T>(&self, disk: usize, kind: u8, offset: u64, len: usize, op: impl FnOnce() -> T) -> T {
        let mut c = self.lock();
        if c.open {
            drop(c);
            return op();
        }
        let n = {
            let n = c.seen.entry((disk, kind, offset, len)).or_insert(0);
            *n += 1;
            *n
        };
        let h = mix(self.seed ^ mix((disk as u64) << 56 ^ (kind as u64) << 48 ^ offset ^ mix(len as u64 ^ n << 32)));
        let at = c.now + 1 + h % self.max_latency;
        let id = c.next_id;
        c.next_id += 1;
        c.pending.insert((at, h, id), ());
        c.activity += 1;
        c.waiting += 1;
        self.changed.notify_all();
        while c.released != Some(id) && !c.open {
            c = self.changed.wait(c).unwrap_or_else(|e| e.into_inner());
        }
        c.waiting -= 1;
        if c.released != Some(id) {
            c.pending.remove(&(at, h, id));
        }
        drop(c);
        let result = op();
        let mut c = self.lock();
        if c.released == Some(id) {
            c.released = None;
        }
        c.activity += 1;
        self.changed.notify_all();
        result
    }

    fn open(&self) {
        let mut c = self.lock();
        c.open = true;
        c.pending.clear();
        self.changed.notify_all();
    }
}

/// A [`SimDisk`] whose every operation waits at the episode's [`Gate`].
struct GatedDisk {
    disk: Arc<SimDisk>,
    index: usize,
    gate: Arc<Gate>,
}

impl Member for GatedDisk {
    fn label(&self) -> &str {
        self.disk.label()
    }
    fn size_bytes(&self) -> u64 {
        self.disk.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.gate.pass(self.index, 0, offset, buf.len(), || self.disk.read_at(buf, offset))
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.gate.pass(self.index, 1, offset, buf.len(), || self.disk.write_at(buf, offset))
    }
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let len = bufs.iter().map(|b| b.len()).sum();
        self.gate.pass(self.index, 0, offset, len, || self.disk.read_vectored_at(bufs, offset))
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let len = bufs.iter().map(|b| b.len()).sum();
        self.gate.pass(self.index, 1, offset, len, || self.disk.write_vectored_at(bufs, offset))
    }
    fn flush(&self) -> io::Result<()> {
        self.gate.pass(self.index, 2, 0, 0, || self.disk.flush())
    }
}

// ------------------------------------------------------------------ quiet detection

/// Marks a thread done when dropped, also when it unwinds from a panic (so the driver and
/// the other threads never wait for it).
struct DoneGuard(Arc<AtomicBool>, Option<Arc<AtomicUsize>>);

impl Drop for DoneGuard {
    fn drop(&mut self) {
        if let Some(left) = &self.1 {
            left.fetch_sub(1, Ordering::AcqRel);
        }
        self.0.store(true, Ordering::Release);
    }
}

/// The episode's threads, by kernel thread id.
#[derive(Default)]
struct Threads {
    list: Mutex<Vec<(u32, Arc<AtomicBool>)>>,
}

fn own_tid() -> u32 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name().and_then(|n| n.to_str()).and_then(|n| n.parse().ok()))
        .expect("/proc/thread-self names this thread (Linux)")
}

impl Threads {
    /// Registers the calling thread; the flag says when it is done.
    fn enter(&self) -> Arc<AtomicBool> {
        let done = Arc::new(AtomicBool::new(false));
        self.list.lock().unwrap_or_else(|e| e.into_inner()).push((own_tid(), done.clone()));
        done
    }

    fn live(&self) -> Vec<u32> {
        self.list.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|(_, d)| !d.load(Ordering::Acquire)).map(|(t, _)| *t).collect()
    }

    fn all_done(&self) -> bool {
        self.live().is_empty()
    }

    /// Each live thread's state letter and scheduler statistics; `None` if one is running.
    fn reading(&self) -> Option<Vec<(u32, String)>> {
        let mut out = Vec::new();
        for tid in self.live() {
            let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
            let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
            match state {
                // Gone (exited between the list and the read) counts as quiet.
                None => continue,
                Some('S') => {}
                Some(_) => return None,
            }
            out.push((tid, std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap_or_default()));
        }
        Some(out)
    }
}

// ------------------------------------------------------------------ the model

/// Per block, the value as of the last flush and every value written since (in flight
/// ones included), with the sequence number of its acknowledgement.
/// A value written to a block: (write id, acknowledgement number once acknowledged, value).
type Written = (u64, Option<u64>, Box<[u8]>);

struct Model {
    durable: Vec<Box<[u8]>>,
    /// Per block, oldest first.
    since: Vec<Vec<Written>>,
    writes: u64,
    acks: u64,
}

impl Model {
    fn begin_write(&mut self, block: usize, value: &[u8]) -> u64 {
        self.writes += 1;
        self.since[block].push((self.writes, None, value.into()));
        self.writes
    }
    fn ack(&mut self, block: usize, write: u64) {
        self.acks += 1;
        let acks = self.acks;
        // A flush may have retired it already (it cannot: only acknowledged writes are
        // retired, and this one is not yet); found by id since flushes shift the list.
        if let Some(e) = self.since[block].iter_mut().find(|e| e.0 == write) {
            e.1 = Some(acks);
        }
    }
    fn latest_acked(&self, block: usize) -> &[u8] {
        self.since[block].iter().rev().find(|(_, a, _)| a.is_some()).map_or(&self.durable[block], |(_, _, v)| v)
    }
    /// A flush that began when `acks_at_start` writes were acknowledged has completed.
    fn flushed(&mut self, acks_at_start: u64) {
        for b in 0..self.since.len() {
            if let Some(i) = self.since[b].iter().rposition(|(_, a, _)| a.is_some_and(|a| a <= acks_at_start)) {
                self.durable[b] = self.since[b][i].2.clone();
                self.since[b].drain(..=i);
            }
        }
    }
    /// May `got` (sector `s` of `block`) be what survived a crash?
    fn allowed(&self, block: usize, s: usize, got: &[u8]) -> bool {
        let r = s * SECTOR..(s + 1) * SECTOR;
        self.durable[block][r.clone()] == *got || self.since[block].iter().any(|(_, _, v)| v[r.clone()] == *got)
    }
}

// ------------------------------------------------------------------ the episode

#[derive(Debug, Clone)]
struct Shape {
    level: Level,
    disks: usize,
    layout: Option<u32>,
    chunk_kib: u32,
    bitmap: bool,
    spares: usize,
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} disks={} layout={} chunk={}K bitmap={} spares={}",
            self.level,
            self.disks,
            self.layout.map_or("default".into(), |l| format!("{l:#x}")),
            self.chunk_kib,
            self.bitmap,
            self.spares
        )
    }
}

/// The seed's plan for the episode.
struct Plan {
    shape: Shape,
    /// Crash at this tick, if the episode crashes.
    crash_at: Option<u64>,
    /// Fail this member at this tick: (tick, disk, latent sector error instead of fail-stop).
    fail: Option<(u64, usize, bool)>,
    /// Hot-replace role 0's member with the first spare while the clients run.
    replace: bool,
    /// Once the failed member's role is missing, add a blank device while the clients run.
    hot_add: bool,
    /// Check steps repair (md's `repair`) instead of only counting.
    repair: bool,
    /// Plant this many 4 KiB runs of latent bad sectors on this disk at this tick:
    /// (tick, disk, runs). Fewer than `max_read_errors`, so the member must stay and every
    /// read there must be rebuilt and rewritten.
    latent: Option<(u64, usize, u64)>,
    /// Plant this many 4 KiB runs of sectors that fail reads and writes for good on this
    /// disk at this tick: (tick, disk, runs). The member must stay, the runs that writes
    /// hit listed in its bad-block log (md's rdev_set_badblocks), and no data lost.
    unwritable: Option<(u64, usize, u64)>,
    /// Reshape the array while the clients run (`uraid grow`): more members (from the
    /// spare), a doubled chunk, or (RAID5) another layout.
    reshape: Option<GrowRequest>,
    /// That reshape runs on 0.90 metadata, in place, with a backup of its critical section.
    in_place: bool,
    ops: Vec<u64>,
    blocks: usize,
}

fn plan(seed: u64, limits: &ConcurrentLimits) -> Plan {
    let mut rng = Prng::new(seed);
    let level = *rng.pick(&[Level::Raid1, Level::Raid5, Level::Raid5, Level::Raid6, Level::Raid6, Level::Raid10, Level::Raid4]);
    let (disks, layout) = match level {
        Level::Raid1 => (rng.range(2, 3) as usize, None),
        Level::Raid4 => (rng.range(3, 4) as usize, None),
        Level::Raid5 => (rng.range(3, 5) as usize, Some(rng.range(0, 3) as u32)),
        Level::Raid6 => (rng.range(4, 6) as usize, Some(*rng.pick(&[0u32, 1, 2, 3, 8, 16, 18]))),
        _ => (rng.range(2, 4) as usize, Some(*rng.pick(&[0x102u32, 0x201, 0x10201]))),
    };
    let shape = Shape { level, disks, layout, chunk_kib: *rng.pick(&[4, 8, 16]), bitmap: rng.chance(40), spares: rng.below(2) as usize };
    let ops = (0..limits.clients).map(|_| rng.range(limits.ops.0, limits.ops.1)).collect();
    // About the ticks a run takes; crashes and failures fall inside it.
    let span = limits.clients as u64 * limits.ops.1 * 2;
    let (crash_at, fail) = match rng.below(10) {
        0..=4 => (Some(rng.range(1, span)), None),
        5..=7 => (None, Some((rng.range(1, span), rng.below(disks as u64) as usize, rng.chance(30)))),
        _ => (None, None),
    };
    let blocks = limits.clients * rng.range(2, 6) as usize;
    // Drawn last, so the decisions above stay what they were for every seed.
    // Combined with crashes: a crash while a replace completes once left role 0 with no
    // member (seeds 22031 and 22107; fixed by writing the superblock of a member taking a
    // role first, see the engine's `tests/crash_points.rs`).
    let replace = fail.is_none() && shape.spares > 0 && rng.chance(50);
    let repair = rng.chance(50);
    // Not with a member failure: bad sectors on a survivor of a RAID5 that lost a member
    // are data lost, which md fails the member for too; that is tested in the engine.
    // Not with a crash on parity levels either: a crash can leave a stripe's parity stale
    // (the write hole), and a bad sector in that stripe is then a second fault: rebuilt
    // from stale parity during the resync it comes out wrong, in md as in uraid (seed 814
    // showed it). Mirrors rebuild from a copy, which a crash leaves old or new, never wrong.
    let mirrored = matches!(level, Level::Raid1 | Level::Raid10);
    // With a member failure (and the rebuild onto a spare that follows) only where one loss
    // still leaves redundancy for every block: RAID6 and 3-way RAID1. The bad sectors then go
    // on another member than the failed one.
    let survives_two = level == Level::Raid6 || (level == Level::Raid1 && disks == 3);
    let fail_ok = fail.is_none_or(|(_, _, whole)| survives_two && !whole);
    let failed_disk = fail.map(|(_, d, _)| d);
    let other_disk = |rng: &mut Prng| {
        let d = rng.below(disks as u64) as usize;
        if Some(d) == failed_disk {
            (d + 1) % disks
        } else {
            d
        }
    };
    let latent = (fail_ok && (crash_at.is_none() || mirrored) && rng.chance(40))
        .then(|| (rng.range(1, span), other_disk(&mut rng), rng.range(1, 6)));
    // Same conditions as latent sectors (a bad sector plus a crash's stale parity is a
    // double fault), and not both in one episode.
    let unwritable = (fail_ok && latent.is_none() && (crash_at.is_none() || mirrored) && rng.chance(40))
        .then(|| (rng.range(1, span), other_disk(&mut rng), rng.range(1, 4)));
    // Reshapes of RAID4/5/6 and RAID10 near (as uraid reshapes them), under every fault
    // drawn above: a crash at any tick, or a member failing (a degraded reshape), or latent
    // or unwritable sectors (never a crash with those, for the write-hole reason above).
    // Not with a hot replace: uraid reshapes only an array with no job pending.
    // RAID10 near or offset gets a member more from its spare, or another chunk, or
    // switches between near and offset (the changes md and uraid make to it).
    let near_raid10 = level == Level::Raid10 && matches!(shape.layout, Some(0x102 | 0x10201));
    // (A RAID10 with a bitmap changing its members has its bitmap resized, as md does.)
    let reshapable = matches!(level, Level::Raid4 | Level::Raid5 | Level::Raid6) || near_raid10;
    // A shrink (one member fewer, md's backwards reshape) needs the array cut first: to what
    // the clients use, far below the new capacity.
    let shrinkable = match level {
        Level::Raid6 => disks >= 5,
        Level::Raid10 => disks >= 3,
        _ => disks >= 4,
    };
    // (RAID10 reshapes more often: few episodes qualify, a near or offset layout.)
    let reshape = (reshapable && !replace && rng.chance(if near_raid10 { 90 } else { 30 })).then(|| match rng.below(4) {
        0 if shape.spares > 0 => GrowRequest { raid_disks: Some(disks as u32 + 1), ..Default::default() },
        _ if near_raid10 && shape.spares > 0 && rng.chance(50) => GrowRequest { raid_disks: Some(disks as u32 + 1), ..Default::default() },
        1 if near_raid10 => GrowRequest { layout: Some(if shape.layout == Some(0x102) { 0x10201 } else { 0x102 }), ..Default::default() },
        3 if shrinkable => GrowRequest {
            raid_disks: Some(disks as u32 - 1),
            array_size_sectors: Some((blocks * BLOCK) as u64 / 512),
            ..Default::default()
        },
        1 if level == Level::Raid5 => GrowRequest { layout: Some((shape.layout.unwrap_or(2) + 1) % 4), ..Default::default() },
        _ => GrowRequest { chunk_sectors: Some(shape.chunk_kib * 4), ..Default::default() },
    });
    // Drawn after everything else, so every other decision stays what it was for each
    // seed. A member failure with no spare to take its role: hot-add one under the clients.
    let hot_add = fail.is_some() && shape.spares == 0 && reshape.is_none() && rng.chance(60);
    // (Drawn last too.) A grow by members of a RAID4/5/6 without a bitmap may run on 0.90
    // metadata: in place, its critical section saved in a backup first (mdadm's
    // --backup-file). The backup device keeps every write at once (a crash loses none of
    // it): the order of its writes against the members' is the engine crash test's.
    let grows_by_members = reshape.as_ref().is_some_and(|r| {
        r.raid_disks.is_some_and(|n| n as usize > disks) && r.chunk_sectors.is_none() && r.layout.is_none() && r.level.is_none()
    });
    let in_place = matches!(level, Level::Raid4 | Level::Raid5 | Level::Raid6) && !shape.bitmap && grows_by_members && rng.chance(60);
    Plan { shape, crash_at, fail, replace, hot_add, repair, latent, unwritable, reshape, in_place, ops, blocks }
}

/// The command that replays `seed`.
pub fn reproduce_concurrent(seed: u64) -> String {
    format!("cargo run -p uraid-sim --release -- --concurrent --seed {seed}")
}

/// Runs one concurrent episode. `Err` carries what broke, the plan and the reproduce line.
pub fn run_concurrent_seed(seed: u64, limits: &ConcurrentLimits) -> Result<ConcurrentOutcome, String> {
    let plan = plan(seed, limits);
    let describe = format!(
        "{} crash_at={:?} fail={:?} replace={} hot_add={} repair={} latent={:?} unwritable={:?} reshape={:?} in_place={}",
        plan.shape,
        plan.crash_at,
        plan.fail,
        plan.replace,
        plan.hot_add,
        plan.repair,
        plan.latent,
        plan.unwritable,
        plan.reshape,
        plan.in_place
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| episode(seed, limits, &plan)));
    let message = match result {
        Ok(Ok(mut o)) => {
            o.config = describe;
            return Ok(o);
        }
        Ok(Err(m)) => m,
        Err(p) => format!(
            "panic: {}",
            p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
        ),
    };
    Err(format!("seed {seed} failed: {message}\n  {describe}\n  reproduce: {}", reproduce_concurrent(seed)))
}

fn check_whole(array: &Array) -> Result<CheckReport, String> {
    let mut report = CheckReport::default();
    let total = array.sync_sectors();
    let mut pos = 0;
    while pos < total {
        pos = array.check_step(pos, 256, false, &mut report).map_err(|e| format!("check: {e}"))?.done_sectors;
    }
    Ok(report)
}

fn episode(seed: u64, limits: &ConcurrentLimits, plan: &Plan) -> Result<ConcurrentOutcome, String> {
    let shape = &plan.shape;
    let mut spec = Spec::new(shape.level, shape.disks);
    spec.layout = shape.layout;
    spec.chunk_kib = shape.chunk_kib;
    spec.spares = shape.spares;
    spec.member_bytes = 2 << 20;
    spec.sync = InitialSync::AssumeClean;
    if plan.in_place {
        spec.metadata = uraid_core::metadata::MetadataVersion::V0_90;
    }
    // The backup of an in-place grow: big enough for any critical section (a few stripes).
    let backup = plan.in_place.then(|| {
        let device = Arc::new(uraid_engine::MemMember::new("backup", vec![0u8; 4096 + spec.member_bytes as usize]));
        Arc::new(uraid_engine::reshape::ReshapeBackup::new(device as Arc<dyn Member>))
    });
    spec.bitmap_chunk = shape.bitmap.then_some(64 << 10);
    let disks = build::create(&spec)?;
    let gate =
        Arc::new(Gate { seed, max_latency: limits.max_latency.max(1), clock: Mutex::new(Clock::default()), changed: Condvar::new() });
    let gated: Vec<Arc<dyn Member>> = disks
        .iter()
        .enumerate()
        .map(|(index, d)| Arc::new(GatedDisk { disk: d.clone(), index, gate: gate.clone() }) as Arc<dyn Member>)
        .collect();
    let mut opts = ArrayOptions { writable: true, recovery_lanes: 1, ..Default::default() };
    opts.assemble.run = true;
    // The device a hot add brings: blank, gated like the members from the start.
    let hot_disk: Option<Arc<dyn Member>> = plan.hot_add.then(|| {
        let d = Arc::new(SimDisk::new(format!("d{}", disks.len()), spec.member_bytes, seed ^ 0x40_7add));
        Arc::new(GatedDisk { disk: d, index: disks.len(), gate: gate.clone() }) as Arc<dyn Member>
    });
    gate.open(); // assembly runs ungated, before any client
    let (array, _) = Array::assemble(gated, &opts).map_err(|e| format!("assembly: {e}"))?;
    gate.lock().open = false;
    let array = Arc::new(array);
    // What the clients use, as the exports do: the same object through a reshape.
    let live = Arc::new(LiveArray::new(Stage::Plain(array.clone()), "sim".into()));
    let blocks = plan.blocks.min(array.size_bytes() as usize / BLOCK);
    let model = Arc::new(Mutex::new(Model {
        durable: (0..blocks).map(|_| vec![0u8; BLOCK].into()).collect(),
        since: vec![Vec::new(); blocks],
        writes: 0,
        acks: 0,
    }));
    let threads = Arc::new(Threads::default());
    let crashed = Arc::new(AtomicBool::new(false));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let max_in_flight = Arc::new(AtomicUsize::new(0));
    let clients_left = Arc::new(AtomicUsize::new(limits.clients));
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let checks = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let replacing = Arc::new(AtomicBool::new(false));
    let hot_added = Arc::new(AtomicBool::new(false));
    // A fault was injected; the reshape was refused; the reshape is running.
    let (faulted, reshape_refused, reshaping) =
        (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let mut outcome = ConcurrentOutcome { ops: plan.ops.iter().sum(), ..Default::default() };

    std::thread::scope(|s| -> Result<(), String> {
        let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
        for (client, &ops) in plan.ops.iter().enumerate() {
            let (array, model, threads, crashed, errors, started) =
                (live.clone(), model.clone(), threads.clone(), crashed.clone(), errors.clone(), started_tx.clone());
            let (in_flight, max_in_flight, clients_left) = (in_flight.clone(), max_in_flight.clone(), clients_left.clone());
            let clients = limits.clients;
            s.spawn(move || {
                let _done = DoneGuard(threads.enter(), Some(clients_left.clone()));
                let _ = started.send(());
                let mut rng = Prng::new(mix(seed ^ 0x00C1_1E47 ^ client as u64));
                let own: Vec<usize> = (client..blocks).step_by(clients).collect();
                let track = |f: &mut dyn FnMut() -> Result<(), uraid_engine::EngineError>| {
                    let now = in_flight.fetch_add(1, Ordering::AcqRel) + 1;
                    max_in_flight.fetch_max(now, Ordering::AcqRel);
                    let r = f();
                    in_flight.fetch_sub(1, Ordering::AcqRel);
                    r
                };
                for op in 0..ops {
                    if own.is_empty() || crashed.load(Ordering::Acquire) {
                        break;
                    }
                    let block = *rng.pick(&own);
                    let offset = (block * BLOCK) as u64;
                    let result = match rng.below(100) {
                        0..=54 => {
                            let mut value = vec![0u8; BLOCK];
                            rng.fill(&mut value);
                            let at = model.lock().unwrap_or_else(|e| e.into_inner()).begin_write(block, &value);
                            let r = track(&mut || array.write(offset, &value));
                            if r.is_ok() {
                                model.lock().unwrap_or_else(|e| e.into_inner()).ack(block, at);
                            }
                            r.map(|_| None)
                        }
                        55..=84 => {
                            let mut got = vec![0u8; BLOCK];
                            track(&mut || array.read(offset, &mut got)).map(|_| Some(got))
                        }
                        _ => {
                            let acks = model.lock().unwrap_or_else(|e| e.into_inner()).acks;
                            let r = track(&mut || array.flush());
                            if r.is_ok() {
                                model.lock().unwrap_or_else(|e| e.into_inner()).flushed(acks);
                            }
                            r.map(|_| None)
                        }
                    };
                    match result {
                        Ok(Some(got)) => {
                            let m = model.lock().unwrap_or_else(|e| e.into_inner());
                            if got != m.latest_acked(block) {
                                errors.lock().unwrap_or_else(|e| e.into_inner()).push(format!(
                                    "client {client} op {op}: block {block} does not read back its latest acknowledged write"
                                ));
                                break;
                            }
                        }
                        Ok(None) => {}
                        Err(_) if crashed.load(Ordering::Acquire) => break,
                        Err(e) => {
                            errors.lock().unwrap_or_else(|e| e.into_inner()).push(format!("client {client} op {op}: {e}"));
                            break;
                        }
                    }
                }
            });
        }
        // The cleaner: md's safe mode, racing the writers.
        {
            let (array, threads, crashed, clients_left, started) =
                (array.clone(), threads.clone(), crashed.clone(), clients_left.clone(), started_tx.clone());
            s.spawn(move || {
                let _done = DoneGuard(threads.enter(), None);
                let _ = started.send(());
                // With a reshape, the job thread alone touches the plain array (as in
                // `uraid serve`): a clean mark on an array just handed to the reshape would
                // write the old shape's superblocks.
                while plan.reshape.is_none() && clients_left.load(Ordering::Acquire) > 0 && !crashed.load(Ordering::Acquire) {
                    // Waits for writes to drain (an engine condition variable) or writes
                    // the clean mark (gated): either way it blocks, never spins.
                    let _ = array.mark_clean();
                    let _ = array.flush();
                }
            });
        }
        // The job thread: recovery onto a spare once a member fails, and checks.
        {
            let (array, threads, crashed, clients_left, errors, started) =
                (array.clone(), threads.clone(), crashed.clone(), clients_left.clone(), errors.clone(), started_tx.clone());
            let checks = checks.clone();
            let replacing = replacing.clone();
            let (hot_disk, hot_added) = (hot_disk.clone(), hot_added.clone());
            let live = live.clone();
            let (faulted, reshape_refused, reshaping) = (faulted.clone(), reshape_refused.clone(), reshaping.clone());
            let backup = backup.clone();
            s.spawn(move || {
                let _done = DoneGuard(threads.enter(), None);
                let _ = started.send(());
                if let Some(req) = &plan.reshape {
                    // From the moment it is asked: a fault while it starts is one during it.
                    reshaping.store(true, Ordering::Release);
                    let grown = match &backup {
                        Some(backup) => live.grow_in_place(&opts, req, backup),
                        None => live.grow(&opts, req),
                    };
                    if let Err(e) = grown {
                        reshaping.store(false, Ordering::Release);
                        // A fault before the start may have degraded the array or listed a
                        // bad range: uraid then refuses, as documented, and nothing changed.
                        if faulted.load(Ordering::Acquire) {
                            reshape_refused.store(true, Ordering::Release);
                        } else if !crashed.load(Ordering::Acquire) {
                            errors.lock().unwrap_or_else(|e| e.into_inner()).push(format!("the reshape did not start: {e}"));
                        }
                        return;
                    }
                    // Moved window by window while the clients run; a failed step (the
                    // crash) ends it, to be continued after the restart.
                    while let Stage::Reshaping(r) = live.stage() {
                        if crashed.load(Ordering::Acquire) {
                            return;
                        }
                        match r.step() {
                            Ok(uraid_engine::reshape::ReshapeStep::Finished) => {
                                reshaping.store(false, Ordering::Release);
                                if let Err(e) = live.end_reshape(&opts) {
                                    if !crashed.load(Ordering::Acquire) {
                                        errors.lock().unwrap_or_else(|e| e.into_inner()).push(format!("after the reshape: {e}"));
                                    }
                                    return;
                                }
                            }
                            Ok(_) => {}
                            Err(e) => {
                                if !crashed.load(Ordering::Acquire) {
                                    errors.lock().unwrap_or_else(|e| e.into_inner()).push(format!("reshape step: {e}"));
                                }
                                return;
                            }
                        }
                    }
                    return;
                }
                let mut check_pos = 0u64;
                if plan.replace {
                    // md's hot replace: d0 keeps serving while the spare is copied, then
                    // leaves. Refused (and harmless) if the array degraded first.
                    replacing.store(array.replace_with_spare("d0", &format!("d{}", plan.shape.disks)).is_ok(), Ordering::Release);
                }
                // The production driver's steps, interleaved with the clients' requests.
                let driver = JobDriver::new(&array, DriverOptions { step_sectors: 32, limits: None, clean_after_idle: None });
                while clients_left.load(Ordering::Acquire) > 0 && !crashed.load(Ordering::Acquire) {
                    if let Some(dev) = hot_disk.as_ref().filter(|_| !hot_added.load(Ordering::Acquire)) {
                        if !array.missing_roles().is_empty() && array.failure().is_none() {
                            // md's `mdadm --add` of a blank device to the degraded array, with
                            // the clients' requests in flight: it takes the missing role and
                            // is rebuilt under them.
                            match array.add_device(dev.clone(), [0x7a; 16]) {
                                Ok(()) => hot_added.store(true, Ordering::Release),
                                Err(e) => {
                                    errors.lock().unwrap_or_else(|e| e.into_inner()).push(format!("hot add: {e}"));
                                    return;
                                }
                            }
                        }
                    }
                    array.start_recovery_if_possible();
                    let r = match array.pending_job() {
                        Some(kind @ (JobKind::Recovery | JobKind::Resync)) => {
                            driver.step(kind, 0, 32, &mut CheckReport::default()).map(|_| ())
                        }
                        _ if array.missing_roles().is_empty() && array.failure().is_none() => {
                            let mut report = CheckReport::default();
                            let kind = if plan.repair { JobKind::Repair } else { JobKind::Check };
                            let r = driver.step(kind, check_pos, 32, &mut report);
                            if let Ok(p) = &r {
                                check_pos = if p.finished() { 0 } else { p.done_sectors };
                                checks.fetch_add(1, Ordering::Relaxed);
                                // Only a stripe that stayed whole throughout counts: a member
                                // failing mid-check is the check's business, not a mismatch.
                                if report.mismatch_sectors > 0 && array.missing_roles().is_empty() && !crashed.load(Ordering::Acquire) {
                                    errors.lock().unwrap_or_else(|e| e.into_inner()).push(format!(
                                        "check found {} mismatched sectors on a whole array while writers ran (near sector {check_pos})",
                                        report.mismatch_sectors
                                    ));
                                }
                            }
                            r.map(|_| ())
                        }
                        // Degraded with nothing to rebuild onto: a read keeps this thread
                        // blocked on member I/O instead of spinning.
                        _ => {
                            let mut b = vec![0u8; BLOCK];
                            array.read(0, &mut b)
                        }
                    };
                    // A member failing under a job step is the engine's business (it fails the
                    // member and carries on); what it cost is checked at the end.
                    let _ = r;
                }
            });
        }
        drop(started_tx);
        for _ in 0..limits.clients + 2 {
            started_rx.recv().map_err(|_| "a thread died before starting".to_string())?;
        }

        // The driver.
        let mut last_progress = Instant::now();
        // A fault lands before the reshape, during it, or (the reshape done) after it.
        let note_fault = |outcome: &mut ConcurrentOutcome| {
            faulted.store(true, Ordering::Release);
            // (Not `live.stage()`: the job thread may hold it while its I/O waits for this
            // thread.)
            if reshaping.load(Ordering::Acquire) {
                outcome.reshape_faulted = true;
            }
        };
        loop {
            // Quiet: every live thread asleep in two readings between which none ran.
            let live = threads.live().len();
            let fast_quiet = {
                // Threads still running usually end up at a gate: wait for that event (the
                // time-out only bounds how long before /proc is asked instead; it decides
                // nothing about the order of operations).
                let c = gate.lock();
                let (c, _) =
                    gate.changed.wait_timeout_while(c, Duration::from_micros(50), |c| c.waiting < live).unwrap_or_else(|e| e.into_inner());
                c.waiting >= live
            };
            let quiet = fast_quiet || {
                let a0 = gate.lock().activity;
                match (threads.reading(), threads.reading()) {
                    (Some(r1), Some(r2)) => r1 == r2 && gate.lock().activity == a0,
                    _ => false,
                }
            };
            if threads.all_done() {
                break;
            }
            if last_progress.elapsed() > HANG_GUARD {
                gate.open();
                crashed.store(true, Ordering::Release);
                return Err(format!("hung at tick {}: threads blocked with no member operation pending", gate.lock().ticks));
            }
            if !quiet {
                std::thread::yield_now();
                continue;
            }
            let mut c = gate.lock();
            let Some((&key, _)) = c.pending.iter().next() else {
                drop(c);
                std::thread::yield_now();
                continue;
            };
            c.pending.remove(&key);
            c.now = c.now.max(key.0);
            c.released = Some(key.2);
            c.ticks += 1;
            let tick = c.ticks;
            gate.changed.notify_all();
            while c.released.is_some() && !c.open {
                c = gate.changed.wait(c).unwrap_or_else(|e| e.into_inner());
            }
            drop(c);
            last_progress = Instant::now();
            if plan.crash_at == Some(tick) {
                for d in &disks {
                    d.crash();
                }
                crashed.store(true, Ordering::Release);
                outcome.crashed = true;
                gate.open();
            }
            if let Some((at, disk, runs)) = plan.latent {
                if at == tick && shape.level.has_redundancy() {
                    // In the member's second half, which is data area (the superblock and
                    // bitmap sit at its start), 4 KiB each, spread by the seed.
                    let sectors = disks[disk].size_bytes() / SECTOR as u64;
                    let mut rng = Prng::new(seed ^ 0x1a7e);
                    for _ in 0..runs {
                        disks[disk].add_bad_sectors(rng.range(sectors / 2, sectors - 8), 8);
                    }
                    outcome.latent_sectors = true;
                    note_fault(&mut outcome);
                }
            }
            if let Some((at, disk, runs)) = plan.unwritable {
                if at == tick && shape.level.has_redundancy() {
                    let sectors = disks[disk].size_bytes() / SECTOR as u64;
                    let mut rng = Prng::new(seed ^ 0x0bad);
                    for _ in 0..runs {
                        // 4 KiB-aligned runs in the data half, as the latent ones.
                        disks[disk].add_unwritable_sectors(rng.range(sectors / 2, sectors - 8) / 8 * 8, 8);
                    }
                    outcome.unwritable_sectors = true;
                    note_fault(&mut outcome);
                }
            }
            if let Some((at, disk, latent)) = plan.fail {
                if at == tick && shape.level.has_redundancy() {
                    if latent {
                        // Every sector of the data area: the next read there fails.
                        disks[disk].add_bad_sectors(0, disks[disk].size_bytes() / SECTOR as u64);
                    } else {
                        disks[disk].fail_stop_after(1);
                    }
                    outcome.member_failed = true;
                    note_fault(&mut outcome);
                }
            }
        }
        gate.open();
        Ok(())
    })?;
    outcome.ticks = gate.lock().ticks;
    outcome.max_in_flight = max_in_flight.load(Ordering::Acquire);
    outcome.checks = checks.load(Ordering::Acquire);
    outcome.replaced = replacing.load(Ordering::Acquire);
    outcome.hot_added = hot_added.load(Ordering::Acquire);
    if let Some(e) = errors.lock().unwrap_or_else(|e| e.into_inner()).first() {
        return Err(e.clone());
    }
    let model = Arc::try_unwrap(model).map_err(|_| "model still shared")?.into_inner().unwrap();

    outcome.reshape_refused = reshape_refused.load(Ordering::Acquire);
    outcome.reshaped = plan.reshape.is_some() && !outcome.reshape_refused;
    outcome.shrunk = outcome.reshaped && plan.reshape.as_ref().and_then(|r| r.raid_disks).is_some_and(|n| (n as usize) < shape.disks);
    outcome.raid10_reshaped = outcome.reshaped && shape.level == Level::Raid10;
    outcome.in_place_reshaped = outcome.reshaped && plan.in_place;
    outcome.raid10_bitmap_resized =
        outcome.raid10_reshaped && shape.bitmap && plan.reshape.as_ref().is_some_and(|r| r.raid_disks.is_some());
    if outcome.crashed {
        // The old array may try to close itself while dropped; the disks are off.
        drop(array);
        drop(live);
        for d in &disks {
            d.power_on();
        }
        // A reshape the crash interrupted is continued from the superblocks first.
        if let Err(uraid_engine::EngineError::ReshapeInProgress { .. }) = build::assemble(&disks, false) {
            let devices: Vec<Arc<dyn Member>> = disks.iter().map(|d| d.clone() as Arc<dyn Member>).collect();
            let r = ReshapingArray::open_with_backup(devices, &opts, backup.as_deref())
                .map_err(|e| format!("reopening the reshape after the crash: {e}"))?;
            r.run(&|| false, |_| {}).map_err(|e| format!("continuing the reshape after the crash: {e}"))?;
            r.close().map_err(|e| format!("closing the reshape: {e}"))?;
        }
        let (array, report) = build::assemble(&disks, false).map_err(|e| format!("restart after the crash: {e}"))?;
        let report_needed = report.needs_resync;
        let driver = JobDriver::new(&array, DriverOptions { step_sectors: 1024, limits: None, clean_after_idle: None });
        while array.pending_job() == Some(JobKind::Resync) {
            driver.run(JobKind::Resync, &|| false, |_| {}).map_err(|e| format!("resync after the crash: {e}"))?;
        }
        for b in 0..blocks {
            let mut got = vec![0u8; BLOCK];
            array.read((b * BLOCK) as u64, &mut got).map_err(|e| format!("read after the crash: {e}"))?;
            for s in 0..BLOCK / SECTOR {
                if !model.allowed(b, s, &got[s * SECTOR..(s + 1) * SECTOR]) {
                    return Err(format!(
                        "after crash + restart, block {b} sector {s} holds neither its flushed value nor one written since"
                    ));
                }
            }
        }
        let report = check_whole(&array)?;
        if report.mismatch_sectors > 0 {
            return Err(format!(
                "after crash + restart (resync needed: {}), check finds {} mismatched sectors: redundancy was not restored",
                report_needed, report.mismatch_sectors
            ));
        }
        check_latent_member(&array, plan, &mut outcome)?;
        return Ok(outcome);
    }

    // No crash: a reshape still running is finished (the clients are done), then every
    // block reads back its latest acknowledged write, degraded or not.
    if let Stage::Reshaping(r) = live.stage() {
        r.run(&|| false, |_| {}).map_err(|e| format!("finishing the reshape: {e}"))?;
        live.end_reshape(&opts).map_err(|e| format!("after the reshape: {e}"))?;
    }
    let array = match live.stage() {
        Stage::Plain(a) => a,
        Stage::Reshaping(_) => return Err("the reshape did not end".into()),
    };
    for b in 0..blocks {
        let mut got = vec![0u8; BLOCK];
        array.read((b * BLOCK) as u64, &mut got).map_err(|e| format!("final read of block {b}: {e}"))?;
        if got != model.latest_acked(b) {
            return Err(format!("block {b} does not read back its latest acknowledged write at the end"));
        }
    }
    // Finish any rebuild, then a whole array must check clean.
    JobDriver::new(&array, DriverOptions { step_sectors: 1024, limits: None, clean_after_idle: None })
        .run_pending(&|| false, |_| {})
        .map_err(|e| format!("a rebuild or resync at the end: {e}"))?;
    if outcome.hot_added {
        // The added device took the failed member's role and was rebuilt (or it failed in
        // turn, which only an injected fault on it could cause: none is).
        let label = format!("d{}", disks.len());
        let state = array.devices().into_iter().find(|d| d.label == label).map(|d| d.state);
        if !matches!(state, Some(uraid_engine::DeviceState::InSync(_))) {
            return Err(format!("the hot-added {label} is not in sync at the end ({state:?})"));
        }
    }
    if replacing.load(Ordering::Acquire) {
        let d0 = array.devices().into_iter().find(|d| d.label == "d0").map(|d| d.state);
        if matches!(d0, Some(uraid_engine::DeviceState::InSync(_))) {
            return Err(format!("the hot replace of d0 never completed (d0 is {d0:?})"));
        }
    }
    if array.missing_roles().is_empty() {
        let report = check_whole(&array)?;
        if report.mismatch_sectors > 0 {
            return Err(format!("check finds {} mismatched sectors at the end", report.mismatch_sectors));
        }
    }
    check_latent_member(&array, plan, &mut outcome)?;
    Ok(outcome)
}

/// A member given a few latent bad sectors (fewer than `max_read_errors`) must still serve
/// at the end: each read there was rebuilt and rewritten, never a reason to fail it.
fn check_latent_member(array: &Array, plan: &Plan, outcome: &mut ConcurrentOutcome) -> Result<(), String> {
    check_unwritable_member(array, plan, outcome)?;
    let Some((_, disk, _)) = plan.latent.filter(|_| outcome.latent_sectors) else { return Ok(()) };
    let label = format!("d{disk}");
    let Some(d) = array.devices().into_iter().find(|d| d.label == label) else { return Ok(()) };
    outcome.read_errors_corrected = d.read_errors_corrected;
    let replaced = plan.replace && disk == 0;
    if d.state == uraid_engine::DeviceState::Faulty && !replaced {
        return Err(format!(
            "{label}, given {} latent bad runs, was failed: {} ({} read errors, {} corrected)",
            plan.latent.map_or(0, |l| l.2),
            d.failure.unwrap_or_default(),
            d.read_errors,
            d.read_errors_corrected
        ));
    }
    Ok(())
}

/// A member with sectors no write can fix must still serve at the end: a write that failed
/// there was listed in its bad-block log, never a reason to fail it (its log has room for
/// the few runs planted). That data is right is checked by the caller's reads and scrub.
fn check_unwritable_member(array: &Array, plan: &Plan, outcome: &mut ConcurrentOutcome) -> Result<(), String> {
    let Some((_, disk, runs)) = plan.unwritable.filter(|_| outcome.unwritable_sectors) else { return Ok(()) };
    let label = format!("d{disk}");
    let Some(d) = array.devices().into_iter().find(|d| d.label == label) else { return Ok(()) };
    outcome.listed_ranges = d.bad_blocks.len() as u64;
    let replaced = plan.replace && disk == 0;
    // While reshaping, a write error fails the member (the two shapes share no bad-block
    // log; see the engine's reshape module): that is expected there.
    if d.state == uraid_engine::DeviceState::Faulty && !replaced && !outcome.reshaped {
        return Err(format!("{label}, given {runs} unwritable runs, was failed: {}", d.failure.unwrap_or_default()));
    }
    Ok(())
}
