//! Latency percentiles (HdrHistogram) and per-job aggregation, the numbers every workload
//! reports beside its throughput.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Latency summary of one measurement, in microseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub samples: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// Request latencies in nanoseconds, 3 significant digits (0.1 % error), 1 ns … 60 s.
#[derive(Clone)]
pub struct LatHist(Histogram<u64>);

impl Default for LatHist {
    fn default() -> Self {
        Self::new()
    }
}

impl LatHist {
    pub fn new() -> Self {
        LatHist(Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("static bounds are valid"))
    }

    pub fn record(&mut self, d: Duration) {
        self.record_ns(d.as_nanos() as u64);
    }

    pub fn record_ns(&mut self, ns: u64) {
        // A request slower than 60 s is clamped rather than lost: the count stays right.
        self.0.saturating_record(ns.max(1));
    }

    pub fn merge(&mut self, other: &LatHist) {
        // Same bounds on both sides, so `add` cannot fail; ignore to keep the hot path simple.
        let _ = self.0.add(&other.0);
    }

    pub fn len(&self) -> u64 {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// None when nothing was recorded (a workload that moved no requests has no latency).
    pub fn summary(&self) -> Option<Latency> {
        if self.0.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Some(Latency {
            samples: self.0.len(),
            mean_us: self.0.mean() / 1000.0,
            p50_us: us(self.0.value_at_quantile(0.50)),
            p99_us: us(self.0.value_at_quantile(0.99)),
            p999_us: us(self.0.value_at_quantile(0.999)),
            max_us: us(self.0.max()),
        })
    }
}

/// Per-job throughput spread, as `iozone -t` prints it ("Children see throughput", min, max,
/// avg). `sum` is the aggregate of all jobs running at once.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct JobSpread {
    pub jobs: usize,
    pub min_mb_per_s: f64,
    pub max_mb_per_s: f64,
    pub avg_mb_per_s: f64,
    pub sum_mb_per_s: f64,
}

impl JobSpread {
    pub fn of(per_job_mb_per_s: &[f64]) -> Option<JobSpread> {
        if per_job_mb_per_s.is_empty() {
            return None;
        }
        let sum: f64 = per_job_mb_per_s.iter().sum();
        Some(JobSpread {
            jobs: per_job_mb_per_s.len(),
            min_mb_per_s: per_job_mb_per_s.iter().copied().fold(f64::INFINITY, f64::min),
            max_mb_per_s: per_job_mb_per_s.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            avg_mb_per_s: sum / per_job_mb_per_s.len() as f64,
            sum_mb_per_s: sum,
        })
    }
}

/// 10^6 bytes per second (what disk vendors and fio's "MB/s" use).
pub fn mb_per_s(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / secs.max(1e-9) / 1e6
}

/// p99 per time bucket of `(seconds since start, latency ns)` samples, with the bucket's
/// request rate: the "latency during rebuild" line.
pub fn bucketed_p99(samples: &[(f64, u64)], bucket_secs: f64) -> Vec<(f64, f64, f64)> {
    let Some(last) = samples.iter().map(|s| s.0).fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t)))) else {
        return vec![];
    };
    let n = (last / bucket_secs).floor() as usize + 1;
    let mut hists = vec![LatHist::new(); n];
    for &(t, ns) in samples {
        hists[((t / bucket_secs).floor() as usize).min(n - 1)].record_ns(ns);
    }
    hists
        .iter()
        .enumerate()
        .filter_map(|(i, h)| h.summary().map(|l| (i as f64 * bucket_secs, l.p99_us, l.samples as f64 / bucket_secs)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = LatHist::new();
        // 1..=1000 µs, once each: p50 ≈ 500 µs, p99 ≈ 990 µs, p99.9 ≈ 999 µs.
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        let l = h.summary().unwrap();
        assert_eq!(l.samples, 1000);
        let near = |a: f64, b: f64| (a - b).abs() <= b * 0.002 + 0.01;
        assert!(near(l.p50_us, 500.0), "{l:?}");
        assert!(near(l.p99_us, 990.0), "{l:?}");
        assert!(near(l.p999_us, 999.0), "{l:?}");
        assert!(near(l.max_us, 1000.0), "{l:?}");
        assert!(near(l.mean_us, 500.5), "{l:?}");
    }

    #[test]
    fn empty_histogram_has_no_summary_and_merge_adds_counts() {
        let mut a = LatHist::new();
        assert!(a.summary().is_none());
        let mut b = LatHist::new();
        b.record_ns(5_000);
        b.record_ns(0); // clamped to 1 ns, still counted
        a.merge(&b);
        a.merge(&b);
        assert_eq!(a.len(), 4);
    }

    #[test]
    fn job_spread_min_max_avg_sum() {
        let s = JobSpread::of(&[100.0, 300.0, 200.0]).unwrap();
        assert_eq!((s.jobs, s.min_mb_per_s, s.max_mb_per_s, s.avg_mb_per_s, s.sum_mb_per_s), (3, 100.0, 300.0, 200.0, 600.0));
        assert!(JobSpread::of(&[]).is_none());
    }

    #[test]
    fn buckets_split_by_time() {
        let samples: Vec<(f64, u64)> = (0..200).map(|i| (i as f64 * 0.001, if i < 100 { 1_000 } else { 1_000_000 })).collect();
        let b = bucketed_p99(&samples, 0.1);
        assert_eq!(b.len(), 2);
        assert!(b[0].1 < 2.0 && b[1].1 > 900.0, "{b:?}");
        assert!((b[0].2 - 1000.0).abs() < 1e-6);
    }

    #[test]
    fn mb_per_s_is_decimal() {
        assert_eq!(mb_per_s(2_000_000, 2.0), 1.0);
    }
}
