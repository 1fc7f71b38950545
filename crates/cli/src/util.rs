//! Small helpers shared by the commands: sizes, devices, randomness, progress.

use anyhow::{Context, Result};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uraid_engine::array::{DriverOptions, JobDriver, JobKind, JobProgress};
use uraid_engine::{Array, FileMember, IoMode, Member};

/// Parses "4096", "64K", "512k", "1M", "2G", "1T" (binary units).
pub fn parse_size(s: &str) -> Result<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&s[..s.len() - 1], 1 << 20),
        Some('g' | 'G') => (&s[..s.len() - 1], 1 << 30),
        Some('t' | 'T') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let n: u64 = num.parse().with_context(|| format!("{s:?} is not a size (e.g. 4096, 64K, 512M, 2G)"))?;
    n.checked_mul(mult).with_context(|| format!("{s} is too large"))
}

pub fn human_bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// 16 random bytes from the OS (uuids).
pub fn random_uuid() -> [u8; 16] {
    let mut b = [0u8; 16];
    let ok = std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b));
    if ok.is_err() {
        // No /dev/urandom: fall back on time and pid (uniqueness, not secrecy, is needed).
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        b[..8].copy_from_slice(&(t as u64).to_le_bytes());
        b[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    }
    b
}

/// `--io`: how commands that move data reach their members.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct IoOpt {
    /// Member I/O: `auto` = O_DIRECT on block devices that accept it, the page cache for
    /// image files; `direct` = O_DIRECT everywhere (an error where refused); `buffered` =
    /// always the page cache.
    #[arg(long = "io", default_value_t = IoMode::Auto, value_name = "MODE", value_parser = io_mode_parser())]
    pub io: IoMode,
}

fn io_mode_parser() -> impl clap::builder::TypedValueParser<Value = IoMode> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(IoMode::ALL.map(IoMode::name))
        .map(|s| s.parse::<IoMode>().expect("one of the possible values"))
}

impl IoOpt {
    pub fn mode(self) -> IoMode {
        self.io
    }
}

/// Opens one device: a file or block device with the given I/O mode, or an NBD export
/// (`nbd://host[:port]/export`, `nbd+unix:///export?socket=PATH`), which has no local I/O
/// mode. An NBD member is not locked like a local one: its server decides who may write
/// (nbdkit and qemu-nbd serve one client unless told otherwise).
pub fn open_member(path: &Path, writable: bool, mode: IoMode) -> Result<Arc<dyn Member>> {
    if let Some(uri) = nbd_uri(path)? {
        let options = NBD_OPTIONS.get().copied().unwrap_or_default();
        let m = uraid_nbd::NbdMember::connect(&uri, writable, options).with_context(|| format!("connecting to {uri}"))?;
        return Ok(Arc::new(m));
    }
    Ok(Arc::new(FileMember::open_with(path, writable, mode)?))
}

/// How NBD members are opened in this process (`serve --member-failfast` sets it once,
/// before any member is opened; every other command uses the defaults).
pub static NBD_OPTIONS: std::sync::OnceLock<uraid_nbd::ClientOptions> = std::sync::OnceLock::new();

/// The NBD URI a device argument spells, if it spells one (a bad one is an error, not a
/// file name).
pub fn nbd_uri(path: &Path) -> Result<Option<uraid_nbd::NbdUri>> {
    let Some(s) = path.to_str().filter(|s| uraid_nbd::NbdUri::is_uri(s)) else { return Ok(None) };
    uraid_nbd::NbdUri::parse(s).map(Some).with_context(|| format!("{s}: not a usable NBD URI"))
}

/// Opens devices (files or block devices), each once: the same device given twice, by any
/// spelling, is refused before anything is opened. Opened writable, each is held
/// exclusively (see `uraid_engine::ownership`); opened read-only, a device another process
/// holds gets a warning that the array is live.
pub fn open_members(paths: &[impl AsRef<Path>], writable: bool, mode: IoMode) -> Result<Vec<Arc<dyn Member>>> {
    refuse_duplicate_devices(paths)?;
    let members: Vec<Arc<dyn Member>> = paths.iter().map(|p| open_member(p.as_ref(), writable, mode)).collect::<Result<_>>()?;
    if !writable {
        for p in paths {
            if let Some(h) = std::fs::metadata(p.as_ref()).ok().and_then(|m| uraid_engine::ownership::holder(&m)) {
                eprintln!("uraid: warning: {} is in use by {h}: the array is live, what is read may be changing", p.as_ref().display());
            }
        }
    }
    Ok(members)
}

/// What a device argument names: its identity when it exists, else its absolute path with
/// the parent's symlinks resolved (a file `create` is about to make).
#[derive(PartialEq, Eq)]
enum DeviceKey {
    Existing(uraid_engine::DeviceIdentity),
    New(PathBuf),
    /// An NBD export, by its normalised URI.
    Nbd(String),
}

fn device_key(p: &Path) -> DeviceKey {
    if let Ok(Some(uri)) = nbd_uri(p) {
        return DeviceKey::Nbd(uri.to_string());
    }
    if let Some(id) = uraid_engine::DeviceIdentity::of_path(p) {
        return DeviceKey::Existing(id);
    }
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let resolved = match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir).map(|d| d.join(name)).unwrap_or(abs.clone()),
        _ => abs,
    };
    DeviceKey::New(resolved)
}

/// Refuses the same device given twice (the same path, `./x`, an absolute path, `../`, a
/// symlink, a hard link, two nodes of one block device) before anything is written.
pub fn refuse_duplicate_devices(paths: &[impl AsRef<Path>]) -> Result<()> {
    let keys: Vec<DeviceKey> = paths.iter().map(|p| device_key(p.as_ref())).collect();
    for (i, k) in keys.iter().enumerate() {
        if let Some(j) = keys[..i].iter().position(|o| o == k) {
            anyhow::bail!("{} and {} are the same device; give each device once", paths[j].as_ref().display(), paths[i].as_ref().display());
        }
    }
    Ok(())
}

/// Shows progress of a long operation on a terminal, /proc/mdstat style; silent otherwise.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
    started: Instant,
}

impl Progress {
    pub fn new(what: &str, total_sectors: u64, quiet: bool) -> Progress {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new(total_sectors * 512);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} [{bar:30}] {percent:>3}% ({bytes}/{total_bytes}) speed={bytes_per_sec} finish={eta}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_message(what.to_string());
            bar
        });
        Progress { bar, started: Instant::now() }
    }
    pub fn update(&self, p: &JobProgress) {
        if let Some(b) = &self.bar {
            b.set_position(p.done_sectors * 512);
        }
    }
    /// Sets how many sectors are done (for jobs that count their own progress).
    pub fn set(&self, done_sectors: u64) {
        if let Some(b) = &self.bar {
            b.set_position(done_sectors * 512);
        }
    }
    pub fn finish(&self) -> Duration {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        self.started.elapsed()
    }
}

/// Runs the array's pending resync/recovery to completion (offline: nothing else runs).
pub fn run_pending_jobs(array: &Array, quiet: bool) -> Result<()> {
    let opts = DriverOptions { step_sectors: 8 << 11, limits: None, clean_after_idle: None };
    let driver = JobDriver::new(array, opts);
    array.start_recovery_if_possible();
    while let Some(kind @ (JobKind::Recovery | JobKind::Resync)) = array.pending_job() {
        let progress = Progress::new(kind.name(), array.sync_sectors(), quiet);
        driver.run(kind, &|| false, |p| progress.update(p))?;
        let took = progress.finish();
        if !quiet {
            eprintln!("uraid: {} finished in {:.1} s", kind.name(), took.as_secs_f64());
        }
    }
    Ok(())
}
