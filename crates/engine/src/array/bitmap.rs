//! The internal write-intent bitmap, kept as md keeps it: before a region is first written
//! after the array was clean, its bit is set and the bitmap made durable on every member;
//! bits are cleared when the array is marked clean (all writes flushed) with every role in
//! sync, and `events_cleared` then takes the new events. After a crash only the regions
//! whose bits are set are resynced. While a role is missing the bits stay, so a re-add of
//! its former member (events >= `events_cleared`: it left after the last clear) rebuilds
//! only the regions written since. The bitmap superblock's events follow the array's, or md
//! would call the bitmap stale and resync everything.
//!
//! Bits cover md's "sync range": member sectors for RAID4/5/6 (md marks stripe sectors),
//! array sectors for RAID1/10 (md marks the bio's sector).

use super::{Array, Meta};
use uraid_core::geometry::Geometry;
use uraid_core::metadata::{BitmapSuperblock, Superblock, WriteIntentBits};

pub(crate) struct BitmapState {
    pub sb: BitmapSuperblock,
    /// Bytes from a member's superblock to its bitmap superblock.
    pub rel_offset: i64,
    /// Chunks that must be resynced (set when the array was found dirty).
    pub resync: Option<WriteIntentBits>,
}

/// Reads the bitmap of a member whose superblock is `sb` at `sb_offset`: `Ok(None)` when the
/// superblock declares no bitmap, an error (in words, naming where) when it declares one that
/// cannot be read or decoded. A declared bitmap is never dropped silently: without it a
/// crash would be followed by a full resync at best, and md would later read whatever is
/// there as the bitmap.
/// The bits as read are returned beside the state: they seed the array's
/// [`uraid_core::state::WriteState`], which owns them from then on.
pub(crate) fn load(
    member: &dyn crate::member::Member,
    sb: &Superblock,
    sb_offset: u64,
) -> Result<Option<(BitmapState, WriteIntentBits)>, String> {
    let rel_offset = match sb {
        Superblock::V1(s) => match s.bitmap_offset_sectors() {
            Some(off) => i64::from(off) * 512,
            None => return Ok(None),
        },
        Superblock::V090(s) => {
            if !s.has_bitmap() {
                return Ok(None);
            }
            4096
        }
    };
    let at = sb_offset
        .checked_add_signed(rel_offset)
        .ok_or_else(|| format!("bitmap offset {rel_offset} from the superblock at byte {sb_offset} is outside the device"))?;
    let mut head = vec![0u8; 256];
    member.read_at(&mut head, at).map_err(|e| format!("bitmap superblock at byte {at}: {e}"))?;
    let mut bsb = BitmapSuperblock::decode(&head).map_err(|e| format!("bitmap superblock at byte {at}: {e}"))?;
    let bits_len = bsb.bits_len_bytes();
    if at.checked_add(256).and_then(|x| x.checked_add(bits_len)).is_none_or(|end| end > member.size_bytes()) {
        return Err(format!("bitmap at byte {at} claims {bits_len} bytes of bits, past the device end"));
    }
    let mut bits = vec![0u8; bits_len as usize];
    member.read_at(&mut bits, at + 256).map_err(|e| format!("bitmap bits at byte {}: {e}", at + 256))?;
    let bits = WriteIntentBits::decode(&bsb, &bits).map_err(|e| format!("bitmap bits at byte {}: {e}", at + 256))?;
    let events = sb.events();
    // md trusts the bitmap only if it is as new as the superblock; otherwise it resyncs all.
    let stale = bsb.events.saturating_add(1) < events;
    if stale {
        // The array ran without this bitmap for a while (e.g. assembled with --force while it
        // was unreadable): writes of that time have no bit. md sets every bit; here
        // `events_cleared` moves up to now (written with the next superblock update), so no
        // member that left before can be re-added from the bits: it is rebuilt in full.
        bsb.events_cleared = bsb.events_cleared.max(events);
    }
    let resync = if sb.is_clean() {
        None
    } else if stale {
        Some(WriteIntentBits::all_dirty(&bsb))
    } else {
        Some(bits.clone())
    };
    Ok(Some((BitmapState { sb: bsb, rel_offset, resync }, bits)))
}

impl Array {
    /// The sync-range sectors a write to array sectors `first..first+n` touches.
    fn bitmap_range(&self, first: u64, n: u64) -> Option<(u64, u64)> {
        match &self.geometry {
            Geometry::Parity(p) => {
                let per = p.stripe_data_sectors();
                let (s0, s1) = (first / per, (first + n.max(1) - 1) / per);
                Some((s0 * p.chunk_sectors(), (s1 + 1 - s0) * p.chunk_sectors()))
            }
            Geometry::Raid1 { .. } | Geometry::Raid10(_) => Some((first, n)),
            _ => None,
        }
    }

    /// Makes the bitmap bits for a write to array sectors `first..first+n` durable (see
    /// `safe_mode.rs`) and asserts the write may touch data.
    pub(super) fn bitmap_prepare_write(&self, first: u64, n: u64) {
        self.bitmap_bits_durable(self.bitmap_range(first, n));
    }

    /// Before a resync or repair rewrites redundancy at sync-range sectors `pos..pos+n`: their
    /// bits are made durable, as for a user write. A member missing now still holds the old
    /// bytes there, and a re-add of it must not take them as current. RAID10 does without:
    /// its re-adds are full rebuilds and its resyncs walk everything.
    pub(super) fn bitmap_prepare_sync_write(&self, pos: u64, n: u64) {
        if matches!(self.geometry, Geometry::Raid10(_)) {
            return;
        }
        self.bitmap_bits_durable(Some((pos, n)));
    }

    /// Writes the bitmap's bit area on every member in the array, then flushes them.
    pub(super) fn write_bitmap_bits(&self, bits: &[u8]) {
        let rel = {
            let guard = self.bitmap.lock().unwrap_or_else(|e| e.into_inner());
            match guard.as_ref() {
                Some(state) => state.rel_offset + 256,
                None => return,
            }
        };
        self.write_bitmap_area(rel, bits);
    }

    /// Writes `bytes` at `rel` from each written member's superblock, then flushes them.
    fn write_bitmap_area(&self, rel: i64, bytes: &[u8]) {
        let targets: Vec<_> = {
            let meta = self.lock_meta();
            meta.with_states()
                .filter(|(_, _, state)| *state != super::DeviceState::Faulty)
                .filter_map(|(i, d, _)| d.sb_offset.checked_add_signed(rel).map(|at| (i, d.member.clone(), at)))
                .collect()
        };
        for (i, m, at) in targets {
            if let Err(e) = m.write_at(bytes, at).and_then(|_| m.flush()) {
                self.fail_device(i, &format!("bitmap write: {e}"));
            }
        }
    }

    /// At a superblock update: the bitmap superblock gets the new events first (md's order).
    pub(super) fn bitmap_sync_events(&self, meta: &Meta, events: u64, clear: bool) {
        let mut guard = self.bitmap.lock().unwrap_or_else(|e| e.into_inner());
        let Some(state) = guard.as_mut() else { return };
        state.sb.events = events;
        let mut bits = None;
        if clear {
            // No write is pending (the array is being marked clean), so no bitmap write of
            // the write path can be in flight to land over this one.
            state.sb.events_cleared = events;
            bits = Some(WriteIntentBits::all_clean(&state.sb).encode().to_vec());
        }
        let mut head = state.sb.encode().to_vec();
        if let Some(b) = bits {
            head.extend_from_slice(&b);
        }
        for (_, d, _) in meta.with_states().filter(|(_, _, state)| *state != super::DeviceState::Faulty) {
            if let Some(at) = d.sb_offset.checked_add_signed(state.rel_offset) {
                // A failure here surfaces at the superblock write that follows.
                let _ = d.member.write_at(&head, at);
            }
        }
    }

    /// The bitmap's `events_cleared` (the events of the last clear of its bits), if the array
    /// has a bitmap.
    pub(super) fn bitmap_events_cleared(&self) -> Option<u64> {
        self.bitmap.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|s| s.sb.events_cleared)
    }

    /// Chunks set in memory (every write since the last clear has one) and the bitmap's
    /// chunk count.
    pub(super) fn bitmap_dirty_count(&self) -> Option<(u64, u64)> {
        let st = self.lock_write_state();
        st.dirty_bits().map(|b| (b.dirty_chunks().count() as u64, b.chunk_count()))
    }

    /// For a re-added member's recovery: whether member sectors `pos..pos+n` (its sync range
    /// on RAID1/4/5/6) may have been written since the bits were last cleared. Chunks past
    /// the bitmap's end have no bit and count as written.
    pub(super) fn bitmap_region_written(&self, pos: u64, n: u64) -> bool {
        let st = self.lock_write_state();
        let Some(bits) = st.dirty_bits() else { return true };
        let (c0, c1) = (bits.chunk_of_sector(pos), bits.chunk_of_sector(pos + n.max(1) - 1));
        c1 >= bits.chunk_count() || (c0..=c1).any(|c| bits.is_dirty(c))
    }

    /// For a re-added member's recovery: the first sector at or after `from` (below `total`)
    /// that [`Array::bitmap_region_written`] would rebuild, or `total` if none.
    pub(super) fn bitmap_next_written(&self, from: u64, total: u64) -> u64 {
        let st = self.lock_write_state();
        let Some(bits) = st.dirty_bits() else { return from };
        let per = bits.chunk_sectors();
        let mut c = bits.chunk_of_sector(from);
        while c < bits.chunk_count() && c.saturating_mul(per) < total {
            if bits.is_dirty(c) {
                return (c * per).max(from);
            }
            c += 1;
        }
        // Past the bitmap's end nothing is known: rebuilt.
        c.saturating_mul(per).max(from).min(total)
    }

    /// Writes the array's bitmap (superblock with the current events, and every bit set in
    /// memory) onto a re-added member whose superblock is at `sb_offset`, then flushes it.
    /// Called under `meta` before the member joins: bitmap writes after that include it, and
    /// those before carried no bit that is not set in memory now (bits only grow while a
    /// role is missing).
    pub(super) fn write_bitmap_to(&self, member: &dyn crate::member::Member, sb_offset: u64) -> Result<(), String> {
        let (rel, mut area) = {
            let guard = self.bitmap.lock().unwrap_or_else(|e| e.into_inner());
            let state = guard.as_ref().ok_or("the array has no bitmap")?;
            (state.rel_offset, state.sb.encode().to_vec())
        };
        let bits = self.lock_write_state().dirty_bits().map(|b| b.encode().to_vec()).ok_or("the array has no bitmap")?;
        area.extend_from_slice(&bits);
        let at = sb_offset.checked_add_signed(rel).ok_or("the bitmap would lie outside the device")?;
        member.write_at(&area, at).and_then(|_| member.flush()).map_err(|e| format!("writing the bitmap: {e}"))
    }

    /// Whether resync may skip sync-range sectors `pos..pos+n` (bitmap says clean there).
    pub(super) fn bitmap_allows_skip(&self, pos: u64, n: u64) -> bool {
        if matches!(self.geometry, Geometry::Raid10(_)) {
            return false; // raid10 bits are array sectors; resync walks member sectors.
        }
        let guard = self.bitmap.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_ref().and_then(|s| s.resync.as_ref()) {
            Some(r) => {
                let (c0, c1) = (r.chunk_of_sector(pos), r.chunk_of_sector(pos + n.max(1) - 1));
                !(c0..=c1).any(|c| r.is_dirty(c))
            }
            None => false,
        }
    }
}
