//! An md reshape in progress, as its v1 superblock records it (md.c `super_1_validate`):
//! `level`, `layout`, `chunksize` are the OLD shape, `new_level`, `new_layout`, `new_chunk`
//! the new one; `raid_disks` is the NEW member count and `delta_disks` the change, so the
//! old count is `raid_disks - delta_disks`. `reshape_position` is the array sector where
//! the two meet: a forward reshape (a grow, or any change without `RESHAPE_BACKWARDS`) has
//! moved everything below it into the new shape; a backward one (a shrink, or feature bit
//! 0x20) everything at or above it. With `NEW_OFFSET`, the new shape's data starts
//! `new_offset` sectors (signed) from the old data offset, which is how md avoids a backup
//! file. Pure: no I/O.
//!
//! Each side is described as an ordinary, non-reshaping superblock, so the rest of uraid
//! reads each side as the array it is: [`ReshapeState::side_superblock`].

use super::{FeatureMap, Superblock1, MAX_SECTOR};
use crate::geometry::{Level, SECTOR_BYTES};

/// The two shapes of a reshaping array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReshapeState {
    /// Array sector where the old and new shapes meet.
    pub position_sectors: u64,
    /// The reshape runs from the end towards the start: the NEW shape is at and above
    /// `position_sectors`.
    pub backwards: bool,
    pub old: SideShape,
    pub new: SideShape,
    /// Sectors from the old data offset to the new one (signed).
    pub new_offset_sectors: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SideShape {
    pub level: i32,
    pub layout: u32,
    pub chunk_sectors: u32,
    pub raid_disks: u32,
}

/// Which shape an array sector is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Old,
    New,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReshapeError {
    #[error("no reshape is recorded (RESHAPE_ACTIVE is not set)")]
    NotReshaping,
    #[error("the reshape changes the member count from {old} to {new}, which md never does")]
    MemberCount { old: i64, new: u32 },
    #[error("level {0} cannot be reshaped")]
    Level(i32),
}

impl ReshapeState {
    pub fn from_superblock(sb: &Superblock1) -> Result<ReshapeState, ReshapeError> {
        if !sb.feature_map.contains(FeatureMap::RESHAPE_ACTIVE) {
            return Err(ReshapeError::NotReshaping);
        }
        let old_disks = i64::from(sb.raid_disks) - i64::from(sb.delta_disks);
        if old_disks < 1 || old_disks > i64::from(u16::MAX) {
            return Err(ReshapeError::MemberCount { old: old_disks, new: sb.raid_disks });
        }
        for level in [sb.level, sb.new_level] {
            if Level::from_md(level).is_err() {
                return Err(ReshapeError::Level(level));
            }
        }
        let new_offset_sectors = if sb.feature_map.contains(FeatureMap::NEW_OFFSET) { i64::from(sb.new_offset_sectors) } else { 0 };
        // md: a shrink always runs backwards; otherwise the flag says (a layout change may
        // run either way, whichever direction the data offset moved).
        let backwards = sb.delta_disks < 0 || (sb.delta_disks == 0 && sb.feature_map.contains(FeatureMap::RESHAPE_BACKWARDS));
        Ok(ReshapeState {
            position_sectors: sb.reshape_position_sectors,
            backwards,
            old: SideShape { level: sb.level, layout: sb.layout, chunk_sectors: sb.chunksize_sectors, raid_disks: old_disks as u32 },
            new: SideShape { level: sb.new_level, layout: sb.new_layout, chunk_sectors: sb.new_chunk_sectors, raid_disks: sb.raid_disks },
            new_offset_sectors,
        })
    }

    /// The shape holding array sector `sector`.
    pub fn side_of(&self, sector: u64) -> Side {
        match (self.backwards, sector < self.position_sectors) {
            (false, true) | (true, false) => Side::New,
            _ => Side::Old,
        }
    }

    /// `sb` rewritten as a superblock of one side, with no reshape in it: that side's
    /// level, layout, chunk and member count, data at that side's offset, members beyond
    /// the side's count recorded as spares, and a checksum to match. `dev_size_sectors`:
    /// the device's size (the data area grows or shrinks with the offset).
    pub fn side_superblock(&self, sb: &Superblock1, side: Side, dev_size_sectors: u64) -> Superblock1 {
        let shape = match side {
            Side::Old => self.old,
            Side::New => self.new,
        };
        let mut out = sb.clone();
        out.feature_map.0 &= !(FeatureMap::RESHAPE_ACTIVE | FeatureMap::RESHAPE_BACKWARDS | FeatureMap::NEW_OFFSET);
        out.level = shape.level;
        out.layout = shape.layout;
        out.chunksize_sectors = shape.chunk_sectors;
        out.raid_disks = shape.raid_disks;
        out.reshape_position_sectors = 0;
        out.delta_disks = 0;
        out.new_level = 0;
        out.new_layout = 0;
        out.new_chunk_sectors = 0;
        out.new_offset_sectors = 0;
        if side == Side::New && self.new_offset_sectors != 0 {
            let offset = (sb.data_offset_sectors as i64 + self.new_offset_sectors).max(0) as u64;
            out.data_offset_sectors = offset;
            // md_finish_reshape: the data area keeps its end, so it grows by what the
            // offset moved down (or shrinks by what it moved up).
            out.data_size_sectors = (sb.data_size_sectors as i64 - self.new_offset_sectors).clamp(0, dev_size_sectors as i64) as u64;
        }
        for role in out.dev_roles.iter_mut() {
            if *role < 0xff00 && u32::from(*role) >= shape.raid_disks {
                *role = 0xffff;
            }
        }
        out.sb_csum = out.compute_checksum();
        out
    }

    /// The superblock md leaves on a member once the reshape is done: [`Self::side_superblock`]
    /// of the new shape, except that md never clears the reshape fields (`super_1_sync`
    /// writes them only while a reshape runs, so the last values stay in the bytes; only
    /// the feature bits say they no longer count).
    pub fn final_superblock(&self, sb: &Superblock1, dev_size_sectors: u64) -> Superblock1 {
        let mut out = self.side_superblock(sb, Side::New, dev_size_sectors);
        out.reshape_position_sectors = sb.reshape_position_sectors;
        out.delta_disks = sb.delta_disks;
        out.new_level = sb.new_level;
        out.new_layout = sb.new_layout;
        out.new_chunk_sectors = sb.new_chunk_sectors;
        out.new_offset_sectors = sb.new_offset_sectors;
        out.sb_csum = out.compute_checksum();
        out
    }

    /// Array sectors that have been moved, as a fraction of `total` (for status).
    pub fn done_fraction(&self, total_sectors: u64) -> f64 {
        if total_sectors == 0 || self.position_sectors == MAX_SECTOR {
            return 1.0;
        }
        let moved = if self.backwards { total_sectors.saturating_sub(self.position_sectors) } else { self.position_sectors };
        moved.min(total_sectors) as f64 / total_sectors as f64
    }

    /// Byte offset where the sides meet.
    pub fn position_bytes(&self) -> u64 {
        self.position_sectors.saturating_mul(SECTOR_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reshaping() -> Superblock1 {
        let mut sb = crate::metadata::sb1::tests::sample();
        sb.feature_map.0 = FeatureMap::RESHAPE_ACTIVE | FeatureMap::NEW_OFFSET;
        sb.level = 5;
        sb.layout = 2;
        sb.chunksize_sectors = 128;
        sb.raid_disks = 4;
        sb.delta_disks = 1;
        sb.new_level = 5;
        sb.new_layout = 2;
        sb.new_chunk_sectors = 128;
        sb.reshape_position_sectors = 24576;
        sb.data_offset_sectors = 2048;
        sb.super_offset_sectors = 8;
        sb.new_offset_sectors = -384;
        sb.dev_roles = vec![0, 1, 2, 3];
        sb
    }

    #[test]
    fn a_grow_is_new_below_the_position_and_old_above() {
        let st = ReshapeState::from_superblock(&reshaping()).unwrap();
        assert!(!st.backwards);
        assert_eq!((st.old.raid_disks, st.new.raid_disks, st.new_offset_sectors), (3, 4, -384));
        assert_eq!(st.side_of(0), Side::New);
        assert_eq!(st.side_of(24575), Side::New);
        assert_eq!(st.side_of(24576), Side::Old);
        let mut shrink = reshaping();
        shrink.delta_disks = -1;
        let st = ReshapeState::from_superblock(&shrink).unwrap();
        assert!(st.backwards);
        assert_eq!((st.side_of(24575), st.side_of(24576)), (Side::Old, Side::New));
    }

    #[test]
    fn each_side_is_a_plain_superblock_of_its_shape() {
        let sb = reshaping();
        let st = ReshapeState::from_superblock(&sb).unwrap();
        let old = st.side_superblock(&sb, Side::Old, 40960);
        assert_eq!((old.raid_disks, old.data_offset_sectors), (3, 2048));
        assert_eq!(old.dev_roles, vec![0, 1, 2, 0xffff], "the added member is a spare of the old shape");
        assert!(!old.feature_map.contains(FeatureMap::RESHAPE_ACTIVE));
        assert_eq!(old.compute_checksum(), old.sb_csum);
        let new = st.side_superblock(&sb, Side::New, 40960);
        assert_eq!((new.raid_disks, new.data_offset_sectors, new.data_size_sectors), (4, 1664, 30720 + 384), "the data area keeps its end");
        assert_eq!(new.dev_roles, vec![0, 1, 2, 3]);
        assert_eq!(new.compute_checksum(), new.sb_csum);
        let mut plain = sb.clone();
        plain.feature_map.0 = 0;
        assert_eq!(ReshapeState::from_superblock(&plain), Err(ReshapeError::NotReshaping));
    }
}
