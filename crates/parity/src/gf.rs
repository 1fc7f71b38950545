//! GF(2^8) arithmetic with polynomial x^8+x^4+x^3+x^2+1 (0x11D) and generator 2: the field
//! Linux md's raid6 and ISA-L's raid functions use. Tables are built at compile time.

/// The reduction polynomial (without the x^8 term it is 0x1D).
pub const POLY: u16 = 0x11D;

const fn build_exp() -> [u8; 512] {
    let mut exp = [0u8; 512];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        exp[i + 255] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    // exp[510], exp[511] stay unused; indices never exceed 508.
    exp
}

const fn build_log(exp: &[u8; 512]) -> [u8; 256] {
    let mut log = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        log[exp[i] as usize] = i as u8;
        i += 1;
    }
    log
}

/// `EXP[i] = g^i` for i in 0..510 (doubled so sums of two logs need no reduction).
pub static EXP: [u8; 512] = build_exp();
/// `LOG[x]` for x != 0; `LOG[0]` is meaningless.
pub static LOG: [u8; 256] = build_log(&EXP);

/// Product in GF(2^8).
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// Multiplicative inverse; `inv(0)` is 0 by convention (callers never divide by zero).
#[inline]
pub fn inv(a: u8) -> u8 {
    if a == 0 {
        0
    } else {
        EXP[255 - LOG[a as usize] as usize]
    }
}

/// `g^i` for any exponent (reduced mod 255).
#[inline]
pub fn pow2(i: usize) -> u8 {
    EXP[i % 255]
}

/// Carry-less shift-and-add multiply: an independent oracle for the table-based `mul`.
pub fn mul_slow(mut a: u8, mut b: u8) -> u8 {
    let mut r = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            r ^= a;
        }
        let carry = a & 0x80 != 0;
        a <<= 1;
        if carry {
            a ^= (POLY & 0xff) as u8;
        }
        b >>= 1;
    }
    r
}

/// The 8x8 bit matrix, in `gf2p8affineqb` operand form, that multiplies a byte by `c`.
/// Row for output bit i sits in byte 7-i and selects the input bits j whose product
/// `c * 2^j` has bit i set. (`gf2p8mulb` is hard-wired to 0x11B, so it cannot be used.)
pub fn affine_matrix(c: u8) -> u64 {
    let mut m = 0u64;
    for i in 0..8 {
        let mut row = 0u8;
        for j in 0..8 {
            if (mul(c, 1 << j) >> i) & 1 != 0 {
                row |= 1 << j;
            }
        }
        m |= (row as u64) << (8 * (7 - i));
    }
    m
}

/// Nibble tables for pshufb multiplication by `c`: `lo[x] = c*x`, `hi[x] = c*(x<<4)`.
pub fn nibble_tables(c: u8) -> ([u8; 16], [u8; 16]) {
    let mut lo = [0u8; 16];
    let mut hi = [0u8; 16];
    for x in 0..16u8 {
        lo[x as usize] = mul(c, x);
        hi[x as usize] = mul(c, x << 4);
    }
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_mul_matches_shift_and_add_for_all_pairs() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul_slow(a, b), "{a} * {b}");
            }
        }
    }

    #[test]
    fn inverse_is_inverse() {
        for a in 1..=255u8 {
            assert_eq!(mul(a, inv(a)), 1);
        }
    }

    #[test]
    fn generator_has_order_255() {
        let mut seen = [false; 256];
        for i in 0..255 {
            assert!(!seen[pow2(i) as usize]);
            seen[pow2(i) as usize] = true;
        }
        assert!(!seen[0]);
    }

    #[test]
    fn times_two_matrix_is_the_documented_one() {
        // DESIGN.md §4 / ISA-L: bytes [0x40,0x20,0x10,0x88,0x84,0x82,0x01,0x80] from the top.
        assert_eq!(affine_matrix(2).to_le_bytes(), [0x40, 0x20, 0x10, 0x88, 0x84, 0x82, 0x01, 0x80]);
    }
}
