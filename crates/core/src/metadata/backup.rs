//! mdadm's reshape backup (`struct mdp_backup_super`, Grow.c), for a reshape that cannot
//! move the data offset (0.90 metadata has none): the stretch of the array whose new
//! stripes overwrite old ones not yet read (the "critical section") is copied into a backup
//! file first, and whoever assembles the array after a crash inside that stretch writes the
//! copy back in the new geometry (`Grow_restart`) before the reshape goes on.
//!
//! A backup file holds this 512-byte superblock at byte 0 and the data from sector
//! `devstart` (8: byte 4096), the array's bytes `[arraystart, arraystart + length)` in
//! array order. mdadm writes "md_backup_data-1" with one stretch (a grow's single critical
//! section); "-2" adds a second stretch (`devstart2` sectors after the first), used by
//! reshapes that keep the member count, which uraid does not start. Pure: no I/O.

use super::codec::{put_bytes, put_u32, put_u64, u32_at, u64_at};

pub const BACKUP_SUPER_BYTES: usize = 512;
/// Where mdadm puts the data in a backup file (`reshape_open_backup_file`: 8 sectors).
pub const BACKUP_DATA_SECTOR: u64 = 8;

const MAGIC_1: &[u8; 16] = b"md_backup_data-1";
const MAGIC_2: &[u8; 16] = b"md_backup_data-2";

/// A decoded `mdp_backup_super` (sectors are 512 bytes; array sectors for `arraystart`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupSuperblock {
    /// The array's uuid as mdadm's `uuid_from_super` gives it (the 1.x `set_uuid` bytes;
    /// 0.90's four words, little-endian).
    pub set_uuid: [u8; 16],
    /// Seconds since the epoch when written; mdadm trusts a backup only if the array's
    /// superblock `utime` lies within [mtime - 10 min, mtime + 2 h].
    pub mtime: u64,
    /// Sector of the backup device where the data starts.
    pub devstart: u64,
    pub arraystart: u64,
    /// Sectors backed up; 0: nothing (mdadm's `forget_backup`).
    pub length: u64,
    /// The second stretch ("-2" only): sectors after `devstart`, array start, length.
    pub second: Option<(u64, u64, u64)>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackupError {
    #[error("not an md reshape backup (no md_backup_data magic)")]
    Magic,
    #[error("the backup superblock's checksum is wrong")]
    Checksum,
    #[error("{0} bytes: a backup superblock is 512")]
    Truncated(usize),
}

/// mdadm's `bsb_csum`, as it is: it adds `buf[0]` (not `buf[i]`) each round, so the sum
/// only depends on the first byte and the length. Reproduced, since mdadm compares it.
fn bsb_csum(buf: &[u8]) -> u32 {
    let first = i32::from(buf[0] as i8);
    (0..buf.len()).fold(0i32, |csum, _| csum.wrapping_shl(3).wrapping_add(first)) as u32
}

impl BackupSuperblock {
    pub fn encode(&self) -> [u8; BACKUP_SUPER_BYTES] {
        let mut b = [0u8; BACKUP_SUPER_BYTES];
        put_bytes(&mut b, 0, if self.second.is_some() { MAGIC_2 } else { MAGIC_1 });
        put_bytes(&mut b, 16, &self.set_uuid);
        put_u64(&mut b, 32, self.mtime);
        put_u64(&mut b, 40, self.devstart);
        put_u64(&mut b, 48, self.arraystart);
        put_u64(&mut b, 56, self.length);
        let csum = bsb_csum(&b[..64]);
        put_u32(&mut b, 64, csum);
        if let Some((devstart2, arraystart2, length2)) = self.second {
            put_u64(&mut b, 72, devstart2);
            put_u64(&mut b, 80, arraystart2);
            put_u64(&mut b, 88, length2);
            let csum2 = bsb_csum(&b[..96]);
            put_u32(&mut b, 96, csum2);
        }
        b
    }

    /// Decodes and checks magic and checksums, as `Grow_restart` does.
    pub fn decode(bytes: &[u8]) -> Result<BackupSuperblock, BackupError> {
        if bytes.len() < BACKUP_SUPER_BYTES {
            return Err(BackupError::Truncated(bytes.len()));
        }
        let two = match &bytes[..16] {
            m if m == MAGIC_1 => false,
            m if m == MAGIC_2 => true,
            _ => return Err(BackupError::Magic),
        };
        if u32_at(bytes, 64) != bsb_csum(&bytes[..64]) || (two && u32_at(bytes, 96) != bsb_csum(&bytes[..96])) {
            return Err(BackupError::Checksum);
        }
        let mut set_uuid = [0u8; 16];
        set_uuid.copy_from_slice(&bytes[16..32]);
        Ok(BackupSuperblock {
            set_uuid,
            mtime: u64_at(bytes, 32),
            devstart: u64_at(bytes, 40),
            arraystart: u64_at(bytes, 48),
            length: u64_at(bytes, 56),
            second: two.then(|| (u64_at(bytes, 72), u64_at(bytes, 80), u64_at(bytes, 88))),
        })
    }

    /// Whether mdadm would take this backup for an array whose superblock was last updated
    /// at `utime` (`Grow_restart`'s window; `MDADM_GROW_ALLOW_OLD` lifts it there).
    pub fn fresh_for(&self, utime: u64) -> bool {
        utime + 600 >= self.mtime && utime <= self.mtime + 7200
    }

    /// Whether a grow stopped at array sector `position` still needs the backed-up stretch
    /// (`Grow_restart`: not when it ends before the position; a forgotten one never).
    pub fn needed_by_grow_at(&self, position: u64) -> bool {
        self.length > 0 && self.arraystart + self.length >= position && self.arraystart <= position
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BackupSuperblock {
        BackupSuperblock { set_uuid: [3; 16], mtime: 1_764_000_000, devstart: 8, arraystart: 0, length: 768, second: None }
    }

    #[test]
    fn mdadms_checksum_depends_on_the_first_byte_only() {
        // With "m" first, every length from 11 bytes on sums to the same value (the shifted
        // bits fall off): mdadm's files all carry 15 49 92 24 there.
        let bytes = sample().encode();
        assert_eq!(&bytes[64..68], &[0x15, 0x49, 0x92, 0x24]);
        assert_eq!(u32_at(&bytes, 96), 0, "no second checksum with one stretch");
        let two = BackupSuperblock { second: Some((768, 768, 768)), ..sample() }.encode();
        assert_eq!(&two[..16], b"md_backup_data-2");
        assert_eq!(&two[96..100], &[0x15, 0x49, 0x92, 0x24]);
    }

    #[test]
    fn round_trips_and_refuses_damage() {
        for sb in [sample(), BackupSuperblock { second: Some((768, 768, 768)), ..sample() }] {
            let bytes = sb.encode();
            assert_eq!(BackupSuperblock::decode(&bytes), Ok(sb.clone()));
            let mut bad = bytes;
            bad[0] = b'M';
            assert_eq!(BackupSuperblock::decode(&bad), Err(BackupError::Magic));
            let mut bad = bytes;
            bad[65] ^= 1;
            assert_eq!(BackupSuperblock::decode(&bad), Err(BackupError::Checksum));
            assert_eq!(BackupSuperblock::decode(&bytes[..100]), Err(BackupError::Truncated(100)));
        }
    }

    #[test]
    fn mdadms_windows() {
        let sb = sample();
        assert!(sb.fresh_for(sb.mtime) && sb.fresh_for(sb.mtime - 600) && sb.fresh_for(sb.mtime + 7200));
        assert!(!sb.fresh_for(sb.mtime - 601) && !sb.fresh_for(sb.mtime + 7201));
        assert!(sb.needed_by_grow_at(0) && sb.needed_by_grow_at(768));
        assert!(!sb.needed_by_grow_at(769));
        assert!(!BackupSuperblock { length: 0, ..sb }.needed_by_grow_at(0));
    }
}
