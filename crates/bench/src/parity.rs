//! `uraid bench parity`: every parity kernel this CPU supports, per operation, for several
//! stripe shapes, cache-warm and cache-cold, next to ISA-L and memcpy measured in the same run.
//!
//! Speeds are MB/s (10^6 bytes per second) of *data* bytes processed (n × block), for us and
//! for ISA-L alike, so the ratios compare equal work. Warm: one stripe reused (it fits in
//! L2). Cold: a pool of distinct stripes of at least 256 MiB visited in turn, so every call
//! reads from memory. memcpy copies the same data bytes (each block into the stripe's P
//! buffer): the memory ceiling. Each figure is the best of 3 interleaved rounds.

use crate::isal::{isal, Isal};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
use serde::Serialize;
use std::time::{Duration, Instant};
use uraid_parity::buffer::AlignedBuf;
use uraid_parity::{dispatch, gf, selection, Block, Kernel, Op};

/// What to measure.
#[derive(Clone, Debug)]
pub struct ParityBenchConfig {
    pub data_blocks: Vec<usize>,
    pub block_bytes: Vec<usize>,
    /// Working set of the cold runs (0 = skip them).
    pub cold_working_set_bytes: usize,
    pub time_per_point: Duration,
    /// Restrict to these kernels (names); empty = all supported.
    pub kernels: Vec<String>,
    pub ops: Vec<Op>,
}

impl Default for ParityBenchConfig {
    fn default() -> Self {
        ParityBenchConfig {
            data_blocks: vec![4, 8, 10],
            block_bytes: vec![4096, 65536],
            cold_working_set_bytes: 256 << 20,
            time_per_point: Duration::from_millis(25),
            kernels: vec![],
            ops: Op::ALL.to_vec(),
        }
    }
}

/// One measurement, in the JSON shape the issue fixes.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    pub op: String,
    pub kernel: String,
    pub data_blocks: usize,
    pub block_bytes: usize,
    pub working_set_bytes: usize,
    pub mb_per_s: f64,
    pub chosen: bool,
    pub isal_mb_per_s: Option<f64>,
}

const MAX_BENCH_BLOCKS: usize = 32;
/// Interleaved measurement rounds per point; the best of each contestant is reported.
const ROUNDS: usize = 3;

/// n data blocks then P then Q, 64-byte aligned.
struct BenchStripe {
    blocks: Vec<AlignedBuf>,
}

impl BenchStripe {
    fn new(n: usize, len: usize, fill: u8) -> Self {
        let blocks = (0..n + 2)
            .map(|i| {
                let mut b = AlignedBuf::zeroed(len, 4096);
                // Touch every page so the pool really lives in memory (not the zero page).
                b.iter_mut().enumerate().for_each(|(j, x)| *x = fill ^ (i as u8) ^ (j as u8));
                b
            })
            .collect();
        BenchStripe { blocks }
    }

    fn run_ours(&mut self, k: &Kernel, op: Op) {
        let n = self.blocks.len() - 2;
        let (data, pq) = self.blocks.split_at_mut(n);
        let (p, q) = pq.split_at_mut(1);
        let (p, q) = (&mut *p[0], &mut *q[0]);
        let result = match op {
            Op::GenP | Op::GenPq | Op::UpdatePq => {
                let mut refs: [&[u8]; MAX_BENCH_BLOCKS] = [&[]; MAX_BENCH_BLOCKS];
                for (r, d) in refs.iter_mut().zip(data.iter()) {
                    *r = d;
                }
                match op {
                    Op::GenP => k.gen_p(&refs[..n], p),
                    Op::GenPq => k.gen_pq(&refs[..n], p, q),
                    _ => k.update_pq(n / 2, &refs[n / 2..n], p, q),
                }
            }
            _ => {
                let mut refs: [&mut [u8]; MAX_BENCH_BLOCKS] = std::array::from_fn(|_| Default::default());
                for (r, d) in refs.iter_mut().zip(data.iter_mut()) {
                    *r = d;
                }
                k.recover_raid6(&mut refs[..n], p, q, &lost_blocks(op, n))
            }
        };
        debug_assert!(result.is_ok());
    }

    fn run_memcpy(&mut self) {
        let n = self.blocks.len() - 2;
        let (data, pq) = self.blocks.split_at_mut(n);
        for d in data.iter() {
            pq[0].copy_from_slice(d);
        }
    }

    fn pointers(&mut self) -> Vec<*mut u8> {
        self.blocks.iter_mut().map(|b| b.as_mut_ptr()).collect()
    }
}

/// Which blocks each recovery operation loses in the bench (both ends of the stripe).
fn lost_blocks(op: Op, n: usize) -> Vec<Block> {
    match op {
        Op::Recov2Data => vec![Block::Data(0), Block::Data(n - 1)],
        Op::RecovDataP => vec![Block::Data(n - 1), Block::P],
        Op::RecovDataQ => vec![Block::Data(0), Block::Q],
        _ => vec![],
    }
}

fn block_index(b: Block, n: usize) -> usize {
    match b {
        Block::Data(i) => i,
        Block::P => n,
        Block::Q => n + 1,
    }
}

/// The decode a program using ISA-L's erasure-code API would run: rows of the inverse of the
/// surviving part of the RAID6 encoding matrix, applied with `ec_encode_data`.
/// Returns (indices of the n surviving blocks used as sources, coefficient rows per lost block).
pub fn raid6_decode_matrix(n: usize, lost: &[Block]) -> (Vec<usize>, Vec<Vec<u8>>) {
    let encode_row = |b: usize| -> Vec<u8> {
        (0..n)
            .map(|j| match b {
                b if b < n => (b == j) as u8,
                b if b == n => 1,
                _ => gf::pow2(j),
            })
            .collect()
    };
    let lost_idx: Vec<usize> = lost.iter().map(|b| block_index(*b, n)).collect();
    let survivors: Vec<usize> = (0..n + 2).filter(|i| !lost_idx.contains(i)).take(n).collect();
    let m: Vec<Vec<u8>> = survivors.iter().map(|&s| encode_row(s)).collect();
    let inv = invert(m).expect("any n rows of the RAID6 encoding matrix are independent");
    let rows = lost_idx
        .iter()
        .map(|&l| {
            let e = encode_row(l);
            (0..n).map(|c| (0..n).fold(0u8, |acc, j| acc ^ gf::mul(e[j], inv[j][c]))).collect()
        })
        .collect();
    (survivors, rows)
}

/// Gauss-Jordan inverse over GF(2^8).
fn invert(mut m: Vec<Vec<u8>>) -> Option<Vec<Vec<u8>>> {
    let n = m.len();
    let mut inv: Vec<Vec<u8>> = (0..n).map(|i| (0..n).map(|j| (i == j) as u8).collect()).collect();
    for col in 0..n {
        let pivot = (col..n).find(|&r| m[r][col] != 0)?;
        m.swap(col, pivot);
        inv.swap(col, pivot);
        let scale = gf::inv(m[col][col]);
        for j in 0..n {
            m[col][j] = gf::mul(m[col][j], scale);
            inv[col][j] = gf::mul(inv[col][j], scale);
        }
        for r in 0..n {
            let f = m[r][col];
            if r != col && f != 0 {
                for j in 0..n {
                    m[r][j] ^= gf::mul(f, m[col][j]);
                    inv[r][j] ^= gf::mul(f, inv[col][j]);
                }
            }
        }
    }
    Some(inv)
}

/// The ISA-L call for `op`, prepared once per shape (tables are built outside the timing,
/// as a real user of ISA-L would cache them).
enum IsalCall {
    Xor,
    Pq,
    Decode { sources: Vec<usize>, outputs: Vec<usize>, tables: Vec<u8> },
}

impl IsalCall {
    fn for_op(lib: &Isal, op: Op, n: usize) -> Option<IsalCall> {
        match op {
            Op::GenP => Some(IsalCall::Xor),
            // ISA-L's pq_gen needs at least 2 data blocks... and it has no xor_syndrome.
            Op::GenPq if n >= 2 => Some(IsalCall::Pq),
            Op::Recov2Data | Op::RecovDataP | Op::RecovDataQ => {
                let lost = lost_blocks(op, n);
                let (sources, rows) = raid6_decode_matrix(n, &lost);
                let flat: Vec<u8> = rows.concat();
                let tables = lib.init_tables(n, rows.len(), &flat);
                let outputs = lost.iter().map(|b| block_index(*b, n)).collect();
                Some(IsalCall::Decode { sources, outputs, tables })
            }
            _ => None,
        }
    }

    fn run(&mut self, lib: &Isal, stripe: &mut BenchStripe, len: usize) {
        let n = stripe.blocks.len() - 2;
        let mut ptrs = stripe.pointers();
        match self {
            IsalCall::Xor => {
                let mut v: Vec<*mut u8> = ptrs[..=n].to_vec();
                lib.xor_gen(&mut v, len);
            }
            IsalCall::Pq => {
                lib.pq_gen(&mut ptrs, len);
            }
            IsalCall::Decode { sources, outputs, tables } => {
                let mut src: Vec<*mut u8> = sources.iter().map(|&i| ptrs[i]).collect();
                let mut out: Vec<*mut u8> = outputs.iter().map(|&i| ptrs[i]).collect();
                lib.encode(tables, &mut src, &mut out, len);
            }
        }
    }
}

/// Times `call` over `pool` (round-robin) for about `budget`; MB/s of `bytes_per_call`.
fn time_calls(pool: &mut [BenchStripe], budget: Duration, bytes_per_call: usize, mut call: impl FnMut(&mut BenchStripe)) -> f64 {
    call(&mut pool[0]);
    let start = Instant::now();
    let mut calls = 0usize;
    loop {
        for _ in 0..8 {
            let i = calls % pool.len();
            call(&mut pool[i]);
            calls += 1;
        }
        let t = start.elapsed();
        if t >= budget {
            return (calls * bytes_per_call) as f64 / t.as_secs_f64() / 1e6;
        }
    }
}

/// Runs the bench; `progress` gets a line per shape.
pub fn run(cfg: &ParityBenchConfig, progress: &mut dyn FnMut(&str)) -> Vec<Record> {
    let sel = selection();
    let kernels: Vec<&Kernel> =
        dispatch::supported_kernels().filter(|k| cfg.kernels.is_empty() || cfg.kernels.iter().any(|n| n == k.name)).collect();
    let lib = isal().ok();
    let mut records = Vec::new();
    let mut shapes = Vec::new();
    for &cold in &[false, true] {
        if cold && cfg.cold_working_set_bytes == 0 {
            continue;
        }
        for &len in &cfg.block_bytes {
            for &n in &cfg.data_blocks {
                shapes.push((cold, len, n));
            }
        }
    }
    for (i, &(cold, len, n)) in shapes.iter().enumerate() {
        let stripe_bytes = (n + 2) * len;
        let count = if cold { cfg.cold_working_set_bytes.div_ceil(stripe_bytes) } else { 1 };
        progress(&format!("[{}/{}] {} data × {} KiB, {}", i + 1, shapes.len(), n, len / 1024, if cold { "cold" } else { "warm" }));
        let mut pool: Vec<BenchStripe> = (0..count).map(|s| BenchStripe::new(n, len, s as u8)).collect();
        let working_set_bytes = count * stripe_bytes;
        let data_bytes = n * len;
        for &op in &cfg.ops {
            // Peers are measured interleaved, ROUNDS times, keeping each one's best (as the
            // kernel's boot benchmark reports its best): a noisy neighbour on a shared host
            // then hurts no contestant more than another.
            let mut isal_call = lib.and_then(|lib| IsalCall::for_op(lib, op, n).map(|c| (lib, c)));
            let ours: Vec<&Kernel> = kernels.iter().copied().filter(|k| k.implements(op)).collect();
            let mut best_ours = vec![0f64; ours.len()];
            let mut best_isal: Option<f64> = None;
            for _ in 0..ROUNDS {
                if let Some((lib, call)) = isal_call.as_mut() {
                    let mbs = time_calls(&mut pool, cfg.time_per_point, data_bytes, |s| call.run(lib, s, len));
                    best_isal = Some(best_isal.map_or(mbs, |b| b.max(mbs)));
                }
                for (k, best) in ours.iter().zip(best_ours.iter_mut()) {
                    let mbs = time_calls(&mut pool, cfg.time_per_point, data_bytes, |s| s.run_ours(k, op));
                    *best = best.max(mbs);
                }
            }
            for (k, mbs) in ours.iter().zip(best_ours) {
                records.push(Record {
                    op: op.name().into(),
                    kernel: k.name.into(),
                    data_blocks: n,
                    block_bytes: len,
                    working_set_bytes,
                    mb_per_s: mbs,
                    chosen: sel.kernel_for(op, len).name == k.name,
                    isal_mb_per_s: best_isal,
                });
            }
        }
        let mbs = time_calls(&mut pool, cfg.time_per_point, data_bytes, |s| s.run_memcpy());
        records.push(Record {
            op: "memcpy".into(),
            kernel: "memcpy".into(),
            data_blocks: n,
            block_bytes: len,
            working_set_bytes,
            mb_per_s: mbs,
            chosen: false,
            isal_mb_per_s: None,
        });
    }
    records
}

/// Human tables: per warmth, rows = op × kernel (chosen marked `*`), then ISA-L and the
/// chosen/ISA-L ratio; columns = block size × data blocks.
pub fn render(records: &[Record], cold_working_set_bytes: usize) -> String {
    let mut out = String::new();
    let mut shapes: Vec<(usize, usize)> = records.iter().map(|r| (r.block_bytes, r.data_blocks)).collect();
    shapes.sort();
    shapes.dedup();
    for cold in [false, true] {
        let recs: Vec<&Record> = records.iter().filter(|r| is_cold(r) == cold).collect();
        if recs.is_empty() {
            continue;
        }
        out.push_str(&if cold {
            format!("\nCold: pool of distinct stripes, working set ≥ {} MiB (MB/s of data)\n", cold_working_set_bytes >> 20)
        } else {
            "\nWarm: one stripe, cache-resident (MB/s of data)\n".to_string()
        });
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED);
        let mut header = vec![Cell::new("op"), Cell::new("kernel")];
        header.extend(shapes.iter().map(|(len, n)| Cell::new(format!("{}K×{}", len / 1024, n))));
        table.set_header(header);
        let mut ops: Vec<&str> = Vec::new();
        for r in &recs {
            if !ops.contains(&r.op.as_str()) {
                ops.push(&r.op);
            }
        }
        for op in ops {
            let mut kernels: Vec<&str> = Vec::new();
            for r in recs.iter().filter(|r| r.op == op) {
                if !kernels.contains(&r.kernel.as_str()) {
                    kernels.push(&r.kernel);
                }
            }
            let find =
                |k: &str, s: &(usize, usize)| recs.iter().find(|r| r.op == op && r.kernel == k && (r.block_bytes, r.data_blocks) == *s);
            for k in &kernels {
                let chosen = recs.iter().any(|r| r.op == op && r.kernel == *k && r.chosen);
                let mut row = vec![Cell::new(op), Cell::new(format!("{}{}", k, if chosen { " *" } else { "" }))];
                row.extend(shapes.iter().map(|s| num_cell(find(k, s).map(|r| r.mb_per_s))));
                table.add_row(row);
            }
            let chosen_rec = |s: &(usize, usize)| recs.iter().find(|r| r.op == op && r.chosen && (r.block_bytes, r.data_blocks) == *s);
            if shapes.iter().any(|s| chosen_rec(s).and_then(|r| r.isal_mb_per_s).is_some()) {
                let mut row = vec![Cell::new(op), Cell::new("isa-l")];
                row.extend(shapes.iter().map(|s| num_cell(chosen_rec(s).and_then(|r| r.isal_mb_per_s))));
                table.add_row(row);
                let mut row = vec![Cell::new(op), Cell::new("chosen ÷ isa-l")];
                row.extend(shapes.iter().map(|s| {
                    let ratio = chosen_rec(s).and_then(|r| r.isal_mb_per_s.map(|i| r.mb_per_s / i));
                    Cell::new(ratio.map_or("-".into(), |x| format!("{x:.2}×"))).set_alignment(CellAlignment::Right)
                }));
                table.add_row(row);
            }
        }
        out.push_str(&table.to_string());
        out.push('\n');
    }
    out
}

fn is_cold(r: &Record) -> bool {
    r.working_set_bytes > (r.data_blocks + 2) * r.block_bytes
}

fn num_cell(v: Option<f64>) -> Cell {
    Cell::new(v.map_or("-".to_string(), |x| format!("{x:.0}"))).set_alignment(CellAlignment::Right)
}
