//! Member I/O of one request issued in parallel, on a persistent pool (a thread start costs
//! ~20 µs, more than a 64 KiB copy): one task per member operation when the request is large
//! enough, in line otherwise. The pool has more threads than cores on purpose: member I/O
//! blocks on devices, not on the CPU.
//!
//! [`run_member_io`] takes a request's member operations as data instead of closures, so
//! that on `O_DIRECT` members they can go to io_uring ([`crate::uring`]): measured in
//! docs/BENCH.md ("io_uring: where it pays off"), one ring per calling thread with one
//! `submit_and_wait` beats the pool there, while on buffered members (memory copies) the pool
//! and the in-line path win.

use crate::member::Member;
use std::io;
use std::sync::OnceLock;

/// Below this many bytes in total, operations run one after another — on buffered members.
/// The threshold was set on tmpfs, where in line is 3.5× the pool for small requests; on
/// `O_DIRECT` members in line is 0.72× the pool (one device round trip after another), so
/// [`run_member_io`] ignores it when every member is direct.
const PARALLEL_MIN_BYTES: usize = 128 * 1024;
/// Threads for member I/O. A batch with more operations than this runs on threads of its
/// own instead ([`run_all_above`]): with 8 pool threads, a 10-disk array on emulated disks
/// wrote at 0.45 of its bound, two members' share of each request waiting for a thread
/// (`uraid bench disks --ten-disk`); a 32-thread pool fixed that but cost tmpfs reads about
/// 7% (`uraid bench array`: more idle pool threads woken per batch).
const IO_THREADS: usize = 8;

thread_local! {
    /// Set by [`in_line`]: this thread's buffered member I/O runs in line.
    static IN_LINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with this thread's member I/O on buffered members in line, not on the pool:
/// for a caller that already keeps the cores busy with threads of its own (the reshape's
/// read/write pipeline), where handing each member copy to the pool only adds wake-ups
/// and the pool's spinning on two cores. Direct members keep their parallel path (a device
/// round trip after another would serialise them).
pub fn in_line<R>(f: impl FnOnce() -> R) -> R {
    /// Puts the thread's previous setting back, also when `f` unwinds.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            IN_LINE.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(IN_LINE.with(|c| c.replace(true)));
    f()
}

fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| rayon::ThreadPoolBuilder::new().num_threads(IO_THREADS).thread_name(|i| format!("uraid-io-{i}")).build().ok())
        .as_ref()
}

/// A batch of operations: (bytes moved, operation).
pub type Ops<'a, T> = Vec<(usize, Box<dyn FnOnce() -> T + Send + 'a>)>;

/// Runs every operation, returning the results in order.
pub fn run_all<T: Send>(ops: Ops<'_, T>) -> Vec<T> {
    run_all_above(ops, PARALLEL_MIN_BYTES)
}

/// [`run_all`], on the pool once the operations move `min_bytes` in total (and there are
/// at least two of them).
fn run_all_above<T: Send>(ops: Ops<'_, T>, min_bytes: usize) -> Vec<T> {
    let total: usize = ops.iter().map(|(bytes, _)| *bytes).sum();
    let Some(pool) = pool().filter(|_| ops.len() >= 2 && total >= min_bytes) else {
        return run_in_line(ops);
    };
    if ops.len() > IO_THREADS {
        // More members than pool threads: one thread each (a start costs ~20 µs, nothing
        // next to a request that spans this many members), so none waits for another.
        return std::thread::scope(|s| {
            let handles: Vec<_> = ops.into_iter().map(|(_, op)| s.spawn(op)).collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
        });
    }
    let mut results: Vec<Option<T>> = (0..ops.len()).map(|_| None).collect();
    pool.scope(|s| {
        for ((_, op), slot) in ops.into_iter().zip(results.iter_mut()) {
            s.spawn(move |_| *slot = Some(op()));
        }
    });
    // Every task ran to completion inside the scope (a panic would have propagated).
    results.into_iter().map(|r| r.expect("scope ran every task")).collect()
}

/// Runs every operation on the calling thread, in order (the same shape as [`run_all`]).
pub fn run_in_line<T: Send>(ops: Ops<'_, T>) -> Vec<T> {
    ops.into_iter().map(|(_, op)| op()).collect()
}

/// The buffers of one member request.
pub enum Bufs<'a> {
    /// Filled one after another from the offset.
    Read(Vec<&'a mut [u8]>),
    /// Written one after another from the offset.
    Write(Vec<&'a [u8]>),
}

impl Bufs<'_> {
    /// Bytes the request moves.
    pub fn bytes(&self) -> usize {
        match self {
            Bufs::Read(b) => b.iter().map(|b| b.len()).sum(),
            Bufs::Write(b) => b.iter().map(|b| b.len()).sum(),
        }
    }
    pub(crate) fn count(&self) -> usize {
        match self {
            Bufs::Read(b) => b.len(),
            Bufs::Write(b) => b.len(),
        }
    }
}

/// Adds a write of `bytes` at byte `offset` to a member's `runs`: onto the last run when it
/// ends there (one vectored request), else as a new run. Callers add in offset order.
pub(crate) fn push_write<'a>(runs: &mut Vec<Run<'a>>, offset: u64, bytes: &'a [u8]) {
    match runs.last_mut() {
        Some(run @ Run { bufs: Bufs::Write(_), .. }) if run.offset + run.bufs.bytes() as u64 == offset => {
            if let Bufs::Write(parts) = &mut run.bufs {
                parts.push(bytes);
            }
        }
        _ => runs.push(Run { offset, bufs: Bufs::Write(vec![bytes]) }),
    }
}

/// [`push_write`] for a read into `buf`.
pub(crate) fn push_read<'a>(runs: &mut Vec<Run<'a>>, offset: u64, buf: &'a mut [u8]) {
    match runs.last_mut() {
        Some(run @ Run { bufs: Bufs::Read(_), .. }) if run.offset + run.bufs.bytes() as u64 == offset => {
            if let Bufs::Read(parts) = &mut run.bufs {
                parts.push(buf);
            }
        }
        _ => runs.push(Run { offset, bufs: Bufs::Read(vec![buf]) }),
    }
}

/// One request on a member: a vectored read or write at a byte offset.
pub struct Run<'a> {
    pub offset: u64,
    pub bufs: Bufs<'a>,
}

/// A request's operations on one member, run one after another (disjoint ranges).
pub struct MemberIo<'a> {
    pub member: &'a dyn Member,
    pub runs: Vec<Run<'a>>,
}

/// Runs a request's member operations, returning per member (in order) its first error.
///
/// - Every member has an `O_DIRECT` descriptor ([`Member::direct_io`]) and io_uring works
///   on this thread: all aligned runs are submitted together on the thread's ring and
///   waited for ([`crate::uring::run`]); the others run through the member's path afterwards.
/// - Every member direct, no ring: the pool, whatever the size (in line is slower there).
/// - Otherwise: [`run_all`], as before (pool from 128 KiB, else in line).
///
/// A member whose run fails has its remaining runs skipped (they may have been issued
/// already on the ring); the caller fails that member, as with the closures before.
pub fn run_member_io(batch: Vec<MemberIo<'_>>) -> Vec<io::Result<()>> {
    let direct = !batch.is_empty() && batch.iter().all(|m| m.member.direct_io().is_some());
    let batch = if direct {
        match crate::uring::run(batch) {
            Ok(results) => return results,
            Err(batch) => batch,
        }
    } else {
        batch
    };
    let ops: Ops<'_, io::Result<()>> = batch
        .into_iter()
        .map(|MemberIo { member, mut runs }| {
            let bytes = runs.iter().map(|r| r.bufs.bytes()).sum();
            let f: Box<dyn FnOnce() -> io::Result<()> + Send> = Box::new(move || member.run_batch(&mut runs));
            (bytes, f)
        })
        .collect();
    let min_bytes = if direct {
        0
    } else if IN_LINE.with(|c| c.get()) {
        usize::MAX
    } else {
        PARALLEL_MIN_BYTES
    };
    run_all_above(ops, min_bytes)
}
