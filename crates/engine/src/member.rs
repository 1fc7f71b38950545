//! Member devices behind one small trait, so the same engine runs over files, block devices,
//! memory and (in the simulator) fault-injecting disks.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

/// A device holding one md member: byte-addressed reads and writes at offsets.
pub trait Member: Send + Sync {
    /// Human name (the path, or a label) used in messages.
    fn label(&self) -> &str;
    /// Size in bytes.
    fn size_bytes(&self) -> u64;
    /// Reads exactly `buf.len()` bytes at `offset`; a short device is an error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Fills `bufs` one after another from `offset` (one request where the backend has
    /// vectored I/O).
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let mut at = offset;
        for b in bufs.iter_mut() {
            self.read_at(b, at)?;
            at += b.len() as u64;
        }
        Ok(())
    }
    /// Writes `bufs` one after another starting at `offset` (one request where the backend
    /// has vectored I/O).
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let mut at = offset;
        for b in bufs {
            self.write_at(b, at)?;
            at += b.len() as u64;
        }
        Ok(())
    }
    /// Makes every completed write durable.
    fn flush(&self) -> io::Result<()>;
    /// Discards `len` bytes at `offset`: afterwards they read as zeros. The default writes
    /// zeros; backends that can free the space instead (files: punch a hole) override it.
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        write_zeros(self, offset, len)
    }
}

/// Writes `len` zero bytes at `offset`, 1 MiB at a time.
pub fn write_zeros(m: &(impl Member + ?Sized), offset: u64, len: u64) -> io::Result<()> {
    let zeros = vec![0u8; len.min(1 << 20) as usize];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(zeros.len() as u64) as usize;
        m.write_at(&zeros[..n], offset + done)?;
        done += n as u64;
    }
    Ok(())
}

/// A regular file or block device, opened read-only unless writes were asked for, so a
/// read-only command can never modify a member.
pub struct FileMember {
    path: PathBuf,
    label: String,
    file: File,
    size: u64,
    writable: bool,
}

impl FileMember {
    pub fn open(path: &Path, writable: bool) -> io::Result<FileMember> {
        let file = OpenOptions::new().read(true).write(writable).open(path).map_err(|e| {
            io::Error::new(e.kind(), format!("{}: {e}", path.display()))
        })?;
        let meta = file.metadata()?;
        let size = if meta.file_type().is_block_device() {
            // Block devices report size 0 in metadata; seeking to the end tells the truth.
            use std::io::{Seek, SeekFrom};
            let mut f = &file;
            f.seek(SeekFrom::End(0))?
        } else if meta.is_file() {
            meta.len()
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a regular file or block device", path.display()),
            ));
        };
        Ok(FileMember { label: path.display().to_string(), path: path.to_path_buf(), file, size, writable })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Member for FileMember {
    fn label(&self) -> &str {
        &self.label
    }
    fn size_bytes(&self) -> u64 {
        self.size
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(self, offset, buf.len())?;
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("{} is open read-only", self.label)));
        }
        check_range(self, offset, buf.len())?;
        self.file.write_all_at(buf, offset)
    }
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        check_range(self, offset, total)?;
        const IOV_MAX: usize = 1024;
        let mut at = offset;
        for group in bufs.chunks_mut(IOV_MAX) {
            let mut slices: Vec<std::io::IoSliceMut> = group.iter_mut().map(|b| std::io::IoSliceMut::new(b)).collect();
            let mut rest: &mut [std::io::IoSliceMut] = &mut slices;
            while !rest.is_empty() {
                let n = rustix::io::preadv(&self.file, rest, at)?;
                if n == 0 {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("{}: short read", self.label)));
                }
                at += n as u64;
                std::io::IoSliceMut::advance_slices(&mut rest, n);
            }
        }
        Ok(())
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("{} is open read-only", self.label)));
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        check_range(self, offset, total)?;
        // pwritev in groups of at most IOV_MAX slices, resuming after short writes.
        const IOV_MAX: usize = 1024;
        let mut at = offset;
        for group in bufs.chunks(IOV_MAX) {
            let mut slices: Vec<std::io::IoSlice> = group.iter().map(|b| std::io::IoSlice::new(b)).collect();
            let mut rest: &mut [std::io::IoSlice] = &mut slices;
            while !rest.is_empty() {
                let n = rustix::io::pwritev(&self.file, rest, at)?;
                if n == 0 {
                    return Err(io::Error::new(io::ErrorKind::WriteZero, format!("{}: wrote nothing", self.label)));
                }
                at += n as u64;
                std::io::IoSlice::advance_slices(&mut rest, n);
            }
        }
        Ok(())
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("{} is open read-only", self.label)));
        }
        check_range(self, offset, len as usize)?;
        if self.file.metadata()?.is_file() {
            use rustix::fs::{fallocate, FallocateFlags};
            // A punched hole reads as zeros and frees the space; KEEP_SIZE keeps the member's size.
            if fallocate(&self.file, FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE, offset, len).is_ok() {
                return Ok(());
            }
        }
        // Block devices (a discard there need not read back as zeros) and filesystems
        // without hole punching: write zeros.
        write_zeros(self, offset, len)
    }
    fn flush(&self) -> io::Result<()> {
        if self.writable {
            self.file.sync_data()
        } else {
            Ok(())
        }
    }
}

fn check_range(m: &dyn Member, offset: u64, len: usize) -> io::Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= m.size_bytes() => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{}: access of {len} bytes at {offset} is beyond its end ({} bytes)", m.label(), m.size_bytes()),
        )),
    }
}

/// A member in memory (tests, and the simulator's durable/volatile images build on it).
pub struct MemMember {
    label: String,
    bytes: RwLock<Vec<u8>>,
}

impl MemMember {
    pub fn new(label: impl Into<String>, bytes: Vec<u8>) -> MemMember {
        MemMember { label: label.into(), bytes: RwLock::new(bytes) }
    }
    pub fn zeroed(label: impl Into<String>, size: usize) -> MemMember {
        MemMember::new(label, vec![0; size])
    }
    /// A copy of the contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.read().map(|b| b.clone()).unwrap_or_default()
    }
}

impl Member for MemMember {
    fn label(&self) -> &str {
        &self.label
    }
    fn size_bytes(&self) -> u64 {
        self.bytes.read().map(|b| b.len() as u64).unwrap_or(0)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(self, offset, buf.len())?;
        let b = self.bytes.read().map_err(|_| io::Error::other("poisoned"))?;
        buf.copy_from_slice(&b[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(self, offset, buf.len())?;
        let mut b = self.bytes.write().map_err(|_| io::Error::other("poisoned"))?;
        b[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_file_member_refuses_writes_and_out_of_range() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.img");
        std::fs::write(&p, vec![7u8; 4096]).unwrap();
        let m = FileMember::open(&p, false).unwrap();
        assert_eq!(m.size_bytes(), 4096);
        let mut b = [0u8; 16];
        m.read_at(&mut b, 4080).unwrap();
        assert_eq!(b, [7u8; 16]);
        assert!(m.read_at(&mut b, 4081).is_err());
        assert!(m.write_at(&b, 0).is_err());
        assert_eq!(std::fs::read(&p).unwrap(), vec![7u8; 4096]);
    }

    #[test]
    fn mem_member_round_trip() {
        let m = MemMember::zeroed("m", 100);
        m.write_at(&[1, 2, 3], 97).unwrap();
        let mut b = [0u8; 3];
        m.read_at(&mut b, 97).unwrap();
        assert_eq!(b, [1, 2, 3]);
        assert!(m.write_at(&[1], 100).is_err());
    }
}
