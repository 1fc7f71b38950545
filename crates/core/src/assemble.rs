//! Assembly decision: given the superblocks found on some devices, which array do they form,
//! which member holds which role, and may the array start.
//!
//! This follows mdadm's `Assemble.c` (4.x) so that uraid starts exactly the arrays mdadm
//! would, and refuses the ones mdadm refuses, with a sentence saying what to do instead:
//!
//! 0. Every superblock is checked against its device and md's limits first
//!    ([`crate::metadata::check`]), before any of its counts sizes anything: an impossible
//!    one stops the assembly naming the device, a device too small for its data area is
//!    left out. Every device the array keeps must agree with the newest superblock on
//!    level, layout, chunk, size and raid_disks (mdadm's `compare_super`), hold its share
//!    inside its data area, and keep the array's bitmap offset.
//! 1. Devices are grouped by array uuid; members of more than one array are refused unless
//!    one uuid is chosen.
//! 2. The *newest* member is the first one, among members holding an active (non-replacement)
//!    role, with the highest event count. Its superblock defines level, layout and size.
//! 3. Two members claiming the same role: the one with more events wins; equal events mean
//!    the same disk (or a copy) was given twice, which is refused as mdadm does.
//! 4. A member is *up to date* if `newest - 1 <= events <= newest` (md tolerates one event
//!    of difference: a clean shutdown writes the superblocks one by one). Older members are
//!    *stale* and are left out; their data may be old.
//! 5. Without `force`, a member whose superblock records the newest member's role as not
//!    active is left out: they disagree about who failed (split brain).
//! 6. An active member with a recovery offset is *rebuilding*: present, but its role still
//!    counts as missing. A replacement serves its role only once fully recovered and only
//!    if the member it replaces is absent.
//! 7. mdadm's `enough()` decides whether the roles present can serve all data. raid4/5/6
//!    need every member if the array is dirty (an interrupted write leaves parity
//!    unusable for rebuilding), unless `force`. With `force`, stale members are brought
//!    back, newest first, until there are enough (mdadm's `force_array`).
//! 8. If members the newest superblock records as active were not given, the array is
//!    not started unless `run` (mdadm `--run`): a member may merely have been forgotten.

use crate::geometry::Level;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::metadata::check::{bitmap_offset_from_superblock, check_superblock, SuperblockProblem};
use crate::metadata::{ArrayShape, DeviceRole, FeatureMap, MdUuid, Personality, Raid10Layout, Superblock};

/// A device with a decoded superblock, offered for assembly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// How to name the device in messages (a path, usually).
    pub label: String,
    pub superblock: Superblock,
    pub device_size_bytes: u64,
}

/// The user's choices, mirroring mdadm's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AssembleOptions {
    /// Assemble this array when members of several arrays are given.
    pub array_uuid: Option<MdUuid>,
    /// mdadm `--force`: start dirty degraded arrays, bring back stale members if needed,
    /// ignore members' disagreement about who failed.
    pub force: bool,
    /// mdadm `--run`: start even if members recorded as active were not given.
    pub run: bool,
}

/// Candidates (by index) sharing an array uuid, in input order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayGroup {
    pub uuid: MdUuid,
    pub members: Vec<usize>,
}

/// Why a candidate of the chosen array is not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exclusion {
    /// Its events are older than the newest member's by more than one.
    Stale { events: u64, newest_events: u64 },
    /// Its events are newer than the newest active member's: a stray spare or replacement.
    NewerThanArray { events: u64, newest_events: u64 },
    /// Its superblock records the newest member's role as failed (split brain).
    ReportsNewestFailed { newest: usize },
    /// The newest member's superblock records this one as failed or spare.
    RecordedFailedByNewest { newest: usize },
    /// Another member with more events claims the same role.
    Duplicate { role: u32, kept: usize },
    /// The device is smaller than the data area its superblock describes.
    DeviceTooSmall { needed_bytes: u64, device_size_bytes: u64 },
    /// A role value md never writes.
    UnknownRole(u16),
}

/// An active member that is only partly recovered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rebuilding {
    pub role: u32,
    pub member: usize,
    /// Sectors (from the data offset) already recovered.
    pub recovered_sectors: u64,
}

/// A member replacing the active member of the same role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replacement {
    pub role: u32,
    pub member: usize,
    /// `None` once fully recovered.
    pub recovered_sectors: Option<u64>,
}

/// The chosen array and what each candidate is to it. Member values are candidate indices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayPlan {
    pub uuid: MdUuid,
    pub shape: ArrayShape,
    /// The newest member, whose superblock the array is based on.
    pub newest: usize,
    pub events: u64,
    /// Every used member's superblock says the array was shut down cleanly.
    pub clean: bool,
    /// For each role, the in-sync member serving it.
    pub members: Vec<Option<usize>>,
    pub rebuilding: Vec<Rebuilding>,
    pub replacements: Vec<Replacement>,
    pub spares: Vec<usize>,
    pub faulty: Vec<usize>,
    pub journal: Vec<usize>,
    pub excluded: Vec<(usize, Exclusion)>,
    /// Stale members brought back because of `force`.
    pub forced: Vec<usize>,
    /// Roles with no in-sync member.
    pub missing_roles: Vec<u32>,
}

impl ArrayPlan {
    pub fn is_degraded(&self) -> bool {
        !self.missing_roles.is_empty()
    }

    /// Members left out because their events are too old.
    pub fn stale(&self) -> impl Iterator<Item = usize> + '_ {
        self.excluded.iter().filter(|(_, why)| matches!(why, Exclusion::Stale { .. })).map(|(member, _)| *member)
    }
}

/// Whether to start the array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Run,
    /// Start with `ArrayPlan::missing_roles` missing; a spare or re-added member can rebuild.
    RunDegraded,
    /// Do not start; `reason` says why and what to do.
    Refuse {
        reason: String,
    },
}

/// Result of [`assemble`]: the groups found, the chosen array (if one could be chosen) and
/// the decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assembly {
    pub groups: Vec<ArrayGroup>,
    pub plan: Option<ArrayPlan>,
    pub decision: Decision,
}

fn refuse(reason: impl Into<String>) -> Decision {
    Decision::Refuse { reason: reason.into() }
}

/// Groups candidates by array uuid, in order of first appearance.
pub fn group_by_array(candidates: &[Candidate]) -> Vec<ArrayGroup> {
    let mut groups: Vec<ArrayGroup> = Vec::new();
    for (index, candidate) in candidates.iter().enumerate() {
        let uuid = candidate.superblock.array_uuid();
        match groups.iter_mut().find(|group| group.uuid == uuid) {
            Some(group) => group.members.push(index),
            None => groups.push(ArrayGroup { uuid, members: vec![index] }),
        }
    }
    groups
}

/// Decides how to assemble `candidates`; see the module documentation for the rules.
pub fn assemble(candidates: &[Candidate], options: &AssembleOptions) -> Assembly {
    let groups = group_by_array(candidates);
    let label = |index: usize| candidates[index].label.as_str();
    let chosen = match (options.array_uuid, groups.len()) {
        (_, 0) => None,
        (Some(uuid), _) => groups.iter().find(|group| group.uuid == uuid),
        (None, 1) => groups.first(),
        (None, _) => None,
    };
    let Some(group) = chosen else {
        let decision = if candidates.is_empty() {
            refuse("no devices with an md superblock were given")
        } else {
            let mut listing = String::new();
            for group in &groups {
                let names: Vec<&str> = group.members.iter().map(|m| label(*m)).collect();
                let _ = write!(listing, "; array {} ({})", group.uuid, names.join(", "));
            }
            match options.array_uuid {
                Some(uuid) => refuse(format!(
                    "no given device belongs to array {uuid}{listing}; give that array's members \
                     or choose one of these uuids"
                )),
                None => refuse(format!(
                    "members from {} different arrays given{listing}; use only the members of \
                     one array, or name its uuid",
                    groups.len()
                )),
            }
        };
        return Assembly { groups, plan: None, decision };
    };
    let (plan, decision) = plan_array(candidates, &group.members, group.uuid, options);
    Assembly { groups: groups.clone(), plan, decision }
}

fn plan_array(candidates: &[Candidate], group: &[usize], uuid: MdUuid, options: &AssembleOptions) -> (Option<ArrayPlan>, Decision) {
    let sb = |index: usize| &candidates[index].superblock;
    let label = |index: usize| candidates[index].label.as_str();

    // Every superblock is checked against its device and md's limits before any of its
    // numbers sizes anything (see `metadata::check`). A truncated device is left out below,
    // as mdadm leaves it out; an impossible superblock stops the assembly, naming it.
    let mut too_small: BTreeMap<usize, u64> = BTreeMap::new();
    for &index in group {
        match check_superblock(sb(index), candidates[index].device_size_bytes) {
            Ok(()) => {}
            Err(SuperblockProblem::DeviceTooSmall { needed_bytes, .. }) => {
                too_small.insert(index, needed_bytes);
            }
            Err(problem) => return (None, refuse(unusable_superblock(label(index), &problem))),
        }
    }

    // The newest member: highest events among active, non-replacement members; the first
    // one wins a tie (mdadm replaces only on strictly greater).
    let mut newest: Option<usize> = None;
    for &index in group {
        let is_active = matches!(sb(index).role(), DeviceRole::Active(_));
        if is_active && !sb(index).is_replacement() && newest.is_none_or(|best| sb(index).events() > sb(best).events()) {
            newest = Some(index);
        }
    }
    let Some(newest) = newest else {
        let names: Vec<&str> = group.iter().map(|m| label(*m)).collect();
        return (
            None,
            refuse(format!(
                "no member of array {uuid} holds an active role ({} are spare, faulty or \
                 replacement devices only); give the array's active members",
                names.join(", ")
            )),
        );
    };
    let newest_sb = sb(newest);
    let shape = newest_sb.shape();
    let newest_events = newest_sb.events();
    let raid_disks = shape.raid_disks as usize;

    let mut plan = ArrayPlan {
        uuid,
        shape,
        newest,
        events: newest_events,
        clean: true,
        members: vec![None; raid_disks],
        rebuilding: Vec::new(),
        replacements: Vec::new(),
        spares: Vec::new(),
        faulty: Vec::new(),
        journal: Vec::new(),
        excluded: Vec::new(),
        forced: Vec::new(),
        missing_roles: Vec::new(),
    };

    if let Some(reason) = unsupported_reason(newest_sb) {
        return (Some(plan), refuse(reason));
    }

    // Classify; keep, per (role, is_replacement), the claimant with the most events.
    let mut claims: BTreeMap<(u32, bool), usize> = BTreeMap::new();
    let newest_role = match newest_sb.role() {
        DeviceRole::Active(role) => Some(role as usize),
        _ => None,
    };
    for &index in group {
        let member = sb(index);
        if let Some(&needed_bytes) = too_small.get(&index) {
            plan.excluded.push((index, Exclusion::DeviceTooSmall { needed_bytes, device_size_bytes: candidates[index].device_size_bytes }));
            continue;
        }
        match member.role() {
            DeviceRole::Faulty => plan.faulty.push(index),
            DeviceRole::Journal => plan.journal.push(index),
            DeviceRole::Spare => plan.spares.push(index),
            DeviceRole::Unknown(raw) => plan.excluded.push((index, Exclusion::UnknownRole(raw))),
            DeviceRole::Active(role) if role as usize >= raid_disks => plan.spares.push(index),
            DeviceRole::Active(role) => {
                let key = (role, member.is_replacement());
                match claims.get(&key) {
                    None => {
                        claims.insert(key, index);
                    }
                    Some(&other) if sb(other).events() == member.events() => {
                        return (
                            Some(plan),
                            refuse(format!(
                                "{} and {} both claim role {role} with the same events ({}): \
                                 the same disk given twice, or a copy of it; give only one",
                                label(other),
                                label(index),
                                member.events()
                            )),
                        );
                    }
                    Some(&other) => {
                        let (kept, dropped) = if member.events() > sb(other).events() { (index, other) } else { (other, index) };
                        claims.insert(key, kept);
                        plan.excluded.push((dropped, Exclusion::Duplicate { role, kept }));
                    }
                }
            }
        }
    }

    let mut stale_active: Vec<(u32, usize)> = Vec::new();
    for (&(role, is_replacement), &index) in &claims {
        let member = sb(index);
        if index != newest && !options.force {
            if let Some(newest_role) = newest_role {
                if !member.active_roles().get(newest_role).copied().unwrap_or(false) {
                    plan.excluded.push((index, Exclusion::ReportsNewestFailed { newest }));
                    continue;
                }
            }
        }
        let events = member.events();
        if events > newest_events {
            plan.excluded.push((index, Exclusion::NewerThanArray { events, newest_events }));
            continue;
        }
        if events.saturating_add(1) < newest_events {
            plan.excluded.push((index, Exclusion::Stale { events, newest_events }));
            if !is_replacement {
                stale_active.push((role, index));
            }
            continue;
        }
        // md takes every member's role from the freshest superblock: a member whose own
        // superblock is one event behind (it failed, then the array stopped before its own
        // superblock could be rewritten) but which the newest records as faulty or spare is
        // not in sync, whatever it says about itself.
        // With --force such a member is treated like a stale one: brought back only if the
        // array cannot run without it.
        if index != newest && member.events() < newest_events {
            let seen = newest_sb.role_of_device(member.dev_number());
            if seen != DeviceRole::Active(role) {
                plan.excluded.push((index, Exclusion::RecordedFailedByNewest { newest }));
                if !is_replacement {
                    stale_active.push((role, index));
                }
                continue;
            }
        }
        // Clean or dirty comes from the freshest superblocks, as md takes it (`super_1_validate`
        // reads `resync_offset` from the freshest device only): a member one event behind
        // that still says dirty missed the clean mark, which md writes only once every write
        // is on disk. Counting it would leave an array half-marked by a crash during the clean
        // mark refusing to start without --force after a member loss, though nothing is stale.
        if member.events() == newest_events {
            plan.clean &= member.is_clean();
        }
        let recovered = member.recovery_offset_sectors();
        if is_replacement {
            plan.replacements.push(Replacement { role, member: index, recovered_sectors: recovered });
        } else if let Some(recovered_sectors) = recovered {
            plan.rebuilding.push(Rebuilding { role, member: index, recovered_sectors });
        } else {
            plan.members[role as usize] = Some(index);
        }
    }
    // A fully recovered replacement serves its role when the original is absent.
    for replacement in &plan.replacements {
        let slot = &mut plan.members[replacement.role as usize];
        if slot.is_none() && replacement.recovered_sectors.is_none() {
            *slot = Some(replacement.member);
        }
    }

    let level = shape.level;
    let available = |plan: &ArrayPlan| plan.members.iter().map(Option::is_some).collect::<Vec<_>>();

    if options.force && !has_enough_members(level, shape.raid_disks, shape.layout, true, &available(&plan)) {
        // mdadm force_array: bring back the newest stale members until there are enough.
        stale_active.sort_by_key(|&(_, index)| std::cmp::Reverse(sb(index).events()));
        for (role, index) in stale_active {
            if has_enough_members(level, shape.raid_disks, shape.layout, true, &available(&plan)) {
                break;
            }
            if plan.members[role as usize].is_none() && sb(index).recovery_offset_sectors().is_none() {
                plan.members[role as usize] = Some(index);
                plan.forced.push(index);
                plan.excluded.retain(|(member, _)| *member != index);
            }
        }
    }

    plan.missing_roles = (0..shape.raid_disks).filter(|r| plan.members[*r as usize].is_none()).collect();
    let available = available(&plan);
    let present = available.iter().filter(|a| **a).count();
    let missing_list = join_numbers(&plan.missing_roles);

    if !has_enough_members(level, shape.raid_disks, shape.layout, true, &available) {
        let mut reason = match level {
            Personality::Array(Level::Raid10) => format!(
                "too few members: raid10 ({}) has no copy left of some data; found {present} of \
                 {raid_disks}, missing roles {missing_list}",
                raid10_layout_name(shape.layout)
            ),
            _ => format!(
                "too few members: need {} of {raid_disks} for {level}, found {present} \
                 (missing roles {missing_list})",
                minimum_members(level, shape.raid_disks)
            ),
        };
        let stale: Vec<String> = plan.stale().map(|m| format!("{} (events {} < {newest_events})", label(m), sb(m).events())).collect();
        if !stale.is_empty() {
            let _ = write!(
                reason,
                "; stale members {} could be brought back with --force, at the risk of \
                 returning old data",
                stale.join(", ")
            );
        } else {
            reason.push_str("; give the missing members");
        }
        return (Some(plan), refuse(reason));
    }
    if !has_enough_members(level, shape.raid_disks, shape.layout, plan.clean, &available) && !options.force {
        return (
            Some(plan),
            refuse(format!(
                "array is dirty and degraded (missing roles {missing_list}): a write may have \
                 been interrupted, so data rebuilt from parity may be inconsistent; use --force \
                 to start it anyway"
            )),
        );
    }
    let recorded_active = newest_sb.active_roles();
    let forgotten: Vec<u32> = (0..shape.raid_disks)
        .filter(|&role| {
            recorded_active.get(role as usize).copied().unwrap_or(false)
                && plan.members[role as usize].is_none()
                && !plan.rebuilding.iter().any(|r| r.role == role)
        })
        .collect();
    if !forgotten.is_empty() && !options.run {
        return (
            Some(plan),
            refuse(format!(
                "members for roles {} were active at the last update but were not given (or are \
                 stale); give them, or use --run to start degraded without them",
                join_numbers(&forgotten)
            )),
        );
    }
    if let Some(reason) = inconsistent_member(candidates, &plan) {
        return (Some(plan), refuse(reason));
    }
    let decision = if plan.is_degraded() { Decision::RunDegraded } else { Decision::Run };
    (Some(plan), decision)
}

/// The refusal for a superblock [`check_superblock`] rejects.
fn unusable_superblock(label: &str, problem: &SuperblockProblem) -> String {
    format!("{label}: the md superblock is not usable: {problem}; it is damaged or was not written by md, so leave this device out")
}

/// Every device the array will keep (and so write: members, rebuilding members,
/// replacements, spares) must describe the same array as the newest superblock (level,
/// layout, chunk, size and raid_disks, as mdadm's `compare_super1`/`compare_super0` demand
/// before assembling), hold its share of the array inside its own data area, and keep its
/// write-intent bitmap where the newest superblock says the array's bitmap is (md writes
/// one bitmap offset into every superblock, and uraid writes the bitmap there on every
/// device).
fn inconsistent_member(candidates: &[Candidate], plan: &ArrayPlan) -> Option<String> {
    let newest = &candidates[plan.newest].superblock;
    let bitmap = bitmap_offset_from_superblock(newest);
    let uses_size = !matches!(plan.shape.level, Personality::Array(Level::Linear) | Personality::Array(Level::Raid0));
    let kept = plan
        .members
        .iter()
        .flatten()
        .copied()
        .chain(plan.rebuilding.iter().map(|r| r.member))
        .chain(plan.replacements.iter().map(|r| r.member))
        .chain(plan.spares.iter().copied());
    for index in kept {
        let candidate = &candidates[index];
        let sb = &candidate.superblock;
        let shape = sb.shape();
        if shape != plan.shape {
            let describe = |s: &ArrayShape| {
                format!(
                    "{} with {} devices, layout {}, chunk {} sectors, {} sectors each",
                    s.level, s.raid_disks, s.layout, s.chunk_sectors, s.component_size_sectors
                )
            };
            return Some(format!(
                "{}: its superblock describes {}, the newest member's {}; mdadm refuses to assemble members that disagree, so leave it out",
                candidate.label,
                describe(&shape),
                describe(&plan.shape)
            ));
        }
        let data_sectors = sb.member_data_size_sectors(candidate.device_size_bytes);
        if uses_size && plan.shape.component_size_sectors > data_sectors {
            return Some(format!(
                "{}: its data area holds {data_sectors} sectors, but each member of this {} array holds {} sectors; leave it out",
                candidate.label, plan.shape.level, plan.shape.component_size_sectors
            ));
        }
        let own = bitmap_offset_from_superblock(sb);
        if own != bitmap {
            let place = |o: Option<i64>| o.map_or("no bitmap".to_string(), |b| format!("a bitmap {b} bytes from the superblock"));
            return Some(format!(
                "{}: its superblock records {}, the newest member's {}; md keeps one bitmap offset per array, so leave it out",
                candidate.label,
                place(own),
                place(bitmap)
            ));
        }
    }
    None
}

/// Features and states uraid cannot run yet, as an actionable sentence.
fn unsupported_reason(newest: &Superblock) -> Option<String> {
    let level = newest.level();
    if !matches!(
        level,
        Personality::Array(Level::Linear)
            | Personality::Array(Level::Raid0)
            | Personality::Array(Level::Raid1)
            | Personality::Array(Level::Raid4)
            | Personality::Array(Level::Raid5)
            | Personality::Array(Level::Raid6)
            | Personality::Array(Level::Raid10)
    ) {
        return Some(format!("{level} arrays are not supported by uraid; assemble it with mdadm"));
    }
    if newest.reshape_active() {
        return Some(
            "a reshape is in progress, which uraid cannot continue; finish it with mdadm \
             (mdadm --assemble, then mdadm --grow --continue) before using uraid"
                .to_string(),
        );
    }
    if let Superblock::V1(sb) = newest {
        if sb.feature_map.contains(FeatureMap::JOURNAL) {
            return Some(
                "array uses a raid5 write journal, which uraid does not support; assemble it \
                 with mdadm"
                    .to_string(),
            );
        }
        if sb.feature_map.contains(FeatureMap::CLUSTERED) {
            return Some("clustered md arrays are not supported by uraid".to_string());
        }
    }
    None
}

fn minimum_members(level: Personality, raid_disks: u32) -> u32 {
    match level {
        Personality::Array(Level::Raid1) => 1,
        Personality::Array(Level::Raid4) | Personality::Array(Level::Raid5) => raid_disks.saturating_sub(1),
        Personality::Array(Level::Raid6) => raid_disks.saturating_sub(2),
        _ => raid_disks,
    }
}

fn raid10_layout_name(layout: u32) -> String {
    match Raid10Layout::from_raw(layout) {
        Some(geometry) if geometry.far_copies == 1 => format!("near={}", geometry.near_copies),
        Some(geometry) if geometry.far_offset => format!("offset={}", geometry.far_copies),
        Some(geometry) if geometry.near_copies == 1 => format!("far={}", geometry.far_copies),
        Some(geometry) => format!("near={} far={}", geometry.near_copies, geometry.far_copies),
        None => format!("layout {layout:#x}"),
    }
}

fn join_numbers(numbers: &[u32]) -> String {
    let parts: Vec<String> = numbers.iter().map(u32::to_string).collect();
    if parts.is_empty() {
        "none".to_string()
    } else {
        parts.join(", ")
    }
}

/// mdadm's `enough()`: can an array of `level` serve all data with the roles marked in
/// `available` (index = role; absent entries count as missing)?
///
/// `clean` matters for raid4/5/6: a dirty array may have parity that does not match its
/// data, so a missing member cannot be rebuilt safely. raid4 with only its parity member
/// (the last) missing is fine even when dirty.
pub fn has_enough_members(level: Personality, raid_disks: u32, layout: u32, clean: bool, available: &[bool]) -> bool {
    let roles: Vec<bool> = (0..raid_disks as usize).map(|r| available.get(r).copied().unwrap_or(false)).collect();
    let present = roles.iter().filter(|p| **p).count();
    match level {
        Personality::Multipath => present >= 1,
        Personality::Array(level) => {
            let parity = matches!(level, Level::Raid4 | Level::Raid5 | Level::Raid6);
            // RAID4 missing only its parity member (the last role) keeps every data block.
            let raid4_parity_only = level == Level::Raid4 && present + 1 == roles.len() && roles.last() == Some(&false);
            level.serves_all_data(layout, &roles) && (clean || !parity || present == roles.len() || raid4_parity_only)
        }
        Personality::Faulty | Personality::Other(_) => false,
    }
}

/// raid10 (near, far and offset layouts): every window of `near * far` consecutive roles
/// (wrapping), starting at each multiple of `near`, must hold at least one available
/// member. This is md's and mdadm's `enough()` check: with near copies, role groups
/// `[k*near, k*near + near)` hold the same data; far and offset copies land on the following
/// roles, so the window widens to all of them.
pub fn raid10_has_all_data(raid_disks: u32, layout: u32, available: &[bool]) -> bool {
    let Some(geometry) = Raid10Layout::from_raw(layout) else { return false };
    if raid_disks == 0 {
        return false;
    }
    let is_available = |role: u32| available.get(role as usize).copied().unwrap_or(false);
    let copies = geometry.copies();
    let mut first = 0u32;
    loop {
        let window_has_copy = (0..copies).any(|step| is_available((first + step) % raid_disks));
        if !window_has_copy {
            return false;
        }
        first = (first + geometry.near_copies) % raid_disks;
        if first == 0 {
            return true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn avail(bits: &[u8]) -> Vec<bool> {
        bits.iter().map(|b| *b == 1).collect()
    }

    #[test]
    fn enough_for_parity_levels() {
        let r5 = Personality::Array(Level::Raid5);
        assert!(has_enough_members(r5, 4, 2, true, &avail(&[1, 0, 1, 1])));
        assert!(!has_enough_members(r5, 4, 2, false, &avail(&[1, 0, 1, 1])));
        assert!(!has_enough_members(r5, 4, 2, true, &avail(&[1, 0, 0, 1])));
        let r4 = Personality::Array(Level::Raid4);
        assert!(has_enough_members(r4, 4, 0, false, &avail(&[1, 1, 1, 0])));
        assert!(!has_enough_members(r4, 4, 0, false, &avail(&[0, 1, 1, 1])));
        let r6 = Personality::Array(Level::Raid6);
        assert!(has_enough_members(r6, 5, 2, true, &avail(&[1, 0, 1, 0, 1])));
        assert!(!has_enough_members(r6, 5, 2, true, &avail(&[1, 0, 0, 0, 1])));
        assert!(has_enough_members(Personality::Array(Level::Raid1), 3, 0, false, &avail(&[0, 0, 1])));
        assert!(!has_enough_members(Personality::Array(Level::Raid0), 2, 0, true, &avail(&[1, 0])));
        assert!(!has_enough_members(Personality::Array(Level::Raid5), 0, 2, true, &[]));
    }

    #[test]
    fn raid10_near_groups() {
        // near=2 on 4 disks: {0,1} and {2,3} mirror each other.
        assert!(raid10_has_all_data(4, 0x102, &avail(&[1, 0, 0, 1])));
        assert!(!raid10_has_all_data(4, 0x102, &avail(&[0, 0, 1, 1])));
        // near=2 on 3 disks: windows {0,1}, {2,0}, {1,2}.
        assert!(raid10_has_all_data(3, 0x102, &avail(&[1, 0, 1])));
        assert!(!raid10_has_all_data(3, 0x102, &avail(&[1, 0, 0])));
    }

    #[test]
    fn raid10_far_and_offset_check_consecutive_roles() {
        // far=2 on 4 disks: windows {0,1},{1,2},{2,3},{3,0}: no two adjacent roles may go.
        for layout in [0x201, 0x10201] {
            assert!(raid10_has_all_data(4, layout, &avail(&[1, 0, 1, 0])));
            assert!(!raid10_has_all_data(4, layout, &avail(&[1, 0, 0, 1])));
            assert!(!raid10_has_all_data(4, layout, &avail(&[0, 1, 1, 0])));
        }
        assert!(!raid10_has_all_data(4, 0, &avail(&[1, 1, 1, 1])));
    }

    /// Exhaustive against a plain model: near=n far=1 on d disks serves all data iff every
    /// chunk's copy set (n consecutive roles from each multiple-of-n start) has a survivor.
    #[test]
    fn raid10_near_matches_model() {
        for disks in 2..=8u32 {
            for near in 1..=disks.min(4) {
                for mask in 0u32..(1 << disks) {
                    let available: Vec<bool> = (0..disks).map(|r| mask & (1 << r) != 0).collect();
                    // Model: chunk c's copies are on (c*near + k) % disks for k < near.
                    let model = (0..disks * near).all(|chunk| (0..near).any(|k| available[((chunk * near + k) % disks) as usize]));
                    assert_eq!(raid10_has_all_data(disks, 0x100 | near, &available), model, "disks {disks} near {near} mask {mask:b}");
                }
            }
        }
    }
}
