//! Member I/O of one request issued in parallel, on a persistent pool (a thread start costs
//! ~20 µs, more than a 64 KiB copy): one task per member operation when the request is large
//! enough, in line otherwise. The pool has more threads than cores on purpose: member I/O
//! blocks on devices, not on the CPU.

use std::sync::OnceLock;

/// Below this many bytes in total, operations run one after another.
const PARALLEL_MIN_BYTES: usize = 128 * 1024;
/// Threads for member I/O: enough for one request to keep many members busy.
const IO_THREADS: usize = 8;

fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| rayon::ThreadPoolBuilder::new().num_threads(IO_THREADS).thread_name(|i| format!("uraid-io-{i}")).build().ok())
        .as_ref()
}

/// Runs every operation, returning the results in order.
pub fn run_all<T: Send>(ops: Vec<(usize, Box<dyn FnOnce() -> T + Send + '_>)>) -> Vec<T> {
    let total: usize = ops.iter().map(|(bytes, _)| *bytes).sum();
    let Some(pool) = pool().filter(|_| ops.len() >= 2 && total >= PARALLEL_MIN_BYTES) else {
        return run_in_line(ops);
    };
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
pub fn run_in_line<T: Send>(ops: Vec<(usize, Box<dyn FnOnce() -> T + Send + '_>)>) -> Vec<T> {
    ops.into_iter().map(|(_, op)| op()).collect()
}
