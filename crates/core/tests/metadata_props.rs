//! Property tests for the metadata codecs: no panics on arbitrary bytes, byte-exact round
//! trips of every valid superblock, and checksum errors that name both checksums.

use proptest::prelude::*;
use uraid_core::metadata::{
    BitmapSuperblock, MetadataError, MetadataVersion, Superblock, Superblock090, Superblock1, WriteIntentBits, MD_SB_MAGIC,
};

/// Turns random bytes into a valid 1.x superblock image: magic, version 1, a `max_dev` that
/// fits, and a correct checksum. Returns the bytes and the superblock length.
fn valid_sb1_bytes(mut bytes: Vec<u8>, max_dev: u32) -> (Vec<u8>, usize) {
    bytes.resize(4096, 0);
    bytes[0..4].copy_from_slice(&MD_SB_MAGIC.to_le_bytes());
    bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
    bytes[220..224].copy_from_slice(&max_dev.to_le_bytes());
    let len = 256 + 2 * max_dev as usize;
    let csum = match Superblock1::decode_unverified(&bytes) {
        Ok(sb) => sb.compute_checksum(),
        Err(e) => panic!("constructed superblock must decode: {e}"),
    };
    bytes[216..220].copy_from_slice(&csum.to_le_bytes());
    (bytes, len)
}

fn valid_sb090_bytes(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.resize(4096, 0);
    bytes[0..4].copy_from_slice(&MD_SB_MAGIC.to_le_bytes());
    bytes[4..8].copy_from_slice(&0u32.to_le_bytes());
    let csum = match Superblock090::decode_unverified(&bytes) {
        Ok(sb) => sb.compute_checksum(),
        Err(e) => panic!("constructed superblock must decode: {e}"),
    };
    bytes[152..156].copy_from_slice(&csum.to_le_bytes());
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4200)) {
        for version in [MetadataVersion::V0_90, MetadataVersion::V1_2] {
            let _ = Superblock::decode(version, &bytes);
        }
        let _ = Superblock1::decode_unverified(&bytes);
        let _ = Superblock090::decode_unverified(&bytes);
        if let Ok(bitmap) = BitmapSuperblock::decode(&bytes) {
            let _ = WriteIntentBits::decode(&bitmap, &bytes);
        }
    }

    /// Arbitrary bytes that pass the header checks still never panic, whatever the fields.
    #[test]
    fn arbitrary_fields_never_panic(bytes in proptest::collection::vec(any::<u8>(), 4096), max_dev in 0u32..=1920) {
        let (bytes, _) = valid_sb1_bytes(bytes, max_dev);
        let sb = Superblock::V1(Superblock1::decode(&bytes).expect("valid"));
        let _ = (sb.role(), sb.shape().array_size_sectors(&[]), sb.active_roles(), sb.bitmap_offset_bytes(u64::MAX));
        let _ = (sb.recovery_offset_sectors(), sb.reshape_active(), sb.member_data_size_sectors(0));
    }

    #[test]
    fn sb1_encode_decode_is_byte_exact(bytes in proptest::collection::vec(any::<u8>(), 4096), max_dev in 0u32..=1920) {
        let (bytes, len) = valid_sb1_bytes(bytes, max_dev);
        let sb = Superblock1::decode(&bytes).expect("valid superblock decodes");
        let encoded = sb.encode();
        prop_assert_eq!(&encoded[..], &bytes[..len]);
        prop_assert_eq!(Superblock1::decode(&encoded).expect("re-decodes"), sb);
    }

    /// Setting fields to arbitrary values and fixing the checksum round-trips.
    #[test]
    fn sb1_fields_roundtrip(
        bytes in proptest::collection::vec(any::<u8>(), 4096),
        events in any::<u64>(),
        level in any::<i32>(),
        dev_number in any::<u32>(),
        roles in proptest::collection::vec(any::<u16>(), 0..1921),
        resync in any::<u64>(),
        name in any::<[u8; 32]>(),
    ) {
        let (bytes, _) = valid_sb1_bytes(bytes, 0);
        let mut sb = Superblock1::decode(&bytes).expect("valid");
        sb.events = events;
        sb.level = level;
        sb.dev_number = dev_number;
        sb.dev_roles = roles;
        sb.resync_offset_sectors = resync;
        sb.set_name = name;
        sb.update_checksum();
        prop_assert_eq!(Superblock1::decode(&sb.encode()).expect("decodes"), sb);
    }

    #[test]
    fn sb090_encode_decode_is_byte_exact(bytes in proptest::collection::vec(any::<u8>(), 4096)) {
        let bytes = valid_sb090_bytes(bytes);
        let sb = Superblock090::decode(&bytes).expect("valid superblock decodes");
        prop_assert_eq!(&sb.encode()[..], &bytes[..]);
        prop_assert_eq!(Superblock090::decode(&sb.encode()).expect("re-decodes"), sb);
    }

    #[test]
    fn bitmap_encode_decode_is_byte_exact(
        mut bytes in proptest::collection::vec(any::<u8>(), 256),
        version in 3u32..=5,
        chunk_shift in 9u32..32,
    ) {
        bytes[0..4].copy_from_slice(&0x6d74_6962u32.to_le_bytes());
        bytes[4..8].copy_from_slice(&version.to_le_bytes());
        bytes[52..56].copy_from_slice(&(1u32 << chunk_shift).to_le_bytes());
        let bitmap = BitmapSuperblock::decode(&bytes).expect("valid bitmap decodes");
        prop_assert_eq!(&bitmap.encode()[..], &bytes[..]);
        prop_assert_eq!(BitmapSuperblock::decode(&bitmap.encode()).expect("re-decodes"), bitmap);
    }

    /// Any single changed byte in the checksummed area (other than the fields checked before
    /// the checksum: magic, version, `max_dev`, and the checksum itself) is a
    /// `ChecksumMismatch` naming the stored and the recomputed checksum.
    #[test]
    fn sb1_flipped_byte_is_checksum_mismatch(
        bytes in proptest::collection::vec(any::<u8>(), 4096),
        max_dev in 0u32..=1920,
        position in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let (mut bytes, len) = valid_sb1_bytes(bytes, max_dev);
        let stored = u32::from_le_bytes([bytes[216], bytes[217], bytes[218], bytes[219]]);
        let offset = position.index(len);
        prop_assume!(offset >= 8 && !(216..224).contains(&offset));
        bytes[offset] ^= flip;
        let computed = Superblock1::decode_unverified(&bytes).expect("header intact").compute_checksum();
        let error = Superblock1::decode(&bytes).expect_err("must be rejected");
        prop_assert_eq!(error.clone(), MetadataError::ChecksumMismatch { stored, computed });
        let message = error.to_string();
        let stored_hex = format!("{:#010x}", stored);
        let computed_hex = format!("{:#010x}", computed);
        prop_assert!(message.contains(&stored_hex), "{} lacks {}", message, stored_hex);
        prop_assert!(message.contains(&computed_hex), "{} lacks {}", message, computed_hex);
        prop_assert_ne!(stored, computed);
    }

    #[test]
    fn sb090_flipped_byte_is_checksum_mismatch(
        bytes in proptest::collection::vec(any::<u8>(), 4096),
        position in 8usize..4096,
        flip in 1u8..=255,
    ) {
        prop_assume!(!(152..156).contains(&position));
        let mut bytes = valid_sb090_bytes(bytes);
        let stored = u32::from_le_bytes([bytes[152], bytes[153], bytes[154], bytes[155]]);
        bytes[position] ^= flip;
        match Superblock090::decode(&bytes) {
            Err(MetadataError::ChecksumMismatch { stored: s, computed }) => {
                prop_assert_eq!(s, stored);
                prop_assert_ne!(computed, stored);
            }
            other => prop_assert!(false, "expected checksum mismatch, got {:?}", other),
        }
    }
}
