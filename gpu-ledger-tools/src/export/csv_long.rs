//! The long table as CSV: one line per iteration and scope, in ledger order, with the same
//! columns for every ledger, so that the tables of several runs stack (`tail -n +2` each after
//! the first) and load into a data frame without reshaping. The wide table
//! ([`super::csv`]) has one line per iteration and columns that depend on the ledger.
//!
//! # Columns
//! | column | meaning |
//! |---|---|
//! | `ledger` | the ledger's name as given, telling stacked runs apart |
//! | `rank` | the process's global rank; empty when not launched as one |
//! | `index` | iteration index |
//! | `complete` | `true` unless the row was written before its GPU records all arrived or at shutdown |
//! | `perturbed` | `true` when hardware counters replayed kernels in it |
//! | `untraced` | `true` when a sampled timeline left the iteration out |
//! | `scope` | scope path (`step/forward`); empty on the iteration's own line |
//! | `calls` | times the scope was entered in the iteration; empty on the iteration's line |
//! | `host_ns` | host wall time inside the scope (children included); the iteration's wall time on its line, ns |
//! | `device_ns` | union of the GPU intervals launched directly in the scope, ns |
//! | `device_ns_inclusive` | the same with the scopes below it, ns |
//! | `event_device_ns` | GPU time between the scope's events on a stream (`Profiler::scope_on`), ns |
//! | `launches` | kernel, memcpy and memset launches made directly in the scope |
//! | `kernels` | kernel launches among them; on the iteration's line, all its kernel launches |
//!
//! A cell is empty where the figure was not measured, never 0: device times at the scopes level
//! (no GPU activity is traced) and in untraced iterations, an event time without a stream.

use std::io::{self, Write};

use super::text::csv_text;
use gpu_ledger_format::schema::{Header, IterationRow};

/// The columns of the long table, in order.
pub const LONG_COLUMNS: [&str; 14] = [
    "ledger",
    "rank",
    "index",
    "complete",
    "perturbed",
    "untraced",
    "scope",
    "calls",
    "host_ns",
    "device_ns",
    "device_ns_inclusive",
    "event_device_ns",
    "launches",
    "kernels",
];

/// Writes the long table of one ledger, row by row.
#[derive(Debug, Clone)]
pub struct LongCsv {
    ledger: String,
    rank: String,
    device_traced: bool,
}

impl LongCsv {
    /// The table of the ledger `header` heads, named `ledger` in its first column.
    pub fn new(header: &Header, ledger: &str) -> Self {
        Self {
            ledger: csv_text(ledger),
            rank: header
                .rank
                .as_ref()
                .map(|r| r.rank.to_string())
                .unwrap_or_default(),
            device_traced: header.config.level != "scopes",
        }
    }

    /// Writes the header line.
    ///
    /// # Errors
    /// Any error of `out`.
    pub fn write_header(&self, out: &mut impl Write) -> io::Result<()> {
        writeln!(out, "{}", LONG_COLUMNS.join(","))
    }

    /// Writes the iteration's line and one line per scope of `row`; returns the lines written.
    ///
    /// # Errors
    /// Any error of `out`.
    pub fn write_row(&self, out: &mut impl Write, row: &IterationRow) -> io::Result<usize> {
        let measured = self.device_traced && !row.untraced;
        let lead = format!(
            "{},{},{},{},{},{}",
            self.ledger, self.rank, row.index, row.complete, row.perturbed, row.untraced
        );
        let kernels = row
            .kernels
            .iter()
            .map(|k| k.count)
            .fold(0, u64::saturating_add);
        writeln!(out, "{lead},,,{},,,,,{kernels}", row.host_wall_ns)?;
        let device = |ns: u64| {
            if measured {
                ns.to_string()
            } else {
                String::new()
            }
        };
        for s in &row.scopes {
            writeln!(
                out,
                "{lead},{},{},{},{},{},{},{},{}",
                csv_text(&s.path),
                s.calls,
                s.host_ns,
                device(s.device_ns),
                device(s.device_ns_inclusive),
                s.event_device_ns.map(|n| n.to_string()).unwrap_or_default(),
                s.launches,
                s.kernels
            )?;
        }
        Ok(1 + row.scopes.len())
    }
}
