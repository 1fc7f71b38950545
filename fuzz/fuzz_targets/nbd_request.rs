//! Arbitrary bytes into the NBD handshake-option and transmission-request decoders (and
//! the request validator), as a client could send them: errors are fine, panics are bugs.
//! The oracle lives in the crate (`protocol::check_decoders`) so `cargo test` runs it too.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    uraid_nbd::protocol::check_decoders(data);
});
