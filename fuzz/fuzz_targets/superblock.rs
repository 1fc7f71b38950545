//! Arbitrary bytes into both superblock decoders: errors are fine, panics are bugs. Whatever
//! decodes must re-encode to the same bytes (the codec keeps every byte it does not interpret).
#![no_main]
use libfuzzer_sys::fuzz_target;
use uraid_core::metadata::{Superblock090, Superblock1};

fuzz_target!(|data: &[u8]| {
    if let Ok(sb) = Superblock1::decode(data) {
        let bytes = sb.encode();
        assert_eq!(&bytes[..], &data[..bytes.len()]);
    }
    let _ = Superblock1::decode_unverified(data);
    if let Ok(sb) = Superblock090::decode(data) {
        let bytes = sb.encode();
        assert_eq!(&bytes[..], &data[..bytes.len()]);
    }
    let _ = Superblock090::decode_unverified(data);
});
