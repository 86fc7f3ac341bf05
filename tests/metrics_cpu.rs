//! Feature `metrics` end to end at the scopes level (no GPU, no CUPTI): the rows the profiler
//! writes and the metrics its collector publishes are the same figures.

use std::sync::Arc;
use std::time::Duration;

use gpu_ledger::ledger::schema::IterationRow;
use gpu_ledger::metrics::{names, MemoryRecorder, MetricsOptions, Value, METRICS};
use gpu_ledger::{read_ledger, Level, Profiler};
use parking_lot::Mutex;

/// One profiler per process at a time: tests in this binary take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn builder(path: &std::path::Path) -> gpu_ledger::ProfilerBuilder {
    Profiler::builder()
        .level(Level::Scopes)
        .nvml(false)
        .ledger_path(path)
        .settle(Duration::from_millis(200))
}

/// `iterations` steps of `step/{forward,backward/deep}`, and `log` in every third.
fn train(profiler: &Profiler, iterations: u64) {
    for i in 0..iterations {
        {
            let _step = Profiler::scope("step");
            {
                let _f = Profiler::scope("forward");
                std::thread::sleep(Duration::from_micros(300));
            }
            let _b = Profiler::scope("backward");
            let _d = Profiler::scope("deep");
        }
        if i % 3 == 0 {
            let _l = Profiler::scope("log");
        }
        profiler.step();
    }
}

fn count(rec: &MemoryRecorder, name: &str, labels: &[(&str, &str)]) -> u64 {
    match rec.value(name, labels) {
        Some(Value::Counter(n)) => n,
        v => panic!("{name} {labels:?}: {v:?}"),
    }
}

fn histogram(rec: &MemoryRecorder, name: &str, labels: &[(&str, &str)]) -> (u64, f64) {
    match rec.value(name, labels) {
        Some(Value::Histogram { count, sum, .. }) => (count, sum),
        v => panic!("{name} {labels:?}: {v:?}"),
    }
}

/// Σ over the rows of `f`, in seconds, added in row order as the publisher adds them.
fn seconds(rows: &[IterationRow], f: impl Fn(&IterationRow) -> Option<u64>) -> f64 {
    rows.iter()
        .filter_map(f)
        .fold(0.0, |s, ns| s + ns as f64 / 1e9)
}

#[test]
fn the_published_metrics_equal_the_ledgers_rows() {
    let _turn = SERIAL.lock();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    let rec = MemoryRecorder::new();
    let options = MetricsOptions::default().with_recorder(Arc::new(rec.clone()));
    let profiler = builder(&path).metrics(options).start().unwrap();
    train(&profiler, 30);
    let summary = profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    let rows = &ledger.iterations;
    assert_eq!(rows.len(), 30);
    assert_eq!(count(&rec, names::ITERATIONS, &[]), 30);
    let (n, wall) = histogram(&rec, names::ITERATION_DURATION, &[]);
    assert_eq!(n, 30);
    assert_eq!(wall, seconds(rows, |r| Some(r.host_wall_ns)));
    for path in ["step", "step/forward", "step/backward", "log"] {
        let of = |r: &IterationRow| r.scopes.iter().find(|s| s.path == path).cloned();
        let calls: u64 = rows.iter().filter_map(of).map(|s| s.calls).sum();
        let label = [("scope", path)];
        assert_eq!(count(&rec, names::SCOPE_CALLS, &label), calls, "{path}");
        let host = seconds(rows, |r| of(r).map(|s| s.host_ns));
        let (n, sum) = histogram(&rec, names::SCOPE_HOST, &label);
        assert_eq!(sum, host, "{path}");
        assert_eq!(n, rows.iter().filter(|r| of(r).is_some()).count() as u64);
    }
    // The third level is inside `step/backward`: counted, with no series.
    let deep = rows
        .iter()
        .filter(|r| r.scopes.iter().any(|s| s.path == "step/backward/deep"));
    assert_eq!(
        count(&rec, names::SCOPE_ROWS_UNPUBLISHED, &[]),
        deep.count() as u64
    );
    assert!(rec
        .value(names::SCOPE_CALLS, &[("scope", "step/backward/deep")])
        .is_none());
    // The scopes level has no device figures: none is published, not even as zero.
    let device: Vec<&str> = METRICS
        .iter()
        .filter(|m| m.name.contains("device_") && m.name != names::SCOPE_EVENT_DEVICE)
        .map(|m| m.name)
        .collect();
    assert!(rec
        .series()
        .iter()
        .all(|s| !device.contains(&s.name.as_str())));
    let info = [("level", "scopes")];
    assert_eq!(rec.value(names::RUN_INFO, &info), Some(Value::Gauge(1.0)));
    // The ledger says that it was published, and what publishing cost the collector.
    assert_eq!(
        ledger.header.config.metrics.as_deref(),
        Some("scope depth 2, 64 scopes, histograms, explicit recorder")
    );
    assert!(summary.trailer.overhead.metrics_publish_ns > 0);
}

#[test]
fn without_metrics_the_ledger_has_no_trace_of_them() {
    let _turn = SERIAL.lock();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    let profiler = builder(&path).start().unwrap();
    train(&profiler, 3);
    let summary = profiler.finish().unwrap();
    assert_eq!(summary.trailer.overhead.metrics_publish_ns, 0);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        !text.contains("\"metrics\":") && !text.contains("metrics_publish_ns"),
        "{text}"
    );
}

#[test]
fn the_global_recorder_receives_the_rows_from_the_collector_thread() {
    let _turn = SERIAL.lock();
    // What an exporter's install() does; once per process, so only this test does it.
    let rec = MemoryRecorder::new();
    gpu_ledger::metrics::metrics::set_global_recorder(rec.clone()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let profiler = builder(&dir.path().join("run.jsonl"))
        .metrics(MetricsOptions::default())
        .start()
        .unwrap();
    train(&profiler, 5);
    profiler.finish().unwrap();
    assert_eq!(count(&rec, names::ITERATIONS, &[]), 5);
    assert_eq!(count(&rec, names::SCOPE_CALLS, &[("scope", "log")]), 2);
}
