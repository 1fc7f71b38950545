//! `uraid grow --size max|S`: md's component-size change (mdadm --grow --size), for members
//! replaced by larger ones. Pure: the engine writes what this plans.
//!
//! md (`update_size`, `super_1_rdev_size_change`, `raid5_resize`/`raid1_resize`): each
//! device's data area becomes everything after its data offset (1.1/1.2), the used size
//! (`dev_sectors`, the superblock's `size`) the smallest of them over members and spares
//! (RAID4/5/6: a whole number of chunks), and when it grows, the array resyncs from the old
//! size (`recovery_cp = dev_sectors`): the new stripes' parity or copies were never
//! written.

use super::Superblock1;

/// What one device of the array offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceRoom {
    pub dev_number: u32,
    pub device_sectors: u64,
    pub data_offset_sectors: u64,
    pub super_offset_sectors: u64,
}

impl DeviceRoom {
    /// The data area md gives the device: all of it after the data offset. `None` for 1.0
    /// metadata, whose superblock would first have to move to the device's new end.
    fn data_sectors(&self) -> Option<u64> {
        (self.super_offset_sectors < self.data_offset_sectors).then(|| self.device_sectors.saturating_sub(self.data_offset_sectors))
    }
}

/// The size asked for (per member).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeAsk {
    /// mdadm `--size max`: as much as every device holds.
    Max,
    Sectors(u64),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("md changes the member size of RAID1, RAID4, RAID5, RAID6 and RAID10 only (level {0} here)")]
    Level(i32),
    #[error(
        "md does not change the member size of a RAID10 with a far layout (raid10_resize refuses it); near and offset layouts it does"
    )]
    Raid10Far,
    #[error(
        "1.0 metadata keeps its superblock at the end of each device: md moves it when the device grew, which uraid does not do \
         yet; use mdadm --grow --size"
    )]
    SuperblockAtEnd,
    #[error("shrinking the members' used size ({asked} < {now} sectors) is not supported: md needs --array-size first")]
    Shrink { asked: u64, now: u64 },
    #[error("{asked} sectors per member asked, the smallest device holds {max}: replace it by a larger one first")]
    TooLarge { asked: u64, max: u64 },
    #[error("nothing to change: the members already use {0} sectors each (--size max: every device is used to its end)")]
    NothingToChange(u64),
}

/// A size change about to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizePlan {
    pub old_sectors: u64,
    pub size_sectors: u64,
    /// Each device's new data area (`data_size`), by `dev_number`.
    pub data_sectors: Vec<(u32, u64)>,
    /// md's sync range after the change (what a write-intent bitmap covers): the member
    /// size, but the array size for RAID10.
    pub sync_sectors: u64,
    /// Where the resync of the new part starts, in the superblock's unit (`resync_offset`:
    /// member sectors, but array sectors for RAID10): the old end.
    pub resync_from: u64,
}

/// Plans `ask` on the array whose newest superblock is `sb`, over every device given
/// (members and spares, as md's `update_size` checks them all).
pub fn plan_size(sb: &Superblock1, devices: &[DeviceRoom], ask: SizeAsk) -> Result<SizePlan, SizeError> {
    let chunk = match sb.level {
        1 => 1,
        4..=6 | 10 => u64::from(sb.chunksize_sectors.max(1)),
        level => return Err(SizeError::Level(level)),
    };
    // RAID10: md rounds the size as raid10.c's `calc_sectors` does (whole chunks of the
    // array, spread over the members with their copies), which the geometry computes.
    let raid10 = |sectors: u64| {
        crate::geometry::Raid10Geometry::new(sb.layout, sb.chunksize_sectors, sb.raid_disks as usize, sectors)
            .map_err(|_| SizeError::Level(10))
    };
    if sb.level == 10 {
        let g = raid10(sb.size_sectors)?;
        if g.far_copies() > 1 && !g.far_offset() {
            return Err(SizeError::Raid10Far);
        }
    }
    let round = |sectors: u64| -> Result<u64, SizeError> {
        if sb.level == 10 {
            Ok(raid10(sectors)?.used_member_sectors())
        } else {
            Ok(sectors / chunk * chunk)
        }
    };
    let data_sectors: Vec<(u32, u64)> =
        devices.iter().map(|d| d.data_sectors().map(|s| (d.dev_number, s)).ok_or(SizeError::SuperblockAtEnd)).collect::<Result<_, _>>()?;
    let max = round(data_sectors.iter().map(|&(_, s)| s).min().unwrap_or(0))?;
    let now = sb.size_sectors;
    let size_sectors = match ask {
        SizeAsk::Max => max,
        SizeAsk::Sectors(s) if s > max => return Err(SizeError::TooLarge { asked: s, max }),
        SizeAsk::Sectors(s) => round(s)?,
    };
    if size_sectors < now {
        return Err(SizeError::Shrink { asked: size_sectors, now });
    }
    if size_sectors == now {
        return Err(SizeError::NothingToChange(now));
    }
    let (sync_sectors, resync_from) =
        if sb.level == 10 { (raid10(size_sectors)?.array_sectors(), raid10(now)?.array_sectors()) } else { (size_sectors, now) };
    Ok(SizePlan { old_sectors: now, size_sectors, data_sectors, sync_sectors, resync_from })
}

impl SizePlan {
    /// The device's superblock after the change: the new used size, its own data area, and
    /// a resync from the old size unless one was due from earlier already.
    pub fn apply(&self, sb: &mut Superblock1) {
        sb.size_sectors = self.size_sectors;
        if let Some(&(_, data)) = self.data_sectors.iter().find(|(n, _)| *n == sb.dev_number) {
            sb.data_size_sectors = data;
        }
        sb.resync_offset_sectors = sb.resync_offset_sectors.min(self.resync_from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raid5() -> Superblock1 {
        let mut sb = crate::metadata::sb1::tests::sample();
        sb.feature_map.0 = 0;
        (sb.level, sb.raid_disks, sb.chunksize_sectors, sb.size_sectors) = (5, 3, 128, 30720);
        sb.resync_offset_sectors = u64::MAX;
        sb
    }

    fn room(dev_number: u32, device_sectors: u64) -> DeviceRoom {
        DeviceRoom { dev_number, device_sectors, data_offset_sectors: 2048, super_offset_sectors: 8 }
    }

    #[test]
    fn max_takes_the_smallest_device_in_whole_chunks_and_resyncs_the_new_part() {
        let sb = raid5();
        // Three members grown to 48 MiB, one spare of 40 MiB + 100 sectors: the spare decides.
        let devices = [room(0, 98304), room(1, 98304), room(2, 98304), room(3, 81920 + 100)];
        let plan = plan_size(&sb, &devices, SizeAsk::Max).unwrap();
        assert_eq!(plan.size_sectors, (81920 + 100 - 2048) / 128 * 128);
        let mut own = sb.clone();
        own.dev_number = 1;
        plan.apply(&mut own);
        assert_eq!((own.size_sectors, own.data_size_sectors, own.resync_offset_sectors), (plan.size_sectors, 98304 - 2048, 30720));
        // An earlier resync point stays (it is further back).
        let mut dirty = sb.clone();
        dirty.resync_offset_sectors = 1000;
        plan.apply(&mut dirty);
        assert_eq!(dirty.resync_offset_sectors, 1000);
        // RAID1 has no chunk to round to.
        let mut r1 = sb.clone();
        (r1.level, r1.chunksize_sectors) = (1, 0);
        assert_eq!(plan_size(&r1, &devices, SizeAsk::Max).unwrap().size_sectors, 81920 + 100 - 2048);
    }

    #[test]
    fn a_raid10_takes_mds_rounding_and_resyncs_from_the_old_array_end() {
        let mut sb = raid5();
        // n2 over 3 members of 30720 used sectors, chunks of 128: 46080 array sectors.
        (sb.level, sb.layout, sb.raid_disks) = (10, 0x102, 3);
        let devices = [room(0, 98304), room(1, 98304), room(2, 98304 + 100)];
        let plan = plan_size(&sb, &devices, SizeAsk::Max).unwrap();
        // 96256 data sectors: 752 chunks -> 1128 array chunks -> 752 per member (calc_sectors).
        assert_eq!((plan.size_sectors, plan.sync_sectors, plan.resync_from), (96256, 144384, 46080));
        let mut own = sb.clone();
        plan.apply(&mut own);
        assert_eq!(own.resync_offset_sectors, 46080, "md's RAID10 resync counts array sectors");
        // A size asked between chunks rounds down to whole ones (n2 over 4 members).
        let mut four = sb.clone();
        four.raid_disks = 4;
        let plan = plan_size(&four, &devices, SizeAsk::Sectors(96256 - 100)).unwrap();
        assert_eq!((plan.size_sectors, plan.sync_sectors), (96128, 192256));
    }

    #[test]
    fn refusals_say_what_would_work() {
        let sb = raid5();
        let devices = [room(0, 98304), room(1, 98304), room(2, 98304)];
        assert_eq!(plan_size(&sb, &devices, SizeAsk::Sectors(200000)), Err(SizeError::TooLarge { asked: 200000, max: 96256 }));
        assert_eq!(plan_size(&sb, &devices, SizeAsk::Sectors(20000)), Err(SizeError::Shrink { asked: 19968, now: 30720 }));
        let small = [room(0, 30720 + 2048), room(1, 98304), room(2, 98304)];
        assert_eq!(plan_size(&sb, &small, SizeAsk::Max), Err(SizeError::NothingToChange(30720)));
        let mut r0 = sb.clone();
        r0.level = 0;
        assert_eq!(plan_size(&r0, &devices, SizeAsk::Max), Err(SizeError::Level(0)));
        let mut far = sb.clone();
        (far.level, far.layout, far.raid_disks) = (10, 0x201, 3);
        assert_eq!(plan_size(&far, &devices, SizeAsk::Max), Err(SizeError::Raid10Far));
        let mut at_end = devices;
        at_end[1] = DeviceRoom { data_offset_sectors: 0, super_offset_sectors: 98288, ..at_end[1] };
        assert_eq!(plan_size(&sb, &at_end, SizeAsk::Max), Err(SizeError::SuperblockAtEnd));
    }
}
