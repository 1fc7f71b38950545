//! A member's bad-block log as the array uses it (md's `rdev->badblocks`), and the member
//! wrapper that makes the list hold on every I/O path.
//!
//! Every member of an assembled array is wrapped in a [`LoggedMember`]. A read touching a
//! listed range fails with [`ListedBadRange`] before reaching the device, so no data is
//! ever returned from a listed range: the array's healing paths treat it as a read error
//! that does not count against `max_read_errors`, rebuild the range from redundancy and
//! rewrite it. A write that succeeds clears what it covered, in memory at once and on disk
//! with the next superblock update (md clears them the same way, lazily: a range listed a
//! little too long is only rebuilt from redundancy once more). Ranges are *added* by the
//! array (a failed write, a rewrite that did not hold), which writes the log and the
//! superblocks before it acknowledges the write (md's "acknowledged" bad blocks).
//!
//! While the list is empty the wrapper hands out the member's direct-I/O descriptor, so the
//! io_uring path runs as before; with entries, every request goes through the checks.

use crate::member::{DirectIo, Member};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use uraid_core::geometry::SECTOR_BYTES;
use uraid_core::metadata::badblocks::BB_MAX_LOG_SECTORS;
use uraid_core::metadata::{BadBlockList, FeatureMap, SectorRange, Superblock};

/// A read refused because it touches ranges in the member's bad-block log (absolute device
/// sectors). Carried inside an `io::Error` of kind `Other`; test with [`is_listed`].
#[derive(Debug, thiserror::Error)]
#[error("sectors {start}..{end} are in the member's bad-block log")]
pub struct ListedBadRange {
    pub start: u64,
    pub end: u64,
}

/// Whether `e` is a read refused for a listed bad range (not a device error).
pub fn is_listed(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<ListedBadRange>())
}

/// Where a member keeps its log: absolute byte offset and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogArea {
    pub offset: u64,
    pub bytes: usize,
}

/// A log area's new contents, from [`BadBlockLog::prepare_update`].
pub(crate) struct LogWrite {
    pub offset: u64,
    pub bytes: Vec<u8>,
    changes: u64,
}

/// One member's bad-block list, shared by the array and the member's wrapper.
pub(crate) struct BadBlockLog {
    list: Mutex<BadBlockList>,
    /// Mirrors `!list.is_empty()`, so the I/O path checks nothing while the list is empty.
    nonempty: AtomicBool,
    /// Bumped at every change of the list…
    changes: AtomicU64,
    /// …and the value it had when the list last written was prepared: the log is out of
    /// date on disk while they differ (a change racing a write is never lost).
    written_at: AtomicU64,
    /// `None`: the member has no log (0.90 metadata, or made without one); nothing can be
    /// recorded and a write error fails it, as md fails it.
    area: Option<LogArea>,
}

impl BadBlockLog {
    /// The log a superblock describes, read from `member` when the superblock says it is
    /// not empty. An unreadable or corrupt log is an error: the member is not used (md
    /// refuses such a device too).
    pub(crate) fn load(member: &dyn Member, sb: &Superblock, sb_offset: u64) -> Result<BadBlockLog, String> {
        let Superblock::V1(s) = sb else { return Ok(BadBlockLog::without_area()) };
        if s.bblog_offset_sectors == 0 || s.bblog_size_sectors == 0 {
            return Ok(BadBlockLog::without_area());
        }
        let offset = sb_offset as i64 + i64::from(s.bblog_offset_sectors) * SECTOR_BYTES as i64;
        let bytes = usize::from(s.bblog_size_sectors.min(BB_MAX_LOG_SECTORS)) * SECTOR_BYTES as usize;
        if offset < 0 {
            return Err(format!("{}: bad-block log offset points before the device start", member.label()));
        }
        let area = LogArea { offset: offset as u64, bytes };
        let mut list = BadBlockList::new(s.bblog_shift);
        if s.feature_map.contains(FeatureMap::BAD_BLOCKS) {
            let mut raw = vec![0u8; bytes];
            member.read_at(&mut raw, area.offset).map_err(|e| format!("{}: reading the bad-block log: {e}", member.label()))?;
            list = BadBlockList::decode(&raw, s.bblog_shift).map_err(|e| format!("{}: {e}", member.label()))?;
            // md stores at most 512 units per entry; a log using longer ones (up to 1023)
            // would not fit again once cut to md's entries, so it is refused as corrupt.
            if !list.fits(bytes) {
                return Err(format!("{}: bad-block log entries are longer than md writes them", member.label()));
            }
        }
        Ok(BadBlockLog {
            nonempty: AtomicBool::new(!list.is_empty()),
            list: Mutex::new(list),
            changes: AtomicU64::new(0),
            written_at: AtomicU64::new(0),
            area: Some(area),
        })
    }

    fn without_area() -> BadBlockLog {
        BadBlockLog {
            list: Mutex::new(BadBlockList::new(0)),
            nonempty: AtomicBool::new(false),
            changes: AtomicU64::new(0),
            written_at: AtomicU64::new(0),
            area: None,
        }
    }

    fn lock(&self) -> MutexGuard<'_, BadBlockList> {
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn has_area(&self) -> bool {
        self.area.is_some()
    }

    pub(crate) fn ranges(&self) -> Vec<SectorRange> {
        self.lock().ranges().to_vec()
    }

    /// Whether any sector of `start..start+sectors` (absolute) is listed.
    pub(crate) fn overlaps(&self, start: u64, sectors: u64) -> bool {
        self.nonempty.load(Ordering::Acquire) && self.lock().overlaps(start, sectors)
    }

    /// Adds ranges (absolute sectors). False, with nothing changed, when the member has no
    /// log or they do not fit in it (md then fails the member).
    pub(crate) fn record(&self, ranges: &[SectorRange]) -> bool {
        let Some(area) = self.area else { return false };
        let mut list = self.lock();
        let mut next = list.clone();
        let mut changed = false;
        for r in ranges {
            changed |= next.add(r.start, r.sectors);
        }
        if !next.fits(area.bytes) {
            return false;
        }
        if changed {
            *list = next;
            self.nonempty.store(true, Ordering::Release);
            self.changes.fetch_add(1, Ordering::AcqRel);
        }
        true
    }

    /// Clears what a successful write covered (absolute byte range).
    fn cleared_by_write(&self, offset: u64, len: u64) {
        if !self.nonempty.load(Ordering::Acquire) {
            return;
        }
        let first = offset.div_ceil(SECTOR_BYTES);
        let end = (offset + len) / SECTOR_BYTES;
        if end <= first {
            return;
        }
        let mut list = self.lock();
        let mut next = list.clone();
        // A clear that splits a range adds an entry; in a full log it stays listed instead
        // (listing more than is bad is safe: those sectors are only rebuilt once more), so
        // the list always fits its log.
        if next.clear(first, end - first) && self.area.is_none_or(|area| next.fits(area.bytes)) {
            *list = next;
            self.changes.fetch_add(1, Ordering::AcqRel);
            self.nonempty.store(!list.is_empty(), Ordering::Release);
        }
    }

    /// For a superblock update: sets the superblock's BAD_BLOCKS bit as the list requires
    /// (md: set exactly while the list is not empty) and returns the log bytes to write
    /// first, if the list changed since it was last written and is not empty, with the
    /// change count it encodes: pass that to [`BadBlockLog::written`] once both are on disk.
    pub(crate) fn prepare_update(&self, sb: &mut Superblock) -> Option<LogWrite> {
        let Superblock::V1(s) = sb else { return None };
        let area = self.area?;
        let list = self.lock();
        if list.is_empty() {
            s.feature_map.0 &= !FeatureMap::BAD_BLOCKS;
        } else {
            s.feature_map.0 |= FeatureMap::BAD_BLOCKS;
        }
        let changes = self.changes.load(Ordering::Acquire);
        if list.is_empty() || changes == self.written_at.load(Ordering::Acquire) {
            return None;
        }
        // Load, record and clear all keep the list within its log.
        let bytes = list.encode(area.bytes).expect("a bad-block list always fits its log");
        Some(LogWrite { offset: area.offset, bytes, changes })
    }

    /// The log prepared by [`BadBlockLog::prepare_update`] is on disk.
    pub(crate) fn written(&self, log: &LogWrite) {
        self.written_at.fetch_max(log.changes, Ordering::AcqRel);
    }
}

/// A member whose reads honour its bad-block log and whose writes clear it.
pub(crate) struct LoggedMember {
    inner: Arc<dyn Member>,
    log: Arc<BadBlockLog>,
}

impl LoggedMember {
    pub(crate) fn wrap(inner: Arc<dyn Member>, log: Arc<BadBlockLog>) -> Arc<dyn Member> {
        Arc::new(LoggedMember { inner, log })
    }

    fn check_read(&self, offset: u64, len: u64) -> io::Result<()> {
        if !self.log.nonempty.load(Ordering::Acquire) || len == 0 {
            return Ok(());
        }
        let first = offset / SECTOR_BYTES;
        let sectors = (offset + len).div_ceil(SECTOR_BYTES) - first;
        let list = self.log.lock();
        match list.overlapping(first, sectors).first() {
            None => Ok(()),
            Some(r) => Err(io::Error::other(ListedBadRange { start: r.start, end: r.end() })),
        }
    }
}

impl Member for LoggedMember {
    fn label(&self) -> &str {
        self.inner.label()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check_read(offset, buf.len() as u64)?;
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)?;
        self.log.cleared_by_write(offset, buf.len() as u64);
        Ok(())
    }
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        self.check_read(offset, bufs.iter().map(|b| b.len() as u64).sum())?;
        self.inner.read_vectored_at(bufs, offset)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.inner.write_vectored_at(bufs, offset)?;
        self.log.cleared_by_write(offset, bufs.iter().map(|b| b.len() as u64).sum());
        Ok(())
    }
    // Forwarded whole, so a backend that queues a request's runs together still sees them
    // together. On an error nothing is cleared: a range that stays listed is only rebuilt
    // and rewritten again, never trusted.
    fn run_batch(&self, runs: &mut [crate::member::Run<'_>]) -> io::Result<()> {
        for r in runs.iter() {
            if let crate::member::Bufs::Read(_) = r.bufs {
                self.check_read(r.offset, r.bufs.bytes() as u64)?;
            }
        }
        self.inner.run_batch(runs)?;
        for r in runs.iter() {
            if let crate::member::Bufs::Write(_) = r.bufs {
                self.log.cleared_by_write(r.offset, r.bufs.bytes() as u64);
            }
        }
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.discard(offset, len)
    }
    fn direct_io(&self) -> Option<DirectIo<'_>> {
        // With entries, requests must pass the checks above; io_uring would bypass them.
        if self.log.nonempty.load(Ordering::Acquire) {
            None
        } else {
            self.inner.direct_io()
        }
    }
    fn identity(&self) -> Option<crate::ownership::DeviceIdentity> {
        self.inner.identity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_with_room(entries: usize) -> BadBlockLog {
        BadBlockLog {
            list: Mutex::new(BadBlockList::new(0)),
            nonempty: AtomicBool::new(false),
            changes: AtomicU64::new(0),
            written_at: AtomicU64::new(0),
            area: Some(LogArea { offset: 0, bytes: entries * 8 }),
        }
    }

    #[test]
    fn a_clear_that_would_overflow_a_full_log_leaves_the_range_listed() {
        let log = log_with_room(2);
        assert!(log.record(&[SectorRange { start: 0, sectors: 8 }, SectorRange { start: 100, sectors: 1 }]));
        // Splitting 0..8 would need three entries: refused, nothing changes.
        log.cleared_by_write(3 * 512, 512);
        assert_eq!(log.ranges(), vec![SectorRange { start: 0, sectors: 8 }, SectorRange { start: 100, sectors: 1 }]);
        // A clear that does not split goes through.
        log.cleared_by_write(100 * 512, 512);
        assert_eq!(log.ranges(), vec![SectorRange { start: 0, sectors: 8 }]);
        log.cleared_by_write(3 * 512, 512);
        assert_eq!(log.ranges(), vec![SectorRange { start: 0, sectors: 3 }, SectorRange { start: 4, sectors: 4 }]);
    }
}
