//! Which part of a striped array a reshape moves next, and when the superblock must record
//! progress first: md's checkpoint rule, as a pure function (no I/O).
//!
//! A reshape copies the array, window by window, from the old shape to the new one over
//! the same members. The new shape's data sits at a different data offset (md's
//! `new_offset`), so that copying a window never lands on old data that is still needed.
//! "Still needed" is decided by the superblock, not by memory: after a crash, uraid (or md)
//! reads every array sector below the recorded `reshape_position` from the new shape and
//! everything else from the old one (for a forward reshape; a backward one is the mirror
//! image). So before a window's writes could overwrite the old copy of a sector at or
//! beyond the recorded position, the position must be advanced on disk, after the data
//! already written is durable: that is md's rule (raid5.c `reshape_request`, its
//! writepos/readpos/safepos test), and [`WindowPlanner::next`] says when to do it.
//!
//! Both shapes are striped: RAID0/4/5/6, where every stripe occupies `chunk_sectors` on
//! every member at the same member offset, so only member *rows* matter, not which member
//! holds parity; or RAID10 near, where each chunk's copies fill consecutive slots of a row
//! and spill into the next one when the member count is not a multiple of the copies, or
//! RAID10 offset, where each row of slots is followed by its far copies, one chunk row each
//! (raid10.c `first_dev_address`/`last_dev_address` give the rows a chunk may touch; a
//! RAID10 reshape position may fall on any sector, md's own moving 64 KiB at a time).

/// One shape of a reshaping array, as the window planner needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripedShape {
    /// Chunk slots in each member row: the members holding data (members minus parity), or
    /// every member of a RAID10.
    pub data_disks: u64,
    /// Copies of each chunk, in consecutive slots: RAID10 near's `n`; 1 for RAID0/4/5/6.
    pub copies: u64,
    /// Chunk rows each row of slots takes: RAID10 offset's far copies (each the next chunk
    /// row, shifted a member on); 1 otherwise.
    pub offset_copies: u64,
    pub chunk_sectors: u64,
    /// Where the shape's data starts on each member, in sectors.
    pub data_offset_sectors: u64,
    /// The shape's array size, in sectors (a whole number of stripes).
    pub array_sectors: u64,
}

impl StripedShape {
    /// A RAID0/4/5/6 shape (one copy of each chunk).
    pub fn parity(data_disks: u64, chunk_sectors: u64, data_offset_sectors: u64, array_sectors: u64) -> StripedShape {
        StripedShape { data_disks, copies: 1, offset_copies: 1, chunk_sectors, data_offset_sectors, array_sectors }
    }

    /// Each chunk has more than one copy (RAID10): chunks are placed one by one.
    fn copied(&self) -> bool {
        self.copies * self.offset_copies > 1
    }

    /// Array sectors in the shape's unit of placement: a whole stripe when there is one
    /// copy (parity covers the stripe), one chunk with copies (each chunk is placed on its
    /// own).
    pub fn stripe_sectors(&self) -> u64 {
        if self.copied() {
            self.chunk_sectors
        } else {
            self.data_disks * self.chunk_sectors
        }
    }

    /// Where a reshape position may fall: on a stripe boundary of a parity shape (md
    /// moves whole stripes), on any sector with copies (md's raid10 moves up to 64 KiB at
    /// a time and records wherever it is).
    fn position_alignment(&self) -> u64 {
        if self.copied() {
            1
        } else {
            self.stripe_sectors()
        }
    }

    /// The member sectors `[lo, hi)` that may hold array sectors `[first, end)`: the rows
    /// of every chunk slot they touch, whole chunks.
    pub fn member_span(&self, first: u64, end: u64) -> (u64, u64) {
        let (cs, slots) = (self.chunk_sectors, self.data_disks.max(1));
        let row = cs * self.offset_copies;
        let first_slot = first / cs * self.copies;
        let end_slot = end.div_ceil(cs) * self.copies;
        (self.data_offset_sectors + first_slot / slots * row, self.data_offset_sectors + end_slot.div_ceil(slots) * row)
    }
}

/// The next window to move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Array sectors `[first, end)`.
    pub first: u64,
    pub end: u64,
    /// Before writing the window, make every earlier write durable and record the current
    /// position in the superblock.
    pub checkpoint_first: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error(
        "the new data offset leaves no room: moving array sectors {first}..{end} would overwrite old data that is still \
         needed (md would need a backup file here)"
    )]
    NoRoom { first: u64, end: u64 },
    #[error("the reshape position {position} is not on a stripe boundary of the new shape ({stripe} sectors)")]
    Misaligned { position: u64, stripe: u64 },
}

/// Plans a reshape's windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowPlanner {
    pub old: StripedShape,
    pub new: StripedShape,
    /// From the end towards the start (a shrink): sectors at and above the position are new.
    pub backwards: bool,
    /// Most array sectors moved in one window (bounds memory and how long foreground
    /// requests to the window wait); rounded to whole units, at least one.
    pub max_window_sectors: u64,
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

impl WindowPlanner {
    /// Array sectors in the smallest window aligned to whole stripes of both shapes
    /// (mdadm's `compute_backup_blocks`: the lcm of the two stripe widths).
    pub fn unit_sectors(&self) -> u64 {
        let (a, b) = (self.old.stripe_sectors(), self.new.stripe_sectors());
        a / gcd(a, b) * b
    }

    /// The array sectors the reshape covers: the new shape's size (a grow fills what lies
    /// beyond the old size with zeros, as md does).
    pub fn end_sectors(&self) -> u64 {
        self.new.array_sectors
    }

    /// Where a reshape starts: 0 forwards, the end backwards.
    pub fn start_position(&self) -> u64 {
        if self.backwards {
            self.end_sectors()
        } else {
            0
        }
    }

    /// Whether the reshape has moved everything.
    pub fn is_done(&self, position: u64) -> bool {
        if self.backwards {
            position == 0
        } else {
            position >= self.end_sectors()
        }
    }

    /// The member sectors holding old data that a restart from `checkpoint` would read.
    fn needed_old(&self, checkpoint: u64) -> (u64, u64) {
        let old_end = self.old.array_sectors.min(self.end_sectors());
        let (first, end) = if self.backwards { (0, checkpoint.min(old_end)) } else { (checkpoint, old_end) };
        if first >= end {
            return (0, 0);
        }
        self.old.member_span(first, end)
    }

    fn safe(&self, first: u64, end: u64, checkpoint: u64) -> bool {
        !overlaps(self.new.member_span(first, end), self.needed_old(checkpoint))
    }

    /// The window after `position`, given the position last recorded on disk
    /// (`checkpoint`), or `None` when the reshape is done. The window is as large as is
    /// safe (up to `max_window_sectors`); it asks for a checkpoint first when recording the
    /// current position makes a larger window safe, and fails when not even the smallest
    /// window is safe after one.
    ///
    /// Windows are whole units ([`Self::unit_sectors`]) where they can be; where not even
    /// one unit is safe, whole stripes of the new shape, as md moves them: that happens
    /// only without a data offset change (0.90, or md's reshapes made with a backup file),
    /// just past the critical section md's backup covered, where the new shape's rows
    /// have barely pulled ahead of the old ones.
    pub fn next(&self, position: u64, checkpoint: u64) -> Result<Option<Window>, WindowError> {
        if self.is_done(position) {
            return Ok(None);
        }
        let stripe = self.new.position_alignment();
        if !position.is_multiple_of(stripe) && position != self.end_sectors() {
            return Err(WindowError::Misaligned { position, stripe });
        }
        match self.next_in(self.unit_sectors(), position, checkpoint) {
            Err(WindowError::NoRoom { .. }) if self.new.stripe_sectors() < self.unit_sectors() => {
                self.next_in(self.new.stripe_sectors(), position, checkpoint)
            }
            other => other,
        }
    }

    /// Whether the reshape can run from `position` to its end without a backup: every
    /// window it moves is safe once the position before it is recorded. Fails with the
    /// first window that is not (md's backup file would have to cover it).
    pub fn check_to_end(&self, mut position: u64) -> Result<(), WindowError> {
        while let Some(w) = self.next(position, position)? {
            position = if self.backwards { w.first } else { w.end };
        }
        Ok(())
    }

    /// [`Self::next`] with windows made of `unit` array sectors.
    fn next_in(&self, unit: u64, position: u64, checkpoint: u64) -> Result<Option<Window>, WindowError> {
        let max_units = (self.max_window_sectors / unit).max(1);
        // The window's far edge after `k` units (k >= 1): the k-th unit boundary past the
        // position, clipped to the array.
        let edge = |k: u64| -> u64 {
            if self.backwards {
                (position.div_ceil(unit).saturating_sub(k)) * unit
            } else {
                ((position / unit + k) * unit).min(self.end_sectors())
            }
        };
        let window = |k: u64| if self.backwards { (edge(k), position) } else { (position, edge(k)) };
        let largest_safe = |checkpoint: u64| -> Option<u64> {
            let mut best = None;
            for k in 1..=max_units {
                let (first, end) = window(k);
                if !self.safe(first, end, checkpoint) {
                    break;
                }
                best = Some(k);
                if first == 0 || end == self.end_sectors() {
                    break;
                }
            }
            best
        };
        let as_window = |k: u64, checkpoint_first: bool| {
            let (first, end) = window(k);
            Window { first, end, checkpoint_first }
        };
        let without = if checkpoint == position { None } else { largest_safe(checkpoint) };
        match (without, largest_safe(position)) {
            (Some(k), Some(k_after)) if k_after > k => Ok(Some(as_window(k_after, true))),
            (Some(k), _) => Ok(Some(as_window(k, false))),
            (None, Some(k)) => Ok(Some(as_window(k, checkpoint != position))),
            (None, None) => {
                let (first, end) = window(1);
                Err(WindowError::NoRoom { first, end })
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// What a model member sector holds: nothing, or the unit (stripe or chunk) of the old
    /// or the new shape with that index.
    #[derive(Clone, Copy, PartialEq, Debug)]
    pub(crate) enum Cell {
        Free,
        Old(u64),
        New(u64),
    }

    /// md's RAID5 3 -> 4 grow of the reshape corpus: 64K chunks, data moved 384 sectors
    /// down, 30720 sectors per member.
    fn grow_3_to_4() -> WindowPlanner {
        WindowPlanner {
            old: StripedShape::parity(2, 128, 2048, 61440),
            new: StripedShape::parity(3, 128, 1664, 92160),
            backwards: false,
            max_window_sectors: 1 << 14,
        }
    }

    #[test]
    fn the_unit_is_mdadms_backup_size() {
        assert_eq!(grow_3_to_4().unit_sectors(), 768);
    }

    #[test]
    fn a_grow_starts_without_a_checkpoint_and_needs_them_while_the_gap_is_small() {
        let p = grow_3_to_4();
        let w = p.next(0, 0).unwrap().unwrap();
        // New rows 1664.. may reach old row 2048 (384 sectors = 1.5 units of new rows).
        assert_eq!((w.first, w.end, w.checkpoint_first), (0, 768, false));
        let w = p.next(768, 0).unwrap().unwrap();
        assert!(w.checkpoint_first, "new rows 1920..2176 would overwrite old rows 2048.. of sectors not yet recorded");
        // Resuming md's parked array: the gap is 4480 rows, a unit writes 256 new rows past
        // 9856, so 17 units fit below old row 14336.
        let w = p.next(24576, 24576).unwrap().unwrap();
        assert_eq!((w.first, w.end, w.checkpoint_first), (24576, 24576 + 17 * 768, false));
    }

    #[test]
    fn no_room_is_an_error_and_a_misaligned_position_too() {
        let mut p = grow_3_to_4();
        p.new.data_offset_sectors = 2048;
        assert!(matches!(p.next(0, 0), Err(WindowError::NoRoom { .. })));
        assert!(matches!(grow_3_to_4().next(100, 0), Err(WindowError::Misaligned { .. })));
    }

    /// The member extents `(member, first, end)` that hold array sector `s` in `shape`: for
    /// one copy, its stripe's rows (the same rows on every member, so one model member
    /// stands for all); with copies, each copy's chunk slot on its own member.
    pub(crate) fn cells(shape: &StripedShape, s: u64) -> Vec<(usize, u64, u64)> {
        let cs = shape.chunk_sectors;
        if !shape.copied() {
            let (lo, hi) = shape.member_span(s, s + 1);
            return vec![(0, lo, hi)];
        }
        let d = shape.data_disks;
        (0..shape.copies)
            .flat_map(|j| {
                let slot = s / cs * shape.copies + j;
                let row = shape.data_offset_sectors + slot / d * cs * shape.offset_copies;
                // raid10.c `__raid10_find_phys`: each far copy of an offset layout one chunk
                // row on, `near_copies` members on.
                (0..shape.offset_copies).map(move |k| (((slot + k * shape.copies) % d) as usize, row + k * cs, row + (k + 1) * cs))
            })
            .collect()
    }

    /// Replays a whole reshape on a model of the members (each sector labelled with the
    /// array unit it holds, per shape) and checks, at every instant a crash could happen
    /// (between any two units' or copies' writes), that reading below the recorded
    /// position from the new shape and the rest from the old one finds every sector's data
    /// in every copy.
    fn replay(p: &WindowPlanner) -> Result<usize, String> {
        replay_from(p, p.start_position())
    }

    /// [`replay`] of a reshape that md left at `start` (recorded there): the members hold
    /// the new shape below it (forwards; above it backwards), written over the old one.
    fn replay_from(p: &WindowPlanner, start: u64) -> Result<usize, String> {
        let rows = p.old.member_span(0, p.old.array_sectors).1.max(p.new.member_span(0, p.end_sectors()).1) as usize + 1;
        let disks = p.old.data_disks.max(p.new.data_disks) as usize;
        let mut member = vec![vec![Cell::Free; rows]; disks];
        let write = |member: &mut Vec<Vec<Cell>>, (disk, lo, hi): (usize, u64, u64), cell: Cell| {
            member[disk][lo as usize..hi as usize].fill(cell);
        };
        for s in (0..p.old.array_sectors).step_by(p.old.stripe_sectors() as usize) {
            for c in cells(&p.old, s) {
                write(&mut member, c, Cell::Old(s / p.old.stripe_sectors()));
            }
        }
        let intact = |member: &[Vec<Cell>], checkpoint: u64| -> Result<(), String> {
            let limit = p.old.array_sectors.min(p.end_sectors());
            for s in (0..limit).step_by(p.unit_sectors().min(p.old.stripe_sectors()).min(p.new.stripe_sectors()) as usize) {
                let new_side = if p.backwards { s >= checkpoint } else { s < checkpoint };
                let (shape, want) = if new_side {
                    (&p.new, Cell::New(s / p.new.stripe_sectors()))
                } else {
                    (&p.old, Cell::Old(s / p.old.stripe_sectors()))
                };
                for (disk, lo, _) in cells(shape, s) {
                    let found = member[disk][lo as usize];
                    if found != want {
                        return Err(format!(
                            "sector {s} lost: member {disk} row {lo} holds {found:?}, want {want:?} (checkpoint {checkpoint})"
                        ));
                    }
                }
            }
            Ok(())
        };
        let moved = if p.backwards { start..p.end_sectors() } else { 0..start };
        for s in moved.step_by(p.new.stripe_sectors() as usize) {
            for c in cells(&p.new, s) {
                write(&mut member, c, Cell::New(s / p.new.stripe_sectors()));
            }
        }
        intact(&member, start).map_err(|e| format!("not a state md leaves: {e}"))?;
        let (mut position, mut checkpoint, mut steps) = (start, start, 0);
        while let Some(w) = p.next(position, checkpoint).map_err(|e| e.to_string())? {
            if w.checkpoint_first {
                checkpoint = position;
            }
            intact(&member, checkpoint)?;
            // Each unit of the window written, copy by copy: a crash may come between any two.
            for s in (w.first..w.end).step_by(p.new.stripe_sectors() as usize) {
                for c in cells(&p.new, s) {
                    write(&mut member, c, Cell::New(s / p.new.stripe_sectors()));
                    intact(&member, checkpoint)?;
                }
            }
            position = if p.backwards { w.first } else { w.end };
            steps += 1;
        }
        intact(&member, position)?;
        Ok(steps)
    }

    #[test]
    fn the_corpus_grow_replays_safely() {
        assert!(replay(&grow_3_to_4()).unwrap() > 1);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]
        /// Grows, chunk changes and shrinks, with the new data offset below (forwards) or
        /// above (backwards) the old one: every planned reshape keeps every sector readable
        /// at every instant, or is refused up front.
        #[test]
        fn every_planned_reshape_keeps_every_sector_readable(
            old_disks in 1u64..6, new_disks in 1u64..6, old_chunk_pow in 0u32..3, new_chunk_pow in 0u32..3,
            rows in 4u64..40, gap_rows in 1u64..12, backwards: bool, max_units in 1u64..5,
        ) {
            let (oc, nc) = (8u64 << old_chunk_pow, 8u64 << new_chunk_pow);
            let component = rows * 32; // a multiple of both chunks
            let old_off = 256 + if backwards { 0 } else { gap_rows * 8 };
            let new_off = 256 + if backwards { gap_rows * 8 } else { 0 };
            let p = WindowPlanner {
                old: StripedShape::parity(old_disks, oc, old_off, component * old_disks),
                new: StripedShape::parity(new_disks, nc, new_off, component * new_disks),
                backwards,
                max_window_sectors: 1,
            };
            let p = WindowPlanner { max_window_sectors: p.unit_sectors() * max_units, ..p };
            match replay(&p) {
                Ok(_) => {}
                Err(e) if e.contains("backup file") => {}
                Err(e) => proptest::prop_assert!(false, "{}", e),
            }
        }
    }

    /// md's RAID5 3 -> 4 grow made with a backup file (0.90 always; 1.x when the data
    /// offset cannot move): both shapes at the same data offset.
    fn grow_in_place() -> WindowPlanner {
        let mut p = grow_3_to_4();
        p.new.data_offset_sectors = p.old.data_offset_sectors;
        p
    }

    #[test]
    fn in_place_a_grow_needs_a_backup_only_for_its_critical_section() {
        let p = grow_in_place();
        assert!(matches!(p.next(0, 0), Err(WindowError::NoRoom { first: 0, end: 384 })), "{:?}", p.next(0, 0));
        assert!(matches!(p.check_to_end(0), Err(WindowError::NoRoom { .. })));
        // Past the first unit (what mdadm backs up): a unit (768 sectors, new rows up to
        // 512) would reach old row 384 of the sectors from 768 on, one new stripe (new rows
        // 256..384) does not.
        let w = p.next(768, 768).unwrap().unwrap();
        assert_eq!((w.first, w.end, w.checkpoint_first), (768, 1152, false));
        p.check_to_end(768).expect("the rest needs no backup");
        assert!(replay_from(&p, 768).unwrap() > 10);
        // From md's parked position: whole units again.
        let w = p.next(24576, 24576).unwrap().unwrap();
        assert!(w.end - w.first >= 768, "{w:?}");
        p.check_to_end(24576).unwrap();
    }

    #[test]
    fn in_place_a_shrink_needs_a_backup_at_its_end() {
        let mut p = grow_in_place();
        std::mem::swap(&mut p.old, &mut p.new);
        p.backwards = true;
        p.new.array_sectors = p.old.array_sectors / 2;
        let start = p.start_position();
        match p.check_to_end(start) {
            Err(WindowError::NoRoom { first, .. }) => assert!(first < p.end_sectors() / 2, "fails near its end, at {first}"),
            other => panic!("an in-place shrink needs a backup near its end: {other:?}"),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// Reshapes md left part-way without a data offset change (made with a backup
        /// file): continued from any position md could leave them at, every planned window
        /// keeps every sector readable, or the plan says where a backup is needed before
        /// anything is written; a grow past its critical section always continues (at a
        /// unit, `lcm(No, Nn)` chunks, one new stripe's rows end at `L/Nn + 1` chunk rows
        /// and the old rows still needed begin at `L/No`, and `L/No - L/Nn = (Nn - No)/gcd`
        /// is at least 1).
        #[test]
        fn in_place_reshapes_continue_safely_or_not_at_all(
            old_disks in 1u64..6, new_disks in 1u64..6, old_chunk_pow in 0u32..3, new_chunk_pow in 0u32..3,
            rows in 4u64..40, backwards: bool, max_units in 1u64..5, at in 0u64..1000,
        ) {
            let (oc, nc) = (8u64 << old_chunk_pow, 8u64 << new_chunk_pow);
            let component = rows * 32;
            let p = WindowPlanner {
                old: StripedShape::parity(old_disks, oc, 256, component * old_disks),
                new: StripedShape::parity(new_disks, nc, 256, component * new_disks),
                backwards,
                max_window_sectors: 1,
            };
            let p = WindowPlanner { max_window_sectors: p.unit_sectors() * max_units, ..p };
            let stripes = p.end_sectors() / p.new.stripe_sectors();
            let start = at % (stripes + 1) * p.new.stripe_sectors();
            let planned = p.check_to_end(start);
            match replay_from(&p, start) {
                Ok(_) => proptest::prop_assert!(planned.is_ok()),
                Err(e) if e.starts_with("not a state md leaves") => {}
                Err(e) if e.contains("backup file") => {
                    proptest::prop_assert!(planned.is_err());
                    proptest::prop_assert!(
                        backwards || new_disks <= old_disks || nc != oc || start < p.unit_sectors(),
                        "a grow past its critical section (one unit, what mdadm backs up) must continue: {}", e
                    );
                }
                Err(e) => proptest::prop_assert!(false, "{}", e),
            }
        }
    }

    /// A RAID10 near shape of `disks` members holding `component` sectors each, as md
    /// sizes it (raid10.c `raid10_size`).
    fn near(disks: u64, copies: u64, chunk: u64, offset: u64, component: u64) -> StripedShape {
        raid10(disks, copies, 1, chunk, offset, component)
    }

    /// A RAID10 of `disks` members, `near` and offset-layout `far` copies, as md sizes it.
    pub(crate) fn raid10(disks: u64, near: u64, far: u64, chunk: u64, offset: u64, component: u64) -> StripedShape {
        StripedShape {
            data_disks: disks,
            copies: near,
            offset_copies: far,
            chunk_sectors: chunk,
            data_offset_sectors: offset,
            array_sectors: component / chunk / far * disks / near * chunk,
        }
    }

    #[test]
    fn a_raid10_grow_places_chunks_by_slot_and_starts_anywhere() {
        // n2 over 3 members: chunk 0 fills row 0 slots 0-1, chunk 1 slot 2 of row 0 and
        // slot 0 of row 1.
        let s = near(3, 2, 128, 2048, 128 * 100);
        assert_eq!(s.member_span(0, 128), (2048, 2048 + 128));
        assert_eq!(s.member_span(128, 256), (2048, 2048 + 256));
        assert_eq!(s.member_span(130, 131), (2048, 2048 + 256));
        assert_eq!(s.stripe_sectors(), 128);
        // mdadm moves a RAID10 grow's data down by one chunk.
        let p = WindowPlanner { old: s, new: near(4, 2, 128, 2048 - 128, 128 * 100 + 128), backwards: false, max_window_sectors: 1 << 14 };
        assert_eq!(p.unit_sectors(), 128);
        let w = p.next(0, 0).unwrap().unwrap();
        assert_eq!((w.first, w.checkpoint_first), (0, false));
        // md parks a RAID10 reshape on any 64 KiB; a 512 KiB chunk's middle is a place to
        // continue from, up to the next chunk.
        let w = p.next(64, 64).unwrap().unwrap();
        assert_eq!(w.first, 64);
        assert!(w.end.is_multiple_of(128) && w.end > 64);
        assert!(replay(&p).unwrap() > 1);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        /// RAID10 near and offset reshapes (any member counts and copies, chunk changes
        /// and switches between near and offset, forwards with the data moved down or
        /// backwards with it moved up): every copy of every sector stays readable at every
        /// instant, or the reshape is refused up front.
        #[test]
        fn every_planned_raid10_reshape_keeps_every_copy_readable(
            old_disks in 2u64..7, new_disks in 2u64..9, copies in 2u64..4, old_chunk_pow in 0u32..3, new_chunk_pow in 0u32..3,
            chunks in 4u64..40, gap_chunks in 0u64..4, backwards: bool, max_units in 1u64..6, old_offset_layout: bool,
            new_offset_layout: bool,
        ) {
            proptest::prop_assume!(copies <= old_disks.min(new_disks));
            let split = |offset_layout: bool| if offset_layout { (1, copies) } else { (copies, 1) };
            let ((old_near, old_far), (new_near, new_far)) = (split(old_offset_layout), split(new_offset_layout));
            let (old_chunk, new_chunk) = (8u64 << old_chunk_pow, 8u64 << new_chunk_pow);
            let chunk = old_chunk.max(new_chunk);
            let gap = gap_chunks * chunk + 8;
            let component = chunks * chunk * copies;
            let (old_off, new_off) = if backwards { (256, 256 + gap) } else { (256 + gap, 256) };
            let old = raid10(old_disks, old_near, old_far, old_chunk, old_off, component);
            let mut new = raid10(new_disks, new_near, new_far, new_chunk, new_off, component);
            // The data area keeps its end: the new shape gains what the offset moved down.
            if !backwards {
                new = raid10(new_disks, new_near, new_far, new_chunk, new_off, (component + gap) / chunk * chunk);
            }
            let p = WindowPlanner { old, new, backwards, max_window_sectors: chunk * max_units };
            proptest::prop_assume!(old != new || old_disks != new_disks);
            match replay(&p) {
                Ok(_) => {}
                Err(e) if e.contains("backup file") => {}
                Err(e) => proptest::prop_assert!(false, "{}", e),
            }
        }
    }
}
