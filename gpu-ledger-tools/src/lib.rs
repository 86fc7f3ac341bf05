//! From gpu-ledger ledgers to the decisions of the profiling funnel, on any machine: no GPU, no
//! CUDA library, no profiler. [`analysis`] holds pure functions of ledger rows (distributions,
//! warm-up, kernel families, occupancy, A/B comparison, all over a stream of rows in bounded
//! memory); [`export`] turns ledgers and those results into traces, reports, tables and
//! datasets. The `gpu-ledger` command line is a thin layer over both.
//!
//! ```
//! use gpu_ledger_tools::export::{markdown_summary, LedgerSummary, SummaryOptions};
//!
//! # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/v1-nested-scopes.jsonl");
//! let ledger = gpu_ledger_format::read_ledger(path.as_ref())?;
//! let summary = LedgerSummary::compute(&ledger, &SummaryOptions::default());
//! assert!(markdown_summary(&summary, "run.jsonl").contains("| scope |"));
//! # Ok::<(), gpu_ledger_format::Error>(())
//! ```

#![forbid(unsafe_code)]

pub mod analysis;
pub mod export;
