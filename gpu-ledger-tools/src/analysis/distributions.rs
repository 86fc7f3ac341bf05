//! Per-scope and per-family distributions across iterations, one row at a time in memory
//! independent of the number of rows: [`ScopeSeries`] and [`FamilySeries`] keep each figure as a
//! [`Series`], exact up to a [`Budget`] and a quantile sketch beyond. [`scope_distributions`] and
//! [`family_distributions`] are the same series over rows already in memory, with a budget that
//! keeps them exact.
//!
//! # Scopes and families that do not run every iteration
//! A scope or family absent from an iteration did not run in it. Its distributions are taken over
//! the iterations where it is present (what it costs when it runs), and
//! [`mean_per_iteration`](ScopeStats::host_ns_mean_per_iteration) figures divide by every
//! iteration looked at (what it contributes to an average iteration).
//!
//! # Many names
//! Past [`MAX_NAMES`](super::names::MAX_NAMES) scope paths or families, later ones are folded
//! into one entry, `(other N names)`, whose figures per iteration are the sums of the folded
//! names' ([`super::names`]); [`ScopeSeries::folded`] says how many and how much time one of
//! them may hide.

use std::collections::BTreeMap;

use super::families::{FamilyNamer, FamilyRules};
use super::names::{NameFold, OTHER_NAMES};
use super::series::{Budget, Series};
use super::stats::{sort_families, FamilyStats, ScopeStats};
use gpu_ledger_format::schema::IterationRow;

/// Per-scope distributions across `rows`, sorted by path, every figure exact whatever the number
/// of rows. A scope listed twice in one row has its entries added.
pub fn scope_distributions<'a>(
    rows: impl IntoIterator<Item = &'a IterationRow>,
) -> Vec<ScopeStats> {
    let rows: Vec<&IterationRow> = rows.into_iter().collect();
    let mut s = ScopeSeries::with_budget(Budget::exact(rows.len()));
    rows.into_iter().for_each(|r| s.push(r));
    s.finish()
}

/// Per-family distributions across `rows` (all devices together), largest mean time per
/// iteration first, every figure exact whatever the number of rows.
pub fn family_distributions<'a>(
    rows: impl IntoIterator<Item = &'a IterationRow>,
    rules: &FamilyRules,
) -> Vec<FamilyStats> {
    let rows: Vec<&IterationRow> = rows.into_iter().collect();
    let mut f = FamilySeries::with_budget(rules, Budget::exact(rows.len()));
    rows.into_iter().for_each(|r| f.push(r));
    f.finish()
}

/// Per-scope series over rows pushed one at a time: [`scope_distributions`] in bounded memory.
#[derive(Debug, Default)]
pub struct ScopeSeries {
    iterations: usize,
    by_path: BTreeMap<String, ScopeAcc>,
    budget: Budget,
    names: NameFold,
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
            let key = self.names.key(&s.path, s.device_ns_inclusive);
            let (e, ev) = this.entry(key).or_default();
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

    /// The scope paths folded into `(other N names)`, when there were more than
    /// [`MAX_NAMES`](super::names::MAX_NAMES).
    pub fn folded(&self) -> Option<&NameFold> {
        Some(&self.names).filter(|n| n.folded() > 0)
    }

    /// The distributions, sorted by path; the folded paths' entry is named by
    /// [`NameFold::label`].
    #[must_use]
    pub fn finish(self) -> Vec<ScopeStats> {
        let iterations = self.iterations;
        let per_iter = |s: &Series| s.sum() / iterations.max(1) as f64;
        let label = self.names.label();
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
                    path: if path == OTHER_NAMES {
                        label.clone()
                    } else {
                        path
                    },
                })
            })
            .collect()
    }
}

/// Per-family series over rows pushed one at a time: [`family_distributions`] in bounded memory.
#[derive(Debug)]
pub struct FamilySeries<'r> {
    namer: FamilyNamer<'r>,
    iterations: usize,
    by_family: BTreeMap<String, (Series, Series)>,
    budget: Budget,
    names: NameFold,
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
            names: NameFold::default(),
        }
    }

    /// The families folded into `(other N names)`, when there were more than
    /// [`MAX_NAMES`](super::names::MAX_NAMES).
    pub fn folded(&self) -> Option<&NameFold> {
        Some(&self.names).filter(|n| n.folded() > 0)
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
        // Folded families are one entry: their sums in this row are one value of its series.
        let mut keyed: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for (fam, (ns, count)) in this {
            let e = keyed
                .entry(self.names.key(&fam, ns).to_string())
                .or_default();
            e.0 = e.0.saturating_add(ns);
            e.1 = e.1.saturating_add(count);
        }
        for (fam, (ns, count)) in keyed {
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
    #[must_use]
    pub fn finish(self) -> Vec<FamilyStats> {
        let iterations = self.iterations;
        let per_iter = |s: &Series| s.sum() / iterations.max(1) as f64;
        let label = self.names.label();
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
                    family: if family == OTHER_NAMES {
                        label.clone()
                    } else {
                        family
                    },
                })
            })
            .collect();
        sort_families(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::selection::{select_rows, RowSelector};
    use crate::analysis::stats::{RowFilter, Warmup, WarmupDetect};
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
