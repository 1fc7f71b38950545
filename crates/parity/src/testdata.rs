//! Stripe buffers for measuring and checking kernels: seeded pseudo-random data, and one call
//! of any operation with fixed lost-block positions. Used by the start-up selection, the tests
//! and `uraid bench parity`.

use crate::buffer::AlignedBuf;
use crate::dispatch::{Kernel, Op};
use crate::{scalar, Block, ParityError};

/// xorshift64*: deterministic, dependency-free filler for test data.
#[derive(Clone, Debug)]
pub struct Prng(u64);

impl Prng {
    pub fn new(seed: u64) -> Self {
        Prng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform-enough value in `0..n` (0 when n is 0), for test offsets and sizes.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    /// `n` pseudo-random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.fill(&mut v);
        v
    }
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// Alignment of stripe blocks: page-aligned, as the engine's I/O buffers are. It matters for
/// measuring: which unroll is fastest depends on how the blocks fall into cache sets.
pub const BLOCK_ALIGN: usize = 4096;

/// `data.len()` data blocks plus P and Q, all `len` bytes, each page-aligned.
#[derive(Clone, Debug)]
pub struct Stripe {
    pub data: Vec<AlignedBuf>,
    pub p: AlignedBuf,
    pub q: AlignedBuf,
    pub len: usize,
}

impl Stripe {
    /// Random data with P and Q from the scalar reference.
    pub fn random(blocks: usize, len: usize, seed: u64) -> Self {
        let mut rng = Prng::new(seed);
        let data: Vec<AlignedBuf> = (0..blocks)
            .map(|_| {
                let mut b = AlignedBuf::zeroed(len, BLOCK_ALIGN);
                rng.fill(&mut b);
                b
            })
            .collect();
        let zero = AlignedBuf::zeroed(len, BLOCK_ALIGN);
        let mut s = Stripe { data, p: zero.clone(), q: zero, len };
        let refs: Vec<&[u8]> = s.data.iter().map(|d| d.as_slice()).collect();
        scalar::gen_pq(&refs, &mut s.p, &mut s.q);
        s
    }

    /// The lost blocks the recovery operations are exercised with: the first and last data
    /// blocks (so both ends of the Horner pass have a gap).
    pub fn lost_for(&self, op: Op) -> Vec<Block> {
        let last = self.data.len().saturating_sub(1);
        match op {
            Op::Recov2Data => vec![Block::Data(0), Block::Data(last)],
            Op::RecovDataP => vec![Block::Data(last), Block::P],
            Op::RecovDataQ => vec![Block::Data(0), Block::Q],
            _ => vec![],
        }
    }

    /// One call of `op` with kernel `k`. For gen ops the outputs are P/Q; update_pq folds
    /// the upper half of the blocks into P/Q (changing them; callers measuring speed do not
    /// care, callers checking results compare against the reference doing the same).
    pub fn run(&mut self, k: &Kernel, op: Op) {
        let result = self.try_run(k, op);
        debug_assert!(result.is_ok(), "{result:?}");
    }

    pub fn try_run(&mut self, k: &Kernel, op: Op) -> Result<(), ParityError> {
        match op {
            Op::GenP => {
                let refs: Vec<&[u8]> = self.data.iter().map(|d| d.as_slice()).collect();
                k.gen_p(&refs, &mut self.p)
            }
            Op::GenPq => {
                let refs: Vec<&[u8]> = self.data.iter().map(|d| d.as_slice()).collect();
                k.gen_pq(&refs, &mut self.p, &mut self.q)
            }
            Op::UpdatePq => {
                let first = self.data.len() / 2;
                let refs: Vec<&[u8]> = self.data[first..].iter().map(|d| d.as_slice()).collect();
                k.update_pq(first, &refs, &mut self.p, &mut self.q)
            }
            Op::Recov2Data | Op::RecovDataP | Op::RecovDataQ => {
                let lost = self.lost_for(op);
                let mut refs: Vec<&mut [u8]> = self.data.iter_mut().map(|d| d.as_mut_slice()).collect();
                k.recover_raid6(&mut refs, &mut self.p, &mut self.q, &lost)
            }
        }
    }
}

/// Runs `op` with `k` on a copy of `stripe` with the lost blocks scrambled, and compares the
/// result with the scalar reference doing the same work.
pub fn kernel_matches_reference(k: &Kernel, op: Op, stripe: &Stripe) -> bool {
    let mut expected = stripe.clone();
    match op {
        Op::GenP | Op::GenPq => {} // `stripe` already holds reference P and Q.
        Op::UpdatePq => {
            let first = expected.data.len() / 2;
            let refs: Vec<&[u8]> = stripe.data[first..].iter().map(|d| d.as_slice()).collect();
            scalar::update_pq(first, &refs, &mut expected.p, &mut expected.q);
        }
        _ => {}
    }
    let mut got = stripe.clone();
    let mut scramble = Prng::new(7);
    for b in got.lost_for(op) {
        match b {
            Block::Data(i) => scramble.fill(&mut got.data[i]),
            Block::P => scramble.fill(&mut got.p),
            Block::Q => scramble.fill(&mut got.q),
        }
    }
    if op == Op::GenP {
        got.p.fill(0xa5);
    }
    if op == Op::GenPq {
        got.p.fill(0xa5);
        got.q.fill(0x5a);
    }
    if got.try_run(k, op).is_err() {
        return false;
    }
    let same_q = op == Op::GenP || got.q == expected.q;
    got.data == expected.data && got.p == expected.p && same_q
}
