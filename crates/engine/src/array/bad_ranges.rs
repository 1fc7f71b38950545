//! Recording bad ranges in a member's bad-block log instead of failing the member (md's
//! `rdev_set_badblocks` and raid1's `narrow_write_error`).
//!
//! Without a log, one failed write or one uncorrectable read fails the whole member. With
//! one, md keeps the member and lists the range: reads there are rebuilt from redundancy
//! (`crate::bad_blocks`), and the next successful write clears it. The list must be on disk
//! before the write that failed is acknowledged, or a crash followed by a restart would
//! read the range's stale contents as good; so recording writes the superblocks at once.
//!
//! Only in-sync members of levels with redundancy record ranges. A spare being rebuilt or a
//! replacement that fails a write is failed, as md fails them; RAID0 and linear have
//! nothing to rebuild a listed range from.

use super::{Array, DeviceState, EngineError, IoMap};
use crate::member::is_medium_error;
use uraid_core::geometry::SECTOR_BYTES;
use uraid_core::metadata::SectorRange;

/// md retries a failed write in pieces of its bad-block granularity; 4 KiB is the unit of
/// md's stripe cache and of every disk made this century.
const NARROW_BYTES: usize = 4096;

impl Array {
    /// Whether `device` may list bad ranges instead of being failed.
    pub(super) fn may_record(&self, device: usize) -> bool {
        if !self.writable || !self.level.has_redundancy() {
            return false;
        }
        let meta = self.lock_meta();
        meta.get(device).is_some_and(|(d, state)| matches!(state, DeviceState::InSync(_)) && d.bad_blocks.has_area())
    }

    /// Lists `ranges` (absolute device sectors) in `device`'s log and writes the log and
    /// superblocks. False, with the list unchanged, when the member has no log, the log is
    /// full, or the member is not one that records (see the module); also when writing
    /// the log failed (the member was failed then).
    pub(super) fn record_bad_ranges(&self, device: usize, ranges: &[SectorRange]) -> bool {
        self.record_bad_ranges_as(device, ranges, false)
    }

    /// Whether a rebuild may list what it cannot rebuild on its target, `device`.
    pub(super) fn may_list_on_rebuild_target(&self, device: usize) -> bool {
        self.writable
            && self.level.has_redundancy()
            && self
                .lock_meta()
                .get(device)
                .is_some_and(|(d, state)| matches!(state, DeviceState::Recovering { .. }) && d.bad_blocks.has_area())
    }

    /// [`Array::record_bad_ranges`]; `rebuild_target`: `device` is a member being rebuilt,
    /// listing what its rebuild could not produce.
    pub(super) fn record_bad_ranges_as(&self, device: usize, ranges: &[SectorRange], rebuild_target: bool) -> bool {
        let allowed = if rebuild_target { self.may_list_on_rebuild_target(device) } else { self.may_record(device) };
        if !allowed {
            return false;
        }
        let mut meta = self.lock_meta();
        let state_ok =
            |s: DeviceState| if rebuild_target { matches!(s, DeviceState::Recovering { .. }) } else { matches!(s, DeviceState::InSync(_)) };
        let Some((d, _)) = meta.get(device).filter(|(_, state)| state_ok(*state)) else { return false };
        if !d.bad_blocks.record(ranges) {
            return false;
        }
        let resync = self.resync_offset_for_superblock();
        self.persist(&mut meta, resync);
        meta.state(device) != DeviceState::Faulty
    }

    /// A member's write of `writes` ((member byte offset, bytes) each) failed with `error`.
    /// As md's `narrow_write_error`: the writes are tried again in 4 KiB pieces and the
    /// pieces that fail again are listed. True: the member stays (every byte written, or
    /// the failed pieces listed). False: the caller fails it (not a medium error, no room
    /// or no log, or not a member that records).
    pub(super) fn write_error_keeps_member(&self, device: usize, writes: &[(u64, &[u8])], error: &std::io::Error) -> bool {
        if !is_medium_error(error) || !self.may_record(device) {
            return false;
        }
        let member = {
            let meta = self.lock_meta();
            meta.devices[device].member.clone()
        };
        let mut bad: Vec<SectorRange> = Vec::new();
        for &(offset, bytes) in writes {
            for (i, piece) in bytes.chunks(NARROW_BYTES).enumerate() {
                let at = offset + (i * NARROW_BYTES) as u64;
                match member.write_at(piece, at) {
                    Ok(()) => {}
                    Err(e) if is_medium_error(&e) => {
                        let start = at / SECTOR_BYTES;
                        let end = (at + piece.len() as u64).div_ceil(SECTOR_BYTES);
                        match bad.last_mut() {
                            Some(last) if last.end() == start => last.sectors += end - start,
                            _ => bad.push(SectorRange { start, sectors: end - start }),
                        }
                    }
                    Err(_) => return false,
                }
            }
        }
        bad.is_empty() || self.record_bad_ranges(device, &bad)
    }

    /// Whether member sectors `lo..hi` (the same on every member: one run of stripes) can
    /// still be read on a parity array: no more roles missing or listed bad there than
    /// the level survives.
    pub(super) fn stripes_recoverable(&self, io: &IoMap, lo: u64, hi: u64) -> bool {
        let parity = self.geometry.as_parity().map_or(0, |p| p.raid_disks() - p.data_disks());
        let unavailable = io
            .read
            .iter()
            .filter(|r| match r {
                None => true,
                Some(rm) => rm.bad_blocks.overlaps(rm.data_offset / SECTOR_BYTES + lo, hi - lo),
            })
            .count();
        unavailable <= parity
    }

    /// Lists `sectors` sectors from absolute device sector `start` as bad on the member
    /// labelled `label`, as writing "start count" to md's sysfs `dev-*/bad_blocks` does:
    /// for a disk known to be bad there, and for tests. Reads of the range are rebuilt from
    /// redundancy from now on; a successful write there clears it.
    pub fn add_bad_blocks(&self, label: &str, start: u64, sectors: u64) -> Result<(), EngineError> {
        let (device, data_offset, data_end) = {
            let meta = self.lock_meta();
            let (i, d) = meta
                .devices
                .iter()
                .enumerate()
                .find(|(_, d)| d.member.label() == label)
                .ok_or_else(|| EngineError::Invalid(format!("{label} is not part of the array")))?;
            let data_offset = d.data_offset / SECTOR_BYTES;
            (i, data_offset, data_offset + d.sb.member_data_size_sectors(d.member.size_bytes()))
        };
        if sectors == 0 || start < data_offset || start.saturating_add(sectors) > data_end {
            return Err(EngineError::Invalid(format!(
                "{label}: bad blocks must lie in its data area, sectors {data_offset}..{data_end} (absolute device sectors)"
            )));
        }
        if !self.writable {
            return Err(EngineError::ReadOnly);
        }
        if !self.record_bad_ranges(device, &[SectorRange { start, sectors }]) {
            return Err(EngineError::Invalid(format!(
                "{label}: cannot record bad blocks (no bad-block log, log full, not an active member, or a level without redundancy)"
            )));
        }
        Ok(())
    }
}
