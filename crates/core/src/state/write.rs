//! Clean/active and the write-intent bitmap, in md's order (drivers/md/md.c
//! `md_write_start`/`md_write_end`, md-bitmap.c `bitmap_startwrite`):
//!
//! - Before the first write after a clean state, the superblocks say "active" and that is
//!   durable. Writers that arrive meanwhile wait; none writes data before.
//! - `writes_pending` counts writes between their start and their end. The array is marked
//!   clean only when it is zero, and while the clean mark is being written no write starts.
//!   The check and the transition happen under the caller's one lock, so "already active"
//!   can never be true for a writer that then writes into a clean array.
//! - A write's bitmap bits are durable before its data is written. One bitmap write is in
//!   flight at a time and it carries every bit set so far, so a later encoding never lands
//!   under an older one; a writer whose bit is set in memory but not yet on disk waits for
//!   the write that carries it.
//! - Bits are cleared only by a clean mark of an array with every role in sync (md-bitmap.c
//!   keeps them "needed" while the array is degraded): while a member is missing, the bits
//!   record every write it missed, and a re-add of it resyncs only those regions.

use crate::metadata::WriteIntentBits;

/// Whether the superblocks say the array is clean, and what is being written to change it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Durably clean: no write may touch data.
    Clean,
    /// The "active" mark is being written; writers wait for it.
    Activating,
    /// Durably active: writes may proceed.
    Active,
    /// The "clean" mark is being written (no write is pending); writers wait for it.
    Cleaning,
}

/// What a writer must do to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeginWrite {
    /// Counted as pending: write, then call [`WriteState::end_write`].
    Go,
    /// Write the "active" superblocks and flush them, then call
    /// [`WriteState::active_durable`] (or [`WriteState::activation_failed`]) and begin again.
    MarkActive,
    /// Another thread is changing the mode: wait for a change, then begin again.
    Wait,
}

/// What the clean mark must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanStep {
    /// Nothing to do: durably clean already.
    AlreadyClean,
    /// Flush the members, write the "clean" superblocks (and the bitmap cleared, if
    /// [`WriteState::clean_may_clear_bits`] says so), then call
    /// [`WriteState::clean_durable`] (or [`WriteState::clean_aborted`]).
    MarkClean,
    /// Writes are pending or a mode change is in flight: wait for a change, try again.
    Wait,
}

/// What a writer must do about its bitmap bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BitmapStep {
    /// The bits are durable (or there is no bitmap): write the data.
    Durable,
    /// Write these bits (the whole bit area) on every member and flush, then call
    /// [`WriteState::bitmap_written`] with `seq`, and ask again.
    Write { seq: u64, bits: Vec<u8> },
    /// A bitmap write that will carry the bits is in flight: wait for a change, ask again.
    Wait,
}

/// The bitmap's bits: what is wanted in memory and what is known to be on disk.
#[derive(Debug, Clone)]
struct BitmapBits {
    /// Set for every write started since the last clean mark.
    wanted: WriteIntentBits,
    /// As last written and flushed.
    durable: WriteIntentBits,
    /// The bitmap write in flight: its number and the bits it carries.
    in_flight: Option<(u64, WriteIntentBits)>,
    next_seq: u64,
}

/// Clean/active, writes pending and the bitmap, as one state machine.
#[derive(Debug, Clone)]
pub struct WriteState {
    mode: Mode,
    writes_pending: u64,
    /// Resync, recovery and repair steps in progress. They write member data but do not
    /// mark the array active (md marks it dirty only for user writes): their progress is
    /// checkpointed in the superblocks instead. They only keep a clean mark from recording
    /// a checkpoint while a step's writes are unflushed.
    jobs_pending: u64,
    bitmap: Option<BitmapBits>,
    /// Some role has no in-sync member (missing, or still being rebuilt). The bits are then
    /// never cleared: they are what a re-add of the missing member resyncs.
    degraded: bool,
    /// What [`WriteState::clean_may_clear_bits`] answered during the clean mark in progress.
    clear_allowed: bool,
}

impl WriteState {
    /// `active`: the superblocks already say active (an array assembled dirty). `bits`: the
    /// bitmap's bits as on disk, when the array has one.
    pub fn new(active: bool, bits: Option<WriteIntentBits>) -> WriteState {
        WriteState {
            mode: if active { Mode::Active } else { Mode::Clean },
            writes_pending: 0,
            jobs_pending: 0,
            bitmap: bits.map(|b| BitmapBits { wanted: b.clone(), durable: b, in_flight: None, next_seq: 1 }),
            degraded: false,
            clear_allowed: false,
        }
    }

    /// Whether some role has no in-sync member. The caller changes it under the same lock
    /// that orders it against the clean mark's [`WriteState::clean_may_clear_bits`] and the
    /// bitmap write that follows (the engine: its metadata lock).
    pub fn set_degraded(&mut self, degraded: bool) {
        self.degraded = degraded;
    }

    pub fn degraded(&self) -> bool {
        self.degraded
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn writes_pending(&self) -> u64 {
        self.writes_pending
    }

    /// What the superblocks must say when written now for another reason (a failed member,
    /// a checkpoint): active unless durably clean or on the way to clean with nothing
    /// pending. Writing "clean" while a write may be in flight would skip its resync.
    pub fn superblock_says_active(&self) -> bool {
        self.mode != Mode::Clean
    }

    /// Idle and active: md's safe-mode moment to mark clean.
    pub fn idle_active(&self) -> bool {
        self.mode == Mode::Active && self.writes_pending == 0
    }

    // ------------------------------------------------------------ clean / active

    pub fn begin_write(&mut self) -> BeginWrite {
        match self.mode {
            Mode::Active => {
                self.writes_pending += 1;
                BeginWrite::Go
            }
            Mode::Clean => {
                self.mode = Mode::Activating;
                BeginWrite::MarkActive
            }
            Mode::Activating | Mode::Cleaning => BeginWrite::Wait,
        }
    }

    pub fn active_durable(&mut self) {
        assert_eq!(self.mode, Mode::Activating, "active mark finished without being started");
        self.mode = Mode::Active;
    }

    /// The active mark could not be written: back to clean, writers see it and retry (and
    /// find the array failed, or try the mark again).
    pub fn activation_failed(&mut self) {
        assert_eq!(self.mode, Mode::Activating, "active mark failed without being started");
        self.mode = Mode::Clean;
    }

    pub fn end_write(&mut self) {
        assert!(self.writes_pending > 0, "a write ended that never began");
        assert!(matches!(self.mode, Mode::Active), "a write was pending while the array was {:?}", self.mode);
        self.writes_pending -= 1;
    }

    /// Asserts that data may be written now: a write has begun and the array is durably
    /// active. Called by the engine before every data write.
    pub fn assert_may_write_data(&self) {
        assert!(self.mode == Mode::Active, "data write while the array is {:?}: a crash would skip its resync", self.mode);
        assert!(self.writes_pending > 0, "data write outside begin_write/end_write");
    }

    /// Starts a job step (resync, recovery, repair): `false` means wait (a clean mark is
    /// being written), then try again.
    pub fn begin_job(&mut self) -> bool {
        if self.mode == Mode::Cleaning {
            return false;
        }
        self.jobs_pending += 1;
        true
    }

    pub fn end_job(&mut self) {
        assert!(self.jobs_pending > 0, "a job step ended that never began");
        self.jobs_pending -= 1;
    }

    pub fn jobs_pending(&self) -> u64 {
        self.jobs_pending
    }

    pub fn begin_clean(&mut self) -> CleanStep {
        match self.mode {
            Mode::Clean => CleanStep::AlreadyClean,
            Mode::Active if self.writes_pending == 0 && self.jobs_pending == 0 => {
                if let Some(b) = &self.bitmap {
                    assert!(b.in_flight.is_none(), "a bitmap write in flight with no write pending");
                }
                self.mode = Mode::Cleaning;
                self.clear_allowed = false;
                CleanStep::MarkClean
            }
            Mode::Active | Mode::Activating | Mode::Cleaning => CleanStep::Wait,
        }
    }

    /// During a clean mark: whether it may write the bitmap's bits cleared, as far as this
    /// state knows (there is a bitmap and no role is missing; the caller also keeps them
    /// while a resync is unfinished). Asked right before the bitmap write, under the lock
    /// that orders [`WriteState::set_degraded`]; [`WriteState::clean_durable`] refuses a
    /// clear it did not allow.
    pub fn clean_may_clear_bits(&mut self) -> bool {
        assert_eq!(self.mode, Mode::Cleaning, "bits may be cleared only by a clean mark");
        self.clear_allowed = self.bitmap.is_some() && !self.degraded;
        self.clear_allowed
    }

    /// The clean mark is durable. `bits_cleared`: the bitmap's bits were written cleared
    /// with it, which [`WriteState::clean_may_clear_bits`] must have allowed (md clears them
    /// only when the array is in sync and has every member; with a resync still to finish
    /// they stay, or a restart would skip regions that need it, and with a member missing
    /// they stay for its re-add).
    pub fn clean_durable(&mut self, bits_cleared: bool) {
        assert_eq!(self.mode, Mode::Cleaning, "clean mark finished without being started");
        assert_eq!(self.writes_pending, 0, "clean with writes pending");
        assert_eq!(self.jobs_pending, 0, "clean with a job step pending");
        assert!(
            !bits_cleared || self.bitmap.is_none() || self.clear_allowed,
            "bitmap bits cleared while a role was missing: a re-add would skip writes its member missed"
        );
        self.mode = Mode::Clean;
        if let Some(b) = self.bitmap.as_mut().filter(|_| bits_cleared) {
            b.wanted.clear_all();
            b.durable.clear_all();
        }
    }

    /// The clean mark failed (e.g. a flush error): the array stays active.
    pub fn clean_aborted(&mut self) {
        assert_eq!(self.mode, Mode::Cleaning, "clean mark aborted without being started");
        self.mode = Mode::Active;
    }

    // ------------------------------------------------------------ bitmap

    pub fn has_bitmap(&self) -> bool {
        self.bitmap.is_some()
    }

    /// For a begun write to bitmap chunks `c0..=c1`.
    /// The bitmap chunks covering sync-range sectors `start..start+len`, when there is a
    /// bitmap.
    pub fn bitmap_chunks(&self, start: u64, len: u64) -> Option<(u64, u64)> {
        let b = self.bitmap.as_ref()?;
        Some((b.wanted.chunk_of_sector(start), b.wanted.chunk_of_sector(start.saturating_add(len.max(1) - 1))))
    }

    pub fn bitmap_begin(&mut self, c0: u64, c1: u64) -> BitmapStep {
        assert!(self.writes_pending > 0 && self.mode == Mode::Active, "bitmap bits asked for outside a write");
        let Some(b) = &mut self.bitmap else { return BitmapStep::Durable };
        // Chunks past the bitmap's end have no bit to set (a bitmap of no chunks has none);
        // waiting for them would never end.
        let Some(last) = b.durable.chunk_count().checked_sub(1) else { return BitmapStep::Durable };
        let c1 = c1.min(last);
        if (c0..=c1).all(|c| b.durable.is_dirty(c)) {
            return BitmapStep::Durable;
        }
        for c in c0..=c1 {
            b.wanted.set_dirty(c, true);
        }
        if b.in_flight.is_some() {
            return BitmapStep::Wait;
        }
        let seq = b.next_seq;
        b.next_seq += 1;
        let bits = b.wanted.encode().to_vec();
        b.in_flight = Some((seq, b.wanted.clone()));
        BitmapStep::Write { seq, bits }
    }

    /// Bitmap write `seq` is durable on every member (a member that failed it was failed).
    pub fn bitmap_written(&mut self, seq: u64) {
        let b = self.bitmap.as_mut().expect("bitmap write reported without a bitmap");
        let (s, carried) = b.in_flight.take().expect("bitmap write reported with none in flight");
        assert_eq!(s, seq, "bitmap writes finished out of order");
        b.durable.union_with(&carried);
    }

    /// Asserts that chunks `c0..=c1` are durable before their data is written.
    pub fn assert_bits_durable(&self, c0: u64, c1: u64) {
        if let Some(b) = &self.bitmap {
            let Some(last) = b.durable.chunk_count().checked_sub(1) else { return };
            let c1 = c1.min(last);
            assert!((c0..=c1).all(|c| b.durable.is_dirty(c)), "data write to bitmap chunks {c0}..={c1} before their bits are durable");
        }
    }

    /// The durable bits, for tests and status.
    pub fn durable_bits(&self) -> Option<&WriteIntentBits> {
        self.bitmap.as_ref().map(|b| &b.durable)
    }

    /// Every bit set in memory: durable, being written, or wanted by a write waiting for
    /// its bitmap write. A superset of what is on disk and of what any begun write will
    /// need, so a region it leaves clean has had no write since the bits were last cleared.
    pub fn dirty_bits(&self) -> Option<&WriteIntentBits> {
        self.bitmap.as_ref().map(|b| &b.wanted)
    }
}
