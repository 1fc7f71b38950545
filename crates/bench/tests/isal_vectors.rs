//! Fixed vectors cross-checked against ISA-L where it is installed: our P/Q must equal
//! ISA-L's `pq_gen`/`xor_gen`, and ISA-L's matrix decode must agree with our recovery.

use uraid_bench::isal::isal;
use uraid_bench::parity::raid6_decode_matrix;
use uraid_parity::buffer::AlignedBuf;
use uraid_parity::testdata::Prng;
use uraid_parity::{dispatch, Block};

fn blocks(n: usize, len: usize, seed: u64) -> Vec<AlignedBuf> {
    let mut rng = Prng::new(seed);
    (0..n)
        .map(|_| {
            let mut b = AlignedBuf::zeroed(len, 64);
            rng.fill(&mut b);
            b
        })
        .collect()
}

#[test]
fn pq_matches_isal() {
    let lib = match isal() {
        Ok(l) => l,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    for (n, len) in [(2usize, 64usize), (3, 4096), (8, 65536), (10, 4096), (30, 1024)] {
        let mut bufs = blocks(n + 2, len, n as u64);
        let mut ptrs: Vec<*mut u8> = bufs.iter_mut().map(|b| b.as_mut_ptr()).collect();
        assert_eq!(lib.pq_gen(&mut ptrs, len), 0);
        let mut xor_ptrs: Vec<*mut u8> = ptrs[..n].to_vec();
        let mut isal_p = AlignedBuf::zeroed(len, 64);
        xor_ptrs.push(isal_p.as_mut_ptr());
        assert_eq!(lib.xor_gen(&mut xor_ptrs, len), 0);
        let refs: Vec<&[u8]> = bufs[..n].iter().map(|b| &b[..]).collect();
        for k in dispatch::supported_kernels() {
            let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
            k.gen_pq(&refs, &mut p, &mut q).unwrap();
            assert_eq!(&p[..], &bufs[n][..], "{} P vs isa-l n={n}", k.name);
            assert_eq!(&q[..], &bufs[n + 1][..], "{} Q vs isa-l n={n}", k.name);
            assert_eq!(&p[..], &isal_p[..], "{} P vs isa-l xor_gen", k.name);
        }
    }
}

#[test]
fn isal_matrix_decode_agrees_with_our_recovery() {
    let lib = match isal() {
        Ok(l) => l,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let (n, len) = (6usize, 4096usize);
    let mut bufs = blocks(n + 2, len, 42);
    let mut ptrs: Vec<*mut u8> = bufs.iter_mut().map(|b| b.as_mut_ptr()).collect();
    assert_eq!(lib.pq_gen(&mut ptrs, len), 0);
    for lost in [vec![Block::Data(1), Block::Data(4)], vec![Block::Data(0), Block::P], vec![Block::Data(5), Block::Q]] {
        let (sources, rows) = raid6_decode_matrix(n, &lost);
        let mut tables = lib.init_tables(n, rows.len(), &rows.concat());
        let mut src: Vec<*mut u8> = sources.iter().map(|&i| bufs[i].as_ptr() as *mut u8).collect();
        let mut outs: Vec<AlignedBuf> = (0..rows.len()).map(|_| AlignedBuf::zeroed(len, 64)).collect();
        let mut out_ptrs: Vec<*mut u8> = outs.iter_mut().map(|b| b.as_mut_ptr()).collect();
        lib.encode(&mut tables, &mut src, &mut out_ptrs, len);
        for (b, out) in lost.iter().zip(&outs) {
            let idx = match b {
                Block::Data(i) => *i,
                Block::P => n,
                Block::Q => n + 1,
            };
            assert_eq!(&out[..], &bufs[idx][..], "isa-l decode of {b:?}");
        }
    }
}
