//! A member as one side of a reshape sees it: its superblock replaced by that side's (a
//! plain, non-reshaping superblock of the old or the new shape), everything else read and
//! written through.
//!
//! Each side of a reshape is an ordinary [`crate::Array`] over such members. The sides keep
//! their own clean/dirty marks in the overlay's memory: the real superblock belongs to the
//! reshape (`super::reshaping`), which alone writes it, in md's order.

use crate::member::{DirectIo, Member};
use std::io;
use std::sync::{Arc, Mutex};

pub(super) struct SideMember {
    inner: Arc<dyn Member>,
    /// Byte offset and bytes of this side's superblock.
    at: u64,
    bytes: Mutex<Vec<u8>>,
    writable: bool,
}

impl SideMember {
    pub(super) fn new(inner: Arc<dyn Member>, at: u64, bytes: Vec<u8>, writable: bool) -> SideMember {
        SideMember { inner, at, bytes: Mutex::new(bytes), writable }
    }

    fn overlay_range(&self, offset: u64, len: u64) -> Option<(u64, u64)> {
        let end = self.at + self.bytes.lock().unwrap_or_else(|p| p.into_inner()).len() as u64;
        let (lo, hi) = (offset.max(self.at), (offset + len).min(end));
        (lo < hi).then_some((lo, hi))
    }
}

impl Member for SideMember {
    fn label(&self) -> &str {
        self.inner.label()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)?;
        if let Some((lo, hi)) = self.overlay_range(offset, buf.len() as u64) {
            let bytes = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
            buf[(lo - offset) as usize..(hi - offset) as usize].copy_from_slice(&bytes[(lo - self.at) as usize..(hi - self.at) as usize]);
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, "this side of the reshape is opened read-only"));
        }
        let Some((lo, hi)) = self.overlay_range(offset, buf.len() as u64) else {
            return self.inner.write_at(buf, offset);
        };
        {
            let mut bytes = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
            bytes[(lo - self.at) as usize..(hi - self.at) as usize].copy_from_slice(&buf[(lo - offset) as usize..(hi - offset) as usize]);
        }
        let end = offset + buf.len() as u64;
        if offset < lo {
            self.inner.write_at(&buf[..(lo - offset) as usize], offset)?;
        }
        if hi < end {
            self.inner.write_at(&buf[(hi - offset) as usize..], hi)?;
        }
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn direct_io(&self) -> Option<DirectIo<'_>> {
        None
    }
    fn identity(&self) -> Option<crate::ownership::DeviceIdentity> {
        self.inner.identity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::MemMember;

    #[test]
    fn the_superblock_bytes_stay_in_memory_and_the_rest_goes_through() {
        let disk: Arc<dyn Member> = Arc::new(MemMember::zeroed("d", 64));
        let side = SideMember::new(disk.clone(), 16, vec![7; 8], true);
        side.write_at(&[1; 40], 8).unwrap();
        let mut raw = [0u8; 64];
        disk.read_at(&mut raw, 0).unwrap();
        assert_eq!(&raw[8..16], &[1; 8]);
        assert_eq!(&raw[16..24], &[0; 8], "the real superblock area is never written by a side");
        assert_eq!(&raw[24..48], &[1; 24]);
        let mut seen = [0u8; 64];
        side.read_at(&mut seen, 0).unwrap();
        assert_eq!(&seen[8..48], &[1; 40], "the side reads back its own superblock");
        let ro = SideMember::new(disk, 16, vec![7; 8], false);
        assert!(ro.write_at(&[1], 0).is_err());
    }
}
