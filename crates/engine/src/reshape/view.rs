//! Reading an array that md left in the middle of a reshape (a NAS's disks moved to
//! another machine mid-grow, or md stopped while parked).
//!
//! The superblocks describe two arrays over the same members
//! (`uraid_core::metadata::reshape`): the part already moved, in the new shape with its data
//! at the new offset, and the rest, in the old shape. Each side is assembled as an ordinary
//! array over the same members, each seen through a [`SuperblockOverlay`] that shows that
//! side's superblock, and a read goes to the side holding its sectors. Read-only: writing
//! would have to follow md's checkpoint rule (the superblock before any write that
//! overwrites data not yet recorded as moved), and continuing the reshape is not done yet.

use crate::array::{superblock_bytes_of, Array, ArrayOptions, EngineError};
use crate::member::{DirectIo, Member};
use crate::scan::probe;
use std::io;
use std::sync::Arc;
use uraid_core::geometry::SECTOR_BYTES;
use uraid_core::metadata::reshape::{ReshapeState, Side};
use uraid_core::metadata::Superblock;

/// A member whose bytes at `at..at+bytes.len()` read as `bytes` (a side's superblock);
/// everything else reads through. Never written: the view is read-only.
struct SuperblockOverlay {
    inner: Arc<dyn Member>,
    at: u64,
    bytes: Vec<u8>,
}

impl Member for SuperblockOverlay {
    fn label(&self) -> &str {
        self.inner.label()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)?;
        let (lo, hi) = (offset.max(self.at), (offset + buf.len() as u64).min(self.at + self.bytes.len() as u64));
        if lo < hi {
            let src = &self.bytes[(lo - self.at) as usize..(hi - self.at) as usize];
            buf[(lo - offset) as usize..(hi - offset) as usize].copy_from_slice(src);
        }
        Ok(())
    }
    fn write_at(&self, _buf: &[u8], _offset: u64) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::PermissionDenied, "a reshaping array is opened read-only"))
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn direct_io(&self) -> Option<DirectIo<'_>> {
        None
    }
    fn identity(&self) -> Option<crate::ownership::DeviceIdentity> {
        self.inner.identity()
    }
}

/// An array in the middle of a reshape, readable.
pub struct ReshapeView {
    old: Array,
    new: Array,
    state: ReshapeState,
    size_bytes: u64,
}

impl ReshapeView {
    /// Assembles both sides of the reshape recorded on `devices` (read-only).
    pub fn open(devices: Vec<Arc<dyn Member>>, opts: &ArrayOptions) -> Result<ReshapeView, EngineError> {
        if opts.writable {
            return Err(EngineError::Unsupported(
                "the array is in the middle of a reshape; uraid reads it but cannot continue it yet: open it read-only, \
                 or finish the reshape with mdadm (mdadm --assemble, then mdadm --grow --continue)"
                    .into(),
            ));
        }
        let mut found = Vec::with_capacity(devices.len());
        for dev in &devices {
            match probe(dev.as_ref()).best().cloned() {
                Some((loc, Superblock::V1(sb))) => found.push((loc.offset_bytes, sb)),
                Some((_, Superblock::V090(_))) => {
                    return Err(EngineError::Unsupported("reading a 0.90 array in the middle of a reshape is not supported yet".into()))
                }
                None => return Err(EngineError::NoSuperblock { device: dev.label().to_string(), detail: String::new() }),
            }
        }
        let newest = found.iter().max_by_key(|(_, sb)| sb.events).map(|(_, sb)| sb.clone());
        let newest = newest.ok_or_else(|| EngineError::Refused("no devices given".into()))?;
        let state = ReshapeState::from_superblock(&newest).map_err(|e| EngineError::Unsupported(e.to_string()))?;
        let side = |side: Side| -> Result<Array, EngineError> {
            let members: Vec<Arc<dyn Member>> = devices
                .iter()
                .zip(&found)
                .map(|(dev, (at, sb))| {
                    let own = state.side_superblock(sb, side, dev.size_bytes() / SECTOR_BYTES);
                    Arc::new(SuperblockOverlay { inner: dev.clone(), at: *at, bytes: superblock_bytes_of(&Superblock::V1(own)) })
                        as Arc<dyn Member>
                })
                .collect();
            Array::assemble(members, opts).map(|(a, _)| a)
        };
        let old = side(Side::Old)?;
        let new = side(Side::New)?;
        // md keeps the array's size through a reshape (a grow shows its new size at the
        // end; a shrink was cut to its new size before it began): the smaller side's.
        let size_bytes = old.size_bytes().min(new.size_bytes());
        Ok(ReshapeView { old, new, state, size_bytes })
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub fn state(&self) -> &ReshapeState {
        &self.state
    }

    /// Reads `buf.len()` bytes at array byte `offset`, each part from the side holding it.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), EngineError> {
        let len = buf.len() as u64;
        if offset.checked_add(len).is_none_or(|end| end > self.size_bytes) {
            return Err(EngineError::OutOfRange { offset, len: buf.len(), size: self.size_bytes });
        }
        let split = self.state.position_bytes().clamp(offset, offset + len);
        let (below, above) = buf.split_at_mut((split - offset) as usize);
        let side_array = |s: Side| if s == Side::New { &self.new } else { &self.old };
        if !below.is_empty() {
            side_array(self.state.side_of(offset / SECTOR_BYTES)).read(offset, below)?;
        }
        if !above.is_empty() {
            side_array(self.state.side_of(split / SECTOR_BYTES)).read(split, above)?;
        }
        Ok(())
    }
}
