//! Arbitrary bytes into the write-intent bitmap decoders: errors are fine, panics are bugs.
#![no_main]
use libfuzzer_sys::fuzz_target;
use uraid_core::metadata::{BitmapSuperblock, WriteIntentBits};

fuzz_target!(|data: &[u8]| {
    if let Ok(sb) = BitmapSuperblock::decode(data) {
        let rest = data.get(256..).unwrap_or(&[]);
        let _ = WriteIntentBits::decode(&sb, rest);
    }
});
