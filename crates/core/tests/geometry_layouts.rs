//! Geometry checked against plain reference models and for bijectivity, exhaustively on
//! small arrays and by property tests on random ones.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use uraid_core::geometry::{
    Algorithm, ArraySpec, Geometry, Level, MemberSector, ParityGeometry, Placement, Raid0Geometry, Raid10Geometry, RoleKind,
};

const RAID5_LAYOUTS: [u32; 6] = [0, 1, 2, 3, 4, 5];
const RAID6_LAYOUTS: [u32; 14] = [0, 1, 2, 3, 4, 5, 8, 9, 10, 16, 17, 18, 19, 20];

fn spec(level: Level, layout: u32, chunk_sectors: u32, member_sectors: Vec<u64>) -> ArraySpec {
    ArraySpec { level, layout, chunk_sectors, raid_disks: member_sectors.len(), member_sectors }
}

/// A stripe as the layout's textbook description draws it: (P, Q, data roles in array
/// order, Q exponent per data block). Written from the descriptions of the layouts,
/// not from md's switch, so the two can disagree.
fn reference_stripe(level: Level, layout: u32, n: usize, s: usize) -> (usize, Option<usize>, Vec<usize>, Vec<u8>) {
    let ascending = |skip: &[usize], upto: usize| -> Vec<usize> { (0..upto).filter(|r| !skip.contains(r)).collect() };
    let wrapping = |start: usize, count: usize, modulus: usize, skip: &[usize]| -> Vec<usize> {
        (0..modulus).map(|i| (start + i) % modulus).filter(|r| !skip.contains(r)).take(count).collect()
    };
    // raid5-style placement over `m` members.
    let raid5 = |layout: u32, m: usize| -> (usize, Vec<usize>) {
        match layout {
            0 => {
                let p = m - 1 - s % m;
                (p, ascending(&[p], m))
            }
            1 => {
                let p = s % m;
                (p, ascending(&[p], m))
            }
            2 => {
                let p = m - 1 - s % m;
                (p, wrapping(p + 1, m - 1, m, &[p]))
            }
            3 => {
                let p = s % m;
                (p, wrapping(p + 1, m - 1, m, &[p]))
            }
            4 => (0, (1..m).collect()),
            5 => (m - 1, (0..m - 1).collect()),
            _ => unreachable!(),
        }
    };
    match level {
        Level::Raid4 => (n - 1, None, (0..n - 1).collect(), vec![]),
        Level::Raid5 => {
            let (p, data) = raid5(layout, n);
            (p, None, data, vec![])
        }
        Level::Raid6 => {
            let (p, q, data, ddf) = match layout {
                0 | 1 | 8 | 9 => {
                    let p = match layout {
                        0 => n - 1 - s % n,
                        9 => n - 1 - (s + 1) % n,
                        _ => s % n,
                    };
                    let q = (p + 1) % n;
                    (p, q, ascending(&[p, q], n), layout >= 8)
                }
                2 | 3 => {
                    let p = if layout == 2 { n - 1 - s % n } else { s % n };
                    let q = (p + 1) % n;
                    (p, q, wrapping(q + 1, n - 2, n, &[p, q]), false)
                }
                4 => (0, 1, (2..n).collect(), false),
                5 => (n - 2, n - 1, (0..n - 2).collect(), false),
                10 => {
                    let p = n - 1 - s % n;
                    let q = (p + n - 1) % n;
                    (p, q, wrapping(p + 1, n - 2, n, &[p, q]), true)
                }
                16..=20 => {
                    let (p, data) = raid5(layout - 16, n - 1);
                    (p, n - 1, data, false)
                }
                _ => unreachable!(),
            };
            // Q's inputs: DDF numbers members from 0; md numbers data members in the
            // order met walking from the member after Q.
            let exponents = if ddf {
                data.iter().map(|&r| r as u8).collect()
            } else {
                let walk: Vec<usize> = wrapping((q + 1) % n, n - 2, n, &[p, q]);
                data.iter().map(|r| walk.iter().position(|w| w == r).unwrap() as u8).collect()
            };
            (p, Some(q), data, exponents)
        }
        _ => unreachable!(),
    }
}

fn parity_cases() -> Vec<(Level, u32, usize)> {
    let mut cases = Vec::new();
    for n in 2..=16 {
        cases.push((Level::Raid4, 0, n));
        for layout in RAID5_LAYOUTS {
            cases.push((Level::Raid5, layout, n));
        }
    }
    for n in 4..=16 {
        for layout in RAID6_LAYOUTS {
            cases.push((Level::Raid6, layout, n));
        }
    }
    cases
}

#[test]
fn parity_layouts_match_reference_drawings() {
    for (level, layout, n) in parity_cases() {
        let g = ParityGeometry::new(level, layout, 8, n, 8 * 3 * n as u64).unwrap();
        for s in 0..3 * n {
            let roles = g.stripe_roles(s as u64);
            let (p, q, data, exponents) = reference_stripe(level, layout, n, s);
            let what = format!("{level} layout {layout} disks {n} stripe {s}");
            assert_eq!(roles.p, p, "P of {what}");
            assert_eq!(roles.q, q, "Q of {what}");
            assert_eq!(roles.data, data, "data of {what}");
            assert_eq!(roles.q_exponents, exponents, "Q exponents of {what}");
            // kind_of must invert the placement.
            assert_eq!(g.kind_of(s as u64, p), Some(RoleKind::P));
            if let Some(q) = q {
                assert_eq!(g.kind_of(s as u64, q), Some(RoleKind::Q));
            }
            for (i, &r) in data.iter().enumerate() {
                assert_eq!(g.kind_of(s as u64, r), Some(RoleKind::Data(i)), "{what}");
                assert_eq!(roles.kind_of(r), Some(RoleKind::Data(i)), "{what}");
            }
            // Syndrome sources list every data block once.
            if q.is_some() {
                let sources = roles.syndrome_sources();
                let mut seen: Vec<usize> = sources.iter().flatten().copied().collect();
                seen.sort_unstable();
                assert_eq!(seen, (0..data.len()).collect::<Vec<_>>(), "{what}");
            }
        }
    }
}

/// Walks every array sector (chunks of 8 and 16 sectors) and every member sector:
/// map∘unmap is the identity and no member sector holds two array sectors.
fn assert_bijective(g: &Geometry, what: &str) {
    let mut owner: HashMap<MemberSector, u64> = HashMap::new();
    let array_sectors = g.array_sectors();
    for sector in 0..array_sectors {
        let piece = g.locate(sector).unwrap_or_else(|e| panic!("{what} {sector}: {e}"));
        assert!(piece.sectors >= 1, "{what}");
        let places = match piece.placement {
            Placement::Single(at) => vec![at],
            Placement::Mirrored(copies) => copies,
            Placement::Striped(loc) => vec![MemberSector { role: loc.role, sector: loc.member_sector }],
        };
        let roles: HashSet<usize> = places.iter().map(|p| p.role).collect();
        assert_eq!(roles.len(), places.len(), "{what}: copies of {sector} share a member");
        for at in places {
            assert_eq!(g.unmap(at.role, at.sector).unwrap(), Some(sector), "{what} unmap {at:?}");
            if let Some(previous) = owner.insert(at, sector) {
                panic!("{what}: {at:?} holds both {previous} and {sector}");
            }
        }
    }
    // Every member sector that unmaps must be one we placed.
    let member_span = array_sectors + 64;
    for role in 0..g.raid_disks() {
        for sector in 0..member_span {
            if let Some(v) = g.unmap(role, sector).unwrap() {
                assert_eq!(owner.get(&MemberSector { role, sector }), Some(&v), "{what}");
            }
        }
    }
}

#[test]
fn parity_layouts_are_bijective() {
    for (level, layout, n) in parity_cases() {
        for chunk in [8u32, 16] {
            for stripes in [1u64, 5] {
                // An odd tail that md drops (not a whole chunk).
                let member = stripes * u64::from(chunk) + 3;
                let g = Geometry::new(&spec(level, layout, chunk, vec![member; n])).unwrap();
                let p = g.as_parity().unwrap();
                assert_eq!(p.stripes(), stripes);
                assert_eq!(g.array_sectors(), stripes * u64::from(chunk) * p.data_disks() as u64);
                assert_bijective(&g, &format!("{level} layout {layout} disks {n} chunk {chunk}"));
                // Parity chunks unmap to nothing.
                for s in 0..stripes {
                    let roles = p.stripe_roles(s);
                    for r in std::iter::once(roles.p).chain(roles.q) {
                        assert_eq!(p.unmap(r, s * u64::from(chunk)), None);
                    }
                }
            }
        }
    }
}

#[test]
fn parity_rejects_what_md_rejects() {
    assert!(ParityGeometry::new(Level::Raid5, 8, 128, 4, 1 << 20).is_err());
    assert!(ParityGeometry::new(Level::Raid5, 6, 128, 4, 1 << 20).is_err());
    assert!(ParityGeometry::new(Level::Raid6, 11, 128, 4, 1 << 20).is_err());
    assert!(ParityGeometry::new(Level::Raid6, 2, 128, 3, 1 << 20).is_err());
    assert!(ParityGeometry::new(Level::Raid5, 2, 128, 1, 1 << 20).is_err());
    assert!(ParityGeometry::new(Level::Raid5, 2, 96, 4, 1 << 20).is_err());
    assert!(ParityGeometry::new(Level::Raid5, 2, 4, 4, 1 << 20).is_err());
    assert!(ParityGeometry::new(Level::Raid6, 20, 8, 4, 1 << 20).is_ok());
    assert_eq!(Algorithm::from_md(18), Some(Algorithm::LeftSymmetric6));
}

#[test]
fn raid6_left_symmetric_four_disks_by_hand() {
    // mdadm's default raid6 on 4 members: stripe 0 is "Q D0 D1 P".
    let g = ParityGeometry::new(Level::Raid6, 2, 8, 4, 64).unwrap();
    let s0 = g.stripe_roles(0);
    assert_eq!((s0.p, s0.q, s0.data.clone()), (3, Some(0), vec![1, 2]));
    assert_eq!(s0.q_exponents, vec![0, 1]);
    let s1 = g.stripe_roles(1);
    assert_eq!((s1.p, s1.q, s1.data.clone()), (2, Some(3), vec![0, 1]));
    // Walking from after Q (member 3 is last, so from member 0).
    assert_eq!(s1.q_exponents, vec![0, 1]);
    let s2 = g.stripe_roles(2);
    assert_eq!((s2.p, s2.q, s2.data.clone()), (1, Some(2), vec![3, 0]));
    assert_eq!(s2.q_exponents, vec![0, 1]);
}

#[test]
fn raid6_asymmetric_q_order_differs_from_data_order() {
    // left-asymmetric, 5 members, stripe 2: "D0 D1 P Q D2"; md feeds Q from member 4
    // (after Q), so D2 gets exponent 0.
    let g = ParityGeometry::new(Level::Raid6, 0, 8, 5, 64).unwrap();
    let s = g.stripe_roles(2);
    assert_eq!((s.p, s.q, s.data.clone()), (2, Some(3), vec![0, 1, 4]));
    assert_eq!(s.q_exponents, vec![1, 2, 0]);
    assert_eq!(s.syndrome_sources(), vec![Some(2), Some(0), Some(1)]);
}

fn reference_raid0(layout: u32, chunk: u64, sizes: &[u64], sector: u64) -> MemberSector {
    // Zones by distinct rounded sizes; within a zone chunks round-robin over the
    // members big enough, counted from the array start (original) or zone start.
    let rounded: Vec<u64> = sizes.iter().map(|s| s / chunk * chunk).collect();
    let mut levels: Vec<u64> = rounded.iter().copied().filter(|&s| s > 0).collect();
    levels.sort_unstable();
    levels.dedup();
    let mut start = 0;
    let mut dev_start = 0;
    for level in levels {
        let members: Vec<usize> = (0..sizes.len()).filter(|&r| rounded[r] > dev_start).collect();
        let len = (level - dev_start) * members.len() as u64;
        if sector < start + len {
            let in_zone = sector - start;
            let chunk_no = if layout == 1 { sector / chunk } else { in_zone / chunk };
            let role = members[(chunk_no % members.len() as u64) as usize];
            let row = in_zone / chunk / members.len() as u64;
            return MemberSector { role, sector: dev_start + row * chunk + in_zone % chunk };
        }
        start += len;
        dev_start = level;
    }
    panic!("sector past the end")
}

#[test]
fn raid0_zones_match_reference_and_are_bijective() {
    let size_sets: [&[u64]; 6] = [&[64, 64, 64], &[32, 64, 96], &[96, 32, 64, 32], &[40, 17, 100, 64, 64], &[128], &[16, 200]];
    for sizes in size_sets {
        for chunk in [8u32, 16, 12] {
            for layout in [1u32, 2] {
                let g = Geometry::new(&spec(Level::Raid0, layout, chunk, sizes.to_vec())).unwrap();
                let what = format!("raid0 {sizes:?} chunk {chunk} layout {layout}");
                // md exports each rounded member masked with chunk-1 (raid0_size), which
                // only matters for chunks that are not powers of two.
                let c = u64::from(chunk);
                let total: u64 = sizes.iter().map(|s| (s / c * c) & !(c - 1)).sum();
                assert_eq!(g.array_sectors(), total, "{what}");
                assert_bijective(&g, &what);
                for sector in 0..total {
                    let Placement::Single(at) = g.locate(sector).unwrap().placement else { panic!() };
                    assert_eq!(at, reference_raid0(layout, u64::from(chunk), sizes, sector), "{what} {sector}");
                }
            }
        }
    }
}

#[test]
fn raid0_multizone_needs_a_known_layout() {
    assert!(Raid0Geometry::new(0xffff_ffff, 8, &[16, 32]).is_err());
    assert!(Raid0Geometry::new(0, 8, &[16, 32]).is_err());
    assert!(Raid0Geometry::new(0xffff_ffff, 8, &[32, 32]).is_ok());
    assert!(Raid0Geometry::new(1, 0, &[32, 32]).is_err());
}

#[test]
fn linear_concatenates_with_rounding() {
    let g = Geometry::new(&spec(Level::Linear, 0, 0, vec![10, 0, 7, 30])).unwrap();
    assert_eq!(g.array_sectors(), 47);
    assert_bijective(&g, "linear");
    let Placement::Single(at) = g.locate(17).unwrap().placement else { panic!() };
    assert_eq!(at, MemberSector { role: 3, sector: 0 });
    let rounded = Geometry::new(&spec(Level::Linear, 0, 8, vec![10, 7, 30])).unwrap();
    assert_eq!(rounded.array_sectors(), 8 + 24);
    assert_bijective(&rounded, "linear rounded");
}

#[test]
fn raid1_mirrors_every_role() {
    let g = Geometry::new(&spec(Level::Raid1, 0, 0, vec![100, 90, 120])).unwrap();
    assert_eq!(g.array_sectors(), 90);
    let piece = g.locate(5).unwrap();
    assert_eq!(piece.sectors, 85);
    let Placement::Mirrored(copies) = piece.placement else { panic!() };
    assert_eq!(copies.len(), 3);
    assert!(copies.iter().all(|c| c.sector == 5));
    assert_bijective(&g, "raid1");
}

/// raid10 layouts mdadm can make: nN, fN, oN, each optionally with far sets (v2).
fn raid10_layouts(disks: usize) -> Vec<u32> {
    let mut layouts = Vec::new();
    for copies in 2..=disks.min(5) as u32 {
        layouts.push(copies | 1 << 8); // near
        layouts.push(1 | copies << 8); // far
        layouts.push(1 | copies << 8 | 1 << 16); // offset
        layouts.push(1 | copies << 8 | 2 << 17); // far, far sets
        layouts.push(1 | copies << 8 | 1 << 16 | 2 << 17); // offset, far sets
        layouts.push(copies | 1 << 8 | 2 << 17); // near, far sets (no effect)
    }
    layouts
}

#[test]
fn raid10_layouts_are_bijective() {
    for disks in 2..=9 {
        for layout in raid10_layouts(disks) {
            for chunk in [8u32, 16] {
                for chunks_per_member in [1u64, 3, 7] {
                    let member = chunks_per_member * u64::from(chunk) + 5;
                    let g = Geometry::new(&spec(Level::Raid10, layout, chunk, vec![member; disks]))
                        .unwrap_or_else(|e| panic!("layout {layout:#x} disks {disks}: {e}"));
                    let what = format!("raid10 layout {layout:#x} disks {disks} chunk {chunk} member {member}");
                    assert_bijective(&g, &what);
                    let Geometry::Raid10(r) = &g else { panic!() };
                    assert!(r.used_member_sectors() <= member, "{what}");
                    for sector in (0..g.array_sectors()).step_by(3) {
                        for c in r.copies(sector).unwrap() {
                            assert!(c.sector < r.used_member_sectors(), "{what}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn raid10_by_hand() {
    // near=2 on 4 members: chunk 0 on members 0 and 1, chunk 1 on 2 and 3.
    let g = Raid10Geometry::new(0x102, 8, 4, 80).unwrap();
    assert_eq!(g.array_sectors(), 160);
    let c = g.copies(8 + 3).unwrap();
    assert_eq!(c, vec![MemberSector { role: 2, sector: 3 }, MemberSector { role: 3, sector: 3 }]);
    // far=2 on 4 members, 10 chunks each: stride 5 chunks; chunk 0's far copy is on
    // member 1 at chunk 5.
    let g = Raid10Geometry::new(0x201, 8, 4, 80).unwrap();
    assert_eq!(g.stride(), 40);
    let c = g.copies(0).unwrap();
    assert_eq!(c, vec![MemberSector { role: 0, sector: 0 }, MemberSector { role: 1, sector: 40 }]);
    // offset=2: the copy is on the next member, one chunk down.
    let g = Raid10Geometry::new(0x10201, 8, 4, 80).unwrap();
    let c = g.copies(8 * 5).unwrap();
    assert_eq!(c, vec![MemberSector { role: 1, sector: 16 }, MemberSector { role: 2, sector: 24 }]);
    assert!(Raid10Geometry::new(0x301, 8, 2, 80).is_err());
    assert!(Raid10Geometry::new(0x101, 8, 2, 80).is_err());
    assert!(Raid10Geometry::new(0x102, 12, 2, 80).is_err());
    assert!(Raid10Geometry::new(0x60102, 8, 2, 80).is_err());
}

#[test]
fn split_covers_ranges_without_crossing_chunks() {
    let g = Geometry::new(&spec(Level::Raid6, 2, 16, vec![160; 6])).unwrap();
    let pieces = g.split(5, 100).unwrap();
    assert_eq!(pieces.first().unwrap().array_sector, 5);
    assert_eq!(pieces.first().unwrap().sectors, 11);
    let mut at = 5;
    for p in &pieces {
        assert_eq!(p.array_sector, at);
        at += p.sectors;
        assert!(p.sectors <= 16);
    }
    assert_eq!(at, 105);
    assert!(g.split(g.array_sectors() - 1, 2).is_err());
    assert!(g.split(u64::MAX, 2).is_err());
    assert!(g.locate(g.array_sectors()).is_err());
}

fn arb_spec() -> impl Strategy<Value = ArraySpec> {
    let chunk = prop::sample::select(vec![8u32, 16, 64, 128, 1024]);
    prop_oneof![
        (2usize..=16, prop::sample::select(RAID5_LAYOUTS.to_vec()), chunk.clone(), 0u64..1 << 30)
            .prop_map(|(n, layout, chunk, size)| spec(Level::Raid5, layout, chunk, vec![size; n])),
        (4usize..=16, prop::sample::select(RAID6_LAYOUTS.to_vec()), chunk.clone(), 0u64..1 << 30)
            .prop_map(|(n, layout, chunk, size)| spec(Level::Raid6, layout, chunk, vec![size; n])),
        (2usize..=16, chunk.clone(), 0u64..1 << 30).prop_map(|(n, chunk, size)| spec(Level::Raid4, 0, chunk, vec![size; n])),
        (prop::collection::vec(0u64..1 << 28, 1..12), chunk.clone(), 1u32..=2).prop_map(|(sizes, chunk, layout)| spec(
            Level::Raid0,
            layout,
            chunk,
            sizes
        )),
        (prop::collection::vec(0u64..1 << 28, 1..12)).prop_map(|sizes| spec(Level::Linear, 0, 0, sizes)),
        (4usize..=12, chunk, 1u64 << 10..1 << 30, 0usize..6, 2u32..=4).prop_filter_map("copies fit", |(n, chunk, size, kind, copies)| {
            let layout = raid10_layouts(n).get(kind + 6 * (copies as usize - 2)).copied()?;
            Some(spec(Level::Raid10, layout, chunk, vec![size; n]))
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn map_then_unmap_is_identity(spec in arb_spec(), pick in any::<u64>()) {
        let g = Geometry::new(&spec).unwrap();
        prop_assume!(g.array_sectors() > 0);
        let sector = pick % g.array_sectors();
        let piece = g.locate(sector).unwrap();
        prop_assert!(piece.sectors >= 1 && sector + piece.sectors <= g.array_sectors());
        let places = match &piece.placement {
            Placement::Single(at) => vec![*at],
            Placement::Mirrored(c) => c.clone(),
            Placement::Striped(loc) => {
                let p = g.as_parity().unwrap();
                let roles = p.stripe_roles(loc.stripe);
                prop_assert_eq!(roles.data[loc.data_index], loc.role);
                prop_assert_ne!(Some(loc.role), roles.q);
                prop_assert_ne!(loc.role, roles.p);
                vec![MemberSector { role: loc.role, sector: loc.member_sector }]
            }
        };
        for at in places {
            prop_assert_eq!(g.unmap(at.role, at.sector).unwrap(), Some(sector));
            // The last sector of the piece sits at the same relative place.
            let last = sector + piece.sectors - 1;
            prop_assert_eq!(g.unmap(at.role, at.sector + piece.sectors - 1).unwrap(), Some(last));
        }
    }
}

#[test]
fn raid10_old_far_sets_and_mixed_copies_when_safe() {
    // Far-set scheme 1 (disks / far) and layouts mixing near and far copies (which
    // mdadm cannot create but md runs): bijective when a far set holds all copies.
    for disks in 4..=9usize {
        for (near, far) in [(1u32, 2u32), (1, 3), (2, 2)] {
            if (near * far) as usize > disks {
                continue;
            }
            for offset in [0u32, 1 << 16] {
                for sets in [0u32, 1 << 17, 2 << 17] {
                    let layout = near | far << 8 | offset | sets;
                    let fss = match sets >> 17 {
                        0 => disks,
                        1 => disks / far as usize,
                        _ => (near * far) as usize,
                    };
                    if fss < (near * far) as usize {
                        continue;
                    }
                    // md itself overlaps copies for offset layouts with near > 1 when the
                    // near copies wrap past the last member (its find_phys steps one
                    // chunk down, into the offset copies' row); mdadm cannot create them.
                    if offset != 0 && near > 1 && disks % near as usize != 0 {
                        continue;
                    }
                    // Far sets with near copies too overlap in md when the last set is
                    // widened (raid_disks not a multiple of the set size).
                    if sets != 0 && near > 1 {
                        continue;
                    }
                    let g = Geometry::new(&spec(Level::Raid10, layout, 8, vec![8 * 6 + 3; disks])).unwrap();
                    assert_bijective(&g, &format!("raid10 layout {layout:#x} disks {disks}"));
                }
            }
        }
    }
}

/// md records a RAID10 resync's progress in array sectors, uraid's resync walks member rows
/// (syncing every copy of each array sector found there). Converting either way must never
/// skip a sector: from md's position, every member sector below uraid's row holds only
/// array sectors md had done; from uraid's row, every array sector below md's position has
/// a copy below that row. Checked exhaustively, chunk by chunk, over md's RAID10 layouts.
#[test]
fn raid10_resync_positions_convert_without_skipping_a_sector() {
    use uraid_core::geometry::Raid10Geometry;
    let chunk = 8u64;
    for (layout, disks) in [
        (0x102, 2),
        (0x102, 3),
        (0x102, 4),
        (0x102, 5),
        (0x103, 3),
        (0x103, 4),
        (0x103, 5),
        (0x201, 2),
        (0x201, 3),
        (0x201, 4),
        (0x201, 5),
        (0x10201, 2),
        (0x10201, 3),
        (0x10201, 4),
        (0x202, 4),
        (0x202, 5),
        (0x20201, 5),
        (0x40201, 5),
        (0x103, 6),
    ] {
        let g = Raid10Geometry::new(layout, chunk as u32, disks, 40 * chunk + 3).expect("layout");
        // First member row holding a copy of each array chunk.
        let first_row: Vec<u64> = (0..g.array_sectors() / chunk)
            .map(|c| g.copies(c * chunk).expect("in range").iter().map(|m| m.sector / chunk * chunk).min().expect("copies"))
            .collect();
        for a in (0..=g.array_sectors()).step_by(chunk as usize) {
            let row = g.resync_row_for(a);
            for role in 0..disks {
                for sector in 0..row {
                    if let Some(x) = g.unmap(role, sector) {
                        assert!(x < a, "{layout:#x}/{disks}: md at {a}, uraid from row {row}: role {role} sector {sector} holds {x}");
                    }
                }
            }
        }
        for row in (0..=g.used_member_sectors() + chunk).step_by(chunk as usize) {
            let a = g.resync_array_sector_for(row);
            for (c, first) in first_row.iter().enumerate() {
                if (c as u64) * chunk < a {
                    assert!(*first < row, "{layout:#x}/{disks}: uraid done below row {row}, md from {a}: chunk {c} first at {first}");
                }
            }
        }
        // Both ends map to both ends.
        assert_eq!(g.resync_row_for(0), 0);
        assert_eq!(g.resync_row_for(g.array_sectors()), g.used_member_sectors());
        assert_eq!(g.resync_array_sector_for(0), 0);
        assert_eq!(g.resync_array_sector_for(g.used_member_sectors()), g.array_sectors());
    }
}
