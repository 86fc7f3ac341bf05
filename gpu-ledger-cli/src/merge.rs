//! `gpu-ledger merge`: the ledgers of several ranks read at once, in index order, each merged
//! iteration written as soon as every rank has passed it.

use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::PathBuf;

use gpu_ledger_tools::export::{MergeStream, RankSeries, StreamItem};

use super::input::{open, Ctx, Stream};
use super::progress::Progress;
use super::{display, io_err, warn_truncated, CliError, MergeFormat};

/// One rank's input: its stream, progress, rows read and whether its trailer was read.
struct Input {
    stream: Stream,
    p: Progress,
    rows: u64,
    trailer: bool,
}

impl Input {
    /// The next row: `(index, host_wall_ns, flagged)`.
    fn next_cell(&mut self) -> Result<Option<(u64, u64, bool)>, CliError> {
        while let Some(item) = self.stream.next_item()? {
            match item {
                StreamItem::Row(_, row) => {
                    self.rows += 1;
                    self.p.tick(self.rows);
                    return Ok(Some((
                        row.index,
                        row.host_wall_ns,
                        row.perturbed || !row.complete,
                    )));
                }
                StreamItem::Trailer(..) => self.trailer = true,
            }
        }
        Ok(None)
    }
}

/// Reads every rank's ledger at once, in index order (each is ordered: the reader refuses
/// an index that does not ascend), and writes each merged iteration as it is complete.
pub(crate) fn merge(paths: &[PathBuf], format: MergeFormat, ctx: Ctx) -> Result<(), CliError> {
    let mut inputs = Vec::new();
    let mut series = Vec::new();
    for path in paths {
        let (stream, p) = open(path, ctx)?;
        series.push(RankSeries::new(stream.header(), &display(path)));
        inputs.push(Input {
            stream,
            p,
            rows: 0,
            trailer: false,
        });
    }
    let mut merged = match MergeStream::new(series) {
        Ok(m) => m,
        Err(e) => {
            // A broken ledger is reported before the ranks' conflict, as when every ledger was
            // read before merging.
            for (path, input) in paths.iter().zip(&mut inputs) {
                while input.next_cell()?.is_some() {}
                input.p.done(input.rows);
                warn_truncated(path, input.stream.truncated_last_line());
            }
            return Err(CliError::Other(e.to_string()));
        }
    };
    let csv = format == MergeFormat::Csv;
    // The table goes to an unnamed temporary file until every input has read without error, so
    // that a failing ledger leaves stdout empty, as it did when all rows were held.
    let spill_err =
        || io_err("cannot write the merge's temporary file (set TMPDIR to a disk with space)");
    let mut spill = BufWriter::new(tempfile::tempfile().map_err(spill_err())?);
    spill
        .write_all(merged.head(csv).as_bytes())
        .map_err(spill_err())?;
    let mut heads = Vec::with_capacity(inputs.len());
    for input in &mut inputs {
        heads.push(input.next_cell()?);
    }
    let mut cells = vec![None; inputs.len()];
    while let Some(index) = heads.iter().flatten().map(|h| h.0).min() {
        for (i, input) in inputs.iter_mut().enumerate() {
            cells[i] = None;
            if let Some((at, wall, flagged)) = heads[i].filter(|h| h.0 == index) {
                cells[i] = Some((wall, flagged));
                debug_assert_eq!(at, index);
                heads[i] = input.next_cell()?;
            }
        }
        if let Some(it) = merged.push(index, &cells) {
            let line = if csv { it.to_csv() } else { it.to_markdown() };
            spill.write_all(line.as_bytes()).map_err(spill_err())?;
        }
    }
    for (i, (path, input)) in paths.iter().zip(&mut inputs).enumerate() {
        input.p.done(input.rows);
        warn_truncated(path, input.stream.truncated_last_line());
        merged.ended(i, input.trailer);
    }
    let mut spilled = spill
        .into_inner()
        .map_err(|e| spill_err()(e.into_error()))?;
    spilled.seek(SeekFrom::Start(0)).map_err(spill_err())?;
    let mut out = io::stdout().lock();
    let written = io::copy(&mut spilled, &mut out).and_then(|_| {
        if !csv {
            out.write_all(merged.finish_markdown().as_bytes())?;
        }
        out.flush()
    });
    match written {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(CliError::Io {
            what: "cannot write to stdout".into(),
            source: e,
        }),
        _ => Ok(()),
    }
}
