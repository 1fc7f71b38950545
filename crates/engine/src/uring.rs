//! A request's member operations on `O_DIRECT` members, submitted together on io_uring.
//!
//! Why here and only here: the engine's API is synchronous, one array request per calling
//! thread, and a request fans out into one operation per member. `uraid bench uring`
//! (docs/BENCH.md) measured that shape: with `O_DIRECT` members, pushing the N operations on
//! a ring owned by the calling thread and waiting with one `submit_and_wait(N)` did 1.4-1.8×
//! the requests/s of the rayon pool at 4K chunks and 1.1-1.4× at 64K (same at 512K); on
//! buffered members (page-cache copies) it lost to the pool and to the in-line path, so
//! [`crate::parallel::run_member_io`] only comes here when every member of the request has an
//! `O_DIRECT` descriptor ([`Member::direct_io`]).
//!
//! The seam: the fan-out sites hand over their operations as data ([`MemberIo`]: member,
//! runs of offset + buffers) instead of closures, because a ring needs descriptor, offset and
//! buffers, which `parallel::run_all`'s opaque closures hide. The member only exposes its
//! descriptor and alignment; submission stays here, so the `unsafe` is in one module and
//! every backend (`MemMember`, the simulator's disks) is untouched.
//!
//! Rules, as [`FileMember`](crate::FileMember)'s own direct path:
//! - a run goes on the ring only if its offset and total length are multiples of the
//!   member's direct-I/O alignment, it is inside the member, and (writes) the member is
//!   writable; its buffers go to the kernel as they are when their addresses and lengths are
//!   aligned, else through a pooled aligned bounce buffer (copied in before submission for a
//!   write, out after completion for a read) when the run fits in one ([`BOUNCE_BYTES`]);
//! - every other run — and one the kernel refuses with EINVAL (the alignment check, made
//!   before any byte moves) — goes through the member's normal path (`read_vectored_at` /
//!   `write_vectored_at`) on the calling thread after the ring's operations completed, so
//!   one batch never has a buffered and a direct request of a member in flight together;
//! - short transfers are resubmitted for the remainder; EINTR/EAGAIN are retried; a transfer
//!   of 0 bytes is an error (UnexpectedEof for reads, WriteZero for writes), as with
//!   pread/pwrite; a real error is the result of that run only.
//!
//! Memory safety (the only `unsafe` of the engine): the kernel reads or writes the buffers
//! of an operation until its completion is reaped. [`run`] borrows the caller's buffers for
//! the whole call, owns the bounce buffers and iovec arrays in a vector declared before the
//! [`InFlight`] guard, and never returns — normally, with an error, or by unwinding — before
//! the guard saw every submitted operation complete: its `Drop` waits for all of them, and
//! aborts the process if the ring cannot be waited on any more (returning then would let the
//! kernel write into freed memory).
//!
//! One ring per thread (thread-local, created at the thread's first batch, [`DEPTH`]
//! entries); NBD and FUSE workers each get theirs. Where a ring cannot be set up (ENOSYS,
//! EPERM, `kernel.io_uring_disabled`, a seccomp filter; probed with a NOP) that is remembered
//! for the process and the pool is used. `URAID_NO_IO_URING=1` in the environment (read once)
//! turns io_uring off the same way: tests run the pool path with it.

use crate::member::{Bounce, DirectIo, Member, BOUNCE_BYTES, IOV_MAX};
use crate::parallel::{Bufs, MemberIo, Run};
use io_uring::{opcode, types, IoUring};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// Submission queue entries per ring: a request rarely has more member operations than
/// members; more are submitted in waves.
const DEPTH: usize = 64;
/// EINTR/EAGAIN completions of one operation retried before its error is returned.
const MAX_RETRIES: u32 = 1000;

/// Set once a ring could not be set up (or was turned off): never try again.
static DISABLED: AtomicBool = AtomicBool::new(false);
/// Why, for [`unavailable`].
static WHY_DISABLED: Mutex<Option<String>> = Mutex::new(None);

thread_local! {
    /// This thread's ring: `None` until first used (or when it could not be made).
    static RING: RefCell<Option<Ring>> = const { RefCell::new(None) };
}

/// A ring and whether the kernel submits every queued entry at each enter
/// (IORING_SETUP_SUBMIT_ALL, Linux 5.18); without it the kernel may stop at an entry that
/// fails to prepare and leave the rest queued, so waiting for all of them could hang.
struct Ring {
    ring: IoUring,
    submit_all: bool,
}

fn disable(why: String) {
    let mut w = WHY_DISABLED.lock().unwrap_or_else(|e| e.into_inner());
    w.get_or_insert(why);
    DISABLED.store(true, Ordering::Relaxed);
}

/// `URAID_NO_IO_URING` set to anything but "" or "0", read once per process.
fn switched_off() -> bool {
    static OFF: OnceLock<bool> = OnceLock::new();
    *OFF.get_or_init(|| std::env::var_os("URAID_NO_IO_URING").is_some_and(|v| !v.is_empty() && v != "0"))
}

/// Why the engine does not use io_uring in this process, or `None` when it does (trying to
/// set up this thread's ring first, if that was not done yet).
pub fn unavailable() -> Option<String> {
    let _ = with_ring(|_| ());
    DISABLED
        .load(Ordering::Relaxed)
        .then(|| WHY_DISABLED.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_else(|| "io_uring unavailable".into()))
}

/// Runs `f` on this thread's ring, creating it first if needed. `None` when io_uring is off,
/// could not be set up, or the ring is in use further up this thread's stack.
fn with_ring<T>(f: impl FnOnce(&mut Ring) -> T) -> Option<T> {
    if DISABLED.load(Ordering::Relaxed) {
        return None;
    }
    if switched_off() {
        disable("io_uring turned off by URAID_NO_IO_URING".into());
        return None;
    }
    RING.try_with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.is_none() {
            match Ring::new() {
                Ok(r) => *slot = Some(r),
                Err(e) => {
                    disable(format!("io_uring unavailable: {e}"));
                    return None;
                }
            }
        }
        slot.as_mut().map(f)
    })
    .ok()
    .flatten()
}

impl Ring {
    fn new() -> io::Result<Ring> {
        let (ring, submit_all) = match IoUring::builder().setup_submit_all().build(DEPTH as u32) {
            Ok(r) => (r, true),
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => (IoUring::new(DEPTH as u32)?, false),
            Err(e) => return Err(e),
        };
        let mut ring = Ring { ring, submit_all };
        ring.probe()?;
        Ok(ring)
    }

    /// One NOP through the ring: some sandboxes allow io_uring_setup and refuse the rest.
    fn probe(&mut self) -> io::Result<()> {
        let nop = opcode::Nop::new().build().user_data(u64::MAX);
        // SAFETY: a NOP points to no memory.
        unsafe { self.ring.submission().push(&nop) }.map_err(|_| io::Error::other("submission queue full"))?;
        let mut guard = InFlight { ring: &mut self.ring, submit_all: true, count: 1 };
        guard.wait()?;
        let mut result = None;
        guard.reap(|_, res| result = Some(res));
        match result {
            Some(r) if r >= 0 => Ok(()),
            Some(r) => Err(io::Error::from_raw_os_error(-r)),
            None => Err(io::Error::other("NOP did not complete")),
        }
    }
}

/// Operations submitted on a ring and not yet reaped. Dropping it waits for all of them.
struct InFlight<'r> {
    ring: &'r mut IoUring,
    submit_all: bool,
    count: usize,
}

impl InFlight<'_> {
    /// Submits what is queued and waits until completions are ready: all in flight when the
    /// kernel submits everything queued, else at least one.
    fn wait(&mut self) -> io::Result<()> {
        let want = if self.submit_all { self.count } else { self.count.min(1) };
        loop {
            match self.ring.submit_and_wait(want) {
                Ok(_) => return Ok(()),
                Err(e) if is_transient(&e) => {
                    // EAGAIN/EBUSY: the kernel wants completions reaped first; they are.
                    if !self.ring.completion().is_empty() {
                        return Ok(());
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Hands every ready completion (user data, result) to `f`.
    fn reap(&mut self, mut f: impl FnMut(u64, i32)) {
        for cqe in self.ring.completion() {
            self.count -= 1;
            f(cqe.user_data(), cqe.result());
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        while self.count > 0 {
            if let Err(e) = self.wait() {
                // The kernel may still use buffers that are freed once this returns: stopping
                // is the only sound way out.
                eprintln!("uraid: io_uring: cannot wait for {} member operations in flight: {e}", self.count);
                std::process::abort();
            }
            self.reap(|_, _| ());
        }
    }
}

fn is_transient(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock)
        || e.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error())
}

/// One `struct iovec` (same layout: base pointer, length).
#[repr(C)]
struct IoVec {
    base: *mut u8,
    len: usize,
}

/// Where an operation on the ring stands.
enum State {
    Pending,
    Done,
    Failed(io::Error),
    /// The kernel refused it with EINVAL: run it through the member's path.
    Redo,
}

/// A run submitted on the ring, with everything the kernel points into.
struct RingOp<'a> {
    /// Index of the member in the batch.
    member: usize,
    direct: DirectIo<'a>,
    run: Run<'a>,
    /// Aligned copy the kernel uses instead of the run's buffers when they do not fit.
    bounce: Option<Bounce>,
    /// What the kernel transfers, from `iov[skip]` on; advanced after a short transfer.
    iov: Vec<IoVec>,
    skip: usize,
    /// File offset of `iov[skip]`.
    offset: u64,
    retries: u32,
    state: State,
}

impl<'a> RingOp<'a> {
    /// A ring operation for `run` on `direct`, or the run back when it must take the member's
    /// own path.
    fn new(member: usize, direct: DirectIo<'a>, size: u64, run: Run<'a>) -> Result<RingOp<'a>, Run<'a>> {
        let total = run.bufs.bytes();
        let align = direct.offset_align as u64;
        let in_range = run.offset.checked_add(total as u64).is_some_and(|end| end <= size);
        let may_write = direct.writable || matches!(run.bufs, Bufs::Read(_));
        if total == 0
            || !in_range
            || !may_write
            || !run.offset.is_multiple_of(align)
            || !(total as u64).is_multiple_of(align)
            || run.bufs.count() > IOV_MAX
        {
            return Err(run);
        }
        let fits = match &run.bufs {
            Bufs::Read(b) => b.iter().all(|b| direct.fits(b)),
            Bufs::Write(b) => b.iter().all(|b| direct.fits(b)),
        };
        let bounce = if fits {
            None
        } else if total <= BOUNCE_BYTES {
            let mut bounce = Bounce::take(direct.bounce_align(), total);
            if let Bufs::Write(b) = &run.bufs {
                let staged = &mut bounce.buf()[..total];
                let mut at = 0;
                for b in b {
                    staged[at..at + b.len()].copy_from_slice(b);
                    at += b.len();
                }
            }
            Some(bounce)
        } else {
            // Larger unaligned-memory runs: the member's path bounces them a piece at a time.
            return Err(run);
        };
        let offset = run.offset;
        let mut op = RingOp { member, direct, run, bounce, iov: Vec::new(), skip: 0, offset, retries: 0, state: State::Pending };
        // The pointers are taken last, from the buffers where they stay until completion.
        op.iov = match (&mut op.bounce, &mut op.run.bufs) {
            (Some(bounce), _) => vec![IoVec { base: bounce.buf().as_mut_ptr(), len: total }],
            (None, Bufs::Read(b)) => b.iter_mut().map(|b| IoVec { base: b.as_mut_ptr(), len: b.len() }).collect(),
            // The kernel only reads a write's buffers: the pointer is never written through.
            (None, Bufs::Write(b)) => b.iter().map(|b| IoVec { base: b.as_ptr().cast_mut(), len: b.len() }).collect(),
        };
        Ok(op)
    }

    fn entry(&self) -> io_uring::squeue::Entry {
        let fd = types::Fd(self.direct.fd.as_raw_fd());
        let iov = self.iov[self.skip..].as_ptr().cast();
        // At most IOV_MAX iovecs (checked in `new`), so the count fits.
        let n = (self.iov.len() - self.skip) as u32;
        match self.run.bufs {
            Bufs::Read(_) => opcode::Readv::new(fd, iov, n).offset(self.offset).build(),
            Bufs::Write(_) => opcode::Writev::new(fd, iov, n).offset(self.offset).build(),
        }
    }

    /// Takes a completion's result; true when the operation must be submitted again.
    fn complete(&mut self, res: i32, label: &str) -> bool {
        const EINTR: i32 = rustix::io::Errno::INTR.raw_os_error();
        const EAGAIN: i32 = rustix::io::Errno::AGAIN.raw_os_error();
        const EINVAL: i32 = rustix::io::Errno::INVAL.raw_os_error();
        let is_read = matches!(self.run.bufs, Bufs::Read(_));
        #[cfg(test)]
        let res = tests::maybe_shorten(res, self.direct.offset_align);
        if res < 0 {
            match -res {
                EINTR | EAGAIN if self.retries < MAX_RETRIES => {
                    self.retries += 1;
                    return true;
                }
                EINVAL => {
                    self.state = State::Redo;
                    return false;
                }
                errno => self.state = State::Failed(io::Error::from_raw_os_error(errno)),
            }
        } else if res == 0 {
            self.state = State::Failed(if is_read {
                io::Error::new(io::ErrorKind::UnexpectedEof, format!("{label}: short read"))
            } else {
                io::Error::new(io::ErrorKind::WriteZero, format!("{label}: wrote nothing"))
            });
        } else {
            let mut n = res as usize;
            self.offset += n as u64;
            while n > 0 && self.skip < self.iov.len() {
                let v = &mut self.iov[self.skip];
                let k = n.min(v.len);
                // Stays inside the same buffer: k ≤ its remaining length.
                v.base = v.base.wrapping_add(k);
                v.len -= k;
                n -= k;
                if v.len == 0 {
                    self.skip += 1;
                }
            }
            if self.skip < self.iov.len() {
                return true; // short transfer: the rest
            }
            self.finish_read();
            self.state = State::Done;
        }
        self.direct.count_ring_op(self.bounce.is_some());
        false
    }

    /// A completed bounced read: the bytes to the caller's buffers.
    fn finish_read(&mut self) {
        let (Some(bounce), Bufs::Read(bufs)) = (self.bounce.as_mut(), &mut self.run.bufs) else { return };
        let staged = &bounce.buf()[..];
        let mut at = 0;
        for b in bufs.iter_mut() {
            b.copy_from_slice(&staged[at..at + b.len()]);
            at += b.len();
        }
    }
}

/// Runs `batch` with its aligned runs on this thread's ring; per member its first error.
/// The batch comes back untouched when io_uring is not available here, or when fewer than two
/// runs could use it (one operation gains nothing from a ring).
pub(crate) fn run(batch: Vec<MemberIo<'_>>) -> Result<Vec<io::Result<()>>, Vec<MemberIo<'_>>> {
    let eligible = |m: &MemberIo<'_>, r: &Run<'_>| {
        let Some(d) = m.member.direct_io() else { return false };
        let total = r.bufs.bytes() as u64;
        total > 0 && r.offset.is_multiple_of(d.offset_align as u64) && total.is_multiple_of(d.offset_align as u64)
    };
    let count: usize = batch.iter().map(|m| m.runs.iter().filter(|r| eligible(m, r)).count()).sum();
    if count < 2 {
        return Err(batch);
    }
    let mut batch = Some(batch);
    match with_ring(|ring| execute(ring, batch.take().expect("taken once"))) {
        Some(results) => Ok(results),
        None => Err(batch.expect("not taken when no ring")),
    }
}

/// The body of [`run`], with the ring.
fn execute(ring: &mut Ring, batch: Vec<MemberIo<'_>>) -> Vec<io::Result<()>> {
    let members: Vec<&dyn Member> = batch.iter().map(|m| m.member).collect();
    let mut results: Vec<io::Result<()>> = members.iter().map(|_| Ok(())).collect();
    // Runs for the member's own path, in order per member, after the ring's.
    let mut later: Vec<(usize, Run<'_>)> = Vec::new();
    // Declared before the guard below: dropped after it, so after every operation completed.
    let mut ops: Vec<RingOp<'_>> = Vec::new();
    for (i, MemberIo { member, runs }) in batch.into_iter().enumerate() {
        let size = member.size_bytes();
        for run in runs {
            let op = match member.direct_io() {
                Some(d) => RingOp::new(i, d, size, run),
                None => Err(run),
            };
            match op {
                Ok(op) => ops.push(op),
                Err(run) => later.push((i, run)),
            }
        }
    }
    // `ops` is not resized from here on: the iovecs and bounce buffers stay where they are.
    let mut queue: VecDeque<usize> = (0..ops.len()).collect();
    {
        let mut flight = InFlight { ring: &mut ring.ring, submit_all: ring.submit_all, count: 0 };
        while !queue.is_empty() || flight.count > 0 {
            while flight.count < DEPTH {
                let Some(i) = queue.pop_front() else { break };
                let entry = ops[i].entry().user_data(i as u64);
                // SAFETY: the entry points to `ops[i].iov` and through it to the caller's
                // buffers (borrowed for this whole call) or to `ops[i].bounce`; `ops` is neither
                // resized nor dropped before `flight`, whose Drop waits for every submitted
                // operation, also when unwinding; and an operation's buffers are not touched
                // again until its completion is reaped.
                if unsafe { flight.ring.submission().push(&entry) }.is_err() {
                    // Cannot happen (at most DEPTH in flight, each enter consumes the queue);
                    // if it did, the entry waits for the next round.
                    queue.push_front(i);
                    break;
                }
                flight.count += 1;
            }
            if let Err(e) = flight.wait() {
                // Not a member's fault. Dropping the guard waits for every operation in
                // flight (or aborts when it cannot); the runs whose completions it swallowed
                // are still Pending and run again through the members' own paths below.
                disable(format!("io_uring failed: {e}"));
                break;
            }
            flight.reap(|user_data, res| {
                let op = &mut ops[user_data as usize];
                if op.complete(res, members[op.member].label()) {
                    queue.push_back(user_data as usize);
                }
            });
        }
    }
    // Nothing is in flight any more.
    settle(ops, later, &mut results, &members);
    results
}

/// Collects the ring operations' outcomes into `results` (first error per member) and runs
/// what is left — runs that never went on the ring, EINVAL refusals, anything a ring failure
/// left pending — through each member's own path, in order, skipping members already failed.
fn settle<'a>(ops: Vec<RingOp<'a>>, mut later: Vec<(usize, Run<'a>)>, results: &mut [io::Result<()>], members: &[&'a dyn Member]) {
    for op in ops {
        match op.state {
            State::Done => {}
            State::Failed(e) => {
                if results[op.member].is_ok() {
                    results[op.member] = Err(e);
                }
            }
            State::Redo | State::Pending => later.push((op.member, op.run)),
        }
    }
    later.sort_by_key(|(m, r)| (*m, r.offset));
    for (m, mut run) in later {
        if results[m].is_ok() {
            results[m] = members[m].run_batch(std::slice::from_mut(&mut run));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::{FileMember, IoMode, IoStats, MemMember};
    use crate::parallel::run_member_io;
    use std::path::{Path, PathBuf};
    use uraid_parity::buffer::AlignedBuf;
    use uraid_parity::testdata::Prng;

    thread_local! {
        /// Pretend the kernel moved about half of what it did, so that the resubmission of
        /// the rest is exercised (harmless: the rest is transferred again, same bytes).
        static SHORTEN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// With [`SHORTEN`] on: a completion of `res > align` bytes reported as a shorter,
    /// still aligned count.
    pub(super) fn maybe_shorten(res: i32, align: usize) -> i32 {
        let n = res.max(0) as usize;
        if !SHORTEN.get() || n <= align {
            return res;
        }
        (((n / 2) / align).max(1) * align) as i32
    }

    /// False (and says why) where this kernel or sandbox gives no io_uring: the tests below
    /// then have nothing to test. Any other reason for no ring is a failure.
    fn ring_here() -> bool {
        match unavailable() {
            None => true,
            Some(why) => {
                let kernel_off = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").is_ok_and(|s| s.trim() != "0");
                let refused = why.contains("URAID_NO_IO_URING") || why.contains("not permitted") || why.contains("not implemented");
                assert!(kernel_off || refused, "io_uring should work here: {why}");
                eprintln!("skipped: {why}");
                false
            }
        }
    }

    fn sized_file(path: &Path, bytes: u64) {
        std::fs::File::create(path).unwrap().set_len(bytes).unwrap();
    }

    /// `n` zeroed member files of `bytes` under `dir`, opened direct.
    fn direct_members(dir: &Path, n: usize, bytes: u64) -> (Vec<PathBuf>, Vec<FileMember>) {
        let paths: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("m{i}.img"))).collect();
        let members = paths
            .iter()
            .map(|p| {
                sized_file(p, bytes);
                FileMember::open_with(p, true, IoMode::Direct).expect("/tmp supports O_DIRECT")
            })
            .collect();
        (paths, members)
    }

    /// `len` bytes starting `skew` bytes past an address aligned to 4 KiB.
    struct Buf {
        raw: AlignedBuf,
        skew: usize,
        len: usize,
    }

    impl Buf {
        fn new(len: usize, skew: usize) -> Buf {
            Buf { raw: AlignedBuf::zeroed(len + skew, 4096), skew, len }
        }
        fn get(&mut self) -> &mut [u8] {
            &mut self.raw[self.skew..self.skew + self.len]
        }
    }

    /// One planned member request.
    struct Planned {
        member: usize,
        offset: u64,
        write: bool,
        bufs: Vec<Buf>,
    }

    /// An offset and length inside `size`: aligned to `align` (sometimes more than a bounce
    /// buffer), whole 512-byte sectors, or any bytes.
    fn pick_range(rng: &mut Prng, size: u64, align: u64) -> (u64, usize) {
        let (unit, max_units) = match rng.below(10) {
            0 => (align, 3 * BOUNCE_BYTES as u64 / align),
            1..=5 => (align, 32),
            6 | 7 => (512, 64),
            _ => (1, 20_000),
        };
        let len = unit * (1 + rng.below(max_units));
        (unit * rng.below((size - len) / unit + 1), len as usize)
    }

    /// Buffers for `len` bytes: 1..=4 pieces, each aligned or skewed by 1 or 512 bytes,
    /// lengths multiples of `align` or anything.
    fn pick_bufs(rng: &mut Prng, len: usize, align: usize) -> Vec<Buf> {
        let aligned_lengths = rng.below(2) == 0 && len.is_multiple_of(align);
        let mut bufs = Vec::new();
        let mut left = len;
        while left > 0 {
            let n = if bufs.len() == 3 {
                left
            } else if aligned_lengths {
                (align * (1 + rng.below((left / align) as u64) as usize)).min(left)
            } else {
                1 + rng.below(left as u64) as usize
            };
            bufs.push(Buf::new(n, [0, 0, 0, 1, 512][rng.below(5) as usize]));
            left -= n;
        }
        bufs
    }

    /// Seeded batches of reads and writes (aligned and not, in offset, length and memory,
    /// vectored, some over a bounce buffer's size) on several direct members at once, run by
    /// the executor and mirrored on in-memory oracles; every read and the final contents must
    /// match, and the ring must have carried direct and bounced requests.
    #[test]
    fn random_batches_match_a_buffered_oracle() {
        if !ring_here() {
            return;
        }
        const SIZE: u64 = 8 << 20;
        let dir = tempfile::tempdir_in("/tmp").unwrap();
        let (paths, members) = direct_members(dir.path(), 4, SIZE);
        let align = members[0].direct_alignment().unwrap().0;
        let oracles: Vec<MemMember> = (0..4).map(|i| MemMember::zeroed(format!("o{i}"), SIZE as usize)).collect();
        let mut rng = Prng::new(0x0115_6E11);
        let mut on_ring = 0;
        for round in 0..200 {
            // From round 100 on, every transfer looks short: the rest must follow correctly.
            SHORTEN.set(round >= 100);
            // Disjoint ranges per member within a batch, as the engine issues them.
            let mut plan: Vec<Planned> = Vec::new();
            for m in 0..members.len() {
                for _ in 0..rng.below(4) {
                    let (offset, len) = pick_range(&mut rng, SIZE, align as u64);
                    let overlaps = plan.iter().any(|p| {
                        let plen: usize = p.bufs.iter().map(|b| b.len).sum();
                        p.member == m && offset < p.offset + plen as u64 && p.offset < offset + len as u64
                    });
                    if overlaps {
                        continue;
                    }
                    let mut bufs = pick_bufs(&mut rng, len, align);
                    let write = rng.below(2) == 0;
                    if write {
                        for b in &mut bufs {
                            rng.fill(b.get());
                        }
                    }
                    plan.push(Planned { member: m, offset, write, bufs });
                }
            }
            let mut batch: Vec<MemberIo> = Vec::new();
            let mut batch_member = Vec::new();
            for p in &mut plan {
                if batch_member.last() != Some(&p.member) {
                    batch_member.push(p.member);
                    batch.push(MemberIo { member: &members[p.member], runs: Vec::new() });
                }
                let bufs = if p.write {
                    Bufs::Write(p.bufs.iter_mut().map(|b| &*b.get()).collect())
                } else {
                    Bufs::Read(p.bufs.iter_mut().map(|b| b.get()).collect())
                };
                batch.last_mut().unwrap().runs.push(Run { offset: p.offset, bufs });
            }
            let results = match run(batch) {
                Ok(r) => {
                    on_ring += 1;
                    r
                }
                Err(batch) => run_member_io(batch),
            };
            for (m, r) in batch_member.iter().zip(&results) {
                assert!(r.is_ok(), "round {round}, member {m}: {r:?}");
            }
            for p in &mut plan {
                let what = format!("round {round}: member {} {} at {}", p.member, if p.write { "write" } else { "read" }, p.offset);
                let data: Vec<u8> = p.bufs.iter_mut().flat_map(|b| b.get().to_vec()).collect();
                if p.write {
                    oracles[p.member].write_at(&data, p.offset).unwrap();
                } else {
                    let mut want = vec![0u8; data.len()];
                    oracles[p.member].read_at(&mut want, p.offset).unwrap();
                    assert!(data == want, "{what}: read differs from the oracle");
                }
            }
        }
        let stats: IoStats = members.iter().map(|m| m.io_stats()).sum();
        eprintln!("{on_ring} batches on the ring; {stats:?}");
        assert!(on_ring > 150, "{on_ring}");
        assert!(stats.uring > 0 && stats.bounced > 0 && stats.widened > 0, "{stats:?}");
        assert_eq!(stats.buffered, 0, "{stats:?}");
        assert_eq!(stats.einval_fallbacks, 0);
        drop(members);
        for (p, o) in paths.iter().zip(&oracles) {
            assert!(std::fs::read(p).unwrap() == o.snapshot(), "{} differs from its oracle", p.display());
        }
    }

    /// Unaligned memory at aligned offsets goes on the ring through bounce buffers, both ways.
    #[test]
    fn skewed_buffers_are_bounced_on_the_ring() {
        if !ring_here() {
            return;
        }
        let dir = tempfile::tempdir_in("/tmp").unwrap();
        let (_, members) = direct_members(dir.path(), 2, 1 << 20);
        let mut rng = Prng::new(3);
        let mut out: Vec<Buf> = (0..2).map(|_| Buf::new(64 << 10, 1)).collect();
        let data: Vec<Vec<u8>> = (0..2).map(|_| rng.bytes(64 << 10)).collect();
        for (b, d) in out.iter_mut().zip(&data) {
            b.get().copy_from_slice(d);
        }
        let on_ring = |bufs: Vec<Bufs<'_>>| {
            let batch = members.iter().zip(bufs).map(|(m, bufs)| MemberIo { member: m, runs: vec![Run { offset: 8192, bufs }] });
            assert!(run(batch.collect()).ok().expect("on the ring").iter().all(|r| r.is_ok()));
        };
        on_ring(out.iter_mut().map(|b| Bufs::Write(vec![&*b.get()])).collect());
        let mut back: Vec<Buf> = (0..2).map(|_| Buf::new(64 << 10, 3)).collect();
        on_ring(back.iter_mut().map(|b| Bufs::Read(vec![b.get()])).collect());
        for (i, b) in back.iter_mut().enumerate() {
            assert!(b.get() == &data[i][..], "member {i}");
            assert_eq!(members[i].io_stats(), IoStats { bounced: 2, uring: 2, ..IoStats::default() });
        }
    }

    /// A member that ends early (its file shrunk under it) gives its run an error — a short
    /// read resubmitted for the rest, which then reads 0 bytes; or 0 bytes at once — instead
    /// of hanging; another member's run in the same batch completes, and a write to a
    /// read-only member is refused.
    #[test]
    fn short_io_at_end_of_file_is_an_error_for_that_member_only() {
        if !ring_here() {
            return;
        }
        let dir = tempfile::tempdir_in("/tmp").unwrap();
        let (paths, members) = direct_members(dir.path(), 3, 1 << 20);
        std::fs::write(&paths[1], vec![0x5Au8; 1 << 20]).unwrap();
        for p in [&paths[0], &paths[2]] {
            std::fs::OpenOptions::new().write(true).open(p).unwrap().set_len(256 << 10).unwrap();
        }
        let read_only = FileMember::open_with(&paths[1], false, IoMode::Direct).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut across = Buf::new(64 << 10, 0);
            let mut beyond = Buf::new(4096, 0);
            let mut fine = Buf::new(64 << 10, 0);
            let payload = Buf::new(4096, 0);
            let read = |offset, buf| vec![Run { offset, bufs: Bufs::Read(vec![buf]) }];
            let batch = vec![
                MemberIo { member: &members[0], runs: read(224 << 10, across.get()) },
                MemberIo { member: &members[1], runs: read(0, fine.get()) },
                MemberIo { member: &members[2], runs: read(512 << 10, beyond.get()) },
                MemberIo { member: &read_only, runs: vec![Run { offset: 0, bufs: Bufs::Write(vec![&payload.raw[..4096]]) }] },
            ];
            let results = run(batch).ok().expect("on the ring");
            let fine_ok = fine.get().iter().all(|&b| b == 0x5A);
            let results: Vec<_> = results.into_iter().map(|r| r.map_err(|e| (e.kind(), e.to_string()))).collect();
            tx.send((results, fine_ok, members[0].io_stats())).unwrap();
        });
        let (results, fine_ok, stats) = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the batch hung");
        assert!(matches!(&results[0], Err((io::ErrorKind::UnexpectedEof, _))), "{results:?}");
        assert!(results[1].is_ok() && fine_ok, "{results:?}");
        assert!(matches!(&results[2], Err((io::ErrorKind::UnexpectedEof, _))), "{results:?}");
        assert!(matches!(&results[3], Err((io::ErrorKind::PermissionDenied, _))), "{results:?}");
        assert_eq!(stats, IoStats { direct: 1, uring: 1, ..IoStats::default() });
    }
}
