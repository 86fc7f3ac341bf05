//! A ledger read one line at a time, so that exports of a large ledger (a trace, a CSV, a check)
//! keep one row in memory rather than all of them.
//!
//! The header is validated by [`parse_ledger`] itself (schema version first, then the fields),
//! and every later line is checked by the same rules, with the same messages, as
//! [`crate::ledger::read_ledger`]: a line that is not a ledger line, a second header, a line after
//! the trailer. Errors are [`Error::LedgerRead`] with the 1-based line number. A test keeps the two
//! readers in agreement on every golden ledger.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::ledger::reader::{parse_ledger, Ledger};
use crate::ledger::schema::{Header, IterationRow, LedgerLine, Trailer};

/// One line after the header.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// An iteration row and its line number.
    Row(usize, Box<IterationRow>),
    /// The trailer and its line number.
    Trailer(usize, Box<Trailer>),
}

/// A validating line-by-line ledger reader. Iterate it for the lines after the header.
#[derive(Debug)]
pub struct LedgerStream<R> {
    lines: std::io::Lines<R>,
    path: PathBuf,
    line: usize,
    header: Header,
    header_line: usize,
    trailer_seen: bool,
    failed: bool,
}

impl LedgerStream<BufReader<File>> {
    /// Opens `path` and reads its header.
    ///
    /// # Errors
    /// [`Error::LedgerRead`]: the file cannot be opened (line 0), or its header is missing or
    /// invalid (with its line).
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::LedgerRead {
            path: path.to_path_buf(),
            line: 0,
            message: format!("cannot open: {e}"),
        })?;
        Self::new(BufReader::new(file), path)
    }
}

impl<R: BufRead> LedgerStream<R> {
    /// Reads the header from `input`; `path` is only used in error messages.
    ///
    /// # Errors
    /// As [`LedgerStream::open`].
    pub fn new(input: R, path: &Path) -> Result<Self> {
        let mut lines = input.lines();
        let mut n = 0usize;
        loop {
            n += 1;
            let line = match lines.next() {
                None => {
                    return Err(Error::LedgerRead {
                        path: path.to_path_buf(),
                        line: 1,
                        message: "empty ledger: no header line".into(),
                    })
                }
                Some(l) => l.map_err(|e| Error::LedgerRead {
                    path: path.to_path_buf(),
                    line: n,
                    message: format!("cannot read: {e}"),
                })?,
            };
            if line.trim().is_empty() {
                continue;
            }
            // The header alone is a valid ledger: let the reader validate it, then move its
            // error (reported at line 1) to the real line.
            let ledger = parse_ledger(line.as_bytes(), path).map_err(|e| match e {
                Error::LedgerRead { path, message, .. } => Error::LedgerRead {
                    path,
                    line: n,
                    message,
                },
                other => other,
            })?;
            if ledger.trailer.is_some() || !ledger.iterations.is_empty() {
                return Err(Error::LedgerRead {
                    path: path.to_path_buf(),
                    line: n,
                    message: "the first line must be the header".into(),
                });
            }
            return Ok(Self {
                lines,
                path: path.to_path_buf(),
                line: n,
                header: ledger.header,
                header_line: n,
                trailer_seen: false,
                failed: false,
            });
        }
    }

    /// The header line.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Line number of the header (1 unless blank lines precede it).
    pub fn header_line(&self) -> usize {
        self.header_line
    }

    /// The last line number read.
    pub fn line(&self) -> usize {
        self.line
    }

    /// The path given for error messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, message: String) -> Error {
        Error::LedgerRead {
            path: self.path.clone(),
            line: self.line,
            message,
        }
    }

    /// The next line after the header; `Ok(None)` at the end of the input.
    ///
    /// # Errors
    /// [`Error::LedgerRead`] with the line number, as [`crate::ledger::read_ledger`]. After an
    /// error the stream ends.
    pub fn next_item(&mut self) -> Result<Option<StreamItem>> {
        if self.failed {
            return Ok(None);
        }
        let out = self.next_inner();
        if out.is_err() {
            self.failed = true;
        }
        out
    }

    fn next_inner(&mut self) -> Result<Option<StreamItem>> {
        loop {
            let Some(line) = self.lines.next() else {
                return Ok(None);
            };
            self.line += 1;
            let line = line.map_err(|e| self.err(format!("cannot read: {e}")))?;
            if line.trim().is_empty() {
                continue;
            }
            if self.trailer_seen {
                return Err(
                    self.err("unexpected line after the trailer (the trailer must be last)".into())
                );
            }
            let parsed: LedgerLine = serde_json::from_str(&line).map_err(|e| {
                let what = if e.is_eof() {
                    "truncated line (the run may have been killed while writing it)"
                } else {
                    "invalid ledger line"
                };
                self.err(format!(
                    "{what}: {e}; expected a JSON object with \"type\" header, iteration or trailer"
                ))
            })?;
            return match parsed {
                LedgerLine::Header(_) => Err(self.err("a second header line".into())),
                LedgerLine::Iteration(row) => Ok(Some(StreamItem::Row(self.line, Box::new(row)))),
                LedgerLine::Trailer(t) => {
                    self.trailer_seen = true;
                    Ok(Some(StreamItem::Trailer(self.line, Box::new(t))))
                }
            };
        }
    }

    /// Reads the rest of the stream into a [`Ledger`], calling `progress(rows)` after every row.
    ///
    /// # Errors
    /// As [`LedgerStream::next_item`].
    pub fn into_ledger(mut self, mut progress: impl FnMut(u64)) -> Result<Ledger> {
        let mut iterations = Vec::new();
        let mut trailer = None;
        while let Some(item) = self.next_item()? {
            match item {
                StreamItem::Row(_, row) => {
                    iterations.push(*row);
                    progress(iterations.len() as u64);
                }
                StreamItem::Trailer(_, t) => trailer = Some(*t),
            }
        }
        Ok(Ledger {
            header: self.header,
            iterations,
            trailer,
        })
    }
}

impl<R: BufRead> Iterator for LedgerStream<R> {
    type Item = Result<StreamItem>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_item().transpose()
    }
}
