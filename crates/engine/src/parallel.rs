//! Member I/O of one request issued in parallel: one thread per member operation when the
//! request is large enough for the thread start (~10 µs) to pay, in line otherwise.

/// Below this many bytes in total, operations run one after another.
const PARALLEL_MIN_BYTES: usize = 128 * 1024;

/// Runs every operation, returning the results in order.
pub fn run_all<T: Send>(ops: Vec<(usize, Box<dyn FnOnce() -> T + Send + '_>)>) -> Vec<T> {
    let total: usize = ops.iter().map(|(bytes, _)| *bytes).sum();
    if ops.len() < 2 || total < PARALLEL_MIN_BYTES {
        return ops.into_iter().map(|(_, op)| op()).collect();
    }
    std::thread::scope(|s| {
        let mut ops = ops.into_iter();
        let first = ops.next();
        let handles: Vec<_> = ops.map(|(_, op)| s.spawn(op)).collect();
        let mut results = Vec::with_capacity(handles.len() + 1);
        if let Some((_, op)) = first {
            results.push(op());
        }
        for h in handles {
            // A panicking member operation is a bug; re-raise it on the caller's thread.
            results.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        results
    })
}
