//! Line charts for the report folder, PNG and SVG from the same drawing code (plotters).
//! Text is drawn with ab_glyph from a TrueType file found at run time (fontconfig's choice,
//! else DejaVu/Liberation paths), so building needs no font libraries; without any font
//! the plots are skipped and the report says so.

use crate::report::{size_label, Report};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

static FONT: OnceLock<Result<String, String>> = OnceLock::new();

/// Registers a sans-serif font with plotters once; the path used, or why none.
pub fn ensure_font() -> Result<String, String> {
    FONT.get_or_init(|| {
        let mut candidates: Vec<String> = Vec::new();
        if let Ok(o) = std::process::Command::new("fc-match").args(["-f", "%{file}", "sans-serif:style=Regular"]).output() {
            if o.status.success() {
                candidates.push(String::from_utf8_lossy(&o.stdout).trim().to_string());
            }
        }
        candidates.extend(
            [
                "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
                "/usr/share/fonts/TTF/DejaVuSans.ttf",
                "/usr/share/fonts/dejavu/DejaVuSans.ttf",
            ]
            .map(String::from),
        );
        for c in candidates {
            if let Ok(bytes) = std::fs::read(&c) {
                // plotters keeps fonts for the life of the process; leaking one file once is that.
                let b: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, b).is_ok() {
                    return Ok(c);
                }
            }
        }
        Err("no TrueType font found (install fonts-dejavu-core)".into())
    })
    .clone()
}

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("plot: {e:?}")
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    x_fmt: &dyn Fn(&f64) -> String,
    x_ticks: usize,
    series: &[Series],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (mut x0, mut x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(x), b.max(x)));
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 - x0 < 1e-9 {
        (x0, x1) = (x0 - 0.5, x1 + 0.5);
    }
    let y1 = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0f64, f64::max).max(1e-9) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(x0..x1, 0f64..y1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_labels(x_ticks)
        .x_label_formatter(x_fmt)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let dashed = s.name.starts_with("peer");
        let style = if dashed { color.mix(0.5).stroke_width(2) } else { color.stroke_width(2) };
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), style))
            .map_err(err)?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        // Markers only where points are few enough to tell apart (not on time series).
        if s.points.len() <= 24 {
            chart.draw_series(s.points.iter().map(|p| Circle::new(*p, 3, color.filled()))).map_err(err)?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// Writes `stem.png` and `stem.svg`.
pub fn line_chart(
    stem: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    x_fmt: &dyn Fn(&f64) -> String,
    x_ticks: usize,
    series: &[Series],
) -> Result<(), String> {
    ensure_font()?;
    let png = stem.with_extension("png");
    let svg = stem.with_extension("svg");
    draw(BitMapBackend::new(&png, (900, 520)).into_drawing_area(), title, x_label, y_label, x_fmt, x_ticks, series)?;
    draw(SVGBackend::new(&svg, (900, 520)).into_drawing_area(), title, x_label, y_label, x_fmt, x_ticks, series)
}

/// The report's plots; returns their stems (file names without extension).
pub fn report_plots(r: &Report, dir: &Path) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    // Block sizes on a log2 axis: ticks only at whole powers of two.
    let log_fmt = |x: &f64| if (x - x.round()).abs() < 1e-6 { size_label(2f64.powf(x.round()) as u64) } else { String::new() };
    let peer_seq: Vec<Series> = ["write", "read"]
        .iter()
        .map(|op| Series {
            name: format!("peer {op}"),
            points: r
                .measurements
                .iter()
                .filter(|m| m.target == "peer" && m.workload == "seq" && m.op == *op)
                .map(|m| ((m.block_bytes as f64).log2(), m.mb_per_s))
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    for t in r.targets().into_iter().filter(|t| t != "peer") {
        let mut keys: Vec<(u64, String)> =
            r.measurements.iter().filter(|m| m.target == t && m.workload == "seq").map(|m| (m.chunk_bytes, m.op.clone())).collect();
        keys.sort();
        keys.dedup();
        if keys.is_empty() {
            continue;
        }
        let mut series: Vec<Series> = keys
            .iter()
            .map(|(c, op)| Series {
                name: if *c == 0 { op.clone() } else { format!("{op}, chunk {}", size_label(*c)) },
                points: r
                    .measurements
                    .iter()
                    .filter(|m| m.target == t && m.workload == "seq" && m.chunk_bytes == *c && &m.op == op)
                    .map(|m| ((m.block_bytes as f64).log2(), m.mb_per_s))
                    .collect(),
            })
            .collect();
        series.extend(peer_seq.iter().map(|s| Series { name: s.name.clone(), points: s.points.clone() }));
        // One tick per power of two between the smallest and largest request.
        let lg = |b: u64| (b.max(1) as f64).log2();
        let (lo, hi) =
            (r.config.seq_blocks.iter().copied().min().unwrap_or(4096), r.config.seq_blocks.iter().copied().max().unwrap_or(4096));
        let n = ((lg(hi) - lg(lo)).round() as usize + 1).max(2);
        let stem = format!("seq-{t}");
        line_chart(&dir.join(&stem), &format!("{t}: sequential throughput vs request size"), "request size", "MB/s", &log_fmt, n, &series)?;
        out.push(stem);
    }
    let mut sizes: Vec<u64> = r.measurements.iter().filter(|m| m.op == "mixed-read").map(|m| m.block_bytes).collect();
    sizes.sort();
    sizes.dedup();
    for size in sizes {
        let series: Vec<Series> = r
            .targets()
            .into_iter()
            .map(|t| Series {
                points: r
                    .measurements
                    .iter()
                    .filter(|m| m.target == t && m.op == "mixed-read" && m.block_bytes == size)
                    .map(|m| (m.readers as f64, m.mb_per_s))
                    .collect(),
                name: t,
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        let stem = format!("mixed-{}", size_label(size));
        let n = r.config.mixed_max_readers.max(2);
        line_chart(
            &dir.join(&stem),
            &format!("{} random reads while one writer appends: total throughput", size_label(size)),
            "concurrent readers",
            "MB/s",
            &|x| format!("{x:.0}"),
            n,
            &series,
        )?;
        out.push(stem);
    }
    if !r.rebuild_timelines.is_empty() {
        let series: Vec<Series> = r
            .rebuild_timelines
            .iter()
            .map(|tl| Series {
                name: format!("{} (rebuild {:.2} s)", tl.target, tl.rebuild_secs),
                points: tl.points.iter().map(|p| (p.0, p.1)).collect(),
            })
            .collect();
        let stem = "rebuild-latency".to_string();
        line_chart(
            &dir.join(&stem),
            "random read p99 latency while rebuilding onto a spare (t = 0: spare added)",
            "seconds",
            "p99 µs",
            &|x| format!("{x:.1}"),
            8,
            &series,
        )?;
        out.push(stem);
    }
    Ok(out)
}
