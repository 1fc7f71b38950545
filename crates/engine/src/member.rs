//! Member devices behind one small trait, so the same engine runs over files, block devices,
//! memory and (in the simulator) fault-injecting disks.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, IoSliceMut};
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use uraid_parity::buffer::AlignedBuf;

pub use crate::parallel::{Bufs, Run};

/// A device holding one md member: byte-addressed reads and writes at offsets.
pub trait Member: Send + Sync {
    /// Human name (the path, or a label) used in messages.
    fn label(&self) -> &str;
    /// Size in bytes.
    fn size_bytes(&self) -> u64;
    /// Asks the device its size again (it may have grown: a file extended, a logical
    /// volume resized) and returns it; for `uraid grow --size` on a served array. Devices
    /// whose size cannot change keep the one they had.
    fn refresh_size(&self) -> io::Result<u64> {
        Ok(self.size_bytes())
    }
    /// Reads exactly `buf.len()` bytes at `offset`; a short device is an error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Fills `bufs` one after another from `offset` (one request where the backend has
    /// vectored I/O).
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let mut at = offset;
        for b in bufs.iter_mut() {
            self.read_at(b, at)?;
            at += b.len() as u64;
        }
        Ok(())
    }
    /// Writes `bufs` one after another starting at `offset` (one request where the backend
    /// has vectored I/O).
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let mut at = offset;
        for b in bufs {
            self.write_at(b, at)?;
            at += b.len() as u64;
        }
        Ok(())
    }
    /// Runs one request's operations on this member (disjoint ranges, in offset order),
    /// returning the first error; operations after a failed one may be skipped. The default
    /// runs them one after another. A backend that queues requests overrides it to take them
    /// all at once, as md's bios reach a disk's queue together: the bench's disk model does,
    /// so a disk that reorders its queue sees a RAID5 read's runs (split at each parity
    /// chunk) as one stream, not one run at a time with another request's runs between them.
    fn run_batch(&self, runs: &mut [Run<'_>]) -> io::Result<()> {
        runs.iter_mut().try_for_each(|r| match &mut r.bufs {
            Bufs::Read(b) => self.read_vectored_at(b, r.offset),
            Bufs::Write(b) => self.write_vectored_at(b, r.offset),
        })
    }
    /// Makes every completed write durable.
    fn flush(&self) -> io::Result<()>;
    /// Discards `len` bytes at `offset`: afterwards they read as zeros. The default writes
    /// zeros; backends that can free the space instead (files: punch a hole) override it.
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        write_zeros(self, offset, len)
    }
    /// The member's `O_DIRECT` descriptor, when it has one, so the engine may run a request's
    /// member operations on it through io_uring (`crate::uring`) instead of calling
    /// [`Member::read_vectored_at`]/[`Member::write_vectored_at`] on the I/O pool. Only
    /// [`FileMember`] in direct mode has one; every other backend keeps the default `None`
    /// and the pool. (The engine still goes through the methods above for any request the
    /// descriptor cannot take: unaligned offset or length, out of range, a read-only member.)
    fn direct_io(&self) -> Option<DirectIo<'_>> {
        None
    }
    /// The device's identity when it is one the kernel names (files, block devices), so
    /// members are matched by what they are, not by how a path spells them.
    fn identity(&self) -> Option<crate::ownership::DeviceIdentity> {
        None
    }
}

/// A member's `O_DIRECT` descriptor and what requests on it must respect (see
/// [`Member::direct_io`]). Built by [`FileMember`] only; the engine's io_uring executor
/// counts what it does with it in the member's [`IoStats`].
pub struct DirectIo<'a> {
    pub(crate) fd: BorrowedFd<'a>,
    /// File offsets and lengths must be multiples of this.
    pub(crate) offset_align: usize,
    /// Buffer addresses (and each iovec's length, via `offset_align`) must be multiples of this.
    pub(crate) mem_align: usize,
    /// The descriptor was opened for writing.
    pub(crate) writable: bool,
    counters: &'a Counters,
}

impl DirectIo<'_> {
    /// May `b` be handed to the kernel as it is? (The rule of [`FileMember`]'s own path.)
    pub(crate) fn fits(&self, b: &[u8]) -> bool {
        buffer_fits(b, self.offset_align, self.mem_align)
    }
    /// Alignment of a bounce buffer for this descriptor.
    pub(crate) fn bounce_align(&self) -> usize {
        self.offset_align.max(self.mem_align)
    }
    /// Counts one request run through io_uring, straight or through a bounce buffer.
    pub(crate) fn count_ring_op(&self, bounced: bool) {
        bump(if bounced { &self.counters.bounced } else { &self.counters.direct });
        bump(&self.counters.uring);
    }
}

/// Writes `len` zero bytes at `offset`, 1 MiB at a time.
pub fn write_zeros(m: &(impl Member + ?Sized), offset: u64, len: u64) -> io::Result<()> {
    let zeros = vec![0u8; len.min(1 << 20) as usize];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(zeros.len() as u64) as usize;
        m.write_at(&zeros[..n], offset + done)?;
        done += n as u64;
    }
    Ok(())
}

/// How a [`FileMember`] reaches its device.
///
/// `Auto` (what [`FileMember::open`] uses) means direct I/O (`O_DIRECT`) for block devices
/// that accept it and the page cache for regular files:
/// - on a block device the page cache only doubles what the array's users cache already
///   (their file system, the NBD/FUSE client), and costs a copy plus memory pressure, so
///   going around it is the better default;
/// - for image files the host file system's page cache is usually what the user wants
///   (members on tmpfs or a fast disk are read back from RAM), and some file systems refuse
///   `O_DIRECT` (older tmpfs, some overlay and FUSE mounts), so files stay buffered unless
///   `Direct` is asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IoMode {
    /// Everything through the page cache (pread/pwrite on a plain descriptor).
    Buffered,
    /// `O_DIRECT` for every aligned request; opening fails when the device or file system
    /// refuses direct I/O.
    Direct,
    /// `Direct` for block devices that accept it, `Buffered` otherwise (silently).
    #[default]
    Auto,
}

impl IoMode {
    pub const ALL: [IoMode; 3] = [IoMode::Buffered, IoMode::Direct, IoMode::Auto];

    pub fn name(self) -> &'static str {
        match self {
            IoMode::Buffered => "buffered",
            IoMode::Direct => "direct",
            IoMode::Auto => "auto",
        }
    }
}

impl std::fmt::Display for IoMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for IoMode {
    type Err = String;
    fn from_str(s: &str) -> Result<IoMode, String> {
        match s {
            "buffered" => Ok(IoMode::Buffered),
            "direct" => Ok(IoMode::Direct),
            "auto" => Ok(IoMode::Auto),
            _ => Err(format!("unknown I/O mode {s:?}: use buffered, direct or auto")),
        }
    }
}

/// How many requests of a [`FileMember`] took each path (cumulative since open).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Direct I/O straight from/to the caller's buffers.
    pub direct: u64,
    /// Direct I/O through an aligned bounce buffer (caller's memory not aligned).
    pub bounced: u64,
    /// Through the page cache (buffered mode, or after a demotion, see `einval_fallbacks`).
    pub buffered: u64,
    /// Direct mode, offset or length not aligned: widened to whole aligned blocks through a
    /// bounce buffer (a write reads the blocks, changes its bytes and writes them back).
    pub widened: u64,
    /// Direct requests the kernel refused with EINVAL although they looked aligned: the
    /// member then turns direct I/O off on its descriptor for good and redoes the request
    /// buffered. Should stay 0; a non-zero count means the alignment reported for the device
    /// is wrong.
    pub einval_fallbacks: u64,
    /// Of `direct + bounced`, the requests the engine ran through io_uring (a request's
    /// member operations submitted together, `crate::uring`) rather than pread/pwrite.
    pub uring: u64,
}

impl std::iter::Sum for IoStats {
    /// Totals over several members.
    fn sum<I: Iterator<Item = IoStats>>(iter: I) -> IoStats {
        iter.fold(IoStats::default(), |t, s| IoStats {
            direct: t.direct + s.direct,
            bounced: t.bounced + s.bounced,
            buffered: t.buffered + s.buffered,
            widened: t.widened + s.widened,
            einval_fallbacks: t.einval_fallbacks + s.einval_fallbacks,
            uring: t.uring + s.uring,
        })
    }
}

#[derive(Default)]
struct Counters {
    direct: AtomicU64,
    bounced: AtomicU64,
    buffered: AtomicU64,
    widened: AtomicU64,
    einval_fallbacks: AtomicU64,
    uring: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// May `b` be handed to the kernel for direct I/O as it is? (Empty slices are skipped by the
/// kernel.)
fn buffer_fits(b: &[u8], offset_align: usize, mem_align: usize) -> bool {
    b.is_empty() || ((b.as_ptr() as usize).is_multiple_of(mem_align) && b.len().is_multiple_of(offset_align))
}

/// The alignment direct I/O on a member's device demands.
#[derive(Debug, Clone, Copy)]
struct DirectAlign {
    /// File offsets and lengths (of each iovec, too) must be multiples of this.
    offset_align: usize,
    /// Buffer addresses must be multiples of this.
    mem_align: usize,
}

impl DirectAlign {
    /// May `b` be handed to the kernel as it is? (Empty slices are skipped by the kernel.)
    fn fits(&self, b: &[u8]) -> bool {
        buffer_fits(b, self.offset_align, self.mem_align)
    }
    fn bounce_align(&self) -> usize {
        self.offset_align.max(self.mem_align)
    }
}

/// A regular file or block device, opened read-only unless writes were asked for, so a
/// read-only command can never modify a member.
///
/// One descriptor per member, whatever the mode. In direct mode it carries `O_DIRECT` (set
/// with `fcntl` right after the open, so the exclusive claim, every request, the flush and
/// the discard all use it): a request whose offset and length are multiples of the device's
/// direct-I/O alignment goes direct, from/to the caller's buffers when their addresses and
/// lengths are aligned too, else through an aligned bounce buffer ([`BOUNCE_BYTES`] at a
/// time). Any other request is widened to whole aligned blocks through a bounce buffer: a
/// read reads the blocks and copies its bytes out; a write reads the blocks, changes its
/// bytes and writes the blocks back, under the member's `read_modify_write` lock. That lock
/// serialises such writes with each other; an aligned write never shares a block with one
/// unless the two overlap, and the engine never has overlapping writes in flight (data
/// under its stripe locks, each metadata area written by one writer at a time). With the
/// 512-byte logical blocks of most devices nothing needs widening: the engine's unit is the
/// 512-byte sector; 4 KiB-sector devices widen the sub-4 KiB metadata writes.
///
/// The earlier design kept a second, buffered descriptor for unaligned requests. Mixing the
/// page cache and direct I/O on one inode is coherent only as long as no buffered and
/// direct write of one page are in flight together (else the kernel logs "Page cache
/// invalidation failure on direct I/O" and a stale page may later overwrite the direct
/// write); one descriptor leaves nothing to reason about.
///
/// Should the kernel refuse with EINVAL a direct request that the reported alignment
/// allows (the alignment check is made before any byte moves), the member turns `O_DIRECT`
/// off on its descriptor for good, counts it (`IoStats::einval_fallbacks`) and redoes the
/// request buffered: from then on it is a buffered member.
pub struct FileMember {
    path: PathBuf,
    label: String,
    /// What the kernel calls this device, whatever path named it.
    identity: crate::ownership::DeviceIdentity,
    /// The one descriptor: `O_DIRECT` while `direct_on`. Holds the exclusive lock when
    /// writable.
    file: File,
    /// The device's direct-I/O alignment, when direct I/O was set up.
    direct: Option<DirectAlign>,
    /// `O_DIRECT` is on (cleared for good by an EINVAL demotion).
    direct_on: std::sync::atomic::AtomicBool,
    /// Serialises widened (read-modify-write) writes, see the type's documentation.
    read_modify_write: Mutex<()>,
    /// Asked at open, and again by [`Member::refresh_size`].
    size: std::sync::atomic::AtomicU64,
    writable: bool,
    counters: Counters,
}

/// The size of an open file or block device.
fn device_size(file: &File) -> io::Result<u64> {
    let meta = file.metadata()?;
    if meta.file_type().is_block_device() {
        // Block devices report size 0 in metadata; seeking to the end tells the truth.
        use std::io::{Seek, SeekFrom};
        let mut f = file;
        f.seek(SeekFrom::End(0))
    } else {
        Ok(meta.len())
    }
}

/// The process holding a lock on the device node at `path`, if any.
fn node_holder(path: &Path) -> Option<crate::ownership::Holder> {
    std::fs::metadata(path).ok().and_then(|m| crate::ownership::holder(&m))
}

impl FileMember {
    /// Opens with [`IoMode::Auto`]: direct I/O on block devices that accept it, buffered for
    /// files (see [`IoMode`] for why).
    pub fn open(path: &Path, writable: bool) -> io::Result<FileMember> {
        FileMember::open_with(path, writable, IoMode::Auto)
    }

    /// Opens with the given I/O mode. `Direct` on a device or file system that refuses
    /// `O_DIRECT` is an error naming the path; `Auto` then falls back to buffered.
    ///
    /// Opened for writing, the device is held exclusively for as long as this member lives
    /// (see [`crate::ownership`]): `O_EXCL` on block devices, a `flock` on every device, so a
    /// second writer gets an error naming the holder. FIFOs, sockets, character devices and
    /// directories are refused before they are opened (opening a FIFO would block).
    pub fn open_with(path: &Path, writable: bool, mode: IoMode) -> io::Result<FileMember> {
        let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let kind = crate::ownership::check_kind(path)?;
        let mut options = OpenOptions::new();
        options.read(true).write(writable);
        // O_NONBLOCK: should the path have been swapped for a FIFO since the check above,
        // the open returns at once and the file-type check below refuses it. (It changes
        // nothing for files and block devices, and is cleared right after the open.)
        let mut flags = rustix::fs::OFlags::NONBLOCK;
        if writable && kind.file_type().is_block_device() {
            flags |= rustix::fs::OFlags::EXCL;
        }
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.custom_flags(flags.bits() as i32);
        }
        let file = options.open(path).map_err(|e| match e.raw_os_error() {
            Some(code) if code == rustix::io::Errno::BUSY.raw_os_error() => {
                // Another uraid also holds a flock on the node, which names it; a mount or
                // md holds the device without one.
                let who = node_holder(path).map_or_else(
                    || "in use (mounted, or held exclusively by md or another program)".to_string(),
                    |h| format!("in use by {h}"),
                );
                io::Error::new(io::ErrorKind::ResourceBusy, format!("{}: {who}", path.display()))
            }
            _ => named(e),
        })?;
        rustix::fs::fcntl_setfl(&file, rustix::fs::fcntl_getfl(&file)? - rustix::fs::OFlags::NONBLOCK)?;
        if writable {
            crate::ownership::claim(&file, path)?;
        }
        let meta = file.metadata()?;
        let identity = crate::ownership::DeviceIdentity::of_metadata(&meta);
        let is_block = meta.file_type().is_block_device();
        if !is_block && !meta.is_file() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{}: not a regular file or block device", path.display())));
        }
        let size = device_size(&file)?;
        let direct = match mode {
            IoMode::Buffered => None,
            IoMode::Auto if !is_block => None,
            IoMode::Auto => turn_direct_on(&file, is_block, size).ok(),
            IoMode::Direct => Some(
                turn_direct_on(&file, is_block, size)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: direct I/O (O_DIRECT) refused: {e}", path.display())))?,
            ),
        };
        Ok(FileMember {
            label: path.display().to_string(),
            path: path.to_path_buf(),
            identity,
            file,
            direct_on: direct.is_some().into(),
            direct,
            read_modify_write: Mutex::new(()),
            size: size.into(),
            writable,
            counters: Counters::default(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The mode in effect: `Direct` or `Buffered` (never `Auto`).
    pub fn io_mode(&self) -> IoMode {
        if self.direct_align().is_some() {
            IoMode::Direct
        } else {
            IoMode::Buffered
        }
    }

    /// In direct mode, (offset/length alignment, buffer address alignment) in bytes.
    pub fn direct_alignment(&self) -> Option<(usize, usize)> {
        self.direct_align().map(|d| (d.offset_align, d.mem_align))
    }

    /// The alignment to respect while direct I/O is on.
    fn direct_align(&self) -> Option<DirectAlign> {
        self.direct.filter(|_| self.direct_on.load(Ordering::Acquire))
    }

    /// Which path requests took so far.
    pub fn io_stats(&self) -> IoStats {
        let c = &self.counters;
        IoStats {
            direct: c.direct.load(Ordering::Relaxed),
            bounced: c.bounced.load(Ordering::Relaxed),
            buffered: c.buffered.load(Ordering::Relaxed),
            widened: c.widened.load(Ordering::Relaxed),
            einval_fallbacks: c.einval_fallbacks.load(Ordering::Relaxed),
            uring: c.uring.load(Ordering::Relaxed),
        }
    }

    fn check_writable(&self) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("{} is open read-only", self.label)))
        }
    }

    fn read_bufs(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        check_range(self, offset, total)?;
        let fits = self.direct_align().is_some_and(|d| bufs.iter().all(|b| d.fits(b)));
        self.route(offset, total, fits, |route| match route {
            Route::Plain => preadv_all(&self.file, bufs, offset, &self.label),
            Route::Bounce(d) => bounce_read(&self.file, d, bufs, offset, &self.label),
            Route::Widen(d) => {
                let (lo, len) = widen(d, offset, total);
                let mut bounce = Bounce::take(d.bounce_align(), len);
                let blocks = &mut bounce.buf()[..len];
                preadv_all(&self.file, &mut [&mut *blocks], offset - lo as u64, &self.label)?;
                scatter(&blocks[lo..lo + total], bufs);
                Ok(())
            }
        })
    }

    fn write_bufs(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.check_writable()?;
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        check_range(self, offset, total)?;
        let fits = self.direct_align().is_some_and(|d| bufs.iter().all(|b| d.fits(b)));
        self.route(offset, total, fits, |route| match route {
            Route::Plain => pwritev_all(&self.file, bufs, offset, &self.label),
            Route::Bounce(d) => bounce_write(&self.file, d, bufs, offset, &self.label),
            Route::Widen(d) => {
                let (lo, len) = widen(d, offset, total);
                let start = offset - lo as u64;
                let mut bounce = Bounce::take(d.bounce_align(), len);
                let blocks = &mut bounce.buf()[..len];
                let _turn = self.read_modify_write.lock().unwrap_or_else(|e| e.into_inner());
                preadv_all(&self.file, &mut [&mut *blocks], start, &self.label)?;
                gather(bufs, &mut blocks[lo..lo + total]);
                pwritev_all(&self.file, &[&*blocks], start, &self.label)
            }
        })
    }

    /// Runs `op` on the path a request of `total` bytes at `offset` takes (see the type's
    /// documentation); `fits`: its buffers may go to the kernel as they are. A direct request the kernel refuses with EINVAL (the alignment check,
    /// made before any byte moves) turns direct I/O off for good and is done again buffered.
    fn route(&self, offset: u64, total: usize, fits: bool, mut op: impl FnMut(Route) -> io::Result<()>) -> io::Result<()> {
        if let Some(d) = self.direct_align() {
            let aligned = total > 0 && offset.is_multiple_of(d.offset_align as u64) && total.is_multiple_of(d.offset_align);
            let (route, counter) = if !aligned {
                (Route::Widen(d), &self.counters.widened)
            } else if fits {
                (Route::Plain, &self.counters.direct)
            } else {
                (Route::Bounce(d), &self.counters.bounced)
            };
            bump(counter);
            match op(route) {
                Err(e) if e.raw_os_error() == Some(EINVAL) => {
                    bump(&self.counters.einval_fallbacks);
                    self.demote_to_buffered()?;
                }
                done => return done,
            }
        }
        bump(&self.counters.buffered);
        op(Route::Plain)
    }

    /// Turns `O_DIRECT` off on the descriptor for good (see the type's documentation).
    fn demote_to_buffered(&self) -> io::Result<()> {
        let _turn = self.read_modify_write.lock().unwrap_or_else(|e| e.into_inner());
        if self.direct_on.swap(false, Ordering::AcqRel) {
            rustix::fs::fcntl_setfl(&self.file, rustix::fs::fcntl_getfl(&self.file)? - rustix::fs::OFlags::DIRECT)?;
        }
        Ok(())
    }
}

/// Where a request goes on the member's descriptor.
enum Route {
    /// The caller's buffers as they are (direct, or buffered when direct I/O is off).
    Plain,
    /// Direct, through an aligned bounce buffer (offset and length aligned, memory not).
    Bounce(DirectAlign),
    /// Direct, widened to whole aligned blocks (offset or length not aligned).
    Widen(DirectAlign),
}

/// The whole aligned blocks covering `total` bytes at `offset`: (the request's distance
/// from the first block's start, the blocks' length in bytes).
fn widen(d: DirectAlign, offset: u64, total: usize) -> (usize, usize) {
    let lo = (offset % d.offset_align as u64) as usize;
    (lo, (lo + total).div_ceil(d.offset_align) * d.offset_align)
}

/// Copies `from` into the buffers in order.
fn scatter(from: &[u8], bufs: &mut [&mut [u8]]) {
    let mut at = 0;
    for b in bufs.iter_mut() {
        b.copy_from_slice(&from[at..at + b.len()]);
        at += b.len();
    }
}

/// Copies the buffers in order into `to`.
fn gather(bufs: &[&[u8]], to: &mut [u8]) {
    let mut at = 0;
    for b in bufs {
        to[at..at + b.len()].copy_from_slice(b);
        at += b.len();
    }
}

const EINVAL: i32 = rustix::io::Errno::INVAL.raw_os_error();

/// Sets `O_DIRECT` on the member's descriptor, learns the device's alignment and proves
/// direct I/O works with one aligned read at offset 0 (some file systems accept the flag and
/// refuse the I/O). On any failure the flag is off again.
fn turn_direct_on(file: &File, is_block: bool, size: u64) -> io::Result<DirectAlign> {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    let flags = fcntl_getfl(file)?;
    fcntl_setfl(file, flags | OFlags::DIRECT)?;
    let proven = (|| {
        let (offset_align, mem_align) = dio_alignment(file, is_block)?;
        let d = DirectAlign { offset_align, mem_align };
        if !size.is_multiple_of(offset_align as u64) {
            // Widened requests at the end would reach past it.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("its size ({size} bytes) is not a multiple of the direct I/O alignment ({offset_align})"),
            ));
        }
        if size >= offset_align as u64 {
            let mut probe = AlignedBuf::zeroed(offset_align, d.bounce_align());
            file.read_exact_at(&mut probe, 0)?;
        }
        Ok(d)
    })();
    if proven.is_err() {
        fcntl_setfl(file, flags)?;
    }
    proven
}

/// (offset/length alignment, memory alignment) for direct I/O on `direct`.
///
/// statx(STATX_DIOALIGN) gives both for files on file systems that know (ext4, xfs, f2fs,
/// btrfs; Linux 6.1+) and for block devices (6.11+); a reported offset alignment of 0
/// means "no direct I/O on this file". Block devices without it use their logical block
/// size (BLKSSZGET) for both; files without it use 4096, which every device accepts.
fn dio_alignment(direct: &File, is_block: bool) -> io::Result<(usize, usize)> {
    use rustix::fs::{statx, AtFlags, StatxFlags};
    let dio = statx(direct, "", AtFlags::EMPTY_PATH, StatxFlags::DIOALIGN)
        .ok()
        .filter(|s| StatxFlags::from_bits_retain(s.stx_mask).contains(StatxFlags::DIOALIGN))
        .map(|s| (s.stx_dio_offset_align as usize, s.stx_dio_mem_align as usize));
    let (offset_align, mem_align) = if is_block {
        let lbs = rustix::fs::ioctl_blksszget(direct)? as usize;
        match dio {
            Some((o, m)) if o != 0 => (o.max(lbs), m.max(1)),
            _ => (lbs, lbs),
        }
    } else {
        match dio {
            Some((0, _)) => return Err(io::Error::new(io::ErrorKind::Unsupported, "the file system does not support direct I/O here")),
            Some((o, m)) => (o, m.max(1)),
            None => (4096, 4096),
        }
    };
    if !offset_align.is_power_of_two() || !mem_align.is_power_of_two() {
        return Err(io::Error::other(format!("odd direct I/O alignment {offset_align}/{mem_align}")));
    }
    Ok((offset_align, mem_align))
}

/// Bytes of one bounce buffer: unaligned-memory direct requests are copied through it this
/// much at a time.
pub const BOUNCE_BYTES: usize = 1 << 20;
/// Bounce buffers kept for reuse: enough for every request in flight to have one per
/// member (NBD serves 32 requests per connection at once), bounded in bytes so a burst of
/// large requests does not pin memory. A miss allocates (and zeroes) a new buffer: at 4 KiB
/// random writes with the pool too small, that zeroing was a tenth of the server's CPU.
const BOUNCE_POOL_MAX: usize = 256;
const BOUNCE_POOL_MAX_BYTES: usize = 32 << 20;
static BOUNCE_POOL: Mutex<Vec<AlignedBuf>> = Mutex::new(Vec::new());

/// An aligned buffer from the pool, returned to it on drop.
pub(crate) struct Bounce(Option<AlignedBuf>);

impl Bounce {
    /// A buffer of at least `want` bytes (rounded up to `align`), or [`BOUNCE_BYTES`] if
    /// `want` is larger (the caller then goes through it a piece at a time). Sized to the
    /// request, so a 4 KiB request does not take (and zero) a 1 MiB buffer.
    pub(crate) fn take(align: usize, want: usize) -> Bounce {
        let len = want.div_ceil(align).max(1).saturating_mul(align).min(BOUNCE_BYTES.max(align));
        let mut pool = BOUNCE_POOL.lock().unwrap_or_else(|e| e.into_inner());
        let best =
            pool.iter().enumerate().filter(|(_, b)| b.align() >= align && b.len() >= len).min_by_key(|(_, b)| b.len()).map(|(i, _)| i);
        let buf = match best {
            Some(i) => pool.swap_remove(i),
            None => {
                drop(pool);
                AlignedBuf::zeroed(len, align)
            }
        };
        Bounce(Some(buf))
    }
    pub(crate) fn buf(&mut self) -> &mut AlignedBuf {
        self.0.as_mut().expect("bounce buffer present until drop")
    }
}

impl Drop for Bounce {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            let mut pool = BOUNCE_POOL.lock().unwrap_or_else(|e| e.into_inner());
            let pooled: usize = pool.iter().map(|b| b.len()).sum();
            if pool.len() < BOUNCE_POOL_MAX && pooled + b.len() <= BOUNCE_POOL_MAX_BYTES {
                pool.push(b);
            }
        }
    }
}

/// A position in a run of buffers, walked in pieces.
#[derive(Default)]
struct Cursor {
    idx: usize,
    pos: usize,
}

impl Cursor {
    /// The next `n` bytes of the run, as (buffer index, range in that buffer, range in the
    /// `n` bytes) pieces, given the buffers' lengths; empty buffers are skipped.
    fn pieces(&mut self, len_of: impl Fn(usize) -> usize, n: usize) -> Vec<(usize, Range<usize>, Range<usize>)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < n {
            while self.pos == len_of(self.idx) {
                self.idx += 1;
                self.pos = 0;
            }
            let k = (len_of(self.idx) - self.pos).min(n - at);
            out.push((self.idx, self.pos..self.pos + k, at..at + k));
            self.pos += k;
            at += k;
        }
        out
    }
}

/// Runs `step(staged, at)` over a direct request of `total` bytes (a multiple of the
/// alignment), one aligned bounce buffer's worth at a time: `staged` is the chunk of the
/// buffer for bytes `at..at + staged.len()` of the request.
fn through_bounce(d: DirectAlign, total: usize, mut step: impl FnMut(&mut [u8], u64) -> io::Result<()>) -> io::Result<()> {
    let mut bounce = Bounce::take(d.bounce_align(), total);
    let chunk = bounce.buf().len();
    let mut done = 0;
    while done < total {
        let n = (total - done).min(chunk);
        step(&mut bounce.buf()[..n], done as u64)?;
        done += n;
    }
    Ok(())
}

/// Direct read of `bufs` (total aligned) through a bounce buffer.
fn bounce_read(file: &File, d: DirectAlign, bufs: &mut [&mut [u8]], offset: u64, label: &str) -> io::Result<()> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut cur = Cursor::default();
    through_bounce(d, total, |staged, at| {
        preadv_all(file, &mut [&mut *staged], offset + at, label)?;
        for (i, r, s) in cur.pieces(|i| bufs[i].len(), staged.len()) {
            bufs[i][r].copy_from_slice(&staged[s]);
        }
        Ok(())
    })
}

/// Direct write of `bufs` (total aligned) through a bounce buffer.
fn bounce_write(file: &File, d: DirectAlign, bufs: &[&[u8]], offset: u64, label: &str) -> io::Result<()> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut cur = Cursor::default();
    through_bounce(d, total, |staged, at| {
        for (i, r, s) in cur.pieces(|i| bufs[i].len(), staged.len()) {
            staged[s].copy_from_slice(&bufs[i][r]);
        }
        pwritev_all(file, &[staged], offset + at, label)
    })
}

/// At most this many iovecs per preadv/pwritev call (Linux's UIO_MAXIOV).
pub(crate) const IOV_MAX: usize = 1024;

/// Runs `io` (one preadv or pwritev at an offset) over `slices` in groups of at most
/// IOV_MAX, resuming after short transfers; `advance` is `advance_slices` of the slice type,
/// `stuck` the error for a call that moved nothing.
fn transfer_all<S: std::ops::Deref<Target = [u8]>>(
    slices: &mut [S],
    offset: u64,
    advance: fn(&mut &mut [S], usize),
    mut io: impl FnMut(&mut [S], u64) -> rustix::io::Result<usize>,
    stuck: impl Fn() -> io::Error,
) -> io::Result<()> {
    let mut at = offset;
    for mut rest in slices.chunks_mut(IOV_MAX) {
        advance(&mut rest, 0); // drops leading empty slices: nothing left, no call
        while !rest.is_empty() {
            let n = io(rest, at)?;
            if n == 0 {
                return Err(stuck());
            }
            at += n as u64;
            advance(&mut rest, n);
        }
    }
    Ok(())
}

fn preadv_all(file: &File, bufs: &mut [&mut [u8]], offset: u64, label: &str) -> io::Result<()> {
    let mut slices: Vec<IoSliceMut> = bufs.iter_mut().map(|b| IoSliceMut::new(b)).collect();
    transfer_all(
        &mut slices,
        offset,
        IoSliceMut::advance_slices,
        |s, at| rustix::io::preadv(file, s, at),
        || io::Error::new(io::ErrorKind::UnexpectedEof, format!("{label}: short read")),
    )
}

fn pwritev_all(file: &File, bufs: &[&[u8]], offset: u64, label: &str) -> io::Result<()> {
    let mut slices: Vec<IoSlice> = bufs.iter().map(|b| IoSlice::new(b)).collect();
    transfer_all(
        &mut slices,
        offset,
        IoSlice::advance_slices,
        |s, at| rustix::io::pwritev(file, s, at),
        || io::Error::new(io::ErrorKind::WriteZero, format!("{label}: wrote nothing")),
    )
}

impl Member for FileMember {
    fn label(&self) -> &str {
        &self.label
    }
    fn identity(&self) -> Option<crate::ownership::DeviceIdentity> {
        Some(self.identity)
    }
    fn size_bytes(&self) -> u64 {
        self.size.load(std::sync::atomic::Ordering::Acquire)
    }
    fn refresh_size(&self) -> io::Result<u64> {
        let size = device_size(&self.file)?;
        self.size.store(size, std::sync::atomic::Ordering::Release);
        Ok(size)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read_bufs(&mut [buf], offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_bufs(&[buf], offset)
    }
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        self.read_bufs(bufs, offset)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.write_bufs(bufs, offset)
    }
    fn direct_io(&self) -> Option<DirectIo<'_>> {
        self.direct_align().map(|d| DirectIo {
            fd: self.file.as_fd(),
            offset_align: d.offset_align,
            mem_align: d.mem_align,
            writable: self.writable,
            counters: &self.counters,
        })
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        self.check_writable()?;
        check_range(self, offset, len as usize)?;
        if self.file.metadata()?.is_file() {
            use rustix::fs::{fallocate, FallocateFlags};
            // A punched hole reads as zeros and frees the space; KEEP_SIZE keeps the member's
            // size (and drops the range from the page cache, if any of it is cached).
            if fallocate(&self.file, FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE, offset, len).is_ok() {
                return Ok(());
            }
        }
        // Block devices (a discard there need not read back as zeros) and filesystems
        // without hole punching: write zeros (direct where aligned, like any write).
        write_zeros(self, offset, len)
    }
    fn flush(&self) -> io::Result<()> {
        // fdatasync writes back the page cache (buffered mode) and makes the device flush its
        // volatile write cache, which direct writes may still sit in once they completed.
        if self.writable {
            self.file.sync_data()
        } else {
            Ok(())
        }
    }
}

/// The error every member gives for an access beyond its end (checked before any I/O).
pub fn check_range(m: &dyn Member, offset: u64, len: usize) -> io::Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= m.size_bytes() => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{}: access of {len} bytes at {offset} is beyond its end ({} bytes)", m.label(), m.size_bytes()),
        )),
    }
}

/// Whether a failed read may be a bad sector that rewriting fixes: a medium error, which
/// the kernel reports as EIO (or ENODATA/EILSEQ from some drivers), or an error without an
/// OS code of kind `Other` (a remote disk's or a test's EIO). Not one: a device that is
/// gone (ENODEV, ENXIO), smaller than it was (a short read), or refusing the request; md
/// fails such a member at once, and so does uraid. Decided on the error's kind and code,
/// never its message.
pub fn is_medium_error(e: &io::Error) -> bool {
    match e.raw_os_error() {
        Some(code) => [rustix::io::Errno::IO, rustix::io::Errno::NODATA, rustix::io::Errno::ILSEQ].iter().any(|c| c.raw_os_error() == code),
        None => e.kind() == io::ErrorKind::Other,
    }
}

/// A member in memory (tests, and the simulator's durable/volatile images build on it).
pub struct MemMember {
    label: String,
    bytes: RwLock<Vec<u8>>,
}

impl MemMember {
    pub fn new(label: impl Into<String>, bytes: Vec<u8>) -> MemMember {
        MemMember { label: label.into(), bytes: RwLock::new(bytes) }
    }
    pub fn zeroed(label: impl Into<String>, size: usize) -> MemMember {
        MemMember::new(label, vec![0; size])
    }
    /// A copy of the contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.read().map(|b| b.clone()).unwrap_or_default()
    }
}

impl Member for MemMember {
    fn label(&self) -> &str {
        &self.label
    }
    fn size_bytes(&self) -> u64 {
        self.bytes.read().map(|b| b.len() as u64).unwrap_or(0)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(self, offset, buf.len())?;
        let b = self.bytes.read().map_err(|_| io::Error::other("poisoned"))?;
        buf.copy_from_slice(&b[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(self, offset, buf.len())?;
        let mut b = self.bytes.write().map_err(|_| io::Error::other("poisoned"))?;
        b[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_medium_errors_are_worth_a_rewrite() {
        assert!(is_medium_error(&io::Error::from_raw_os_error(rustix::io::Errno::IO.raw_os_error())));
        assert!(is_medium_error(&io::Error::other("a remote disk's EIO")));
        assert!(!is_medium_error(&io::Error::from_raw_os_error(rustix::io::Errno::NODEV.raw_os_error())));
        assert!(!is_medium_error(&io::Error::from_raw_os_error(rustix::io::Errno::NXIO.raw_os_error())));
        assert!(!is_medium_error(&io::Error::new(io::ErrorKind::UnexpectedEof, "short read")));
    }

    #[test]
    fn read_only_file_member_refuses_writes_and_out_of_range() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.img");
        std::fs::write(&p, vec![7u8; 4096]).unwrap();
        let m = FileMember::open(&p, false).unwrap();
        assert_eq!(m.size_bytes(), 4096);
        let mut b = [0u8; 16];
        m.read_at(&mut b, 4080).unwrap();
        assert_eq!(b, [7u8; 16]);
        assert!(m.read_at(&mut b, 4081).is_err());
        assert!(m.write_at(&b, 0).is_err());
        assert_eq!(std::fs::read(&p).unwrap(), vec![7u8; 4096]);
    }

    #[test]
    fn direct_mode_really_uses_an_o_direct_descriptor() {
        use rustix::fs::{fcntl_getfl, OFlags};
        let dir = tempfile::tempdir_in("/tmp").unwrap();
        let p = dir.path().join("m.img");
        std::fs::write(&p, vec![0u8; 1 << 20]).unwrap();
        let m = FileMember::open_with(&p, true, IoMode::Direct).unwrap();
        assert_eq!(m.io_mode(), IoMode::Direct);
        assert!(fcntl_getfl(&m.file).unwrap().contains(OFlags::DIRECT), "the one descriptor carries O_DIRECT");
        let d = m.direct_align().expect("direct alignment");
        let (oa, _) = m.direct_alignment().unwrap();
        eprintln!("direct I/O alignment on /tmp: {:?}", m.direct_alignment());

        // Aligned offset, length and memory: straight through.
        let mut aligned = AlignedBuf::zeroed(2 * oa, d.bounce_align());
        aligned.fill(0xA5);
        m.write_at(&aligned, oa as u64).unwrap();
        assert_eq!(m.io_stats(), IoStats { direct: 1, ..IoStats::default() });
        // Aligned offset and length, memory off by one: bounced.
        let v = vec![0x5Au8; 2 * oa + 1];
        m.write_at(&v[1..], 4 * oa as u64).unwrap();
        let mut back = vec![0u8; 2 * oa + 1];
        m.read_at(&mut back[1..], 4 * oa as u64).unwrap();
        assert_eq!(back[1..], v[1..]);
        assert_eq!(m.io_stats(), IoStats { direct: 1, bounced: 2, ..IoStats::default() });
        // Unaligned offset: widened to the block, read-modify-write, still direct.
        m.write_at(&[1, 2, 3], 7).unwrap();
        // Across a block boundary, unaligned at both ends.
        m.write_at(&[9u8; 10], oa as u64 - 4).unwrap();
        let mut across = [0u8; 12];
        m.read_at(&mut across, oa as u64 - 5).unwrap();
        assert_eq!(across, [0, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 0xA5]);
        assert_eq!(m.io_stats().widened, 3);
        assert_eq!(m.io_stats().buffered, 0);
        // Each path sees what the others wrote.
        let mut all = AlignedBuf::zeroed(8 * oa, d.bounce_align());
        m.read_at(&mut all, 0).unwrap();
        assert_eq!(m.io_stats().direct, 2);
        assert_eq!(all[7..10], [1, 2, 3]);
        assert!(all[0..7].iter().chain(&all[10..oa - 4]).all(|&b| b == 0), "bytes around a widened write keep their value");
        assert!(all[oa + 6..3 * oa].iter().all(|&b| b == 0xA5));
        assert!(all[4 * oa..6 * oa].iter().all(|&b| b == 0x5A));
        m.flush().unwrap();
        assert_eq!(std::fs::read(&p).unwrap()[..8 * oa], all[..]);
        assert_eq!(m.io_stats().einval_fallbacks, 0);
    }

    #[test]
    fn direct_is_an_error_where_refused_and_auto_keeps_files_buffered() {
        // procfs refuses O_DIRECT at open (EINVAL).
        let p = Path::new("/proc/version");
        let e = FileMember::open_with(p, false, IoMode::Direct).err().expect("O_DIRECT on procfs must fail");
        assert!(e.to_string().contains("/proc/version") && e.to_string().contains("O_DIRECT"), "{e}");
        assert_eq!(FileMember::open_with(p, false, IoMode::Auto).unwrap().io_mode(), IoMode::Buffered);
        let dir = tempfile::tempdir_in("/tmp").unwrap();
        let f = dir.path().join("m.img");
        std::fs::write(&f, vec![0u8; 8192]).unwrap();
        assert_eq!(FileMember::open(&f, true).unwrap().io_mode(), IoMode::Buffered);
        assert_eq!(FileMember::open_with(&f, true, IoMode::Buffered).unwrap().direct_alignment(), None);
        // A size no whole number of direct blocks: widened requests at its end would reach
        // past it, so direct mode is refused (and `Auto` would keep it buffered).
        let odd = dir.path().join("odd.img");
        std::fs::write(&odd, vec![0u8; 8192 + 100]).unwrap();
        let e = FileMember::open_with(&odd, true, IoMode::Direct).err().expect("odd size refused");
        assert!(e.to_string().contains("not a multiple of the direct I/O alignment"), "{e}");
        assert_eq!("direct".parse::<IoMode>(), Ok(IoMode::Direct));
        assert!("fast".parse::<IoMode>().is_err());
    }

    #[test]
    fn mem_member_round_trip() {
        let m = MemMember::zeroed("m", 100);
        m.write_at(&[1, 2, 3], 97).unwrap();
        let mut b = [0u8; 3];
        m.read_at(&mut b, 97).unwrap();
        assert_eq!(b, [1, 2, 3]);
        assert!(m.write_at(&[1], 100).is_err());
    }
}
