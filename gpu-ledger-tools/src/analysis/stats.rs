//! Distributions across iterations (min, median, p90, p99, max, mean, standard deviation), never
//! one number: a single iteration time hides warm-up, noise and outliers. This module holds the
//! figures and their arithmetic; [`super::selection`] decides which rows count and
//! [`super::distributions`] gathers the per-scope and per-family ones.
//!
//! # Percentiles
//! Every percentile here is the linear interpolation between order statistics (Hyndman & Fan
//! type 7, the default of NumPy, R and Excel's `PERCENTILE.INC`): for `n` sorted samples
//! `x[0] <= .. <= x[n-1]` and `q` in `[0, 1]`, let `h = q·(n-1)`; the percentile is
//! `x[⌊h⌋] + (h-⌊h⌋)·(x[⌊h⌋+1] - x[⌊h⌋])`. So `q = 0` is the minimum, `q = 1` the maximum and
//! `q = 0.5` the usual median. With few samples p99 lies between the two largest samples.

use serde::{Deserialize, Serialize};

use gpu_ledger_format::schema::{DeviceIteration, IterationRow};

/// Summary of a sample: count, order statistics, mean and standard deviation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    /// Number of samples.
    pub n: usize,
    /// Smallest sample.
    pub min: f64,
    /// 50th percentile (linear interpolation).
    pub median: f64,
    /// 90th percentile (linear interpolation).
    pub p90: f64,
    /// 99th percentile (linear interpolation).
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (divisor `n - 1`); 0 for a single sample.
    pub stddev: f64,
    /// Whether the percentiles come from a quantile sketch (a series longer than
    /// [`super::series::EXACT_VALUES`]): each is then within
    /// [`super::series::SKETCH_RELATIVE_ERROR`] of the exact order statistic.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sketched: bool,
}

impl Distribution {
    /// Summarises `samples`. Non-finite samples (NaN, ±∞) are skipped; returns `None` when no
    /// finite sample remains.
    pub fn from_samples(samples: &[f64]) -> Option<Self> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_unstable_by(f64::total_cmp);
        let n = v.len();
        let mean = v.iter().sum::<f64>() / n as f64;
        let stddev = if n > 1 {
            (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        Some(Self {
            n,
            min: v[0],
            median: percentile_sorted(&v, 0.5)?,
            p90: percentile_sorted(&v, 0.9)?,
            p99: percentile_sorted(&v, 0.99)?,
            max: v[n - 1],
            mean,
            stddev,
            sketched: false,
        })
    }

    /// Summarises integer samples (nanoseconds, counts).
    pub fn from_u64(samples: &[u64]) -> Option<Self> {
        let v: Vec<f64> = samples.iter().map(|&x| x as f64).collect();
        Self::from_samples(&v)
    }
}

/// The `q`-quantile (`q` in `[0, 1]`) of an ascending slice by linear interpolation (type 7, see
/// the module doc). `None` when `sorted` is empty or `q` is outside `[0, 1]` or NaN.
pub fn percentile_sorted(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let h = q * (sorted.len() - 1) as f64;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    Some(sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo]))
}

/// Median of `samples` (any order; non-finite samples skipped). `None` when none remain.
pub fn median(samples: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    median_in_place(&mut v)
}

/// Median of finite values, reordering `v`. `None` when empty. `O(n)` expected.
pub(crate) fn median_in_place(v: &mut [f64]) -> Option<f64> {
    let n = v.len();
    if n == 0 {
        return None;
    }
    let (_, &mut upper, _) = v.select_nth_unstable_by(n / 2, f64::total_cmp);
    if n % 2 == 1 {
        return Some(upper);
    }
    let lower = v[..n / 2].iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some(lower + (upper - lower) / 2.0)
}

/// A distribution-free confidence interval for the median: the order statistics
/// `[x(k), x(n+1-k)]` with the largest `k` whose two tails each hold at most `(1 - confidence) / 2`
/// of Binomial(n, ½) (the sign test's interval: it assumes only independent samples of one
/// continuous distribution).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MedianInterval {
    /// The sample median.
    pub median: f64,
    /// Lower end, `x(k)`.
    pub low: f64,
    /// Upper end, `x(n+1-k)`.
    pub high: f64,
    /// The interval's exact coverage, `1 - 2·P(B <= k-1)`: at least the confidence asked for.
    pub coverage: f64,
}

/// The median of `samples` with its distribution-free interval at `confidence` (see
/// [`MedianInterval`]). Non-finite samples are skipped. `None` when `confidence` is not in
/// `(0, 1)` or there are too few samples for it (95 % needs at least 6).
pub fn median_interval(samples: &[f64], confidence: f64) -> Option<MedianInterval> {
    if !(confidence > 0.0 && confidence < 1.0) {
        return None;
    }
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_unstable_by(f64::total_cmp);
    let n = v.len();
    let tail = (1.0 - confidence) / 2.0;
    // P(B <= j) for B ~ Binomial(n, 1/2), summed in log space so that large n cannot underflow.
    // `k` is the largest rank whose tail P(B <= k-1) stays within `tail`; `below` that tail.
    let mut ln_p = -(n as f64) * std::f64::consts::LN_2;
    let (mut cdf, mut k, mut below) = (0.0, 0usize, 0.0);
    for j in 0..n / 2 {
        cdf += ln_p.exp();
        if cdf > tail {
            break;
        }
        (k, below) = (j + 1, cdf);
        ln_p += ((n - j) as f64).ln() - ((j + 1) as f64).ln();
    }
    if k == 0 {
        return None;
    }
    Some(MedianInterval {
        median: percentile_sorted(&v, 0.5)?,
        low: v[k - 1],
        high: v[n - k],
        coverage: 1.0 - 2.0 * below,
    })
}

/// Median absolute deviation from the median (unscaled). `None` when there is no finite sample.
pub fn mad(samples: &[f64]) -> Option<f64> {
    let m = median(samples)?;
    let dev: Vec<f64> = samples
        .iter()
        .filter(|x| x.is_finite())
        .map(|x| (x - m).abs())
        .collect();
    median(&dev)
}

/// Fewer iterations than this make a distribution's p90 and p99 interpolations between a few
/// samples: a summary or a comparison with fewer kept iterations warns.
pub const FEW_ITERATIONS: usize = 10;

/// Scale that turns a MAD into an estimate of the standard deviation of normal data.
pub const MAD_TO_SIGMA: f64 = 1.4826;

/// How warm-up iterations (lazy loading, JIT, autotuning, allocator growth) are found.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Warmup {
    /// No iteration is warm-up.
    None,
    /// The first `n` rows of the ledger (in file order) are warm-up.
    Fixed(usize),
    /// Detected on host wall time; see [`detect_warmup`].
    Detect(WarmupDetect),
}

impl Default for Warmup {
    fn default() -> Self {
        Warmup::Detect(WarmupDetect::default())
    }
}

/// Parameters of warm-up detection.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WarmupDetect {
    /// Outlier threshold in robust standard deviations (`MAD ×` [`MAD_TO_SIGMA`]). Default 3.
    pub k: f64,
    /// Most leading iterations that may be called warm-up (capped at half the series). Default 10.
    pub max_warmup: usize,
    /// An iteration must also exceed the reference median by this fraction to count. Default
    /// 0.05, so that a flat series with a zero MAD does not turn its noise into warm-up.
    pub min_relative_excess: f64,
}

impl Default for WarmupDetect {
    fn default() -> Self {
        Self {
            k: 3.0,
            max_warmup: 10,
            min_relative_excess: 0.05,
        }
    }
}

/// Number of leading warm-up values in `values` (per-iteration times in order).
///
/// Let `c = min(max_warmup, n / 2)`: only the first `c` values can be warm-up, and the rest,
/// `values[c..]`, is the steady-state reference with median `m` and MAD `d`. The threshold is
/// `t = m + max(k · 1.4826 · d, min_relative_excess · |m|)`. The warm-up count is one past the
/// last of the first `c` values that exceeds `t` (0 when none does), so a slow iteration after a
/// normal one inside the window (autotuning on a later first call) is still warm-up.
/// Series shorter than 4 values have no detected warm-up.
pub fn detect_warmup(values: &[f64], params: &WarmupDetect) -> usize {
    let n = values.len();
    if n < 4 {
        return 0;
    }
    let c = params.max_warmup.min(n / 2);
    if c == 0 {
        return 0;
    }
    let reference = &values[c..];
    let (Some(m), Some(d)) = (median(reference), mad(reference)) else {
        return 0;
    };
    let t = m + (params.k * MAD_TO_SIGMA * d).max(params.min_relative_excess * m.abs());
    values[..c]
        .iter()
        .rposition(|&x| x > t)
        .map_or(0, |i| i + 1)
}

/// Which rows statistics are taken over. The default keeps complete, unperturbed rows and
/// detects warm-up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RowFilter {
    /// How warm-up iterations are found. Default: detected.
    pub warmup: Warmup,
    /// Keep rows flagged `perturbed` (counter replay). Default false.
    pub include_perturbed: bool,
    /// Keep rows not marked `complete`. Default false.
    pub include_incomplete: bool,
    /// Keep rows a sampled timeline left `untraced` (host times and NVML, no GPU records).
    /// Default false: GPU figures would read those iterations as idle.
    #[serde(default)]
    pub include_untraced: bool,
}

/// A per-iteration figure to summarise or compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum IterationMetric {
    /// Host wall time of the iteration (end-to-end truth).
    HostWall,
    /// Busy time (union of intervals) of one device.
    DeviceBusy(u32),
    /// Idle time inside the activity window of one device.
    DeviceIdle(u32),
    /// Activity window (`last_end - first_start`) of one device.
    DeviceWindow(u32),
}

impl IterationMetric {
    /// The value of this metric in `row`, in ns; `None` when the device is not in the row.
    pub fn value(&self, row: &IterationRow) -> Option<f64> {
        let dev = |id: u32| row.devices.iter().find(|d| d.device_id == id);
        match *self {
            IterationMetric::HostWall => Some(row.host_wall_ns as f64),
            IterationMetric::DeviceBusy(id) => dev(id).map(|d| d.busy_ns as f64),
            IterationMetric::DeviceIdle(id) => dev(id).map(|d| d.idle_ns as f64),
            IterationMetric::DeviceWindow(id) => {
                dev(id).map(|d| d.last_end_ns.saturating_sub(d.first_start_ns) as f64)
            }
        }
    }

    /// The values of this metric over `rows`, skipping rows where it is absent.
    pub fn values<'a>(&self, rows: impl IntoIterator<Item = &'a IterationRow>) -> Vec<f64> {
        rows.into_iter().filter_map(|r| self.value(r)).collect()
    }
}

/// Idle share of one device in one iteration: idle time over its activity window,
/// `idle_ns / (last_end_ns - first_start_ns)`. `None` for an empty window.
pub fn idle_share(d: &DeviceIteration) -> Option<f64> {
    let window = d
        .last_end_ns
        .checked_sub(d.first_start_ns)
        .filter(|&w| w > 0)?;
    Some(d.idle_ns as f64 / window as f64)
}

/// Distributions of one scope path across iterations (over the iterations where it is present).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScopeStats {
    /// Scope path (`step/backward`).
    pub path: String,
    /// Iterations looked at.
    pub iterations: usize,
    /// Iterations in which the scope appears.
    pub present_in: usize,
    /// Calls per iteration.
    pub calls: Distribution,
    /// Host wall time per iteration, ns (children included).
    pub host_ns: Distribution,
    /// Union device time of its own launches per iteration, ns.
    pub device_ns: Distribution,
    /// Union device time of its and its children's launches per iteration, ns.
    pub device_ns_inclusive: Distribution,
    /// Event-timed device time per iteration, ns, over the iterations where it was measured.
    pub event_device_ns: Option<Distribution>,
    /// Launches made directly in the scope per iteration.
    pub launches: Distribution,
    /// Host time summed over the scope's iterations divided by `iterations`.
    pub host_ns_mean_per_iteration: f64,
    /// Inclusive device time summed over the scope's iterations divided by `iterations`.
    pub device_ns_inclusive_mean_per_iteration: f64,
    /// Launches summed over the scope's iterations divided by `iterations`.
    pub launches_mean_per_iteration: f64,
}

/// Distributions of one kernel family across iterations (over the iterations where it ran).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FamilyStats {
    /// Family name (see [`super::families`]).
    pub family: String,
    /// Iterations looked at.
    pub iterations: usize,
    /// Iterations in which the family ran.
    pub present_in: usize,
    /// Summed kernel time of the family per iteration, ns.
    pub total_ns: Distribution,
    /// Launches of the family per iteration.
    pub launches: Distribution,
    /// Kernel time summed over all iterations divided by `iterations`.
    pub total_ns_mean_per_iteration: f64,
    /// Launches summed over all iterations divided by `iterations`.
    pub launches_mean_per_iteration: f64,
}

/// Families by mean time per iteration, largest first; ties by name.
pub(crate) fn sort_families(families: &mut [FamilyStats]) {
    families.sort_by(|a, b| {
        b.total_ns_mean_per_iteration
            .total_cmp(&a.total_ns_mean_per_iteration)
            .then_with(|| a.family.cmp(&b.family))
    });
}

#[cfg(test)]
mod tests {

    /// The interval's order statistics, 1-based, for `n` samples 1, 2, …, n.
    fn ranks(n: usize, confidence: f64) -> Option<(f64, f64, f64)> {
        let v: Vec<f64> = (1..=n).map(|i| i as f64).collect();
        median_interval(&v, confidence).map(|m| (m.low, m.high, m.coverage))
    }

    #[test]
    fn median_interval_matches_the_sign_test_tables() {
        // Published 95 % intervals for the median: n = 6 (x1, x6), 10 (x2, x9), 20 (x6, x15),
        // 30 (x10, x21).
        let (lo, hi, cov) = ranks(6, 0.95).unwrap();
        assert_eq!((lo, hi), (1.0, 6.0));
        assert!((cov - (1.0 - 2.0 / 64.0)).abs() < 1e-12, "{cov}");
        let (lo, hi, cov) = ranks(10, 0.95).unwrap();
        assert_eq!((lo, hi), (2.0, 9.0));
        assert!((cov - (1.0 - 2.0 * 11.0 / 1024.0)).abs() < 1e-12, "{cov}");
        assert_eq!(ranks(20, 0.95).map(|r| (r.0, r.1)), Some((6.0, 15.0)));
        assert_eq!(ranks(30, 0.95).map(|r| (r.0, r.1)), Some((10.0, 21.0)));
        for n in [6, 7, 10, 20, 30, 60, 1000, 5000] {
            let (_, _, cov) = ranks(n, 0.95).unwrap();
            assert!((0.95..1.0).contains(&cov), "n = {n}: coverage {cov}");
        }
    }

    #[test]
    fn median_interval_refuses_what_it_cannot_give() {
        assert_eq!(ranks(5, 0.95), None, "5 samples cannot give 95 %");
        assert!(
            ranks(5, 0.9).is_some(),
            "but can give 90 %: P(B = 0) = 1/32 per tail"
        );
        assert_eq!(ranks(0, 0.95), None);
        assert_eq!(ranks(10, 1.0), None);
        assert_eq!(ranks(10, 0.0), None);
        let with_nan = [f64::NAN, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let m = median_interval(&with_nan, 0.95).unwrap();
        assert_eq!((m.low, m.median, m.high), (1.0, 3.5, 6.0), "NaN skipped");
    }
    use super::*;

    #[test]
    fn distribution_of_one_to_ten() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        let d = Distribution::from_samples(&v).unwrap();
        assert_eq!(d.n, 10);
        assert_eq!((d.min, d.max), (1.0, 10.0));
        assert!((d.median - 5.5).abs() < 1e-12);
        // h = 0.9 * 9 = 8.1 -> 9 + 0.1 * (10 - 9)
        assert!((d.p90 - 9.1).abs() < 1e-12);
        // h = 0.99 * 9 = 8.91 -> 9.91
        assert!((d.p99 - 9.91).abs() < 1e-12);
        assert!((d.mean - 5.5).abs() < 1e-12);
        // sample variance of 1..=10 is 55/6
        assert!((d.stddev - (55.0f64 / 6.0).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn single_sample_and_empty() {
        let d = Distribution::from_samples(&[7.0]).unwrap();
        assert_eq!((d.median, d.p99, d.stddev), (7.0, 7.0, 0.0));
        assert_eq!(Distribution::from_samples(&[]), None);
        assert_eq!(Distribution::from_samples(&[f64::NAN]), None);
        let d = Distribution::from_samples(&[f64::NAN, 1.0, f64::INFINITY, 3.0]).unwrap();
        assert_eq!((d.n, d.median), (2, 2.0));
    }

    #[test]
    fn percentile_bounds() {
        assert_eq!(percentile_sorted(&[], 0.5), None);
        assert_eq!(percentile_sorted(&[1.0], 1.5), None);
        assert_eq!(percentile_sorted(&[1.0, 2.0], f64::NAN), None);
        assert_eq!(percentile_sorted(&[1.0, 3.0], 0.25), Some(1.5));
    }

    #[test]
    fn median_and_mad() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        // deviations from 2: 1,1,0,2,7 -> median 1
        assert_eq!(mad(&[1.0, 3.0, 2.0, 4.0, 9.0]), Some(1.0));
    }

    #[test]
    fn warmup_detects_slow_leading_iterations() {
        let mut v = vec![900.0, 150.0, 400.0];
        v.extend((0..30).map(|i| 100.0 + (i % 5) as f64));
        assert_eq!(detect_warmup(&v, &WarmupDetect::default()), 3);
    }

    #[test]
    fn warmup_none_on_steady_or_short_series() {
        let v: Vec<f64> = (0..30).map(|i| 100.0 + (i % 7) as f64).collect();
        assert_eq!(detect_warmup(&v, &WarmupDetect::default()), 0);
        assert_eq!(
            detect_warmup(&[1000.0, 1.0, 1.0], &WarmupDetect::default()),
            0
        );
        // Flat series (MAD 0): 3% above the median is noise, not warm-up.
        let mut v = vec![103.0];
        v.extend(std::iter::repeat_n(100.0, 20));
        assert_eq!(detect_warmup(&v, &WarmupDetect::default()), 0);
        v[0] = 110.0;
        assert_eq!(detect_warmup(&v, &WarmupDetect::default()), 1);
    }

    #[test]
    fn idle_share_of_window() {
        let d = DeviceIteration {
            device_id: 0,
            first_start_ns: 1000,
            last_end_ns: 2000,
            busy_ns: 900,
            idle_ns: 100,
            largest_gap_ns: 60,
            kernel_count: 3,
            peak_memory_bytes: None,
            idle: None,
        };
        assert_eq!(idle_share(&d), Some(0.1));
        assert_eq!(
            idle_share(&DeviceIteration {
                last_end_ns: 1000,
                ..d.clone()
            }),
            None
        );
        assert_eq!(
            idle_share(&DeviceIteration {
                last_end_ns: 10,
                ..d
            }),
            None
        );
    }

    #[test]
    fn warmup_window_is_capped() {
        // Everything before position c = min(max_warmup, n/2) may be warm-up, nothing after.
        let mut v = vec![1000.0; 6];
        v.extend([100.0; 6]);
        let p = WarmupDetect {
            max_warmup: 4,
            ..WarmupDetect::default()
        };
        assert_eq!(detect_warmup(&v, &p), 4);
    }
}
