//! What `gpu-ledger check` tells of a ledger that reads: its shape and what a reader should know
//! (no trailer, a cut last line, rows that the trailer does not count), as a library function.

use std::io::BufRead;
use std::path::Path;

use crate::error::Result;
use crate::schema::Header;
use crate::stream::{LedgerStream, StreamItem};

/// A ledger that read without error, and what is worth noting about it.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckReport {
    /// The header line.
    pub header: Header,
    /// Iteration rows read.
    pub rows: u64,
    /// Index of the first and last row, when there are rows.
    pub indices: Option<(u64, u64)>,
    /// Whether the trailer is present.
    pub trailer: bool,
    /// Notes, in the order they were found.
    pub notes: Vec<CheckNote>,
}

/// Something a valid ledger's reader should know.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckNote {
    /// The trailer counts another number of iterations than the file holds rows.
    TrailerCount {
        /// The trailer's line.
        line: usize,
        /// Iterations the trailer counts.
        trailer: u64,
        /// Rows the file holds.
        rows: u64,
    },
    /// The last line was cut while being written (the run was killed); it was left out.
    TruncatedLastLine {
        /// Its 1-based line number.
        line: usize,
    },
    /// No trailer: the run did not finish (its rows are valid).
    NoTrailer,
    /// The header says activities were recorded, but these many rows carry none.
    RowsWithoutActivities(u64),
}

/// The warning for a last line cut while being written (`line` is 1-based), as every command
/// of the command line prints it.
pub fn truncation_warning(path: &Path, line: usize) -> String {
    format!(
        "{}: warning: line {line}: truncated (the run was killed while writing it); the {} lines \
         before it are valid",
        path.display(),
        line.saturating_sub(1)
    )
}

impl CheckNote {
    /// The note as one line, naming `path`.
    pub fn text(&self, path: &Path) -> String {
        let p = path.display();
        match self {
            CheckNote::TrailerCount {
                line,
                trailer,
                rows,
            } => format!(
                "{p}:{line}: note: the trailer counts {trailer} iterations, the file holds {rows} rows"
            ),
            CheckNote::TruncatedLastLine { line } => truncation_warning(path, *line),
            CheckNote::NoTrailer => {
                format!("{p}: note: no trailer: the run did not finish (its rows are valid)")
            }
            CheckNote::RowsWithoutActivities(n) => {
                format!("{p}: note: activities were recorded but {n} rows carry none")
            }
        }
    }
}

impl CheckReport {
    /// The report as `gpu-ledger check` prints it: one line saying the ledger is valid, then
    /// one line per note.
    pub fn text(&self, path: &Path) -> String {
        let span = match self.indices {
            Some((a, b)) => format!(" (indices {a}..={b})"),
            None => String::new(),
        };
        let mut out = format!(
            "{}: valid: schema {}, level {}, {} iterations{span}, {}\n",
            path.display(),
            self.header.schema_version,
            self.header.config.level,
            self.rows,
            if self.trailer {
                "trailer present"
            } else {
                "no trailer"
            }
        );
        for n in &self.notes {
            out.push_str(&n.text(path));
            out.push('\n');
        }
        out
    }
}

/// Reads every line of `stream` with the reader's validation and reports what it found;
/// `on_row` is called with the count of rows read so far after each row (for progress).
///
/// # Errors
/// The first invalid line, as [`crate::read_ledger`] reports it.
pub fn check_ledger<R: BufRead>(
    stream: &mut LedgerStream<R>,
    mut on_row: impl FnMut(u64),
) -> Result<CheckReport> {
    let header = stream.header().clone();
    let mut rows = 0u64;
    let mut trailer = false;
    let mut indices: Option<(u64, u64)> = None;
    let mut notes = Vec::new();
    let mut without_activities = 0u64;
    while let Some(item) = stream.next_item()? {
        match item {
            StreamItem::Row(_, row) => {
                rows += 1;
                on_row(rows);
                indices = Some((indices.map_or(row.index, |(a, _)| a), row.index));
                if header.config.record_activities && row.activities.is_none() {
                    without_activities += 1;
                }
            }
            StreamItem::Trailer(line, t) => {
                if t.iterations != rows {
                    notes.push(CheckNote::TrailerCount {
                        line,
                        trailer: t.iterations,
                        rows,
                    });
                }
                trailer = true;
            }
        }
    }
    if let Some(line) = stream.truncated_last_line() {
        notes.push(CheckNote::TruncatedLastLine { line });
    }
    if !trailer {
        notes.push(CheckNote::NoTrailer);
    }
    if without_activities > 0 {
        notes.push(CheckNote::RowsWithoutActivities(without_activities));
    }
    Ok(CheckReport {
        header,
        rows,
        indices,
        trailer,
        notes,
    })
}
