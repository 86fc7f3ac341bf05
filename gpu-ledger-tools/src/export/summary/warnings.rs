//! Every warning of a summary, the reasons to doubt its figures: what the run said went wrong,
//! why fewer rows count than the ledger has, what the rows themselves carried (gathered one row at
//! a time by [`RowWarnings`]), NVML's operating point, the GPU idle for one cause most of the
//! time, and the distributions' own limits.

use std::collections::BTreeMap;

use super::LedgerSummary;
use crate::analysis::indices::IndexRuns;
use crate::analysis::names::{NameFold, MAX_NAMES, OTHER_NAMES};
use crate::analysis::stats::FEW_ITERATIONS;
use crate::export::text::fmt_ns;
use gpu_ledger_format::schema::{Header, IterationRow, Trailer};

/// The words of the collector's row warning when most kernel time is in no scope.
const UNSCOPED_ROW_WARNING: &str = "in no scope although scopes were open";

/// What the warnings take from every row (used or not), gathered one row at a time.
#[derive(Debug, Default)]
pub(super) struct RowWarnings {
    unscoped: u64,
    busy: u64,
    threads: BTreeMap<String, u64>,
    /// Launching threads and distinct row warnings past [`MAX_NAMES`] are folded.
    thread_names: NameFold,
    row_warnings: BTreeMap<String, IndexRuns>,
    warning_texts: NameFold,
    dropped: u64,
    dropped_at: IndexRuns,
    missing: u64,
    missing_at: IndexRuns,
}

impl RowWarnings {
    /// Adds one row.
    pub(super) fn push(&mut self, r: &IterationRow) {
        self.push_unscoped(r);
        // Said once for the run by the unscoped warning, not once per share.
        for x in r
            .warnings
            .iter()
            .filter(|x| !x.contains(UNSCOPED_ROW_WARNING))
        {
            let x = self.warning_texts.key(x, 0);
            if !self.row_warnings.contains_key(x) {
                self.row_warnings
                    .insert(x.to_string(), IndexRuns::default());
            }
            if let Some(at) = self.row_warnings.get_mut(x) {
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
            let name = self.thread_names.key(&name, 0).to_string();
            let n = self.threads.entry(name).or_default();
            *n = n.saturating_add(t.attribution.unscoped);
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
                .map(|(n, k)| match n.as_str() {
                    OTHER_NAMES => format!("{} threads: {k} kernels", self.thread_names.label()),
                    n => format!("{n}: {k} kernels"),
                })
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
            match x.as_str() {
                OTHER_NAMES => w.push(format!(
                    "iterations {at}: {} distinct row warnings past the first {MAX_NAMES}, not \
                     listed (`gpu-ledger csv` or the ledger has them)",
                    self.warning_texts.folded()
                )),
                x => w.push(format!("iterations {at}: {x}")),
            }
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

/// Every warning of a summary: the header's and trailer's, the selection's, the rows' (`rows`),
/// NVML's (`lacks_nvml`: no used row has NVML figures) and the distributions'.
pub(super) fn summary_warnings(
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
    idle_warnings(s, &mut w);
    distribution_warnings(s, &mut w);
    w
}

/// What a table of names folded past [`MAX_NAMES`] (`what`: scope paths, kernel families):
/// how many, under which label, and the most device time one of them can have had, so that the
/// names shown can be trusted to be the largest or not.
pub(super) fn fold_warning(what: &str, f: &NameFold) -> String {
    let bound = f.max_folded_weight();
    format!(
        "{} {what} past the first {MAX_NAMES} are summed as {} ({} of device time in all): no \
         one of them had more than {} of it (a bound from a Space-Saving summary), so a {} \
         shown with more is among the largest; `gpu-ledger csv --long` or the Parquet dataset \
         has every name",
        f.folded(),
        f.label(),
        fmt_ns(f.folded_weight() as f64),
        fmt_ns(bound as f64),
        what.trim_end_matches('s')
    )
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

/// Share of the host wall time a device may be idle (inside its window, over the used rows that
/// split idle time) before the idle warning looks for a dominant cause.
pub(crate) const IDLE_WARN_SHARE: f64 = 0.10;

/// Share of the idle time one cause must pass to be named by the idle warning.
pub(crate) const IDLE_DOMINANT_SHARE: f64 = 0.5;

/// Each device idle more than [`IDLE_WARN_SHARE`] of the wall time with one cause holding more
/// than [`IDLE_DOMINANT_SHARE`] of it: the cause, its largest detail (and for `host_launch` in
/// a scope, the scope), and the funnel's remedy.
fn idle_warnings(s: &LedgerSummary, w: &mut Vec<String>) {
    let Some(idle) = &s.idle else { return };
    for d in &idle.devices {
        let Some(share) = d.idle_share_of_wall.filter(|x| *x > IDLE_WARN_SHARE) else {
            continue;
        };
        let causes: Vec<_> = (idle.causes.iter())
            .filter(|c| c.device_id == d.device_id)
            .cloned()
            .collect();
        let Some((cause, detail, of_idle)) =
            crate::analysis::idle::dominant_cause(&causes, IDLE_DOMINANT_SHARE)
        else {
            continue;
        };
        let scope = (idle.host_launch_scopes.iter())
            .find(|x| x.device_id == d.device_id)
            .filter(|_| {
                cause == gpu_ledger_format::idle::cause::HOST_LAUNCH && detail == Some("scope")
            });
        let named = match (detail, scope) {
            (_, Some(sc)) => format!(
                "{cause} in scope {} ({:.0} % of the idle time)",
                sc.scope,
                100.0 * sc.share_of_idle.unwrap_or(0.0)
            ),
            (Some(x), None) => format!("{cause} ({x})"),
            (None, None) => cause.to_string(),
        };
        let remedy = match cause {
            gpu_ledger_format::idle::cause::DEPENDENCY => format!(
                "{}; look at the cross-stream wait before each gap (gpu-ledger trace marks them)",
                gpu_ledger_format::idle::remedy(cause, detail).unwrap_or_default()
            ),
            _ => gpu_ledger_format::idle::remedy(cause, detail).map_or_else(
                || "nothing recorded says why (docs/idle.md: what the split cannot see)".into(),
                str::to_string,
            ),
        };
        w.push(format!(
            "GPU {}: idle {:.0} % of the host wall time of the iterations used (above {:.0} %), \
             {:.0} % of it {named}: {remedy}",
            d.device_id,
            100.0 * share,
            100.0 * IDLE_WARN_SHARE,
            100.0 * of_idle
        ));
    }
}
