//! The experiment log: one row per A/B comparison, appended to a Markdown file and a CSV file, so
//! that every hypothesis tried is written down with its one change and its measured outcome,
//! including the ones that did not work.
//!
//! Each row holds the date, the hypothesis, the one change, the counters that moved (empty until
//! the ledgers carry counters), the kernel time of A and B (mean kernel time per iteration, all
//! devices), the end-to-end time of A and B (median of the compared metric, host wall time by
//! default) with the speed-up and its confidence interval, and the verdict taken from the
//! interval ([`Verdict`]). The files are created with their header the first time.
//!
//! ```
//! use gpu_ledger_tools::analysis::compare::Verdict;
//! use gpu_ledger_tools::export::experiment::{ExperimentEntry, ExperimentLog};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let log = ExperimentLog::in_dir(dir.path());
//! let entry = ExperimentEntry {
//!     date: "2025-11-24".into(),
//!     hypothesis: "the GEMM is tail-wave limited".into(),
//!     change: "tile 128x128 -> 128x64".into(),
//!     counters_moved: Vec::new(),
//!     kernel_ns_a: 12e6,
//!     kernel_ns_b: 6e6,
//!     e2e_ns_a: 17e6,
//!     e2e_ns_b: 11e6,
//!     speedup: 1.545,
//!     ci_low: 1.52,
//!     ci_high: 1.57,
//!     confidence: 0.95,
//!     verdict: Verdict::Faster,
//!     ledger_a: "a.jsonl".into(),
//!     ledger_b: "b.jsonl".into(),
//!     warnings: 0,
//! };
//! log.append(&entry)?;
//! let md = std::fs::read_to_string(&log.markdown)?;
//! assert!(md.contains("| 2025-11-24 | the GEMM is tail-wave limited |"));
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::text::{csv_text, fmt_confidence, md_cell};
use crate::analysis::compare::{Comparison, Verdict};

/// File name of the Markdown experiment ledger inside its directory.
pub const MARKDOWN_FILE: &str = "experiments.md";
/// File name of the CSV experiment ledger inside its directory.
pub const CSV_FILE: &str = "experiments.csv";

/// Columns of the CSV file.
pub const CSV_COLUMNS: [&str; 16] = [
    "date",
    "hypothesis",
    "change",
    "counters_moved",
    "kernel_ns_a",
    "kernel_ns_b",
    "e2e_ns_a",
    "e2e_ns_b",
    "speedup",
    "ci_low",
    "ci_high",
    "confidence",
    "verdict",
    "ledger_a",
    "ledger_b",
    "warnings",
];

/// One row of the experiment ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentEntry {
    /// Date of the comparison, `YYYY-MM-DD` (UTC).
    pub date: String,
    /// What was expected and why.
    pub hypothesis: String,
    /// The one change between A and B.
    pub change: String,
    /// Hardware counters that moved between A and B (empty until the ledgers carry counters).
    pub counters_moved: Vec<String>,
    /// Mean kernel time per iteration of A (all families, all devices), ns.
    pub kernel_ns_a: f64,
    /// Mean kernel time per iteration of B, ns.
    pub kernel_ns_b: f64,
    /// Median of the compared metric in A (host wall time by default), ns.
    pub e2e_ns_a: f64,
    /// Median of the compared metric in B, ns.
    pub e2e_ns_b: f64,
    /// `median(A) / median(B)`.
    pub speedup: f64,
    /// Lower end of its interval.
    pub ci_low: f64,
    /// Upper end of its interval.
    pub ci_high: f64,
    /// Confidence of the interval.
    pub confidence: f64,
    /// From the interval.
    pub verdict: Verdict,
    /// Ledger A (baseline), as given.
    pub ledger_a: String,
    /// Ledger B (the change), as given.
    pub ledger_b: String,
    /// Number of comparability warnings the comparison gave.
    pub warnings: usize,
}

impl ExperimentEntry {
    /// The entry of a comparison, dated `date` (see [`today_utc`]).
    pub fn from_comparison(
        c: &Comparison,
        hypothesis: &str,
        change: &str,
        ledger_a: &str,
        ledger_b: &str,
        date: &str,
    ) -> Self {
        let kernel = |b: bool| -> f64 {
            c.families
                .iter()
                .filter_map(|f| if b { f.b.as_ref() } else { f.a.as_ref() })
                .map(|s| s.total_ns_mean_per_iteration)
                .sum()
        };
        Self {
            date: date.to_string(),
            hypothesis: hypothesis.to_string(),
            change: change.to_string(),
            counters_moved: Vec::new(),
            kernel_ns_a: kernel(false),
            kernel_ns_b: kernel(true),
            e2e_ns_a: c.a.distribution.median,
            e2e_ns_b: c.b.distribution.median,
            speedup: c.speedup.speedup,
            ci_low: c.speedup.ci_low,
            ci_high: c.speedup.ci_high,
            confidence: c.speedup.confidence,
            verdict: c.verdict(),
            ledger_a: ledger_a.to_string(),
            ledger_b: ledger_b.to_string(),
            warnings: c.warnings.len(),
        }
    }

    /// The Markdown table row (no trailing newline).
    fn markdown_row(&self) -> String {
        let counters = if self.counters_moved.is_empty() {
            "—".to_string()
        } else {
            self.counters_moved.join(", ")
        };
        let cells = [
            self.date.clone(),
            self.hypothesis.clone(),
            self.change.clone(),
            counters,
            format!("{} → {}", ms(self.kernel_ns_a), ms(self.kernel_ns_b)),
            format!("{} → {}", ms(self.e2e_ns_a), ms(self.e2e_ns_b)),
            if self.verdict == Verdict::NotComparable {
                "—".to_string()
            } else {
                format!(
                    "{:.3}× ({}% CI {:.3}–{:.3})",
                    self.speedup,
                    fmt_confidence(self.confidence),
                    self.ci_low,
                    self.ci_high
                )
            },
            format!(
                "{}{}",
                self.verdict.as_str(),
                if self.warnings > 0 {
                    format!(" ({} warnings)", self.warnings)
                } else {
                    String::new()
                }
            ),
            format!("{} vs {}", self.ledger_a, self.ledger_b),
        ];
        let cells: Vec<String> = cells.iter().map(|c| md_cell(c)).collect();
        format!("| {} |", cells.join(" | "))
    }

    /// The CSV line (no trailing newline), columns as [`CSV_COLUMNS`].
    fn csv_row(&self) -> String {
        // A pair that is not comparable has no speed-up: empty cells, so that a script reading
        // the column cannot take the figure for one.
        let figure = |v: f64| {
            if self.verdict == Verdict::NotComparable {
                String::new()
            } else {
                format!("{v:.6}")
            }
        };
        // Text a user or a ledger wrote is guarded against formulas; numbers are not.
        let cells = [
            csv_text(&self.date),
            csv_text(&self.hypothesis),
            csv_text(&self.change),
            csv_text(&self.counters_moved.join(";")),
            format!("{:.0}", self.kernel_ns_a),
            format!("{:.0}", self.kernel_ns_b),
            format!("{:.0}", self.e2e_ns_a),
            format!("{:.0}", self.e2e_ns_b),
            figure(self.speedup),
            figure(self.ci_low),
            figure(self.ci_high),
            format!("{}", self.confidence),
            csv_text(self.verdict.as_str()),
            csv_text(&self.ledger_a),
            csv_text(&self.ledger_b),
            self.warnings.to_string(),
        ];
        cells.join(",")
    }
}

fn ms(ns: f64) -> String {
    if ns.is_finite() {
        format!("{:.3} ms", ns / 1e6)
    } else {
        "n/a".into()
    }
}

/// The two files of an experiment ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExperimentLog {
    /// The Markdown file.
    pub markdown: PathBuf,
    /// The CSV file.
    pub csv: PathBuf,
}

impl ExperimentLog {
    /// `dir/experiments.md` and `dir/experiments.csv`.
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            markdown: dir.join(MARKDOWN_FILE),
            csv: dir.join(CSV_FILE),
        }
    }

    /// Appends `entry` to both files, creating each (and its directory) with its header first
    /// when it does not exist or is empty.
    ///
    /// # Errors
    /// Any I/O error creating or writing the files.
    pub fn append(&self, entry: &ExperimentEntry) -> io::Result<()> {
        let md_header = "# Experiment ledger\n\n\
            One row per A/B comparison (`gpu-ledger compare --experiment-log`). Speed-up = \
            median(A) / median(B) of the end-to-end metric with its bootstrap interval; the \
            verdict comes from the interval.\n\n\
            | date | hypothesis | change | counters moved | kernel time A → B | end-to-end A → B | \
            speed-up A/B (CI) | verdict | ledgers |\n\
            |---|---|---|---|---:|---:|---:|---|---|\n";
        append_line(&self.markdown, md_header, &entry.markdown_row())?;
        let csv_header = format!("{}\n", CSV_COLUMNS.join(","));
        append_line(&self.csv, &csv_header, &entry.csv_row())
    }
}

/// Appends `line` and a newline to `path`, writing `header` first when the file is new or empty,
/// and a newline first when the file does not end with one.
fn append_line(path: &Path, header: &str, line: &str) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut f: File = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)?;
    let len = f.metadata()?.len();
    let mut text = String::new();
    if len == 0 {
        text.push_str(header);
    } else {
        f.seek(SeekFrom::Start(len - 1))?;
        let mut last = [0u8; 1];
        f.read_exact(&mut last)?;
        if last[0] != b'\n' {
            text.push('\n');
        }
    }
    text.push_str(line);
    text.push('\n');
    // One write call, so that concurrent appenders do not interleave inside a line.
    f.write_all(text.as_bytes())?;
    f.flush()
}

/// Today's date, `YYYY-MM-DD` in UTC.
pub fn today_utc() -> String {
    // A clock before 1970 is a broken machine; the epoch's date is as good as any there.
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_date(secs)
}

/// The UTC date `YYYY-MM-DD` of `unix_secs` seconds since the Unix epoch (Howard Hinnant's
/// `civil_from_days`).
fn utc_date(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(1_764_000_000), "2025-11-24");
        assert_eq!(today_utc().len(), 10);
    }

    #[test]
    fn append_adds_missing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.csv");
        std::fs::write(&p, "h\nrow1").unwrap();
        append_line(&p, "h\n", "row2").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "h\nrow1\nrow2\n");
        let q = dir.path().join("sub/new.csv");
        append_line(&q, "h\n", "r").unwrap();
        assert_eq!(std::fs::read_to_string(&q).unwrap(), "h\nr\n");
    }
}
