//! The pure "create" planner: what `mdadm --create` (mdadm 4.2, Linux 6.1) writes on each
//! member, decided from what mdadm is told, without touching a device.
//!
//! The caller passes every input that mdadm would take from the clock or from random
//! numbers (array uuid, device uuids, creation time), so a plan is deterministic and can be
//! compared with real md arrays byte for byte (`tests/create_corpus.rs`).
//!
//! What the plan reproduces from mdadm (file and function named where the rule lives):
//! - 1.1/1.2 `data_offset`: `super1.c validate_geometry1`, computed once from the first
//!   present device: `12*2 + choose_bm_space(dev) + headroom` rounded up to 1 MiB, where the
//!   reshape headroom starts at 128 MiB and halves while it is more than ~0.1% of the device
//!   and more than two chunks. 1.0 and 0.90 put data at sector 0.
//! - component `size`: `Create.c`: smallest usable member size in KiB, rounded down to the
//!   chunk (raid1: to 64 KiB); 0 for raid0/linear, which use each member whole.
//! - `data_size`, `super_offset`, bad-block log (`bblog_*`), bitmap placement and the role
//!   table size `max_dev`: `super1.c init_super1`, `add_internal_bitmap1`,
//!   `write_init_super1`.
//! - roles and device numbers: `Create.c`: device number = position in the device list
//!   (missing slots use a number too); missing slots keep role `0xffff` in every table.
//! - mdadm's resync shortcut ([`InitialSync::Mdadm`]): raid4/5 with every member present
//!   start with the last member as a spare, so md *recovers* it instead of resyncing
//!   parity (faster); raid6 with exactly one member missing does the same with one more
//!   member, because md refuses to start a dirty degraded raid6.
//! - events: 0 on 1.x (mdadm resets them before writing), 1 on 0.90 (`init_super0`);
//!   md bumps them when it starts the array.
//! - internal bitmap: version 4, chunk `max(64 MiB, smallest chunk that fits)`, daemon
//!   sleep 5 s, every bit set (mdadm writes the whole bitmap area as `0xff`, also with
//!   `--assume-clean`; md decides from `resync_offset` whether set bits need a resync).
//!
//! What differs from mdadm on purpose, each refused with an error instead of guessed:
//! - names longer than 31 bytes (mdadm accepts 32 and silently cuts to 31);
//! - a multi-zone raid0 on 0.90 metadata (0.90 cannot record the raid0 layout, and Linux
//!   refuses to assemble such an array without a module parameter);
//! - [`InitialSync::Resync`] on a raid6 with one member missing (md would not start it);
//! - `--size` on raid0/linear (md uses each member whole there).
//!
//! raid0 layout: mdadm 4.2 writes `layout = 1` (RAID0_ORIG_LAYOUT) for every 1.x raid0 and
//! sets the feature bit `RAID0_LAYOUT` only when the members differ in size (more than one
//! strip zone), which is when md reads the layout. On 0.90 uraid writes `layout = 0`.

use super::bitmap::{BitmapSuperblock, WriteIntentBits, BITMAP_SUPER_BYTES};
use super::sb090::{DiskDescriptor090, Superblock090, SB090_DISKS};
use super::sb1::{FeatureMap, MdTime, Superblock1, SB1_FIXED_BYTES, SB1_MAX_DEV_LIMIT};
use super::{sb090_offset_sectors, sb10_offset_sectors, DeviceRole, MetadataVersion, Superblock, MAX_SECTOR};
use crate::geometry::{ArraySpec, Geometry, GeometryError, Level};

use crate::geometry::SECTOR_BYTES;
const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// mdadm's default chunk for raid0/4/5/6/10 (`DEFAULT_CHUNK`).
pub const DEFAULT_CHUNK_BYTES: u32 = 512 * 1024;
/// mdadm's default raid5/raid6 layout: left-symmetric.
pub const DEFAULT_RAID5_LAYOUT: u32 = 2;
/// mdadm's default raid10 layout: two near copies (`n2`).
pub const DEFAULT_RAID10_LAYOUT: u32 = 0x102;
/// mdadm's default raid0 layout on 1.x (`RAID0_ORIG_LAYOUT`).
pub const DEFAULT_RAID0_LAYOUT: u32 = 1;
/// Longest array name uraid stores: `set_name` is 32 bytes and mdadm keeps one NUL.
pub const MAX_NAME_BYTES: usize = 31;
/// 0.90 holds 27 device descriptors.
pub const SB090_MAX_DEVICES: usize = SB090_DISKS;
/// 0.90 component size limit (mdadm on Linux >= 3.1: below 4 TiB, the size is a u32 KiB).
pub const SB090_MAX_COMPONENT_BYTES: u64 = 4 << 40;
/// mdadm's write-intent bitmap daemon sleep (`DEFAULT_BITMAP_DELAY`).
pub const DEFAULT_BITMAP_DAEMON_SLEEP_SECONDS: u32 = 5;
/// mdadm never picks a bitmap chunk below this when none is asked for.
pub const DEFAULT_BITMAP_CHUNK_BYTES_MIN: u64 = 64 * MIB;
/// mdadm auto-enables an internal bitmap above this component size; uraid only warns.
pub const MDADM_AUTO_BITMAP_COMPONENT_BYTES: u64 = 100 * 1024 * MIB;

const BITMAP_VERSION_LITTLE_ENDIAN: u32 = 4;
/// 0.90 bitmaps live in the 60 KiB after the 4 KiB superblock.
const SB090_BITMAP_AREA_BYTES: u64 = 60 * KIB;
/// 1.x bad-block log: 8 sectors (4 KiB, 512 entries).
const BBLOG_SECTORS: u16 = 8;

/// How the new array becomes consistent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialSync {
    /// What mdadm does without `--assume-clean`: raid1/6/10 resync from sector 0
    /// (`resync_offset` 0); raid4/5 with all members present start with the last member as
    /// a spare that md recovers; raid6 with one member missing also turns its last present
    /// member into a spare; degraded raid4/5/6 and raid0/linear are written clean.
    #[default]
    Mdadm,
    /// Every present member active, parity/mirrors resynced from sector 0 (mdadm
    /// `--force`). Refused for raid6 with one member missing: md cannot start it.
    Resync,
    /// `--assume-clean`: written clean, nothing is synced. Only right when the members are
    /// known to be consistent, e.g. all zero.
    AssumeClean,
}

/// A device that will receive a superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewDevice {
    pub size_bytes: u64,
    /// Written as the superblock's `device_uuid` (1.x only; 0.90 has none).
    pub device_uuid: [u8; 16],
}

/// An internal write-intent bitmap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BitmapRequest {
    /// Bytes of data per bit (`--bitmap-chunk`); `None` lets mdadm's rule choose.
    pub chunk_bytes: Option<u32>,
}

/// Everything `mdadm --create` is told, plus the values it would draw at random.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRequest {
    pub level: Level,
    /// md layout number; `None` = mdadm's default for the level.
    pub layout: Option<u32>,
    /// Chunk in bytes; `None` = 512 KiB for raid0/4/5/6/10, no rounding for linear.
    /// Refused for raid1.
    pub chunk_bytes: Option<u32>,
    pub metadata: MetadataVersion,
    /// Array name (`--name`); empty = the md minor, as mdadm does.
    pub name: String,
    /// `Some(host)` stores `host:name` as mdadm does; `None` stores the name as given.
    pub homehost: Option<String>,
    pub bitmap: Option<BitmapRequest>,
    pub initial_sync: InitialSync,
    /// Per-member size to use (`--size`), in bytes; a multiple of 1 KiB. `None` = the
    /// largest that fits on the smallest member.
    pub size_bytes: Option<u64>,
    /// One entry per raid slot, in slot order; `None` is mdadm's `missing`.
    pub members: Vec<Option<NewDevice>>,
    /// Hot spares (`--spare-devices`), after the members in device-number order.
    pub spares: Vec<NewDevice>,
    pub array_uuid: [u8; 16],
    /// Creation time; mdadm records whole seconds. Also the first update time.
    pub ctime: MdTime,
    /// Preferred md minor, written by 0.90 and used as the name when `name` is empty.
    pub md_minor: u32,
}

impl CreateRequest {
    /// A request with mdadm's defaults: metadata 1.2, default layout and chunk, no bitmap,
    /// no homehost, no spares.
    pub fn new(level: Level, name: impl Into<String>, members: Vec<Option<NewDevice>>, array_uuid: [u8; 16], ctime: MdTime) -> Self {
        Self {
            level,
            layout: None,
            chunk_bytes: None,
            metadata: MetadataVersion::V1_2,
            name: name.into(),
            homehost: None,
            bitmap: None,
            initial_sync: InitialSync::Mdadm,
            size_bytes: None,
            members,
            spares: Vec::new(),
            array_uuid,
            ctime,
            md_minor: 0,
        }
    }
}

/// Which device of the request a planned device is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceRef {
    /// `members[index]` (the raid slot it was asked for).
    Member(usize),
    /// `spares[index]`.
    Spare(usize),
}

impl std::fmt::Display for DeviceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Member(index) => write!(f, "member {index}"),
            Self::Spare(index) => write!(f, "spare {index}"),
        }
    }
}

/// Why a create request is refused. Messages say what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CreateError {
    #[error("{level} needs at least {minimum} raid devices, got {raid_devices}")]
    TooFewDevices { level: Level, raid_devices: usize, minimum: usize },
    #[error("{metadata} metadata holds at most {maximum} devices, got {devices} (use metadata 1.2 for more)")]
    TooManyDevices { metadata: MetadataVersion, devices: usize, maximum: usize },
    #[error("every member is missing: give at least one real device")]
    AllMissing,
    #[error("{level} cannot be created with missing members (it has no redundancy)")]
    MissingNotSupported { level: Level },
    #[error("{level} can lose at most {tolerated} members, but {missing} are missing")]
    TooManyMissing { level: Level, missing: usize, tolerated: usize },
    #[error("raid10 slots {slots:?} are all missing and hold every copy of some data; replace one of them with a real device")]
    Raid10CopiesMissing { slots: Vec<usize> },
    #[error("{level} has no use for spare devices; drop the spares or choose a redundant level")]
    SparesNotSupported { level: Level },
    #[error("{level} has no chunk size; leave the chunk unset")]
    ChunkNotAllowed { level: Level },
    #[error("chunk of {chunk_bytes} bytes is not valid: it must be a power of two of at least 4 KiB (e.g. 64K, 512K)")]
    BadChunk { chunk_bytes: u32 },
    // The reason is the source, which error reports print after this (no repeat here).
    #[error("layout {layout:#x} is not valid for {level}")]
    BadLayout { level: Level, layout: u32, source: GeometryError },
    #[error("{level} has no layout; leave it unset")]
    LayoutNotAllowed { level: Level },
    #[error("name {name:?} is {len} bytes; at most {max} fit (md stores 32 bytes, mdadm keeps a NUL)")]
    NameTooLong { name: String, len: usize, max: usize },
    #[error("name {name:?} contains a NUL byte")]
    NameHasNul { name: String },
    #[error("{device} has {size_bytes} bytes; {level} with {metadata} metadata needs at least {minimum_bytes} bytes ({reason})")]
    DeviceTooSmall { device: DeviceRef, size_bytes: u64, minimum_bytes: u64, level: Level, metadata: MetadataVersion, reason: &'static str },
    #[error("{level} uses every member whole; --size is not meaningful")]
    SizeNotAllowed { level: Level },
    #[error("size {size_bytes} bytes is not a whole number of KiB")]
    SizeNotKib { size_bytes: u64 },
    #[error("size {size_bytes} bytes is smaller than one chunk ({chunk_bytes} bytes)")]
    SizeBelowChunk { size_bytes: u64, chunk_bytes: u64 },
    #[error("{device} can hold {usable_bytes} bytes of data, less than the requested size {size_bytes} bytes")]
    DeviceSmallerThanSize { device: DeviceRef, usable_bytes: u64, size_bytes: u64 },
    #[error("0.90 metadata cannot describe a component of {size_bytes} bytes (limit: below {limit_bytes}); use metadata 1.2 or a smaller --size")]
    Sb090ComponentTooLarge { size_bytes: u64, limit_bytes: u64 },
    #[error("raid0 members of different sizes need a layout that 0.90 metadata cannot record; use metadata 1.2 or same-size members")]
    Sb090MultiZoneRaid0,
    #[error("{level} has no redundancy to resync; a write-intent bitmap is not meaningful")]
    BitmapNotAllowed { level: Level },
    #[error("bitmap chunk {chunk_bytes} bytes is not valid: it must be a power of two of at least {minimum_bytes} bytes for this size")]
    BadBitmapChunk { chunk_bytes: u32, minimum_bytes: u64 },
    #[error("raid6 with one member missing cannot start dirty; use the mdadm default or --assume-clean")]
    DirtyDegradedRaid6,
    #[error("the array would have no capacity: {0}")]
    Geometry(GeometryError),
}

/// Things mdadm would print and ask about, but that are not wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateWarning {
    /// The largest member is more than 1% bigger than the component size (space unused).
    LargestMemberExceedsSize { device: DeviceRef, usable_bytes: u64, component_bytes: u64 },
    /// mdadm 4.2 would add an internal bitmap automatically (component above 100 GiB).
    MdadmWouldAddBitmap,
}

/// The internal bitmap of one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedBitmap {
    /// Byte offset on the member of the bitmap superblock.
    pub offset_bytes: u64,
    pub superblock: BitmapSuperblock,
    pub bits: WriteIntentBits,
    /// Bytes mdadm writes there: the superblock, then `0xff` to a 4 KiB boundary (1.x) or
    /// through the 60 KiB 0.90 bitmap area.
    pub area_bytes: u64,
}

impl PlannedBitmap {
    /// Exactly the bytes mdadm writes at [`Self::offset_bytes`].
    pub fn encode(&self) -> Vec<u8> {
        let len = usize::try_from(self.area_bytes).unwrap_or(usize::MAX);
        let mut bytes = vec![0xff; len.max(BITMAP_SUPER_BYTES)];
        bytes[..BITMAP_SUPER_BYTES].copy_from_slice(&self.superblock.encode());
        let bits = self.bits.encode();
        let end = (BITMAP_SUPER_BYTES + bits.len()).min(bytes.len());
        bytes[BITMAP_SUPER_BYTES..end].copy_from_slice(&bits[..end - BITMAP_SUPER_BYTES]);
        bytes
    }
}

/// What to write on one present device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedDevice {
    pub device: DeviceRef,
    /// Permanent device number (1.x `dev_number`, 0.90 descriptor number).
    pub dev_number: u32,
    pub role: DeviceRole,
    /// With the checksum already computed.
    pub superblock: Superblock,
    pub superblock_offset_bytes: u64,
    pub data_offset_sectors: u64,
    /// Sectors from `data_offset` md may use (1.x `data_size`; 0.90: up to the superblock).
    pub data_size_sectors: u64,
    pub bitmap: Option<PlannedBitmap>,
}

impl PlannedDevice {
    /// The superblock bytes to write at [`Self::superblock_offset_bytes`]: whole sectors
    /// (1.x `256 + 2*max_dev` is a multiple of 512 as mdadm sizes it; 0.90 is 4 KiB).
    pub fn superblock_bytes(&self) -> Vec<u8> {
        let mut bytes = self.superblock.encode();
        let padded = bytes.len().div_ceil(SECTOR_BYTES as usize) * SECTOR_BYTES as usize;
        // mdadm fills unused role slots with 0xff; only reached if max_dev were odd-sized.
        bytes.resize(padded, 0xff);
        bytes
    }
}

/// The whole plan: array-wide numbers and one entry per present device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePlan {
    pub level: Level,
    pub metadata: MetadataVersion,
    pub layout: u32,
    /// 0 for raid1 and for linear without rounding.
    pub chunk_sectors: u32,
    pub raid_disks: u32,
    /// md `size`: sectors of each member used (0 for raid0/linear).
    pub component_size_sectors: u64,
    pub array_size_sectors: u64,
    pub geometry: Geometry,
    /// md starts a resync from sector 0 after assembly.
    pub needs_resync: bool,
    /// md starts recovering these slots onto spares after assembly (mdadm's shortcut).
    pub recovering_slots: Vec<u32>,
    /// In request order: present members, then spares.
    pub devices: Vec<PlannedDevice>,
    pub warnings: Vec<CreateWarning>,
}

/// One entry of mdadm's device list: `members` (with `missing`), then `spares`.
#[derive(Debug, Clone, Copy)]
struct ListEntry {
    device: DeviceRef,
    new: Option<NewDevice>,
}

/// Plans `mdadm --create` for `request`. Pure: nothing is written.
pub fn plan_create(request: &CreateRequest) -> Result<CreatePlan, CreateError> {
    let level = request.level;
    let metadata = request.metadata;
    let raid_devices = request.members.len();
    check_counts(request)?;
    let set_name = set_name(request)?;
    let layout = choose_layout(request)?;
    let chunk_sectors = choose_chunk_sectors(request)?;
    if request.bitmap.is_some() && !level.has_redundancy() {
        return Err(CreateError::BitmapNotAllowed { level });
    }

    let list: Vec<ListEntry> = request
        .members
        .iter()
        .enumerate()
        .map(|(index, new)| ListEntry { device: DeviceRef::Member(index), new: *new })
        .chain(request.spares.iter().enumerate().map(|(index, new)| ListEntry { device: DeviceRef::Spare(index), new: Some(*new) }))
        .collect();
    let Some(first_present) = list.iter().find_map(|entry| entry.new) else {
        return Err(CreateError::AllMissing);
    };

    // 1.1/1.2: mdadm picks the data offset from the first device it validates.
    let data_offset_sectors = match metadata {
        MetadataVersion::V1_1 | MetadataVersion::V1_2 => {
            default_data_offset_sectors(first_present.size_bytes / SECTOR_BYTES, chunk_sectors)
        }
        MetadataVersion::V1_0 | MetadataVersion::V0_90 => 0,
    };

    let size_kib = component_size_kib(request, &list, chunk_sectors, data_offset_sectors)?;
    let component_size_sectors = size_kib * 2;
    if metadata == MetadataVersion::V0_90 && level.has_redundancy() && component_size_sectors * SECTOR_BYTES >= SB090_MAX_COMPONENT_BYTES {
        return Err(CreateError::Sb090ComponentTooLarge {
            size_bytes: component_size_sectors * SECTOR_BYTES,
            limit_bytes: SB090_MAX_COMPONENT_BYTES,
        });
    }

    let roles = assign_roles(request, &list)?;
    let recovering_slots: Vec<u32> = roles.shortcut_slot.into_iter().collect();
    let clean = match request.initial_sync {
        InitialSync::AssumeClean => true,
        _ if !level.has_redundancy() => true,
        // mdadm: "clean, but one+ drive will be missing": a degraded parity array (or one
        // made degraded by the shortcut) cannot resync; recovery makes it consistent.
        _ => roles.degraded_parity,
    };
    let needs_resync = !clean;

    // raid0 members whose sizes differ in whole chunks make several strip zones, and md
    // then needs the layout recorded (mdadm compares device bytes / chunk sectors).
    let sizes_differ = level == Level::Raid0 && {
        let first = first_present.size_bytes / u64::from(chunk_sectors.max(1));
        list.iter().filter_map(|entry| entry.new).any(|new| new.size_bytes / u64::from(chunk_sectors.max(1)) != first)
    };
    if sizes_differ && metadata == MetadataVersion::V0_90 {
        return Err(CreateError::Sb090MultiZoneRaid0);
    }
    let raid0_multizone = sizes_differ && layout != 0;

    // The array, as md will see it.
    let member_data_sectors: Vec<u64> = match level {
        Level::Linear | Level::Raid0 => request
            .members
            .iter()
            .map(|new| {
                let size = new.map_or(0, |new| new.size_bytes / SECTOR_BYTES);
                member_data_size_sectors(metadata, size, data_offset_sectors, 0)
            })
            .collect(),
        _ => vec![component_size_sectors; raid_devices],
    };
    let geometry =
        Geometry::new(&ArraySpec { level, layout, chunk_sectors, raid_disks: raid_devices, member_sectors: member_data_sectors }).map_err(
            |source| match source {
                GeometryError::UnsupportedLayout { .. } | GeometryError::Raid10Copies { .. } => {
                    CreateError::BadLayout { level, layout, source }
                }
                other => CreateError::Geometry(other),
            },
        )?;
    if level == Level::Raid10 {
        check_raid10_copies(&geometry, request)?;
    }

    // Bitmap sync range: per-member size, except raid10 where it is the array capacity
    // (mdadm: size * raid_disks / copies, computed in KiB).
    let bitmap_sync_sectors = if level == Level::Raid10 {
        let copies = u64::from((layout & 0xff) * ((layout >> 8) & 0xff)).max(1);
        size_kib * raid_devices as u64 / copies * 2
    } else {
        component_size_sectors
    };
    let bitmap_layout = match request.bitmap {
        Some(bitmap) => Some(plan_bitmap_layout(metadata, bitmap, component_size_sectors, bitmap_sync_sectors)?),
        None => None,
    };

    let shared = SharedFields {
        request,
        set_name,
        layout,
        chunk_sectors,
        component_size_sectors,
        data_offset_sectors,
        resync_offset: if clean { MAX_SECTOR } else { 0 },
        feature_map: {
            let mut bits = 0;
            if bitmap_layout.is_some() {
                bits |= FeatureMap::BITMAP_OFFSET;
            }
            if raid0_multizone {
                bits |= FeatureMap::RAID0_LAYOUT;
            }
            FeatureMap(bits)
        },
        bitmap_layout,
        roles: &roles,
    };
    let mut devices = Vec::with_capacity(roles.assigned.len());
    for assigned in &roles.assigned {
        devices.push(match metadata {
            MetadataVersion::V0_90 => plan_device_090(&shared, assigned, clean),
            _ => plan_device_1x(&shared, assigned),
        });
    }

    let mut warnings = Vec::new();
    let component_bytes = component_size_sectors * SECTOR_BYTES;
    if level.has_redundancy() {
        if let Some((device, usable_bytes)) = list
            .iter()
            .filter_map(|entry| {
                let new = entry.new?;
                Some((entry.device, usable_kib(metadata, new.size_bytes, data_offset_sectors) * KIB))
            })
            .max_by_key(|(_, usable)| *usable)
        {
            if (usable_bytes - component_bytes.min(usable_bytes)) * 100 > usable_bytes {
                warnings.push(CreateWarning::LargestMemberExceedsSize { device, usable_bytes, component_bytes });
            }
        }
        if request.bitmap.is_none() && component_bytes > MDADM_AUTO_BITMAP_COMPONENT_BYTES {
            warnings.push(CreateWarning::MdadmWouldAddBitmap);
        }
    }

    Ok(CreatePlan {
        level,
        metadata,
        layout,
        chunk_sectors,
        raid_disks: raid_devices as u32,
        component_size_sectors,
        array_size_sectors: geometry.array_sectors(),
        geometry,
        needs_resync,
        recovering_slots,
        devices,
        warnings,
    })
}

fn check_counts(request: &CreateRequest) -> Result<(), CreateError> {
    let level = request.level;
    let raid_devices = request.members.len();
    let minimum = match level {
        Level::Linear | Level::Raid0 | Level::Raid1 => 1,
        Level::Raid4 | Level::Raid5 | Level::Raid10 => 2,
        Level::Raid6 => 4,
    };
    if raid_devices < minimum {
        return Err(CreateError::TooFewDevices { level, raid_devices, minimum });
    }
    let devices = raid_devices + request.spares.len();
    let maximum = match request.metadata {
        MetadataVersion::V0_90 => SB090_MAX_DEVICES,
        _ => SB1_MAX_DEV_LIMIT as usize,
    };
    if devices > maximum {
        return Err(CreateError::TooManyDevices { metadata: request.metadata, devices, maximum });
    }
    if request.members.iter().all(Option::is_none) {
        return Err(CreateError::AllMissing);
    }
    let missing = request.members.iter().filter(|m| m.is_none()).count();
    let tolerated = match level {
        Level::Linear | Level::Raid0 => 0,
        Level::Raid1 => raid_devices - 1,
        Level::Raid4 | Level::Raid5 => 1,
        Level::Raid6 => 2,
        // Checked against the copies once the geometry is known.
        Level::Raid10 => raid_devices - 1,
    };
    if missing > 0 && tolerated == 0 {
        return Err(CreateError::MissingNotSupported { level });
    }
    if missing > tolerated {
        return Err(CreateError::TooManyMissing { level, missing, tolerated });
    }
    if !request.spares.is_empty() && !level.has_redundancy() {
        return Err(CreateError::SparesNotSupported { level });
    }
    Ok(())
}

fn set_name(request: &CreateRequest) -> Result<[u8; 32], CreateError> {
    let name = if request.name.is_empty() { request.md_minor.to_string() } else { request.name.clone() };
    if name.as_bytes().contains(&0) {
        return Err(CreateError::NameHasNul { name });
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(CreateError::NameTooLong { len: name.len(), name, max: MAX_NAME_BYTES });
    }
    // mdadm init_super1: "host:name" when the name has no host part and it fits.
    let stored = match &request.homehost {
        Some(host) if !name.contains(':') && host.len() + 1 + name.len() < 32 => {
            format!("{host}:{name}")
        }
        _ => name,
    };
    let mut bytes = [0u8; 32];
    bytes[..stored.len()].copy_from_slice(stored.as_bytes());
    Ok(bytes)
}

fn choose_layout(request: &CreateRequest) -> Result<u32, CreateError> {
    let level = request.level;
    match (level, request.layout) {
        (Level::Raid5 | Level::Raid6, None) => Ok(DEFAULT_RAID5_LAYOUT),
        (Level::Raid10, None) => Ok(DEFAULT_RAID10_LAYOUT),
        (Level::Raid0, None) if request.metadata == MetadataVersion::V0_90 => Ok(0),
        (Level::Raid0, None) => Ok(DEFAULT_RAID0_LAYOUT),
        (Level::Raid0, Some(layout)) if request.metadata == MetadataVersion::V0_90 => Err(CreateError::BadLayout {
            level,
            layout,
            source: GeometryError::UnsupportedLayout { level, layout, reason: "0.90 metadata does not record a raid0 layout" },
        }),
        (Level::Raid0, Some(layout)) if layout > 2 => Err(CreateError::BadLayout {
            level,
            layout,
            source: GeometryError::UnsupportedLayout { level, layout, reason: "raid0 layouts are 1 (original) and 2 (alt-multizone)" },
        }),
        (Level::Linear | Level::Raid1 | Level::Raid4, None) => Ok(0),
        (Level::Linear | Level::Raid1 | Level::Raid4, Some(0)) => Ok(0),
        (Level::Linear | Level::Raid1 | Level::Raid4, Some(_)) => Err(CreateError::LayoutNotAllowed { level }),
        (_, Some(layout)) => Ok(layout),
    }
}

fn choose_chunk_sectors(request: &CreateRequest) -> Result<u32, CreateError> {
    let level = request.level;
    let chunk_bytes = match (level, request.chunk_bytes) {
        (Level::Raid1, None | Some(0)) => return Ok(0),
        (Level::Raid1, Some(_)) => return Err(CreateError::ChunkNotAllowed { level }),
        (Level::Linear, None | Some(0)) => return Ok(0),
        (_, None | Some(0)) => DEFAULT_CHUNK_BYTES,
        (_, Some(chunk)) => chunk,
    };
    if chunk_bytes < 4096 || !chunk_bytes.is_power_of_two() {
        return Err(CreateError::BadChunk { chunk_bytes });
    }
    Ok(chunk_bytes / SECTOR_BYTES as u32)
}

/// mdadm `choose_bm_space`: sectors reserved for a bitmap on a device (or component) of
/// `sectors`: 4 KiB, 64 KiB above 8 GiB, 128 KiB above 200 GiB.
fn choose_bm_space_sectors(sectors: u64) -> u64 {
    if sectors < 64 * 2 {
        0
    } else if sectors - 64 * 2 >= 200 * 1024 * 1024 * 2 {
        128 * 2
    } else if sectors - 4 * 2 > 8 * 1024 * 1024 * 2 {
        64 * 2
    } else {
        4 * 2
    }
}

/// mdadm `validate_geometry1` default data offset for 1.1/1.2 on a device of
/// `dev_sectors`: superblock + bitmap space + reshape headroom, rounded up to 1 MiB.
pub fn default_data_offset_sectors(dev_sectors: u64, chunk_sectors: u32) -> u64 {
    let chunk = u64::from(chunk_sectors);
    // Headroom lets a later reshape move data without a backup file: aim for ~0.1% of
    // the device, at most 128 MiB, but keep two chunks (the minimum a reshape needs).
    let mut headroom: u64 = 128 * 1024 * 2;
    while (headroom << 10) > dev_sectors && (chunk == 0 || headroom / 2 >= chunk * 2) {
        headroom >>= 1;
    }
    let offset = 12 * 2 + choose_bm_space_sectors(dev_sectors) + headroom;
    offset.div_ceil(2048) * 2048
}

/// KiB of a device mdadm counts as free for data (`validate_geometry*` freesize).
fn usable_kib(metadata: MetadataVersion, size_bytes: u64, data_offset_sectors: u64) -> u64 {
    let sectors = size_bytes / SECTOR_BYTES;
    let free_sectors = match metadata {
        MetadataVersion::V0_90 => sb090_offset_sectors(size_bytes).unwrap_or(0),
        MetadataVersion::V1_0 => {
            let overhead = 8 * 2 + 8 + choose_bm_space_sectors(sectors);
            (sectors & !7).saturating_sub(overhead)
        }
        MetadataVersion::V1_1 | MetadataVersion::V1_2 => sectors.saturating_sub(data_offset_sectors),
    };
    free_sectors / 2
}

/// Smallest device (bytes) that leaves `unit_kib` of data, for error messages.
fn minimum_device_bytes(metadata: MetadataVersion, unit_kib: u64, data_offset_sectors: u64) -> u64 {
    let unit_sectors = unit_kib * 2;
    let sectors = match metadata {
        // Data ends at the 64 KiB-aligned superblock, which takes the last 64 KiB.
        MetadataVersion::V0_90 => unit_sectors.div_ceil(128) * 128 + 128,
        // Superblock 8 KiB from the end, 4 KiB bad-block log, 4 KiB bitmap space.
        MetadataVersion::V1_0 => (unit_sectors + 8 * 2 + 8 + 8).div_ceil(8) * 8,
        MetadataVersion::V1_1 | MetadataVersion::V1_2 => data_offset_sectors + unit_sectors,
    };
    sectors * SECTOR_BYTES
}

/// mdadm `Create.c`: the per-member size in KiB written as `size` (0 for raid0/linear).
fn component_size_kib(
    request: &CreateRequest,
    list: &[ListEntry],
    chunk_sectors: u32,
    data_offset_sectors: u64,
) -> Result<u64, CreateError> {
    let level = request.level;
    let metadata = request.metadata;
    let chunk_kib = u64::from(chunk_sectors) / 2;
    let round_kib = |kib: u64| if chunk_kib > 0 { kib - kib % chunk_kib } else { kib };
    // The smallest amount of data a member must hold: one chunk, raid1's 64 KiB rounding,
    // or 1 KiB for linear without rounding.
    let unit_kib = match level {
        Level::Raid1 => 64,
        _ if chunk_kib > 0 => chunk_kib,
        _ => 1,
    };
    let requested_kib = match request.size_bytes {
        None | Some(0) => None,
        Some(_) if !level.has_redundancy() => return Err(CreateError::SizeNotAllowed { level }),
        Some(size_bytes) if size_bytes % KIB != 0 => return Err(CreateError::SizeNotKib { size_bytes }),
        Some(size_bytes) => {
            let kib = round_kib(size_bytes / KIB);
            if kib == 0 {
                return Err(CreateError::SizeBelowChunk { size_bytes, chunk_bytes: chunk_kib * KIB });
            }
            Some(kib)
        }
    };

    let mut minimum_kib: Option<u64> = None;
    for entry in list {
        let Some(new) = entry.new else { continue };
        let usable = round_kib(usable_kib(metadata, new.size_bytes, data_offset_sectors));
        let usable_for_level = if level == Level::Raid1 { usable & !63 } else { usable };
        if usable_for_level == 0 || new.size_bytes / SECTOR_BYTES < 24 {
            return Err(CreateError::DeviceTooSmall {
                device: entry.device,
                size_bytes: new.size_bytes,
                minimum_bytes: minimum_device_bytes(metadata, unit_kib, data_offset_sectors),
                level,
                metadata,
                reason: match level {
                    Level::Raid1 => "metadata plus 64 KiB of data",
                    Level::Linear => "metadata plus 1 KiB of data",
                    _ => "metadata plus one chunk of data",
                },
            });
        }
        if let Some(size_kib) = requested_kib {
            if usable < size_kib {
                return Err(CreateError::DeviceSmallerThanSize {
                    device: entry.device,
                    usable_bytes: usable * KIB,
                    size_bytes: size_kib * KIB,
                });
            }
        }
        minimum_kib = Some(minimum_kib.map_or(usable, |m| m.min(usable)));
    }
    if !level.has_redundancy() {
        return Ok(0);
    }
    Ok(match requested_kib {
        Some(kib) => kib,
        // raid1 is rounded to 64 KiB so a later reshape to raid5 has whole chunks.
        None if level == Level::Raid1 => minimum_kib.unwrap_or(0) & !63,
        None => minimum_kib.unwrap_or(0),
    })
}

/// Device numbers and roles, as mdadm's two-pass loop in `Create.c` assigns them.
struct Roles {
    assigned: Vec<AssignedDevice>,
    /// `dev_roles` of every 1.x superblock (`max_dev` entries).
    table: Vec<u16>,
    /// 0.90 counters.
    active_disks: u32,
    working_disks: u32,
    failed_disks: u32,
    spare_disks: u32,
    /// The array starts degraded (missing members, or mdadm's shortcut).
    degraded_parity: bool,
    /// The slot left empty by mdadm's shortcut, recovered onto a spare.
    shortcut_slot: Option<u32>,
}

#[derive(Clone, Copy)]
struct AssignedDevice {
    entry: ListEntry,
    new: NewDevice,
    dev_number: u32,
    /// mdadm `raid_disk` (a slot, or >= raid_disks for a spare).
    raid_disk: u32,
    role: DeviceRole,
}

fn assign_roles(request: &CreateRequest, list: &[ListEntry]) -> Result<Roles, CreateError> {
    let level = request.level;
    let raid_disks = request.members.len();
    let missing: Vec<usize> = request.members.iter().enumerate().filter(|(_, m)| m.is_none()).map(|(i, _)| i).collect();
    let present_members = raid_disks - missing.len();
    let mut spare_disks = request.spares.len();
    let mut active_disks = present_members;
    let mut failed_disks = missing.len();

    let mdadm = request.initial_sync == InitialSync::Mdadm;
    // The slot whose device mdadm moves to the end of the list as a spare.
    let insert_point = match level {
        Level::Raid4 | Level::Raid5 if mdadm && missing.is_empty() => Some(raid_disks - 1),
        Level::Raid6 if missing.len() == 1 => {
            if !mdadm {
                if request.initial_sync == InitialSync::Resync {
                    return Err(CreateError::DirtyDegradedRaid6);
                }
                None
            } else {
                let last = raid_disks - 1;
                Some(if missing[0] == last { last - 1 } else { last })
            }
        }
        _ => None,
    };
    if insert_point.is_some() {
        spare_disks += 1;
        active_disks -= 1;
        failed_disks += 1;
    }
    let degraded_parity = match level {
        Level::Raid4 | Level::Raid5 => insert_point.is_some() || !missing.is_empty(),
        Level::Raid6 => insert_point.is_some() || missing.len() >= 2,
        _ => false,
    };

    let mut assigned = Vec::with_capacity(list.len());
    let mut raid_disk_num = 0u32;
    let mut moved: Option<ListEntry> = None;
    let mut dnum = 0u32;
    let mut process = |entry: ListEntry, dnum: u32, raid_disk_num: &mut u32| {
        let Some(new) = entry.new else {
            *raid_disk_num += 1;
            return;
        };
        let raid_disk = *raid_disk_num;
        *raid_disk_num += 1;
        let role = if (raid_disk as usize) < raid_disks { DeviceRole::Active(raid_disk) } else { DeviceRole::Spare };
        assigned.push(AssignedDevice { entry, new, dev_number: dnum, raid_disk, role });
    };
    for entry in list {
        if insert_point == Some(dnum as usize) {
            raid_disk_num += 1;
            moved = Some(*entry);
            dnum += 1;
            continue;
        }
        process(*entry, dnum, &mut raid_disk_num);
        dnum += 1;
    }
    if let Some(entry) = moved {
        process(entry, dnum, &mut raid_disk_num);
    }
    // Keep request order (members, then spares) in the plan; numbers stay as assigned.
    assigned.sort_by_key(|a| match a.entry.device {
        DeviceRef::Member(i) => (0, i),
        DeviceRef::Spare(i) => (1, i),
    });

    // mdadm init_super1: room for every device in whole 512-byte sectors, unused 0xffff.
    let devices = raid_disks + spare_disks;
    let sb_bytes = (SB1_FIXED_BYTES + 2 * devices).div_ceil(512) * 512;
    let mut max_dev = (sb_bytes - SB1_FIXED_BYTES) / 2;
    for device in &assigned {
        // add_to_super1 grows the table if a number does not fit.
        if device.dev_number as usize >= max_dev && max_dev < SB1_MAX_DEV_LIMIT as usize {
            max_dev = device.dev_number as usize + 1;
        }
    }
    let mut table = vec![DeviceRole::SPARE_RAW; max_dev];
    for device in &assigned {
        if let (DeviceRole::Active(slot), Some(entry)) = (device.role, table.get_mut(device.dev_number as usize)) {
            *entry = slot as u16;
        }
    }

    Ok(Roles {
        assigned,
        table,
        active_disks: active_disks as u32,
        working_disks: (present_members + request.spares.len()) as u32,
        failed_disks: failed_disks as u32,
        spare_disks: spare_disks as u32,
        degraded_parity,
        shortcut_slot: insert_point.map(|slot| slot as u32),
    })
}

/// Refuses a raid10 whose missing members hold every copy of some chunk.
fn check_raid10_copies(geometry: &Geometry, request: &CreateRequest) -> Result<(), CreateError> {
    let Some(chunk) = geometry.chunk_sectors() else { return Ok(()) };
    let raid_disks = request.members.len() as u64;
    // The copy pattern repeats within raid_disks * copies chunks; look at a few cycles.
    let chunks = (geometry.array_sectors() / chunk.max(1)).min(raid_disks * raid_disks * 4);
    for index in 0..chunks {
        let Ok(piece) = geometry.locate(index * chunk) else { continue };
        if let crate::geometry::Placement::Mirrored(copies) = piece.placement {
            if copies.iter().all(|copy| request.members.get(copy.role).is_some_and(Option::is_none)) {
                let mut slots: Vec<usize> = copies.iter().map(|copy| copy.role).collect();
                slots.sort_unstable();
                slots.dedup();
                return Err(CreateError::Raid10CopiesMissing { slots });
            }
        }
    }
    Ok(())
}

/// Bitmap parameters shared by every member.
#[derive(Debug, Clone, Copy)]
struct BitmapLayout {
    chunk_bytes: u64,
    sync_sectors: u64,
    /// Signed sectors from the superblock (1.x).
    offset_sectors: i64,
}

impl BitmapLayout {
    fn chunk_count(&self) -> u64 {
        self.sync_sectors.div_ceil(self.chunk_bytes / SECTOR_BYTES)
    }

    /// mdadm `calc_bitmap_size(bms, 4096)` in sectors.
    fn space_sectors(&self) -> u64 {
        let bytes = self.chunk_count().div_ceil(8) + BITMAP_SUPER_BYTES as u64;
        bytes.div_ceil(4096) * 4096 / SECTOR_BYTES
    }
}

/// mdadm `add_internal_bitmap1` / `add_internal_bitmap0` at create time.
fn plan_bitmap_layout(
    metadata: MetadataVersion,
    request: BitmapRequest,
    component_size_sectors: u64,
    sync_sectors: u64,
) -> Result<BitmapLayout, CreateError> {
    // Sectors the bitmap may use: 1.x the space mdadm reserved for it; 0.90 60 KiB.
    let room_sectors = match metadata {
        MetadataVersion::V0_90 => SB090_BITMAP_AREA_BYTES / SECTOR_BYTES,
        _ => {
            let room = choose_bm_space_sectors(component_size_sectors);
            if request.chunk_bytes.is_none() {
                room.min(128 * 2)
            } else {
                room
            }
        }
    };
    if room_sectors <= 1 {
        return Err(CreateError::BadBitmapChunk { chunk_bytes: 0, minimum_bytes: u64::MAX });
    }
    let max_bits = (room_sectors * SECTOR_BYTES - BITMAP_SUPER_BYTES as u64) * 8;
    let mut min_chunk: u64 = 4096;
    let mut bits = sync_sectors * SECTOR_BYTES / min_chunk + 1;
    while bits > max_bits {
        min_chunk *= 2;
        bits = bits.div_ceil(2);
    }
    let chunk_bytes = match request.chunk_bytes {
        None => min_chunk.max(DEFAULT_BITMAP_CHUNK_BYTES_MIN),
        Some(chunk) if u64::from(chunk) < min_chunk || !chunk.is_power_of_two() => {
            return Err(CreateError::BadBitmapChunk { chunk_bytes: chunk, minimum_bytes: min_chunk })
        }
        Some(chunk) => u64::from(chunk),
    };
    let offset_sectors = match metadata {
        MetadataVersion::V0_90 => 8,
        MetadataVersion::V1_1 | MetadataVersion::V1_2 => 8,
        // 1.0: before the superblock, after room for the bits and the bad-block log.
        MetadataVersion::V1_0 => {
            let bits = sync_sectors * SECTOR_BYTES / chunk_bytes + 1;
            let room = (bits.div_ceil(8) + BITMAP_SUPER_BYTES as u64).div_ceil(4096) * 8;
            -(room as i64) - i64::from(BBLOG_SECTORS)
        }
    };
    Ok(BitmapLayout { chunk_bytes, sync_sectors, offset_sectors })
}

struct SharedFields<'a> {
    request: &'a CreateRequest,
    set_name: [u8; 32],
    layout: u32,
    chunk_sectors: u32,
    component_size_sectors: u64,
    data_offset_sectors: u64,
    resync_offset: u64,
    feature_map: FeatureMap,
    bitmap_layout: Option<BitmapLayout>,
    roles: &'a Roles,
}

/// 1.x `data_size` (sectors) for a device of `dev_sectors`.
fn member_data_size_sectors(metadata: MetadataVersion, dev_sectors: u64, data_offset_sectors: u64, component_size_sectors: u64) -> u64 {
    match metadata {
        MetadataVersion::V0_90 => sb090_offset_sectors(dev_sectors * SECTOR_BYTES).unwrap_or(0),
        MetadataVersion::V1_0 => {
            let super_offset = sb10_offset_sectors(dev_sectors * SECTOR_BYTES).unwrap_or(0);
            let bm_space = choose_bm_space_sectors(component_size_sectors) + 8;
            super_offset - bm_space.min(super_offset.saturating_sub(component_size_sectors))
        }
        MetadataVersion::V1_1 | MetadataVersion::V1_2 => dev_sectors.saturating_sub(data_offset_sectors),
    }
}

fn bitmap_superblock(layout: &BitmapLayout, uuid: [u8; 16]) -> BitmapSuperblock {
    BitmapSuperblock {
        version: BITMAP_VERSION_LITTLE_ENDIAN,
        uuid,
        events: 0,
        events_cleared: 0,
        sync_size_sectors: layout.sync_sectors,
        state: 0,
        chunksize_bytes: u32::try_from(layout.chunk_bytes).unwrap_or(u32::MAX),
        daemon_sleep_seconds: DEFAULT_BITMAP_DAEMON_SLEEP_SECONDS,
        write_behind: 0,
        sectors_reserved: 0,
        nodes: 0,
        cluster_name: [0; 64],
        pad: [0; 120],
    }
}

fn plan_device_1x(shared: &SharedFields<'_>, device: &AssignedDevice) -> PlannedDevice {
    let request = shared.request;
    let metadata = request.metadata;
    let dev_sectors = device.new.size_bytes / SECTOR_BYTES;
    let component = shared.component_size_sectors;
    let data_offset = shared.data_offset_sectors;

    // write_init_super1: space between superblock and data for bitmap and bad-block log.
    let (bm_offset, bm_space) = match &shared.bitmap_layout {
        Some(bitmap) => (bitmap.offset_sectors, bitmap.space_sectors()),
        None => (8, choose_bm_space_sectors(component)),
    };
    let (super_offset, data_size, bblog_offset) = match metadata {
        MetadataVersion::V1_0 => {
            let super_offset = sb10_offset_sectors(device.new.size_bytes).unwrap_or(0);
            let mut space = bm_space + 8;
            if super_offset < component + space {
                space = super_offset.saturating_sub(component);
            }
            let bblog = (space >= 8).then_some(-8);
            (super_offset, super_offset - space, bblog)
        }
        _ => {
            let super_offset = if metadata == MetadataVersion::V1_2 { 8 } else { 0 };
            let bblog = if data_offset as i64 >= super_offset as i64 + bm_offset + bm_space as i64 + 8 {
                Some(bm_offset + bm_space as i64)
            } else if data_offset >= super_offset + 16 {
                Some(data_offset as i64 - 8 - super_offset as i64)
            } else {
                None
            };
            (super_offset, dev_sectors.saturating_sub(data_offset), bblog)
        }
    };

    let mut sb = Superblock1 {
        feature_map: shared.feature_map,
        pad0: 0,
        set_uuid: request.array_uuid,
        set_name: shared.set_name,
        ctime: request.ctime,
        level: request.level.to_md(),
        layout: shared.layout,
        size_sectors: component,
        chunksize_sectors: shared.chunk_sectors,
        raid_disks: request.members.len() as u32,
        bitmap_offset_raw: shared.bitmap_layout.map_or(0, |b| b.offset_sectors as i32 as u32),
        new_level: 0,
        reshape_position_sectors: 0,
        delta_disks: 0,
        new_layout: 0,
        new_chunk_sectors: 0,
        new_offset_sectors: 0,
        data_offset_sectors: data_offset,
        data_size_sectors: data_size,
        super_offset_sectors: super_offset,
        recovery_offset_raw: 0,
        dev_number: device.dev_number,
        cnt_corrected_read: 0,
        device_uuid: device.new.device_uuid,
        devflags: 0,
        bblog_shift: 0,
        bblog_size_sectors: if bblog_offset.is_some() { BBLOG_SECTORS } else { 0 },
        bblog_offset_sectors: bblog_offset.map_or(0, |o| o as i32),
        utime: request.ctime,
        events: 0,
        resync_offset_sectors: shared.resync_offset,
        sb_csum: 0,
        pad3: [0; 32],
        dev_roles: shared.roles.table.clone(),
    };
    sb.update_checksum();

    let superblock_offset_bytes = super_offset * SECTOR_BYTES;
    let bitmap = shared.bitmap_layout.map(|layout| {
        let superblock = bitmap_superblock(&layout, request.array_uuid);
        let bits = WriteIntentBits::all_dirty(&superblock);
        PlannedBitmap {
            offset_bytes: superblock_offset_bytes.saturating_add_signed(layout.offset_sectors * SECTOR_BYTES as i64),
            superblock,
            bits,
            area_bytes: layout.space_sectors() * SECTOR_BYTES,
        }
    });
    PlannedDevice {
        device: device.entry.device,
        dev_number: device.dev_number,
        role: device.role,
        superblock: Superblock::V1(sb),
        superblock_offset_bytes,
        data_offset_sectors: data_offset,
        data_size_sectors: data_size,
        bitmap,
    }
}

fn plan_device_090(shared: &SharedFields<'_>, device: &AssignedDevice, clean: bool) -> PlannedDevice {
    let request = shared.request;
    let roles = shared.roles;
    let mut disks: [DiskDescriptor090; SB090_DISKS] = std::array::from_fn(|_| DiskDescriptor090::empty());
    for assigned in &roles.assigned {
        if let Some(disk) = disks.get_mut(assigned.dev_number as usize) {
            disk.number = assigned.dev_number;
            disk.raid_disk = assigned.raid_disk;
            // Device major/minor are Linux device numbers, which uraid does not have; md
            // identifies members by descriptor number, not by these.
            disk.state = if matches!(assigned.role, DeviceRole::Active(_)) {
                DiskDescriptor090::STATE_ACTIVE | DiskDescriptor090::STATE_SYNC
            } else {
                0
            };
        }
    }
    let this_disk = disks.get(device.dev_number as usize).cloned().unwrap_or_else(DiskDescriptor090::empty);
    // 0.90 stores the uuid as four host-endian words printed with %08x; keep the bytes
    // reading the same as the 1.x uuid (see Superblock090::array_uuid).
    let word = |i: usize| {
        let bytes = &request.array_uuid[i * 4..i * 4 + 4];
        u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
    };
    let mut state = if clean { Superblock090::STATE_CLEAN } else { 0 };
    if shared.bitmap_layout.is_some() {
        state |= Superblock090::STATE_BITMAP_PRESENT;
    }
    let mut sb = Superblock090 {
        set_uuid: [word(0), word(1), word(2), word(3)],
        ctime: request.ctime.seconds() as u32,
        level: request.level.to_md(),
        size_kib: (shared.component_size_sectors / 2) as u32,
        nr_disks: roles.working_disks + roles.failed_disks,
        raid_disks: request.members.len() as u32,
        md_minor: request.md_minor,
        utime: request.ctime.seconds() as u32,
        state,
        active_disks: roles.active_disks,
        working_disks: roles.working_disks,
        failed_disks: roles.failed_disks,
        spare_disks: roles.spare_disks,
        events: 1,
        layout: shared.layout,
        chunk_size_bytes: shared.chunk_sectors * SECTOR_BYTES as u32,
        disks,
        this_disk,
        ..Superblock090::blank()
    };
    sb.update_checksum();
    let superblock_sector = sb090_offset_sectors(device.new.size_bytes).unwrap_or(0);
    let superblock_offset_bytes = superblock_sector * SECTOR_BYTES;
    let bitmap = shared.bitmap_layout.map(|layout| {
        let superblock = bitmap_superblock(&layout, request.array_uuid);
        let bits = WriteIntentBits::all_dirty(&superblock);
        PlannedBitmap { offset_bytes: superblock_offset_bytes + 4096, superblock, bits, area_bytes: SB090_BITMAP_AREA_BYTES }
    });
    PlannedDevice {
        device: device.entry.device,
        dev_number: device.dev_number,
        role: device.role,
        superblock: Superblock::V090(sb),
        superblock_offset_bytes,
        data_offset_sectors: 0,
        data_size_sectors: superblock_sector,
        bitmap,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_offset_matches_mdadm_examples() {
        // 16 MiB members (corpus): 1 MiB for 64K chunks and for chunkless levels, 2 MiB
        // for 512K chunks (two chunks of headroom).
        assert_eq!(default_data_offset_sectors(32768, 128), 2048);
        assert_eq!(default_data_offset_sectors(32768, 0), 2048);
        assert_eq!(default_data_offset_sectors(32768, 1024), 4096);
        // 1 TB disk: 128 MiB headroom + 128 KiB bitmap space -> the well-known 264192.
        assert_eq!(default_data_offset_sectors(1_953_525_168, 1024), 264_192);
    }

    #[test]
    fn bm_space_steps() {
        assert_eq!(choose_bm_space_sectors(100), 0);
        assert_eq!(choose_bm_space_sectors(30720), 8);
        assert_eq!(choose_bm_space_sectors(20 * 1024 * 1024 * 2), 128);
        assert_eq!(choose_bm_space_sectors(300 * 1024 * 1024 * 2), 256);
    }
}
