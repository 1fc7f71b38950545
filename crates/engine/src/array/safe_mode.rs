//! Clean/active marking and the write-intent bitmap's ordering, driven by the pure
//! [`WriteState`] machine: this file only performs the metadata writes a transition asks for
//! and waits where it says to wait (md's `md_write_start`/`md_write_end` and the bitmap's
//! pending writes).
//!
//! Lock order: `meta` may be held when `write_state` is taken, never the other way round, so
//! no metadata I/O ever happens under `write_state`.

use super::{Array, EngineError};
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;
use uraid_core::state::{BeginWrite, BitmapStep, CleanStep, WriteState};

/// A write (user write, or a job writing member data) in progress: the array is durably
/// active and cannot be marked clean until this is dropped.
pub(crate) struct WriteGuard<'a> {
    array: &'a Array,
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        let a = self.array;
        a.last_write_ms.store(a.started.elapsed().as_millis() as u64, Ordering::Release);
        a.lock_write_state().end_write();
        a.write_state_changed.notify_all();
    }
}

/// A job step (resync, recovery, repair) in progress: no clean mark runs meanwhile, but the
/// array is not marked active for it (md marks an array dirty only for user writes).
pub(crate) struct JobGuard<'a> {
    array: &'a Array,
}

impl Drop for JobGuard<'_> {
    fn drop(&mut self) {
        self.array.lock_write_state().end_job();
        self.array.write_state_changed.notify_all();
    }
}

impl Array {
    /// Starts a job step; waits while a clean mark is being written.
    pub(crate) fn begin_job(&self) -> Result<JobGuard<'_>, EngineError> {
        if !self.writable {
            return Err(EngineError::ReadOnly);
        }
        let mut st = self.lock_write_state();
        while !st.begin_job() {
            st = self.wait_write_state(st);
        }
        Ok(JobGuard { array: self })
    }

    pub(super) fn lock_write_state(&self) -> MutexGuard<'_, WriteState> {
        self.write_state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait_write_state<'a>(&'a self, guard: MutexGuard<'a, WriteState>) -> MutexGuard<'a, WriteState> {
        self.write_state_changed.wait(guard).unwrap_or_else(|e| e.into_inner())
    }

    /// What a superblock written now must say: active unless durably clean.
    pub(super) fn superblock_active(&self) -> bool {
        self.lock_write_state().superblock_says_active()
    }

    /// The resync offset a superblock written now for another reason carries.
    pub(super) fn resync_offset_for_superblock(&self) -> u64 {
        if self.superblock_active() {
            0
        } else {
            self.resync_position()
        }
    }

    /// Starts a write: before the first write after a clean state, the superblocks say
    /// "active" (md's resync_offset 0), durable before any data is written, so a crash
    /// leads to a resync. The check and the count happen under one lock, so no clean mark
    /// can slip in between.
    pub(crate) fn begin_write(&self) -> Result<WriteGuard<'_>, EngineError> {
        if !self.writable {
            return Err(EngineError::ReadOnly);
        }
        let mut st = self.lock_write_state();
        loop {
            match st.begin_write() {
                BeginWrite::Go => return Ok(WriteGuard { array: self }),
                BeginWrite::Wait => st = self.wait_write_state(st),
                BeginWrite::MarkActive => {
                    drop(st);
                    let result = {
                        let mut meta = self.lock_meta();
                        match meta.roster.failed() {
                            Some(why) => Err(super::Fault::Array(why).into()),
                            None => {
                                self.persist(&mut meta, 0);
                                Ok(())
                            }
                        }
                    };
                    st = self.lock_write_state();
                    match result {
                        Ok(()) => st.active_durable(),
                        Err(e) => {
                            st.activation_failed();
                            self.write_state_changed.notify_all();
                            return Err(e);
                        }
                    }
                    self.write_state_changed.notify_all();
                }
            }
        }
    }

    /// Flushes every member, then (if writes happened) records the array clean. Waits for
    /// writes in flight, and no write starts until the clean mark is durable. md does this
    /// after a short idle period and at stop.
    pub fn mark_clean(&self) -> Result<(), EngineError> {
        let mut st = self.lock_write_state();
        loop {
            match st.begin_clean() {
                CleanStep::AlreadyClean => {
                    drop(st);
                    return self.flush();
                }
                CleanStep::Wait => st = self.wait_write_state(st),
                CleanStep::MarkClean => break,
            }
        }
        drop(st);
        let result = self.flush().map(|()| {
            let mut meta = self.lock_meta();
            let resync = self.resync_pos.load(Ordering::Acquire);
            // The bitmap's bits are cleared on disk only with a complete resync and every role
            // in sync (md keeps them while degraded: they are what a re-add resyncs). Decided
            // under `meta`, which every change of the devices holds, so no member can go
            // missing between the decision and the write.
            let clear = resync == uraid_core::metadata::MAX_SECTOR && self.lock_write_state().clean_may_clear_bits();
            self.persist_clearing_bits(&mut meta, resync, clear);
            clear
        });
        let mut st = self.lock_write_state();
        match result {
            Ok(bits_cleared) => st.clean_durable(bits_cleared),
            Err(_) => st.clean_aborted(),
        }
        self.write_state_changed.notify_all();
        result.map(|_| ())
    }

    /// Whether the superblocks say "active", no write is in progress and none has finished
    /// for `idle`: md's safe-mode moment to mark the array clean again.
    pub fn dirty_and_idle(&self, idle: std::time::Duration) -> bool {
        let last = self.last_write_ms.load(Ordering::Acquire);
        self.lock_write_state().idle_active() && self.started.elapsed().as_millis() as u64 >= last + idle.as_millis() as u64
    }

    /// Makes the bitmap bits for a begun write to sync-range sectors `start..start+len`
    /// durable (the chunks are found under the state's lock: no other lock on this path), then
    /// asserts (release builds too) that the data may be written: the array durably active
    /// and the bits on disk. One bitmap write is in flight at a time, carrying every bit set
    /// so far; a writer whose bit is being written waits for that write.
    pub(super) fn bitmap_bits_durable(&self, sectors: Option<(u64, u64)>) {
        let mut st = self.lock_write_state();
        if let Some((c0, c1)) = sectors.and_then(|(start, len)| st.bitmap_chunks(start, len)) {
            loop {
                match st.bitmap_begin(c0, c1) {
                    BitmapStep::Durable => break,
                    BitmapStep::Wait => {
                        self.bitmap_waits.fetch_add(1, Ordering::Relaxed);
                        st = self.wait_write_state(st);
                    }
                    BitmapStep::Write { seq, bits } => {
                        drop(st);
                        // A member that fails this write is failed (and no longer written),
                        // so the bits are durable on every member still in the array.
                        self.write_bitmap_bits(&bits);
                        st = self.lock_write_state();
                        st.bitmap_written(seq);
                        self.write_state_changed.notify_all();
                    }
                }
            }
            st.assert_bits_durable(c0, c1);
        }
        st.assert_may_write_data();
    }

    /// Writes that had to wait for a bitmap write carrying their bit (md's bitmap "pending"
    /// list), since assembly.
    pub fn bitmap_waits(&self) -> u64 {
        self.bitmap_waits.load(Ordering::Relaxed)
    }
}
