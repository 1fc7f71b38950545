//! What a workload runs against: an in-process array, or a plain file / block device (the
//! peer), behind one trait so both go through exactly the same job code.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;
use uraid_engine::Array;

pub trait Target: Send + Sync {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), String>;
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), String>;
    fn flush(&self) -> Result<(), String>;
    fn size(&self) -> u64;
}

impl Target for Array {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), String> {
        self.read(offset, buf).map_err(|e| e.to_string())
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), String> {
        self.write(offset, data).map_err(|e| e.to_string())
    }
    fn flush(&self) -> Result<(), String> {
        Array::flush(self).map_err(|e| e.to_string())
    }
    fn size(&self) -> u64 {
        self.size_bytes()
    }
}

/// A plain file or block device, buffered (like the members: O_DIRECT is not implemented).
pub struct FileTarget {
    file: File,
    size: u64,
}

impl FileTarget {
    /// A new file of `size` bytes (the default peer, next to the members).
    pub fn create(path: &Path, size: u64) -> Result<FileTarget, String> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        file.set_len(size).map_err(|e| e.to_string())?;
        Ok(FileTarget { file, size })
    }

    /// An existing file or block device given with `--target` (its contents are overwritten).
    pub fn open_existing(path: &Path) -> Result<FileTarget, String> {
        let mut file = OpenOptions::new().read(true).write(true).open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        // Block devices report length 0 in metadata; seeking to the end gives their size.
        let size = file.seek(SeekFrom::End(0)).map_err(|e| e.to_string())?;
        if size == 0 {
            return Err(format!("{}: size 0 (give a file of the wanted size or a block device)", path.display()));
        }
        Ok(FileTarget { file, size })
    }
}

impl Target for FileTarget {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), String> {
        self.file.read_exact_at(buf, offset).map_err(|e| e.to_string())
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), String> {
        self.file.write_all_at(data, offset).map_err(|e| e.to_string())
    }
    fn flush(&self) -> Result<(), String> {
        self.file.sync_data().map_err(|e| e.to_string())
    }
    fn size(&self) -> u64 {
        self.size
    }
}
