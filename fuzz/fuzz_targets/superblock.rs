//! Arbitrary bytes into both superblock decoders: errors are fine, panics are bugs. Whatever
//! decodes must re-encode to the same bytes (the codec keeps every byte it does not interpret).
//!
//! Then the same bytes with the checksum fixed (so every field value reaches the checks, not
//! only the rare inputs that carry a right checksum) go through the superblock checks and
//! assembly, as one member and as two: no panic, and an accepted array keeps md's limits.
//! `fuzz_targets/superblock_mutation.rs` mutates valid superblocks field by field instead.
#![no_main]
use libfuzzer_sys::fuzz_target;
use uraid_core::assemble::{assemble, AssembleOptions, Candidate, Decision};
use uraid_core::metadata::check::{check_superblock, SB1_MAX_DISKS};
use uraid_core::metadata::{Superblock, Superblock090, Superblock1};

/// Device sizes the checks and assembly see: none, small, large, the largest possible.
const DEVICE_SIZES: [u64; 4] = [0, 8 << 20, 1 << 40, u64::MAX];

fn checks_and_assembly(sb: Superblock) {
    for size in DEVICE_SIZES {
        let _ = check_superblock(&sb, size);
    }
    let candidate = |label: &str, size: u64| Candidate { label: label.into(), superblock: sb.clone(), device_size_bytes: size };
    for size in DEVICE_SIZES {
        for candidates in [vec![candidate("a", size)], vec![candidate("a", size), candidate("b", size)]] {
            let assembly = assemble(&candidates, &AssembleOptions { array_uuid: None, force: true, run: true });
            if let (Decision::Run | Decision::RunDegraded, Some(plan)) = (&assembly.decision, &assembly.plan) {
                assert!(plan.shape.raid_disks >= 1 && plan.shape.raid_disks <= SB1_MAX_DISKS);
                // Every device the array keeps passed the checks on its device.
                let kept = plan.members.iter().flatten().chain(plan.rebuilding.iter().map(|r| &r.member)).chain(&plan.spares);
                for &i in kept {
                    assert_eq!(check_superblock(&candidates[i].superblock, candidates[i].device_size_bytes), Ok(()));
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(sb) = Superblock1::decode(data) {
        let bytes = sb.encode();
        assert_eq!(&bytes[..], &data[..bytes.len()]);
    }
    if let Ok(mut sb) = Superblock1::decode_unverified(data) {
        sb.update_checksum();
        checks_and_assembly(Superblock::V1(sb));
    }
    if let Ok(sb) = Superblock090::decode(data) {
        let bytes = sb.encode();
        assert_eq!(&bytes[..], &data[..bytes.len()]);
    }
    if let Ok(mut sb) = Superblock090::decode_unverified(data) {
        sb.update_checksum();
        checks_and_assembly(Superblock::V090(sb));
    }
});
