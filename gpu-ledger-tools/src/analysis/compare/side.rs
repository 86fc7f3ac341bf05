//! One side of a comparison, its ledger's rows pushed one at a time in memory independent of their
//! number ([`CompareSide::push`]), then [`compare_streamed`]; [`compare`](super::compare) pushes
//! a ledger in memory through the same side.
//!
//! The bootstrap resamples the metric's values of every kept iteration while a side keeps at most
//! its budget's [`series_limit`](Budget::series_limit) of them ([`BOOTSTRAP_SAMPLE`] by default),
//! in ledger order; beyond, it resamples a uniform sample of that many (the comparison's warnings
//! say how many of how many), and the speed-up is the ratio of the samples' medians. Scopes,
//! families and NVML figures share the side's [`Budget`] of exact values; past it their
//! percentiles come from a sketch, which the warnings say. A side made with [`Budget::exact`]
//! for the ledger's rows keeps every value.

use std::borrow::Borrow;

use super::warnings::{OperatingPoints, RecordCounts};
use super::{
    check_options, combine, kernel_launches, memcpy_ops, memset_ops, CompareError, CompareOptions,
    Comparison, SideFigures,
};
use crate::analysis::distributions::{FamilySeries, ScopeSeries};
use crate::analysis::idle::CauseSeries;
use crate::analysis::selection::RowSelector;
use crate::analysis::series::{Budget, Series, EXACT_VALUES};
use gpu_ledger_format::schema::{Header, IterationRow};

/// Most metric values of one side the bootstrap resamples, by default.
pub const BOOTSTRAP_SAMPLE: usize = EXACT_VALUES;

/// The figures of the kept rows of one side.
#[derive(Debug)]
struct Kept<'o> {
    opts: &'o CompareOptions,
    /// The metric's values, exact up to `limit` and a uniform sample of `limit` beyond.
    metric: Series,
    limit: usize,
    scopes: ScopeSeries,
    families: FamilySeries<'o>,
    ops: [u64; 3],
    records: RecordCounts,
    nvml: OperatingPoints,
    idle: CauseSeries,
}

impl Kept<'_> {
    /// Adds a kept row; its metric value goes to `metric`, or to `held` for rows handed on at
    /// the end, which come first in ledger order.
    fn push(&mut self, r: &IterationRow, held: Option<&mut Vec<f64>>) {
        if let Some(v) = self.opts.metric.value(r).filter(|v| *v > 0.0) {
            match held {
                Some(h) => h.push(v),
                None => self.metric.push(v),
            }
        }
        self.scopes.push(r);
        self.families.push(r);
        for (sum, n) in self
            .ops
            .iter_mut()
            .zip([kernel_launches(r), memcpy_ops(r), memset_ops(r)])
        {
            *sum = sum.saturating_add(n);
        }
        self.records.push(r);
        self.nvml.push(r);
        self.idle.push(r);
    }
}

/// One side of a comparison (see the module doc). `R` is how a row is handed over: the row itself
/// (read from a stream) or a reference (a ledger in memory).
#[derive(Debug)]
pub struct CompareSide<'o, R = IterationRow> {
    rows: usize,
    selector: RowSelector<R>,
    kept: Kept<'o>,
}

impl<'o> CompareSide<'o> {
    /// A side compared with `opts`, in bounded memory.
    pub fn new(opts: &'o CompareOptions) -> Self {
        Self::with_budget(opts, Budget::default())
    }
}

impl<'o, R: Borrow<IterationRow>> CompareSide<'o, R> {
    /// A side compared with `opts` over a ledger of `rows` rows (one in memory): every figure
    /// exact ([`Budget::exact`]), the bootstrap resampling every kept value.
    pub fn for_rows(opts: &'o CompareOptions, rows: usize) -> Self {
        Self::with_budget(opts, Budget::exact(rows))
    }

    /// A side compared with `opts` whose figures share `budget` of exact values and whose
    /// bootstrap resamples at most its [`series_limit`](Budget::series_limit) values:
    /// [`Budget::exact`] of the ledger's rows keeps every figure exact.
    pub fn with_budget(opts: &'o CompareOptions, budget: Budget) -> Self {
        Self {
            rows: 0,
            selector: RowSelector::with_budget(opts.filter, &budget),
            kept: Kept {
                opts,
                metric: budget.sampled(),
                limit: budget.series_limit(),
                scopes: ScopeSeries::with_budget(budget.clone()),
                families: FamilySeries::with_budget(&opts.family_rules, budget.clone()),
                ops: [0; 3],
                records: RecordCounts::default(),
                nvml: OperatingPoints::with_budget(budget.clone()),
                idle: CauseSeries::new(budget),
            },
        }
    }

    /// Takes the next row of the ledger, in ledger order.
    pub fn push(&mut self, row: R) {
        self.rows += 1;
        let kept = &mut self.kept;
        self.selector.push(row, |r| kept.push(r.borrow(), None));
    }

    fn finish(self) -> SideFigures {
        let Self {
            rows,
            selector,
            mut kept,
        } = self;
        let mut held = Vec::new();
        let sel = selector.finish(|r| kept.push(r.borrow(), Some(&mut held)));
        let limit = kept.limit;
        let values = if kept.metric.len() as usize + held.len() <= limit {
            // Below the bound: every value, in ledger order.
            held.extend_from_slice(kept.metric.sample());
            let mut exact = Series::sampled(limit);
            held.iter().for_each(|&v| exact.push(v));
            kept.metric = exact;
            held
        } else {
            held.iter().for_each(|&v| kept.metric.push(v));
            kept.metric.sample().to_vec()
        };
        let n = sel.used.max(1) as f64;
        SideFigures {
            rows,
            used: sel.used,
            warmup: sel.warmup,
            perturbed: sel.perturbed,
            incomplete: sel.incomplete,
            distribution: kept.metric.distribution(),
            values,
            scopes: kept.scopes.finish(),
            families: kept.families.finish(),
            ops: kept
                .ops
                .map(|x| if sel.used == 0 { 0.0 } else { x as f64 / n }),
            records: kept.records,
            nvml: kept.nvml,
            idle: kept.idle.finish(),
        }
    }
}

/// Compares the ledger `a` (baseline, with header `ha`) with `b` (the change), each pushed into
/// its side.
///
/// # Errors
/// As [`compare`](super::compare).
pub fn compare_streamed<Ra: Borrow<IterationRow>, Rb: Borrow<IterationRow>>(
    ha: &Header,
    a: CompareSide<'_, Ra>,
    hb: &Header,
    b: CompareSide<'_, Rb>,
    opts: &CompareOptions,
) -> Result<Comparison, CompareError> {
    check_options(opts)?;
    combine(ha, a.finish(), hb, b.finish(), opts)
}
