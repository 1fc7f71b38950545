//! Changing which devices belong to a running array: add a spare, remove a failed or spare
//! device (as `mdadm --add` / `--remove`).

use super::{now_seconds, superblock_bytes, Array, Device, DeviceState, EngineError};
use crate::member::Member;
use std::sync::Arc;
use uraid_core::metadata::add::spare_superblock;
use uraid_core::metadata::{MetadataVersion, Superblock};

impl Array {
    /// The label of the device attached to the array (any state) that is `id`, so control
    /// commands match members by what they are, not by how a path spells them.
    pub fn label_of_identity(&self, id: crate::ownership::DeviceIdentity) -> Option<String> {
        self.lock_meta().devices.iter().find(|d| d.member.identity() == Some(id)).map(|d| d.member.label().to_string())
    }

    /// Writes a spare superblock (and the array's bitmap, if any) onto `member` and adds it.
    /// If a role is missing, it becomes that role's recovery target at once.
    /// Refused when the device holds another md superblock or a filesystem signature (see
    /// [`Array::add_device_overwriting`]).
    pub fn add_device(&self, member: Arc<dyn Member>, device_uuid: [u8; 16]) -> Result<(), EngineError> {
        crate::create::check_device_is_free(member.as_ref()).map_err(|e| EngineError::Invalid(e.to_string()))?;
        self.add_device_overwriting(member, device_uuid)
    }

    /// [`Array::add_device`] over whatever the device holds (mdadm's `--force`, or a
    /// `--re-add` of a former member, whose old superblock is replaced by a spare's).
    pub fn add_device_overwriting(&self, member: Arc<dyn Member>, device_uuid: [u8; 16]) -> Result<(), EngineError> {
        if !self.writable {
            return Err(EngineError::ReadOnly);
        }
        if matches!(self.level, uraid_core::geometry::Level::Raid0 | uraid_core::geometry::Level::Linear) {
            return Err(EngineError::Invalid(format!("{} has no redundancy: a spare would never be used", self.level)));
        }
        let mut meta = self.lock_meta();
        let same = |d: &super::Device| match (d.member.identity(), member.identity()) {
            (Some(a), Some(b)) => a == b,
            _ => d.member.label() == member.label(),
        };
        if meta.devices.iter().any(|d| Arc::ptr_eq(&d.member, &member) || same(d)) {
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
        sb.set_array_state(meta.events, self.resync_offset_for_superblock(), now_seconds());
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
        let resync = self.resync_offset_for_superblock();
        self.persist(&mut meta, resync);
        drop(meta);
        self.start_recovery_if_possible();
        Ok(())
    }

    /// md's hot replace (`mdadm --replace old --with new`): `member` becomes a spare, then
    /// the replacement of in-sync member `label`'s role. Both are written from now on; the
    /// recovery job copies the old member onto the new one (rebuilding from redundancy where
    /// the old one fails a read, which fails it), then the new one takes the role and the old
    /// one is marked faulty. Redundancy is never lower than before, unlike fail + rebuild.
    pub fn replace_device(&self, label: &str, member: Arc<dyn Member>, device_uuid: [u8; 16]) -> Result<(), EngineError> {
        let role = self.replaceable_role(label)?;
        let new_label = member.label().to_string();
        self.add_device(member, device_uuid)?;
        self.start_replacement(label, role, &new_label);
        Ok(())
    }

    /// [`Array::replace_device`] over whatever the new device holds (mdadm's `--force`).
    pub fn replace_device_overwriting(&self, label: &str, member: Arc<dyn Member>, device_uuid: [u8; 16]) -> Result<(), EngineError> {
        let role = self.replaceable_role(label)?;
        let new_label = member.label().to_string();
        self.add_device_overwriting(member, device_uuid)?;
        self.start_replacement(label, role, &new_label);
        Ok(())
    }

    /// [`Array::replace_device`] with a spare already attached to the array.
    pub fn replace_with_spare(&self, label: &str, spare_label: &str) -> Result<(), EngineError> {
        let role = self.replaceable_role(label)?;
        let is_spare = self.lock_meta().devices.iter().any(|d| d.member.label() == spare_label && d.state == DeviceState::Spare);
        if !is_spare {
            return Err(EngineError::Invalid(format!("{spare_label} is not a spare of this array")));
        }
        self.start_replacement(label, role, spare_label);
        Ok(())
    }

    /// The role of in-sync member `label`, if it may be replaced now.
    fn replaceable_role(&self, label: &str) -> Result<usize, EngineError> {
        if !self.writable {
            return Err(EngineError::ReadOnly);
        }
        if !self.level.has_redundancy() {
            return Err(EngineError::Invalid(format!("{} has no redundancy: there is nothing to replace a member with", self.level)));
        }
        let role = {
            let meta = self.lock_meta();
            let d = meta
                .devices
                .iter()
                .find(|d| d.member.label() == label)
                .ok_or_else(|| EngineError::Invalid(format!("{label} is not part of the array")))?;
            let DeviceState::InSync(role) = d.state else {
                return Err(EngineError::Invalid(format!("{label} is {}; only an in-sync member can be replaced", d.state)));
            };
            if meta.devices.iter().any(|d| matches!(d.state, DeviceState::Recovering { .. } | DeviceState::Replacing { .. })) {
                return Err(EngineError::Invalid("a rebuild or replacement is already running; replace again when it is done".into()));
            }
            role
        };
        let missing = self.missing_roles();
        if !missing.is_empty() {
            return Err(EngineError::Invalid(format!(
                "the array is degraded (roles {missing:?} missing): add the new device as a spare so it rebuilds a missing role first (uraid add)"
            )));
        }
        Ok(role)
    }

    /// Spare `new_label` starts copying in-sync member `label` (role `role`).
    fn start_replacement(&self, label: &str, role: usize, new_label: &str) {
        let mut meta = self.lock_meta();
        let new = meta.devices.iter().position(|d| d.member.label() == new_label);
        let old_still_in_sync = meta.devices.iter().any(|d| d.member.label() == label && d.state == DeviceState::InSync(role));
        // A failure since the checks above may already have taken the spare for a rebuild.
        if let Some(new) = new.filter(|&i| meta.devices[i].state == DeviceState::Spare && old_still_in_sync) {
            meta.devices[new].state = DeviceState::Replacing { role, done: 0 };
            self.rebuild_io_map(&meta);
        }
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
                return Err(EngineError::Invalid(format!("{label} is {other}; fail it first (uraid fail)")));
            }
        }
        meta.devices.remove(idx);
        if self.writable {
            let resync = self.resync_offset_for_superblock();
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
