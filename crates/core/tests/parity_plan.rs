//! The RAID4/5/6 write planner against a plain byte model: one stripe of one byte per
//! sector, random contents, random lost members, random writes. A model executor carries
//! the plan out using only the sectors the plan reads (an unread sector is `None`, and a
//! computation that needs one fails the test), with textbook parity (xor and GF(2^8) by
//! repeated doubling, polynomial 0x11D, lost blocks found by trying every value). After the
//! plan's writes, every present member (and every sector written to a lost member's spare)
//! must hold exactly what a freshly computed stripe of the new data holds, and nothing
//! outside the written ranges may change.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use uraid_core::geometry::{Level, ParityGeometry, RoleKind, StripeRoles};
use uraid_core::plan::parity::{plan_write, BlockWrite, Compute, SegmentRequest};
use uraid_core::plan::PlanError;
use uraid_parity::testdata::Prng;

const CHUNK: u64 = 8;

fn gf_double(a: u8) -> u8 {
    (a << 1) ^ if a & 0x80 != 0 { 0x1D } else { 0 }
}

/// `2^k · a` in GF(2^8).
fn gf_pow2_mul(k: u8, mut a: u8) -> u8 {
    for _ in 0..k {
        a = gf_double(a);
    }
    a
}

/// P and Q of one sector's data bytes (array order).
fn pq(roles: &StripeRoles, data: &[u8]) -> (u8, u8) {
    let p = data.iter().fold(0, |acc, d| acc ^ d);
    let q = data.iter().enumerate().fold(0, |acc, (i, d)| acc ^ roles.q_exponents.get(i).map_or(0, |&k| gf_pow2_mul(k, *d)));
    (p, q)
}

#[derive(Debug, Clone)]
struct Case {
    roles: StripeRoles,
    /// Per role, its chunk on disk.
    disk: Vec<Vec<u8>>,
    /// The array's data before the write (lost blocks included), per data index.
    data: Vec<Vec<u8>>,
    present: Vec<bool>,
    parity_in_sync: bool,
    writes: Vec<(BlockWrite, Vec<u8>)>,
    /// Per role and sector: did the plan write it? (A lost role's writes go to its spare.)
    written: Vec<Vec<bool>>,
}

fn case() -> impl Strategy<Value = Case> {
    (prop_oneof![Just(Level::Raid4), Just(Level::Raid5), Just(Level::Raid6)], 0usize..5, 0u32..32, 0u64..16, any::<u64>()).prop_filter_map(
        "layout not valid for the level",
        |(level, extra, layout, stripe, seed)| {
            let disks = if level == Level::Raid6 { 4 } else { 3 } + extra;
            let layout = if level == Level::Raid4 { 0 } else { layout };
            let geometry = ParityGeometry::new(level, layout, CHUNK as u32, disks, CHUNK * 64).ok()?;
            Some(build(geometry.stripe_roles(stripe), seed))
        },
    )
}

fn build(roles: StripeRoles, seed: u64) -> Case {
    // One proptest value expands into a whole stripe through the parity crate's test PRNG.
    let mut rng = Prng::new(seed);
    let members = roles.data.len() + 1 + roles.q.is_some() as usize;
    let n = roles.data.len();
    let data: Vec<Vec<u8>> = (0..n).map(|_| (0..CHUNK).map(|_| rng.next_u64() as u8).collect()).collect();
    let tolerated = 1 + roles.q.is_some() as u64;
    let mut present = vec![true; members];
    for _ in 0..rng.below(tolerated + 2) {
        present[rng.below(members as u64) as usize] = false;
    }
    let degraded = present.iter().any(|p| !p);
    // A stripe not yet resynced may hold any parity; a degraded one is trusted (md refuses
    // to start a dirty degraded array without --force, and then trusts it).
    let parity_in_sync = degraded || rng.below(3) != 0;
    let mut disk = vec![vec![0u8; CHUNK as usize]; members];
    for s in 0..CHUNK as usize {
        let bytes: Vec<u8> = data.iter().map(|d| d[s]).collect();
        let (p, q) = pq(&roles, &bytes);
        for (i, &role) in roles.data.iter().enumerate() {
            disk[role][s] = data[i][s];
        }
        disk[roles.p][s] = if parity_in_sync { p } else { rng.next_u64() as u8 };
        if let Some(qr) = roles.q {
            disk[qr][s] = if parity_in_sync { q } else { rng.next_u64() as u8 };
        }
    }
    for (role, chunk) in disk.iter_mut().enumerate() {
        if !present[role] {
            chunk.iter_mut().for_each(|b| *b = 0xEE); // whatever a dead disk held
        }
    }
    let mut writes = Vec::new();
    for i in 0..n {
        if rng.below(2) == 0 {
            continue;
        }
        // Whole blocks often, so full-stripe and whole-block paths come up.
        let (start, len) = if rng.below(3) == 0 {
            (0, CHUNK)
        } else {
            let start = rng.below(CHUNK);
            (start, 1 + rng.below(CHUNK - start))
        };
        let bytes = (0..len).map(|_| rng.next_u64() as u8).collect();
        writes.push((BlockWrite { data_index: i, sector: start, sectors: len }, bytes));
    }
    if writes.is_empty() {
        let i = rng.below(n as u64) as usize;
        writes.push((BlockWrite { data_index: i, sector: 3, sectors: 2 }, vec![0x5A, 0xA5]));
    }
    let written = vec![vec![false; CHUNK as usize]; members];
    Case { roles, disk, data, present, parity_in_sync, writes, written }
}

/// Solves the lost bytes of one sector: data indices `lost` (P/Q known where present).
fn rebuild_sector(roles: &StripeRoles, known: &[Option<u8>], p: Option<u8>, q: Option<u8>, lost: &[usize]) -> Vec<u8> {
    let fits = |guess: &[u8]| {
        let mut bytes: Vec<u8> = known.iter().map(|b| b.unwrap_or(0)).collect();
        for (&i, &g) in lost.iter().zip(guess) {
            bytes[i] = g;
        }
        let (pp, qq) = pq(roles, &bytes);
        p.is_none_or(|p| p == pp) && q.is_none_or(|q| q == qq)
    };
    match lost {
        [_] => (0..=255u8).map(|a| vec![a]).find(|g| fits(g)).expect("one lost byte is always solvable"),
        [_, _] => (0..=u16::MAX).map(|ab| vec![(ab >> 8) as u8, ab as u8]).find(|g| fits(g)).expect("two lost bytes with P and Q"),
        _ => panic!("plan asked to rebuild {} blocks", lost.len()),
    }
}

/// Carries `plan` out over the model disk. Panics if it needs a sector it did not read.
fn execute(c: &mut Case) -> Result<Compute, PlanError> {
    let roles = &c.roles;
    let (lo, hi) =
        (c.writes.iter().map(|(w, _)| w.sector).min().unwrap(), c.writes.iter().map(|(w, _)| w.sector + w.sectors).max().unwrap());
    let block_writes: Vec<BlockWrite> = c.writes.iter().map(|(w, _)| *w).collect();
    let req = SegmentRequest { stripe: 0, roles, present: &c.present, parity_in_sync: c.parity_in_sync, lo, hi, writes: &block_writes };
    let plan = plan_write(&req)?;
    let members = c.disk.len();
    let mut view = vec![vec![None::<u8>; CHUNK as usize]; members];
    for r in &plan.reads {
        assert!(c.present[r.role], "plan reads lost role {}: {plan:?}", r.role);
        assert!(r.sector >= lo && r.end() <= hi, "read outside the segment");
        for s in r.sector..r.end() {
            view[r.role][s as usize] = Some(c.disk[r.role][s as usize]);
        }
    }
    let n = roles.data.len();
    let new_byte = |i: usize, s: u64| {
        c.writes
            .iter()
            .find(|(w, _)| w.data_index == i && (w.sector..w.sector + w.sectors).contains(&s))
            .map(|(w, b)| b[(s - w.sector) as usize])
    };
    let mut out = vec![vec![None::<u8>; CHUNK as usize]; members];
    for s in lo..hi {
        let su = s as usize;
        let need =
            |v: Option<u8>, what: &str| v.unwrap_or_else(|| panic!("{:?} needs unread {what} at sector {s}: {plan:?}", plan.compute));
        let mut old: Vec<Option<u8>> = (0..n).map(|i| view[roles.data[i]][su]).collect();
        let (p_new, q_new, new_data): (u8, u8, Vec<u8>) = match &plan.compute {
            Compute::ReadModifyWrite => {
                let mut p = need(view[roles.p][su], "P");
                let mut q = roles.q.map_or(0, |qr| need(view[qr][su], "Q"));
                let mut data = vec![0u8; n];
                for i in 0..n {
                    if let Some(nb) = new_byte(i, s) {
                        let delta = need(old[i], "old data") ^ nb;
                        p ^= delta;
                        q ^= roles.q_exponents.get(i).map_or(0, |&k| gf_pow2_mul(k, delta));
                        data[i] = nb;
                    }
                }
                (p, q, data)
            }
            Compute::FullStripe | Compute::ReconstructWrite | Compute::Degraded { .. } => {
                if let Compute::Degraded { rebuild, p_lost, q_lost } = &plan.compute {
                    assert_eq!(*p_lost, !c.present[roles.p]);
                    let p = (!p_lost).then(|| need(view[roles.p][su], "P"));
                    let q = roles.q.filter(|_| !q_lost).map(|qr| need(view[qr][su], "Q"));
                    for (i, o) in old.iter().enumerate() {
                        assert!(rebuild.contains(&i) || o.is_some(), "degraded plan did not read data block {i}");
                    }
                    let solved = rebuild_sector(roles, &old, p, q, rebuild);
                    for (&i, b) in rebuild.iter().zip(solved) {
                        old[i] = Some(b);
                    }
                }
                let data: Vec<u8> = (0..n).map(|i| new_byte(i, s).unwrap_or_else(|| need(old[i], "data"))).collect();
                let (p, q) = pq(roles, &data);
                (p, q, data)
            }
        };
        for (i, &role) in roles.data.iter().enumerate() {
            out[role][su] = Some(new_data[i]);
        }
        out[roles.p][su] = Some(p_new);
        if let Some(qr) = roles.q {
            out[qr][su] = Some(q_new);
        }
    }
    for w in &plan.writes {
        assert!(w.sector >= lo && w.end() <= hi, "write outside the segment");
        for s in w.sector..w.end() {
            c.disk[w.role][s as usize] = out[w.role][s as usize].expect("write inside the segment");
            c.written[w.role][s as usize] = true;
        }
    }
    Ok(plan.compute)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn every_plan_leaves_a_consistent_stripe(mut c in case()) {
        let before = c.disk.clone();
        let tolerated = 1 + c.roles.q.is_some() as usize;
        let lost = c.present.iter().filter(|p| !**p).count();
        let compute = match execute(&mut c) {
            Err(PlanError::TooManyMissing { missing, .. }) => {
                prop_assert!(lost > tolerated);
                prop_assert_eq!(missing, lost);
                return Ok(());
            }
            Err(e) => panic!("{e}"),
            Ok(compute) => compute,
        };
        prop_assert!(lost <= tolerated, "planned around {} lost members", lost);
        if !c.parity_in_sync {
            prop_assert_ne!(compute.clone(), Compute::ReadModifyWrite, "folded a change into stale parity");
        }
        let (lo, hi) = (c.writes.iter().map(|(w, _)| w.sector).min().unwrap(), c.writes.iter().map(|(w, _)| w.sector + w.sectors).max().unwrap());
        // The array's data after the write.
        let mut data = c.data.clone();
        for (w, bytes) in &c.writes {
            data[w.data_index][w.sector as usize..(w.sector + w.sectors) as usize].copy_from_slice(bytes);
        }
        #[allow(clippy::needless_range_loop)] // several per-role tables are read by the same index
        for role in 0..c.disk.len() {
            for s in 0..CHUNK {
                let su = s as usize;
                // A lost role's spare must get the right bytes wherever it is written.
                if !c.present[role] && !c.written[role][su] {
                    continue;
                }
                let got = c.disk[role][su];
                let inside = (lo..hi).contains(&s);
                let want = match c.roles.kind_of(role).unwrap() {
                    RoleKind::Data(i) => data[i][su],
                    _ if !inside => before[role][su],
                    kind => {
                        let bytes: Vec<u8> = data.iter().map(|d| d[su]).collect();
                        let (p, q) = pq(&c.roles, &bytes);
                        if kind == RoleKind::P { p } else { q }
                    }
                };
                prop_assert_eq!(got, want, "role {} sector {} after {:?}", role, s, compute);
            }
        }
    }
}

#[test]
fn the_model_covers_every_path() {
    let mut seen = [false; 4];
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = case();
    for _ in 0..4000 {
        let mut c = strategy.new_tree(&mut runner).unwrap().current();
        if let Ok(compute) = execute(&mut c) {
            seen[match compute {
                Compute::FullStripe => 0,
                Compute::ReadModifyWrite => 1,
                Compute::ReconstructWrite => 2,
                Compute::Degraded { .. } => 3,
            }] = true;
        }
    }
    assert_eq!(seen, [true; 4], "full stripe, read-modify-write, reconstruct-write, degraded");
}
