//! One-page experiment ledgers: a baseline and one change run under the profiler at the timeline
//! level, each verified against its CPU reference, summarised as baseline, hypothesis, the one
//! change, kernel time, end-to-end time, and the hardware counters the predictions need measured
//! against what was predicted.
//!
//! [`measure`] runs the sides; [`ExperimentPage`] prints them. The first side is the baseline,
//! the second the change; any further side is shown for reference. Counters
//! ([`ExperimentConfig::with_counters`]) are collected after the timed iterations, on one more
//! iteration per side at the counters level (one range per kernel launch, kernel replay), so
//! the timed rows stay unperturbed.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{CudaContext, CudaStream};

use super::{all_kernel_time, gb_per_s, tflop_per_s, GpuWorkload, SuiteResult, Verification};
use crate::counters::{CounterConfig, CounterWindow, CountersSetup, RangeMode, ReplayMode};
use crate::kernels::Work;
use crate::ledger::schema::{IterationRow, KernelGroup, LaunchShape};
use crate::ledger::GpuRecord;
use crate::{Ledger, Level, Profiler};
use gpu_ledger_tools::analysis::occupancy::{analyze_kernel, DeviceLimits};
use gpu_ledger_tools::analysis::stats::Distribution;

/// One side of an experiment: a label and the workload it runs.
pub struct Side<'a> {
    /// Short label (`baseline`, `change`, `cuBLAS`).
    pub label: &'static str,
    /// The workload; [`GpuWorkload::run`] is called `repeats` times per iteration.
    pub workload: &'a mut dyn GpuWorkload,
}

/// How many iterations and runs per iteration [`measure`] makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExperimentConfig {
    /// Measured iterations per side.
    pub iterations: usize,
    /// Runs of the workload inside one iteration (back to back, one synchronize at the end).
    pub repeats: u32,
    /// Where the ledger goes.
    pub ledger_path: PathBuf,
    /// Hardware counters collected per kernel launch on one iteration per side after the timed
    /// ones; none when empty.
    pub counters: Vec<String>,
}

impl ExperimentConfig {
    /// `iterations` iterations of `repeats` runs, ledger at `ledger_path`, no counters.
    pub fn new(iterations: usize, repeats: u32, ledger_path: impl Into<PathBuf>) -> Self {
        ExperimentConfig {
            iterations,
            repeats,
            ledger_path: ledger_path.into(),
            counters: Vec::new(),
        }
    }

    /// Also collects `metrics` for every kernel launch of one run of each side, after the timed
    /// iterations (auto ranges with kernel replay: each kernel is replayed once per pass, so
    /// these rows are flagged perturbed and left out of the timings).
    #[must_use]
    pub fn with_counters(mut self, metrics: &[&str]) -> Self {
        self.counters = metrics.iter().map(|m| m.to_string()).collect();
        self
    }
}

/// One kernel launch's hardware counters, as the counters level recorded them.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelCounters {
    /// The kernel, from the timeline's record of the launch.
    pub kernel: String,
    /// Metric name to value.
    pub values: BTreeMap<String, f64>,
}

/// Static facts of one kernel as the ledger recorded it, with its theoretical occupancy.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelFacts {
    /// Kernel name.
    pub name: String,
    /// Its launch shape.
    pub shape: LaunchShape,
    /// Theoretical occupancy, when the device's limits are known.
    pub occupancy: Option<f64>,
    /// What limits it.
    pub limiter: Option<String>,
    /// Wave efficiency of the grid.
    pub wave_efficiency: Option<f64>,
    /// Mean duration per launch, ns.
    pub mean_ns: f64,
}

impl KernelFacts {
    /// The facts of a ledger kernel group, with occupancy from `limits` when given.
    pub fn of(k: &KernelGroup, limits: Option<&DeviceLimits>) -> Self {
        let analysis = limits.and_then(|l| analyze_kernel(k, l).ok());
        KernelFacts {
            name: k.name.clone(),
            shape: k.shape,
            occupancy: analysis.as_ref().map(|a| a.occupancy.occupancy),
            limiter: analysis.as_ref().map(|a| a.occupancy.limiter_names()),
            wave_efficiency: analysis
                .as_ref()
                .and_then(|a| a.waves.map(|w| w.efficiency)),
            mean_ns: k.total_ns as f64 / k.count.max(1) as f64,
        }
    }
}

/// What one side measured.
#[derive(Debug, Clone, PartialEq)]
pub struct SideResult {
    /// The side's label.
    pub label: String,
    /// The workload's name.
    pub name: String,
    /// Analytic work of one run.
    pub work: Work,
    /// Runs per iteration.
    pub repeats: u32,
    /// Kernel launches per iteration, as recorded.
    pub launches_per_iteration: f64,
    /// Per iteration: summed kernel and copy durations, ns.
    pub device_ns: Vec<f64>,
    /// Per iteration: host wall time from the iteration's start to its end (enqueue, execution
    /// and the final synchronize), ns.
    pub wall_ns: Vec<f64>,
    /// The kernels it launched.
    pub kernels: Vec<KernelFacts>,
    /// The check of its output against the CPU reference, made before profiling.
    pub verification: Verification,
    /// Counters of each kernel launch of one run, in launch order, when collected.
    pub counters: Vec<KernelCounters>,
    /// Why counters requested for this side are missing.
    pub counters_missing: Option<String>,
}

impl SideResult {
    /// Median device time per run, ns.
    pub fn device_per_run(&self) -> Option<Distribution> {
        let per: Vec<f64> = self
            .device_ns
            .iter()
            .map(|t| t / f64::from(self.repeats.max(1)))
            .collect();
        Distribution::from_samples(&per)
    }

    /// End-to-end time per run, ns.
    pub fn wall_per_run(&self) -> Option<Distribution> {
        let per: Vec<f64> = self
            .wall_ns
            .iter()
            .map(|t| t / f64::from(self.repeats.max(1)))
            .collect();
        Distribution::from_samples(&per)
    }

    /// `metric` summed over the launches of one run whose kernel name contains `kernel` (every
    /// launch when `kernel` is empty); `None` when no such launch has the metric.
    pub fn counter(&self, kernel: &str, metric: &str) -> Option<f64> {
        let values: Vec<f64> = self
            .counters
            .iter()
            .filter(|k| k.kernel.contains(kernel))
            .filter_map(|k| k.values.get(metric).copied())
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    }

    /// The mean of `metric` over the same launches as [`SideResult::counter`]: for ratios and
    /// percentages, which do not add.
    pub fn counter_mean(&self, kernel: &str, metric: &str) -> Option<f64> {
        let n = self
            .counters
            .iter()
            .filter(|k| k.kernel.contains(kernel) && k.values.contains_key(metric))
            .count();
        self.counter(kernel, metric).map(|sum| sum / n as f64)
    }
}

fn copy_time(row: &IterationRow) -> u64 {
    row.memcpy.iter().map(|c| c.total_ns).sum()
}

/// Runs each side: checks it against its CPU reference (poison, run, verify), warms up, then
/// profiles `iterations` iterations per side at the timeline level (sides interleaved, each
/// iteration one side's `repeats` runs inside a scope named by its label) and reads the ledger.
///
/// # Errors
/// A workload or profiler failure.
pub fn measure(sides: &mut [Side<'_>], cfg: &ExperimentConfig) -> SuiteResult<Vec<SideResult>> {
    let checks = check_and_warm(sides)?;
    let profiler = profiler_for(sides, cfg)?;
    run_sides(&profiler, sides, cfg)?;
    let summary = profiler.finish()?;
    let ledger = summary.read_ledger()?;
    Ok(side_results(sides, checks, &ledger, cfg))
}

/// Checks each side against its CPU reference (poison, run, verify) and warms it up with two
/// more runs, before anything is profiled.
fn check_and_warm(sides: &mut [Side<'_>]) -> SuiteResult<Vec<Verification>> {
    let mut checks = Vec::new();
    for side in sides.iter_mut() {
        let w = &mut *side.workload;
        w.poison()?;
        w.run()?;
        checks.push(w.verify()?);
        for _ in 0..2 {
            w.run()?;
        }
        w.stream().synchronize()?;
    }
    Ok(checks)
}

/// Starts the profiler at the timeline level; with counters, one collection per side on the
/// iterations after the warm-up and the timed ones.
fn profiler_for(sides: &[Side<'_>], cfg: &ExperimentConfig) -> SuiteResult<Profiler> {
    let n = sides.len();
    let mut builder = Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(&cfg.ledger_path)
        .settle(Duration::from_secs(5));
    if let (false, Some(first)) = (cfg.counters.is_empty(), sides.first()) {
        let config = CounterConfig {
            metrics: cfg.counters.clone(),
            range_mode: RangeMode::Auto,
            replay_mode: ReplayMode::Kernel,
            ..CounterConfig::default()
        };
        let mut setup = CountersSetup::new(first.workload.stream().context(), config);
        // After the warm-up iteration and the timed ones: one collection per side.
        setup.window = CounterWindow {
            skip: 1 + (cfg.iterations * n) as u64,
            collections: n as u64,
        };
        builder = builder.counters(setup);
    }
    Ok(builder.start()?)
}

/// The profiled iterations: one of every side that is left out, the timed ones (sides
/// interleaved), and with counters one more per side.
fn run_sides(
    profiler: &Profiler,
    sides: &mut [Side<'_>],
    cfg: &ExperimentConfig,
) -> SuiteResult<()> {
    // One iteration of every side to absorb CUPTI's first-launch instrumentation; left out.
    for side in sides.iter_mut() {
        side.workload.run()?;
        side.workload.stream().synchronize()?;
    }
    profiler.step();
    for _ in 0..cfg.iterations {
        for side in sides.iter_mut() {
            {
                let _s = Profiler::scope(side.label);
                for _ in 0..cfg.repeats {
                    side.workload.run()?;
                }
                side.workload.stream().synchronize()?;
            }
            profiler.step();
        }
    }
    if !cfg.counters.is_empty() {
        for side in sides.iter_mut() {
            {
                let _s = Profiler::scope(side.label);
                side.workload.run()?;
                side.workload.stream().synchronize()?;
            }
            profiler.step();
        }
    }
    Ok(())
}

/// What each side measured, read from the ledger: its timed rows, the kernels of its last one,
/// and its counters.
fn side_results(
    sides: &[Side<'_>],
    checks: Vec<Verification>,
    ledger: &Ledger,
    cfg: &ExperimentConfig,
) -> Vec<SideResult> {
    let n = sides.len();
    let limits = ledger
        .header
        .environment
        .gpus
        .first()
        .and_then(DeviceLimits::for_gpu);
    let not_collected = ledger
        .header
        .counters
        .as_ref()
        .and_then(|c| (!c.collected).then(|| c.reason.clone().unwrap_or_default()));
    let mut results = Vec::new();
    for (s, (side, check)) in sides.iter().zip(checks).enumerate() {
        let rows: Vec<&IterationRow> = ledger
            .iterations
            .iter()
            .filter(|r| {
                let i = r.index as usize;
                (1..=cfg.iterations * n).contains(&i) && (i - 1) % n == s
            })
            .collect();
        let mut kernels: Vec<KernelFacts> = Vec::new();
        if let Some(last) = rows.last() {
            kernels = last
                .kernels
                .iter()
                .map(|k| KernelFacts::of(k, limits.as_ref()))
                .collect();
        }
        let (counters, counters_missing) = if cfg.counters.is_empty() {
            (Vec::new(), None)
        } else {
            side_counters(
                &ledger.iterations,
                1 + cfg.iterations * n + s,
                &not_collected,
            )
        };
        let launches: u64 = rows.iter().map(|r| all_kernel_time(r).0).sum();
        results.push(SideResult {
            label: side.label.to_string(),
            name: side.workload.spec().name(),
            work: side.workload.spec().work(),
            repeats: cfg.repeats,
            launches_per_iteration: launches as f64 / rows.len().max(1) as f64,
            device_ns: rows
                .iter()
                .map(|r| (all_kernel_time(r).1 + copy_time(r)) as f64)
                .collect(),
            wall_ns: rows.iter().map(|r| r.host_wall_ns as f64).collect(),
            kernels,
            verification: check,
            counters,
            counters_missing,
        });
    }
    results
}

/// The counters of the row at `index` (a side's counters iteration), or why there are none.
fn side_counters(
    rows: &[IterationRow],
    index: usize,
    not_collected: &Option<String>,
) -> (Vec<KernelCounters>, Option<String>) {
    if let Some(reason) = not_collected {
        return (Vec::new(), Some(format!("not collected: {reason}")));
    }
    let Some(row) = rows.iter().find(|r| r.index as usize == index) else {
        return (Vec::new(), Some(format!("iteration {index} has no row")));
    };
    let Some(c) = &row.counters else {
        return (
            Vec::new(),
            Some(format!("iteration {index} was not in the counters window")),
        );
    };
    if let Some(e) = &c.error {
        return (Vec::new(), Some(e.clone()));
    }
    if !c.complete || c.ranges.is_empty() {
        return (
            Vec::new(),
            Some(format!(
                "iteration {index}: the collection holds no ranges (run {} of {})",
                c.run, c.runs
            )),
        );
    }
    let kernels = c
        .ranges
        .iter()
        .map(|r| KernelCounters {
            kernel: r
                .kernel
                .clone()
                .unwrap_or_else(|| format!("range {}", r.name)),
            values: r.values.clone(),
        })
        .collect();
    (kernels, None)
}

/// A prediction that needs a counter, checked against the measured value.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterCheck {
    /// What is measured (`baseline: DRAM bytes read per element`).
    pub what: String,
    /// The measured value, when the counters were collected.
    pub measured: Option<f64>,
    /// The prediction as a rule (`8 ± 2 %`, `< 1 % of the baseline's`).
    pub predicted: String,
    /// Whether the measured value meets it; `None` when not measured.
    pub met: Option<bool>,
}

/// A one-page experiment ledger.
#[derive(Debug, Clone)]
pub struct ExperimentPage {
    /// Title (`ex1 vector add: bandwidth and launch overhead`).
    pub title: String,
    /// The GPU.
    pub device: String,
    /// What the baseline is.
    pub baseline: String,
    /// The hypothesis, written before the run: because of what, the change should move which
    /// figure, and how far.
    pub hypothesis: String,
    /// The one change.
    pub change: String,
    /// The measured sides, baseline first.
    pub results: Vec<SideResult>,
    /// What counters say, or why none were collected.
    pub counters: String,
    /// The predictions that need counters, measured.
    pub checks: Vec<CounterCheck>,
    /// Further lines (predictions checked, caveats).
    pub notes: Vec<String>,
    /// The ledger written.
    pub ledger_path: PathBuf,
}

impl ExperimentPage {
    /// A page with the default counters line (not collected at the timeline level).
    pub fn new(
        title: impl Into<String>,
        device: impl Into<String>,
        baseline: impl Into<String>,
        hypothesis: impl Into<String>,
        change: impl Into<String>,
        results: Vec<SideResult>,
        ledger_path: &Path,
    ) -> Self {
        let counters = counters_line(&results);
        ExperimentPage {
            title: title.into(),
            device: device.into(),
            baseline: baseline.into(),
            hypothesis: hypothesis.into(),
            change: change.into(),
            results,
            counters,
            checks: Vec::new(),
            notes: Vec::new(),
            ledger_path: ledger_path.to_path_buf(),
        }
    }

    /// Kernel-time and end-to-end speed-ups of side `i` over the baseline (medians per run).
    pub fn speedup(&self, i: usize) -> Option<(f64, f64)> {
        let base = self.results.first()?;
        let other = self.results.get(i)?;
        let k = base.device_per_run()?.median / other.device_per_run()?.median;
        let e = base.wall_per_run()?.median / other.wall_per_run()?.median;
        Some((k, e))
    }

    /// Checks a prediction against `measured` (`None`: not collected): `ok` says whether the
    /// value meets `predicted`.
    pub fn check(
        &mut self,
        what: impl Into<String>,
        measured: Option<f64>,
        predicted: impl Into<String>,
        ok: impl Fn(f64) -> bool,
    ) {
        self.checks.push(CounterCheck {
            what: what.into(),
            measured,
            met: measured.map(ok),
            predicted: predicted.into(),
        });
    }

    /// True when every side's output matched its reference.
    pub fn all_correct(&self) -> bool {
        self.results.iter().all(|r| r.verification.passed())
    }
}

fn wrap(f: &mut fmt::Formatter<'_>, label: &str, text: &str) -> fmt::Result {
    const WIDTH: usize = 86;
    let mut line = String::new();
    let mut first = true;
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > WIDTH {
            writeln!(f, "{:<12}{line}", if first { label } else { "" })?;
            first = false;
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    writeln!(f, "{:<12}{line}", if first { label } else { "" })
}

fn us(d: Option<&Distribution>, pick: fn(&Distribution) -> f64) -> String {
    d.map(|d| format!("{:.1}", pick(d) / 1e3))
        .unwrap_or_else(|| "-".into())
}

impl fmt::Display for ExperimentPage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_heading(f)?;
        writeln!(f)?;
        self.write_timings(f)?;
        writeln!(f)?;
        self.write_kernels(f)?;
        writeln!(f)?;
        self.write_outcome(f)
    }
}

impl ExperimentPage {
    /// The title between rules, then what the baseline, the hypothesis and the change are.
    fn write_heading(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", "=".repeat(98))?;
        writeln!(f, "{}", self.title)?;
        writeln!(f, "{}", "=".repeat(98))?;
        wrap(f, "device", &self.device)?;
        wrap(f, "baseline", &self.baseline)?;
        wrap(f, "hypothesis", &self.hypothesis)?;
        wrap(f, "change", &self.change)
    }

    /// The table of each side's kernel and end-to-end times per run, throughput and launches.
    fn write_timings(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<10} {:<36} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>6}",
            "side",
            "workload",
            "kern p50",
            "kern p90",
            "e2e p50",
            "e2e p90",
            "GB/s",
            "TFLOP/s",
            "launch"
        )?;
        writeln!(
            f,
            "{:<10} {:<36} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>6}",
            "", "", "µs/run", "µs/run", "µs/run", "µs/run", "(kernel)", "(kernel)", "/run"
        )?;
        for r in &self.results {
            let dev = r.device_per_run();
            let wall = r.wall_per_run();
            let med = dev.as_ref().map(|d| d.median).unwrap_or(f64::NAN);
            let mut name = r.name.clone();
            if name.len() > 36 {
                name.truncate(35);
                name.push('…');
            }
            writeln!(
                f,
                "{:<10} {:<36} {:>9} {:>9} {:>9} {:>9} {:>8.0} {:>8.2} {:>6.1}",
                r.label,
                name,
                us(dev.as_ref(), |d| d.median),
                us(dev.as_ref(), |d| d.p90),
                us(wall.as_ref(), |d| d.median),
                us(wall.as_ref(), |d| d.p90),
                gb_per_s(r.work.bytes, med),
                tflop_per_s(r.work.flops, med),
                r.launches_per_iteration / f64::from(r.repeats.max(1)),
            )?;
        }
        Ok(())
    }

    /// The table of each side's kernels: launch shape, resources, occupancy and waves.
    fn write_kernels(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<10} {:<28} {:>13} {:>9} {:>5} {:>13} {:>6} {:>14} {:>6}",
            "side", "kernel", "grid", "block", "regs", "smem st+dyn", "local", "occupancy", "waves"
        )?;
        for r in &self.results {
            for k in &r.kernels {
                let mut name = k.name.clone();
                if name.len() > 28 {
                    name.truncate(27);
                    name.push('…');
                }
                let s = &k.shape;
                let occ = match (&k.occupancy, &k.limiter) {
                    (Some(o), Some(l)) => format!("{:.0}% {l}", o * 100.0),
                    _ => "-".into(),
                };
                writeln!(
                    f,
                    "{:<10} {:<28} {:>13} {:>9} {:>5} {:>13} {:>6} {:>14} {:>6}",
                    r.label,
                    name,
                    format!("{}x{}x{}", s.grid[0], s.grid[1], s.grid[2]),
                    format!("{}x{}x{}", s.block[0], s.block[1], s.block[2]),
                    s.registers_per_thread,
                    format!("{}+{}", s.static_shared_bytes, s.dynamic_shared_bytes),
                    s.local_bytes_per_thread,
                    occ,
                    k.wave_efficiency
                        .map(|w| format!("{:.0}%", w * 100.0))
                        .unwrap_or_else(|| "-".into()),
                )?;
            }
        }
        Ok(())
    }

    /// What came out: each side's verification, the counters and the predictions checked
    /// against them, the speed-ups over the baseline, the notes and the ledger's path.
    fn write_outcome(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in &self.results {
            wrap(f, "correct", &format!("{}: {}", r.label, r.verification))?;
        }
        wrap(f, "counters", &self.counters)?;
        write_counters(f, &self.results)?;
        for c in &self.checks {
            let (measured, verdict) = match (c.measured, c.met) {
                (Some(m), Some(true)) => (fmt_value(m), "met"),
                (Some(m), _) => (fmt_value(m), "NOT MET"),
                (None, _) => ("-".to_string(), "not measured"),
            };
            wrap(
                f,
                "predicted",
                &format!(
                    "{}: measured {measured}, predicted {}: {verdict}",
                    c.what, c.predicted
                ),
            )?;
        }
        for i in 1..self.results.len() {
            if let Some((k, e)) = self.speedup(i) {
                wrap(
                    f,
                    "result",
                    &format!(
                        "{} vs {}: kernel time ×{k:.2}, end-to-end ×{e:.2} (baseline median / \
                         this median, per run; >1 is faster)",
                        self.results[i].label, self.results[0].label
                    ),
                )?;
            }
        }
        for n in &self.notes {
            wrap(f, "note", n)?;
        }
        wrap(f, "ledger", &self.ledger_path.display().to_string())?;
        Ok(())
    }
}

/// The page's counters line: how they were collected, or why they were not.
fn counters_line(results: &[SideResult]) -> String {
    let missing: Vec<String> = results
        .iter()
        .filter_map(|r| {
            r.counters_missing
                .as_ref()
                .map(|m| format!("{}: {m}", r.label))
        })
        .collect();
    if results.iter().all(|r| r.counters.is_empty()) && missing.is_empty() {
        return "not requested".into();
    }
    let mut line = "per kernel launch on one run of each side after the timed iterations \
                    (auto ranges, kernel replay; those rows are flagged perturbed)"
        .to_string();
    if !missing.is_empty() {
        line.push_str("; missing: ");
        line.push_str(&missing.join("; "));
    }
    line
}

/// A counter value: integers as integers, the rest with three significant decimals.
fn fmt_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Each side's kernels with their counter values, one metric per line.
fn write_counters(f: &mut fmt::Formatter<'_>, results: &[SideResult]) -> fmt::Result {
    for r in results {
        for k in &r.counters {
            let mut name = k.kernel.clone();
            if name.len() > 28 {
                name.truncate(27);
                name.push('…');
            }
            for (metric, v) in &k.values {
                writeln!(
                    f,
                    "{:<12}{:<10} {:<28} {:<52} {:>14}",
                    "",
                    r.label,
                    name,
                    metric,
                    fmt_value(*v)
                )?;
            }
        }
    }
    Ok(())
}

/// The device line for a page: name, compute capability and SM count.
pub fn device_line(gpu: &GpuRecord) -> String {
    format!(
        "{} (sm_{}{}, {} SMs)",
        gpu.name, gpu.compute_capability[0], gpu.compute_capability[1], gpu.sm_count
    )
}

/// An example's exit status: success when every output matched its CPU reference; otherwise
/// one line on stderr, prefixed with `example`, and failure.
pub fn exit_code(
    example: &str,
    result: Result<bool, Box<dyn std::error::Error>>,
) -> std::process::ExitCode {
    match result {
        Ok(true) => return std::process::ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("{example}: a kernel's output did not match its CPU reference")
        }
        Err(e) => eprintln!("{example}: {e}"),
    }
    std::process::ExitCode::FAILURE
}

/// The GPU an example runs on.
pub struct Device {
    /// CUDA context of device 0.
    pub ctx: Arc<CudaContext>,
    /// Its default stream.
    pub stream: Arc<CudaStream>,
    /// Name, compute capability, SM count.
    pub gpu: GpuRecord,
}

/// Checks for a driver, a GPU and CUPTI before touching cudarc (which panics without a driver),
/// then opens device `ordinal`.
///
/// # Errors
/// [`crate::Error::NoDriver`], [`crate::Error::NoDevice`], a CUPTI loading error, or a driver
/// error: each one clear line.
pub fn open_device(ordinal: u32) -> SuiteResult<Device> {
    crate::driver::device::require_driver()?;
    crate::cupti::api()?;
    let ctx = CudaContext::new(ordinal as usize)?;
    let stream = ctx.default_stream();
    let gpu = crate::driver::device::gpu_record(ordinal)?;
    Ok(Device { ctx, stream, gpu })
}
