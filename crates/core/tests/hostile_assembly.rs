//! Assembly of arbitrary superblocks with valid checksums (issue 12, build item 3), the
//! pure half of `crates/engine/tests/hostile_superblocks.rs`: whatever the fields say,
//! [`check_superblock`] and [`assemble`] return (no panic, no hang), allocate no more than
//! `ALLOCATION_LIMIT` at once (this binary's allocator refuses more, which aborts), and an
//! array they accept has counts within md's limits and every kept member's data area, as
//! the bounds are computed here from the raw fields, inside its device and clear of its
//! superblock.

use proptest::prelude::*;
use uraid_core::assemble::{assemble, AssembleOptions, Candidate, Decision};
use uraid_core::metadata::check::check_superblock;
use uraid_core::metadata::{Superblock, Superblock090, Superblock1, MD_SB_MAGIC};

const ALLOCATION_LIMIT: usize = 64 << 20;

#[global_allocator]
static ALLOCATOR: uraid_testkit::BoundedAlloc<ALLOCATION_LIMIT> = uraid_testkit::BoundedAlloc;

/// A 1.x superblock from arbitrary bytes: magic, version 1, `max_dev` that fits, the uuid
/// shared by the whole case, the `super_offset` of a 1.2 superblock, a fixed checksum.
fn sb1(mut bytes: Vec<u8>, max_dev: u32) -> Superblock {
    bytes.resize(4096, 0);
    bytes[0..4].copy_from_slice(&MD_SB_MAGIC.to_le_bytes());
    bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
    bytes[16..32].copy_from_slice(&[0x42; 16]);
    bytes[144..152].copy_from_slice(&8u64.to_le_bytes());
    bytes[220..224].copy_from_slice(&max_dev.to_le_bytes());
    let mut sb = Superblock1::decode_unverified(&bytes).expect("header is valid");
    sb.update_checksum();
    Superblock::V1(sb)
}

fn sb090(mut bytes: Vec<u8>) -> Superblock {
    bytes.resize(4096, 0);
    bytes[0..4].copy_from_slice(&MD_SB_MAGIC.to_le_bytes());
    bytes[4..8].copy_from_slice(&0u32.to_le_bytes());
    for word in [20, 52, 56, 60] {
        bytes[word..word + 4].copy_from_slice(&[0x42; 4]);
    }
    let mut sb = Superblock090::decode_unverified(&bytes).expect("header is valid");
    sb.update_checksum();
    Superblock::V090(sb)
}

/// Small numbers where they decide most, so some cases pass every check and assemble.
fn tame(mut bytes: Vec<u8>, knobs: &[u8; 6], dev_number: u32, events: u8) -> Vec<u8> {
    bytes.resize(4096, 0);
    let put = |b: &mut Vec<u8>, at: usize, v: &[u8]| b[at..at + v.len()].copy_from_slice(v);
    put(&mut bytes, 72, &[[1, 5, 6, 10][usize::from(knobs[0] % 4)], 0, 0, 0]); // level
    put(&mut bytes, 76, &2u32.to_le_bytes()); // layout
    put(&mut bytes, 80, &(u64::from(knobs[1] / 2) * 128).to_le_bytes()); // size
    put(&mut bytes, 88, &128u32.to_le_bytes()); // chunk
    put(&mut bytes, 92, &u32::from(1 + knobs[2] % 4).to_le_bytes()); // raid_disks
    put(&mut bytes, 96, &8u32.to_le_bytes()); // bitmap_offset
    put(&mut bytes, 128, &2048u64.to_le_bytes()); // data_offset
    put(&mut bytes, 136, &((u64::from(knobs[1] / 2) + u64::from(knobs[3] % 64)) * 128 + 128).to_le_bytes()); // data_size
    put(&mut bytes, 160, &(dev_number + u32::from(knobs[4] % 2)).to_le_bytes()); // dev_number
    put(&mut bytes, 8, &u32::from(knobs[5] & 0x13).to_le_bytes()); // feature_map
    put(&mut bytes, 186, &[0; 6]); // no bad-block log
    put(&mut bytes, 200, &u64::from(events % 4).to_le_bytes()); // events
    for role in 0..8u16 {
        put(&mut bytes, 256 + 2 * usize::from(role), &role.to_le_bytes());
    }
    bytes
}

fn device_size() -> impl Strategy<Value = u64> {
    prop_oneof![1 => Just(0u64), 1 => Just(8 << 20), 3 => Just(64 << 20), 1 => Just(1 << 40), 1 => Just(i64::MAX as u64), 1 => any::<u64>()]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_superblocks_assemble_within_bounds(
        raw in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 4096), 0u32..=1920, any::<u8>(), prop::bool::weighted(0.9)), 1..5),
        knobs in any::<[u8; 6]>(),
        v090 in prop::bool::weighted(0.2),
        sizes in proptest::collection::vec(device_size(), 4),
        force in any::<bool>(),
        run in any::<bool>(),
    ) {
        let candidates: Vec<Candidate> = raw
            .into_iter()
            .enumerate()
            .map(|(i, (bytes, max_dev, events, tamed))| {
                let superblock = match (v090, tamed) {
                    (true, _) => sb090(bytes),
                    (false, true) => sb1(tame(bytes, &knobs, i as u32, events), 8),
                    (false, false) => sb1(bytes, max_dev),
                };
                Candidate { label: format!("d{i}"), superblock, device_size_bytes: sizes[i % sizes.len()] }
            })
            .collect();
        for c in &candidates {
            let _ = check_superblock(&c.superblock, c.device_size_bytes);
        }
        let assembly = assemble(&candidates, &AssembleOptions { array_uuid: None, force, run });
        if let (Decision::Run | Decision::RunDegraded, Some(plan)) = (&assembly.decision, &assembly.plan) {
            let limit = if v090 { 27 } else { 1920 };
            prop_assert!(plan.shape.raid_disks >= 1 && plan.shape.raid_disks <= limit, "{:?}", plan.shape);
            let kept = plan.members.iter().flatten().copied().chain(plan.rebuilding.iter().map(|r| r.member)).chain(plan.spares.iter().copied());
            for i in kept {
                let c = &candidates[i];
                let dev_sectors = c.device_size_bytes / 512;
                prop_assert_eq!(c.superblock.shape(), plan.shape);
                if let Superblock::V1(sb) = &c.superblock {
                    let end = sb.data_offset_sectors.checked_add(sb.data_size_sectors);
                    prop_assert!(end.is_some_and(|e| e <= dev_sectors), "{}: data area past the device", c.label);
                    prop_assert!(sb.data_offset_sectors >= sb.super_offset_sectors + 8, "{}: data over the superblock", c.label);
                    prop_assert!(sb.dev_number < 1920);
                }
            }
        }
    }
}
