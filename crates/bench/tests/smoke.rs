//! Every workload on tiny sizes: the JSON fields exist, the values are positive, and the
//! report folder holds what `--report` promises. Not a timing test: only shapes are checked.

use std::time::{Duration, Instant};
use uraid_bench::report::{Report, SCHEMA};
use uraid_bench::suite::{self, SuiteConfig, Workload};
use uraid_core::geometry::Level;

fn tiny(dir: &std::path::Path) -> SuiteConfig {
    let mut c = SuiteConfig::defaults(dir.to_path_buf());
    // RAID6 covers the two-member failure path; RAID1 the chunkless one; RAID0 no redundancy.
    c.levels = vec![Level::Raid0, Level::Raid1, Level::Raid6];
    c.region_bytes = 8 << 20;
    c.chunk_bytes = 64 << 10;
    c.time_per_point = Duration::from_millis(40);
    c.seq_chunks = vec![32 << 10, 64 << 10];
    c.seq_blocks = vec![4 << 10, 256 << 10];
    c.mixed_max_readers = 2;
    c.mixed_read_sizes = vec![64 << 10];
    c.mixed_append_interval = Duration::from_millis(10);
    c.tp_bytes_per_job = 1 << 20;
    c.tp_record = 64 << 10;
    c
}

#[test]
fn every_workload_runs_and_the_report_is_complete() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tiny(tmp.path());
    let res = suite::run(&cfg, &mut |_| {}).unwrap();
    let report = Report {
        schema: SCHEMA,
        uraid_version: env!("CARGO_PKG_VERSION").into(),
        machine: uraid_bench::machine::Machine::probe(),
        backing: uraid_bench::machine::Backing::describe(tmp.path(), cfg.region_bytes, 1, "file".into()),
        parity_kernels: uraid_bench::machine::parity_kernels(),
        config: cfg.record(),
        measurements: res.measurements,
        rebuild_timelines: res.timelines,
        ..Default::default()
    };
    let json: serde_json::Value = serde_json::to_value(&report).unwrap();
    for field in ["schema", "uraid_version", "machine", "backing", "parity_kernels", "config", "measurements", "rebuild_timelines"] {
        assert!(json.get(field).is_some(), "missing {field}");
    }
    assert!(!json["parity_kernels"].as_array().unwrap().is_empty());
    assert!(json["machine"]["cores"].as_u64().unwrap() >= 1);
    let ms = json["measurements"].as_array().unwrap();
    for w in Workload::ALL {
        assert!(ms.iter().any(|m| m["workload"] == w.name()), "no {} measurement", w.name());
    }
    for m in ms {
        for f in ["workload", "target", "state", "op", "block_bytes", "bytes", "secs", "mb_per_s", "iops"] {
            assert!(m.get(f).is_some(), "{f} missing in {m}");
        }
        // A phase too short to measure says so, with a reason, and carries no numbers; every
        // other row carries real ones. Never a zero dressed up as a measurement.
        if let Some(why) = m.get("not_measured") {
            assert!(why.as_str().is_some_and(|w| w.len() > 10), "{m}");
            assert_eq!(m["bytes"].as_u64(), Some(0), "{m}");
            assert!(m.get("latency").is_none_or(|l| l.is_null()), "{m}");
            assert!(m["workload"] == "rebuild", "only a rebuild phase may go unmeasured: {m}");
            continue;
        }
        assert!(m["bytes"].as_u64().unwrap() > 0, "{m}");
        assert!(m["secs"].as_f64().unwrap() > 0.0, "{m}");
        assert!(m["mb_per_s"].as_f64().unwrap() > 0.0, "{m}");
        if m["op"] != "recovery" {
            assert!(m["iops"].as_f64().unwrap() > 0.0, "{m}");
            assert!(m["latency"]["p99_us"].as_f64().unwrap() > 0.0, "{m}");
        }
    }
    // Chunk sweep, levels, states, peer rows and ratios.
    let has = |f: &dyn Fn(&serde_json::Value) -> bool| ms.iter().any(f);
    assert!(has(&|m| m["target"] == "raid6" && m["workload"] == "seq" && m["chunk_bytes"] == 32768));
    assert!(has(&|m| m["target"] == "raid6" && m["state"] == "degraded-2"));
    assert!(has(&|m| m["target"] == "raid1" && m["state"] == "degraded-1" && m["op"] == "read"));
    assert!(!has(&|m| m["target"] == "raid0" && m["workload"] == "degraded"), "raid0 cannot degrade");
    assert!(has(&|m| m["target"] == "raid6" && m["state"] == "rebuilding" && m["op"] == "recovery"));
    // The phase after the rebuild is delimited by events, so it is always measured.
    for t in ["raid1", "raid6"] {
        assert!(
            has(&|m| m["target"] == t && m["state"] == "after-rebuild" && m["op"] == "randread" && m.get("not_measured").is_none()),
            "{t} after-rebuild not measured"
        );
    }
    assert!(has(&|m| m["target"] == "peer" && m["op"] == "mixed-read" && m["readers"] == 2));
    assert!(has(&|m| m["target"] == "raid1" && m["workload"] == "throughput" && m["per_job"]["jobs"] == 2));
    assert!(has(&|m| m["target"] == "raid6" && m["workload"] == "rand" && m["peer_ratio"].as_f64().is_some_and(|r| r > 0.0)));
    assert_eq!(report.rebuild_timelines.len(), 2, "raid1 and raid6 rebuilt");

    let out = tmp.path().join("report");
    let plots = report.write_dir(&out).unwrap();
    for f in [
        "report.json",
        "measurements.csv",
        "summary.md",
        "index.html",
        "fio/seq.fio",
        "fio/rand.fio",
        "fio/mixed.fio",
        "fio/throughput.fio",
        "fio/degraded.fio",
        "fio/rebuild.fio",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    if uraid_bench::plot::ensure_font().is_ok() {
        for stem in ["seq-raid6", "mixed-64K", "rebuild-latency"] {
            assert!(plots.iter().any(|p| p == stem), "{stem} not in {plots:?}");
            assert!(std::fs::metadata(out.join(format!("{stem}.png"))).unwrap().len() > 1000);
            assert!(std::fs::read_to_string(out.join(format!("{stem}.svg"))).unwrap().contains("<svg"));
        }
    }
    let back: Report = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(back.measurements.len(), report.measurements.len());
    assert!(uraid_bench::report::compare(&report, &back).unwrap().contains("1.00×"));
    // fio parses every job file, when fio is installed (scripts/setup installs it).
    if std::process::Command::new("fio").arg("--version").output().is_ok() {
        for w in ["seq", "rand", "mixed", "throughput", "degraded", "rebuild"] {
            let o = std::process::Command::new("fio")
                .arg("--parse-only")
                .arg(out.join(format!("fio/{w}.fio")))
                .env("TARGET", tmp.path().join("fio-target"))
                .output()
                .unwrap();
            assert!(o.status.success(), "fio rejects {w}.fio: {}", String::from_utf8_lossy(&o.stderr));
        }
    }
    eprintln!("smoke: {:.1} s", started.elapsed().as_secs_f64());
}
