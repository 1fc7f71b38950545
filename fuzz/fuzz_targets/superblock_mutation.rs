//! Structured mutation of valid superblocks (issue 12, build item 3): an array made by the
//! create planner on in-memory members, one field of a superblock (or of a write-intent
//! bitmap's superblock) set from the fuzzer's bytes with the checksum fixed, then probe,
//! assembly, writes and reads. The oracle is the one `cargo test` runs
//! (`crates/engine/tests/hostile/mod.rs`): no panic, one-line refusals, every member write
//! inside the member's data area, superblock or bitmap, data read back as written.
//!
//! Allocations are bounded by libFuzzer: run with `-rss_limit_mb=1024` (a superblock that
//! makes uraid allocate more is reported as a crash), e.g.
//! `cargo +nightly fuzz run superblock_mutation -- -rss_limit_mb=1024 -max_len=64`.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/engine/tests/hostile/mod.rs"]
mod hostile;

use hostile::{run, shapes, Case, Target, Value, BITMAP_FIELDS, SB090_FIELDS, SB1_FIELDS};
use uraid_core::metadata::MetadataVersion;

/// Reads the fuzzer's bytes as small numbers, zeros once they run out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let (first, rest) = self.0.split_first().map_or((0, &[][..]), |(f, r)| (*f, r));
        self.0 = rest;
        first
    }
    fn u64(&mut self) -> u64 {
        (0..8).fold(0u64, |v, _| v << 8 | u64::from(self.u8()))
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let shapes = shapes();
    let shape = shapes[usize::from(b.u8()) % shapes.len()];
    let pick = usize::from(b.u8());
    let target = if shape.bitmap && b.u8() & 1 == 1 {
        let (name, offset, width) = BITMAP_FIELDS[pick % BITMAP_FIELDS.len()];
        Target::Bitmap(name, offset, width)
    } else {
        let fields = if shape.metadata == MetadataVersion::V0_90 { SB090_FIELDS } else { SB1_FIELDS };
        let (name, offset, width) = fields[pick % fields.len()];
        Target::Superblock(name, offset, width)
    };
    let value = match b.u8() % 7 {
        0 => Value::Zero,
        1 => Value::One,
        2 => Value::Max,
        3 => Value::TopBit,
        4 => Value::Near(b.u8() as i8),
        5 => Value::DeviceSectors(b.u8() as i8),
        _ => Value::Random(b.u64()),
    };
    let device = match b.u8() {
        d if d >= 128 => None,
        d => Some(usize::from(d)),
    };
    let force = b.u8() & 1 == 1;
    run(&Case { shape, target, value, device, force });
});
