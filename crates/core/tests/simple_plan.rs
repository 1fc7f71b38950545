//! The linear/RAID0/mirror read planner over random geometries, lost members and reads:
//! every planned read is on a present member and holds the piece (the geometry maps it back
//! to the same array sector), mirrors use md's first present copy, and a read is refused
//! exactly when some piece has no present member.

use proptest::prelude::*;
use uraid_core::geometry::{ArraySpec, Geometry, Level, Placement};
use uraid_core::plan::simple::plan_read;
use uraid_core::plan::PlanError;

fn spec() -> impl Strategy<Value = (ArraySpec, Vec<bool>, u64, u64)> {
    (0usize..4, 2usize..6, prop::sample::select(vec![0x102u32, 0x103, 0x201, 0x10201, 0x10102]), any::<u64>(), any::<u64>(), any::<u64>())
        .prop_filter_map("no such array", |(kind, disks, raid10_layout, lost_bits, at, len)| {
            let (level, layout) = match kind {
                0 => (Level::Linear, 0),
                1 => (Level::Raid0, 1),
                2 => (Level::Raid1, 0),
                _ => (Level::Raid10, raid10_layout),
            };
            let member_sectors = (0..disks).map(|i| 1024 + 64 * i as u64).collect();
            let spec = ArraySpec { level, layout, chunk_sectors: 16, raid_disks: disks, member_sectors };
            let g = Geometry::new(&spec).ok()?;
            let present = (0..disks).map(|r| lost_bits >> r & 1 == 0 || lost_bits >> 60 == 0).collect();
            let total = g.array_sectors();
            let at = at % total;
            let len = 1 + len % (total - at).min(200);
            Some((spec, present, at, len))
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn planned_reads_hold_the_data_on_present_members((spec, present, at, len) in spec()) {
        let g = Geometry::new(&spec).unwrap();
        let pieces = g.split(at, len).unwrap();
        let has_copy = |p: &uraid_core::geometry::Piece| match &p.placement {
            Placement::Single(ms) => present[ms.role],
            Placement::Mirrored(copies) => copies.iter().any(|ms| present[ms.role]),
            Placement::Striped(_) => unreachable!("no parity levels here"),
        };
        match plan_read(&pieces, &present) {
            Err(PlanError::NoCopy { array_sector }) => {
                let lost = pieces.iter().find(|p| !has_copy(p)).expect("refused although every piece has a copy");
                prop_assert_eq!(array_sector, lost.array_sector);
            }
            Err(e) => panic!("{e}"),
            Ok(plan) => {
                prop_assert!(pieces.iter().all(has_copy));
                prop_assert_eq!(plan.len(), pieces.len());
                for (p, r) in pieces.iter().zip(&plan) {
                    prop_assert!(present[r.role]);
                    prop_assert_eq!(r.sectors, p.sectors);
                    prop_assert_eq!(g.unmap(r.role, r.sector).unwrap(), Some(p.array_sector), "role {} sector {} does not hold the piece", r.role, r.sector);
                    if let Placement::Mirrored(copies) = &p.placement {
                        let first = copies.iter().find(|ms| present[ms.role]).unwrap();
                        prop_assert_eq!((first.role, first.sector), (r.role, r.sector), "md reads the first present copy");
                    }
                }
            }
        }
    }
}
