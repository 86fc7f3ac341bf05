//! The speed-up `S = median(A) / median(B)` of two samples and its bootstrap interval.
//!
//! `S > 1` means B is faster. The interval is a percentile bootstrap: each of `resamples` rounds
//! (default 10 000) draws `n_A` values of A and `n_B` of B with replacement, independently, and
//! takes the ratio of their medians; the interval is the `(1-c)/2` and `(1+c)/2` percentiles
//! (linear interpolation, see [`crate::analysis::stats`]) of those ratios, `c` the confidence
//! (default 0.95). Draws come from a SplitMix64 generator seeded with `seed` (default
//! [`DEFAULT_SEED`]), so the same inputs always give the same interval, on every platform and
//! version. The bootstrap treats iterations as independent: slow drift (thermal, clocks) inside a
//! run makes the interval too narrow, which is why the comparison also warns when clocks or power
//! differ.

use serde::{Deserialize, Serialize};

use crate::analysis::rng::SplitMix64;
use crate::analysis::stats::{median_in_place, percentile_sorted};

/// Default bootstrap seed.
pub const DEFAULT_SEED: u64 = 0x5EED_1ED6_E500_0001;

/// Default number of bootstrap resamples.
pub const DEFAULT_RESAMPLES: usize = 10_000;

/// A speed-up with its bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpeedupEstimate {
    /// `median(A) / median(B)`; above 1 when B is faster.
    pub speedup: f64,
    /// Lower end of the interval.
    pub ci_low: f64,
    /// Upper end of the interval.
    pub ci_high: f64,
    /// Confidence of the interval.
    pub confidence: f64,
    /// Bootstrap resamples drawn.
    pub resamples: usize,
    /// Seed of the generator.
    pub seed: u64,
    /// Values of A the rounds drew from: every kept iteration's, or a uniform sample of them.
    #[serde(default)]
    pub sample_a: usize,
    /// Values of B the rounds drew from.
    #[serde(default)]
    pub sample_b: usize,
}

impl SpeedupEstimate {
    /// Whether the interval excludes 1: the runs differ at this confidence.
    pub fn is_significant(&self) -> bool {
        self.ci_low > 1.0 || self.ci_high < 1.0
    }
}

/// What the interval says about B against A.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The interval of `A/B` lies above 1: B is faster.
    Faster,
    /// The interval lies below 1: B is slower.
    Slower,
    /// The interval contains 1: no change can be claimed at this confidence.
    NoSignificantChange,
    /// The runs differ in what they measure (GPUs, profiling level): no interval speaks of the
    /// change, so none is given ([`super::Comparison::incomparable`] says why).
    NotComparable,
}

impl Verdict {
    /// The verdict of a speed-up estimate `A/B`.
    pub fn from_estimate(s: &SpeedupEstimate) -> Self {
        if s.ci_low > 1.0 {
            Verdict::Faster
        } else if s.ci_high < 1.0 {
            Verdict::Slower
        } else {
            Verdict::NoSignificantChange
        }
    }

    /// `faster`, `slower`, `no significant change` or `not comparable`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Faster => "faster",
            Verdict::Slower => "slower",
            Verdict::NoSignificantChange => "no significant change",
            Verdict::NotComparable => "not comparable",
        }
    }

    /// A sentence: `B is faster`, `B is slower`, `no significant change`, `A and B are not
    /// comparable`.
    pub fn describe(&self) -> &'static str {
        match self {
            Verdict::Faster => "B is faster",
            Verdict::Slower => "B is slower",
            Verdict::NoSignificantChange => "no significant change",
            Verdict::NotComparable => "A and B are not comparable",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Draws resamples of one sample with replacement and gives their medians. A resample is kept as
/// counts per rank of the sorted sample rather than as values: drawing index `j` counts the rank
/// of `values[j]`, and the median is read off the running count, which gives the very median that
/// selecting in the drawn values gives, from the same draws, at a fraction of the cost.
struct Resampler {
    sorted: Vec<f64>,
    /// The rank in `sorted` of each value, in the sample's order.
    rank: Vec<u32>,
    counts: Vec<u32>,
}

impl Resampler {
    /// `values` finite and not empty, fewer than 2^32.
    fn new(values: &[f64]) -> Self {
        let mut order: Vec<u32> = (0..values.len() as u32).collect();
        order.sort_by(|&i, &j| values[i as usize].total_cmp(&values[j as usize]));
        let mut rank = vec![0u32; values.len()];
        for (r, &i) in order.iter().enumerate() {
            rank[i as usize] = r as u32;
        }
        Self {
            sorted: order.iter().map(|&i| values[i as usize]).collect(),
            rank,
            counts: vec![0; values.len()],
        }
    }

    /// The median of `n` values drawn with replacement (`n` the sample's size): the middle one,
    /// or halfway between the two middle ones, as [`median_in_place`] takes it.
    fn median_of_resample(&mut self, rng: &mut SplitMix64) -> f64 {
        let n = self.rank.len();
        for _ in 0..n {
            let j = rng.below(n as u64) as usize;
            self.counts[self.rank[j] as usize] += 1;
        }
        let (want_lo, want_hi) = (n.saturating_sub(1) / 2, n / 2);
        let (mut lo, mut hi) = (f64::NAN, f64::NAN);
        let mut seen = 0usize;
        for (k, &c) in self.counts.iter().enumerate() {
            let next = seen + c as usize;
            if seen <= want_lo && want_lo < next {
                lo = self.sorted[k];
            }
            if want_hi < next {
                hi = self.sorted[k];
                break;
            }
            seen = next;
        }
        self.counts.fill(0);
        if n % 2 == 1 {
            hi
        } else {
            lo + (hi - lo) / 2.0
        }
    }
}

/// Speed-up `median(a) / median(b)` with a percentile-bootstrap interval (see the module doc).
/// Non-finite values are skipped. `None` when a side has no finite value, a median is not
/// positive, `resamples` is 0 or `confidence` is not in `(0, 1)`.
pub fn bootstrap_speedup(
    a: &[f64],
    b: &[f64],
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> Option<SpeedupEstimate> {
    let a: Vec<f64> = a.iter().copied().filter(|x| x.is_finite()).collect();
    let b: Vec<f64> = b.iter().copied().filter(|x| x.is_finite()).collect();
    if resamples == 0 || !(confidence > 0.0 && confidence < 1.0) {
        return None;
    }
    let ma = median_in_place(&mut a.clone())?;
    let mb = median_in_place(&mut b.clone())?;
    if ma <= 0.0 || mb <= 0.0 {
        return None;
    }
    let mut rng = SplitMix64(seed);
    let (mut ra, mut rb) = (Resampler::new(&a), Resampler::new(&b));
    let mut ratios = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        let sa = ra.median_of_resample(&mut rng);
        let sb = rb.median_of_resample(&mut rng);
        if sb > 0.0 {
            ratios.push(sa / sb);
        }
    }
    ratios.sort_unstable_by(f64::total_cmp);
    let alpha = 1.0 - confidence;
    Some(SpeedupEstimate {
        speedup: ma / mb,
        ci_low: percentile_sorted(&ratios, alpha / 2.0)?,
        ci_high: percentile_sorted(&ratios, 1.0 - alpha / 2.0)?,
        confidence,
        resamples,
        seed,
        sample_a: a.len(),
        sample_b: b.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est(lo: f64, hi: f64) -> SpeedupEstimate {
        SpeedupEstimate {
            speedup: (lo + hi) / 2.0,
            ci_low: lo,
            ci_high: hi,
            confidence: 0.95,
            resamples: 100,
            seed: 1,
            sample_a: 10,
            sample_b: 10,
        }
    }

    #[test]
    fn verdict_from_interval() {
        assert_eq!(Verdict::from_estimate(&est(1.1, 1.3)), Verdict::Faster);
        assert_eq!(Verdict::from_estimate(&est(0.7, 0.9)), Verdict::Slower);
        assert_eq!(
            Verdict::from_estimate(&est(0.95, 1.05)),
            Verdict::NoSignificantChange
        );
        assert_eq!(
            Verdict::from_estimate(&est(1.0, 1.2)),
            Verdict::NoSignificantChange
        );
    }

    #[test]
    fn counted_resamples_give_the_medians_of_the_drawn_values() {
        for n in [1usize, 2, 3, 10, 11, 200] {
            let values: Vec<f64> = (0..n).map(|i| ((i * 37) % 17) as f64 - 3.0).collect();
            let mut r = Resampler::new(&values);
            let (mut x, mut y) = (SplitMix64(9), SplitMix64(9));
            for _ in 0..50 {
                let got = r.median_of_resample(&mut x);
                let mut drawn: Vec<f64> =
                    (0..n).map(|_| values[y.below(n as u64) as usize]).collect();
                assert_eq!(got, median_in_place(&mut drawn).unwrap(), "n = {n}");
            }
        }
    }

    #[test]
    fn bootstrap_rejects_bad_input() {
        assert_eq!(bootstrap_speedup(&[], &[1.0], 100, 0.95, 1), None);
        assert_eq!(bootstrap_speedup(&[1.0], &[1.0], 0, 0.95, 1), None);
        assert_eq!(bootstrap_speedup(&[1.0], &[1.0], 10, 1.0, 1), None);
        assert_eq!(bootstrap_speedup(&[1.0], &[0.0], 10, 0.95, 1), None);
        let s = bootstrap_speedup(&[2.0], &[1.0], 10, 0.95, 1).unwrap();
        assert_eq!((s.speedup, s.ci_low, s.ci_high), (2.0, 2.0, 2.0));
    }
}
