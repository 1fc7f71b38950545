//! Finding md superblocks on members: every location md may use, decoded, with the reasons
//! locations that look like a superblock were rejected (so a corrupt one is named, not
//! silently ignored).

use crate::member::Member;
use uraid_core::metadata::{superblock_locations, MetadataError, MetadataVersion, Superblock, SuperblockLocation};

/// What probing one member found.
#[derive(Debug, Clone)]
pub struct Probe {
    /// Valid superblocks (decoded, checksum correct, at the place they say they are).
    pub found: Vec<(SuperblockLocation, Superblock)>,
    /// Locations carrying md's magic that failed to decode: (version, offset, why).
    pub rejected: Vec<(MetadataVersion, u64, String)>,
}

impl Probe {
    /// The superblock to use: md prefers 1.x over a leftover 0.90 at the end, and of 1.x the
    /// one with the most events (only one can be at its recorded super_offset in practice).
    pub fn best(&self) -> Option<&(SuperblockLocation, Superblock)> {
        self.found.iter().max_by_key(|(loc, sb)| (loc.version != MetadataVersion::V0_90, sb.events()))
    }
}

pub fn probe(member: &dyn Member) -> Probe {
    let size = member.size_bytes();
    let mut probe = Probe { found: Vec::new(), rejected: Vec::new() };
    for loc in superblock_locations(size) {
        let mut bytes = vec![0u8; loc.len_bytes];
        if member.read_at(&mut bytes, loc.offset_bytes).is_err() {
            continue;
        }
        match Superblock::decode(loc.version, &bytes) {
            Ok(sb) => {
                if let Superblock::V1(v1) = &sb {
                    // A 1.x superblock records where it lives; elsewhere it is a stray copy
                    // (e.g. the 1.0 superblock of a whole disk seen inside a partition).
                    if v1.super_offset_sectors * 512 != loc.offset_bytes {
                        continue;
                    }
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
