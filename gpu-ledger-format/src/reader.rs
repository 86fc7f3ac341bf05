//! Reads a ledger back, validating the schema version and reporting the line of any bad line.
//!
//! A run killed (or ended by `exit`) while the writer thread wrote a row can leave the last line
//! cut: no newline, incomplete JSON. Such a line is not an error: the ledger is valid up to the
//! last complete line, the cut line is dropped, and [`Ledger::truncated_last_line`] names it.
//! Only the final line qualifies, and only when it has no newline and its JSON ends early; a cut
//! line followed by others, an invalid line that ends with its newline, or a cut header are
//! errors as any other bad line.

use std::io::BufRead;
use std::path::Path;

use crate::error::{Error, Result};
use crate::schema::{Header, IterationRow, LedgerLine, Trailer, SCHEMA_VERSION};
use crate::validate::{check_record, check_row, diagnose};

/// The longest line the reader accepts: a row with every activity of a large iteration recorded
/// stays far below it, and input without newlines (`/dev/zero`, a binary file) stops here rather
/// than growing until memory runs out.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// A ledger read from disk.
#[derive(Debug, Clone, PartialEq)]
pub struct Ledger {
    /// The header line.
    pub header: Header,
    /// Iteration rows in file order.
    pub iterations: Vec<IterationRow>,
    /// The trailer; `None` when the run did not finish (crash, kill): the rows before are valid.
    pub trailer: Option<Trailer>,
    /// The 1-based line number of a last line that was cut while being written (the run was
    /// killed mid-write: no newline and incomplete JSON). That line was dropped: the rows above
    /// are every complete row of the file, and there is no trailer. `None` when every line is
    /// whole.
    pub truncated_last_line: Option<usize>,
}

/// Reads and validates a ledger file.
///
/// A last line cut while being written (no newline, incomplete JSON) is dropped and reported in
/// [`Ledger::truncated_last_line`] rather than failing the read.
///
/// # Errors
/// [`Error::LedgerRead`] with the 1-based line number: unreadable file, empty file, a line that is
/// not valid JSON of a known line type (including a cut line that is not the last one, or that
/// ends with its newline), a first line that is not a header (or a cut header), a schema version
/// other than [`SCHEMA_VERSION`], a second header, or lines after the trailer.
pub fn read_ledger(path: &Path) -> Result<Ledger> {
    let file = std::fs::File::open(path).map_err(|e| Error::LedgerRead {
        path: path.to_path_buf(),
        line: 0,
        message: format!("cannot open: {e}"),
    })?;
    parse_ledger(std::io::BufReader::new(file), path)
}

/// What to do with a ledger whose first bytes are those of a gzip or zstd file: this reader
/// reads text only (the `gpu-ledger` command's analyses decompress as they read).
pub(crate) fn compressed(first: &[u8], path: &Path) -> Option<String> {
    let (what, tool, ext) = if first.starts_with(&[0x1f, 0x8b]) {
        ("gzip", "zcat", "gz")
    } else if first.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        ("zstd", "zstdcat", "zst")
    } else {
        return None;
    };
    let plain = if path.extension().is_some_and(|e| e == ext) {
        path.with_extension("")
    } else {
        path.with_extension("jsonl")
    };
    Some(format!(
        "the file is {what}-compressed and this reader reads text: decompress it first \
         (`{tool} {} > {}`)",
        path.display(),
        plain.display()
    ))
}

/// Parses a ledger from any reader; `path` is only used in error messages.
///
/// # Errors
/// As [`read_ledger`].
pub fn parse_ledger(mut input: impl BufRead, path: &Path) -> Result<Ledger> {
    let err = |line: usize, message: String| Error::LedgerRead {
        path: path.to_path_buf(),
        line,
        message,
    };
    if let Some(message) = input.fill_buf().ok().and_then(|b| compressed(b, path)) {
        return Err(err(1, message));
    }
    let mut header: Option<Header> = None;
    let mut iterations = Vec::new();
    let mut trailer = None;
    let mut truncated_last_line = None;
    let mut buf = Vec::new();
    let mut n = 0usize;
    let mut order = IndexOrder::default();
    loop {
        n += 1;
        let Some(mut line) =
            read_raw_line(&mut input, &mut buf).map_err(|e| err(n, e.message(n)))?
        else {
            break;
        };
        if header.is_none() {
            line.strip_byte_order_mark();
        }
        if line.is_blank() {
            continue;
        }
        if trailer.is_some() {
            return Err(err(
                n,
                "unexpected line after the trailer (the trailer must be last)".into(),
            ));
        }
        if header.is_none() {
            check_version(&line.text).map_err(|m| err(n, m))?;
        }
        let parsed = match parse_line(&line).map_err(|m| err(n, m))? {
            Parsed::Line(l) => *l,
            Parsed::CutLastLine => {
                truncated_last_line = Some(n);
                break;
            }
        };
        match (parsed, header.is_some()) {
            (LedgerLine::Header(h), false) => header = Some(h),
            (LedgerLine::Header(_), true) => return Err(err(n, "a second header line".into())),
            (_, false) => return Err(err(n, "the first line must be the header".into())),
            (LedgerLine::Iteration(row), true) => {
                order.check(row.index, n).map_err(|m| err(n, m))?;
                iterations.push(row);
            }
            (LedgerLine::Trailer(t), true) => trailer = Some(t),
        }
    }
    let header = header.ok_or_else(|| err(1, "empty ledger: no header line".into()))?;
    Ok(Ledger {
        header,
        iterations,
        trailer,
        truncated_last_line,
    })
}

/// One line of input, without its line ending.
#[derive(Debug)]
pub(crate) struct RawLine {
    /// The text (for a last line cut inside a multi-byte character: the text before it).
    pub(crate) text: String,
    /// Whether the line ended with `'\n'` (only the last line of the input may not).
    pub(crate) terminated: bool,
    /// The last line ended inside a multi-byte UTF-8 character, left out of `text`.
    pub(crate) cut_char: bool,
}

impl RawLine {
    /// Only white space (a cut character is not white space).
    pub(crate) fn is_blank(&self) -> bool {
        !self.cut_char && self.text.trim().is_empty()
    }

    /// Drops a UTF-8 byte-order mark that some editors put before the first line.
    pub(crate) fn strip_byte_order_mark(&mut self) {
        if let Some(rest) = self.text.strip_prefix('\u{feff}') {
            self.text = rest.to_owned();
        }
    }
}

/// Why a line could not be read.
#[derive(Debug)]
pub(crate) enum LineError {
    /// The input failed, or the line is not UTF-8.
    Io(std::io::Error),
    /// The line passed [`MAX_LINE_BYTES`] without a newline.
    TooLong,
}

impl LineError {
    /// The message of [`Error::LedgerRead`] at line `n`.
    pub(crate) fn message(&self, n: usize) -> String {
        match self {
            LineError::Io(e) => format!("cannot read: {e}"),
            LineError::TooLong => format!(
                "line {n} is longer than {} MiB without a newline: not a ledger line (is this \
                 a gpu-ledger ledger?)",
                MAX_LINE_BYTES >> 20
            ),
        }
    }
}

/// Checks that iteration indices rise from row to row: a repeated or earlier index (ledgers
/// concatenated or edited) would be counted twice or out of order by every analysis.
#[derive(Debug, Default)]
pub(crate) struct IndexOrder {
    last: Option<(u64, usize)>,
}

impl IndexOrder {
    /// Row `index` at line `line`; the error is the message of [`Error::LedgerRead`].
    pub(crate) fn check(&mut self, index: u64, line: usize) -> std::result::Result<(), String> {
        if let Some((prev, at)) = self.last {
            if index <= prev {
                return Err(format!(
                    "iteration index {index} does not follow {prev} (line {at}): a ledger holds \
                     one run's rows in rising order; split a concatenated file at its second \
                     run, or remove the repeated rows"
                ));
            }
        }
        self.last = Some((index, line));
        Ok(())
    }
}

/// Reads the next line into `buf` (reused between calls); `Ok(None)` at the end of the input.
/// Strips `"\n"` or `"\r\n"` as [`BufRead::lines`] does, and fails as it does on invalid UTF-8,
/// except for a last line without a newline that ends inside a UTF-8 character (a cut line).
/// A line longer than [`MAX_LINE_BYTES`] is an error once that much is read.
pub(crate) fn read_raw_line(
    input: &mut impl BufRead,
    buf: &mut Vec<u8>,
) -> std::result::Result<Option<RawLine>, LineError> {
    buf.clear();
    let limit = MAX_LINE_BYTES as u64 + 2;
    if std::io::Read::take(&mut *input, limit)
        .read_until(b'\n', buf)
        .map_err(LineError::Io)?
        == 0
    {
        return Ok(None);
    }
    if buf.len() as u64 >= limit && buf.last() != Some(&b'\n') {
        return Err(LineError::TooLong);
    }
    let terminated = buf.last() == Some(&b'\n');
    if terminated {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
    }
    // Where the text stops being UTF-8, so that the byte can be found (`cmp`, `xxd -s`).
    let invalid = |e: std::str::Utf8Error| {
        let at = e.valid_up_to();
        let bad: Vec<String> = buf[at..]
            .iter()
            .take(e.error_len().unwrap_or(1))
            .map(|b| format!("0x{b:02X}"))
            .collect();
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "stream did not contain valid UTF-8: byte {} of the line ({}) is not UTF-8 text",
                at + 1,
                bad.join(" ")
            ),
        )
    };
    match std::str::from_utf8(buf) {
        Ok(text) => Ok(Some(RawLine {
            text: text.to_owned(),
            terminated,
            cut_char: false,
        })),
        Err(e) if !terminated && e.error_len().is_none() => Ok(Some(RawLine {
            text: String::from_utf8_lossy(&buf[..e.valid_up_to()]).into_owned(),
            terminated,
            cut_char: true,
        })),
        Err(e) => Err(LineError::Io(invalid(e))),
    }
}

/// A non-blank line after parsing.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// A ledger line.
    Line(Box<LedgerLine>),
    /// The last line of the input, cut while being written: no newline, and its JSON ends early.
    CutLastLine,
}

/// Parses a non-blank line; the error is the message of [`Error::LedgerRead`].
pub(crate) fn parse_line(line: &RawLine) -> std::result::Result<Parsed, String> {
    match serde_json::from_str::<LedgerLine>(&line.text) {
        Ok(_) if line.cut_char => Err("cannot read: stream did not contain valid UTF-8".into()),
        Ok(LedgerLine::Iteration(row)) => {
            check_row(&row)?;
            Ok(Parsed::Line(Box::new(LedgerLine::Iteration(row))))
        }
        Ok(LedgerLine::Header(h)) => {
            check_record(&h)?;
            Ok(Parsed::Line(Box::new(LedgerLine::Header(h))))
        }
        Ok(LedgerLine::Trailer(t)) => {
            check_record(&t)?;
            Ok(Parsed::Line(Box::new(LedgerLine::Trailer(t))))
        }
        Err(e) if e.is_eof() && !line.terminated => Ok(Parsed::CutLastLine),
        Err(e) if e.is_eof() => Err(format!(
            "truncated line (the run may have been killed while writing it): {e}; expected a \
             JSON object with \"type\" header, iteration or trailer"
        )),
        Err(_) => Err(diagnose(&line.text)),
    }
}

/// Checks the header's schema version before parsing the whole line, so that a ledger from a
/// newer gpu-ledger gets a version error rather than a confusing field error.
fn check_version(line: &str) -> std::result::Result<(), String> {
    let value: serde_json::Value = serde_json::from_str(line)
        .map_err(|e| format!("the first line is not JSON ({e}); is this a gpu-ledger file?"))?;
    if value.get("type").and_then(|t| t.as_str()) != Some("header") {
        return Err("the first line must be the header (\"type\":\"header\")".into());
    }
    if let Some(v @ serde_json::Value::String(_)) = value.get("schema_version") {
        return Err(format!(
            "schema_version must be a number, not {v}: write it as {SCHEMA_VERSION}"
        ));
    }
    let version = match value.get("schema_version") {
        None => return Err("the header has no schema_version".into()),
        Some(v) => v,
    };
    match version.as_u64() {
        None => Err(format!(
            "schema_version must be a whole number, not {version}: write it as {SCHEMA_VERSION}"
        )),
        Some(v) if v == u64::from(SCHEMA_VERSION) => Ok(()),
        Some(v) if v > u64::from(SCHEMA_VERSION) => Err(format!(
            "schema version {v} is newer than this gpu-ledger reads ({SCHEMA_VERSION}); upgrade gpu-ledger"
        )),
        Some(v) => Err(format!("schema version {v} is not supported (this gpu-ledger reads {SCHEMA_VERSION})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = r#"{"type":"header","schema_version":1,"gpu_ledger_version":"0.1.0","start_unix_ns":1,"start_cupti_ns":2,"config":{"level":"timeline","buffer_count":8,"buffer_bytes":4194304,"settle_ms":2000},"environment":{"gpus":[],"driver_version":null,"cuda_driver_version":null,"cupti_api_version":null,"cupti_path":null,"hostname":null,"command_line":[]},"rank":null,"warnings":[]}"#;

    fn row(index: u64, scope: &str) -> String {
        format!(
            r#"{{"type":"iteration","index":{index},"host_start_ns":0,"host_wall_ns":10,"complete":true,"perturbed":false,"devices":[],"scopes":[{{"path":"{scope}","calls":1,"host_ns":9,"launches":0,"device_ns":0,"device_ns_inclusive":0}}],"kernels":[],"memcpy":[],"memset":[],"synchronization":[],"dropped_records":0}}"#
        )
    }

    fn parse(text: &[u8]) -> Result<Ledger> {
        parse_ledger(text, Path::new("t.jsonl"))
    }

    fn error_line(r: Result<Ledger>) -> (usize, String) {
        match r {
            Err(Error::LedgerRead { line, message, .. }) => (line, message),
            other => panic!("expected a LedgerRead error, got {other:?}"),
        }
    }

    #[test]
    fn a_cut_last_line_is_dropped_and_named() {
        let r1 = row(1, "step");
        let text = format!("{HEADER}\n{}\n{}", row(0, "step"), &r1[..r1.len() / 2]);
        let l = parse(text.as_bytes()).unwrap();
        assert_eq!(l.truncated_last_line, Some(3));
        assert_eq!(l.iterations.len(), 1);
        assert_eq!(l.iterations[0].index, 0);
        assert!(l.trailer.is_none());
        // Whole lines only: nothing to report.
        let whole = format!("{HEADER}\n{}\n", row(0, "step"));
        assert_eq!(parse(whole.as_bytes()).unwrap().truncated_last_line, None);
        // A whole last row without its newline is a row, not a cut line.
        let no_newline = format!("{HEADER}\n{}", row(0, "step"));
        let l = parse(no_newline.as_bytes()).unwrap();
        assert_eq!((l.iterations.len(), l.truncated_last_line), (1, None));
    }

    #[test]
    fn a_last_line_cut_inside_a_character_is_dropped_and_named() {
        let r1 = row(1, "étape");
        let at = r1.find('é').unwrap() + 1; // inside the two bytes of 'é'
        let mut text = format!("{HEADER}\n{}\n", row(0, "étape")).into_bytes();
        text.extend_from_slice(&r1.as_bytes()[..at]);
        let l = parse(&text).unwrap();
        assert_eq!(l.truncated_last_line, Some(3));
        assert_eq!(l.iterations[0].scopes[0].path, "étape");
        // The same bytes followed by a newline: invalid UTF-8, an error at its line.
        text.push(b'\n');
        assert_eq!(error_line(parse(&text)).0, 3);
    }

    #[test]
    fn a_cut_line_in_the_middle_is_an_error_at_its_line() {
        let r0 = row(0, "step");
        let text = format!("{HEADER}\n{}\n{}\n", &r0[..r0.len() / 2], row(1, "step"));
        let (line, message) = error_line(parse(text.as_bytes()));
        assert_eq!(line, 2);
        assert!(message.starts_with("truncated line"), "{message}");
    }

    #[test]
    fn an_invalid_last_line_with_its_newline_is_an_error() {
        // Cut, then a newline: not a line the writer was killed in.
        let r1 = row(1, "step");
        let text = format!("{HEADER}\n{}\n{}\n", row(0, "step"), &r1[..r1.len() / 2]);
        let (line, message) = error_line(parse(text.as_bytes()));
        assert_eq!(line, 3);
        assert!(message.starts_with("truncated line"), "{message}");
        // Invalid JSON that is not cut short, with or without its newline.
        for end in ["\n", ""] {
            let text = format!("{HEADER}\n{}\n{{\"type\":]{end}", row(0, "step"));
            let (line, message) = error_line(parse(text.as_bytes()));
            assert_eq!(line, 3, "{end:?}");
            assert!(message.starts_with("invalid ledger line"), "{message}");
        }
    }

    #[test]
    fn a_cut_header_is_an_error() {
        let (line, _) = error_line(parse(&HEADER.as_bytes()[..HEADER.len() / 2]));
        assert_eq!(line, 1);
        let (line, _) = error_line(parse(format!("\n{}", &HEADER[..40]).as_bytes()));
        assert_eq!(line, 2);
    }
}
