//! `SimDisk`: a member disk in memory with a volatile write cache, and faults.
//!
//! Two images, as redb's crash tests keep them: `volatile` is what reads see (the disk's
//! cache plus media), `durable` is what survives a power loss. Every write lands in
//! `volatile` and is remembered in `unflushed`; `flush` copies the unflushed writes into
//! `durable`. `crash` throws the cache away: each unflushed write is, independently, lost,
//! applied whole, or torn (a random subset of its 512-byte sectors applied), as a disk
//! with a volatile cache may do when the power goes.
//!
//! Faults, all decided by the disk's own seeded [`Prng`] and its operation counter (so a
//! run replays exactly; the counter is per disk because the engine issues member I/O of
//! one request on several threads, and a shared counter would depend on scheduling):
//! - fail-stop at operation N: that operation and every later one fail; if operation N is
//!   a write, a random subset of its sectors reaches the cache first (a torn write);
//! - latent sector errors: reads touching listed sectors fail until a write covers the
//!   sector (a real disk remaps a sector on write);
//! - unwritable sectors: reads and writes touching them fail (a sector the disk cannot
//!   remap); md lists such ranges in the member's bad-block log;
//! - power off: while off, every operation fails without counting (the dropped array's
//!   last gasps must not reach the platter after the crash).

use crate::prng::Prng;
use std::collections::BTreeSet;
use std::io;
use std::sync::{Mutex, MutexGuard};
use uraid_engine::Member;

const SECTOR: u64 = uraid_core::geometry::SECTOR_BYTES;

/// How many operations of each kind a disk has served, for traces and reproduction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCounters {
    /// Reads + writes + flushes issued while powered (the fail-stop clock).
    pub ops: u64,
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    /// Operations answered with an error.
    pub errors: u64,
    pub crashes: u64,
}

/// What one crash did to the unflushed writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrashOutcome {
    pub lost: u64,
    pub whole: u64,
    pub torn: u64,
}

struct PendingWrite {
    offset: u64,
    bytes: Vec<u8>,
}

struct DiskState {
    volatile: Vec<u8>,
    durable: Vec<u8>,
    unflushed: Vec<PendingWrite>,
    prng: Prng,
    counters: OpCounters,
    /// Operation number (1-based, `counters.ops` after increment) at which the disk dies.
    fail_stop_at: Option<u64>,
    dead: bool,
    bad_sectors: BTreeSet<u64>,
    unwritable: BTreeSet<u64>,
    powered: bool,
}

pub struct SimDisk {
    label: String,
    size: u64,
    state: Mutex<DiskState>,
}

/// The 512-byte-aligned pieces of `offset..offset+len`, as (offset, len) pairs: the units a
/// torn write keeps or drops (sector atomicity is what disks promise).
fn sector_pieces(offset: u64, len: usize) -> impl Iterator<Item = (u64, usize)> {
    let end = offset + len as u64;
    let mut at = offset;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let next = ((at / SECTOR + 1) * SECTOR).min(end);
        let piece = (at, (next - at) as usize);
        at = next;
        Some(piece)
    })
}

fn io_error(label: &str, what: &str) -> io::Error {
    io::Error::other(format!("{label}: {what}"))
}

impl SimDisk {
    /// A zeroed disk of `size` bytes whose random choices (tears, crash outcomes) come from
    /// `seed`.
    pub fn new(label: impl Into<String>, size: u64, seed: u64) -> SimDisk {
        let n = size as usize;
        SimDisk {
            label: label.into(),
            size,
            state: Mutex::new(DiskState {
                volatile: vec![0; n],
                durable: vec![0; n],
                unflushed: Vec::new(),
                prng: Prng::new(seed),
                counters: OpCounters::default(),
                fail_stop_at: None,
                dead: false,
                bad_sectors: BTreeSet::new(),
                unwritable: BTreeSet::new(),
                powered: true,
            }),
        }
    }

    fn lock(&self) -> io::Result<MutexGuard<'_, DiskState>> {
        // A poisoned lock means a panic mid-operation elsewhere; report it as an I/O error
        // rather than panicking again inside the engine.
        self.state.lock().map_err(|_| io_error(&self.label, "state lock poisoned"))
    }

    fn lock_or_recover(&self) -> MutexGuard<'_, DiskState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The disk dies at its `after`-th operation from now (1 = the next one).
    pub fn fail_stop_after(&self, after: u64) {
        let mut s = self.lock_or_recover();
        s.fail_stop_at = Some(s.counters.ops + after.max(1));
    }

    /// Makes reads of sectors `first..first+count` (absolute, from the disk start) fail.
    pub fn add_bad_sectors(&self, first: u64, count: u64) {
        self.lock_or_recover().bad_sectors.extend(first..first + count);
    }

    /// Makes reads and writes of sectors `first..first+count` fail for good.
    pub fn add_unwritable_sectors(&self, first: u64, count: u64) {
        self.lock_or_recover().unwritable.extend(first..first + count);
    }

    pub fn bad_sector_count(&self) -> usize {
        self.lock_or_recover().bad_sectors.len()
    }

    /// Fail-stop has happened: the disk answers nothing any more.
    pub fn is_dead(&self) -> bool {
        self.lock_or_recover().dead
    }

    /// A fault is armed or has fired: fail-stop pending or happened, or bad sectors left.
    pub fn has_latent_fault(&self) -> bool {
        let s = self.lock_or_recover();
        s.dead || s.fail_stop_at.is_some() || !s.bad_sectors.is_empty()
    }

    pub fn counters(&self) -> OpCounters {
        self.lock_or_recover().counters
    }

    pub fn unflushed_writes(&self) -> usize {
        self.lock_or_recover().unflushed.len()
    }

    pub fn volatile_snapshot(&self) -> Vec<u8> {
        self.lock_or_recover().volatile.clone()
    }

    pub fn durable_snapshot(&self) -> Vec<u8> {
        self.lock_or_recover().durable.clone()
    }

    /// Power loss: the cache is gone. `durable` receives each unflushed write lost, whole
    /// or torn, in the order they were issued; `volatile` becomes `durable`; the disk stays
    /// off (every operation fails) until [`SimDisk::power_on`].
    pub fn crash(&self) -> CrashOutcome {
        let mut guard = self.lock_or_recover();
        let s = &mut *guard;
        s.powered = false;
        s.counters.crashes += 1;
        let mut outcome = CrashOutcome::default();
        for w in std::mem::take(&mut s.unflushed) {
            match s.prng.below(3) {
                0 => outcome.lost += 1,
                1 => {
                    outcome.whole += 1;
                    let o = w.offset as usize;
                    s.durable[o..o + w.bytes.len()].copy_from_slice(&w.bytes);
                }
                _ => {
                    outcome.torn += 1;
                    for (off, len) in sector_pieces(w.offset, w.bytes.len()) {
                        if s.prng.chance(50) {
                            let from = (off - w.offset) as usize;
                            s.durable[off as usize..off as usize + len].copy_from_slice(&w.bytes[from..from + len]);
                        }
                    }
                }
            }
        }
        s.volatile.clone_from(&s.durable);
        outcome
    }

    pub fn power_on(&self) {
        self.lock_or_recover().powered = true;
    }

    /// Common prologue of every operation: power, range, the fail-stop clock. Returns true
    /// when this very operation is the one at which the disk dies.
    fn begin(&self, s: &mut DiskState, offset: u64, len: usize) -> io::Result<bool> {
        if !s.powered {
            return Err(io_error(&self.label, "powered off"));
        }
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.size => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{}: access of {len} bytes at {offset} beyond the end ({} bytes)", self.label, self.size),
                ))
            }
        }
        s.counters.ops += 1;
        if s.dead {
            s.counters.errors += 1;
            return Err(io_error(&self.label, "disk has failed"));
        }
        if s.fail_stop_at.is_some_and(|at| s.counters.ops >= at) {
            s.dead = true;
            s.fail_stop_at = None;
            s.counters.errors += 1;
            return Ok(true);
        }
        Ok(false)
    }
}

impl Member for SimDisk {
    fn label(&self) -> &str {
        &self.label
    }

    fn size_bytes(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut s = self.lock()?;
        if self.begin(&mut s, offset, buf.len())? {
            return Err(io_error(&self.label, "disk failed (fail-stop) on this read"));
        }
        s.counters.reads += 1;
        let first = offset / SECTOR;
        let end = (offset + buf.len() as u64).div_ceil(SECTOR);
        if let Some(bad) = s.bad_sectors.range(first..end).next().or_else(|| s.unwritable.range(first..end).next()).copied() {
            s.counters.errors += 1;
            return Err(io_error(&self.label, &format!("unrecoverable read error at sector {bad}")));
        }
        let o = offset as usize;
        buf.copy_from_slice(&s.volatile[o..o + buf.len()]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut guard = self.lock()?;
        let s = &mut *guard;
        let dies_now = self.begin(s, offset, buf.len())?;
        s.counters.writes += 1;
        if dies_now {
            // The disk dies mid-write: some sectors made it into the cache. They may reach
            // the platter or not at a later crash, like any other unflushed write.
            for (off, len) in sector_pieces(offset, buf.len()) {
                if s.prng.chance(50) {
                    let from = (off - offset) as usize;
                    let bytes = buf[from..from + len].to_vec();
                    s.volatile[off as usize..off as usize + len].copy_from_slice(&bytes);
                    s.unflushed.push(PendingWrite { offset: off, bytes });
                }
            }
            return Err(io_error(&self.label, "disk failed (fail-stop) during this write; torn"));
        }
        if let Some(bad) = s.unwritable.range(offset / SECTOR..(offset + buf.len() as u64).div_ceil(SECTOR)).next().copied() {
            s.counters.errors += 1;
            return Err(io_error(&self.label, &format!("write error at sector {bad}")));
        }
        let o = offset as usize;
        s.volatile[o..o + buf.len()].copy_from_slice(buf);
        s.unflushed.push(PendingWrite { offset, bytes: buf.to_vec() });
        // Sectors written whole are remapped: their latent errors are gone.
        let first_whole = offset.div_ceil(SECTOR);
        let end_whole = (offset + buf.len() as u64) / SECTOR;
        if first_whole < end_whole && !s.bad_sectors.is_empty() {
            let healed: Vec<u64> = s.bad_sectors.range(first_whole..end_whole).copied().collect();
            for b in healed {
                s.bad_sectors.remove(&b);
            }
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        let mut guard = self.lock()?;
        let s = &mut *guard;
        if self.begin(s, 0, 0)? {
            return Err(io_error(&self.label, "disk failed (fail-stop) on this flush"));
        }
        s.counters.flushes += 1;
        for w in std::mem::take(&mut s.unflushed) {
            let o = w.offset as usize;
            s.durable[o..o + w.bytes.len()].copy_from_slice(&w.bytes);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_on_sector_boundaries() {
        let v: Vec<_> = sector_pieces(500, 1100).collect();
        assert_eq!(v, vec![(500, 12), (512, 512), (1024, 512), (1536, 64)]);
    }
}
