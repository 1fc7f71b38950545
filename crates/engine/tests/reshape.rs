//! Reshapes under crashes and concurrent requests.
//!
//! The crash test records every member write and flush of a whole reshape (its start, each
//! window, each checkpoint, the finish) interleaved with acknowledged-and-flushed user
//! writes, then rebuilds the members as a crash after each chosen event would leave them:
//! per member, what was flushed is there; what was written since its last flush is there
//! entirely, not at all, or a seeded random part of it (a disk cache losing or reordering
//! writes). Each crash image must read back every flushed write; then the reshape is
//! continued from its superblocks to the end, resynced if it was dirty, and the content must
//! survive the loss of any one member.
//!
//! How this was shown to fail: with `step` never recording the position before a window
//! (the checkpoint rule off), a crash after event 182 of 534 lost array sector 738; with
//! `checkpoint` writing the superblocks before flushing the data, a crash after event 216
//! lost sector 1346. It also found two real faults, fixed since: `start` wrote the members'
//! superblocks before the spare's, so a crash after the first one named a member for role 3
//! whose device still called itself a spare (the array did not assemble); and the finish
//! wrote final superblocks (new data offset) beside members still recording the reshape,
//! which assembly then read at the old offset (sector 96 lost, event 519 of 564).
//! The array holds random content before the reshape begins: on a fresh (zeroed) array, a
//! RAID10 near -> offset switch with its checkpoints skipped passed, zeros moved anywhere
//! reading back as zeros; with the content it fails (sector 0, event 141 of 372).

mod common;
use common::*;
use std::sync::{Arc, Mutex};
use uraid_core::geometry::Level;
use uraid_core::metadata::grow::GrowRequest;
use uraid_engine::array::JobKind;
use uraid_engine::reshape::{ReshapeStep, ReshapingArray};
use uraid_engine::{Array, ArrayOptions, EngineError, MemMember, Member};

enum Event {
    Write { member: usize, offset: u64, bytes: Vec<u8> },
    Flush { member: usize },
}

#[derive(Default)]
struct History {
    events: Mutex<Vec<Event>>,
}

impl History {
    fn len(&self) -> usize {
        self.events.lock().unwrap().len()
    }
}

struct Recorded {
    member: usize,
    history: Arc<History>,
}

impl Hooks for Recorded {
    fn before_write(&self, _image: &MemMember, buf: &[u8], offset: u64) {
        self.history.events.lock().unwrap().push(Event::Write { member: self.member, offset, bytes: buf.to_vec() });
    }
    fn before_flush(&self, _image: &MemMember) {
        self.history.events.lock().unwrap().push(Event::Flush { member: self.member });
    }
}

#[derive(Clone, Copy, Debug)]
enum Unflushed {
    Lost,
    Applied,
    Random(u64),
}

/// The members as a crash after `k` events leaves them.
fn crash_image(before: &[Vec<u8>], events: &[Event], k: usize, unflushed: Unflushed) -> Vec<Vec<u8>> {
    let mut disks = before.to_vec();
    let mut last_flush = vec![None; before.len()];
    for (i, e) in events[..k].iter().enumerate() {
        if let Event::Flush { member } = e {
            last_flush[*member] = Some(i);
        }
    }
    let mut rng = Rng::new(match unflushed {
        Unflushed::Random(s) => s,
        _ => 0,
    });
    for (i, e) in events[..k].iter().enumerate() {
        if let Event::Write { member, offset, bytes } = e {
            let durable = last_flush[*member].is_some_and(|f| i < f);
            let keep = durable
                || match unflushed {
                    Unflushed::Lost => false,
                    Unflushed::Applied => true,
                    Unflushed::Random(_) => rng.below(2) == 0,
                };
            if keep {
                disks[*member][*offset as usize..*offset as usize + bytes.len()].copy_from_slice(bytes);
            }
        }
    }
    disks
}

/// A user write during the reshape: where, what, and the events before it began and
/// after its flush returned.
struct UserWrite {
    offset: usize,
    data: Vec<u8>,
    began: usize,
    flushed: usize,
}

/// Writes seeded random bytes over the whole array on `members` and closes it; returns them.
fn fill_random(members: &[Arc<MemMember>], seed: u64) -> Vec<u8> {
    let array = open(members, false);
    let content = Rng::new(seed).bytes(array.size_bytes() as usize);
    array.write(0, &content).expect("fill");
    array.close().expect("close");
    content
}

/// Images as they were, the history, and the recording devices over them.
type Recorder = (Vec<Vec<u8>>, Arc<History>, Vec<Arc<dyn Member>>);

/// Each image as it is now, and a device over each recording every write and flush in one
/// history (by the image's index).
fn recorded(images: &[Arc<MemMember>]) -> Recorder {
    let before = images.iter().map(|m| m.snapshot()).collect();
    let history = Arc::new(History::default());
    let hooked = images
        .iter()
        .enumerate()
        .map(|(member, m)| Hooked::new(m.clone(), Recorded { member, history: history.clone() }) as Arc<dyn Member>)
        .collect();
    (before, history, hooked)
}

fn mem_images(disks: Vec<Vec<u8>>) -> Vec<Arc<MemMember>> {
    disks.into_iter().enumerate().map(|(i, b)| Arc::new(MemMember::new(format!("d{i}"), b))).collect()
}

fn as_devices(images: &[Arc<MemMember>]) -> Vec<Arc<dyn Member>> {
    images.iter().map(|m| m.clone() as Arc<dyn Member>).collect()
}

/// Reads the array on `devs` as a restart would: a plain array, or one mid-reshape.
fn num_lcm(a: usize, b: usize) -> usize {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    a / x * b
}

/// `degraded`: a member is missing, so `--run`, and `--force` for a crash while dirty (md
/// refuses a dirty degraded array without it; only the write in flight may be torn).
fn read_restarted(devs: Vec<Arc<dyn Member>>, len: usize, degraded: bool) -> Result<Vec<u8>, EngineError> {
    let mut opts = ArrayOptions::default();
    (opts.assemble.run, opts.assemble.force) = (degraded, degraded);
    let mut out = vec![0u8; len];
    match Array::assemble(devs.clone(), &opts) {
        Ok((a, _)) => a.read(0, &mut out)?,
        Err(EngineError::ReshapeInProgress { .. }) => ReshapingArray::open(devs, &opts)?.read(0, &mut out)?,
        Err(e) => return Err(e),
    }
    Ok(out)
}

/// Continues whatever reshape `devs` record to the end, resyncs if they are dirty, and
/// returns the finished array (writable).
fn finish_after_restart(devs: Vec<Arc<dyn Member>>, degraded: bool) -> Array {
    let mut opts = ArrayOptions { writable: true, recovery_lanes: 1, ..Default::default() };
    (opts.assemble.run, opts.assemble.force) = (degraded, degraded);
    if let Err(EngineError::ReshapeInProgress { .. }) = Array::assemble(devs.clone(), &ArrayOptions { writable: false, ..opts }) {
        let r = ReshapingArray::open(devs.clone(), &opts).expect("reopen the reshape");
        assert_eq!(r.run(&|| false, |_| {}).expect("continue the reshape"), ReshapeStep::Finished);
        r.close().expect("close");
    }
    let (a, _) = Array::assemble(devs, &opts).expect("assemble the finished array");
    // Whatever the assembly asks: a resync, or (a member the reshape rebuilt, its final
    // superblock lost in the crash) the rest of its recovery, which ends at once.
    loop {
        match a.pending_job() {
            Some(JobKind::Resync) => a.resync_step(1 << 12).expect("resync"),
            Some(JobKind::Recovery) => a.recovery_step(1 << 12).expect("recovery"),
            _ => break,
        };
    }
    a
}

#[test]
fn a_crash_at_any_instant_of_a_grow_or_shrink_under_writes_loses_no_flushed_write() {
    // A grow by one member (from a spare), and a shrink by one (md's backwards reshape; the
    // array cut to a quarter of the members first, as --array-size asks).
    // And a grow of a RAID6 missing member 1: the spare takes role 1, written by the reshape
    // as it goes (md's recovery_offset following it), and the new role stays missing.
    // The same members with another chunk or layout (RAID10: near <-> offset): the data
    // moved by about half the room, forwards or backwards as it lies (mdadm's choice).
    let chunk_32k = Some(GrowRequest { chunk_sectors: Some(64), ..Default::default() });
    let to_offset = Some(GrowRequest { layout: Some(0x10201), ..Default::default() });
    // A RAID10 n2 of 4 to 3 members, cut first to 1 MiB (mdadm's --array-size).
    let raid10_shrink = Some(GrowRequest { raid_disks: Some(3), array_size_sectors: Some(2048), ..Default::default() });
    for (level, disks, seed, grow, missing, layout, change, bitmap) in [
        (Level::Raid5, 3, 11u64, true, None, None, None, false),
        (Level::Raid6, 4, 12, true, None, None, None, false),
        (Level::Raid5, 4, 13, false, None, None, None, false),
        (Level::Raid6, 5, 14, false, None, None, None, false),
        (Level::Raid6, 4, 15, true, Some(1), None, None, false),
        // A shrink of a RAID6 missing member 1: both shapes degraded; the member leaving
        // becomes a spare, rebuilt into role 1 after the restart.
        (Level::Raid6, 5, 18, false, Some(1), None, None, false),
        // RAID10 near, 2 copies: 3 -> 4 and 4 -> 5 members (a chunk's copies spill into
        // the next row with an odd count), the data moved down one chunk as mdadm does.
        (Level::Raid10, 3, 16, true, None, None, None, false),
        (Level::Raid10, 4, 17, true, None, None, None, false),
        // RAID10 offset (o2), 3 -> 4: each chunk row followed by its copy row, the data moved
        // down two chunks.
        (Level::Raid10, 3, 19, true, None, Some(0x10201), None, false),
        // RAID10 n2 of 4, chunk 16K -> 32K; and near -> offset (o2).
        (Level::Raid10, 4, 20, false, None, None, chunk_32k, false),
        (Level::Raid10, 4, 21, false, None, None, to_offset, false),
        (Level::Raid10, 4, 24, false, None, None, raid10_shrink, false),
        // A RAID5 grow and a RAID6 chunk change with a write-intent bitmap: the bitmap is
        // the reshape's (both shapes count the same member sectors), dirty while writes
        // may be in flight, so a crash resyncs what it must.
        (Level::Raid5, 3, 22, true, None, None, None, true),
        (Level::Raid6, 4, 23, false, None, None, chunk_32k, true),
        // A RAID10 n2 -> o2 switch with a bitmap (it counts array sectors, which the same
        // members keep).
        (Level::Raid10, 4, 25, false, None, None, to_offset, true),
        // A RAID10 grown and one shrunk with a bitmap: md resizes it (it counts array
        // sectors; `a_raid10_grow_resizes_its_bitmap_as_md_does` has one whose chunk doubles).
        (Level::Raid10, 3, 26, true, None, None, None, true),
        (Level::Raid10, 4, 27, false, None, None, raid10_shrink, true),
    ] {
        let mut shape = Shape::new(level, disks).spares(usize::from(grow && change.is_none()));
        shape.layout = layout;
        if bitmap {
            shape = shape.bitmap(64 << 10);
        }
        shape.member_bytes = 2 << 20;
        shape.chunk_kib = 16;
        let made = make(&shape);
        // Random content everywhere: a window moved to the wrong place, or old data
        // overwritten before the position was recorded, must show (a fresh array is zeros,
        // and zeros moved anywhere read back as zeros).
        {
            let array = open(&made.members, false);
            array.write(0, &Rng::new(seed ^ 0xc0ffee).bytes(array.size_bytes() as usize)).expect("fill");
            array.close().expect("close");
        }
        let images: Vec<Arc<MemMember>> = made.members.into_iter().chain(made.spares).collect();
        let before: Vec<Vec<u8>> = images.iter().map(|m| m.snapshot()).collect();
        let history = Arc::new(History::default());
        let devs: Vec<Arc<dyn Member>> = images
            .iter()
            .enumerate()
            .filter(|(member, _)| Some(*member) != missing)
            .map(|(member, m)| Hooked::new(m.clone(), Recorded { member, history: history.clone() }) as Arc<dyn Member>)
            .collect();
        let original = read_all(&open(&images, false));
        let mut opts = ArrayOptions { writable: true, ..Default::default() };
        opts.assemble.run = missing.is_some();
        let parity = match level {
            Level::Raid6 => 2,
            Level::Raid10 => 0,
            _ => 1,
        };
        let req = if let Some(change) = change {
            change
        } else if grow {
            GrowRequest { raid_disks: Some(disks as u32 + 1), ..Default::default() }
        } else {
            let cut = (disks as u64 - 1 - parity) * (shape.member_bytes as u64 / 512 / 4);
            GrowRequest { raid_disks: Some(disks as u32 - 1), array_size_sectors: Some(cut), ..Default::default() }
        };
        let array = ReshapingArray::start(devs, &opts, &req).expect("start");
        // Array sectors covering whole stripes of both shapes (the lcm of their widths).
        let new_disks = req.raid_disks.map_or(disks, |n| n as usize);
        let (old_dd, new_dd) = ((disks as u64 - parity) as usize, new_disks - parity as usize);
        let chunk = shape.chunk_kib as usize * 2;
        let hole_unit = num_lcm(old_dd * chunk, new_dd * chunk);
        let what_reshape = match (grow, missing) {
            _ if bitmap && change == chunk_32k => "chunk change with a bitmap",
            _ if bitmap && change == to_offset => "near -> offset with a bitmap",
            _ if bitmap && change == raid10_shrink => "RAID10 shrink with a bitmap",
            (true, None) if bitmap && level == Level::Raid10 => "near grow with a bitmap",
            (true, None) if bitmap => "grow with a bitmap",
            _ if change == chunk_32k => "chunk change",
            _ if change == to_offset => "near -> offset",
            (true, None) if layout == Some(0x10201) => "offset grow",
            (true, None) if level == Level::Raid10 => "near grow",
            (true, None) => "grow",
            (true, Some(_)) => "degraded grow",
            (false, None) => "shrink",
            (false, Some(_)) => "degraded shrink",
        };
        let size = array.size_bytes() as usize;
        let writes = reshape_under_writes(&array, &history, seed);
        check_every_crash_point(&Recording {
            what_reshape,
            level,
            before: &before,
            history: &history,
            writes: &writes,
            original: &original,
            size,
            missing,
            hole_unit,
            // The superblock (4 KiB in) and the bitmap after it, well before the data.
            superblock_at: &|offset| offset < 65536,
        });
    }
}

/// Runs `array`'s reshape to the end, step by step, with two acknowledged-and-flushed
/// writes after each step; closes it.
fn reshape_under_writes(array: &ReshapingArray, history: &History, seed: u64) -> Vec<UserWrite> {
    let size = array.size_bytes() as usize;
    let mut rng = Rng::new(seed);
    let mut writes = Vec::new();
    loop {
        let step = array.step().expect("step");
        for _ in 0..2 {
            let len = 512 * (1 + rng.below(64)) as usize;
            let offset = 512 * rng.below(((size - len) / 512) as u64) as usize;
            let data = rng.bytes(len);
            let began = history.len();
            array.write(offset as u64, &data).expect("write");
            array.flush().expect("flush");
            writes.push(UserWrite { offset, data, began, flushed: history.len() });
        }
        if step == ReshapeStep::Finished {
            break;
        }
    }
    array.close().expect("close");
    writes
}

/// The crash test of a 0.90 RAID5 grow that md left part-way (past its critical section,
/// which md's backup file covered), continued by uraid in place: the new shape's rows land
/// on old rows already moved and recorded, and each checkpoint is a 0.91 superblock at the
/// end of every member. A crash at any instant loses no flushed write, and the reshape
/// continues from the superblocks.
#[test]
fn a_crash_at_any_instant_of_a_090_grow_continued_in_place_loses_no_flushed_write() {
    const MEMBER_BYTES: usize = 2 << 20;
    let (images, content, _) = grow_090_halfway(92, MEMBER_BYTES);
    let before = images.clone();
    let images = mem_images(images);
    let history = Arc::new(History::default());
    let devs: Vec<Arc<dyn Member>> = images
        .iter()
        .enumerate()
        .map(|(member, m)| Hooked::new(m.clone(), Recorded { member, history: history.clone() }) as Arc<dyn Member>)
        .collect();
    let array = ReshapingArray::open(devs, &ArrayOptions { writable: true, ..Default::default() }).expect("open to continue");
    let size = array.size_bytes() as usize;
    assert_eq!(size, content.len());
    let writes = reshape_under_writes(&array, &history, 92);
    let sb_at = uraid_core::metadata::sb090_offset_sectors(MEMBER_BYTES as u64).unwrap() * 512;
    check_every_crash_point(&Recording {
        what_reshape: "0.90 in-place grow",
        level: Level::Raid5,
        before: &before,
        history: &history,
        writes: &writes,
        original: &content,
        size,
        missing: None,
        hole_unit: num_lcm(2 * 128, 3 * 128),
        superblock_at: &|offset| offset >= sb_at,
    });
}

/// What a recorded reshape did, for [`check_every_crash_point`].
struct Recording<'a> {
    what_reshape: &'a str,
    level: Level,
    /// The members before the reshape began (the recorded events start from them).
    before: &'a [Vec<u8>],
    history: &'a History,
    writes: &'a [UserWrite],
    /// The array's content before the reshape, at least `size` bytes.
    original: &'a [u8],
    size: usize,
    /// A member left out from the start.
    missing: Option<usize>,
    /// Array sectors covering whole stripes of both shapes.
    hole_unit: usize,
    /// Where a member's superblock may be written (byte ranges).
    superblock_at: &'a dyn Fn(u64) -> bool,
}

/// Rebuilds the members as a crash after each chosen event leaves them, and checks each
/// image: every flushed write reads back; a sample goes on to finish the reshape and loses
/// each member in turn.
fn check_every_crash_point(r: &Recording) {
    let Recording { what_reshape, level, before, history, writes, original, size, missing, hole_unit, superblock_at } = *r;
    let events = std::mem::take(&mut *history.events.lock().unwrap());
    // Every event next to a flush or a superblock write, and a stride of the rest: at least
    // ~120 of them, so that a short reshape (a few windows between two flushes) is crashed
    // inside its windows too, not only at its flushes (a RAID10 o2 switch skipping its
    // checkpoints passed with a stride of 97).
    let stride = (events.len() / 120).clamp(1, 97);
    let superblock = |e: &Event| matches!(e, Event::Flush { .. }) || matches!(e, Event::Write { offset, .. } if superblock_at(*offset));
    let points: Vec<usize> = (0..=events.len())
        .filter(|&k| k % stride == 0 || k == events.len() || superblock(&events[k]) || (k > 0 && superblock(&events[k - 1])))
        .collect();
    assert!(points.len() > 50, "{level:?}: only {} crash points", points.len());
    for (n, &k) in points.iter().enumerate() {
        let unflushed = [Unflushed::Lost, Unflushed::Applied, Unflushed::Random(k as u64)][n % 3];
        let mut image = crash_image(before, &events, k, unflushed);
        if let Some(gone) = missing {
            // The missing member stays gone (given back, `--force` would take it as stale).
            image.remove(gone);
        }
        // What must be there: every write whose flush returned before the crash; the
        // one in flight may have reached any of its sectors.
        let mut expected = original[..size].to_vec();
        let mut in_flight = None;
        for w in writes {
            if w.flushed <= k {
                expected[w.offset..w.offset + w.data.len()].copy_from_slice(&w.data);
            } else if w.began < k {
                in_flight = Some(w);
            }
        }
        let what = format!("{level:?} {what_reshape}: crash after event {k} of {} ({unflushed:?})", events.len());
        let got = read_restarted(as_devices(&mem_images(image.clone())), size, missing.is_some())
            .unwrap_or_else(|e| panic!("{what}: does not open: {e}"));
        let mut reference = expected.clone();
        // Degraded, the write in flight may also cost the other sectors of its stripes
        // (either shape's): md's write hole, the risk `--force` takes on a dirty
        // degraded array (md refuses to start one without it).
        let in_hole = |s: usize| {
            missing.is_some()
                && in_flight.is_some_and(|w| {
                    let unit = 512 * hole_unit;
                    s / unit >= w.offset / unit && s / unit <= (w.offset + w.data.len() - 1) / unit
                })
        };
        for s in (0..size).step_by(512) {
            let (g, e) = (&got[s..s + 512], &expected[s..s + 512]);
            if g == e {
                continue;
            }
            let w = in_flight.filter(|w| s >= w.offset && s < w.offset + w.data.len());
            let hole = in_hole(s);
            match w {
                Some(w) if g == &w.data[s - w.offset..s - w.offset + 512] => reference[s..s + 512].copy_from_slice(g),
                _ if hole => reference[s..s + 512].copy_from_slice(g),
                _ => panic!("{what}: array sector {} differs", s / 512),
            }
        }
        // Only a sample goes on to finish the reshape and lose a member (each costs a
        // whole reshape of the copy).
        if n % 4 != 0 {
            continue;
        }
        let restarted = mem_images(image);
        let finished = finish_after_restart(as_devices(&restarted), missing.is_some());
        let mut got = vec![0u8; size];
        finished.read(0, &mut got).expect("read the finished array");
        for s in (0..size).step_by(512) {
            if got[s..s + 512] != reference[s..s + 512] {
                // The write hole's sectors took whatever the resync made of them;
                // from here on they must stay that.
                assert!(in_hole(s), "{what}: the finished reshape lost array sector {}", s / 512);
                reference[s..s + 512].copy_from_slice(&got[s..s + 512]);
            }
        }
        finished.close().expect("close");
        drop(finished);
        for lost in 0..restarted.len() {
            let one_lost =
                as_devices(&mem_images(restarted.iter().enumerate().filter(|(i, _)| *i != lost).map(|(_, m)| m.snapshot()).collect()));
            let role = lost;
            let mut opts = ArrayOptions::default();
            opts.assemble.run = true;
            let (degraded, _) = Array::assemble(one_lost, &opts).unwrap_or_else(|e| panic!("{what}: without member {role}: {e}"));
            let mut got = vec![0u8; size];
            degraded.read(0, &mut got).expect("degraded read");
            assert!(got == reference, "{what}: lost data without member {role}");
        }
    }
}

/// The two shapes of a RAID5 grown from 3 members (and a spare) to 4 without moving the
/// data offset, as md leaves them part-way: `old` holds the 3-member array written whole
/// with `content`, `new` a 4-member array of the same sketch holding the first
/// `position_sectors` of it. The callers splice member rows `[0, position / 3)` of `new`
/// into `old` and write the superblocks of the grow.
struct GrowHalfway {
    old: Vec<Arc<MemMember>>,
    new: Vec<Arc<MemMember>>,
    content: Vec<u8>,
    position_sectors: usize,
}

fn grow_halfway(sketch: &uraid_engine::create::ArraySketch, seed: u64, member_bytes: usize) -> GrowHalfway {
    let bytes = member_bytes;
    let old = uraid_engine::create::mem_devices(4, bytes, "old");
    let old_members = uraid_engine::create::as_members(&old);
    let array = sketch.create(&old_members[..3], &old_members[3..]).expect("create the 3-member array");
    let content = Rng::new(seed).bytes(array.size_bytes() as usize);
    array.write(0, &content).expect("write");
    array.close().expect("close");
    drop(array);
    let position_sectors = 3 * 128 * 8; // 8 stripes of the new shape (64 KiB chunks): 1.5 MiB
    let new = uraid_engine::create::mem_devices(4, bytes, "new");
    let new_members = uraid_engine::create::as_members(&new);
    let grown = sketch.create(&new_members, &[]).expect("create the 4-member array");
    grown.write(0, &content[..position_sectors * 512]).expect("write the moved part");
    grown.close().expect("close");
    GrowHalfway { old, new, content, position_sectors }
}

/// A 0.90 RAID5 that md left part-way through a 3 -> 4 grow, built the way md leaves it:
/// 0.90 never moves the data, so below the position the members hold the 4-member shape
/// (rows `[0, P/3)`), and from it on the 3-member shape (rows from `P/2`, untouched); the
/// superblocks are 0.91 with the reshape fields. Member 3 (the old spare) is in role 3.
fn grow_090_halfway(seed: u64, member_bytes: usize) -> (Vec<Vec<u8>>, Vec<u8>, usize) {
    use uraid_core::metadata::sb090::DiskDescriptor090;
    use uraid_core::metadata::{sb090_offset_sectors, MetadataVersion, Superblock};
    let mut sketch = uraid_engine::create::ArraySketch::new(Level::Raid5, "old");
    sketch.metadata = MetadataVersion::V0_90;
    let halfway = grow_halfway(&sketch, seed, member_bytes);
    let (old, new, position_sectors) = (&halfway.old, &halfway.new, halfway.position_sectors);
    let rows = position_sectors / 3 * 512;
    let images: Vec<Vec<u8>> = (0..4)
        .map(|i| {
            let mut img = old[i].snapshot();
            img[..rows].copy_from_slice(&new[i].snapshot()[..rows]);
            let at = sb090_offset_sectors(img.len() as u64).unwrap() as usize * 512;
            let Superblock::V090(mut sb) = Superblock::decode(MetadataVersion::V0_90, &img[at..at + 4096]).expect("0.90 superblock") else {
                unreachable!()
            };
            sb.minor_version = 91;
            sb.raid_disks = 4;
            sb.delta_disks = 1;
            (sb.new_level, sb.new_layout, sb.new_chunk_bytes) = (sb.level, sb.layout, sb.chunk_size_bytes);
            sb.reshape_position_sectors = position_sectors as u64;
            // Clean, as md leaves an array it parked and stopped.
            // The spare became role 3 (a new role: in sync, as md's raid5_start_reshape sets it).
            for d in sb.disks.iter_mut().chain(std::iter::once(&mut sb.this_disk)) {
                if d.number == 3 {
                    d.raid_disk = 3;
                    d.state = DiskDescriptor090::STATE_ACTIVE | DiskDescriptor090::STATE_SYNC;
                }
            }
            sb.events += 1;
            sb.update_checksum();
            img[at..at + 4096].copy_from_slice(&sb.encode());
            img
        })
        .collect();
    (images, halfway.content, position_sectors)
}

/// uraid reads such an array as the content it had, continues the grow to the end writing
/// md's 0.91 progress and a final 0.90 superblock, and the grown array holds the content.
#[test]
fn a_090_array_md_left_mid_grow_reads_back_and_continues() {
    let (images, content, position_sectors) = grow_090_halfway(90, 8 << 20);
    let size = content.len();
    let devices = as_devices(&mem_images(images));
    match Array::assemble(devices.clone(), &ArrayOptions::default()) {
        Err(EngineError::ReshapeInProgress { position_sectors: p }) => assert_eq!(p, position_sectors as u64),
        other => panic!("a 0.91 reshape must be reported as one, got {:?}", other.map(|_| ())),
    }
    let reading = ReshapingArray::open(devices.clone(), &ArrayOptions::default()).expect("open read-only");
    assert_eq!(reading.size_bytes() as usize, size, "md keeps the old size until the grow ends");
    let mut got = vec![0u8; size];
    reading.read(0, &mut got).expect("read");
    assert!(got == *content, "the moved and the unmoved parts read back as written");
    drop(reading);
    let writable = ArrayOptions { writable: true, ..Default::default() };
    let reshaping = ReshapingArray::open(devices.clone(), &writable).expect("open to continue");
    let mut seen_091 = false;
    loop {
        let step = reshaping.step().expect("step");
        // Progress is recorded as md records a 0.90 reshape: 0.91 superblocks, in place.
        let sb = superblock_090(devices[0].as_ref());
        assert!(sb.minor_version == 91 || step == ReshapeStep::Finished, "0.91 while it runs, not {}", sb.minor_version);
        seen_091 |= sb.minor_version == 91 && sb.reshape_position_sectors > position_sectors as u64;
        if step == ReshapeStep::Finished {
            break;
        }
    }
    assert!(seen_091, "a checkpoint was recorded part-way");
    reshaping.close().expect("close");
    drop(reshaping);
    for d in &devices {
        let sb = superblock_090(d.as_ref());
        assert_eq!((sb.minor_version, sb.raid_disks, sb.level, sb.reshape_position_sectors), (90, 4, 5, 0));
        assert!(sb.is_clean(), "closed clean");
        assert_eq!(sb.active_roles(), vec![true; 4]);
        assert_eq!(sb.this_disk.number, sb.this_disk.raid_disk, "md numbers members by role");
    }
    let (finished, _) = Array::assemble(devices.clone(), &writable).expect("assemble the grown array");
    assert!(finished.size_bytes() as usize > size, "grown");
    let mut got = vec![0u8; finished.size_bytes() as usize];
    finished.read(0, &mut got).expect("read");
    assert!(got[..size] == content[..], "the content survived the grow");
    assert!(got[size..].iter().all(|&b| b == 0), "the new space reads as zeros");
}

fn superblock_090(dev: &dyn Member) -> uraid_core::metadata::sb090::Superblock090 {
    let at = uraid_core::metadata::sb090_offset_sectors(dev.size_bytes()).unwrap() * 512;
    let mut buf = vec![0u8; 4096];
    dev.read_at(&mut buf, at).unwrap();
    uraid_core::metadata::sb090::Superblock090::decode(&buf).expect("a valid 0.90 superblock")
}

/// A v1.2 RAID5 that md left part-way through a 3 -> 4 grow made with a backup file: the
/// data offset did not move (no NEW_OFFSET), so below the position the members hold the
/// 4-member shape at the same offset, rows `[0, P/3)`, and the 3-member shape from row
/// `P/2` on. Past md's critical section such a reshape needs no backup: every window's new
/// rows land on old rows already moved and recorded. uraid must read it, continue it to the
/// end, and the grown array must hold the content (zeros beyond the old size).
#[test]
fn a_grow_md_left_without_moving_the_data_offset_reads_and_continues() {
    use uraid_core::metadata::{FeatureMap, Superblock1};
    let halfway = grow_halfway(&uraid_engine::create::ArraySketch::new(Level::Raid5, "same-offset"), 91, 8 << 20);
    let (old, new, content, size, position_sectors) =
        (&halfway.old, &halfway.new, &halfway.content, halfway.content.len(), halfway.position_sectors);
    let images: Vec<Vec<u8>> = (0..4)
        .map(|i| {
            let mut img = old[i].snapshot();
            let mut sb = Superblock1::decode(&img[4096..8192]).expect("v1.2 superblock");
            let (from, to) = (sb.data_offset_sectors as usize * 512, (sb.data_offset_sectors as usize + position_sectors / 3) * 512);
            img[from..to].copy_from_slice(&new[i].snapshot()[from..to]);
            sb.feature_map.0 |= FeatureMap::RESHAPE_ACTIVE;
            sb.raid_disks = 4;
            sb.delta_disks = 1;
            (sb.new_level, sb.new_layout, sb.new_chunk_sectors) = (sb.level, sb.layout, sb.chunksize_sectors);
            sb.reshape_position_sectors = position_sectors as u64;
            sb.resync_offset_sectors = 0;
            // The spare took role 3 (a new role: in sync, as md's raid5_start_reshape sets it).
            sb.dev_roles[3] = 3;
            sb.events += 1;
            sb.update_checksum();
            let bytes = sb.encode();
            img[4096..4096 + bytes.len()].copy_from_slice(&bytes);
            img
        })
        .collect();
    let images = mem_images(images);
    let reading = ReshapingArray::open(as_devices(&images), &ArrayOptions::default()).expect("open read-only");
    let mut got = vec![0u8; size];
    reading.read(0, &mut got).expect("read");
    assert!(got == *content, "the moved and the unmoved parts read back as written");
    drop(reading);
    let writable = ArrayOptions { writable: true, ..Default::default() };
    let reshaping = ReshapingArray::open(as_devices(&images), &writable).expect("open to continue");
    assert_eq!(reshaping.run(&|| false, |_| {}).expect("continue"), ReshapeStep::Finished);
    reshaping.close().expect("close");
    drop(reshaping);
    let (finished, _) = Array::assemble(as_devices(&images), &writable).expect("assemble the grown array");
    assert!(finished.size_bytes() as usize > size, "grown");
    let mut got = vec![0u8; finished.size_bytes() as usize];
    finished.read(0, &mut got).expect("read");
    assert!(got[..size] == content[..], "the content survived the grow");
    assert!(got[size..].iter().all(|&b| b == 0), "the new space reads as zeros");
}

/// A member's write-intent bitmap superblock (v1.2: the superblock 4 KiB in).
fn bitmap_of(member: &MemMember) -> uraid_core::metadata::BitmapSuperblock {
    let image = member.snapshot();
    let sb = uraid_core::metadata::Superblock1::decode(&image[4096..8192]).expect("v1.2 superblock");
    let at = (4096 + i64::from(sb.bitmap_offset_sectors().expect("a bitmap")) * 512) as usize;
    uraid_core::metadata::BitmapSuperblock::decode(&image[at..at + 256]).expect("bitmap superblock")
}

/// md resizes a RAID10's bitmap when its members change (it counts array sectors), keeping
/// it within the sectors it takes: here the 4 KiB-chunk bits of the grown array no longer
/// fit two sectors, so the chunk doubles, as `md_bitmap_resize` doubles it. The grown
/// array's bitmap covers it exactly, and assembles (which checks that it covers the array).
#[test]
fn a_raid10_grow_resizes_its_bitmap_as_md_does() {
    let mut shape = Shape::new(Level::Raid10, 3).spares(1).bitmap(4096);
    shape.member_bytes = 14 << 20;
    let made = make(&shape);
    let before = bitmap_of(&made.members[0]);
    let content = fill_random(&made.members, 31);
    let images: Vec<Arc<MemMember>> = made.members.into_iter().chain(made.spares).collect();
    let writable = ArrayOptions { writable: true, ..Default::default() };
    let req = GrowRequest { raid_disks: Some(4), ..Default::default() };
    let reshaping = ReshapingArray::start(as_devices(&images), &writable, &req).expect("start");
    assert_eq!(reshaping.run(&|| false, |_| {}).expect("reshape"), ReshapeStep::Finished);
    reshaping.close().expect("close");
    drop(reshaping);
    let (grown, _) = Array::assemble(as_devices(&images), &writable).expect("assemble the grown array");
    let new_sectors = grown.size_bytes() / 512;
    assert!(
        before.resized(new_sectors, before.used_sectors()).chunksize_bytes > before.chunksize_bytes,
        "the test's sizes make the chunk double"
    );
    for image in &images {
        let after = bitmap_of(image);
        assert_eq!(after.sync_size_sectors, new_sectors, "the bitmap counts the grown array");
        assert_eq!(after.chunksize_bytes, before.chunksize_bytes * 2, "doubled to fit");
        assert!(after.used_sectors() <= before.used_sectors(), "within the sectors it had");
    }
    let mut got = vec![0u8; content.len()];
    grown.read(0, &mut got).expect("read");
    assert!(got == content, "the content survived the grow");
}

/// A 0.90 grow uraid starts in place, as mdadm does with --backup-file: the critical section
/// is saved in the backup (mdadm's format), the start recorded, the section written back in
/// the new shape and the position recorded past it, then the reshape goes on in place. A
/// crash after any write or flush of any device (backup included), with unflushed writes
/// lost, applied or half applied, loses nothing: the array either never started (it
/// assembles as it was) or reopens with the backup and finishes with its content. How it
/// was shown to fail: with the section's write-back skipped (the position still moved past
/// it), the content differs from array sector 64 on after the first crash restarted (event
/// 5 of 735). With no restore at all the start itself is refused, its position inside the
/// section.
#[test]
fn a_crash_at_any_instant_of_a_090_grow_started_with_a_backup_loses_nothing() {
    use uraid_core::metadata::MetadataVersion;
    use uraid_engine::reshape::ReshapeBackup;
    let mut sketch = uraid_engine::create::ArraySketch::new(Level::Raid5, "bk");
    sketch.metadata = MetadataVersion::V0_90;
    sketch.chunk_kib = 16;
    let members = uraid_engine::create::mem_devices(3, 2 << 20, "m");
    let spare = uraid_engine::create::mem_devices(1, 2 << 20, "s");
    sketch.write(&uraid_engine::create::as_members(&members), &uraid_engine::create::as_members(&spare)).expect("create");
    let content = fill_random(&members, 41);
    let backup_image = Arc::new(MemMember::new("backup", vec![0u8; 1 << 20]));
    let images: Vec<Arc<MemMember>> = members.into_iter().chain(spare).chain([backup_image]).collect();
    let (before, history, hooked) = recorded(&images);
    let writable = ArrayOptions { writable: true, ..Default::default() };
    let req = GrowRequest { raid_disks: Some(4), ..Default::default() };
    // Without a backup nothing starts (and nothing is written).
    assert!(ReshapingArray::start(hooked[..4].to_vec(), &writable, &req).is_err());
    assert_eq!(history.len(), 0, "a refused start wrote");
    let backup = ReshapeBackup::new(hooked[4].clone());
    ReshapingArray::start_in_place(&hooked[..4], &writable, &req, &backup).expect("start");
    let array = ReshapingArray::open_with_backup(hooked[..4].to_vec(), &writable, Some(&backup)).expect("open");
    assert_eq!(array.run(&|| false, |_| {}).expect("reshape"), ReshapeStep::Finished);
    array.close().expect("close");
    drop(array);
    let events = std::mem::take(&mut *history.events.lock().unwrap());
    let (mut restarted, mut untouched) = (0, 0);
    for k in 0..=events.len() {
        for unflushed in [Unflushed::Lost, Unflushed::Applied, Unflushed::Random(k as u64)] {
            let what = format!("crash after event {k} of {} ({unflushed:?})", events.len());
            let crashed = mem_images(crash_image(&before, &events, k, unflushed));
            let devs = as_devices(&crashed[..4]);
            // (The newest superblock decides, as at assembly.)
            let newest = devs
                .iter()
                .filter_map(|d| uraid_engine::scan::probe(d.as_ref()).best().map(|(_, sb)| sb.clone()))
                .max_by_key(|sb| sb.events());
            let reshaping = newest.is_some_and(|sb| sb.reshape_active());
            if reshaping {
                restarted += 1;
                let backup = ReshapeBackup::new(crashed[4].clone() as Arc<dyn Member>);
                let array = ReshapingArray::open_with_backup(devs.clone(), &writable, Some(&backup))
                    .unwrap_or_else(|e| panic!("{what}: does not reopen: {e}"));
                assert_eq!(array.run(&|| false, |_| {}).unwrap_or_else(|e| panic!("{what}: {e}")), ReshapeStep::Finished, "{what}");
                array.close().unwrap_or_else(|e| panic!("{what}: {e}"));
            } else {
                untouched += 1;
            }
            let (array, _) = Array::assemble(devs, &ArrayOptions::default()).unwrap_or_else(|e| panic!("{what}: does not assemble: {e}"));
            let mut got = vec![0u8; content.len()];
            array.read(0, &mut got).unwrap_or_else(|e| panic!("{what}: {e}"));
            if let Some(first) = got.iter().zip(&content).position(|(a, b)| a != b) {
                panic!("{what}: content differs from byte {first} (array sector {})", first / 512);
            }
        }
    }
    assert!(restarted > 0 && untouched > 0, "crashes before and after the start: {untouched} and {restarted}");
}

/// A RAID0 grown by one member as mdadm grows it (`--grow -n 4 --add`): taken over as a
/// RAID4 without its parity, the new device added, the RAID4 reshaped with the new device
/// in a data role, then taken back as a RAID0. A crash after any write or flush of any
/// device (unflushed writes lost, kept or half kept) loses nothing: whatever the devices
/// then say (the RAID0, the RAID4 with or without its new device, the RAID4 part-way
/// through its reshape or done) reads back the content, and continued and taken back it
/// is a RAID0 of 4 holding it.
#[test]
fn a_crash_at_any_instant_of_a_raid0_grow_loses_nothing() {
    use uraid_engine::reshape::{finish_raid0_grow, start_raid0_grow};
    let mut sketch = uraid_engine::create::ArraySketch::new(Level::Raid0, "r0");
    sketch.chunk_kib = 16;
    let members = uraid_engine::create::mem_devices(3, 2 << 20, "m");
    sketch.write(&uraid_engine::create::as_members(&members), &[]).expect("create");
    let content = fill_random(&members, 43);
    let images: Vec<Arc<MemMember>> = members.into_iter().chain([Arc::new(MemMember::new("n0", vec![0u8; 2 << 20]))]).collect();
    let (before, history, hooked) = recorded(&images);
    let mut opts = ArrayOptions { writable: true, ..Default::default() };
    opts.assemble.run = true;
    let reshaping = start_raid0_grow(&hooked[..3], vec![(hooked[3].clone(), [9; 16])], &opts).expect("start");
    assert_eq!(reshaping.run(&|| false, |_| {}).expect("reshape"), ReshapeStep::Finished);
    reshaping.close().expect("close");
    drop(reshaping);
    assert_eq!(finish_raid0_grow(&hooked, &opts).expect("back to RAID0"), 4);
    let events = std::mem::take(&mut *history.events.lock().unwrap());
    let stride = (events.len() / 600).max(1);
    let mut levels = std::collections::BTreeSet::new();
    for k in (0..=events.len()).filter(|k| k % stride == 0 || *k == events.len()) {
        for unflushed in [Unflushed::Lost, Unflushed::Applied, Unflushed::Random(k as u64)] {
            let what = format!("crash after event {k} of {} ({unflushed:?})", events.len());
            let crashed = mem_images(crash_image(&before, &events, k, unflushed));
            // The devices with a superblock (the new one is blank until it is added).
            let devs: Vec<Arc<dyn Member>> =
                as_devices(&crashed).into_iter().filter(|d| uraid_engine::scan::probe(d.as_ref()).best().is_some()).collect();
            let newest = devs
                .iter()
                .filter_map(|d| uraid_engine::scan::probe(d.as_ref()).best().map(|(_, sb)| sb.clone()))
                .max_by_key(|sb| sb.events())
                .expect("superblocks");
            levels.insert((newest.level().raw(), newest.raid_disks(), newest.reshape_active()));
            let read_prefix = |devs: &[Arc<dyn Member>]| -> Vec<u8> {
                let read_only = ArrayOptions { writable: false, ..opts };
                let mut got = vec![0u8; content.len()];
                match Array::assemble(devs.to_vec(), &read_only) {
                    Ok((a, _)) => a.read(0, &mut got).unwrap_or_else(|e| panic!("{what}: {e}")),
                    Err(EngineError::ReshapeInProgress { .. }) => ReshapingArray::open(devs.to_vec(), &read_only)
                        .and_then(|r| r.read(0, &mut got))
                        .unwrap_or_else(|e| panic!("{what}: {e}")),
                    Err(e) => panic!("{what}: does not assemble: {e}"),
                }
                got
            };
            assert!(read_prefix(&devs) == content, "{what}: the content differs after the restart");
            // Continued (as `uraid grow --continue`, then `--level 0`) where it was part-way.
            if newest.reshape_active() {
                let r = ReshapingArray::open(devs.clone(), &opts).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
                assert_eq!(r.run(&|| false, |_| {}).unwrap_or_else(|e| panic!("{what}: {e}")), ReshapeStep::Finished);
                r.close().unwrap_or_else(|e| panic!("{what}: {e}"));
            }
            if newest.level().raw() == 4 && (newest.raid_disks() == 5 || newest.reshape_active()) {
                assert_eq!(finish_raid0_grow(&devs, &opts).unwrap_or_else(|e| panic!("{what}: back to RAID0: {e}")), 4, "{what}");
            }
            assert!(read_prefix(&devs) == content, "{what}: the content differs after the grow was finished");
        }
    }
    // Crashes fell before the takeover, on the RAID4 before and during its reshape, and after.
    assert!(levels.len() >= 4, "states crashed in: {levels:?}");
}
