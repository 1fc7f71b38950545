//! md on-disk metadata: superblocks 0.90 and 1.x, the internal write-intent bitmap, where
//! each lives on a member, and the array size md derives from them.
//!
//! Everything is a pure codec: callers read bytes from a member and hand them in. Decoders
//! never panic on arbitrary bytes; they return [`MetadataError`]. For every valid superblock
//! `encode(decode(bytes)) == bytes` (reserved and padding bytes are kept, not zeroed), so
//! rewriting a superblock after an event changes only the fields the caller changed.
//!
//! Byte tables of every struct are in `docs/FORMAT.md`.

mod codec;

pub mod add;
pub mod backup;
pub mod badblocks;
pub mod bitmap;
pub mod check;
pub mod create;
pub mod grow;
pub mod reshape;
pub mod resize;
pub mod sb090;
pub mod sb1;
mod update;

use crate::geometry::Level;
use std::fmt;

pub use badblocks::{BadBlockList, BadBlockLogError, SectorRange};
pub use bitmap::{md_bitmap_space_sectors, BitmapSuperblock, WriteIntentBits};
pub use sb090::{DiskDescriptor090, Superblock090};
pub use sb1::{FeatureMap, MdTime, PplArea, Superblock1};

/// `0xa92b4efc`, shared by 0.90 and 1.x superblocks.
pub const MD_SB_MAGIC: u32 = 0xa92b_4efc;

/// md's "no sector": `resync_offset` / `recovery_offset` value meaning "nothing pending".
pub const MAX_SECTOR: u64 = u64::MAX;

use crate::geometry::{ArraySpec, Geometry, GeometryError, SECTOR_BYTES};

/// Why bytes are not a usable superblock or bitmap.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    #[error("truncated: need {needed} bytes, got {available}")]
    Truncated { needed: usize, available: usize },
    #[error("bad magic {found:#010x}, expected {expected:#010x}")]
    BadMagic { found: u32, expected: u32 },
    #[error(
        "0.90 superblock written by a big-endian host; uraid reads only little-endian 0.90 \
         (convert it on the original host with mdadm --update=byteorder)"
    )]
    BigEndian090Unsupported,
    #[error("unsupported superblock major version {0}")]
    UnsupportedMajorVersion(u32),
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch { stored: u32, computed: u32 },
    #[error("max_dev {found} exceeds {limit}: the role table would not fit in 4 KiB")]
    MaxDevTooLarge { found: u32, limit: u32 },
    #[error("unsupported write-intent bitmap version {0} (supported: 3, 4)")]
    UnsupportedBitmapVersion(u32),
    #[error("bitmap chunk size {0} bytes is not a power of two of at least 512")]
    BadBitmapChunkSize(u32),
}

/// An md array or device uuid, as the 16 bytes mdadm prints in order
/// (`6e5c69b2:5eae205b:a2fd9b97:ca9bee00`).
///
/// 1.x stores these bytes as they are. 0.90 stores four host-endian u32 words that mdadm
/// prints with `%08x`; [`Superblock090::array_uuid`] converts so both print the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MdUuid(pub [u8; 16]);

impl fmt::Display for MdUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, byte) in self.0.iter().enumerate() {
            if index > 0 && index % 4 == 0 {
                f.write_str(":")?;
            }
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// md personality, from the superblock's signed `level`: one of the array levels uraid
/// serves ([`Level`], the one level enum), or a personality it only recognizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Personality {
    Array(Level),
    Multipath,
    Faulty,
    Other(i32),
}

impl Personality {
    pub fn from_raw(level: i32) -> Self {
        match (Level::from_md(level), level) {
            (Ok(l), _) => Self::Array(l),
            (Err(_), -4) => Self::Multipath,
            (Err(_), -5) => Self::Faulty,
            (Err(_), other) => Self::Other(other),
        }
    }

    pub fn raw(self) -> i32 {
        match self {
            Self::Array(l) => l.to_md(),
            Self::Multipath => -4,
            Self::Faulty => -5,
            Self::Other(other) => other,
        }
    }

    /// The array level, when it is one uraid serves.
    pub fn level(self) -> Option<Level> {
        match self {
            Self::Array(l) => Some(l),
            _ => None,
        }
    }
}

impl fmt::Display for Personality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Array(l) => l.fmt(f),
            Self::Multipath => f.write_str("multipath"),
            Self::Faulty => f.write_str("faulty"),
            Self::Other(level) => write!(f, "level {level}"),
        }
    }
}

/// What a member is to its array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceRole {
    /// Holds data slot `n` (0-based `raid_disk`). Whether it is fully in sync is separate:
    /// see [`Superblock::recovery_offset_sectors`].
    Active(u32),
    /// Not holding data; used for rebuilds (1.x role `0xffff`).
    Spare,
    /// Failed out of the array (1.x role `0xfffe`).
    Faulty,
    /// raid4/5/6 write journal (1.x role `0xfffd`).
    Journal,
    /// A 1.x role in `0xff00..=0xfffc`, which md reserves and never writes.
    Unknown(u16),
}

impl DeviceRole {
    pub const SPARE_RAW: u16 = 0xffff;
    pub const FAULTY_RAW: u16 = 0xfffe;
    pub const JOURNAL_RAW: u16 = 0xfffd;
    /// Roles below this are data slots (md `MD_DISK_ROLE_MAX`).
    pub const ACTIVE_LIMIT_RAW: u16 = 0xff00;

    /// Decodes a 1.x `dev_roles[]` entry.
    pub fn from_raw(role: u16) -> Self {
        match role {
            Self::SPARE_RAW => Self::Spare,
            Self::FAULTY_RAW => Self::Faulty,
            Self::JOURNAL_RAW => Self::Journal,
            slot if slot < Self::ACTIVE_LIMIT_RAW => Self::Active(u32::from(slot)),
            other => Self::Unknown(other),
        }
    }
}

/// Superblock format and, for 1.x, placement (the minor version *is* the placement).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MetadataVersion {
    V0_90,
    /// 1.0: near the end of the member.
    V1_0,
    /// 1.1: at sector 0.
    V1_1,
    /// 1.2: at sector 8 (4 KiB).
    V1_2,
}

impl fmt::Display for MetadataVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::V0_90 => "0.90",
            Self::V1_0 => "1.0",
            Self::V1_1 => "1.1",
            Self::V1_2 => "1.2",
        })
    }
}

/// One place a superblock may sit on a member of a given size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SuperblockLocation {
    pub version: MetadataVersion,
    pub offset_bytes: u64,
    /// Bytes to read there: 4096 for 0.90 (the whole struct), 4096 for 1.x (enough for the
    /// largest role table md writes).
    pub len_bytes: usize,
}

/// Sector where a 0.90 superblock lives (md `MD_NEW_SIZE_SECTORS`): the last 64 KiB-aligned
/// 64 KiB of the device. Also the usable data size of a 0.90 member. `None` if the device is
/// smaller than 64 KiB.
pub fn sb090_offset_sectors(dev_size_bytes: u64) -> Option<u64> {
    let sectors = dev_size_bytes / SECTOR_BYTES;
    (sectors & !127).checked_sub(128)
}

/// Sector where a 1.0 superblock lives: 8 KiB from the end, rounded down to 4 KiB, as mdadm
/// computes it. `None` if the device is smaller than 24 sectors (mdadm's minimum).
pub fn sb10_offset_sectors(dev_size_bytes: u64) -> Option<u64> {
    let sectors = dev_size_bytes / SECTOR_BYTES;
    if sectors < 24 {
        return None;
    }
    Some((sectors - 16) & !7)
}

/// Every place a superblock may sit on a device of `dev_size_bytes`, in the order mdadm
/// probes ("default" metadata tries 0.90 first, then 1.x; 1.x minor versions 1.2, 1.1, 1.0
/// are all looked at). Locations that do not fit on the device are left out.
pub fn superblock_locations(dev_size_bytes: u64) -> Vec<SuperblockLocation> {
    let mut locations = Vec::with_capacity(4);
    if let Some(sector) = sb090_offset_sectors(dev_size_bytes) {
        locations.push(SuperblockLocation {
            version: MetadataVersion::V0_90,
            offset_bytes: sector * SECTOR_BYTES,
            len_bytes: sb090::SB090_BYTES,
        });
    }
    if let Some(sector) = sb10_offset_sectors(dev_size_bytes) {
        // Sectors 0..24 exist, so 1.1 and 1.2 fit whenever 1.0 does.
        locations.push(SuperblockLocation {
            version: MetadataVersion::V1_2,
            offset_bytes: 8 * SECTOR_BYTES,
            len_bytes: sb1::SB1_MAX_BYTES,
        });
        locations.push(SuperblockLocation { version: MetadataVersion::V1_1, offset_bytes: 0, len_bytes: sb1::SB1_MAX_BYTES });
        locations.push(SuperblockLocation {
            version: MetadataVersion::V1_0,
            offset_bytes: sector * SECTOR_BYTES,
            len_bytes: sb1::SB1_MAX_BYTES,
        });
    }
    locations
}

/// A decoded superblock found at a [`SuperblockLocation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundSuperblock {
    pub location: SuperblockLocation,
    pub superblock: Superblock,
}

/// Probes every location with `read_at(offset_bytes, len_bytes)` and returns the superblocks
/// that decode, have a valid checksum and, for 1.x, record the `super_offset` where they were
/// found (as mdadm requires; it rules out a 1.0 superblock of a larger, partitioned device).
///
/// Read errors and undecodable locations are skipped: the point is to find what is there.
/// A device may legitimately hold more than one (a 0.90 and a 1.0 superblock after
/// re-creation); the caller decides, as mdadm does, by asking the user or by uuid.
pub fn detect<E>(dev_size_bytes: u64, mut read_at: impl FnMut(u64, usize) -> Result<Vec<u8>, E>) -> Vec<FoundSuperblock> {
    let mut found = Vec::new();
    for location in superblock_locations(dev_size_bytes) {
        let Ok(bytes) = read_at(location.offset_bytes, location.len_bytes) else {
            continue;
        };
        let superblock = match location.version {
            MetadataVersion::V0_90 => Superblock090::decode(&bytes).map(Superblock::V090),
            _ => Superblock1::decode(&bytes).map(Superblock::V1),
        };
        let Ok(superblock) = superblock else {
            continue;
        };
        if let Superblock::V1(sb) = &superblock {
            if sb.super_offset_sectors.checked_mul(SECTOR_BYTES) != Some(location.offset_bytes) {
                continue;
            }
        }
        found.push(FoundSuperblock { location, superblock });
    }
    found
}

/// The array-wide numbers that decide md's array size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrayShape {
    pub level: Personality,
    pub raid_disks: u32,
    pub layout: u32,
    /// 0 for levels without chunks (raid1, linear).
    pub chunk_sectors: u32,
    /// Sectors of each member used for data (`size`); unused by raid0/linear.
    pub component_size_sectors: u64,
}

/// Why an array size cannot be computed from an [`ArrayShape`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArraySizeError {
    #[error("{level} needs the data size of each of its {raid_disks} members, got {given}")]
    MemberSizesNeeded { level: Personality, raid_disks: u32, given: usize },
    /// More roles than any md superblock holds (1.x: [`check::SB1_MAX_DISKS`]).
    #[error("{level} with {raid_disks} members: more than md allows")]
    TooManyMembers { level: Personality, raid_disks: u32 },
    #[error("array size is not defined for {0}")]
    UnsupportedLevel(Personality),
    #[error(transparent)]
    Geometry(#[from] GeometryError),
}

/// raid10 layout word: `near | far << 8 | offset << 16 | far_set_mode << 17`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raid10Layout {
    pub near_copies: u32,
    pub far_copies: u32,
    /// "offset" layout: far copies shifted by one chunk instead of half a device.
    pub far_offset: bool,
}

impl Raid10Layout {
    pub fn from_raw(layout: u32) -> Option<Self> {
        let near_copies = layout & 0xff;
        let far_copies = (layout >> 8) & 0xff;
        // md rejects layouts with bits above 18 (`layout >> 19`) and zero copy counts.
        if near_copies == 0 || far_copies == 0 || layout >> 19 != 0 {
            return None;
        }
        Some(Self { near_copies, far_copies, far_offset: layout & (1 << 16) != 0 })
    }

    pub fn copies(self) -> u32 {
        self.near_copies * self.far_copies
    }
}

impl ArrayShape {
    /// Array size in sectors, as the md kernel computes it: the [`Geometry`] of the shape
    /// (the one copy of md's size formulas: `raid0_size`, `raid5_size`, `raid10_size` after
    /// md's `calc_sectors` rounding, linear's sum, raid1's `size`). Multipath is `size`.
    ///
    /// `member_data_sizes_sectors` (role order) is only read for linear and raid0.
    pub fn array_size_sectors(&self, member_data_sizes_sectors: &[u64]) -> Result<u64, ArraySizeError> {
        let level = match self.level {
            Personality::Array(level) => level,
            Personality::Multipath => return Ok(self.component_size_sectors),
            other => return Err(ArraySizeError::UnsupportedLevel(other)),
        };
        let raid_disks = self.raid_disks as usize;
        let member_sectors = match level {
            Level::Linear | Level::Raid0 => {
                if member_data_sizes_sectors.len() != raid_disks {
                    return Err(ArraySizeError::MemberSizesNeeded {
                        level: self.level,
                        raid_disks: self.raid_disks,
                        given: member_data_sizes_sectors.len(),
                    });
                }
                member_data_sizes_sectors.to_vec()
            }
            // One common size; bounded first, as the shape may come from an unchecked
            // superblock and the geometry takes one size per role.
            _ if self.raid_disks > check::SB1_MAX_DISKS => {
                return Err(ArraySizeError::TooManyMembers { level: self.level, raid_disks: self.raid_disks })
            }
            _ => vec![self.component_size_sectors; raid_disks],
        };
        // A multi-zone raid0 of unknown layout (0) cannot be mapped, but its size is the
        // same under either layout, so the size is asked of layout 1.
        let layout = if level == Level::Raid0 && !matches!(self.layout, 1 | 2) { 1 } else { self.layout };
        let spec = ArraySpec { level, layout, chunk_sectors: self.chunk_sectors, raid_disks, member_sectors };
        Geometry::new(&spec).map(|g| g.array_sectors()).map_err(ArraySizeError::Geometry)
    }
}

/// A superblock of either family, with the accessors assembly and the engine need.
// One per member, decoded once: boxing the 1.x variant would buy nothing but indirection.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Superblock {
    V090(Superblock090),
    V1(Superblock1),
}

impl Superblock {
    /// Decodes the bytes read at a location of `version`, checking magic and checksum.
    pub fn decode(version: MetadataVersion, bytes: &[u8]) -> Result<Self, MetadataError> {
        match version {
            MetadataVersion::V0_90 => Superblock090::decode(bytes).map(Self::V090),
            _ => Superblock1::decode(bytes).map(Self::V1),
        }
    }

    /// The bytes to write back (4096 for 0.90; `256 + 2 * max_dev` for 1.x), with the stored
    /// checksum as it is: call [`Superblock::update_checksum`] first after changing fields.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Self::V090(sb) => sb.encode().to_vec(),
            Self::V1(sb) => sb.encode(),
        }
    }

    pub fn update_checksum(&mut self) {
        match self {
            Self::V090(sb) => sb.update_checksum(),
            Self::V1(sb) => sb.update_checksum(),
        }
    }

    /// 0.90, or the 1.x minor version implied by where the superblock says it sits.
    pub fn version(&self) -> MetadataVersion {
        match self {
            Self::V090(_) => MetadataVersion::V0_90,
            Self::V1(sb) => sb.version(),
        }
    }

    pub fn array_uuid(&self) -> MdUuid {
        match self {
            Self::V090(sb) => sb.array_uuid(),
            Self::V1(sb) => MdUuid(sb.set_uuid),
        }
    }

    pub fn events(&self) -> u64 {
        match self {
            Self::V090(sb) => sb.events,
            Self::V1(sb) => sb.events,
        }
    }

    pub fn level(&self) -> Personality {
        match self {
            Self::V090(sb) => Personality::from_raw(sb.level),
            Self::V1(sb) => Personality::from_raw(sb.level),
        }
    }

    pub fn raid_disks(&self) -> u32 {
        match self {
            Self::V090(sb) => sb.raid_disks,
            Self::V1(sb) => sb.raid_disks,
        }
    }

    pub fn shape(&self) -> ArrayShape {
        match self {
            Self::V090(sb) => sb.shape(),
            Self::V1(sb) => sb.shape(),
        }
    }

    /// This member's role.
    pub fn role(&self) -> DeviceRole {
        match self {
            Self::V090(sb) => sb.role_of_this_device(),
            Self::V1(sb) => sb.role_of_this_device(),
        }
    }

    /// True if this member is a replacement being built for the active member of the same
    /// role (1.x feature bit `REPLACEMENT`; 0.90 has no replacements).
    pub fn is_replacement(&self) -> bool {
        match self {
            Self::V090(_) => false,
            Self::V1(sb) => sb.feature_map.contains(FeatureMap::REPLACEMENT),
        }
    }

    /// `Some(sectors)` if this active member is only recovered up to `sectors` (from its data
    /// start); `None` if it is fully in sync.
    pub fn recovery_offset_sectors(&self) -> Option<u64> {
        match self {
            Self::V090(sb) => sb.recovery_offset_sectors(),
            Self::V1(sb) => sb.recovery_offset(),
        }
    }

    /// The array was shut down cleanly (no resync needed).
    pub fn is_clean(&self) -> bool {
        match self {
            Self::V090(sb) => sb.is_clean(),
            Self::V1(sb) => sb.is_clean(),
        }
    }

    /// Where a reshape in progress stands, in array sectors (`None` when none is).
    pub fn reshape_position_sectors(&self) -> Option<u64> {
        let position = match self {
            Self::V090(sb) => sb.reshape_position_sectors,
            Self::V1(sb) => sb.reshape_position_sectors,
        };
        self.reshape_active().then_some(position)
    }

    /// A reshape (grow, level or layout change) is in progress.
    pub fn reshape_active(&self) -> bool {
        match self {
            Self::V090(sb) => sb.minor_version > 90 && sb.reshape_active(),
            Self::V1(sb) => sb.feature_map.contains(FeatureMap::RESHAPE_ACTIVE),
        }
    }

    /// For each role `0..raid_disks`, whether this superblock records it as active and in
    /// sync (mdadm's per-device "devmap", used to spot members that failed each other).
    pub fn active_roles(&self) -> Vec<bool> {
        match self {
            Self::V090(sb) => sb.active_roles(),
            Self::V1(sb) => sb.active_roles(),
        }
    }

    /// Sector on the member where array data starts.
    pub fn data_offset_sectors(&self) -> u64 {
        match self {
            Self::V090(_) => 0,
            Self::V1(sb) => sb.data_offset_sectors,
        }
    }

    /// Sectors of the member that may hold data, as md uses for linear and raid0:
    /// `data_size` for 1.x; for 0.90, everything before the superblock.
    pub fn member_data_size_sectors(&self, dev_size_bytes: u64) -> u64 {
        match self {
            Self::V090(_) => sb090_offset_sectors(dev_size_bytes).unwrap_or(0),
            Self::V1(sb) => sb.data_size_sectors,
        }
    }

    /// Byte offset on the member of the internal write-intent bitmap superblock, if the
    /// superblock says there is one. `superblock_offset_bytes` is where this superblock was
    /// read (0.90 does not record it).
    pub fn bitmap_offset_bytes(&self, superblock_offset_bytes: u64) -> Option<u64> {
        match self {
            Self::V090(sb) => sb.has_bitmap().then_some(superblock_offset_bytes + 4096),
            Self::V1(sb) => {
                let relative = i64::from(sb.bitmap_offset_sectors()?) * SECTOR_BYTES as i64;
                superblock_offset_bytes.checked_add_signed(relative)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_formats_like_mdadm() {
        let uuid = MdUuid([0x6e, 0x5c, 0x69, 0xb2, 0x5e, 0xae, 0x20, 0x5b, 0xa2, 0xfd, 0x9b, 0x97, 0xca, 0x9b, 0xee, 0x00]);
        assert_eq!(uuid.to_string(), "6e5c69b2:5eae205b:a2fd9b97:ca9bee00");
    }

    #[test]
    fn locations_for_16_mib() {
        let locations = superblock_locations(16 << 20);
        let offsets: Vec<(MetadataVersion, u64)> = locations.iter().map(|l| (l.version, l.offset_bytes)).collect();
        assert_eq!(
            offsets,
            vec![
                (MetadataVersion::V0_90, 32640 * 512),
                (MetadataVersion::V1_2, 4096),
                (MetadataVersion::V1_1, 0),
                (MetadataVersion::V1_0, 32752 * 512),
            ]
        );
        assert!(superblock_locations(11 * 512).is_empty());
        // 0.90 needs a whole aligned 64 KiB, and not the partial tail.
        assert_eq!(sb090_offset_sectors(64 * 1024 + 511), Some(0));
        assert_eq!(sb090_offset_sectors(64 * 1024 - 1), None);
        assert_eq!(sb10_offset_sectors(24 * 512 + 7 * 512), Some(8));
    }

    fn shape(level: Personality, raid_disks: u32, layout: u32, chunk: u32, size: u64) -> ArrayShape {
        ArrayShape { level, raid_disks, layout, chunk_sectors: chunk, component_size_sectors: size }
    }

    #[test]
    fn array_sizes_match_corpus() {
        // Numbers from /work/shared/md-corpus manifests (array_size_bytes / 512).
        let linear = shape(Personality::Array(Level::Linear), 3, 0, 0, 0);
        assert_eq!(linear.array_size_sectors(&[14336, 22528, 30720]), Ok(67584));
        let raid0 = shape(Personality::Array(Level::Raid0), 3, 0, 128, 0);
        assert_eq!(raid0.array_size_sectors(&[30720; 3]), Ok(92160));
        assert_eq!(raid0.array_size_sectors(&[14336 + 5, 22528, 30720]), Ok(67584));
        assert!(raid0.array_size_sectors(&[1]).is_err());
        assert_eq!(shape(Personality::Array(Level::Raid1), 2, 0, 0, 32640).array_size_sectors(&[]), Ok(32640));
        assert_eq!(shape(Personality::Array(Level::Raid5), 4, 2, 128, 30720).array_size_sectors(&[]), Ok(92160));
        assert_eq!(shape(Personality::Array(Level::Raid5), 4, 2, 128, 32640).array_size_sectors(&[]), Ok(97920));
        assert_eq!(shape(Personality::Array(Level::Raid6), 4, 2, 1024, 28672).array_size_sectors(&[]), Ok(57344));
        assert_eq!(shape(Personality::Array(Level::Raid6), 5, 2, 128, 30720).array_size_sectors(&[]), Ok(92160));
        assert_eq!(shape(Personality::Array(Level::Raid10), 4, 0x102, 1024, 28672).array_size_sectors(&[]), Ok(57344));
        assert_eq!(shape(Personality::Array(Level::Raid10), 4, 0x201, 1024, 28672).array_size_sectors(&[]), Ok(57344));
        // 3 disks near=2: 10 chunks per device hold 15 array chunks.
        assert_eq!(shape(Personality::Array(Level::Raid10), 3, 0x102, 8, 80).array_size_sectors(&[]), Ok(120));
        assert!(shape(Personality::Array(Level::Raid10), 4, 0, 8, 80).array_size_sectors(&[]).is_err());
        assert!(shape(Personality::Array(Level::Raid5), 1, 2, 8, 80).array_size_sectors(&[]).is_err());
    }

    #[test]
    fn roles_decode() {
        assert_eq!(DeviceRole::from_raw(0), DeviceRole::Active(0));
        assert_eq!(DeviceRole::from_raw(0xfeff), DeviceRole::Active(0xfeff));
        assert_eq!(DeviceRole::from_raw(0xff00), DeviceRole::Unknown(0xff00));
        assert_eq!(DeviceRole::from_raw(0xffff), DeviceRole::Spare);
        assert_eq!(DeviceRole::from_raw(0xfffe), DeviceRole::Faulty);
        assert_eq!(DeviceRole::from_raw(0xfffd), DeviceRole::Journal);
    }
}
