//! Who may use a device: one identity per device, and one writer per device.
//!
//! The kernel holds md's members exclusively; a user-space array must do the same by hand or
//! two processes (two `uraid serve`s, a `serve` and a `write`, a `create --force` over a
//! live member) write the same disk and lose data. So every device opened for writing is:
//! - a block device: opened `O_EXCL`, as the kernel holds md members (refused while mounted
//!   or held by md, another uraid, or any exclusive opener);
//! - any device or file: `flock(LOCK_EX | LOCK_NB)` on the open file, taken right after the
//!   open and so before the superblock that leads to a write is read. The lock goes with
//!   the descriptor: a crashed holder releases it.
//!
//! Read-only users (`examine`, `read`) take no lock, so they can never block the server;
//! [`holder`] lets them warn that what they read is live.
//!
//! A device's identity is what the kernel calls it, not its spelling: the device number for
//! block devices (two nodes or symlinks for one disk are one device), device and inode for
//! files (`./x`, an absolute path, `../`, a symlink and a hard link are one file).

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// What a device is, whatever path names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceIdentity {
    /// A block device: its device number (`st_rdev`).
    Block { rdev: u64 },
    /// A file: the file system's device number and the inode.
    File { dev: u64, ino: u64 },
}

impl DeviceIdentity {
    pub fn of_metadata(meta: &Metadata) -> DeviceIdentity {
        if meta.file_type().is_block_device() {
            DeviceIdentity::Block { rdev: meta.rdev() }
        } else {
            DeviceIdentity::File { dev: meta.dev(), ino: meta.ino() }
        }
    }

    /// The identity of the device at `path` (following symlinks), or `None` if nothing is
    /// there.
    pub fn of_path(path: &Path) -> Option<DeviceIdentity> {
        std::fs::metadata(path).ok().map(|m| DeviceIdentity::of_metadata(&m))
    }
}

/// Refuses anything but a regular file or a block device, before it is opened: opening a
/// FIFO blocks until a writer comes, a character device or a socket is no disk.
pub fn check_kind(path: &Path) -> io::Result<Metadata> {
    let meta = std::fs::metadata(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let ft = meta.file_type();
    if ft.is_file() || ft.is_block_device() {
        return Ok(meta);
    }
    let what = if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_dir() {
        "a directory"
    } else {
        "not a regular file or block device"
    };
    Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{}: {what}; members must be regular files or block devices", path.display())))
}

/// Takes the exclusive lock on `file` (opened from `path`), or says who holds it.
pub fn claim(file: &File, path: &Path) -> io::Result<()> {
    match rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let who = file.metadata().ok().and_then(|m| holder(&m)).map_or_else(|| "another process".to_string(), |h| h.to_string());
            Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!(
                    "{}: in use by {who}; stop that first (e.g. `uraid stop NAME`), or use `uraid fail/remove/add` on the running array",
                    path.display()
                ),
            ))
        }
        Err(e) => Err(io::Error::new(io::Error::from(e).kind(), format!("{}: cannot lock: {e}", path.display()))),
    }
}

/// A process holding a device's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    /// Its command line, as `ps` shows it (empty if unreadable).
    pub command: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.command.is_empty() {
            write!(f, "process {}", self.pid)
        } else {
            write!(f, "process {} ({})", self.pid, self.command)
        }
    }
}

/// The process holding a `flock` on the file `meta` describes, from `/proc/locks`.
pub fn holder(meta: &Metadata) -> Option<Holder> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = find_flock_holder(&locks, meta.dev(), meta.ino())?;
    let command = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect::<Vec<_>>().join(" ")
        })
        .unwrap_or_default();
    Some(Holder { pid, command })
}

/// Parses `/proc/locks` text ("1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; the
/// device as hex major:minor, the inode in decimal) for a FLOCK on `dev`/`ino`.
pub fn find_flock_holder(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    locks.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // A blocked waiter's line starts "1: ->"; skip those.
        if f.len() < 6 || f[1] != "FLOCK" {
            return None;
        }
        let mut id = f[5].split(':');
        let maj = u32::from_str_radix(id.next()?, 16).ok()?;
        let min = u32::from_str_radix(id.next()?, 16).ok()?;
        let i: u64 = id.next()?.parse().ok()?;
        (maj == major && min == minor && i == ino).then(|| f[4].parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_locks_lines_are_read_as_the_kernel_writes_them() {
        let dev = rustix::fs::makedev(0x103, 0x2a);
        let text = "1: POSIX  ADVISORY  WRITE 77 103:2a:99 0 EOF\n2: FLOCK  ADVISORY  WRITE 4242 103:2a:99 0 EOF\n2: -> FLOCK  ADVISORY  WRITE 5 103:2a:99 0 EOF\n";
        assert_eq!(find_flock_holder(text, dev, 99), Some(4242));
        assert_eq!(find_flock_holder(text, dev, 98), None);
        assert_eq!(find_flock_holder(text, rustix::fs::makedev(0x103, 0x2b), 99), None);
    }

    #[test]
    fn a_second_claim_is_refused_and_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m");
        std::fs::write(&p, [0u8; 512]).unwrap();
        let first = File::options().read(true).write(true).open(&p).unwrap();
        claim(&first, &p).unwrap();
        let second = File::options().read(true).write(true).open(&p).unwrap();
        let err = claim(&second, &p).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ResourceBusy);
        assert!(err.to_string().contains(&format!("process {}", std::process::id())), "{err}");
        drop(first);
        // The lock goes with the descriptor. Another test thread forking a child (mkfifo)
        // while `first` was open shares its open file until the child execs, so wait for
        // that to pass; a lock that never went would hang here and fail.
        let start = std::time::Instant::now();
        while let Err(e) = claim(&second, &p) {
            assert!(start.elapsed() < std::time::Duration::from_secs(60), "the lock outlived its descriptor: {e}");
            std::thread::yield_now();
        }
    }

    #[test]
    fn spellings_of_one_file_are_one_identity() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m");
        std::fs::write(&p, b"x").unwrap();
        std::os::unix::fs::symlink(&p, dir.path().join("link")).unwrap();
        std::fs::hard_link(&p, dir.path().join("hard")).unwrap();
        let id = DeviceIdentity::of_path(&p).unwrap();
        for other in ["link", "hard", "./m"] {
            assert_eq!(DeviceIdentity::of_path(&dir.path().join(other)), Some(id), "{other}");
        }
        std::fs::write(dir.path().join("n"), b"x").unwrap();
        assert_ne!(DeviceIdentity::of_path(&dir.path().join("n")), Some(id));
    }

    #[test]
    fn fifos_and_directories_are_refused_without_opening_them() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let err = check_kind(&fifo).unwrap_err();
        assert!(err.to_string().contains("a FIFO"), "{err}");
        assert!(check_kind(dir.path()).unwrap_err().to_string().contains("a directory"));
    }
}
