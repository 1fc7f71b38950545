//! Intel ISA-L, the peer our parity kernels are measured against, loaded at run time from
//! Debian's libisal (`libisal.so.2`) through hand-written `extern "C"` signatures, so uraid
//! builds and runs where the library is absent (the bench then says so).
//!
//! ISA-L requires 32-byte aligned pointers and lengths that are multiples of 32 for
//! `xor_gen`/`pq_gen`; callers pass [`uraid_parity::buffer::AlignedBuf`] blocks.

use libloading::{Library, Symbol};
use std::os::raw::{c_int, c_uchar, c_void};
use std::sync::OnceLock;

type XorGen = unsafe extern "C" fn(vects: c_int, len: c_int, array: *mut *mut c_void) -> c_int;
type PqGen = unsafe extern "C" fn(vects: c_int, len: c_int, array: *mut *mut c_void) -> c_int;
type EcInitTables = unsafe extern "C" fn(k: c_int, rows: c_int, a: *mut c_uchar, gftbls: *mut c_uchar);
type EcEncodeData =
    unsafe extern "C" fn(len: c_int, k: c_int, rows: c_int, gftbls: *mut c_uchar, data: *mut *mut c_uchar, coding: *mut *mut c_uchar);

/// The ISA-L entry points uraid compares itself with.
pub struct Isal {
    xor_gen: XorGen,
    pq_gen: PqGen,
    ec_init_tables: EcInitTables,
    ec_encode_data: EcEncodeData,
    _lib: Library,
}

/// ISA-L if it can be loaded; the error says why not.
pub fn isal() -> Result<&'static Isal, &'static str> {
    static ISAL: OnceLock<Result<Isal, String>> = OnceLock::new();
    ISAL.get_or_init(load).as_ref().map_err(|e| e.as_str())
}

fn load() -> Result<Isal, String> {
    let names = ["libisal.so.2", "libisal.so"];
    let mut last = String::new();
    for name in names {
        // SAFETY: loading libisal runs no initialisers with preconditions of ours.
        match unsafe { Library::new(name) } {
            Ok(lib) => {
                // SAFETY: the signatures match ISA-L 2.x's raid.h and erasure_code.h.
                unsafe {
                    let xor_gen = *lib.get::<XorGen>(b"xor_gen\0").map_err(|e| e.to_string())?;
                    let pq_gen = *lib.get::<PqGen>(b"pq_gen\0").map_err(|e| e.to_string())?;
                    let init: Symbol<EcInitTables> = lib.get(b"ec_init_tables\0").map_err(|e| e.to_string())?;
                    let enc: Symbol<EcEncodeData> = lib.get(b"ec_encode_data\0").map_err(|e| e.to_string())?;
                    let (ec_init_tables, ec_encode_data) = (*init, *enc);
                    return Ok(Isal { xor_gen, pq_gen, ec_init_tables, ec_encode_data, _lib: lib });
                }
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!("ISA-L not found ({last}); install libisal-dev (scripts/setup) to compare"))
}

fn check_isal_shape(blocks: &[*mut u8], len: usize) {
    assert!(len.is_multiple_of(32), "ISA-L needs lengths that are multiples of 32");
    assert!(blocks.iter().all(|p| (*p as usize).is_multiple_of(32)), "ISA-L needs 32-byte aligned blocks");
    assert!(len <= c_int::MAX as usize);
}

impl Isal {
    /// `blocks` = sources then P. Returns ISA-L's status (0 = success).
    pub fn xor_gen(&self, blocks: &mut [*mut u8], len: usize) -> i32 {
        check_isal_shape(blocks, len);
        // SAFETY: shape checked; every pointer covers len bytes (caller's AlignedBufs).
        unsafe { (self.xor_gen)(blocks.len() as c_int, len as c_int, blocks.as_mut_ptr() as *mut *mut c_void) }
    }

    /// `blocks` = sources then P then Q. Returns ISA-L's status (0 = success).
    pub fn pq_gen(&self, blocks: &mut [*mut u8], len: usize) -> i32 {
        check_isal_shape(blocks, len);
        // SAFETY: as xor_gen.
        unsafe { (self.pq_gen)(blocks.len() as c_int, len as c_int, blocks.as_mut_ptr() as *mut *mut c_void) }
    }

    /// Expands a `rows × k` coefficient matrix into ISA-L's multiplication tables.
    pub fn init_tables(&self, k: usize, rows: usize, matrix: &[u8]) -> Vec<u8> {
        assert_eq!(matrix.len(), k * rows);
        let mut a = matrix.to_vec();
        let mut tables = vec![0u8; 32 * k * rows];
        // SAFETY: a holds k*rows bytes, tables 32*k*rows, as ec_init_tables requires.
        unsafe { (self.ec_init_tables)(k as c_int, rows as c_int, a.as_mut_ptr(), tables.as_mut_ptr()) }
        tables
    }

    /// outputs[r] = Σ_j matrix[r][j]·sources[j] with tables from [`Isal::init_tables`].
    pub fn encode(&self, tables: &mut [u8], sources: &mut [*mut u8], outputs: &mut [*mut u8], len: usize) {
        assert_eq!(tables.len(), 32 * sources.len() * outputs.len());
        assert!(len <= c_int::MAX as usize);
        // SAFETY: table size matches k=sources, rows=outputs; every pointer covers len bytes.
        unsafe {
            (self.ec_encode_data)(
                len as c_int,
                sources.len() as c_int,
                outputs.len() as c_int,
                tables.as_mut_ptr(),
                sources.as_mut_ptr(),
                outputs.as_mut_ptr(),
            )
        }
    }
}
