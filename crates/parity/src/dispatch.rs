//! Kernel table and the start-up choice, in the manner of Linux `lib/raid6/algos.c`: every
//! kernel the CPU supports is first checked against the scalar reference, then timed briefly
//! per operation, and the fastest is used for that operation. Unlike the kernel we time two
//! block sizes — 8 × 4 KiB (L1-resident, the kernel's probe) and 8 × 64 KiB (L2-resident) —
//! because the best unroll differs: 4-way wins on small blocks, 2-way on large ones
//! (`uraid bench parity` shows it). Calls use the winner of their size class.
//! `URAID_PARITY_KERNEL=<name>` forces one kernel for every operation it implements.

use crate::kernels::{self, *};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The operations a kernel can implement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    GenP,
    GenPq,
    UpdatePq,
    Recov2Data,
    RecovDataP,
    RecovDataQ,
}

impl Op {
    pub const ALL: [Op; 6] = [Op::GenP, Op::GenPq, Op::UpdatePq, Op::Recov2Data, Op::RecovDataP, Op::RecovDataQ];

    pub fn name(self) -> &'static str {
        match self {
            Op::GenP => "gen_p",
            Op::GenPq => "gen_pq",
            Op::UpdatePq => "update_pq",
            Op::Recov2Data => "recov_2data",
            Op::RecovDataP => "recov_datap",
            Op::RecovDataQ => "recov_dataq",
        }
    }
}

/// One implementation family (vector ISA × unroll). Operations it lacks are `None`.
pub struct Kernel {
    pub name: &'static str,
    detect: fn() -> bool,
    pub(crate) gen_p: Option<GenPFn>,
    pub(crate) gen_pq: GenPqFn,
    pub(crate) update_pq: UpdatePqFn,
    pub(crate) recov_2data: Recov2DataFn,
    pub(crate) recov_datap: RecovDataPFn,
    pub(crate) recov_dataq: RecovDataQFn,
}

impl Kernel {
    /// Whether this CPU can run the kernel.
    pub fn is_supported(&self) -> bool {
        (self.detect)()
    }

    pub fn implements(&self, op: Op) -> bool {
        op != Op::GenP || self.gen_p.is_some()
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

macro_rules! kernel {
    ($name:literal, $path:path, $detect:expr, gen_p: $with_p:tt) => {{
        use $path as k;
        Kernel {
            name: $name,
            detect: $detect,
            gen_p: kernel!(@p $with_p k),
            gen_pq: k::gen_pq,
            update_pq: k::update_pq,
            recov_2data: k::recov_2data,
            recov_datap: k::recov_datap,
            recov_dataq: k::recov_dataq,
        }
    }};
    (@p true $k:ident) => { Some($k::gen_p as GenPFn) };
    (@p false $k:ident) => { None };
}

#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
}
#[cfg(target_arch = "x86_64")]
fn has_avx512bw() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")
}
#[cfg(target_arch = "x86_64")]
fn has_avx2_gfni() -> bool {
    has_avx2() && is_x86_feature_detected!("gfni")
}
#[cfg(target_arch = "x86_64")]
fn has_avx512_gfni() -> bool {
    has_avx512bw() && is_x86_feature_detected!("gfni")
}

/// Every kernel compiled in, supported here or not. GFNI kernels leave gen_p out: plain XOR
/// is the same instruction stream as their non-GFNI siblings.
pub fn all_kernels() -> &'static [Kernel] {
    static ALL: OnceLock<Vec<Kernel>> = OnceLock::new();
    ALL.get_or_init(|| {
        #[allow(unused_mut)]
        let mut v = vec![
            kernel!("scalar", kernels::portable::scalar, || true, gen_p: true),
            kernel!("swar64", kernels::portable::swar64, || true, gen_p: true),
        ];
        #[cfg(target_arch = "x86_64")]
        v.extend([
            kernel!("avx2x2", kernels::x86::avx2x2, has_avx2, gen_p: true),
            kernel!("avx2x4", kernels::x86::avx2x4, has_avx2, gen_p: true),
            kernel!("avx512x2", kernels::x86::avx512x2, has_avx512bw, gen_p: true),
            kernel!("avx512x4", kernels::x86::avx512x4, has_avx512bw, gen_p: true),
            kernel!("avx2gfni_x4", kernels::x86::avx2gfni_x4, has_avx2_gfni, gen_p: false),
            kernel!("avx512gfni_x2", kernels::x86::avx512gfni_x2, has_avx512_gfni, gen_p: false),
            kernel!("avx512gfni_x4", kernels::x86::avx512gfni_x4, has_avx512_gfni, gen_p: false),
        ]);
        v
    })
}

/// Kernels this CPU supports.
pub fn supported_kernels() -> impl Iterator<Item = &'static Kernel> {
    all_kernels().iter().filter(|k| k.is_supported())
}

pub fn kernel_by_name(name: &str) -> Option<&'static Kernel> {
    all_kernels().iter().find(|k| k.name == name)
}

/// Block sizes timed separately at start-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeClass {
    /// Blocks shorter than [`LARGE_BLOCK_BYTES`].
    Small,
    Large,
}

/// Blocks of at least this many bytes use the kernel chosen for [`SizeClass::Large`].
pub const LARGE_BLOCK_BYTES: usize = 16 * 1024;

impl SizeClass {
    pub fn of(block_bytes: usize) -> SizeClass {
        if block_bytes >= LARGE_BLOCK_BYTES {
            SizeClass::Large
        } else {
            SizeClass::Small
        }
    }
    fn probe_bytes(self) -> usize {
        match self {
            SizeClass::Small => 4096,
            SizeClass::Large => 65536,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            SizeClass::Small => "4K",
            SizeClass::Large => "64K",
        }
    }
}

/// The measured choice for one operation and size class.
#[derive(Clone, Debug)]
pub struct Choice {
    pub op: Op,
    pub size: SizeClass,
    pub kernel: &'static Kernel,
    /// Measured speed of every candidate, MB/s of data, in table order.
    pub candidates: Vec<(&'static str, f64)>,
    pub forced: bool,
}

/// The kernels in use, one per operation.
#[derive(Debug)]
pub struct Selection {
    pub choices: Vec<Choice>,
}

impl Selection {
    /// The kernel for `op` on blocks of `block_bytes`.
    pub fn kernel_for(&self, op: Op, block_bytes: usize) -> &'static Kernel {
        let size = SizeClass::of(block_bytes);
        self.choices.iter().find(|c| c.op == op && c.size == size).map(|c| c.kernel).unwrap_or(&all_kernels()[0])
    }

    /// Lines in the style of the kernel's boot log (`raid6: avx512x4 gen() 31460 MB/s`).
    pub fn log_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for c in &self.choices {
            for (name, mbs) in &c.candidates {
                lines.push(format!("parity: {:<14} {}() {:>3} {:>7.0} MB/s", name, c.op.name(), c.size.name(), mbs));
            }
            lines.push(format!(
                "parity: using {} for {}() on {} blocks{}",
                c.kernel.name,
                c.op.name(),
                c.size.name(),
                if c.forced { " (forced by URAID_PARITY_KERNEL)" } else { "" }
            ));
        }
        lines
    }
}

static SELECTION: OnceLock<Selection> = OnceLock::new();

/// The selection, made on first use.
pub fn selection() -> &'static Selection {
    SELECTION.get_or_init(select)
}

const PROBE_BLOCKS: usize = 8;
const PROBE_TIME: Duration = Duration::from_millis(2);

fn select() -> Selection {
    let forced_name = std::env::var("URAID_PARITY_KERNEL").ok().filter(|s| !s.is_empty());
    let forced = forced_name.as_deref().and_then(|n| {
        let k = kernel_by_name(n);
        match k {
            Some(k) if k.is_supported() => Some(k),
            Some(_) => {
                eprintln!("parity: URAID_PARITY_KERNEL={n} is not supported by this CPU; measuring instead");
                None
            }
            None => {
                let names: Vec<_> = all_kernels().iter().map(|k| k.name).collect();
                eprintln!("parity: URAID_PARITY_KERNEL={n} is unknown (kernels: {}); measuring instead", names.join(", "));
                None
            }
        }
    });
    let mut choices = Vec::new();
    for size in [SizeClass::Small, SizeClass::Large] {
        let stripe = crate::testdata::Stripe::random(PROBE_BLOCKS, size.probe_bytes(), 0x5eed);
        for op in Op::ALL {
            if let Some(k) = forced.filter(|k| k.implements(op)) {
                choices.push(Choice { op, size, kernel: k, candidates: Vec::new(), forced: true });
                continue;
            }
            let mut candidates = Vec::new();
            let mut best: Option<(&'static Kernel, f64)> = None;
            for k in supported_kernels().filter(|k| k.implements(op)) {
                // A kernel that disagrees with the reference is never chosen (and tests fail).
                if !crate::testdata::kernel_matches_reference(k, op, &stripe) {
                    eprintln!("parity: {} {}() disagrees with the scalar reference; not used", k.name, op.name());
                    continue;
                }
                let mbs = measure(k, op, &stripe, PROBE_TIME);
                candidates.push((k.name, mbs));
                if best.is_none_or(|(_, b)| mbs > b) {
                    best = Some((k, mbs));
                }
            }
            let kernel = best.map(|(k, _)| k).unwrap_or(&all_kernels()[0]);
            choices.push(Choice { op, size, kernel, candidates, forced: false });
        }
    }
    Selection { choices }
}

/// Runs `op` with kernel `k` on `stripe` for about `budget` and returns MB/s of data blocks.
pub fn measure(k: &Kernel, op: Op, stripe: &crate::testdata::Stripe, budget: Duration) -> f64 {
    let mut work = stripe.clone();
    let bytes_per_call = (stripe.data.len() * stripe.len) as f64;
    // Warm up once so the first call's page faults are not timed.
    work.run(k, op);
    let start = Instant::now();
    let mut calls = 0u64;
    loop {
        for _ in 0..16 {
            work.run(k, op);
        }
        calls += 16;
        let elapsed = start.elapsed();
        if elapsed >= budget {
            return bytes_per_call * calls as f64 / elapsed.as_secs_f64() / 1e6;
        }
    }
}
