//! Reads a ledger back, validating the schema version and reporting the line of any bad line.

use std::io::BufRead;
use std::path::Path;

use super::schema::{Header, IterationRow, LedgerLine, Trailer, SCHEMA_VERSION};
use crate::error::{Error, Result};

/// A ledger read from disk.
#[derive(Debug, Clone, PartialEq)]
pub struct Ledger {
    /// The header line.
    pub header: Header,
    /// Iteration rows in file order.
    pub iterations: Vec<IterationRow>,
    /// The trailer; `None` when the run did not finish (crash, kill): the rows before are valid.
    pub trailer: Option<Trailer>,
}

/// Reads and validates a ledger file.
///
/// # Errors
/// [`Error::LedgerRead`] with the 1-based line number: unreadable file, empty file, a line that is
/// not valid JSON of a known line type, a first line that is not a header, a schema version other
/// than [`SCHEMA_VERSION`], a second header, or lines after the trailer.
pub fn read_ledger(path: &Path) -> Result<Ledger> {
    let file = std::fs::File::open(path).map_err(|e| Error::LedgerRead {
        path: path.to_path_buf(),
        line: 0,
        message: format!("cannot open: {e}"),
    })?;
    parse_ledger(std::io::BufReader::new(file), path)
}

/// Parses a ledger from any reader; `path` is only used in error messages.
///
/// # Errors
/// As [`read_ledger`].
pub fn parse_ledger(input: impl BufRead, path: &Path) -> Result<Ledger> {
    let err = |line: usize, message: String| Error::LedgerRead {
        path: path.to_path_buf(),
        line,
        message,
    };
    let mut header: Option<Header> = None;
    let mut iterations = Vec::new();
    let mut trailer = None;
    for (i, line) in input.lines().enumerate() {
        let n = i + 1;
        let line = line.map_err(|e| err(n, format!("cannot read: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        if trailer.is_some() {
            return Err(err(
                n,
                "unexpected line after the trailer (the trailer must be last)".into(),
            ));
        }
        if header.is_none() {
            check_version(&line).map_err(|m| err(n, m))?;
        }
        let parsed: LedgerLine = serde_json::from_str(&line).map_err(|e| {
            let what = if e.is_eof() { "truncated line (the run may have been killed while writing it)" } else { "invalid ledger line" };
            err(n, format!("{what}: {e}; expected a JSON object with \"type\" header, iteration or trailer"))
        })?;
        match (parsed, header.is_some()) {
            (LedgerLine::Header(h), false) => header = Some(h),
            (LedgerLine::Header(_), true) => return Err(err(n, "a second header line".into())),
            (_, false) => return Err(err(n, "the first line must be the header".into())),
            (LedgerLine::Iteration(row), true) => iterations.push(row),
            (LedgerLine::Trailer(t), true) => trailer = Some(t),
        }
    }
    let header = header.ok_or_else(|| err(1, "empty ledger: no header line".into()))?;
    Ok(Ledger {
        header,
        iterations,
        trailer,
    })
}

/// Checks the header's schema version before parsing the whole line, so that a ledger from a
/// newer gpu-ledger gets a version error rather than a confusing field error.
fn check_version(line: &str) -> std::result::Result<(), String> {
    let value: serde_json::Value = serde_json::from_str(line)
        .map_err(|e| format!("the first line is not JSON ({e}); is this a gpu-ledger file?"))?;
    if value.get("type").and_then(|t| t.as_str()) != Some("header") {
        return Err("the first line must be the header (\"type\":\"header\")".into());
    }
    match value.get("schema_version").and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(SCHEMA_VERSION) => Ok(()),
        Some(v) if v > u64::from(SCHEMA_VERSION) => Err(format!(
            "schema version {v} is newer than this gpu-ledger reads ({SCHEMA_VERSION}); upgrade gpu-ledger"
        )),
        Some(v) => Err(format!("schema version {v} is not supported (this gpu-ledger reads {SCHEMA_VERSION})")),
        None => Err("the header has no schema_version".into()),
    }
}
