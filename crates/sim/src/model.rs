//! The plain model the array is checked against: per 512-byte array sector, the value the
//! array must return now, the last value a flush made durable, and every value written
//! since that flush (any one of which may be what survives a crash).

use std::collections::BTreeMap;

/// md's sector, as the model counts it.
pub const SECTOR: usize = uraid_core::geometry::SECTOR_BYTES as usize;

pub struct Model {
    /// What reads must return now (every acknowledged write applied).
    current: Vec<u8>,
    /// Sector values as of the last flush.
    durable: Vec<u8>,
    /// Sector → full-sector values written since the last flush, oldest first.
    pending: BTreeMap<u64, Vec<Box<[u8]>>>,
}

impl Model {
    /// A model of `size` bytes, all zero (members are created zeroed).
    pub fn new(size: usize) -> Model {
        Model { current: vec![0; size], durable: vec![0; size], pending: BTreeMap::new() }
    }

    pub fn size(&self) -> usize {
        self.current.len()
    }

    pub fn current(&self) -> &[u8] {
        &self.current
    }

    fn sector(image: &[u8], s: u64) -> &[u8] {
        &image[s as usize * SECTOR..(s as usize + 1) * SECTOR]
    }

    /// An acknowledged write. A sub-sector write yields a new value of the whole sector
    /// (the engine reads, merges and writes whole sectors), so that is what is remembered.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let o = offset as usize;
        self.current[o..o + data.len()].copy_from_slice(data);
        let first = offset / SECTOR as u64;
        let end = (offset + data.len() as u64).div_ceil(SECTOR as u64);
        for s in first..end {
            let value: Box<[u8]> = Model::sector(&self.current, s).into();
            self.pending.entry(s).or_default().push(value);
        }
    }

    /// An acknowledged flush: everything written is durable.
    pub fn flush(&mut self) {
        for &s in self.pending.keys() {
            let r = s as usize * SECTOR..(s as usize + 1) * SECTOR;
            self.durable[r.clone()].copy_from_slice(&self.current[r]);
        }
        self.pending.clear();
    }

    /// Sectors written since the last flush.
    pub fn pending_sectors(&self) -> impl Iterator<Item = u64> + '_ {
        self.pending.keys().copied()
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// May sector `s` hold `got` after a crash? Its flushed value, or any value written to
    /// it since.
    pub fn allowed_after_crash(&self, s: u64, got: &[u8]) -> bool {
        got == Model::sector(&self.durable, s) || self.pending.get(&s).is_some_and(|vals| vals.iter().any(|v| &**v == got))
    }

    pub fn pending_count(&self, s: u64) -> usize {
        self.pending.get(&s).map_or(0, Vec::len)
    }

    /// After a crash and resync: what the array holds becomes the truth (and durable: the
    /// runner flushes before adopting).
    pub fn adopt(&mut self, image: Vec<u8>) {
        debug_assert_eq!(image.len(), self.current.len());
        self.durable.clone_from(&image);
        self.current = image;
        self.pending.clear();
    }

    /// First sector where `got` (read at byte `offset`) differs from what must be read now.
    pub fn first_difference(&self, offset: u64, got: &[u8]) -> Option<u64> {
        let want = &self.current[offset as usize..offset as usize + got.len()];
        if want == got {
            return None;
        }
        let i = want.iter().zip(got).position(|(a, b)| a != b).unwrap_or(0);
        Some((offset + i as u64) / SECTOR as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_allows_flushed_or_any_later_value() {
        let mut m = Model::new(4 * SECTOR);
        m.write(0, &[1; SECTOR]);
        m.flush();
        m.write(0, &[2; SECTOR]);
        m.write(10, &[3; 4]);
        assert!(m.allowed_after_crash(0, &[1; SECTOR]));
        assert!(m.allowed_after_crash(0, &[2; SECTOR]));
        let mut merged = [2u8; SECTOR];
        merged[10..14].copy_from_slice(&[3; 4]);
        assert!(m.allowed_after_crash(0, &merged));
        assert!(!m.allowed_after_crash(0, &[0; SECTOR]));
        assert!(m.allowed_after_crash(1, &[0; SECTOR]));
    }
}
