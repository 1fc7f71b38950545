//! `uraid bench exports`: the same jobs in-process, through NBD (fio's nbd engine against
//! our server on a unix socket), through the FUSE file (fio, O_DIRECT), and on a plain file
//! in the same folder — so the cost of each export path shows as a ratio to the engine.
//! fio is the load generator for every non-in-process row (scripts/setup installs it).

use crate::suite::{deadline, prefill, rand_run, seq_pass, RandSpec};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use uraid_core::geometry::Level;

#[derive(Clone, Debug)]
pub struct ExportsConfig {
    pub dir: PathBuf,
    pub level: Level,
    pub members: usize,
    pub chunk_bytes: u32,
    /// Array region the jobs run over.
    pub region_bytes: u64,
    /// Time per job.
    pub time: Duration,
}

#[derive(Clone, Debug, Serialize)]
pub struct ExportRecord {
    pub job: String,
    /// in-process, nbd, fuse, plain-file
    pub path: String,
    pub mb_per_s: f64,
    pub iops: f64,
    /// This path's MB/s over the in-process figure (None for in-process itself).
    pub vs_in_process: Option<f64>,
}

struct Job {
    name: &'static str,
    block: u64,
    write: bool,
    random: bool,
}

const JOBS: [Job; 4] = [
    Job { name: "seq-write 1M", block: 1 << 20, write: true, random: false },
    Job { name: "seq-read 1M", block: 1 << 20, write: false, random: false },
    Job { name: "rand-write 4K x4", block: 4096, write: true, random: true },
    Job { name: "rand-read 4K x4", block: 4096, write: false, random: true },
];

/// Runs fio with `args` and returns (MB/s, IOPS) of its one (group-reported) job.
fn fio(args: &[String]) -> Result<(f64, f64), String> {
    let out = Command::new("fio").arg("--minimal").args(args).output().map_err(|e| format!("fio: {e}"))?;
    if !out.status.success() {
        return Err(format!("fio failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().ok_or("fio printed nothing")?;
    let f: Vec<&str> = line.split(';').collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Terse v3: field 7/8 read KiB/s and IOPS, 48/49 write (1-based).
    Ok(((num(6) + num(47)) * 1024.0 / 1e6, num(7) + num(48)))
}

fn fio_args(job: &Job, target: &[String], region: u64, time: Duration, threads_as_jobs: bool) -> Vec<String> {
    let rw = match (job.random, job.write) {
        (false, true) => "write",
        (false, false) => "read",
        (true, true) => "randwrite",
        (true, false) => "randread",
    };
    let mut a: Vec<String> = vec![
        "--name=j".into(),
        format!("--rw={rw}"),
        format!("--bs={}", job.block),
        format!("--size={region}"),
        format!("--runtime={}", time.as_secs().max(1)),
        "--time_based".into(),
    ];
    a.extend(target.iter().cloned());
    if job.random && threads_as_jobs {
        a.extend(["--numjobs=4".to_string(), "--group_reporting".to_string()]);
    }
    a
}

pub fn fio_available() -> bool {
    Command::new("fio").arg("--version").output().is_ok_and(|o| o.status.success())
}

pub fn run(cfg: &ExportsConfig, progress: &mut dyn FnMut(&str)) -> Result<Vec<ExportRecord>, String> {
    if !fio_available() {
        return Err("fio is not installed (scripts/setup installs it); the export rows need it".into());
    }
    let built = crate::array::build(&cfg.dir, cfg.level, cfg.members, cfg.chunk_bytes, cfg.region_bytes)?;
    let array = Arc::new(built.array);
    let region = cfg.region_bytes.min(array.size_bytes()) / (1 << 20) * (1 << 20);
    progress("writing the region once");
    prefill(array.as_ref(), region)?;
    let mut out = Vec::new();
    let mut in_process = Vec::new();
    for job in &JOBS {
        progress(&format!("in-process {}", job.name));
        let io = if job.random {
            let spec = RandSpec { start: 0, len: region, block: job.block, threads: 4, write: job.write, seed: 3 };
            rand_run(array.as_ref(), &spec, &deadline(cfg.time), false)?.io
        } else {
            seq_pass(array.as_ref(), 0, region, job.block, job.write, cfg.time)?
        };
        let mbs = io.bytes as f64 / io.secs.max(1e-9) / 1e6;
        in_process.push(mbs);
        out.push(ExportRecord {
            job: job.name.into(),
            path: "in-process".into(),
            mb_per_s: mbs,
            iops: io.ops as f64 / io.secs.max(1e-9),
            vs_in_process: None,
        });
    }
    let stop = Arc::new(AtomicBool::new(false));
    let sock = cfg.dir.join("nbd.sock");
    let listener = uraid_nbd::bind(&format!("unix:{}", sock.display())).map_err(|e| format!("NBD bind: {e}"))?;
    let mut export = uraid_nbd::Export::new(array.clone());
    export.name = "bench".into();
    let nbd_stop = stop.clone();
    let server = std::thread::spawn(move || uraid_nbd::serve(listener, vec![export], nbd_stop));
    let mnt = cfg.dir.join("mnt");
    std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
    let fuse = uraid_fuse::mount(&mnt, vec![("bench.img".into(), array.clone())], stop.clone());
    let plain = cfg.dir.join("plain.img");
    let _ = fio(&fio_args(
        &JOBS[0],
        &[format!("--filename={}", plain.display()), "--ioengine=psync".into()],
        region,
        Duration::from_secs(1),
        false,
    ));
    let mut paths: Vec<(&str, Vec<String>, bool)> = vec![(
        "nbd",
        vec!["--ioengine=nbd".into(), format!("--uri=nbd+unix:///bench?socket={}", sock.display()), "--iodepth=4".into()],
        false,
    )];
    match &fuse {
        Ok(_) => paths.push((
            "fuse",
            vec![format!("--filename={}", mnt.join("bench.img").display()), "--ioengine=psync".into(), "--direct=1".into()],
            true,
        )),
        Err(e) => progress(&format!("FUSE unavailable ({e}); no FUSE rows")),
    }
    paths.push(("plain-file", vec![format!("--filename={}", plain.display()), "--ioengine=psync".into()], true));
    let mut result = Ok(());
    'outer: for (path, target, threads_as_jobs) in &paths {
        for (job, base) in JOBS.iter().zip(&in_process) {
            progress(&format!("{path} {}", job.name));
            match fio(&fio_args(job, target, region, cfg.time, *threads_as_jobs)) {
                Ok((mbs, iops)) => out.push(ExportRecord {
                    job: job.name.into(),
                    path: (*path).into(),
                    mb_per_s: mbs,
                    iops,
                    vs_in_process: (*path != "plain-file").then(|| mbs / base.max(1e-9)),
                }),
                Err(e) => {
                    result = Err(e);
                    break 'outer;
                }
            }
        }
    }
    stop.store(true, Ordering::Release);
    if let Ok(m) = fuse {
        let _ = m.wait();
    }
    let _ = server.join();
    let _ = std::fs::remove_file(&plain);
    array.close().map_err(|e| e.to_string())?;
    result.map(|_| out)
}

/// Table: job × path, MB/s with the ratio to in-process.
pub fn render(records: &[ExportRecord], backing: &str) -> String {
    use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
    let paths = ["in-process", "nbd", "fuse", "plain-file"];
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(["job", "in-process MB/s", "NBD MB/s", "FUSE MB/s", "plain file MB/s"]);
    for job in JOBS.iter().map(|j| j.name) {
        let mut row = vec![job.to_string()];
        for p in paths {
            row.push(records.iter().find(|r| r.job == job && r.path == p).map_or("-".into(), |r| match r.vs_in_process {
                Some(x) => format!("{:.0} ({x:.2}×)", r.mb_per_s),
                None => format!("{:.0}", r.mb_per_s),
            }));
        }
        t.add_row(row);
    }
    format!("Export paths vs the in-process engine, members on {backing}; (×) = over in-process\n{t}\n")
}

/// Where `dir` lives, for the header.
pub fn describe(dir: &Path) -> String {
    format!("{} ({})", crate::machine::fs_type(dir), dir.display())
}
