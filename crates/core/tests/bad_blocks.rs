//! md's bad-block list (`core::metadata::badblocks`) against a plain model: a set of bad
//! sectors. Adds widen to whole units, clears narrow to them, and the list stays merged;
//! what it encodes decodes to the same list, in md's entry format.

use proptest::prelude::*;
use std::collections::BTreeSet;
use uraid_core::metadata::badblocks::{decode_entries, BB_MAX_LEN};
use uraid_core::metadata::BadBlockList;

#[derive(Debug, Clone)]
enum Op {
    Add(u64, u64),
    Clear(u64, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![(0u64..4000, 1u64..1200).prop_map(|(s, n)| Op::Add(s, n)), (0u64..4000, 1u64..1200).prop_map(|(s, n)| Op::Clear(s, n)),]
}

fn apply(model: &mut BTreeSet<u64>, op: &Op, unit: u64) {
    match *op {
        Op::Add(s, n) => {
            for x in s / unit * unit..(s + n).div_ceil(unit) * unit {
                model.insert(x);
            }
        }
        Op::Clear(s, n) => {
            for x in s.div_ceil(unit) * unit..(s + n) / unit * unit {
                model.remove(&x);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]
    #[test]
    fn list_matches_the_sector_model(ops in prop::collection::vec(op(), 1..30), shift in prop::sample::select(vec![0u8, 3])) {
        let unit = 1u64 << shift;
        let mut list = BadBlockList::new(shift);
        let mut model = BTreeSet::new();
        for op in &ops {
            let before = model.clone();
            apply(&mut model, op, unit);
            let changed = match *op {
                Op::Add(s, n) => list.add(s, n),
                Op::Clear(s, n) => list.clear(s, n),
            };
            prop_assert_eq!(changed, before != model, "change reported for {:?}", op);
            // Same sectors, merged: sorted, disjoint, never adjacent, aligned.
            let listed: BTreeSet<u64> = list.ranges().iter().flat_map(|r| r.start..r.end()).collect();
            prop_assert_eq!(&listed, &model);
            for w in list.ranges().windows(2) {
                prop_assert!(w[0].end() < w[1].start, "not merged: {:?}", w);
            }
            for r in list.ranges() {
                prop_assert!(r.start % unit == 0 && r.sectors % unit == 0 && r.sectors > 0);
            }
        }
        // Queries agree with the model.
        for (s, n) in [(0u64, 1u64), (100, 50), (1000, 3000), (3999, 2000), (2048, 8)] {
            let any = (s..s + n).any(|x| model.contains(&x));
            prop_assert_eq!(list.overlaps(s, n), any);
            let parts: BTreeSet<u64> = list.overlapping(s, n).iter().flat_map(|r| r.start..r.end()).collect();
            let expect: BTreeSet<u64> = model.range(s..s + n).copied().collect();
            prop_assert_eq!(parts, expect);
        }
        // md's entries: at most BB_MAX_LEN units each, and the log round-trips.
        let entries = list.entries();
        prop_assert!(entries.iter().all(|e| e.sectors <= BB_MAX_LEN << shift));
        let bytes = list.encode(4096).unwrap();
        prop_assert_eq!(decode_entries(&bytes, shift).unwrap(), entries);
        prop_assert_eq!(BadBlockList::decode(&bytes, shift).unwrap(), list);
    }
}
