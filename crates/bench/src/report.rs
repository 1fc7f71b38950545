//! Reports: the JSON document of a run, CSV, human/Markdown/HTML tables, the report folder
//! (plots, fio jobs, index.html) and `bench compare`.

use crate::machine::{Backing, KernelChoice, Machine};
use crate::suite::{ConfigRecord, Measurement, Timeline};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// Bumped when a field changes meaning, so `compare` can refuse mismatched reports.
pub const SCHEMA: u32 = 1;

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Report {
    pub schema: u32,
    pub uraid_version: String,
    pub started_unix: u64,
    pub wall_secs: f64,
    pub machine: Machine,
    pub backing: Backing,
    pub parity_kernels: Vec<KernelChoice>,
    pub config: ConfigRecord,
    pub measurements: Vec<Measurement>,
    pub rebuild_timelines: Vec<Timeline>,
}

/// "4K", "1M", "512K", "1536K".
pub fn size_label(bytes: u64) -> String {
    if bytes == 0 {
        "-".into()
    } else if bytes.is_multiple_of(1 << 20) {
        format!("{}M", bytes >> 20)
    } else if bytes.is_multiple_of(1024) {
        format!("{}K", bytes >> 10)
    } else {
        format!("{bytes}")
    }
}

fn ratio(r: Option<f64>) -> String {
    r.map_or(String::new(), |r| format!(" ({r:.2}×)"))
}

/// A table as header + rows of strings, rendered three ways.
pub struct Grid {
    pub title: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Grid {
    pub fn text(&self) -> String {
        use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        t.set_header(self.header.clone());
        for r in &self.rows {
            t.add_row(r.iter().enumerate().map(|(i, c)| {
                let cell = Cell::new(c);
                if i == 0 {
                    cell
                } else {
                    cell.set_alignment(CellAlignment::Right)
                }
            }));
        }
        format!("{}\n{t}\n", self.title)
    }

    pub fn markdown(&self) -> String {
        let mut s = format!("**{}**\n\n| {} |\n|", self.title, self.header.join(" | "));
        for i in 0..self.header.len() {
            s.push_str(if i == 0 { " --- |" } else { " ---: |" });
        }
        s.push('\n');
        for r in &self.rows {
            let _ = writeln!(s, "| {} |", r.join(" | "));
        }
        s
    }

    pub fn html(&self) -> String {
        let esc = html_escape;
        let mut s = format!("<h3>{}</h3>\n<table>\n<tr>", esc(&self.title));
        for h in &self.header {
            let _ = write!(s, "<th>{}</th>", esc(h));
        }
        s.push_str("</tr>\n");
        for r in &self.rows {
            s.push_str("<tr>");
            for c in r {
                let _ = write!(s, "<td>{}</td>", esc(c));
            }
            s.push_str("</tr>\n");
        }
        s.push_str("</table>\n");
        s
    }
}

pub fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

impl Report {
    /// Targets in run order: the levels as configured, then the peer.
    pub fn targets(&self) -> Vec<String> {
        let mut t: Vec<String> = Vec::new();
        for m in &self.measurements {
            if !t.contains(&m.target) {
                t.push(m.target.clone());
            }
        }
        t.sort_by_key(|x| (x == "peer", self.config.levels.iter().position(|l| l == x)));
        t
    }

    fn find(&self, f: impl Fn(&Measurement) -> bool) -> Option<&Measurement> {
        self.measurements.iter().find(|m| f(m))
    }

    /// The level comparison printed at the end of `uraid bench`.
    pub fn summary(&self) -> Grid {
        let big = self.config.seq_blocks.iter().copied().max().unwrap_or(1 << 20);
        let chunk_ok = |m: &Measurement| m.chunk_bytes == self.config.chunk_bytes || m.chunk_bytes == 0;
        let mut rows = Vec::new();
        for t in self.targets() {
            let seq = |op: &str| self.find(|m| m.target == t && m.workload == "seq" && m.op == op && m.block_bytes == big && chunk_ok(m));
            let rand = |op: &str| self.find(|m| m.target == t && m.workload == "rand" && m.op == op);
            let mbs = |m: Option<&Measurement>| m.map_or("-".into(), |m| format!("{:.0}{}", m.mb_per_s, ratio(m.peer_ratio)));
            let iops = |m: Option<&Measurement>| m.map_or("-".into(), |m| format!("{:.0}{}", m.iops, ratio(m.peer_ratio)));
            let degraded = self.find(|m| m.target == t && m.workload == "degraded" && m.op == "read");
            let rebuild = self.find(|m| m.target == t && m.op == "recovery");
            let p99 = |m: Option<&Measurement>| m.and_then(|m| m.latency.as_ref()).map(|l| l.p99_us);
            let healthy = p99(rand("randread"));
            let during = p99(self.find(|m| m.target == t && m.workload == "rebuild" && m.state == "rebuilding" && m.op == "randread"));
            rows.push(vec![
                t.clone(),
                mbs(seq("write")),
                mbs(seq("read")),
                iops(rand("randread")),
                iops(rand("randwrite")),
                mbs(degraded),
                rebuild.map_or("-".into(), |m| format!("{:.2} s ({:.0} MB/s)", m.secs, m.mb_per_s)),
                match (healthy, during) {
                    (Some(h), Some(d)) => format!("{h:.1} → {d:.1}"),
                    (Some(h), None) => format!("{h:.1}"),
                    _ => "-".into(),
                },
            ]);
        }
        Grid {
            title: format!(
                "Summary: {} members, chunk {}, seq {} requests, rand {} × {} in flight; (×) = over the peer (one plain file)",
                self.config.members,
                size_label(self.config.chunk_bytes),
                size_label(big),
                size_label(self.config.rand_block),
                self.config.jobs * self.config.iodepth
            ),
            header: [
                "target",
                "seq write MB/s",
                "seq read MB/s",
                "rand read IOPS",
                "rand write IOPS",
                "degraded read MB/s",
                "rebuild",
                "rand read p99 µs healthy → rebuilding",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }
    }

    /// Every table of the run, in workload order, summary last.
    pub fn grids(&self) -> Vec<Grid> {
        let mut out = Vec::new();
        let kbs = |m: Option<&Measurement>| m.map_or("-".into(), |m| format!("{:.0}", m.mb_per_s * 1e6 / 1024.0));
        let lat = |m: &Measurement| {
            m.latency
                .as_ref()
                .map_or(vec!["-".into(); 3], |l| vec![format!("{:.1}", l.p50_us), format!("{:.1}", l.p99_us), format!("{:.1}", l.p999_us)])
        };
        // seq: the table people post (level | chunk | block | read kB/s | write kB/s).
        let mut rows = Vec::new();
        for t in self.targets() {
            let mut keys: Vec<(u64, u64)> =
                self.measurements.iter().filter(|m| m.target == t && m.workload == "seq").map(|m| (m.chunk_bytes, m.block_bytes)).collect();
            keys.dedup();
            keys.sort();
            keys.dedup();
            for (c, b) in keys {
                let f = |op: &str| {
                    self.find(|m| m.target == t && m.workload == "seq" && m.op == op && m.chunk_bytes == c && m.block_bytes == b)
                };
                rows.push(vec![t.clone(), size_label(c), size_label(b), kbs(f("read")), kbs(f("write"))]);
            }
        }
        if !rows.is_empty() {
            out.push(Grid {
                title: "seq: sequential write, then read of what was written (kB/s = 1024 bytes/s)".into(),
                header: ["level", "chunk", "block", "read kB/s", "write kB/s"].map(String::from).to_vec(),
                rows,
            });
        }
        // rand, degraded, rebuild: IOPS and latency.
        let mut rows = Vec::new();
        for w in ["rand", "degraded", "rebuild"] {
            for m in self.measurements.iter().filter(|m| m.workload == w && m.op != "recovery") {
                let mut r =
                    vec![m.target.clone(), w.into(), m.state.clone(), m.op.clone(), size_label(m.block_bytes), m.threads.to_string()];
                if let Some(why) = &m.not_measured {
                    // The reason in the row itself, where the numbers would have been.
                    r.extend(["not measured".to_string(), why.clone(), "-".into(), "-".into(), "-".into()]);
                } else {
                    r.extend([format!("{:.0}", m.iops), format!("{:.1}{}", m.mb_per_s, ratio(m.peer_ratio))]);
                    r.extend(lat(m));
                }
                rows.push(r);
            }
        }
        if !rows.is_empty() {
            out.push(Grid {
                title: "rand / degraded / rebuild: requests and latency".into(),
                header: ["target", "workload", "state", "op", "block", "in flight", "IOPS", "MB/s", "p50 µs", "p99 µs", "p99.9 µs"]
                    .map(String::from)
                    .to_vec(),
                rows,
            });
        }
        let rows: Vec<Vec<String>> = self
            .measurements
            .iter()
            .filter(|m| m.op == "mixed-read")
            .map(|m| {
                let append = self.find(|a| a.target == m.target && a.op == "append" && a.readers == m.readers);
                vec![
                    m.target.clone(),
                    size_label(m.block_bytes),
                    m.readers.to_string(),
                    format!("{:.0}{}", m.mb_per_s, ratio(m.peer_ratio)),
                    m.per_job.as_ref().map_or("-".into(), |p| format!("{:.0}", p.avg_mb_per_s)),
                    append.and_then(|a| a.latency.as_ref()).map_or("-".into(), |l| format!("{:.0}", l.p99_us)),
                ]
            })
            .collect();
        if !rows.is_empty() {
            out.push(Grid {
                title: "mixed: random readers while one writer appends to ten files".into(),
                header: ["target", "read size", "readers", "total MB/s", "per reader MB/s", "append p99 µs"].map(String::from).to_vec(),
                rows,
            });
        }
        let rows: Vec<Vec<String>> = self
            .measurements
            .iter()
            .filter(|m| m.workload == "throughput")
            .map(|m| {
                let p = m.per_job.clone().unwrap_or_default();
                vec![
                    m.target.clone(),
                    m.op.clone(),
                    p.jobs.to_string(),
                    size_label(m.block_bytes),
                    format!("{:.0}{}", p.sum_mb_per_s, ratio(m.peer_ratio)),
                    format!("{:.0}", p.min_mb_per_s),
                    format!("{:.0}", p.max_mb_per_s),
                    format!("{:.0}", p.avg_mb_per_s),
                ]
            })
            .collect();
        if !rows.is_empty() {
            out.push(Grid {
                title: "throughput (iozone -t style): MB/s per job".into(),
                header: ["target", "phase", "jobs", "record", "sum", "min", "max", "avg"].map(String::from).to_vec(),
                rows,
            });
        }
        out.push(self.summary());
        out
    }

    /// Header lines: what, where, on which machine.
    pub fn preamble(&self) -> String {
        let m = &self.machine;
        let kernels: Vec<String> = self.parity_kernels.iter().map(|k| format!("{}/{}={}", k.op, k.size, k.kernel)).collect();
        format!(
            "uraid {} on {} ({} CPUs; {}), {} MiB RAM, Linux {}\nbacking: {} [{}]; peer: {}\nparity kernels: {}\nwall time {:.1} s\n",
            self.uraid_version,
            m.cpu_model,
            m.cores,
            m.cpu_flags.join(" "),
            m.mem_total_mib,
            m.kernel,
            self.backing.fs_type,
            self.backing.note,
            self.backing.peer,
            kernels.join(" "),
            self.wall_secs
        )
    }

    pub fn text(&self) -> String {
        let mut s = self.preamble();
        for g in self.grids() {
            s.push('\n');
            s.push_str(&g.text());
        }
        s
    }

    pub fn csv(&self) -> String {
        let mut s = String::from("workload,target,members,state,op,chunk_bytes,block_bytes,threads,readers,bytes,ops,secs,mb_per_s,iops,lat_mean_us,lat_p50_us,lat_p99_us,lat_p999_us,lat_max_us,job_min_mb_per_s,job_max_mb_per_s,job_avg_mb_per_s,job_sum_mb_per_s,peer_ratio,not_measured\n");
        for m in &self.measurements {
            let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
            let l = m.latency.as_ref();
            let p = m.per_job.as_ref();
            let fields = [
                csv_field(&m.workload),
                csv_field(&m.target),
                m.members.to_string(),
                csv_field(&m.state),
                csv_field(&m.op),
                m.chunk_bytes.to_string(),
                m.block_bytes.to_string(),
                m.threads.to_string(),
                m.readers.to_string(),
                m.bytes.to_string(),
                m.ops.to_string(),
                format!("{:.6}", m.secs),
                format!("{:.3}", m.mb_per_s),
                format!("{:.3}", m.iops),
                opt(l.map(|l| l.mean_us)),
                opt(l.map(|l| l.p50_us)),
                opt(l.map(|l| l.p99_us)),
                opt(l.map(|l| l.p999_us)),
                opt(l.map(|l| l.max_us)),
                opt(p.map(|p| p.min_mb_per_s)),
                opt(p.map(|p| p.max_mb_per_s)),
                opt(p.map(|p| p.avg_mb_per_s)),
                opt(p.map(|p| p.sum_mb_per_s)),
                opt(m.peer_ratio),
                csv_field(m.not_measured.as_deref().unwrap_or_default()),
            ];
            s.push_str(&fields.join(","));
            s.push('\n');
        }
        s
    }

    /// Writes report.json, measurements.csv, summary.md, plots (PNG + SVG), fio job files
    /// and index.html into `dir`. Returns the plot file stems written (plots are skipped,
    /// with a note in index.html, when no font can be found).
    pub fn write_dir(&self, dir: &Path) -> Result<Vec<String>, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let w = |name: &str, body: &str| std::fs::write(dir.join(name), body).map_err(|e| format!("{name}: {e}"));
        w("report.json", &serde_json::to_string_pretty(self).map_err(|e| e.to_string())?)?;
        w("measurements.csv", &self.csv())?;
        let md: Vec<String> = self.grids().iter().map(|g| g.markdown()).collect();
        w("summary.md", &md.join("\n"))?;
        crate::fio::write_jobs(&dir.join("fio"), &self.config)?;
        let (plots, plot_note) = match crate::plot::report_plots(self, dir) {
            Ok(p) => (p, String::new()),
            Err(e) => (vec![], format!("<p>Plots skipped: {}</p>", html_escape(&e))),
        };
        let mut html = String::from(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>uraid bench report</title>\n<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse;margin-bottom:1em}td,th{border:1px solid #ccc;padding:2px 6px}td{text-align:right}td:first-child{text-align:left}img{max-width:100%}</style></head><body>\n<h1>uraid bench report</h1>\n",
        );
        let _ = writeln!(html, "<pre>{}</pre>", html_escape(&self.preamble()));
        html.push_str("<p>Files: <a href=\"report.json\">report.json</a> · <a href=\"measurements.csv\">measurements.csv</a> · <a href=\"summary.md\">summary.md</a> · <a href=\"fio/\">fio job files</a></p>\n");
        html.push_str(&self.summary().html());
        html.push_str(&plot_note);
        for p in &plots {
            let _ = writeln!(html, "<h3>{p}</h3><a href=\"{p}.png\"><img src=\"{p}.svg\" alt=\"{p}\"></a>");
        }
        for g in self.grids() {
            html.push_str(&g.html());
        }
        html.push_str("</body></html>\n");
        w("index.html", &html)?;
        Ok(plots)
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// `bench compare A B`: B over A for every measurement both reports hold.
pub fn compare(a: &Report, b: &Report) -> Result<String, String> {
    if a.schema != b.schema {
        return Err(format!("report schemas differ ({} vs {}): regenerate the older one", a.schema, b.schema));
    }
    let mut out = format!(
        "A: {}B: {}\n",
        a.preamble().lines().next().unwrap_or_default().to_owned() + "\n",
        b.preamble().lines().next().unwrap_or_default()
    );
    for (x, r) in [("A", a), ("B", b)] {
        let _ = writeln!(out, "{x} backing: {} ({})", r.backing.fs_type, r.backing.dir);
    }
    let bmap: std::collections::HashMap<String, &Measurement> = b.measurements.iter().map(|m| (m.key(), m)).collect();
    let mut rows = Vec::new();
    let (mut log_sum, mut n) = (0.0f64, 0usize);
    for ma in &a.measurements {
        let Some(mb) = bmap.get(&ma.key()) else { continue };
        if ma.not_measured.is_some() || mb.not_measured.is_some() {
            continue; // nothing to compare: one side has no figure
        }
        let r = if ma.mb_per_s > 0.0 { mb.mb_per_s / ma.mb_per_s } else { f64::NAN };
        if r.is_finite() && r > 0.0 {
            log_sum += r.ln();
            n += 1;
        }
        let p99 = |m: &Measurement| m.latency.as_ref().map(|l| l.p99_us);
        rows.push(vec![
            format!(
                "{} {} {} {} c={} b={} t={}{}",
                ma.target,
                ma.workload,
                ma.state,
                ma.op,
                size_label(ma.chunk_bytes),
                size_label(ma.block_bytes),
                ma.threads,
                if ma.readers > 0 { format!(" r={}", ma.readers) } else { String::new() }
            ),
            format!("{:.1}", ma.mb_per_s),
            format!("{:.1}", mb.mb_per_s),
            format!("{r:.2}×"),
            match (p99(ma), p99(mb)) {
                (Some(x), Some(y)) if x > 0.0 => format!("{x:.0} → {y:.0} ({:.2}×)", y / x),
                _ => "-".into(),
            },
        ]);
    }
    if rows.is_empty() {
        return Err("the two reports have no measurement in common".into());
    }
    let g = Grid {
        title: format!("{} matching measurements; ratio = B / A", rows.len()),
        header: ["measurement", "A MB/s", "B MB/s", "B/A", "p99 µs A → B"].map(String::from).to_vec(),
        rows,
    };
    out.push_str(&g.text());
    let _ = writeln!(out, "geometric mean of B/A throughput: {:.3}×", (log_sum / n.max(1) as f64).exp());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Latency;

    fn sample() -> Report {
        let m = |target: &str, workload: &str, op: &str, block: u64, mbs: f64, ratio: Option<f64>| Measurement {
            workload: workload.into(),
            target: target.into(),
            members: 4,
            state: "healthy".into(),
            op: op.into(),
            chunk_bytes: if target == "peer" { 0 } else { 65536 },
            block_bytes: block,
            threads: 1,
            bytes: 1 << 20,
            ops: 10,
            secs: 0.5,
            mb_per_s: mbs,
            iops: mbs * 1e6 / block as f64,
            latency: Some(Latency { samples: 10, mean_us: 1.0, p50_us: 1.0, p99_us: 2.0, p999_us: 3.0, max_us: 4.0 }),
            peer_ratio: ratio,
            ..Default::default()
        };
        Report {
            schema: SCHEMA,
            uraid_version: "0.1.0".into(),
            config: ConfigRecord {
                levels: vec!["raid5".into()],
                members: 4,
                chunk_bytes: 65536,
                seq_blocks: vec![4096, 1 << 20],
                jobs: 1,
                iodepth: 1,
                rand_block: 4096,
                ..Default::default()
            },
            measurements: vec![
                m("peer", "seq", "write", 1 << 20, 1000.0, None),
                m("raid5", "seq", "write", 1 << 20, 500.0, Some(0.5)),
                m("raid5", "seq", "read", 1 << 20, 800.0, None),
                m("raid5", "rand", "randread", 4096, 40.96, None),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn summary_picks_the_big_block_and_shows_ratios() {
        let g = sample().summary();
        assert_eq!(g.rows.len(), 2, "raid5 and the peer");
        assert_eq!(g.rows[0][0], "raid5", "levels before the peer");
        assert_eq!(g.rows[0][1], "500 (0.50×)");
        assert_eq!(g.rows[0][2], "800");
        assert_eq!(g.rows[0][3], "10000");
        assert_eq!(g.rows[1][0], "peer");
    }

    #[test]
    fn csv_has_one_row_per_measurement_and_a_fixed_width() {
        let r = sample();
        let csv = r.csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + r.measurements.len());
        let cols = lines[0].split(',').count();
        assert!(lines.iter().all(|l| l.split(',').count() == cols));
        assert_eq!(csv_field("a,b\"c"), "\"a,b\"\"c\"");
    }

    #[test]
    fn compare_reports_ratio_of_matching_rows() {
        let a = sample();
        let mut b = sample();
        for m in &mut b.measurements {
            m.mb_per_s *= 2.0;
        }
        b.measurements.pop(); // a row only A has is left out
        let s = compare(&a, &b).unwrap();
        assert!(s.contains("3 matching measurements"), "{s}");
        assert!(s.contains("2.00×"), "{s}");
        assert!(s.contains("geometric mean of B/A throughput: 2.000×"), "{s}");
        let mut c = sample();
        c.schema = 99;
        assert!(compare(&a, &c).is_err());
    }

    #[test]
    fn a_phase_too_short_to_measure_shows_its_reason_not_a_zero() {
        let mut r = sample();
        let mut m = r.measurements[3].clone();
        (m.workload, m.state, m.bytes, m.ops, m.secs, m.mb_per_s, m.iops, m.latency) =
            ("rebuild".into(), "rebuilding".into(), 0, 0, 0.0, 0.0, 0.0, None);
        m.not_measured = Some("3 random reads completed during the rebuild".into());
        r.measurements.push(m);
        let grid = r.grids().into_iter().find(|g| g.title.starts_with("rand / degraded / rebuild")).expect("rand grid");
        let row = grid.rows.iter().find(|row| row[2] == "rebuilding").expect("rebuilding row");
        assert_eq!(row[6], "not measured");
        assert!(row[7].contains("3 random reads"), "{row:?}");
        assert!(r.csv().lines().last().unwrap().ends_with(",3 random reads completed during the rebuild"));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["measurements"][4]["not_measured"], "3 random reads completed during the rebuild");
        assert!(json["measurements"][0].get("not_measured").is_none(), "absent on measured rows");
        // bench compare has nothing to compare on that row.
        assert!(compare(&r, &r).unwrap().contains("4 matching measurements"));
    }

    #[test]
    fn json_round_trips() {
        let r = sample();
        let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn markdown_and_html_tables() {
        let g = Grid { title: "t".into(), header: vec!["a".into(), "b".into()], rows: vec![vec!["x<y".into(), "1".into()]] };
        assert!(g.markdown().contains("| a | b |\n| --- | ---: |\n| x<y | 1 |"));
        assert!(g.html().contains("<td>x&lt;y</td>"));
        assert_eq!(size_label(1536 << 10), "1536K");
        assert_eq!(size_label(1 << 20), "1M");
    }
}
