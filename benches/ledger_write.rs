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

use common::{verdict, KERNEL_NAMES, SAMPLES};
use criterion::{criterion_group, BatchSize, Criterion, Throughput};
use gpu_ledger::analysis::median;
use gpu_ledger::internals::LedgerWriter;
use gpu_ledger::ledger::schema::{
    CopyGroup, DeviceIteration, IterationRow, KernelGroup, LaunchShape, LedgerLine, ScopeRow,
    SyncGroup,
};
use gpu_ledger::ledger::{
    ClockStats, EnergyEstimate, EnergyMethod, NvmlIterationSummary, PowerKind, PowerStats,
};

mod common;

/// Iterations per second the writer must sustain.
const TARGET_ROWS_PER_S: f64 = 10_000.0;

/// Rows per `ledger_writer` measurement.
const WRITER_ROWS: usize = 10_000;

const SCOPES: [&str; 10] = [
    "(unscoped)",
    "step",
    "step/data",
    "step/forward",
    "step/forward/attention",
    "step/forward/mlp",
    "step/backward",
    "step/backward/attention",
    "step/backward/mlp",
    "step/optimizer",
];

/// A realistic iteration row.
fn row(index: u64) -> IterationRow {
    let start = 1_000_000_000 + index * 25_000_000;
    let scopes = SCOPES
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let i = i as u64;
            ScopeRow {
                path: (*p).to_string(),
                calls: 1 + i % 3,
                host_ns: 1_200_000 + i * 311_017,
                launches: 4 + i * 3,
                kernels: 4 + i * 3,
                device_ns: 900_000 + i * 271_003,
                device_ns_inclusive: 1_100_000 + i * 401_009,
                event_device_ns: (i % 4 == 1).then_some(2_400_000 + i * 17),
            }
        })
        .collect();
    let kernels = KERNEL_NAMES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let i = i as u64;
            KernelGroup {
                name: (*name).to_string(),
                device_id: 0,
                shape: LaunchShape {
                    grid: [132 * (1 + i as u32 % 8), 1 + i as u32 % 3, 1],
                    block: [256, 1, 1],
                    cluster: [0, 0, 0],
                    registers_per_thread: 32 + 8 * (i as u32 % 6),
                    static_shared_bytes: if i % 3 == 0 { 16_384 } else { 0 },
                    dynamic_shared_bytes: if i % 5 == 0 { 98_304 } else { 0 },
                    local_bytes_per_thread: 0,
                },
                local_bytes_total: 0,
                count: 1 + i % 12,
                total_ns: 150_000 + i * 97_331,
                min_ns: 10_000 + i * 1_013,
                max_ns: 60_000 + i * 7_919,
                graph_launches: 0,
            }
        })
        .collect();
    let copy = |kind: &str, count: u64, bytes: u64, total_ns: u64| CopyGroup {
        device_id: 0,
        kind: kind.to_string(),
        count,
        bytes,
        total_ns,
    };
    let clock = |base: u32| ClockStats {
        min_mhz: base - 45,
        mean_mhz: f64::from(base) - 12.5,
        max_mhz: base,
        samples: 12,
    };
    IterationRow {
        index,
        host_start_ns: start,
        host_wall_ns: 24_871_337,
        complete: true,
        devices: vec![DeviceIteration {
            device_id: 0,
            first_start_ns: start + 120_000,
            last_end_ns: start + 24_500_000,
            busy_ns: 23_100_417,
            idle_ns: 1_279_583,
            largest_gap_ns: 310_211,
            kernel_count: 134,
            peak_memory_bytes: Some(61_203_283_968),
            idle: None,
        }],
        scopes,
        kernels,
        memcpy: vec![
            copy("HtoD", 2, 67_108_864, 1_412_331),
            copy("DtoH", 1, 4_096, 3_517),
        ],
        memset: vec![copy("memset", 3, 12_582_912, 21_771)],
        synchronization: vec![SyncGroup {
            kind: "stream".into(),
            count: 1,
            total_ns: 2_417_113,
        }],
        nvml: vec![NvmlIterationSummary {
            device_id: 0,
            window_ns: 24_871_337,
            samples: 12,
            coarse: false,
            sm_clock: Some(clock(1980)),
            mem_clock: Some(clock(2619)),
            power: Some(PowerStats {
                mean_w: 512.37,
                max_w: 611.8,
                samples: 12,
                kind: PowerKind::Instant,
            }),
            energy: Some(EnergyEstimate {
                joules: 12.743_118,
                method: EnergyMethod::EnergyCounter,
                counter_reads: 11,
                counter_span_ns: Some(20_004_117),
                power_samples: 14,
                integrated_joules: Some(12.701_993),
            }),
            temperature_max_c: Some(61),
            temperature_samples: 12,
            throttle_reasons: vec!["sw_power_cap".into()],
            throttle_samples: 12,
            memory_used_max_bytes: Some(71_303_168_000),
            memory_used_samples: 12,
            pcie_tx_bytes_per_s: Some(1.73e9),
            pcie_rx_bytes_per_s: Some(2.9e8),
            notes: Vec::new(),
        }],
        ..IterationRow::default()
    }
}

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
