//! `bench exports` end to end on a tiny array: every path produces positive figures.
//! Skipped (with the reason printed) without fio, or without root or /dev/fuse for FUSE.

use std::time::Duration;
use uraid_bench::exports::{fio_available, run, ExportsConfig};
use uraid_core::geometry::Level;

#[test]
fn every_path_reports_positive_throughput() {
    if !fio_available() {
        uraid_testkit::skip("bench exports_smoke", "fio not installed (scripts/setup installs it)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = ExportsConfig {
        dir: dir.path().to_path_buf(),
        level: Level::Raid5,
        members: 4,
        chunk_bytes: 64 * 1024,
        region_bytes: 32 << 20,
        time: Duration::from_secs(1),
    };
    let records = run(&cfg, &mut |_| {}).expect("bench exports");
    for path in ["in-process", "nbd", "plain-file"] {
        let rows: Vec<_> = records.iter().filter(|r| r.path == path).collect();
        assert_eq!(rows.len(), 4, "{path}: {records:?}");
        assert!(rows.iter().all(|r| r.mb_per_s > 0.0 && r.iops > 0.0), "{path}: {rows:?}");
    }
    let fuse = records.iter().filter(|r| r.path == "fuse").count();
    assert!(fuse == 4 || !std::path::Path::new("/dev/fuse").exists(), "FUSE rows missing: {records:?}");
}
