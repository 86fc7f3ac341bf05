//! Ledger row serialization (target: the writer thread must never be the bottleneck at 10 000
//! iterations per second).
//!
//! The row is a realistic training-step row: 10 scopes, 20 kernel groups with mangled C++ names,
//! copies in two directions, a memset group, a synchronization group, one device and a full NVML
//! summary.
//!
//! - `ledger_row/serialize`: `serde_json::to_writer` into a reused buffer, as the writer thread
//!   does per line;
//! - `ledger_row/to_string`: `serde_json::to_string` (a fresh `String` per row);
//! - `ledger_row/clone`: cloning the row, the cost the collector pays to keep a copy;
//! - `ledger_writer/10000_rows`: 10 000 rows sent through `LedgerWriter` to a temporary file and
//!   the writer closed (serialize + `write_all` + final `sync_data`), i.e. the whole writer thread.
//!
//! `cargo bench --bench ledger_write` (add `-- --quick` for a short run); a summary with rows/s
//! against the target prints last.

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::rows::row;
use common::{verdict, SAMPLES};
use criterion::{criterion_group, BatchSize, Criterion, Throughput};
use gpu_ledger::analysis::stats::median;
use gpu_ledger::internals::LedgerWriter;
use gpu_ledger::ledger::schema::{IterationRow, LedgerLine};

mod common;

/// Iterations per second the writer must sustain.
const TARGET_ROWS_PER_S: f64 = 10_000.0;

/// Rows per `ledger_writer` measurement.
const WRITER_ROWS: usize = 10_000;

/// Serializes one line the way the writer thread does: into a reused buffer, plus a newline.
fn serialize_into(buf: &mut Vec<u8>, line: &LedgerLine) {
    buf.clear();
    serde_json::to_writer(&mut *buf, line).expect("a row serializes");
    buf.push(b'\n');
}

/// Sends `rows` through a fresh `LedgerWriter` on a temporary file and closes it.
fn through_writer(dir: &tempfile::TempDir, rows: Vec<IterationRow>) -> Duration {
    let writer = LedgerWriter::create(&dir.path().join("bench.jsonl")).expect("a ledger file");
    let t0 = Instant::now();
    for r in rows {
        writer.send(LedgerLine::Iteration(r));
    }
    let report = writer.close();
    let elapsed = t0.elapsed();
    assert_eq!(report.lines_not_written, 0, "ledger lines lost");
    elapsed
}

/// Serializes and writes `rows` copies of `line` on this thread to a fresh file, one `write_all`
/// per `batch` lines, without `sync_data`: the writer loop's own work, without the thread
/// hand-off, the row drops and the final sync.
fn inline_writes(
    dir: &tempfile::TempDir,
    line: &LedgerLine,
    rows: usize,
    batch: usize,
) -> Duration {
    use std::io::Write;
    let mut file = std::fs::File::create(dir.path().join("inline.jsonl")).expect("a file");
    let mut one = Vec::with_capacity(64 * 1024);
    let mut pending = Vec::with_capacity(batch * 16 * 1024);
    let t0 = Instant::now();
    for i in 0..rows {
        serialize_into(&mut one, line);
        pending.extend_from_slice(&one);
        if (i + 1) % batch == 0 {
            file.write_all(&pending).expect("a write");
            pending.clear();
        }
    }
    file.write_all(&pending).expect("a write");
    t0.elapsed()
}

fn bench_rows(c: &mut Criterion) {
    let line = LedgerLine::Iteration(row(7));
    let mut group = c.benchmark_group("ledger_row");
    group.throughput(Throughput::Elements(1));
    group.bench_function("serialize", |b| {
        let mut buf = Vec::with_capacity(64 * 1024);
        b.iter(|| {
            serialize_into(&mut buf, black_box(&line));
            buf.len()
        })
    });
    group.bench_function("to_string", |b| {
        b.iter(|| serde_json::to_string(black_box(&line)).expect("a row serializes"))
    });
    group.bench_function("clone", |b| b.iter(|| black_box(&line).clone()));
    group.finish();

    let dir = tempfile::tempdir().expect("a temporary directory");
    let template = row(0);
    let mut group = c.benchmark_group("ledger_writer");
    group.sample_size(10);
    group.throughput(Throughput::Elements(WRITER_ROWS as u64));
    group.bench_function("10000_rows", |b| {
        b.iter_batched(
            || vec![template.clone(); WRITER_ROWS],
            |rows| through_writer(&dir, rows),
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, bench_rows);

/// Median over `runs` runs of `rate()`, rows per second.
fn median_rate(runs: usize, mut rate: impl FnMut() -> f64) -> f64 {
    let rates: Vec<f64> = (0..runs).map(|_| rate()).collect();
    median(&rates).expect("finite rates")
}

fn summary() {
    let line = LedgerLine::Iteration(row(7));
    let mut buf = Vec::with_capacity(64 * 1024);
    serialize_into(&mut buf, &line);
    let bytes = buf.len();
    let n = 20_000;
    let serialize = median_rate(SAMPLES, || {
        let t0 = Instant::now();
        for _ in 0..n {
            serialize_into(&mut buf, black_box(&line));
        }
        n as f64 / t0.elapsed().as_secs_f64()
    });
    let dir = tempfile::tempdir().expect("a temporary directory");
    let template = row(0);
    let writer = median_rate(5, || {
        let rows = vec![template.clone(); WRITER_ROWS];
        WRITER_ROWS as f64 / through_writer(&dir, rows).as_secs_f64()
    });
    let inline = |batch: usize| {
        median_rate(5, || {
            WRITER_ROWS as f64 / inline_writes(&dir, &line, WRITER_ROWS, batch).as_secs_f64()
        })
    };
    let per_line = inline(1);
    let batched = inline(64);
    println!();
    println!(
        "ledger write summary: one row = 10 scopes, 20 kernel groups, NVML summary: {bytes} bytes of JSON"
    );
    println!(
        "{:<46} {:>12} {:>12} {:>12} {:>8}",
        "case", "rows/s", "µs/row", "target", ""
    );
    for (case, rate) in [
        ("serde_json::to_writer, reused buffer", serialize),
        ("serialize + write_all per row, this thread", per_line),
        ("serialize + write_all per 64 rows, this thread", batched),
        ("LedgerWriter to a file (10 000 rows, closed)", writer),
    ] {
        println!(
            "{case:<46} {:>12.0} {:>12.2} {:>10.0}/s {:>8}",
            rate,
            1e6 / rate,
            TARGET_ROWS_PER_S,
            verdict(rate >= TARGET_ROWS_PER_S)
        );
    }
    println!(
        "writer thread busy {:.1} % of one core at 10 000 rows/s; {:.1} MB/s of ledger",
        100.0 * TARGET_ROWS_PER_S / writer,
        bytes as f64 * TARGET_ROWS_PER_S / 1e6
    );
}

fn main() {
    common::run(benches, summary);
}
