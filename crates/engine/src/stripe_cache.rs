//! The bound on stripe memory in flight, md's `stripe_cache_size`: a count of 4 KiB pages per
//! member. Every stripe operation reserves the pages its buffers need before allocating them
//! and waits while the cache is full, so memory stays bounded however many requests arrive.

use std::sync::{Condvar, Mutex};
use uraid_parity::buffer::AlignedBuf;

pub const PAGE_BYTES: u64 = 4096;
/// Alignment of stripe buffers: a page, the largest direct-I/O alignment in common use.
pub const BUFFER_ALIGN: usize = 4096;

/// A stripe buffer: page-aligned, so members with direct I/O take it as it is.
pub type StripeBuf = AlignedBuf;

/// A zeroed stripe buffer outside the cache's pool.
pub fn stripe_buf(len: usize) -> StripeBuf {
    AlignedBuf::zeroed(len, BUFFER_ALIGN)
}
/// md's default `stripe_cache_size`.
pub const DEFAULT_STRIPE_CACHE_PAGES: u64 = 256;

pub struct StripeCache {
    capacity_bytes: u64,
    used: Mutex<u64>,
    freed: Condvar,
    /// Buffers given back, for reuse: a reused buffer needs neither zeroing nor fresh pages.
    spare_buffers: Mutex<Vec<AlignedBuf>>,
}

pub struct Reservation<'a> {
    cache: &'a StripeCache,
    bytes: u64,
}

impl StripeCache {
    /// `pages` 4 KiB pages per member, for `members` members.
    pub fn new(pages: u64, members: usize) -> StripeCache {
        StripeCache {
            capacity_bytes: pages.max(1) * PAGE_BYTES * members.max(1) as u64,
            used: Mutex::new(0),
            freed: Condvar::new(),
            spare_buffers: Mutex::new(Vec::new()),
        }
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// A buffer of `len` bytes with unspecified contents (every caller overwrites it whole):
    /// a pooled one of that size if there is one, else a new zeroed one. Page-aligned, so a
    /// member with direct I/O reads into it and writes from it as it is (no bounce).
    pub fn buffer(&self, len: usize) -> AlignedBuf {
        let mut pool = self.spare_buffers.lock().unwrap_or_else(|e| e.into_inner());
        match pool.iter().position(|b| b.len() == len) {
            Some(i) => pool.swap_remove(i),
            None => stripe_buf(len),
        }
    }

    /// Gives a buffer back for reuse; the pool keeps at most the cache's capacity.
    pub fn recycle(&self, buf: AlignedBuf) {
        let mut pool = self.spare_buffers.lock().unwrap_or_else(|e| e.into_inner());
        let held: usize = pool.iter().map(|b| b.len()).sum();
        if (held + buf.len()) as u64 <= self.capacity_bytes.max(16 << 20) {
            pool.push(buf);
        }
    }

    /// Waits for `bytes` of room. A single request larger than the whole cache is let in
    /// alone (when nothing else is in flight), so it can never wait forever.
    pub fn reserve(&self, bytes: u64) -> Reservation<'_> {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        while *used > 0 && *used + bytes > self.capacity_bytes {
            used = self.freed.wait(used).unwrap_or_else(|e| e.into_inner());
        }
        *used += bytes;
        Reservation { cache: self, bytes }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut used = self.cache.used.lock().unwrap_or_else(|e| e.into_inner());
        *used -= self.bytes;
        self.cache.freed.notify_all();
    }
}
