//! A ledger read one line at a time, so that exports of a large ledger (a trace, a CSV, a check)
//! keep one row in memory rather than all of them.
//!
//! The header is validated by [`parse_ledger`] itself (schema version first, then the fields),
//! and every later line is checked by the same rules, with the same messages, as
//! [`crate::read_ledger`]: a line that is not a ledger line, a second header, a line after
//! the trailer. Errors are [`Error::LedgerRead`] with the 1-based line number. A last line cut
//! while being written (no newline, incomplete JSON) ends the stream without an error, as it is
//! dropped by `read_ledger`, and [`LedgerStream::truncated_last_line`] names it. A test keeps the
//! two readers in agreement on every golden ledger.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::reader::{
    compressed, parse_ledger, parse_line, read_raw_line, IndexOrder, Ledger, Parsed,
};
use crate::schema::{Header, IterationRow, LedgerLine, Trailer};

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
    input: R,
    buf: Vec<u8>,
    path: PathBuf,
    line: usize,
    header: Header,
    header_line: usize,
    trailer_seen: bool,
    truncated_last_line: Option<usize>,
    failed: bool,
    order: IndexOrder,
    skipped: u64,
}

/// What [`LedgerStream::next_item_in`] reads of a row it may skip: its type and index, every
/// other field passed over without being built.
#[derive(serde::Deserialize)]
struct Peek {
    #[serde(rename = "type")]
    kind: Option<String>,
    index: Option<u64>,
}

impl LedgerStream<BufReader<File>> {
    /// Opens `path` and reads its header.
    ///
    /// # Errors
    /// [`Error::LedgerRead`]: the file cannot be opened (line 0, which the message leaves out), or its header is missing or
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
    pub fn new(mut input: R, path: &Path) -> Result<Self> {
        if let Some(message) = input.fill_buf().ok().and_then(|b| compressed(b, path)) {
            return Err(Error::LedgerRead {
                path: path.to_path_buf(),
                line: 1,
                message,
            });
        }
        let mut buf = Vec::new();
        let mut n = 0usize;
        loop {
            n += 1;
            let line = match read_raw_line(&mut input, &mut buf) {
                Ok(None) => {
                    return Err(Error::LedgerRead {
                        path: path.to_path_buf(),
                        line: 1,
                        message: "empty ledger: no header line".into(),
                    })
                }
                Ok(Some(l)) => l,
                Err(e) => {
                    return Err(Error::LedgerRead {
                        path: path.to_path_buf(),
                        line: n,
                        message: e.message(n),
                    })
                }
            };
            if line.is_blank() {
                continue;
            }
            // The header alone is a valid ledger: let the reader validate it, then move its
            // error (reported at line 1) to the real line. A cut header is an error there too.
            let ledger = parse_ledger(line.text.as_bytes(), path).map_err(|e| match e {
                Error::LedgerRead { path, message, .. } => Error::LedgerRead {
                    path,
                    line: n,
                    message,
                },
            })?;
            if ledger.trailer.is_some() || !ledger.iterations.is_empty() {
                return Err(Error::LedgerRead {
                    path: path.to_path_buf(),
                    line: n,
                    message: "the first line must be the header".into(),
                });
            }
            return Ok(Self {
                input,
                buf,
                path: path.to_path_buf(),
                line: n,
                header: ledger.header,
                header_line: n,
                trailer_seen: false,
                truncated_last_line: None,
                failed: false,
                order: IndexOrder::default(),
                skipped: 0,
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

    /// The 1-based line number of the last line, when it was cut while being written (no
    /// newline, incomplete JSON): the stream ended before it without an error. Known once the
    /// stream has ended; `None` before, or when every line is whole.
    pub fn truncated_last_line(&self) -> Option<usize> {
        self.truncated_last_line
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

    /// The next line after the header; `Ok(None)` at the end of the input, or at a last line
    /// cut while being written (then see [`LedgerStream::truncated_last_line`]).
    ///
    /// # Errors
    /// [`Error::LedgerRead`] with the line number, as [`crate::read_ledger`]. After an
    /// error the stream ends.
    pub fn next_item(&mut self) -> Result<Option<StreamItem>> {
        if self.failed || self.truncated_last_line.is_some() {
            return Ok(None);
        }
        let out = self.next_inner();
        if out.is_err() {
            self.failed = true;
        }
        out
    }

    /// [`LedgerStream::next_item`] for the rows whose index `keep` accepts: a row it refuses is
    /// read only as far as its type and index (its JSON must be whole and its index must rise,
    /// but its fields are neither built nor checked), and counted in
    /// [`LedgerStream::skipped_rows`]. A window of a long ledger is read in a fraction of the
    /// time the whole takes.
    ///
    /// # Errors
    /// As [`LedgerStream::next_item`].
    pub fn next_item_in(
        &mut self,
        mut keep: impl FnMut(u64) -> bool,
    ) -> Result<Option<StreamItem>> {
        if self.failed || self.truncated_last_line.is_some() {
            return Ok(None);
        }
        let out = self.next_inner_in(Some(&mut keep));
        if out.is_err() {
            self.failed = true;
        }
        out
    }

    /// Rows passed over by [`LedgerStream::next_item_in`].
    pub fn skipped_rows(&self) -> u64 {
        self.skipped
    }

    fn next_inner(&mut self) -> Result<Option<StreamItem>> {
        self.next_inner_in(None)
    }

    /// The next line; with `keep`, rows it refuses are passed over (peeking costs a second
    /// parse of the rows kept, so a stream that keeps every row does not peek).
    fn next_inner_in(
        &mut self,
        mut keep: Option<&mut dyn FnMut(u64) -> bool>,
    ) -> Result<Option<StreamItem>> {
        loop {
            self.line += 1;
            let line = match read_raw_line(&mut self.input, &mut self.buf) {
                Ok(None) => {
                    self.line -= 1;
                    return Ok(None);
                }
                Ok(Some(l)) => l,
                Err(e) => return Err(self.err(e.message(self.line))),
            };
            if line.is_blank() {
                continue;
            }
            if self.trailer_seen {
                return Err(
                    self.err("unexpected line after the trailer (the trailer must be last)".into())
                );
            }
            // A line that does not peek (not JSON, cut) is parsed in full for its error.
            let peeked = match keep.as_mut() {
                Some(_) if !line.cut_char => serde_json::from_str::<Peek>(&line.text).ok(),
                _ => None,
            };
            if let (
                Some(keep),
                Some(Peek {
                    kind: Some(kind),
                    index: Some(index),
                }),
            ) = (keep.as_mut(), peeked)
            {
                if kind == "iteration" && !keep(index) {
                    self.order
                        .check(index, self.line)
                        .map_err(|m| self.err(m))?;
                    self.skipped += 1;
                    continue;
                }
            }
            let parsed = match parse_line(&line).map_err(|m| self.err(m))? {
                Parsed::Line(l) => *l,
                Parsed::CutLastLine => {
                    self.truncated_last_line = Some(self.line);
                    return Ok(None);
                }
            };
            return match parsed {
                LedgerLine::Header(_) => Err(self.err("a second header line".into())),
                LedgerLine::Iteration(row) => {
                    let line = self.line;
                    self.order.check(row.index, line).map_err(|m| self.err(m))?;
                    Ok(Some(StreamItem::Row(line, Box::new(row))))
                }
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
            truncated_last_line: self.truncated_last_line,
        })
    }
}

impl<R: BufRead> Iterator for LedgerStream<R> {
    type Item = Result<StreamItem>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_item().transpose()
    }
}
