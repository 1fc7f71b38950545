//! Changing which devices belong to a running array: add a spare, re-add a former member,
//! remove a failed or spare device (as `mdadm --add` / `--re-add` / `--remove`).

use super::{now_seconds, superblock_bytes, Array, Device, DeviceState, EngineError};
use crate::member::Member;
use std::sync::Arc;
use uraid_core::geometry::Level;
use uraid_core::metadata::add::spare_superblock;
use uraid_core::metadata::{DeviceRole, MetadataVersion, Superblock, SuperblockLocation};

/// What [`Array::re_add_device`] did with a former member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReAdd {
    /// It took its old role back; its rebuild rewrites only the regions whose bitmap chunks
    /// are dirty (`dirty_chunks` of `chunks` when it was re-added).
    FromBitmap { role: usize, dirty_chunks: u64, chunks: u64 },
    /// It was added like a blank spare and is rebuilt in full, for `reason`.
    Full { reason: String },
}

impl std::fmt::Display for ReAdd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReAdd::FromBitmap { role, dirty_chunks, chunks } => {
                write!(f, "re-added with bitmap-based resync: {dirty_chunks} of {chunks} chunks dirty (role {role})")
            }
            ReAdd::Full { reason } => write!(f, "re-added: full rebuild ({reason})"),
        }
    }
}

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
        self.add_spare(member, device_uuid)?;
        self.start_recovery_if_possible();
        Ok(())
    }

    /// Adds a blank device as a spare and leaves it a spare, even where a role is missing:
    /// for a reshape that gives it a role itself (mdadm adds the new devices of a RAID0 grow
    /// to the RAID4 it made with recovery frozen, then starts the reshape).
    pub fn add_spare_for_reshape(&self, member: Arc<dyn Member>, device_uuid: [u8; 16]) -> Result<(), EngineError> {
        crate::create::check_device_is_free(member.as_ref()).map_err(|e| EngineError::Invalid(e.to_string()))?;
        self.add_spare(member, device_uuid)
    }

    fn add_spare(&self, member: Arc<dyn Member>, device_uuid: [u8; 16]) -> Result<(), EngineError> {
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
            .with_states()
            .position(|(_, _, state)| matches!(state, DeviceState::InSync(_)))
            .ok_or(super::Fault::Internal("no in-sync member to copy metadata from"))?;
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
        sb.set_array_state(meta.roster.events(), self.md_resync_offset(self.resync_offset_for_superblock()), now_seconds());
        member
            .write_at(&superblock_bytes(&sb), planned.superblock_offset_bytes)
            .and_then(|_| member.flush())
            .map_err(|e| EngineError::Invalid(format!("{}: {e}", member.label())))?;
        let device = Device::new(member, sb, planned.superblock_offset_bytes).map_err(EngineError::Invalid)?;
        debug_assert_eq!(device.data_offset, planned.data_offset_bytes);
        meta.roster.add_spare(dev_number, version != MetadataVersion::V0_90);
        meta.push(device);
        let resync = self.resync_offset_for_superblock();
        self.persist(&mut meta, resync);
        Ok(())
    }

    /// [`Array::re_add_device`] of a member that is still listed here as faulty under
    /// `label` (an NBD member whose server answers again): its faulty entry makes way for
    /// the re-add, and comes back if the re-add fails, so a failed attempt never drops the
    /// member from the array's list (it stays faulty, to be tried again).
    pub fn re_add_faulty_device(&self, label: &str, member: Arc<dyn Member>, device_uuid: [u8; 16]) -> Result<ReAdd, EngineError> {
        let (idx, old) = {
            let mut meta = self.lock_meta();
            let idx = device_index(&meta.devices, label)?;
            if meta.state(idx) != DeviceState::Faulty {
                return Err(EngineError::Invalid(format!("{label} is {}, not faulty", meta.state(idx))));
            }
            let entry = meta.roster.remove(idx).expect("a faulty device may be removed");
            let old = (meta.devices.remove(idx), entry);
            self.rebuild_io_map(&meta);
            (idx, old)
        };
        match self.re_add_device(member, device_uuid) {
            Ok(done) => Ok(done),
            Err(e) => {
                let mut meta = self.lock_meta();
                let at = idx.min(meta.devices.len());
                meta.roster.insert(at, old.1);
                meta.devices.insert(at, old.0);
                self.rebuild_io_map(&meta);
                Err(e)
            }
        }
    }

    /// md's `--re-add` of a former member: when its superblock says it left this array in
    /// sync in role R, R is still missing, and the array's write-intent bitmap covers every
    /// write it missed (its events are at least the bitmap's `events_cleared`: no clear of
    /// the bits since it left), it takes R back and its rebuild rewrites only the regions
    /// whose bitmap chunks are dirty (md's `super_1_validate` + `Bitmap_sync`). Otherwise it
    /// is added like a blank spare ([`Array::add_device_overwriting`]) and rebuilt in full;
    /// the answer says which, and why. RAID10 is always rebuilt in full (its bits count
    /// array sectors, its rebuild walks member sectors).
    pub fn re_add_device(&self, member: Arc<dyn Member>, device_uuid: [u8; 16]) -> Result<ReAdd, EngineError> {
        if !self.writable {
            return Err(EngineError::ReadOnly);
        }
        let probe = crate::scan::probe(member.as_ref());
        let found = probe.best().cloned();
        if found.is_none() && probe.rejected.is_empty() {
            return Err(EngineError::Invalid(format!("{} holds no md superblock: a re-add takes back a former member", member.label())));
        }
        let reason = match found {
            Some((loc, sb)) if sb.array_uuid() == self.uuid => match self.re_add_from_bitmap(&member, &loc, sb)? {
                Ok(done) => return Ok(done),
                Err(reason) => reason,
            },
            Some(_) => {
                return Err(EngineError::Invalid(format!(
                    "{} holds another array's superblock: a re-add takes back a former member",
                    member.label()
                )))
            }
            // md's magic is there, but not a superblock that can be used.
            None => "its superblock is not usable".to_string(),
        };
        self.add_device_overwriting(member, device_uuid)?;
        Ok(ReAdd::Full { reason })
    }

    /// The bitmap-based re-add, if every condition holds: `Ok(Err(reason))` when one does not
    /// (nothing was written then).
    fn re_add_from_bitmap(
        &self,
        member: &Arc<dyn Member>,
        loc: &SuperblockLocation,
        sb: Superblock,
    ) -> Result<Result<ReAdd, String>, EngineError> {
        let mut meta = self.lock_meta();
        let same = |d: &super::Device| match (d.member.identity(), member.identity()) {
            (Some(a), Some(b)) => a == b,
            _ => d.member.label() == member.label(),
        };
        if meta.devices.iter().any(|d| Arc::ptr_eq(&d.member, member) || same(d)) {
            return Err(EngineError::Invalid(format!("{} is already part of the array", member.label())));
        }
        let decision = self.re_add_check(&meta, member.as_ref(), loc, &sb);
        let role = match decision {
            Ok(role) => role,
            Err(reason) => return Ok(Err(reason)),
        };
        let Some((dirty_chunks, chunks)) = self.bitmap_dirty_count() else { return Ok(Err("the array has no write-intent bitmap".into())) };
        // Its bitmap first (its own copy is as old as it is), then it joins: superblocks
        // with it in role R and rebuilt up to 0, then it is written like the others.
        self.write_bitmap_to(member.as_ref(), loc.offset_bytes).map_err(|e| EngineError::Invalid(format!("{}: {e}", member.label())))?;
        let mut sb = sb;
        sb.set_recovery_offset(Some(0));
        let dev_number = sb.dev_number();
        let device = Device::new(member.clone(), sb, loc.offset_bytes).map_err(EngineError::Invalid)?;
        meta.roster.add_re_added(dev_number, role).map_err(|e| EngineError::Invalid(format!("{}: {e}", member.label())))?;
        meta.push(device);
        let resync = self.resync_offset_for_superblock();
        self.persist(&mut meta, resync);
        self.rebuild_io_map(&meta);
        Ok(Ok(ReAdd::FromBitmap { role, dirty_chunks, chunks }))
    }

    /// The role a former member may take back from the bitmap, or why it may not.
    fn re_add_check(&self, meta: &super::Meta, member: &dyn Member, loc: &SuperblockLocation, sb: &Superblock) -> Result<usize, String> {
        match self.level {
            Level::Raid1 | Level::Raid4 | Level::Raid5 | Level::Raid6 => {}
            Level::Raid10 => return Err("raid10's bitmap counts array sectors, not member sectors".into()),
            other => return Err(format!("{other} has no bitmap-based recovery")),
        }
        let Some(events_cleared) = self.bitmap_events_cleared() else { return Err("the array has no write-intent bitmap".into()) };
        let template = meta
            .with_states()
            .find(|(_, _, state)| matches!(state, DeviceState::InSync(_)))
            .map(|(_, d, _)| d)
            .ok_or_else(|| "no in-sync member to compare with".to_string())?;
        if sb.version() != template.sb.version() {
            return Err(format!("its superblock is {}, the array's {}", sb.version(), template.sb.version()));
        }
        if sb.shape() != template.sb.shape() {
            return Err("its superblock describes another shape of the array".into());
        }
        let role = match sb.role() {
            DeviceRole::Active(r) if (r as usize) < self.geometry.raid_disks() => r as usize,
            DeviceRole::Active(r) => return Err(format!("its superblock records role {r}, outside the array")),
            DeviceRole::Spare => return Err("its superblock records it as a spare".into()),
            DeviceRole::Faulty => return Err("its superblock records it as faulty".into()),
            other => return Err(format!("its superblock records it as {other:?}")),
        };
        if sb.is_replacement() {
            return Err("it was a replacement still being copied".into());
        }
        if let Some(done) = sb.recovery_offset_sectors() {
            return Err(format!("it was still being rebuilt when it left (recovered to sector {done})"));
        }
        if let Some((_, d, _)) = meta.with_states().find(|(_, _, state)| state.role() == Some(role)) {
            return Err(format!("its role {role} is held by {} now", d.member.label()));
        }
        let events = sb.events();
        if events < events_cleared {
            return Err(format!(
                "its events {events} are older than the bitmap's events_cleared {events_cleared}: the bits were cleared since it left"
            ));
        }
        if events > meta.roster.events() {
            return Err(format!(
                "its events {events} are newer than the array's {}: it was written apart from the array",
                meta.roster.events()
            ));
        }
        // Written apart from the array (assembled on its own, say)? Then it would record the
        // array's members as missing; as it left, it recorded each of them in its role.
        for (_, d, state) in meta.with_states() {
            if let DeviceState::InSync(r) = state {
                if sb.role_of_device(d.sb.dev_number()) != DeviceRole::Active(r as u32) {
                    return Err(format!("its superblock does not record {} as in sync in role {r}", d.member.label()));
                }
            }
        }
        if let Some(d) = meta.devices.iter().find(|d| d.sb.dev_number() == sb.dev_number()) {
            return Err(format!("its device number {} is taken by {}", sb.dev_number(), d.member.label()));
        }
        let rel = |s: &Superblock, at: u64| s.bitmap_offset_bytes(at).map(|b| b as i128 - at as i128);
        if rel(sb, loc.offset_bytes).is_none() || rel(sb, loc.offset_bytes) != rel(&template.sb, template.sb_offset) {
            return Err("its bitmap is not where the array's members keep theirs".into());
        }
        let needed = self.sync_sectors();
        let data_end = (sb.data_offset_sectors() + needed) * uraid_core::geometry::SECTOR_BYTES;
        if sb.member_data_size_sectors(member.size_bytes()) < needed || data_end > member.size_bytes() {
            return Err("it is too small for the array's data".into());
        }
        Ok(role)
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
        let is_spare = self.lock_meta().with_states().any(|(_, d, state)| d.member.label() == spare_label && state == DeviceState::Spare);
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
            let state = meta.state(device_index(&meta.devices, label)?);
            let DeviceState::InSync(role) = state else {
                return Err(EngineError::Invalid(format!("{label} is {state}; only an in-sync member can be replaced")));
            };
            if meta.roster.job_running() {
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
        let (Ok(old), Ok(new)) = (device_index(&meta.devices, label), device_index(&meta.devices, new_label)) else { return };
        // A failure since the checks above may already have taken the spare for a rebuild,
        // or the old member: then the roster refuses and nothing changes.
        if meta.state(old) == DeviceState::InSync(role) && meta.roster.start_replacement(old, new).is_ok() {
            self.rebuild_io_map(&meta);
        }
    }

    /// Removes a faulty or spare device (by label). Active members must be failed first.
    pub fn remove_device(&self, label: &str) -> Result<(), EngineError> {
        let mut meta = self.lock_meta();
        let idx = device_index(&meta.devices, label)?;
        if let Err(uraid_core::state::RosterError::WrongState(other)) = meta.roster.remove(idx) {
            return Err(EngineError::Invalid(format!("{label} is {other}; fail it first (uraid fail)")));
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
        self.fail_device_as(idx, super::FailureKind::Requested, "failed by request");
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

/// The position of the device labelled `label`.
fn device_index(devices: &[super::Device], label: &str) -> Result<usize, EngineError> {
    devices.iter().position(|d| d.member.label() == label).ok_or_else(|| EngineError::Invalid(format!("{label} is not part of the array")))
}
