//! `gpu-ledger metrics`: a ledger's rows published through the same mapping the profiler's
//! feature `metrics` uses, into a recorder in memory, and printed as Prometheus or OpenMetrics
//! text: what a scrape of the profiled process after its last row would have read.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use clap::ValueEnum;
use gpu_ledger_metrics::{MemoryRecorder, MetricsOptions, Publisher, TextFormat};
use gpu_ledger_tools::export::StreamItem;

use super::input::{open, Ctx};
use super::output::Output;
use super::{io_err, warn_truncated, CliError};

/// The text format printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum MetricsFormat {
    /// Prometheus' text format (version 0.0.4), as `promtool check metrics` reads it.
    Prometheus,
    /// OpenMetrics 1.0 text, ending with `# EOF`.
    #[value(alias = "om")]
    Openmetrics,
}

/// Which scope paths get series of their own: as the profiled run's `MetricsOptions`, so that
/// the output matches what it published.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ScopeArgs {
    /// Deepest scope path with series of its own (1: top-level paths; 0: no scope metrics).
    #[arg(long, default_value_t = MetricsOptions::default().scope_depth)]
    scope_depth: usize,
    /// Most scope paths with series of their own, besides --scope and (unscoped).
    #[arg(long, default_value_t = MetricsOptions::default().max_scopes)]
    max_scopes: usize,
    /// A scope path that always gets series of its own (repeatable).
    #[arg(long = "scope", value_name = "PATH")]
    scopes: Vec<String>,
    /// Counters and gauges only, no per-iteration histograms.
    #[arg(long)]
    no_histograms: bool,
}

impl ScopeArgs {
    fn options(&self) -> MetricsOptions {
        MetricsOptions {
            scope_depth: self.scope_depth,
            max_scopes: self.max_scopes,
            scopes: self.scopes.clone(),
            histograms: !self.no_histograms,
            recorder: None,
        }
    }
}

pub(crate) fn metrics(
    path: &Path,
    output: &Path,
    format: MetricsFormat,
    scopes: &ScopeArgs,
    ctx: Ctx,
) -> Result<(), CliError> {
    super::output::refuse_input(output, &[path])?;
    let recorder = MemoryRecorder::new();
    let options = scopes.options().with_recorder(Arc::new(recorder.clone()));
    let (mut stream, mut p) = open(path, ctx)?;
    let mut publisher = Publisher::new(&options, stream.header());
    let mut rows = 0u64;
    for item in stream.by_ref() {
        if let StreamItem::Row(_, row) = item? {
            rows += 1;
            p.tick(rows);
            publisher.publish(&row);
        }
    }
    p.done(rows);
    warn_truncated(path, stream.truncated_last_line());
    let text = recorder.render(match format {
        MetricsFormat::Prometheus => TextFormat::Prometheus,
        MetricsFormat::Openmetrics => TextFormat::OpenMetrics,
    });
    let mut out = Output::create(output)?;
    let out_name = out.name().to_string();
    out.writer
        .write_all(text.as_bytes())
        .map_err(io_err(format!("cannot write {out_name}")))?;
    out.commit()?;
    if out_name != "stdout" {
        eprintln!(
            "gpu-ledger: {rows} rows, {} series written to {out_name}",
            recorder.series().len()
        );
    }
    Ok(())
}
