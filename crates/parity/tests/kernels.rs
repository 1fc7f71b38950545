//! Every kernel this CPU supports, against the scalar reference.

use proptest::prelude::*;
use uraid_parity::testdata::{Prng, Stripe};
use uraid_parity::{dispatch, scalar, Block, Kernel, Op, Verdict};

fn kernels() -> Vec<&'static Kernel> {
    dispatch::supported_kernels().collect()
}

/// Data blocks at an offset `skew` into larger buffers, so kernels see unaligned pointers.
struct Skewed {
    bufs: Vec<Vec<u8>>,
    skew: usize,
    len: usize,
}

impl Skewed {
    fn new(blocks: usize, len: usize, skew: usize, seed: u64) -> Self {
        let mut rng = Prng::new(seed);
        let bufs = (0..blocks)
            .map(|_| {
                let mut b = vec![0u8; len + skew];
                rng.fill(&mut b);
                b
            })
            .collect();
        Skewed { bufs, skew, len }
    }
    fn refs(&self) -> Vec<&[u8]> {
        self.bufs.iter().map(|b| &b[self.skew..self.skew + self.len]).collect()
    }
}

fn check_gen(k: &Kernel, blocks: usize, len: usize, skew: usize, seed: u64) {
    let data = Skewed::new(blocks, len, skew, seed);
    let refs = data.refs();
    let (mut ep, mut eq) = (vec![0u8; len], vec![0u8; len]);
    scalar::gen_pq(&refs, &mut ep, &mut eq);
    // Outputs skewed too, pre-filled with garbage the kernel must overwrite.
    let mut outp = vec![0xeeu8; len + skew + 3];
    let mut outq = vec![0x11u8; len + skew + 3];
    k.gen_pq(&refs, &mut outp[skew..skew + len], &mut outq[skew..skew + len]).unwrap();
    assert_eq!(&outp[skew..skew + len], &ep[..], "{} gen_pq P n={blocks} len={len} skew={skew}", k.name);
    assert_eq!(&outq[skew..skew + len], &eq[..], "{} gen_pq Q n={blocks} len={len} skew={skew}", k.name);
    assert!(outp[skew + len..].iter().all(|&b| b == 0xee), "{} wrote past P", k.name);
    assert!(outq[skew + len..].iter().all(|&b| b == 0x11), "{} wrote past Q", k.name);
    if k.implements(Op::GenP) {
        let mut p = vec![0xeeu8; len + skew];
        k.gen_p(&refs, &mut p[skew..]).unwrap();
        assert_eq!(&p[skew..], &ep[..], "{} gen_p n={blocks} len={len}", k.name);
    }
}

fn check_update(k: &Kernel, blocks: usize, first: usize, len: usize, seed: u64) {
    let data = Skewed::new(blocks, len, 1, seed);
    let refs = data.refs();
    let mut rng = Prng::new(seed ^ 99);
    let (mut p0, mut q0) = (vec![0u8; len], vec![0u8; len]);
    rng.fill(&mut p0);
    rng.fill(&mut q0);
    let (mut ep, mut eq) = (p0.clone(), q0.clone());
    scalar::update_pq(first, &refs, &mut ep, &mut eq);
    let (mut gp, mut gq) = (p0, q0);
    k.update_pq(first, &refs, &mut gp, &mut gq).unwrap();
    assert_eq!(gp, ep, "{} update_pq P first={first} n={blocks} len={len}", k.name);
    assert_eq!(gq, eq, "{} update_pq Q first={first} n={blocks} len={len}", k.name);
}

/// Loses `lost` from a random stripe, recovers with `k`, and demands the original back.
fn check_recovery(k: &Kernel, blocks: usize, len: usize, lost: &[Block], seed: u64) {
    let original = Stripe::random(blocks, len, seed);
    let mut s = original.clone();
    let mut junk = Prng::new(seed + 1);
    for b in lost {
        match b {
            Block::Data(i) => junk.fill(&mut s.data[*i]),
            Block::P => junk.fill(&mut s.p),
            Block::Q => junk.fill(&mut s.q),
        }
    }
    let mut refs: Vec<&mut [u8]> = s.data.iter_mut().map(|d| d.as_mut_slice()).collect();
    k.recover_raid6(&mut refs, &mut s.p, &mut s.q, lost).unwrap();
    assert!(
        s.data == original.data && s.p == original.p && s.q == original.q,
        "{} failed to recover {lost:?} of n={blocks} len={len}",
        k.name
    );
}

fn all_losses(blocks: usize) -> Vec<Vec<Block>> {
    let mut all: Vec<Block> = (0..blocks).map(Block::Data).collect();
    all.push(Block::P);
    all.push(Block::Q);
    let mut out = vec![];
    for (i, a) in all.iter().enumerate() {
        out.push(vec![*a]);
        for b in &all[i + 1..] {
            out.push(vec![*a, *b]);
        }
    }
    out
}

#[test]
fn report_kernels() {
    let names: Vec<_> = kernels().iter().map(|k| k.name).collect();
    println!("parity kernels supported and tested on this CPU: {}", names.join(", "));
    for line in uraid_parity::selection().log_lines() {
        println!("{line}");
    }
    assert!(names.contains(&"scalar"));
}

#[test]
fn selection_only_picks_supported_kernels_that_match_reference() {
    for (op, len) in Op::ALL.iter().flat_map(|op| [(*op, 1000usize), (*op, 70_000)]) {
        let stripe = Stripe::random(5, len, 3);
        let k = uraid_parity::selection().kernel_for(op, len);
        assert!(k.is_supported() && k.implements(op));
        assert!(uraid_parity::testdata::kernel_matches_reference(k, op, &stripe), "{} {op:?}", k.name);
    }
}

#[test]
fn every_one_and_two_block_loss_recovers_for_every_kernel() {
    for k in kernels() {
        for blocks in [1usize, 2, 3, 4, 5, 8, 10, 16] {
            for lost in all_losses(blocks) {
                check_recovery(k, blocks, 4096 + 64 + 7, &lost, blocks as u64);
            }
        }
    }
}

#[test]
fn two_data_recovery_matches_brute_force_reference() {
    let original = Stripe::random(6, 333, 11);
    for (x, y) in [(0usize, 1usize), (0, 5), (2, 4)] {
        let mut by_reference = original.clone();
        by_reference.data[x].fill(0);
        by_reference.data[y].fill(0);
        let mut refs: Vec<&mut [u8]> = by_reference.data.iter_mut().map(|d| d.as_mut_slice()).collect();
        scalar::recover_two_data(&mut refs, x, y, &original.p, &original.q);
        assert_eq!(by_reference.data, original.data);
    }
}

#[test]
fn largest_stripes_work() {
    for k in kernels() {
        check_gen(k, uraid_parity::MAX_DATA_BLOCKS, 192, 0, 5);
        check_recovery(k, uraid_parity::MAX_DATA_BLOCKS, 128, &[Block::Data(0), Block::Data(252)], 6);
        check_recovery(k, uraid_parity::MAX_DATA_BLOCKS, 128, &[Block::Data(200), Block::Q], 7);
        check_update(k, 3, uraid_parity::MAX_DATA_BLOCKS - 3, 256, 8);
    }
}

#[test]
fn every_multiple_of_64_up_to_16k_and_odd_tails() {
    for k in kernels() {
        for len in (64..=16384).step_by(64).chain(1..130) {
            check_gen(k, 3, len, len % 7, len as u64);
        }
    }
}

#[test]
fn verify_names_every_single_corrupted_block_at_every_position() {
    let len = 256;
    let base = Stripe::random(8, len, 21);
    for target in (0..8).map(Block::Data).chain([Block::P, Block::Q]) {
        for pos in [0usize, 1, 63, 64, 200, len - 1] {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut s = base.clone();
                match target {
                    Block::Data(i) => s.data[i][pos] ^= flip,
                    Block::P => s.p[pos] ^= flip,
                    Block::Q => s.q[pos] ^= flip,
                }
                let refs: Vec<&[u8]> = s.data.iter().map(|d| d.as_slice()).collect();
                let v = uraid_parity::verify_pq(&refs, &s.p, &s.q).unwrap();
                assert_eq!(v, Verdict::Wrong(target), "corrupt {target:?} at {pos} by {flip:#x}");
            }
        }
    }
    let refs: Vec<&[u8]> = base.data.iter().map(|d| d.as_slice()).collect();
    assert_eq!(uraid_parity::verify_pq(&refs, &base.p, &base.q).unwrap(), Verdict::Consistent);
    let mut two = base.clone();
    two.data[1][10] ^= 1;
    two.data[6][99] ^= 1;
    let refs: Vec<&[u8]> = two.data.iter().map(|d| d.as_slice()).collect();
    assert_eq!(uraid_parity::verify_pq(&refs, &two.p, &two.q).unwrap(), Verdict::MoreThanOne);
    assert!(uraid_parity::verify_p(&refs, &two.p).is_ok_and(|ok| !ok));
}

#[test]
fn bad_shapes_are_errors_not_panics() {
    use uraid_parity::ParityError;
    let a = vec![0u8; 64];
    let b = vec![0u8; 32];
    let (mut p, mut q) = (vec![0u8; 64], vec![0u8; 64]);
    assert_eq!(uraid_parity::gen_pq(&[], &mut p, &mut q), Err(ParityError::NoData));
    assert_eq!(uraid_parity::gen_pq(&[&a, &b], &mut p, &mut q), Err(ParityError::LengthMismatch { expected: 64, found: 32 }));
    let many: Vec<&[u8]> = (0..254).map(|_| a.as_slice()).collect();
    assert!(matches!(uraid_parity::gen_pq(&many, &mut p, &mut q), Err(ParityError::TooManyBlocks { .. })));
    let mut d = vec![vec![0u8; 64]; 3];
    let mut refs: Vec<&mut [u8]> = d.iter_mut().map(|x| x.as_mut_slice()).collect();
    assert!(matches!(
        uraid_parity::recover_raid6(&mut refs, &mut p, &mut q, &[Block::Data(0), Block::Data(1), Block::P]),
        Err(ParityError::Unrecoverable(_))
    ));
    assert!(matches!(uraid_parity::recover_raid6(&mut refs, &mut p, &mut q, &[Block::Data(3)]), Err(ParityError::IndexOutOfRange { .. })));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn gen_matches_reference(blocks in 1usize..24, len64 in 1usize..=16384, skew in 0usize..64, seed: u64) {
        // Lengths sampled over every multiple of 64 B up to 1 MiB.
        for k in kernels() {
            check_gen(k, blocks, len64 * 64, skew, seed);
        }
    }

    #[test]
    fn update_matches_reference(blocks in 1usize..12, first in 0usize..40, len in 1usize..5000, seed: u64) {
        for k in kernels() {
            check_update(k, blocks, first, len, seed);
        }
    }

    #[test]
    fn random_losses_recover(blocks in 1usize..20, len in 1usize..9000, a in 0usize..22, b in 0usize..22, seed: u64) {
        let pick = |i: usize| if i < blocks { Block::Data(i) } else if i.is_multiple_of(2) { Block::P } else { Block::Q };
        let lost = [pick(a), pick(b)];
        for k in kernels() {
            check_recovery(k, blocks, len, &lost, seed);
        }
    }

    #[test]
    fn single_corruption_is_named(blocks in 1usize..30, pos in 0usize..512, flip in 1u8..=255, target in 0usize..32, seed: u64) {
        let mut s = Stripe::random(blocks, 512, seed);
        let t = if target < blocks { Block::Data(target) } else if target % 2 == 0 { Block::P } else { Block::Q };
        match t {
            Block::Data(i) => s.data[i][pos] ^= flip,
            Block::P => s.p[pos] ^= flip,
            Block::Q => s.q[pos] ^= flip,
        }
        let refs: Vec<&[u8]> = s.data.iter().map(|d| d.as_slice()).collect();
        prop_assert_eq!(uraid_parity::verify_pq(&refs, &s.p, &s.q).unwrap(), Verdict::Wrong(t));
    }
}

#[test]
fn aligned_large_blocks_match_reference() {
    use uraid_parity::buffer::AlignedBuf;
    // Large, 64-byte aligned blocks: the shape the engine's stripe buffers have.
    for len in [32 * 1024, 64 * 1024 + 64, 256 * 1024 + 100] {
        let data = Skewed::new(5, len, 0, len as u64);
        let refs = data.refs();
        let (mut ep, mut eq) = (vec![0u8; len], vec![0u8; len]);
        scalar::gen_pq(&refs, &mut ep, &mut eq);
        for k in kernels() {
            let (mut p, mut q) = (AlignedBuf::zeroed(len, 64), AlignedBuf::zeroed(len, 64));
            k.gen_pq(&refs, &mut p, &mut q).unwrap();
            assert!(p[..] == ep[..] && q[..] == eq[..], "{} aligned gen_pq len={len}", k.name);
            let mut p = AlignedBuf::zeroed(len, 64);
            k.gen_p(&refs, &mut p).unwrap();
            assert!(p[..] == ep[..], "{} aligned gen_p len={len}", k.name);
        }
    }
}
