//! x86_64 lanes. Two ways to multiply in GF(2^8) mod 0x11D:
//! - pshufb nibble tables (AVX2, AVX-512BW): split each byte into nibbles, look each up in a
//!   16-entry product table, XOR the halves; doubling uses compare/mask and a byte add.
//! - GFNI affine (`gf2p8affineqb`): one instruction per multiply with the constant's 8x8 bit
//!   matrix. (`gf2p8mulb` would be one instruction too, but it is fixed to polynomial 0x11B.)
//!
//! SAFETY (whole module): every method uses intrinsics of the features named on its type.
//! The methods are only reached from `#[target_feature]` entry points that the dispatcher
//! calls after `is_x86_feature_detected!` confirmed those features; loads and stores are
//! unaligned forms, in bounds because the callers step by `BYTES` within `len`.

use super::{kernel_entry_points, Lane};
use crate::gf;
use std::arch::x86_64::*;

#[derive(Clone, Copy)]
pub(crate) struct Avx2(__m256i);
#[derive(Clone, Copy)]
pub(crate) struct Avx2Gfni(__m256i);
#[derive(Clone, Copy)]
pub(crate) struct Avx512(__m512i);
#[derive(Clone, Copy)]
pub(crate) struct Avx512Gfni(__m512i);

/// `affine_matrix(2)`: multiply by g. Bytes from the low end: 40 20 10 88 84 82 01 80.
const X2_MATRIX: i64 = 0x8001_8284_8810_2040_u64 as i64;

/// Reads a 16-byte product table; the caller broadcasts it to every 128-bit lane.
#[inline(always)]
unsafe fn table128(t: &[u8; 16]) -> __m128i {
    // SAFETY: t is exactly 16 readable bytes; loadu has no alignment requirement.
    _mm_loadu_si128(t.as_ptr() as *const __m128i)
}

impl Lane for Avx2 {
    const BYTES: usize = 32;
    type MulConst = (__m256i, __m256i);
    #[inline(always)]
    unsafe fn load(ptr: *const u8) -> Self {
        Avx2(_mm256_loadu_si256(ptr as *const __m256i))
    }
    #[inline(always)]
    unsafe fn store(ptr: *mut u8, v: Self) {
        _mm256_storeu_si256(ptr as *mut __m256i, v.0)
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        Avx2(_mm256_setzero_si256())
    }
    #[inline(always)]
    unsafe fn xor(a: Self, b: Self) -> Self {
        Avx2(_mm256_xor_si256(a.0, b.0))
    }
    #[inline(always)]
    unsafe fn mul2(a: Self) -> Self {
        let top = _mm256_cmpgt_epi8(_mm256_setzero_si256(), a.0);
        let reduce = _mm256_and_si256(top, _mm256_set1_epi8(0x1d));
        Avx2(_mm256_xor_si256(_mm256_add_epi8(a.0, a.0), reduce))
    }
    #[inline(always)]
    unsafe fn prepare(c: u8) -> Self::MulConst {
        let (lo, hi) = gf::nibble_tables(c);
        (_mm256_broadcastsi128_si256(table128(&lo)), _mm256_broadcastsi128_si256(table128(&hi)))
    }
    #[inline(always)]
    unsafe fn mul(a: Self, (lo, hi): Self::MulConst) -> Self {
        let nib = _mm256_set1_epi8(0x0f);
        let l = _mm256_and_si256(a.0, nib);
        let h = _mm256_and_si256(_mm256_srli_epi16(a.0, 4), nib);
        Avx2(_mm256_xor_si256(_mm256_shuffle_epi8(lo, l), _mm256_shuffle_epi8(hi, h)))
    }
}

impl Lane for Avx2Gfni {
    const BYTES: usize = 32;
    type MulConst = __m256i;
    #[inline(always)]
    unsafe fn load(ptr: *const u8) -> Self {
        Avx2Gfni(_mm256_loadu_si256(ptr as *const __m256i))
    }
    #[inline(always)]
    unsafe fn store(ptr: *mut u8, v: Self) {
        _mm256_storeu_si256(ptr as *mut __m256i, v.0)
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        Avx2Gfni(_mm256_setzero_si256())
    }
    #[inline(always)]
    unsafe fn xor(a: Self, b: Self) -> Self {
        Avx2Gfni(_mm256_xor_si256(a.0, b.0))
    }
    #[inline(always)]
    unsafe fn mul2(a: Self) -> Self {
        Avx2Gfni(_mm256_gf2p8affine_epi64_epi8::<0>(a.0, _mm256_set1_epi64x(X2_MATRIX)))
    }
    #[inline(always)]
    unsafe fn prepare(c: u8) -> Self::MulConst {
        _mm256_set1_epi64x(gf::affine_matrix(c) as i64)
    }
    #[inline(always)]
    unsafe fn mul(a: Self, m: Self::MulConst) -> Self {
        Avx2Gfni(_mm256_gf2p8affine_epi64_epi8::<0>(a.0, m))
    }
}

impl Lane for Avx512 {
    const BYTES: usize = 64;
    type MulConst = (__m512i, __m512i);
    #[inline(always)]
    unsafe fn load(ptr: *const u8) -> Self {
        Avx512(_mm512_loadu_si512(ptr as *const __m512i))
    }
    #[inline(always)]
    unsafe fn store(ptr: *mut u8, v: Self) {
        _mm512_storeu_si512(ptr as *mut __m512i, v.0)
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        Avx512(_mm512_setzero_si512())
    }
    #[inline(always)]
    unsafe fn xor(a: Self, b: Self) -> Self {
        Avx512(_mm512_xor_si512(a.0, b.0))
    }
    #[inline(always)]
    unsafe fn mul2(a: Self) -> Self {
        let top = _mm512_movepi8_mask(a.0);
        let reduce = _mm512_maskz_mov_epi8(top, _mm512_set1_epi8(0x1d));
        Avx512(_mm512_xor_si512(_mm512_add_epi8(a.0, a.0), reduce))
    }
    #[inline(always)]
    unsafe fn prepare(c: u8) -> Self::MulConst {
        let (lo, hi) = gf::nibble_tables(c);
        (_mm512_broadcast_i32x4(table128(&lo)), _mm512_broadcast_i32x4(table128(&hi)))
    }
    #[inline(always)]
    unsafe fn mul(a: Self, (lo, hi): Self::MulConst) -> Self {
        let nib = _mm512_set1_epi8(0x0f);
        let l = _mm512_and_si512(a.0, nib);
        let h = _mm512_and_si512(_mm512_srli_epi16(a.0, 4), nib);
        Avx512(_mm512_xor_si512(_mm512_shuffle_epi8(lo, l), _mm512_shuffle_epi8(hi, h)))
    }
}

impl Lane for Avx512Gfni {
    const BYTES: usize = 64;
    type MulConst = __m512i;
    #[inline(always)]
    unsafe fn load(ptr: *const u8) -> Self {
        Avx512Gfni(_mm512_loadu_si512(ptr as *const __m512i))
    }
    #[inline(always)]
    unsafe fn store(ptr: *mut u8, v: Self) {
        _mm512_storeu_si512(ptr as *mut __m512i, v.0)
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        Avx512Gfni(_mm512_setzero_si512())
    }
    #[inline(always)]
    unsafe fn xor(a: Self, b: Self) -> Self {
        Avx512Gfni(_mm512_xor_si512(a.0, b.0))
    }
    #[inline(always)]
    unsafe fn mul2(a: Self) -> Self {
        Avx512Gfni(_mm512_gf2p8affine_epi64_epi8::<0>(a.0, _mm512_set1_epi64(X2_MATRIX)))
    }
    #[inline(always)]
    unsafe fn prepare(c: u8) -> Self::MulConst {
        _mm512_set1_epi64(gf::affine_matrix(c) as i64)
    }
    #[inline(always)]
    unsafe fn mul(a: Self, m: Self::MulConst) -> Self {
        Avx512Gfni(_mm512_gf2p8affine_epi64_epi8::<0>(a.0, m))
    }
}

kernel_entry_points!(avx2x2, Avx2, 2, "avx2");
kernel_entry_points!(avx2x4, Avx2, 4, "avx2");
kernel_entry_points!(avx512x2, Avx512, 2, "avx512f,avx512bw");
kernel_entry_points!(avx512x4, Avx512, 4, "avx512f,avx512bw");
kernel_entry_points!(avx2gfni_x4, Avx2Gfni, 4, "avx2,gfni");
kernel_entry_points!(avx512gfni_x2, Avx512Gfni, 2, "avx512f,avx512bw,gfni");
kernel_entry_points!(avx512gfni_x4, Avx512Gfni, 4, "avx512f,avx512bw,gfni");

#[cfg(test)]
mod tests {
    #[test]
    fn x2_matrix_constant_matches_computed_matrix() {
        assert_eq!(super::X2_MATRIX as u64, crate::gf::affine_matrix(2));
    }
}
