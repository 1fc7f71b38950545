//! An assembled md array: its members by role, its geometry, and the state md keeps in the
//! superblocks (events, clean/dirty, failed and recovering members).
//!
//! Reads reconstruct what a missing or failing member held; writes keep data recoverable
//! through any failure the level tolerates (see `striped.rs` for RAID4/5/6). Superblocks are
//! updated as md updates them: "active" (resync_offset 0) before the first write after a
//! clean state, "clean" again at `close`, events bumped on each change, failed members
//! recorded as faulty in every surviving member's role table.

mod bad_ranges;
pub(crate) mod bitmap;
mod driver;
mod jobs;
mod manage;
mod recovery;
mod safe_mode;
mod striped;

pub use driver::{DriverOptions, JobDriver, JobOutcome};
pub use jobs::{CheckReport, JobKind, JobPacer, JobProgress, ScrubAction, ScrubFinding, MAX_FINDINGS};
pub use manage::ReAdd;

use crate::bad_blocks::{BadBlockLog, LoggedMember};
use crate::locks::StripeLocks;
use crate::member::Member;
use crate::parallel::MemberIo;
use crate::stripe_cache::{StripeCache, DEFAULT_STRIPE_CACHE_PAGES};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use uraid_core::assemble::{assemble, AssembleOptions, Candidate, Decision, Exclusion};
use uraid_core::geometry::{ArraySpec, Geometry, Level, MemberSector, Piece, Placement, SECTOR_BYTES};
use uraid_core::metadata::{DeviceRole, MdUuid, Superblock, MAX_SECTOR};
use uraid_core::state::{Roster, RosterDevice};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{device}: no md superblock found{detail}")]
    NoSuperblock { device: String, detail: String },
    #[error("cannot assemble: {0}")]
    Refused(String),
    #[error("unsupported array: {0}")]
    Unsupported(String),
    #[error("access of {len} bytes at {offset} is beyond the array end ({size} bytes)")]
    OutOfRange { offset: u64, len: usize, size: u64 },
    #[error("data at array byte {offset} is lost: {detail}")]
    Unreadable { offset: u64, detail: String },
    #[error("array is read-only")]
    ReadOnly,
    /// A request or job could not complete: why, as a kind programs act on.
    #[error("array has failed: {0}")]
    Failed(Fault),
    /// A stripe cannot be written: more of its members are lost than the level survives.
    #[error("array has failed: {0}")]
    Plan(#[from] uraid_core::plan::PlanError),
    #[error("{0}")]
    Invalid(String),
    /// The superblocks record a reshape in progress: [`crate::reshape::ReshapingArray`] reads it.
    #[error("the array is in the middle of a reshape (at array sector {position_sectors}): finish it with `uraid grow --continue` (or mdadm --grow --continue), or read it with `uraid read`")]
    ReshapeInProgress { position_sectors: u64 },
}

/// Why a request or job failed (each kind's text says more for people).
#[derive(Debug, thiserror::Error)]
pub enum Fault {
    /// More members failed than the level survives: no more writes.
    #[error("{0}")]
    Array(uraid_core::state::ArrayFailure),
    /// A stripe's members kept failing while it was read or written (each failure failed
    /// a member; the stripe ran out of members to try).
    #[error("stripe {stripe}: members kept failing")]
    MembersKeptFailing { stripe: u64 },
    /// The same, for a degraded read of member sectors `first_sector..end_sector`.
    #[error("member sectors {first_sector}..{end_sector}: members kept failing during a degraded read")]
    WindowMembersKeptFailing { first_sector: u64, end_sector: u64 },
    /// Too few members left in a stripe to rebuild what is missing (its member sectors
    /// from `first_sector`).
    #[error("member sectors from {first_sector}: too many members missing to rebuild")]
    TooFewToRebuild { first_sector: u64 },
    /// No member holds a sector any more.
    #[error("no member holds array sector {array_sector}")]
    NoMember { array_sector: u64 },
    /// A member write failed and too few members hold those stripes to rebuild it.
    #[error("member sectors {first_sector}..{end_sector}: a write failed and too few members hold the stripes to rebuild it")]
    WriteUnprotected { first_sector: u64, end_sector: u64 },
    /// Every copy of a mirrored sector failed to write.
    #[error("every copy of array sector {array_sector} failed to write")]
    EveryCopyFailed { array_sector: u64 },
    /// A rebuild's regions could neither be read nor rebuilt (and could not be listed).
    #[error("stripes {first}..={last}: recovery could not read or rebuild them")]
    Unrebuildable { first: u64, last: u64 },
    /// The member being rebuilt failed (it is failed now).
    #[error("recovery target for role {role} failed: {error}")]
    RecoveryTargetFailed { role: usize, error: std::io::Error },
    /// The member being rebuilt changed state during the step (failed, or a replacement
    /// was promoted); the next step picks up the new state.
    #[error("recovery target for role {role} changed state during the step")]
    RecoveryTargetChanged { role: usize },
    /// Metadata a change depends on could not be written or read (`action` says which).
    #[error("{device}: {action}: {error}")]
    Metadata { device: String, action: &'static str, error: std::io::Error },
    /// A superblock round of a reshape reached too few members.
    #[error("cannot record the reshape's {what}: {detail}")]
    ReshapeRecord { what: &'static str, detail: String },
    /// An internal precondition did not hold (a bug): the request is refused, nothing is
    /// written.
    #[error("internal error: {0}")]
    Internal(&'static str),
}

impl From<Fault> for EngineError {
    fn from(f: Fault) -> EngineError {
        EngineError::Failed(f)
    }
}

/// How to open an array.
#[derive(Debug, Clone, Copy)]
pub struct ArrayOptions {
    pub assemble: AssembleOptions,
    /// Writes allowed. Devices are opened by the caller; this only gates the engine.
    pub writable: bool,
    /// md's `stripe_cache_size`: 4 KiB pages per member that stripe buffers may use.
    pub stripe_cache_pages: u64,
    /// Recovery regions rebuilt at once; 0 picks one more than the cores (2 to 4). The
    /// simulator asks for 1: its disks time faults by their own operation count, and
    /// concurrent regions would make the order of one disk's operations a thread race.
    pub recovery_lanes: usize,
    /// md's `max_read_errors`: read errors a member may have (halved per hour since the
    /// last one) before it is failed; below it, each is rewritten from redundancy.
    pub max_read_errors: u32,
}

impl Default for ArrayOptions {
    fn default() -> Self {
        ArrayOptions {
            assemble: AssembleOptions::default(),
            writable: false,
            stripe_cache_pages: DEFAULT_STRIPE_CACHE_PAGES,
            recovery_lanes: 0,
            max_read_errors: uraid_core::state::DEFAULT_MAX_READ_ERRORS,
        }
    }
}

pub use uraid_core::state::DeviceState;

/// One device and its superblock as the array keeps it.
struct Device {
    member: Arc<dyn Member>,
    /// The member as given, without the bad-block wrapper (handed on to a reshape).
    raw: Arc<dyn Member>,
    sb: Superblock,
    sb_offset: u64,
    data_offset: u64,
    /// Why this process failed the device: its kind, which programs act on (a member that
    /// was unreachable may come back), and the I/O error or request, for status.
    failure: Option<(FailureKind, String)>,
    read_errors: ReadErrorStats,
    /// The member's bad-block log; `member` is wrapped so that every read honours it.
    bad_blocks: Arc<BadBlockLog>,
}

impl Device {
    /// A device as the array keeps it: its bad-block log loaded and its member wrapped so
    /// reads of listed ranges fail and writes clear them (`bad_blocks.rs`). The error is the
    /// log's, as text: the caller says what it refuses (an assembly, an add).
    fn new(member: Arc<dyn Member>, sb: Superblock, sb_offset: u64) -> Result<Device, String> {
        let log = Arc::new(BadBlockLog::load(member.as_ref(), &sb, sb_offset)?);
        Ok(Device {
            raw: member.clone(),
            member: LoggedMember::wrap(member, log.clone()),
            data_offset: sb.data_offset_sectors() * SECTOR_BYTES,
            sb,
            sb_offset,
            failure: None,
            read_errors: ReadErrorStats::default(),
            bad_blocks: log,
        })
    }
}

/// A member's read errors while this array is open (md's `read_errors` and `errors`).
#[derive(Debug, Clone, Copy, Default)]
struct ReadErrorStats {
    /// md's decaying count, which decides when the member is failed.
    count: uraid_core::state::ReadErrorCount,
    /// Every read error seen.
    seen: u64,
    /// Ranges rewritten from redundancy and read back correctly.
    corrected: u64,
}

/// One member's share of a write batch: the member, and its (byte offset, bytes) writes.
type DeviceWrites<'a> = (&'a RoleMember, Vec<(u64, &'a [u8])>);

/// A long write takes and writes at once at least this many lock units (stripes)…
const WRITE_GROUP_UNITS: u64 = 16;
/// …and enough of them to give each member this many bytes (see [`Array::write_group_units`]).
const WRITE_GROUP_MEMBER_BYTES: u64 = 4 << 20;

/// Public view of a device, for status displays.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    pub label: String,
    pub state: DeviceState,
    pub dev_number: u32,
    /// Why the device was failed while this array was open (md prints it to the kernel log).
    pub failure: Option<String>,
    /// The kind of that failure.
    pub failure_kind: Option<FailureKind>,
    /// Read errors seen on this member while the array was open.
    pub read_errors: u64,
    /// Of those, ranges rebuilt from redundancy, rewritten and read back correctly.
    pub read_errors_corrected: u64,
    /// The member's bad-block log (absolute device sectors, as md's sysfs `bad_blocks`
    /// and `mdadm --examine-badblocks` show them).
    pub bad_blocks: Vec<uraid_core::metadata::SectorRange>,
    /// Whether the member has a bad-block log at all (without one, a failed write fails it).
    pub bad_block_log: bool,
}

/// Why a device was failed, as a kind a program can act on; the failure's text says more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The member could not be reached (its connection dropped or went silent, or writes
    /// on a dropped connection may be lost): it may come back, and be re-added.
    Unreachable,
    /// A reachable member failed I/O: a write, a read that was not a fixable bad sector, a
    /// rewrite that did not hold, a range too little redundancy was left to rebuild.
    Io,
    /// More read errors than `max_read_errors` (md's limit) in too short a time.
    TooManyReadErrors,
    /// Failed on request (`fail`), or retired by a completed hot replace.
    Requested,
}

impl FailureKind {
    /// The kind of a failed member I/O, from the error's kind (never its message).
    pub fn of_io(e: &std::io::Error) -> FailureKind {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::NotConnected | K::ConnectionAborted | K::ConnectionReset | K::ConnectionRefused | K::BrokenPipe | K::TimedOut => {
                FailureKind::Unreachable
            }
            _ => FailureKind::Io,
        }
    }
}

/// A member read that failed: whether the member still serves (the range is to be
/// rebuilt from redundancy and rewritten) or was failed.
#[derive(Debug)]
pub(crate) struct MemberReadFailure {
    pub(crate) kept: bool,
    pub(crate) detail: String,
}

/// A member serving a role on the I/O path.
#[derive(Clone)]
pub(crate) struct RoleMember {
    member: Arc<dyn Member>,
    data_offset: u64,
    device: usize,
    bad_blocks: Arc<BadBlockLog>,
}

/// Which member each role is read from and written to. A recovering member is written (so
/// it stays current behind the rebuild) but not read; so is a replacement, next to the
/// member it replaces (`replacement`).
#[derive(Clone, Default)]
pub(crate) struct IoMap {
    read: Vec<Option<RoleMember>>,
    replacement: Vec<Option<RoleMember>>,
    write: Vec<Option<RoleMember>>,
}

/// The devices: their states, roles and the events in the pure [`Roster`] (every change of
/// them a transition there), their handles and superblocks here, index for index.
struct Meta {
    roster: Roster,
    devices: Vec<Device>,
}

impl Meta {
    fn state(&self, device: usize) -> DeviceState {
        self.roster.state(device)
    }
    /// Device `device` and its state, if there is one.
    fn get(&self, device: usize) -> Option<(&Device, DeviceState)> {
        self.devices.get(device).map(|d| (d, self.roster.state(device)))
    }
    /// Each device with its state.
    fn with_states(&self) -> impl Iterator<Item = (usize, &Device, DeviceState)> {
        self.devices.iter().enumerate().map(|(i, d)| (i, d, self.roster.state(i)))
    }
    /// Attaches a device the roster has just been told about (index for index).
    fn push(&mut self, device: Device) {
        self.devices.push(device);
        debug_assert_eq!(self.devices.len(), self.roster.devices().len());
    }
}

/// What assembly did with each given device, for the user.
#[derive(Debug, Clone, Default)]
pub struct AssemblyReport {
    pub warnings: Vec<String>,
    pub degraded_roles: Vec<u32>,
    /// The array was not shut down cleanly; a resync is needed from `resync_from` sectors.
    pub needs_resync: bool,
}

/// An assembled array.
pub struct Array {
    geometry: Geometry,
    level: Level,
    size_bytes: u64,
    uuid: MdUuid,
    name: String,
    /// md layout number (raid10 tolerance depends on it).
    layout: u32,
    writable: bool,
    /// Shared, not cloned per request: every read and write takes the map, and copying its
    /// vectors (an `Arc` per member) cost a sixth of a 4 KiB random read.
    io: RwLock<Arc<IoMap>>,
    meta: Mutex<Meta>,
    /// Clean/active, writes pending, the bitmap's bits and pending bitmap writes (the pure
    /// state machine; `safe_mode.rs` drives it). Never held across I/O.
    write_state: Mutex<uraid_core::state::WriteState>,
    /// Signalled at every change of `write_state`, for writers and the clean mark waiting.
    write_state_changed: std::sync::Condvar,
    /// See [`Array::bitmap_waits`].
    bitmap_waits: AtomicU64,
    /// Member sectors below which redundancy is known consistent; MAX_SECTOR when all are.
    resync_pos: AtomicU64,
    /// When the last write finished (ms since the array was assembled), for idle marking.
    last_write_ms: AtomicU64,
    /// Reads and writes begun by users: a background job seeing it move knows the array
    /// is busy and holds itself to `speed_limit_min` ([`jobs::JobPacer`]).
    foreground_requests: AtomicU64,
    started: std::time::Instant,
    locks: StripeLocks,
    cache: StripeCache,
    /// See [`ArrayOptions::recovery_lanes`] (resolved: at least 1).
    recovery_lanes: usize,
    /// See [`ArrayOptions::max_read_errors`].
    max_read_errors: u32,
    bitmap: Mutex<Option<bitmap::BitmapState>>,
}

/// A person-readable reason for leaving a device out.
fn exclusion_text(why: &Exclusion) -> String {
    match why {
        Exclusion::Stale { events, newest_events } => format!("stale (events {events} < {newest_events})"),
        Exclusion::NewerThanArray { events, newest_events } => {
            format!("newer than the array (events {events} > {newest_events}): a stray spare or replacement")
        }
        Exclusion::ReportsNewestFailed { newest } => {
            format!("its superblock records member {newest} as failed (split brain); use --force to override")
        }
        Exclusion::RecordedFailedByNewest { newest } => {
            format!("the newest member (#{newest}) records it as failed; re-add it to rebuild it")
        }
        Exclusion::Duplicate { role, kept } => format!("another member (#{kept}) with more events claims role {role}"),
        Exclusion::DeviceTooSmall { needed_bytes, device_size_bytes } => {
            format!("device too small: {device_size_bytes} bytes, its superblock needs {needed_bytes} (truncated?)")
        }
        Exclusion::UnknownRole(r) => format!("role {r:#x} is not one md writes"),
    }
}

pub(crate) fn now_seconds() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A v1 member's superblock as the newest one (`newest`, not reshaping) says its data now
/// lies, when the member is one event behind and differs: still recording a reshape the
/// newest records finished (a crash while the final superblocks went out, each member
/// having recorded the reshape complete first: its data is in the new shape), or another
/// shape (a crash while a takeover or a size change rewrote the superblocks one by one; no
/// data moved), which md takes from the freshest superblock. `None`: as it is.
pub(crate) fn settled_behind(
    newest: &uraid_core::metadata::Superblock1,
    own: &uraid_core::metadata::Superblock1,
    dev_sectors: u64,
) -> Option<uraid_core::metadata::Superblock1> {
    match uraid_core::metadata::reshape::ReshapeState::from_superblock(own) {
        Ok(state) => Some(state.final_superblock(own, dev_sectors)),
        Err(_) => own.with_shape_of(newest, dev_sectors),
    }
}

/// This array's resync position for the superblock's `resync_offset`: the same but for
/// RAID10, whose resync md counts in array sectors (its resync walks virtual addresses)
/// while uraid's walks member rows (`Raid10Geometry::resync_row_for`: a row below which
/// md had done everything, so nothing md left is skipped).
fn resync_position_of(geometry: &Geometry, resync_offset: u64) -> u64 {
    match geometry {
        Geometry::Raid10(g) if resync_offset != MAX_SECTOR => g.resync_row_for(resync_offset),
        _ => resync_offset,
    }
}

impl Array {
    /// Probes `devices`, decides as md would which of them form the array, and builds it.
    /// Nothing is written: not even in writable mode, until the first write.
    pub fn assemble(devices: Vec<Arc<dyn Member>>, opts: &ArrayOptions) -> Result<(Array, AssemblyReport), EngineError> {
        let (probed, unreadable) = crate::scan::probe_leaving_out_unreadable(devices);
        if probed.is_empty() && !unreadable.is_empty() {
            return Err(EngineError::NoSuperblock { device: unreadable.join(", "), detail: " (it cannot be read: I/O error)".into() });
        }
        let devices: Vec<Arc<dyn Member>> = probed.iter().map(|(d, _)| d.clone()).collect();
        let mut candidates = Vec::new();
        let mut sb_offsets = Vec::new();
        for (dev, p) in &probed {
            let Some((loc, sb)) = p.best().cloned() else {
                let detail = if p.rejected.is_empty() {
                    String::new()
                } else {
                    let why: Vec<String> = p.rejected.iter().map(|(v, off, e)| format!("{v} superblock at byte {off}: {e}")).collect();
                    format!(" ({})", why.join("; "))
                };
                return Err(EngineError::NoSuperblock { device: dev.label().to_string(), detail });
            };
            sb_offsets.push(loc.offset_bytes);
            candidates.push(Candidate { label: dev.label().to_string(), superblock: sb, device_size_bytes: dev.size_bytes() });
        }
        // Members one event behind (a crash while a superblock round went out) are taken
        // with the newest state; a writable array writes that state to them at once, so
        // that losing the fresh member later does not leave their stale word (a dirty
        // mark the fresh one had already cleared) to decide the array's state.
        let newest_events = candidates.iter().map(|c| c.superblock.events()).max().unwrap_or(0);
        let members_behind = candidates.iter().any(|c| c.superblock.events() + 1 == newest_events);
        // A reshape in progress is refused by the assembler below as unsupported; say so
        // as a type, so a reader can open it as a reshape view instead.
        let newest = candidates.iter().map(|c| &c.superblock).max_by_key(|sb| sb.events());
        if let Some(position_sectors) = newest.and_then(Superblock::reshape_position_sectors) {
            return Err(EngineError::ReshapeInProgress { position_sectors });
        }
        let newest_090 = match newest {
            Some(Superblock::V090(sb)) => Some((sb.events, sb.set_uuid)),
            _ => None,
        };
        if let Some(Superblock::V1(sb)) = newest {
            let (newest_events, uuid) = (sb.events, sb.set_uuid);
            // The newest superblock says the reshape is over; a member one event behind
            // that still records it (a crash while the final superblocks went out, each
            // member having recorded the reshape complete first) holds its data in the
            // new shape: read it as its final superblock says.
            //
            // Likewise a member one event behind whose shape differs (a crash while a
            // takeover or a size change rewrote the superblocks one by one; no data moved)
            // takes the newest shape, as md takes it from the freshest superblock.
            let newest = sb.clone();
            for c in candidates.iter_mut() {
                if let Superblock::V1(own) = &c.superblock {
                    if own.set_uuid == uuid && own.events + 1 >= newest_events {
                        if let Some(settled) = settled_behind(&newest, own, c.device_size_bytes / SECTOR_BYTES) {
                            c.superblock = Superblock::V1(settled);
                        }
                    }
                }
            }
        }
        if let Some((newest_events, uuid)) = newest_090 {
            // The same for 0.90: a member one event behind still recording the reshape
            // (0.91) that the newest records finished.
            for c in candidates.iter_mut() {
                if let Superblock::V090(own) = &c.superblock {
                    if own.set_uuid == uuid && own.events + 1 >= newest_events {
                        if let Some(done) = own.finished_reshape() {
                            c.superblock = Superblock::V090(done);
                        }
                    }
                }
            }
        }
        let assembly = assemble(&candidates, &opts.assemble);
        let plan = match (&assembly.decision, assembly.plan) {
            (Decision::Refuse { reason }, plan) => {
                // Say which devices were left out and why: often that is the real cause.
                let left_out: Vec<String> = plan
                    .iter()
                    .flat_map(|p| p.excluded.iter())
                    .map(|(i, why)| format!("{}: {}", candidates[*i].label, exclusion_text(why)))
                    .collect();
                let detail = if left_out.is_empty() { String::new() } else { format!(" [left out: {}]", left_out.join("; ")) };
                return Err(EngineError::Refused(format!("{reason}{detail}")));
            }
            (_, Some(plan)) => plan,
            (_, None) => return Err(EngineError::Refused("no array found among the devices".into())),
        };
        let mut report = AssemblyReport { degraded_roles: plan.missing_roles.clone(), ..Default::default() };
        report.warnings.extend(unreadable.iter().map(|label| format!("{label}: left out: its superblock cannot be read (I/O error)")));
        for (idx, why) in &plan.excluded {
            report.warnings.push(format!("{}: {}; its data is not used", candidates[*idx].label, exclusion_text(why)));
        }
        for c in &candidates {
            if c.superblock.array_uuid() != plan.uuid {
                report.warnings.push(format!("{}: belongs to another array ({}); left out", c.label, c.superblock.array_uuid()));
            }
        }
        let newest = candidates[plan.newest].superblock.clone();
        if newest.reshape_active() {
            return Err(EngineError::Unsupported(
                "a reshape is in progress; finish it in Linux md first (uraid does not yet read mid-reshape arrays)".into(),
            ));
        }
        let shape = plan.shape;
        let level = Level::from_md(shape.level.raw()).map_err(|e| EngineError::Unsupported(e.to_string()))?;
        let raid_disks = shape.raid_disks as usize;
        let member_sectors: Vec<u64> = match level {
            Level::Linear | Level::Raid0 => (0..raid_disks)
                .map(|role| {
                    plan.members[role]
                        .map(|i| candidates[i].superblock.member_data_size_sectors(candidates[i].device_size_bytes))
                        .ok_or_else(|| EngineError::Refused(format!("{level} member for role {role} is missing")))
                })
                .collect::<Result<_, _>>()?,
            _ => vec![shape.component_size_sectors; raid_disks],
        };
        let spec = ArraySpec { level, layout: shape.layout, chunk_sectors: shape.chunk_sectors, raid_disks, member_sectors };
        let geometry = Geometry::new(&spec).map_err(|e| EngineError::Unsupported(e.to_string()))?;

        // Devices the array keeps: in-sync members, recovering members and spares. Stale,
        // faulty and foreign devices are never written.
        let mut kept: Vec<Device> = Vec::new();
        let mut roster_devices: Vec<RosterDevice> = Vec::new();
        let mut push = |i: usize, state: DeviceState| -> Result<(), EngineError> {
            let sb = &candidates[i].superblock;
            roster_devices.push(RosterDevice::new(state, sb.dev_number(), matches!(sb, Superblock::V1(_)), sb.role()));
            kept.push(Device::new(devices[i].clone(), sb.clone(), sb_offsets[i]).map_err(EngineError::Refused)?);
            Ok(())
        };
        let rebuilding: Vec<(usize, u64)> = plan.rebuilding.iter().map(|r| (r.member, r.recovered_sectors)).collect();
        for (role, m) in plan.members.iter().enumerate() {
            if let Some(i) = m {
                match rebuilding.iter().find(|(member, _)| member == i) {
                    Some((_, done)) => push(*i, DeviceState::Recovering { role, done: *done })?,
                    None => push(*i, DeviceState::InSync(role))?,
                }
            }
        }
        for r in &plan.rebuilding {
            if !plan.members.contains(&Some(r.member)) {
                push(r.member, DeviceState::Recovering { role: r.role as usize, done: r.recovered_sectors })?;
                report.warnings.push(format!("{}: partly rebuilt; reads of its role use the other members", candidates[r.member].label));
            }
        }
        for &i in &plan.spares {
            push(i, DeviceState::Spare)?;
        }
        let roster = Roster::new(level, shape.layout, raid_disks, roster_devices, plan.events)
            .map_err(|why| EngineError::Refused(format!("the superblocks describe an impossible set of members: {why}")))?;
        let clean = newest.is_clean();
        let resync_from = match &newest {
            Superblock::V1(sb) => sb.resync_offset_sectors,
            Superblock::V090(sb) => {
                if sb.is_clean() {
                    MAX_SECTOR
                } else {
                    0
                }
            }
        };
        report.needs_resync = !clean && level.has_redundancy();
        for role in 0..raid_disks {
            let served = roster.devices().iter().any(|d| d.state == DeviceState::InSync(role));
            if !served && !report.degraded_roles.contains(&(role as u32)) {
                report.degraded_roles.push(role as u32);
            }
        }
        let cache = StripeCache::new(opts.stripe_cache_pages, raid_disks);
        let bitmap_state = match plan.members.iter().flatten().next() {
            None => None,
            Some(&i) => match bitmap::load(devices[i].as_ref(), &candidates[plan.newest].superblock, sb_offsets[i]) {
                Ok(loaded) => loaded,
                // Refused unless forced: without its bitmap the array would run with no
                // record of where writes were in flight. With --force it runs without one
                // and, if it was not clean, resyncs everything (what md does with no bitmap).
                Err(why) if opts.assemble.force => {
                    report.warnings.push(format!("{}: the write-intent bitmap is unreadable ({why}); running without it (--force)", devices[i].label()));
                    None
                }
                Err(why) => {
                    return Err(EngineError::Refused(format!(
                        "{}: the write-intent bitmap is unreadable ({why}); use --force to run without it (a full resync if the array is not clean)",
                        devices[i].label()
                    )))
                }
            },
        };
        // The bitmap is written on every kept device at its own superblock's offset, with
        // the length of the bitmap read from the first member: each device's room must hold
        // that much, or a crafted superblock could steer bitmap bits into its data area.
        if let Some((state, _)) = &bitmap_state {
            for d in &kept {
                if let Err(problem) = uraid_core::metadata::check::check_bitmap(&d.sb, d.member.size_bytes(), &state.sb) {
                    return Err(EngineError::Refused(format!(
                        "{}: its superblock leaves no room for the array's write-intent bitmap ({problem}); leave it out",
                        d.member.label()
                    )));
                }
            }
        }
        let name = match &newest {
            Superblock::V1(sb) => {
                let end = sb.set_name.iter().position(|&b| b == 0).unwrap_or(sb.set_name.len());
                String::from_utf8_lossy(&sb.set_name[..end]).into_owned()
            }
            Superblock::V090(_) => plan.uuid.to_string(),
        };
        let resync_pos = if level.has_redundancy() { resync_position_of(&geometry, resync_from) } else { MAX_SECTOR };
        let array = Array {
            size_bytes: geometry.array_sectors() * SECTOR_BYTES,
            geometry,
            level,
            uuid: plan.uuid,
            name,
            layout: shape.layout,
            writable: opts.writable,
            io: RwLock::new(Arc::new(IoMap::default())),
            meta: Mutex::new(Meta { roster, devices: kept }),
            // Starts clean even when assembled dirty: the first write re-marks "active" (a
            // no-op on disk) and a resync covers the rest.
            write_state: Mutex::new(uraid_core::state::WriteState::new(false, bitmap_state.as_ref().map(|(_, bits)| bits.clone()))),
            write_state_changed: std::sync::Condvar::new(),
            bitmap_waits: AtomicU64::new(0),
            resync_pos: AtomicU64::new(resync_pos),
            last_write_ms: AtomicU64::new(0),
            foreground_requests: AtomicU64::new(0),
            started: std::time::Instant::now(),
            locks: StripeLocks::default(),
            cache,
            recovery_lanes: if opts.recovery_lanes == 0 { recovery::default_lanes() } else { opts.recovery_lanes },
            max_read_errors: opts.max_read_errors,
            bitmap: Mutex::new(bitmap_state.map(|(state, _)| state)),
        };
        array.rebuild_io_map(&array.lock_meta());
        if array.writable && members_behind {
            let mut meta = array.lock_meta();
            array.persist(&mut meta, array.resync_pos.load(Ordering::Acquire));
        }
        Ok((array, report))
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    pub fn uuid(&self) -> MdUuid {
        self.uuid
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn level(&self) -> Level {
        self.level
    }
    /// md's layout number.
    pub fn layout(&self) -> u32 {
        self.layout
    }
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }
    pub fn events(&self) -> u64 {
        self.lock_meta().roster.events()
    }
    pub fn is_writable(&self) -> bool {
        self.writable
    }
    /// Member sectors below which redundancy is in sync (MAX_SECTOR: all).
    /// How many reads and writes users have begun (a counter; background jobs compare
    /// readings to tell whether the array is busy).
    pub fn foreground_requests(&self) -> u64 {
        self.foreground_requests.load(Ordering::Relaxed)
    }

    pub fn resync_position(&self) -> u64 {
        self.resync_pos.load(Ordering::Acquire)
    }
    pub fn devices(&self) -> Vec<DeviceInfo> {
        self.lock_meta()
            .with_states()
            .map(|(_, d, state)| DeviceInfo {
                label: d.member.label().to_string(),
                state,
                dev_number: d.sb.dev_number(),
                failure: d.failure.as_ref().map(|(_, why)| why.clone()),
                failure_kind: d.failure.as_ref().map(|(kind, _)| *kind),
                read_errors: d.read_errors.seen,
                read_errors_corrected: d.read_errors.corrected,
                bad_blocks: d.bad_blocks.ranges(),
                bad_block_log: d.bad_blocks.has_area(),
            })
            .collect()
    }
    /// Roles with no in-sync member.
    /// The devices in use (members, rebuilding members and spares; not failed ones), as
    /// they were given: what a reshape of this array takes over.
    pub fn device_handles(&self) -> Vec<Arc<dyn Member>> {
        self.lock_meta().with_states().filter(|(_, _, s)| *s != DeviceState::Faulty).map(|(_, d, _)| d.raw.clone()).collect()
    }

    pub fn missing_roles(&self) -> Vec<usize> {
        let io = self.io_map();
        (0..io.read.len()).filter(|r| io.read[*r].is_none()).collect()
    }
    pub fn failure(&self) -> Option<String> {
        self.lock_meta().roster.failed().map(|f| f.to_string())
    }

    fn lock_meta(&self) -> MutexGuard<'_, Meta> {
        self.meta.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn io_map(&self) -> Arc<IoMap> {
        self.io.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn rebuild_io_map(&self, meta: &Meta) {
        let n = self.geometry.raid_disks();
        let mut map = IoMap { read: vec![None; n], replacement: vec![None; n], write: vec![None; n] };
        for (i, d, state) in meta.with_states() {
            let rm = RoleMember { member: d.member.clone(), data_offset: d.data_offset, device: i, bad_blocks: d.bad_blocks.clone() };
            match state {
                DeviceState::InSync(role) if role < n => {
                    map.read[role] = Some(rm.clone());
                    map.write[role] = Some(rm);
                }
                DeviceState::Recovering { role, .. } if role < n => map.write[role] = Some(rm),
                DeviceState::Replacing { role, .. } if role < n => map.replacement[role] = Some(rm),
                _ => {}
            }
        }
        // Under `meta`, as every change of the devices: a clean mark decides whether to clear
        // the bitmap under `meta` too, so it never clears them once a role has gone missing.
        let degraded = self.level.has_redundancy() && map.read.iter().any(|r| r.is_none());
        self.lock_write_state().set_degraded(degraded);
        *self.io.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(map);
    }

    // ---------------------------------------------------------------- superblock state

    /// Writes every kept device's superblock with the current state, events bumped once, then
    /// flushes them. A device that cannot be written is failed (and the round repeated).
    /// The bitmap's bits are left as they are; only the clean mark clears them
    /// ([`Array::persist_clearing_bits`]).
    /// The superblock's `resync_offset` for a resync done below `position` (this array's
    /// resync position): the same number but for RAID10, where md counts array sectors.
    pub(super) fn md_resync_offset(&self, position: u64) -> u64 {
        match &self.geometry {
            Geometry::Raid10(g) if position != 0 && position != MAX_SECTOR => g.resync_array_sector_for(position),
            _ => position,
        }
    }

    fn persist(&self, meta: &mut Meta, resync_offset: u64) {
        self.persist_clearing_bits(meta, resync_offset, false)
    }

    /// [`Array::persist`]; with `clear_bits`, the bitmap's bits are written cleared and its
    /// `events_cleared` set to the new events (the clean mark of an array in sync with every
    /// member, every write flushed).
    fn persist_clearing_bits(&self, meta: &mut Meta, resync_offset: u64, clear_bits: bool) {
        for _ in 0..meta.devices.len() + 1 {
            // The roster says what every superblock records and in which order they go out
            // (devices whose own role changes first: see `SuperblockRound::order`).
            let round = meta.roster.superblock_round();
            let now = now_seconds();
            self.bitmap_sync_events(meta, round.events, clear_bits);
            let roles: Vec<DeviceRole> = round.table.iter().map(|(_, r)| *r).collect();
            let mut logs: Vec<Option<crate::bad_blocks::LogWrite>> = (0..meta.devices.len()).map(|_| None).collect();
            for &i in &round.order {
                let d = &mut meta.devices[i];
                match d.sb {
                    Superblock::V1(_) => d.sb.set_role_table(&round.table),
                    Superblock::V090(_) => d.sb.set_role_table_090(&roles, i),
                }
                d.sb.set_recovery_offset(round.recovery_offsets[i]);
                // md's super_1_sync: BAD_BLOCKS set exactly while the list has entries, and
                // a changed list written with the superblock (here: before it, so a
                // superblock never points at a log older than itself). Before the state
                // update, which computes the checksum (the concurrent simulator found a
                // superblock written with the bit changed after it: seed 292).
                logs[i] = d.bad_blocks.prepare_update(&mut d.sb);
                d.sb.set_array_state(round.events, self.md_resync_offset(resync_offset), now);
            }
            let mut newly_failed = Vec::new();
            for &i in &round.order {
                let d = &meta.devices[i];
                let bytes = superblock_bytes(&d.sb);
                // The log is flushed before the superblock that points at it is written: a
                // crash between them must never leave BAD_BLOCKS set over a log that is not
                // on disk (the simulator tore one: seed 292, a zero entry refused at restart).
                let log = logs[i].as_ref().map_or(Ok(()), |l| d.member.write_at(&l.bytes, l.offset).and_then(|_| d.member.flush()));
                if log.and_then(|_| d.member.write_at(&bytes, d.sb_offset)).and_then(|_| d.member.flush()).is_err() {
                    newly_failed.push(i);
                } else if let Some(l) = &logs[i] {
                    d.bad_blocks.written(l);
                }
            }
            if newly_failed.is_empty() {
                return;
            }
            for i in newly_failed {
                self.mark_faulty_locked(meta, i);
            }
        }
    }

    /// Makes every acknowledged write durable on every member.
    pub fn flush(&self) -> Result<(), EngineError> {
        let io = self.io_map();
        let mut failed = Vec::new();
        for rm in io.write.iter().chain(&io.replacement).flatten() {
            if let Err(e) = rm.member.flush() {
                failed.push((rm.device, format!("flush: {e}"), e));
            }
        }
        for (dev, why, e) in failed {
            self.fail_device_io(dev, &e, &why);
        }
        self.check_alive()
    }

    /// Stops using the array: flush, mark clean.
    pub fn close(&self) -> Result<(), EngineError> {
        if self.writable {
            self.mark_clean()
        } else {
            Ok(())
        }
    }

    fn check_alive(&self) -> Result<(), EngineError> {
        match self.lock_meta().roster.failed() {
            Some(why) => Err(Fault::Array(why).into()),
            None => Ok(()),
        }
    }

    // ---------------------------------------------------------------- failures

    /// Fails device `device` (an index into the kept devices): it is recorded faulty in the
    /// other members' superblocks and no longer used. A hot spare, if any, is assigned the
    /// role (the caller's recovery job rebuilds it).
    pub(crate) fn fail_device(&self, device: usize, why: &str) {
        self.fail_device_as(device, FailureKind::Io, why)
    }

    /// [`Array::fail_device`] for a member I/O that failed with `error`.
    pub(crate) fn fail_device_io(&self, device: usize, error: &std::io::Error, why: &str) {
        self.fail_device_as(device, FailureKind::of_io(error), why)
    }

    /// [`Array::fail_device`], recording the kind of the failure.
    pub(crate) fn fail_device_as(&self, device: usize, kind: FailureKind, why: &str) {
        let mut meta = self.lock_meta();
        if device >= meta.devices.len() || meta.state(device) == DeviceState::Faulty {
            return;
        }
        meta.devices[device].failure = Some((kind, why.to_string()));
        self.mark_faulty_locked(&mut meta, device);
        if self.writable {
            let resync = self.resync_offset_for_superblock();
            self.persist(&mut meta, resync);
        }
    }

    /// The roster's [`Roster::fail`] (a replacement promoted, else a spare given the role),
    /// and the I/O path follows.
    fn mark_faulty_locked(&self, meta: &mut Meta, device: usize) {
        meta.roster.fail(device);
        self.rebuild_io_map(meta);
    }

    /// Fails the member serving `role` (as `mdadm --fail`).
    pub fn fail_role(&self, role: usize) -> Result<(), EngineError> {
        let dev = self.io_map().write.get(role).cloned().flatten().map(|rm| rm.device);
        match dev {
            Some(d) => {
                self.fail_device(d, "failed by request");
                Ok(())
            }
            None => Err(EngineError::Invalid(format!("role {role} has no member to fail"))),
        }
    }

    // ---------------------------------------------------------------- reads

    /// Reads `buf.len()` bytes at array byte `offset` (any alignment).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), EngineError> {
        self.check_range(offset, buf.len())?;
        self.foreground_requests.fetch_add(1, Ordering::Relaxed);
        if buf.is_empty() {
            return Ok(());
        }
        self.with_sector_span(offset, buf.len(), |first_sector, aligned| self.read_sectors(first_sector, aligned, false), buf)
    }

    fn check_range(&self, offset: u64, len: usize) -> Result<(), EngineError> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.size_bytes => Ok(()),
            _ => Err(EngineError::OutOfRange { offset, len, size: self.size_bytes }),
        }
    }

    /// Runs `f` over the whole sectors covering `offset..offset+len`, using `buf` directly
    /// when it is sector-aligned and a scratch buffer otherwise.
    fn with_sector_span(
        &self,
        offset: u64,
        len: usize,
        f: impl FnOnce(u64, &mut [u8]) -> Result<(), EngineError>,
        buf: &mut [u8],
    ) -> Result<(), EngineError> {
        let first = offset / SECTOR_BYTES;
        let end = (offset + len as u64).div_ceil(SECTOR_BYTES);
        let lead = (offset - first * SECTOR_BYTES) as usize;
        if lead == 0 && len.is_multiple_of(SECTOR_BYTES as usize) {
            return f(first, buf);
        }
        let mut scratch = vec![0u8; ((end - first) * SECTOR_BYTES) as usize];
        f(first, &mut scratch)?;
        buf.copy_from_slice(&scratch[lead..lead + len]);
        Ok(())
    }

    /// Reads whole sectors. `locks_held`: the caller already holds the stripe locks of the
    /// span (a write merging partial sectors, a job), so degraded reads must not take them.
    pub(crate) fn read_sectors(&self, first_sector: u64, out: &mut [u8], locks_held: bool) -> Result<(), EngineError> {
        let sectors = out.len() as u64 / SECTOR_BYTES;
        let pieces = self
            .geometry
            .split(first_sector, sectors)
            .map_err(|e| EngineError::Unreadable { offset: first_sector * SECTOR_BYTES, detail: e.to_string() })?;
        if self.geometry.as_parity().is_some() {
            return self.read_striped_pieces(&pieces, out, locks_held);
        }
        // Fast path: every piece from its single member or first present copy, batched per
        // member; any failure (a member fails, or a piece has no present copy) falls back to
        // piece by piece, which tries the other copies.
        let io = self.io_map();
        let present: Vec<bool> = io.read.iter().map(Option::is_some).collect();
        let mut counted = Vec::new();
        if let Ok(plan) = uraid_core::plan::simple::plan_read(&pieces, &present) {
            let targets: Vec<(usize, u64, u64)> = plan.iter().map(|r| (r.role, r.sector, r.sectors)).collect();
            match self.read_batched(&io, &targets, out) {
                Ok(()) => return Ok(()),
                Err(kept) => counted = kept,
            }
        }
        // Piece by piece under the span's locks: a copy that failed its read is rewritten
        // from another one, and no write may land between that read and the rewrite.
        let _guard = (!locks_held).then(|| {
            let (lo, hi) = self.lock_span(first_sector, sectors);
            self.locks.lock(lo, hi)
        });
        let mut at = 0usize;
        for piece in pieces {
            let len = (piece.sectors * SECTOR_BYTES) as usize;
            self.read_simple(&piece.placement, piece.array_sector, &mut out[at..at + len], &counted)?;
            at += len;
        }
        Ok(())
    }

    /// Reads one member range; on failure the member is failed and the error returned.
    pub(crate) fn read_member(&self, io: &IoMap, ms: MemberSector, out: &mut [u8]) -> Result<(), String> {
        match io.read.get(ms.role).and_then(|r| r.as_ref()) {
            None => Err(format!("role {} is missing", ms.role)),
            Some(r) => match r.member.read_at(out, r.data_offset + ms.sector * SECTOR_BYTES) {
                Ok(()) => Ok(()),
                // A listed bad range: the member stays; the caller rebuilds or reports it.
                Err(e) if crate::bad_blocks::is_listed(&e) => Err(format!("{}: {e}", r.member.label())),
                Err(e) => {
                    // Failed in memory either way (so reads reconstruct around it); only a
                    // writable array records it in the superblocks.
                    let msg = format!("{}: {e}", r.member.label());
                    self.fail_device(r.device, &msg);
                    Err(msg)
                }
            },
        }
    }

    /// Counts a read error on `device` (md's `fix_read_error` path); an error that is not a
    /// medium error ([`crate::member::is_medium_error`]) fails the member at once. True: the member
    /// stays, and the caller rebuilds the range from redundancy and, on a writable array,
    /// rewrites it ([`Array::rewrite_unreadable`]). False: the member was failed, having
    /// passed `max_read_errors`, or it is not serving.
    pub(crate) fn read_error_keeps_member(&self, device: usize, why: &str, error: &std::io::Error) -> bool {
        if crate::bad_blocks::is_listed(error) {
            // Known bad, not a new error: md neither counts it nor fails the member.
            let meta = self.lock_meta();
            return device < meta.devices.len() && meta.state(device) != DeviceState::Faulty;
        }
        if !crate::member::is_medium_error(error) {
            self.fail_device_io(device, error, why);
            return false;
        }
        let mut meta = self.lock_meta();
        let now = self.started.elapsed().as_secs();
        if device >= meta.devices.len() || meta.state(device) == DeviceState::Faulty {
            return false;
        }
        let d = &mut meta.devices[device];
        d.read_errors.seen += 1;
        let verdict = d.read_errors.count.record(now, self.max_read_errors);
        let count = d.read_errors.count.count();
        drop(meta);
        match verdict {
            uraid_core::state::ReadErrorVerdict::Rewrite => true,
            uraid_core::state::ReadErrorVerdict::Fail => {
                let limit = self.max_read_errors;
                self.fail_device_as(
                    device,
                    FailureKind::TooManyReadErrors,
                    &format!("{why}; {count} read errors, more than max_read_errors ({limit})"),
                );
                false
            }
        }
    }

    /// Writes `data`, rebuilt from redundancy, over member sectors that failed a read,
    /// then reads them back (md's `fix_read_error`): a disk remaps a bad sector when it is
    /// written. If the rewrite or the re-read fails, or reads back other bytes, the member
    /// is failed, as md fails it, unless its bad-block log can list the range (then it
    /// stays, the range listed). Read-only arrays leave the member as it is. True when the
    /// range now reads back right. The caller holds the stripe locks of the range, so no
    /// write races the rewrite.
    pub(crate) fn rewrite_unreadable(&self, rm: &RoleMember, sector: u64, data: &[u8]) -> bool {
        if !self.writable {
            return false;
        }
        let offset = rm.data_offset + sector * SECTOR_BYTES;
        let mut back = vec![0u8; data.len()];
        let outcome = rm.member.write_at(data, offset).and_then(|()| rm.member.read_at(&mut back, offset));
        match outcome {
            Ok(()) if back == data => {
                let mut meta = self.lock_meta();
                if let Some(d) = meta.devices.get_mut(rm.device) {
                    d.read_errors.corrected += 1;
                }
                return true;
            }
            // With a bad-block log the range is listed and the member stays (md's
            // fix_read_error records a bad block when the rewrite does not hold).
            Ok(()) | Err(_) if self.record_bad_ranges(rm.device, &[rm.absolute(sector, data.len())]) => {}
            Ok(()) => self.fail_device(rm.device, &format!("sector {sector} read back wrong after rewriting a read error")),
            Err(e) => self.fail_device(rm.device, &format!("rewriting a read error at sector {sector}: {e}")),
        }
        false
    }

    /// [`Array::rewrite_unreadable`] for a block rebuilt from parity over `sector..`: only
    /// the 4 KiB pieces that still fail to read are rewritten, as md rebuilds and rewrites
    /// only the failing page of a stripe. The pieces that read are left as they are: in a
    /// stripe whose parity may be stale (an unclean shutdown, before its resync) the
    /// rebuilt copy of a readable sector could be wrong, and writing it would destroy a
    /// good sector. Returns whether every failing piece was rewritten.
    pub(crate) fn rewrite_unreadable_pieces(&self, rm: &RoleMember, sector: u64, data: &[u8]) -> bool {
        let piece = 8 * SECTOR_BYTES as usize;
        let end = sector + (data.len() as u64) / SECTOR_BYTES;
        let mut at = sector;
        let mut all = true;
        let mut probe = vec![0u8; piece];
        while at < end {
            let next = ((at / 8) + 1) * 8;
            let next = next.min(end);
            let (from, to) = (((at - sector) * SECTOR_BYTES) as usize, ((next - sector) * SECTOR_BYTES) as usize);
            let buf = &mut probe[..to - from];
            if rm.member.read_at(buf, rm.data_offset + at * SECTOR_BYTES).is_err() {
                all &= self.rewrite_unreadable(rm, at, &data[from..to]);
            }
            at = next;
        }
        all
    }

    /// [`Array::read_member`] for callers that rebuild around a bad range: a read error that
    /// leaves the member serving (below `max_read_errors`) is reported with `kept`.
    /// `counted`: this request's error on the member was counted already (a batched read
    /// failed, and this is the retry piece by piece); one request counts once, as md counts
    /// one failed bio.
    pub(crate) fn read_member_keeping(&self, io: &IoMap, ms: MemberSector, out: &mut [u8], counted: bool) -> Result<(), MemberReadFailure> {
        let Some(r) = io.read.get(ms.role).and_then(|r| r.as_ref()) else {
            return Err(MemberReadFailure { kept: false, detail: format!("role {} is missing", ms.role) });
        };
        r.member.read_at(out, r.data_offset + ms.sector * SECTOR_BYTES).map_err(|e| {
            let detail = format!("{}: read at sector {}: {e}", r.member.label(), ms.sector);
            MemberReadFailure { kept: counted || self.read_error_keeps_member(r.device, &detail, &e), detail }
        })
    }

    /// One piece of a linear, RAID0 or mirrored array. `counted`: roles whose read error in
    /// this request was counted already.
    fn read_simple(&self, placement: &Placement, array_sector: u64, out: &mut [u8], counted: &[usize]) -> Result<(), EngineError> {
        let lost = |detail: String| EngineError::Unreadable { offset: array_sector * SECTOR_BYTES, detail };
        let io = self.io_map();
        match placement {
            Placement::Single(ms) => self.read_member(&io, *ms, out).map_err(lost),
            Placement::Mirrored(copies) => {
                // Copies that failed the read but still serve get the good copy written
                // back (md raid1's fix_read_error); the caller holds the range's locks.
                let mut errors = Vec::new();
                let mut unreadable: Vec<MemberSector> = Vec::new();
                for ms in copies {
                    match self.read_member_keeping(&io, *ms, out, counted.contains(&ms.role)) {
                        Ok(()) => {
                            for bad in unreadable {
                                if let Some(rm) = io.read.get(bad.role).and_then(Option::as_ref) {
                                    let _ = self.rewrite_unreadable(rm, bad.sector, out);
                                }
                            }
                            return Ok(());
                        }
                        Err(f) => {
                            if f.kept {
                                unreadable.push(*ms);
                            }
                            errors.push(f.detail);
                        }
                    }
                }
                Err(lost(format!("no copy readable: {}", errors.join("; "))))
            }
            Placement::Striped(_) => unreachable!("striped pieces are read by read_striped"),
        }
    }

    // ---------------------------------------------------------------- writes

    /// Writes `data` at array byte `offset`. Sub-sector edges are read, merged and written
    /// back under the same stripe locks.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), EngineError> {
        self.check_range(offset, data.len())?;
        self.foreground_requests.fetch_add(1, Ordering::Relaxed);
        if data.is_empty() {
            return Ok(());
        }
        // Begun before anything else (md's md_write_start): a clean mark cannot run between
        // the "already active" check and the data write.
        let _write = self.begin_write()?;
        self.check_alive()?;
        let first = offset / SECTOR_BYTES;
        self.bitmap_prepare_write(first, (offset + data.len() as u64).div_ceil(SECTOR_BYTES) - first);
        self.write_aligned_or_merged(offset, data)
    }

    fn write_aligned_or_merged(&self, offset: u64, data: &[u8]) -> Result<(), EngineError> {
        let first = offset / SECTOR_BYTES;
        let end = (offset + data.len() as u64).div_ceil(SECTOR_BYTES);
        let lead = (offset - first * SECTOR_BYTES) as usize;
        if lead == 0 && data.len().is_multiple_of(SECTOR_BYTES as usize) {
            return self.write_sectors(first, data);
        }
        // Partial sectors: lock the span, read-merge-write.
        let (lo, hi) = self.lock_span(first, end - first);
        let _g = self.locks.lock(lo, hi);
        let mut merged = vec![0u8; ((end - first) * SECTOR_BYTES) as usize];
        self.read_sectors(first, &mut merged, true)?;
        merged[lead..lead + data.len()].copy_from_slice(data);
        self.write_sectors_locked(first, &merged)
    }

    /// Zeroes a byte range (TRIM / WRITE_ZEROES): md has no discard of its own for parity
    /// levels that keeps parity right, so zeros are written.
    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), EngineError> {
        let chunk = 1u64 << 20;
        let zeros = vec![0u8; chunk.min(len) as usize];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk) as usize;
            self.write(offset + done, &zeros[..n])?;
            done += n as u64;
        }
        Ok(())
    }

    /// TRIM/discard: afterwards the range reads as zeros. On levels without parity the
    /// members' ranges are discarded themselves (files get holes punched; mirrors stay equal
    /// because every copy is discarded); on RAID4/5/6 a member discard would break parity,
    /// so zeros are written through the array.
    pub fn discard(&self, offset: u64, len: u64) -> Result<(), EngineError> {
        if self.geometry.as_parity().is_some() {
            return self.write_zeroes(offset, len);
        }
        self.check_range(offset, usize::try_from(len).unwrap_or(usize::MAX))?;
        if len == 0 {
            return Ok(());
        }
        // Sub-sector edges are zeroed through the normal write path.
        let first = offset.div_ceil(SECTOR_BYTES);
        let end = (offset + len) / SECTOR_BYTES;
        if end <= first {
            return self.write_zeroes(offset, len);
        }
        if offset < first * SECTOR_BYTES {
            self.write_zeroes(offset, first * SECTOR_BYTES - offset)?;
        }
        if (offset + len) > end * SECTOR_BYTES {
            self.write_zeroes(end * SECTOR_BYTES, offset + len - end * SECTOR_BYTES)?;
        }
        let _write = self.begin_write()?;
        self.check_alive()?;
        self.bitmap_prepare_write(first, end - first);
        let (lo, hi) = self.lock_span(first, end - first);
        let _g = self.locks.lock(lo, hi);
        let pieces = self.geometry.split(first, end - first).map_err(|e| EngineError::Invalid(e.to_string()))?;
        let io = self.io_map();
        for piece in pieces {
            let targets: Vec<MemberSector> = match &piece.placement {
                Placement::Single(ms) => vec![*ms],
                Placement::Mirrored(c) => c.clone(),
                Placement::Striped(_) => unreachable!("parity levels write zeros above"),
            };
            for ms in targets {
                for rm in io.writers(ms.role) {
                    if let Err(e) = rm.member.discard(rm.data_offset + ms.sector * SECTOR_BYTES, piece.sectors * SECTOR_BYTES) {
                        self.fail_device(rm.device, &e.to_string());
                    }
                }
            }
        }
        self.check_alive()
    }

    /// Lock keys covering array sectors `first..first+sectors`.
    fn lock_span(&self, first: u64, sectors: u64) -> (u64, u64) {
        let unit = self.lock_unit_sectors();
        (first / unit, (first + sectors.max(1) - 1) / unit)
    }

    /// Lock units a long write takes at once: 16, or enough to give each member
    /// [`WRITE_GROUP_MEMBER_BYTES`] (a group waits for its slowest member before the next
    /// starts, so each member needs a long run per group: a 10-disk RAID0 with 16 units of
    /// 1 MiB gave each disk 1.6 MiB and wrote at 0.54 of its bound on emulated disks).
    fn write_group_units(&self) -> u64 {
        let per_member_bytes = match self.geometry.as_parity() {
            Some(p) => p.chunk_sectors() * SECTOR_BYTES,
            None => {
                let sharing = match self.level {
                    Level::Raid0 | Level::Linear => self.geometry.raid_disks() as u64,
                    Level::Raid10 => (self.geometry.raid_disks() as u64 / 2).max(1),
                    _ => 1,
                };
                self.lock_unit_sectors() * SECTOR_BYTES / sharing
            }
        };
        WRITE_GROUP_UNITS.max(WRITE_GROUP_MEMBER_BYTES / per_member_bytes.max(1))
    }

    /// Bytes of the longest write the engine writes as one group: a sequential writer that
    /// issues requests of this size (aligned to it) and keeps two in flight keeps every
    /// member busy, one group queued behind the one being written (a longer request's
    /// groups go one after another, and another request's group could come between them).
    pub fn write_group_bytes(&self) -> u64 {
        self.write_group_units() * self.lock_unit_sectors() * SECTOR_BYTES
    }

    fn lock_unit_sectors(&self) -> u64 {
        match self.geometry.as_parity() {
            Some(p) => p.stripe_data_sectors(),
            None => 2048,
        }
    }

    fn write_sectors(&self, first: u64, data: &[u8]) -> Result<(), EngineError> {
        let (lo, hi) = self.lock_span(first, data.len() as u64 / SECTOR_BYTES);
        // Long writes go in groups of lock units (stripes), each group's
        // member writes one batch under its locks, so other requests interleave between
        // groups. One stripe at a time (the first version) left each member one chunk in
        // flight between waits: a RAID0 stream reached 0.79 of its disks' bound on emulated
        // disks, in groups it reaches more (README, "Emulated disks").
        let group = self.write_group_units();
        if hi - lo >= group {
            let unit = self.lock_unit_sectors();
            let mut at = 0usize;
            let mut sector = first;
            while at < data.len() {
                let group_lo = sector / unit;
                let next_boundary = (group_lo + group) * unit;
                let n = (((next_boundary - sector) * SECTOR_BYTES) as usize).min(data.len() - at);
                let group_hi = (sector + n as u64 / SECTOR_BYTES - 1) / unit;
                let _g = self.locks.lock(group_lo, group_hi);
                self.write_sectors_locked(sector, &data[at..at + n])?;
                at += n;
                sector += n as u64 / SECTOR_BYTES;
            }
            return Ok(());
        }
        let _g = self.locks.lock(lo, hi);
        self.write_sectors_locked(first, data)
    }

    /// Writes whole sectors; the caller holds the stripe locks of the span.
    fn write_sectors_locked(&self, first_sector: u64, data: &[u8]) -> Result<(), EngineError> {
        let sectors = data.len() as u64 / SECTOR_BYTES;
        let pieces = self.geometry.split(first_sector, sectors).map_err(|e| EngineError::Invalid(e.to_string()))?;
        if self.geometry.as_parity().is_some() {
            return self.write_striped(&pieces, data);
        }
        self.write_simple(&pieces, data)
    }

    /// Writes the pieces of a linear, RAID0 or mirrored array as one batch: every member's
    /// share of the whole request (each piece to every present copy, and to a hot
    /// replacement) goes out at once, one vectored request per member and contiguous run,
    /// members in parallel; before, pieces went one after another, so a RAID0 stream kept
    /// one disk busy at a time. A member whose write fails is failed; the request succeeds
    /// while every piece reached at least one copy the array reads.
    fn write_simple(&self, pieces: &[Piece], data: &[u8]) -> Result<(), EngineError> {
        let io = self.io_map();
        // Per device: the member and its (offset, bytes) writes; per piece: its devices.
        let mut per_device: std::collections::BTreeMap<usize, DeviceWrites> = std::collections::BTreeMap::new();
        let mut piece_devices: Vec<Vec<(usize, bool, uraid_core::metadata::SectorRange)>> = Vec::with_capacity(pieces.len());
        let mut at = 0usize;
        for piece in pieces {
            let len = (piece.sectors * SECTOR_BYTES) as usize;
            let part = &data[at..at + len];
            at += len;
            let targets: Vec<MemberSector> = match &piece.placement {
                Placement::Single(ms) => vec![*ms],
                Placement::Mirrored(c) => c.clone(),
                Placement::Striped(_) => unreachable!("parity levels write through write_striped"),
            };
            let mut devices = Vec::new();
            for ms in targets {
                let main = io.write.get(ms.role).and_then(|w| w.as_ref()).map(|rm| (rm, false));
                let extra = io.replacement.get(ms.role).and_then(|w| w.as_ref()).map(|rm| (rm, true));
                for (rm, is_replacement) in main.into_iter().chain(extra) {
                    per_device
                        .entry(rm.device)
                        .or_insert_with(|| (rm, Vec::new()))
                        .1
                        .push((rm.data_offset + ms.sector * SECTOR_BYTES, part));
                    devices.push((rm.device, is_replacement, rm.absolute(ms.sector, len)));
                }
            }
            if devices.is_empty() {
                return Err(Fault::NoMember { array_sector: piece.array_sector }.into());
            }
            piece_devices.push(devices);
        }
        let mut order = Vec::with_capacity(per_device.len());
        let mut batch = Vec::with_capacity(per_device.len());
        let mut asked = Vec::with_capacity(per_device.len());
        for (device, (rm, mut writes)) in per_device {
            writes.sort_by_key(|(offset, _)| *offset);
            let mut runs = Vec::new();
            for &(offset, bytes) in &writes {
                crate::parallel::push_write(&mut runs, offset, bytes);
            }
            order.push((device, rm.bad_blocks.clone()));
            batch.push(MemberIo { member: &*rm.member, runs });
            asked.push(writes);
        }
        let mut failed = std::collections::BTreeSet::new();
        let mut logs = std::collections::BTreeMap::new();
        for (((device, log), result), writes) in order.into_iter().zip(crate::parallel::run_member_io(batch)).zip(&asked) {
            if let Err(e) = result {
                // A copy that failed in part may stay with the failed pieces listed
                // (bad_ranges.rs); it then holds every piece but those.
                if self.write_error_keeps_member(device, writes, &e) {
                    logs.insert(device, log);
                } else {
                    self.fail_device_io(device, &e, &e.to_string());
                    failed.insert(device);
                }
            }
        }
        self.check_alive()?;
        let holds = |d: &usize, range: &uraid_core::metadata::SectorRange| {
            !failed.contains(d) && logs.get(d).is_none_or(|log: &Arc<BadBlockLog>| !log.overlaps(range.start, range.sectors))
        };
        // Only copies the array reads count: a replacement alone does not hold the data yet.
        for (piece, devices) in pieces.iter().zip(&piece_devices) {
            if !devices.iter().any(|(d, is_replacement, range)| !is_replacement && holds(d, range)) {
                return Err(Fault::EveryCopyFailed { array_sector: piece.array_sector }.into());
            }
        }
        Ok(())
    }
}

impl RoleMember {
    /// Member sectors `sector..` covering `bytes`, as absolute device sectors (what a
    /// bad-block log lists).
    fn absolute(&self, sector: u64, bytes: usize) -> uraid_core::metadata::SectorRange {
        uraid_core::metadata::SectorRange {
            start: self.data_offset / SECTOR_BYTES + sector,
            sectors: (bytes as u64).div_ceil(SECTOR_BYTES),
        }
    }
}

impl IoMap {
    /// Every member a write to `role` goes to: its member and, during a hot replace, the
    /// replacement.
    fn writers(&self, role: usize) -> impl Iterator<Item = &RoleMember> {
        let main = self.write.get(role).and_then(|w| w.as_ref());
        let extra = self.replacement.get(role).and_then(|w| w.as_ref());
        main.into_iter().chain(extra)
    }
}

impl Drop for Array {
    fn drop(&mut self) {
        // Best effort: a dropped writable array is closed cleanly if it can be.
        let _ = self.close();
    }
}

/// The bytes of a superblock as written on disk (whole sectors).
pub(crate) fn superblock_bytes(sb: &Superblock) -> Vec<u8> {
    superblock_bytes_of(sb)
}

/// A superblock as md writes it: encoded, padded with 0xff to whole sectors.
pub(crate) fn superblock_bytes_of(sb: &Superblock) -> Vec<u8> {
    let mut bytes = sb.encode();
    let padded = bytes.len().div_ceil(SECTOR_BYTES as usize) * SECTOR_BYTES as usize;
    bytes.resize(padded, 0xff);
    bytes
}
