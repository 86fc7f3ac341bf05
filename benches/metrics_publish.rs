//! The collector thread's cost per row with metrics on (feature `metrics`), side by side with
//! off. Publishing runs on the collector thread only: the launch path and `step()` do not
//! change, so the collector's work per row is what there is to measure.
//!
//! Groups (per row):
//! - `collector_row/{off,noop,prometheus}`: nine scopes closed in an iteration, the iteration
//!   ended and its row built and handed to the ledger by the profiler's own collector
//!   (`OfflineCollector`), with no metrics, with metrics and no recorder installed (the
//!   facade's no-op), and with metrics into a `metrics-exporter-prometheus` recorder;
//! - `publish/prometheus`: `Publisher::publish` alone on the realistic row (10 scopes, one
//!   device, a full NVML summary), steady state;
//! - `publish/first_row`: a new publisher's first row, every series registered.
//!
//! A thread runs the exporter's upkeep every 50 ms meanwhile, as its HTTP listener's task does
//! (histogram samples are drained there, off the collector thread).
//!
//! `cargo bench --features metrics --bench metrics_publish` (add `-- --quick` for a short
//! run); a summary of µs per row, wall and thread CPU, prints last.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::rows::{row, SCOPES};
use common::wall_and_cpu_medians;
use criterion::{criterion_group, BatchSize, Criterion, Throughput};
use gpu_ledger::internals::OfflineCollector;
use gpu_ledger::ledger::schema::Header;
use gpu_ledger::ledger::GpuRecord;
use gpu_ledger::metrics::{MetricsOptions, Publisher};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

mod common;

/// Rows per timed run of the summary.
const ROWS: u64 = 20_000;

/// The header of a one-GPU timeline run.
fn header() -> Header {
    let mut h = Header::default();
    h.config.level = "timeline".into();
    h.gpu_ledger_version = env!("CARGO_PKG_VERSION").into();
    h.environment.gpus = vec![GpuRecord {
        ordinal: 0,
        name: "NVIDIA H200".into(),
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000".into()),
        ..GpuRecord::default()
    }];
    h
}

/// A Prometheus recorder with the example's buckets, and its handle.
fn prometheus() -> (PrometheusRecorder, PrometheusHandle) {
    use gpu_ledger::metrics::{JOULES_BUCKETS, SECONDS_BUCKETS};
    use metrics_exporter_prometheus::Matcher;
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_joules".into()), JOULES_BUCKETS))
        .expect("valid buckets")
        .build_recorder();
    let handle = recorder.handle();
    (recorder, handle)
}

/// Runs the exporter's upkeep every 50 ms until dropped.
struct Upkeep(Arc<AtomicBool>, Option<std::thread::JoinHandle<()>>);

impl Upkeep {
    fn start(handle: PrometheusHandle) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                handle.run_upkeep();
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Upkeep(stop, Some(thread))
    }
}

impl Drop for Upkeep {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        if let Some(t) = self.1.take() {
            let _ = t.join();
        }
    }
}

/// What the collector does with metrics.
#[derive(Clone, Copy)]
enum Mode {
    Off,
    Noop,
    Prometheus,
}

/// The profiler's collector, driven one row at a time: nine scopes per iteration.
struct Rows {
    collector: OfflineCollector,
    paths: Vec<u32>,
    next: u64,
    _upkeep: Option<Upkeep>,
}

impl Rows {
    fn new(mode: Mode) -> Self {
        let mut collector = OfflineCollector::new(0);
        let mut upkeep = None;
        match mode {
            Mode::Off => {}
            Mode::Noop => {
                let p = Publisher::new(&MetricsOptions::default(), &header());
                collector = collector.with_metrics(p);
            }
            Mode::Prometheus => {
                let (recorder, handle) = prometheus();
                let options = MetricsOptions::default().with_recorder(Arc::new(recorder));
                collector = collector.with_metrics(Publisher::new(&options, &header()));
                upkeep = Some(Upkeep::start(handle));
            }
        }
        let paths = SCOPES[1..]
            .iter()
            .map(|p| collector.intern_path(p))
            .collect();
        Rows {
            collector,
            paths,
            next: 0,
            _upkeep: upkeep,
        }
    }

    /// One iteration: its scopes closed, its end, its row written. The number of rows
    /// written (1).
    fn one(&mut self) -> usize {
        let i = self.next;
        self.next += 1;
        let start = i * 10_000_000;
        for (k, &path) in self.paths.iter().enumerate() {
            let k = k as u64;
            self.collector
                .accept_scope(path, i, start + k * 1_000, start + 9_000_000 - k * 1_000);
        }
        self.collector
            .end_iteration(start + 10_000_000, start + 10_000_000, 0);
        self.collector.take_rows().len()
    }
}

fn bench_rows(c: &mut Criterion) {
    let mut group = c.benchmark_group("collector_row");
    group.throughput(Throughput::Elements(1));
    for (name, mode) in [
        ("off", Mode::Off),
        ("noop", Mode::Noop),
        ("prometheus", Mode::Prometheus),
    ] {
        let mut rows = Rows::new(mode);
        group.bench_function(name, |b| b.iter(|| rows.one()));
    }
    group.finish();

    let full = row(7);
    let mut group = c.benchmark_group("publish");
    group.throughput(Throughput::Elements(1));
    let (recorder, handle) = prometheus();
    let _upkeep = Upkeep::start(handle);
    let options = MetricsOptions::default().with_recorder(Arc::new(recorder));
    let mut publisher = Publisher::new(&options, &header());
    group.bench_function("prometheus", |b| {
        b.iter(|| publisher.publish(black_box(&full)))
    });
    group.bench_function("first_row", |b| {
        b.iter_batched(
            || {
                let (recorder, _) = prometheus();
                let options = MetricsOptions::default().with_recorder(Arc::new(recorder));
                Publisher::new(&options, &header())
            },
            |mut p| p.publish(black_box(&full)),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench_rows);

/// Median µs per row over the summary's runs: (wall, thread CPU).
fn per_row(mut one: impl FnMut()) -> (f64, Option<f64>) {
    let (wall, cpu) = wall_and_cpu_medians(
        || {
            let t0 = Instant::now();
            for _ in 0..ROWS {
                one();
            }
            t0.elapsed()
        },
        |ns| ns / ROWS as f64 / 1e3,
    );
    (wall, cpu)
}

fn summary() {
    let mut cases = Vec::new();
    for (case, mode) in [
        ("collector row, metrics off", Mode::Off),
        ("collector row, metrics on, no recorder", Mode::Noop),
        (
            "collector row, metrics on, Prometheus recorder",
            Mode::Prometheus,
        ),
    ] {
        let mut rows = Rows::new(mode);
        cases.push((case, per_row(|| assert_eq!(rows.one(), 1))));
    }
    let full = row(7);
    let (recorder, handle) = prometheus();
    let _upkeep = Upkeep::start(handle);
    let options = MetricsOptions::default().with_recorder(Arc::new(recorder));
    let mut publisher = Publisher::new(&options, &header());
    let publish = per_row(|| publisher.publish(black_box(&full)));
    cases.push(("publish alone, full row, Prometheus recorder", publish));
    println!();
    println!(
        "metrics publish summary: collector row = 9 scopes closed, the iteration ended, its row \
         built and sent; full row = 10 scopes, 1 device, NVML ({ROWS} rows per run, median of \
         {} runs)",
        common::SAMPLES
    );
    println!(
        "{:<48} {:>14} {:>14} {:>16}",
        "case", "µs/row (wall)", "µs/row (CPU)", "CPU vs off (µs)"
    );
    let off_cpu = cases[0].1 .1;
    for (case, (wall, cpu)) in &cases {
        let show = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.3}"));
        let added = match (cpu, off_cpu) {
            (Some(c), Some(o)) if case.starts_with("collector") => format!("{:+.3}", c - o),
            _ => String::new(),
        };
        println!("{case:<48} {wall:>14.3} {:>14} {added:>16}", show(*cpu));
    }
}

fn main() {
    common::run(benches, summary);
}
