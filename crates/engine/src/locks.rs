//! Range locks over stripes: writes (and degraded reads) to one stripe are serialised, so a
//! read-modify-write never interleaves with another on the same parity.

use std::collections::BTreeSet;
use std::sync::{Condvar, Mutex};

#[derive(Default)]
pub struct StripeLocks {
    held: Mutex<BTreeSet<u64>>,
    released: Condvar,
}

/// Holds stripes `first..=last` until dropped.
pub struct StripeGuard<'a> {
    locks: &'a StripeLocks,
    first: u64,
    last: u64,
}

impl StripeLocks {
    /// Waits until no stripe in `first..=last` is held by someone else, then holds them all.
    /// Taking a whole range at once (never one by one) rules out lock-order deadlocks.
    pub fn lock(&self, first: u64, last: u64) -> StripeGuard<'_> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        while held.range(first..=last).next().is_some() {
            held = self.released.wait(held).unwrap_or_else(|e| e.into_inner());
        }
        held.extend(first..=last);
        StripeGuard { locks: self, first, last }
    }
}

impl Drop for StripeGuard<'_> {
    fn drop(&mut self) {
        let mut held = self.locks.held.lock().unwrap_or_else(|e| e.into_inner());
        for s in self.first..=self.last {
            held.remove(&s);
        }
        self.locks.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn overlapping_ranges_exclude_each_other() {
        let locks = StripeLocks::default();
        let inside = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (locks, inside) = (&locks, &inside);
                s.spawn(move || {
                    for _ in 0..200 {
                        let _g = locks.lock(t, t + 2);
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders of overlapping stripes");
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                });
            }
        });
    }
}
