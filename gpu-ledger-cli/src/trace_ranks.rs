//! `gpu-ledger trace` of several ranks' ledgers: one trace, read in lockstep by iteration index,
//! every rank's iteration k aligned to one common start (clocks of different hosts cannot be
//! compared, iteration boundaries can). A rank's shift never decreases from one iteration to the
//! next, so that no slice of its tracks moves onto the one before it: iteration k starts where
//! the rank that took longest from its iteration k−1 to k gets to, and a faster rank shows the
//! difference as a gap, the wait a synchronous job spends at its next collective.

use std::path::PathBuf;

use gpu_ledger_format::schema::{IterationRow, Trailer};
use gpu_ledger_tools::export::{StreamItem, TraceOptions, TraceWriter};

use super::input::{open, Ctx, Stream};
use super::output::Output;
use super::progress::Progress;
use super::{display, io_err, warn_truncated, CliError};

/// One rank's input: its stream, progress, rows read, trailer, the row read ahead and the shift
/// its last written row had.
struct Input {
    path: PathBuf,
    rank: u32,
    stream: Stream,
    progress: Progress,
    rows: u64,
    trailer: Option<Trailer>,
    head: Option<Box<IterationRow>>,
    shift: Option<i128>,
}

impl Input {
    fn advance(&mut self) -> Result<(), CliError> {
        self.head = None;
        while let Some(item) = self.stream.next_item()? {
            match item {
                StreamItem::Row(_, row) => {
                    self.rows += 1;
                    self.progress.tick(self.rows);
                    self.head = Some(row);
                    return Ok(());
                }
                StreamItem::Trailer(_, t) => self.trailer = Some(*t),
            }
        }
        Ok(())
    }
}

/// Writes the trace of the ranks whose ledgers are `paths` to `output`.
pub(crate) fn trace_ranks(
    paths: &[PathBuf],
    output: &std::path::Path,
    opts: TraceOptions,
    ctx: Ctx,
) -> Result<(), CliError> {
    let named: Vec<&std::path::Path> = paths.iter().map(PathBuf::as_path).collect();
    super::output::refuse_input(output, &named)?;
    let mut inputs = open_ranks(paths, ctx)?;
    let mut out = Output::create(output)?;
    let out_name = out.name().to_string();
    let werr = || io_err(format!("cannot write {out_name}"));
    let first = inputs[0].stream.header().clone();
    let mut w = TraceWriter::new(&mut out.writer, &first, opts).map_err(werr())?;
    write_in_lockstep(&mut inputs, &mut w, &out_name)?;
    let trailer = run_trailer(&inputs);
    for i in &mut inputs {
        i.progress.done(i.rows);
        warn_truncated(&i.path, i.stream.truncated_last_line());
    }
    let stats = w.finish(trailer.as_ref()).map_err(werr())?;
    out.commit()?;
    eprintln!(
        "gpu-ledger: {} trace events ({} iterations of {} ranks, aligned on iteration starts, {} \
         activities) written to {out_name}",
        stats.events,
        stats.iterations,
        inputs.len(),
        stats.activities
    );
    Ok(())
}

/// Opens every ledger and orders them by rank (the header's, or the order given when no header
/// has one), refusing a mix of ranked and unranked ledgers or two claims of one rank, which
/// would mix runs or draw a rank twice in the trace.
fn open_ranks(paths: &[PathBuf], ctx: Ctx) -> Result<Vec<Input>, CliError> {
    let mut inputs = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let (stream, progress) = open(path, ctx)?;
        let rank = stream.header().rank.as_ref().map(|r| r.rank);
        inputs.push((rank, i, path.clone(), stream, progress));
    }
    let with_rank = inputs.iter().filter(|i| i.0.is_some()).count();
    if with_rank > 0 && with_rank < inputs.len() {
        let i = inputs.iter().find(|i| i.0.is_none()).map(|i| display(&i.2));
        return Err(CliError::Other(format!(
            "{} has no rank in its header while other ledgers do: it was not launched as a rank",
            i.unwrap_or_default()
        )));
    }
    let mut inputs: Vec<Input> = inputs
        .into_iter()
        .map(|(rank, i, path, stream, progress)| Input {
            path,
            // No header has a rank: ranks are numbered in the order given, as merge does.
            rank: rank.unwrap_or(i as u32),
            stream,
            progress,
            rows: 0,
            trailer: None,
            head: None,
            shift: None,
        })
        .collect();
    inputs.sort_by_key(|i| i.rank);
    if let Some(w) = inputs.windows(2).find(|w| w[0].rank == w[1].rank) {
        return Err(CliError::Other(format!(
            "{} and {} both claim rank {}: pass each rank's ledger once",
            display(&w[0].path),
            display(&w[1].path),
            w[0].rank
        )));
    }
    Ok(inputs)
}

/// Writes the ranks' rows iteration by iteration (the smallest index any rank has next), each
/// rank's row shifted to the iteration's common start ([`common_start`]).
fn write_in_lockstep<W: std::io::Write>(
    inputs: &mut [Input],
    w: &mut TraceWriter<W>,
    out_name: &str,
) -> Result<(), CliError> {
    let werr = || io_err(format!("cannot write {out_name}"));
    for input in inputs.iter_mut() {
        input.advance()?;
    }
    while let Some(k) = inputs
        .iter()
        .filter_map(|i| i.head.as_ref().map(|r| r.index))
        .min()
    {
        let start = common_start(inputs, k);
        for (pos, input) in inputs.iter_mut().enumerate() {
            let Some(row) = input.head.take_if(|r| r.index == k) else {
                continue;
            };
            let shift = start - i128::from(row.host_start_ns);
            input.shift = Some(shift);
            let header = input.stream.header().clone();
            w.select_rank(pos as u32, input.rank, &header, shift)
                .map_err(werr())?;
            w.write_row(&row).map_err(werr())?;
            input.advance()?;
        }
    }
    Ok(())
}

/// The common start of iteration `k`, on the trace's time line: the latest of the starts the
/// ranks that have it would get with the shift of their previous row (so that no rank's shift
/// decreases), or, when none has written a row yet, the earliest rank's own start.
fn common_start(inputs: &[Input], k: u64) -> i128 {
    let rows = inputs
        .iter()
        .filter_map(|i| i.head.as_ref().filter(|r| r.index == k).map(|r| (i, r)));
    let own = rows.clone().map(|(_, r)| i128::from(r.host_start_ns));
    let kept = rows.filter_map(|(i, r)| i.shift.map(|s| i128::from(r.host_start_ns) + s));
    kept.max().or_else(|| own.min()).unwrap_or_default()
}

/// The merged trace's trailer: present when every rank's run finished, with the ranks' dropped
/// records summed.
fn run_trailer(inputs: &[Input]) -> Option<Trailer> {
    if !inputs.iter().all(|i| i.trailer.is_some()) {
        return None;
    }
    let dropped = inputs
        .iter()
        .filter_map(|i| i.trailer.as_ref())
        .map(|t| t.dropped_records);
    Some(Trailer {
        dropped_records: dropped.sum(),
        ..Trailer::default()
    })
}
