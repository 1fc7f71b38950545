//! Finding md superblocks on members: every location md may use, decoded, with the reasons
//! locations that look like a superblock were rejected (so a corrupt one is named, not
//! silently ignored).
//!
//! A superblock is usable only if its checksum is right, it sits where it says it does, and
//! everything it describes fits the device and md's limits
//! ([`uraid_core::metadata::check`]), including the whole write-intent bitmap when it has
//! one. Nothing a superblock says is used to size an allocation before that.

use crate::member::Member;
use std::sync::Arc;
use uraid_core::metadata::check::{check_bitmap, check_superblock, SuperblockProblem};
use uraid_core::metadata::{superblock_locations, BitmapSuperblock, MetadataError, MetadataVersion, Superblock, SuperblockLocation};

/// What probing one member found.
#[derive(Debug, Clone)]
pub struct Probe {
    /// Usable superblocks (decoded, checksum correct, at the place they say they are,
    /// within md's limits and the device; a device too small for its data area is kept here
    /// so assembly can leave it out with that reason).
    pub found: Vec<(SuperblockLocation, Superblock)>,
    /// Locations carrying md's magic that are not usable: (version, offset, why).
    pub rejected: Vec<(MetadataVersion, u64, String)>,
    /// Superblocks with a correct checksum that describe something impossible (also listed,
    /// with the reason, in `rejected`). Never assembled; they still mark the device as
    /// holding md metadata.
    pub invalid: Vec<(SuperblockLocation, Superblock)>,
    /// Locations whose read failed with an I/O error (not for being past the end of a
    /// short device): (version, offset, the error).
    pub unreadable: Vec<(MetadataVersion, u64, String)>,
}

impl Probe {
    /// The superblock to use: md prefers 1.x over a leftover 0.90 at the end, and of 1.x the
    /// one with the most events (only one can be at its recorded super_offset in practice).
    pub fn best(&self) -> Option<&(SuperblockLocation, Superblock)> {
        self.found.iter().max_by_key(|(loc, sb)| (loc.version != MetadataVersion::V0_90, sb.events()))
    }

    /// The superblock that makes the device a member of some md array, usable or not
    /// (`create` must not write over either).
    pub fn any(&self) -> Option<&(SuperblockLocation, Superblock)> {
        self.best().or(self.invalid.first())
    }

    /// No superblock found because the device failed to read where one would be: a dying
    /// member, which assembly leaves out as missing (mdadm skips a device it cannot read),
    /// unlike a readable device with no superblock (the wrong device: refused).
    pub fn failed_to_read(&self) -> bool {
        self.best().is_none() && self.invalid.is_empty() && !self.unreadable.is_empty()
    }
}

/// A device and what probing it found.
pub type Probed = (Arc<dyn Member>, Probe);

/// Probes `devices` once each and splits them into those that may be assembled (with
/// their probe) and the labels of those that failed to read where a superblock would be
/// ([`Probe::failed_to_read`]): md's missing members.
pub fn probe_leaving_out_unreadable(devices: Vec<Arc<dyn Member>>) -> (Vec<Probed>, Vec<String>) {
    let mut readable = Vec::with_capacity(devices.len());
    let mut unreadable = Vec::new();
    for dev in devices {
        let p = probe(dev.as_ref());
        if p.failed_to_read() {
            unreadable.push(dev.label().to_string());
        } else {
            readable.push((dev, p));
        }
    }
    (readable, unreadable)
}

/// Why a decoded superblock found at `loc` cannot be used on `member`, if it cannot.
/// A device merely too small for the data area is not a reason here (assembly leaves such a
/// member out and says so).
pub fn unusable_reason(member: &dyn Member, loc: &SuperblockLocation, sb: &Superblock) -> Option<SuperblockProblem> {
    let size = member.size_bytes();
    match check_superblock(sb, size) {
        Ok(()) | Err(SuperblockProblem::DeviceTooSmall { .. }) => {}
        Err(problem) => return Some(problem),
    }
    // The bitmap's length is in its own superblock. One that cannot be read or decoded is
    // left to assembly, which refuses it unless forced (and then runs without a bitmap).
    let at = sb.bitmap_offset_bytes(loc.offset_bytes)?;
    let mut head = vec![0u8; 256];
    member.read_at(&mut head, at).ok()?;
    let bitmap = BitmapSuperblock::decode(&head).ok()?;
    check_bitmap(sb, size, &bitmap).err()
}

pub fn probe(member: &dyn Member) -> Probe {
    let size = member.size_bytes();
    let mut probe = Probe { found: Vec::new(), rejected: Vec::new(), invalid: Vec::new(), unreadable: Vec::new() };
    for loc in superblock_locations(size) {
        let mut bytes = vec![0u8; loc.len_bytes];
        if let Err(e) = member.read_at(&mut bytes, loc.offset_bytes) {
            if e.kind() != std::io::ErrorKind::UnexpectedEof {
                probe.unreadable.push((loc.version, loc.offset_bytes, e.to_string()));
            }
            continue;
        }
        match Superblock::decode(loc.version, &bytes) {
            Ok(sb) => {
                if let Superblock::V1(v1) = &sb {
                    // A 1.x superblock records where it lives; elsewhere it is a stray copy
                    // (e.g. the 1.0 superblock of a whole disk seen inside a partition).
                    if v1.super_offset_sectors.checked_mul(512) != Some(loc.offset_bytes) {
                        continue;
                    }
                }
                if let Some(problem) = unusable_reason(member, &loc, &sb) {
                    probe.rejected.push((loc.version, loc.offset_bytes, problem.to_string()));
                    probe.invalid.push((loc, sb));
                    continue;
                }
                probe.found.push((loc, sb));
            }
            Err(MetadataError::BadMagic { .. }) => {}
            // 0.90 and 1.x share the magic; a 1.x location decoded as the other family is
            // expected noise only when the other family's superblock is valid there.
            Err(MetadataError::UnsupportedMajorVersion(_)) => {}
            Err(e) => probe.rejected.push((loc.version, loc.offset_bytes, e.to_string())),
        }
    }
    probe
}
