//! Parity kernels: one generic algorithm per operation, instantiated for each vector type.
//!
//! Every operation is a single pass over the stripe in the Horner form md uses
//! (Q = ((D_{n-1}·g ⊕ D_{n-2})·g ⊕ …)·g ⊕ D_0), keeping P and Q for `U` vectors in registers,
//! so each data byte is read once and each output written once. Recovery reuses the same pass
//! with the lost blocks left out (their slot only multiplies Q by g) and then solves for the
//! lost blocks in registers, which is why it can beat a matrix-based decoder that multiplies
//! every source by two constants.
//!
//! Vector types implement [`Lane`]; an instantiation is "vector type × unroll factor", and the
//! tail of a block that is shorter than one unrolled step falls back to one vector, then to
//! single bytes, so any length works.

pub(crate) mod portable;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// A vector of bytes with the GF(2^8) operations the kernels need.
///
/// All methods are `unsafe` because the x86 implementations require CPU features that the
/// caller (a `#[target_feature]` entry point selected after runtime detection) guarantees.
pub(crate) trait Lane: Copy {
    const BYTES: usize;
    /// Prepared form of a constant multiplier (nibble tables or an affine matrix).
    type MulConst: Copy;
    unsafe fn load(ptr: *const u8) -> Self;
    unsafe fn store(ptr: *mut u8, v: Self);
    unsafe fn zero() -> Self;
    unsafe fn xor(a: Self, b: Self) -> Self;
    /// Multiply every byte by g = 2.
    unsafe fn mul2(a: Self) -> Self;
    unsafe fn prepare(c: u8) -> Self::MulConst;
    unsafe fn mul(a: Self, c: Self::MulConst) -> Self;
}

/// Raw-pointer signatures of the kernel entry points. The safe wrappers in `lib.rs` check
/// lengths, counts and indices before calling them; every pointer covers `len` bytes.
pub(crate) type GenPFn = unsafe fn(srcs: &[*const u8], p: *mut u8, len: usize);
pub(crate) type GenPqFn = unsafe fn(srcs: &[*const u8], p: *mut u8, q: *mut u8, len: usize);
pub(crate) type UpdatePqFn = unsafe fn(first: usize, srcs: &[*const u8], p: *mut u8, q: *mut u8, len: usize);
/// `srcs` has null at `x` and `y` (x < y); writes the two lost blocks.
pub(crate) type Recov2DataFn =
    unsafe fn(srcs: &[*const u8], x: usize, y: usize, dx: *mut u8, dy: *mut u8, p: *const u8, q: *const u8, len: usize);
/// `srcs` has null at `x`; rebuilds D_x from Q, then writes P.
pub(crate) type RecovDataPFn = unsafe fn(srcs: &[*const u8], x: usize, dx: *mut u8, p: *mut u8, q: *const u8, len: usize);
/// `srcs` has null at `x`; rebuilds D_x from P, then writes Q.
pub(crate) type RecovDataQFn = unsafe fn(srcs: &[*const u8], x: usize, dx: *mut u8, p: *const u8, q: *mut u8, len: usize);

/// XOR of all sources for `U` vectors at a time, from `off` while a whole step fits.
#[inline(always)]
pub(crate) unsafe fn gen_p_run<V: Lane, const U: usize>(srcs: &[*const u8], p: *mut u8, mut off: usize, len: usize) -> usize {
    let step = V::BYTES * U;
    let Some((first, rest)) = srcs.split_first() else { return off };
    while off + step <= len {
        // Start from the first block rather than from zero: one XOR fewer per vector.
        let mut acc = [V::zero(); U];
        for (u, a) in acc.iter_mut().enumerate() {
            *a = V::load(first.add(off + u * V::BYTES));
        }
        for s in rest {
            for (u, a) in acc.iter_mut().enumerate() {
                *a = V::xor(*a, V::load(s.add(off + u * V::BYTES)));
            }
        }
        for (u, a) in acc.iter().enumerate() {
            V::store(p.add(off + u * V::BYTES), *a);
        }
        off += step;
    }
    off
}

/// The Horner pass: P and Q partial sums of `srcs` at `off`, skipping null sources (a lost
/// block counts as zero but still takes its power of g). `GAPS` is false for passes that
/// cannot contain nulls, which removes the null test from the hot loop.
#[inline(always)]
pub(crate) unsafe fn syndrome<V: Lane, const U: usize, const GAPS: bool>(srcs: &[*const u8], off: usize) -> ([V; U], [V; U]) {
    let mut wp = [V::zero(); U];
    let mut wq = [V::zero(); U];
    let mut z = srcs.len();
    // Highest block first: start the sums from it instead of multiplying zero by g.
    if !GAPS || !srcs[z - 1].is_null() {
        z -= 1;
        for u in 0..U {
            let d = V::load(srcs[z].add(off + u * V::BYTES));
            wp[u] = d;
            wq[u] = d;
        }
    }
    while z > 0 {
        z -= 1;
        let s = srcs[z];
        if GAPS && s.is_null() {
            for w in wq.iter_mut() {
                *w = V::mul2(*w);
            }
            continue;
        }
        for u in 0..U {
            let d = V::load(s.add(off + u * V::BYTES));
            wp[u] = V::xor(wp[u], d);
            wq[u] = V::xor(V::mul2(wq[u]), d);
        }
    }
    (wp, wq)
}

#[inline(always)]
pub(crate) unsafe fn gen_pq_run<V: Lane, const U: usize>(srcs: &[*const u8], p: *mut u8, q: *mut u8, mut off: usize, len: usize) -> usize {
    let step = V::BYTES * U;
    while off + step <= len {
        let (wp, wq) = syndrome::<V, U, false>(srcs, off);
        for u in 0..U {
            V::store(p.add(off + u * V::BYTES), wp[u]);
            V::store(q.add(off + u * V::BYTES), wq[u]);
        }
        off += step;
    }
    off
}

#[inline(always)]
pub(crate) unsafe fn update_pq_run<V: Lane, const U: usize>(
    first: usize,
    srcs: &[*const u8],
    p: *mut u8,
    q: *mut u8,
    mut off: usize,
    len: usize,
) -> usize {
    let step = V::BYTES * U;
    // The pass weights srcs[k] by g^k; the blocks really sit at first+k, so scale by g^first
    // once at the end instead of `first` doublings (the kernel's xor_syndrome loop).
    let shift = V::prepare(crate::gf::pow2(first));
    while off + step <= len {
        let (wp, mut wq) = syndrome::<V, U, false>(srcs, off);
        if first != 0 {
            for w in wq.iter_mut() {
                *w = V::mul(*w, shift);
            }
        }
        for u in 0..U {
            let at = off + u * V::BYTES;
            V::store(p.add(at), V::xor(V::load(p.add(at)), wp[u]));
            V::store(q.add(at), V::xor(V::load(q.add(at)), wq[u]));
        }
        off += step;
    }
    off
}

/// Constants of the two-data solution: with P' = P ⊕ (xor of survivors) = Dx ⊕ Dy and
/// Q' = Q ⊕ (syndrome of survivors) = g^x·Dx ⊕ g^y·Dy, Dx = A·P' ⊕ B·Q' where
/// A = g^y/(g^x ⊕ g^y) and B = 1/(g^x ⊕ g^y); then Dy = P' ⊕ Dx.
pub(crate) fn two_data_coefficients(x: usize, y: usize) -> (u8, u8) {
    use crate::gf::{inv, mul, pow2};
    let denom = inv(pow2(x) ^ pow2(y));
    (mul(pow2(y), denom), denom)
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn recov_2data_run<V: Lane, const U: usize>(
    srcs: &[*const u8],
    (a, b): (V::MulConst, V::MulConst),
    dx: *mut u8,
    dy: *mut u8,
    p: *const u8,
    q: *const u8,
    mut off: usize,
    len: usize,
) -> usize {
    let step = V::BYTES * U;
    while off + step <= len {
        let (wp, wq) = syndrome::<V, U, true>(srcs, off);
        for u in 0..U {
            let at = off + u * V::BYTES;
            let pxy = V::xor(wp[u], V::load(p.add(at)));
            let qxy = V::xor(wq[u], V::load(q.add(at)));
            let x = V::xor(V::mul(pxy, a), V::mul(qxy, b));
            V::store(dx.add(at), x);
            V::store(dy.add(at), V::xor(pxy, x));
        }
        off += step;
    }
    off
}

#[inline(always)]
pub(crate) unsafe fn recov_datap_run<V: Lane, const U: usize>(
    srcs: &[*const u8],
    inv_gx: V::MulConst,
    dx: *mut u8,
    p: *mut u8,
    q: *const u8,
    mut off: usize,
    len: usize,
) -> usize {
    let step = V::BYTES * U;
    while off + step <= len {
        let (wp, wq) = syndrome::<V, U, true>(srcs, off);
        for u in 0..U {
            let at = off + u * V::BYTES;
            let x = V::mul(V::xor(wq[u], V::load(q.add(at))), inv_gx);
            V::store(dx.add(at), x);
            V::store(p.add(at), V::xor(wp[u], x));
        }
        off += step;
    }
    off
}

#[inline(always)]
pub(crate) unsafe fn recov_dataq_run<V: Lane, const U: usize>(
    srcs: &[*const u8],
    gx: V::MulConst,
    dx: *mut u8,
    p: *const u8,
    q: *mut u8,
    mut off: usize,
    len: usize,
) -> usize {
    let step = V::BYTES * U;
    while off + step <= len {
        let (wp, wq) = syndrome::<V, U, true>(srcs, off);
        for u in 0..U {
            let at = off + u * V::BYTES;
            let x = V::xor(wp[u], V::load(p.add(at)));
            V::store(dx.add(at), x);
            V::store(q.add(at), V::xor(wq[u], V::mul(x, gx)));
        }
        off += step;
    }
    off
}

/// Defines a module of kernel entry points for one vector type and unroll factor. Each entry
/// runs the unrolled loop, then single vectors, then single bytes for the tail.
macro_rules! kernel_entry_points {
    ($module:ident, $lane:ty, $unroll:literal $(, $features:literal)?) => {
        pub(crate) mod $module {
            #![allow(unused_unsafe)]
            use super::*;
            use crate::kernels::*;
            type V = $lane;
            const U: usize = $unroll;

            $(#[target_feature(enable = $features)])?
            #[allow(dead_code)] // GFNI families reuse the plain XOR kernels.
            pub(crate) unsafe fn gen_p(srcs: &[*const u8], p: *mut u8, len: usize) {
                let off = gen_p_run::<V, U>(srcs, p, 0, len);
                let off = gen_p_run::<V, 1>(srcs, p, off, len);
                gen_p_run::<u8, 1>(srcs, p, off, len);
            }

            $(#[target_feature(enable = $features)])?
            pub(crate) unsafe fn gen_pq(srcs: &[*const u8], p: *mut u8, q: *mut u8, len: usize) {
                let off = gen_pq_run::<V, U>(srcs, p, q, 0, len);
                let off = gen_pq_run::<V, 1>(srcs, p, q, off, len);
                gen_pq_run::<u8, 1>(srcs, p, q, off, len);
            }

            $(#[target_feature(enable = $features)])?
            pub(crate) unsafe fn update_pq(
                first: usize,
                srcs: &[*const u8],
                p: *mut u8,
                q: *mut u8,
                len: usize,
            ) {
                let off = update_pq_run::<V, U>(first, srcs, p, q, 0, len);
                let off = update_pq_run::<V, 1>(first, srcs, p, q, off, len);
                update_pq_run::<u8, 1>(first, srcs, p, q, off, len);
            }

            $(#[target_feature(enable = $features)])?
            #[allow(clippy::too_many_arguments)]
            pub(crate) unsafe fn recov_2data(
                srcs: &[*const u8],
                x: usize,
                y: usize,
                dx: *mut u8,
                dy: *mut u8,
                p: *const u8,
                q: *const u8,
                len: usize,
            ) {
                let (a, b) = two_data_coefficients(x, y);
                let wide = (V::prepare(a), V::prepare(b));
                let off = recov_2data_run::<V, U>(srcs, wide, dx, dy, p, q, 0, len);
                let off = recov_2data_run::<V, 1>(srcs, wide, dx, dy, p, q, off, len);
                let bytes = (<u8 as Lane>::prepare(a), <u8 as Lane>::prepare(b));
                recov_2data_run::<u8, 1>(srcs, bytes, dx, dy, p, q, off, len);
            }

            $(#[target_feature(enable = $features)])?
            pub(crate) unsafe fn recov_datap(
                srcs: &[*const u8],
                x: usize,
                dx: *mut u8,
                p: *mut u8,
                q: *const u8,
                len: usize,
            ) {
                let c = crate::gf::inv(crate::gf::pow2(x));
                let off = recov_datap_run::<V, U>(srcs, V::prepare(c), dx, p, q, 0, len);
                let off = recov_datap_run::<V, 1>(srcs, V::prepare(c), dx, p, q, off, len);
                recov_datap_run::<u8, 1>(srcs, <u8 as Lane>::prepare(c), dx, p, q, off, len);
            }

            $(#[target_feature(enable = $features)])?
            pub(crate) unsafe fn recov_dataq(
                srcs: &[*const u8],
                x: usize,
                dx: *mut u8,
                p: *const u8,
                q: *mut u8,
                len: usize,
            ) {
                let c = crate::gf::pow2(x);
                let off = recov_dataq_run::<V, U>(srcs, V::prepare(c), dx, p, q, 0, len);
                let off = recov_dataq_run::<V, 1>(srcs, V::prepare(c), dx, p, q, off, len);
                recov_dataq_run::<u8, 1>(srcs, <u8 as Lane>::prepare(c), dx, p, q, off, len);
            }
        }
    };
}
pub(crate) use kernel_entry_points;
