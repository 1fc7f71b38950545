//! Writing a planned array (`uraid_core::metadata::create`) onto devices: superblocks,
//! internal bitmaps, and nothing else (md does not zero member data either; the initial
//! resync or recovery makes redundancy consistent).

use crate::member::Member;
use crate::scan::probe;
use std::sync::Arc;
use uraid_core::metadata::create::{CreatePlan, DeviceRef};
use uraid_core::metadata::superblock_locations;

#[derive(Debug, thiserror::Error)]
pub enum CreateIoError {
    #[error("{device} already holds an md superblock (array {uuid}); use --force to overwrite it")]
    HoldsArray { device: String, uuid: String },
    #[error("{device} holds a {what} signature; use --force to overwrite it")]
    HoldsFilesystem { device: String, what: &'static str },
    #[error("writing {device}: {source}")]
    Io { device: String, source: std::io::Error },
}

/// Known signatures at fixed offsets (offset, magic, name): enough to stop the common
/// "wrong disk" mistake, not a full blkid.
const SIGNATURES: &[(u64, &[u8], &str)] = &[
    (1080, &[0x53, 0xef], "ext2/3/4"),
    (0, b"XFSB", "xfs"),
    (65600, b"_BHRfS_M", "btrfs"),
    (4086, b"SWAPSPACE2", "swap"),
    (510, &[0x55, 0xaa], "partition table (MBR)"),
    (512, b"EFI PART", "GPT partition table"),
    (0, b"LUKS\xba\xbe", "LUKS"),
];

/// Refuses a device that already carries an md superblock or a known signature.
pub fn check_device_is_free(member: &dyn Member) -> Result<(), CreateIoError> {
    let p = probe(member);
    if let Some((_, sb)) = p.any() {
        return Err(CreateIoError::HoldsArray { device: member.label().into(), uuid: sb.array_uuid().to_string() });
    }
    for (off, magic, what) in SIGNATURES {
        let mut buf = vec![0u8; magic.len()];
        if member.read_at(&mut buf, *off).is_ok() && buf == *magic {
            return Err(CreateIoError::HoldsFilesystem { device: member.label().into(), what });
        }
    }
    Ok(())
}

/// Writes `plan` onto the devices: `members[slot]` (None = missing) and `spares`.
/// Superblock locations of other metadata versions are cleared, so only the new array is
/// found on the device afterwards.
pub fn write_plan(plan: &CreatePlan, members: &[Option<Arc<dyn Member>>], spares: &[Arc<dyn Member>]) -> Result<(), CreateIoError> {
    for planned in &plan.devices {
        let member = match planned.device {
            DeviceRef::Member(i) => members.get(i).cloned().flatten(),
            DeviceRef::Spare(i) => spares.get(i).cloned(),
        };
        let Some(member) = member else { continue };
        let io = |e: std::io::Error| CreateIoError::Io { device: member.label().into(), source: e };
        for loc in superblock_locations(member.size_bytes()) {
            if loc.offset_bytes != planned.superblock_offset_bytes {
                member.write_at(&vec![0u8; loc.len_bytes], loc.offset_bytes).map_err(io)?;
            }
        }
        if let Some(bitmap) = &planned.bitmap {
            member.write_at(&bitmap.encode(), bitmap.offset_bytes).map_err(io)?;
        }
        member.write_at(&planned.superblock_bytes(), planned.superblock_offset_bytes).map_err(io)?;
        member.flush().map_err(io)?;
    }
    Ok(())
}
