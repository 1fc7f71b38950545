//! md raid10: near, far and offset copies (raid10.c `setup_geo`, `calc_sectors`,
//! `raid10_size`, `__raid10_find_phys`, `raid10_find_virt`).
//!
//! The layout word packs: near copies (bits 0..8), far copies (bits 8..16), the offset
//! flag (bit 16) and the far-set scheme (bits 17..19).
//!
//! mdadm makes near-only, far-only or offset-only layouts. md also runs layouts mixing
//! near and far copies; some of those (offset with near copies wrapping past the last
//! member, far sets with near copies and a widened last set) place two array chunks on
//! the same member chunk in md itself. We reproduce md's placement anyway: the point is
//! to read what md wrote.

use super::{GeometryError, Level, MemberSector};

/// How far copies are confined to sets of members (layout bits 17..19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FarSets {
    /// 0: one set of all members (every array before far sets existed).
    Whole,
    /// 1 (`0x20000`): md's first far-set attempt, `raid_disks / far_copies` members per
    /// set. md kept it only to read old arrays; it may store copies on one member.
    DisksOverFar,
    /// 2 (`0x40000`): `near * far` members per set, as documented.
    NearTimesFar,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raid10Geometry {
    layout: u32,
    near_copies: usize,
    far_copies: usize,
    far_offset: bool,
    far_sets: FarSets,
    far_set_size: usize,
    raid_disks: usize,
    chunk_sectors: u64,
    /// Member sectors md uses (`conf->dev_sectors` after `calc_sectors`).
    used_member_sectors: u64,
    /// Member distance between far copies (`geo->stride`).
    stride: u64,
    array_sectors: u64,
}

impl Raid10Geometry {
    /// `member_sectors` is md's `dev_sectors` (the superblock's common member size).
    pub fn new(layout: u32, chunk_sectors: u32, raid_disks: usize, member_sectors: u64) -> Result<Self, GeometryError> {
        let level = Level::Raid10;
        let far_sets = match layout >> 17 {
            0 => FarSets::Whole,
            1 => FarSets::DisksOverFar,
            2 => FarSets::NearTimesFar,
            _ => return Err(GeometryError::UnsupportedLayout { level, layout, reason: "unknown far-set scheme (layout bits 17..)" }),
        };
        if chunk_sectors < 8 || !chunk_sectors.is_power_of_two() {
            return Err(GeometryError::BadChunk { level, chunk_sectors, reason: "must be a power of two of at least 4 KiB" });
        }
        let near = layout & 0xff;
        let far = (layout >> 8) & 0xff;
        let far_offset = layout & (1 << 16) != 0;
        let copies = (near * far) as usize;
        if copies < 2 || copies > raid_disks {
            return Err(GeometryError::Raid10Copies { near, far, raid_disks });
        }
        let (near_copies, far_copies) = (near as usize, far as usize);
        let far_set_size = match far_sets {
            FarSets::Whole => raid_disks,
            FarSets::DisksOverFar => raid_disks / far_copies,
            FarSets::NearTimesFar => near_copies * far_copies,
        };
        // far_copies <= copies <= raid_disks keeps this nonzero; md would divide by it.
        if far_set_size == 0 {
            return Err(GeometryError::UnsupportedLayout { level, layout, reason: "far sets would be empty" });
        }
        let chunk = u64::from(chunk_sectors);
        let overflow = GeometryError::SizeOverflow;
        let disks = raid_disks as u64;
        // calc_sectors: chunks the array holds, then chunks each member must hold for
        // them (rounded up), which also fixes the far-copy stride.
        let array_chunks = (member_sectors / chunk / far_copies as u64).checked_mul(disks).ok_or(overflow.clone())? / near_copies as u64;
        let used_chunks = array_chunks.checked_mul(copies as u64).ok_or(overflow.clone())?.div_ceil(disks);
        let used_member_sectors = used_chunks.checked_mul(chunk).ok_or(overflow.clone())?;
        let stride = if far_offset { chunk } else { used_chunks / far_copies as u64 * chunk };
        // raid10_size, from the recomputed member size as md's run() does.
        let array_sectors = (used_chunks / far_copies as u64).checked_mul(disks).ok_or(overflow.clone())? / near_copies as u64 * chunk;
        Ok(Raid10Geometry {
            layout,
            near_copies,
            far_copies,
            far_offset,
            far_sets,
            far_set_size,
            raid_disks,
            chunk_sectors: chunk,
            used_member_sectors,
            stride,
            array_sectors,
        })
    }

    pub fn layout(&self) -> u32 {
        self.layout
    }
    pub fn near_copies(&self) -> usize {
        self.near_copies
    }
    pub fn far_copies(&self) -> usize {
        self.far_copies
    }
    pub fn far_offset(&self) -> bool {
        self.far_offset
    }
    pub fn far_sets(&self) -> FarSets {
        self.far_sets
    }
    pub fn far_set_size(&self) -> usize {
        self.far_set_size
    }
    pub fn raid_disks(&self) -> usize {
        self.raid_disks
    }
    pub fn chunk_sectors(&self) -> u64 {
        self.chunk_sectors
    }
    /// Copies of every array sector.
    pub fn copies_per_sector(&self) -> usize {
        self.near_copies * self.far_copies
    }
    /// Member sectors md uses (`dev_sectors` after its recomputation).
    pub fn used_member_sectors(&self) -> u64 {
        self.used_member_sectors
    }
    /// Member distance between consecutive far copies.
    pub fn stride(&self) -> u64 {
        self.stride
    }
    pub fn array_sectors(&self) -> u64 {
        self.array_sectors
    }

    /// Start and size of the last far set, which absorbs the members left over when
    /// `raid_disks` is not a multiple of the set size.
    fn last_far_set(&self) -> (usize, usize) {
        let start = (self.raid_disks / self.far_set_size).saturating_sub(1) * self.far_set_size;
        (start, self.far_set_size + self.raid_disks % self.far_set_size)
    }

    /// Every copy of `array_sector`, in md's slot order (`__raid10_find_phys`): for each
    /// near copy, it and then its far copies.
    pub fn copies(&self, array_sector: u64) -> Result<Vec<MemberSector>, GeometryError> {
        if array_sector >= self.array_sectors {
            return Err(GeometryError::SectorOutOfRange { sector: array_sector, array_sectors: self.array_sectors });
        }
        let (last_set_start, last_set_size) = self.last_far_set();
        let chunk = self.chunk_sectors;
        let disks = self.raid_disks as u64;
        let mut sector = array_sector % chunk;
        // The first copy's position counts near copies as consecutive chunks laid
        // round-robin over all members.
        let first = array_sector / chunk * self.near_copies as u64;
        let mut dev = (first % disks) as usize;
        let mut row = first / disks;
        if self.far_offset {
            row *= self.far_copies as u64;
        }
        sector += row * chunk;

        let mut out = Vec::with_capacity(self.copies_per_sector());
        for _ in 0..self.near_copies {
            let mut d = dev;
            let mut s = sector;
            out.push(MemberSector { role: d, sector: s });
            for _ in 1..self.far_copies {
                let set = d / self.far_set_size;
                d += self.near_copies;
                if !self.raid_disks.is_multiple_of(self.far_set_size) && d > last_set_start {
                    d = (d - last_set_start) % last_set_size + last_set_start;
                } else {
                    d = d % self.far_set_size + self.far_set_size * set;
                }
                s += self.stride;
                out.push(MemberSector { role: d, sector: s });
            }
            dev += 1;
            if dev >= self.raid_disks {
                dev = 0;
                sector += chunk;
            }
        }
        Ok(out)
    }

    /// The array sector a copy at `member_sector` of `role` belongs to
    /// (`raid10_find_virt`), or `None` for member space no array sector uses.
    pub fn unmap(&self, role: usize, member_sector: u64) -> Option<u64> {
        if role >= self.raid_disks || member_sector >= self.used_member_sectors {
            return None;
        }
        let chunk = self.chunk_sectors;
        let mut far_set_start = role / self.far_set_size * self.far_set_size;
        let mut far_set_size = self.far_set_size;
        if !self.raid_disks.is_multiple_of(self.far_set_size) {
            let (last_start, last_size) = self.last_far_set();
            if role >= last_start {
                far_set_start = last_start;
                far_set_size = last_size;
            }
        }
        let offset = member_sector % chunk;
        let mut dev = role as i64;
        let near = self.near_copies as i64;
        let chunk_row;
        if self.far_offset {
            let rows = member_sector / chunk;
            let far_index = (rows % self.far_copies as u64) as i64;
            chunk_row = rows / self.far_copies as u64;
            dev -= far_index * near;
            if dev < far_set_start as i64 {
                dev += far_set_size as i64;
            }
        } else {
            let mut sector = member_sector;
            while self.stride > 0 && sector >= self.stride {
                sector -= self.stride;
                if dev < near + far_set_start as i64 {
                    dev += far_set_size as i64 - near;
                } else {
                    dev -= near;
                }
            }
            chunk_row = sector / chunk;
        }
        // A negative member means the sector is not a copy md would have placed.
        let dev = u64::try_from(dev).ok()?;
        let vchunk = (chunk_row * self.raid_disks as u64 + dev) / self.near_copies as u64;
        let array_sector = vchunk * chunk + offset;
        // md trusts its caller; we check, since tails of members hold no copy.
        let copies = self.copies(array_sector).ok()?;
        copies.contains(&MemberSector { role, sector: member_sector }).then_some(array_sector)
    }

    /// md counts a RAID10 resync in array sectors (`recovery_cp`: its resync walks virtual
    /// addresses), while uraid's walks member rows, each row syncing every array sector
    /// with a copy there. The member row from which uraid's resync covers everything md had
    /// not done when it stopped at `array_sector`: every member sector below it holds only
    /// array sectors below `array_sector` (it may redo a little, never skip).
    pub fn resync_row_for(&self, array_sector: u64) -> u64 {
        if array_sector >= self.array_sectors {
            return self.used_member_sectors;
        }
        let chunk = self.chunk_sectors;
        // A far layout holds the whole array once in its first section (`stride` rows);
        // the rows past it hold far copies of the array's start again.
        let spread = if self.far_copies > 1 && !self.far_offset { self.stride } else { self.used_member_sectors };
        let estimate = (u128::from(array_sector) * u128::from(spread) / u128::from(self.array_sectors.max(1))) as u64;
        let mut row = estimate.min(spread) / chunk * chunk;
        // (Within a section a role's array sectors grow with its member sectors, so the last
        // sector below `row` on each role holds the largest.)
        while row > 0 && (0..self.raid_disks).any(|role| self.unmap(role, row - 1).is_some_and(|a| a >= array_sector)) {
            row -= chunk;
        }
        row
    }

    /// The array sector md may resume a resync from once uraid's has synced every member
    /// row below `row`: the smallest array sector stored at `row` (every smaller one has a
    /// copy below it, synced with all its copies), the whole array once a far layout's
    /// first section is done.
    pub fn resync_array_sector_for(&self, row: u64) -> u64 {
        let first_section_done = self.far_copies > 1 && !self.far_offset && row >= self.stride;
        if row >= self.used_member_sectors || first_section_done {
            return self.array_sectors;
        }
        let row = row / self.chunk_sectors * self.chunk_sectors;
        (0..self.raid_disks).filter_map(|role| self.unmap(role, row)).min().unwrap_or(self.array_sectors)
    }
}
