//! md internal write-intent bitmap: a 256-byte `bitmap_super_s` followed directly by one
//! bit per chunk of the sync range (bit `n` is bit `n % 8` of byte `n / 8`). A set bit means
//! "writes may be in flight here": after a crash only those chunks need a resync.
//!
//! For 1.x the bitmap starts `bitmap_offset` (signed) sectors from the superblock; for 0.90
//! it starts 4 KiB after the superblock when the superblock state says one is present.

use super::codec::{array_at, put_bytes, put_u32, put_u64, u32_at, u64_at};
use super::MetadataError;

/// `"bitm"` read as a little-endian u32.
pub const BITMAP_MAGIC: u32 = 0x6d74_6962;
/// Size of the bitmap superblock; bits start right after it.
pub const BITMAP_SUPER_BYTES: usize = 256;

/// A decoded bitmap superblock. `magic` is implied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitmapSuperblock {
    /// 3 (host-endian bits), 4 (little-endian bits), 5 (clustered). md writes 4.
    pub version: u32,
    /// Must equal the array uuid (same bytes as the 1.x `set_uuid`).
    pub uuid: [u8; 16],
    /// Bitmap event counter, updated before the superblock's: a bitmap is trusted if this
    /// equals the superblock events (or is one more).
    pub events: u64,
    /// Events when bits were last cleared; a re-added member with at least these events
    /// can be resynced from the bitmap alone.
    pub events_cleared: u64,
    /// Sectors the bitmap covers: the per-member size for raid1/4/5/6, the array size for
    /// raid10.
    pub sync_size_sectors: u64,
    /// `STATE_*` bits.
    pub state: u32,
    /// Bytes of data per bit; a power of two, at least 512.
    pub chunksize_bytes: u32,
    pub daemon_sleep_seconds: u32,
    pub write_behind: u32,
    /// Sectors reserved for the bitmap (0: md computes the space from the layout).
    pub sectors_reserved: u32,
    /// Cluster nodes (clustered md only).
    pub nodes: u32,
    pub cluster_name: [u8; 64],
    /// Bytes 136-255; zero when md writes them, kept for byte-exact re-encoding.
    pub pad: [u8; 120],
}

impl BitmapSuperblock {
    pub const STATE_STALE: u32 = 1 << 1;
    pub const STATE_WRITE_ERROR: u32 = 1 << 2;

    /// Decodes and checks magic, version (3..=5) and chunk size.
    pub fn decode(bytes: &[u8]) -> Result<Self, MetadataError> {
        if bytes.len() < BITMAP_SUPER_BYTES {
            return Err(MetadataError::Truncated { needed: BITMAP_SUPER_BYTES, available: bytes.len() });
        }
        let magic = u32_at(bytes, 0);
        if magic != BITMAP_MAGIC {
            return Err(MetadataError::BadMagic { found: magic, expected: BITMAP_MAGIC });
        }
        let version = u32_at(bytes, 4);
        if !(3..=5).contains(&version) {
            return Err(MetadataError::UnsupportedBitmapVersion(version));
        }
        let chunksize_bytes = u32_at(bytes, 52);
        if chunksize_bytes < 512 || !chunksize_bytes.is_power_of_two() {
            return Err(MetadataError::BadBitmapChunkSize(chunksize_bytes));
        }
        Ok(Self {
            version,
            uuid: array_at(bytes, 8),
            events: u64_at(bytes, 24),
            events_cleared: u64_at(bytes, 32),
            sync_size_sectors: u64_at(bytes, 40),
            state: u32_at(bytes, 48),
            chunksize_bytes,
            daemon_sleep_seconds: u32_at(bytes, 56),
            write_behind: u32_at(bytes, 60),
            sectors_reserved: u32_at(bytes, 64),
            nodes: u32_at(bytes, 68),
            cluster_name: array_at(bytes, 72),
            pad: array_at(bytes, 136),
        })
    }

    pub fn encode(&self) -> [u8; BITMAP_SUPER_BYTES] {
        let mut bytes = [0u8; BITMAP_SUPER_BYTES];
        put_u32(&mut bytes, 0, BITMAP_MAGIC);
        put_u32(&mut bytes, 4, self.version);
        put_bytes(&mut bytes, 8, &self.uuid);
        put_u64(&mut bytes, 24, self.events);
        put_u64(&mut bytes, 32, self.events_cleared);
        put_u64(&mut bytes, 40, self.sync_size_sectors);
        put_u32(&mut bytes, 48, self.state);
        put_u32(&mut bytes, 52, self.chunksize_bytes);
        put_u32(&mut bytes, 56, self.daemon_sleep_seconds);
        put_u32(&mut bytes, 60, self.write_behind);
        put_u32(&mut bytes, 64, self.sectors_reserved);
        put_u32(&mut bytes, 68, self.nodes);
        put_bytes(&mut bytes, 72, &self.cluster_name);
        put_bytes(&mut bytes, 136, &self.pad);
        bytes
    }

    /// Sectors of data per bit.
    pub fn chunk_sectors(&self) -> u64 {
        // decode guarantees >= 512; the max() only keeps a hand-built value from dividing
        // by zero.
        (u64::from(self.chunksize_bytes) / 512).max(1)
    }

    /// Bits in the bitmap: `ceil(sync_size / chunk)` (mdadm `bitmap_bits`).
    pub fn chunk_count(&self) -> u64 {
        self.sync_size_sectors.div_ceil(self.chunk_sectors())
    }

    /// Bytes of bits following the superblock.
    pub fn bits_len_bytes(&self) -> u64 {
        self.chunk_count().div_ceil(8)
    }

    /// Sectors the superblock and its bits take now.
    pub fn used_sectors(&self) -> u64 {
        (BITMAP_SUPER_BYTES as u64 + self.bits_len_bytes()).div_ceil(512)
    }

    /// The bitmap for a sync range of `sync_sectors`, kept within `space_sectors` (md's
    /// `md_bitmap_resize` with no chunk size asked: the chunk stays, or doubles until the
    /// bits fit, up to md's largest chunk of 2 GiB). Everything else stays as it is.
    pub fn resized(&self, sync_sectors: u64, space_sectors: u64) -> BitmapSuperblock {
        let fits = |chunk_bytes: u64| {
            let chunks = sync_sectors.div_ceil(chunk_bytes / 512);
            BITMAP_SUPER_BYTES as u64 + chunks.div_ceil(8) <= space_sectors * 512
        };
        let mut chunk_bytes = u64::from(self.chunksize_bytes).max(512);
        // md's loop: `chunkshift + BITMAP_BLOCK_SHIFT < 31`, i.e. chunks below 2^31 bytes
        // may still double.
        while !fits(chunk_bytes) && chunk_bytes < 1 << 31 {
            chunk_bytes *= 2;
        }
        BitmapSuperblock { sync_size_sectors: sync_sectors, chunksize_bytes: chunk_bytes as u32, ..self.clone() }
    }
}

/// The sectors md lets an internal bitmap take when it resizes it (`bitmap_info.space`):
/// 1.1 and 1.2 record no room, so md keeps to the sectors the bitmap takes now; 1.0 may use
/// everything up to its superblock (or 4 KiB past it, for a bitmap after it); 0.90 has 60
/// KiB after its 4 KiB superblock. `offset_sectors` is the bitmap's offset from the superblock.
pub fn md_bitmap_space_sectors(version: super::MetadataVersion, offset_sectors: i64, current: &BitmapSuperblock) -> u64 {
    use super::MetadataVersion::*;
    let recorded = match version {
        V0_90 => 128 - 8,
        V1_0 if offset_sectors > 0 => (8 - offset_sectors).max(0) as u64,
        V1_0 => offset_sectors.unsigned_abs(),
        V1_1 | V1_2 => 0,
    };
    // (md: a space of 0 means "unknown", and the current size is taken.)
    if recorded == 0 {
        current.used_sectors()
    } else {
        recorded
    }
}

/// The bit array of a write-intent bitmap, one bit per chunk of the sync range.
///
/// Bytes are kept as read, including unused bits in the last byte (mdadm creates the
/// bitmap all ones and md never clears bits past the end), so writing back is byte-exact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteIntentBits {
    chunk_sectors: u64,
    chunk_count: u64,
    bytes: Vec<u8>,
}

impl WriteIntentBits {
    /// Views the bits that follow `superblock`. `bits` may be longer than needed (e.g. the
    /// rest of the bitmap area); only [`BitmapSuperblock::bits_len_bytes`] are kept.
    pub fn decode(superblock: &BitmapSuperblock, bits: &[u8]) -> Result<Self, MetadataError> {
        let needed = usize::try_from(superblock.bits_len_bytes()).unwrap_or(usize::MAX);
        if bits.len() < needed {
            return Err(MetadataError::Truncated { needed, available: bits.len() });
        }
        Ok(Self { chunk_sectors: superblock.chunk_sectors(), chunk_count: superblock.chunk_count(), bytes: bits[..needed].to_vec() })
    }

    /// A bitmap with every chunk marked dirty, as `mdadm --create` writes it.
    pub fn all_dirty(superblock: &BitmapSuperblock) -> Self {
        Self::filled(superblock, 0xff)
    }

    /// A bitmap with every chunk clean.
    pub fn all_clean(superblock: &BitmapSuperblock) -> Self {
        Self::filled(superblock, 0)
    }

    fn filled(superblock: &BitmapSuperblock, byte: u8) -> Self {
        let len = usize::try_from(superblock.bits_len_bytes()).unwrap_or(usize::MAX);
        Self { chunk_sectors: superblock.chunk_sectors(), chunk_count: superblock.chunk_count(), bytes: vec![byte; len] }
    }

    pub fn encode(&self) -> &[u8] {
        &self.bytes
    }

    pub fn chunk_count(&self) -> u64 {
        self.chunk_count
    }

    pub fn chunk_sectors(&self) -> u64 {
        self.chunk_sectors
    }

    /// Chunk holding sync-range sector `sector`.
    pub fn chunk_of_sector(&self, sector: u64) -> u64 {
        sector / self.chunk_sectors
    }

    /// Whether `chunk` is marked; chunks past the end read as clean.
    pub fn is_dirty(&self, chunk: u64) -> bool {
        if chunk >= self.chunk_count {
            return false;
        }
        let (byte, bit) = Self::position(chunk);
        self.bytes.get(byte).is_some_and(|b| b & (1 << bit) != 0)
    }

    /// Marks or clears `chunk`; chunks past the end are ignored.
    pub fn set_dirty(&mut self, chunk: u64, dirty: bool) {
        if chunk >= self.chunk_count {
            return;
        }
        let (byte, bit) = Self::position(chunk);
        if let Some(b) = self.bytes.get_mut(byte) {
            if dirty {
                *b |= 1 << bit;
            } else {
                *b &= !(1 << bit);
            }
        }
    }

    /// Marks every chunk touched by `len_sectors` sectors starting at `start_sector`.
    pub fn mark_sectors(&mut self, start_sector: u64, len_sectors: u64) {
        if len_sectors == 0 {
            return;
        }
        let first = self.chunk_of_sector(start_sector);
        let last = self.chunk_of_sector(start_sector.saturating_add(len_sectors - 1));
        for chunk in first..=last.min(self.chunk_count.saturating_sub(1)) {
            self.set_dirty(chunk, true);
        }
    }

    /// Clears every chunk (the array was marked clean with every write flushed).
    pub fn clear_all(&mut self) {
        self.bytes.fill(0);
    }

    /// Marks every chunk marked in `other` (same shape; extra bytes are ignored).
    pub fn union_with(&mut self, other: &WriteIntentBits) {
        for (a, b) in self.bytes.iter_mut().zip(&other.bytes) {
            *a |= b;
        }
    }

    /// These bits (of the bitmap `from`) for the bitmap `to` (another chunk size or sync
    /// range): a chunk of `to` is marked when any chunk here that shares a sector with it is
    /// marked, and when it reaches past `from`'s sync range (those sectors were never
    /// covered: whoever assembles next must not take them as in sync; md marks them needed
    /// in memory).
    pub fn remapped(&self, from: &BitmapSuperblock, to: &BitmapSuperblock) -> WriteIntentBits {
        let mut out = WriteIntentBits::all_clean(to);
        let covered = from.sync_size_sectors.min(self.chunk_count.saturating_mul(self.chunk_sectors));
        for chunk in 0..out.chunk_count {
            let first = chunk.saturating_mul(out.chunk_sectors);
            let last = first.saturating_add(out.chunk_sectors - 1);
            let dirty = last >= covered || (self.chunk_of_sector(first)..=self.chunk_of_sector(last)).any(|c| self.is_dirty(c));
            out.set_dirty(chunk, dirty);
        }
        out
    }

    /// Marked chunks in increasing order.
    pub fn dirty_chunks(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.chunk_count).filter(|chunk| self.is_dirty(*chunk))
    }

    fn position(chunk: u64) -> (usize, u32) {
        ((chunk / 8) as usize, (chunk % 8) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BitmapSuperblock {
        BitmapSuperblock {
            version: 4,
            uuid: [1; 16],
            events: 21,
            events_cleared: 18,
            sync_size_sectors: 30720,
            state: 0,
            chunksize_bytes: 1 << 20,
            daemon_sleep_seconds: 5,
            write_behind: 0,
            sectors_reserved: 0,
            nodes: 0,
            cluster_name: [0; 64],
            pad: [0; 120],
        }
    }

    #[test]
    fn superblock_roundtrip() {
        let sb = sample();
        assert_eq!(BitmapSuperblock::decode(&sb.encode()), Ok(sb.clone()));
        assert_eq!(sb.chunk_sectors(), 2048);
        assert_eq!(sb.chunk_count(), 15);
        assert_eq!(sb.bits_len_bytes(), 2);
    }

    #[test]
    fn resizing_keeps_the_chunk_while_the_bits_fit_and_doubles_it_otherwise() {
        let sb = sample(); // 15 chunks of 1 MiB: 2 bytes of bits, one sector in all
        assert_eq!(sb.used_sectors(), 1);
        // Up to (512 - 256) * 8 chunks fit one sector.
        let same = sb.resized(2048 * 2048, 1);
        assert_eq!((same.chunksize_bytes, same.sync_size_sectors, same.chunk_count()), (1 << 20, 2048 * 2048, 2048));
        let doubled = sb.resized(2048 * 2049, 1);
        assert_eq!((doubled.chunksize_bytes, doubled.chunk_count()), (2 << 20, 1025));
        // More room: the chunk stays. A smaller range never shrinks the chunk.
        assert_eq!(sb.resized(2048 * 2049, 2).chunksize_bytes, 1 << 20);
        assert_eq!(doubled.resized(100, 1).chunksize_bytes, 2 << 20);
        // md stops doubling at 2 GiB chunks.
        assert_eq!(sb.resized(u64::MAX / 2, 1).chunksize_bytes, 1 << 31);
    }

    proptest::proptest! {
        #[test]
        fn a_resized_bitmap_fits_its_space_with_the_smallest_chunk_that_does(
            chunk_shift in 0u32..12, sync in 1u64..1 << 40, space in 1u64..64,
        ) {
            let mut sb = sample();
            sb.chunksize_bytes = 512 << chunk_shift;
            let resized = sb.resized(sync, space);
            proptest::prop_assert!(resized.chunksize_bytes >= sb.chunksize_bytes);
            proptest::prop_assert!(resized.chunksize_bytes.is_power_of_two());
            proptest::prop_assert!(resized.used_sectors() <= space || resized.chunksize_bytes == 1 << 31);
            if resized.chunksize_bytes > sb.chunksize_bytes {
                let half = BitmapSuperblock { chunksize_bytes: resized.chunksize_bytes / 2, ..resized.clone() };
                proptest::prop_assert!(half.used_sectors() > space);
            }
            // Resizing again to the same range changes nothing (a restart redoes it).
            proptest::prop_assert_eq!(resized.resized(sync, resized.used_sectors().max(space)), resized.clone());
        }

        #[test]
        fn remapped_bits_cover_every_marked_sector(
            from_shift in 0u32..6, to_shift in 0u32..6, sync in 1u64..20_000, grow in 0u64..5_000, marks in proptest::collection::vec(0u64..25_000, 0..20),
        ) {
            let mut from_sb = sample();
            from_sb.chunksize_bytes = 512 << from_shift;
            from_sb.sync_size_sectors = sync;
            let mut bits = WriteIntentBits::all_clean(&from_sb);
            for m in &marks {
                bits.mark_sectors(*m, 1);
            }
            let to_sb = BitmapSuperblock { chunksize_bytes: 512 << to_shift, sync_size_sectors: sync + grow, ..from_sb.clone() };
            let out = bits.remapped(&from_sb, &to_sb);
            for sector in 0..sync + grow {
                let was = sector < sync && bits.is_dirty(bits.chunk_of_sector(sector));
                let beyond = sector >= sync;
                if was || beyond {
                    proptest::prop_assert!(out.is_dirty(out.chunk_of_sector(sector)), "sector {} lost its mark", sector);
                }
            }
            // Nothing is marked that no marked (or uncovered) sector explains.
            for chunk in out.dirty_chunks() {
                let first = chunk * out.chunk_sectors();
                let explained = (first..first + out.chunk_sectors()).any(|s| s >= sync || bits.is_dirty(bits.chunk_of_sector(s)));
                proptest::prop_assert!(explained, "chunk {} marked for nothing", chunk);
            }
        }
    }

    #[test]
    fn md_space_rules() {
        use crate::metadata::MetadataVersion::*;
        let sb = sample();
        assert_eq!(md_bitmap_space_sectors(V1_2, 8, &sb), 1);
        assert_eq!(md_bitmap_space_sectors(V1_1, 8, &sb), 1);
        assert_eq!(md_bitmap_space_sectors(V1_0, -16, &sb), 16);
        assert_eq!(md_bitmap_space_sectors(V1_0, 2, &sb), 6);
        assert_eq!(md_bitmap_space_sectors(V0_90, 8, &sb), 120);
    }

    #[test]
    fn bad_chunk_and_version() {
        let mut bytes = sample().encode();
        put_u32(&mut bytes, 52, 0);
        assert_eq!(BitmapSuperblock::decode(&bytes), Err(MetadataError::BadBitmapChunkSize(0)));
        let mut bytes = sample().encode();
        put_u32(&mut bytes, 4, 9);
        assert_eq!(BitmapSuperblock::decode(&bytes), Err(MetadataError::UnsupportedBitmapVersion(9)));
    }

    #[test]
    fn bits_are_little_endian_per_byte() {
        let sb = sample();
        let mut bits = WriteIntentBits::all_clean(&sb);
        bits.set_dirty(0, true);
        bits.set_dirty(9, true);
        assert_eq!(bits.encode(), &[0x01, 0x02]);
        bits.mark_sectors(2047, 2); // chunks 0 and 1
        assert_eq!(bits.dirty_chunks().collect::<Vec<_>>(), vec![0, 1, 9]);
        bits.set_dirty(15, true); // past the end: ignored
        assert!(!bits.is_dirty(15));
        bits.mark_sectors(30719, 100); // clipped to the last chunk
        assert!(bits.is_dirty(14));
        let decoded = WriteIntentBits::decode(&sb, &[0xfe, 0xff, 0xaa]);
        let Ok(decoded) = decoded else { panic!("decode failed") };
        assert_eq!(decoded.encode(), &[0xfe, 0xff]);
        assert!(!decoded.is_dirty(0));
        assert_eq!(decoded.dirty_chunks().count(), 14);
        assert!(WriteIntentBits::decode(&sb, &[0]).is_err());
    }
}
