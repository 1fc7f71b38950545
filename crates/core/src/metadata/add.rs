//! The superblock a device gets when it is added to an existing array (`mdadm --add`): a
//! copy of a current member's superblock with the new device's number, uuid, placement and
//! size, as a spare. Pure: the engine writes it.

use super::sb090::DiskDescriptor090;
use super::sb1::FeatureMap;
use super::{sb090_offset_sectors, sb10_offset_sectors, DeviceRole, MetadataVersion, Superblock};

use crate::geometry::SECTOR_BYTES;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddError {
    #[error(
        "device of {size_bytes} bytes is too small: it can hold {usable_sectors} data sectors, the array needs {needed_sectors} per member"
    )]
    TooSmall { size_bytes: u64, usable_sectors: u64, needed_sectors: u64 },
    #[error("metadata {0} has no room for device number {1}")]
    NoDeviceNumber(MetadataVersion, u32),
}

/// A new spare's superblock and where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMemberSuperblock {
    pub superblock: Superblock,
    pub superblock_offset_bytes: u64,
    pub data_offset_bytes: u64,
}

/// Builds the superblock of a device joining the array of `template` (a current member's
/// superblock, already carrying the array's latest state) as a spare.
pub fn spare_superblock(
    template: &Superblock,
    version: MetadataVersion,
    dev_number: u32,
    device_uuid: [u8; 16],
    dev_size_bytes: u64,
) -> Result<NewMemberSuperblock, AddError> {
    let dev_sectors = dev_size_bytes / SECTOR_BYTES;
    match template {
        Superblock::V1(t) => {
            // md refuses a device number at or past its 1.x limit (`bind_rdev_to_array`), and
            // the role table would grow to it (see `metadata::check`).
            if dev_number >= super::check::SB1_MAX_DISKS {
                return Err(AddError::NoDeviceNumber(version, dev_number));
            }
            let mut sb = t.clone();
            let super_offset = match version {
                MetadataVersion::V1_1 => 0,
                MetadataVersion::V1_2 => 8,
                _ => sb10_offset_sectors(dev_size_bytes).unwrap_or(0),
            };
            let data_offset = if version == MetadataVersion::V1_0 { 0 } else { t.data_offset_sectors };
            // 1.0 keeps data below the superblock and the bitmap/bad-block space before it,
            // as the template reserved it.
            let reserved_after =
                if version == MetadataVersion::V1_0 { t.super_offset_sectors.saturating_sub(t.data_size_sectors) } else { 0 };
            let end = if version == MetadataVersion::V1_0 { super_offset.saturating_sub(reserved_after) } else { dev_sectors };
            let usable = end.saturating_sub(data_offset);
            let needed = t.size_sectors;
            if usable < needed || usable == 0 {
                return Err(AddError::TooSmall { size_bytes: dev_size_bytes, usable_sectors: usable, needed_sectors: needed });
            }
            sb.dev_number = dev_number;
            sb.device_uuid = device_uuid;
            sb.super_offset_sectors = super_offset;
            sb.data_offset_sectors = data_offset;
            sb.data_size_sectors = usable;
            sb.recovery_offset_raw = 0;
            // The new device starts with nothing rebuilt and an empty bad-block list: the
            // template's BAD_BLOCKS bit describes the template's own log (copied, it would
            // point at a log area the new device never had written; the concurrent
            // simulator's hot add found it, seed 960).
            sb.feature_map =
                FeatureMap(sb.feature_map.0 & !(FeatureMap::RECOVERY_OFFSET | FeatureMap::REPLACEMENT | FeatureMap::BAD_BLOCKS));
            sb.cnt_corrected_read = 0;
            let mut full = Superblock::V1(sb);
            full.set_device_role(dev_number, DeviceRole::Spare);
            Ok(NewMemberSuperblock {
                superblock: full,
                superblock_offset_bytes: super_offset * SECTOR_BYTES,
                data_offset_bytes: data_offset * SECTOR_BYTES,
            })
        }
        Superblock::V090(t) => {
            let mut sb = t.clone();
            let Some(sb_sector) = sb090_offset_sectors(dev_size_bytes) else {
                return Err(AddError::TooSmall {
                    size_bytes: dev_size_bytes,
                    usable_sectors: 0,
                    needed_sectors: u64::from(t.size_kib) * 2,
                });
            };
            if sb_sector < u64::from(t.size_kib) * 2 {
                return Err(AddError::TooSmall {
                    size_bytes: dev_size_bytes,
                    usable_sectors: sb_sector,
                    needed_sectors: u64::from(t.size_kib) * 2,
                });
            }
            let slot = sb.disks.get_mut(dev_number as usize).ok_or(AddError::NoDeviceNumber(MetadataVersion::V0_90, dev_number))?;
            let disk = DiskDescriptor090 { number: dev_number, raid_disk: dev_number, state: 0, ..DiskDescriptor090::empty() };
            *slot = disk.clone();
            sb.this_disk = disk;
            sb.nr_disks += 1;
            sb.spare_disks += 1;
            let mut full = Superblock::V090(sb);
            full.update_checksum();
            Ok(NewMemberSuperblock { superblock: full, superblock_offset_bytes: sb_sector * SECTOR_BYTES, data_offset_bytes: 0 })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Level;
    use crate::metadata::create::{plan_create, CreateRequest, NewDevice};
    use crate::metadata::sb1::MdTime;

    #[test]
    fn a_device_number_past_md_limit_is_refused() {
        let new = NewDevice { size_bytes: 8 << 20, device_uuid: [1; 16] };
        let req = CreateRequest::new(Level::Raid1, "t", vec![Some(new), Some(new)], [7; 16], MdTime(0));
        let template = plan_create(&req).expect("plan").devices[0].superblock.clone();
        assert!(spare_superblock(&template, MetadataVersion::V1_2, 1919, [2; 16], 8 << 20).is_ok());
        assert_eq!(
            spare_superblock(&template, MetadataVersion::V1_2, 1920, [2; 16], 8 << 20),
            Err(AddError::NoDeviceNumber(MetadataVersion::V1_2, 1920))
        );
    }

    #[test]
    fn a_new_device_starts_with_an_empty_bad_block_list_whatever_the_template_lists() {
        let new = NewDevice { size_bytes: 8 << 20, device_uuid: [1; 16] };
        let req = CreateRequest::new(Level::Raid1, "t", vec![Some(new), Some(new)], [7; 16], MdTime(0));
        let Superblock::V1(mut t) = plan_create(&req).expect("plan").devices[0].superblock.clone() else { panic!("v1") };
        assert!(t.bblog_offset_sectors != 0, "the created member has a log area");
        t.feature_map.0 |= FeatureMap::BAD_BLOCKS | FeatureMap::RECOVERY_OFFSET;
        let made = spare_superblock(&Superblock::V1(t), MetadataVersion::V1_2, 2, [2; 16], 8 << 20).unwrap();
        let Superblock::V1(sb) = made.superblock else { panic!("v1") };
        assert!(!sb.feature_map.contains(FeatureMap::BAD_BLOCKS) && !sb.feature_map.contains(FeatureMap::RECOVERY_OFFSET));
        assert!(sb.bblog_offset_sectors != 0, "it keeps a log area of its own, as md gives every member");
    }
}
