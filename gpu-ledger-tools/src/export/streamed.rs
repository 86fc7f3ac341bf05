//! [`LedgerSummary`] and the HTML report of a ledger read as a stream, in memory independent of
//! its number of rows: [`SummaryBuilder::push`] each row in ledger order, then
//! [`SummaryBuilder::finish`].
//!
//! Below [`crate::analysis::series::EXACT_VALUES`] used rows, and
//! [`crate::analysis::series::EXACT_BUDGET`] values over all the summary's series, every figure
//! is the one [`LedgerSummary::compute`] gives (energy, a sum of fractions, to its last bit or so: the
//! held-back warm-up candidates are added last); above, percentiles come from a quantile sketch
//! and the summary says so (`sketched`, and a warning).

use std::collections::BTreeMap;

use super::chart_buckets::ChartBuckets;
use super::html::{write_report, ReportOptions};
use super::stalls::StallAccumulator;
use super::summary::{environment_line, summary_warnings, RowWarnings};
use super::text::IndexRuns;
use super::{LedgerSummary, NvmlDeviceSummary, SummaryOptions};
use crate::analysis::families::FamilyTableBuilder;
use crate::analysis::series::{Budget, Series};
use crate::analysis::stats::idle_share;
use crate::analysis::streaming::{RowSelector, ScopeSeries};
use crate::export::DeviceSummary;
use gpu_ledger_format::schema::{Header, IterationRow, Trailer};
use gpu_ledger_format::EnergyAccumulator;

/// The figures taken over the used rows.
#[derive(Debug)]
struct Used<'r> {
    indices: IndexRuns,
    wall: Series,
    total_wall: u64,
    scopes: ScopeSeries,
    families: FamilyTableBuilder<'r>,
    devices: BTreeMap<u32, DeviceAcc>,
    nvml: BTreeMap<u32, NvmlAcc>,
    energy: EnergyAccumulator,
    with_nvml: usize,
    any_row: bool,
    budget: Budget,
}

#[derive(Debug)]
struct DeviceAcc {
    busy: Series,
    busy_total: u64,
    idle: Series,
    gap: u64,
}

#[derive(Debug)]
struct NvmlAcc {
    sm: Series,
    mem: Series,
    power: Series,
    temp: Option<u32>,
    throttle: BTreeMap<String, IndexRuns>,
}

impl DeviceAcc {
    fn new(budget: &Budget) -> Self {
        Self {
            busy: budget.series(),
            busy_total: 0,
            idle: budget.series(),
            gap: 0,
        }
    }
}

impl NvmlAcc {
    fn new(budget: &Budget) -> Self {
        Self {
            sm: budget.series(),
            mem: budget.series(),
            power: budget.series(),
            temp: None,
            throttle: BTreeMap::new(),
        }
    }
}

impl Used<'_> {
    fn push(&mut self, r: &IterationRow) {
        self.any_row = true;
        self.indices.push(r.index);
        self.wall.push_u64(r.host_wall_ns);
        self.total_wall = self.total_wall.saturating_add(r.host_wall_ns);
        self.scopes.push(r);
        self.families.push(r);
        for d in &r.devices {
            let budget = &self.budget;
            let a = self
                .devices
                .entry(d.device_id)
                .or_insert_with(|| DeviceAcc::new(budget));
            a.busy.push_u64(d.busy_ns);
            a.busy_total = a.busy_total.saturating_add(d.busy_ns);
            if let Some(s) = idle_share(d) {
                a.idle.push(s);
            }
            a.gap = a.gap.max(d.largest_gap_ns);
        }
        for n in &r.nvml {
            let budget = &self.budget;
            let a = self
                .nvml
                .entry(n.device_id)
                .or_insert_with(|| NvmlAcc::new(budget));
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
        if !r.nvml.is_empty() {
            self.with_nvml += 1;
            self.energy.push(&r.nvml);
        }
    }
}

/// A [`LedgerSummary`] built one row at a time (see the module doc).
#[derive(Debug)]
pub struct SummaryBuilder<'o> {
    opts: &'o SummaryOptions,
    rows: usize,
    selector: RowSelector,
    used: Used<'o>,
    warnings: RowWarnings,
    stalls: StallAccumulator,
}

impl<'o> SummaryBuilder<'o> {
    /// A builder for `opts`.
    pub fn new(opts: &'o SummaryOptions) -> Self {
        // Every series of the summary shares one budget of exact values.
        let budget = Budget::default();
        Self {
            opts,
            rows: 0,
            selector: RowSelector::new(opts.filter),
            used: Used {
                indices: IndexRuns::default(),
                wall: budget.series(),
                total_wall: 0,
                scopes: ScopeSeries::with_budget(budget.clone()),
                families: FamilyTableBuilder::new(&opts.family_rules),
                devices: BTreeMap::new(),
                nvml: BTreeMap::new(),
                energy: EnergyAccumulator::default(),
                with_nvml: 0,
                any_row: false,
                budget,
            },
            warnings: RowWarnings::default(),
            stalls: StallAccumulator::new(),
        }
    }

    /// Takes the next row, in ledger order. Its activities and scope spans are not looked at;
    /// its PC samples are, whether the row is used or not.
    pub fn push(&mut self, row: IterationRow) {
        self.rows += 1;
        self.warnings.push(&row);
        self.stalls.add(&row);
        let used = &mut self.used;
        self.selector.push(row, |r| used.push(r));
    }

    /// The summary of the ledger with `header` and `trailer` (`None`: the run did not finish).
    pub fn finish(self, header: &Header, trailer: Option<&Trailer>) -> LedgerSummary {
        let Self {
            opts,
            rows,
            selector,
            mut used,
            warnings,
            stalls,
        } = self;
        let sel = selector.finish(|r| used.push(r));
        let mut sketched = used.wall.is_sketched() || used.scopes.sketched();
        let devices: Vec<DeviceSummary> = used
            .devices
            .into_iter()
            .filter_map(|(device_id, a)| {
                sketched |= a.busy.is_sketched() || a.idle.is_sketched();
                Some(DeviceSummary {
                    device_id,
                    iterations: a.busy.len() as usize,
                    busy_ns: a.busy.distribution()?,
                    idle_share: a.idle.distribution(),
                    largest_gap_max_ns: a.gap,
                    busy_share_of_wall: (used.total_wall > 0)
                        .then(|| a.busy_total as f64 / used.total_wall as f64),
                })
            })
            .collect();
        let nvml: Vec<NvmlDeviceSummary> = used
            .nvml
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
        let energy = Some(used.energy.finish(None)).filter(|e| e.iterations_with_energy > 0);
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
            scopes: used.scopes.finish(),
            families: used.families.finish(),
            top_families: opts.top_families,
            devices,
            nvml,
            energy,
            activities_recorded: header.config.record_activities,
            run_complete: trailer.is_some(),
            warnings: Vec::new(),
            stalls: stalls.finish(),
            run_stalls: trailer.and_then(|t| t.stalls.clone()),
            sketched,
        };
        let lacks_nvml = used.any_row && used.with_nvml == 0;
        s.warnings = summary_warnings(header, trailer, &s, &warnings, lacks_nvml);
        s
    }
}

/// The HTML report of [`super::write_html_report`] built one row at a time: the summary of
/// [`SummaryBuilder`] and charts of at most [`ReportOptions::max_points`] bars, each the mean of
/// a stated number of consecutive rows, so that neither memory nor the report's size grows with
/// the rows.
#[derive(Debug)]
pub struct ReportBuilder<'o> {
    opts: &'o ReportOptions,
    summary: SummaryBuilder<'o>,
    charts: ChartBuckets,
}

impl<'o> ReportBuilder<'o> {
    /// A builder for `opts`.
    pub fn new(opts: &'o ReportOptions) -> Self {
        Self {
            opts,
            summary: SummaryBuilder::new(&opts.summary),
            charts: ChartBuckets::new(opts),
        }
    }

    /// Takes the next row, in ledger order.
    pub fn push(&mut self, row: IterationRow) {
        self.charts.push(&row, &self.opts.summary.filter);
        self.summary.push(row);
    }

    /// Rows per bar of the per-iteration charts so far.
    pub fn bucket_width(&self) -> usize {
        self.charts.width()
    }

    /// Bars of the per-iteration charts so far.
    pub fn buckets(&self) -> usize {
        self.charts.len()
    }

    /// Writes the report of the ledger with `header` and `trailer`, read from `source`.
    ///
    /// # Errors
    /// Any error of `out`.
    pub fn finish<W: std::io::Write>(
        self,
        header: &Header,
        trailer: Option<&Trailer>,
        source: &str,
        out: W,
    ) -> std::io::Result<()> {
        let s = self.summary.finish(header, trailer);
        let charts = self.charts.finish(&s);
        write_report(header, &s, &charts, source, self.opts, out)
    }
}
