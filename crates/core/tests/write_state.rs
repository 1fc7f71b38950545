//! The clean/active and bitmap state machine under every interleaving proptest finds: several
//! writers and a clean-marker take turns step by step, each I/O of theirs lands at a separate
//! step, and a model of the disk checks md's two rules at every data write:
//! - the superblocks on disk say active (a crash now must lead to a resync);
//! - the write's bitmap bit is on disk.
//!
//! A member may go missing and come back at any step (`flips`): while one is missing, every
//! chunk written has its bit on disk until the array is whole again, clean marks included
//! (md keeps the bits while degraded; a re-add of the member resyncs just those chunks).

use proptest::prelude::*;
use std::collections::BTreeSet;
use uraid_core::metadata::{BitmapSuperblock, WriteIntentBits};
use uraid_core::state::{BeginWrite, BitmapStep, CleanStep, Mode, WriteState};

/// What is on the disk.
struct Disk {
    active: bool,
    bits: Option<WriteIntentBits>,
}

#[derive(Clone, Copy, Debug)]
enum Writer {
    Begin,
    /// Writing the active mark (lands at the next step).
    MarkingActive,
    Bitmap,
    /// Writing bitmap encoding `seq` (lands at the next step).
    WritingBits(u64),
    Data,
    End,
    Done,
}

#[derive(Clone, Copy, Debug)]
enum Cleaner {
    Begin,
    /// Flushing; at the next step it decides whether to clear the bits and writes the
    /// clean superblocks (and the bits, cleared or not) in one go, as the engine does under
    /// its metadata lock.
    MarkingClean,
    /// The clean mark (bits cleared or not) is on disk; reported at the next step.
    Written(bool),
    Done,
}

fn bitmap_shape(chunks: u64) -> BitmapSuperblock {
    BitmapSuperblock {
        version: 4,
        uuid: [0; 16],
        events: 0,
        events_cleared: 0,
        sync_size_sectors: chunks,
        state: 0,
        chunksize_bytes: 512,
        daemon_sleep_seconds: 5,
        write_behind: 0,
        sectors_reserved: 0,
        nodes: 0,
        cluster_name: [0; 64],
        pad: [0; 120],
    }
}

/// Runs one schedule: `picks` chooses the actor that steps next; at each step number in
/// `flips` a member goes missing, or (if one is missing) comes back.
fn run(writers: &[u64], with_bitmap: bool, start_active: bool, picks: &[usize], flips: &[usize]) {
    let shape = bitmap_shape(8);
    let bits = with_bitmap.then(|| WriteIntentBits::all_clean(&shape));
    let mut st = WriteState::new(start_active, bits.clone());
    let mut disk = Disk { active: start_active, bits };
    let mut pending_bits: Option<(u64, Vec<u8>)> = None;
    let mut ws: Vec<Writer> = vec![Writer::Begin; writers.len()];
    let mut cleaner = Cleaner::Begin;
    let mut cleans = 0;
    let mut i = 0;
    // Chunks written while a member was missing: their bits must stay on disk until it is back.
    let mut missed: BTreeSet<u64> = BTreeSet::new();
    let mut degraded = false;
    loop {
        if flips.contains(&i) {
            degraded = !degraded;
            st.set_degraded(degraded);
            if !degraded {
                // Back (resynced from the bits): nothing it missed is left to record.
                missed.clear();
            }
        }
        if let Some(b) = &disk.bits {
            for c in &missed {
                assert!(b.is_dirty(*c), "chunk {c}, written while a member was missing, lost its bit on disk");
            }
        }
        let all_done = ws.iter().all(|w| matches!(w, Writer::Done)) && matches!(cleaner, Cleaner::Done);
        if all_done {
            break;
        }
        // Past the schedule, round-robin: every actor gets to finish.
        let pick = picks.get(i).copied().unwrap_or(i) % (writers.len() + 1);
        i += 1;
        assert!(i < 10_000, "no progress: {ws:?} {cleaner:?} {:?}", st.mode());
        if pick == writers.len() {
            cleaner = match cleaner {
                Cleaner::Begin => match st.begin_clean() {
                    CleanStep::AlreadyClean => {
                        cleans += 1;
                        if cleans > 2 {
                            Cleaner::Done
                        } else {
                            Cleaner::Begin
                        }
                    }
                    CleanStep::MarkClean => Cleaner::MarkingClean,
                    CleanStep::Wait => Cleaner::Begin,
                },
                Cleaner::MarkingClean => {
                    let clear = st.clean_may_clear_bits();
                    assert!(!(clear && degraded), "the state machine allowed clearing the bits while a member was missing");
                    disk.active = false;
                    if let Some(b) = disk.bits.as_mut().filter(|_| clear) {
                        b.clear_all();
                    }
                    Cleaner::Written(clear)
                }
                Cleaner::Written(clear) => {
                    st.clean_durable(clear);
                    cleans += 1;
                    if cleans > 2 {
                        Cleaner::Done
                    } else {
                        Cleaner::Begin
                    }
                }
                Cleaner::Done => Cleaner::Done,
            };
            continue;
        }
        let chunk = writers[pick];
        ws[pick] = match ws[pick] {
            Writer::Begin => match st.begin_write() {
                BeginWrite::Go => Writer::Bitmap,
                BeginWrite::MarkActive => Writer::MarkingActive,
                BeginWrite::Wait => Writer::Begin,
            },
            Writer::MarkingActive => {
                disk.active = true;
                st.active_durable();
                Writer::Begin
            }
            Writer::Bitmap => match st.bitmap_begin(chunk, chunk) {
                BitmapStep::Durable => Writer::Data,
                BitmapStep::Write { seq, bits } => {
                    pending_bits = Some((seq, bits));
                    Writer::WritingBits(seq)
                }
                BitmapStep::Wait => Writer::Bitmap,
            },
            Writer::WritingBits(seq) => {
                let (s, bytes) = pending_bits.take().expect("one bitmap write in flight");
                assert_eq!(s, seq);
                let on_disk = disk.bits.as_mut().expect("bitmap");
                *on_disk = WriteIntentBits::decode(&shape, &bytes).unwrap();
                st.bitmap_written(seq);
                Writer::Bitmap
            }
            Writer::Data => {
                st.assert_may_write_data();
                st.assert_bits_durable(chunk, chunk);
                // md's rules, checked on the disk model, not on the state machine's word.
                assert!(disk.active, "data written while the superblocks say clean");
                if let Some(b) = &disk.bits {
                    assert!(b.is_dirty(chunk), "data written to chunk {chunk} before its bit was on disk");
                }
                if degraded {
                    missed.insert(chunk);
                }
                Writer::End
            }
            Writer::End => {
                st.end_write();
                Writer::Done
            }
            Writer::Done => Writer::Done,
        };
    }
    assert_eq!(st.writes_pending(), 0);
    assert!(matches!(st.mode(), Mode::Clean | Mode::Active));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn every_interleaving_keeps_md_order(
        writers in prop::collection::vec(0u64..8, 1..5),
        with_bitmap in any::<bool>(),
        start_active in any::<bool>(),
        picks in prop::collection::vec(0usize..8, 0..200),
        flips in prop::collection::vec(0usize..220, 0..4),
    ) {
        run(&writers, with_bitmap, start_active, &picks, &flips);
    }
}

/// Race 2 of the engine-foundation issue, in pure form: the second writer to a chunk whose bit
/// is set in memory but not yet on disk waits for the write that carries it.
#[test]
fn a_second_writer_waits_for_the_bit_the_first_is_writing() {
    let shape = bitmap_shape(8);
    let mut st = WriteState::new(true, Some(WriteIntentBits::all_clean(&shape)));
    assert_eq!(st.begin_write(), BeginWrite::Go);
    assert_eq!(st.begin_write(), BeginWrite::Go);
    let BitmapStep::Write { seq, .. } = st.bitmap_begin(3, 3) else { panic!("first writer writes the bit") };
    assert_eq!(st.bitmap_begin(3, 3), BitmapStep::Wait, "the bit is not durable yet");
    // A third chunk arriving meanwhile waits too, and is carried by the next write.
    assert_eq!(st.bitmap_begin(5, 5), BitmapStep::Wait);
    st.bitmap_written(seq);
    assert_eq!(st.bitmap_begin(3, 3), BitmapStep::Durable);
    let BitmapStep::Write { bits, .. } = st.bitmap_begin(5, 5) else { panic!("chunk 5 still needs a write") };
    let carried = WriteIntentBits::decode(&shape, &bits).unwrap();
    assert!(carried.is_dirty(3) && carried.is_dirty(5), "a later encoding carries every earlier bit");
}

/// Race 1 of the engine-foundation issue, in pure form: a clean mark cannot start while a
/// write is pending, and no write starts while the clean mark is being written.
#[test]
fn clean_waits_for_pending_writes_and_writes_wait_for_clean() {
    let mut st = WriteState::new(true, None);
    assert_eq!(st.begin_write(), BeginWrite::Go);
    assert_eq!(st.begin_clean(), CleanStep::Wait, "a write is pending");
    st.end_write();
    assert_eq!(st.begin_clean(), CleanStep::MarkClean);
    assert_eq!(st.begin_write(), BeginWrite::Wait, "the clean mark is being written");
    st.clean_durable(true);
    assert!(!st.superblock_says_active());
    assert_eq!(st.begin_write(), BeginWrite::MarkActive, "the first write after clean marks active");
    assert_eq!(st.begin_write(), BeginWrite::Wait);
    st.active_durable();
    assert_eq!(st.begin_write(), BeginWrite::Go);
}

#[test]
#[should_panic(expected = "data write while the array is Clean")]
fn a_data_write_in_a_clean_array_is_stopped() {
    WriteState::new(false, None).assert_may_write_data();
}

/// Job steps (recovery) do not mark the array active, but a clean mark waits for a step in
/// progress and a step waits for a clean mark being written.
#[test]
fn job_steps_and_the_clean_mark_exclude_each_other_without_marking_active() {
    let mut st = WriteState::new(false, None);
    assert!(st.begin_job(), "a job step starts on a clean array");
    assert_eq!(st.mode(), Mode::Clean, "and does not mark it active");
    st.end_job();
    assert_eq!(st.begin_write(), BeginWrite::MarkActive);
    st.active_durable();
    assert_eq!(st.begin_write(), BeginWrite::Go);
    st.end_write();
    assert!(st.begin_job());
    assert_eq!(st.begin_clean(), CleanStep::Wait, "a job step is in progress");
    st.end_job();
    assert_eq!(st.begin_clean(), CleanStep::MarkClean);
    assert!(!st.begin_job(), "the clean mark is being written");
    st.clean_durable(true);
    assert!(st.begin_job());
}

/// md keeps the bits while a member is missing: a clean mark then leaves them on disk and in
/// memory (later writes to those chunks need no bitmap write), and only a clean mark with
/// every member back clears them.
#[test]
fn bits_survive_clean_marks_while_a_member_is_missing() {
    let shape = bitmap_shape(8);
    let mut st = WriteState::new(true, Some(WriteIntentBits::all_clean(&shape)));
    st.set_degraded(true);
    assert_eq!(st.begin_write(), BeginWrite::Go);
    let BitmapStep::Write { seq, .. } = st.bitmap_begin(2, 2) else { panic!("the bit must be written") };
    st.bitmap_written(seq);
    assert_eq!(st.bitmap_begin(2, 2), BitmapStep::Durable);
    st.end_write();
    assert_eq!(st.begin_clean(), CleanStep::MarkClean);
    assert!(!st.clean_may_clear_bits(), "a member is missing: the bits must stay");
    st.clean_durable(false);
    assert!(st.durable_bits().unwrap().is_dirty(2) && st.dirty_bits().unwrap().is_dirty(2));
    assert_eq!(st.begin_write(), BeginWrite::MarkActive);
    st.active_durable();
    assert_eq!(st.begin_write(), BeginWrite::Go);
    assert_eq!(st.bitmap_begin(2, 2), BitmapStep::Durable, "the kept bit is still on disk");
    st.end_write();
    // The member is back: the next clean mark clears.
    st.set_degraded(false);
    assert_eq!(st.begin_clean(), CleanStep::MarkClean);
    assert!(st.clean_may_clear_bits());
    st.clean_durable(true);
    assert_eq!(st.durable_bits().unwrap().dirty_chunks().count(), 0);
    assert_eq!(st.dirty_bits().unwrap().dirty_chunks().count(), 0);
}

/// A clean mark that clears the bits without having been allowed to (a member was missing
/// when it asked) is stopped.
#[test]
#[should_panic(expected = "bitmap bits cleared while a role was missing")]
fn clearing_the_bits_while_a_member_is_missing_is_stopped() {
    let shape = bitmap_shape(8);
    let mut st = WriteState::new(true, Some(WriteIntentBits::all_clean(&shape)));
    st.set_degraded(true);
    assert_eq!(st.begin_clean(), CleanStep::MarkClean);
    assert!(!st.clean_may_clear_bits());
    st.clean_durable(true);
}
