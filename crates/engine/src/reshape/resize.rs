//! `uraid grow --size`: the members' used size changed as md changes it (planned in
//! `uraid_core::metadata::resize`); here the superblocks of the stopped array are rewritten.
//! The new part is resynced by whoever assembles the array next (the superblocks say from
//! where), as md resyncs it.

use crate::array::{superblock_bytes_of, ArrayOptions, EngineError};
use crate::member::Member;
use std::sync::Arc;
use uraid_core::geometry::SECTOR_BYTES;
use uraid_core::metadata::resize::{plan_size, DeviceRoom, SizeAsk, SizePlan};
use uraid_core::metadata::Superblock;

/// Changes the used size of the stopped array on `devices` (members and spares) to `ask`.
/// Nothing is written when it is refused.
pub fn resize(devices: &[Arc<dyn Member>], opts: &ArrayOptions, ask: SizeAsk) -> Result<SizePlan, EngineError> {
    super::spares_of_a_changeable_array(devices, opts, "changing its size")?;
    let (found, newest) = super::v1_superblocks(devices, "size changes")?;
    let rooms: Vec<DeviceRoom> = devices
        .iter()
        .zip(&found)
        .map(|(dev, (_, sb))| DeviceRoom {
            dev_number: sb.dev_number,
            device_sectors: dev.size_bytes() / SECTOR_BYTES,
            data_offset_sectors: sb.data_offset_sectors,
            super_offset_sectors: sb.super_offset_sectors,
        })
        .collect();
    let plan = plan_size(&newest, &rooms, ask).map_err(|e| EngineError::Invalid(e.to_string()))?;
    // Every bitmap is read (and found sound) before anything is written.
    let bitmaps: Vec<Option<(u64, Vec<u8>)>> = devices
        .iter()
        .zip(&found)
        .map(|(dev, (at, own))| resized_bitmap(dev.as_ref(), own, *at, plan.sync_sectors, newest.events + 1))
        .collect::<Result<_, _>>()?;
    let now = crate::array::now_seconds();
    for ((dev, (at, own)), bitmap) in devices.iter().zip(&found).zip(&bitmaps) {
        // The bitmap first: until the superblock says the new size, a bitmap covering more
        // is harmless, while a new size with a bitmap too short is not (it would leave
        // writes past its end unmarked, and assembly refuses such a member).
        if let Some((bitmap_at, bytes)) = bitmap {
            dev.write_at(bytes, *bitmap_at).and_then(|_| dev.flush()).map_err(|error| crate::Fault::Metadata {
                device: dev.label().to_string(),
                action: "resizing the write-intent bitmap",
                error,
            })?;
        }
        let mut sb = own.clone();
        sb.size_sectors = newest.size_sectors;
        sb.resync_offset_sectors = newest.resync_offset_sectors;
        plan.apply(&mut sb);
        sb.events = newest.events + 1;
        sb.utime = uraid_core::metadata::sb1::MdTime::from_parts(now, 0);
        sb.sb_csum = sb.compute_checksum();
        dev.write_at(&superblock_bytes_of(&Superblock::V1(sb)), *at).and_then(|_| dev.flush()).map_err(|error| crate::Fault::Metadata {
            device: dev.label().to_string(),
            action: "recording the new size",
            error,
        })?;
    }
    Ok(plan)
}

/// The device's write-intent bitmap (where it starts, and its superblock and bits) for a
/// sync range of `sync_sectors` (the member size; the array's for RAID10), as md's
/// `md_bitmap_resize` makes it when the members' used size changes: the chunk doubled
/// until the bits fit the room md allows, every marked sector still marked, and the new
/// range marked too (md resyncs it; the superblocks also say so). `None` without a bitmap.
fn resized_bitmap(
    dev: &dyn Member,
    sb: &uraid_core::metadata::Superblock1,
    at: u64,
    sync_sectors: u64,
    events: u64,
) -> Result<Option<(u64, Vec<u8>)>, EngineError> {
    let Some((state, bits)) = crate::array::bitmap::load(dev, &Superblock::V1(sb.clone()), at)
        .map_err(|why| EngineError::Refused(format!("{}: {why}", dev.label())))?
    else {
        return Ok(None);
    };
    let space = uraid_core::metadata::md_bitmap_space_sectors(sb.version(), state.rel_offset / SECTOR_BYTES as i64, &state.sb);
    let mut resized = state.sb.resized(sync_sectors, space);
    resized.events = events;
    let mut bytes = resized.encode().to_vec();
    bytes.extend_from_slice(bits.remapped(&state.sb, &resized).encode());
    Ok(Some((at.saturating_add_signed(state.rel_offset), bytes)))
}
