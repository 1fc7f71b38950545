//! The two crash-consistency races of the engine-foundation issue, each forced into its bad
//! interleaving by members that hold an I/O until the test lets it go, with a monitor on every
//! member that checks md's rules against what is on the member at each data write:
//! - the superblock says active (else a crash now would skip the resync);
//! - the bitmap bit covering the write is set (else a crash now would skip this region).
//!
//! Each step waits for an event (an I/O reached a member, a thread is blocked, an engine
//! counter moved), never for a time; the only time bound is a hang guard.

mod common;
use common::*;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use uraid_core::geometry::Level;
use uraid_core::metadata::{BitmapSuperblock, Superblock1, WriteIntentBits};
use uraid_engine::{Array, ArrayOptions, MemMember, Member};

const HANG_GUARD: Duration = Duration::from_secs(60);

/// Waits for `cond`, yielding; panics with `what` if it has not happened by the hang guard.
fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < HANG_GUARD, "hung waiting for: {what}");
        std::thread::yield_now();
    }
}

#[derive(Default)]
struct Gate {
    /// Hold the next I/O of this kind.
    armed: bool,
    /// An I/O is being held.
    holding: bool,
}

/// A member that can hold its next flush or its next bitmap write, and that checks md's
/// rules at every data write against its own content.
struct Watched {
    flush: Mutex<Gate>,
    bitmap: Mutex<Gate>,
    changed: Condvar,
    violations: Mutex<Vec<String>>,
    data_writes: Mutex<u64>,
    /// Bytes: the superblock's data offset, and where the bitmap's bits start (if any).
    data_offset: u64,
    bits_at: Option<(u64, BitmapSuperblock)>,
    sync_range_of: fn(u64) -> u64,
}

impl Watched {
    fn new(inner: Arc<MemMember>, sync_range_of: fn(u64) -> u64) -> Arc<Hooked<Watched>> {
        let mut sb = vec![0u8; 4096];
        inner.read_at(&mut sb, 4096).unwrap();
        let sb = Superblock1::decode(&sb).unwrap();
        let bits_at = sb.bitmap_offset_sectors().map(|off| {
            let at = 4096 + off as u64 * 512;
            let mut head = vec![0u8; 256];
            inner.read_at(&mut head, at).unwrap();
            (at + 256, BitmapSuperblock::decode(&head).unwrap())
        });
        Hooked::new(
            inner,
            Watched {
                data_offset: sb.data_offset_sectors * 512,
                flush: Mutex::default(),
                bitmap: Mutex::default(),
                changed: Condvar::new(),
                violations: Mutex::default(),
                data_writes: Mutex::new(0),
                bits_at,
                sync_range_of,
            },
        )
    }

    fn hold(&self, gate: &Mutex<Gate>) {
        let mut g = gate.lock().unwrap();
        if g.armed {
            g.armed = false;
            g.holding = true;
            self.changed.notify_all();
            while g.holding {
                g = self.changed.wait(g).unwrap();
            }
        }
    }

    fn release(&self, gate: &Mutex<Gate>) {
        gate.lock().unwrap().holding = false;
        self.changed.notify_all();
    }

    fn holding(&self, gate: &Mutex<Gate>) -> bool {
        gate.lock().unwrap().holding
    }

    fn check_data_write(&self, image: &MemMember, offset: u64, len: usize) {
        let mut sb = vec![0u8; 4096];
        image.read_at(&mut sb, 4096).unwrap();
        let sb = Superblock1::decode(&sb).unwrap();
        let mut v = self.violations.lock().unwrap();
        if sb.resync_offset_sectors == u64::MAX {
            v.push(format!("{}: data written at byte {offset} while its superblock says clean", image.label()));
        }
        if let Some((at, bsb)) = &self.bits_at {
            let mut bytes = vec![0u8; bsb.bits_len_bytes() as usize];
            image.read_at(&mut bytes, *at).unwrap();
            let bits = WriteIntentBits::decode(bsb, &bytes).unwrap();
            let member_sector = (offset - self.data_offset) / 512;
            let (first, last) = ((self.sync_range_of)(member_sector), (self.sync_range_of)(member_sector + len as u64 / 512 - 1));
            for c in bits.chunk_of_sector(first)..=bits.chunk_of_sector(last) {
                if !bits.is_dirty(c) {
                    v.push(format!("{}: data written at byte {offset} before bitmap chunk {c} was on disk", image.label()));
                }
            }
        }
        *self.data_writes.lock().unwrap() += 1;
    }
}

impl Hooks for Watched {
    fn before_write(&self, image: &MemMember, buf: &[u8], offset: u64) {
        if self.bits_at.as_ref().is_some_and(|(at, _)| offset == *at) {
            self.hold(&self.bitmap);
        }
        if offset >= self.data_offset {
            self.check_data_write(image, offset, buf.len());
        }
    }
    fn before_flush(&self, _image: &MemMember) {
        self.hold(&self.flush);
    }
}

fn open_watched(made: &Made, sync_range_of: fn(u64) -> u64) -> (Array, Vec<Arc<Hooked<Watched>>>) {
    let watched: Vec<Arc<Hooked<Watched>>> = made.members.iter().map(|m| Watched::new(m.clone(), sync_range_of)).collect();
    let devs: Vec<Arc<dyn Member>> = watched.iter().map(|w| w.clone() as Arc<dyn Member>).collect();
    let (a, _) = Array::assemble(devs, &ArrayOptions { writable: true, ..Default::default() }).unwrap();
    (a, watched)
}

fn violations(ws: &[Arc<Hooked<Watched>>]) -> Vec<String> {
    ws.iter().flat_map(|w| w.violations.lock().unwrap().clone()).collect()
}

/// This thread's kernel id, to watch its scheduler state.
fn my_tid() -> u32 {
    let link = std::fs::read_link("/proc/thread-self").unwrap();
    link.file_name().unwrap().to_str().unwrap().parse().unwrap()
}

/// True when thread `tid` is asleep (blocked on a lock or condition variable).
fn sleeping(tid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    // Field 3, after the parenthesised command name.
    stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('S'))
}

/// Race 1: a writer that found the array already active must not write after a clean mark
/// that ran while it waited. The clean mark is held in its flush (it holds the array's
/// clean/active state then); the writer starts and blocks; the flush is let go.
#[test]
fn a_writer_waiting_during_a_clean_mark_marks_the_array_active_before_writing() {
    let made = make(&Shape::new(Level::Raid1, 2));
    let (a, ws) = open_watched(&made, |s| s);
    a.write(0, &[1u8; 4096]).unwrap(); // active now
    ws[0].flush.lock().unwrap().armed = true;
    let tid = Mutex::new(None);
    std::thread::scope(|sc| {
        let cleaner = sc.spawn(|| a.mark_clean());
        wait_for("the clean mark's flush reaches member 0", || ws[0].holding(&ws[0].flush));
        let writer = sc.spawn(|| {
            *tid.lock().unwrap() = Some(my_tid());
            a.write(1 << 20, &[2u8; 4096])
        });
        wait_for("the writer blocks behind the clean mark", || tid.lock().unwrap().is_some_and(sleeping));
        ws[0].release(&ws[0].flush);
        cleaner.join().unwrap().unwrap();
        writer.join().unwrap().unwrap();
    });
    assert_eq!(violations(&ws), Vec::<String>::new());
    // And it is still marked active on disk, with the write done: a crash now resyncs.
    let mut sb = vec![0u8; 4096];
    made.members[0].read_at(&mut sb, 4096).unwrap();
    assert_ne!(Superblock1::decode(&sb).unwrap().resync_offset_sectors, u64::MAX, "write done, superblock says clean");
    let mut back = vec![0u8; 4096];
    a.read(1 << 20, &mut back).unwrap();
    assert_eq!(back, vec![2u8; 4096]);
}

/// Race 2: a second writer to a bitmap chunk whose bit the first writer has set in memory
/// but not yet written must wait for that bit to be on disk.
#[test]
fn a_second_writer_to_a_chunk_waits_until_its_bitmap_bit_is_on_disk() {
    // RAID1: the bitmap covers array sectors, which are member sectors here.
    let made = make(&Shape::new(Level::Raid1, 2).bitmap(64 * 1024));
    let (a, ws) = open_watched(&made, |s| s);
    // mdadm creates the bitmap all dirty; a clean mark clears it. Then one write far away
    // makes the array active, so only the bitmap is in play below.
    a.write(0, &[9u8; 4096]).unwrap();
    a.mark_clean().unwrap();
    a.write(a.size_bytes() - 4096, &[9u8; 4096]).unwrap();
    for w in &ws {
        w.bitmap.lock().unwrap().armed = true;
    }
    let data_writes = || ws.iter().map(|w| *w.data_writes.lock().unwrap()).sum::<u64>();
    let before = data_writes();
    std::thread::scope(|sc| {
        let first = sc.spawn(|| a.write(0, &[1u8; 4096]));
        wait_for("the first writer's bitmap write reaches a member", || ws.iter().any(|w| w.holding(&w.bitmap)));
        let second = sc.spawn(|| a.write(8192, &[2u8; 4096]));
        // Either the second writer's data reaches a member (the race) or it waits for the
        // bitmap write in flight (md's pending list), which the engine counts.
        wait_for("the second writer writes data or waits for the bitmap", || data_writes() > before || a.bitmap_waits() > 0);
        for w in &ws {
            w.bitmap.lock().unwrap().armed = false;
            w.release(&w.bitmap);
        }
        first.join().unwrap().unwrap();
        second.join().unwrap().unwrap();
    });
    assert_eq!(violations(&ws), Vec::<String>::new());
}
