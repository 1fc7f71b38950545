//! `uraid serve`: assemble an array writable and hold it — run its resync/recovery in the
//! background with md's speed limits, mark it clean when idle, answer the control socket —
//! until `uraid stop`, SIGINT or SIGTERM, then flush and mark it clean.

use crate::control::{self, ArrayStatus, CheckResult, DeviceStatus, JobStatus, Reply, Request};
use crate::util::{open_members, random_uuid, IoOpt};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uraid_core::assemble::AssembleOptions;
use uraid_core::metadata::grow::GrowRequest;
use uraid_core::state::SpeedLimits;
use uraid_engine::array::{CheckReport, DriverOptions, JobDriver, JobKind, JobPacer};
use uraid_engine::reshape::ReshapingArray;
use uraid_engine::{Array, ArrayOptions, DeviceState, FileMember, LiveArray, Member, Stage, Volume};

#[derive(Args, Clone)]
pub struct ServeArgs {
    /// Member devices or image files (any order); or one array name/uuid with --scan.
    #[arg(required = true)]
    pub devices: Vec<String>,
    /// Directories or files to search for the members of the named array.
    #[arg(long, num_args = 1..)]
    pub scan: Vec<PathBuf>,
    /// Like mdadm --force.
    #[arg(long)]
    pub force: bool,
    /// Like mdadm --run.
    #[arg(long)]
    pub run: bool,
    /// md's sync_speed_min, KiB/s: background jobs never throttle below this.
    #[arg(long, default_value_t = 1000)]
    pub speed_min: u64,
    /// md's sync_speed_max, KiB/s.
    #[arg(long, default_value_t = 200_000)]
    pub speed_max: u64,
    /// md's stripe_cache_size (4 KiB pages per member).
    #[arg(long, default_value_t = 256)]
    pub stripe_cache: u64,
    /// md's max_read_errors: read errors a member may have (the count halves every hour)
    /// before it is failed; below it, each bad range is rebuilt from redundancy, rewritten
    /// and read back.
    #[arg(long, default_value_t = uraid_core::state::DEFAULT_MAX_READ_ERRORS)]
    pub max_read_errors: u32,
    /// NBD members: seconds a member may stay unreachable (connection lost, no reply)
    /// before it is failed. A member failed so is tried again while the array is idle and
    /// re-added (from the bitmap where it can be) once its server answers.
    #[arg(long, default_value_t = 10.0)]
    pub member_failfast: f64,
    /// Export the array over NBD at ADDR: host:port (e.g. 127.0.0.1:10809) or unix:PATH.
    #[arg(long, value_name = "ADDR")]
    pub nbd: Option<String>,
    /// Mount a FUSE filesystem at DIR holding the array as one regular file, NAME.img
    /// (usable as a loop device's backing file: losetup, mkfs, mount).
    #[arg(long, value_name = "DIR")]
    pub fuse: Option<PathBuf>,
    /// Name to serve the array under (default: the superblock's name; 0.90 has none, so
    /// its uuid is used).
    #[arg(long)]
    pub name: Option<String>,
    /// Print status lines as JSON only.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub io: IoOpt,
}

/// What the job thread is doing, for status replies.
#[derive(Default)]
struct JobState {
    running: Option<(Option<JobKind>, u64, u64, Instant, u64)>, // kind (None: reshape), done, total, started, done at start
    requested_check: Option<bool>,                              // Some(repair)
    last_check: Option<CheckResult>,
}

/// A change of shape asked for over the control socket.
enum ShapeChange {
    /// A reshape or level change (`uraid grow -l/-n/-c/--layout`).
    Grow(GrowRequest),
    /// The members' used size (`uraid grow --size`).
    Size(uraid_core::metadata::resize::SizeAsk),
    /// A RAID0 given new devices (`uraid grow NAME -n N --add DEV...`), each with its
    /// device uuid.
    Raid0Grow(Vec<(Arc<dyn Member>, [u8; 16])>),
}

/// A change asked for, and where its start's outcome goes.
type GrowAsked = (ShapeChange, std::sync::mpsc::Sender<Result<(), String>>);

pub struct Served {
    live: Arc<LiveArray>,
    /// How the array was opened (a reshape's start and end assemble with the same).
    opts: ArrayOptions,
    job: Mutex<JobState>,
    /// A reshape asked for over the control socket, for the job thread to start (it alone
    /// changes the array's stage, between jobs), and where to send the outcome.
    grow: Mutex<Option<GrowAsked>>,
    stop: Arc<AtomicBool>,
    args: ServeArgs,
    pub exports: Mutex<Vec<String>>,
}

fn resolve_devices(args: &ServeArgs) -> Result<Vec<PathBuf>> {
    if args.scan.is_empty() {
        return Ok(args.devices.iter().map(PathBuf::from).collect());
    }
    if args.devices.len() != 1 {
        bail!("with --scan give exactly one array name or uuid");
    }
    let want = &args.devices[0];
    let mut files = Vec::new();
    for p in &args.scan {
        if p.is_dir() {
            for e in std::fs::read_dir(p)?.flatten() {
                if e.path().is_file() {
                    files.push(e.path());
                }
            }
        } else {
            files.push(p.clone());
        }
    }
    let mut found = Vec::new();
    for f in files {
        let Ok(m) = FileMember::open(&f, false) else { continue };
        if let Some((_, sb)) = uraid_engine::scan::probe(&m).best() {
            let name = match sb {
                uraid_core::metadata::Superblock::V1(s) => {
                    let end = s.set_name.iter().position(|&b| b == 0).unwrap_or(32);
                    String::from_utf8_lossy(&s.set_name[..end]).into_owned()
                }
                _ => String::new(),
            };
            if &name == want || name.rsplit(':').next() == Some(want) || sb.array_uuid().to_string() == *want {
                found.push(f);
            }
        }
    }
    if found.is_empty() {
        let places: Vec<String> = args.scan.iter().map(|p| p.display().to_string()).collect();
        bail!("no members of array {want:?} found in {}", places.join(", "));
    }
    Ok(found)
}

pub fn assemble_for_serving(args: &ServeArgs) -> Result<Arc<Served>> {
    let paths = resolve_devices(args)?;
    let failfast =
        Duration::try_from_secs_f64(args.member_failfast).map_err(|_| anyhow::anyhow!("--member-failfast must be a number of seconds"))?;
    let nbd = uraid_nbd::ClientOptions { failfast, ..Default::default() };
    let _ = crate::util::NBD_OPTIONS.set(nbd);
    let members = open_members(&paths, true, args.io.mode())?;
    let opts = ArrayOptions {
        assemble: AssembleOptions { array_uuid: None, force: args.force, run: args.run },
        writable: true,
        stripe_cache_pages: args.stripe_cache,
        max_read_errors: args.max_read_errors,
        ..Default::default()
    };
    let stage = match Array::assemble(members.clone(), &opts) {
        Ok((array, report)) => {
            for w in &report.warnings {
                eprintln!("uraid: warning: {w}");
            }
            array.start_recovery_if_possible();
            Stage::Plain(Arc::new(array))
        }
        // A reshape in progress (uraid's or md's): served as it is, and continued.
        Err(uraid_engine::EngineError::ReshapeInProgress { position_sectors }) => {
            eprintln!("uraid: the array is in the middle of a reshape (at array sector {position_sectors}); continuing it");
            Stage::Reshaping(Arc::new(ReshapingArray::open(members, &opts)?))
        }
        Err(e) => return Err(e.into()),
    };
    let name = match &stage {
        Stage::Plain(a) => a.name().to_string(),
        Stage::Reshaping(r) => r.new_side().name().to_string(),
    };
    let name = args.name.clone().unwrap_or(name);
    Ok(Arc::new(Served {
        live: Arc::new(LiveArray::new(stage, name)),
        opts,
        grow: Mutex::new(None),
        job: Mutex::new(JobState::default()),
        stop: Arc::new(AtomicBool::new(false)),
        args: args.clone(),
        exports: Mutex::new(Vec::new()),
    }))
}

impl Served {
    /// The name clients use for this array.
    pub fn name(&self) -> String {
        self.live.name()
    }

    /// The array as it is now; while reshaping, the new shape's side (what the array will
    /// be: its members, level and size), for status.
    fn array(&self) -> Arc<Array> {
        match self.live.stage() {
            Stage::Plain(a) => a,
            Stage::Reshaping(r) => r.new_side().clone(),
        }
    }

    fn reshaping(&self) -> Option<Arc<ReshapingArray>> {
        match self.live.stage() {
            Stage::Plain(_) => None,
            Stage::Reshaping(r) => Some(r),
        }
    }

    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    pub fn status(&self) -> ArrayStatus {
        let a = &self.array();
        let devices = a
            .devices()
            .into_iter()
            .map(|d| {
                let (state, role, rec) = match d.state {
                    DeviceState::InSync(r) => ("in_sync", Some(r), None),
                    DeviceState::Recovering { role, done } => ("recovering", Some(role), Some(done)),
                    DeviceState::Replacing { role, done } => ("replacing", Some(role), Some(done)),
                    DeviceState::Spare => ("spare", None, None),
                    DeviceState::Faulty => ("faulty", None, None),
                };
                DeviceStatus {
                    device: d.label,
                    dev_number: d.dev_number,
                    state: state.into(),
                    role,
                    recovered_sectors: rec,
                    failure: d.failure,
                    read_errors: d.read_errors,
                    read_errors_corrected: d.read_errors_corrected,
                    bad_blocks: d.bad_blocks.iter().map(|r| (r.start, r.sectors)).collect(),
                }
            })
            .collect();
        let missing = a.missing_roles();
        let state = if a.failure().is_some() {
            "failed"
        } else if !missing.is_empty() {
            "degraded"
        } else if self.reshaping().is_some() {
            "reshaping"
        } else if a.dirty_and_idle(Duration::ZERO) {
            "active"
        } else {
            "clean"
        };
        let job = self.job.lock().unwrap_or_else(|e| e.into_inner());
        let job_status = job.running.map(|(kind, done, total, started, done0)| {
            let secs = started.elapsed().as_secs_f64().max(1e-3);
            let speed = (done.saturating_sub(done0)) as f64 * 512.0 / 1024.0 / secs;
            JobStatus {
                kind: kind.map_or("reshape", |k| k.name()).into(),
                done_sectors: done,
                total_sectors: total,
                speed_kib_per_s: speed,
                eta_seconds: (speed > 0.0).then(|| (total.saturating_sub(done)) as f64 * 0.5 / speed),
            }
        });
        let (layout, chunk_kib) = match a.geometry().as_parity() {
            Some(p) => (p.algorithm().to_md(), p.chunk_sectors() / 2),
            None => (0, 0),
        };
        ArrayStatus {
            name: self.name(),
            uuid: a.uuid().to_string(),
            level: a.level().to_string(),
            layout,
            chunk_kib,
            raid_disks: a.geometry().raid_disks(),
            size_bytes: self.live.size_bytes(),
            events: a.events(),
            state: state.into(),
            missing_roles: missing,
            devices,
            job: job_status,
            last_check: job.last_check.clone(),
            exports: self.exports.lock().map(|e| e.clone()).unwrap_or_default(),
            pid: std::process::id(),
        }
    }

    /// The member a control command names. Clients send absolute paths when the path
    /// exists where they run; such a path is matched by device identity (any spelling of a
    /// member's path works, from any directory, and an unrelated file of the same name is
    /// never taken for a member). A name that exists nowhere on the client's side is
    /// matched against the members' labels as given at serve time (a member whose file is
    /// gone, say).
    fn member_label(&self, device: &str) -> Result<String> {
        let path = std::path::Path::new(device);
        if let Some(id) = uraid_engine::DeviceIdentity::of_path(path).filter(|_| path.is_absolute()) {
            return self.array().label_of_identity(id).ok_or_else(|| anyhow::anyhow!("{device} is not a member of {}", self.name()));
        }
        let labels: Vec<String> = self.array().devices().into_iter().map(|d| d.label).collect();
        if labels.iter().any(|l| l == device) {
            return Ok(device.to_string());
        }
        bail!("{device} is not a member of {} (members: {})", self.name(), labels.join(", "))
    }

    /// A device already attached to the array (any spelling) cannot be added again.
    fn refuse_if_member(&self, device: &str) -> Result<()> {
        if let Some(label) =
            uraid_engine::DeviceIdentity::of_path(std::path::Path::new(device)).and_then(|id| self.array().label_of_identity(id))
        {
            bail!("{device} is already attached to {} (as {label}); a device can hold only one member", self.name());
        }
        Ok(())
    }

    fn handle(&self, req: Request) -> Reply {
        let a = &self.array();
        let mut message = None;
        let result: Result<()> = (|| {
            // A member may still be failed (md takes --fail during a reshape, which then goes
            // on degraded); nothing else changes the array under a reshape.
            if self.reshaping().is_some() && !matches!(req, Request::Status | Request::Stop | Request::Fail { .. }) {
                bail!("{} is reshaping; this waits until the reshape is done (uraid status shows its progress)", self.name());
            }
            match req {
                Request::Status => {}
                Request::Grow { size: Some(size), .. } => {
                    let ask = crate::cmd::grow::size_ask(&size)?;
                    self.ask_shape_change(ShapeChange::Size(ask))?;
                }
                Request::Grow { level, raid_devices, chunk_sectors, layout, size: None, array_size_sectors, add } if !add.is_empty() => {
                    if level.is_some() || chunk_sectors.is_some() || layout.is_some() || array_size_sectors.is_some() {
                        bail!("--add goes with --raid-devices alone (a RAID0 that gets more members)");
                    }
                    if a.level() != uraid_core::geometry::Level::Raid0 {
                        bail!("{}", crate::cmd::grow::ADD_IS_FOR_RAID0);
                    }
                    let raid_disks = a.geometry().raid_disks() as u32;
                    crate::cmd::grow::check_raid0_grow(raid_disks, raid_devices.unwrap_or(raid_disks), add.len())?;
                    let mut new = Vec::with_capacity(add.len());
                    for device in &add {
                        self.refuse_if_member(device)?;
                        let m: Arc<dyn Member> = crate::util::open_member(std::path::Path::new(device), true, self.args.io.mode())?;
                        new.push((m, random_uuid()));
                    }
                    self.ask_shape_change(ShapeChange::Raid0Grow(new))?;
                }
                Request::Grow { level, raid_devices, chunk_sectors, layout, size: None, array_size_sectors, .. } => {
                    let level = level.as_deref().map(crate::cmd::grow::parse_level).transpose()?;
                    let target = match level {
                        Some(l) => uraid_core::geometry::Level::from_md(l).map_err(|e| anyhow::anyhow!("{e}"))?,
                        None => a.level(),
                    };
                    let layout = match layout.as_deref() {
                        Some(l) => crate::cmd::grow::grow_layout(l, a.level(), a.layout(), target)?,
                        None => None,
                    };
                    let req = GrowRequest { level, raid_disks: raid_devices, layout, chunk_sectors, array_size_sectors };
                    self.ask_shape_change(ShapeChange::Grow(req))?;
                }
                Request::Fail { device } => match self.reshaping() {
                    Some(r) => r.fail_member(&self.member_label(&device)?)?,
                    None => a.fail_device_by_label(&self.member_label(&device)?)?,
                },
                Request::BadBlocks { device, start, sectors } => a.add_bad_blocks(&self.member_label(&device)?, start, sectors)?,
                Request::Remove { device } => a.remove_device(&self.member_label(&device)?)?,
                Request::Add { device, force, re_add } => {
                    self.refuse_if_member(&device)?;
                    let m: Arc<dyn Member> = crate::util::open_member(std::path::Path::new(&device), true, self.args.io.mode())?;
                    let former = uraid_engine::scan::probe(m.as_ref()).any().is_some_and(|(_, sb)| sb.array_uuid() == a.uuid());
                    match (re_add, force, former) {
                        (true, _, false) => bail!(
                            "{device} holds no superblock of {}: --re-add takes back a former member; use add (with --force to overwrite what it holds)",
                            self.name()
                        ),
                        // md's --re-add: back in its old role with only the regions the bitmap
                        // marks rebuilt when it can be, else added as a spare and rebuilt in full.
                        (true, _, true) => {
                            let label = m.label().to_string();
                            let done = a.re_add_device(m, random_uuid())?;
                            eprintln!("uraid: {}: {label} {done}", self.name());
                            message = Some(done.to_string());
                        }
                        (false, true, _) => a.add_device_overwriting(m, random_uuid())?,
                        (false, false, true) => bail!(
                            "{device} is a former member of {}; use add --re-add to take it back (from the bitmap where it can be, else rebuilt in full), or --force",
                            self.name()
                        ),
                        (false, false, false) => a.add_device(m, random_uuid())?,
                    }
                }
                Request::Replace { device, with, force } => {
                    let old = self.member_label(&device)?;
                    // md's hot replace: the old member keeps serving while it is copied.
                    match uraid_engine::DeviceIdentity::of_path(std::path::Path::new(&with)).and_then(|id| a.label_of_identity(id)) {
                        // A spare already in the array.
                        Some(spare) => a.replace_with_spare(&old, &spare)?,
                        None => {
                            let m: Arc<dyn Member> = crate::util::open_member(std::path::Path::new(&with), true, self.args.io.mode())?;
                            if force {
                                a.replace_device_overwriting(&old, m, random_uuid())?;
                            } else {
                                a.replace_device(&old, m, random_uuid())?;
                            }
                        }
                    }
                }
                Request::Check { repair } => {
                    if !a.level().has_redundancy() {
                        // md: "check" has nothing to compare on raid0 and linear.
                        bail!(
                            "{} is {}: it has no redundancy, so there is nothing to {}",
                            self.name(),
                            a.level(),
                            if repair { "repair" } else { "check" }
                        );
                    }
                    let mut job = self.job.lock().unwrap_or_else(|e| e.into_inner());
                    if job.running.is_some() || job.requested_check.is_some() {
                        bail!("a {} is already running", job.running.map_or("check", |r| r.0.map_or("reshape", |k| k.name())));
                    }
                    job.requested_check = Some(repair);
                    job.last_check = None;
                }
                Request::Stop => self.stop.store(true, Ordering::Release),
            }
            Ok(())
        })();
        match result {
            Ok(()) => Reply { message, ..Reply::ok(Some(self.status())) },
            Err(e) => Reply::err(format!("{e:#}")),
        }
    }

    /// Moves the reshape on, paced by md's speed limits, until it is done (then serves the
    /// array in its new shape) or the array stops.
    fn run_reshape(&self, r: &ReshapingArray) {
        let limits = SpeedLimits { min_kib_s: self.args.speed_min, max_kib_s: self.args.speed_max };
        let mut pacer = JobPacer::counting(r.foreground_requests(), limits, 4 << 11);
        let (total, start, done0) = (r.total_sectors(), Instant::now(), r.moved_sectors());
        while !self.stop.load(Ordering::Acquire) {
            self.set_running(Some((None, r.moved_sectors(), total, start, done0)));
            pacer.next_step_counted(r.foreground_requests());
            let before = r.moved_sectors();
            match r.step() {
                Ok(uraid_engine::reshape::ReshapeStep::Finished) => {
                    self.set_running(None);
                    match self.live.end_reshape(&self.opts) {
                        Ok(a) if !self.args.json => {
                            eprintln!(
                                "uraid: {}: reshape finished after {:.1} s; {} bytes",
                                self.name(),
                                start.elapsed().as_secs_f64(),
                                a.size_bytes()
                            )
                        }
                        Ok(_) => {}
                        Err(e) => {
                            eprintln!("uraid: {}: reshape finished but the array could not be reopened: {e}; stopping", self.name());
                            self.stop.store(true, Ordering::Release);
                        }
                    }
                    return;
                }
                Ok(_) => pacer.pause(r.moved_sectors().saturating_sub(before)),
                Err(e) => {
                    eprintln!("uraid: {}: reshape stopped: {e}; stopping (restart to continue it)", self.name());
                    self.stop.store(true, Ordering::Release);
                    break;
                }
            }
        }
        self.set_running(None);
    }

    /// Prints each device failure once, as md logs "Disk failure on sdX" to the kernel log.
    fn log_new_failures(&self, array: &Array, reported: &mut std::collections::HashSet<String>) {
        for d in array.devices() {
            if d.state == DeviceState::Faulty && reported.insert(d.label.clone()) {
                let why = d.failure.as_deref().unwrap_or("faulty at assembly");
                // A replaced member leaves the array marked faulty, as in md, but did not fail.
                let what = if why.starts_with("replaced by") { "left the array" } else { "failed" };
                eprintln!("uraid: {}: {} {what}: {why}; missing roles now {:?}", self.name(), d.label, array.missing_roles());
            }
        }
    }

    /// The background job loop: requested check/repair, else pending recovery/resync,
    /// paced by [`JobPacer`] (speed_max when idle, speed_min while clients are busy, as md);
    /// marks the array clean when idle.
    /// md's `--re-add` on a device's return (what udev and `mdadm --incremental` do for
    /// local disks), for NBD members: one failed because it could not be reached is tried
    /// again, and once its server answers it is taken back in its old role, rebuilt from
    /// the bitmap where it can be. Members failed for anything else stay failed.
    fn re_add_returned_members(&self) {
        let array = self.array();
        for d in array.devices() {
            if d.state != DeviceState::Faulty || d.failure_kind != Some(uraid_engine::FailureKind::Unreachable) {
                continue;
            }
            let path = std::path::Path::new(&d.label);
            let Ok(Some(uri)) = crate::util::nbd_uri(path) else { continue };
            // A quick look first: this runs on the job thread, and a server that is still
            // unreachable must cost it a second, not the member's whole failfast time.
            let quick = uraid_nbd::ClientOptions { connections: 1, failfast: Duration::from_secs(1), ..Default::default() };
            if uraid_nbd::NbdMember::connect(&uri, false, quick).is_err() {
                continue;
            }
            let Ok(member) = crate::util::open_member(path, true, self.args.io.mode()) else { continue };
            // In place: a re-add that fails leaves it listed faulty, to be tried again.
            match array.re_add_faulty_device(&d.label, member, random_uuid()) {
                Ok(done) => eprintln!("uraid: {}: {} is reachable again: {done}", self.name(), d.label),
                Err(e) => eprintln!("uraid: {}: {} is reachable again but the re-add failed: {e}", self.name(), d.label),
            }
        }
    }

    /// Hands `change` to the job thread (it alone changes the array's stage, between
    /// jobs) and waits for its start.
    fn ask_shape_change(&self, change: ShapeChange) -> Result<()> {
        {
            let job = self.job.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((kind, ..)) = job.running {
                bail!("a {} is running; grow once it is done", kind.map_or("reshape", |k| k.name()));
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        *self.grow.lock().unwrap_or_else(|e| e.into_inner()) = Some((change, tx));
        rx.recv().map_err(|_| anyhow::anyhow!("the array stopped before the change started"))?.map_err(anyhow::Error::msg)
    }

    fn job_loop(&self) {
        // 4 MiB of member sectors per step: several recovery units, rebuilt concurrently,
        // and still fine-grained enough for the speed limits (20 ms at 200 MB/s).
        let step = 4u64 << 11;
        let mut reported = std::collections::HashSet::new();
        let mut last_re_add_try = Instant::now();
        while !self.stop.load(Ordering::Acquire) {
            let asked = self.grow.lock().map(|mut g| g.take()).unwrap_or(None);
            if let Some((ShapeChange::Size(ask), reply)) = asked {
                let changed = self.live.resize(&self.opts, ask).map_err(|e| e.to_string());
                if let (Ok(a), false) = (&changed, self.args.json) {
                    eprintln!("uraid: {}: now {} bytes; resyncing the new part", self.name(), a.size_bytes());
                }
                let _ = reply.send(changed.map(|_| ()));
            } else if let Some((change @ (ShapeChange::Grow(_) | ShapeChange::Raid0Grow(_)), reply)) = asked {
                let started = match change {
                    ShapeChange::Grow(req) => self.live.grow(&self.opts, &req),
                    ShapeChange::Raid0Grow(new) => self.live.grow_raid0(&self.opts, new),
                    ShapeChange::Size(_) => unreachable!("matched above"),
                }
                .map_err(|e| e.to_string());
                if !self.args.json {
                    match &started {
                        Ok(Stage::Reshaping(_)) => eprintln!("uraid: {}: reshape started", self.name()),
                        Ok(Stage::Plain(a)) => {
                            eprintln!("uraid: {}: now {} with {} members", self.name(), a.level(), a.geometry().raid_disks())
                        }
                        Err(_) => {}
                    }
                }
                let started = started.map(|_| ());
                let _ = reply.send(started);
            }
            if let Some(r) = self.reshaping() {
                self.run_reshape(&r);
                continue;
            }
            let array = self.array();
            self.log_new_failures(&array, &mut reported);
            let requested = self.job.lock().map(|mut j| j.requested_check.take()).unwrap_or(None);
            let limits = SpeedLimits { min_kib_s: self.args.speed_min, max_kib_s: self.args.speed_max };
            // md's safe mode: clean 200 ms after the last write, between steps too.
            let opts = DriverOptions { step_sectors: step, limits: Some(limits), clean_after_idle: Some(Duration::from_millis(200)) };
            let driver = JobDriver::new(&array, opts);
            let Some(kind) = driver.next_job(requested.map(|repair| if repair { JobKind::Repair } else { JobKind::Check })) else {
                driver.clean_if_idle();
                if last_re_add_try.elapsed() >= Duration::from_secs(1) {
                    self.re_add_returned_members();
                    last_re_add_try = Instant::now();
                }
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            let total = array.sync_sectors();
            let start = Instant::now();
            let pos0 = if kind == JobKind::Resync { array.resync_position().min(total) } else { 0 };
            self.set_running(Some((Some(kind), pos0, total, start, pos0)));
            let stop = || self.stop.load(Ordering::Acquire);
            let outcome = driver.run(kind, &stop, |p| {
                self.log_new_failures(&array, &mut reported);
                self.set_running(Some((Some(kind), p.done_sectors, total, start, pos0)));
            });
            let (finished, report) = match outcome {
                Ok(o) => (o.finished, o.report),
                Err(e) => {
                    eprintln!("uraid: {} stopped: {e}", kind.name());
                    (false, CheckReport::default())
                }
            };
            if matches!(kind, JobKind::Check | JobKind::Repair) {
                let mut job = self.job.lock().unwrap_or_else(|e| e.into_inner());
                let holders: Vec<(usize, String)> = self
                    .array()
                    .devices()
                    .into_iter()
                    .filter_map(|d| match d.state {
                        DeviceState::InSync(r) | DeviceState::Recovering { role: r, .. } => Some((r, d.label)),
                        _ => None,
                    })
                    .collect();
                let findings = report
                    .findings
                    .iter()
                    .map(|f| crate::control::Finding {
                        array_sector: f.array_sector,
                        sectors: f.sectors,
                        role: f.role,
                        device: f.role.and_then(|r| holders.iter().find(|(h, _)| *h == r).map(|(_, l)| l.clone())),
                        action: f.action.name().into(),
                    })
                    .collect();
                job.last_check = Some(CheckResult {
                    kind: kind.name().into(),
                    mismatch_cnt: report.mismatch_sectors,
                    wrong_member_rows: report.wrong_member_rows.into_iter().collect(),
                    unattributed_rows: report.unattributed_rows,
                    repaired_rows: report.repaired_rows,
                    finished,
                    findings,
                    findings_dropped: report.findings_dropped,
                });
            }
            self.set_running(None);
            if !self.args.json {
                eprintln!(
                    "uraid: {} {} after {:.1} s",
                    kind.name(),
                    if finished { "finished" } else { "interrupted" },
                    start.elapsed().as_secs_f64()
                );
            }
        }
    }

    fn set_running(&self, r: Option<(Option<JobKind>, u64, u64, Instant, u64)>) {
        if let Ok(mut j) = self.job.lock() {
            j.running = r;
        }
    }
}

fn serve_connection(served: &Served, stream: UnixStream) {
    let mut writer = match stream.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { return };
        let reply = match serde_json::from_str::<Request>(&line) {
            Ok(req) => served.handle(req),
            Err(e) => Reply::err(format!("bad request: {e}")),
        };
        let Ok(mut text) = serde_json::to_string(&reply) else { return };
        text.push('\n');
        if writer.write_all(text.as_bytes()).is_err() {
            return;
        }
    }
}

/// Runs the control socket and job thread until stopped; `extra` runs alongside (exports).
pub fn run_served(served: Arc<Served>, extra: Vec<Box<dyn FnOnce() + Send>>) -> Result<ExitCode> {
    let stop = served.stop_flag();
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let dir = control::run_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let sock = control::socket_path(&served.name());
    if sock.exists() {
        if UnixStream::connect(&sock).is_ok() {
            bail!("array {:?} is already served ({})", served.name(), sock.display());
        }
        let _ = std::fs::remove_file(&sock);
    }
    let listener = UnixListener::bind(&sock).with_context(|| format!("binding {}", sock.display()))?;
    listener.set_nonblocking(true)?;
    if !served.args.json {
        eprintln!(
            "uraid: serving {} {:?} ({} bytes); control socket {}",
            served.live.level(),
            served.name(),
            served.live.size_bytes(),
            sock.display()
        );
    } else {
        println!("{}", serde_json::to_string(&served.status())?);
    }
    std::thread::scope(|s| {
        s.spawn(|| served.job_loop());
        for f in extra {
            s.spawn(f);
        }
        while !stop.load(Ordering::Acquire) {
            match listener.accept() {
                Ok((stream, _)) => {
                    let _ = stream.set_nonblocking(false);
                    let served = &served;
                    s.spawn(move || serve_connection(served, stream));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    // Clean first, socket second: once the socket is gone the array is clean on disk.
    // (`uraid stop` also waits for this process to exit, which releases the members.)
    let closed = served.live.close();
    let _ = std::fs::remove_file(&sock);
    closed?;
    if !served.args.json {
        eprintln!("uraid: {:?} stopped cleanly", served.name());
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(args: ServeArgs) -> Result<ExitCode> {
    let served = assemble_for_serving(&args)?;
    let mut extra: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    if let Some(addr) = &args.nbd {
        let listener = uraid_nbd::bind(addr).with_context(|| format!("NBD: binding {addr}"))?;
        let mut export = uraid_nbd::Export::new(served.live.clone());
        export.name = served.name().to_string();
        let uri = listener.uri(&export.name);
        if !args.json {
            eprintln!("uraid: NBD export {:?} at {uri}", export.name);
        }
        if let Ok(mut e) = served.exports.lock() {
            e.push(format!("nbd {uri}"));
        }
        let stop = served.stop_flag();
        extra.push(Box::new(move || {
            if let Err(e) = uraid_nbd::serve(listener, vec![export], stop.clone()) {
                eprintln!("uraid: NBD server stopped: {e}");
                stop.store(true, Ordering::Release);
            }
        }));
    }
    if let Some(dir) = &args.fuse {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let file = format!("{}.img", served.name().replace('/', "_"));
        let mount = uraid_fuse::mount(dir, vec![(file.clone(), served.live.clone())], served.stop_flag())
            .with_context(|| format!("FUSE: mounting {}", dir.display()))?;
        let path = dir.join(&file);
        if !args.json {
            eprintln!("uraid: FUSE file {}", path.display());
        }
        if let Ok(mut e) = served.exports.lock() {
            e.push(format!("fuse {}", path.display()));
        }
        let stop = served.stop_flag();
        extra.push(Box::new(move || {
            match mount.wait() {
                Ok(uraid_fuse::UnmountOutcome::Detached) => {
                    eprintln!("uraid: {} was busy (a loop device still attached?); detached lazily", path.display())
                }
                Ok(_) => {}
                Err(e) => eprintln!("uraid: FUSE: {e}"),
            }
            // The filesystem went away (stopped, or unmounted from outside): stop serving.
            stop.store(true, Ordering::Release);
        }));
    }
    run_served(served, extra)
}
