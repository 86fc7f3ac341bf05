//! [`compare`](super::compare) of two ledgers read as streams, in memory independent of their
//! number of rows: [`CompareSide::push`] each row of a ledger in order, then
//! [`compare_streamed`].
//!
//! The bootstrap resamples the metric's values of every kept iteration while a side keeps at most
//! [`BOOTSTRAP_SAMPLE`] of them, in ledger order, so that its interval is the one
//! [`compare`](super::compare) gives; beyond, it resamples a uniform sample of that many (the
//! comparison's warnings say how many of how many), and the speed-up is the ratio of the
//! samples' medians. Scopes, families and NVML figures share one
//! [`Budget`](crate::analysis::series::Budget) of exact values per side; past it their
//! percentiles come from a sketch, which the warnings say.

use super::warnings::{OperatingPoints, RecordCounts};
use super::{
    check_options, combine, kernel_launches, memcpy_ops, memset_ops, CompareError, CompareOptions,
    Comparison, SideFigures,
};
use crate::analysis::distributions::{FamilySeries, ScopeSeries};
use crate::analysis::selection::RowSelector;
use crate::analysis::series::{Budget, Series, EXACT_VALUES};
use gpu_ledger_format::schema::{Header, IterationRow};

/// Most metric values of one side the bootstrap resamples.
pub const BOOTSTRAP_SAMPLE: usize = EXACT_VALUES;

/// The figures of the kept rows of one side.
#[derive(Debug)]
struct Kept<'o> {
    opts: &'o CompareOptions,
    metric: Series,
    scopes: ScopeSeries,
    families: FamilySeries<'o>,
    ops: [u64; 3],
    records: RecordCounts,
    nvml: OperatingPoints,
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
    }
}

/// One side of a streamed comparison (see the module doc).
#[derive(Debug)]
pub struct CompareSide<'o> {
    rows: usize,
    selector: RowSelector,
    kept: Kept<'o>,
}

impl<'o> CompareSide<'o> {
    /// A side compared with `opts`.
    pub fn new(opts: &'o CompareOptions) -> Self {
        // Scopes, families and NVML figures share one budget of exact values.
        let budget = Budget::default();
        Self {
            rows: 0,
            selector: RowSelector::new(opts.filter),
            kept: Kept {
                opts,
                metric: Series::sampled(BOOTSTRAP_SAMPLE),
                scopes: ScopeSeries::with_budget(budget.clone()),
                families: FamilySeries::with_budget(&opts.family_rules, budget.clone()),
                ops: [0; 3],
                records: RecordCounts::default(),
                nvml: OperatingPoints::with_budget(budget),
            },
        }
    }

    /// Takes the next row of the ledger, in ledger order.
    pub fn push(&mut self, row: IterationRow) {
        self.rows += 1;
        let kept = &mut self.kept;
        self.selector.push(row, |r| kept.push(r, None));
    }

    fn finish(self) -> SideFigures {
        let Self {
            rows,
            selector,
            mut kept,
        } = self;
        let mut held = Vec::new();
        let sel = selector.finish(|r| kept.push(r, Some(&mut held)));
        let values = if kept.metric.len() as usize + held.len() <= BOOTSTRAP_SAMPLE {
            // Below the bound: every value, in ledger order, as the whole-ledger comparison.
            held.extend_from_slice(kept.metric.sample());
            let mut exact = Series::sampled(BOOTSTRAP_SAMPLE);
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
        }
    }
}

/// Compares the streamed ledger `a` (baseline, with header `ha`) with `b` (the change).
///
/// # Errors
/// As [`compare`](super::compare).
pub fn compare_streamed(
    ha: &Header,
    a: CompareSide<'_>,
    hb: &Header,
    b: CompareSide<'_>,
    opts: &CompareOptions,
) -> Result<Comparison, CompareError> {
    check_options(opts)?;
    combine(ha, a.finish(), hb, b.finish(), opts)
}
