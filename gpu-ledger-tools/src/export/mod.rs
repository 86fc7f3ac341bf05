//! Exports of a ledger: Chrome/Perfetto trace JSON, CSV of the per-iteration table, a
//! self-contained HTML report with SVG charts, a Markdown summary, the merged view of the
//! ledgers of several ranks, and the experiment log of A/B comparisons. Exports read ledgers and
//! the results of [`crate::analysis`]; analysis never depends on them. The `gpu-ledger` command
//! line tool is a thin layer over this module.
//!
//! - [`trace`]: the Trace Event Format JSON that ui.perfetto.dev and `chrome://tracing` open,
//!   written as a stream ([`TraceWriter`]);
//! - [`mod@csv`]: one CSV line per iteration row ([`CsvLayout`]);
//! - [`csv_long`]: one CSV line per iteration and scope, the same columns for every ledger
//!   ([`LongCsv`]);
//! - [`summary`]: the figures the Markdown summary and the HTML report share ([`LedgerSummary`]),
//!   built row by row by the one summary engine ([`SummaryBuilder`]), in bounded memory for a
//!   stream and exact for a ledger in memory;
//! - [`markdown`]: the summary and the A/B comparison as Markdown, for pasting into an issue
//!   (`idle_view.rs`: its section on idle time by cause);
//! - [`html`] and [`svg`]: the report and its charts (inline CSS and SVG, no script, no network),
//!   built row by row ([`ReportBuilder`]);
//! - [`stalls`]: warp stall reasons and hot source lines of the PC-sampled iterations, gathered
//!   row by row for the summary and the report ([`StallAccumulator`]);
//! - [`stall_profile`]: PC sampling summed over a run's windows per kernel and per scope, and a
//!   duty cycle's cost, from the trailer, for the summary;
//! - [`merge`]: ledgers of several ranks aligned by iteration, with the slowest rank of each;
//! - [`experiment`]: the experiment log, one Markdown and one CSV row per A/B comparison;
//! - `parquet` (feature `parquet`): ledgers as a Hive-partitioned Parquet dataset for query
//!   engines.
//!
//! ```
//! use gpu_ledger_tools::export::{markdown_summary, LedgerSummary, SummaryOptions};
//! use gpu_ledger_format::reader::parse_ledger;
//!
//! # let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"),
//! #     "/../tests/data/v1-nested-scopes.jsonl")).unwrap();
//! let ledger = parse_ledger(text.as_bytes(), "run.jsonl".as_ref())?;
//! let summary = LedgerSummary::compute(&ledger, &SummaryOptions::default());
//! let md = markdown_summary(&summary, "run.jsonl");
//! assert!(md.contains("| scope |"));
//! # Ok::<(), gpu_ledger_format::Error>(())
//! ```

#![forbid(unsafe_code)]

pub mod aligned;
mod csp;
pub mod csv;
pub mod csv_long;
pub mod experiment;
pub mod html;
mod idle_view;
mod lanes;
pub mod markdown;
pub mod merge;
#[cfg(feature = "parquet")]
pub mod parquet;
pub mod stall_profile;
pub mod stalls;
mod stalls_view;
pub mod summary;
pub mod svg;
pub mod text;
pub mod trace;

pub use self::csv::{write_csv, CsvCells, CsvLayout};
pub use csv_long::{LongCsv, LONG_COLUMNS};
pub use experiment::{ExperimentEntry, ExperimentLog};
pub use gpu_ledger_format::stream::{LedgerStream, StreamItem};
pub use html::{write_html_report, ReportBuilder, ReportOptions};
pub use markdown::{markdown_comparison, markdown_summary};
pub use merge::{merge_ranks, MergeError, MergeStream, MergedIteration, MergedView, RankSeries};
pub use stalls::{StallAccumulator, StallSummary};
pub use summary::{
    DeviceSummary, LedgerSummary, NvmlDeviceSummary, SummaryBuilder, SummaryOptions,
};
pub use svg::{roofline_svg, Roofline, RooflinePoint};
pub use trace::{
    write_trace, IterationRange, RangeParseError, TraceOptions, TraceStats, TraceWriter,
};
