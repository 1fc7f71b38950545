//! md superblock version 0.90 (`mdp_super_t`): 4096 bytes of host-endian u32 words at the
//! last 64 KiB-aligned 64 KiB of the member. Only little-endian (x86, arm64) hosts' 0.90
//! superblocks are read; a big-endian one is recognised and refused.
//!
//! Layout (in u32 words): 0-31 constant generic, 32-63 generic state, 64-127 personality,
//! 128-991 27 disk descriptors of 32 words, 992-1023 this disk's descriptor.
//! Byte offsets are in `docs/FORMAT.md`.

use super::codec::{array_at, i32_at, md_checksum, put_bytes, put_i32, put_u32, put_u64, u32_at, u64_at};
use super::{ArrayShape, DeviceRole, MdUuid, MetadataError, Personality, MD_SB_MAGIC};

/// Size of the whole 0.90 superblock.
pub const SB090_BYTES: usize = 4096;
/// Number of disk descriptors.
pub const SB090_DISKS: usize = 27;

const CSUM_OFFSET: usize = 152;
const DISKS_OFFSET: usize = 512;
const DESCRIPTOR_BYTES: usize = 128;
const THIS_DISK_OFFSET: usize = 3968;

/// `mdp_disk_t`: one member as this superblock saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskDescriptor090 {
    /// Index of the descriptor (device number in the set).
    pub number: u32,
    /// Linux device number when last written; informational only.
    pub major: u32,
    pub minor: u32,
    /// Slot in the array, meaningful when `state` has `SYNC` or `ACTIVE`.
    pub raid_disk: u32,
    /// `STATE_*` bits.
    pub state: u32,
    /// Words 5-31, kept for byte-exact re-encoding.
    pub reserved: [u8; 108],
}

impl DiskDescriptor090 {
    pub const STATE_FAULTY: u32 = 1 << 0;
    pub const STATE_ACTIVE: u32 = 1 << 1;
    pub const STATE_SYNC: u32 = 1 << 2;
    pub const STATE_REMOVED: u32 = 1 << 3;
    pub const STATE_WRITE_MOSTLY: u32 = 1 << 9;
    pub const STATE_FAILFAST: u32 = 1 << 10;

    /// An all-zero descriptor (an unused slot).
    pub fn empty() -> Self {
        Self { number: 0, major: 0, minor: 0, raid_disk: 0, state: 0, reserved: [0; 108] }
    }

    fn decode(bytes: &[u8], offset: usize) -> Self {
        Self {
            number: u32_at(bytes, offset),
            major: u32_at(bytes, offset + 4),
            minor: u32_at(bytes, offset + 8),
            raid_disk: u32_at(bytes, offset + 12),
            state: u32_at(bytes, offset + 16),
            reserved: array_at(bytes, offset + 20),
        }
    }

    fn encode(&self, bytes: &mut [u8], offset: usize) {
        put_u32(bytes, offset, self.number);
        put_u32(bytes, offset + 4, self.major);
        put_u32(bytes, offset + 8, self.minor);
        put_u32(bytes, offset + 12, self.raid_disk);
        put_u32(bytes, offset + 16, self.state);
        put_bytes(bytes, offset + 20, &self.reserved);
    }

    fn has(&self, bits: u32) -> bool {
        self.state & bits == bits
    }
}

/// A decoded little-endian 0.90 superblock. `md_magic` and `major_version` (0) are implied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock090 {
    /// 90, or 91 when the kernel supports reshape fields.
    pub minor_version: u32,
    pub patch_version: u32,
    pub gvalid_words: u32,
    /// `set_uuid0..3` as host (little-endian) words; word 0 sits at byte 20, words 1-3 at
    /// bytes 52-63. See [`Self::array_uuid`].
    pub set_uuid: [u32; 4],
    /// Creation time, seconds since the epoch.
    pub ctime: u32,
    pub level: i32,
    /// md `size`: KiB of each member used by the array.
    pub size_kib: u32,
    pub nr_disks: u32,
    pub raid_disks: u32,
    /// Preferred md minor (`/dev/mdN`).
    pub md_minor: u32,
    pub not_persistent: u32,
    /// Words 16-31, kept for byte-exact re-encoding.
    pub gstate_creserved: [u8; 64],
    pub utime: u32,
    /// `STATE_*` bits.
    pub state: u32,
    pub active_disks: u32,
    pub working_disks: u32,
    pub failed_disks: u32,
    pub spare_disks: u32,
    pub sb_csum: u32,
    /// `events_hi << 32 | events_lo`.
    pub events: u64,
    /// `cp_events_hi << 32 | cp_events_lo`: events at the last resync checkpoint.
    pub cp_events: u64,
    /// Resync checkpoint in sectors, meaningful only when not clean and `cp_events == events`.
    pub recovery_cp: u32,
    /// Reshape fields, valid only when `minor_version > 90`.
    pub reshape_position_sectors: u64,
    pub new_level: i32,
    pub delta_disks: i32,
    pub new_layout: u32,
    pub new_chunk_bytes: u32,
    /// Words 50-63, kept for byte-exact re-encoding.
    pub gstate_sreserved: [u8; 56],
    pub layout: u32,
    pub chunk_size_bytes: u32,
    pub root_pv: u32,
    pub root_block: u32,
    /// Words 68-127, kept for byte-exact re-encoding.
    pub pstate_reserved: [u8; 240],
    pub disks: [DiskDescriptor090; SB090_DISKS],
    pub this_disk: DiskDescriptor090,
}

impl Superblock090 {
    pub const STATE_CLEAN: u32 = 1 << 0;
    pub const STATE_ERRORS: u32 = 1 << 1;
    pub const STATE_BITMAP_PRESENT: u32 = 1 << 8;

    /// Decodes 4096 bytes and checks magic, endianness, major version and checksum.
    pub fn decode(bytes: &[u8]) -> Result<Self, MetadataError> {
        let sb = Self::decode_unverified(bytes)?;
        let computed = md_checksum(&bytes[..SB090_BYTES], CSUM_OFFSET);
        if computed != sb.sb_csum {
            return Err(MetadataError::ChecksumMismatch { stored: sb.sb_csum, computed });
        }
        Ok(sb)
    }

    /// Decodes without checking the checksum (for reporting damaged superblocks).
    pub fn decode_unverified(bytes: &[u8]) -> Result<Self, MetadataError> {
        if bytes.len() < SB090_BYTES {
            return Err(MetadataError::Truncated { needed: SB090_BYTES, available: bytes.len() });
        }
        let magic = u32_at(bytes, 0);
        if magic != MD_SB_MAGIC {
            // The words of a 0.90 superblock are in the writer's byte order.
            if magic.swap_bytes() == MD_SB_MAGIC {
                return Err(MetadataError::BigEndian090Unsupported);
            }
            return Err(MetadataError::BadMagic { found: magic, expected: MD_SB_MAGIC });
        }
        let major_version = u32_at(bytes, 4);
        if major_version != 0 {
            return Err(MetadataError::UnsupportedMajorVersion(major_version));
        }
        let disks = std::array::from_fn(|i| DiskDescriptor090::decode(bytes, DISKS_OFFSET + i * DESCRIPTOR_BYTES));
        Ok(Self {
            minor_version: u32_at(bytes, 8),
            patch_version: u32_at(bytes, 12),
            gvalid_words: u32_at(bytes, 16),
            set_uuid: [u32_at(bytes, 20), u32_at(bytes, 52), u32_at(bytes, 56), u32_at(bytes, 60)],
            ctime: u32_at(bytes, 24),
            level: i32_at(bytes, 28),
            size_kib: u32_at(bytes, 32),
            nr_disks: u32_at(bytes, 36),
            raid_disks: u32_at(bytes, 40),
            md_minor: u32_at(bytes, 44),
            not_persistent: u32_at(bytes, 48),
            gstate_creserved: array_at(bytes, 64),
            utime: u32_at(bytes, 128),
            state: u32_at(bytes, 132),
            active_disks: u32_at(bytes, 136),
            working_disks: u32_at(bytes, 140),
            failed_disks: u32_at(bytes, 144),
            spare_disks: u32_at(bytes, 148),
            sb_csum: u32_at(bytes, CSUM_OFFSET),
            events: u64::from(u32_at(bytes, 160)) << 32 | u64::from(u32_at(bytes, 156)),
            cp_events: u64::from(u32_at(bytes, 168)) << 32 | u64::from(u32_at(bytes, 164)),
            recovery_cp: u32_at(bytes, 172),
            reshape_position_sectors: u64_at(bytes, 176),
            new_level: i32_at(bytes, 184),
            delta_disks: i32_at(bytes, 188),
            new_layout: u32_at(bytes, 192),
            new_chunk_bytes: u32_at(bytes, 196),
            gstate_sreserved: array_at(bytes, 200),
            layout: u32_at(bytes, 256),
            chunk_size_bytes: u32_at(bytes, 260),
            root_pv: u32_at(bytes, 264),
            root_block: u32_at(bytes, 268),
            pstate_reserved: array_at(bytes, 272),
            disks,
            this_disk: DiskDescriptor090::decode(bytes, THIS_DISK_OFFSET),
        })
    }

    /// Encodes all 4096 bytes with `sb_csum` as stored.
    pub fn encode(&self) -> [u8; SB090_BYTES] {
        let mut bytes = [0u8; SB090_BYTES];
        put_u32(&mut bytes, 0, MD_SB_MAGIC);
        put_u32(&mut bytes, 4, 0);
        put_u32(&mut bytes, 8, self.minor_version);
        put_u32(&mut bytes, 12, self.patch_version);
        put_u32(&mut bytes, 16, self.gvalid_words);
        put_u32(&mut bytes, 20, self.set_uuid[0]);
        put_u32(&mut bytes, 24, self.ctime);
        put_i32(&mut bytes, 28, self.level);
        put_u32(&mut bytes, 32, self.size_kib);
        put_u32(&mut bytes, 36, self.nr_disks);
        put_u32(&mut bytes, 40, self.raid_disks);
        put_u32(&mut bytes, 44, self.md_minor);
        put_u32(&mut bytes, 48, self.not_persistent);
        put_u32(&mut bytes, 52, self.set_uuid[1]);
        put_u32(&mut bytes, 56, self.set_uuid[2]);
        put_u32(&mut bytes, 60, self.set_uuid[3]);
        put_bytes(&mut bytes, 64, &self.gstate_creserved);
        put_u32(&mut bytes, 128, self.utime);
        put_u32(&mut bytes, 132, self.state);
        put_u32(&mut bytes, 136, self.active_disks);
        put_u32(&mut bytes, 140, self.working_disks);
        put_u32(&mut bytes, 144, self.failed_disks);
        put_u32(&mut bytes, 148, self.spare_disks);
        put_u32(&mut bytes, CSUM_OFFSET, self.sb_csum);
        put_u32(&mut bytes, 156, self.events as u32);
        put_u32(&mut bytes, 160, (self.events >> 32) as u32);
        put_u32(&mut bytes, 164, self.cp_events as u32);
        put_u32(&mut bytes, 168, (self.cp_events >> 32) as u32);
        put_u32(&mut bytes, 172, self.recovery_cp);
        put_u64(&mut bytes, 176, self.reshape_position_sectors);
        put_i32(&mut bytes, 184, self.new_level);
        put_i32(&mut bytes, 188, self.delta_disks);
        put_u32(&mut bytes, 192, self.new_layout);
        put_u32(&mut bytes, 196, self.new_chunk_bytes);
        put_bytes(&mut bytes, 200, &self.gstate_sreserved);
        put_u32(&mut bytes, 256, self.layout);
        put_u32(&mut bytes, 260, self.chunk_size_bytes);
        put_u32(&mut bytes, 264, self.root_pv);
        put_u32(&mut bytes, 268, self.root_block);
        put_bytes(&mut bytes, 272, &self.pstate_reserved);
        for (index, disk) in self.disks.iter().enumerate() {
            disk.encode(&mut bytes, DISKS_OFFSET + index * DESCRIPTOR_BYTES);
        }
        self.this_disk.encode(&mut bytes, THIS_DISK_OFFSET);
        bytes
    }

    /// mdadm's `calc_sb0_csum` for the current field values.
    pub fn compute_checksum(&self) -> u32 {
        md_checksum(&self.encode(), CSUM_OFFSET)
    }

    pub fn update_checksum(&mut self) {
        self.sb_csum = self.compute_checksum();
    }

    /// The uuid as mdadm prints it: each word big-endian, so `%08x` of the words reads the
    /// same as the hex of the bytes.
    pub fn array_uuid(&self) -> MdUuid {
        let mut bytes = [0u8; 16];
        for (chunk, word) in bytes.chunks_exact_mut(4).zip(self.set_uuid) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        MdUuid(bytes)
    }

    /// Role from the "this disk" descriptor, as mdadm reads it: faulty, active-and-in-sync
    /// at `raid_disk`, active-recovering at `raid_disk` (0.91 reshape only), else spare.
    pub fn role_of_this_device(&self) -> DeviceRole {
        let disk = &self.this_disk;
        if disk.has(DiskDescriptor090::STATE_FAULTY) {
            DeviceRole::Faulty
        } else if disk.has(DiskDescriptor090::STATE_SYNC) || (disk.has(DiskDescriptor090::STATE_ACTIVE) && self.minor_version >= 91) {
            DeviceRole::Active(disk.raid_disk)
        } else {
            DeviceRole::Spare
        }
    }

    /// `Some(0)` for an active member that is not yet in sync (only 0.91 records that; the
    /// kernel restarts its recovery from 0); `None` when in sync.
    pub fn recovery_offset_sectors(&self) -> Option<u64> {
        let disk = &self.this_disk;
        (matches!(self.role_of_this_device(), DeviceRole::Active(_)) && !disk.has(DiskDescriptor090::STATE_SYNC)).then_some(0)
    }

    pub fn is_clean(&self) -> bool {
        self.state & Self::STATE_CLEAN != 0
    }

    /// The superblock says a write-intent bitmap follows it (4 KiB after its start).
    pub fn has_bitmap(&self) -> bool {
        self.state & Self::STATE_BITMAP_PRESENT != 0
    }

    /// mdadm: a 0.91 superblock whose `reshape_position` is not all ones.
    pub fn reshape_active(&self) -> bool {
        self.minor_version > 90 && self.reshape_position_sectors != u64::MAX
    }

    pub fn shape(&self) -> ArrayShape {
        ArrayShape {
            level: Personality::from_raw(self.level),
            raid_disks: self.raid_disks,
            layout: self.layout,
            chunk_sectors: self.chunk_size_bytes / 512,
            component_size_sectors: u64::from(self.size_kib) * 2,
        }
    }

    /// For each role `0..raid_disks`, whether a descriptor records it active, in sync and
    /// not faulty (mdadm `getinfo_super0`'s map).
    pub fn active_roles(&self) -> Vec<bool> {
        let mut active = vec![false; self.raid_disks.min(SB090_DISKS as u32) as usize];
        let working = DiskDescriptor090::STATE_ACTIVE | DiskDescriptor090::STATE_SYNC;
        for disk in &self.disks {
            if disk.has(working) && !disk.has(DiskDescriptor090::STATE_FAULTY) {
                if let Some(slot) = active.get_mut(disk.raid_disk as usize) {
                    *slot = true;
                }
            }
        }
        active
    }

    /// The same member described as a v1.0 superblock at `super_offset_sectors` (data at
    /// sector 0, as 0.90 keeps it), for code that reads a reshape from v1 fields: md's
    /// 0.91 superblock records a reshape with the same meanings (`super_90_validate`:
    /// `raid_disks` the new count, `delta_disks`, `new_level`, `new_layout`, `new_chunk` in
    /// bytes, `reshape_position` in array sectors, backwards when `delta_disks` < 0) and
    /// never moves the data (no `new_offset`). Roles come from the descriptors, indexed by
    /// descriptor number, as `dev_number` indexes v1's role table. Only for reading: it is
    /// never written back.
    pub fn v1_view(&self, super_offset_sectors: u64) -> super::Superblock1 {
        use super::sb1::{FeatureMap, MdTime, Superblock1};
        let roles: Vec<u16> = self
            .disks
            .iter()
            .map(|d| {
                if d.has(DiskDescriptor090::STATE_FAULTY) {
                    0xfffe
                } else if d.has(DiskDescriptor090::STATE_SYNC) || (d.has(DiskDescriptor090::STATE_ACTIVE) && self.minor_version >= 91) {
                    d.raid_disk.min(0xfeff) as u16
                } else {
                    0xffff
                }
            })
            .collect();
        let mut feature_map = FeatureMap(0);
        if self.reshape_active() {
            feature_map.0 |= FeatureMap::RESHAPE_ACTIVE;
        }
        let component = u64::from(self.size_kib) * 2;
        let mut sb = Superblock1 {
            feature_map,
            pad0: 0,
            set_uuid: self.array_uuid().0,
            set_name: [0; 32],
            ctime: MdTime::from_parts(u64::from(self.ctime), 0),
            level: self.level,
            layout: self.layout,
            size_sectors: component,
            chunksize_sectors: self.chunk_size_bytes / 512,
            raid_disks: self.raid_disks,
            bitmap_offset_raw: 0,
            new_level: self.new_level,
            reshape_position_sectors: if self.reshape_active() { self.reshape_position_sectors } else { 0 },
            delta_disks: self.delta_disks,
            new_layout: self.new_layout,
            new_chunk_sectors: self.new_chunk_bytes / 512,
            new_offset_sectors: 0,
            data_offset_sectors: 0,
            data_size_sectors: component,
            super_offset_sectors,
            recovery_offset_raw: 0,
            dev_number: self.this_disk.number,
            cnt_corrected_read: 0,
            device_uuid: [0; 16],
            devflags: 0,
            bblog_shift: 0,
            bblog_size_sectors: 0,
            bblog_offset_sectors: 0,
            utime: MdTime::from_parts(u64::from(self.utime), 0),
            events: self.events,
            resync_offset_sectors: if self.is_clean() { super::MAX_SECTOR } else { u64::from(self.recovery_cp) },
            sb_csum: 0,
            pad3: [0; 32],
            dev_roles: roles,
        };
        sb.update_checksum();
        sb
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock090 {
        let mut disks: [DiskDescriptor090; SB090_DISKS] = std::array::from_fn(|_| DiskDescriptor090::empty());
        for (index, disk) in disks.iter_mut().take(2).enumerate() {
            disk.number = index as u32;
            disk.raid_disk = index as u32;
            disk.state = DiskDescriptor090::STATE_ACTIVE | DiskDescriptor090::STATE_SYNC;
        }
        let mut sb = Superblock090 {
            minor_version: 90,
            patch_version: 0,
            gvalid_words: 0,
            set_uuid: [0xe51b_a574, 0x4d5d_79f4, 0x1e9d_494a, 0xd4ab_bcc7],
            ctime: 1,
            level: 1,
            size_kib: 16320,
            nr_disks: 2,
            raid_disks: 2,
            md_minor: 0,
            not_persistent: 0,
            gstate_creserved: [0; 64],
            utime: 2,
            state: Superblock090::STATE_CLEAN,
            active_disks: 2,
            working_disks: 2,
            failed_disks: 0,
            spare_disks: 0,
            sb_csum: 0,
            events: 0x1_0000_0015,
            cp_events: 0x15,
            recovery_cp: u32::MAX,
            reshape_position_sectors: 0,
            new_level: 0,
            delta_disks: 0,
            new_layout: 0,
            new_chunk_bytes: 0,
            gstate_sreserved: [0; 56],
            layout: 0,
            chunk_size_bytes: 0,
            root_pv: 0,
            root_block: 0,
            pstate_reserved: [0; 240],
            this_disk: disks[1].clone(),
            disks,
        };
        sb.update_checksum();
        sb
    }

    #[test]
    fn roundtrip_and_accessors() {
        let sb = sample();
        let bytes = sb.encode();
        assert_eq!(Superblock090::decode(&bytes), Ok(sb.clone()));
        assert_eq!(sb.array_uuid().to_string(), "e51ba574:4d5d79f4:1e9d494a:d4abbcc7");
        assert_eq!(sb.role_of_this_device(), DeviceRole::Active(1));
        assert_eq!(sb.active_roles(), vec![true, true]);
        assert!(sb.is_clean());
        assert_eq!(sb.shape().component_size_sectors, 32640);
    }

    #[test]
    fn a_reshaping_091_superblock_reads_as_the_same_v1_reshape() {
        let mut sb = sample();
        sb.minor_version = 91;
        sb.level = 5;
        sb.layout = 2;
        sb.chunk_size_bytes = 65536;
        sb.raid_disks = 4;
        sb.delta_disks = 1;
        sb.new_level = 5;
        sb.new_layout = 2;
        sb.new_chunk_bytes = 65536;
        sb.reshape_position_sectors = 24576;
        sb.disks[2].number = 2;
        sb.disks[2].raid_disk = 2;
        sb.disks[2].state = DiskDescriptor090::STATE_ACTIVE | DiskDescriptor090::STATE_SYNC;
        sb.disks[3].number = 3;
        sb.disks[3].raid_disk = 3;
        sb.disks[3].state = DiskDescriptor090::STATE_ACTIVE;
        sb.disks[4].state = DiskDescriptor090::STATE_FAULTY;
        let v1 = sb.v1_view(1000);
        assert_eq!(crate::metadata::Superblock1::decode(&v1.encode()), Ok(v1.clone()), "a valid v1 superblock");
        let state = crate::metadata::reshape::ReshapeState::from_superblock(&v1).unwrap();
        assert_eq!((state.position_sectors, state.backwards, state.new_offset_sectors), (24576, false, 0));
        assert_eq!((state.old.raid_disks, state.new.raid_disks, state.new.chunk_sectors), (3, 4, 128));
        assert_eq!(&v1.dev_roles[..6], &[0, 1, 2, 3, 0xfffe, 0xffff]);
        assert_eq!((v1.dev_number, v1.data_offset_sectors, v1.size_sectors), (1, 0, 32640));
        // Not reshaping (0.90, or 0.91 with the position all ones): no reshape.
        sb.reshape_position_sectors = u64::MAX;
        assert!(crate::metadata::reshape::ReshapeState::from_superblock(&sb.v1_view(1000)).is_err());
    }

    #[test]
    fn big_endian_is_recognised() {
        let mut bytes = sample().encode();
        bytes[0..4].copy_from_slice(&MD_SB_MAGIC.to_be_bytes());
        assert_eq!(Superblock090::decode(&bytes), Err(MetadataError::BigEndian090Unsupported));
    }

    #[test]
    fn flipped_byte_is_a_checksum_mismatch() {
        let sb = sample();
        let mut bytes = sb.encode();
        bytes[3000] ^= 0x40;
        match Superblock090::decode(&bytes) {
            Err(MetadataError::ChecksumMismatch { stored, computed }) => {
                assert_eq!(stored, sb.sb_csum);
                assert_ne!(computed, stored);
            }
            other => panic!("expected checksum mismatch, got {other:?}"),
        }
    }
}
