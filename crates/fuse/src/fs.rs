//! The FUSE operations: a flat, fixed directory with one regular file per array. Every
//! read and write goes straight to the array (files are opened with `FOPEN_DIRECT_IO`; see
//! `open` for why), so this layer holds no data of its own.

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner,
    OpenAccMode, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    Request, TimeOrNow, WriteFlags,
};
use std::cell::RefCell;
use std::ffi::OsStr;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use uraid_engine::{EngineError, Volume};

/// How long the kernel may cache names and attributes. Sizes never change, so only mtime
/// could be stale, and a second of that harms no one while saving a getattr per stat.
const TTL: Duration = Duration::from_secs(1);

/// Reported `st_blksize`: the page size, which every tool treats as a sane I/O unit.
const BLOCK_BYTES: u32 = 4096;

/// One exported array.
pub(crate) struct ExportedFile {
    pub(crate) name: String,
    pub(crate) array: Arc<dyn Volume>,
    /// Last modification, ns since the epoch: bumped by writes so `ls -l` and backup tools
    /// see that the content changed.
    mtime_ns: AtomicU64,
    /// Writes arrived through this mount since the last array flush; `close` flushes only
    /// then, so read-only opens (`cat`, `cmp`) do not fsync every member.
    dirty: AtomicBool,
}

impl ExportedFile {
    pub(crate) fn new(name: String, array: Arc<dyn Volume>, now: SystemTime) -> ExportedFile {
        ExportedFile { name, array, mtime_ns: AtomicU64::new(to_ns(now)), dirty: AtomicBool::new(false) }
    }
}

fn to_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

pub(crate) struct ArrayFs {
    /// Inode `i + 2` is `files[i]`; inode 1 is the root directory.
    files: Vec<ExportedFile>,
    mounted_at: SystemTime,
    uid: u32,
    gid: u32,
    max_io_bytes: u32,
}

/// The errno for an engine error, by kind (never by message); exhaustive, so a new kind of
/// error needs a decision here. A range past the end is ENOSPC for a write (a full disk), as
/// for the start of a write at the end (see `write`), EINVAL otherwise.
fn errno_for(e: &EngineError) -> Errno {
    errno_for_op(e, false)
}

fn errno_for_op(e: &EngineError, writes: bool) -> Errno {
    match e {
        EngineError::ReadOnly => Errno::EROFS,
        EngineError::OutOfRange { .. } if writes => Errno::ENOSPC,
        EngineError::OutOfRange { .. } | EngineError::Invalid(_) => Errno::EINVAL,
        EngineError::Unsupported(_) => Errno::EOPNOTSUPP,
        // Lost data, a failed array or member: the kernel's word for all of them.
        EngineError::Unreadable { .. } | EngineError::Failed(_) | EngineError::Plan(_) => Errno::EIO,
        // Assembly errors: not produced by a request on an open array.
        EngineError::NoSuperblock { .. } | EngineError::Refused(_) | EngineError::ReshapeInProgress { .. } => Errno::EIO,
    }
}

thread_local! {
    /// One read buffer per FUSE worker thread, so a 1 MiB read does not allocate.
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl ArrayFs {
    pub(crate) fn new(files: Vec<ExportedFile>, max_io_bytes: u32) -> ArrayFs {
        ArrayFs {
            files,
            mounted_at: SystemTime::now(),
            uid: nix::unistd::getuid().as_raw(),
            gid: nix::unistd::getgid().as_raw(),
            max_io_bytes,
        }
    }

    fn file(&self, ino: INodeNo) -> Option<&ExportedFile> {
        let idx = ino.0.checked_sub(2)?;
        self.files.get(usize::try_from(idx).ok()?)
    }

    fn root_attr(&self) -> FileAttr {
        FileAttr {
            ino: INodeNo::ROOT,
            size: 0,
            blocks: 0,
            atime: self.mounted_at,
            mtime: self.mounted_at,
            ctime: self.mounted_at,
            crtime: self.mounted_at,
            kind: FileType::Directory,
            perm: 0o755,
            nlink: 2,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: BLOCK_BYTES,
            flags: 0,
        }
    }

    fn file_attr(&self, idx: usize) -> FileAttr {
        let f = &self.files[idx];
        let size = f.array.size_bytes();
        let mtime = UNIX_EPOCH + Duration::from_nanos(f.mtime_ns.load(Ordering::Relaxed));
        FileAttr {
            ino: INodeNo(idx as u64 + 2),
            size,
            // Every byte is backed by member space: report it all as allocated, so `du`
            // and sparse-aware copiers do not skip anything.
            blocks: size.div_ceil(512),
            atime: mtime,
            mtime,
            ctime: mtime,
            crtime: self.mounted_at,
            kind: FileType::RegularFile,
            // Owner-only like a disk device: the file is the raw array. Read-only arrays
            // say so in the mode, so `test -w` and editors tell the truth.
            perm: if f.array.is_writable() { 0o600 } else { 0o400 },
            nlink: 1,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: BLOCK_BYTES,
            flags: 0,
        }
    }

    fn attr(&self, ino: INodeNo) -> Option<FileAttr> {
        if ino == INodeNo::ROOT {
            return Some(self.root_attr());
        }
        let idx = usize::try_from(ino.0.checked_sub(2)?).ok()?;
        (idx < self.files.len()).then(|| self.file_attr(idx))
    }

    fn touch(&self, f: &ExportedFile) {
        f.mtime_ns.store(to_ns(SystemTime::now()), Ordering::Relaxed);
    }

    fn flush_array(f: &ExportedFile) -> Result<(), Errno> {
        // Cleared before flushing: a write that lands during the flush sets it again and is
        // flushed by the next close or fsync.
        f.dirty.store(false, Ordering::Release);
        f.array.flush().map_err(|e| {
            f.dirty.store(true, Ordering::Release);
            errno_for(&e)
        })
    }
}

impl Filesystem for ArrayFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // Large requests: the kernel splits direct I/O at max_write (writes) and at
        // max_pages, which fuser derives from max(max_write, max_readahead) (reads). A full
        // RAID5/6 stripe in one request lets the engine skip read-modify-write.
        if let Err(nearest) = config.set_max_write(self.max_io_bytes) {
            let _ = config.set_max_write(nearest);
        }
        // Big writes and max_pages are in fuser's defaults when the kernel offers them;
        // asking again only documents that we rely on them. Older kernels lack max_pages
        // and keep 128 KiB requests, which still works.
        let wanted = InitFlags::FUSE_BIG_WRITES | InitFlags::FUSE_MAX_PAGES;
        let _ = config.add_capabilities(wanted & config.capabilities());
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        match self.files.iter().position(|f| OsStr::new(&f.name) == name) {
            Some(idx) => reply.entry(&TTL, &self.file_attr(idx), Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let Some(current) = self.attr(ino) else { return reply.error(Errno::ENOENT) };
        // The size is the array's: truncating or growing would need a reshape. Setting the
        // size it already has is allowed so `truncate -s SAME` and copy tools that
        // pre-size their target work. (O_TRUNC on open arrives here as size 0: refused,
        // which protects the array from `> file`.)
        if size.is_some_and(|s| s != current.size) {
            return reply.error(Errno::EPERM);
        }
        // Mode and owner are derived (see file_attr), not stored: changing them is refused,
        // restating them is not.
        let perm_change = mode.is_some_and(|m| (m & 0o7777) as u16 != current.perm);
        if perm_change || uid.is_some_and(|u| u != current.uid) || gid.is_some_and(|g| g != current.gid) {
            return reply.error(Errno::EPERM);
        }
        // Times are accepted (touch, cp -p) and mtime kept; atime is not tracked.
        if let (Some(f), Some(t)) = (self.file(ino), mtime) {
            let when = match t {
                TimeOrNow::SpecificTime(t) => t,
                TimeOrNow::Now => SystemTime::now(),
            };
            f.mtime_ns.store(to_ns(when), Ordering::Relaxed);
        }
        match self.attr(ino) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let Some(f) = self.file(ino) else {
            return if ino == INodeNo::ROOT { reply.error(Errno::EISDIR) } else { reply.error(Errno::ENOENT) };
        };
        if flags.acc_mode() != OpenAccMode::O_RDONLY && !f.array.is_writable() {
            return reply.error(Errno::EROFS);
        }
        // Direct I/O, not the page cache: the array is also served over NBD and changed by
        // the engine's own jobs (repair), so cached pages here could be stale, and a cached
        // write would be acknowledged before the array has it. With FOPEN_DIRECT_IO every
        // read and write is a FUSE request the array answers, the kernel keeps no copy to
        // invalidate, and fsync means exactly "flush the array". A loop device on top keeps
        // its own cache (buffered loop), which is the usual block-device behaviour. The cost:
        // no readahead and no shared mmap of the file (the kernel refuses it), neither of
        // which raw-device users (loop, dd, qemu, mkfs) need. Parallel direct writes let the
        // worker threads write concurrently: the engine's stripe locks order overlaps.
        reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES);
    }

    #[allow(clippy::too_many_arguments)]
    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some(f) = self.file(ino) else { return reply.error(Errno::ENOENT) };
        let end = f.array.size_bytes();
        if offset >= end {
            return reply.data(&[]);
        }
        let len = (size as u64).min(end - offset) as usize;
        READ_BUF.with_borrow_mut(|buf| {
            if buf.len() < len {
                buf.resize(len, 0);
            }
            match f.array.read(offset, &mut buf[..len]) {
                Ok(()) => reply.data(&buf[..len]),
                Err(e) => reply.error(errno_for(&e)),
            }
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let Some(f) = self.file(ino) else { return reply.error(Errno::ENOENT) };
        let end = f.array.size_bytes();
        // A fixed-size file behaves like a full disk at its end: a write that starts there
        // fails, one that crosses it is short (write(2) then reports the short count).
        if offset >= end && !data.is_empty() {
            return reply.error(Errno::ENOSPC);
        }
        let len = (data.len() as u64).min(end.saturating_sub(offset)) as usize;
        f.dirty.store(true, Ordering::Release);
        match f.array.write(offset, &data[..len]) {
            Ok(()) => {
                self.touch(f);
                reply.written(len as u32)
            }
            Err(e) => reply.error(errno_for_op(&e, true)),
        }
    }

    fn flush(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // Called at every close(2). Flushing here (when this mount wrote anything) gives
        // close-to-open durability, so `dd` or `cp` without conv=fsync still leave data on
        // the members' stable storage; a reader's close costs nothing.
        let Some(f) = self.file(ino) else { return reply.ok() };
        if !f.dirty.load(Ordering::Acquire) {
            return reply.ok();
        }
        match Self::flush_array(f) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        // Always flushed, even without writes through this mount: fsync promises that every
        // acknowledged write to the array (NBD clients included) is durable. A loop
        // device's REQ_PREFLUSH (ext4 journal commits) arrives here.
        let Some(f) = self.file(ino) else { return reply.ok() };
        match Self::flush_array(f) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        // The directory never changes: nothing to make durable.
        reply.ok();
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if ino != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let mut entries: Vec<(INodeNo, FileType, &str)> =
            vec![(INodeNo::ROOT, FileType::Directory, "."), (INodeNo::ROOT, FileType::Directory, "..")];
        entries.extend(self.files.iter().enumerate().map(|(i, f)| (INodeNo(i as u64 + 2), FileType::RegularFile, f.name.as_str())));
        // The offset given back is the index of the next entry, so a listing continued in a
        // second call resumes where the buffer filled.
        for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(ino, i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // df shows the exported capacity as used and full: the space belongs to the arrays.
        let bytes: u64 = self.files.iter().map(|f| f.array.size_bytes()).sum();
        let blocks = bytes.div_ceil(BLOCK_BYTES as u64);
        reply.statfs(blocks, 0, 0, self.files.len() as u64 + 1, 0, BLOCK_BYTES, 255, BLOCK_BYTES);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Permission checks are the kernel's (mounted with default_permissions).
        reply.ok();
    }

    fn fallocate(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, length: u64, mode: i32, reply: ReplyEmpty) {
        let Some(f) = self.file(ino) else { return reply.error(Errno::ENOENT) };
        if !f.array.is_writable() {
            return reply.error(Errno::EROFS);
        }
        let size = f.array.size_bytes();
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let op = mode & !libc::FALLOC_FL_KEEP_SIZE;
        let Some(end) = offset.checked_add(length) else { return reply.error(Errno::EINVAL) };
        if end > size && !keep_size {
            // Would grow the file: the size is the array's.
            return reply.error(Errno::EFBIG);
        }
        let end = end.min(size);
        if op == 0 {
            // Preallocation: every byte of the array already exists.
            return reply.ok();
        }
        if op == libc::FALLOC_FL_ZERO_RANGE {
            // The caller needs zeros either way; without this it would send zero buffers
            // through the kernel, so writing them here is the cheap path.
            if offset >= end {
                return reply.ok();
            }
            f.dirty.store(true, Ordering::Release);
            return match f.array.write_zeroes(offset, end - offset) {
                Ok(()) => {
                    self.touch(f);
                    reply.ok()
                }
                Err(e) => reply.error(errno_for(&e)),
            };
        }
        // PUNCH_HOLE is a discard: the caller gives space back, expecting it to be cheap.
        // Arrays without parity discard on their members (holes in member files), which is
        // cheap. On RAID4/5/6 the only way to honour it is to write zeros, which would turn
        // mkfs's whole-device discard or an fstrim into a full-array write: EOPNOTSUPP makes
        // the loop driver stop advertising discard there; tools treat discard as optional.
        if offset >= end || !f.array.discard_is_cheap() {
            return if offset >= end { reply.ok() } else { reply.error(Errno::EOPNOTSUPP) };
        }
        f.dirty.store(true, Ordering::Release);
        match f.array.discard(offset, end - offset) {
            Ok(()) => {
                self.touch(f);
                reply.ok()
            }
            Err(e) => reply.error(errno_for(&e)),
        }
    }

    // The directory is fixed: one file per served array, created by `uraid serve`.

    fn mknod(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, _mode: u32, _umask: u32, _rdev: u32, reply: ReplyEntry) {
        reply.error(Errno::EPERM);
    }

    fn mkdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, _mode: u32, _umask: u32, reply: ReplyEntry) {
        reply.error(Errno::EPERM);
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EPERM);
    }

    fn rmdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EPERM);
    }

    fn rename(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EPERM);
    }

    fn symlink(&self, _req: &Request, _parent: INodeNo, _link_name: &OsStr, _target: &std::path::Path, reply: ReplyEntry) {
        reply.error(Errno::EPERM);
    }

    fn link(&self, _req: &Request, _ino: INodeNo, _newparent: INodeNo, _newname: &OsStr, reply: ReplyEntry) {
        reply.error(Errno::EPERM);
    }

    fn create(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, _mode: u32, _umask: u32, _flags: i32, reply: ReplyCreate) {
        reply.error(Errno::EPERM);
    }
}
