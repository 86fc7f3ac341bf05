//! Opening a ledger with its progress display, and reading it for an analysis into a builder:
//! one made for a ledger in memory while its rows fit in the bytes held, one in bounded memory
//! past them. A ledger compressed with gzip or zstd (`run.jsonl.gz`, `run.jsonl.zst`) is read
//! as it is, known by its first bytes rather than its name.

use std::cell::Cell;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

use gpu_ledger_format::schema::{Header, IterationRow, Trailer};
use gpu_ledger_tools::export::{LedgerStream, StreamItem};

use super::progress::{Counted, Progress};
use super::{display, warn_truncated, CliError};

/// What every command shares: whether progress is forced, the bytes held before streaming, and
/// when the command started (progress shows after a second of it, over all its inputs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx {
    pub(crate) progress: bool,
    /// Whether progress may take the terminal's line (one reader at a time may).
    pub(crate) terminal: bool,
    pub(crate) hold_bytes: u64,
    pub(crate) start: Instant,
}

/// A ledger's lines, decompressed when the file is compressed.
pub(crate) type Stream = LedgerStream<Box<dyn BufRead>>;

/// A counter of bytes read, shared with the reader that counts them.
type ByteCount = Rc<Cell<u64>>;

/// How a ledger file is stored, from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    fn of(first: &[u8]) -> Self {
        if first.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if first.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }
}

/// `file` decompressed as its first bytes say; the lines read from it are counted into the
/// returned counter (decompressed bytes, which bound what an analysis holds).
fn decoded(
    file: BufReader<Counted<File>>,
    path: &Path,
) -> Result<(Box<dyn BufRead>, ByteCount), gpu_ledger_format::Error> {
    let mut file = file;
    let err = |e: io::Error| gpu_ledger_format::Error::LedgerRead {
        path: path.to_path_buf(),
        line: 0,
        message: format!("cannot read: {e}"),
    };
    let kind = Compression::of(file.fill_buf().map_err(err)?);
    let inner: Box<dyn io::Read> = match kind {
        Compression::None => Box::new(file),
        // Several gzip members one after another (`cat a.gz b.gz`) are one ledger, as for zcat.
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(file)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(file).map_err(err)?),
    };
    let (counted, bytes) = Counted::new(inner);
    Ok((Box::new(BufReader::with_capacity(1 << 16, counted)), bytes))
}

/// Opens a ledger and its progress display (bytes read of its size, rows).
pub(crate) fn open(path: &Path, ctx: Ctx) -> Result<(Stream, Progress), gpu_ledger_format::Error> {
    open_counted(path, ctx).map(|(s, p, _)| (s, p))
}

/// As [`open`], with a counter of the ledger's bytes read after decompression.
fn open_counted(
    path: &Path,
    ctx: Ctx,
) -> Result<(Stream, Progress, ByteCount), gpu_ledger_format::Error> {
    let file = File::open(path).map_err(|e| gpu_ledger_format::Error::LedgerRead {
        path: path.to_path_buf(),
        line: 0,
        message: format!("cannot open: {e}"),
    })?;
    let total = file
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len());
    // Progress counts the file's bytes, so that it reaches the file's size when compressed too.
    let (counted, bytes) = Counted::new(file);
    let (input, decoded_bytes) = decoded(BufReader::with_capacity(1 << 16, counted), path)?;
    let stream = LedgerStream::new(input, path)?;
    let progress =
        Progress::stderr(ctx.progress, ctx.terminal, &display(path), bytes, total).since(ctx.start);
    Ok((stream, progress, decoded_bytes))
}

/// A ledger read for an analysis: its header, its trailer (`None`: the run did not finish) and
/// the builder its rows went into.
pub(crate) struct Read<B> {
    pub(crate) header: Header,
    pub(crate) trailer: Option<Trailer>,
    pub(crate) builder: B,
}

/// Reads `path` into the builder `make` gives, with `push` for each row in order. The rows are
/// held while they fit in [`Ctx::hold_bytes`]: a ledger that fits is a ledger in memory, whose
/// builder `make` is given its number of rows for (exact figures, charts split evenly); past the
/// bound `make` is given `None` for a builder in bounded memory, and the rows held so far go in
/// first. Per-activity records and scope spans (only the trace uses them) are dropped row by row.
pub(crate) fn read_bounded<B>(
    path: &Path,
    ctx: Ctx,
    mut make: impl FnMut(Option<usize>) -> B,
    mut push: impl FnMut(&mut B, IterationRow),
) -> Result<Read<B>, CliError> {
    let (mut stream, mut p, decoded_bytes) = open_counted(path, ctx)?;
    let header_bytes = decoded_bytes.get();
    let mut held = Vec::new();
    let mut builder = None;
    let mut trailer = None;
    let mut rows = 0u64;
    let result = loop {
        match stream.next_item() {
            Ok(Some(StreamItem::Row(_, mut row))) => {
                row.activities = None;
                row.scope_spans = None;
                rows += 1;
                p.tick(rows);
                match &mut builder {
                    Some(b) => push(b, *row),
                    None => {
                        held.push(*row);
                        if decoded_bytes.get().saturating_sub(header_bytes) > ctx.hold_bytes {
                            let mut b = make(None);
                            held.drain(..).for_each(|r| push(&mut b, r));
                            builder = Some(b);
                        }
                    }
                }
            }
            Ok(Some(StreamItem::Trailer(_, t))) => trailer = Some(*t),
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    p.done(rows);
    result?;
    warn_truncated(path, stream.truncated_last_line());
    let builder = match builder {
        Some(b) => b,
        None => {
            let mut b = make(Some(held.len()));
            held.into_iter().for_each(|r| push(&mut b, r));
            b
        }
    };
    Ok(Read {
        header: stream.header().clone(),
        trailer,
        builder,
    })
}
