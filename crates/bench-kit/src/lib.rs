//! Internal: what every benchmark of the workspace shares, and what its tests share with them
//! ([`python`] and [`npm`]: the official clients and servers the tests install under
//! `target/`).
//!
//! Benchmarks are plain `harness = false` bench targets. Each measures its subject and a
//! baseline *in the same run* (timings on shared machines are noisy) and prints one JSON line
//! per figure on stdout with [`report`]:
//!
//! ```text
//! {"name":"seq.step","value":58.1,"unit":"ns/step","baseline":9.7,"ratio":5.99}
//! ```
//!
//! `ratio` is always `value / baseline`; whether lower or higher is better depends on the
//! unit (lower for times, higher for throughputs). `cargo xtask bench [FILTER]` runs every
//! bench target and forwards these lines.

pub mod npm;
pub mod python;

use std::io::Write;
use std::time::{Duration, Instant};

/// The name filter given on the command line (`cargo bench -- FILTER`), if any.
pub fn filter() -> Option<String> {
    std::env::args().skip(1).find(|a| !a.starts_with("--"))
}

/// Whether the benchmark `name` should run under the command-line filter (substring match).
pub fn enabled(name: &str) -> bool {
    filter().is_none_or(|f| name.contains(&f))
}

/// Whether the slow figures were asked for (`cargo xtask bench --large`, which sets
/// `EFFECT_AGENTS_BENCH_LARGE=1`).
pub fn large() -> bool {
    std::env::var_os("EFFECT_AGENTS_BENCH_LARGE").is_some_and(|v| v == "1")
}

/// Prints one result line on stdout.
pub fn report(name: &str, value: f64, unit: &str, baseline: f64) {
    let ratio = if baseline == 0.0 {
        f64::NAN
    } else {
        value / baseline
    };
    let line = serde_json::json!({
        "name": name,
        "value": round(value),
        "unit": unit,
        "baseline": round(baseline),
        "ratio": round(ratio),
    });
    let mut out = std::io::stdout().lock();
    // A benchmark that cannot print its result has nothing else useful to do.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn round(x: f64) -> serde_json::Value {
    if x.is_finite() {
        serde_json::json!((x * 1000.0).round() / 1000.0)
    } else {
        serde_json::Value::Null
    }
}

/// Summary of repeated measurements.
#[derive(Copy, Clone, Debug)]
pub struct Stats {
    /// The median sample.
    pub median: f64,
    /// The fastest sample.
    pub min: f64,
    /// The 99th-percentile sample.
    pub p99: f64,
}

/// Summarizes samples (any unit). Panics on an empty slice.
pub fn stats(samples: &[f64]) -> Stats {
    assert!(!samples.is_empty(), "no samples");
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    Stats {
        median: at(0.5),
        min: sorted[0],
        p99: at(0.99),
    }
}

/// Times `subject` and `baseline` alternately, `rounds` times each after one warm-up run of
/// each, so both see the same machine conditions. Returns (subject, baseline) durations.
pub fn interleaved(
    rounds: usize,
    mut subject: impl FnMut() -> Duration,
    mut baseline: impl FnMut() -> Duration,
) -> (Vec<Duration>, Vec<Duration>) {
    subject();
    baseline();
    let mut s = Vec::with_capacity(rounds);
    let mut b = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        s.push(subject());
        b.push(baseline());
    }
    (s, b)
}

/// Runs `f` once and returns how long it took.
pub fn time<R>(f: impl FnOnce() -> R) -> (Duration, R) {
    let start = Instant::now();
    let r = f();
    (start.elapsed(), r)
}

/// Median of durations in a unit: `per` divides each (for per-item figures).
pub fn median_per(samples: &[Duration], per: f64, unit: fn(Duration) -> f64) -> f64 {
    let xs: Vec<f64> = samples.iter().map(|d| unit(*d) / per).collect();
    stats(&xs).median
}

/// Nanoseconds of a duration.
pub fn ns(d: Duration) -> f64 {
    d.as_secs_f64() * 1e9
}

/// Microseconds of a duration.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Milliseconds of a duration.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Seconds of a duration.
pub fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The process's peak resident set size in bytes (Linux `VmHWM`), if it can be read.
pub fn peak_rss_bytes() -> Option<u64> {
    proc_status_kib("VmHWM:").map(|kib| kib * 1024)
}

/// The process's current resident set size in bytes (Linux `VmRSS`), if it can be read.
pub fn rss_bytes() -> Option<u64> {
    proc_status_kib("VmRSS:").map(|kib| kib * 1024)
}

/// Resets the peak resident set size to the current one (Linux: `5` into
/// `/proc/self/clear_refs`). Returns whether it worked.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// `n` unit vectors of `dimensions` with structure, as real embeddings have: `centers`
/// random unit centers (seeded), each vector a center plus Gaussian noise of standard
/// deviation `noise` per component, normalized. Uniformly random vectors have no meaningful
/// nearest neighbours, so approximate-search figures on them mean nothing.
pub fn clustered_vectors(
    seed: u64,
    n: usize,
    dimensions: usize,
    centers: usize,
    noise: f32,
) -> Vec<Vec<f32>> {
    let mut rng = SplitMix(seed);
    let centers: Vec<Vec<f32>> = (0..centers.max(1))
        .map(|_| normalized((0..dimensions).map(|_| rng.gaussian()).collect()))
        .collect();
    (0..n)
        .map(|_| {
            let center = &centers[(rng.next() % centers.len() as u64) as usize];
            normalized(center.iter().map(|c| c + noise * rng.gaussian()).collect())
        })
        .collect()
}

fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    if norm > 0.0 {
        for x in &mut v {
            *x = (f64::from(*x) / norm) as f32;
        }
    }
    v
}

/// SplitMix64: a tiny seeded generator, enough for benchmark data.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal value (Box–Muller).
    fn gaussian(&mut self) -> f32 {
        let u = self.unit().max(f64::MIN_POSITIVE);
        let v = self.unit();
        ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
    }
}

/// Recall@k of `got` against `truth` (the exact top k): the share of true neighbours found.
pub fn recall_at<T: PartialEq>(truth: &[T], got: &[T]) -> f64 {
    if truth.is_empty() {
        return 1.0;
    }
    truth.iter().filter(|t| got.contains(t)).count() as f64 / truth.len() as f64
}
