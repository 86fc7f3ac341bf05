//! The statistics of [`super::stats`] over rows that stream past, in memory independent of the
//! number of rows: [`RowSelector`] is [`select_rows`](super::stats::select_rows) one row at a
//! time, [`ScopeSeries`] and [`FamilySeries`] are
//! [`scope_distributions`](super::stats::scope_distributions) and
//! [`family_distributions`](super::stats::family_distributions) over [`Series`].
//!
//! Warm-up is decided at the end of the stream, since its threshold is taken over the whole
//! series: the selector holds back the first `max_warmup` candidate rows (10 by default) and hands
//! on the used ones when it finishes, after every later row.

use std::collections::BTreeMap;

use super::families::FamilyRules;
use super::indices::IndexRuns;
use super::series::{Budget, Series};
use super::stats::{
    detect_warmup, median, FamilyStats, RowFilter, ScopeStats, Warmup, MAD_TO_SIGMA,
};
use gpu_ledger_format::schema::IterationRow;

/// The rows left out of a streamed selection, by reason, and how many were used.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamedSelection {
    /// Rows seen.
    pub rows: usize,
    /// Rows used.
    pub used: usize,
    /// Iteration indices left out as warm-up.
    pub warmup: IndexRuns,
    /// Iteration indices left out because they were perturbed.
    pub perturbed: IndexRuns,
    /// Iteration indices left out because they were incomplete.
    pub incomplete: IndexRuns,
    /// Iteration indices left out because a sampled timeline did not trace them.
    pub untraced: IndexRuns,
}

/// [`select_rows`](super::stats::select_rows) over a stream: [`RowSelector::push`] each row in
/// ledger order, then [`RowSelector::finish`]. Used rows go to the `used` callback: at once, or
/// at `finish` for the held-back candidates that are not warm-up.
#[derive(Debug)]
pub struct RowSelector {
    filter: RowFilter,
    sel: StreamedSelection,
    candidates: usize,
    /// The first candidates, held until warm-up is known (detection only).
    held: Vec<IterationRow>,
    /// Host wall time of the candidates after the held ones: the warm-up reference.
    reference: Series,
}

impl RowSelector {
    /// A selector for `filter`.
    pub fn new(filter: RowFilter) -> Self {
        Self {
            filter,
            sel: StreamedSelection::default(),
            candidates: 0,
            held: Vec::new(),
            reference: Series::sampled(super::series::EXACT_VALUES),
        }
    }

    /// Takes the next row (in ledger order).
    pub fn push(&mut self, row: IterationRow, mut used: impl FnMut(&IterationRow)) {
        let pos = self.sel.rows;
        self.sel.rows += 1;
        if !row.complete && !self.filter.include_incomplete {
            self.sel.incomplete.push(row.index);
            return;
        }
        if row.perturbed && !self.filter.include_perturbed {
            self.sel.perturbed.push(row.index);
            return;
        }
        if row.untraced && !self.filter.include_untraced {
            self.sel.untraced.push(row.index);
            return;
        }
        self.candidates += 1;
        match self.filter.warmup {
            Warmup::None => self.use_row(&row, &mut used),
            Warmup::Fixed(n) if pos < n => self.sel.warmup.push(row.index),
            Warmup::Fixed(_) => self.use_row(&row, &mut used),
            Warmup::Detect(p) if self.held.len() < p.max_warmup => self.held.push(row),
            Warmup::Detect(_) => {
                self.reference.push(row.host_wall_ns as f64);
                self.use_row(&row, &mut used);
            }
        }
    }

    fn use_row(&mut self, row: &IterationRow, used: &mut impl FnMut(&IterationRow)) {
        self.sel.used += 1;
        used(row);
    }

    /// Decides warm-up, hands on the held-back rows that are used, and returns the selection.
    pub fn finish(mut self, mut used: impl FnMut(&IterationRow)) -> StreamedSelection {
        let Warmup::Detect(params) = self.filter.warmup else {
            return self.sel;
        };
        let held = std::mem::take(&mut self.held);
        let held_wall: Vec<f64> = held.iter().map(|r| r.host_wall_ns as f64).collect();
        let skip = if self.reference.is_sketched() {
            // Past the exact bound: n/2 exceeds the held rows, so all of them are the window;
            // the threshold takes the sketch's median and the spread of the sample around it.
            let c = held_wall.len();
            let m = self.reference.median().unwrap_or(0.0);
            let dev: Vec<f64> = self
                .reference
                .sample()
                .iter()
                .map(|x| (x - m).abs())
                .collect();
            let d = median(&dev).unwrap_or(0.0);
            let t = m + (params.k * MAD_TO_SIGMA * d).max(params.min_relative_excess * m.abs());
            held_wall[..c]
                .iter()
                .rposition(|&x| x > t)
                .map_or(0, |i| i + 1)
        } else {
            let mut wall = held_wall;
            wall.extend_from_slice(self.reference.sample());
            detect_warmup(&wall, &params)
        };
        for (i, row) in held.iter().enumerate() {
            if i < skip {
                self.sel.warmup.push(row.index);
            } else {
                self.sel.used += 1;
                used(row);
            }
        }
        self.sel
    }
}

/// Per-scope series over streamed rows: [`super::stats::scope_distributions`] in bounded memory.
#[derive(Debug, Default)]
pub struct ScopeSeries {
    iterations: usize,
    by_path: BTreeMap<String, ScopeAcc>,
    budget: Budget,
}

#[derive(Debug)]
struct ScopeAcc {
    calls: Series,
    host: Series,
    dev: Series,
    dev_inc: Series,
    event: Series,
    launches: Series,
}

impl ScopeAcc {
    fn new(budget: &Budget) -> Self {
        Self {
            calls: budget.series(),
            host: budget.series(),
            dev: budget.series(),
            dev_inc: budget.series(),
            event: budget.series(),
            launches: budget.series(),
        }
    }
}

impl ScopeSeries {
    /// Series whose exact values count against `budget`.
    pub fn with_budget(budget: Budget) -> Self {
        Self {
            budget,
            ..Self::default()
        }
    }

    /// Adds one used row.
    pub fn push(&mut self, row: &IterationRow) {
        self.iterations += 1;
        let mut this: BTreeMap<&str, ([u64; 5], Option<u64>)> = BTreeMap::new();
        for s in &row.scopes {
            let (e, ev) = this.entry(s.path.as_str()).or_default();
            e[0] = e[0].saturating_add(s.calls);
            e[1] = e[1].saturating_add(s.host_ns);
            e[2] = e[2].saturating_add(s.device_ns);
            e[3] = e[3].saturating_add(s.device_ns_inclusive);
            e[4] = e[4].saturating_add(s.launches);
            if let Some(x) = s.event_device_ns {
                *ev = Some(ev.unwrap_or(0).saturating_add(x));
            }
        }
        for (path, (v, ev)) in this {
            if !self.by_path.contains_key(path) {
                self.by_path
                    .insert(path.to_string(), ScopeAcc::new(&self.budget));
            }
            let Some(acc) = self.by_path.get_mut(path) else {
                continue;
            };
            acc.calls.push_u64(v[0]);
            acc.host.push_u64(v[1]);
            acc.dev.push_u64(v[2]);
            acc.dev_inc.push_u64(v[3]);
            acc.launches.push_u64(v[4]);
            if let Some(x) = ev {
                acc.event.push_u64(x);
            }
        }
    }

    /// Whether a percentile of some scope comes from a sketch.
    pub fn sketched(&self) -> bool {
        self.by_path.values().any(|a| {
            [&a.calls, &a.host, &a.dev, &a.dev_inc, &a.event, &a.launches]
                .iter()
                .any(|s| s.is_sketched())
        })
    }

    /// The distributions, sorted by path.
    pub fn finish(self) -> Vec<ScopeStats> {
        let iterations = self.iterations;
        let per_iter = |s: &Series| s.sum() / iterations.max(1) as f64;
        self.by_path
            .into_iter()
            .filter_map(|(path, a)| {
                Some(ScopeStats {
                    iterations,
                    present_in: a.calls.len() as usize,
                    calls: a.calls.distribution()?,
                    host_ns: a.host.distribution()?,
                    device_ns: a.dev.distribution()?,
                    device_ns_inclusive: a.dev_inc.distribution()?,
                    event_device_ns: a.event.distribution(),
                    launches: a.launches.distribution()?,
                    host_ns_mean_per_iteration: per_iter(&a.host),
                    device_ns_inclusive_mean_per_iteration: per_iter(&a.dev_inc),
                    launches_mean_per_iteration: per_iter(&a.launches),
                    path,
                })
            })
            .collect()
    }
}

/// Per-family series over streamed rows: [`super::stats::family_distributions`] in bounded
/// memory.
#[derive(Debug)]
pub struct FamilySeries<'r> {
    namer: super::families::FamilyNamer<'r>,
    iterations: usize,
    by_family: BTreeMap<String, (Series, Series)>,
    budget: Budget,
}

impl<'r> FamilySeries<'r> {
    /// Series grouped by `rules`.
    pub fn new(rules: &'r FamilyRules) -> Self {
        Self::with_budget(rules, Budget::default())
    }

    /// Series grouped by `rules` whose exact values count against `budget`.
    pub fn with_budget(rules: &'r FamilyRules, budget: Budget) -> Self {
        Self {
            namer: rules.namer(),
            iterations: 0,
            by_family: BTreeMap::new(),
            budget,
        }
    }

    /// Whether a percentile of some family comes from a sketch.
    pub fn sketched(&self) -> bool {
        self.by_family
            .values()
            .any(|(a, b)| a.is_sketched() || b.is_sketched())
    }

    /// Adds one used row.
    pub fn push(&mut self, row: &IterationRow) {
        self.iterations += 1;
        let mut this: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for k in &row.kernels {
            let e = this.entry(self.namer.family_of(&k.name)).or_default();
            e.0 = e.0.saturating_add(k.total_ns);
            e.1 = e.1.saturating_add(k.count);
        }
        for (fam, (ns, count)) in this {
            let budget = &self.budget;
            let acc = self
                .by_family
                .entry(fam)
                .or_insert_with(|| (budget.series(), budget.series()));
            acc.0.push_u64(ns);
            acc.1.push_u64(count);
        }
    }

    /// The distributions, largest mean time per iteration first.
    pub fn finish(self) -> Vec<FamilyStats> {
        let iterations = self.iterations;
        let per_iter = |s: &Series| s.sum() / iterations.max(1) as f64;
        let mut out: Vec<FamilyStats> = self
            .by_family
            .into_iter()
            .filter_map(|(family, (ns, counts))| {
                Some(FamilyStats {
                    iterations,
                    present_in: ns.len() as usize,
                    total_ns: ns.distribution()?,
                    launches: counts.distribution()?,
                    total_ns_mean_per_iteration: per_iter(&ns),
                    launches_mean_per_iteration: per_iter(&counts),
                    family,
                })
            })
            .collect();
        super::stats::sort_families(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::stats::{
        family_distributions, scope_distributions, select_rows, WarmupDetect,
    };
    use gpu_ledger_format::reader::parse_ledger;

    fn golden() -> Vec<Vec<IterationRow>> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data");
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "jsonl") {
                if let Ok(l) = parse_ledger(&std::fs::read(&p).unwrap()[..], &p) {
                    out.push(l.iterations);
                }
            }
        }
        assert!(out.len() >= 5);
        // A run with three slow leading iterations, so that detection finds warm-up.
        let mut warm = out[0].clone();
        let base = warm[0].clone();
        warm = (0..40u64)
            .map(|i| {
                let mut r = base.clone();
                r.index = i;
                r.host_wall_ns = if i < 3 { 9_000_000 } else { 1_000_000 + i };
                r
            })
            .collect();
        out.push(warm);
        out
    }

    #[test]
    fn streamed_selection_and_series_equal_the_whole_ledger_functions() {
        let rules = FamilyRules::default();
        for rows in golden() {
            for filter in [
                RowFilter::default(),
                RowFilter {
                    warmup: Warmup::None,
                    include_incomplete: true,
                    include_untraced: true,
                    include_perturbed: true,
                },
                RowFilter {
                    warmup: Warmup::Fixed(2),
                    ..RowFilter::default()
                },
                RowFilter {
                    warmup: Warmup::Detect(WarmupDetect {
                        max_warmup: 2,
                        ..WarmupDetect::default()
                    }),
                    ..RowFilter::default()
                },
            ] {
                let whole = select_rows(&rows, &filter);
                let mut sel = RowSelector::new(filter);
                let (mut scopes, mut fams) = (ScopeSeries::default(), FamilySeries::new(&rules));
                let mut used = Vec::new();
                for r in &rows {
                    sel.push(r.clone(), |u| {
                        used.push(u.index);
                        scopes.push(u);
                        fams.push(u);
                    });
                }
                let s = sel.finish(|u| {
                    used.push(u.index);
                    scopes.push(u);
                    fams.push(u);
                });
                used.sort_unstable();
                let want: Vec<u64> = whole.used.iter().map(|r| r.index).collect();
                assert_eq!(used, want);
                assert_eq!(s.used, want.len());
                assert_eq!(s.warmup, whole.warmup);
                assert_eq!(s.perturbed, whole.perturbed);
                assert_eq!(s.incomplete, whole.incomplete);
                assert_eq!(
                    scopes.finish(),
                    scope_distributions(whole.used.iter().copied())
                );
                assert_eq!(
                    fams.finish(),
                    family_distributions(whole.used.iter().copied(), &rules)
                );
            }
        }
    }

    #[test]
    fn warm_up_is_detected_past_the_exact_bound() {
        let base = golden().pop().unwrap()[5].clone();
        let mut sel = RowSelector::new(RowFilter::default());
        let n = crate::analysis::series::EXACT_VALUES as u64 + 5_000;
        let mut used = 0u64;
        for i in 0..n {
            let mut r = base.clone();
            r.index = i;
            r.host_wall_ns = if i < 4 {
                5_000_000
            } else {
                1_000_000 + (i * 7919) % 40_000
            };
            sel.push(r, |_| used += 1);
        }
        let s = sel.finish(|_| used += 1);
        assert_eq!(s.warmup, [0, 1, 2, 3]);
        assert_eq!((s.used as u64, used), (n - 4, n - 4));
    }
}
