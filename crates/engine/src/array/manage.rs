//! Changing which devices belong to a running array: add a spare, remove a failed or spare
//! device (as `mdadm --add` / `--remove`).

use super::{now_seconds, superblock_bytes, Array, Device, DeviceState, EngineError};
use crate::member::Member;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use uraid_core::metadata::add::spare_superblock;
use uraid_core::metadata::{MetadataVersion, Superblock};

impl Array {
    /// Writes a spare superblock (and the array's bitmap, if any) onto `member` and adds it.
    /// If a role is missing, it becomes that role's recovery target at once.
    pub fn add_device(&self, member: Arc<dyn Member>, device_uuid: [u8; 16]) -> Result<(), EngineError> {
        if !self.writable {
            return Err(EngineError::ReadOnly);
        }
        crate::create::check_device_is_free(member.as_ref()).map_err(|e| EngineError::Invalid(e.to_string()))?;
        let mut meta = self.lock_meta();
        if meta.devices.iter().any(|d| Arc::ptr_eq(&d.member, &member) || d.member.label() == member.label()) {
            return Err(EngineError::Invalid(format!("{} is already part of the array", member.label())));
        }
        let template_idx = meta
            .devices
            .iter()
            .position(|d| matches!(d.state, DeviceState::InSync(_)))
            .ok_or_else(|| EngineError::Failed("no in-sync member to copy metadata from".into()))?;
        let template = &meta.devices[template_idx];
        let version = match &template.sb {
            Superblock::V090(_) => MetadataVersion::V0_90,
            Superblock::V1(sb) => match sb.super_offset_sectors {
                0 => MetadataVersion::V1_1,
                8 => MetadataVersion::V1_2,
                _ => MetadataVersion::V1_0,
            },
        };
        let used: Vec<u32> = meta.devices.iter().map(|d| d.sb.dev_number()).collect();
        // Numbers below raid_disks stay with their original slots, as mdadm numbers new devices.
        let dev_number = (self.geometry.raid_disks() as u32..).find(|n| !used.contains(n)).unwrap_or(u32::MAX);
        let planned = spare_superblock(&template.sb, version, dev_number, device_uuid, member.size_bytes())
            .map_err(|e| EngineError::Invalid(format!("{}: {e}", member.label())))?;
        // Copy the bitmap area from the template member, at the same place relative to the
        // superblock (md's internal bitmap follows the superblock on every member).
        if let Superblock::V1(t) = &template.sb {
            if let Some(off) = t.bitmap_offset_sectors() {
                let from = template.sb_offset.checked_add_signed(off as i64 * 512);
                let to = planned.superblock_offset_bytes.checked_add_signed(off as i64 * 512);
                if let (Some(from), Some(to)) = (from, to) {
                    copy_bitmap(template.member.as_ref(), from, member.as_ref(), to)?;
                }
            }
        }
        let mut sb = planned.superblock;
        sb.set_array_state(meta.events, if self.dirty.load(Ordering::Acquire) { 0 } else { self.resync_position() }, now_seconds());
        member
            .write_at(&superblock_bytes(&sb), planned.superblock_offset_bytes)
            .and_then(|_| member.flush())
            .map_err(|e| EngineError::Invalid(format!("{}: {e}", member.label())))?;
        meta.devices.push(Device {
            member,
            sb,
            sb_offset: planned.superblock_offset_bytes,
            data_offset: planned.data_offset_bytes,
            state: DeviceState::Spare,
            failure: None,
        });
        let resync = if self.dirty.load(Ordering::Acquire) { 0 } else { self.resync_position() };
        self.persist(&mut meta, resync);
        drop(meta);
        self.start_recovery_if_possible();
        Ok(())
    }

    /// Removes a faulty or spare device (by label). Active members must be failed first.
    pub fn remove_device(&self, label: &str) -> Result<(), EngineError> {
        let mut meta = self.lock_meta();
        let idx = meta
            .devices
            .iter()
            .position(|d| d.member.label() == label)
            .ok_or_else(|| EngineError::Invalid(format!("{label} is not part of the array")))?;
        match meta.devices[idx].state {
            DeviceState::Faulty | DeviceState::Spare => {}
            other => {
                return Err(EngineError::Invalid(format!("{label} is {other:?}; fail it first (uraid fail)")));
            }
        }
        meta.devices.remove(idx);
        if self.writable {
            let resync = if self.dirty.load(Ordering::Acquire) { 0 } else { self.resync_position() };
            self.persist(&mut meta, resync);
        }
        self.rebuild_io_map(&meta);
        Ok(())
    }

    /// Fails the device with this label (any state but already faulty).
    pub fn fail_device_by_label(&self, label: &str) -> Result<(), EngineError> {
        let idx = {
            let meta = self.lock_meta();
            meta.devices
                .iter()
                .position(|d| d.member.label() == label)
                .ok_or_else(|| EngineError::Invalid(format!("{label} is not part of the array")))?
        };
        self.fail_device(idx, "failed by request");
        Ok(())
    }
}

/// Copies an internal bitmap (superblock and bits) from one member to another.
fn copy_bitmap(from: &dyn Member, from_offset: u64, to: &dyn Member, to_offset: u64) -> Result<(), EngineError> {
    use uraid_core::metadata::BitmapSuperblock;
    let mut head = vec![0u8; 256];
    let io = |e: std::io::Error| EngineError::Invalid(format!("copying the bitmap: {e}"));
    from.read_at(&mut head, from_offset).map_err(io)?;
    let bsb = BitmapSuperblock::decode(&head).map_err(|e| EngineError::Invalid(format!("template bitmap: {e}")))?;
    let len = (256 + bsb.bits_len_bytes()).div_ceil(512) * 512;
    let mut area = vec![0u8; len as usize];
    from.read_at(&mut area, from_offset).map_err(io)?;
    to.write_at(&area, to_offset).map_err(io)
}
