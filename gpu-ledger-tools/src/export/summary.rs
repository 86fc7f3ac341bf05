//! The figures of one ledger that the Markdown summary and the HTML report share: which
//! iterations count, distributions per scope, kernel families with their Amdahl ceilings, device
//! idle time, NVML clocks and power, energy, the warp stall reasons of PC-sampled iterations,
//! and every warning worth reading before trusting the numbers.

use std::collections::BTreeMap;

use serde::Serialize;

use super::stalls::{StallAccumulator, StallSummary};
use super::text::{fmt_ns, IndexRuns};
use crate::analysis::families::{family_table, FamilyRules, FamilySummary, FamilyTable};
use crate::analysis::stats::{
    idle_share, scope_distributions, select_rows, Distribution, RowFilter, ScopeStats,
    FEW_ITERATIONS,
};
use gpu_ledger_format::reader::Ledger;
use gpu_ledger_format::schema::{Header, IterationRow, RankInfo, Trailer};
use gpu_ledger_format::{run_energy, NvmlIterationSummary, RunEnergy};

/// What to summarise and how.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryOptions {
    /// Rows kept for statistics. Default: complete, unperturbed, warm-up detected.
    pub filter: RowFilter,
    /// Kernel family grouping rules.
    pub family_rules: FamilyRules,
    /// Families shown in tables and charts. Default 10.
    pub top_families: usize,
}

impl Default for SummaryOptions {
    fn default() -> Self {
        Self {
            filter: RowFilter::default(),
            family_rules: FamilyRules::default(),
            top_families: 10,
        }
    }
}

/// Busy and idle time of one device over the iterations used.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceSummary {
    /// CUDA device ordinal.
    pub device_id: u32,
    /// Iterations in which the device had activity.
    pub iterations: usize,
    /// Busy time per iteration, ns.
    pub busy_ns: Distribution,
    /// Idle share of the activity window per iteration; `None` without a non-empty window.
    pub idle_share: Option<Distribution>,
    /// Largest single gap over all iterations used, ns.
    pub largest_gap_max_ns: u64,
    /// Summed busy time over summed host wall time of the iterations used (how much of the step
    /// the device works; low means the GPU waits for the host).
    pub busy_share_of_wall: Option<f64>,
}

/// NVML figures of one device over the iterations used.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NvmlDeviceSummary {
    /// CUDA device ordinal.
    pub device_id: u32,
    /// Per-iteration mean SM clock, MHz.
    pub sm_clock_mhz: Option<Distribution>,
    /// Per-iteration mean memory clock, MHz.
    pub mem_clock_mhz: Option<Distribution>,
    /// Per-iteration mean board power, W.
    pub power_w: Option<Distribution>,
    /// Highest temperature seen, °C.
    pub temperature_max_c: Option<u32>,
    /// Throttle (clock-event) reasons seen, with the iterations they were seen in.
    pub throttle_reasons: BTreeMap<String, IndexRuns>,
}

/// One ledger, summarised.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LedgerSummary {
    /// Environment in one line (GPUs, driver, CUDA, CUPTI, host, level, version, rank).
    pub environment: String,
    /// Profiling level (`scopes`, `timeline`, `counters`).
    pub level: String,
    /// Rank of the process, when launched as one.
    pub rank: Option<RankInfo>,
    /// Iteration rows in the ledger.
    pub rows: usize,
    /// Indices of the rows used for statistics, as runs (a million consecutive rows take one).
    pub used: IndexRuns,
    /// Indices left out as warm-up.
    pub warmup: IndexRuns,
    /// Indices left out as perturbed (counter replay).
    pub perturbed: IndexRuns,
    /// Indices left out as incomplete.
    pub incomplete: IndexRuns,
    /// Indices left out because a sampled timeline did not trace them.
    #[serde(skip_serializing_if = "IndexRuns::is_empty")]
    pub untraced: IndexRuns,
    /// Host wall time per iteration, ns.
    pub host_wall_ns: Option<Distribution>,
    /// Per-scope distributions, by path.
    pub scopes: Vec<ScopeStats>,
    /// Kernel families, ranked (all of them; `top_families` is applied when rendering).
    pub families: FamilyTable,
    /// Families shown.
    pub top_families: usize,
    /// Per-device busy and idle time.
    pub devices: Vec<DeviceSummary>,
    /// Per-device NVML figures; empty when NVML did not sample.
    pub nvml: Vec<NvmlDeviceSummary>,
    /// Energy over the iterations used; `None` without NVML energy figures.
    pub energy: Option<RunEnergy>,
    /// Whether rows carry every activity.
    pub activities_recorded: bool,
    /// Whether the ledger has its trailer (the run finished).
    pub run_complete: bool,
    /// Everything that limits what the figures mean.
    pub warnings: Vec<String>,
    /// Warp stall reasons of the PC-sampled rows (every row that carries samples, used or not:
    /// sampling perturbs the rows it ran in); `None` when no row has any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stalls: Option<StallSummary>,
    /// PC sampling summed over the run's windows per kernel and per scope, from the trailer;
    /// `None` when the trailer has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_stalls: Option<gpu_ledger_format::stalls::RunStalls>,
    /// Whether some percentile comes from a quantile sketch (a series longer than
    /// [`crate::analysis::series::EXACT_VALUES`]); the warnings say so.
    pub sketched: bool,
}

/// A family's Amdahl ceiling as text: `1.53×`, `∞` when the family fills all device time
/// (removing it would remove all of it), `n/a` without a share.
pub(crate) fn ceiling_text(f: &FamilySummary) -> String {
    match (f.amdahl_ceiling, f.share_of_device_time) {
        (Some(c), _) => format!("{c:.2}×"),
        (None, Some(p)) if p >= 1.0 => "∞".into(),
        _ => "n/a".into(),
    }
}

/// The GPUs, driver, CUDA, CUPTI, host, level, gpu-ledger version and rank of a ledger in one
/// line: `1× NVIDIA H200 (sm_90, 132 SMs) · driver 580.95.05 · CUDA 13.0 · ...`.
pub(crate) fn environment_line(h: &Header) -> String {
    let env = &h.environment;
    let mut parts: Vec<String> = Vec::new();
    let mut gpus: BTreeMap<(String, [u32; 2], u32), usize> = BTreeMap::new();
    for g in &env.gpus {
        *gpus
            .entry((g.name.clone(), g.compute_capability, g.sm_count))
            .or_default() += 1;
    }
    if gpus.is_empty() {
        parts.push("no GPU recorded".into());
    }
    for ((name, cc, sms), n) in gpus {
        parts.push(format!("{n}× {name} (sm_{}{}, {sms} SMs)", cc[0], cc[1]));
    }
    parts.push(match &env.driver_version {
        Some(d) => format!("driver {d}"),
        None => "driver unknown".into(),
    });
    if let Some(v) = env.cuda_driver_version {
        parts.push(format!("CUDA {}.{}", v / 1000, (v % 1000) / 10));
    }
    if let Some(v) = env.cupti_api_version {
        parts.push(format!("CUPTI API {v}"));
    }
    match (&env.hostname, &env.host.cpu_model) {
        (Some(h), Some(c)) => parts.push(format!("{h} ({c})")),
        (Some(h), None) => parts.push(h.clone()),
        (None, Some(c)) => parts.push(c.clone()),
        (None, None) => {}
    }
    parts.push(format!("level {}", h.config.level));
    parts.push(format!("gpu-ledger {}", h.gpu_ledger_version));
    if let Some(r) = &h.rank {
        match r.world_size {
            Some(w) => parts.push(format!("rank {} of {w}", r.rank)),
            None => parts.push(format!("rank {}", r.rank)),
        }
    }
    parts.join(" · ")
}

impl LedgerSummary {
    /// Summarises `ledger`.
    pub fn compute(ledger: &Ledger, opts: &SummaryOptions) -> Self {
        let sel = select_rows(&ledger.iterations, &opts.filter);
        let used: Vec<&IterationRow> = sel.used.clone();
        let wall: Vec<u64> = used.iter().map(|r| r.host_wall_ns).collect();
        let scopes = scope_distributions(used.iter().copied());
        let families = family_table(used.iter().copied(), &opts.family_rules);
        let devices = device_summaries(&used);
        let nvml = nvml_summaries(&used);
        let with_nvml: Vec<&[NvmlIterationSummary]> = used
            .iter()
            .filter(|r| !r.nvml.is_empty())
            .map(|r| r.nvml.as_slice())
            .collect();
        let energy = Some(run_energy(with_nvml, None)).filter(|e| e.iterations_with_energy > 0);
        let mut stalls = StallAccumulator::new();
        ledger.iterations.iter().for_each(|r| stalls.add(r));
        let mut s = Self {
            environment: environment_line(&ledger.header),
            level: ledger.header.config.level.clone(),
            rank: ledger.header.rank.clone(),
            rows: ledger.iterations.len(),
            used: used.iter().map(|r| r.index).collect(),
            warmup: sel.warmup.iter().copied().collect(),
            perturbed: sel.perturbed.iter().copied().collect(),
            incomplete: sel.incomplete.iter().copied().collect(),
            untraced: sel.untraced.iter().copied().collect(),
            host_wall_ns: Distribution::from_u64(&wall),
            scopes,
            families,
            top_families: opts.top_families,
            devices,
            nvml,
            energy,
            activities_recorded: ledger.header.config.record_activities,
            run_complete: ledger.trailer.is_some(),
            warnings: Vec::new(),
            stalls: stalls.finish(),
            run_stalls: ledger.trailer.as_ref().and_then(|t| t.stalls.clone()),
            sketched: false,
        };
        s.warnings = warnings(ledger, &s, &used);
        s
    }
}

fn device_summaries(used: &[&IterationRow]) -> Vec<DeviceSummary> {
    #[derive(Default)]
    struct Acc {
        busy: Vec<u64>,
        idle: Vec<f64>,
        gap: u64,
    }
    let mut by: BTreeMap<u32, Acc> = BTreeMap::new();
    for r in used {
        for d in &r.devices {
            let a = by.entry(d.device_id).or_default();
            a.busy.push(d.busy_ns);
            if let Some(s) = idle_share(d) {
                a.idle.push(s);
            }
            a.gap = a.gap.max(d.largest_gap_ns);
        }
    }
    let total_wall: u64 = used
        .iter()
        .map(|r| r.host_wall_ns)
        .fold(0, u64::saturating_add);
    by.into_iter()
        .filter_map(|(device_id, a)| {
            let busy_total: u64 = a.busy.iter().fold(0, |s, &b| s.saturating_add(b));
            Some(DeviceSummary {
                device_id,
                iterations: a.busy.len(),
                busy_ns: Distribution::from_u64(&a.busy)?,
                idle_share: Distribution::from_samples(&a.idle),
                largest_gap_max_ns: a.gap,
                busy_share_of_wall: (total_wall > 0).then(|| busy_total as f64 / total_wall as f64),
            })
        })
        .collect()
}

fn nvml_summaries(used: &[&IterationRow]) -> Vec<NvmlDeviceSummary> {
    #[derive(Default)]
    struct Acc {
        sm: Vec<f64>,
        mem: Vec<f64>,
        power: Vec<f64>,
        temp: Option<u32>,
        throttle: BTreeMap<String, IndexRuns>,
    }
    let mut by: BTreeMap<u32, Acc> = BTreeMap::new();
    for r in used {
        for n in &r.nvml {
            let a = by.entry(n.device_id).or_default();
            if let Some(c) = &n.sm_clock {
                a.sm.push(c.mean_mhz);
            }
            if let Some(c) = &n.mem_clock {
                a.mem.push(c.mean_mhz);
            }
            if let Some(p) = &n.power {
                a.power.push(p.mean_w);
            }
            if let Some(t) = n.temperature_max_c {
                a.temp = Some(a.temp.map_or(t, |x| x.max(t)));
            }
            for t in &n.throttle_reasons {
                a.throttle.entry(t.clone()).or_default().push(r.index);
            }
        }
    }
    by.into_iter()
        .map(|(device_id, a)| NvmlDeviceSummary {
            device_id,
            sm_clock_mhz: Distribution::from_samples(&a.sm),
            mem_clock_mhz: Distribution::from_samples(&a.mem),
            power_w: Distribution::from_samples(&a.power),
            temperature_max_c: a.temp,
            throttle_reasons: a.throttle,
        })
        .collect()
}

/// The words of the collector's row warning when most kernel time is in no scope.
const UNSCOPED_ROW_WARNING: &str = "in no scope although scopes were open";

/// What the warnings take from every row (used or not), gathered one row at a time.
#[derive(Debug, Default)]
pub(crate) struct RowWarnings {
    unscoped: u64,
    busy: u64,
    threads: BTreeMap<String, u64>,
    row_warnings: BTreeMap<String, IndexRuns>,
    dropped: u64,
    dropped_at: IndexRuns,
    missing: u64,
    missing_at: IndexRuns,
}

impl RowWarnings {
    /// Adds one row.
    pub(crate) fn push(&mut self, r: &IterationRow) {
        self.push_unscoped(r);
        // Said once for the run by the unscoped warning, not once per share.
        for x in r
            .warnings
            .iter()
            .filter(|x| !x.contains(UNSCOPED_ROW_WARNING))
        {
            if !self.row_warnings.contains_key(x.as_str()) {
                self.row_warnings.insert(x.clone(), IndexRuns::default());
            }
            if let Some(at) = self.row_warnings.get_mut(x.as_str()) {
                at.push(r.index);
            }
        }
        if r.dropped_records > 0 {
            self.dropped = self.dropped.saturating_add(r.dropped_records);
            self.dropped_at.push(r.index);
        }
        if r.missing_records > 0 {
            self.missing = self.missing.saturating_add(r.missing_records);
            self.missing_at.push(r.index);
        }
    }

    /// The device time of the rows that had scopes, and what of it is in `(unscoped)`.
    fn push_unscoped(&mut self, r: &IterationRow) {
        if !r
            .scopes
            .iter()
            .any(|s| s.path != gpu_ledger_format::UNSCOPED && s.calls > 0)
        {
            return;
        }
        self.busy = self.busy.saturating_add(
            r.devices
                .iter()
                .fold(0u64, |a, d| a.saturating_add(d.busy_ns)),
        );
        let u = r
            .scopes
            .iter()
            .filter(|s| s.path == gpu_ledger_format::UNSCOPED)
            .fold(0u64, |a, s| a.saturating_add(s.device_ns));
        self.unscoped = self.unscoped.saturating_add(u);
        for t in r
            .launch_threads
            .iter()
            .filter(|t| t.attribution.unscoped > 0)
        {
            let name = match &t.name {
                Some(n) => format!("\"{n}\" (tid {})", t.tid),
                None => format!("tid {}", t.tid),
            };
            *self.threads.entry(name).or_default() += t.attribution.unscoped;
        }
    }

    /// When most device time of the rows that had scopes is in `(unscoped)`: the share, the
    /// threads that launched it, and the fix.
    fn unscoped_warning(&self) -> Option<String> {
        let (unscoped, busy) = (self.unscoped, self.busy);
        if busy == 0 || unscoped.saturating_mul(2) <= busy {
            return None;
        }
        let from = if self.threads.is_empty() {
            String::new()
        } else {
            let names: Vec<String> = self
                .threads
                .iter()
                .map(|(n, k)| format!("{n}: {k} kernels"))
                .collect();
            format!(
                ", launched on threads with no scope open ({})",
                names.join(", ")
            )
        };
        Some(format!(
            "{:.0} % of the device time of the iterations that had scopes is in {}{from}: hand the \
             scope to the launching thread (Profiler::context(), ScopeContext::enter) or follow the \
             thread that opens the scopes (Config::follow)",
            100.0 * unscoped as f64 / busy as f64,
            gpu_ledger_format::UNSCOPED
        ))
    }

    /// The rows' warnings: most device time unscoped, each warning a row carried with the
    /// iterations that carried it, records CUPTI dropped and launches left without a record.
    fn warnings(&self, w: &mut Vec<String>) {
        w.extend(self.unscoped_warning());
        for (x, at) in &self.row_warnings {
            w.push(format!("iterations {at}: {x}"));
        }
        if self.dropped > 0 {
            w.push(format!(
                "{} activity records dropped by CUPTI (iterations {}): device times of those \
                 iterations are undercounted; raise the buffer count or size",
                self.dropped, self.dropped_at
            ));
        }
        if self.missing > 0 {
            w.push(format!(
                "{} launches without a GPU record within the settle time (iterations {}); \
                 raise settle_ms",
                self.missing, self.missing_at
            ));
        }
    }
}

fn warnings(ledger: &Ledger, s: &LedgerSummary, used: &[&IterationRow]) -> Vec<String> {
    let mut rows = RowWarnings::default();
    ledger.iterations.iter().for_each(|r| rows.push(r));
    let lacks_nvml = !used.is_empty() && used.iter().all(|r| r.nvml.is_empty());
    summary_warnings(
        &ledger.header,
        ledger.trailer.as_ref(),
        s,
        &rows,
        lacks_nvml,
    )
}

/// Every warning of a summary: the header's and trailer's, the selection's, the rows' (`rows`),
/// NVML's (`lacks_nvml`: no used row has NVML figures) and the distributions'.
pub(crate) fn summary_warnings(
    header: &Header,
    trailer: Option<&Trailer>,
    s: &LedgerSummary,
    rows: &RowWarnings,
    lacks_nvml: bool,
) -> Vec<String> {
    let mut w = run_warnings(header, trailer);
    selection_warnings(header, s, &mut w);
    rows.warnings(&mut w);
    nvml_warnings(s, lacks_nvml, &mut w);
    distribution_warnings(s, &mut w);
    w
}

/// What the run itself said went wrong: the header's and the trailer's warnings, lines not
/// written, records outside the rows, or no trailer at all (the run did not finish).
fn run_warnings(header: &Header, trailer: Option<&Trailer>) -> Vec<String> {
    let mut w: Vec<String> = header
        .warnings
        .iter()
        .map(|x| format!("header: {x}"))
        .collect();
    match trailer {
        None => w.push(
            "no trailer: the run did not finish (crash or kill); the rows present are valid, \
             the run totals are unknown"
                .into(),
        ),
        Some(t) => {
            w.extend(t.warnings.iter().map(|x| format!("run: {x}")));
            if t.lines_not_written > 0 {
                w.push(format!(
                    "{} ledger lines could not be written during the run",
                    t.lines_not_written
                ));
            }
            if t.late_records > 0 || t.unplaced_records > 0 {
                w.push(format!(
                    "{} records arrived after their iteration was written and {} fell outside \
                     every iteration: they are counted in the trailer, not in the rows",
                    t.late_records, t.unplaced_records
                ));
            }
        }
    }
    w
}

/// Why the statistics cover fewer rows than the ledger has: a sampled timeline, no usable
/// row, or too few for the tail percentiles to mean much.
fn selection_warnings(header: &Header, s: &LedgerSummary, w: &mut Vec<String>) {
    if !s.untraced.is_empty() {
        let sampled = header
            .config
            .timeline_sampling
            .as_deref()
            .unwrap_or("sampled");
        w.push(format!(
            "the timeline traced {sampled}: statistics are over the traced rows; the untraced \
             ones ({}) carry host times, scopes' host times and NVML only",
            s.untraced
        ));
    }
    if s.rows == 0 {
        w.push("the ledger has no iteration row".into());
    } else if s.used.is_empty() {
        w.push(format!(
            "no iteration is usable for statistics ({} rows: warm-up {}, perturbed {}, incomplete {})",
            s.rows,
            s.warmup,
            s.perturbed,
            s.incomplete
        ));
    } else if s.used.len() < FEW_ITERATIONS {
        w.push(format!(
            "only {} iterations used: p90 and p99 are interpolated between few samples",
            s.used.len()
        ));
    }
}

/// What NVML says about the operating point: no figures at all, throttling, or an SM clock
/// that moved enough between iterations to make their times incomparable.
fn nvml_warnings(s: &LedgerSummary, lacks_nvml: bool, w: &mut Vec<String>) {
    if lacks_nvml {
        w.push("no NVML figures: clocks, power, throttling and energy are unknown".into());
    }
    for n in &s.nvml {
        for (reason, at) in &n.throttle_reasons {
            w.push(format!(
                "GPU {}: clock event (throttle) reason {reason} in iterations {}",
                n.device_id, at
            ));
        }
        if let Some(c) = &n.sm_clock_mhz {
            if c.min > 0.0 && (c.max - c.min) / c.max > 0.05 {
                w.push(format!(
                    "GPU {}: SM clock varied from {:.0} to {:.0} MHz between iterations: times are \
                     not comparable across them",
                    n.device_id, c.min, c.max
                ));
            }
        }
    }
}

/// What the distributions themselves show: a long tail of host wall time, or percentiles
/// that come from a sketch rather than every value.
fn distribution_warnings(s: &LedgerSummary, w: &mut Vec<String>) {
    if let Some(d) = &s.host_wall_ns {
        if d.median > 0.0 && d.p99 > 2.0 * d.median {
            w.push(format!(
                "long tail: p99 host wall time {} is more than twice the median {}",
                fmt_ns(d.p99),
                fmt_ns(d.median)
            ));
        }
    }
    if s.sketched {
        w.push(format!(
            "percentiles from a quantile sketch: a series passed {} values, or all of them {} \
             together; each median, p90 and p99 is within {} % of the exact one (count, mean, \
             min and max are exact)",
            crate::analysis::series::EXACT_VALUES,
            crate::analysis::series::EXACT_BUDGET,
            crate::analysis::series::SKETCH_RELATIVE_ERROR * 100.0
        ));
    }
}
