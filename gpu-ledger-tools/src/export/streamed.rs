//! The HTML report of a ledger read as a stream, in memory independent of its number of rows:
//! [`ReportBuilder::push`] each row in ledger order, then [`ReportBuilder::finish`]. Its summary
//! is [`SummaryBuilder`]'s.

use super::chart_buckets::ChartBuckets;
use super::html::{write_report, ReportOptions};
use super::summary::SummaryBuilder;
use gpu_ledger_format::schema::{Header, IterationRow, Trailer};

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
