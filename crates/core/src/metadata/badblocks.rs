//! md's bad-block log: the per-member list of device ranges whose contents are known bad
//! (a write failed there, or a read could not be corrected). md keeps it in the v1
//! superblock's `bblog_*` area and sets `MD_FEATURE_BAD_BLOCKS` while it is not empty.
//!
//! On disk (md.c `super_1_load`/`super_1_sync`, mdadm `examine_badblocks_super1`): the log
//! is `bblog_size` sectors at `bblog_offset` sectors from the superblock, an array of
//! little-endian u64 entries, `sector << 10 | count`, both in units of `1 << bblog_shift`
//! sectors, ended by an all-ones entry (md fills the unused rest with 0xff). Sectors are
//! absolute device sectors (md adds `data_offset` before recording). md writes at most 512
//! sectors (units) per entry (`BB_MAX_LEN`) and reads at most one page of log.
//!
//! Here the list is kept merged (sorted, disjoint, adjacent ranges joined) in sectors;
//! [`BadBlockList::encode`] cuts it into md's entries again. Pure: no I/O.

/// md's largest count in one entry (`BB_MAX_LEN`), in units of `1 << shift` sectors.
pub const BB_MAX_LEN: u64 = 512;
/// The largest log md reads (one 4 KiB page), in sectors.
pub const BB_MAX_LOG_SECTORS: u16 = 8;
/// Bytes per entry.
pub const BB_ENTRY_BYTES: usize = 8;
/// The entry that ends the list.
const END: u64 = u64::MAX;

/// A run of device sectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SectorRange {
    pub start: u64,
    pub sectors: u64,
}

impl SectorRange {
    pub fn end(&self) -> u64 {
        self.start + self.sectors
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadBlockLogError {
    #[error("bad-block log entry {index} has a zero length")]
    ZeroLength { index: usize },
    #[error("bad-block log entry {index} lies beyond the largest sector md can address")]
    OutOfRange { index: usize },
    #[error("bad-block log shift {0} is larger than md allows")]
    Shift(u8),
    #[error("bad-block log is full: {needed} entries needed, room for {room}")]
    Full { needed: usize, room: usize },
}

/// One member's bad ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BadBlockList {
    /// Entries count units of `1 << shift` sectors (md's `bblog_shift`).
    shift: u8,
    /// Sorted, disjoint, never adjacent; each aligned to `1 << shift`.
    ranges: Vec<SectorRange>,
}

/// Largest shift accepted: md's sectors field has 54 bits, and no md writes a shift above
/// a few; anything larger is corruption.
const MAX_SHIFT: u8 = 16;

/// The raw entries of a log area, as md stored them (sector, sectors), in order, up to the
/// end mark. This is what `mdadm --examine-badblocks` prints.
pub fn decode_entries(log: &[u8], shift: u8) -> Result<Vec<SectorRange>, BadBlockLogError> {
    if shift > MAX_SHIFT {
        return Err(BadBlockLogError::Shift(shift));
    }
    let mut out = Vec::new();
    for (index, raw) in log.chunks_exact(BB_ENTRY_BYTES).enumerate() {
        let bb = u64::from_le_bytes(raw.try_into().expect("chunks_exact gives 8 bytes"));
        if bb == END {
            break;
        }
        let count = bb & 0x3ff;
        if count == 0 {
            return Err(BadBlockLogError::ZeroLength { index });
        }
        let start = (bb >> 10).checked_shl(shift.into()).filter(|s| s >> shift == bb >> 10);
        let Some(start) = start else { return Err(BadBlockLogError::OutOfRange { index }) };
        let sectors = count << shift;
        if start.checked_add(sectors).is_none() {
            return Err(BadBlockLogError::OutOfRange { index });
        }
        out.push(SectorRange { start, sectors });
    }
    Ok(out)
}

impl BadBlockList {
    pub fn new(shift: u8) -> Self {
        BadBlockList { shift: shift.min(MAX_SHIFT), ranges: Vec::new() }
    }

    /// The list in a log area read from disk (overlapping or unsorted entries are merged,
    /// as md's `badblocks_set` merges them on load).
    pub fn decode(log: &[u8], shift: u8) -> Result<Self, BadBlockLogError> {
        let mut list = BadBlockList::new(shift);
        for r in decode_entries(log, shift)? {
            list.add(r.start, r.sectors);
        }
        Ok(list)
    }

    pub fn shift(&self) -> u8 {
        self.shift
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The merged ranges, in order.
    pub fn ranges(&self) -> &[SectorRange] {
        &self.ranges
    }

    fn unit(&self) -> u64 {
        1 << self.shift
    }

    /// md's entries for the list: each range cut into pieces of at most [`BB_MAX_LEN`] units.
    pub fn entries(&self) -> Vec<SectorRange> {
        let max = BB_MAX_LEN << self.shift;
        let mut out = Vec::new();
        for r in &self.ranges {
            let mut at = r.start;
            while at < r.end() {
                let sectors = (r.end() - at).min(max);
                out.push(SectorRange { start: at, sectors });
                at += sectors;
            }
        }
        out
    }

    /// Whether the list fits a log of `log_bytes`.
    pub fn fits(&self, log_bytes: usize) -> bool {
        self.entries().len() <= log_bytes / BB_ENTRY_BYTES
    }

    /// The log area's bytes: the entries, then 0xff to the end (as md writes it).
    pub fn encode(&self, log_bytes: usize) -> Result<Vec<u8>, BadBlockLogError> {
        let entries = self.entries();
        let room = log_bytes / BB_ENTRY_BYTES;
        if entries.len() > room {
            return Err(BadBlockLogError::Full { needed: entries.len(), room });
        }
        let mut out = vec![0xffu8; log_bytes];
        for (i, e) in entries.iter().enumerate() {
            let bb = ((e.start >> self.shift) << 10) | (e.sectors >> self.shift);
            out[i * BB_ENTRY_BYTES..(i + 1) * BB_ENTRY_BYTES].copy_from_slice(&bb.to_le_bytes());
        }
        Ok(out)
    }

    /// Records `start..start+sectors` as bad, widened to whole units (a bad range must
    /// never be narrower than asked). Returns whether the list changed.
    pub fn add(&mut self, start: u64, sectors: u64) -> bool {
        if sectors == 0 {
            return false;
        }
        let unit = self.unit();
        let lo = start / unit * unit;
        let hi = (start.saturating_add(sectors)).div_ceil(unit).saturating_mul(unit);
        // Every range touching or adjacent to lo..hi is absorbed into one.
        let first = self.ranges.partition_point(|r| r.end() < lo);
        let last = self.ranges.partition_point(|r| r.start <= hi);
        let (mut new_lo, mut new_hi) = (lo, hi);
        if first < last {
            new_lo = new_lo.min(self.ranges[first].start);
            new_hi = new_hi.max(self.ranges[last - 1].end());
            if first + 1 == last && self.ranges[first].start == new_lo && self.ranges[first].end() == new_hi {
                return false;
            }
        }
        self.ranges.splice(first..last, [SectorRange { start: new_lo, sectors: new_hi - new_lo }]);
        true
    }

    /// Clears `start..start+sectors` (a write there succeeded), narrowed to whole units: a
    /// unit only partly written stays bad. Returns whether the list changed.
    pub fn clear(&mut self, start: u64, sectors: u64) -> bool {
        let unit = self.unit();
        let lo = start.div_ceil(unit).saturating_mul(unit);
        let hi = start.saturating_add(sectors) / unit * unit;
        if lo >= hi {
            return false;
        }
        let first = self.ranges.partition_point(|r| r.end() <= lo);
        let last = self.ranges.partition_point(|r| r.start < hi);
        if first >= last {
            return false;
        }
        let mut keep = Vec::with_capacity(2);
        let (a, b) = (self.ranges[first], self.ranges[last - 1]);
        if a.start < lo {
            keep.push(SectorRange { start: a.start, sectors: lo - a.start });
        }
        if b.end() > hi {
            keep.push(SectorRange { start: hi, sectors: b.end() - hi });
        }
        self.ranges.splice(first..last, keep);
        true
    }

    /// Whether any sector of `start..start+sectors` is listed.
    pub fn overlaps(&self, start: u64, sectors: u64) -> bool {
        let end = start.saturating_add(sectors);
        let i = self.ranges.partition_point(|r| r.end() <= start);
        self.ranges.get(i).is_some_and(|r| r.start < end)
    }

    /// The listed parts of `start..start+sectors`.
    pub fn overlapping(&self, start: u64, sectors: u64) -> Vec<SectorRange> {
        let end = start.saturating_add(sectors);
        let i = self.ranges.partition_point(|r| r.end() <= start);
        self.ranges[i..]
            .iter()
            .take_while(|r| r.start < end)
            .map(|r| {
                let s = r.start.max(start);
                SectorRange { start: s, sectors: r.end().min(end) - s }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md_entry_encoding() {
        let mut l = BadBlockList::new(0);
        l.add(2048, 8);
        l.add(4096, 600);
        let bytes = l.encode(4096).unwrap();
        let e0 = u64::from_le_bytes(bytes[0..8].try_into().unwrap());
        assert_eq!(e0, (2048 << 10) | 8);
        let e1 = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
        assert_eq!(e1, (4096 << 10) | 512);
        let e2 = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
        assert_eq!(e2, ((4096 + 512) << 10) | 88);
        assert!(bytes[24..].iter().all(|&b| b == 0xff));
        assert_eq!(BadBlockList::decode(&bytes, 0).unwrap(), l);
    }

    #[test]
    fn zero_length_entry_is_corrupt() {
        let mut bytes = vec![0xffu8; 512];
        bytes[..8].copy_from_slice(&(100u64 << 10).to_le_bytes());
        assert_eq!(BadBlockList::decode(&bytes, 0), Err(BadBlockLogError::ZeroLength { index: 0 }));
    }

    #[test]
    fn full_log_is_refused() {
        let mut l = BadBlockList::new(0);
        for i in 0..3 {
            l.add(i * 100, 1);
        }
        assert!(matches!(l.encode(16), Err(BadBlockLogError::Full { needed: 3, room: 2 })));
        assert!(!l.fits(16));
        assert!(l.fits(24));
    }
}
