//! One per-iteration figure accumulated as rows stream past, in memory that does not grow with
//! the number of rows.
//!
//! A [`Series`] keeps its values exactly up to a bound ([`EXACT_VALUES`] by default), so that a
//! ledger of fewer rows gets exactly the [`Distribution`] of
//! [`Distribution::from_samples`]. Past the bound it moves every value into a DDSketch
//! (`sketches-ddsketch`) and drops them: count, minimum, maximum, mean and standard deviation
//! (Welford's update) stay exact, and the percentiles come from the sketch, each within a
//! relative error of [`SKETCH_RELATIVE_ERROR`] of the order statistic of rank `⌊q·(n-1)⌋`
//! (the value just below the type-7 interpolation of [`crate::analysis::stats`]).
//!
//! The series of one summary or one side of a comparison also share a [`Budget`] of exact values
//! ([`EXACT_BUDGET`] by default): a series whose value would take their total past it moves to
//! its sketch at once, so that a ledger of many scopes holds a bounded number of values too.
//!
//! A series made with [`Series::sampled`] keeps, past the bound, a uniform sample of that many
//! values (Vitter's algorithm R, seeded, so the same ledger gives the same sample): what a
//! bootstrap resamples from, or a robust spread is taken of.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use sketches_ddsketch::{Config, DDSketch};

use super::rng::SplitMix64;
use super::stats::{median_in_place, Distribution};

/// Values a [`Series`] keeps exactly before it moves to the sketch.
pub const EXACT_VALUES: usize = 100_000;

/// Values the series sharing one [`Budget`] hold exactly between them (8 MB).
pub const EXACT_BUDGET: usize = 1_000_000;

/// A count of the exact values held by the series that share it, its limit, and the values each
/// of its series keeps exactly. Clones share the count; a series that moves to its sketch gives
/// its values back.
#[derive(Debug, Clone)]
pub struct Budget {
    held: Arc<AtomicUsize>,
    limit: usize,
    per_series: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Self::with_limit(EXACT_BUDGET)
    }
}

impl Budget {
    /// A budget of `limit` values, each series exact up to [`EXACT_VALUES`].
    pub fn with_limit(limit: usize) -> Self {
        Self {
            held: Arc::new(AtomicUsize::new(0)),
            limit,
            per_series: EXACT_VALUES,
        }
    }

    /// A budget that keeps every value of a ledger of `rows` rows already in memory: each series
    /// exact up to `rows` values (a figure takes at most one value per row of a ledger the
    /// profiler wrote) and no limit on their total, so that its figures are exact whatever the
    /// ledger's length. The values take memory in proportion to the rows, as the ledger's own rows
    /// already do; pushed more rows than `rows`, a series still moves to its sketch and says so.
    pub fn exact(rows: usize) -> Self {
        Self {
            held: Arc::new(AtomicUsize::new(0)),
            limit: usize::MAX,
            per_series: rows.max(1),
        }
    }

    /// Values held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Values each series of this budget keeps exactly before it moves to its sketch.
    pub fn series_limit(&self) -> usize {
        self.per_series
    }

    /// A series exact up to [`Budget::series_limit`] values and within this budget.
    pub fn series(&self) -> Series {
        Series {
            budget: Some(self.clone()),
            ..Series::with_limit(self.per_series)
        }
    }

    /// A series exact up to [`Budget::series_limit`] values that keeps a uniform sample of that
    /// many beyond ([`Series::sampled`]); its values do not count against the budget.
    pub fn sampled(&self) -> Series {
        Series::sampled(self.per_series)
    }

    /// Counts one more value; whether that passes the limit.
    fn take(&self) -> bool {
        self.held.fetch_add(1, Ordering::Relaxed) >= self.limit
    }

    fn give_back(&self, n: usize) {
        self.held.fetch_sub(n, Ordering::Relaxed);
    }
}

/// The sketch's bound on the relative error of a percentile (1 %).
pub const SKETCH_RELATIVE_ERROR: f64 = 0.01;

/// The sketch's bins: 2048 bins of 1 % cover 17 decades above 1e-9, so no real figure collapses
/// a bin and the error bound always holds.
const SKETCH_BINS: u32 = 2048;

/// Smallest magnitude the sketch tells from zero.
const SKETCH_MIN_VALUE: f64 = 1e-9;

/// Seed of the reservoir's generator (fixed: the same ledger gives the same sample).
const SAMPLE_SEED: u64 = 0x5A3D_1E5E_0000_0001;

/// A streamed series of finite values: exact up to a bound, a sketch beyond (see the module doc).
#[derive(Clone)]
pub struct Series {
    limit: usize,
    keep_sample: bool,
    /// Every value in arrival order while not sketched; the uniform sample after, when kept.
    values: Vec<f64>,
    sketch: Option<Box<DDSketch>>,
    rng: SplitMix64,
    budget: Option<Budget>,
    n: u64,
    sum: f64,
    mean: f64,
    m2: f64,
    min: f64,
    max: f64,
}

impl std::fmt::Debug for Series {
    // DDSketch has no Debug: say what the series holds instead.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Series")
            .field("n", &self.n)
            .field("limit", &self.limit)
            .field("sketched", &self.is_sketched())
            .field("held", &self.values.len())
            .finish()
    }
}

impl Default for Series {
    fn default() -> Self {
        Self::with_limit(EXACT_VALUES)
    }
}

impl Series {
    /// A series exact up to [`EXACT_VALUES`] values.
    pub fn new() -> Self {
        Self::default()
    }

    /// A series exact up to `limit` values (at least 1).
    pub fn with_limit(limit: usize) -> Self {
        Self {
            limit: limit.max(1),
            keep_sample: false,
            values: Vec::new(),
            sketch: None,
            rng: SplitMix64(SAMPLE_SEED),
            budget: None,
            n: 0,
            sum: 0.0,
            mean: 0.0,
            m2: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    /// A series exact up to `limit` values that keeps a uniform sample of `limit` values beyond.
    pub fn sampled(limit: usize) -> Self {
        Self {
            keep_sample: true,
            ..Self::with_limit(limit)
        }
    }

    /// Adds `x`; a non-finite value is skipped, as [`Distribution::from_samples`] skips it.
    pub fn push(&mut self, x: f64) {
        if !x.is_finite() {
            return;
        }
        self.n += 1;
        self.sum += x;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
        self.min = self.min.min(x);
        self.max = self.max.max(x);
        match &mut self.sketch {
            None => {
                self.values.push(x);
                let over = self.budget.as_ref().is_some_and(Budget::take);
                if self.values.len() > self.limit || over {
                    self.start_sketch();
                }
            }
            Some(s) => {
                s.add(x);
                if self.keep_sample {
                    // Algorithm R: the n-th value replaces a random one with probability limit/n.
                    let j = self.rng.below(self.n) as usize;
                    if j < self.values.len() {
                        self.values[j] = x;
                    }
                }
            }
        }
    }

    /// Adds an integer figure (nanoseconds, counts) as `f64`.
    pub fn push_u64(&mut self, x: u64) {
        self.push(x as f64);
    }

    fn start_sketch(&mut self) {
        let mut s = DDSketch::new(Config::new(
            SKETCH_RELATIVE_ERROR,
            SKETCH_BINS,
            SKETCH_MIN_VALUE,
        ));
        for &v in &self.values {
            s.add(v);
        }
        self.sketch = Some(Box::new(s));
        if self.keep_sample {
            // The sample holds `limit` of the `limit + 1` values so far, chosen uniformly.
            let j = self.rng.below(self.values.len() as u64) as usize;
            self.values.swap_remove(j);
        } else {
            if let Some(b) = &self.budget {
                b.give_back(self.values.len());
            }
            self.values = Vec::new();
        }
    }

    /// Number of finite values added.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Whether no finite value was added.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Sum of the values, added in arrival order.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// Whether the bound was passed: percentiles come from the sketch.
    pub fn is_sketched(&self) -> bool {
        self.sketch.is_some()
    }

    /// Every value in arrival order while not sketched; past the bound the uniform sample of a
    /// [`Series::sampled`] series (empty for others).
    pub fn sample(&self) -> &[f64] {
        &self.values
    }

    /// The distribution of the values: exactly [`Distribution::from_samples`] below the bound;
    /// above it exact count, extremes, mean and standard deviation with percentiles from the
    /// sketch (`sketched` set). `None` when empty.
    pub fn distribution(&self) -> Option<Distribution> {
        let Some(sketch) = &self.sketch else {
            return Distribution::from_samples(&self.values);
        };
        let q = |q: f64| {
            sketch
                .quantile(q)
                .ok()
                .flatten()
                .map(|v| v.clamp(self.min, self.max))
        };
        Some(Distribution {
            n: self.n as usize,
            min: self.min,
            median: q(0.5)?,
            p90: q(0.9)?,
            p99: q(0.99)?,
            max: self.max,
            mean: self.mean,
            stddev: if self.n > 1 {
                (self.m2 / (self.n - 1) as f64).sqrt()
            } else {
                0.0
            },
            sketched: true,
        })
    }

    /// The median: exact below the bound (as [`super::stats::median`]), from the sketch above.
    pub fn median(&self) -> Option<f64> {
        match &self.sketch {
            None => median_in_place(&mut self.values.clone()),
            Some(_) => self.distribution().map(|d| d.median),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::stats::percentile_sorted;

    #[test]
    fn below_the_bound_it_is_the_exact_distribution() {
        let values: Vec<f64> = (0..1000)
            .map(|i| ((i * 7919) % 1000) as f64 + 0.5)
            .collect();
        let mut s = Series::with_limit(1000);
        for &v in &values {
            s.push(v);
        }
        s.push(f64::NAN);
        assert!(!s.is_sketched());
        assert_eq!(s.distribution(), Distribution::from_samples(&values));
        assert_eq!(s.sample(), &values[..]);
        assert_eq!(s.median(), crate::analysis::stats::median(&values));
    }

    #[test]
    fn above_the_bound_the_sketch_holds_its_error_bound() {
        // A skewed series (a long tail, as iteration times have) of 20 times the bound.
        let mut rng = SplitMix64(3);
        let values: Vec<f64> = (0..200_000)
            .map(|_| {
                let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                1e6 * (1.0 + 0.05 * u) + if u > 0.98 { 4e6 * u } else { 0.0 }
            })
            .collect();
        let mut s = Series::with_limit(10_000);
        for &v in &values {
            s.push(v);
        }
        assert!(s.is_sketched());
        assert!(s.sample().is_empty(), "the exact values were dropped");
        let d = s.distribution().unwrap();
        assert!(d.sketched);
        let mut sorted = values.clone();
        sorted.sort_unstable_by(f64::total_cmp);
        let exact = Distribution::from_samples(&values).unwrap();
        assert_eq!((d.n, d.min, d.max), (exact.n, exact.min, exact.max));
        assert!((d.mean - exact.mean).abs() <= 1e-9 * exact.mean);
        assert!((d.stddev - exact.stddev).abs() <= 1e-6 * exact.stddev);
        for (q, got) in [(0.5, d.median), (0.9, d.p90), (0.99, d.p99)] {
            let rank = (q * (sorted.len() - 1) as f64) as usize;
            let order_stat = sorted[rank];
            assert!(
                (got - order_stat).abs() <= SKETCH_RELATIVE_ERROR * order_stat,
                "q {q}: sketch {got}, order statistic {order_stat}"
            );
            let interpolated = percentile_sorted(&sorted, q).unwrap();
            assert!(
                (got - interpolated).abs() <= SKETCH_RELATIVE_ERROR * interpolated * 1.001,
                "q {q}: sketch {got}, exact {interpolated}"
            );
        }
    }

    #[test]
    fn series_sharing_a_budget_move_to_their_sketch_when_it_is_spent() {
        let budget = Budget::with_limit(4);
        let (mut a, mut b) = (budget.series(), budget.series());
        (0..3).for_each(|i| a.push_u64(i));
        b.push_u64(10);
        assert_eq!(budget.held(), 4);
        assert!(!a.is_sketched() && !b.is_sketched());
        b.push_u64(11);
        assert!(b.is_sketched(), "the fifth value passes the budget");
        assert!(!a.is_sketched());
        assert_eq!(budget.held(), 3, "b gave its values back");
        let d = b.distribution().unwrap();
        assert_eq!((d.n, d.min, d.max), (2, 10.0, 11.0));
        assert!((d.median - 10.0).abs() <= SKETCH_RELATIVE_ERROR * 10.0);
    }

    #[test]
    fn a_sampled_series_keeps_a_uniform_sample_of_its_bound() {
        let mut s = Series::sampled(1000);
        for i in 0..100_000u64 {
            s.push_u64(i);
        }
        assert!(s.is_sketched());
        assert_eq!(s.sample().len(), 1000);
        // A uniform sample of 0..100 000 has its median near 50 000 and values from all of it.
        let m = crate::analysis::stats::median(s.sample()).unwrap();
        assert!((40_000.0..60_000.0).contains(&m), "{m}");
        assert!(s.sample().iter().any(|&v| v > 90_000.0));
        assert!(s.sample().iter().any(|&v| v < 10_000.0));
        let again = {
            let mut t = Series::sampled(1000);
            (0..100_000u64).for_each(|i| t.push_u64(i));
            t
        };
        assert_eq!(
            s.sample(),
            again.sample(),
            "seeded: the same input, the same sample"
        );
    }
}
