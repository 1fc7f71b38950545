//! An array in the middle of a reshape: readable, writable, and moved window by window
//! from its old shape to its new one with md's on-disk protocol, so that md can take over
//! at any point (and uraid can take over from md).
//!
//! The superblocks describe two arrays over the same members
//! (`uraid_core::metadata::reshape`): the part already moved, in the new shape with its data
//! at the new offset, and the rest, in the old shape. Each side is assembled as an ordinary
//! [`Array`] over the same members seen through a [`SideMember`] (which shows that side's
//! superblock and keeps the side's own superblock writes in memory). The real superblocks
//! belong to this type alone:
//! - before a window's writes could land on old data that a restart would still read, every
//!   earlier write is flushed and the position is recorded (md's checkpoint rule, planned by
//!   `uraid_core::reshape_window`);
//! - before the first user write, they say "active" (md's `md_write_start`), so a crash
//!   leads to a resync once the reshape is done;
//! - at the end, each member gets a plain superblock of the new shape.
//!
//! Requests run beside the reshape. Each one waits while the window being moved overlaps
//! it, then goes to the side holding its sectors; the mover waits for requests inside its
//! next window to finish before reading it. A write to a sector already moved but not yet
//! recorded as moved first records the position: after a crash the old copy would be read,
//! and the write would be lost.

use super::backup::ReshapeBackup;
use super::overlay::SideMember;
use crate::array::{superblock_bytes_of, Array, ArrayOptions, DeviceState, EngineError};
use crate::member::Member;
use crate::scan::probe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use uraid_core::geometry::{Level, SECTOR_BYTES};
use uraid_core::metadata::grow::{plan_grow, GrowRequest, Room};
use uraid_core::metadata::reshape::{ReshapeState, Side};
use uraid_core::metadata::sb090::Superblock090;
use uraid_core::metadata::{BitmapSuperblock, WriteIntentBits};
use uraid_core::metadata::{FeatureMap, Superblock, Superblock1, MAX_SECTOR};
use uraid_core::reshape_order::{StepOrder, Turn};
use uraid_core::reshape_window::{StripedShape, Window, WindowPlanner};

/// Array bytes moved per window, and per step (several windows when they are smaller), at
/// most (more when one window unit is larger). Requests to the span being moved wait for
/// it: 8 MiB is a few milliseconds on memory, and smaller steps measured slower.
pub const DEFAULT_WINDOW_BYTES: u64 = 8 << 20;
/// Array bytes one worker reads, then writes, inside a window, rounded up to whole stripes
/// of the new shape: small enough that a window has a piece for every worker.
const PIECE_BYTES: u64 = 1 << 20;
/// Threads moving one window's pieces at most (one per core up to this).
const MAX_MOVERS: usize = 4;

/// A member of the reshaping array and its real superblock.
struct Slot {
    member: Arc<dyn Member>,
    /// Byte offset of the superblock.
    at: u64,
    sb: Superblock1,
    /// A 0.90 member: where its real superblock sits and what it said when opened. `at`
    /// and `sb` are then its v1 view ([`Superblock090::v1_view`]), and every update is
    /// written as md's 0.90 (0.91 while reshaping) superblock of that view.
    sb090: Option<(u64, Superblock090)>,
    /// The member's write-intent bitmap: where its superblock sits, and that superblock.
    /// The two shapes never see it (md's bitmap counts member sectors, which both shapes
    /// share); it is written with every superblock round, all bits dirty while writes may
    /// be in flight, all clear once the array is marked clean.
    bitmap: Option<(u64, BitmapSuperblock)>,
    /// Failed while the array was open: no longer written.
    failed: bool,
}

struct Progress {
    /// Where the shapes meet now.
    position: u64,
    /// The position the superblocks record.
    checkpoint: u64,
    /// The window being moved: requests overlapping it wait.
    moving: Option<(u64, u64)>,
    /// Sector ranges of requests in progress.
    in_flight: Vec<(u64, u64)>,
    /// The superblocks say "active" (writes may be in flight).
    marked_active: bool,
    finished: bool,
}

/// Where the windows of one step stand (`ReshapingArray::move_windows`).
struct Batch {
    /// md's order rules (`uraid_core::reshape_order`).
    order: StepOrder,
    /// The first failure: every worker stops.
    error: Option<EngineError>,
}

/// What one step of the reshape did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReshapeStep {
    /// Moved array sectors `[first, end)`.
    Moved { first: u64, end: u64 },
    /// Everything is in the new shape; the superblocks say so.
    Finished,
}

/// An array in the middle of a reshape.
pub struct ReshapingArray {
    old: Array,
    new: Arc<Array>,
    slots: Mutex<Vec<Slot>>,
    /// Serialises superblock updates (checkpoints, active/clean marks, the finish).
    superblock_writes: Mutex<u64>,
    state: ReshapeState,
    planner: WindowPlanner,
    size_bytes: AtomicU64,
    writable: bool,
    /// The superblocks said "clean" when opened: if not, the redundancy written before the
    /// crash may disagree, and the array must resync once reshaped.
    opened_clean: bool,
    progress: Mutex<Progress>,
    progress_changed: Condvar,
    user_requests: AtomicU64,
    /// Members (`dev_number`) the reshape writes into a role the old shape lacks; their
    /// `recovery_offset` follows each checkpoint, as md's `reshape_request` moves it.
    rebuilt_by_reshape: Vec<u32>,
    /// Window piece buffers kept between windows (no allocation per window).
    piece_buffers: Mutex<Vec<Vec<u8>>>,
}

/// The striped shape of one side, for the window planner; `None` for a shape the planner
/// does not cover (mirrors, linear, RAID10 far).
fn striped_shape(array: &Array, data_offset_sectors: u64) -> Option<StripedShape> {
    let geometry = array.geometry();
    let chunk = geometry.chunk_sectors()?;
    let array_sectors = geometry.array_sectors();
    let parity = match geometry {
        uraid_core::geometry::Geometry::Raid10(g) if g.far_copies() == 1 || g.far_offset() => {
            let (slots, copies, offset_copies) = (g.raid_disks() as u64, g.near_copies() as u64, g.far_copies() as u64);
            return Some(StripedShape {
                data_disks: slots,
                copies,
                offset_copies,
                chunk_sectors: chunk,
                data_offset_sectors,
                array_sectors,
            });
        }
        _ => match array.level() {
            Level::Raid0 => 0,
            Level::Raid4 | Level::Raid5 => 1,
            Level::Raid6 => 2,
            _ => return None,
        },
    };
    let data_disks = geometry.raid_disks().checked_sub(parity)? as u64;
    Some(StripedShape::parity(data_disks, chunk, data_offset_sectors, array_sectors))
}

/// Reads the newest v1 superblock of every device; all must belong to one array.
fn read_superblocks(devices: &[Arc<dyn Member>]) -> Result<Vec<(u64, Superblock1)>, EngineError> {
    let (found, originals) = superblocks_of(&devices.iter().map(|d| (d.clone(), probe(d.as_ref()))).collect::<Vec<_>>())?;
    if originals.iter().any(Option::is_some) {
        // 0.90 has no data offset to move: every reshape starts with a critical section
        // that only md's backup (file, or the new members' spare space) makes crash-safe.
        return Err(EngineError::Unsupported(
            "a 0.90 array cannot move its data offset, so it reshapes in place and its start needs a backup file: \
             uraid grow --raid-devices N --backup-file FILE (a grow by members; mdadm --grow --backup-file=FILE for \
             other changes)"
                .into(),
        ));
    }
    Ok(found)
}

/// The real superblock of each 0.90 member, and where it sits.
type Originals090 = Vec<Option<(u64, Superblock090)>>;

/// [`read_superblocks`] of devices already probed; 0.90 superblocks as their v1 view
/// ([`Superblock090::v1_view`], placed where a 1.0 superblock would sit, inside the 64 KiB
/// that 0.90 reserves at the end), with the 0.90 superblock itself beside.
fn superblocks_of(probed: &[crate::scan::Probed]) -> Result<(Vec<(u64, Superblock1)>, Originals090), EngineError> {
    let mut found: Vec<(u64, Superblock1)> = Vec::with_capacity(probed.len());
    let mut originals: Originals090 = Vec::with_capacity(probed.len());
    for (dev, p) in probed {
        match p.best().cloned() {
            Some((loc, Superblock::V1(sb))) => {
                found.push((loc.offset_bytes, sb));
                originals.push(None);
            }
            Some((loc, Superblock::V090(sb))) => {
                let Some(at) = uraid_core::metadata::sb10_offset_sectors(dev.size_bytes()) else {
                    return Err(EngineError::NoSuperblock { device: dev.label().to_string(), detail: "too small".into() });
                };
                found.push((at * SECTOR_BYTES, sb.v1_view(at)));
                originals.push(Some((loc.offset_bytes, sb)));
            }
            None => return Err(EngineError::NoSuperblock { device: dev.label().to_string(), detail: String::new() }),
        }
    }
    if let Some((_, first)) = found.first() {
        if let Some(i) = found.iter().position(|(_, sb)| sb.set_uuid != first.set_uuid) {
            return Err(EngineError::Refused(format!(
                "{} belongs to another array than {}: give the members of one array",
                probed[i].0.label(),
                probed[0].0.label()
            )));
        }
    }
    Ok((found, originals))
}

/// `newest`'s array-wide fields with `own`'s per-device ones.
fn adopt_array_state(newest: &Superblock1, own: &Superblock1) -> Superblock1 {
    let mut sb = newest.clone();
    sb.dev_number = own.dev_number;
    sb.device_uuid = own.device_uuid;
    sb.data_offset_sectors = own.data_offset_sectors;
    sb.data_size_sectors = own.data_size_sectors;
    sb.super_offset_sectors = own.super_offset_sectors;
    sb.recovery_offset_raw = own.recovery_offset_raw;
    sb.devflags = own.devflags;
    sb.cnt_corrected_read = own.cnt_corrected_read;
    sb.bblog_shift = own.bblog_shift;
    sb.bblog_size_sectors = own.bblog_size_sectors;
    sb.bblog_offset_sectors = own.bblog_offset_sectors;
    sb.feature_map.0 = (newest.feature_map.0 & !(FeatureMap::BAD_BLOCKS | FeatureMap::RECOVERY_OFFSET))
        | (own.feature_map.0 & (FeatureMap::BAD_BLOCKS | FeatureMap::RECOVERY_OFFSET));
    sb.sb_csum = sb.compute_checksum();
    sb
}

/// The write-intent bitmap of each device (`None` without one): where its superblock sits
/// and what it says. A declared bitmap that cannot be read is an error, never dropped.
fn bitmaps_of(devices: &[Arc<dyn Member>], found: &[(u64, Superblock1)], originals: &Originals090) -> Result<Bitmaps, EngineError> {
    devices
        .iter()
        .zip(found)
        .zip(originals)
        .map(|((dev, (at, sb)), original)| {
            let (sb, at) = match original {
                Some((at, sb090)) => (Superblock::V090(sb090.clone()), *at),
                None => (Superblock::V1(sb.clone()), *at),
            };
            let loaded =
                crate::array::bitmap::load(dev.as_ref(), &sb, at).map_err(|why| EngineError::Refused(format!("{}: {why}", dev.label())))?;
            Ok(loaded.map(|(state, _)| (at.saturating_add_signed(state.rel_offset), state.sb)))
        })
        .collect()
}

type Bitmaps = Vec<Option<(u64, BitmapSuperblock)>>;

/// md's bitmap counts member sectors for RAID4/5/6, which a reshape keeps; for RAID10 it
/// counts array sectors, which a chunk change or a near <-> offset switch keeps (the same
/// members hold the same array) but a change of members does not: md resizes the bitmap
/// then (`raid10_start_reshape` -> `md_bitmap_resize`), its chunk doubled until the bits
/// fit the sectors the bitmap takes now. uraid resizes it the same way when it opens the
/// reshape, to the larger shape's range (the bits must cover both shapes' sectors while
/// both are in use, and a bitmap that already covers it is left as it is: a restart
/// resizes nothing again), and cuts the range to the new shape's at the end.
fn resized_for_raid10_members(bitmaps: Bitmaps, found: &[(u64, Superblock1)], originals: &Originals090, sync_sectors: u64) -> Bitmaps {
    bitmaps
        .into_iter()
        .zip(found.iter().zip(originals))
        .map(|(bitmap, ((sb_at, sb), original))| {
            bitmap.map(|(at, bsb)| {
                let version = if original.is_some() { uraid_core::metadata::MetadataVersion::V0_90 } else { sb.version() };
                let offset_sectors = (at as i64 - *sb_at as i64) / SECTOR_BYTES as i64;
                let space = uraid_core::metadata::md_bitmap_space_sectors(version, offset_sectors, &bsb);
                let sync = sync_sectors.max(bsb.sync_size_sectors);
                (at, if sync == bsb.sync_size_sectors { bsb } else { bsb.resized(sync, space) })
            })
        })
        .collect()
}

/// Whether a reshape changes the members of a RAID10 (whose bitmap counts array sectors).
fn changes_raid10_members(state: &ReshapeState) -> bool {
    state.old.level == 10 && state.new.level == 10 && state.old.raid_disks != state.new.raid_disks
}

/// Records the start of `plan` in the superblock of every device (`found`: each one's v1
/// view; `originals`: its 0.90 superblock, written as md's `super_90_sync` writes it),
/// with the roles of `newest` and the next event count.
///
/// Spares taking a role first, each flushed before the next device: a crash part-way must
/// never leave the newest superblocks naming a member for a role whose device still calls
/// itself a spare (assembly would leave it out).
fn record_start(
    devices: &[Arc<dyn Member>],
    found: &[(u64, Superblock1)],
    originals: &Originals090,
    newest: &Superblock1,
    plan: &uraid_core::metadata::grow::GrowPlan,
    now: u64,
) -> Result<(), EngineError> {
    // A 0.90 descriptor lists each device here, in sync unless the reshape writes its role.
    let present: Vec<(u32, bool)> =
        found.iter().map(|(_, sb)| (sb.dev_number, !plan.rebuilt_by_reshape.contains(&sb.dev_number))).collect();
    let mut order: Vec<usize> = (0..devices.len()).collect();
    order.sort_by_key(|&i| !plan.new_roles.iter().any(|(dev, _)| *dev == found[i].1.dev_number));
    let mut errors = Vec::new();
    for i in order {
        let (dev, (at, own)) = (&devices[i], &found[i]);
        let mut sb = own.clone();
        sb.dev_roles = newest.dev_roles.clone();
        plan.apply(&mut sb);
        sb.events = newest.events + 1;
        sb.utime = uraid_core::metadata::sb1::MdTime::from_parts(now, 0);
        sb.sb_csum = sb.compute_checksum();
        let (bytes, at) = match &originals[i] {
            Some((at, original)) => (original.synced_from_v1(&sb, &present).encode().to_vec(), *at),
            None => (superblock_bytes_of(&Superblock::V1(sb)), *at),
        };
        if let Err(e) = dev.write_at(&bytes, at).and_then(|_| dev.flush()) {
            errors.push(format!("{}: {e}", dev.label()));
        }
    }
    if !errors.is_empty() {
        return Err(crate::Fault::ReshapeRecord { what: "start", detail: errors.join("; ") }.into());
    }
    Ok(())
}

impl ReshapingArray {
    /// Starts reshape `req` on the array whose members and spares are `devices`: checks
    /// it as md would, records the start in every superblock (md's fields, so md can take
    /// over from here), and opens it. Nothing is written when it is refused.
    pub fn start(devices: Vec<Arc<dyn Member>>, opts: &ArrayOptions, req: &GrowRequest) -> Result<ReshapingArray, EngineError> {
        // A degraded array reshapes as md reshapes it (a spare takes a missing role first,
        // written by the reshape as it goes); assembling it degraded still takes --run.
        let found = read_superblocks(&devices)?;
        let mut newest = found.iter().max_by_key(|(_, sb)| sb.events).map(|(_, sb)| sb.clone()).expect("read");
        // Roles of devices not here (or stale) are empty, as md's slots are: recorded faulty
        // from the first update on (md's `super_1_sync`), and free for a spare.
        let present: Vec<u32> = found.iter().filter(|(_, sb)| sb.events + 1 >= newest.events).map(|(_, sb)| sb.dev_number).collect();
        for (n, role) in newest.dev_roles.iter_mut().enumerate() {
            if *role < 0xff00 && !present.contains(&(n as u32)) {
                *role = 0xfffe;
            }
        }
        // A degraded array reshapes degraded, as md allows (`raid5_start_reshape` counts
        // what is missing against what the level survives). A shrink leaves the member it
        // removes a spare at the end, which then rebuilds the missing role (md's
        // `raid5_finish_reshape` and `remove_and_add_spares`; uraid at the next assembly
        // that runs jobs). A RAID10 is grown whole, for now.
        let shrinks = req.raid_disks.is_some_and(|n| n < newest.raid_disks);
        let may_miss = if newest.level == 10 { super::MayMiss::Nothing } else { super::MayMiss::Any };
        let what = if shrinks { "removing members" } else { "reshaping" };
        let spares = super::spares_of_a_changeable_array_missing(&devices, opts, what, may_miss)?;
        let bitmaps = bitmaps_of(&devices, &found, &vec![None; found.len()])?;
        // A bitmap between the superblock and the data is room the data cannot move into.
        let room = found
            .iter()
            .zip(&bitmaps)
            .map(|((at, sb), bitmap)| {
                let end = bitmap.as_ref().filter(|(b, _)| b > at).map(|(b, bsb)| (b + 256 + bsb.bits_len_bytes()).div_ceil(SECTOR_BYTES));
                Room::of(sb, end)
            })
            .reduce(Room::min)
            .expect("assembled");
        let plan = plan_grow(&newest, req, &spares, room).map_err(|e| EngineError::Invalid(e.to_string()))?;
        record_start(&devices, &found, &vec![None; found.len()], &newest, &plan, crate::array::now_seconds())?;
        ReshapingArray::open(devices, opts)
    }

    /// Starts a grow by members of the 0.90 array on `devices` (members and spares) in place,
    /// as mdadm does with `--backup-file` (0.90 has no data offset to move): the critical
    /// section (the stretch whose new stripes overwrite old ones not yet read) is saved in
    /// `backup` in mdadm's format and the start is recorded (0.91 superblocks, position 0).
    /// [`ReshapingArray::open_with_backup`] then writes the section back in the new shape
    /// and records the position past it, as it does after a crash anywhere in between
    /// (`mdadm --assemble --backup-file` too). Nothing is written when it is refused.
    pub fn start_in_place(
        devices: &[Arc<dyn Member>],
        opts: &ArrayOptions,
        req: &GrowRequest,
        backup: &ReshapeBackup,
    ) -> Result<(), EngineError> {
        let probed: Vec<_> = devices.iter().map(|d| (d.clone(), probe(d.as_ref()))).collect();
        let (found, originals) = superblocks_of(&probed)?;
        if originals.iter().any(Option::is_none) {
            return Err(EngineError::Unsupported(
                "a backup file is for reshapes of 0.90 arrays, which cannot move their data offset; a 1.x array reshapes by \
                 moving its data offset, without one"
                    .into(),
            ));
        }
        if originals.iter().flatten().any(|(_, sb)| sb.has_bitmap()) {
            return Err(EngineError::Unsupported(
                "md does not grow a 0.90 array with a write-intent bitmap (mdadm's SET_ARRAY_INFO is refused while it has \
                 one): remove the bitmap first (mdadm --grow --bitmap=none)"
                    .into(),
            ));
        }
        let newest = found.iter().max_by_key(|(_, sb)| sb.events).map(|(_, sb)| sb.clone()).expect("read");
        // (Clean, whole, every device part of it: checked by assembling it.)
        let spares = super::spares_of_a_changeable_array(devices, opts, "reshaping")?;
        let (plan, critical) =
            uraid_core::metadata::grow::plan_grow_in_place(&newest, req, &spares).map_err(|e| EngineError::Invalid(e.to_string()))?;
        // The section's content, read through the array as it stands.
        let data = {
            let (array, _) = Array::assemble(devices.to_vec(), &ArrayOptions { writable: false, ..*opts })?;
            if critical * SECTOR_BYTES > array.size_bytes() {
                return Err(EngineError::Invalid(format!(
                    "the array ({} bytes) is smaller than the grow's critical section ({} sectors)",
                    array.size_bytes(),
                    critical
                )));
            }
            let mut data = vec![0u8; (critical * SECTOR_BYTES) as usize];
            array.read(0, &mut data)?;
            data
        };
        let now = crate::array::now_seconds();
        let uuid = originals.iter().flatten().next().map(|(_, sb)| sb.mdadm_uuid_bytes()).expect("0.90 members");
        backup.save(uuid, 0, &data, now)?;
        record_start(devices, &found, &originals, &newest, &plan, now)
    }

    /// Opens the reshape recorded on `devices`. Writable (`opts.writable`), it can continue
    /// the reshape and take writes; read-only, it never writes.
    pub fn open(devices: Vec<Arc<dyn Member>>, opts: &ArrayOptions) -> Result<ReshapingArray, EngineError> {
        ReshapingArray::open_with_backup(devices, opts, None)
    }

    /// [`ReshapingArray::open`] with the reshape's backup (mdadm's format): a reshape in
    /// place stopped inside the stretch the backup holds gets it written back in the new
    /// shape and its position moved past it (mdadm's `Grow_restart`), before anything else.
    pub fn open_with_backup(
        devices: Vec<Arc<dyn Member>>,
        opts: &ArrayOptions,
        backup: Option<&ReshapeBackup>,
    ) -> Result<ReshapingArray, EngineError> {
        // A device failing to read its superblock is missing, as for any assembly.
        let (probed, _unreadable) = crate::scan::probe_leaving_out_unreadable(devices);
        let (found, originals) = superblocks_of(&probed)?;
        let devices: Vec<Arc<dyn Member>> = probed.into_iter().map(|(d, _)| d).collect();
        let newest_events = found.iter().map(|(_, sb)| sb.events).max().ok_or_else(|| EngineError::Refused("no devices given".into()))?;
        // Devices behind the newest (by more than md's one-event margin: a crash between
        // two members' superblock writes) are left out of the reshape, as assembly would.
        let current: Vec<usize> = (0..found.len()).filter(|&i| found[i].1.events + 1 >= newest_events).collect();
        let newest = found.iter().max_by_key(|(_, sb)| sb.events).map(|(_, sb)| sb.clone()).expect("not empty");
        let state = ReshapeState::from_superblock(&newest).map_err(|e| EngineError::Unsupported(e.to_string()))?;
        // The array's state comes from the newest superblock, as md takes it: a device one
        // event behind (a crash between two members' updates) may still record the shape
        // before the reshape started, or an older position.
        // Each device's own record of the position: a member rebuilt by the reshape has
        // its own recovery_offset from the same update (a crash between two members'
        // updates leaves it one checkpoint behind, its data not).
        let own_positions: Vec<u64> = found.iter().map(|(_, sb)| sb.reshape_position_sectors).collect();
        let found: Vec<(u64, Superblock1)> = found.into_iter().map(|(at, own)| (at, adopt_array_state(&newest, &own))).collect();
        // Only a writable array writes the bitmap; a reader leaves it alone.
        let bitmaps = if opts.writable { bitmaps_of(&devices, &found, &originals)? } else { vec![None; found.len()] };
        // Members in a role the old shape lacks, written by the reshape as it goes (md's
        // `recovery_offset` following the position: a RAID0 grown through RAID4, or a spare
        // given to a degraded array's missing role): the old shape is missing that role, the
        // new one has it below the position, which is all of the new shape in use.
        let new_data_disks =
            u64::from(state.new.raid_disks.saturating_sub(uraid_core::metadata::grow::parity_disks(state.new.level).unwrap_or(0)).max(1));
        let mut rebuilt_by_reshape: Vec<u32> = Vec::new();
        for &i in &current {
            let sb = &found[i].1;
            let role = sb.dev_roles.get(sb.dev_number as usize).copied().unwrap_or(0xffff);
            if let (Some(offset), true) = (sb.recovery_offset(), u32::from(role) < state.old.raid_disks.min(0xff00)) {
                let own = own_positions[i];
                let follows = own != MAX_SECTOR && offset >= own / new_data_disks;
                // (md's raid10 rebuilds a member after a reshape, never with it.)
                if state.backwards || !follows || state.new.level == 10 {
                    return Err(EngineError::Unsupported(format!(
                        "{}: rebuilding in role {role} behind the reshape (at {offset} of {} sectors): uraid continues only a \
                         reshape whose rebuilding members follow it; finish it with mdadm",
                        devices[i].label(),
                        own / new_data_disks
                    )));
                }
                rebuilt_by_reshape.push(sb.dev_number);
            }
        }
        let side = |side: Side| -> Result<Array, EngineError> {
            let members: Vec<Arc<dyn Member>> = current
                .iter()
                .map(|&i| {
                    let (at, sb) = &found[i];
                    let dev = &devices[i];
                    let mut own = state.side_superblock(sb, side, dev.size_bytes() / SECTOR_BYTES);
                    for &n in &rebuilt_by_reshape {
                        if side == Side::Old {
                            // Not a member of the old shape: recorded failed there, so
                            // nothing reads it or rebuilds onto it.
                            if let Some(r) = own.dev_roles.get_mut(n as usize) {
                                *r = 0xfffe;
                            }
                        } else if n == own.dev_number {
                            own.feature_map.0 &= !FeatureMap::RECOVERY_OFFSET;
                            own.recovery_offset_raw = 0;
                        }
                    }
                    own.events = newest_events;
                    // The sides never write a bad-block log: two sides would overwrite each
                    // other's. A reshape with listed ranges is refused below.
                    own.feature_map.0 &= !FeatureMap::BAD_BLOCKS;
                    own.bblog_size_sectors = 0;
                    own.bblog_offset_sectors = 0;
                    // Nor a bitmap: the real one is this type's (`Slot::bitmap`).
                    own.feature_map.0 &= !FeatureMap::BITMAP_OFFSET;
                    own.bitmap_offset_raw = 0;
                    own.sb_csum = own.compute_checksum();
                    Arc::new(SideMember::new(dev.clone(), *at, superblock_bytes_of(&Superblock::V1(own)), opts.writable)) as Arc<dyn Member>
                })
                .collect();
            Array::assemble(members, opts).map(|(a, _)| a)
        };
        let old = side(Side::Old)?;
        let new = Arc::new(side(Side::New)?);
        let bitmaps = if changes_raid10_members(&state) {
            let sync_sectors = old.size_bytes().max(new.size_bytes()) / SECTOR_BYTES;
            resized_for_raid10_members(bitmaps, &found, &originals, sync_sectors)
        } else {
            bitmaps
        };
        if opts.writable {
            for &i in &current {
                let (_, sb) = &found[i];
                if sb.feature_map.contains(FeatureMap::BAD_BLOCKS) {
                    let (at, sb) = &found[i];
                    let log = crate::bad_blocks::BadBlockLog::load(devices[i].as_ref(), &Superblock::V1(sb.clone()), *at)
                        .map_err(|why| EngineError::Refused(format!("{}: {why}", devices[i].label())))?;
                    if !log.ranges().is_empty() {
                        return Err(EngineError::Unsupported(format!(
                            "{}: its bad-block log lists ranges; replace the member (or clear them) before reshaping",
                            devices[i].label()
                        )));
                    }
                }
            }
        }
        let data_offset = newest.data_offset_sectors;
        let new_offset = (data_offset as i64 + state.new_offset_sectors).max(0) as u64;
        let (Some(old_shape), Some(new_shape)) = (striped_shape(&old, data_offset), striped_shape(&new, new_offset)) else {
            return Err(EngineError::Unsupported(format!(
                "uraid continues reshapes of striped arrays (RAID0/4/5/6, RAID10 near); this one goes from {} to {}",
                old.level(),
                new.level()
            )));
        };
        let planner = WindowPlanner {
            old: old_shape,
            new: new_shape,
            backwards: state.backwards,
            max_window_sectors: DEFAULT_WINDOW_BYTES / SECTOR_BYTES,
        };
        let position =
            if newest.reshape_position_sectors == MAX_SECTOR { planner.start_position() } else { newest.reshape_position_sectors };
        // md keeps the array's size through a reshape (a grow shows its new size at the
        // end; a shrink was cut to its new size before it began): the smaller side's.
        let size_bytes = old.size_bytes().min(new.size_bytes());
        let slots = current
            .iter()
            .map(|&i| Slot {
                member: devices[i].clone(),
                at: found[i].0,
                sb: found[i].1.clone(),
                sb090: originals[i].clone(),
                bitmap: bitmaps[i].clone(),
                failed: false,
            })
            .collect();
        let array = ReshapingArray {
            old,
            new,
            slots: Mutex::new(slots),
            superblock_writes: Mutex::new(newest_events),
            opened_clean: newest.resync_offset_sectors == MAX_SECTOR,
            state,
            planner,
            size_bytes: AtomicU64::new(size_bytes),
            writable: opts.writable,
            progress: Mutex::new(Progress {
                position,
                checkpoint: position,
                moving: None,
                in_flight: Vec::new(),
                marked_active: false,
                finished: false,
            }),
            progress_changed: Condvar::new(),
            user_requests: AtomicU64::new(0),
            rebuilt_by_reshape,
            piece_buffers: Mutex::new(Vec::new()),
        };
        if let (Some(backup), true) = (backup, opts.writable) {
            array.restore_critical_section(backup)?;
        }
        if opts.writable && array.state.new_offset_sectors == 0 {
            // A reshape in place (0.90 always, 1.x where md could not move the data offset)
            // needs a backup wherever the new shape would overwrite old data not yet moved:
            // refused before anything is written, rather than stopped there. Only in place:
            // a data offset move is planned (by mdadm, the kernel's check, or `plan_grow`)
            // so that every window has room, and the walk costs a pass over the whole plan
            // on every open.
            let position = array.lock_progress().position;
            array.planner.check_to_end(position).map_err(|e| match e {
                uraid_core::reshape_window::WindowError::NoRoom { first, end } => EngineError::Unsupported(format!(
                    "this reshape cannot go on without its backup file: moving array sectors {first}..{end} would overwrite \
                     data not yet moved; give the backup it was started with (uraid grow --continue --backup-file FILE, or \
                     mdadm --assemble --backup-file=FILE ...), or read it read-only"
                )),
                other => EngineError::Unsupported(other.to_string()),
            })?;
        }
        Ok(array)
    }

    /// Writes the backed-up stretch back in the new shape and records the position at its
    /// end, if the reshape stopped inside it (mdadm's `Grow_restart`, with its checks: the
    /// same array, a backup from the time of the superblocks, not yet forgotten); then
    /// forgets the backup (mdadm's `forget_backup`), so that no later restore writes old
    /// data over the writes that follow.
    fn restore_critical_section(&self, backup: &ReshapeBackup) -> Result<(), EngineError> {
        let (sb, data) = backup.load()?;
        let (uuid, utime) = {
            let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            let first = slots.first().ok_or_else(|| EngineError::Refused("no members".into()))?;
            // The uuid as mdadm writes it into a backup: 0.90's words little-endian.
            let uuid = first.sb090.as_ref().map_or(first.sb.set_uuid, |(_, sb)| sb.mdadm_uuid_bytes());
            (uuid, first.sb.utime.seconds())
        };
        if sb.set_uuid != uuid {
            return Err(EngineError::Refused(format!("{}: the backup is of another array", backup.label())));
        }
        let position = self.lock_progress().position;
        if !sb.needed_by_grow_at(position) {
            return Ok(());
        }
        let forward_grow = !self.state.backwards && self.state.new.raid_disks > self.state.old.raid_disks;
        let stretch_end = sb.arraystart + sb.length;
        let new_stripe = self.planner.new.data_disks * self.planner.new.chunk_sectors;
        if !forward_grow || sb.arraystart != 0 || !stretch_end.is_multiple_of(new_stripe.max(1)) {
            return Err(EngineError::Unsupported(format!(
                "{}: a backup of array sectors {}..{stretch_end}: uraid restores the critical section of a grow (from the \
                 array's start, whole new stripes); restore this one with mdadm --assemble --backup-file",
                backup.label(),
                sb.arraystart
            )));
        }
        if !sb.fresh_for(utime) {
            return Err(EngineError::Refused(format!(
                "{}: the backup was written at {} s, the superblocks at {utime} s: not the backup of this reshape (mdadm \
                 trusts one from 10 min before to 2 h after them)",
                backup.label(),
                sb.mtime
            )));
        }
        // The new rows of the stretch lie below its old rows (more data members), so
        // writing them overwrites only old data the backup holds.
        self.mark_active()?;
        self.new.write(sb.arraystart * SECTOR_BYTES, &data)?;
        self.lock_progress().position = stretch_end;
        self.checkpoint()?;
        backup.forget(&sb, crate::array::now_seconds())
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes.load(Ordering::Acquire)
    }

    pub fn state(&self) -> &ReshapeState {
        &self.state
    }

    /// Where the shapes meet now (array sectors).
    pub fn position_sectors(&self) -> u64 {
        self.lock_progress().position
    }

    /// The array sectors the reshape covers (the new shape's size).
    pub fn total_sectors(&self) -> u64 {
        self.planner.end_sectors()
    }

    /// Array sectors moved so far.
    pub fn moved_sectors(&self) -> u64 {
        let p = self.position_sectors();
        if self.planner.backwards {
            self.total_sectors() - p
        } else {
            p
        }
    }

    pub fn is_finished(&self) -> bool {
        self.lock_progress().finished
    }

    /// The side of the reshape that will be the array once it is done.
    pub fn new_side(&self) -> &Arc<Array> {
        &self.new
    }

    /// User requests begun (for the reshape's pacing, as [`Array::foreground_requests`];
    /// the sides' own counters also count the reshape's copying).
    pub fn foreground_requests(&self) -> u64 {
        self.user_requests.load(Ordering::Relaxed)
    }

    fn lock_progress(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, Progress>) -> MutexGuard<'a, Progress> {
        self.progress_changed.wait(guard).unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until the window being moved leaves `range` alone, then records `range` as a
    /// request in progress; the guard ends it.
    fn enter(&self, range: (u64, u64)) -> InFlight<'_> {
        self.user_requests.fetch_add(1, Ordering::Relaxed);
        let mut p = self.lock_progress();
        while p.moving.is_some_and(|m| m.0 < range.1 && range.0 < m.1) {
            p = self.wait(p);
        }
        p.in_flight.push(range);
        InFlight { array: self, range, position: p.position, checkpoint: p.checkpoint }
    }

    fn side(&self, side: Side) -> &Array {
        match side {
            Side::Old => &self.old,
            Side::New => self.new.as_ref(),
        }
    }

    /// Splits byte range `offset..offset+len` at the position `pos` (sectors): the part
    /// before it and the part from it, each with the side holding it.
    fn split(&self, offset: u64, len: u64, pos: u64) -> [(u64, u64, Side); 2] {
        let split = pos.saturating_mul(SECTOR_BYTES).clamp(offset, offset + len);
        let (below, above) = if self.planner.backwards { (Side::Old, Side::New) } else { (Side::New, Side::Old) };
        [(offset, split - offset, below), (split, offset + len - split, above)]
    }

    fn check_range(&self, offset: u64, len: u64) -> Result<(u64, u64), EngineError> {
        let size = self.size_bytes();
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(EngineError::OutOfRange { offset, len: len as usize, size });
        }
        Ok((offset / SECTOR_BYTES, (offset + len).div_ceil(SECTOR_BYTES)))
    }

    /// Reads `buf.len()` bytes at array byte `offset`, each part from the side holding it.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), EngineError> {
        let range = self.check_range(offset, buf.len() as u64)?;
        let request = self.enter(range);
        let mut rest = &mut buf[..];
        for (at, len, side) in self.split(offset, rest.len() as u64, request.position) {
            let (part, tail) = rest.split_at_mut(len as usize);
            if !part.is_empty() {
                self.side(side).read(at, part)?;
            }
            rest = tail;
        }
        Ok(())
    }

    /// Writes `data` at array byte `offset`, each part to the side holding it.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), EngineError> {
        if !self.writable {
            return Err(EngineError::ReadOnly);
        }
        let range = self.check_range(offset, data.len() as u64)?;
        let request = self.enter(range);
        self.mark_active()?;
        let (moved_lo, moved_hi) =
            if self.planner.backwards { (request.position, request.checkpoint) } else { (request.checkpoint, request.position) };
        if range.0 < moved_hi && moved_lo < range.1 {
            // Moved, but a restart would read the old copy: record the move first.
            self.checkpoint()?;
        }
        let mut rest = data;
        for (at, len, side) in self.split(offset, rest.len() as u64, request.position) {
            let (part, tail) = rest.split_at(len as usize);
            if !part.is_empty() {
                self.side(side).write(at, part)?;
            }
            rest = tail;
        }
        self.propagate_failures()
    }

    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Writes zeros over `len` bytes at `offset`, a piece at a time.
    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), EngineError> {
        const PIECE: u64 = 1 << 20;
        let zeros = vec![0u8; PIECE.min(len) as usize];
        let mut at = offset;
        while at < offset + len {
            let n = PIECE.min(offset + len - at);
            self.write(at, &zeros[..n as usize])?;
            at += n;
        }
        Ok(())
    }

    /// A discard while reshaping writes zeros: the two shapes cannot free space in step.
    pub fn discard(&self, offset: u64, len: u64) -> Result<(), EngineError> {
        self.write_zeroes(offset, len)
    }

    /// The devices the reshape runs on (not the failed ones), as given.
    pub fn device_handles(&self) -> Vec<Arc<dyn Member>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|s| !s.failed).map(|s| s.member.clone()).collect()
    }

    /// Makes every acknowledged write durable.
    pub fn flush(&self) -> Result<(), EngineError> {
        self.old.flush()?;
        self.new.flush()
    }

    /// Writes every live member's superblock, changed by `change`, with the next event
    /// count; then flushes them all. Callers hold `superblock_writes`.
    ///
    /// A member whose superblock write or flush fails is failed (on both shapes) and the
    /// update is written again without it, as md does (`md_super_write`'s error fails the
    /// device, `md_update_sb` repeats): the reshape goes on degraded while the shapes can.
    fn write_superblocks(&self, events: &mut u64, change: impl Fn(&mut Superblock1)) -> Result<(), EngineError> {
        // Each attempt starts from the superblocks as they were: `change` need not be
        // idempotent (the finish rewrites them whole).
        let before: Vec<Superblock1> = self.slots.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|s| s.sb.clone()).collect();
        loop {
            *events += 1;
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            // Whatever a side failed so far is recorded with it: a checkpoint must never
            // record as moved a window written without a member unless that member is
            // recorded failed too (after a crash it would be read as in sync).
            self.note_side_failures(&mut slots);
            let failed: Vec<u32> = slots.iter().filter(|s| s.failed).map(|s| s.sb.dev_number).collect();
            let present: Vec<u32> = slots.iter().filter(|s| !s.failed).map(|s| s.sb.dev_number).collect();
            let now = crate::array::now_seconds();
            let mut dead = Vec::new();
            for (slot, before) in slots.iter_mut().zip(&before).filter(|(s, _)| !s.failed) {
                slot.sb = before.clone();
                change(&mut slot.sb);
                for n in &failed {
                    if let Some(role) = slot.sb.dev_roles.get_mut(*n as usize) {
                        *role = 0xfffe;
                    }
                }
                // Members not here (missing at open, or stale) are faulty from now on, as
                // md's `super_1_sync` writes every role not held by a present device.
                for (n, role) in slot.sb.dev_roles.iter_mut().enumerate() {
                    if *role < 0xff00 && !present.contains(&(n as u32)) {
                        *role = 0xfffe;
                    }
                }
                slot.sb.events = *events;
                slot.sb.utime = uraid_core::metadata::sb1::MdTime::from_parts(now, 0);
                slot.sb.sb_csum = slot.sb.compute_checksum();
            }
            // A 0.90 member's descriptors list every device here, each in sync unless the
            // reshape is still writing its role.
            let present_090: Vec<(u32, bool)> = slots
                .iter()
                .filter(|s| !s.failed)
                .map(|s| (s.sb.dev_number, !s.sb.feature_map.contains(FeatureMap::RECOVERY_OFFSET)))
                .collect();
            for slot in slots.iter_mut().filter(|s| !s.failed) {
                let (bytes, at) = match &slot.sb090 {
                    Some((at, original)) => (original.synced_from_v1(&slot.sb, &present_090).encode().to_vec(), *at),
                    None => (superblock_bytes_of(&Superblock::V1(slot.sb.clone())), slot.at),
                };
                if let Err(e) = slot.member.write_at(&bytes, at) {
                    dead.push((slot.sb.dev_number, format!("{}: superblock write: {e}", slot.member.label())));
                }
                // The bitmap follows the superblock's events (md calls an older one stale and
                // resyncs everything) and its state: every bit dirty while writes may be in
                // flight (a crash resyncs everything, as without a bitmap), all clear once
                // clean (md's `events_cleared` then moves up, so no member that left before
                // is re-added from it).
                if let Some((at, bsb)) = &mut slot.bitmap {
                    bsb.events = slot.sb.events;
                    let bits = if slot.sb.resync_offset_sectors == MAX_SECTOR {
                        bsb.events_cleared = slot.sb.events;
                        WriteIntentBits::all_clean(bsb)
                    } else {
                        WriteIntentBits::all_dirty(bsb)
                    };
                    let mut bytes = bsb.encode().to_vec();
                    bytes.extend_from_slice(bits.encode());
                    if let Err(e) = slot.member.write_at(&bytes, *at) {
                        dead.push((slot.sb.dev_number, format!("{}: bitmap write: {e}", slot.member.label())));
                    }
                }
            }
            let written: Vec<&Slot> = slots.iter().filter(|s| !s.failed && !dead.iter().any(|(n, _)| *n == s.sb.dev_number)).collect();
            for slot in written {
                if let Err(e) = slot.member.flush() {
                    dead.push((slot.sb.dev_number, format!("{}: flush: {e}", slot.member.label())));
                }
            }
            if dead.is_empty() {
                return Ok(());
            }
            for slot in slots.iter_mut().filter(|s| dead.iter().any(|(n, _)| *n == s.sb.dev_number)) {
                slot.failed = true;
            }
            let left = slots.iter().filter(|s| !s.failed).count();
            drop(slots);
            let why: Vec<String> = dead.into_iter().map(|(_, why)| why).collect();
            self.fail_on_both_sides()?;
            if left == 0 || self.old.failure().is_some() || self.new.failure().is_some() {
                return Err(crate::Fault::ReshapeRecord { what: "progress", detail: why.join("; ") }.into());
            }
        }
    }

    /// Records the current position in the superblocks, after every write so far is
    /// durable (md: `reshape_position` is written only once what lies below it is safe).
    pub fn checkpoint(&self) -> Result<(), EngineError> {
        let mut events = self.superblock_writes.lock().unwrap_or_else(|p| p.into_inner());
        let position = {
            let p = self.lock_progress();
            if p.position == p.checkpoint || p.finished {
                return Ok(());
            }
            p.position
        };
        self.flush()?;
        let rebuilt_to = position / self.planner.new.data_disks.max(1);
        self.write_superblocks(&mut events, |sb| {
            sb.reshape_position_sectors = position;
            // (Only forwards: `open` refuses rebuilding members in a backward reshape.)
            if self.rebuilt_by_reshape.contains(&sb.dev_number) {
                sb.recovery_offset_raw = sb.recovery_offset_raw.max(rebuilt_to);
            }
        })?;
        // Only moved here, under `superblock_writes`: it follows the position.
        self.lock_progress().checkpoint = position;
        Ok(())
    }

    /// Before the first write: the superblocks say "active", so a crash resyncs.
    fn mark_active(&self) -> Result<(), EngineError> {
        if self.lock_progress().marked_active {
            return Ok(());
        }
        let mut events = self.superblock_writes.lock().unwrap_or_else(|p| p.into_inner());
        if self.lock_progress().marked_active {
            return Ok(());
        }
        self.write_superblocks(&mut events, |sb| sb.resync_offset_sectors = 0)?;
        self.lock_progress().marked_active = true;
        Ok(())
    }

    /// Moves the next windows (up to [`DEFAULT_WINDOW_BYTES`] in all), or finishes the
    /// reshape when everything is moved. Returns the span moved.
    pub fn step(&self) -> Result<ReshapeStep, EngineError> {
        if !self.writable {
            return Err(EngineError::ReadOnly);
        }
        let windows = {
            let p = self.lock_progress();
            if p.finished {
                return Ok(ReshapeStep::Finished);
            }
            self.plan_batch(p.position, p.checkpoint)?
        };
        let (Some(head), Some(tail)) = (windows.first(), windows.last()) else {
            self.finish()?;
            return Ok(ReshapeStep::Finished);
        };
        let (first, end) = if self.planner.backwards { (tail.first, head.end) } else { (head.first, tail.end) };
        if head.checkpoint_first {
            self.checkpoint()?;
        }
        {
            let mut p = self.lock_progress();
            p.moving = Some((first, end));
            while p.in_flight.iter().any(|r| r.0 < end && first < r.1) {
                p = self.wait(p);
            }
        }
        let moved = self.move_windows(&windows);
        self.lock_progress().moving = None;
        self.progress_changed.notify_all();
        moved?;
        self.propagate_failures()?;
        Ok(ReshapeStep::Moved { first, end })
    }

    /// The windows one step moves: as the planner gives them from `position`, each
    /// checkpoint it asks for taken into account, up to [`DEFAULT_WINDOW_BYTES`] in all
    /// (at least one window).
    fn plan_batch(&self, mut position: u64, mut checkpoint: u64) -> Result<Vec<Window>, EngineError> {
        let mut windows = Vec::new();
        let mut sectors = 0;
        while sectors < DEFAULT_WINDOW_BYTES / SECTOR_BYTES {
            let Some(w) = self.planner.next(position, checkpoint).map_err(|e| EngineError::Unsupported(e.to_string()))? else { break };
            if w.checkpoint_first {
                checkpoint = position;
            }
            position = if self.planner.backwards { w.first } else { w.end };
            sectors += w.end - w.first;
            windows.push(w);
        }
        Ok(windows)
    }

    /// Copies the windows' array sectors from the old shape to the new one, in order of
    /// the reshape. What lies beyond the old shape's end (a grow's new space) is written as
    /// zeros, as md does. The position advances as windows complete; the first window's
    /// checkpoint is the caller's.
    ///
    /// Each window goes in pieces of whole new-shape stripes, moved by one worker per core,
    /// each reading its piece and then writing it, member I/O in line on buffered members
    /// (`parallel::in_line`), in the order md's rules allow (`uraid_core::reshape_order`,
    /// property-tested there under random interleavings of workers). Measured with `uraid bench reshape` (2 cores,
    /// tmpfs): one thread reading then writing each window reached 0.2–0.4 of the members'
    /// bound (0.4–0.5 for a chunk change, whose windows are one stripe each); a reader
    /// thread feeding a writer 0.45–0.55 (the writer, with parity and two thirds of the
    /// bytes, was the one always busy); workers moving whole pieces, across windows, are
    /// what is kept.
    fn move_windows(&self, windows: &[Window]) -> Result<(), EngineError> {
        let stripe = self.planner.new.stripe_sectors().max(1);
        let piece = (PIECE_BYTES / SECTOR_BYTES).div_ceil(stripe) * stripe;
        let old_end = self.old.geometry().array_sectors();
        // (window, first, end) in the order pieces are claimed.
        let pieces: Vec<(usize, u64, u64)> = windows
            .iter()
            .enumerate()
            .flat_map(|(j, w)| (w.first..w.end).step_by(piece as usize).map(move |lo| (j, lo, (lo + piece).min(w.end))))
            .collect();
        let per_window: Vec<usize> = (0..windows.len()).map(|j| pieces.iter().filter(|p| p.0 == j).count()).collect();
        let batch = Mutex::new(Batch { order: StepOrder::new(windows, per_window), error: None });
        let changed = Condvar::new();
        let next = AtomicU64::new(0);
        let read_piece = |lo: u64, hi: u64, buf: &mut Vec<u8>| -> Result<(), EngineError> {
            buf.resize(((hi - lo) * SECTOR_BYTES) as usize, 0);
            let split = old_end.clamp(lo, hi);
            let (from_old, beyond) = buf.split_at_mut(((split - lo) * SECTOR_BYTES) as usize);
            if !from_old.is_empty() {
                self.old.read(lo * SECTOR_BYTES, from_old)?;
            }
            beyond.fill(0);
            Ok(())
        };
        let lock = || batch.lock().unwrap_or_else(|p| p.into_inner());
        // The first error stops every worker (the others see it and leave).
        let fail = |e: EngineError| {
            lock().error.get_or_insert(e);
            changed.notify_all();
        };
        // Waits until window j may be written (false: a worker failed); takes its
        // checkpoint when it is the one to.
        let await_turn = |j: usize| -> bool {
            let mut b = lock();
            loop {
                if b.error.is_some() {
                    return false;
                }
                match b.order.turn(j) {
                    Turn::Write => return true,
                    Turn::Checkpoint => {
                        // Every window before j is written: record their end. It counts
                        // as taken only once on disk, so nothing relying on it is written
                        // meanwhile.
                        b.order.begin_checkpoint();
                        drop(b);
                        let recorded = self.checkpoint();
                        lock().order.end_checkpoint(j, recorded.is_ok());
                        changed.notify_all();
                        return recorded.map_err(fail).is_ok();
                    }
                    Turn::Wait => b = changed.wait(b).unwrap_or_else(|p| p.into_inner()),
                }
            }
        };
        let worker = || {
            let mut buf = self.take_piece_buffer();
            while let Some(&(j, lo, hi)) = pieces.get(next.fetch_add(1, Ordering::AcqRel) as usize) {
                if lock().error.is_some() {
                    break;
                }
                if let Err(e) = crate::parallel::in_line(|| read_piece(lo, hi, &mut buf)) {
                    fail(e);
                    break;
                }
                lock().order.read_done(j);
                changed.notify_all();
                if !await_turn(j) {
                    break;
                }
                if let Err(e) = crate::parallel::in_line(|| self.new.write(lo * SECTOR_BYTES, &buf)) {
                    fail(e);
                    break;
                }
                {
                    let mut b = lock();
                    // Windows written whole, in order: the position follows them.
                    let completed = b.order.written(j);
                    if !completed.is_empty() {
                        let w = windows[completed.end - 1];
                        let mut p = self.lock_progress();
                        p.position = if self.planner.backwards { w.first } else { w.end };
                        // Requests wait for the windows still moving only: the ones written
                        // are served from the new shape (a write there records the position
                        // first, as anywhere moved but not yet recorded).
                        let position = p.position;
                        p.moving = p.moving.map(|(lo, hi)| if self.planner.backwards { (lo, position) } else { (position, hi) });
                        drop(p);
                        self.progress_changed.notify_all();
                    }
                }
                changed.notify_all();
            }
            self.return_piece_buffer(buf);
        };
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, MAX_MOVERS).min(pieces.len());
        std::thread::scope(|scope| {
            for _ in 1..workers {
                scope.spawn(worker);
            }
            worker();
        });
        match batch.into_inner().unwrap_or_else(|p| p.into_inner()).error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn take_piece_buffer(&self) -> Vec<u8> {
        self.piece_buffers.lock().unwrap_or_else(|p| p.into_inner()).pop().unwrap_or_default()
    }

    fn return_piece_buffer(&self, buf: Vec<u8>) {
        let mut kept = self.piece_buffers.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() < MAX_MOVERS {
            kept.push(buf);
        }
    }

    /// Everything is in the new shape: each member gets a plain superblock of it.
    fn finish(&self) -> Result<(), EngineError> {
        // First every member records the reshape as complete (position at the end), so a
        // crash while the final superblocks go out leaves members that either say so or
        // are final: assembly reads the former in the new shape (`Array::assemble`).
        self.checkpoint()?;
        let mut events = self.superblock_writes.lock().unwrap_or_else(|p| p.into_inner());
        self.flush()?;
        if !self.rebuilt_by_reshape.is_empty() {
            // The members the reshape wrote into a role are whole now: recorded in sync
            // before the final superblocks go out. Otherwise a crash between two of those
            // leaves such a member recovering (one event behind) under a newest superblock
            // that no longer tracks it, and a RAID4 without its parity (a RAID0 grow) could
            // not be assembled (the RAID0 grow crash test, event 418 of 451).
            let rebuilt = &self.rebuilt_by_reshape;
            self.write_superblocks(&mut events, |sb| {
                if rebuilt.contains(&sb.dev_number) {
                    sb.feature_map.0 &= !FeatureMap::RECOVERY_OFFSET;
                    sb.recovery_offset_raw = 0;
                }
            })?;
        }
        let resync_offset = if self.opened_clean { MAX_SECTOR } else { 0 };
        let state = self.state.clone();
        let sizes: Vec<(u32, u64)> = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            if changes_raid10_members(&state) {
                // The bitmap's range is the new array's from here on (md: `resync_max_sectors`
                // takes the array's size at the end); its chunk stays as resized.
                let sync_sectors = self.new.size_bytes() / SECTOR_BYTES;
                for (_, bsb) in slots.iter_mut().filter_map(|s| s.bitmap.as_mut()) {
                    bsb.sync_size_sectors = sync_sectors;
                }
            }
            slots.iter().map(|s| (s.sb.dev_number, s.member.size_bytes() / SECTOR_BYTES)).collect()
        };
        self.write_superblocks(&mut events, |sb| {
            let dev_sectors = sizes.iter().find(|(n, _)| *n == sb.dev_number).map_or(0, |(_, s)| *s);
            let marked = sb.resync_offset_sectors;
            *sb = state.final_superblock(sb, dev_sectors);
            // Written whole by the reshape: in sync (md sets recovery_offset to MaxSector
            // at the end, then in sync).
            sb.feature_map.0 &= !FeatureMap::RECOVERY_OFFSET;
            sb.recovery_offset_raw = 0;
            // A reshape begun clean whose writes were marked active: the mark stays
            // until the clean mark at close, as for any array.
            sb.resync_offset_sectors = if marked == 0 { 0 } else { resync_offset };
        })?;
        let mut p = self.lock_progress();
        p.finished = true;
        p.checkpoint = p.position;
        self.size_bytes.store(self.new.size_bytes(), Ordering::Release);
        Ok(())
    }

    /// Runs the reshape to its end (or until `stop` says so, or an error), reporting after
    /// each window.
    pub fn run(&self, stop: &dyn Fn() -> bool, mut report: impl FnMut(ReshapeStep)) -> Result<ReshapeStep, EngineError> {
        loop {
            if stop() {
                self.checkpoint()?;
                return Ok(ReshapeStep::Moved { first: 0, end: 0 });
            }
            let step = self.step()?;
            report(step);
            if step == ReshapeStep::Finished {
                return Ok(step);
            }
        }
    }

    /// Fails member `label` by request (mdadm --fail during a reshape): on both shapes, and
    /// recorded faulty in the superblocks before this returns; the reshape goes on
    /// degraded while the shapes can (as md's does).
    pub fn fail_member(&self, label: &str) -> Result<(), EngineError> {
        if !self.slots.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|s| !s.failed && s.member.label() == label) {
            return Err(EngineError::Invalid(format!("{label} is not a working member of the array")));
        }
        for side in [&self.old, self.new.as_ref()] {
            side.fail_device_by_label(label)?;
        }
        self.propagate_failures()
    }

    /// Members a side failed are failed on the other side too, and recorded faulty in
    /// the superblocks.
    fn propagate_failures(&self) -> Result<(), EngineError> {
        let newly = self.note_side_failures(&mut self.slots.lock().unwrap_or_else(|p| p.into_inner()));
        let other_side_failed = self.fail_on_both_sides()?;
        if newly.is_empty() && !other_side_failed {
            return Ok(());
        }
        let mut events = self.superblock_writes.lock().unwrap_or_else(|p| p.into_inner());
        self.write_superblocks(&mut events, |_| {})
    }

    /// Fails on both shapes every member failed so far (by either side, or by a
    /// superblock update); says whether one was still in use somewhere.
    fn fail_on_both_sides(&self) -> Result<bool, EngineError> {
        let failed: Vec<u32> =
            self.slots.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|s| s.failed).map(|s| s.sb.dev_number).collect();
        let mut changed = false;
        for side in [&self.old, self.new.as_ref()] {
            for d in side.devices() {
                if failed.contains(&d.dev_number) && d.state != DeviceState::Faulty {
                    changed = true;
                    if let DeviceState::InSync(role) = d.state {
                        side.fail_role(role)?;
                    }
                }
            }
        }
        Ok(changed)
    }

    /// Marks failed the slots of members either side has failed; returns their numbers.
    fn note_side_failures(&self, slots: &mut [Slot]) -> Vec<u32> {
        let faulty =
            |a: &Array| -> Vec<u32> { a.devices().into_iter().filter(|d| d.state == DeviceState::Faulty).map(|d| d.dev_number).collect() };
        let mut newly = Vec::new();
        for n in faulty(&self.old).into_iter().chain(faulty(&self.new)) {
            if let Some(slot) = slots.iter_mut().find(|s| s.sb.dev_number == n && !s.failed) {
                slot.failed = true;
                newly.push(n);
            }
        }
        newly
    }

    /// Stops using the array: everything flushed, the position recorded, and the array
    /// marked clean when it was opened clean.
    pub fn close(&self) -> Result<(), EngineError> {
        if !self.writable {
            return Ok(());
        }
        self.flush()?;
        self.checkpoint()?;
        if self.lock_progress().marked_active && self.opened_clean {
            let mut events = self.superblock_writes.lock().unwrap_or_else(|p| p.into_inner());
            self.write_superblocks(&mut events, |sb| sb.resync_offset_sectors = MAX_SECTOR)?;
        }
        Ok(())
    }
}

/// A request in progress (see [`ReshapingArray::enter`]).
struct InFlight<'a> {
    array: &'a ReshapingArray,
    range: (u64, u64),
    position: u64,
    checkpoint: u64,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut p = self.array.lock_progress();
        if let Some(i) = p.in_flight.iter().position(|r| *r == self.range) {
            p.in_flight.swap_remove(i);
        }
        drop(p);
        self.array.progress_changed.notify_all();
    }
}
