//! `gpu-ledger csv`: the per-iteration table (wide: columns by the ledger's devices and scopes)
//! or the long table (one line per iteration and scope, fixed columns).

use std::io::{BufRead, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

use gpu_ledger_tools::export::{CsvCells, CsvLayout, LongCsv, StreamItem};

use super::input::{open, Ctx};
use super::output::Output;
use super::{display, io_err, warn_truncated, CliError};

/// Writes the CSV of the ledger at `path` to `output`, long or wide.
pub(crate) fn csv(path: &Path, output: &Path, long: bool, ctx: Ctx) -> Result<(), CliError> {
    super::output::refuse_input(output, &[path])?;
    if long {
        long_csv(path, output, ctx)
    } else {
        wide_csv(path, output, ctx)
    }
}

/// The long table's columns are known before the first row: it streams in one pass.
fn long_csv(path: &Path, output: &Path, ctx: Ctx) -> Result<(), CliError> {
    let (mut stream, mut p) = open(path, ctx)?;
    let table = LongCsv::new(stream.header(), &display(path));
    let mut out = Output::create(output)?;
    let out_name = out.name().to_string();
    let werr = || io_err(format!("cannot write {out_name}"));
    table.write_header(&mut out.writer).map_err(werr())?;
    let (mut rows, mut lines) = (0u64, 0usize);
    for item in stream.by_ref() {
        if let StreamItem::Row(_, row) = item? {
            rows += 1;
            p.tick(rows);
            lines += table.write_row(&mut out.writer, &row).map_err(werr())?;
        }
    }
    p.done(rows);
    warn_truncated(path, stream.truncated_last_line());
    out.commit()?;
    eprintln!("gpu-ledger: {rows} iterations as {lines} lines (iteration and scope) written to {out_name}");
    Ok(())
}

/// The wide table's columns depend on every row.
fn wide_csv(path: &Path, output: &Path, ctx: Ctx) -> Result<(), CliError> {
    // The columns depend on every row, and the input is read once (a FIFO or a process
    // substitution cannot be read again): what the table shows of each row is kept in an
    // unnamed temporary file, so that a ledger of any length is written in constant memory.
    let mut layout = CsvLayout::new();
    let mut rows = 0u64;
    let spill_err =
        || io_err("cannot write the CSV's temporary file (set TMPDIR to a disk with space)");
    let mut spill = BufWriter::new(tempfile::tempfile().map_err(spill_err())?);
    let (mut stream, mut p) = open(path, ctx)?;
    for item in stream.by_ref() {
        if let StreamItem::Row(_, row) = item? {
            rows += 1;
            p.tick(rows);
            let cells = CsvCells::of(&row);
            layout.observe_cells(&cells);
            serde_json::to_writer(&mut spill, &cells).map_err(|e| spill_err()(e.into()))?;
            spill.write_all(b"\n").map_err(spill_err())?;
        }
    }
    p.done(rows);
    warn_truncated(path, stream.truncated_last_line());
    let mut spilled = spill
        .into_inner()
        .map_err(|e| spill_err()(e.into_error()))?;
    spilled.seek(SeekFrom::Start(0)).map_err(spill_err())?;
    let mut out = Output::create(output)?;
    let out_name = out.name().to_string();
    let werr = || io_err(format!("cannot write {out_name}"));
    layout.write_header(&mut out.writer).map_err(werr())?;
    let mut written = 0u64;
    for line in BufReader::new(spilled).lines() {
        let line = line.map_err(spill_err())?;
        let cells: CsvCells = serde_json::from_str(&line).map_err(|e| {
            CliError::Other(format!(
                "the CSV's temporary file could not be read back: {e}"
            ))
        })?;
        layout
            .write_cells(&mut out.writer, &cells)
            .map_err(werr())?;
        written += 1;
    }
    out.commit()?;
    eprintln!(
        "gpu-ledger: {written} rows, {} columns written to {out_name}",
        layout.columns().len(),
    );
    if let Some(f) = layout.folded() {
        eprintln!(
            "gpu-ledger: {} scope paths past the first {} share the columns scope:{}:…, their \
             sums per row (the Parquet dataset has every path)",
            f.folded(),
            f.kept(),
            f.label()
        );
    }
    Ok(())
}
