//! md superblock version 1 (`struct mdp_superblock_1`), shared by 1.0, 1.1 and 1.2.
//!
//! All fields are little-endian. The struct is 256 fixed bytes followed by `max_dev` u16
//! roles; the checksum covers exactly those `256 + 2 * max_dev` bytes. Field offsets are in
//! `docs/FORMAT.md`.

use super::codec::{array_at, i32_at, md_checksum, put_bytes, put_i32, put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use super::{ArrayShape, DeviceRole, MdUuid, MetadataError, MetadataVersion, Personality, MAX_SECTOR, MD_SB_MAGIC};

/// Bytes before `dev_roles[]`.
pub const SB1_FIXED_BYTES: usize = 256;
/// md reads and writes at most 4 KiB of a 1.x superblock.
pub const SB1_MAX_BYTES: usize = 4096;
/// Largest `max_dev` whose role table fits in 4 KiB (the kernel's limit too).
pub const SB1_MAX_DEV_LIMIT: u32 = ((SB1_MAX_BYTES - SB1_FIXED_BYTES) / 2) as u32;

const CSUM_OFFSET: usize = 216;

/// `feature_map` bits (md `MD_FEATURE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FeatureMap(pub u32);

impl FeatureMap {
    /// `bitmap_offset` is meaningful: there is an internal write-intent bitmap.
    pub const BITMAP_OFFSET: u32 = 1;
    /// `recovery_offset` is meaningful: this device is only partly recovered.
    pub const RECOVERY_OFFSET: u32 = 2;
    /// A reshape is in progress; the `new_*` and `reshape_position` fields are meaningful.
    pub const RESHAPE_ACTIVE: u32 = 4;
    /// The bad-block log is not empty.
    pub const BAD_BLOCKS: u32 = 8;
    /// This device is replacing the active device with the same role.
    pub const REPLACEMENT: u32 = 16;
    /// The reshape runs from the end of the array towards the start.
    pub const RESHAPE_BACKWARDS: u32 = 32;
    /// `new_offset` is meaningful (reshape moves the data offset).
    pub const NEW_OFFSET: u32 = 64;
    /// The running recovery is guided by the bitmap.
    pub const RECOVERY_BITMAP: u32 = 128;
    /// Clustered md.
    pub const CLUSTERED: u32 = 256;
    /// The array has a raid5 write journal (`recovery_offset` holds `journal_tail` on it).
    pub const JOURNAL: u32 = 512;
    /// Partial parity log; `bitmap_offset` holds the PPL offset/size instead.
    pub const PPL: u32 = 1024;
    /// Multiple PPLs in a 1 MiB area.
    pub const MULTIPLE_PPLS: u32 = 2048;
    /// raid0 `layout` is meaningful (multi-zone raid0 with differently sized members).
    pub const RAID0_LAYOUT: u32 = 4096;

    pub fn contains(self, bits: u32) -> bool {
        self.0 & bits == bits
    }
}

/// md time stamp: low 40 bits seconds since the epoch, high 24 bits microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MdTime(pub u64);

impl MdTime {
    pub fn from_parts(seconds: u64, microseconds: u32) -> Self {
        Self((seconds & 0xff_ffff_ffff) | (u64::from(microseconds & 0xff_ffff) << 40))
    }

    pub fn seconds(self) -> u64 {
        self.0 & 0xff_ffff_ffff
    }

    pub fn microseconds(self) -> u32 {
        (self.0 >> 40) as u32
    }
}

/// Partial parity log placement (the `bitmap_offset` union when `PPL` is set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PplArea {
    /// Sectors from the superblock start (signed).
    pub offset_sectors: i16,
    pub size_sectors: u16,
}

/// A decoded 1.x superblock. `magic` and `major_version` are implied (a decode succeeds only
/// if they are `0xa92b4efc` and 1); `max_dev` is `dev_roles.len()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock1 {
    pub feature_map: FeatureMap,
    /// md `pad0`; kept so re-encoding is byte-exact.
    pub pad0: u32,
    pub set_uuid: [u8; 16],
    /// Array name, NUL padded (mdadm writes `host:name`).
    pub set_name: [u8; 32],
    pub ctime: MdTime,
    /// Signed md level; see [`Personality::from_raw`].
    pub level: i32,
    pub layout: u32,
    /// md `size`: sectors of each member used by the array (0 for raid0/linear).
    pub size_sectors: u64,
    /// md `chunksize`, in sectors.
    pub chunksize_sectors: u32,
    pub raid_disks: u32,
    /// md `bitmap_offset` as stored; a union: read it with [`Self::bitmap_offset_sectors`]
    /// or [`Self::ppl`], which look at the feature bits.
    pub bitmap_offset_raw: u32,
    pub new_level: i32,
    /// Next array sector the reshape will process.
    pub reshape_position_sectors: u64,
    pub delta_disks: i32,
    pub new_layout: u32,
    pub new_chunk_sectors: u32,
    /// Signed sectors to add to `data_offset` in the new layout.
    pub new_offset_sectors: i32,
    pub data_offset_sectors: u64,
    pub data_size_sectors: u64,
    pub super_offset_sectors: u64,
    /// md `recovery_offset`, union with `journal_tail`; see [`Self::recovery_offset`].
    pub recovery_offset_raw: u64,
    /// Permanent index of this device in `dev_roles` (not its role).
    pub dev_number: u32,
    pub cnt_corrected_read: u32,
    pub device_uuid: [u8; 16],
    /// Bit 0 write-mostly, bit 1 fail-fast.
    pub devflags: u8,
    /// Shift from sectors to bad-block-log block size.
    pub bblog_shift: u8,
    pub bblog_size_sectors: u16,
    /// Signed sectors from the superblock to the bad-block log.
    pub bblog_offset_sectors: i32,
    pub utime: MdTime,
    pub events: u64,
    /// Array sectors before this are in sync; [`MAX_SECTOR`] means clean.
    pub resync_offset_sectors: u64,
    pub sb_csum: u32,
    /// md `pad3`; kept so re-encoding is byte-exact.
    pub pad3: [u8; 32],
    /// Role of each device number: slot, or 0xffff spare, 0xfffe faulty, 0xfffd journal.
    pub dev_roles: Vec<u16>,
}

impl Superblock1 {
    pub const DEVFLAG_WRITE_MOSTLY: u8 = 1;
    pub const DEVFLAG_FAILFAST: u8 = 2;

    /// Decodes and checks magic, major version, `max_dev` and checksum.
    /// `bytes` must hold at least `256 + 2 * max_dev` bytes; any more is ignored.
    pub fn decode(bytes: &[u8]) -> Result<Self, MetadataError> {
        let sb = Self::decode_unverified(bytes)?;
        let computed = md_checksum(&bytes[..sb.encoded_len()], CSUM_OFFSET);
        if computed != sb.sb_csum {
            return Err(MetadataError::ChecksumMismatch { stored: sb.sb_csum, computed });
        }
        Ok(sb)
    }

    /// Decodes without checking the checksum, for `examine`-style reporting of damaged
    /// superblocks ("checksum X, expected Y"). Everything else is still checked.
    pub fn decode_unverified(bytes: &[u8]) -> Result<Self, MetadataError> {
        if bytes.len() < SB1_FIXED_BYTES {
            return Err(MetadataError::Truncated { needed: SB1_FIXED_BYTES, available: bytes.len() });
        }
        let magic = u32_at(bytes, 0);
        if magic != MD_SB_MAGIC {
            return Err(MetadataError::BadMagic { found: magic, expected: MD_SB_MAGIC });
        }
        let major_version = u32_at(bytes, 4);
        if major_version != 1 {
            return Err(MetadataError::UnsupportedMajorVersion(major_version));
        }
        let max_dev = u32_at(bytes, 220);
        if max_dev > SB1_MAX_DEV_LIMIT {
            return Err(MetadataError::MaxDevTooLarge { found: max_dev, limit: SB1_MAX_DEV_LIMIT });
        }
        let needed = SB1_FIXED_BYTES + 2 * max_dev as usize;
        if bytes.len() < needed {
            return Err(MetadataError::Truncated { needed, available: bytes.len() });
        }
        let dev_roles = (0..max_dev as usize).map(|i| u16_at(bytes, SB1_FIXED_BYTES + 2 * i)).collect();
        Ok(Self {
            feature_map: FeatureMap(u32_at(bytes, 8)),
            pad0: u32_at(bytes, 12),
            set_uuid: array_at(bytes, 16),
            set_name: array_at(bytes, 32),
            ctime: MdTime(u64_at(bytes, 64)),
            level: i32_at(bytes, 72),
            layout: u32_at(bytes, 76),
            size_sectors: u64_at(bytes, 80),
            chunksize_sectors: u32_at(bytes, 88),
            raid_disks: u32_at(bytes, 92),
            bitmap_offset_raw: u32_at(bytes, 96),
            new_level: i32_at(bytes, 100),
            reshape_position_sectors: u64_at(bytes, 104),
            delta_disks: i32_at(bytes, 112),
            new_layout: u32_at(bytes, 116),
            new_chunk_sectors: u32_at(bytes, 120),
            new_offset_sectors: i32_at(bytes, 124),
            data_offset_sectors: u64_at(bytes, 128),
            data_size_sectors: u64_at(bytes, 136),
            super_offset_sectors: u64_at(bytes, 144),
            recovery_offset_raw: u64_at(bytes, 152),
            dev_number: u32_at(bytes, 160),
            cnt_corrected_read: u32_at(bytes, 164),
            device_uuid: array_at(bytes, 168),
            devflags: bytes[184],
            bblog_shift: bytes[185],
            bblog_size_sectors: u16_at(bytes, 186),
            bblog_offset_sectors: i32_at(bytes, 188),
            utime: MdTime(u64_at(bytes, 192)),
            events: u64_at(bytes, 200),
            resync_offset_sectors: u64_at(bytes, 208),
            sb_csum: u32_at(bytes, CSUM_OFFSET),
            pad3: array_at(bytes, 224),
            dev_roles,
        })
    }

    /// `256 + 2 * max_dev`: the bytes [`Self::encode`] produces and the checksum covers.
    pub fn encoded_len(&self) -> usize {
        SB1_FIXED_BYTES + 2 * self.dev_roles.len()
    }

    /// `max_dev`, the length of the role table.
    pub fn max_dev(&self) -> u32 {
        self.dev_roles.len() as u32
    }

    /// Encodes with `sb_csum` as stored. md writes this rounded up to the sector (or
    /// logical block) size; bytes after the role table are not part of the superblock.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; self.encoded_len()];
        put_u32(&mut bytes, 0, MD_SB_MAGIC);
        put_u32(&mut bytes, 4, 1);
        put_u32(&mut bytes, 8, self.feature_map.0);
        put_u32(&mut bytes, 12, self.pad0);
        put_bytes(&mut bytes, 16, &self.set_uuid);
        put_bytes(&mut bytes, 32, &self.set_name);
        put_u64(&mut bytes, 64, self.ctime.0);
        put_i32(&mut bytes, 72, self.level);
        put_u32(&mut bytes, 76, self.layout);
        put_u64(&mut bytes, 80, self.size_sectors);
        put_u32(&mut bytes, 88, self.chunksize_sectors);
        put_u32(&mut bytes, 92, self.raid_disks);
        put_u32(&mut bytes, 96, self.bitmap_offset_raw);
        put_i32(&mut bytes, 100, self.new_level);
        put_u64(&mut bytes, 104, self.reshape_position_sectors);
        put_i32(&mut bytes, 112, self.delta_disks);
        put_u32(&mut bytes, 116, self.new_layout);
        put_u32(&mut bytes, 120, self.new_chunk_sectors);
        put_i32(&mut bytes, 124, self.new_offset_sectors);
        put_u64(&mut bytes, 128, self.data_offset_sectors);
        put_u64(&mut bytes, 136, self.data_size_sectors);
        put_u64(&mut bytes, 144, self.super_offset_sectors);
        put_u64(&mut bytes, 152, self.recovery_offset_raw);
        put_u32(&mut bytes, 160, self.dev_number);
        put_u32(&mut bytes, 164, self.cnt_corrected_read);
        put_bytes(&mut bytes, 168, &self.device_uuid);
        bytes[184] = self.devflags;
        bytes[185] = self.bblog_shift;
        put_u16(&mut bytes, 186, self.bblog_size_sectors);
        put_i32(&mut bytes, 188, self.bblog_offset_sectors);
        put_u64(&mut bytes, 192, self.utime.0);
        put_u64(&mut bytes, 200, self.events);
        put_u64(&mut bytes, 208, self.resync_offset_sectors);
        put_u32(&mut bytes, CSUM_OFFSET, self.sb_csum);
        put_u32(&mut bytes, 220, self.max_dev());
        put_bytes(&mut bytes, 224, &self.pad3);
        for (index, role) in self.dev_roles.iter().enumerate() {
            put_u16(&mut bytes, SB1_FIXED_BYTES + 2 * index, *role);
        }
        bytes
    }

    /// The checksum md would store for the current field values.
    pub fn compute_checksum(&self) -> u32 {
        md_checksum(&self.encode(), CSUM_OFFSET)
    }

    /// Sets `sb_csum` to [`Self::compute_checksum`]; call after changing any field.
    pub fn update_checksum(&mut self) {
        self.sb_csum = self.compute_checksum();
    }

    /// The 1.x minor version implied by `super_offset`: 0 → 1.1, 8 → 1.2, else 1.0.
    pub fn version(&self) -> MetadataVersion {
        match self.super_offset_sectors {
            0 => MetadataVersion::V1_1,
            8 => MetadataVersion::V1_2,
            _ => MetadataVersion::V1_0,
        }
    }

    pub fn array_uuid(&self) -> MdUuid {
        MdUuid(self.set_uuid)
    }

    pub fn device_uuid(&self) -> MdUuid {
        MdUuid(self.device_uuid)
    }

    /// `set_name` up to the first NUL, lossily as UTF-8.
    pub fn name(&self) -> String {
        let end = self.set_name.iter().position(|b| *b == 0).unwrap_or(self.set_name.len());
        String::from_utf8_lossy(&self.set_name[..end]).into_owned()
    }

    /// Role from `dev_roles[dev_number]`; a device number outside the table is a spare
    /// (as both md and mdadm read it).
    pub fn role_of_this_device(&self) -> DeviceRole {
        match self.dev_roles.get(self.dev_number as usize) {
            Some(role) => DeviceRole::from_raw(*role),
            None => DeviceRole::Spare,
        }
    }

    /// Resync finished and the array was stopped cleanly.
    pub fn is_clean(&self) -> bool {
        self.resync_offset_sectors == MAX_SECTOR
    }

    /// Signed sectors from the superblock to the bitmap, if there is an internal bitmap.
    pub fn bitmap_offset_sectors(&self) -> Option<i32> {
        (self.feature_map.contains(FeatureMap::BITMAP_OFFSET) && !self.feature_map.contains(FeatureMap::PPL))
            .then_some(self.bitmap_offset_raw as i32)
    }

    /// PPL placement, if the PPL feature is on.
    pub fn ppl(&self) -> Option<PplArea> {
        self.feature_map.contains(FeatureMap::PPL).then_some(PplArea {
            offset_sectors: (self.bitmap_offset_raw & 0xffff) as u16 as i16,
            size_sectors: (self.bitmap_offset_raw >> 16) as u16,
        })
    }

    /// `Some(sectors recovered)` when `RECOVERY_OFFSET` is set (the device is being rebuilt),
    /// `None` when the device is in sync. Journal devices use the field for `journal_tail`.
    pub fn recovery_offset(&self) -> Option<u64> {
        (self.feature_map.contains(FeatureMap::RECOVERY_OFFSET) && self.role_of_this_device() != DeviceRole::Journal)
            .then_some(self.recovery_offset_raw)
    }

    /// Journal tail (sectors from data_offset) on a journal device.
    pub fn journal_tail(&self) -> Option<u64> {
        (self.role_of_this_device() == DeviceRole::Journal).then_some(self.recovery_offset_raw)
    }

    pub fn shape(&self) -> ArrayShape {
        ArrayShape {
            level: Personality::from_raw(self.level),
            raid_disks: self.raid_disks,
            layout: self.layout,
            chunk_sectors: self.chunksize_sectors,
            component_size_sectors: self.size_sectors,
        }
    }

    /// For each role `0..raid_disks`, whether some device holds it per `dev_roles`.
    pub fn active_roles(&self) -> Vec<bool> {
        let mut active = vec![false; self.raid_disks.min(SB1_MAX_DEV_LIMIT) as usize];
        for role in &self.dev_roles {
            if let Some(slot) = active.get_mut(usize::from(*role)) {
                *slot = true;
            }
        }
        active
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A valid superblock for tests (also used by other modules' tests).
    pub(crate) fn sample() -> Superblock1 {
        let mut sb = Superblock1 {
            feature_map: FeatureMap(FeatureMap::BITMAP_OFFSET),
            pad0: 0,
            set_uuid: [7; 16],
            set_name: [0; 32],
            ctime: MdTime::from_parts(1_700_000_000, 12),
            level: 5,
            layout: 2,
            size_sectors: 30720,
            chunksize_sectors: 128,
            raid_disks: 4,
            bitmap_offset_raw: 8,
            new_level: 0,
            reshape_position_sectors: 0,
            delta_disks: 0,
            new_layout: 0,
            new_chunk_sectors: 0,
            new_offset_sectors: 0,
            data_offset_sectors: 2048,
            data_size_sectors: 30720,
            super_offset_sectors: 8,
            recovery_offset_raw: 0,
            dev_number: 4,
            cnt_corrected_read: 0,
            device_uuid: [9; 16],
            devflags: 0,
            bblog_shift: 0,
            bblog_size_sectors: 8,
            bblog_offset_sectors: 16,
            utime: MdTime(0),
            events: 21,
            resync_offset_sectors: MAX_SECTOR,
            sb_csum: 0,
            pad3: [0; 32],
            dev_roles: vec![0, 1, 2, 0xffff, 3],
        };
        sb.update_checksum();
        sb
    }

    #[test]
    fn roundtrip_and_accessors() {
        let sb = sample();
        let bytes = sb.encode();
        assert_eq!(bytes.len(), 256 + 10);
        assert_eq!(Superblock1::decode(&bytes), Ok(sb.clone()));
        assert_eq!(sb.role_of_this_device(), DeviceRole::Active(3));
        assert_eq!(sb.bitmap_offset_sectors(), Some(8));
        assert!(sb.is_clean());
        assert_eq!(sb.version(), MetadataVersion::V1_2);
        assert_eq!(sb.active_roles(), vec![true; 4]);
        assert_eq!(sb.ctime.seconds(), 1_700_000_000);
        assert_eq!(sb.ctime.microseconds(), 12);
    }

    #[test]
    fn odd_max_dev_checksums_trailing_half_word() {
        let mut sb = sample();
        sb.dev_roles = vec![0, 1, 2];
        sb.update_checksum();
        let mut bytes = sb.encode();
        assert_eq!(Superblock1::decode(&bytes), Ok(sb));
        // The last role is a lone u16; changing it must change the checksum.
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert!(matches!(Superblock1::decode(&bytes), Err(MetadataError::ChecksumMismatch { .. })));
    }

    #[test]
    fn dev_number_beyond_table_is_spare() {
        let mut sb = sample();
        sb.dev_number = 99;
        assert_eq!(sb.role_of_this_device(), DeviceRole::Spare);
    }

    #[test]
    fn ppl_union() {
        let mut sb = sample();
        sb.feature_map = FeatureMap(FeatureMap::PPL);
        sb.bitmap_offset_raw = (248u32 << 16) | 0x0008;
        assert_eq!(sb.bitmap_offset_sectors(), None);
        assert_eq!(sb.ppl(), Some(PplArea { offset_sectors: 8, size_sectors: 248 }));
    }

    #[test]
    fn errors() {
        let bytes = sample().encode();
        assert!(matches!(Superblock1::decode(&bytes[..100]), Err(MetadataError::Truncated { needed: 256, available: 100 })));
        assert!(matches!(Superblock1::decode(&bytes[..260]), Err(MetadataError::Truncated { needed: 266, available: 260 })));
        let mut bad = bytes.clone();
        bad[4] = 2;
        assert_eq!(Superblock1::decode(&bad), Err(MetadataError::UnsupportedMajorVersion(2)));
        let mut bad = bytes.clone();
        bad[0] = 0;
        assert!(matches!(Superblock1::decode(&bad), Err(MetadataError::BadMagic { .. })));
        let mut bad = bytes;
        put_u32(&mut bad, 220, 5000);
        assert!(matches!(Superblock1::decode(&bad), Err(MetadataError::MaxDevTooLarge { .. })));
    }
}
