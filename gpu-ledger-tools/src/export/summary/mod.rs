//! The figures of one ledger that the Markdown summary and the HTML report share: which
//! iterations count, distributions per scope, kernel families with their Amdahl ceilings, device
//! idle time and why it was idle (`idle.rs`), NVML clocks and power, energy, the warp stall
//! reasons of PC-sampled iterations, and every warning worth reading before trusting the numbers.
//!
//! One engine computes them: [`SummaryBuilder`] takes the rows one at a time, in ledger order, in
//! memory independent of their number, and [`LedgerSummary::compute`] pushes a ledger in memory
//! through it. Each figure has one accumulator, which takes the rows it needs and gives the
//! figure at the end; every series in it counts against one [`Budget`] of exact values. Past
//! [`EXACT_VALUES`] used rows, or [`EXACT_BUDGET`] values over all the summary's series, the
//! percentiles of a stream come from a quantile sketch and the summary says so (`sketched`, and a
//! warning); a ledger in memory gets [`Budget::exact`], so its figures are exact whatever its
//! length. Held-back warm-up candidates are added after the later rows, so energy, a sum of
//! fractions, is summed in that order.
//!
//! [`EXACT_VALUES`]: crate::analysis::series::EXACT_VALUES
//! [`EXACT_BUDGET`]: crate::analysis::series::EXACT_BUDGET

use std::borrow::Borrow;
use std::collections::BTreeMap;

use serde::Serialize;

use super::stalls::{StallAccumulator, StallSummary};
use crate::analysis::distributions::ScopeSeries;
use crate::analysis::families::{FamilyRules, FamilySummary, FamilyTable, FamilyTableBuilder};
use crate::analysis::indices::IndexRuns;
use crate::analysis::selection::RowSelector;
use crate::analysis::series::{Budget, Series};
use crate::analysis::stats::{idle_share, Distribution, RowFilter, ScopeStats};
use gpu_ledger_format::reader::Ledger;
use gpu_ledger_format::schema::{Header, IterationRow, RankInfo, Trailer};
use gpu_ledger_format::{EnergyAccumulator, RunEnergy};

mod idle;
mod warnings;

use idle::IdleFigures;
pub use idle::{GapAt, IdleDevice, IdleSummary, InventoryLine, INVENTORY_KEPT, LARGEST_GAPS_KEPT};
use warnings::{summary_warnings, RowWarnings};

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
    /// Why the GPU was idle, over the used rows that split idle time by cause; `None` when no
    /// used row did (docs/idle.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle: Option<IdleSummary>,
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

/// Most runs of iterations a left-out list names; the rest are counted.
const SHOWN_RUNS: usize = 8;

/// The rows left out, each kind with how many and which iterations, so that an index cannot be
/// read as a count: `3 left out: 1 warm-up (iteration 0), 1 perturbed (iteration 6), 1
/// incomplete (iteration 11)`, or `none left out`.
pub(crate) fn left_out_text(kinds: &[(&str, &IndexRuns)]) -> String {
    let parts: Vec<String> = kinds
        .iter()
        .filter(|(_, runs)| !runs.is_empty())
        .map(|(label, runs)| format!("{} {label} ({})", runs.len(), iterations_text(runs)))
        .collect();
    let total: usize = kinds.iter().map(|(_, r)| r.len()).sum();
    if parts.is_empty() {
        "none left out".into()
    } else {
        format!("{total} left out: {}", parts.join(", "))
    }
}

/// `iteration 6`, `iterations 0–4, 9`, the first [`SHOWN_RUNS`] runs and how many more.
fn iterations_text(runs: &IndexRuns) -> String {
    let shown: Vec<String> = runs
        .runs()
        .iter()
        .take(SHOWN_RUNS)
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}–{b}")
            }
        })
        .collect();
    let more = runs.runs().len().saturating_sub(SHOWN_RUNS);
    format!(
        "{} {}{}",
        if runs.len() == 1 {
            "iteration"
        } else {
            "iterations"
        },
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more runs")
        } else {
            String::new()
        }
    )
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
    /// The rows the statistics left out, by kind, with their iterations (the summary prints
    /// them as counts with their iteration ranges).
    pub fn left_out(&self) -> String {
        left_out_text(&[
            ("warm-up", &self.warmup),
            ("perturbed", &self.perturbed),
            ("incomplete", &self.incomplete),
            ("untraced", &self.untraced),
        ])
    }

    /// Whether GPU activity was traced, so that a scope's device time is the union of its
    /// launches' intervals: not at the scopes level, which runs no CUPTI.
    pub fn device_traced(&self) -> bool {
        self.level != "scopes"
    }

    /// The device time of a scope worth showing: the union of its launches' intervals where
    /// activity was traced, else the time between its events on a stream where it had them;
    /// `None` when neither was measured (a zero would read as an idle GPU).
    pub fn scope_device_ns<'a>(&self, sc: &'a ScopeStats) -> Option<&'a Distribution> {
        if self.device_traced() {
            Some(&sc.device_ns_inclusive)
        } else {
            sc.event_device_ns.as_ref()
        }
    }

    /// A scope's host time worth showing: `None` for the launches outside every scope
    /// (`(unscoped)`) when no scope timed any of them on the host (a zero would read as a free
    /// scope).
    pub fn scope_host_ns<'a>(&self, sc: &'a ScopeStats) -> Option<&'a Distribution> {
        (sc.path != gpu_ledger_format::UNSCOPED || sc.host_ns.max > 0.0).then_some(&sc.host_ns)
    }

    /// What the scopes' device time is, for the sentence under their table.
    pub fn scope_device_note(&self) -> &'static str {
        if self.device_traced() {
            "device time is the union of the GPU intervals launched in the scope and below it."
        } else {
            "at the scopes level no GPU activity is traced: device time is the GPU time between \
             a scope's events, measured only for scopes opened on a stream \
             (`Profiler::scope_on`), and not measured elsewhere."
        }
    }

    /// Summarises `ledger`: its rows pushed through a [`SummaryBuilder`] whose figures are exact
    /// whatever the ledger's length.
    pub fn compute(ledger: &Ledger, opts: &SummaryOptions) -> Self {
        let mut b = SummaryBuilder::for_rows(opts, ledger.iterations.len());
        ledger.iterations.iter().for_each(|r| b.push(r));
        b.finish(&ledger.header, ledger.trailer.as_ref())
    }
}

/// A [`LedgerSummary`] built one row at a time (see the module doc). `R` is how a row is handed
/// over: the row itself (read from a stream) or a reference (a ledger in memory).
#[derive(Debug)]
pub struct SummaryBuilder<'o, R = IterationRow> {
    opts: &'o SummaryOptions,
    rows: usize,
    selector: RowSelector<R>,
    used: Used<'o>,
    warnings: RowWarnings,
    stalls: StallAccumulator,
}

impl<'o> SummaryBuilder<'o> {
    /// A builder for `opts` over a stream of rows, in bounded memory.
    pub fn new(opts: &'o SummaryOptions) -> Self {
        Self::with_budget(opts, Budget::default())
    }
}

impl<'o, R: Borrow<IterationRow>> SummaryBuilder<'o, R> {
    /// A builder for `opts` over a ledger of `rows` rows (one in memory): every figure exact
    /// ([`Budget::exact`]).
    pub fn for_rows(opts: &'o SummaryOptions, rows: usize) -> Self {
        Self::with_budget(opts, Budget::exact(rows))
    }

    /// A builder for `opts` whose series share `budget` of exact values: [`Budget::default`]
    /// bounds the memory of a stream, [`Budget::exact`] of the ledger's rows keeps every figure
    /// exact.
    pub fn with_budget(opts: &'o SummaryOptions, budget: Budget) -> Self {
        Self {
            opts,
            rows: 0,
            selector: RowSelector::with_budget(opts.filter, &budget),
            used: Used::new(&opts.family_rules, budget),
            warnings: RowWarnings::default(),
            stalls: StallAccumulator::new(),
        }
    }

    /// Takes the next row, in ledger order. Its activities and scope spans are not looked at;
    /// its PC samples are, whether the row is used or not.
    pub fn push(&mut self, row: R) {
        self.rows += 1;
        self.warnings.push(row.borrow());
        self.stalls.add(row.borrow());
        let used = &mut self.used;
        self.selector.push(row, |r| used.push(r.borrow()));
    }

    /// The summary of the ledger with `header` and `trailer` (`None`: the run did not finish).
    #[must_use]
    pub fn finish(self, header: &Header, trailer: Option<&Trailer>) -> LedgerSummary {
        let Self {
            opts,
            rows,
            selector,
            mut used,
            warnings,
            stalls,
        } = self;
        let sel = selector.finish(|r| used.push(r.borrow()));
        let lacks_nvml = used.any_row && used.with_nvml == 0;
        let folded: Vec<String> = [
            ("scope paths", used.scopes.folded()),
            ("kernel families", used.families.folded()),
        ]
        .into_iter()
        .filter_map(|(what, f)| f.map(|f| warnings::fold_warning(what, f)))
        .collect();
        let (devices, devices_sketched) = used.devices.finish(used.total_wall);
        let (nvml, nvml_sketched) = used.nvml.finish();
        let idle = used.idle.finish();
        let idle_sketched = idle.as_ref().is_some_and(|i| i.sketched);
        let mut s = LedgerSummary {
            environment: environment_line(header),
            level: header.config.level.clone(),
            rank: header.rank.clone(),
            rows,
            used: used.indices,
            warmup: sel.warmup,
            perturbed: sel.perturbed,
            incomplete: sel.incomplete,
            untraced: sel.untraced,
            host_wall_ns: used.wall.distribution(),
            sketched: used.wall.is_sketched()
                || used.scopes.sketched()
                || devices_sketched
                || nvml_sketched
                || idle_sketched,
            scopes: used.scopes.finish(),
            families: used.families.finish(),
            top_families: opts.top_families,
            devices,
            nvml,
            energy: Some(used.energy.finish(None)).filter(|e| e.iterations_with_energy > 0),
            activities_recorded: header.config.record_activities,
            run_complete: trailer.is_some(),
            warnings: Vec::new(),
            stalls: stalls.finish(),
            run_stalls: trailer.and_then(|t| t.stalls.clone()),
            idle,
        };
        s.warnings = summary_warnings(header, trailer, &s, &warnings, lacks_nvml);
        s.warnings.extend(folded);
        s
    }
}

/// The figures taken over the used rows, each from its own accumulator.
#[derive(Debug)]
struct Used<'o> {
    any_row: bool,
    indices: IndexRuns,
    wall: Series,
    total_wall: u64,
    scopes: ScopeSeries,
    families: FamilyTableBuilder<'o>,
    devices: DeviceFigures,
    nvml: NvmlFigures,
    energy: EnergyAccumulator,
    with_nvml: usize,
    idle: IdleFigures,
}

impl<'o> Used<'o> {
    fn new(rules: &'o FamilyRules, budget: Budget) -> Self {
        Self {
            any_row: false,
            indices: IndexRuns::default(),
            wall: budget.series(),
            total_wall: 0,
            scopes: ScopeSeries::with_budget(budget.clone()),
            families: FamilyTableBuilder::new(rules),
            devices: DeviceFigures::new(budget.clone()),
            nvml: NvmlFigures::new(budget.clone()),
            idle: IdleFigures::new(budget),
            energy: EnergyAccumulator::default(),
            with_nvml: 0,
        }
    }

    fn push(&mut self, r: &IterationRow) {
        self.any_row = true;
        self.indices.push(r.index);
        self.wall.push_u64(r.host_wall_ns);
        self.total_wall = self.total_wall.saturating_add(r.host_wall_ns);
        self.scopes.push(r);
        self.families.push(r);
        self.devices.push(r);
        self.nvml.push(r);
        self.idle.push(r);
        if !r.nvml.is_empty() {
            self.with_nvml += 1;
            self.energy.push(&r.nvml);
        }
    }
}

/// Busy and idle time per device over the used rows ([`DeviceSummary`]).
#[derive(Debug)]
struct DeviceFigures {
    by: BTreeMap<u32, DeviceAcc>,
    budget: Budget,
}

#[derive(Debug)]
struct DeviceAcc {
    busy: Series,
    busy_total: u64,
    idle: Series,
    gap: u64,
}

impl DeviceFigures {
    fn new(budget: Budget) -> Self {
        Self {
            by: BTreeMap::new(),
            budget,
        }
    }

    fn push(&mut self, r: &IterationRow) {
        for d in &r.devices {
            let budget = &self.budget;
            let a = self.by.entry(d.device_id).or_insert_with(|| DeviceAcc {
                busy: budget.series(),
                busy_total: 0,
                idle: budget.series(),
                gap: 0,
            });
            a.busy.push_u64(d.busy_ns);
            a.busy_total = a.busy_total.saturating_add(d.busy_ns);
            if let Some(s) = idle_share(d) {
                a.idle.push(s);
            }
            a.gap = a.gap.max(d.largest_gap_ns);
        }
    }

    /// Each device's figures, `total_wall` the host wall time of the used rows; and whether a
    /// percentile came from a sketch.
    fn finish(self, total_wall: u64) -> (Vec<DeviceSummary>, bool) {
        let mut sketched = false;
        let devices = self
            .by
            .into_iter()
            .filter_map(|(device_id, a)| {
                sketched |= a.busy.is_sketched() || a.idle.is_sketched();
                Some(DeviceSummary {
                    device_id,
                    iterations: a.busy.len() as usize,
                    busy_ns: a.busy.distribution()?,
                    idle_share: a.idle.distribution(),
                    largest_gap_max_ns: a.gap,
                    busy_share_of_wall: (total_wall > 0)
                        .then(|| a.busy_total as f64 / total_wall as f64),
                })
            })
            .collect();
        (devices, sketched)
    }
}

/// NVML's clocks, power, temperature and throttle reasons per device over the used rows
/// ([`NvmlDeviceSummary`]).
#[derive(Debug)]
struct NvmlFigures {
    by: BTreeMap<u32, NvmlAcc>,
    budget: Budget,
}

#[derive(Debug)]
struct NvmlAcc {
    sm: Series,
    mem: Series,
    power: Series,
    temp: Option<u32>,
    throttle: BTreeMap<String, IndexRuns>,
}

impl NvmlFigures {
    fn new(budget: Budget) -> Self {
        Self {
            by: BTreeMap::new(),
            budget,
        }
    }

    fn push(&mut self, r: &IterationRow) {
        for n in &r.nvml {
            let budget = &self.budget;
            let a = self.by.entry(n.device_id).or_insert_with(|| NvmlAcc {
                sm: budget.series(),
                mem: budget.series(),
                power: budget.series(),
                temp: None,
                throttle: BTreeMap::new(),
            });
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

    /// Each device's figures, and whether a percentile came from a sketch.
    fn finish(self) -> (Vec<NvmlDeviceSummary>, bool) {
        let mut sketched = false;
        let nvml = self
            .by
            .into_iter()
            .map(|(device_id, a)| {
                sketched |= a.sm.is_sketched() || a.mem.is_sketched() || a.power.is_sketched();
                NvmlDeviceSummary {
                    device_id,
                    sm_clock_mhz: a.sm.distribution(),
                    mem_clock_mhz: a.mem.distribution(),
                    power_w: a.power.distribution(),
                    temperature_max_c: a.temp,
                    throttle_reasons: a.throttle,
                }
            })
            .collect();
        (nvml, sketched)
    }
}
