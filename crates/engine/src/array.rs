//! An assembled md array: members by role, its geometry, and reads that reconstruct what a
//! missing or failing member held.

use crate::member::Member;
use crate::scan::probe;
use std::sync::Arc;
use uraid_core::assemble::{assemble, AssembleOptions, Candidate, Decision, Exclusion};
use uraid_core::geometry::{ArraySpec, Geometry, Level, Location, MemberSector, Placement, SECTOR_BYTES};
use uraid_core::metadata::{MdUuid, Superblock};
use uraid_parity::Block;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{device}: no md superblock found{detail}")]
    NoSuperblock { device: String, detail: String },
    #[error("cannot assemble: {0}")]
    Refused(String),
    #[error("unsupported array: {0}")]
    Unsupported(String),
    #[error("read of {len} bytes at {offset} is beyond the array end ({size} bytes)")]
    OutOfRange { offset: u64, len: usize, size: u64 },
    #[error("data at array byte {offset} is lost: {detail}")]
    Unreadable { offset: u64, detail: String },
    #[error("I/O error on {device}: {source}")]
    Io { device: String, source: std::io::Error },
}

/// One in-sync member serving a role.
#[derive(Clone)]
struct RoleMember {
    member: Arc<dyn Member>,
    data_offset_bytes: u64,
}

/// An assembled array (read side; the write path arrives with the engine issue).
pub struct Array {
    geometry: Geometry,
    roles: Vec<Option<RoleMember>>,
    uuid: MdUuid,
    superblock: Superblock,
    size_bytes: u64,
}

/// What assembly did with each given device, for the user.
#[derive(Debug, Clone, Default)]
pub struct AssemblyReport {
    pub warnings: Vec<String>,
    pub degraded_roles: Vec<u32>,
}

/// A person-readable reason for leaving a device out.
fn exclusion_text(why: &Exclusion) -> String {
    match why {
        Exclusion::Stale { events, newest_events } => format!("stale (events {events} < {newest_events})"),
        Exclusion::NewerThanArray { events, newest_events } => {
            format!("newer than the array (events {events} > {newest_events}): a stray spare or replacement")
        }
        Exclusion::ReportsNewestFailed { newest } => {
            format!("its superblock records member {newest} as failed (split brain); use --force to override")
        }
        Exclusion::Duplicate { role, kept } => format!("another member (#{kept}) with more events claims role {role}"),
        Exclusion::DeviceTooSmall { needed_bytes, device_size_bytes } => {
            format!("device too small: {device_size_bytes} bytes, its superblock needs {needed_bytes} (truncated?)")
        }
        Exclusion::UnknownRole(r) => format!("role {r:#x} is not one md writes"),
    }
}

impl Array {
    /// Probes `devices`, decides as md would which of them form the array, and builds it.
    /// Nothing is written to any device.
    pub fn assemble(devices: Vec<Arc<dyn Member>>, opts: &AssembleOptions) -> Result<(Array, AssemblyReport), EngineError> {
        let mut candidates = Vec::new();
        for dev in &devices {
            let p = probe(dev.as_ref());
            let Some((_, sb)) = p.best().cloned() else {
                let detail = if p.rejected.is_empty() {
                    String::new()
                } else {
                    let why: Vec<String> =
                        p.rejected.iter().map(|(v, off, e)| format!("{v} superblock at byte {off}: {e}")).collect();
                    format!(" ({})", why.join("; "))
                };
                return Err(EngineError::NoSuperblock { device: dev.label().to_string(), detail });
            };
            candidates.push(Candidate { label: dev.label().to_string(), superblock: sb, device_size_bytes: dev.size_bytes() });
        }
        let assembly = assemble(&candidates, opts);
        let plan = match (&assembly.decision, assembly.plan) {
            (Decision::Refuse { reason }, plan) => {
                // Say which devices were left out and why: often that is the real cause.
                let left_out: Vec<String> = plan
                    .iter()
                    .flat_map(|p| p.excluded.iter())
                    .map(|(i, why)| format!("{}: {}", candidates[*i].label, exclusion_text(why)))
                    .collect();
                let detail = if left_out.is_empty() { String::new() } else { format!(" [left out: {}]", left_out.join("; ")) };
                return Err(EngineError::Refused(format!("{reason}{detail}")));
            }
            (_, Some(plan)) => plan,
            (_, None) => return Err(EngineError::Refused("no array found among the devices".into())),
        };
        let mut report = AssemblyReport { degraded_roles: plan.missing_roles.clone(), ..Default::default() };
        for (idx, why) in &plan.excluded {
            report.warnings.push(format!("{}: {}; its data is not used", candidates[*idx].label, exclusion_text(why)));
        }
        for (i, c) in candidates.iter().enumerate() {
            if c.superblock.array_uuid() != plan.uuid {
                report.warnings.push(format!(
                    "{}: belongs to another array ({}); left out",
                    c.label,
                    c.superblock.array_uuid()
                ));
            } else if plan.spares.contains(&i) {
                report.warnings.push(format!("{}: spare; holds no data", c.label));
            } else if plan.rebuilding.iter().any(|r| r.member == i) {
                // Only part of it is recovered; reconstructing from the others is always right.
                report.warnings.push(format!("{}: partly rebuilt; its role is read from the other members", c.label));
            }
        }
        let newest = &candidates[plan.newest].superblock;
        if newest.reshape_active() {
            return Err(EngineError::Unsupported(
                "a reshape is in progress; finish it in Linux md first (uraid does not yet read mid-reshape arrays)".into(),
            ));
        }
        let shape = plan.shape;
        let level = Level::from_md(shape.level.raw()).map_err(|e| EngineError::Unsupported(e.to_string()))?;
        let raid_disks = shape.raid_disks as usize;
        let member_sectors: Vec<u64> = match level {
            Level::Linear | Level::Raid0 => (0..raid_disks)
                .map(|role| {
                    plan.members[role]
                        .map(|i| candidates[i].superblock.member_data_size_sectors(candidates[i].device_size_bytes))
                        .ok_or_else(|| EngineError::Refused(format!("{level} member for role {role} is missing")))
                })
                .collect::<Result<_, _>>()?,
            _ => vec![shape.component_size_sectors; raid_disks],
        };
        let spec = ArraySpec { level, layout: shape.layout, chunk_sectors: shape.chunk_sectors, raid_disks, member_sectors };
        let geometry = Geometry::new(&spec).map_err(|e| EngineError::Unsupported(e.to_string()))?;
        let rebuilding: Vec<usize> = plan.rebuilding.iter().map(|r| r.member).collect();
        let roles = plan
            .members
            .iter()
            .map(|m| {
                m.filter(|i| !rebuilding.contains(i)).map(|i| RoleMember {
                    member: devices[i].clone(),
                    data_offset_bytes: candidates[i].superblock.data_offset_sectors() * SECTOR_BYTES,
                })
            })
            .collect::<Vec<_>>();
        for (role, r) in roles.iter().enumerate() {
            if r.is_none() && !report.degraded_roles.contains(&(role as u32)) {
                report.degraded_roles.push(role as u32);
            }
        }
        let size_bytes = geometry.array_sectors() * SECTOR_BYTES;
        Ok((Array { geometry, roles, uuid: plan.uuid, superblock: newest.clone(), size_bytes }, report))
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    pub fn uuid(&self) -> MdUuid {
        self.uuid
    }
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }
    pub fn superblock(&self) -> &Superblock {
        &self.superblock
    }

    /// Reads `buf.len()` bytes at array byte `offset`. Offset and length need not be
    /// sector-aligned.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), EngineError> {
        let end = offset.checked_add(buf.len() as u64).filter(|e| *e <= self.size_bytes);
        if end.is_none() {
            return Err(EngineError::OutOfRange { offset, len: buf.len(), size: self.size_bytes });
        }
        if buf.is_empty() {
            return Ok(());
        }
        // Work in whole sectors, then copy out the requested bytes.
        let first_sector = offset / SECTOR_BYTES;
        let last_sector = (offset + buf.len() as u64).div_ceil(SECTOR_BYTES);
        let lead = (offset - first_sector * SECTOR_BYTES) as usize;
        let aligned = lead == 0 && buf.len() % SECTOR_BYTES as usize == 0;
        let mut scratch = Vec::new();
        let target: &mut [u8] = if aligned {
            buf
        } else {
            scratch.resize(((last_sector - first_sector) * SECTOR_BYTES) as usize, 0);
            &mut scratch
        };
        let pieces = self
            .geometry
            .split(first_sector, last_sector - first_sector)
            .map_err(|e| EngineError::Unreadable { offset, detail: e.to_string() })?;
        let mut at = 0usize;
        for piece in pieces {
            let len = (piece.sectors * SECTOR_BYTES) as usize;
            self.read_piece(&piece.placement, piece.array_sector, &mut target[at..at + len])?;
            at += len;
        }
        if !aligned {
            buf.copy_from_slice(&scratch[lead..lead + buf.len()]);
        }
        Ok(())
    }

    fn read_member(&self, ms: MemberSector, out: &mut [u8]) -> Result<(), String> {
        match &self.roles[ms.role] {
            None => Err(format!("role {} is missing", ms.role)),
            Some(r) => r
                .member
                .read_at(out, r.data_offset_bytes + ms.sector * SECTOR_BYTES)
                .map_err(|e| format!("{}: {e}", r.member.label())),
        }
    }

    fn read_piece(&self, placement: &Placement, array_sector: u64, out: &mut [u8]) -> Result<(), EngineError> {
        let lost = |detail: String| EngineError::Unreadable { offset: array_sector * SECTOR_BYTES, detail };
        match placement {
            Placement::Single(ms) => self.read_member(*ms, out).map_err(lost),
            Placement::Mirrored(copies) => {
                let mut errors = Vec::new();
                for ms in copies {
                    match self.read_member(*ms, out) {
                        Ok(()) => return Ok(()),
                        Err(e) => errors.push(e),
                    }
                }
                Err(lost(format!("no copy readable: {}", errors.join("; "))))
            }
            Placement::Striped(loc) => match self.read_member(MemberSector { role: loc.role, sector: loc.member_sector }, out) {
                Ok(()) => Ok(()),
                Err(first) => self.reconstruct(loc, out).map_err(|e| lost(format!("{first}; reconstruction failed: {e}"))),
            },
        }
    }

    /// Rebuilds the data block at `loc` (a run inside one chunk) from the rest of its stripe.
    fn reconstruct(&self, loc: &Location, out: &mut [u8]) -> Result<(), String> {
        let parity = self.geometry.as_parity().ok_or("not a parity level")?;
        let roles = parity.stripe_roles(loc.stripe);
        let len = out.len();
        let sector = loc.member_sector;
        let read = |role: usize| -> Option<Vec<u8>> {
            let mut b = vec![0u8; len];
            self.read_member(MemberSector { role, sector }, &mut b).ok().map(|_| b)
        };
        let data: Vec<Option<Vec<u8>>> =
            roles.data.iter().map(|&r| if r == loc.role { None } else { read(r) }).collect();
        let p = read(roles.p);
        let missing_data: Vec<usize> = (0..data.len()).filter(|&i| data[i].is_none()).collect();
        if let (Some(p), [only]) = (&p, missing_data.as_slice()) {
            if *only == loc.data_index {
                let mut blocks: Vec<Vec<u8>> = data.into_iter().map(|d| d.unwrap_or_else(|| vec![0u8; len])).collect();
                let mut refs: Vec<&mut [u8]> = blocks.iter_mut().map(|b| b.as_mut_slice()).collect();
                uraid_parity::recover_from_p(&mut refs, loc.data_index, p).map_err(|e| e.to_string())?;
                out.copy_from_slice(&blocks[loc.data_index]);
                return Ok(());
            }
        }
        let Some(q_role) = roles.q else {
            return Err(format!("{} blocks of stripe {} unreadable; RAID4/5 recovers one", missing_data.len() + p.is_none() as usize, loc.stripe));
        };
        let q = read(q_role);
        // RAID6: lay the data out in md's syndrome slot order (Q weights are not array order).
        let sources = roles.syndrome_sources();
        let mut slots: Vec<Vec<u8>> = Vec::with_capacity(sources.len());
        let mut lost = Vec::new();
        for (slot, src) in sources.iter().enumerate() {
            match src.and_then(|i| data[i].clone().map(|b| (i, b))) {
                Some((_, b)) => slots.push(b),
                None => {
                    slots.push(vec![0u8; len]);
                    if src.is_some() {
                        lost.push(Block::Data(slot));
                    }
                }
            }
        }
        let mut p = p.unwrap_or_else(|| {
            lost.push(Block::P);
            vec![0u8; len]
        });
        let mut q = q.unwrap_or_else(|| {
            lost.push(Block::Q);
            vec![0u8; len]
        });
        let mut refs: Vec<&mut [u8]> = slots.iter_mut().map(|b| b.as_mut_slice()).collect();
        uraid_parity::recover_raid6(&mut refs, &mut p, &mut q, &lost).map_err(|e| e.to_string())?;
        let slot = roles.q_exponents[loc.data_index] as usize;
        out.copy_from_slice(&slots[slot]);
        Ok(())
    }
}
