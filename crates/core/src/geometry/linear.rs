//! md linear: members concatenated in role order (md-linear.c).

use super::{GeometryError, Level, MemberSector};

/// Linear concatenation. Member `role` holds array sectors
/// `[start_sector[role], start_sector[role] + member_sectors[role])`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinearGeometry {
    /// Per role, sectors it contributes (after md's rounding to the chunk, if any).
    member_sectors: Vec<u64>,
    /// Per role, the array sector where it ends (exclusive), md's `end_sector`.
    end_sectors: Vec<u64>,
}

impl LinearGeometry {
    /// `rounding_sectors` is the superblock chunk size, which linear uses only to round
    /// each member down (mdadm's "rounding"; 0 means none).
    pub fn new(rounding_sectors: u32, member_sectors: &[u64]) -> Result<Self, GeometryError> {
        if member_sectors.is_empty() {
            return Err(GeometryError::TooFewDisks { level: Level::Linear, raid_disks: 0, minimum: 1 });
        }
        let rounding = u64::from(rounding_sectors);
        let mut sizes = Vec::with_capacity(member_sectors.len());
        let mut ends = Vec::with_capacity(member_sectors.len());
        let mut end = 0u64;
        for &sectors in member_sectors {
            // md-linear rounds each member down to the chunk when one is set.
            let size = if rounding > 0 { sectors - sectors % rounding } else { sectors };
            end = end.checked_add(size).ok_or(GeometryError::SizeOverflow)?;
            sizes.push(size);
            ends.push(end);
        }
        Ok(LinearGeometry { member_sectors: sizes, end_sectors: ends })
    }

    pub fn raid_disks(&self) -> usize {
        self.member_sectors.len()
    }

    pub fn array_sectors(&self) -> u64 {
        self.end_sectors.last().copied().unwrap_or(0)
    }

    /// Sectors each role contributes, by role.
    pub fn member_sectors(&self) -> &[u64] {
        &self.member_sectors
    }

    /// The member holding `array_sector`, and how many sectors remain on it from there.
    pub fn map(&self, array_sector: u64) -> Result<(MemberSector, u64), GeometryError> {
        let array_sectors = self.array_sectors();
        if array_sector >= array_sectors {
            return Err(GeometryError::SectorOutOfRange { sector: array_sector, array_sectors });
        }
        // Like md's which_dev: the first member whose end lies beyond the sector. Members
        // rounded to zero size are skipped naturally.
        let role = self.end_sectors.partition_point(|&end| end <= array_sector);
        let end = self.end_sectors[role];
        let start = end - self.member_sectors[role];
        Ok((MemberSector { role, sector: array_sector - start }, end - array_sector))
    }

    pub fn unmap(&self, role: usize, member_sector: u64) -> Option<u64> {
        let size = *self.member_sectors.get(role)?;
        if member_sector >= size {
            return None;
        }
        Some(self.end_sectors[role] - size + member_sector)
    }
}
