//! The plain reference: byte-at-a-time, written straight from the definitions
//! P = ⊕ D_i and Q = ⊕ g^i·D_i. Every fast kernel is tested against these functions, so they
//! favour obviousness over speed and share no code with the kernels beyond `gf::mul`.

use crate::gf;

/// P = XOR of all data blocks.
pub fn gen_p(data: &[&[u8]], p: &mut [u8]) {
    p.fill(0);
    for d in data {
        for (pb, db) in p.iter_mut().zip(d.iter()) {
            *pb ^= db;
        }
    }
}

/// P and Q of the data blocks, block i weighted by g^i in Q.
pub fn gen_pq(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    gen_p(data, p);
    q.fill(0);
    for (i, d) in data.iter().enumerate() {
        let coef = gf::pow2(i);
        for (qb, db) in q.iter_mut().zip(d.iter()) {
            *qb ^= gf::mul(coef, *db);
        }
    }
}

/// Folds data blocks `first..first+data.len()` into existing P and Q, as if every other block
/// were zero. Applied once with the old contents and once with the new, it turns the parity
/// of the old stripe into the parity of the new one (read-modify-write).
pub fn update_pq(first: usize, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    for (k, d) in data.iter().enumerate() {
        let coef = gf::pow2(first + k);
        for i in 0..p.len() {
            p[i] ^= d[i];
            q[i] ^= gf::mul(coef, d[i]);
        }
    }
}

/// Solves for two lost data blocks x < y by brute force over the field, byte by byte:
/// finds the unique (dx, dy) with dx ⊕ dy = P' and g^x·dx ⊕ g^y·dy = Q'. Deliberately a
/// different method from the kernels' closed form, so the two check each other.
pub fn recover_two_data(data: &mut [&mut [u8]], x: usize, y: usize, p: &[u8], q: &[u8]) {
    let len = p.len();
    let (gx, gy) = (gf::pow2(x), gf::pow2(y));
    for i in 0..len {
        let mut pp = p[i];
        let mut qq = q[i];
        for (z, d) in data.iter().enumerate() {
            if z != x && z != y {
                pp ^= d[i];
                qq ^= gf::mul(gf::pow2(z), d[i]);
            }
        }
        let mut found = None;
        for dx in 0..=255u8 {
            let dy = pp ^ dx;
            if gf::mul(gx, dx) ^ gf::mul(gy, dy) == qq {
                found = Some((dx, dy));
                break;
            }
        }
        let (dx, dy) = found.expect("x != y makes the system solvable");
        data[x][i] = dx;
        data[y][i] = dy;
    }
}
