//! State changes md makes to a live array's superblocks (events, clean/dirty, failed and
//! recovering members), as pure functions on decoded superblocks. The engine applies them to
//! every member's copy and writes the results; checksums are recomputed here.

use super::sb090::DiskDescriptor090;
use super::sb1::{FeatureMap, MdTime};
use super::{DeviceRole, Superblock, MAX_SECTOR};

impl Superblock {
    /// Records the array's event count, update time and sync state. `resync_offset` is md's
    /// `recovery_cp`: [`MAX_SECTOR`] when clean, 0 while writes are in flight ("active"), or
    /// the sector an interrupted resync reached.
    pub fn set_array_state(&mut self, events: u64, resync_offset_sectors: u64, utime_seconds: u64) {
        match self {
            Superblock::V1(sb) => {
                sb.events = events;
                sb.resync_offset_sectors = resync_offset_sectors;
                sb.utime = MdTime::from_parts(utime_seconds, 0);
            }
            Superblock::V090(sb) => {
                sb.events = events;
                sb.cp_events = events;
                sb.utime = utime_seconds as u32;
                if resync_offset_sectors == MAX_SECTOR {
                    sb.state |= super::Superblock090::STATE_CLEAN;
                    sb.recovery_cp = u32::MAX;
                } else {
                    sb.state &= !super::Superblock090::STATE_CLEAN;
                    sb.recovery_cp = resync_offset_sectors.min(u64::from(u32::MAX - 1)) as u32;
                }
            }
        }
        self.update_checksum();
    }

    /// The permanent device number (1.x `dev_number`, 0.90 this-disk `number`).
    pub fn dev_number(&self) -> u32 {
        match self {
            Superblock::V1(sb) => sb.dev_number,
            Superblock::V090(sb) => sb.this_disk.number,
        }
    }

    /// Rewrites the whole role table from the array's current devices, as md's
    /// `super_1_sync`/`super_90_sync` do at every superblock update: every entry spare
    /// (a device that is no longer part of the array), then each listed device's role.
    pub fn set_role_table(&mut self, devices: &[(u32, DeviceRole)]) {
        match self {
            Superblock::V1(sb) => {
                let needed = devices.iter().map(|(n, _)| *n as usize + 1).max().unwrap_or(0);
                if sb.dev_roles.len() < needed {
                    sb.dev_roles.resize(needed, DeviceRole::SPARE_RAW);
                }
                sb.dev_roles.iter_mut().for_each(|r| *r = DeviceRole::SPARE_RAW);
            }
            Superblock::V090(sb) => {
                for d in sb.disks.iter_mut() {
                    d.state = DiskDescriptor090::STATE_REMOVED;
                }
            }
        }
        for (n, role) in devices {
            self.set_device_role(*n, *role);
        }
        self.update_checksum();
    }

    /// 0.90's role table, numbered as md's `super_90_sync` numbers it: an in-sync member's
    /// descriptor is its role (mdadm reads "slot i is working" from descriptor i), every
    /// other device gets a descriptor from `raid_disks` upwards, and empty slots are recorded
    /// removed+faulty. `roles[i]` is device i's role; this superblock belongs to `me`.
    /// Does nothing on 1.x superblocks.
    pub fn set_role_table_090(&mut self, roles: &[DeviceRole], me: usize) {
        let Superblock::V090(sb) = self else { return };
        let raid_disks = sb.raid_disks;
        let mut next_spare = raid_disks;
        let mut descs = Vec::with_capacity(roles.len());
        for role in roles {
            descs.push(match role {
                DeviceRole::Active(r) if *r < raid_disks => *r,
                _ => {
                    next_spare += 1;
                    next_spare - 1
                }
            });
        }
        for d in sb.disks.iter_mut() {
            *d = DiskDescriptor090::empty();
        }
        let (mut active, mut failed, mut spare) = (0u32, 0u32, 0u32);
        for (role, &desc) in roles.iter().zip(&descs) {
            let Some(d) = sb.disks.get_mut(desc as usize) else { continue };
            d.number = desc;
            match role {
                DeviceRole::Active(r) if *r < raid_disks => {
                    d.raid_disk = *r;
                    d.state = DiskDescriptor090::STATE_ACTIVE | DiskDescriptor090::STATE_SYNC;
                    active += 1;
                }
                DeviceRole::Faulty => {
                    d.raid_disk = desc;
                    d.state = DiskDescriptor090::STATE_FAULTY;
                    failed += 1;
                }
                _ => {
                    d.raid_disk = desc;
                    d.state = 0;
                    spare += 1;
                }
            }
        }
        for i in 0..raid_disks.min(sb.disks.len() as u32) {
            let d = &mut sb.disks[i as usize];
            if d.state == 0 && d.number == 0 && !roles.iter().zip(&descs).any(|(_, &desc)| desc == i) {
                d.number = i;
                d.raid_disk = i;
                d.state = DiskDescriptor090::STATE_REMOVED | DiskDescriptor090::STATE_FAULTY;
                failed += 1;
            }
        }
        sb.nr_disks = active + spare + failed;
        sb.active_disks = active;
        sb.working_disks = active + spare;
        sb.failed_disks = failed;
        sb.spare_disks = spare;
        if let Some(&desc) = descs.get(me) {
            sb.this_disk = sb.disks[desc as usize].clone();
        }
        self.update_checksum();
    }

    /// What this superblock says device `dev_number` is.
    pub fn role_of_device(&self, dev_number: u32) -> DeviceRole {
        match self {
            Superblock::V1(sb) => sb.dev_roles.get(dev_number as usize).map_or(DeviceRole::Spare, |r| DeviceRole::from_raw(*r)),
            Superblock::V090(sb) => match sb.disks.get(dev_number as usize) {
                Some(d) if d.state & DiskDescriptor090::STATE_FAULTY != 0 => DeviceRole::Faulty,
                Some(d) if d.state & DiskDescriptor090::STATE_SYNC != 0 => DeviceRole::Active(d.raid_disk),
                _ => DeviceRole::Spare,
            },
        }
    }

    /// Sets what device `dev_number` is in this superblock's view of the array.
    pub fn set_device_role(&mut self, dev_number: u32, role: DeviceRole) {
        match self {
            Superblock::V1(sb) => {
                let raw = match role {
                    DeviceRole::Active(n) => n as u16,
                    DeviceRole::Spare => DeviceRole::SPARE_RAW,
                    DeviceRole::Faulty => DeviceRole::FAULTY_RAW,
                    DeviceRole::Journal => DeviceRole::JOURNAL_RAW,
                    DeviceRole::Unknown(r) => r,
                };
                let idx = dev_number as usize;
                if idx >= sb.dev_roles.len() {
                    sb.dev_roles.resize(idx + 1, DeviceRole::SPARE_RAW);
                }
                sb.dev_roles[idx] = raw;
            }
            Superblock::V090(sb) => {
                let state = match role {
                    DeviceRole::Active(_) => DiskDescriptor090::STATE_ACTIVE | DiskDescriptor090::STATE_SYNC,
                    DeviceRole::Faulty => DiskDescriptor090::STATE_FAULTY | DiskDescriptor090::STATE_REMOVED,
                    _ => 0,
                };
                let raid_disk = match role {
                    DeviceRole::Active(n) => n,
                    _ => sb.disks.get(dev_number as usize).map_or(0, |d| d.raid_disk),
                };
                if let Some(d) = sb.disks.get_mut(dev_number as usize) {
                    d.state = state;
                    d.raid_disk = raid_disk;
                }
                if sb.this_disk.number == dev_number {
                    sb.this_disk.state = state;
                    sb.this_disk.raid_disk = raid_disk;
                }
                let active = sb.disks.iter().filter(|d| d.state & DiskDescriptor090::STATE_ACTIVE != 0).count() as u32;
                let failed = sb.disks.iter().filter(|d| d.state & DiskDescriptor090::STATE_FAULTY != 0).count() as u32;
                sb.active_disks = active;
                sb.working_disks = active;
                sb.failed_disks = failed;
            }
        }
        self.update_checksum();
    }

    /// Marks this device as rebuilt up to `recovered_sectors` (`Some`), or fully in sync
    /// (`None`). 1.x records it with the `RECOVERY_OFFSET` feature; 0.90 cannot record
    /// partial progress, so a recovering 0.90 member restarts from 0, as in md.
    pub fn set_recovery_offset(&mut self, recovered_sectors: Option<u64>) {
        if let Superblock::V1(sb) = self {
            match recovered_sectors {
                Some(s) => {
                    sb.feature_map = FeatureMap(sb.feature_map.0 | FeatureMap::RECOVERY_OFFSET);
                    sb.recovery_offset_raw = s;
                }
                None => {
                    sb.feature_map = FeatureMap(sb.feature_map.0 & !FeatureMap::RECOVERY_OFFSET);
                    sb.recovery_offset_raw = 0;
                }
            }
        }
        self.update_checksum();
    }

    /// Whether the superblock records an internal write-intent bitmap.
    pub fn has_internal_bitmap(&self) -> bool {
        match self {
            Superblock::V1(sb) => sb.bitmap_offset_sectors().is_some(),
            Superblock::V090(sb) => sb.has_bitmap(),
        }
    }
}

impl super::Superblock1 {
    /// This member's superblock with the array-wide shape (and role table) of `newest`, for a member one
    /// event behind it (md's margin): it missed the last update, which may have changed the
    /// shape in place (a takeover, a size change) while no data moved. md takes the
    /// array's shape from the freshest superblock the same way (`super_1_validate`). The
    /// data area grows with the used size where the superblock precedes the data (1.1/1.2),
    /// as the size change gave every device. `None` when there is nothing to adopt: the
    /// shapes agree, the member is further behind or of another array, or either side
    /// records a reshape (`reshape::ReshapeState` reads those).
    pub fn with_shape_of(&self, newest: &super::Superblock1, device_sectors: u64) -> Option<super::Superblock1> {
        let reshaping = |sb: &super::Superblock1| sb.feature_map.contains(FeatureMap::RESHAPE_ACTIVE);
        if self.set_uuid != newest.set_uuid
            || self.events + 1 != newest.events
            || self.shape() == newest.shape()
            || reshaping(self)
            || reshaping(newest)
        {
            return None;
        }
        let mut sb = self.clone();
        if newest.level == 0 && self.level != 0 && self.size_sectors > 0 {
            // The takeover to RAID0 it missed gives every member's data area the RAID4/5's
            // used size (`Takeover::apply`, raid0.c `raid0_takeover_raid45`): with its own
            // larger area the RAID0 would read as one of several zones.
            sb.data_size_sectors = self.size_sectors;
        }
        sb.level = newest.level;
        sb.layout = newest.layout;
        sb.chunksize_sectors = newest.chunksize_sectors;
        sb.raid_disks = newest.raid_disks;
        sb.size_sectors = newest.size_sectors;
        // The update it missed may also have given a spare a role (the new member, rebuilt:
        // its own superblock, written first, says so with a recovery offset) or taken one
        // away: the freshest role table holds, or assembly would see a split brain.
        sb.dev_roles = newest.dev_roles.clone();
        if sb.super_offset_sectors < sb.data_offset_sectors && sb.data_size_sectors < newest.size_sectors {
            sb.data_size_sectors = device_sectors.saturating_sub(sb.data_offset_sectors);
        }
        sb.sb_csum = sb.compute_checksum();
        Some(sb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::Superblock1;

    fn v1() -> Superblock {
        let mut bytes = vec![0u8; 256 + 2 * 4];
        bytes[0..4].copy_from_slice(&0xa92b_4efcu32.to_le_bytes());
        bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
        bytes[72..76].copy_from_slice(&4u32.to_le_bytes()); // raid_disks
        bytes[220..224].copy_from_slice(&4u32.to_le_bytes()); // max_dev
        for i in 0..4 {
            bytes[256 + 2 * i..258 + 2 * i].copy_from_slice(&(i as u16).to_le_bytes());
        }
        let mut sb = Superblock1::decode_unverified(&bytes).expect("hand-built superblock");
        sb.update_checksum();
        Superblock::V1(sb)
    }

    #[test]
    fn state_changes_keep_the_checksum_valid_and_round_trip() {
        let mut sb = v1();
        sb.set_array_state(7, 0, 1000);
        assert!(!sb.is_clean());
        sb.set_device_role(2, DeviceRole::Faulty);
        sb.set_recovery_offset(Some(64));
        let Superblock::V1(inner) = &sb else { unreachable!() };
        let decoded = Superblock1::decode(&inner.encode()).expect("checksum valid after updates");
        assert_eq!(decoded.events, 7);
        assert_eq!(decoded.dev_roles[2], DeviceRole::FAULTY_RAW);
        assert_eq!(decoded.recovery_offset(), Some(64));
        sb.set_array_state(8, MAX_SECTOR, 1001);
        assert!(sb.is_clean());
    }

    #[test]
    fn sb090_descriptors_follow_md_numbering() {
        use crate::geometry::Level;
        use crate::metadata::create::{plan_create, CreateRequest, NewDevice};
        let dev = |i: u8| Some(NewDevice { size_bytes: 8 << 20, device_uuid: [i; 16] });
        let mut req = CreateRequest::new(Level::Raid1, "x", vec![dev(1), dev(2), dev(3)], [1; 16], MdTime::from_parts(1, 0));
        req.metadata = crate::metadata::MetadataVersion::V0_90;
        let plan = plan_create(&req).expect("plan");
        let mut sb = plan.devices[0].superblock.clone();
        // Old member 1 failed; a spare (device 3) rebuilt role 1.
        let roles = [DeviceRole::Active(0), DeviceRole::Faulty, DeviceRole::Active(2), DeviceRole::Active(1)];
        sb.set_role_table_090(&roles, 3);
        let Superblock::V090(s) = &sb else { unreachable!() };
        for r in 0..3u32 {
            let d = &s.disks[r as usize];
            assert_eq!((d.number, d.raid_disk), (r, r), "slot {r} must be described at index {r}");
            assert!(d.state & DiskDescriptor090::STATE_SYNC != 0);
        }
        assert_eq!(s.disks[3].state, DiskDescriptor090::STATE_FAULTY);
        assert_eq!((s.this_disk.number, s.this_disk.raid_disk), (1, 1), "the rebuilt spare is now descriptor 1");
        assert_eq!(sb.active_roles(), vec![true, true, true]);
    }
}
