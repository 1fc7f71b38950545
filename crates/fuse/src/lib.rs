//! FUSE export of served arrays: a directory holding one regular file per array, whose
//! bytes are the array's bytes. Reads and writes go straight to [`uraid_engine::Array`],
//! fsync flushes the array, and the size is fixed. The file can back a loop device
//! (`losetup`), so a kernel filesystem can sit on a uraid array without md, nbd or ublk.
//!
//! ```no_run
//! # use std::sync::{Arc, atomic::AtomicBool};
//! # fn f(array: Arc<uraid_engine::Array>) -> Result<(), uraid_fuse::FuseError> {
//! let stop = Arc::new(AtomicBool::new(false));
//! let m = uraid_fuse::mount("/mnt/uraid".as_ref(), vec![("data.img".into(), array)], stop.clone())?;
//! // ... /mnt/uraid/data.img is the array until `stop` is set, `unmount` or drop.
//! m.wait()?;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod fs;

use fs::{ArrayFs, ExportedFile};
use fuser::{Config, MountOption, Session, SessionACL, SessionUnmounter};
use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};
use uraid_engine::Volume;

#[derive(Debug, thiserror::Error)]
pub enum FuseError {
    #[error("invalid file name {0:?}: must be non-empty, not . or .., without '/' or NUL")]
    InvalidName(String),
    #[error("file name {0:?} is given twice")]
    DuplicateName(String),
    #[error("{0}: not a directory (create the mount point first)")]
    NotADirectory(PathBuf),
    #[error("/dev/fuse is missing: the kernel has no FUSE support here (try `modprobe fuse`)")]
    NoFuseDevice,
    #[error("mounting FUSE on {dir}: {source} (as non-root, the `fusermount3` helper from the fuse3 package is needed)")]
    Mount { dir: PathBuf, source: io::Error },
    #[error("{0}: busy (a loop device or a process still has an array file open); detach it and retry")]
    Busy(PathBuf),
    #[error("unmounting {dir}: {source}")]
    Unmount { dir: PathBuf, source: io::Error },
    #[error("{0}: FUSE session failed: {1}")]
    Session(PathBuf, io::Error),
}

/// Tuning for [`mount_with`]. [`mount`] uses the defaults.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// FUSE worker threads, each with its own cloned /dev/fuse descriptor. The engine does
    /// member I/O in parallel inside one request, so a few threads are enough to keep
    /// several requests (loop device, NBD, dd) in flight.
    pub threads: usize,
    /// Largest read/write request asked of the kernel (it may grant less).
    pub max_io_bytes: u32,
    /// Let users other than the one serving open the files (FUSE's `allow_other`). Needed
    /// when a non-root `uraid serve` is used by root's `losetup`; non-root mounts then need
    /// `user_allow_other` in /etc/fuse.conf.
    pub allow_other: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions { threads: 4, max_io_bytes: 1 << 20, allow_other: false }
    }
}

/// How a mount ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnmountOutcome {
    /// Unmounted by us; every FUSE worker has exited.
    Clean,
    /// Someone else unmounted it (`umount DIR`, `fusermount3 -u DIR`).
    External,
    /// It was busy (usually a loop device still attached), so it was detached lazily: the
    /// directory is free, and the open files keep working until uraid exits, after which
    /// their I/O fails. Detach loop devices before stopping to avoid this.
    Detached,
}

/// A mounted export. Unmounts when dropped (lazily if still busy), when the `stop` flag
/// given to [`mount`] is set, or by [`FuseMount::unmount`].
pub struct FuseMount {
    shared: Arc<Shared>,
    watcher: Option<JoinHandle<()>>,
    /// Tells the watcher to end without unmounting (the owner handles it).
    quit: Arc<AtomicBool>,
}

struct Shared {
    dir: PathBuf,
    files: Vec<PathBuf>,
    state: Mutex<State>,
}

enum State {
    Mounted {
        /// fuser's own unmounter, used for the first attempt as root. It is spent by that
        /// attempt even when the mount was busy, so retries go through `umount_dir`.
        unmounter: Option<SessionUnmounter>,
        session: JoinHandle<io::Result<()>>,
    },
    Ended(UnmountOutcome),
}

/// Mounts `dir` with one regular file per `(file name, array)`, with default options. The
/// mount is removed when `stop` becomes true (checked every 50 ms), when the returned
/// handle is dropped or [`FuseMount::unmount`] is called.
pub fn mount(dir: &Path, arrays: Vec<(String, Arc<dyn Volume>)>, stop: Arc<AtomicBool>) -> Result<FuseMount, FuseError> {
    mount_with(dir, arrays, stop, &MountOptions::default())
}

/// [`mount`] with explicit options.
pub fn mount_with(
    dir: &Path,
    arrays: Vec<(String, Arc<dyn Volume>)>,
    stop: Arc<AtomicBool>,
    opts: &MountOptions,
) -> Result<FuseMount, FuseError> {
    let mut seen = HashSet::new();
    for (name, _) in &arrays {
        if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') || name.len() > 255 {
            return Err(FuseError::InvalidName(name.clone()));
        }
        if !seen.insert(name.as_str()) {
            return Err(FuseError::DuplicateName(name.clone()));
        }
    }
    if !dir.is_dir() {
        return Err(FuseError::NotADirectory(dir.to_path_buf()));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err(FuseError::NoFuseDevice);
    }
    let now = SystemTime::now();
    let files: Vec<PathBuf> = arrays.iter().map(|(n, _)| dir.join(n)).collect();
    let exported = arrays.into_iter().map(|(name, array)| ExportedFile::new(name, array, now)).collect();
    let filesystem = ArrayFs::new(exported, opts.max_io_bytes.max(4096));

    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("uraid".into()),
        MountOption::Subtype("uraid".into()),
        // The kernel checks the files' modes (0600/0400) against the caller, as for a
        // disk device, instead of every open reaching us for an access decision.
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::NoExec,
        MountOption::NoAtime,
    ];
    config.acl = if opts.allow_other { SessionACL::All } else { SessionACL::Owner };
    config.n_threads = Some(opts.threads.max(1));
    // Each worker reads its own descriptor, so requests are not funnelled through one
    // queue and one lock in the kernel.
    config.clone_fd = opts.threads > 1;

    let mut session = Session::new(filesystem, dir, &config).map_err(|source| FuseError::Mount { dir: dir.to_path_buf(), source })?;
    let unmounter = session.unmount_callable();
    let session = std::thread::Builder::new()
        .name("uraid-fuse".into())
        .spawn(move || session.run())
        .map_err(|source| FuseError::Mount { dir: dir.to_path_buf(), source })?;

    let shared =
        Arc::new(Shared { dir: dir.to_path_buf(), files, state: Mutex::new(State::Mounted { unmounter: Some(unmounter), session }) });
    let quit = Arc::new(AtomicBool::new(false));
    let watcher = {
        let shared = shared.clone();
        let quit = quit.clone();
        std::thread::Builder::new()
            .name("uraid-fuse-stop".into())
            .spawn(move || watch(&shared, &stop, &quit))
            .map_err(|source| FuseError::Mount { dir: dir.to_path_buf(), source })?
    };
    Ok(FuseMount { shared, watcher: Some(watcher), quit })
}

/// Unmounts when `stop` is set; notices an external unmount. Polling keeps this free of
/// signal handling, which belongs to the caller.
fn watch(shared: &Shared, stop: &AtomicBool, quit: &AtomicBool) {
    while !quit.load(Ordering::Acquire) {
        if stop.load(Ordering::Acquire) {
            // Errors cannot be reported from here; `wait` reads the outcome from the state.
            let _ = shared.unmount(true);
            return;
        }
        if shared.poll_ended() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the session is over (recording an external unmount if it just ended).
    fn poll_ended(&self) -> bool {
        let mut state = self.lock();
        match &*state {
            State::Ended(_) => true,
            State::Mounted { session, .. } if session.is_finished() => {
                // Whatever the session returned, the mount is gone; that is what matters.
                *state = State::Ended(UnmountOutcome::External);
                true
            }
            State::Mounted { .. } => false,
        }
    }

    /// Unmounts; when the mount is busy, detaches it lazily if `lazy_if_busy`, else reports
    /// `Busy` and leaves it fully working for a retry.
    fn unmount(&self, lazy_if_busy: bool) -> Result<UnmountOutcome, FuseError> {
        let mut state = self.lock();
        let (unmounter, session) = match &mut *state {
            State::Ended(outcome) => return Ok(*outcome),
            State::Mounted { unmounter, session } => (unmounter, session),
        };
        if session.is_finished() {
            *state = State::Ended(UnmountOutcome::External);
            return Ok(UnmountOutcome::External);
        }
        // As root, fuser's unmounter does a plain umount(2) and, used once, keeps fuser from
        // unmounting the path again when the session ends. As a user it would detach lazily
        // (`fusermount3 -z`) even when busy, so a retryable `fusermount3 -u` is used instead.
        let attempt = match (is_root(), unmounter.take()) {
            (true, Some(mut u)) => u.unmount(),
            _ => umount_dir(&self.dir),
        };
        let busy = match attempt {
            Ok(()) => {
                // The proof of an unmount is the session ending (the kernel ends it at once);
                // fuser's unmounter skips umount(2) when it believes the mount already gone.
                !wait_finished(session, Duration::from_secs(5))
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => true,
            Err(source) => return Err(FuseError::Unmount { dir: self.dir.clone(), source }),
        };
        if busy {
            if !lazy_if_busy {
                return Err(FuseError::Busy(self.dir.clone()));
            }
            detach_dir(&self.dir).map_err(|source| FuseError::Unmount { dir: self.dir.clone(), source })?;
            // The session thread is left to end when the last open file closes (or at exit).
            *state = State::Ended(UnmountOutcome::Detached);
            return Ok(UnmountOutcome::Detached);
        }
        match std::mem::replace(&mut *state, State::Ended(UnmountOutcome::Clean)) {
            State::Mounted { session, .. } => match session.join() {
                Ok(Ok(())) => Ok(UnmountOutcome::Clean),
                Ok(Err(e)) => Err(FuseError::Session(self.dir.clone(), e)),
                Err(_) => Err(FuseError::Session(self.dir.clone(), io::Error::other("FUSE worker panicked"))),
            },
            State::Ended(outcome) => Ok(outcome),
        }
    }
}

fn wait_finished(session: &JoinHandle<io::Result<()>>, limit: Duration) -> bool {
    let start = Instant::now();
    while !session.is_finished() {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A plain (non-lazy) unmount that can be retried: umount(2) as root, `fusermount3 -u`
/// otherwise.
fn umount_dir(dir: &Path) -> io::Result<()> {
    if is_root() {
        return nix::mount::umount2(dir, nix::mount::MntFlags::empty()).map_err(io::Error::from);
    }
    fusermount(dir, false)
}

/// Lazy unmount (MNT_DETACH): frees the directory even while files are open.
fn detach_dir(dir: &Path) -> io::Result<()> {
    if is_root() {
        return nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH).map_err(io::Error::from);
    }
    fusermount(dir, true)
}

fn fusermount(dir: &Path, lazy: bool) -> io::Result<()> {
    let mut cmd = Command::new("fusermount3");
    cmd.arg(if lazy { "-uzq" } else { "-uq" }).arg("--").arg(dir);
    let out = cmd.output().map_err(|e| io::Error::new(e.kind(), format!("running fusermount3: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&out.stderr);
    if text.contains("busy") {
        return Err(io::Error::from_raw_os_error(libc::EBUSY));
    }
    Err(io::Error::other(format!("fusermount3 -u failed: {}", text.trim())))
}

impl FuseMount {
    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The path of each array's file, in the order given to [`mount`].
    pub fn files(&self) -> &[PathBuf] {
        &self.shared.files
    }

    /// Whether the mount is still up (false after an unmount by anyone).
    pub fn is_mounted(&self) -> bool {
        !self.shared.poll_ended()
    }

    /// Unmounts now. If an array file is still open (a loop device), returns
    /// [`FuseError::Busy`] and stays mounted and working, so the caller can detach and
    /// retry; dropping the handle instead detaches lazily.
    pub fn unmount(&mut self) -> Result<UnmountOutcome, FuseError> {
        self.shared.unmount(false)
    }

    /// Blocks until the mount ends: `stop` set (then unmounted, lazily if busy) or an
    /// external unmount. Meant for the export thread of `uraid serve`.
    pub fn wait(mut self) -> Result<UnmountOutcome, FuseError> {
        if let Some(w) = self.watcher.take() {
            // The watcher only returns once the state is Ended (or on `quit`, never set here).
            let _ = w.join();
        }
        // Covers a failed unmount attempt by the watcher: try again, lazily.
        self.shared.unmount(true)
    }
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        self.quit.store(true, Ordering::Release);
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
        // Nobody to report to; a lazy detach at worst, so the directory is never left
        // with a dead "Transport endpoint is not connected" mount.
        let _ = self.shared.unmount(true);
    }
}
