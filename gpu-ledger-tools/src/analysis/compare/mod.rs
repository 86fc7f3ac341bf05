//! A/B comparison of two ledgers of the same workload: the speed-up `S = median(A) / median(B)`
//! of the per-iteration metric (host wall time by default) over the rows each side keeps
//! ([`crate::analysis::selection`]), with its bootstrap interval ([`bootstrap_speedup`]); the
//! per-scope and per-family changes; the change of idle time by cause (`idle.rs`); and the
//! warnings that say when the two runs are not comparable.
//!
//! Each side is a [`CompareSide`] that takes the ledger's rows one at a time ([`compare_streamed`]);
//! [`compare`] pushes the rows of two ledgers in memory through the same sides, exact whatever
//! their length.
//!
//! `Δt = 1 - 1/S` is the fraction of iteration time saved.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::families::FamilyRules;
use super::indices::IndexRuns;
use super::names::{is_other_names, OTHER_NAMES};
use super::stats::{Distribution, FamilyStats, IterationMetric, RowFilter, ScopeStats};
use gpu_ledger_format::schema::{Header, IterationRow};

mod bootstrap;
mod idle;
mod side;
mod warnings;

use warnings::{
    comparability, environment_warnings, nvml_warnings, record_warnings, selection_warnings,
    OperatingPoints, RecordCounts,
};

pub use bootstrap::{bootstrap_speedup, SpeedupEstimate, Verdict, DEFAULT_RESAMPLES, DEFAULT_SEED};
pub use idle::IdleCauseChange;
pub use side::{compare_streamed, CompareSide, BOOTSTRAP_SAMPLE};

/// One ledger: its header and its iteration rows.
#[derive(Debug, Clone, Copy)]
pub struct LedgerView<'a> {
    /// Header line.
    pub header: &'a Header,
    /// Iteration rows, in file order.
    pub rows: &'a [IterationRow],
}

/// How to compare.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareOptions {
    /// Per-iteration figure whose median is compared. Default: host wall time.
    pub metric: IterationMetric,
    /// Rows kept on each side. Default: complete, unperturbed, warm-up detected and left out.
    pub filter: RowFilter,
    /// Bootstrap resamples. Default [`DEFAULT_RESAMPLES`].
    pub resamples: usize,
    /// Confidence of the interval, in `(0, 1)`. Default 0.95.
    pub confidence: f64,
    /// Bootstrap seed. Default [`DEFAULT_SEED`].
    pub seed: u64,
    /// Kernel family rules for the per-family changes.
    pub family_rules: FamilyRules,
    /// Relative difference of the NVML medians (SM and memory clock, power, temperature) above
    /// which a warning is given. Default 0.05.
    pub nvml_tolerance: f64,
}

impl Default for CompareOptions {
    fn default() -> Self {
        Self {
            metric: IterationMetric::HostWall,
            filter: RowFilter::default(),
            resamples: DEFAULT_RESAMPLES,
            confidence: 0.95,
            seed: DEFAULT_SEED,
            family_rules: FamilyRules::default(),
            nvml_tolerance: 0.05,
        }
    }
}

/// Why a comparison could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompareError {
    /// A side has no row left after filtering, or no positive value of the metric.
    #[error("ledger {side} has no usable iteration for {metric} ({rows} rows, {kept} kept)")]
    NoUsableRows {
        /// `A` or `B`.
        side: &'static str,
        /// The metric compared.
        metric: String,
        /// Rows in the ledger.
        rows: usize,
        /// Rows kept by the filter.
        kept: usize,
    },
    /// An option is out of range.
    #[error("invalid option: {0}")]
    InvalidOption(&'static str),
}

/// What one side contributed to the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSide {
    /// Rows in the ledger.
    pub rows: usize,
    /// Rows kept.
    pub used: usize,
    /// Iteration indices left out as warm-up.
    pub warmup: IndexRuns,
    /// Iteration indices left out as perturbed.
    pub perturbed: IndexRuns,
    /// Iteration indices left out as incomplete.
    pub incomplete: IndexRuns,
    /// Distribution of the metric over the kept rows, ns.
    pub distribution: Distribution,
}

/// Change of one scope between A and B.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScopeChange {
    /// Scope path.
    pub path: String,
    /// The scope in A, when present.
    pub a: Option<ScopeStats>,
    /// The scope in B, when present.
    pub b: Option<ScopeStats>,
    /// Median host time A / B (over iterations where the scope ran); `None` unless both sides
    /// have a positive median.
    pub host_speedup: Option<f64>,
    /// Median inclusive device time A / B, as `host_speedup`.
    pub device_speedup: Option<f64>,
    /// Mean host time per iteration B − A (scope absent counts as 0), ns.
    pub host_delta_ns_per_iteration: f64,
    /// Mean launches per iteration B − A.
    pub launches_delta_per_iteration: f64,
}

/// Change of one kernel family between A and B.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FamilyChange {
    /// Family name.
    pub family: String,
    /// The family in A, when it ran.
    pub a: Option<FamilyStats>,
    /// The family in B, when it ran.
    pub b: Option<FamilyStats>,
    /// Mean kernel time per iteration A / B; `None` unless both are positive.
    pub speedup: Option<f64>,
    /// Mean kernel time per iteration B − A (absent counts as 0), ns.
    pub delta_ns_per_iteration: f64,
    /// Mean launches per iteration B − A.
    pub launches_delta_per_iteration: f64,
}

/// Launch counts per iteration (means over kept rows) on each side.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LaunchChange {
    /// Kernel launches per iteration in A.
    pub kernels_a: f64,
    /// Kernel launches per iteration in B.
    pub kernels_b: f64,
    /// Memcpy operations per iteration in A.
    pub memcpy_a: f64,
    /// Memcpy operations per iteration in B.
    pub memcpy_b: f64,
    /// Memset operations per iteration in A.
    pub memset_a: f64,
    /// Memset operations per iteration in B.
    pub memset_b: f64,
}

/// The result of comparing ledger A (baseline) with ledger B (the change).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Metric compared.
    pub metric: IterationMetric,
    /// Baseline.
    pub a: RunSide,
    /// Change.
    pub b: RunSide,
    /// `median(A) / median(B)` with its interval.
    pub speedup: SpeedupEstimate,
    /// `1 - 1/S`: fraction of per-iteration time saved (negative when B is slower).
    pub delta_t: f64,
    /// `median(B) - median(A)`, ns.
    pub delta_median_ns: f64,
    /// Per-scope changes, sorted by path.
    pub scopes: Vec<ScopeChange>,
    /// Per-family changes, largest absolute time change first.
    pub families: Vec<FamilyChange>,
    /// Launch counts per iteration.
    pub launches: LaunchChange,
    /// Per device and cause, the median idle time per iteration on each side; empty when
    /// neither side split idle time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub idle_causes: Vec<IdleCauseChange>,
    /// Reasons to doubt the comparison.
    pub warnings: Vec<String>,
    /// Why the runs cannot be compared at all (different GPUs, different profiling levels):
    /// when not empty, [`Comparison::verdict`] is [`Verdict::NotComparable`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub incomparable: Vec<String>,
}

impl Comparison {
    /// The verdict: [`Verdict::NotComparable`] when the runs differ in what they measure, else
    /// the one the interval gives ([`Verdict::from_estimate`]).
    pub fn verdict(&self) -> Verdict {
        if self.incomparable.is_empty() {
            Verdict::from_estimate(&self.speedup)
        } else {
            Verdict::NotComparable
        }
    }
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (a > 0.0 && b > 0.0 && a.is_finite() && b.is_finite()).then(|| a / b)
}

fn kernel_launches(r: &IterationRow) -> u64 {
    r.kernels
        .iter()
        .map(|k| k.count)
        .fold(0, u64::saturating_add)
}

fn memcpy_ops(r: &IterationRow) -> u64 {
    r.memcpy
        .iter()
        .map(|k| k.count)
        .fold(0, u64::saturating_add)
}

fn memset_ops(r: &IterationRow) -> u64 {
    r.memset
        .iter()
        .map(|k| k.count)
        .fold(0, u64::saturating_add)
}

/// What one side brings to a comparison, from its [`CompareSide`].
#[derive(Debug)]
struct SideFigures {
    rows: usize,
    used: usize,
    warmup: IndexRuns,
    perturbed: IndexRuns,
    incomplete: IndexRuns,
    /// The metric's positive values the bootstrap resamples: every kept one, in ledger order, or
    /// a uniform sample of them past the bound.
    values: Vec<f64>,
    distribution: Option<Distribution>,
    scopes: Vec<ScopeStats>,
    families: Vec<FamilyStats>,
    /// Kernel launches, memcpy and memset operations per kept iteration.
    ops: [f64; 3],
    records: RecordCounts,
    nvml: OperatingPoints,
    /// Idle time by cause of the kept rows that split it.
    idle: crate::analysis::idle::IdleCauses,
}

impl SideFigures {
    /// The side as the comparison reports it; fails, naming the side (`name`) and the metric,
    /// when it kept no row with a positive value of the metric.
    fn run_side(&self, name: &'static str, metric_name: &str) -> Result<RunSide, CompareError> {
        let err = CompareError::NoUsableRows {
            side: name,
            metric: metric_name.to_string(),
            rows: self.rows,
            kept: self.used,
        };
        let distribution = self.distribution.ok_or(err)?;
        Ok(RunSide {
            rows: self.rows,
            used: self.used,
            warmup: self.warmup.clone(),
            perturbed: self.perturbed.clone(),
            incomplete: self.incomplete.clone(),
            distribution,
        })
    }

    /// Whether any of the side's percentiles comes from a quantile sketch (its metric's, a
    /// scope's or a family's), which the warnings must say.
    fn sketched(&self) -> bool {
        self.distribution.is_some_and(|d| d.sketched)
            || self.scopes.iter().any(|s| {
                [
                    s.calls,
                    s.host_ns,
                    s.device_ns,
                    s.device_ns_inclusive,
                    s.launches,
                ]
                .iter()
                .any(|d| d.sketched)
            })
            || self
                .families
                .iter()
                .any(|x| x.total_ns.sketched || x.launches.sketched)
            || (self.idle.causes.iter()).any(|c| c.per_iteration_ns.sketched)
    }
}

fn check_options(opts: &CompareOptions) -> Result<(), CompareError> {
    if opts.resamples == 0 {
        return Err(CompareError::InvalidOption("resamples must be positive"));
    }
    if !(opts.confidence > 0.0 && opts.confidence < 1.0) {
        return Err(CompareError::InvalidOption("confidence must be in (0, 1)"));
    }
    Ok(())
}

/// Compares ledger `a` (baseline) with ledger `b` (the change).
///
/// # Errors
/// [`CompareError::NoUsableRows`] when a side keeps no row with a positive value of the metric;
/// [`CompareError::InvalidOption`] for `resamples == 0` or a confidence outside `(0, 1)`.
pub fn compare(
    a: LedgerView<'_>,
    b: LedgerView<'_>,
    opts: &CompareOptions,
) -> Result<Comparison, CompareError> {
    check_options(opts)?;
    compare_streamed(a.header, a.side(opts), b.header, b.side(opts), opts)
}

impl<'a> LedgerView<'a> {
    /// The ledger's rows pushed into a [`CompareSide`] that keeps every figure exact, its
    /// bootstrap resampling every kept value: a ledger in memory is the streamed comparison's
    /// small case.
    fn side<'o>(&self, opts: &'o CompareOptions) -> CompareSide<'o, &'a IterationRow> {
        let mut side = CompareSide::for_rows(opts, self.rows.len());
        self.rows.iter().for_each(|r| side.push(r));
        side
    }
}

/// The comparison of two sides' figures.
fn combine(
    ha: &Header,
    a: SideFigures,
    hb: &Header,
    b: SideFigures,
    opts: &CompareOptions,
) -> Result<Comparison, CompareError> {
    let metric_name = format!("{:?}", opts.metric);
    let side_a = a.run_side("A", &metric_name)?;
    let side_b = b.run_side("B", &metric_name)?;
    let speedup = bootstrap_speedup(
        &a.values,
        &b.values,
        opts.resamples,
        opts.confidence,
        opts.seed,
    )
    .ok_or(CompareError::NoUsableRows {
        side: "A or B",
        metric: metric_name,
        rows: a.rows + b.rows,
        kept: a.used + b.used,
    })?;

    let any_sketched = a.sketched() || b.sketched();
    let scopes = scope_changes(a.scopes, b.scopes);
    let families = family_changes(a.families, b.families);
    let idle_causes = idle::idle_cause_changes(&a.idle, &b.idle);
    let [kernels_a, memcpy_a, memset_a] = a.ops;
    let [kernels_b, memcpy_b, memset_b] = b.ops;

    let incomparable = comparability(ha, hb);
    let mut warnings = Vec::new();
    environment_warnings(ha, hb, &mut warnings);
    selection_warnings(&side_a, &side_b, opts, &mut warnings);
    record_warnings("A", a.records, &mut warnings);
    record_warnings("B", b.records, &mut warnings);
    nvml_warnings(&a.nvml, &b.nvml, opts.nvml_tolerance, &mut warnings);
    sketch_warnings(&speedup, (&side_a, &side_b), any_sketched, &mut warnings);

    Ok(Comparison {
        metric: opts.metric,
        delta_t: 1.0 - 1.0 / speedup.speedup,
        delta_median_ns: side_b.distribution.median - side_a.distribution.median,
        a: side_a,
        b: side_b,
        speedup,
        scopes,
        families,
        launches: LaunchChange {
            kernels_a,
            kernels_b,
            memcpy_a,
            memcpy_b,
            memset_a,
            memset_b,
        },
        idle_causes,
        warnings,
        incomparable,
    })
}

/// Where the figures are approximate: the bootstrap resampled a sample of a side's kept
/// iterations, or some percentile (`any_sketched`) comes from a quantile sketch.
fn sketch_warnings(
    speedup: &SpeedupEstimate,
    (side_a, side_b): (&RunSide, &RunSide),
    any_sketched: bool,
    warnings: &mut Vec<String>,
) {
    if speedup.sample_a < side_a.distribution.n || speedup.sample_b < side_b.distribution.n {
        warnings.push(format!(
            "the bootstrap resampled a uniform sample of {} of A's {} and {} of B's {} kept \
             iterations (the speed-up is the ratio of the samples' medians); the medians shown \
             are from a quantile sketch, within {} %",
            speedup.sample_a,
            side_a.distribution.n,
            speedup.sample_b,
            side_b.distribution.n,
            crate::analysis::series::SKETCH_RELATIVE_ERROR * 100.0
        ));
    }

    if any_sketched {
        warnings.push(format!(
            "percentiles from a quantile sketch: a series passed {} values, or a side's series {} \
             together; each median, p90 and p99 is within {} % of the exact one",
            crate::analysis::series::EXACT_VALUES,
            crate::analysis::series::EXACT_BUDGET,
            crate::analysis::series::SKETCH_RELATIVE_ERROR * 100.0
        ));
    }
}

/// The key two sides match a name by: the folded names' entry matches the other side's, whatever
/// the number each side folded.
fn match_key(name: &str) -> String {
    if is_other_names(name) {
        OTHER_NAMES.to_string()
    } else {
        name.to_string()
    }
}

fn scope_changes(a: Vec<ScopeStats>, b: Vec<ScopeStats>) -> Vec<ScopeChange> {
    let mut sa: BTreeMap<String, ScopeStats> =
        a.into_iter().map(|s| (match_key(&s.path), s)).collect();
    let mut sb: BTreeMap<String, ScopeStats> =
        b.into_iter().map(|s| (match_key(&s.path), s)).collect();
    let paths: BTreeSet<String> = sa.keys().chain(sb.keys()).cloned().collect();
    paths
        .into_iter()
        .map(|path| {
            let (x, y) = (sa.remove(&path), sb.remove(&path));
            let per_iter =
                |s: &Option<ScopeStats>, f: fn(&ScopeStats) -> f64| s.as_ref().map_or(0.0, f);
            ScopeChange {
                host_speedup: x
                    .as_ref()
                    .zip(y.as_ref())
                    .and_then(|(x, y)| ratio(x.host_ns.median, y.host_ns.median)),
                device_speedup: x.as_ref().zip(y.as_ref()).and_then(|(x, y)| {
                    ratio(x.device_ns_inclusive.median, y.device_ns_inclusive.median)
                }),
                host_delta_ns_per_iteration: per_iter(&y, |s| s.host_ns_mean_per_iteration)
                    - per_iter(&x, |s| s.host_ns_mean_per_iteration),
                launches_delta_per_iteration: per_iter(&y, |s| s.launches_mean_per_iteration)
                    - per_iter(&x, |s| s.launches_mean_per_iteration),
                path,
                a: x,
                b: y,
            }
        })
        .collect()
}

fn family_changes(a: Vec<FamilyStats>, b: Vec<FamilyStats>) -> Vec<FamilyChange> {
    let mut fa: BTreeMap<String, FamilyStats> =
        a.into_iter().map(|s| (match_key(&s.family), s)).collect();
    let mut fb: BTreeMap<String, FamilyStats> =
        b.into_iter().map(|s| (match_key(&s.family), s)).collect();
    let names: BTreeSet<String> = fa.keys().chain(fb.keys()).cloned().collect();
    let mut out: Vec<FamilyChange> = names
        .into_iter()
        .map(|family| {
            let (x, y) = (fa.remove(&family), fb.remove(&family));
            let t =
                |s: &Option<FamilyStats>| s.as_ref().map_or(0.0, |s| s.total_ns_mean_per_iteration);
            let l =
                |s: &Option<FamilyStats>| s.as_ref().map_or(0.0, |s| s.launches_mean_per_iteration);
            FamilyChange {
                speedup: ratio(t(&x), t(&y)),
                delta_ns_per_iteration: t(&y) - t(&x),
                launches_delta_per_iteration: l(&y) - l(&x),
                family,
                a: x,
                b: y,
            }
        })
        .collect();
    out.sort_by(|p, q| {
        q.delta_ns_per_iteration
            .abs()
            .total_cmp(&p.delta_ns_per_iteration.abs())
            .then_with(|| p.family.cmp(&q.family))
    });
    out
}
