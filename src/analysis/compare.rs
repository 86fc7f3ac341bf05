//! A/B comparison of two ledgers of the same workload (book ch. 12).
//!
//! # The speed-up and its interval
//! The speed-up is `S = median(A) / median(B)` of the per-iteration metric (host wall time by
//! default) over the rows each side keeps ([`select_rows`]): `S > 1` means B is faster. Its
//! interval is a percentile bootstrap: each of `resamples` rounds (default 10 000) draws `n_A`
//! iterations of A and `n_B` of B with replacement, independently, and takes the ratio of their
//! medians; the interval is the `(1-c)/2` and `(1+c)/2` percentiles (linear interpolation, see
//! [`super::stats`]) of those ratios, `c` the confidence (default 0.95). Draws come from a
//! SplitMix64 generator seeded with `seed` (default [`DEFAULT_SEED`]), so the same inputs always
//! give the same interval, on every platform and version. The bootstrap treats iterations as
//! independent: slow drift (thermal, clocks) inside a run makes the interval too narrow, which is
//! why the comparison also warns when clocks or power differ.
//!
//! `Δt = 1 - 1/S` is the fraction of iteration time saved (book ch. 13, case G).
//!
//! # Warnings
//! A comparison is only as good as its control: the warnings name what differs between the runs
//! (GPU model and board, driver, CUDA, CUPTI, host; every other setting of the environment record
//! field by field, such as power limits, application clocks, persistence, ECC and MIG modes, CPU
//! governor and CUDA environment variables; profiling level; perturbed, incomplete or warm-up
//! iterations; dropped records; the medians of the per-iteration NVML SM and memory clocks, power
//! and temperature, and the throttle reasons seen) and when a check was impossible (NVML missing on
//! a side). States at start that vary from run to run (memory in use, clocks of an idle GPU) and
//! per-process fields (pid, start time, command line) are not compared.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::families::FamilyRules;
use super::stats::{
    family_distributions, median_in_place, percentile_sorted, scope_distributions, select_rows,
    Distribution, FamilyStats, IterationMetric, RowFilter, ScopeStats,
};
use crate::ledger::schema::{Header, IterationRow};

/// Default bootstrap seed.
pub const DEFAULT_SEED: u64 = 0x5EED_1ED6_E500_0001;

/// Default number of bootstrap resamples.
pub const DEFAULT_RESAMPLES: usize = 10_000;

/// Fewer kept iterations than this on a side draws a warning.
pub const FEW_ITERATIONS: usize = 10;

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
}

impl SpeedupEstimate {
    /// Whether the interval excludes 1: the runs differ at this confidence.
    pub fn is_significant(&self) -> bool {
        self.ci_low > 1.0 || self.ci_high < 1.0
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): small, fast, and fixed here so that intervals are
/// reproducible across platforms and versions.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`), without modulo bias (Lemire 2019).
    fn below(&mut self, n: u64) -> u64 {
        let mut m = u128::from(self.next_u64()) * u128::from(n);
        if (m as u64) < n {
            let threshold = n.wrapping_neg() % n;
            while (m as u64) < threshold {
                m = u128::from(self.next_u64()) * u128::from(n);
            }
        }
        (m >> 64) as u64
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
    let (mut ra, mut rb) = (vec![0.0; a.len()], vec![0.0; b.len()]);
    let mut ratios = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        for x in ra.iter_mut() {
            *x = a[rng.below(a.len() as u64) as usize];
        }
        for x in rb.iter_mut() {
            *x = b[rng.below(b.len() as u64) as usize];
        }
        let (Some(sa), Some(sb)) = (median_in_place(&mut ra), median_in_place(&mut rb)) else {
            continue;
        };
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
    })
}

/// What one side contributed to the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSide {
    /// Rows in the ledger.
    pub rows: usize,
    /// Rows kept.
    pub used: usize,
    /// Iteration indices left out as warm-up.
    pub warmup: Vec<u64>,
    /// Iteration indices left out as perturbed.
    pub perturbed: Vec<u64>,
    /// Iteration indices left out as incomplete.
    pub incomplete: Vec<u64>,
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
    /// Reasons to doubt the comparison.
    pub warnings: Vec<String>,
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (a > 0.0 && b > 0.0 && a.is_finite() && b.is_finite()).then(|| a / b)
}

fn mean_of(rows: &[&IterationRow], f: impl Fn(&IterationRow) -> u64) -> f64 {
    if rows.is_empty() {
        return 0.0;
    }
    rows.iter().map(|r| f(r) as f64).sum::<f64>() / rows.len() as f64
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
    if opts.resamples == 0 {
        return Err(CompareError::InvalidOption("resamples must be positive"));
    }
    if !(opts.confidence > 0.0 && opts.confidence < 1.0) {
        return Err(CompareError::InvalidOption("confidence must be in (0, 1)"));
    }
    let sel_a = select_rows(a.rows, &opts.filter);
    let sel_b = select_rows(b.rows, &opts.filter);
    let metric_name = format!("{:?}", opts.metric);
    let side = |name: &'static str, view: &LedgerView<'_>, sel: &super::stats::RowSelection<'_>| {
        let values: Vec<f64> = opts
            .metric
            .values(sel.used.iter().copied())
            .into_iter()
            .filter(|v| *v > 0.0)
            .collect();
        let err = CompareError::NoUsableRows {
            side: name,
            metric: metric_name.clone(),
            rows: view.rows.len(),
            kept: sel.used.len(),
        };
        let distribution = Distribution::from_samples(&values).ok_or(err)?;
        Ok::<_, CompareError>((
            values,
            RunSide {
                rows: view.rows.len(),
                used: sel.used.len(),
                warmup: sel.warmup.clone(),
                perturbed: sel.perturbed.clone(),
                incomplete: sel.incomplete.clone(),
                distribution,
            },
        ))
    };
    let (va, side_a) = side("A", &a, &sel_a)?;
    let (vb, side_b) = side("B", &b, &sel_b)?;
    let speedup = bootstrap_speedup(&va, &vb, opts.resamples, opts.confidence, opts.seed).ok_or(
        CompareError::NoUsableRows {
            side: "A or B",
            metric: metric_name,
            rows: a.rows.len() + b.rows.len(),
            kept: sel_a.used.len() + sel_b.used.len(),
        },
    )?;

    let scopes = scope_changes(&sel_a.used, &sel_b.used);
    let families = family_changes(&sel_a.used, &sel_b.used, &opts.family_rules);
    let count = |f: fn(&IterationRow) -> u64| (mean_of(&sel_a.used, f), mean_of(&sel_b.used, f));
    let (kernels_a, kernels_b) = count(|r| r.kernels.iter().map(|k| k.count).sum());
    let (memcpy_a, memcpy_b) = count(|r| r.memcpy.iter().map(|k| k.count).sum());
    let (memset_a, memset_b) = count(|r| r.memset.iter().map(|k| k.count).sum());

    let mut warnings = Vec::new();
    environment_warnings(a.header, b.header, &mut warnings);
    selection_warnings(&side_a, &side_b, opts, &mut warnings);
    record_warnings("A", &sel_a.used, &mut warnings);
    record_warnings("B", &sel_b.used, &mut warnings);
    nvml_warnings(&sel_a.used, &sel_b.used, opts.nvml_tolerance, &mut warnings);

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
        warnings,
    })
}

fn scope_changes(a: &[&IterationRow], b: &[&IterationRow]) -> Vec<ScopeChange> {
    let mut sa: BTreeMap<String, ScopeStats> = scope_distributions(a.iter().copied())
        .into_iter()
        .map(|s| (s.path.clone(), s))
        .collect();
    let mut sb: BTreeMap<String, ScopeStats> = scope_distributions(b.iter().copied())
        .into_iter()
        .map(|s| (s.path.clone(), s))
        .collect();
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

fn family_changes(
    a: &[&IterationRow],
    b: &[&IterationRow],
    rules: &FamilyRules,
) -> Vec<FamilyChange> {
    let mut fa: BTreeMap<String, FamilyStats> = family_distributions(a.iter().copied(), rules)
        .into_iter()
        .map(|s| (s.family.clone(), s))
        .collect();
    let mut fb: BTreeMap<String, FamilyStats> = family_distributions(b.iter().copied(), rules)
        .into_iter()
        .map(|s| (s.family.clone(), s))
        .collect();
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

fn differ<T: PartialEq + std::fmt::Debug>(what: &str, a: &T, b: &T, out: &mut Vec<String>) {
    if a != b {
        out.push(format!("{what} differs: A {a:?}, B {b:?}"));
    }
}

/// Environment paths not compared field by field: compared on their own above, expected to differ
/// between two runs (process, start time, command line), or a state at start that varies from
/// run to run without being a setting (memory in use, clocks and temperature of an idle GPU).
/// `*` stands for any array index.
const ENV_NOT_DIFFED: &[&str] = &[
    "gpus",
    "driver_version",
    "cuda_driver_version",
    "cupti_api_version",
    "hostname",
    "command_line",
    "missing",
    "cupti_path",
    "pid",
    "start_unix_ns",
    "start_utc",
    "gpu_ledger_version",
    "nvml_version",
    "nvml_gpus[*].index",
    "nvml_gpus[*].uuid",
    "nvml_gpus[*].pci_bus_id",
    "nvml_gpus[*].numa_node",
    "nvml_gpus[*].memory_used_bytes",
    "nvml_gpus[*].pstate",
    "nvml_gpus[*].sm_clock_mhz",
    "nvml_gpus[*].mem_clock_mhz",
    "nvml_gpus[*].temperature_c",
    "nvml_gpus[*].power_mw",
    "nvml_gpus[*].throttle_reasons",
    "nvml_gpus[*].pcie_link_gen",
    "nvml_gpus[*].pcie_link_width",
    "host.virtualization_evidence",
];

/// Most environment differences listed one by one; the rest are counted.
const MAX_ENV_DIFFS: usize = 12;

/// Flattens a JSON value into `(path, leaf)` pairs: `host.cpu_model`, `nvml_gpus[0].name`.
fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, Value>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&p, x, out);
            }
        }
        Value::Array(a) if a.iter().any(|x| x.is_object() || x.is_array()) => {
            for (i, x) in a.iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), x, out);
            }
        }
        _ => {
            out.insert(prefix.to_string(), v.clone());
        }
    }
}

/// `nvml_gpus[3].power_mw` -> `nvml_gpus[*].power_mw`.
fn generic_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push_str("[*");
            }
            ']' => {
                in_index = false;
                out.push(']');
            }
            _ if in_index => {}
            _ => out.push(c),
        }
    }
    out
}

fn env_path_ignored(path: &str) -> bool {
    let g = generic_path(path);
    ENV_NOT_DIFFED
        .iter()
        .any(|ig| g == *ig || g.starts_with(&format!("{ig}.")) || g.starts_with(&format!("{ig}[")))
}

fn environment_warnings(a: &Header, b: &Header, out: &mut Vec<String>) {
    let (ea, eb) = (&a.environment, &b.environment);
    let gpus = |e: &crate::ledger::Environment| -> Vec<(String, [u32; 2], u32)> {
        e.gpus
            .iter()
            .map(|g| (g.name.clone(), g.compute_capability, g.sm_count))
            .collect()
    };
    differ(
        "GPU (name, compute capability, SMs)",
        &gpus(ea),
        &gpus(eb),
        out,
    );
    if gpus(ea) == gpus(eb) {
        let uuids = |e: &crate::ledger::Environment| -> Vec<Option<String>> {
            e.gpus.iter().map(|g| g.uuid.clone()).collect()
        };
        let (ua, ub) = (uuids(ea), uuids(eb));
        if ua
            .iter()
            .zip(&ub)
            .any(|(x, y)| x.is_some() && y.is_some() && x != y)
        {
            out.push(format!(
                "different GPU boards of the same model (UUID): A {ua:?}, B {ub:?}"
            ));
        }
    }
    differ(
        "driver version",
        &ea.driver_version,
        &eb.driver_version,
        out,
    );
    differ(
        "CUDA driver version",
        &ea.cuda_driver_version,
        &eb.cuda_driver_version,
        out,
    );
    differ(
        "CUPTI version",
        &ea.cupti_api_version,
        &eb.cupti_api_version,
        out,
    );
    differ("host", &ea.hostname, &eb.hostname, out);
    // Every other setting, field by field: GPU settings at start (power limit, application clocks,
    // persistence, ECC, MIG, compute mode), the host (CPU, governor, NUMA, container), CUDA
    // environment variables, and fields the record gains later.
    if let (Ok(va), Ok(vb)) = (serde_json::to_value(ea), serde_json::to_value(eb)) {
        let (mut fa, mut fb) = (BTreeMap::new(), BTreeMap::new());
        flatten("", &va, &mut fa);
        flatten("", &vb, &mut fb);
        let keys: BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
        let diffs: Vec<String> = keys
            .into_iter()
            .filter(|k| !env_path_ignored(k))
            .filter_map(|k| {
                let (x, y) = (
                    fa.get(k).unwrap_or(&Value::Null),
                    fb.get(k).unwrap_or(&Value::Null),
                );
                (x != y).then(|| format!("environment {k} differs: A {}, B {}", short(x), short(y)))
            })
            .collect();
        let n = diffs.len();
        out.extend(diffs.into_iter().take(MAX_ENV_DIFFS));
        if n > MAX_ENV_DIFFS {
            out.push(format!(
                "… and {} more environment differences",
                n - MAX_ENV_DIFFS
            ));
        }
    }
    differ("profiling level", &a.config.level, &b.config.level, out);
    differ(
        "counter iterations",
        &a.config.counter_iterations,
        &b.config.counter_iterations,
        out,
    );
    differ(
        "NVML sampling period (ms)",
        &a.config.nvml_period_ms,
        &b.config.nvml_period_ms,
        out,
    );
    differ(
        "NVML energy counter period (ms)",
        &a.config.nvml_energy_period_ms,
        &b.config.nvml_energy_period_ms,
        out,
    );
    differ(
        "gpu-ledger version",
        &a.gpu_ledger_version,
        &b.gpu_ledger_version,
        out,
    );
    for (name, h) in [("A", a), ("B", b)] {
        for w in &h.warnings {
            out.push(format!("ledger {name} warns: {w}"));
        }
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        format!("{}…", s.chars().take(80).collect::<String>())
    } else {
        s
    }
}

fn selection_warnings(a: &RunSide, b: &RunSide, opts: &CompareOptions, out: &mut Vec<String>) {
    if a.perturbed.len() != b.perturbed.len() {
        let verb = if opts.filter.include_perturbed {
            "included"
        } else {
            "left out"
        };
        out.push(format!(
            "perturbation differs: A has {} perturbed iterations, B has {} ({verb})",
            a.perturbed.len(),
            b.perturbed.len()
        ));
    }
    for (name, s) in [("A", a), ("B", b)] {
        if opts.filter.include_perturbed && !s.perturbed.is_empty() {
            out.push(format!(
                "{name}: {} perturbed iterations are included in the timing",
                s.perturbed.len()
            ));
        }
        if !s.incomplete.is_empty() {
            out.push(format!(
                "{name}: {} incomplete iterations {}",
                s.incomplete.len(),
                if opts.filter.include_incomplete {
                    "are included"
                } else {
                    "were left out"
                }
            ));
        }
        if s.distribution.n < FEW_ITERATIONS {
            out.push(format!(
                "{name}: only {} iterations kept; the interval is unreliable",
                s.distribution.n
            ));
        }
    }
    if a.warmup.len() != b.warmup.len() {
        out.push(format!(
            "warm-up differs: {} iterations left out of A, {} of B",
            a.warmup.len(),
            b.warmup.len()
        ));
    }
}

fn record_warnings(name: &str, rows: &[&IterationRow], out: &mut Vec<String>) {
    let dropped: u64 = rows.iter().map(|r| r.dropped_records).sum();
    let missing: u64 = rows.iter().map(|r| r.missing_records).sum();
    if dropped > 0 || missing > 0 {
        out.push(format!(
            "{name}: {dropped} dropped and {missing} missing activity records in the kept iterations"
        ));
    }
}

/// Operating point of one device over a run's kept iterations: medians of the per-iteration
/// NVML figures, and every throttle reason seen.
#[derive(Debug, Default)]
struct OperatingPoint {
    figures: BTreeMap<&'static str, Vec<f64>>,
    throttle: BTreeSet<String>,
    throttle_known: bool,
}

fn operating_points(rows: &[&IterationRow]) -> BTreeMap<u32, OperatingPoint> {
    let mut out: BTreeMap<u32, OperatingPoint> = BTreeMap::new();
    for n in rows.iter().flat_map(|r| r.nvml.iter()) {
        let op = out.entry(n.device_id).or_default();
        let mut put = |name: &'static str, v: Option<f64>| {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                op.figures.entry(name).or_default().push(v);
            }
        };
        put(
            "SM clock mean (MHz)",
            n.sm_clock.as_ref().map(|c| c.mean_mhz),
        );
        put(
            "memory clock mean (MHz)",
            n.mem_clock.as_ref().map(|c| c.mean_mhz),
        );
        put("power mean (W)", n.power.as_ref().map(|p| p.mean_w));
        put("temperature max (°C)", n.temperature_max_c.map(f64::from));
        if n.throttle_samples > 0 {
            op.throttle_known = true;
            op.throttle.extend(n.throttle_reasons.iter().cloned());
        }
    }
    out
}

/// Warnings when the NVML operating point (clocks, power, temperature, throttle reasons) of the
/// kept iterations differs, per device, by more than `tolerance` (relative, on medians), or could
/// not be compared.
fn nvml_warnings(a: &[&IterationRow], b: &[&IterationRow], tolerance: f64, out: &mut Vec<String>) {
    let (pa, pb) = (operating_points(a), operating_points(b));
    match (pa.is_empty(), pb.is_empty()) {
        (true, true) => {
            out.push(
                "no NVML samples in either ledger: clocks and power could not be compared".into(),
            );
            return;
        }
        (true, false) | (false, true) => {
            let (has, lacks) = if pa.is_empty() {
                ("B", "A")
            } else {
                ("A", "B")
            };
            out.push(format!(
                "NVML was sampled in {has} only: clocks and power of {lacks} are unknown"
            ));
            return;
        }
        _ => {}
    }
    let devices: BTreeSet<u32> = pa.keys().chain(pb.keys()).copied().collect();
    for dev in devices {
        let (Some(x), Some(y)) = (pa.get(&dev), pb.get(&dev)) else {
            out.push(format!(
                "NVML samples of device {dev} are in one ledger only"
            ));
            continue;
        };
        let names: BTreeSet<&&str> = x.figures.keys().chain(y.figures.keys()).collect();
        for name in names {
            let (Some(va), Some(vb)) = (x.figures.get(*name), y.figures.get(*name)) else {
                out.push(format!(
                    "NVML {name} of device {dev} is recorded in one ledger only"
                ));
                continue;
            };
            let (Some(ma), Some(mb)) = (
                median_in_place(&mut va.clone()),
                median_in_place(&mut vb.clone()),
            ) else {
                continue;
            };
            let scale = ma.abs().max(mb.abs());
            if scale > 0.0 && (ma - mb).abs() / scale > tolerance {
                let pct = if ma != 0.0 {
                    format!(" ({:+.1}%)", (mb - ma) / ma.abs() * 100.0)
                } else {
                    String::new()
                };
                out.push(format!(
                    "NVML {name} of device {dev} differs: median A {ma:.1}, B {mb:.1}{pct}"
                ));
            }
        }
        if x.throttle_known && y.throttle_known && x.throttle != y.throttle {
            let only_a: Vec<&String> = x.throttle.difference(&y.throttle).collect();
            let only_b: Vec<&String> = y.throttle.difference(&x.throttle).collect();
            out.push(format!(
                "throttle reasons of device {dev} differ: only in A {only_a:?}, only in B {only_b:?}"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn splitmix_is_fixed_and_below_is_in_range() {
        // Reference values of SplitMix64 seeded with 0 (from the published reference code).
        let mut r = SplitMix64(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut r = SplitMix64(7);
        let mut seen = [0u32; 5];
        for _ in 0..10_000 {
            seen[r.below(5) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| (1800..2200).contains(&c)), "{seen:?}");
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

    #[test]
    fn environment_paths() {
        let mut m = BTreeMap::new();
        flatten(
            "",
            &json!({"a": {"b": 1, "c": [1, 2]}, "g": [{"x": 1}, {"x": 2}]}),
            &mut m,
        );
        let keys: Vec<&str> = m.keys().map(String::as_str).collect();
        assert_eq!(keys, ["a.b", "a.c", "g[0].x", "g[1].x"]);
        assert_eq!(
            generic_path("nvml_gpus[12].power_mw"),
            "nvml_gpus[*].power_mw"
        );
        assert!(env_path_ignored("nvml_gpus[3].power_mw"));
        assert!(env_path_ignored("command_line"));
        assert!(env_path_ignored("host.virtualization_evidence"));
        assert!(!env_path_ignored("nvml_gpus[3].power_limit_mw"));
        assert!(!env_path_ignored("host.cpu_governor"));
        assert!(!env_path_ignored("cuda_env.CUDA_LAUNCH_BLOCKING"));
    }
}
