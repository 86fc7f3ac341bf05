//! Opening a ledger with its progress display, and reading it for an analysis into a builder:
//! one made for a ledger in memory while its rows fit in the bytes held, one in bounded memory
//! past them.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;
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

pub(crate) type Stream = LedgerStream<BufReader<Counted<File>>>;

/// Opens a ledger and its progress display (bytes read of its size, rows).
pub(crate) fn open(path: &Path, ctx: Ctx) -> Result<(Stream, Progress), gpu_ledger_format::Error> {
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
    let (counted, bytes) = Counted::new(file);
    let stream = LedgerStream::new(BufReader::with_capacity(1 << 16, counted), path)?;
    let progress =
        Progress::stderr(ctx.progress, ctx.terminal, &display(path), bytes, total).since(ctx.start);
    Ok((stream, progress))
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
    let (mut stream, mut p) = open(path, ctx)?;
    let header_bytes = stream_bytes(&p);
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
                        if stream_bytes(&p).saturating_sub(header_bytes) > ctx.hold_bytes {
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

/// Bytes read so far of the input behind `p`.
fn stream_bytes(p: &Progress) -> u64 {
    p.bytes_read()
}
