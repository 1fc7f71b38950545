//! Portable lanes: single bytes (the tail of every kernel, and the always-available `scalar`
//! kernel) and 64-bit SWAR words (`swar64`, the fallback on CPUs without AVX2).

use super::{kernel_entry_points, Lane};
use crate::gf;

impl Lane for u8 {
    const BYTES: usize = 1;
    type MulConst = u8;
    #[inline(always)]
    unsafe fn load(ptr: *const u8) -> Self {
        *ptr
    }
    #[inline(always)]
    unsafe fn store(ptr: *mut u8, v: Self) {
        *ptr = v;
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        0
    }
    #[inline(always)]
    unsafe fn xor(a: Self, b: Self) -> Self {
        a ^ b
    }
    #[inline(always)]
    unsafe fn mul2(a: Self) -> Self {
        (a << 1) ^ if a & 0x80 != 0 { 0x1d } else { 0 }
    }
    #[inline(always)]
    unsafe fn prepare(c: u8) -> Self::MulConst {
        c
    }
    #[inline(always)]
    unsafe fn mul(a: Self, c: Self::MulConst) -> Self {
        gf::mul(a, c)
    }
}

/// Eight bytes in a `u64`, doubled in parallel with masks (the kernel's int64 raid6 code).
#[derive(Clone, Copy)]
pub(crate) struct Swar(u64);

const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

impl Lane for Swar {
    const BYTES: usize = 8;
    type MulConst = u8;
    #[inline(always)]
    unsafe fn load(ptr: *const u8) -> Self {
        Swar((ptr as *const u64).read_unaligned())
    }
    #[inline(always)]
    unsafe fn store(ptr: *mut u8, v: Self) {
        (ptr as *mut u64).write_unaligned(v.0)
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        Swar(0)
    }
    #[inline(always)]
    unsafe fn xor(a: Self, b: Self) -> Self {
        Swar(a.0 ^ b.0)
    }
    #[inline(always)]
    unsafe fn mul2(a: Self) -> Self {
        let high = a.0 & HIGH_BITS;
        // Each byte whose top bit was set becomes 0xff, then is cut to the reduction 0x1d.
        let reduce = (high >> 7).wrapping_mul(0xff) & 0x1d1d_1d1d_1d1d_1d1d;
        Swar(((a.0 ^ high) << 1) ^ reduce)
    }
    #[inline(always)]
    unsafe fn prepare(c: u8) -> Self::MulConst {
        c
    }
    #[inline(always)]
    unsafe fn mul(a: Self, c: Self::MulConst) -> Self {
        let mut bytes = a.0.to_le_bytes();
        for b in bytes.iter_mut() {
            *b = gf::mul(*b, c);
        }
        Swar(u64::from_le_bytes(bytes))
    }
}

kernel_entry_points!(scalar, u8, 1);
kernel_entry_points!(swar64, Swar, 2);
