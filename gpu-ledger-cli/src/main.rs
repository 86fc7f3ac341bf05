//! The `gpu-ledger` command: from a ledger to the decisions of the profiling funnel without
//! writing code. Works on any machine: it reads ledgers, it never touches a GPU.
//!
//! ```text
//! gpu-ledger summary run.jsonl [--format json]      Markdown summary on stdout (or JSON)
//! gpu-ledger compare a.jsonl b.jsonl [--hypothesis T --change T --experiment-log DIR]
//! gpu-ledger trace run.jsonl -o run.json [--iterations 100..200]   Perfetto / Chrome trace
//! gpu-ledger trace rank*.jsonl -o job.json          ranks aligned on iteration starts
//! gpu-ledger report run.jsonl -o run.html           self-contained HTML report
//! gpu-ledger csv run.jsonl -o run.csv [--long]      per-iteration (or iteration × scope) table
//! gpu-ledger metrics run.jsonl                      the rows as Prometheus / OpenMetrics text
//! gpu-ledger check run.jsonl...                     validate (exit 1 with path:line: message)
//! gpu-ledger merge rank0.jsonl rank1.jsonl ...      ranks aligned by iteration
//! gpu-ledger parquet ledgers/ -o dataset            ledgers as a Parquet dataset
//! gpu-ledger sql dataset --query straggler          SQL across ranks (feature `sql`)
//! gpu-ledger completions bash|zsh|fish              the shell's completion script
//! ```
//!
//! Exit status: 0 on success, 1 when a ledger is invalid or an output cannot be written, 2 on a
//! usage error. A ledger compressed with gzip or zstd is read as it is. A ledger whose last line was cut while being written (the run was killed) is
//! valid up to that line: every command warns once, naming the line, and goes on without it.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

use gpu_ledger_format::schema::Header;
use gpu_ledger_format::{check_ledger, truncation_warning};
use gpu_ledger_tools::analysis::compare::{compare_streamed, CompareOptions, CompareSide};
use gpu_ledger_tools::analysis::families::{FamilyRules, GroupingRule};
use gpu_ledger_tools::analysis::stats::{IterationMetric, RowFilter, Warmup, WarmupDetect};
use gpu_ledger_tools::export::experiment::{today_utc, ExperimentEntry, ExperimentLog};
use gpu_ledger_tools::export::text::md_cell;
use gpu_ledger_tools::export::{
    markdown_comparison, markdown_summary, IterationRange, ReportBuilder, ReportOptions,
    StreamItem, SummaryBuilder, SummaryOptions, TraceOptions, TraceWriter,
};

mod csv;
mod formats;
mod input;
mod interrupt;
mod merge;
mod metrics;
mod output;
mod parquet;
mod progress;
#[cfg(feature = "sql")]
mod sql;
mod trace_ranks;
use formats::{comparison_json, json_text, summary_json, TextFormat};
use input::{open, read_bounded, Ctx};
use output::Output;

/// Bytes of rows that summary, report and compare hold to analyse a ledger whole; a longer ledger
/// is analysed as it streams past, in memory independent of its length (percentiles from a
/// sketch past 100 000 rows, said in the output).
const HOLD_BYTES: u64 = 8 << 20;

/// The most bootstrap resamples `compare` takes: 80 MB of them.
const MAX_RESAMPLES: u64 = 10_000_000;

#[derive(Parser, Debug)]
#[command(
    name = "gpu-ledger",
    version,
    about = "Summaries, A/B comparisons, traces, reports and checks of gpu-ledger ledgers",
    long_about = "Reads the JSON Lines ledgers written by the gpu-ledger profiler and turns them \
                  into Markdown summaries, A/B comparisons with a bootstrap interval, Perfetto \
                  traces, HTML reports and CSV tables. Needs no GPU.",
    after_help = "Exit status: 0 success, 1 invalid ledger or I/O error, 2 usage error."
)]
struct Cli {
    /// Report progress on stderr every 10 000 rows even when stderr is not a terminal (a
    /// terminal shows one updating line after a second without it).
    #[arg(long, global = true)]
    progress: bool,
    /// Bytes of rows held to analyse a ledger whole before it is streamed (for tests).
    #[arg(long, global = true, hide = true, default_value_t = HOLD_BYTES)]
    hold_bytes: u64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print a Markdown summary of a ledger (for pasting into an issue).
    Summary {
        /// The ledger (JSON Lines; gzip or zstd compressed too).
        ledger: PathBuf,
        /// Output format (default: `aligned` on a terminal, else `markdown`).
        #[arg(long, value_enum)]
        format: Option<TextFormat>,
        #[command(flatten)]
        stats: StatsArgs,
    },
    /// Compare ledger A (baseline) with ledger B (one change): speed-up with a bootstrap interval.
    Compare {
        /// Baseline ledger.
        a: PathBuf,
        /// Ledger of the change.
        b: PathBuf,
        /// What you expected and why (recorded in the experiment log).
        #[arg(long)]
        hypothesis: Option<String>,
        /// The one change between A and B (recorded in the experiment log).
        #[arg(long)]
        change: Option<String>,
        /// Append the result to DIR/experiments.md and DIR/experiments.csv (needs --hypothesis
        /// and --change).
        #[arg(long, value_name = "DIR", requires_all = ["hypothesis", "change"])]
        experiment_log: Option<PathBuf>,
        /// Per-iteration figure compared: host-wall, device-busy[:D], device-idle[:D],
        /// device-window[:D] (D = device ordinal, default 0).
        #[arg(long, default_value = "host-wall", value_parser = parse_metric)]
        metric: IterationMetric,
        /// Bootstrap resamples (at most 10 000 000: each takes 8 bytes, and far fewer already
        /// give an interval's bounds to three digits).
        #[arg(long, default_value_t = 10_000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_RESAMPLES))]
        resamples: usize,
        /// Confidence of the interval, in (0, 1).
        #[arg(long, default_value_t = 0.95)]
        confidence: f64,
        /// Seed of the bootstrap (same seed, same interval).
        #[arg(long)]
        seed: Option<u64>,
        /// Output format (default: `aligned` on a terminal, else `markdown`).
        #[arg(long, value_enum)]
        format: Option<TextFormat>,
        #[command(flatten)]
        stats: StatsArgs,
    },
    /// Write a Chrome / Perfetto trace (open it in ui.perfetto.dev).
    Trace {
        /// The ledger; or several ranks' ledgers, aligned on iteration starts in one trace.
        #[arg(required = true)]
        ledgers: Vec<PathBuf>,
        /// Output file (`-` for stdout).
        #[arg(short, long)]
        output: PathBuf,
        /// Iterations to export: A..B (B excluded), A..=B, A.., ..B or N.
        #[arg(long, value_name = "RANGE")]
        iterations: Option<IterationRange>,
        /// Keep kernel names as CUPTI reports them (mangled).
        #[arg(long)]
        no_demangle: bool,
        /// Without --iterations, stop the trace of one ledger once this much JSON is written
        /// (trace viewers do not open much more); 0 for no bound.
        #[arg(long, value_name = "BYTES", default_value_t = TRACE_BYTES)]
        max_bytes: u64,
    },
    /// Write a self-contained HTML report with SVG charts.
    Report {
        /// The ledger.
        ledger: PathBuf,
        /// Output file (`-` for stdout).
        #[arg(short, long)]
        output: PathBuf,
        /// Page title.
        #[arg(long)]
        title: Option<String>,
        #[command(flatten)]
        stats: StatsArgs,
    },
    /// Write the per-iteration table as CSV: one line per iteration, with columns for the first
    /// 1000 scope paths (the rest summed into shared columns), or with --long one line per
    /// iteration and scope, the same columns for every ledger (README, "From a ledger to a
    /// decision").
    Csv {
        /// The ledger.
        ledger: PathBuf,
        /// Output file (`-` for stdout).
        #[arg(short, long)]
        output: PathBuf,
        /// One line per iteration and scope, with fixed columns, so that runs stack.
        #[arg(long)]
        long: bool,
    },
    /// Print the ledger's rows as metrics, in Prometheus text format (or OpenMetrics): what a
    /// scrape of the profiled process after its last row reads with feature `metrics` on.
    Metrics {
        /// The ledger.
        ledger: PathBuf,
        /// Output file (`-`, the default, for stdout).
        #[arg(short, long, default_value = "-")]
        output: PathBuf,
        /// Text format.
        #[arg(long, value_enum, default_value_t = metrics::MetricsFormat::Prometheus)]
        format: metrics::MetricsFormat,
        #[command(flatten)]
        scopes: metrics::ScopeArgs,
    },
    /// Validate ledgers: exit 0 when all are valid, 1 with `path:line: message` otherwise. A last
    /// line cut while being written (the run was killed) is a warning, not an error.
    Check {
        /// Ledgers to check.
        #[arg(required = true)]
        ledgers: Vec<PathBuf>,
    },
    /// Merge the ledgers of several ranks: per iteration the slowest rank and the spread.
    Merge {
        /// One ledger per rank.
        #[arg(required = true)]
        ledgers: Vec<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = MergeFormat::Markdown)]
        format: MergeFormat,
    },
    /// Write ledgers as a Parquet dataset: OUT/<table>/run=<run>/rank=<rank>/part-0.parquet
    /// (tables and columns: docs/dataset.md).
    Parquet {
        /// Ledgers, or directories of ledgers (their *.jsonl files; a compressed ledger there
        /// without its decompressed twin is refused).
        #[arg(required = true)]
        ledgers: Vec<PathBuf>,
        /// The dataset's directory: new, empty, or a dataset to add ranks to.
        #[arg(short, long)]
        output: PathBuf,
        /// The run's partition value (default: derived from each header's command line and
        /// world size, see docs/dataset.md).
        #[arg(long)]
        run: Option<String>,
        /// Replace the files of ranks already in the dataset (only those).
        #[arg(long)]
        overwrite: bool,
        /// Ledgers converted at once (default: the CPUs available).
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Print the shell's completion script: `gpu-ledger completions bash > \
    /// ~/.local/share/bash-completion/completions/gpu-ledger` (zsh, fish, elvish and PowerShell
    /// too).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Run SQL over a Parquet dataset of ledgers (not in this build: it was compiled without
    /// feature `sql`; `cargo install --path gpu-ledger-cli --features sql` brings it).
    #[cfg(not(feature = "sql"))]
    Sql {
        /// Whatever was given, for the message.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<String>,
    },
    /// Run SQL over a Parquet dataset of ledgers: a named query (straggler, spread,
    /// scope-percentiles, lag; docs/sql.md), a .sql file, or a statement.
    #[cfg(feature = "sql")]
    Sql {
        /// The dataset's directory (written by `gpu-ledger parquet`).
        dataset: PathBuf,
        /// A named query, a file ending in .sql, or SQL.
        #[arg(long, default_value = "straggler")]
        query: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = sql::SqlFormat::Table)]
        format: sql::SqlFormat,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum MergeFormat {
    /// A Markdown table.
    #[value(alias = "md")]
    Markdown,
    /// CSV.
    Csv,
}

/// Which rows count and how kernels are grouped.
#[derive(Args, Debug, Clone)]
struct StatsArgs {
    /// Warm-up iterations left out: `auto` (detected), `none`, or a count of leading rows.
    #[arg(long, default_value = "auto", value_parser = parse_warmup)]
    warmup: Warmup,
    /// Kernel family rule `[prefix:|substr:][i:]PATTERN=FAMILY` (repeatable; first match wins).
    #[arg(long = "family-rule", value_name = "RULE")]
    family_rules: Vec<GroupingRule>,
    /// Keep perturbed iterations (counter replay) in the statistics.
    #[arg(long)]
    include_perturbed: bool,
    /// Keep incomplete iterations in the statistics.
    #[arg(long)]
    include_incomplete: bool,
    /// Keep iterations a sampled timeline left untraced (no GPU records) in the statistics.
    #[arg(long)]
    include_untraced: bool,
    /// Kernel families shown.
    #[arg(long, default_value_t = 10)]
    top: usize,
}

impl StatsArgs {
    fn filter(&self) -> RowFilter {
        RowFilter {
            warmup: self.warmup,
            include_perturbed: self.include_perturbed,
            include_incomplete: self.include_incomplete,
            include_untraced: self.include_untraced,
        }
    }

    fn rules(&self) -> FamilyRules {
        FamilyRules {
            rules: self.family_rules.clone(),
        }
    }

    /// The comparison's options: these rows and families, the metric and the bootstrap's.
    fn compare(
        &self,
        metric: IterationMetric,
        resamples: usize,
        confidence: f64,
        seed: Option<u64>,
    ) -> CompareOptions {
        let mut opts = CompareOptions {
            metric,
            filter: self.filter(),
            resamples,
            confidence,
            family_rules: self.rules(),
            ..CompareOptions::default()
        };
        if let Some(seed) = seed {
            opts.seed = seed;
        }
        opts
    }

    fn summary(&self) -> SummaryOptions {
        SummaryOptions {
            filter: self.filter(),
            family_rules: self.rules(),
            top_families: self.top,
        }
    }
}

fn parse_warmup(s: &str) -> Result<Warmup, String> {
    match s.trim() {
        "auto" => Ok(Warmup::Detect(WarmupDetect::default())),
        "none" => Ok(Warmup::None),
        n => n
            .parse::<usize>()
            .map(Warmup::Fixed)
            .map_err(|_| format!("expected auto, none or a number of iterations, got {s:?}")),
    }
}

fn parse_metric(s: &str) -> Result<IterationMetric, String> {
    let (name, dev) = match s.split_once(':') {
        Some((n, d)) => (
            n,
            d.parse::<u32>()
                .map_err(|_| format!("bad device ordinal in {s:?}"))?,
        ),
        None => (s, 0),
    };
    match name {
        "host-wall" => Ok(IterationMetric::HostWall),
        "device-busy" => Ok(IterationMetric::DeviceBusy(dev)),
        "device-idle" => Ok(IterationMetric::DeviceIdle(dev)),
        "device-window" => Ok(IterationMetric::DeviceWindow(dev)),
        _ => Err(format!(
            "unknown metric {name:?}: expected host-wall, device-busy[:D], device-idle[:D] or \
             device-window[:D]"
        )),
    }
}

/// What `gpu-ledger sql` says in a build without the SQL engine.
#[cfg(not(feature = "sql"))]
const SQL_NOT_BUILT: &str = "this gpu-ledger was built without SQL (the feature `sql`, an \
     embedded DataFusion, left out of the default build for its compile time): install one with \
     it from a checkout of gpu-ledger with `cargo install --path gpu-ledger-cli --features sql` \
     (rustc 1.94 or later); `gpu-ledger parquet` then writes the dataset it queries";

/// Everything that ends a command with exit status 1.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("{0}")]
    Ledger(#[from] gpu_ledger_format::Error),
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("{0}")]
    Other(String),
    /// Already reported (check).
    #[error("")]
    Reported,
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> CliError {
    let what = what.into();
    move |source| CliError::Io { what, source }
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

/// Prints [`truncation_warning`] on stderr when the ledger's last line was cut.
fn warn_truncated(path: &Path, line: Option<usize>) {
    if let Some(line) = line {
        eprintln!("gpu-ledger: {}", truncation_warning(path, line));
    }
}

/// Prints `text` on stdout; a closed pipe (`| head`) is not an error.
fn print(text: &str) -> Result<(), CliError> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(CliError::Io {
            what: "cannot write to stdout".into(),
            source: e,
        }),
        _ => Ok(()),
    }
}

fn summary(
    path: &Path,
    stats: &StatsArgs,
    format: Option<TextFormat>,
    ctx: Ctx,
) -> Result<(), CliError> {
    let opts = stats.summary();
    let make = |held: Option<usize>| match held {
        Some(rows) => SummaryBuilder::for_rows(&opts, rows),
        None => SummaryBuilder::new(&opts),
    };
    let read = read_bounded(path, ctx, make, |b, r| b.push(r))?;
    let s = read.builder.finish(&read.header, read.trailer.as_ref());
    match TextFormat::for_stdout(format) {
        TextFormat::Json => print(&json_text(&summary_json(&s, &display(path)))),
        f => print(&f.markdown(markdown_summary(&s, &display(path)))),
    }
}

/// One side of a comparison: its header and the rows it kept.
fn compare_side<'o>(
    path: &Path,
    opts: &'o CompareOptions,
    ctx: Ctx,
) -> Result<(Header, CompareSide<'o>), CliError> {
    let make = |held: Option<usize>| match held {
        Some(rows) => CompareSide::for_rows(opts, rows),
        None => CompareSide::new(opts),
    };
    let read = read_bounded(path, ctx, make, |s, r| s.push(r))?;
    Ok((read.header, read.builder))
}

#[allow(clippy::too_many_arguments)]
fn compare_cmd(
    a: &Path,
    b: &Path,
    hypothesis: Option<&str>,
    change: Option<&str>,
    log: Option<&Path>,
    opts: CompareOptions,
    format: Option<TextFormat>,
    ctx: Ctx,
) -> Result<(), CliError> {
    // The two ledgers are read at once, one on another thread: reading is most of the work.
    // Only A's progress takes the terminal's line, so that the two do not overwrite each other.
    let (sa, sb) = std::thread::scope(|scope| {
        let other = std::thread::Builder::new()
            .name("gpu-ledger-read-b".into())
            .spawn_scoped(scope, || {
                let quiet = Ctx {
                    terminal: false,
                    ..ctx
                };
                compare_side(b, &opts, quiet)
            });
        let sa = compare_side(a, &opts, ctx);
        let sb = match other {
            Ok(h) => h
                .join()
                .unwrap_or_else(|_| Err(CliError::Other(format!("reading {} failed", display(b))))),
            // No thread to be had: read B after A.
            Err(_) => compare_side(b, &opts, ctx),
        };
        (sa, sb)
    });
    let ((ha, sa), (hb, sb)) = (sa?, sb?);
    let c = compare_streamed(&ha, sa, &hb, sb, &opts).map_err(|e| {
        CliError::Other(format!(
            "cannot compare {} with {}: {e}",
            display(a),
            display(b)
        ))
    })?;
    let text = match TextFormat::for_stdout(format) {
        TextFormat::Json => json_text(&comparison_json(
            &c,
            &display(a),
            &display(b),
            hypothesis,
            change,
        )),
        format => {
            let mut text = String::new();
            if let Some(h) = hypothesis {
                text.push_str(&format!("**Hypothesis:** {}\n\n", md_cell(h)));
            }
            if let Some(ch) = change {
                text.push_str(&format!("**Change:** {}\n\n", md_cell(ch)));
            }
            text.push_str(&markdown_comparison(&c, &display(a), &display(b)));
            format.markdown(text)
        }
    };
    print(&text)?;
    if let Some(dir) = log {
        let entry = ExperimentEntry::from_comparison(
            &c,
            hypothesis.unwrap_or_default(),
            change.unwrap_or_default(),
            &display(a),
            &display(b),
            &today_utc(),
        );
        let files = ExperimentLog::in_dir(dir);
        files.append(&entry).map_err(io_err(format!(
            "cannot append to the experiment log in {}",
            display(dir)
        )))?;
        eprintln!(
            "gpu-ledger: appended to {} and {} (verdict: {})",
            display(&files.markdown),
            display(&files.csv),
            entry.verdict
        );
    }
    Ok(())
}

/// `bytes` as `1 GiB`, `512 MiB` or `4096 bytes`.
fn size_text(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{:.0} MiB", b as f64 / f64::from(1 << 20)),
        b => format!("{b} bytes"),
    }
}

/// Bytes of JSON a trace stops at when no `--iterations` is given: trace viewers (Perfetto's UI,
/// chrome://tracing) fail to open JSON much past this, and a million rows make several GB.
const TRACE_BYTES: u64 = 1 << 30;

/// A trace takes one to two bytes of JSON per byte of ledger (more with activities): says so
/// before writing it when that may pass `limit`.
fn note_large_trace(path: &Path, limit: u64) {
    let Ok(m) = std::fs::metadata(path) else {
        return;
    };
    if m.is_file() && m.len() > limit / 2 {
        eprintln!(
            "gpu-ledger: note: {} is {:.0} MB: its trace may pass {} of JSON, which trace \
             viewers do not open; the trace stops there (give --iterations A..B for a window, \
             or --iterations .. for the whole trace)",
            display(path),
            m.len() as f64 / 1e6,
            size_text(limit)
        );
    }
}

fn trace(
    path: &Path,
    output: &Path,
    range: Option<IterationRange>,
    demangle: bool,
    max_bytes: u64,
    ctx: Ctx,
) -> Result<(), CliError> {
    output::refuse_input(output, &[path])?;
    let (mut stream, mut p) = open(path, ctx)?;
    let mut out = Output::create(output)?;
    let out_name = out.name().to_string();
    let opts = TraceOptions {
        iterations: range.unwrap_or_default(),
        demangle,
    };
    let limit = Some(max_bytes).filter(|&b| b > 0 && range.is_none());
    if let Some(limit) = limit {
        note_large_trace(path, limit);
    }
    let werr = || io_err(format!("cannot write {out_name}"));
    let header = stream.header().clone();
    let (mut counted, bytes) = progress::Counted::new(&mut out.writer);
    let mut w = TraceWriter::new(&mut counted, &header, opts.clone()).map_err(werr())?;
    let mut trailer = None;
    let (mut rows, mut cut_at) = (0u64, None);
    // Rows outside the range, or past the size bound, are passed over unparsed.
    while let Some(item) =
        stream.next_item_in(|i| cut_at.is_none() && opts.iterations.contains(i))?
    {
        match item {
            StreamItem::Row(_, row) => {
                rows += 1;
                p.tick(rows);
                w.write_row(&row).map_err(werr())?;
                if limit.is_some_and(|l| bytes.get() >= l) {
                    cut_at = Some(row.index);
                }
            }
            StreamItem::Trailer(_, t) => trailer = Some(t),
        }
    }
    let passed = stream.skipped_rows();
    p.done(rows + passed);
    warn_truncated(path, stream.truncated_last_line());
    if let Some(at) = cut_at {
        w.set_metadata(
            "stopped_at_iteration",
            serde_json::json!({"iteration": at, "bytes": max_bytes, "iterations_left_out": passed}),
        );
    } else {
        w.add_skipped(passed);
    }
    let stats = w.finish(trailer.as_deref()).map_err(werr())?;
    out.commit()?;
    eprintln!(
        "gpu-ledger: {} trace events ({} iterations, {} activities{}) written to {}",
        stats.events,
        stats.iterations,
        stats.activities,
        if stats.skipped > 0 {
            format!(", {} iterations outside {}", stats.skipped, opts.iterations)
        } else {
            String::new()
        },
        out_name
    );
    if let Some(at) = cut_at.filter(|_| passed > 0) {
        eprintln!(
            "gpu-ledger: the trace stopped after iteration {at} at {} of JSON, which trace \
             viewers do not open: {passed} later iterations are not in it (give --iterations \
             A..B for another window, or --iterations .. for the whole trace)",
            size_text(max_bytes)
        );
    }
    if stats.summary_iterations > 0 {
        eprintln!(
            "gpu-ledger: activities were not recorded in {} iterations: the trace shows \
             per-iteration summaries there (record them with Config::record_activities)",
            stats.summary_iterations
        );
    }
    if stats.iterations > 10_000 && opts.iterations.is_all() && cut_at.is_none() {
        eprintln!(
            "gpu-ledger: hint: a trace of {} iterations is slow to open; pick a window with \
             --iterations A..B",
            stats.iterations
        );
    }
    Ok(())
}

fn report(
    path: &Path,
    output: &Path,
    title: Option<String>,
    stats: &StatsArgs,
    ctx: Ctx,
) -> Result<(), CliError> {
    let opts = ReportOptions {
        title,
        summary: stats.summary(),
        ..ReportOptions::default()
    };
    let make = |held: Option<usize>| match held {
        Some(rows) => ReportBuilder::for_rows(&opts, rows),
        None => ReportBuilder::new(&opts),
    };
    output::refuse_input(output, &[path])?;
    let read = read_bounded(path, ctx, make, |b, r| b.push(r))?;
    let mut out = Output::create(output)?;
    let out_name = out.name().to_string();
    let werr = io_err(format!("cannot write {out_name}"));
    read.builder
        .finish(
            &read.header,
            read.trailer.as_ref(),
            &display(path),
            &mut out.writer,
        )
        .map_err(werr)?;
    out.commit()?;
    eprintln!("gpu-ledger: report written to {out_name}");
    Ok(())
}

/// Checks one ledger; `Ok(report)` when valid.
fn check_one(path: &Path, ctx: Ctx) -> Result<String, gpu_ledger_format::Error> {
    let (mut stream, mut p) = open(path, ctx)?;
    let report = check_ledger(&mut stream, |rows| p.tick(rows))?;
    p.done(report.rows);
    Ok(report.text(path))
}

fn check(paths: &[PathBuf], ctx: Ctx) -> Result<(), CliError> {
    let mut failed = false;
    for p in paths {
        match check_one(p, ctx) {
            Ok(text) => print(&text)?,
            Err(e) => {
                failed = true;
                eprintln!("{e}");
            }
        }
    }
    if failed {
        Err(CliError::Reported)
    } else {
        Ok(())
    }
}

/// Prints the completion script of `shell`.
fn completions(shell: clap_complete::Shell) -> Result<(), CliError> {
    let mut text = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "gpu-ledger", &mut text);
    print(&String::from_utf8_lossy(&text))
}

fn run(cli: Cli) -> Result<(), CliError> {
    interrupt::install();
    let progress = Ctx {
        progress: cli.progress,
        terminal: true,
        hold_bytes: cli.hold_bytes,
        start: Instant::now(),
    };
    match cli.command {
        Command::Summary {
            ledger,
            format,
            stats,
        } => summary(&ledger, &stats, format, progress),
        Command::Compare {
            a,
            b,
            hypothesis,
            change,
            experiment_log,
            metric,
            resamples,
            confidence,
            seed,
            format,
            stats,
        } => compare_cmd(
            &a,
            &b,
            hypothesis.as_deref(),
            change.as_deref(),
            experiment_log.as_deref(),
            stats.compare(metric, resamples, confidence, seed),
            format,
            progress,
        ),
        Command::Trace {
            ledgers,
            output,
            iterations,
            no_demangle,
            max_bytes,
        } => match ledgers.as_slice() {
            [ledger] => trace(
                ledger,
                &output,
                iterations,
                !no_demangle,
                max_bytes,
                progress,
            ),
            _ => {
                let opts = TraceOptions {
                    iterations: iterations.unwrap_or_default(),
                    demangle: !no_demangle,
                };
                trace_ranks::trace_ranks(&ledgers, &output, opts, progress)
            }
        },
        Command::Report {
            ledger,
            output,
            title,
            stats,
        } => report(&ledger, &output, title, &stats, progress),
        Command::Csv {
            ledger,
            output,
            long,
        } => csv::csv(&ledger, &output, long, progress),
        Command::Metrics {
            ledger,
            output,
            format,
            scopes,
        } => metrics::metrics(&ledger, &output, format, &scopes, progress),
        Command::Check { ledgers } => check(&ledgers, progress),
        Command::Merge { ledgers, format } => merge::merge(&ledgers, format, progress),
        Command::Parquet {
            ledgers,
            output,
            run,
            overwrite,
            threads,
        } => parquet::parquet(&ledgers, &output, run, overwrite, threads),
        Command::Completions { shell } => completions(shell),
        #[cfg(not(feature = "sql"))]
        Command::Sql { .. } => Err(CliError::Other(SQL_NOT_BUILT.into())),
        #[cfg(feature = "sql")]
        Command::Sql {
            dataset,
            query,
            format,
        } => sql::sql(&dataset, &query, format),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // Help and version go to stdout with status 0; usage errors to stderr with 2.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Reported) => ExitCode::FAILURE,
        // The reader of stdout went away (`| head`): nothing left to tell it.
        Err(CliError::Io { source, .. }) if source.kind() == io::ErrorKind::BrokenPipe => {
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("gpu-ledger: error: {e}");
            ExitCode::FAILURE
        }
    }
}
