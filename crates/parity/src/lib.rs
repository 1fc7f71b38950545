//! RAID parity exactly as Linux md computes it: P = ⊕ D_i, Q = ⊕ g^i·D_i over GF(2^8) with
//! polynomial 0x11D and g = 2 (md's raid6 and ISA-L's raid code use the same field).
//!
//! The module-level functions use the kernel chosen for each operation at first use (see
//! [`dispatch`]); [`Kernel`] methods run one specific kernel (tests and benchmarks). Every
//! kernel is checked against the byte-at-a-time reference in [`scalar`].
//!
//! Shapes: all blocks of one call have the same length (any length, any alignment);
//! gen_p takes 1..=256 data blocks, the RAID6 operations 1..=253 ([`MAX_DATA_BLOCKS`], md's
//! limit: 256 members minus P and Q, less one reserved). Outputs never alias inputs (the
//! borrow checker enforces it; update_pq's P and Q are read and written in place).

pub mod buffer;
pub mod dispatch;
pub mod gf;
mod kernels;
pub mod scalar;
pub mod testdata;

pub use dispatch::{selection, Kernel, Op};

/// Most data blocks a RAID6 stripe can have here (md: 256 members, minus P and Q, minus one).
pub const MAX_DATA_BLOCKS: usize = 253;
/// Most blocks gen_p accepts (a 256-member RAID5 has 255 data blocks; one spare slot).
pub const MAX_XOR_BLOCKS: usize = 256;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParityError {
    #[error("no data blocks given")]
    NoData,
    #[error("{count} data blocks given; at most {max} are supported")]
    TooManyBlocks { count: usize, max: usize },
    #[error("block lengths differ: expected {expected} bytes, found {found}")]
    LengthMismatch { expected: usize, found: usize },
    #[error("block index {index} is outside the {count} data blocks")]
    IndexOutOfRange { index: usize, count: usize },
    #[error("lost blocks {0:?} cannot be recovered: RAID6 recovers at most two distinct blocks")]
    Unrecoverable(Vec<Block>),
}

/// A block of a stripe: data block i, P or Q.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Block {
    Data(usize),
    P,
    Q,
}

/// Result of checking a RAID6 stripe, as mdadm's raid6check reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Consistent,
    /// Exactly one block disagrees with the others: this one.
    Wrong(Block),
    /// Errors in more than one block (or not attributable to one).
    MoreThanOne,
}

fn check_count(count: usize, max: usize) -> Result<(), ParityError> {
    if count == 0 {
        return Err(ParityError::NoData);
    }
    if count > max {
        return Err(ParityError::TooManyBlocks { count, max });
    }
    Ok(())
}

fn check_len(expected: usize, found: usize) -> Result<(), ParityError> {
    if expected != found {
        return Err(ParityError::LengthMismatch { expected, found });
    }
    Ok(())
}

/// Stripes up to this many blocks gather their pointers on the stack; wider ones allocate.
/// (Zeroing a 256-entry table on every call costs as much as XOR-ing a 4 KiB stripe.)
const INLINE_BLOCKS: usize = 32;

/// Pointer table for one call: inline for common stripe widths, on the heap beyond.
enum PointerTable<T: Copy> {
    Inline([T; INLINE_BLOCKS], usize),
    Heap(Vec<T>),
}

impl<T: Copy> PointerTable<T> {
    fn new(count: usize, fill: T) -> Self {
        if count <= INLINE_BLOCKS {
            PointerTable::Inline([fill; INLINE_BLOCKS], count)
        } else {
            PointerTable::Heap(vec![fill; count])
        }
    }
    fn as_slice(&self) -> &[T] {
        match self {
            PointerTable::Inline(a, n) => &a[..*n],
            PointerTable::Heap(v) => v,
        }
    }
    fn as_mut_slice(&mut self) -> &mut [T] {
        match self {
            PointerTable::Inline(a, n) => &mut a[..*n],
            PointerTable::Heap(v) => v,
        }
    }
}

/// Source pointers of one call, after checking every block's length.
struct Sources(PointerTable<*const u8>);

impl Sources {
    fn of(data: &[&[u8]], len: usize) -> Result<Self, ParityError> {
        let mut t = PointerTable::new(data.len(), std::ptr::null());
        for (slot, d) in t.as_mut_slice().iter_mut().zip(data) {
            check_len(len, d.len())?;
            *slot = d.as_ptr();
        }
        Ok(Sources(t))
    }
    fn as_slice(&self) -> &[*const u8] {
        self.0.as_slice()
    }
}

impl Kernel {
    /// P = XOR of `data` into `p`.
    pub fn gen_p(&self, data: &[&[u8]], p: &mut [u8]) -> Result<(), ParityError> {
        check_count(data.len(), MAX_XOR_BLOCKS)?;
        let srcs = Sources::of(data, p.len())?;
        match self.gen_p {
            // SAFETY: counts and lengths checked above; the kernel is supported (callers get
            // kernels from the dispatcher or check `is_supported`, asserted here).
            Some(f) => {
                assert!(self.is_supported(), "kernel {} not supported by this CPU", self.name);
                unsafe { f(srcs.as_slice(), p.as_mut_ptr(), p.len()) }
            }
            None => scalar::gen_p(data, p),
        }
        Ok(())
    }

    /// P and Q of `data`.
    pub fn gen_pq(&self, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) -> Result<(), ParityError> {
        check_count(data.len(), MAX_DATA_BLOCKS)?;
        check_len(p.len(), q.len())?;
        let srcs = Sources::of(data, p.len())?;
        assert!(self.is_supported(), "kernel {} not supported by this CPU", self.name);
        // SAFETY: counts and lengths checked; p and q are distinct &mut of len bytes.
        unsafe { (self.gen_pq)(srcs.as_slice(), p.as_mut_ptr(), q.as_mut_ptr(), p.len()) }
        Ok(())
    }

    /// Folds data blocks `first..first + data.len()` into P and Q (the kernel's
    /// `xor_syndrome`): call with the old contents, then the new, to update parity for a
    /// partial-stripe write without reading the untouched blocks.
    pub fn update_pq(&self, first: usize, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) -> Result<(), ParityError> {
        check_count(data.len(), MAX_DATA_BLOCKS)?;
        if first + data.len() > MAX_DATA_BLOCKS {
            return Err(ParityError::TooManyBlocks { count: first + data.len(), max: MAX_DATA_BLOCKS });
        }
        check_len(p.len(), q.len())?;
        let srcs = Sources::of(data, p.len())?;
        assert!(self.is_supported(), "kernel {} not supported by this CPU", self.name);
        // SAFETY: as gen_pq; p/q are read and written at the same offsets only.
        unsafe { (self.update_pq)(first, srcs.as_slice(), p.as_mut_ptr(), q.as_mut_ptr(), p.len()) }
        Ok(())
    }

    /// Rebuilds the `lost` blocks (at most two, distinct) of a RAID6 stripe in place from the
    /// others. The lost buffers' contents are ignored and overwritten.
    pub fn recover_raid6(&self, data: &mut [&mut [u8]], p: &mut [u8], q: &mut [u8], lost: &[Block]) -> Result<(), ParityError> {
        let n = data.len();
        check_count(n, MAX_DATA_BLOCKS)?;
        let len = p.len();
        check_len(len, q.len())?;
        for d in data.iter() {
            check_len(len, d.len())?;
        }
        let mut lost = lost.to_vec();
        lost.sort();
        lost.dedup();
        for b in &lost {
            if let Block::Data(i) = b {
                if *i >= n {
                    return Err(ParityError::IndexOutOfRange { index: *i, count: n });
                }
            }
        }
        assert!(self.is_supported(), "kernel {} not supported by this CPU", self.name);
        let mut ptr_table = PointerTable::new(n, std::ptr::null_mut::<u8>());
        let ptrs = ptr_table.as_mut_slice();
        for (slot, d) in ptrs.iter_mut().zip(data.iter_mut()) {
            *slot = d.as_mut_ptr();
        }
        let mut src_table = PointerTable::new(n, std::ptr::null::<u8>());
        let srcs = src_table.as_mut_slice();
        for (s, p) in srcs.iter_mut().zip(ptrs.iter()) {
            *s = *p;
        }
        // SAFETY (all arms): lengths, counts and indices checked above; every lost data block
        // is null in `srcs`, so the kernel only writes it (through `ptrs`) and never reads it.
        match lost.as_slice() {
            [] => {}
            [Block::P] | [Block::Q] | [Block::P, Block::Q] => {
                let refs: Vec<&[u8]> = data.iter().map(|d| &**d).collect();
                if lost == [Block::P] {
                    self.gen_p(&refs, p)?;
                } else {
                    // Regenerating P alongside Q is no more work than Q alone in one pass.
                    self.gen_pq(&refs, p, q)?;
                }
            }
            [Block::Data(x)] | [Block::Data(x), Block::P] => {
                srcs[*x] = std::ptr::null();
                unsafe { (self.recov_datap)(srcs, *x, ptrs[*x], p.as_mut_ptr(), q.as_ptr(), len) }
            }
            [Block::Data(x), Block::Q] => {
                srcs[*x] = std::ptr::null();
                unsafe { (self.recov_dataq)(srcs, *x, ptrs[*x], p.as_ptr(), q.as_mut_ptr(), len) }
            }
            [Block::Data(x), Block::Data(y)] => {
                srcs[*x] = std::ptr::null();
                srcs[*y] = std::ptr::null();
                unsafe { (self.recov_2data)(srcs, *x, *y, ptrs[*x], ptrs[*y], p.as_ptr(), q.as_ptr(), len) }
            }
            _ => return Err(ParityError::Unrecoverable(lost)),
        }
        Ok(())
    }

    /// Rebuilds lost block `x` of a RAID4/5 stripe (or a RAID6 stripe that still has P).
    pub fn recover_from_p(&self, data: &mut [&mut [u8]], x: usize, p: &[u8]) -> Result<(), ParityError> {
        let n = data.len();
        if x >= n {
            return Err(ParityError::IndexOutOfRange { index: x, count: n });
        }
        let (before, rest) = data.split_at_mut(x);
        let (target, after) = rest.split_first_mut().ok_or(ParityError::NoData)?;
        let mut srcs: Vec<&[u8]> = before.iter().map(|d| &**d).collect();
        srcs.extend(after.iter().map(|d| &**d));
        srcs.push(p);
        self.gen_p(&srcs, target)
    }
}

/// P = XOR of `data`, with the selected kernel.
pub fn gen_p(data: &[&[u8]], p: &mut [u8]) -> Result<(), ParityError> {
    selection().kernel_for(Op::GenP, p.len()).gen_p(data, p)
}

/// P and Q of `data`, with the selected kernel.
pub fn gen_pq(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) -> Result<(), ParityError> {
    selection().kernel_for(Op::GenPq, p.len()).gen_pq(data, p, q)
}

/// See [`Kernel::update_pq`].
pub fn update_pq(first: usize, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) -> Result<(), ParityError> {
    selection().kernel_for(Op::UpdatePq, p.len()).update_pq(first, data, p, q)
}

/// See [`Kernel::recover_raid6`]; picks the kernel chosen for the kind of loss.
pub fn recover_raid6(data: &mut [&mut [u8]], p: &mut [u8], q: &mut [u8], lost: &[Block]) -> Result<(), ParityError> {
    let data_lost = lost.iter().filter(|b| matches!(b, Block::Data(_))).count();
    let op = match (data_lost, lost.contains(&Block::Q)) {
        (2, _) => Op::Recov2Data,
        (1, true) => Op::RecovDataQ,
        (1, false) => Op::RecovDataP,
        _ => Op::GenPq,
    };
    selection().kernel_for(op, p.len()).recover_raid6(data, p, q, lost)
}

/// See [`Kernel::recover_from_p`].
pub fn recover_from_p(data: &mut [&mut [u8]], x: usize, p: &[u8]) -> Result<(), ParityError> {
    selection().kernel_for(Op::GenP, p.len()).recover_from_p(data, x, p)
}

/// Is P the XOR of `data`?
pub fn verify_p(data: &[&[u8]], p: &[u8]) -> Result<bool, ParityError> {
    let mut computed = vec![0u8; p.len()];
    gen_p(data, &mut computed)?;
    Ok(computed == p)
}

/// Checks a RAID6 stripe and, when exactly one block is wrong, names it (syndrome decoding as
/// mdadm's raid6check does: with P and Q errors Pe, Qe at a byte, Qe = g^z·Pe names data
/// block z; an error only in P or only in Q names that parity block).
pub fn verify_pq(data: &[&[u8]], p: &[u8], q: &[u8]) -> Result<Verdict, ParityError> {
    let mut pe = vec![0u8; p.len()];
    let mut qe = vec![0u8; p.len()];
    gen_pq(data, &mut pe, &mut qe)?;
    check_len(p.len(), q.len())?;
    let mut culprit: Option<Block> = None;
    for i in 0..p.len() {
        let (ep, eq) = (pe[i] ^ p[i], qe[i] ^ q[i]);
        let here = match (ep, eq) {
            (0, 0) => continue,
            (_, 0) => Block::P,
            (0, _) => Block::Q,
            _ => {
                let z = (gf::LOG[eq as usize] as usize + 255 - gf::LOG[ep as usize] as usize) % 255;
                if z >= data.len() {
                    return Ok(Verdict::MoreThanOne);
                }
                Block::Data(z)
            }
        };
        match culprit {
            None => culprit = Some(here),
            Some(c) if c == here => {}
            Some(_) => return Ok(Verdict::MoreThanOne),
        }
    }
    Ok(culprit.map_or(Verdict::Consistent, Verdict::Wrong))
}
