//! Starting a reshape (`uraid grow`): which changes are made, where the new shape's data
//! goes, and the superblock fields that record the start, as md and mdadm do it. Pure.
//!
//! mdadm (Grow.c `analyse_change`, `set_new_data_offset`) moves the data offset instead of
//! writing a backup file: by `min = backup_blocks / old data disks`, where `backup_blocks`
//! is the lcm of the two stripe widths (`compute_backup_blocks`). More data disks: the
//! offset moves down and the reshape runs forwards. The same number of data disks (a chunk
//! or layout change): down when there is room before the data, else up, running backwards.
//! Fewer data disks (a shrink): the array must have been cut to its new capacity first
//! (`--array-size`), the offset moves up by `min` and the reshape runs backwards from the
//! new capacity, the members leaving staying active until the end, when they become spares
//! (md.c `update_raid_disks`, raid5.c `raid5_finish_reshape`; RESHAPE_BACKWARDS is not set:
//! a negative `delta_disks` says it).
//! The kernel then records the reshape (`raid5_start_reshape`, `super_1_sync`): the NEW
//! member count in `raid_disks`, the old level/layout/chunk where they were and the new ones
//! in `new_*`, `delta_disks`, `reshape_position` 0 (or the end, backwards), and feature bits
//! RESHAPE_ACTIVE and NEW_OFFSET (plus RESHAPE_BACKWARDS when the member count is unchanged
//! and the reshape runs backwards).

use super::reshape::{ReshapeState, SideShape};
use super::{FeatureMap, Superblock1};
use crate::geometry::Algorithm;

/// What to change (mdadm --grow's options); `None` keeps the current value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GrowRequest {
    /// md level number (0, 1, 4, 5, 6): a takeover ([`plan_takeover`]).
    pub level: Option<i32>,
    pub raid_disks: Option<u32>,
    pub layout: Option<u32>,
    pub chunk_sectors: Option<u32>,
    /// The array size the user accepts (mdadm --array-size), in sectors: a shrink must be
    /// told the array ends at or below its new capacity, as mdadm insists on `--grow
    /// --array-size` first (whatever lies beyond is dropped).
    pub array_size_sectors: Option<u64>,
}

/// Free sectors around the data area, the smallest over every member and spare (mdadm's
/// `space_before`/`space_after`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    pub before_sectors: u64,
    pub after_sectors: u64,
}

impl Room {
    /// The room on one device: before the data, what the superblock, bad-block log and
    /// bitmap leave free (mdadm's `getinfo_super1`: at least 72 sectors after a 1.x
    /// superblock); after it, what the data area holds beyond the used size.
    pub fn of(sb: &Superblock1, bitmap_end_sectors: Option<u64>) -> Room {
        let after_sectors = sb.data_size_sectors.saturating_sub(sb.size_sectors);
        if sb.super_offset_sectors >= sb.data_offset_sectors {
            // 1.0: the superblock sits after the data; nothing precedes it.
            return Room { before_sectors: sb.data_offset_sectors, after_sectors };
        }
        let mut earliest = sb.super_offset_sectors + 72;
        if sb.bblog_size_sectors > 0 {
            earliest = earliest
                .max((sb.super_offset_sectors as i64 + i64::from(sb.bblog_offset_sectors)) as u64 + u64::from(sb.bblog_size_sectors));
        }
        if let Some(end) = bitmap_end_sectors {
            earliest = earliest.max(end);
        }
        Room { before_sectors: sb.data_offset_sectors.saturating_sub(earliest), after_sectors }
    }

    pub fn min(self, other: Room) -> Room {
        Room { before_sectors: self.before_sectors.min(other.before_sectors), after_sectors: self.after_sectors.min(other.after_sectors) }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrowError {
    #[error("nothing to change: the array already has that shape")]
    NothingToChange,
    #[error("md cannot take a RAID{from} over as RAID{to}{hint}")]
    Takeover { from: i32, to: i32, hint: &'static str },
    #[error("uraid reshapes RAID4, RAID5, RAID6 and RAID10 near or offset (level {0} here); a RAID0 gets more members with the new devices given (uraid grow DEVS -n N --add NEW), through a RAID4 as md does")]
    Level(i32),
    /// A RAID10 change md refuses, or one md makes that uraid does not yet.
    #[error("{0}")]
    Raid10(&'static str),
    #[error(
        "this change will reduce the size of the array to {kib}K; truncate it first with --array-size {kib}K (or less; \
         whatever lies beyond is dropped), as mdadm asks for --grow --array-size first",
        kib = capacity_sectors / 2
    )]
    ArraySizeFirst { capacity_sectors: u64 },
    #[error("--array-size {}K is more than the {}K the array holds after the change", asked / 2, capacity_sectors / 2)]
    ArraySizeTooLarge { asked: u64, capacity_sectors: u64 },
    #[error("--array-size only truncates an array before a shrink (with --raid-devices); it changes nothing on its own here")]
    ArraySizeAlone,
    #[error("a RAID{level} needs at least {min} members")]
    TooFewMembers { level: i32, min: u32 },
    #[error("growing to {wanted} members needs {needed} spare(s); the array has {have}: add them first (uraid add), as with mdadm --add before --grow")]
    NeedSpares { wanted: u32, needed: usize, have: usize },
    #[error("the spare holds {have} sectors of data, the array needs {needed} per member: add a larger one")]
    SpareTooSmall { have: u64, needed: u64 },
    #[error("--layout normalise restripes a RAID6 from a *-6 layout (Q on the last member) to md's rotating one; this is a RAID{0}")]
    Normalise(i32),
    #[error("chunk {0} sectors: a chunk must be a power of two of at least 4 KiB")]
    Chunk(u32),
    #[error("the member size ({size} sectors) is not a multiple of the new chunk ({chunk} sectors); md refuses it: make the size a multiple first (--size)")]
    ChunkDoesNotDivide { size: u64, chunk: u32 },
    #[error("layout {layout} is not a RAID{level} layout")]
    Layout { level: i32, layout: u32 },
    #[error(
        "this array reshapes in place (0.90 metadata has no data offset to move): uraid starts only a grow by members \
         of a RAID4/5/6 there, with a backup file (--backup-file); change the chunk or layout with mdadm --grow --backup-file"
    )]
    InPlaceGrowOnly,
    #[error(
        "no room to move the data: the reshape needs {needed} free sectors {where_} the data on every member, the tightest has \
         {have}; md would need a backup file (mdadm --backup-file), which uraid does not write"
    )]
    NoRoom { needed: u64, have: u64, where_: &'static str },
}

/// A reshape about to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrowPlan {
    pub state: ReshapeState,
    /// Spares (by `dev_number`) that become members, with their roles.
    pub new_roles: Vec<(u32, u16)>,
    /// Those of them in a role the old shape is missing: the reshape writes them as it
    /// goes (md: `recovery_offset` following the reshape position).
    pub rebuilt_by_reshape: Vec<u32>,
    /// Each member's used size (md's `size`/`dev_sectors`) from the start: the same, or
    /// less for a shrink that takes the room it moves into from the end of the used size.
    pub size_sectors: u64,
}

/// A grow by members that keeps the data offset (0.90 metadata has none, so md reshapes it
/// in place), and its critical section: array sectors `[0, lcm of the old and new data
/// stripes)`, the stretch whose new stripes overwrite old ones not yet read, which mdadm
/// backs up first (`compute_backup_blocks`) and whose end md's `raid5_run` requires a
/// restarted reshape to be past. The plan is [`plan_grow`]'s with the offset kept.
pub fn plan_grow_in_place(sb: &Superblock1, req: &GrowRequest, spares: &[u32]) -> Result<(GrowPlan, u64), GrowError> {
    let parity = parity_disks(sb.level).ok_or(GrowError::Level(sb.level))?;
    let grows = req.raid_disks.is_some_and(|n| n > sb.raid_disks);
    let same_shape = req.chunk_sectors.is_none_or(|c| c == sb.chunksize_sectors) && req.layout.is_none_or(|l| l == sb.layout);
    if !grows || !same_shape || req.level.is_some_and(|l| l != sb.level) || req.array_size_sectors.is_some() {
        return Err(GrowError::InPlaceGrowOnly);
    }
    // Any room: the offset is put back below.
    let room = Room { before_sectors: u64::MAX / 4, after_sectors: 0 };
    let mut plan = plan_grow(sb, req, spares, room)?;
    plan.state.new_offset_sectors = 0;
    let chunk = u64::from(sb.chunksize_sectors);
    let (old_dd, new_dd) = (u64::from(plan.state.old.raid_disks - parity), u64::from(plan.state.new.raid_disks - parity));
    Ok((plan, lcm(old_dd * chunk, new_dd * chunk)))
}

/// Parity members of an md level that reshapes (RAID4/5: 1, RAID6: 2); `None` for others.
pub fn parity_disks(level: i32) -> Option<u32> {
    match level {
        4 | 5 => Some(1),
        6 => Some(2),
        _ => None,
    }
}

/// mdadm's `choose_offset`: a new data offset in `[min, max]`, near the middle of
/// `[lo, hi]`, rounded towards a 1 MiB alignment one bit at a time (adding or taking away
/// each set bit from the lowest, whichever stays in range and further from the edge).
fn choose_offset(lo: u64, hi: u64, min: u64, max: u64) -> u64 {
    let mut choice = (lo + hi) / 2;
    let mut bit = 1;
    while bit < 2 * 1024 {
        if choice & bit != 0 {
            let (bigger, smaller) = (choice + bit, choice - bit);
            if bigger > max && smaller < min {
                break;
            }
            choice = if bigger > max || (smaller >= min && hi - bigger <= smaller - lo) { smaller } else { bigger };
        }
        bit <<= 1;
    }
    choice
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b).max(1) * b
}

/// Plans the reshape `req` of the array whose newest superblock is `sb`. `spares`: the
/// array's spares by `dev_number`, in the order they take new roles; `room`: the tightest
/// free space around the data over every member and spare.
pub fn plan_grow(sb: &Superblock1, req: &GrowRequest, spares: &[u32], room: Room) -> Result<GrowPlan, GrowError> {
    if sb.level == 10 {
        return plan_raid10_grow(sb, req, spares, room);
    }
    let parity = parity_disks(sb.level).ok_or(GrowError::Level(sb.level))?;
    let old = SideShape { level: sb.level, layout: sb.layout, chunk_sectors: sb.chunksize_sectors, raid_disks: sb.raid_disks };
    let new = SideShape {
        level: sb.level,
        layout: req.layout.unwrap_or(sb.layout),
        chunk_sectors: req.chunk_sectors.unwrap_or(sb.chunksize_sectors),
        raid_disks: req.raid_disks.unwrap_or(sb.raid_disks),
    };
    if new == old {
        return Err(if req.array_size_sectors.is_some() { GrowError::ArraySizeAlone } else { GrowError::NothingToChange });
    }
    let min = parity + 2;
    if new.raid_disks < min {
        return Err(GrowError::TooFewMembers { level: sb.level, min });
    }
    let needed = new.raid_disks.saturating_sub(old.raid_disks) as usize;
    if spares.len() < needed {
        return Err(GrowError::NeedSpares { wanted: new.raid_disks, needed, have: spares.len() });
    }
    if !new.chunk_sectors.is_power_of_two() || new.chunk_sectors < 8 {
        return Err(GrowError::Chunk(new.chunk_sectors));
    }
    if !sb.size_sectors.is_multiple_of(u64::from(new.chunk_sectors)) {
        return Err(GrowError::ChunkDoesNotDivide { size: sb.size_sectors, chunk: new.chunk_sectors });
    }
    // RAID4 has one layout (parity on the last member), whatever number md recorded (0).
    let layout_ok = match Algorithm::from_md(new.layout) {
        _ if sb.level == 4 => new.layout == old.layout || new.layout == Algorithm::ParityLast.to_md(),
        Some(_) if sb.level == 6 => true,
        Some(a) => a.valid_for_raid5(),
        None => false,
    };
    if !layout_ok {
        return Err(GrowError::Layout { level: sb.level, layout: new.layout });
    }
    let (old_dd, new_dd) = (u64::from(old.raid_disks - parity), u64::from(new.raid_disks - parity));
    let (ow, nw) = (old_dd * u64::from(old.chunk_sectors), new_dd * u64::from(new.chunk_sectors));
    let backup_blocks = lcm(ow, nw);
    let move_by = backup_blocks / old_dd;
    // Fewer data disks: the data moves up by `move_by` (below), into room after the data
    // area. md needs that room there (or a backup file); an array made by mdadm has less
    // than a chunk. The array being cut anyway, uraid takes what is missing from the end
    // of the members' used size (as a `--size` lowered first would), in whole chunks of
    // both shapes, when the cut array still fits.
    let shrinks = new_dd < old_dd;
    let mut size_sectors = sb.size_sectors;
    if shrinks && room.after_sectors < move_by {
        let unit = lcm(u64::from(old.chunk_sectors), u64::from(new.chunk_sectors));
        size_sectors = sb.size_sectors.saturating_sub(move_by - room.after_sectors) / unit * unit;
    }
    // The array ends earlier, and only what the user cut it to first survives (mdadm's
    // "use --grow --array-size first"; raid5.c refuses a start while array_sectors exceeds
    // the new size).
    let capacity_sectors = new_dd * size_sectors;
    match req.array_size_sectors {
        None if shrinks => return Err(GrowError::ArraySizeFirst { capacity_sectors }),
        Some(asked) if asked > capacity_sectors => return Err(GrowError::ArraySizeTooLarge { asked, capacity_sectors }),
        Some(_) if !shrinks => return Err(GrowError::ArraySizeAlone),
        _ => {}
    }
    let room = Room { after_sectors: room.after_sectors + (sb.size_sectors - size_sectors), ..room };
    let backwards = if shrinks {
        // md.c `update_raid_disks`: a reshape to fewer members runs backwards, the data
        // moving up (`new_data_offset >= data_offset`; mdadm moves it by `min`), which
        // needs that much room after the data (`new_offset_store`: -E2BIG otherwise).
        if room.after_sectors < move_by {
            return Err(GrowError::NoRoom { needed: move_by, have: room.after_sectors, where_: "after" });
        }
        true
    } else if new_dd > old_dd || room.before_sectors >= move_by {
        if room.before_sectors < move_by {
            return Err(GrowError::NoRoom { needed: move_by, have: room.before_sectors, where_: "before" });
        }
        false
    } else if room.after_sectors >= move_by {
        true
    } else {
        return Err(GrowError::NoRoom { needed: move_by, have: room.before_sectors.max(room.after_sectors), where_: "before or after" });
    };
    // The same member count (a chunk or layout change): mdadm moves the data by about half
    // the room on the side with more of it (`set_new_data_offset`, `choose_offset`), not
    // by `min`. The gap between the shapes' rows is what a window may cover before the
    // next checkpoint: with `min` every unit needed one (a 64K -> 512K change measured 0.46
    // of the members' bound; see README "Reshape").
    let moved = if new.raid_disks == old.raid_disks && !shrinks {
        let off = sb.data_offset_sectors;
        let (backwards, fits) = if room.before_sectors > room.after_sectors {
            (false, room.before_sectors >= move_by)
        } else {
            (true, room.after_sectors >= move_by)
        };
        if !fits {
            return Err(GrowError::NoRoom {
                needed: move_by,
                have: room.before_sectors.max(room.after_sectors),
                where_: "before or after",
            });
        }
        let to = if backwards {
            choose_offset(off, off + room.after_sectors, off + move_by, off + room.after_sectors)
        } else {
            choose_offset(off - room.before_sectors, off, off - room.before_sectors, off - move_by)
        };
        Some((backwards, to.abs_diff(off)))
    } else {
        None
    };
    let (backwards, move_by) = moved.unwrap_or((backwards, move_by));
    let new_offset_sectors = if backwards { move_by as i64 } else { -(move_by as i64) };
    let position_sectors = if backwards { new_dd * size_sectors } else { 0 };
    // md's `raid5_start_reshape` gives each spare the lowest empty slot (`raid5_add_disk`
    // searches from 0): a role the old shape is missing first (a RAID0 taken over as RAID4
    // lacks its parity role; a degraded array one of its own), then the new roles. A spare
    // in an old role is written by the reshape itself: md records it rebuilding
    // (`recovery_offset` 0, following the reshape), the others in sync.
    let held: Vec<u32> = sb.dev_roles.iter().filter(|&&r| r < 0xff00).map(|&r| u32::from(r)).collect();
    let empty = (0..new.raid_disks).filter(|r| !held.contains(r));
    let new_roles: Vec<(u32, u16)> =
        if needed == 0 { Vec::new() } else { spares.iter().zip(empty).map(|(&dev, role)| (dev, role as u16)).collect() };
    let rebuilt_by_reshape = new_roles.iter().filter(|(_, role)| u32::from(*role) < old.raid_disks).map(|(dev, _)| *dev).collect();
    Ok(GrowPlan {
        state: ReshapeState { position_sectors, backwards, old, new, new_offset_sectors },
        new_roles,
        rebuilt_by_reshape,
        size_sectors,
    })
}

/// A RAID10 reshape, as mdadm plans one (Grow.c `analyse_change` case 10,
/// `raid10_reshape`) and raid10.c runs it (`raid10_start_reshape`): no backup, ever; the
/// data offsets must differ by at least the larger of the two shapes' chunk times far
/// copies (`min_offset_change`, checked by the kernel). Members added: the data moves down
/// by that, forwards. The same members with another chunk or a switch between near and
/// offset: the data moves by about half the room on the side with more of it
/// (`set_new_data_offset`, [`choose_offset`]), forwards when that is before the data,
/// backwards when after. md also removes members, which uraid refuses with what to use
/// instead.
fn plan_raid10_grow(sb: &Superblock1, req: &GrowRequest, spares: &[u32], room: Room) -> Result<GrowPlan, GrowError> {
    let copies = |layout: u32| (layout & 0xff) * ((layout >> 8) & 0xff);
    let far_mode = |layout: u32| (layout >> 8) & 0xff > 1 && layout & (1 << 16) == 0;
    // Chunk rows each row of slots takes: an offset layout's far copies, else 1.
    let far_rows = |layout: u32| u64::from(((layout >> 8) & 0xff).max(1));
    if far_mode(sb.layout) {
        return Err(GrowError::Raid10("md cannot reshape a RAID10 far layout (mdadm: \"Cannot reshape RAID10 in far-mode\")"));
    }
    let layout = req.layout.unwrap_or(sb.layout);
    if far_mode(layout) {
        return Err(GrowError::Raid10("md cannot reshape a RAID10 to a far layout"));
    }
    if copies(layout) != copies(sb.layout) {
        return Err(GrowError::Raid10("md cannot change the number of copies of a RAID10"));
    }
    let chunk = req.chunk_sectors.unwrap_or(sb.chunksize_sectors);
    if !chunk.is_power_of_two() || chunk < 8 {
        return Err(GrowError::Chunk(chunk));
    }
    // raid10.c sizes each member in whole chunks times the far copies: the used size must
    // stay a whole number of them, or the new shape would end before the old one.
    if !sb.size_sectors.is_multiple_of(u64::from(chunk) * far_rows(layout)) {
        return Err(GrowError::ChunkDoesNotDivide { size: sb.size_sectors, chunk });
    }
    let old_disks = sb.raid_disks;
    let new_disks = req.raid_disks.unwrap_or(old_disks);
    if new_disks == old_disks && layout == sb.layout && chunk == sb.chunksize_sectors {
        return Err(if req.array_size_sectors.is_some() { GrowError::ArraySizeAlone } else { GrowError::NothingToChange });
    }
    let shrinks = new_disks < old_disks;
    let near_copies = u64::from(layout & 0xff);
    if shrinks && new_disks < copies(layout) {
        return Err(GrowError::TooFewMembers { level: 10, min: copies(layout) });
    }
    let min = (u64::from(sb.chunksize_sectors) * far_rows(sb.layout)).max(u64::from(chunk) * far_rows(layout));
    // Fewer members: the data moves up by `min` (mdadm's `raid10_reshape`: "data_offset
    // must increase by at least min_offset_change. To allow for this, component_size must
    // be decreased by the same amount"), so the used size is cut by what the room after the
    // data lacks, in whole chunk rows of both shapes.
    let mut size_sectors = sb.size_sectors;
    if shrinks && room.after_sectors < min {
        let unit = lcm(u64::from(sb.chunksize_sectors) * far_rows(sb.layout), u64::from(chunk) * far_rows(layout));
        size_sectors = sb.size_sectors.saturating_sub(min - room.after_sectors) / unit * unit;
    }
    let room = Room { after_sectors: room.after_sectors + (sb.size_sectors - size_sectors), ..room };
    // raid10.c `raid10_size` of the new shape: the capacity, and where a backward reshape
    // starts.
    let capacity_sectors = size_sectors / u64::from(chunk) / far_rows(layout) * u64::from(new_disks) / near_copies * u64::from(chunk);
    match req.array_size_sectors {
        // raid10.c `raid10_start_reshape`: "array size must be reduce before number of disks".
        None if shrinks => return Err(GrowError::ArraySizeFirst { capacity_sectors }),
        Some(asked) if asked > capacity_sectors => return Err(GrowError::ArraySizeTooLarge { asked, capacity_sectors }),
        Some(_) if !shrinks => return Err(GrowError::ArraySizeAlone),
        _ => {}
    }
    let needed = new_disks.saturating_sub(old_disks) as usize;
    if spares.len() < needed {
        return Err(GrowError::NeedSpares { wanted: new_disks, needed, have: spares.len() });
    }
    let (backwards, move_by) = if shrinks {
        (true, min)
    } else if new_disks > old_disks {
        if room.before_sectors < min {
            return Err(GrowError::NoRoom { needed: min, have: room.before_sectors, where_: "before" });
        }
        (false, min)
    } else {
        let off = sb.data_offset_sectors;
        if room.before_sectors > room.after_sectors {
            if room.before_sectors < min {
                return Err(GrowError::NoRoom { needed: min, have: room.before_sectors, where_: "before or after" });
            }
            (false, off - choose_offset(off - room.before_sectors, off, off - room.before_sectors, off - min))
        } else {
            if room.after_sectors < min {
                return Err(GrowError::NoRoom { needed: min, have: room.after_sectors, where_: "before or after" });
            }
            (true, choose_offset(off, off + room.after_sectors, off + min, off + room.after_sectors) - off)
        }
    };
    let side = |raid_disks: u32, layout: u32, chunk_sectors: u32| SideShape { level: 10, layout, chunk_sectors, raid_disks };
    // `raid10_add_disk` gives each spare the lowest free slot: the new roles, the array
    // being whole (uraid reshapes complete RAID10s only).
    let new_roles = spares.iter().zip(old_disks..new_disks).map(|(&dev, role)| (dev, role as u16)).collect();
    Ok(GrowPlan {
        state: ReshapeState {
            position_sectors: if backwards { capacity_sectors } else { 0 },
            backwards,
            old: side(old_disks, sb.layout, sb.chunksize_sectors),
            new: side(new_disks, layout, chunk),
            new_offset_sectors: if backwards { move_by as i64 } else { -(move_by as i64) },
        },
        new_roles,
        rebuilt_by_reshape: Vec::new(),
        size_sectors,
    })
}

impl GrowPlan {
    /// Records the reshape's start on a member's (or spare's) superblock, as md's
    /// `super_1_sync` writes it; the checksum is the caller's to update with the events.
    pub fn apply(&self, sb: &mut Superblock1) {
        let st = &self.state;
        sb.feature_map.0 |= FeatureMap::RESHAPE_ACTIVE;
        // (A reshape in place, as 0.90's, keeps the data offset: no NEW_OFFSET.)
        if st.new_offset_sectors != 0 {
            sb.feature_map.0 |= FeatureMap::NEW_OFFSET;
        }
        if st.backwards && st.old.raid_disks == st.new.raid_disks {
            sb.feature_map.0 |= FeatureMap::RESHAPE_BACKWARDS;
        }
        sb.reshape_position_sectors = st.position_sectors;
        sb.size_sectors = self.size_sectors;
        sb.raid_disks = st.new.raid_disks;
        sb.delta_disks = st.new.raid_disks as i32 - st.old.raid_disks as i32;
        sb.new_level = st.new.level;
        sb.new_layout = st.new.layout;
        sb.new_chunk_sectors = st.new.chunk_sectors;
        sb.new_offset_sectors = st.new_offset_sectors as i32;
        for &(dev, role) in &self.new_roles {
            if sb.dev_roles.len() <= dev as usize {
                sb.dev_roles.resize(dev as usize + 1, 0xffff);
            }
            sb.dev_roles[dev as usize] = role;
        }
        if self.rebuilt_by_reshape.contains(&sb.dev_number) {
            sb.feature_map.0 |= FeatureMap::RECOVERY_OFFSET;
            sb.recovery_offset_raw = 0;
        }
    }
}

/// A level change md makes without moving data (raid5.c/raid1.c `takeover`): the same
/// bytes read as the new level, possibly with one member more (rebuilt) or less.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Takeover {
    pub level: i32,
    pub layout: u32,
    pub chunk_sectors: u32,
    pub raid_disks: u32,
    /// A spare (by `dev_number`) taking the new last role, rebuilt from the others (RAID5
    /// to RAID6: the Q member; RAID0 to RAID4/5: the parity member).
    pub rebuilt: Option<(u32, u16)>,
    /// md's `dev_sectors` after the change, when it changes (RAID0 keeps none; RAID0 to
    /// RAID4/5 takes its zone's size per member).
    pub size_sectors: Option<u64>,
}

/// What a takeover needs to know of every device given (members and spares).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceSize {
    pub dev_number: u32,
    pub data_sectors: u64,
}

/// The one zone of a RAID0 whose members all hold the same number of whole chunks (md's
/// `raid45_takeover_raid0` takes over nothing else): the sectors each member holds.
fn raid0_single_zone(sb: &Superblock1, devices: &[DeviceSize]) -> Result<u64, &'static str> {
    let chunk = u64::from(sb.chunksize_sectors.max(1));
    let mut sizes = devices.iter().filter(|d| sb.dev_roles.get(d.dev_number as usize).is_some_and(|&r| u32::from(r) < sb.raid_disks));
    let first = sizes.next().ok_or(" (no member was given)")?.data_sectors / chunk * chunk;
    if sizes.any(|d| d.data_sectors / chunk * chunk != first) {
        return Err(" with members of different sizes (more than one zone)");
    }
    Ok(first)
}

/// md's chunk for a RAID1 taken over as RAID5 (raid5.c `raid5_takeover_raid1`): 64K, halved
/// until it divides the array.
fn raid1_takeover_chunk(size_sectors: u64) -> Option<u32> {
    let mut chunk = 128u32;
    while chunk > 0 && !size_sectors.is_multiple_of(u64::from(chunk)) {
        chunk >>= 1;
    }
    (chunk >= 8).then_some(chunk)
}

/// Plans the level change `req.level` asks for, if any (`None`: same level, or none
/// asked). A member count, chunk or layout in the same request is a reshape after it
/// ([`GrowRequest::after_takeover`]).
pub fn plan_takeover(sb: &Superblock1, req: &GrowRequest, spares: &[u32], devices: &[DeviceSize]) -> Result<Option<Takeover>, GrowError> {
    let Some(to) = req.level.filter(|&l| l != sb.level) else { return Ok(None) };
    let from = sb.level;
    let refuse = |hint: &'static str| Err(GrowError::Takeover { from, to, hint });
    let same = |raid_disks: u32, layout: u32, chunk_sectors: u32| Takeover {
        level: to,
        layout,
        chunk_sectors,
        raid_disks,
        rebuilt: None,
        size_sectors: None,
    };
    let t = match (from, to) {
        // raid5.c `raid45_takeover_raid0`: one member more, parity-last (md's
        // ALGORITHM_PARITY_N for RAID4 too), the data where it was. With no spare the new
        // array is degraded, as md leaves it for a later --add; a spare given takes the
        // parity role at once and is rebuilt.
        (0, 4 | 5) => {
            let zone = match raid0_single_zone(sb, devices) {
                Ok(z) => z,
                Err(hint) => return refuse(hint),
            };
            let rebuilt = match spares.first() {
                Some(&spare) => {
                    let have = devices.iter().find(|d| d.dev_number == spare).map_or(0, |d| d.data_sectors);
                    if have < zone {
                        return Err(GrowError::SpareTooSmall { have, needed: zone });
                    }
                    Some((spare, sb.raid_disks as u16))
                }
                None => None,
            };
            Takeover {
                level: to,
                layout: Algorithm::ParityLast.to_md(),
                chunk_sectors: sb.chunksize_sectors,
                raid_disks: sb.raid_disks + 1,
                rebuilt,
                size_sectors: Some(zone),
            }
        }
        // raid0.c `raid0_takeover_raid45`: the parity member leaves (mdadm fails and removes
        // it first, `remove_disks_for_takeover`); the data members are a RAID0 as they lie.
        (4, 0) => Takeover { size_sectors: Some(0), ..same(sb.raid_disks - 1, 0, sb.chunksize_sectors) },
        (5, 0) if sb.layout == Algorithm::ParityLast.to_md() => {
            Takeover { size_sectors: Some(0), ..same(sb.raid_disks - 1, 0, sb.chunksize_sectors) }
        }
        (5, 0) => return refuse(" unless its layout is parity-last (--layout parity-last first)"),
        (1, 5) if sb.raid_disks == 2 => match raid1_takeover_chunk(sb.size_sectors) {
            Some(chunk) => same(2, Algorithm::LeftSymmetric.to_md(), chunk),
            None => return refuse(" (its size is not a multiple of 4K)"),
        },
        (1, 5) => return refuse(" unless it has exactly 2 members (--raid-devices 2 first)"),
        (5, 1) if sb.raid_disks == 2 => same(2, 0, 0),
        (5, 1) => return refuse(" unless it has exactly 2 members (shrink it to 2 first)"),
        (4, 5) => same(sb.raid_disks, Algorithm::ParityLast.to_md(), sb.chunksize_sectors),
        (5, 4) if sb.layout == Algorithm::ParityLast.to_md() => same(sb.raid_disks, 0, sb.chunksize_sectors),
        (5, 4) => return refuse(" unless its layout is parity-last (--layout parity-last first)"),
        (5, 6) => {
            let Some(&spare) = spares.first() else {
                return Err(GrowError::NeedSpares { wanted: sb.raid_disks + 1, needed: 1, have: 0 });
            };
            let layout = match Algorithm::from_md(sb.layout) {
                Some(Algorithm::ParityLast) => Algorithm::ParityLast.to_md(),
                Some(a) if a.valid_for_raid5() => a.to_md() + 16,
                _ => return refuse(" with this layout"),
            };
            Takeover {
                level: 6,
                layout,
                chunk_sectors: sb.chunksize_sectors,
                raid_disks: sb.raid_disks + 1,
                rebuilt: Some((spare, sb.raid_disks as u16)),
                size_sectors: None,
            }
        }
        (6, 5) => match sb.layout {
            5 => same(sb.raid_disks - 1, 5, sb.chunksize_sectors),
            16..=20 => same(sb.raid_disks - 1, sb.layout - 16, sb.chunksize_sectors),
            _ => return refuse(" unless Q is on the last member (a *-6 or parity-last layout: --layout left-symmetric-6 first)"),
        },
        _ => return refuse(""),
    };
    Ok(Some(t))
}

/// mdadm's named `--layout` values for a level change (Grow.c): `preserve` keeps the layout
/// the change gives (RAID5 -> RAID6: the `*-6` layout, Q alone on the new member, so no data
/// moves); `normalise` restripes a RAID6 to md's rotating layout (`left-symmetric-6` ->
/// `left-symmetric`), after the takeover when going from RAID5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutWord {
    Preserve,
    Normalise,
}

impl LayoutWord {
    pub fn parse(s: &str) -> Option<LayoutWord> {
        match s.to_ascii_lowercase().as_str() {
            "preserve" => Some(LayoutWord::Preserve),
            "normalise" | "normalize" => Some(LayoutWord::Normalise),
            _ => None,
        }
    }

    /// The layout to ask for, `None` for none, on an array of `level`/`layout` going to
    /// level `target`.
    pub fn layout(self, level: i32, layout: u32, target: i32) -> Result<Option<u32>, GrowError> {
        match (self, level, target) {
            (LayoutWord::Preserve, ..) => Ok(None),
            // Already rotating (or parity-last, which has no *-6 twin): nothing to restripe.
            (LayoutWord::Normalise, 6, 6) => Ok((16..=20).contains(&layout).then(|| layout - 16)),
            // The takeover gives layout + 16 (parity-last stays parity-last).
            (LayoutWord::Normalise, 5, 6) => Ok((layout != Algorithm::ParityLast.to_md()).then_some(layout)),
            (LayoutWord::Normalise, ..) => Err(GrowError::Normalise(target)),
        }
    }
}

impl GrowRequest {
    /// What is left to reshape once `t` is done: the member count, chunk and layout asked
    /// for that the takeover did not already give; `None` when nothing is.
    pub fn after_takeover(&self, t: &Takeover) -> Option<GrowRequest> {
        let rest = GrowRequest {
            level: None,
            raid_disks: self.raid_disks.filter(|&n| n != t.raid_disks),
            layout: self.layout.filter(|&l| l != t.layout),
            chunk_sectors: self.chunk_sectors.filter(|&c| c != t.chunk_sectors),
            array_size_sectors: self.array_size_sectors,
        };
        (rest != GrowRequest { array_size_sectors: self.array_size_sectors, ..GrowRequest::default() }).then_some(rest)
    }
}

impl Takeover {
    /// The superblock after the takeover (array-wide fields; the spare's role table entry).
    pub fn apply(&self, sb: &mut Superblock1) {
        sb.level = self.level;
        sb.layout = self.layout;
        sb.chunksize_sectors = self.chunk_sectors;
        let dropped = self.raid_disks < sb.raid_disks;
        sb.raid_disks = self.raid_disks;
        if self.level == 0 && sb.size_sectors > 0 {
            // raid0.c `raid0_takeover_raid45`: every member's data area becomes the RAID4/5's
            // used size (`rdev->sectors = dev_sectors`, written as `data_size`), so the
            // RAID0 has one zone even over larger members (a RAID0 grown with a larger disk).
            sb.data_size_sectors = sb.size_sectors;
        }
        if let Some(size) = self.size_sectors {
            sb.size_sectors = size;
        }
        if dropped {
            // RAID6 -> RAID5: the Q member (last role) becomes a spare. RAID4/5 -> RAID0:
            // the parity member is failed and removed, as mdadm does (a RAID0 has no spares).
            let gone = if self.level == 0 { 0xfffe } else { 0xffff };
            for role in sb.dev_roles.iter_mut() {
                if *role < 0xff00 && u32::from(*role) >= self.raid_disks {
                    *role = gone;
                }
            }
        }
        if let Some((dev, role)) = self.rebuilt {
            if sb.dev_roles.len() <= dev as usize {
                sb.dev_roles.resize(dev as usize + 1, 0xffff);
            }
            sb.dev_roles[dev as usize] = role;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::reshape::Side;

    fn raid5_3() -> Superblock1 {
        let mut sb = crate::metadata::sb1::tests::sample();
        sb.feature_map.0 = 0;
        sb.raid_disks = 3;
        sb.dev_roles = vec![0, 1, 2, 0xffff];
        sb
    }

    const ROOM: Room = Room { before_sectors: 1968, after_sectors: 0 };

    #[test]
    fn growing_3_to_4_moves_the_data_down_as_mdadm_does() {
        let sb = raid5_3();
        let plan = plan_grow(&sb, &GrowRequest { raid_disks: Some(4), ..Default::default() }, &[3], ROOM).unwrap();
        assert_eq!((plan.state.new_offset_sectors, plan.state.backwards, plan.state.position_sectors), (-384, false, 0));
        assert_eq!(plan.new_roles, vec![(3, 3)]);
        let mut rec = sb.clone();
        plan.apply(&mut rec);
        rec.sb_csum = rec.compute_checksum();
        assert_eq!(rec.feature_map.0, 0x44, "md's feature map for this grow (the corpus array's)");
        assert_eq!((rec.raid_disks, rec.delta_disks, rec.new_offset_sectors), (4, 1, -384));
        // What is recorded reads back as the reshape planned.
        assert_eq!(ReshapeState::from_superblock(&rec).unwrap(), plan.state);
        assert_eq!(plan.state.side_superblock(&rec, Side::New, 40960).data_offset_sectors, 1664);
        // RAID6 4 -> 5 moves by the same amount (2 -> 3 data disks).
        let mut r6 = sb.clone();
        r6.level = 6;
        r6.raid_disks = 4;
        let plan = plan_grow(&r6, &GrowRequest { raid_disks: Some(5), ..Default::default() }, &[3], ROOM).unwrap();
        assert_eq!(plan.state.new_offset_sectors, -384);
    }

    #[test]
    fn a_grow_in_place_keeps_the_offset_and_backs_up_the_lcm_of_the_stripes() {
        let sb = raid5_3();
        let req = GrowRequest { raid_disks: Some(4), ..Default::default() };
        let (plan, critical) = plan_grow_in_place(&sb, &req, &[3]).unwrap();
        // 2 -> 3 data chunks of 128 sectors: mdadm's "Need to backup 384K".
        assert_eq!(critical, 768);
        assert_eq!((plan.state.new_offset_sectors, plan.state.backwards, plan.state.position_sectors), (0, false, 0));
        assert_eq!(plan.new_roles, vec![(3, 3)]);
        let mut rec = sb.clone();
        plan.apply(&mut rec);
        assert_eq!(rec.feature_map.0, FeatureMap::RESHAPE_ACTIVE, "no NEW_OFFSET in place");
        assert_eq!(ReshapeState::from_superblock(&rec).unwrap(), plan.state);
        // Only a grow by members, as uraid starts it in place.
        for other in [
            GrowRequest { chunk_sectors: Some(256), ..Default::default() },
            GrowRequest { raid_disks: Some(4), chunk_sectors: Some(256), ..Default::default() },
            GrowRequest { raid_disks: Some(2), array_size_sectors: Some(100), ..Default::default() },
            GrowRequest { level: Some(6), raid_disks: Some(4), ..Default::default() },
        ] {
            assert_eq!(plan_grow_in_place(&sb, &other, &[3]), Err(GrowError::InPlaceGrowOnly), "{other:?}");
        }
        assert_eq!(
            plan_grow_in_place(&sb, &GrowRequest { raid_disks: Some(5), ..Default::default() }, &[3]).map(|_| ()),
            Err(GrowError::NeedSpares { wanted: 5, needed: 2, have: 1 })
        );
    }

    #[test]
    fn a_raid10_near_grow_moves_the_data_down_one_chunk_and_refuses_what_md_or_uraid_does_not_do() {
        let mut sb = raid5_3();
        sb.level = 10;
        sb.layout = 0x102;
        sb.chunksize_sectors = 128;
        let to = |n: u32| GrowRequest { raid_disks: Some(n), ..Default::default() };
        let plan = plan_grow(&sb, &to(4), &[3], ROOM).unwrap();
        assert_eq!((plan.state.new_offset_sectors, plan.state.backwards, plan.state.position_sectors), (-128, false, 0));
        assert_eq!((plan.state.old.raid_disks, plan.state.new.raid_disks, plan.state.new.layout), (3, 4, 0x102));
        assert_eq!(plan.new_roles, vec![(3, 3)]);
        let mut rec = sb.clone();
        plan.apply(&mut rec);
        assert_eq!(ReshapeState::from_superblock(&rec).unwrap(), plan.state);
        assert_eq!(plan_grow(&sb, &to(5), &[3], ROOM), Err(GrowError::NeedSpares { wanted: 5, needed: 2, have: 1 }));
        assert!(matches!(plan_grow(&sb, &to(4), &[3], Room { before_sectors: 64, after_sectors: 0 }), Err(GrowError::NoRoom { .. })));
        // Fewer members: the array cut first, as md asks; then backwards, the data moved up
        // by a chunk, the used size cut by that much when there is no room after the data.
        assert_eq!(plan_grow(&sb, &to(2), &[], ROOM), Err(GrowError::ArraySizeFirst { capacity_sectors: 30592 }));
        let cut = |n: u32, sectors: u64| GrowRequest { array_size_sectors: Some(sectors), ..to(n) };
        assert!(matches!(plan_grow(&sb, &cut(2, 30720), &[], ROOM), Err(GrowError::ArraySizeTooLarge { .. })));
        let plan = plan_grow(&sb, &cut(2, 30592), &[], ROOM).unwrap();
        assert_eq!((plan.state.new_offset_sectors, plan.state.backwards, plan.state.position_sectors), (128, true, 30592));
        assert_eq!((plan.size_sectors, plan.state.new.raid_disks), (30592, 2));
        let mut rec = sb.clone();
        plan.apply(&mut rec);
        assert_eq!(ReshapeState::from_superblock(&rec).unwrap(), plan.state);
        // With room after the data, the used size stays.
        let plan = plan_grow(&sb, &cut(2, 30592), &[], Room { before_sectors: 0, after_sectors: 128 }).unwrap();
        assert_eq!((plan.size_sectors, plan.state.position_sectors), (30720, 30720));
        let two = Superblock1 { raid_disks: 2, ..sb.clone() };
        assert!(matches!(plan_grow(&two, &cut(1, 100), &[], ROOM), Err(GrowError::TooFewMembers { min: 2, .. })));
        // Members and chunk at once: down by the larger chunk.
        let chunk = GrowRequest { chunk_sectors: Some(256), ..to(4) };
        assert_eq!(plan_grow(&sb, &chunk, &[3], ROOM).unwrap().state.new_offset_sectors, -256);
        let three_copies = GrowRequest { layout: Some(0x103), ..to(4) };
        assert_eq!(plan_grow(&sb, &three_copies, &[3], ROOM), Err(GrowError::Raid10("md cannot change the number of copies of a RAID10")));
        let far = Superblock1 { layout: 0x201, ..sb.clone() };
        assert!(matches!(plan_grow(&far, &to(4), &[3], ROOM), Err(GrowError::Raid10(_))));
        // Offset (o2): moved by a chunk per far copy, as mdadm's `min_offset_change`.
        let offset = Superblock1 { layout: 0x10201, ..sb.clone() };
        assert_eq!(plan_grow(&offset, &to(4), &[3], ROOM).unwrap().state.new_offset_sectors, -256);
    }

    #[test]
    fn a_raid10_chunk_change_or_near_offset_switch_moves_the_data_as_mdadm_chooses() {
        let mut sb = raid5_3();
        (sb.level, sb.layout, sb.chunksize_sectors, sb.raid_disks) = (10, 0x102, 128, 4);
        let chunk = |c: u32| GrowRequest { chunk_sectors: Some(c), ..Default::default() };
        // Room before the data: forwards, about half of it (mdadm's choose_offset).
        let plan = plan_grow(&sb, &chunk(256), &[], ROOM).unwrap();
        assert_eq!((plan.state.new_offset_sectors, plan.state.backwards, plan.state.position_sectors), (-1024, false, 0));
        assert_eq!((plan.state.new.chunk_sectors, plan.state.new.raid_disks, plan.new_roles.len()), (256, 4, 0));
        // Room after it only: backwards from the end (4 members, n2: twice a member's chunks).
        let after = Room { before_sectors: 0, after_sectors: 4096 };
        let plan = plan_grow(&sb, &chunk(64), &[], after).unwrap();
        assert_eq!((plan.state.new_offset_sectors, plan.state.backwards, plan.state.position_sectors), (2048, true, 30720 * 2));
        let mut rec = sb.clone();
        plan.apply(&mut rec);
        assert_eq!(ReshapeState::from_superblock(&rec).unwrap(), plan.state);
        // Near -> offset (o2): the kernel wants the offsets apart by a chunk per far copy.
        let to_offset = GrowRequest { layout: Some(0x10201), ..Default::default() };
        let plan = plan_grow(&sb, &to_offset, &[], Room { before_sectors: 255, after_sectors: 256 }).unwrap();
        assert_eq!((plan.state.new_offset_sectors, plan.state.backwards, plan.state.new.layout), (256, true, 0x10201));
        assert!(matches!(
            plan_grow(&sb, &to_offset, &[], Room { before_sectors: 255, after_sectors: 200 }),
            Err(GrowError::NoRoom { needed: 256, .. })
        ));
        // What md refuses, and a chunk that does not divide the used size.
        assert!(matches!(plan_grow(&sb, &chunk(100), &[], ROOM), Err(GrowError::Chunk(100))));
        let uneven = Superblock1 { size_sectors: 30720 - 128, ..sb.clone() };
        assert!(matches!(plan_grow(&uneven, &chunk(256), &[], ROOM), Err(GrowError::ChunkDoesNotDivide { .. })));
        let to_far = GrowRequest { layout: Some(0x201), ..Default::default() };
        assert!(matches!(plan_grow(&sb, &to_far, &[], ROOM), Err(GrowError::Raid10(_))));
    }

    #[test]
    fn choose_offset_is_mdadms() {
        // Forwards with 1968 sectors before a data offset of 2048, `min` 1024: the middle
        // (1064) loses bit 3, bit 5, then cannot lose bit 10 (below `lo`): 1024.
        assert_eq!(choose_offset(80, 2048, 80, 1024), 1024);
        assert_eq!(choose_offset(2048, 6144, 3072, 6144), 4096);
        // Every bit below 1 MiB cleared when the range allows: a 1 MiB-aligned offset.
        assert_eq!(choose_offset(2048, 2048 + 100_000, 2048 + 1024, 2048 + 100_000) % 2048, 0);
        for (lo, hi, min) in [(0u64, 5000u64, 1000u64), (300, 9000, 700), (2048, 2100, 2050)] {
            let c = choose_offset(lo, hi, min, hi);
            assert!((min..=hi).contains(&c), "{lo} {hi} {min}: {c}");
        }
    }

    #[test]
    fn a_chunk_change_moves_the_data_as_mdadm_chooses_and_runs_backwards_without_room_before() {
        let sb = raid5_3();
        let req = GrowRequest { chunk_sectors: Some(1024), ..Default::default() };
        let plan = plan_grow(&sb, &req, &[], ROOM).unwrap();
        assert_eq!((plan.state.new_offset_sectors, plan.state.backwards), (-1024, false));
        // With the room after the data, it goes up by about half of it, as mdadm's
        // `choose_offset` picks: the middle of 2048..6144 is 4096, already 1 MiB-aligned.
        let plan = plan_grow(&sb, &req, &[], Room { before_sectors: 0, after_sectors: 4096 }).unwrap();
        assert_eq!((plan.state.new_offset_sectors, plan.state.backwards, plan.state.position_sectors), (2048, true, 2 * 30720));
        // Room on both sides: the side with more of it.
        let plan = plan_grow(&sb, &req, &[], Room { before_sectors: 1968, after_sectors: 20000 }).unwrap();
        assert!(plan.state.backwards && plan.state.new_offset_sectors >= 1024, "{:?}", plan.state);
        let mut rec = sb.clone();
        plan.apply(&mut rec);
        assert_eq!(rec.feature_map.0, 0x64, "backwards, recorded by the flag when the member count stays");
        assert!(ReshapeState::from_superblock(&rec).unwrap().backwards);
    }

    #[test]
    fn a_shrink_needs_the_array_cut_first_and_runs_backwards_moving_the_data_up() {
        // RAID5 4 -> 3 (3 -> 2 data disks), 30720 sectors per member.
        let mut sb = raid5_3();
        sb.raid_disks = 4;
        sb.dev_roles = vec![0, 1, 2, 3];
        let room = Room { before_sectors: 1968, after_sectors: 4096 };
        let to3 = |array_size_sectors| GrowRequest { raid_disks: Some(3), array_size_sectors, ..Default::default() };
        assert_eq!(plan_grow(&sb, &to3(None), &[], room), Err(GrowError::ArraySizeFirst { capacity_sectors: 61440 }));
        assert_eq!(
            plan_grow(&sb, &to3(Some(61441)), &[], room),
            Err(GrowError::ArraySizeTooLarge { asked: 61441, capacity_sectors: 61440 })
        );
        // mdadm's min: lcm(3 x 128, 2 x 128) / 3 data disks = 256 sectors, up.
        let plan = plan_grow(&sb, &to3(Some(61440)), &[], room).unwrap();
        assert_eq!((plan.state.new_offset_sectors, plan.state.backwards, plan.state.position_sectors), (256, true, 61440));
        assert!(plan.new_roles.is_empty());
        let mut rec = sb.clone();
        plan.apply(&mut rec);
        assert_eq!(rec.feature_map.0, 0x44, "md records a shrink without RESHAPE_BACKWARDS: delta_disks says it");
        assert_eq!((rec.raid_disks, rec.delta_disks, rec.new_offset_sectors), (3, -1, 256));
        let state = ReshapeState::from_superblock(&rec).unwrap();
        assert_eq!(state, plan.state);
        // The member leaving is a spare in the new shape, and in the superblocks at the end.
        assert_eq!(state.final_superblock(&rec, 40960).dev_roles, vec![0, 1, 2, 0xffff]);
        // Too little room after the data (an mdadm-made array has less than a chunk): the
        // used size gives up the rest, in whole chunks, when the cut array still fits.
        let tight = Room { before_sectors: 1968, after_sectors: 100 };
        assert_eq!(
            plan_grow(&sb, &to3(Some(61440)), &[], tight),
            Err(GrowError::ArraySizeTooLarge { asked: 61440, capacity_sectors: 2 * 30464 })
        );
        let plan = plan_grow(&sb, &to3(Some(2 * 30464)), &[], tight).unwrap();
        assert_eq!((plan.size_sectors, plan.state.position_sectors, plan.state.new_offset_sectors), (30464, 60928, 256));
        let mut rec = sb.clone();
        plan.apply(&mut rec);
        assert_eq!(rec.size_sectors, 30464);
        assert!(rec.data_size_sectors >= 30464 + 256, "the new data area fits in the old one moved up");
        // --array-size on a change that does not shrink says it does nothing.
        let chunk = GrowRequest { chunk_sectors: Some(256), array_size_sectors: Some(1000), ..Default::default() };
        assert_eq!(plan_grow(&sb, &chunk, &[], room), Err(GrowError::ArraySizeAlone));
    }

    #[test]
    fn refusals_say_what_would_work() {
        let sb = raid5_3();
        let grow = |req: GrowRequest, spares: &[u32], room: Room| plan_grow(&sb, &req, spares, room);
        let to = |n| GrowRequest { raid_disks: Some(n), ..Default::default() };
        assert_eq!(grow(to(3), &[], ROOM), Err(GrowError::NothingToChange));
        assert_eq!(grow(to(5), &[3], ROOM), Err(GrowError::NeedSpares { wanted: 5, needed: 2, have: 1 }));
        assert_eq!(grow(to(2), &[], ROOM), Err(GrowError::TooFewMembers { level: 5, min: 3 }));
        assert!(matches!(grow(to(4), &[3], Room { before_sectors: 100, after_sectors: 9999 }), Err(GrowError::NoRoom { needed: 384, .. })));
        assert_eq!(grow(GrowRequest { chunk_sectors: Some(96), ..Default::default() }, &[], ROOM), Err(GrowError::Chunk(96)));
        assert_eq!(
            grow(GrowRequest { chunk_sectors: Some(1 << 16), ..Default::default() }, &[], ROOM),
            Err(GrowError::ChunkDoesNotDivide { size: 30720, chunk: 1 << 16 })
        );
        assert_eq!(
            grow(GrowRequest { layout: Some(16), ..Default::default() }, &[], ROOM),
            Err(GrowError::Layout { level: 5, layout: 16 })
        );
        let mut r0 = sb.clone();
        r0.level = 0;
        assert_eq!(plan_grow(&r0, &to(4), &[3], ROOM), Err(GrowError::Level(0)));
    }

    #[test]
    fn takeovers_md_makes_and_the_ones_it_refuses() {
        let level = |l| GrowRequest { level: Some(l), ..Default::default() };
        let mut r1 = raid5_3();
        (r1.level, r1.raid_disks, r1.layout, r1.chunksize_sectors) = (1, 2, 0, 0);
        let t = plan_takeover(&r1, &level(5), &[], &[]).unwrap().unwrap();
        assert_eq!((t.level, t.layout, t.chunk_sectors, t.raid_disks), (5, 2, 128, 2), "md: left-symmetric, 64K");
        r1.size_sectors = 30720 + 8;
        assert_eq!(plan_takeover(&r1, &level(5), &[], &[]).unwrap().unwrap().chunk_sectors, 8, "halved until it divides");
        r1.raid_disks = 3;
        assert!(matches!(plan_takeover(&r1, &level(5), &[], &[]), Err(GrowError::Takeover { from: 1, to: 5, .. })));
        let r5 = raid5_3();
        let t = plan_takeover(&r5, &level(6), &[3], &[]).unwrap().unwrap();
        assert_eq!((t.layout, t.raid_disks, t.rebuilt), (18, 4, Some((3, 3))), "left-symmetric-6, Q rebuilt on the spare");
        let mut sb = r5.clone();
        t.apply(&mut sb);
        assert_eq!((sb.level, sb.raid_disks, sb.dev_roles[3]), (6, 4, 3));
        assert_eq!(plan_takeover(&r5, &level(6), &[], &[]), Err(GrowError::NeedSpares { wanted: 4, needed: 1, have: 0 }));
        let back = plan_takeover(&sb, &level(5), &[], &[]).unwrap().unwrap();
        assert_eq!((back.layout, back.raid_disks), (2, 3));
        let mut again = sb.clone();
        back.apply(&mut again);
        assert_eq!((again.level, again.raid_disks, again.dev_roles[3]), (5, 3, 0xffff), "Q's member becomes a spare");
        assert!(matches!(plan_takeover(&r5, &level(4), &[], &[]), Err(GrowError::Takeover { hint, .. }) if hint.contains("parity-last")));
        assert_eq!(plan_takeover(&r5, &level(5), &[], &[]), Ok(None));
    }

    #[test]
    fn raid0_becomes_raid4_or_5_with_parity_rebuilt_on_a_spare_and_back() {
        let level = |l| GrowRequest { level: Some(l), ..Default::default() };
        let mut r0 = raid5_3();
        (r0.level, r0.layout, r0.size_sectors) = (0, 1, 0);
        let size = |dev_number, data_sectors| DeviceSize { dev_number, data_sectors };
        // Members of 30720 + 100 sectors: 240 whole 64K chunks each; the spare is dev 3.
        let devices = [size(0, 30820), size(1, 30820), size(2, 30800), size(3, 30720)];
        for to in [4, 5] {
            let t = plan_takeover(&r0, &level(to), &[3], &devices).unwrap().unwrap();
            assert_eq!((t.level, t.layout, t.raid_disks, t.rebuilt, t.size_sectors), (to, 5, 4, Some((3, 3)), Some(30720)));
            let mut sb = r0.clone();
            t.apply(&mut sb);
            assert_eq!((sb.level, sb.raid_disks, sb.size_sectors, sb.dev_roles[3]), (to, 4, 30720, 3));
            // Back: the parity member leaves, failed (a RAID0 has no spares).
            let back = plan_takeover(&sb, &level(0), &[], &devices).unwrap().unwrap();
            assert_eq!((back.raid_disks, back.layout, back.size_sectors), (3, 0, Some(0)));
            back.apply(&mut sb);
            assert_eq!((sb.level, sb.raid_disks, sb.size_sectors, sb.dev_roles[3]), (0, 3, 0, 0xfffe));
            assert_eq!(&sb.dev_roles[..3], &[0, 1, 2]);
        }
        let degraded = plan_takeover(&r0, &level(5), &[], &devices).unwrap().unwrap();
        assert_eq!((degraded.raid_disks, degraded.rebuilt), (4, None), "no spare: degraded, as md leaves it");
        let small = [size(0, 30820), size(1, 30820), size(2, 30820), size(3, 30700)];
        assert_eq!(plan_takeover(&r0, &level(5), &[3], &small), Err(GrowError::SpareTooSmall { have: 30700, needed: 30720 }));
        let zones = [size(0, 30820), size(1, 40000), size(2, 30820), size(3, 40000)];
        assert!(matches!(plan_takeover(&r0, &level(5), &[3], &zones), Err(GrowError::Takeover { hint, .. }) if hint.contains("zone")));
        assert!(matches!(plan_takeover(&r0, &level(6), &[3], &devices), Err(GrowError::Takeover { from: 0, to: 6, .. })));
        let mut r5 = raid5_3();
        r5.layout = 2;
        assert!(
            matches!(plan_takeover(&r5, &level(0), &[], &devices), Err(GrowError::Takeover { hint, .. }) if hint.contains("parity-last"))
        );
    }

    #[test]
    fn preserve_and_normalise_name_the_layouts_mdadm_gives() {
        use LayoutWord::*;
        assert_eq!(LayoutWord::parse("normalize"), Some(Normalise));
        assert_eq!(LayoutWord::parse("Preserve"), Some(Preserve));
        assert_eq!(LayoutWord::parse("left-symmetric"), None);
        assert_eq!(Normalise.layout(6, 18, 6), Ok(Some(2)), "left-symmetric-6 -> left-symmetric");
        assert_eq!(Normalise.layout(6, 20, 6), Ok(Some(4)), "parity-first-6 -> parity-first");
        assert_eq!(Normalise.layout(6, 2, 6), Ok(None), "already rotating");
        assert_eq!(Normalise.layout(5, 0, 6), Ok(Some(0)), "RAID5 left-asymmetric -> RAID6 left-asymmetric");
        assert_eq!(Normalise.layout(5, 5, 6), Ok(None), "parity-last has no *-6 twin");
        assert_eq!(Normalise.layout(5, 2, 5), Err(GrowError::Normalise(5)));
        assert_eq!(Preserve.layout(5, 2, 6), Ok(None));
        // Chained with the takeover, normalise leaves a layout reshape after it.
        let r5 = raid5_3();
        let req = GrowRequest { level: Some(6), layout: Normalise.layout(5, r5.layout, 6).unwrap(), ..Default::default() };
        let t = plan_takeover(&r5, &req, &[3], &[]).unwrap().unwrap();
        assert_eq!(req.after_takeover(&t), Some(GrowRequest { layout: Some(2), ..Default::default() }));
    }

    #[test]
    fn room_counts_the_superblock_log_and_bitmap() {
        let mut sb = raid5_3();
        sb.data_size_sectors = 31104;
        assert_eq!(Room::of(&sb, None), Room { before_sectors: 2048 - 80, after_sectors: 384 });
        assert_eq!(Room::of(&sb, Some(8 + 8 + 200)).before_sectors, 2048 - 216);
        sb.super_offset_sectors = 40000;
        sb.data_offset_sectors = 0;
        assert_eq!(Room::of(&sb, None).before_sectors, 0);
    }
}
