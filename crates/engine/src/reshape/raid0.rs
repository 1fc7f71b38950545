//! Adding members to a RAID0, as mdadm does it (Grow.c `reshape_array` with
//! `analyse_change` choosing level 4): the RAID0 is taken over as a RAID4 whose parity
//! role is missing (raid5.c `raid45_takeover_raid0`), the new devices are added as spares
//! with recovery frozen, the RAID4 is reshaped to the new member count (the first new
//! device takes the missing role, written by the reshape as it goes; the others take the
//! new roles; the new parity role stays missing), and once the reshape is done the RAID4
//! is taken back as a RAID0 (raid0.c `raid0_takeover_raid45`, which wants the parity role
//! empty). Each step leaves superblocks md reads: a stop part-way leaves a degraded RAID4
//! (mid-reshape or not) that md or `uraid grow --continue` takes on, then `--level 0`.

use super::{take_over, ReshapingArray};
use crate::array::{Array, ArrayOptions, EngineError};
use crate::member::Member;
use std::sync::Arc;
use uraid_core::geometry::SECTOR_BYTES;
use uraid_core::metadata::grow::{plan_grow, plan_takeover, DeviceSize, GrowError, GrowRequest, Room};

/// Starts growing the stopped RAID0 on `members` by the blank devices `new` (each with
/// its device uuid): the takeover to RAID4, the spares, and the reshape's start. Run the
/// returned reshape to its end, then [`finish_raid0_grow`].
pub fn start_raid0_grow(
    members: &[Arc<dyn Member>],
    new: Vec<(Arc<dyn Member>, [u8; 16])>,
    opts: &ArrayOptions,
) -> Result<ReshapingArray, EngineError> {
    if new.is_empty() {
        return Err(EngineError::Invalid("growing a RAID0 needs the new devices (--add DEV), as mdadm --grow --add".into()));
    }
    for (dev, _) in &new {
        crate::create::check_device_is_free(dev.as_ref()).map_err(|e| EngineError::Invalid(e.to_string()))?;
    }
    preflight(members, &new)?;
    let t = take_over(members, opts, &GrowRequest { level: Some(4), ..Default::default() })?
        .ok_or_else(|| EngineError::Invalid("the array is not a RAID0".into()))?;
    // The RAID4 runs without its parity role, as md leaves it.
    let mut run = *opts;
    run.assemble.run = true;
    run.writable = true;
    let (array, _) = Array::assemble(members.to_vec(), &run)?;
    for (dev, uuid) in &new {
        array.add_spare_for_reshape(dev.clone(), *uuid)?;
    }
    array.close()?;
    drop(array);
    let all: Vec<Arc<dyn Member>> = members.iter().cloned().chain(new.iter().map(|(d, _)| d.clone())).collect();
    let raid_disks = t.raid_disks + new.len() as u32;
    ReshapingArray::start(all, &run, &GrowRequest { raid_disks: Some(raid_disks), ..Default::default() })
}

/// Plans the three steps on the superblocks before any is written, so that whatever would
/// refuse (more than one zone, no room to move the data, a new device too small) refuses
/// with the RAID0 untouched, not after its takeover.
fn preflight(members: &[Arc<dyn Member>], new: &[(Arc<dyn Member>, [u8; 16])]) -> Result<(), EngineError> {
    let invalid = |e: GrowError| EngineError::Invalid(e.to_string());
    let (found, newest) = super::v1_superblocks(members, "RAID0 grows")?;
    let sizes: Vec<DeviceSize> =
        found.iter().map(|(_, sb)| DeviceSize { dev_number: sb.dev_number, data_sectors: sb.data_size_sectors }).collect();
    let level4 = GrowRequest { level: Some(4), ..Default::default() };
    let t = plan_takeover(&newest, &level4, &[], &sizes)
        .map_err(invalid)?
        .ok_or_else(|| EngineError::Invalid("the array is not a RAID0".into()))?;
    let mut raid4 = newest.clone();
    t.apply(&mut raid4);
    let needed = raid4.data_offset_sectors + raid4.size_sectors;
    for (dev, _) in new {
        let have = dev.size_bytes() / SECTOR_BYTES;
        if have < needed {
            return Err(EngineError::Invalid(format!("{}: {have} sectors; a new member of this array needs {needed}", dev.label())));
        }
    }
    // The spares' numbers as the adds will give them: after every number in use.
    let first = raid4.dev_roles.len().max(raid4.raid_disks as usize) as u32;
    let spares: Vec<u32> = (first..).take(new.len()).collect();
    let room = found.iter().map(|(_, sb)| Room::of(sb, None)).reduce(Room::min).expect("members");
    let grow = GrowRequest { raid_disks: Some(t.raid_disks + new.len() as u32), ..Default::default() };
    plan_grow(&raid4, &grow, &spares, room).map_err(invalid)?;
    Ok(())
}

/// The last step of a RAID0 grow: the reshaped RAID4 (parity role missing) on `devices`
/// taken back as a RAID0. Returns its member count.
pub fn finish_raid0_grow(devices: &[Arc<dyn Member>], opts: &ArrayOptions) -> Result<u32, EngineError> {
    let t = take_over(devices, opts, &GrowRequest { level: Some(0), ..Default::default() })?
        .ok_or_else(|| EngineError::Invalid("the array is not a RAID4 any more".into()))?;
    Ok(t.raid_disks)
}
