//! Which rows count: [`RowSelector`] takes a ledger's rows one at a time, in memory independent
//! of their number, and [`select_rows`] is the same selector over rows already in memory.
//!
//! A row is left out as incomplete (its GPU records did not all arrive), perturbed (hardware
//! counters serialized and replayed kernels), untraced (a sampled timeline did not trace it) or
//! warm-up (set by count or detected, see [`Warmup`]); each left-out row is reported under exactly
//! one reason, the first of those four.
//!
//! Warm-up is decided at the end, since its threshold is taken over the whole series: the selector
//! holds back the first `max_warmup` candidate rows (10 by default) and hands on the used ones when
//! it finishes, after every later row. The series it decides on is exact up to its
//! [`Budget::series_limit`]; past it (a stream longer than [`EXACT_VALUES`] rows) the threshold
//! takes the sketch's median and the spread of a uniform sample.
//!
//! [`EXACT_VALUES`]: super::series::EXACT_VALUES

use std::borrow::Borrow;

use super::indices::IndexRuns;
use super::series::{Budget, Series};
use super::stats::{detect_warmup, median, RowFilter, Warmup, MAD_TO_SIGMA};
use gpu_ledger_format::schema::IterationRow;

/// The rows kept for statistics, and the indices of those left out, by reason.
#[derive(Debug, Clone, PartialEq)]
pub struct RowSelection<'a> {
    /// Rows kept, in ledger order.
    pub used: Vec<&'a IterationRow>,
    /// Iteration indices left out as warm-up, ascending.
    pub warmup: Vec<u64>,
    /// Iteration indices left out because they were perturbed, ascending.
    pub perturbed: Vec<u64>,
    /// Iteration indices left out because they were incomplete, ascending.
    pub incomplete: Vec<u64>,
    /// Iteration indices left out because a sampled timeline did not trace them, ascending.
    pub untraced: Vec<u64>,
}

/// Splits `rows` into those used for statistics and those left out (see the module doc), every
/// figure exact whatever the number of rows. The lists of indices are ascending, each index once,
/// as a ledger's own indices are.
///
/// `Warmup::Fixed(n)` marks the first `n` rows of the ledger; `Warmup::Detect` runs
/// [`detect_warmup`] on the host wall time of the rows that are neither incomplete nor perturbed
/// (or on those kept by the filter), and marks the leading ones it finds.
pub fn select_rows<'a>(rows: &'a [IterationRow], filter: &RowFilter) -> RowSelection<'a> {
    let mut selector = RowSelector::with_budget(*filter, &Budget::exact(rows.len()));
    let mut later = Vec::new();
    for row in rows {
        selector.push(row, |r| later.push(*r));
    }
    // The held-back candidates are the earliest ones: they come first in ledger order.
    let mut used = Vec::new();
    let s = selector.finish(|r| used.push(*r));
    used.append(&mut later);
    RowSelection {
        used,
        warmup: s.warmup.into(),
        perturbed: s.perturbed.into(),
        incomplete: s.incomplete.into(),
        untraced: s.untraced.into(),
    }
}

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

/// The row selection over a stream: [`RowSelector::push`] each row in ledger order, then
/// [`RowSelector::finish`]. Used rows go to the `used` callback: at once, or at `finish` for the
/// held-back candidates that are not warm-up. `R` is how a row is handed over: the row itself
/// (read from a stream) or a reference (a ledger in memory), so that no row is copied.
#[derive(Debug)]
pub struct RowSelector<R = IterationRow> {
    filter: RowFilter,
    sel: StreamedSelection,
    /// The first candidates, held until warm-up is known (detection only).
    held: Vec<R>,
    /// Host wall time of the candidates after the held ones: the warm-up reference.
    reference: Series,
}

impl RowSelector {
    /// A selector for `filter` over a stream of rows, in bounded memory.
    pub fn new(filter: RowFilter) -> Self {
        Self::with_budget(filter, &Budget::default())
    }
}

/// The row an `R` hands over.
fn row_of<R: Borrow<IterationRow>>(r: &R) -> &IterationRow {
    r.borrow()
}

impl<R: Borrow<IterationRow>> RowSelector<R> {
    /// A selector for `filter` whose warm-up reference is exact up to `budget`'s
    /// [`Budget::series_limit`] values ([`Budget::exact`] for a ledger in memory).
    pub fn with_budget(filter: RowFilter, budget: &Budget) -> Self {
        Self {
            filter,
            sel: StreamedSelection::default(),
            held: Vec::new(),
            reference: budget.sampled(),
        }
    }

    /// Takes the next row (in ledger order).
    pub fn push(&mut self, row: R, mut used: impl FnMut(&R)) {
        let pos = self.sel.rows;
        self.sel.rows += 1;
        let r = row_of(&row);
        let (index, wall) = (r.index, r.host_wall_ns);
        if !r.complete && !self.filter.include_incomplete {
            self.sel.incomplete.push(index);
            return;
        }
        if r.perturbed && !self.filter.include_perturbed {
            self.sel.perturbed.push(index);
            return;
        }
        if r.untraced && !self.filter.include_untraced {
            self.sel.untraced.push(index);
            return;
        }
        match self.filter.warmup {
            Warmup::None => self.use_row(&row, &mut used),
            Warmup::Fixed(n) if pos < n => self.sel.warmup.push(index),
            Warmup::Fixed(_) => self.use_row(&row, &mut used),
            Warmup::Detect(p) if self.held.len() < p.max_warmup => self.held.push(row),
            Warmup::Detect(_) => {
                self.reference.push(wall as f64);
                self.use_row(&row, &mut used);
            }
        }
    }

    fn use_row(&mut self, row: &R, used: &mut impl FnMut(&R)) {
        self.sel.used += 1;
        used(row);
    }

    /// Decides warm-up, hands on the held-back rows that are used, and returns the selection.
    pub fn finish(mut self, mut used: impl FnMut(&R)) -> StreamedSelection {
        let Warmup::Detect(params) = self.filter.warmup else {
            return self.sel;
        };
        let held = std::mem::take(&mut self.held);
        let held_wall: Vec<f64> = held.iter().map(|r| row_of(r).host_wall_ns as f64).collect();
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
                self.sel.warmup.push(row_of(row).index);
            } else {
                self.sel.used += 1;
                used(row);
            }
        }
        self.sel
    }
}
