//! md raid0: striping over strip zones (raid0.c `create_strip_zones`, `find_zone`,
//! `map_sector`).
//!
//! Members of unequal size form zones: zone 0 stripes over every member up to the
//! smallest one's size, zone 1 over the members larger than that, and so on. Within a
//! zone, chunks go round-robin over the zone's members in role order.

use super::{GeometryError, Level, MemberSector};

/// The two multi-zone raid0 layouts (superblock `layout` 1 and 2).
///
/// Linux 3.14 changed by accident which member a chunk of a later zone lands on; md then
/// recorded which variant an array uses. Single-zone arrays are the same under both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raid0Layout {
    /// `RAID0_ORIG_LAYOUT` (1): the member is chosen from the chunk number counted from
    /// the array start.
    Original,
    /// `RAID0_ALT_MULTIZONE_LAYOUT` (2): the member is chosen from the chunk number
    /// counted from the zone start (kernels 3.14 .. 5.3 wrote this unlabelled).
    AltMultizone,
}

/// One strip zone: a band of array sectors striped over `roles`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripZone {
    /// Array sector where the zone ends (exclusive), md's `zone_end`.
    pub zone_end: u64,
    /// Member sector where the zone starts on each of its members, md's `dev_start`.
    pub dev_start: u64,
    /// Roles striped in this zone, in stripe order.
    pub roles: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raid0Geometry {
    layout: Raid0Layout,
    chunk_sectors: u64,
    /// Per role, the sectors md uses (rounded down to the chunk).
    member_sectors: Vec<u64>,
    zones: Vec<StripZone>,
    /// What md exports; see `new` for why it can be less than the zones hold.
    array_sectors: u64,
}

const RAID0_ORIG_LAYOUT: u32 = 1;
const RAID0_ALT_MULTIZONE_LAYOUT: u32 = 2;

impl Raid0Geometry {
    pub fn new(layout: u32, chunk_sectors: u32, member_sectors: &[u64]) -> Result<Self, GeometryError> {
        if member_sectors.is_empty() {
            return Err(GeometryError::TooFewDisks { level: Level::Raid0, raid_disks: 0, minimum: 1 });
        }
        if chunk_sectors == 0 {
            return Err(GeometryError::BadChunk { level: Level::Raid0, chunk_sectors, reason: "raid0 needs a chunk size" });
        }
        let chunk = u64::from(chunk_sectors);
        // md rounds every member down to a whole number of chunks before building zones.
        let sizes: Vec<u64> = member_sectors.iter().map(|s| s - s % chunk).collect();

        let mut zones = Vec::new();
        let mut dev_start = 0u64;
        let mut zone_end = 0u64;
        loop {
            // Members that still have room past dev_start, kept in role order as md does.
            let roles: Vec<usize> = (0..sizes.len()).filter(|&r| sizes[r] > dev_start).collect();
            let Some(smallest) = roles.iter().map(|&r| sizes[r]).min() else {
                break;
            };
            let per_member = smallest - dev_start;
            let zone_sectors = per_member.checked_mul(roles.len() as u64).ok_or(GeometryError::SizeOverflow)?;
            zone_end = zone_end.checked_add(zone_sectors).ok_or(GeometryError::SizeOverflow)?;
            zones.push(StripZone { zone_end, dev_start, roles });
            dev_start = smallest;
        }

        // md sets the layout only when it matters: one zone maps the same either way, and
        // a multi-zone array with an unknown layout is refused (it may hold either).
        let layout = if zones.len() <= 1 {
            Raid0Layout::Original
        } else {
            match layout {
                RAID0_ORIG_LAYOUT => Raid0Layout::Original,
                RAID0_ALT_MULTIZONE_LAYOUT => Raid0Layout::AltMultizone,
                _ => {
                    return Err(GeometryError::UnsupportedLayout {
                        level: Level::Raid0,
                        layout,
                        reason: "a multi-zone raid0 needs layout 1 (original) or 2 (alt-multizone)",
                    })
                }
            }
        };
        // md's raid0_size masks each member with `chunk - 1` as if the chunk were a power
        // of two. For other chunk sizes that exports less than the zones hold; md still
        // maps through the zones, so we keep both and cut the array where md does.
        let mask = !(chunk - 1);
        let exported = sizes.iter().try_fold(0u64, |sum, s| sum.checked_add(s & mask)).ok_or(GeometryError::SizeOverflow)?;
        Ok(Raid0Geometry { layout, chunk_sectors: chunk, member_sectors: sizes, zones, array_sectors: exported.min(zone_end) })
    }

    pub fn raid_disks(&self) -> usize {
        self.member_sectors.len()
    }

    pub fn chunk_sectors(&self) -> u64 {
        self.chunk_sectors
    }

    pub fn layout(&self) -> Raid0Layout {
        self.layout
    }

    pub fn zones(&self) -> &[StripZone] {
        &self.zones
    }

    pub fn array_sectors(&self) -> u64 {
        self.array_sectors
    }

    /// The member holding `array_sector`, and how many sectors stay contiguous from
    /// there (to the end of its chunk).
    pub fn map(&self, array_sector: u64) -> Result<(MemberSector, u64), GeometryError> {
        let array_sectors = self.array_sectors();
        let out_of_range = GeometryError::SectorOutOfRange { sector: array_sector, array_sectors };
        if array_sector >= array_sectors {
            return Err(out_of_range);
        }
        // find_zone: the first zone ending past the sector.
        let zone_index = self.zones.partition_point(|z| z.zone_end <= array_sector);
        let zone = self.zones.get(zone_index).ok_or(out_of_range)?;
        let zone_start = if zone_index == 0 { 0 } else { self.zones[zone_index - 1].zone_end };
        let in_zone = array_sector - zone_start;
        let chunk = self.chunk_sectors;
        let members = zone.roles.len() as u64;
        // Zone boundaries are whole chunks, so the offset in the chunk is the same
        // whichever sector md divides.
        let offset_in_chunk = in_zone % chunk;
        let row = in_zone / (chunk * members);
        let chunk_number = match self.layout {
            Raid0Layout::Original => array_sector / chunk,
            Raid0Layout::AltMultizone => in_zone / chunk,
        };
        let role = zone.roles[(chunk_number % members) as usize];
        Ok((MemberSector { role, sector: zone.dev_start + row * chunk + offset_in_chunk }, chunk - offset_in_chunk))
    }

    pub fn unmap(&self, role: usize, member_sector: u64) -> Option<u64> {
        if member_sector >= *self.member_sectors.get(role)? {
            return None;
        }
        let zone_index = self.zones.partition_point(|z| {
            // The zone whose member band [dev_start, next dev_start) holds the sector.
            z.dev_start <= member_sector
        });
        let zone_index = zone_index.checked_sub(1)?;
        let zone = &self.zones[zone_index];
        let position = zone.roles.iter().position(|&r| r == role)? as u64;
        let zone_start = if zone_index == 0 { 0 } else { self.zones[zone_index - 1].zone_end };
        let chunk = self.chunk_sectors;
        let members = zone.roles.len() as u64;
        let in_band = member_sector - zone.dev_start;
        let row = in_band / chunk;
        let offset_in_chunk = in_band % chunk;
        // Chunks of one row are consecutive; which slot of the row this role takes
        // depends on where the row's first chunk falls in the round-robin.
        let first_chunk = match self.layout {
            Raid0Layout::Original => (zone_start / chunk) + row * members,
            Raid0Layout::AltMultizone => row * members,
        };
        let slot = (position + members - first_chunk % members) % members;
        let array_sector = zone_start + (row * members + slot) * chunk + offset_in_chunk;
        (array_sector < self.array_sectors).then_some(array_sector)
    }
}
