//! Devices, roles and events: who serves which role, who is being rebuilt or replaced,
//! which devices are spares or faulty, and the superblock round every change needs (md's
//! `md_update_sb`). Pure: the engine holds a [`Roster`] under its device lock, applies a
//! transition, and then writes the [`SuperblockRound`] the roster hands out, in its order,
//! before anything depends on the change. A device whose superblock cannot be written is
//! reported back ([`Roster::fail`]) and the round is asked again, as md retries
//! `md_update_sb` after failing such a member.
//!
//! Invariants, checked after every transition (in release builds too):
//! - at most one in-sync member per role, and roles below `raid_disks` only;
//! - a role being rebuilt has no in-sync member, a role being replaced has one;
//! - at most one rebuild target per role and one replacement per role;
//! - events never go back;
//! - once the array cannot serve all its data it stays failed.

use crate::geometry::Level;
use crate::metadata::DeviceRole;

/// What a device attached to the array is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceState {
    InSync(usize),
    /// Being rebuilt: sectors below `done` (from the data offset) hold valid data and are
    /// durable on the device.
    Recovering {
        role: usize,
        done: u64,
    },
    /// Taking over `role` from its in-sync member, which keeps serving until the copy is
    /// done (md's hot replace): written like the member it replaces, copied up to `done`.
    /// Superblocks record it as a spare until it takes the role, so a restart in between
    /// leaves a healthy array and a spare (md would resume the copy; here it is asked again).
    Replacing {
        role: usize,
        done: u64,
    },
    Spare,
    Faulty,
}

impl DeviceState {
    /// The role this device is written for (in sync, rebuilding or replacing).
    pub fn role(self) -> Option<usize> {
        match self {
            DeviceState::InSync(r) | DeviceState::Recovering { role: r, .. } | DeviceState::Replacing { role: r, .. } => Some(r),
            DeviceState::Spare | DeviceState::Faulty => None,
        }
    }
}

/// As `mdadm --detail` words it, for messages.
impl std::fmt::Display for DeviceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceState::InSync(role) => write!(f, "an active member (role {role})"),
            DeviceState::Recovering { role, .. } => write!(f, "being rebuilt (role {role})"),
            DeviceState::Replacing { role, .. } => write!(f, "replacing role {role}"),
            DeviceState::Spare => write!(f, "a spare"),
            DeviceState::Faulty => write!(f, "faulty"),
        }
    }
}

/// Why the array stopped taking writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrayFailure {
    /// More members failed than the level survives.
    TooManyMembersFailed { level: Level },
}

impl std::fmt::Display for ArrayFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArrayFailure::TooManyMembersFailed { level } => write!(f, "too many members failed for {level}"),
        }
    }
}

/// One device as the roster sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RosterDevice {
    pub state: DeviceState,
    /// Its `dev_number`, the index of its entry in every superblock's role table.
    pub dev_number: u32,
    /// Its superblock can record a partial rebuild (v1 `recovery_offset`); a 0.90 one
    /// cannot, so there a rebuilding member is recorded as a spare until it is complete.
    pub records_rebuild: bool,
    /// A former member re-added from the bitmap (md's `Bitmap_sync`): its rebuild skips
    /// regions whose bitmap chunks are clean. Not recorded on disk.
    pub bitmap_recovery: bool,
    /// The role its own superblock on disk records, as far as this process knows.
    on_disk_role: DeviceRole,
}

impl RosterDevice {
    /// A device whose superblock records `on_disk_role`.
    pub fn new(state: DeviceState, dev_number: u32, records_rebuild: bool, on_disk_role: DeviceRole) -> RosterDevice {
        RosterDevice { state, dev_number, records_rebuild, bitmap_recovery: false, on_disk_role }
    }
}

/// The superblock update a transition asks for: every device in `order` gets a superblock
/// with `events`, the role table `table` and its own `recovery_offset`, written and flushed
/// one after another in that order before the caller goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuperblockRound {
    pub events: u64,
    /// (dev_number, role) of every device kept (md's `dev_roles`).
    pub table: Vec<(u32, DeviceRole)>,
    /// Device indices to write, in this order. Devices whose own role changes come first,
    /// each flushed before the next: a crash part-way must never leave the newest
    /// superblocks naming a member for a role while that member's own superblock still
    /// calls it a spare (assembly would leave it out, and a dirty array missing that role
    /// cannot start; `tests/crash_points.rs`). Written first, such a member is the newest and
    /// its own superblock records its role and rebuild progress; the rest, one event
    /// behind, take their roles from it, as md does.
    pub order: Vec<usize>,
    /// Each written device's `recovery_offset` (indexed like the roster's devices; `None`
    /// for a device in sync, a spare, or one whose superblock cannot record it).
    pub recovery_offsets: Vec<Option<u64>>,
}

/// What [`Roster::fail`] did besides failing the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FailOutcome {
    /// The device was not already faulty (false: nothing changed).
    pub changed: bool,
    /// A replacement of its role carries on as an ordinary rebuild (md promotes it).
    pub promoted: Option<usize>,
    /// A spare was given its role to rebuild (md's hot spare).
    pub spare_assigned: Option<usize>,
}

/// Why a transition was refused; nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RosterError {
    #[error("no such device")]
    NoDevice,
    #[error("the device is {0}")]
    WrongState(DeviceState),
    #[error("a rebuild or replacement is already running")]
    JobRunning,
    #[error("role {0} is already held")]
    RoleHeld(usize),
    #[error("role {0} is outside the array")]
    NoSuchRole(usize),
}

/// The array's devices, roles and events.
#[derive(Debug, Clone)]
pub struct Roster {
    level: Level,
    layout: u32,
    raid_disks: usize,
    devices: Vec<RosterDevice>,
    events: u64,
    failed: Option<ArrayFailure>,
}

impl Roster {
    /// The roster of an assembled array at `events`, or what is wrong with the set (two
    /// members claiming one role, say: superblocks no md would write).
    pub fn new(level: Level, layout: u32, raid_disks: usize, devices: Vec<RosterDevice>, events: u64) -> Result<Roster, String> {
        let mut roster = Roster { level, layout, raid_disks, devices, events, failed: None };
        if !roster.can_serve() {
            roster.failed = Some(ArrayFailure::TooManyMembersFailed { level });
        }
        match roster.violation() {
            Some(why) => Err(why),
            None => Ok(roster),
        }
    }

    pub fn devices(&self) -> &[RosterDevice] {
        &self.devices
    }
    pub fn state(&self, device: usize) -> DeviceState {
        self.devices[device].state
    }
    pub fn device(&self, device: usize) -> &RosterDevice {
        &self.devices[device]
    }
    pub fn events(&self) -> u64 {
        self.events
    }
    pub fn failed(&self) -> Option<ArrayFailure> {
        self.failed
    }
    pub fn raid_disks(&self) -> usize {
        self.raid_disks
    }

    /// The device in sync for each role (`None`: the role is missing).
    pub fn in_sync_members(&self) -> Vec<Option<usize>> {
        let mut by_role = vec![None; self.raid_disks];
        for (i, d) in self.devices.iter().enumerate() {
            if let DeviceState::InSync(r) = d.state {
                by_role[r] = Some(i);
            }
        }
        by_role
    }

    /// Roles with no in-sync member.
    pub fn missing_roles(&self) -> Vec<usize> {
        self.in_sync_members().iter().enumerate().filter(|(_, m)| m.is_none()).map(|(r, _)| r).collect()
    }

    /// Whether the in-sync members serve all data (md's survival rule).
    pub fn can_serve(&self) -> bool {
        let present: Vec<bool> = self.in_sync_members().iter().map(|m| m.is_some()).collect();
        self.level.serves_all_data(self.layout, &present)
    }

    /// The device being rebuilt or replacing a member, if any: (device, role, done,
    /// replacing). A rebuild of a missing role comes before a replacement, as in md.
    pub fn recovery_target(&self) -> Option<(usize, usize, u64, bool)> {
        let find = |replacing: bool| {
            self.devices.iter().enumerate().find_map(|(i, d)| match (d.state, replacing) {
                (DeviceState::Recovering { role, done }, false) => Some((i, role, done, false)),
                (DeviceState::Replacing { role, done }, true) => Some((i, role, done, true)),
                _ => None,
            })
        };
        find(false).or_else(|| find(true))
    }

    /// Whether a rebuild or a replacement is under way.
    pub fn job_running(&self) -> bool {
        self.devices.iter().any(|d| matches!(d.state, DeviceState::Recovering { .. } | DeviceState::Replacing { .. }))
    }

    // ------------------------------------------------------------------ transitions

    /// Fails `device`: it is faulty from now on and never written again. A replacement of
    /// its role carries on as an ordinary rebuild (md promotes it), else a spare is given
    /// the role to rebuild. The array is failed when the rest cannot serve all data.
    pub fn fail(&mut self, device: usize) -> FailOutcome {
        let Some(d) = self.devices.get(device) else { return FailOutcome::default() };
        if d.state == DeviceState::Faulty {
            return FailOutcome::default();
        }
        let role = match d.state {
            DeviceState::InSync(r) | DeviceState::Recovering { role: r, .. } => Some(r),
            _ => None,
        };
        self.devices[device].state = DeviceState::Faulty;
        self.devices[device].bitmap_recovery = false;
        let mut outcome = FailOutcome { changed: true, ..FailOutcome::default() };
        if let Some(role) = role {
            let replacing = self.devices.iter().position(|d| matches!(d.state, DeviceState::Replacing { role: r, .. } if r == role));
            if let Some(rp) = replacing {
                let DeviceState::Replacing { done, .. } = self.devices[rp].state else { unreachable!("matched above") };
                self.devices[rp].state = DeviceState::Recovering { role, done };
                outcome.promoted = Some(rp);
            } else if let Some(sp) = self.devices.iter().position(|d| d.state == DeviceState::Spare) {
                self.devices[sp].state = DeviceState::Recovering { role, done: 0 };
                self.devices[sp].bitmap_recovery = false;
                outcome.spare_assigned = Some(sp);
            }
        }
        if !self.can_serve() {
            self.failed.get_or_insert(ArrayFailure::TooManyMembersFailed { level: self.level });
        }
        self.check();
        outcome
    }

    /// Attaches a device as a spare; returns its index.
    pub fn add_spare(&mut self, dev_number: u32, records_rebuild: bool) -> usize {
        self.devices.push(RosterDevice::new(DeviceState::Spare, dev_number, records_rebuild, DeviceRole::Spare));
        self.check();
        self.devices.len() - 1
    }

    /// Attaches a former member to rebuild `role` from its bitmap (md's re-add); returns its
    /// index. Its superblock on disk still records `role`.
    pub fn add_re_added(&mut self, dev_number: u32, role: usize) -> Result<usize, RosterError> {
        if role >= self.raid_disks {
            return Err(RosterError::NoSuchRole(role));
        }
        if self.devices.iter().any(|d| d.state.role() == Some(role)) {
            return Err(RosterError::RoleHeld(role));
        }
        let mut d = RosterDevice::new(DeviceState::Recovering { role, done: 0 }, dev_number, true, DeviceRole::Active(role as u32));
        d.bitmap_recovery = true;
        self.devices.push(d);
        self.check();
        Ok(self.devices.len() - 1)
    }

    /// Puts back a device entry (a faulty one taken out for a re-add that failed) at `at`.
    pub fn insert(&mut self, at: usize, device: RosterDevice) {
        let at = at.min(self.devices.len());
        self.devices.insert(at, device);
        self.check();
    }

    /// Detaches a faulty device or a spare; returns its entry.
    pub fn remove(&mut self, device: usize) -> Result<RosterDevice, RosterError> {
        let d = self.devices.get(device).ok_or(RosterError::NoDevice)?;
        match d.state {
            DeviceState::Faulty | DeviceState::Spare => {}
            other => return Err(RosterError::WrongState(other)),
        }
        let removed = self.devices.remove(device);
        self.check();
        Ok(removed)
    }

    /// Gives a spare the first missing role no one is rebuilding, as md does when a spare
    /// is present: `Some(device)` if one was assigned. Nothing while a rebuild runs.
    pub fn assign_spare_to_missing_role(&mut self) -> Option<usize> {
        if self.devices.iter().any(|d| matches!(d.state, DeviceState::Recovering { .. })) {
            return None;
        }
        let role = *self.missing_roles().first()?;
        let sp = self.devices.iter().position(|d| d.state == DeviceState::Spare)?;
        self.devices[sp].state = DeviceState::Recovering { role, done: 0 };
        self.devices[sp].bitmap_recovery = false;
        self.check();
        Some(sp)
    }

    /// Spare `spare` starts copying the in-sync member `old` (md's hot replace).
    pub fn start_replacement(&mut self, old: usize, spare: usize) -> Result<(), RosterError> {
        let old_state = self.devices.get(old).ok_or(RosterError::NoDevice)?.state;
        let spare_state = self.devices.get(spare).ok_or(RosterError::NoDevice)?.state;
        let DeviceState::InSync(role) = old_state else { return Err(RosterError::WrongState(old_state)) };
        if spare_state != DeviceState::Spare {
            return Err(RosterError::WrongState(spare_state));
        }
        if self.job_running() {
            return Err(RosterError::JobRunning);
        }
        self.devices[spare].state = DeviceState::Replacing { role, done: 0 };
        self.check();
        Ok(())
    }

    /// The rebuild or copy onto `device` is durable up to `done`. Refused when the device
    /// is no longer in `expected` (it failed, or a replacement was promoted meanwhile).
    pub fn recovery_progress(&mut self, device: usize, expected: DeviceState, done: u64) -> Result<(), RosterError> {
        let state = self.devices.get(device).ok_or(RosterError::NoDevice)?.state;
        if state != expected {
            return Err(RosterError::WrongState(state));
        }
        self.devices[device].state = match state {
            DeviceState::Recovering { role, .. } => DeviceState::Recovering { role, done },
            DeviceState::Replacing { role, .. } => DeviceState::Replacing { role, done },
            other => return Err(RosterError::WrongState(other)),
        };
        self.check();
        Ok(())
    }

    /// The rebuild or copy onto `device` is complete: it is in sync in its role. A
    /// replaced member is retired (faulty, as md marks it); returns its index.
    pub fn recovery_complete(&mut self, device: usize) -> Result<Option<usize>, RosterError> {
        let state = self.devices.get(device).ok_or(RosterError::NoDevice)?.state;
        let (role, replacing) = match state {
            DeviceState::Recovering { role, .. } => (role, false),
            DeviceState::Replacing { role, .. } => (role, true),
            other => return Err(RosterError::WrongState(other)),
        };
        let retired = if replacing { self.devices.iter().position(|d| d.state == DeviceState::InSync(role)) } else { None };
        if let Some(old) = retired {
            self.devices[old].state = DeviceState::Faulty;
        }
        self.devices[device].state = DeviceState::InSync(role);
        self.devices[device].bitmap_recovery = false;
        self.check();
        Ok(retired)
    }

    /// The next superblock update: events bumped once, the role table, the order. Call it
    /// after every transition that must be on disk; then write the round, report each device
    /// whose write failed with [`Roster::fail`], and ask for a round again until one has no
    /// failure.
    pub fn superblock_round(&mut self) -> SuperblockRound {
        self.events += 1;
        let table: Vec<(u32, DeviceRole)> = self.devices.iter().map(|d| (d.dev_number, self.recorded_role(d))).collect();
        let mut order: Vec<(bool, usize)> = Vec::with_capacity(self.devices.len());
        let mut recovery_offsets = vec![None; self.devices.len()];
        for (i, d) in self.devices.iter_mut().enumerate() {
            if d.state == DeviceState::Faulty {
                continue;
            }
            let role = table[i].1;
            order.push((role == d.on_disk_role, i));
            d.on_disk_role = role;
            if let (DeviceState::Recovering { done, .. }, true) = (d.state, d.records_rebuild) {
                recovery_offsets[i] = Some(done);
            }
        }
        order.sort();
        SuperblockRound { events: self.events, table, order: order.into_iter().map(|(_, i)| i).collect(), recovery_offsets }
    }

    /// The role a device's superblock records (md's `super_1_sync`): in-sync and rebuilding
    /// members hold their role (0.90 cannot record a partial rebuild: a spare until done),
    /// failed ones are faulty, spares and replacements spare.
    fn recorded_role(&self, d: &RosterDevice) -> DeviceRole {
        match d.state {
            DeviceState::InSync(r) => DeviceRole::Active(r as u32),
            DeviceState::Recovering { role, .. } if d.records_rebuild => DeviceRole::Active(role as u32),
            DeviceState::Recovering { .. } | DeviceState::Replacing { .. } | DeviceState::Spare => DeviceRole::Spare,
            DeviceState::Faulty => DeviceRole::Faulty,
        }
    }

    /// The invariants (see the module documentation). A violation after a transition is a
    /// bug that would put data at risk: stop.
    fn check(&self) {
        if let Some(why) = self.violation() {
            panic!("roster: {why}");
        }
    }

    /// The first invariant the devices break, if any.
    fn violation(&self) -> Option<String> {
        let n = self.raid_disks;
        let mut in_sync = vec![0u32; n];
        let mut rebuilding = vec![0u32; n];
        let mut replacing = vec![0u32; n];
        for d in &self.devices {
            match d.state {
                s if s.role().is_some_and(|r| r >= n) => return Some(format!("{s} in an array of {n} roles")),
                DeviceState::InSync(r) => in_sync[r] += 1,
                DeviceState::Recovering { role, .. } => rebuilding[role] += 1,
                DeviceState::Replacing { role, .. } => replacing[role] += 1,
                _ => {}
            }
        }
        for r in 0..n {
            if in_sync[r] > 1 {
                return Some(format!("role {r} has {} in-sync members", in_sync[r]));
            }
            if rebuilding[r] > 1 || replacing[r] > 1 {
                return Some(format!("role {r} has two rebuild targets"));
            }
            if rebuilding[r] > 0 && in_sync[r] > 0 {
                return Some(format!("role {r} is rebuilt while a member is in sync in it"));
            }
            if replacing[r] > 0 && in_sync[r] == 0 {
                return Some(format!("role {r} is replaced with no member to copy"));
            }
        }
        if self.failed.is_none() && !self.can_serve() {
            return Some("the members cannot serve the data but the array is not failed".into());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn raid5(members: usize, spares: usize) -> Roster {
        let mut devices: Vec<RosterDevice> =
            (0..members).map(|r| RosterDevice::new(DeviceState::InSync(r), r as u32, true, DeviceRole::Active(r as u32))).collect();
        devices.extend((0..spares).map(|s| RosterDevice::new(DeviceState::Spare, (members + s) as u32, true, DeviceRole::Spare)));
        Roster::new(Level::Raid5, 2, members, devices, 10).unwrap()
    }

    #[test]
    fn a_failed_member_hands_its_role_to_a_spare_and_the_spare_is_written_first() {
        let mut r = raid5(3, 1);
        let out = r.fail(1);
        assert_eq!(out, FailOutcome { changed: true, promoted: None, spare_assigned: Some(3) });
        assert_eq!(r.state(3), DeviceState::Recovering { role: 1, done: 0 });
        let round = r.superblock_round();
        assert_eq!(round.events, 11);
        assert_eq!(round.order, vec![3, 0, 2], "the spare taking a role first, the faulty member not at all");
        assert_eq!(round.table[1], (1, DeviceRole::Faulty));
        assert_eq!(round.table[3], (3, DeviceRole::Active(1)));
        assert_eq!(round.recovery_offsets[3], Some(0));
        // Once written, nobody's role changes: plain index order.
        assert_eq!(r.superblock_round().order, vec![0, 2, 3]);
        assert_eq!(r.fail(1), FailOutcome::default(), "failing a faulty device changes nothing");
    }

    #[test]
    fn losing_a_second_raid5_member_fails_the_array_for_good() {
        let mut r = raid5(3, 0);
        r.fail(0);
        assert_eq!(r.failed(), None);
        r.fail(2);
        assert_eq!(r.failed(), Some(ArrayFailure::TooManyMembersFailed { level: Level::Raid5 }));
    }

    #[test]
    fn a_replacement_takes_the_role_and_retires_the_old_member_or_is_promoted_when_it_dies() {
        let mut r = raid5(3, 2);
        r.start_replacement(0, 3).unwrap();
        assert_eq!(r.start_replacement(1, 4), Err(RosterError::JobRunning));
        r.recovery_progress(3, DeviceState::Replacing { role: 0, done: 0 }, 64).unwrap();
        let round = r.superblock_round();
        assert_eq!(round.table[3], (3, DeviceRole::Spare), "a replacement is a spare on disk");
        assert_eq!(r.recovery_complete(3), Ok(Some(0)));
        assert_eq!(r.state(0), DeviceState::Faulty);
        assert_eq!(r.state(3), DeviceState::InSync(0));
        assert_eq!(r.superblock_round().order[0], 3);

        let mut r = raid5(3, 1);
        r.start_replacement(2, 3).unwrap();
        r.recovery_progress(3, DeviceState::Replacing { role: 2, done: 0 }, 128).unwrap();
        let out = r.fail(2);
        assert_eq!(out.promoted, Some(3));
        assert_eq!(r.state(3), DeviceState::Recovering { role: 2, done: 128 });
        assert_eq!(r.recovery_progress(3, DeviceState::Replacing { role: 2, done: 128 }, 256), Err(RosterError::WrongState(r.state(3))));
        assert_eq!(r.superblock_round().recovery_offsets[3], Some(128));
    }

    #[test]
    fn a_090_member_is_recorded_spare_until_its_rebuild_is_complete() {
        let devices = vec![
            RosterDevice::new(DeviceState::InSync(0), 0, false, DeviceRole::Active(0)),
            RosterDevice::new(DeviceState::Spare, 2, false, DeviceRole::Spare),
        ];
        let mut r = Roster::new(Level::Raid1, 0, 2, devices, 5).unwrap();
        assert_eq!(r.missing_roles(), vec![1]);
        assert_eq!(r.assign_spare_to_missing_role(), Some(1));
        let round = r.superblock_round();
        assert_eq!(round.table[1], (2, DeviceRole::Spare));
        assert_eq!(round.recovery_offsets[1], None);
        r.recovery_complete(1).unwrap();
        assert_eq!(r.superblock_round().table[1], (2, DeviceRole::Active(1)));
    }

    #[test]
    fn removal_takes_spares_and_faulty_devices_only() {
        let mut r = raid5(3, 1);
        assert_eq!(r.remove(0), Err(RosterError::WrongState(DeviceState::InSync(0))));
        assert_eq!(r.remove(9), Err(RosterError::NoDevice));
        r.remove(3).unwrap();
        assert_eq!(r.devices().len(), 3);
        assert_eq!(r.add_re_added(7, 1), Err(RosterError::RoleHeld(1)));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Fail(usize),
        AddSpare,
        Assign,
        Replace(usize, usize),
        Progress(usize, u64),
        Complete(usize),
        Remove(usize),
        Round,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0usize..8).prop_map(Op::Fail),
            Just(Op::AddSpare),
            Just(Op::Assign),
            (0usize..8, 0usize..8).prop_map(|(a, b)| Op::Replace(a, b)),
            (0usize..8, 0u64..1000).prop_map(|(d, n)| Op::Progress(d, n)),
            (0usize..8).prop_map(Op::Complete),
            (0usize..8).prop_map(Op::Remove),
            Just(Op::Round),
        ]
    }

    proptest! {
        /// Any sequence of transitions keeps the invariants (checked inside every call), and
        /// the model facts: events only grow; the array fails exactly when the in-sync
        /// members stop serving all data and never recovers; a written round puts role
        /// changers first and leaves faulty devices out.
        #[test]
        fn transitions_keep_the_invariants(level in prop_oneof![Just(Level::Raid1), Just(Level::Raid5), Just(Level::Raid6), Just(Level::Raid10)],
                                           spares in 0usize..3, ops in proptest::collection::vec(op(), 0..60)) {
            let members = 4;
            let layout = if level == Level::Raid10 { 0x102 } else { 2 };
            let mut devices: Vec<RosterDevice> = (0..members).map(|r| RosterDevice::new(DeviceState::InSync(r), r as u32, true, DeviceRole::Active(r as u32))).collect();
            devices.extend((0..spares).map(|s| RosterDevice::new(DeviceState::Spare, (members + s) as u32, true, DeviceRole::Spare)));
            let mut r = Roster::new(level, layout, members, devices, 1).unwrap();
            let mut next_number = 100;
            let mut events = r.events();
            let mut was_failed = false;
            for op in ops {
                let n = r.devices().len();
                match op {
                    Op::Fail(d) => { r.fail(d % n.max(1)); }
                    Op::AddSpare => { next_number += 1; r.add_spare(next_number, true); }
                    Op::Assign => { r.assign_spare_to_missing_role(); }
                    Op::Replace(a, b) if n > 0 => { let _ = r.start_replacement(a % n, b % n); }
                    Op::Progress(d, done) if n > 0 => { let s = r.state(d % n); let _ = r.recovery_progress(d % n, s, done); }
                    Op::Complete(d) if n > 0 => { let _ = r.recovery_complete(d % n); }
                    Op::Remove(d) if n > 0 => { let _ = r.remove(d % n); }
                    Op::Round => {
                        let before: Vec<DeviceRole> = r.devices().iter().map(|d| d.on_disk_role).collect();
                        let round = r.superblock_round();
                        prop_assert!(round.events > events);
                        events = round.events;
                        let changed: Vec<bool> = round.order.iter().map(|&i| before[i] != round.table[i].1).collect();
                        prop_assert!(changed.windows(2).all(|w| w[0] >= w[1]), "role changers first");
                        prop_assert!(round.order.iter().all(|&i| r.state(i) != DeviceState::Faulty));
                    }
                    _ => {}
                }
                prop_assert!(r.events() >= events);
                prop_assert_eq!(r.failed().is_some(), was_failed || !r.can_serve());
                was_failed = r.failed().is_some();
            }
        }
    }
}
