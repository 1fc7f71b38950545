//! The simulator over 1000 seeds of small episodes (RAID1/5/6/10), every invariant
//! checked strictly (README.md, "Invariants").

use uraid_sim::{run_seed, Limits};

#[test]
fn a_thousand_seeds_hold_every_invariant() {
    let limits = Limits::quick();
    let start = std::time::Instant::now();
    let mut failures = Vec::new();
    for seed in 0..1000u64 {
        if let Err(f) = run_seed(seed, &limits, false) {
            eprintln!("{f}\n");
            failures.push(seed);
        }
    }
    eprintln!("1000 seeds in {:.1} s", start.elapsed().as_secs_f64());
    assert!(failures.is_empty(), "failing seeds {failures:?}; reproduce each with: cargo run -p uraid-sim --release -- --seed N --quick");
}
