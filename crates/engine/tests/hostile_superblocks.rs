//! Hostile superblocks (issue 12, D5/D6 and build item 3): valid arrays made by the create
//! planner, one superblock field (or a write-intent bitmap field) set to an extreme or
//! random value with the checksum fixed, then probe, assembly, writes and reads. See
//! `hostile/mod.rs` for the oracle: no panic, one-line refusals, every member write inside
//! the member's data area, superblock or bitmap, data read back as written.
//!
//! This binary's allocator refuses any single allocation above `ALLOCATION_LIMIT` (the
//! process aborts, naming the size): no superblock may make uraid allocate more than its
//! devices could hold (the members here are 4 MiB each).

mod hostile;

use hostile::{run, shapes, Case, Outcome, Target, Value, BITMAP_FIELDS, SB090_FIELDS, SB1_FIELDS};
use proptest::prelude::*;
use uraid_core::metadata::MetadataVersion;

/// Far above anything the engine needs for these arrays (its largest buffers are a few
/// MiB), far below what a superblock's count or size could ask for.
const ALLOCATION_LIMIT: usize = 256 << 20;

#[global_allocator]
static ALLOCATOR: uraid_testkit::BoundedAlloc<ALLOCATION_LIMIT> = uraid_testkit::BoundedAlloc;

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Zero),
        Just(Value::One),
        Just(Value::Max),
        Just(Value::TopBit),
        any::<i8>().prop_map(Value::Near),
        any::<i8>().prop_map(Value::DeviceSectors),
        any::<u64>().prop_map(Value::Random),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let shapes = shapes();
    (0..shapes.len(), any::<prop::sample::Index>(), any::<bool>(), value(), prop::option::of(0usize..6), any::<bool>()).prop_map(
        move |(s, field, bitmap_field, value, device, force)| {
            let shape = shapes[s];
            let target = if shape.bitmap && bitmap_field {
                let (name, offset, width) = BITMAP_FIELDS[field.index(BITMAP_FIELDS.len())];
                Target::Bitmap(name, offset, width)
            } else {
                let fields = if shape.metadata == MetadataVersion::V0_90 { SB090_FIELDS } else { SB1_FIELDS };
                let (name, offset, width) = fields[field.index(fields.len())];
                Target::Superblock(name, offset, width)
            };
            Case { shape, target, value, device, force }
        },
    )
}

proptest! {
    // 512 cases by default (a few seconds); PROPTEST_CASES runs more.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(512),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn mutated_superblocks_are_refused_or_served_inside_the_data_area(case in case()) {
        run(&case);
    }
}

/// The defects of issue 12 by name, on every metadata version and level they apply to.
#[test]
fn the_issue_12_superblocks_are_refused_without_writing_anything_outside_the_data_area() {
    let mut refused = 0;
    for shape in shapes() {
        let v1 = shape.metadata != MetadataVersion::V0_90;
        let raid_disks = if v1 { ("raid_disks", 92, 4) } else { ("raid_disks", 40, 4) };
        let mut cases = vec![
            // D5: four billion devices.
            Case {
                shape,
                target: Target::Superblock(raid_disks.0, raid_disks.1, raid_disks.2),
                value: Value::Max,
                device: None,
                force: false,
            },
        ];
        if v1 {
            // D6: data_offset 2^63 sectors wraps to byte 0.
            cases.push(Case { shape, target: Target::Superblock("data_offset", 128, 8), value: Value::TopBit, device: None, force: false });
        }
        if matches!(shape.metadata, MetadataVersion::V1_1 | MetadataVersion::V1_2) {
            // data_offset 0 puts the data over the superblock without any wrap.
            cases.push(Case { shape, target: Target::Superblock("data_offset", 128, 8), value: Value::Zero, device: None, force: false });
        }
        if v1 && shape.spare {
            // A spare whose device number is past md's limit: the role table written at the
            // first superblock update would grow to it.
            let spare = Some(shape.disks);
            cases.push(Case { shape, target: Target::Superblock("dev_number", 160, 4), value: Value::Max, device: spare, force: false });
        }
        for case in cases {
            assert_eq!(run(&case), Outcome::Refused, "{case:?} was accepted");
            refused += 1;
        }
    }
    assert!(refused > 0);
}

/// The other side: every shape as the create planner makes it (a no-op "mutation") is
/// served, written and read back, so the checks refuse nothing md would assemble and the
/// oracle above is not judging refusals only.
#[test]
fn every_shape_as_created_is_served() {
    for shape in shapes() {
        let events = if shape.metadata == MetadataVersion::V0_90 { ("events_lo", 156, 4) } else { ("events", 200, 8) };
        let case =
            Case { shape, target: Target::Superblock(events.0, events.1, events.2), value: Value::Near(0), device: None, force: false };
        assert_eq!(run(&case), Outcome::Served, "{shape:?}");
    }
}
