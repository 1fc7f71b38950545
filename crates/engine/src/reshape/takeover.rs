//! Level changes md makes without moving data (`uraid grow --level`): RAID1 (2 members)
//! to RAID5 and back, RAID4 to RAID5 (parity-last) and back, RAID5 to RAID6 (Q on a spare,
//! rebuilt) and back (the Q member becomes a spare), RAID0 to RAID4/5 parity-last (parity
//! on a spare, rebuilt, or missing) and back (the parity member is failed). Planned in
//! `uraid_core::metadata::grow::plan_takeover`; here the superblocks are rewritten.

use crate::array::{superblock_bytes_of, ArrayOptions, EngineError};
use crate::member::Member;
use crate::scan::probe;
use std::sync::Arc;
use uraid_core::metadata::grow::{plan_takeover, DeviceSize, GrowRequest, Takeover};
use uraid_core::metadata::{FeatureMap, Superblock};

/// Applies the takeover `req.level` asks for to the stopped array on `devices` (members
/// and spares); `None` when the request changes no level. Nothing is written when refused.
pub fn take_over(devices: &[Arc<dyn Member>], opts: &ArrayOptions, req: &GrowRequest) -> Result<Option<Takeover>, EngineError> {
    if req.level.is_none() {
        return Ok(None);
    }
    // To RAID0, md wants the parity member (the last role) gone already; uraid also takes
    // a whole array and fails it itself. Which role is parity is checked by the plan.
    let parity_may_miss =
        (req.level == Some(0)).then(|| devices.iter().find_map(|d| probe(d.as_ref()).best().map(|(_, sb)| sb.raid_disks())));
    let may_miss = match parity_may_miss.flatten().and_then(|n| n.checked_sub(1)) {
        Some(role) => super::MayMiss::Role(role),
        None => super::MayMiss::Nothing,
    };
    let spares = super::spares_of_a_changeable_array_missing(devices, opts, "changing its level", may_miss)?;
    let (found, newest) = super::v1_superblocks(devices, "level changes")?;
    let sizes: Vec<DeviceSize> =
        found.iter().map(|(_, sb)| DeviceSize { dev_number: sb.dev_number, data_sectors: sb.data_size_sectors }).collect();
    let Some(t) = plan_takeover(&newest, req, &spares, &sizes).map_err(|e| EngineError::Invalid(e.to_string()))? else { return Ok(None) };
    let now = crate::array::now_seconds();
    // The spare taking a role first, flushed before the others (see `ReshapingArray::start`).
    let mut order: Vec<usize> = (0..devices.len()).collect();
    order.sort_by_key(|&i| t.rebuilt.is_none_or(|(dev, _)| dev != found[i].1.dev_number));
    for i in order {
        let (at, own) = &found[i];
        let mut sb = own.clone();
        sb.dev_roles = newest.dev_roles.clone();
        t.apply(&mut sb);
        if sb.dev_roles.get(sb.dev_number as usize) == Some(&0xfffe) {
            // The member leaving (RAID4/5 -> RAID0: the parity member) is failed in the
            // others' superblocks and never written again, as md treats a faulty member.
            continue;
        }
        if t.rebuilt.is_some_and(|(dev, _)| dev == sb.dev_number) {
            // md: the new member is rebuilt from the start (recovery_offset 0).
            sb.feature_map.0 |= FeatureMap::RECOVERY_OFFSET;
            sb.recovery_offset_raw = 0;
        }
        sb.events = newest.events + 1;
        sb.utime = uraid_core::metadata::sb1::MdTime::from_parts(now, 0);
        sb.sb_csum = sb.compute_checksum();
        devices[i].write_at(&superblock_bytes_of(&Superblock::V1(sb)), *at).and_then(|_| devices[i].flush()).map_err(|error| {
            crate::Fault::Metadata { device: devices[i].label().to_string(), action: "recording the level change", error }
        })?;
    }
    Ok(Some(t))
}
