//! The reshape backup on a device or file, in mdadm's format
//! (`uraid_core::metadata::backup`): written before a reshape in place begins, read back by
//! whoever assembles the array after a crash inside its critical section (uraid here, or
//! `mdadm --assemble --backup-file`), and forgotten once the reshape is past it.

use crate::array::EngineError;
use crate::member::Member;
use std::sync::Arc;
use uraid_core::geometry::SECTOR_BYTES;
use uraid_core::metadata::backup::{BackupSuperblock, BACKUP_DATA_SECTOR, BACKUP_SUPER_BYTES};

/// A backup device (a file, usually), as mdadm lays one out: the superblock at byte 0, the
/// data from byte 4096.
pub struct ReshapeBackup {
    device: Arc<dyn Member>,
}

impl ReshapeBackup {
    pub fn new(device: Arc<dyn Member>) -> ReshapeBackup {
        ReshapeBackup { device }
    }

    pub fn label(&self) -> &str {
        self.device.label()
    }

    fn error(&self, what: &str, e: impl std::fmt::Display) -> EngineError {
        EngineError::Refused(format!("backup {}: {what}: {e}", self.device.label()))
    }

    /// Saves array sectors `[arraystart, arraystart + data/512)`: the data first, then the
    /// superblock naming it, each made durable (mdadm's `grow_backup`), so a superblock
    /// never names data that is not there.
    pub fn save(&self, set_uuid: [u8; 16], arraystart: u64, data: &[u8], mtime: u64) -> Result<BackupSuperblock, EngineError> {
        let needed = BACKUP_DATA_SECTOR * SECTOR_BYTES + data.len() as u64;
        if self.device.size_bytes() < needed {
            return Err(self.error("too small", format!("{} bytes, the critical section needs {needed}", self.device.size_bytes())));
        }
        self.device.write_at(data, BACKUP_DATA_SECTOR * SECTOR_BYTES).map_err(|e| self.error("writing the data", e))?;
        self.device.flush().map_err(|e| self.error("flushing the data", e))?;
        let sb = BackupSuperblock {
            set_uuid,
            mtime,
            devstart: BACKUP_DATA_SECTOR,
            arraystart,
            length: data.len() as u64 / SECTOR_BYTES,
            second: None,
        };
        self.write_superblock(&sb)?;
        Ok(sb)
    }

    fn write_superblock(&self, sb: &BackupSuperblock) -> Result<(), EngineError> {
        self.device.write_at(&sb.encode(), 0).map_err(|e| self.error("writing its superblock", e))?;
        self.device.flush().map_err(|e| self.error("flushing its superblock", e))
    }

    /// The superblock and the data it names (its first stretch; uraid writes no second).
    pub fn load(&self) -> Result<(BackupSuperblock, Vec<u8>), EngineError> {
        let mut head = vec![0u8; BACKUP_SUPER_BYTES];
        self.device.read_at(&mut head, 0).map_err(|e| self.error("reading its superblock", e))?;
        let sb = BackupSuperblock::decode(&head).map_err(|e| self.error("its superblock", e))?;
        if sb.second.is_some() {
            return Err(self.error("two stretches", "uraid restores backups of grows (one stretch, md_backup_data-1)"));
        }
        let len = usize::try_from(sb.length * SECTOR_BYTES).map_err(|e| self.error("length", e))?;
        let at = sb.devstart.checked_mul(SECTOR_BYTES).filter(|at| at + len as u64 <= self.device.size_bytes());
        let Some(at) = at else {
            return Err(self.error("its superblock", format!("data at sector {} of {} sectors lies past its end", sb.devstart, sb.length)));
        };
        let mut data = vec![0u8; len];
        self.device.read_at(&mut data, at).map_err(|e| self.error("reading the data", e))?;
        Ok((sb, data))
    }

    /// Marks the backup as holding nothing (mdadm's `forget_backup`): once the reshape is
    /// recorded past its stretch, a later restore must not write old data over new writes.
    pub fn forget(&self, sb: &BackupSuperblock, mtime: u64) -> Result<(), EngineError> {
        self.write_superblock(&BackupSuperblock { arraystart: 0, length: 0, mtime, ..sb.clone() })
    }
}
