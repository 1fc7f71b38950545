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
    let now = crate::array::now_seconds();
    for (dev, (at, own)) in devices.iter().zip(&found) {
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
