//! Little-endian field access on buffers whose length the caller has already checked.
//!
//! Every decoder checks `bytes.len()` against the struct size *before* reading fields, so
//! these helpers index freely; an out-of-range offset here is a bug in a decoder, never a
//! consequence of the input bytes.

pub(crate) fn u16_at(bytes: &[u8], offset: usize) -> u16 {
    let mut word = [0u8; 2];
    word.copy_from_slice(&bytes[offset..offset + 2]);
    u16::from_le_bytes(word)
}

pub(crate) fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_le_bytes(word)
}

pub(crate) fn i32_at(bytes: &[u8], offset: usize) -> i32 {
    u32_at(bytes, offset) as i32
}

pub(crate) fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_le_bytes(word)
}

pub(crate) fn array_at<const N: usize>(bytes: &[u8], offset: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[offset..offset + N]);
    out
}

pub(crate) fn put_u16(bytes: &mut [u8], offset: usize, value: u16) {
    bytes[offset..offset + 2].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn put_u32(bytes: &mut [u8], offset: usize, value: u32) {
    bytes[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn put_i32(bytes: &mut [u8], offset: usize, value: i32) {
    put_u32(bytes, offset, value as u32);
}

pub(crate) fn put_u64(bytes: &mut [u8], offset: usize, value: u64) {
    bytes[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn put_bytes(bytes: &mut [u8], offset: usize, value: &[u8]) {
    bytes[offset..offset + value.len()].copy_from_slice(value);
}

/// md's superblock checksum (kernel `calc_sb_1_csum`, mdadm `calc_csum`): a 64-bit sum of
/// little-endian u32 words, a trailing u16 added if the length is 2 mod 4, then folded
/// `(sum & 0xffffffff) + (sum >> 32)` and truncated to 32 bits (C assigns to `unsigned int`).
/// The 4 bytes at `csum_offset` count as zero, because the checksum cannot cover itself.
pub(crate) fn md_checksum(bytes: &[u8], csum_offset: usize) -> u32 {
    let mut sum: u64 = 0;
    let mut offset = 0;
    while offset + 4 <= bytes.len() {
        if offset != csum_offset {
            sum += u64::from(u32_at(bytes, offset));
        }
        offset += 4;
    }
    if bytes.len() - offset == 2 {
        sum += u64::from(u16_at(bytes, offset));
    }
    ((sum & 0xffff_ffff) + (sum >> 32)) as u32
}
