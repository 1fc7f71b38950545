//! Bounds on what a superblock may say, checked before anything is allocated or written.
//!
//! A superblock with a valid checksum is only as trustworthy as whoever wrote it: a crafted
//! or damaged one can ask for four billion devices, a data area past the end of any disk or
//! one that overlaps its own superblock. Every count, offset and size is checked here
//! against the device's size and against the limits Linux md itself enforces, so such a
//! superblock gets one clear sentence instead of a hang, a huge allocation, a panic or a
//! write outside the member's data area.
//!
//! Where each limit comes from (Linux `drivers/md/md.c` unless named otherwise):
//! - 1.x `raid_disks` and `dev_number` below 1920: `super_1_validate` sets
//!   `mddev->max_disks = (4096-256)/2`, and `bind_rdev_to_array` refuses a device number
//!   at or past it ("array is limited to %d devices"). `max_dev` has the same bound
//!   (`super_1_load`), checked by the decoder.
//! - 0.90 `raid_disks` in 1..=27 and this disk's `number` below 27: `super_90_load` refuses
//!   `raid_disks <= 0`, `super_90_validate` sets `max_disks = MD_SB_DISKS` (27).
//! - 0.90 minor version 90 or 91: `super_90_load` ("Bad version number").
//! - `data_size` at least 10 sectors: `super_1_load` ("data_size too small").
//! - 1.1/1.2 data after the superblock, 1.0 data before it, no overlap: `super_1_load`
//!   (`data_offset < sb_start + sb_size`) and `md_run` ("data overlaps metadata",
//!   "metadata overlaps data"). The superblock is given mdadm's `MAX_SB_SIZE`, 4 KiB: md
//!   reads that much and uraid rewrites the role table up to that size.
//! - data area within the device: `super_1_load` (`sectors < data_size`), and 0.90's
//!   component size below its superblock: `super_90_load` ("this cannot possibly happen").
//! - internal bitmap outside the data area and the superblock: `md-bitmap.c`
//!   `__write_sb_page` ("bitmap runs in to data", "data runs in to bitmap", "bitmap runs in
//!   to metadata"); 0.90's bitmap within the 60 KiB after its superblock
//!   (`super_90_validate`: `default_space = 64*2 - (MD_SB_BYTES >> 9)`).
//! - bad-block log at most 8 sectors: `super_1_load` (`sectors > PAGE_SIZE / 512`).
//! - partial parity log outside the data area: `raid5-ppl.c` `ppl_validate_rdev`.
//! - chunk size below 2 GiB: md reports it in bytes in `mdu_array_info_t.chunk_size`, a
//!   signed 32-bit int (and 0.90 stores it in bytes).
//! - offsets and sizes in bytes below 2^63: a device's size is a `loff_t`.
//! - event counts below 2^63: every update adds one, and `md_update_sb` treats a wrap of
//!   the 64-bit counter as a bug ("should never wrap").
//!
//! [`check_superblock`] looks at one superblock on its device; [`check_bitmap`] adds the
//! write-intent bitmap once its own superblock has been read: its length, and that it
//! covers the array (md sizes the bitmap from the array, not from its `sync_size`). A device
//! too small for the data area its superblock describes is reported as
//! [`SuperblockProblem::DeviceTooSmall`], always last, so a caller can treat a truncated
//! member (left out of the array, like mdadm does) apart from an impossible superblock.

use super::bitmap::{BitmapSuperblock, BITMAP_SUPER_BYTES};
use super::sb090::SB090_BYTES;
use super::sb1::{FeatureMap, SB1_MAX_BYTES};
use super::{sb090_offset_sectors, ArrayShape, Personality, Superblock, Superblock090, Superblock1, SECTOR_BYTES};
use crate::geometry::Level;

/// md's device limit for 1.x metadata: `(4096 - 256) / 2`.
pub const SB1_MAX_DISKS: u32 = ((SB1_MAX_BYTES - super::sb1::SB1_FIXED_BYTES) / 2) as u32;
/// md's device limit for 0.90 metadata (`MD_SB_DISKS`).
pub const SB090_MAX_DISKS: u32 = super::sb090::SB090_DISKS as u32;
/// md refuses a 1.x data area smaller than this.
pub const MIN_DATA_SECTORS: u64 = 10;
/// Sectors a 1.x superblock may take: mdadm's `MAX_SB_SIZE` (4 KiB).
pub const SB1_AREA_SECTORS: u64 = SB1_MAX_BYTES as u64 / SECTOR_BYTES;
/// Largest chunk md can describe: its size in bytes is a signed 32-bit int.
pub const MAX_CHUNK_BYTES: u64 = i32::MAX as u64;
/// Largest device any offset may point into (`loff_t`).
pub const MAX_DEVICE_BYTES: u64 = i64::MAX as u64;
/// Largest bad-block log md reads (one page).
pub const MAX_BBLOG_SECTORS: u16 = 8;
/// Largest event count accepted: every superblock update adds one, and md's own comment on
/// the counter is that it "should never wrap" (`md_update_sb`); a count past 2^63 is no
/// real history.
pub const MAX_EVENTS: u64 = i64::MAX as u64;
/// Room for a 0.90 write-intent bitmap (superblock and bits): the 60 KiB after the 4 KiB
/// superblock.
pub const SB090_BITMAP_MAX_BYTES: u64 = 60 * 1024;

/// Why a superblock cannot be used. Every message is one sentence naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SuperblockProblem {
    #[error("raid_disks is 0; an md array has at least one device")]
    NoRaidDisks,
    #[error("raid_disks {found} is more than md allows with {version} metadata ({limit})")]
    TooManyRaidDisks { found: u32, limit: u32, version: &'static str },
    #[error("device number {found} is not below md's limit of {limit} devices for {version} metadata")]
    DeviceNumberTooLarge { found: u32, limit: u32, version: &'static str },
    #[error("event count {0} is past 2^63: no array has had that many updates, and the next ones would wrap it")]
    EventsNearWrap(u64),
    #[error("0.90 minor version {0} is not one md reads (90 or 91)")]
    UnsupportedMinor090(u32),
    #[error("data_size of {0} sectors is below md's minimum of 10")]
    DataSizeTooSmall(u64),
    #[error("the data area (data_offset {data_offset} + data_size {data_size} sectors) ends beyond any possible device")]
    DataAreaUnaddressable { data_offset: u64, data_size: u64 },
    #[error("chunk size of {chunk_sectors} sectors is larger than md can describe (2 GiB)")]
    ChunkTooLarge { chunk_sectors: u64 },
    #[error("component size of {size} sectors does not fit in this member's data area of {data_size} sectors")]
    ComponentTooLarge { size: u64, data_size: u64 },
    #[error("the {what} (sectors {start}..{end}) overlaps the data area (sectors {data_start}..{data_end})")]
    OverlapsData { what: &'static str, start: u64, end: u64, data_start: u64, data_end: u64 },
    #[error("the {what} (sectors {start}..{end}) overlaps the superblock (sectors {sb_start}..{sb_end})")]
    OverlapsSuperblock { what: &'static str, start: u64, end: u64, sb_start: u64, sb_end: u64 },
    #[error("the {what} ({offset} sectors from the superblock, {len} long) lies outside the device ({dev_sectors} sectors)")]
    OutsideDevice { what: &'static str, offset: i64, len: u64, dev_sectors: u64 },
    #[error("bad-block log of {0} sectors is larger than md reads (8)")]
    BadBlockLogTooLarge(u16),
    #[error("the write-intent bitmap takes {0} bytes, more than the 60 KiB md leaves for it after a 0.90 superblock")]
    Bitmap090TooLarge(u64),
    #[error("the write-intent bitmap covers {covers} sectors, less than the array's {needed}")]
    BitmapTooShort { covers: u64, needed: u64 },
    #[error("device too small: {device_bytes} bytes, but its superblock's data area ends at byte {needed_bytes} (truncated?)")]
    DeviceTooSmall { needed_bytes: u64, device_bytes: u64 },
}

/// A run of sectors `start..end` on the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Area {
    start: u64,
    end: u64,
}

impl Area {
    fn overlaps(self, other: Area) -> bool {
        self.start < other.end && other.start < self.end
    }
}

fn md_version(sb: &Superblock) -> &'static str {
    match sb {
        Superblock::V090(_) => "0.90",
        Superblock::V1(_) => "1.x",
    }
}

/// Levels whose members each hold `size` sectors of the array (md's `dev_sectors`); raid0
/// and linear use every member's whole data area instead.
fn uses_component_size(level: i32) -> bool {
    !matches!(Personality::from_raw(level), Personality::Array(Level::Linear) | Personality::Array(Level::Raid0))
}

/// Checks one superblock found on a device of `dev_size_bytes`, against the device and
/// md's limits; see the module documentation for each rule. A 1.x superblock must already
/// be known to sit at its recorded `super_offset` (the decoders' callers check that).
pub fn check_superblock(sb: &Superblock, dev_size_bytes: u64) -> Result<(), SuperblockProblem> {
    let raid_disks = sb.raid_disks();
    let (limit, number) = match sb {
        Superblock::V090(s) => (SB090_MAX_DISKS, s.this_disk.number),
        Superblock::V1(s) => (SB1_MAX_DISKS, s.dev_number),
    };
    if raid_disks == 0 {
        return Err(SuperblockProblem::NoRaidDisks);
    }
    if raid_disks > limit {
        return Err(SuperblockProblem::TooManyRaidDisks { found: raid_disks, limit, version: md_version(sb) });
    }
    if number >= limit {
        return Err(SuperblockProblem::DeviceNumberTooLarge { found: number, limit, version: md_version(sb) });
    }
    if sb.events() > MAX_EVENTS {
        return Err(SuperblockProblem::EventsNearWrap(sb.events()));
    }
    match sb {
        Superblock::V090(s) => check_090(s, dev_size_bytes),
        Superblock::V1(s) => check_1(s, dev_size_bytes),
    }
}

fn check_chunk(chunk_bytes: u64) -> Result<(), SuperblockProblem> {
    if chunk_bytes > MAX_CHUNK_BYTES {
        return Err(SuperblockProblem::ChunkTooLarge { chunk_sectors: chunk_bytes / SECTOR_BYTES });
    }
    Ok(())
}

fn check_090(sb: &Superblock090, dev_size_bytes: u64) -> Result<(), SuperblockProblem> {
    if !(90..=91).contains(&sb.minor_version) {
        return Err(SuperblockProblem::UnsupportedMinor090(sb.minor_version));
    }
    check_chunk(u64::from(sb.chunk_size_bytes))?;
    // Found only where it fits; data is everything below it.
    let sb_start = sb090_offset_sectors(dev_size_bytes).unwrap_or(0);
    let size = u64::from(sb.size_kib) * 2;
    if uses_component_size(sb.level) && size > sb_start {
        return Err(SuperblockProblem::ComponentTooLarge { size, data_size: sb_start });
    }
    Ok(())
}

/// Sectors the superblock's encoded bytes take (md's `sb_size`, whole sectors).
fn sb1_sectors(sb: &Superblock1) -> u64 {
    (sb.encoded_len() as u64).div_ceil(SECTOR_BYTES)
}

/// A metadata area `offset..offset+len` sectors from the superblock: inside the device,
/// clear of the data area and of the superblock's own sectors.
fn check_area(what: &'static str, sb: &Superblock1, offset: i64, len: u64, data: Area, dev_sectors: u64) -> Result<(), SuperblockProblem> {
    let outside = SuperblockProblem::OutsideDevice { what, offset, len, dev_sectors };
    let start = sb.super_offset_sectors.checked_add_signed(offset).ok_or(outside.clone())?;
    let end = start.checked_add(len).filter(|end| *end <= dev_sectors).ok_or(outside)?;
    let area = Area { start, end };
    if area.overlaps(data) {
        return Err(SuperblockProblem::OverlapsData { what, start, end, data_start: data.start, data_end: data.end });
    }
    let sb_area = Area { start: sb.super_offset_sectors, end: sb.super_offset_sectors.saturating_add(sb1_sectors(sb)) };
    if area.overlaps(sb_area) {
        return Err(SuperblockProblem::OverlapsSuperblock { what, start, end, sb_start: sb_area.start, sb_end: sb_area.end });
    }
    Ok(())
}

fn check_1(sb: &Superblock1, dev_size_bytes: u64) -> Result<(), SuperblockProblem> {
    let dev_sectors = dev_size_bytes / SECTOR_BYTES;
    if sb.data_size_sectors < MIN_DATA_SECTORS {
        return Err(SuperblockProblem::DataSizeTooSmall(sb.data_size_sectors));
    }
    check_chunk(u64::from(sb.chunksize_sectors) * SECTOR_BYTES)?;
    let unaddressable = SuperblockProblem::DataAreaUnaddressable { data_offset: sb.data_offset_sectors, data_size: sb.data_size_sectors };
    let data_end = sb
        .data_offset_sectors
        .checked_add(sb.data_size_sectors)
        .filter(|end| *end <= MAX_DEVICE_BYTES / SECTOR_BYTES)
        .ok_or(unaddressable)?;
    let data = Area { start: sb.data_offset_sectors, end: data_end };
    if uses_component_size(sb.level) && sb.size_sectors > sb.data_size_sectors {
        return Err(SuperblockProblem::ComponentTooLarge { size: sb.size_sectors, data_size: sb.data_size_sectors });
    }
    // The superblock's own 4 KiB never shares sectors with data (1.1/1.2: data after it,
    // 1.0: data before it).
    let sb_area = Area { start: sb.super_offset_sectors, end: sb.super_offset_sectors.saturating_add(SB1_AREA_SECTORS) };
    if sb_area.overlaps(data) {
        return Err(SuperblockProblem::OverlapsData {
            what: "superblock",
            start: sb_area.start,
            end: sb_area.end,
            data_start: data.start,
            data_end: data.end,
        });
    }
    if let Some(offset) = sb.bitmap_offset_sectors() {
        // The bitmap's own superblock (256 bytes, a sector as mdadm reserves it); the bits
        // that follow are checked by `check_bitmap` once their length is known.
        check_area("write-intent bitmap", sb, i64::from(offset), 1, data, dev_sectors)?;
    }
    if sb.bblog_offset_sectors != 0 && sb.bblog_size_sectors > 0 {
        if sb.feature_map.contains(FeatureMap::BAD_BLOCKS) && sb.bblog_size_sectors > MAX_BBLOG_SECTORS {
            return Err(SuperblockProblem::BadBlockLogTooLarge(sb.bblog_size_sectors));
        }
        check_area("bad-block log", sb, i64::from(sb.bblog_offset_sectors), u64::from(sb.bblog_size_sectors), data, dev_sectors)?;
    }
    if sb.feature_map.0 & (FeatureMap::PPL | FeatureMap::MULTIPLE_PPLS) != 0 {
        let offset = i64::from((sb.bitmap_offset_raw & 0xffff) as u16 as i16);
        let len = u64::from(sb.bitmap_offset_raw >> 16);
        check_area("partial parity log", sb, offset, len, data, dev_sectors)?;
    }
    // Last, so the caller can tell a truncated device from an impossible superblock.
    if data_end > dev_sectors {
        return Err(SuperblockProblem::DeviceTooSmall { needed_bytes: data_end * SECTOR_BYTES, device_bytes: dev_size_bytes });
    }
    Ok(())
}

/// Checks the write-intent bitmap `bitmap` (its superblock, read where `sb` places it on a
/// device of `dev_size_bytes`): the bitmap with its bits lies clear of the data area and
/// the superblock, inside the device (1.x), or within the 60 KiB md leaves after a 0.90
/// superblock; and its bits cover the array's whole sync range (each member's `size` for
/// raid1/4/5/6, the array for raid10, as md sizes the bitmap), or writes past its end would
/// have no bit to protect them. `Ok` when `sb` declares no bitmap.
pub fn check_bitmap(sb: &Superblock, dev_size_bytes: u64, bitmap: &BitmapSuperblock) -> Result<(), SuperblockProblem> {
    if bitmap_offset_from_superblock(sb).is_none() {
        return Ok(());
    }
    let bytes = (BITMAP_SUPER_BYTES as u64).saturating_add(bitmap.bits_len_bytes());
    match sb {
        Superblock::V090(_) => {
            if bytes > SB090_BITMAP_MAX_BYTES {
                return Err(SuperblockProblem::Bitmap090TooLarge(bytes));
            }
        }
        Superblock::V1(s) => {
            let offset = i64::from(s.bitmap_offset_sectors().unwrap_or(0));
            let data = Area { start: s.data_offset_sectors, end: s.data_offset_sectors.saturating_add(s.data_size_sectors) };
            check_area("write-intent bitmap", s, offset, bytes.div_ceil(SECTOR_BYTES), data, dev_size_bytes / SECTOR_BYTES)?;
        }
    }
    let needed_by = |shape: &ArrayShape| match shape.level {
        Personality::Array(Level::Raid10) => shape.array_size_sectors(&[]).unwrap_or(0),
        Personality::Array(Level::Linear) | Personality::Array(Level::Raid0) => 0,
        _ => shape.component_size_sectors,
    };
    let shape = sb.shape();
    let mut needed = needed_by(&shape);
    // While reshaping, md's sync range is the smaller shape's (`resync_max_sectors`): md
    // writes that in `sync_size` until the end, though it sized the bits for the new shape.
    if let Superblock::V1(s) = sb {
        if s.feature_map.contains(FeatureMap::RESHAPE_ACTIVE) {
            let old = ArrayShape {
                raid_disks: (i64::from(s.raid_disks) - i64::from(s.delta_disks)).clamp(1, i64::from(u32::MAX)) as u32,
                ..shape
            };
            let new =
                ArrayShape { level: Personality::from_raw(s.new_level), layout: s.new_layout, chunk_sectors: s.new_chunk_sectors, ..shape };
            needed = needed_by(&old).min(needed_by(&new));
        }
    }
    if bitmap.sync_size_sectors < needed {
        return Err(SuperblockProblem::BitmapTooShort { covers: bitmap.sync_size_sectors, needed });
    }
    Ok(())
}

/// Where, relative to its superblock, a superblock puts the write-intent bitmap (bytes),
/// or `None` without one. md keeps one bitmap offset for the whole array.
pub fn bitmap_offset_from_superblock(sb: &Superblock) -> Option<i64> {
    match sb {
        Superblock::V090(s) => s.has_bitmap().then_some(SB090_BYTES as i64),
        Superblock::V1(s) => s.bitmap_offset_sectors().map(|o| i64::from(o) * SECTOR_BYTES as i64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::sb1::{MdTime, Superblock1};
    use crate::metadata::MAX_SECTOR;

    /// A 1.2 member of 8 MiB like mdadm makes it: data from 1 MiB, bitmap at +8 sectors,
    /// bad-block log after the bitmap space.
    fn sample() -> Superblock1 {
        let mut sb = Superblock1 {
            feature_map: FeatureMap(FeatureMap::BITMAP_OFFSET),
            pad0: 0,
            set_uuid: [7; 16],
            set_name: [0; 32],
            ctime: MdTime(0),
            level: 5,
            layout: 2,
            size_sectors: 14336,
            chunksize_sectors: 128,
            raid_disks: 3,
            bitmap_offset_raw: 8,
            new_level: 0,
            reshape_position_sectors: 0,
            delta_disks: 0,
            new_layout: 0,
            new_chunk_sectors: 0,
            new_offset_sectors: 0,
            data_offset_sectors: 2048,
            data_size_sectors: 14336,
            super_offset_sectors: 8,
            recovery_offset_raw: 0,
            dev_number: 0,
            cnt_corrected_read: 0,
            device_uuid: [9; 16],
            devflags: 0,
            bblog_shift: 0,
            bblog_size_sectors: 8,
            bblog_offset_sectors: 16,
            utime: MdTime(0),
            events: 1,
            resync_offset_sectors: MAX_SECTOR,
            sb_csum: 0,
            pad3: [0; 32],
            dev_roles: vec![0, 1, 2],
        };
        sb.update_checksum();
        sb
    }

    const DEV: u64 = 8 << 20;

    fn check(sb: Superblock1) -> Result<(), SuperblockProblem> {
        check_superblock(&Superblock::V1(sb), DEV)
    }

    #[test]
    fn a_superblock_as_mdadm_writes_it_passes() {
        assert_eq!(check(sample()), Ok(()));
        assert_eq!(check_bitmap(&Superblock::V1(sample()), DEV, &bitmap(14336, 64 << 10)), Ok(()));
    }

    #[test]
    fn counts_beyond_md_limits_are_refused() {
        let mut sb = sample();
        sb.raid_disks = u32::MAX;
        assert!(matches!(check(sb), Err(SuperblockProblem::TooManyRaidDisks { limit: 1920, .. })));
        let mut sb = sample();
        sb.raid_disks = 1920;
        assert_eq!(check(sb), Ok(()));
        let mut sb = sample();
        sb.raid_disks = 0;
        assert_eq!(check(sb), Err(SuperblockProblem::NoRaidDisks));
        let mut sb = sample();
        sb.dev_number = 1920;
        assert!(matches!(check(sb), Err(SuperblockProblem::DeviceNumberTooLarge { .. })));
        let mut sb = sample();
        sb.chunksize_sectors = 1 << 22;
        assert!(matches!(check(sb), Err(SuperblockProblem::ChunkTooLarge { .. })));
    }

    #[test]
    fn a_data_offset_that_wraps_is_refused_not_wrapped() {
        let mut sb = sample();
        sb.data_offset_sectors = 1 << 63;
        let e = check(sb).unwrap_err();
        assert!(matches!(e, SuperblockProblem::DataAreaUnaddressable { .. }), "{e}");
        let mut sb = sample();
        sb.data_size_sectors = u64::MAX;
        sb.size_sectors = 0;
        assert!(matches!(check(sb), Err(SuperblockProblem::DataAreaUnaddressable { .. })));
    }

    #[test]
    fn data_over_the_superblock_or_metadata_is_refused() {
        let mut sb = sample();
        sb.data_offset_sectors = 0;
        assert!(matches!(check(sb), Err(SuperblockProblem::OverlapsData { what: "superblock", .. })));
        let mut sb = sample();
        sb.data_offset_sectors = 12;
        assert!(matches!(check(sb), Err(SuperblockProblem::OverlapsData { what: "superblock", .. })));
        let mut sb = sample();
        sb.bitmap_offset_raw = 2048 - 8; // the bitmap's first sector is the first data sector
        assert!(matches!(check(sb), Err(SuperblockProblem::OverlapsData { what: "write-intent bitmap", .. })));
        let mut sb = sample();
        sb.bitmap_offset_raw = 0;
        assert!(matches!(check(sb), Err(SuperblockProblem::OverlapsSuperblock { .. })));
        let mut sb = sample();
        sb.bitmap_offset_raw = (-9i32) as u32; // before sector 0
        assert!(matches!(check(sb), Err(SuperblockProblem::OutsideDevice { .. })));
        let mut sb = sample();
        sb.bblog_offset_sectors = 2040 - 8 + 1; // its 8 sectors reach the data
        assert!(matches!(check(sb), Err(SuperblockProblem::OverlapsData { what: "bad-block log", .. })));
        let mut sb = sample();
        sb.feature_map = FeatureMap(FeatureMap::BAD_BLOCKS);
        sb.bblog_size_sectors = 9;
        assert_eq!(check(sb), Err(SuperblockProblem::BadBlockLogTooLarge(9)));
        // The bits that follow the bitmap superblock must stop before the data too: one
        // bit per sector, 2048 - 16 sectors of room minus the bitmap's own superblock.
        let room_bits = ((2048 - 16) * 512 - 256) * 8;
        assert_eq!(check_bitmap(&Superblock::V1(sample()), DEV, &bitmap(room_bits, 512)), Ok(()));
        let e = check_bitmap(&Superblock::V1(sample()), DEV, &bitmap(room_bits + 8, 512));
        assert!(matches!(e, Err(SuperblockProblem::OverlapsData { what: "write-intent bitmap", .. })), "{e:?}");
    }

    fn bitmap(sync_size_sectors: u64, chunksize_bytes: u32) -> BitmapSuperblock {
        BitmapSuperblock {
            version: 4,
            uuid: [7; 16],
            events: 1,
            events_cleared: 1,
            sync_size_sectors,
            state: 0,
            chunksize_bytes,
            daemon_sleep_seconds: 5,
            write_behind: 0,
            sectors_reserved: 0,
            nodes: 0,
            cluster_name: [0; 64],
            pad: [0; 120],
        }
    }

    #[test]
    fn a_bitmap_must_cover_the_array() {
        let sb = Superblock::V1(sample());
        assert_eq!(check_bitmap(&sb, DEV, &bitmap(0, 64 << 10)), Err(SuperblockProblem::BitmapTooShort { covers: 0, needed: 14336 }));
        assert_eq!(
            check_bitmap(&sb, DEV, &bitmap(14335, 64 << 10)),
            Err(SuperblockProblem::BitmapTooShort { covers: 14335, needed: 14336 })
        );
        let mut no_bitmap = sample();
        no_bitmap.feature_map = FeatureMap(0);
        assert_eq!(check_bitmap(&Superblock::V1(no_bitmap), DEV, &bitmap(0, 64 << 10)), Ok(()));
    }

    #[test]
    fn a_reshaping_raid10s_bitmap_covers_the_smaller_shape() {
        // RAID10 near-2 of 4 grown to 5 members of 14336 sectors: 28672 -> 35840 array
        // sectors. md's `sync_size` stays at the smaller shape's until the end.
        let mut r10 = sample();
        (r10.level, r10.new_level, r10.layout, r10.new_layout, r10.raid_disks, r10.delta_disks) = (10, 10, 0x102, 0x102, 5, 1);
        (r10.chunksize_sectors, r10.new_chunk_sectors) = (128, 128);
        r10.feature_map.0 |= FeatureMap::RESHAPE_ACTIVE;
        r10.reshape_position_sectors = 0;
        let sb = Superblock::V1(r10.clone());
        assert_eq!(check_bitmap(&sb, DEV, &bitmap(28672, 64 << 10)), Ok(()));
        assert_eq!(
            check_bitmap(&sb, DEV, &bitmap(28671, 64 << 10)),
            Err(SuperblockProblem::BitmapTooShort { covers: 28671, needed: 28672 })
        );
        // Once finished, the whole new shape.
        r10.feature_map.0 &= !FeatureMap::RESHAPE_ACTIVE;
        assert_eq!(
            check_bitmap(&Superblock::V1(r10), DEV, &bitmap(28672, 64 << 10)),
            Err(SuperblockProblem::BitmapTooShort { covers: 28672, needed: 35840 })
        );
    }

    #[test]
    fn sizes_must_fit_the_data_area_and_the_device() {
        let mut sb = sample();
        sb.data_size_sectors = 9;
        sb.size_sectors = 9;
        assert_eq!(check(sb), Err(SuperblockProblem::DataSizeTooSmall(9)));
        let mut sb = sample();
        sb.size_sectors = sb.data_size_sectors + 1;
        assert!(matches!(check(sb), Err(SuperblockProblem::ComponentTooLarge { .. })));
        // raid0 does not use `size`.
        let mut sb = sample();
        sb.level = 0;
        sb.size_sectors = u64::MAX;
        assert_eq!(check(sb), Ok(()));
        // A truncated device is told apart, and comes last.
        let mut sb = sample();
        sb.data_size_sectors += 1;
        sb.size_sectors = 0;
        assert_eq!(check(sb), Err(SuperblockProblem::DeviceTooSmall { needed_bytes: DEV + 512, device_bytes: DEV }));
    }

    #[test]
    fn a_1_0_superblock_keeps_data_below_it() {
        let mut sb = sample();
        sb.super_offset_sectors = 16368;
        sb.data_offset_sectors = 0;
        sb.data_size_sectors = 16368 - 16;
        sb.size_sectors = sb.data_size_sectors;
        sb.bitmap_offset_raw = (-8i32) as u32;
        sb.bblog_offset_sectors = -16;
        assert_eq!(check(sb.clone()), Ok(()));
        sb.data_size_sectors += 9;
        assert!(matches!(check(sb), Err(SuperblockProblem::OverlapsData { .. })));
    }

    #[test]
    fn messages_are_one_line_without_debug_values() {
        let mut sb = sample();
        sb.raid_disks = u32::MAX;
        let text = check(sb).unwrap_err().to_string();
        assert_eq!(text, "raid_disks 4294967295 is more than md allows with 1.x metadata (1920)");
    }
}
