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
    /// Every field zero (descriptors empty), minor version 90: what md's `super_90_sync`
    /// and mdadm's `init_super0` start from before filling in the array.
    pub fn blank() -> Superblock090 {
        Superblock090 {
            minor_version: 90,
            patch_version: 0,
            gvalid_words: 0,
            set_uuid: [0; 4],
            ctime: 0,
            level: 0,
            size_kib: 0,
            nr_disks: 0,
            raid_disks: 0,
            md_minor: 0,
            not_persistent: 0,
            gstate_creserved: [0; 64],
            utime: 0,
            state: 0,
            active_disks: 0,
            working_disks: 0,
            failed_disks: 0,
            spare_disks: 0,
            sb_csum: 0,
            events: 0,
            cp_events: 0,
            recovery_cp: 0,
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
            disks: std::array::from_fn(|_| DiskDescriptor090::empty()),
            this_disk: DiskDescriptor090::empty(),
        }
    }

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

    /// The uuid as mdadm holds it in memory (`getinfo_super0`: `info->uuid[i] =
    /// set_uuid<i>`, ints on a little-endian host) and writes it into a reshape backup:
    /// each word little-endian, unlike [`Superblock090::array_uuid`].
    pub fn mdadm_uuid_bytes(&self) -> [u8; 16] {
        let mut bytes = [0u8; 16];
        for (chunk, word) in bytes.chunks_exact_mut(4).zip(self.set_uuid) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        bytes
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
        let mut recovery_offset_raw = 0;
        if self.reshape_active() {
            feature_map.0 |= FeatureMap::RESHAPE_ACTIVE;
            // 0.91 has no recovery_offset: a member the reshape writes into a new role is
            // active but not in sync, and md takes it as rebuilt up to the reshape
            // position (raid5.c `raid5_run`: "v0.91 doesn't store recovery_offset
            // properly"), in member sectors of the new shape.
            let this = &self.this_disk;
            if this.has(DiskDescriptor090::STATE_ACTIVE)
                && !this.has(DiskDescriptor090::STATE_SYNC)
                && !this.has(DiskDescriptor090::STATE_FAULTY)
            {
                let parity = super::grow::parity_disks(self.new_level).unwrap_or(0);
                let data_disks = u64::from(self.raid_disks.saturating_sub(parity).max(1));
                feature_map.0 |= FeatureMap::RECOVERY_OFFSET;
                recovery_offset_raw = if self.delta_disks < 0 { 0 } else { self.reshape_position_sectors / data_disks };
            }
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
            recovery_offset_raw,
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

    /// The devices this superblock lists (md numbers descriptor `i` as `i`), by number:
    /// members and spares, not the removed or faulty placeholders.
    pub fn listed_devices(&self) -> Vec<u32> {
        let gone = DiskDescriptor090::STATE_FAULTY | DiskDescriptor090::STATE_REMOVED;
        (0..SB090_DISKS as u32)
            .filter(|&i| {
                let d = &self.disks[i as usize];
                d.number == i && d.state & gone == 0 && (i > 0 || d.state != 0)
            })
            .collect()
    }

    /// For a member whose 0.91 superblock records a reshape that the other members have
    /// already recorded finished (a crash while the final superblocks went out, each
    /// member having recorded the position at the end first): the 0.90 superblock the
    /// finish writes for it, with its own event count. `None` when it records no reshape.
    pub fn finished_reshape(&self) -> Option<Superblock090> {
        use super::sb1::FeatureMap;
        if !self.reshape_active() {
            return None;
        }
        let view = self.v1_view(0);
        let state = super::reshape::ReshapeState::from_superblock(&view).ok()?;
        let mut done = state.final_superblock(&view, u64::from(self.size_kib) * 2);
        done.feature_map.0 &= !(FeatureMap::RECOVERY_OFFSET | FeatureMap::RESHAPE_ACTIVE);
        let present: Vec<(u32, bool)> = self.listed_devices().into_iter().map(|n| (n, true)).collect();
        Some(self.synced_from_v1(&done, &present))
    }

    /// The 0.90 superblock md's `super_90_sync` writes for the array state `v1` (a
    /// [`Self::v1_view`] of `self`, changed: events, state, shape, reshape fields, roles),
    /// keeping what only 0.90 records (uuid words, creation time, preferred minor, the
    /// descriptors' device numbers) from `self`, this member's superblock the view was
    /// taken from. `present` lists the devices md would hold (`rdev_for_each`): the view's
    /// device number of each working device here, and whether it is in sync (a member in a
    /// role written by a reshape as it goes is not yet). Their roles come from `v1`.
    ///
    /// As md does: 0.91 while a reshape is recorded, 0.90 otherwise; devices renumbered,
    /// members by their role and spares after the last role; roles nobody holds recorded
    /// removed and faulty (but descriptor 0, which md starts as removed only); a member not
    /// yet in sync is active without `SYNC` in 0.91 (md has nowhere else to say so) and a
    /// spare in 0.90. Devices recorded faulty in the view are left out, as md leaves out a
    /// member once it is removed.
    pub fn synced_from_v1(&self, v1: &super::Superblock1, present: &[(u32, bool)]) -> Superblock090 {
        use super::sb1::FeatureMap;
        let reshaping = v1.feature_map.contains(FeatureMap::RESHAPE_ACTIVE);
        let clean = v1.resync_offset_sectors == super::MAX_SECTOR;
        let mut sb = Superblock090 {
            minor_version: if reshaping { 91 } else { 90 },
            patch_version: self.patch_version,
            set_uuid: self.set_uuid,
            ctime: self.ctime,
            level: v1.level,
            size_kib: u32::try_from(v1.size_sectors / 2).unwrap_or(u32::MAX),
            raid_disks: v1.raid_disks,
            md_minor: self.md_minor,
            utime: u32::try_from(v1.utime.seconds()).unwrap_or(u32::MAX),
            // md sets the bitmap bit whenever the array has an internal bitmap.
            state: (if clean { Self::STATE_CLEAN } else { 0 }) | (self.state & Self::STATE_BITMAP_PRESENT),
            events: v1.events,
            // md records the resync checkpoint only while in sync (not "active").
            cp_events: if v1.resync_offset_sectors == 0 { 0 } else { v1.events },
            recovery_cp: u32::try_from(v1.resync_offset_sectors).unwrap_or(u32::MAX),
            layout: v1.layout,
            chunk_size_bytes: v1.chunksize_sectors * 512,
            ..Self::blank()
        };
        if reshaping {
            sb.reshape_position_sectors = v1.reshape_position_sectors;
            sb.new_level = v1.new_level;
            sb.delta_disks = v1.delta_disks;
            sb.new_layout = v1.new_layout;
            sb.new_chunk_bytes = v1.new_chunk_sectors * 512;
        }
        sb.disks[0].state = DiskDescriptor090::STATE_REMOVED;
        let mut next_spare = v1.raid_disks;
        let mut this_number = None;
        let mut nr_disks = 0;
        for &(n, in_sync) in present {
            let role = v1.dev_roles.get(n as usize).copied().unwrap_or(0xffff);
            if role == 0xfffe || role == 0xfffd {
                continue;
            }
            let has_role = role < 0xff00 && u32::from(role) < v1.raid_disks;
            let active = has_role && (in_sync || reshaping);
            let number = if active { u32::from(role) } else { next_spare };
            if !active {
                next_spare += 1;
            }
            let Some(d) = sb.disks.get_mut(number as usize) else { continue };
            let old = self.disks.get(n as usize);
            *d = DiskDescriptor090 {
                number,
                major: old.map_or(0, |o| o.major),
                minor: old.map_or(0, |o| o.minor),
                raid_disk: if active { u32::from(role) } else { number },
                state: 0,
                reserved: [0; 108],
            };
            if active {
                d.state = DiskDescriptor090::STATE_ACTIVE | if in_sync { DiskDescriptor090::STATE_SYNC } else { 0 };
                sb.active_disks += 1;
            } else {
                sb.spare_disks += 1;
            }
            sb.working_disks += 1;
            nr_disks += 1;
            if n == v1.dev_number {
                this_number = Some(number);
            }
        }
        for (i, d) in sb.disks.iter_mut().enumerate().take(v1.raid_disks as usize) {
            if d.state == 0 && d.number == 0 {
                *d = DiskDescriptor090 {
                    number: i as u32,
                    raid_disk: i as u32,
                    state: DiskDescriptor090::STATE_REMOVED | DiskDescriptor090::STATE_FAULTY,
                    ..DiskDescriptor090::empty()
                };
                sb.failed_disks += 1;
            }
        }
        sb.nr_disks = nr_disks;
        if let Some(n) = this_number {
            sb.this_disk = sb.disks[n as usize].clone();
        }
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
            set_uuid: [0xe51b_a574, 0x4d5d_79f4, 0x1e9d_494a, 0xd4ab_bcc7],
            ctime: 1,
            level: 1,
            size_kib: 16320,
            nr_disks: 2,
            raid_disks: 2,
            utime: 2,
            state: Superblock090::STATE_CLEAN,
            active_disks: 2,
            working_disks: 2,
            events: 0x1_0000_0015,
            cp_events: 0x15,
            recovery_cp: u32::MAX,
            this_disk: disks[1].clone(),
            disks,
            ..Superblock090::blank()
        };
        sb.update_checksum();
        sb
    }

    #[test]
    fn mdadms_in_memory_uuid_is_little_endian_words() {
        let mut sb = sample();
        sb.set_uuid = [0xf7c2_30a3, 0x005d_ef65, 0xcf5a_4f3f, 0xc06c_2b33];
        // mdadm prints f7c230a3:005def65:... and holds a3 30 c2 f7 ... (what its backups carry).
        assert_eq!(sb.array_uuid().0[..4], [0xf7, 0xc2, 0x30, 0xa3]);
        assert_eq!(sb.mdadm_uuid_bytes()[..8], [0xa3, 0x30, 0xc2, 0xf7, 0x65, 0xef, 0x5d, 0x00]);
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

    /// md's 0.91 superblock of a RAID5 3 -> 4 grow, as `super_90_sync` writes it: members
    /// numbered by role, the one written into role 1 by the reshape active without `SYNC`,
    /// a spare numbered after the roles, dirty while it runs.
    fn grow_091(this: usize) -> Superblock090 {
        let mut sb = sample();
        (sb.minor_version, sb.level, sb.layout, sb.chunk_size_bytes, sb.raid_disks) = (91, 5, 2, 65536, 4);
        (sb.delta_disks, sb.new_level, sb.new_layout, sb.new_chunk_bytes) = (1, 5, 2, 65536);
        sb.reshape_position_sectors = 24576;
        (sb.state, sb.recovery_cp, sb.cp_events) = (0, 0, 0);
        for i in 0..5 {
            sb.disks[i] = DiskDescriptor090 {
                number: i as u32,
                major: 7,
                minor: 10 + i as u32,
                raid_disk: i as u32,
                state: match i {
                    1 => DiskDescriptor090::STATE_ACTIVE,
                    4 => 0,
                    _ => DiskDescriptor090::STATE_ACTIVE | DiskDescriptor090::STATE_SYNC,
                },
                reserved: [0; 108],
            };
        }
        (sb.nr_disks, sb.active_disks, sb.working_disks, sb.failed_disks, sb.spare_disks) = (5, 4, 5, 0, 1);
        sb.this_disk = sb.disks[this].clone();
        sb.update_checksum();
        sb
    }

    #[test]
    fn a_091_superblock_is_written_back_as_md_wrote_it() {
        let present = [(0, true), (1, false), (2, true), (3, true), (4, true)];
        for this in 0..5 {
            let sb = grow_091(this);
            let v1 = sb.v1_view(1000);
            assert_eq!(sb.synced_from_v1(&v1, &present), sb, "member {this}");
        }
        // Member 1, active without SYNC, counts as rebuilt up to the position (in member
        // sectors of the 3 data disks of the new shape), as md's raid5_run takes it.
        let v1 = grow_091(1).v1_view(1000);
        assert_eq!(v1.recovery_offset(), Some(24576 / 3));
        assert_eq!(grow_091(0).v1_view(1000).recovery_offset(), None);
    }

    #[test]
    fn md_renumbers_and_the_finish_writes_090() {
        let sb = grow_091(4);
        let mut v1 = sb.v1_view(1000);
        // The reshape ended: no reshape fields, every member in sync, clean; member 2 gone
        // (faulty), the spare keeps its place after the roles.
        v1.feature_map.0 &= !crate::metadata::sb1::FeatureMap::RESHAPE_ACTIVE;
        v1.resync_offset_sectors = crate::metadata::MAX_SECTOR;
        v1.dev_roles[2] = 0xfffe;
        v1.events += 1;
        let present = [(0, true), (1, true), (3, true), (4, true)];
        let done = sb.synced_from_v1(&v1, &present);
        assert_eq!((done.minor_version, done.reshape_position_sectors, done.delta_disks), (90, 0, 0));
        assert!(done.is_clean());
        assert_eq!((done.cp_events, done.recovery_cp, done.events), (v1.events, u32::MAX, v1.events));
        assert_eq!(done.this_disk.number, 4);
        assert_eq!(done.role_of_this_device(), DeviceRole::Spare);
        assert_eq!(done.disks[2].state, DiskDescriptor090::STATE_REMOVED | DiskDescriptor090::STATE_FAULTY);
        assert_eq!((done.active_disks, done.working_disks, done.failed_disks, done.spare_disks, done.nr_disks), (3, 4, 1, 1, 4));
        assert_eq!(done.active_roles(), vec![true, true, false, true]);
        assert_eq!(Superblock090::decode(&done.encode()), Ok(done.clone()), "checksum and codec agree");
        // A member not in sync once the reshape is over becomes a spare (0.90 cannot say
        // "recovering"), numbered after the roles.
        let halfway = sb.synced_from_v1(&v1, &[(0, true), (1, false), (3, true), (4, true)]);
        assert_eq!((halfway.disks[4].number, halfway.disks[4].raid_disk, halfway.disks[4].state), (4, 4, 0));
        assert_eq!((halfway.disks[5].number, halfway.disks[5].minor), (5, 14));
        assert_eq!(halfway.disks[1].state, DiskDescriptor090::STATE_REMOVED | DiskDescriptor090::STATE_FAULTY);
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
