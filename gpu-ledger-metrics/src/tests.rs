//! The mapping's tests: rows in, series read back from a [`MemoryRecorder`].

use std::sync::Arc;

use gpu_ledger_format::nvml::{
    ClockStats, EnergyEstimate, EnergyMethod, NvmlIterationSummary, PowerKind, PowerStats,
};
use gpu_ledger_format::schema::{DeviceIteration, Header, IterationRow, RankInfo, ScopeRow};
use gpu_ledger_format::GpuRecord;

use crate::names::*;
use crate::{
    Kind, Labels, MemoryRecorder, MetricsOptions, Publisher, Rows, TextFormat, Value, METRICS,
};

fn header(level: &str) -> Header {
    let mut h = Header::default();
    h.config.level = level.into();
    h.gpu_ledger_version = "0.1.0".into();
    h.environment.gpus = vec![GpuRecord {
        ordinal: 0,
        name: "NVIDIA H200".into(),
        uuid: Some("GPU-0a1b".into()),
        ..GpuRecord::default()
    }];
    h
}

fn publisher(level: &str, options: MetricsOptions) -> (Publisher, MemoryRecorder) {
    let rec = MemoryRecorder::new();
    let options = options.with_recorder(Arc::new(rec.clone()));
    (Publisher::new(&options, &header(level)), rec)
}

fn scope(path: &str, calls: u64, host_ns: u64, device_ns: u64) -> ScopeRow {
    ScopeRow {
        path: path.into(),
        calls,
        host_ns,
        device_ns_inclusive: device_ns,
        ..ScopeRow::default()
    }
}

fn nvml(joules: f64) -> NvmlIterationSummary {
    NvmlIterationSummary {
        device_id: 0,
        samples: 5,
        sm_clock: Some(ClockStats {
            min_mhz: 1900,
            mean_mhz: 1980.0,
            max_mhz: 1980,
            samples: 5,
        }),
        mem_clock: Some(ClockStats {
            min_mhz: 2619,
            mean_mhz: f64::NAN,
            max_mhz: 2619,
            samples: 0,
        }),
        power: Some(PowerStats {
            mean_w: 512.5,
            max_w: 600.0,
            samples: 5,
            kind: PowerKind::Instant,
        }),
        energy: Some(EnergyEstimate {
            joules,
            method: EnergyMethod::EnergyCounter,
            counter_reads: 3,
            counter_span_ns: None,
            power_samples: 5,
            integrated_joules: None,
        }),
        temperature_max_c: Some(61),
        throttle_reasons: vec!["sw_power_cap".into(), "gpu_idle".into()],
        throttle_samples: 5,
        memory_used_max_bytes: Some(1 << 30),
        pcie_tx_bytes_per_s: Some(1.5e9),
        pcie_rx_bytes_per_s: None,
        ..NvmlIterationSummary::default()
    }
}

/// A traced row of iteration `index`: 10 ms, device 0 busy 6 ms and idle 1 ms in an 8 ms
/// window, two scopes, NVML with 2.5 J.
fn traced(index: u64) -> IterationRow {
    IterationRow {
        index,
        host_wall_ns: 10_000_000,
        complete: true,
        devices: vec![DeviceIteration {
            device_id: 0,
            first_start_ns: 1_000,
            last_end_ns: 8_001_000,
            busy_ns: 6_000_000,
            idle_ns: 1_000_000,
            kernel_count: 7,
            ..DeviceIteration::default()
        }],
        scopes: vec![
            scope("step", 1, 9_000_000, 6_000_000),
            scope("step/forward", 2, 3_000_000, 2_000_000),
        ],
        dropped_records: 3,
        missing_records: 1,
        tracing_added_ns: Some(20_000),
        nvml: vec![nvml(2.5)],
        ..IterationRow::default()
    }
}

fn count(rec: &MemoryRecorder, name: &str, labels: &[(&str, &str)]) -> Option<u64> {
    match rec.value(name, labels)? {
        Value::Counter(n) => Some(n),
        v => panic!("{name} is not a counter: {v:?}"),
    }
}

fn gauge(rec: &MemoryRecorder, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    match rec.value(name, labels)? {
        Value::Gauge(v) => Some(v),
        v => panic!("{name} is not a gauge: {v:?}"),
    }
}

/// A histogram's count and sum.
fn hist(rec: &MemoryRecorder, name: &str, labels: &[(&str, &str)]) -> Option<(u64, f64)> {
    match rec.value(name, labels)? {
        Value::Histogram { count, sum, .. } => Some((count, sum)),
        v => panic!("{name} is not a histogram: {v:?}"),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn a_traced_row_publishes_every_figure_in_base_units() {
    let (mut p, rec) = publisher("timeline", MetricsOptions::default());
    p.publish(&traced(0));
    p.publish(&traced(1));
    let dev = [("device", "0"), ("UUID", "GPU-0a1b")];
    assert_eq!(count(&rec, ITERATIONS, &[]), Some(2));
    assert_eq!(gauge(&rec, ITERATION_INDEX, &[]), Some(1.0));
    let (n, sum) = hist(&rec, ITERATION_DURATION, &[]).expect("durations");
    assert!(n == 2 && close(sum, 0.02), "{n} {sum}");
    assert_eq!(count(&rec, DROPPED_RECORDS, &[]), Some(6));
    assert_eq!(count(&rec, MISSING_RECORDS, &[]), Some(2));
    assert!(close(hist(&rec, TRACING_ADDED, &[]).unwrap().1, 40e-6));
    assert_eq!(count(&rec, DEVICE_KERNELS, &dev), Some(14));
    assert!(close(hist(&rec, DEVICE_BUSY, &dev).unwrap().1, 0.012));
    assert!(close(hist(&rec, DEVICE_IDLE, &dev).unwrap().1, 0.002));
    assert!(close(gauge(&rec, DEVICE_BUSY_RATIO, &dev).unwrap(), 0.6));
    assert!(close(gauge(&rec, DEVICE_IDLE_RATIO, &dev).unwrap(), 0.125));
    let fwd = [("scope", "step/forward")];
    assert_eq!(count(&rec, SCOPE_CALLS, &fwd), Some(4));
    assert!(close(hist(&rec, SCOPE_HOST, &fwd).unwrap().1, 0.006));
    assert!(close(hist(&rec, SCOPE_DEVICE, &fwd).unwrap().1, 0.004));
    assert_eq!(gauge(&rec, GPU_SM_CLOCK, &dev), Some(1.98e9));
    assert_eq!(
        gauge(&rec, GPU_MEMORY_CLOCK, &dev),
        None,
        "a NaN mean is no figure"
    );
    assert_eq!(gauge(&rec, GPU_POWER, &dev), Some(512.5));
    assert_eq!(hist(&rec, GPU_ENERGY, &dev), Some((2, 5.0)));
    assert_eq!(hist(&rec, ITERATION_ENERGY, &[]), Some((2, 5.0)));
    assert_eq!(gauge(&rec, GPU_TEMPERATURE, &dev), Some(61.0));
    assert_eq!(gauge(&rec, GPU_MEMORY_USAGE, &dev), Some(1073741824.0));
    let tx = [("device", "0"), ("direction", "transmit")];
    assert_eq!(gauge(&rec, GPU_PCIE, &tx), Some(1.5e9));
    assert_eq!(gauge(&rec, GPU_PCIE, &[("direction", "receive")]), None);
    let cap = [("device", "0"), ("reason", "sw_power_cap")];
    assert_eq!(count(&rec, GPU_THROTTLE, &cap), Some(2));
    assert_eq!(count(&rec, GPU_NVML_COARSE, &dev), Some(0));
    let info = [("version", "0.1.0"), ("level", "timeline")];
    assert_eq!(gauge(&rec, RUN_INFO, &info), Some(1.0));
    let name = [("UUID", "GPU-0a1b"), ("name", "NVIDIA H200")];
    assert_eq!(gauge(&rec, DEVICE_INFO, &name), Some(1.0));
}

/// Series of any metric that only traced rows feed.
fn traced_only(rec: &MemoryRecorder) -> Vec<String> {
    let traced: Vec<&str> = METRICS
        .iter()
        .filter(|m| matches!(m.rows, Rows::Traced | Rows::TracedNotPerturbed))
        .map(|m| m.name)
        .collect();
    rec.series()
        .into_iter()
        .filter(|s| traced.contains(&s.name.as_str()))
        .map(|s| s.name)
        .collect()
}

#[test]
fn an_untraced_row_publishes_its_scopes_and_nvml_and_nothing_it_lacks() {
    let (mut p, rec) = publisher("timeline", MetricsOptions::default());
    let mut row = traced(0);
    row.untraced = true;
    row.devices.clear();
    row.dropped_records = 0;
    row.missing_records = 0;
    row.tracing_added_ns = None;
    p.publish(&row);
    assert_eq!(traced_only(&rec), Vec::<String>::new());
    assert_eq!(count(&rec, ITERATIONS_UNTRACED, &[]), Some(1));
    assert_eq!(count(&rec, SCOPE_CALLS, &[("scope", "step")]), Some(1));
    assert!(close(
        hist(&rec, SCOPE_HOST, &[("scope", "step")]).unwrap().1,
        0.009
    ));
    assert_eq!(gauge(&rec, GPU_POWER, &[("device", "0")]), Some(512.5));
    // A traced row after it: the device series appear, with that row's figures only.
    p.publish(&traced(1));
    assert_eq!(count(&rec, DEVICE_KERNELS, &[("device", "0")]), Some(7));
    assert_eq!(hist(&rec, SCOPE_DEVICE, &[("scope", "step")]).unwrap().0, 1);
}

#[test]
fn at_the_scopes_level_no_device_figure_is_published() {
    let (mut p, rec) = publisher("scopes", MetricsOptions::default());
    let mut row = traced(0);
    row.devices.clear();
    row.nvml.clear();
    row.scopes[0].event_device_ns = Some(8_000_000);
    p.publish(&row);
    assert_eq!(traced_only(&rec), Vec::<String>::new());
    let step = [("scope", "step")];
    assert_eq!(hist(&rec, SCOPE_EVENT_DEVICE, &step), Some((1, 0.008)));
    assert_eq!(count(&rec, ITERATIONS_UNTRACED, &[]), Some(0));
}

#[test]
fn a_perturbed_row_is_counted_and_its_times_stay_out_of_the_histograms() {
    let (mut p, rec) = publisher("counters", MetricsOptions::default());
    p.publish(&traced(0));
    let mut row = traced(1);
    row.perturbed = true;
    p.publish(&row);
    assert_eq!(count(&rec, ITERATIONS, &[]), Some(2));
    assert_eq!(count(&rec, ITERATIONS_PERTURBED, &[]), Some(1));
    assert_eq!(hist(&rec, ITERATION_DURATION, &[]).unwrap().0, 1);
    assert_eq!(hist(&rec, DEVICE_BUSY, &[]).unwrap().0, 1);
    assert_eq!(hist(&rec, GPU_ENERGY, &[]).unwrap().0, 1);
    assert_eq!(
        count(&rec, DEVICE_KERNELS, &[]),
        Some(14),
        "counts are counts"
    );
    assert_eq!(count(&rec, SCOPE_CALLS, &[("scope", "step")]), Some(2));
}

#[test]
fn energy_per_iteration_needs_a_finite_figure_on_every_device() {
    let (mut p, rec) = publisher("timeline", MetricsOptions::default());
    let mut row = traced(0);
    let mut second = nvml(1.0);
    second.device_id = 1;
    row.nvml.push(second);
    p.publish(&row);
    assert_eq!(hist(&rec, ITERATION_ENERGY, &[]), Some((1, 3.5)));
    row.nvml[1].energy.as_mut().unwrap().joules = f64::NAN;
    p.publish(&row);
    assert_eq!(hist(&rec, ITERATION_ENERGY, &[]), Some((1, 3.5)));
    assert_eq!(hist(&rec, GPU_ENERGY, &[("device", "1")]), Some((1, 1.0)));
    // A device the header does not list has an empty UUID.
    assert_eq!(hist(&rec, GPU_ENERGY, &[("UUID", "")]), Some((1, 1.0)));
}

fn scope_labels(rec: &MemoryRecorder) -> Vec<String> {
    let mut v: Vec<String> = rec
        .series()
        .into_iter()
        .filter(|s| s.name == SCOPE_CALLS)
        .map(|s| s.label("scope").unwrap().to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn scopes_past_the_depth_or_the_limit_fold_into_other_or_their_ancestors() {
    let options = MetricsOptions {
        scope_depth: 2,
        max_scopes: 3,
        scopes: vec!["a/b/c".into()],
        ..MetricsOptions::default()
    };
    let (mut p, rec) = publisher("scopes", options);
    let mut row = traced(0);
    // Listed deepest first: admission still goes shallowest first.
    row.scopes = [
        "a/b/c",
        "a/b/d",
        "a/b",
        "a",
        "b",
        "c",
        "d",
        "e",
        "(unscoped)",
    ]
    .iter()
    .map(|path| scope(path, 1, 1_000_000, 0))
    .collect();
    p.publish(&row);
    p.publish(&row);
    assert_eq!(
        scope_labels(&rec),
        ["(other)", "(unscoped)", "a", "a/b/c", "b", "c"]
    );
    // `d` and `e` are summed into (other); `a/b` (the limit was full) and `a/b/d` (too deep)
    // are inside `a`.
    assert_eq!(count(&rec, SCOPE_CALLS, &[("scope", "(other)")]), Some(4));
    let (n, sum) = hist(&rec, SCOPE_HOST, &[("scope", "(other)")]).unwrap();
    assert!(n == 2 && close(sum, 0.004), "{n} {sum}");
    assert_eq!(count(&rec, SCOPE_ROWS_UNPUBLISHED, &[]), Some(8));
}

#[test]
fn the_scope_label_stays_bounded_over_any_number_of_paths() {
    let options = MetricsOptions {
        max_scopes: 16,
        scopes: vec!["x/y".into()],
        ..MetricsOptions::default()
    };
    let bound = options.max_scopes + options.scopes.len() + 2;
    let (mut p, rec) = publisher("timeline", options);
    for i in 0..500u64 {
        let mut row = traced(i);
        row.scopes = vec![
            scope(&format!("top{i}"), 1, 1, 1),
            scope(&format!("top{i}/child"), 1, 1, 1),
            scope("x/y", 1, 1, 1),
            scope("(unscoped)", 0, 0, 1),
        ];
        p.publish(&row);
    }
    let labels = scope_labels(&rec);
    assert_eq!(labels.len(), bound, "{labels:?}");
    for metric in [SCOPE_HOST, SCOPE_DEVICE] {
        let n = rec.series().iter().filter(|s| s.name == metric).count();
        assert!(n <= bound, "{metric}: {n} series");
    }
    assert_eq!(count(&rec, SCOPE_CALLS, &[("scope", "x/y")]), Some(500));
}

#[test]
fn scope_depth_zero_publishes_no_scope_metric() {
    let options = MetricsOptions {
        scope_depth: 0,
        ..MetricsOptions::default()
    };
    let (mut p, rec) = publisher("timeline", options);
    p.publish(&traced(0));
    assert!(rec.series().iter().all(|s| !s.name.contains("scope")));
}

#[test]
fn without_histograms_only_counters_and_gauges_are_published() {
    let options = MetricsOptions {
        histograms: false,
        ..MetricsOptions::default()
    };
    let (mut p, rec) = publisher("timeline", options);
    p.publish(&traced(0));
    let series = rec.series();
    assert!(series.iter().all(|s| s.value.kind() != Kind::Histogram));
    assert!(series.iter().any(|s| s.name == DEVICE_BUSY_RATIO));
}

#[test]
fn a_rank_labels_every_series() {
    let rec = MemoryRecorder::new();
    let options = MetricsOptions::default().with_recorder(Arc::new(rec.clone()));
    let mut h = header("timeline");
    h.rank = Some(RankInfo {
        rank: 3,
        ..RankInfo::default()
    });
    Publisher::new(&options, &h).publish(&traced(0));
    let series = rec.series();
    assert!(series.len() > 20);
    for s in series {
        assert_eq!(s.label("rank"), Some("3"), "{s:?}");
    }
}

#[test]
fn a_recorder_installed_later_gets_the_rows_from_then_on_with_their_descriptions() {
    // No explicit recorder: the publisher follows the facade's current one, here the
    // thread-local one of each closure.
    let mut p = Publisher::new(&MetricsOptions::default(), &header("timeline"));
    p.publish(&traced(0));
    let (first, second) = (MemoryRecorder::new(), MemoryRecorder::new());
    metrics::with_local_recorder(&first, || p.publish(&traced(1)));
    metrics::with_local_recorder(&second, || {
        p.publish(&traced(2));
        p.publish(&traced(3));
    });
    assert_eq!(count(&first, ITERATIONS, &[]), Some(1));
    assert_eq!(count(&second, ITERATIONS, &[]), Some(2));
    let text = second.render(TextFormat::Prometheus);
    assert!(text.contains("# HELP gpu_ledger_iterations_total Iteration rows published"));
    assert!(text.contains("gpu_ledger_run_info{version=\"0.1.0\",level=\"timeline\"} 1.0"));
}

#[test]
fn names_carry_their_units_and_types_as_prometheus_asks() {
    let valid = |n: &str| {
        n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !n.starts_with(|c: char| c.is_ascii_digit())
    };
    for m in METRICS {
        assert!(
            m.name.starts_with("gpu_ledger_") && valid(m.name),
            "{}",
            m.name
        );
        assert_eq!(
            m.kind == Kind::Counter,
            m.name.ends_with("_total"),
            "{}",
            m.name
        );
        if m.kind == Kind::Histogram {
            let unit = m.name.ends_with("_seconds") || m.name.ends_with("_joules");
            assert!(unit, "{}: a histogram's name ends with its unit", m.name);
        }
        match m.unit {
            Some(metrics::Unit::Seconds) => assert!(m.name.ends_with("_seconds"), "{}", m.name),
            Some(metrics::Unit::Bytes) => assert!(m.name.ends_with("_bytes"), "{}", m.name),
            Some(metrics::Unit::Count) => assert!(m.name.ends_with("_total"), "{}", m.name),
            Some(u) => panic!("{}: unit {u:?} has no suffix rule", m.name),
            None => {}
        }
        let help_ok = !m.help.is_empty() && !m.help.contains(['"', '\n', '\\']);
        assert!(help_ok, "{}: help must be plain text", m.name);
        if let Labels::DeviceAnd(extra) = m.labels {
            assert!(valid(extra));
        }
    }
    let mut names: Vec<&str> = METRICS.iter().map(|m| m.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), METRICS.len(), "names are unique");
}

#[test]
fn histograms_fill_cumulative_buckets_by_their_unit() {
    let (mut p, rec) = publisher("scopes", MetricsOptions::default());
    p.publish(&traced(0)); // 10 ms
    let Some(Value::Histogram { buckets, .. }) = rec.value(ITERATION_DURATION, &[]) else {
        panic!("no histogram");
    };
    let at = |le: f64| buckets.iter().find(|b| b.0 == le).map(|b| b.1);
    assert_eq!((at(5e-3), at(0.01), at(60.0)), (Some(0), Some(1), Some(1)));
    assert_eq!(buckets.len(), crate::SECONDS_BUCKETS.len());
}

#[test]
fn text_formats_render_families_and_openmetrics_ends_with_eof() {
    let (mut p, rec) = publisher("timeline", MetricsOptions::default());
    p.publish(&traced(0));
    let prom = rec.render(TextFormat::Prometheus);
    assert!(prom
        .contains("# TYPE gpu_ledger_iterations_total counter\ngpu_ledger_iterations_total 1\n"));
    assert!(prom.contains("gpu_ledger_iteration_duration_seconds_bucket{le=\"0.01\"} 1\n"));
    assert!(prom.contains("gpu_ledger_iteration_duration_seconds_bucket{le=\"+Inf\"} 1\n"));
    assert!(prom.contains("gpu_ledger_device_kernels_total{device=\"0\",UUID=\"GPU-0a1b\"} 7\n"));
    assert!(!prom.contains("# EOF"));
    let om = rec.render(TextFormat::OpenMetrics);
    assert!(om.contains("# TYPE gpu_ledger_iterations counter\ngpu_ledger_iterations_total 1\n"));
    assert!(om.contains("# UNIT gpu_ledger_iteration_duration_seconds seconds\n"));
    assert!(om.contains("# UNIT gpu_ledger_hw_gpu_power_watts watts\n"));
    assert!(om.ends_with("# EOF\n"));
    // Each family once, in name order.
    let types: Vec<&str> = prom.lines().filter(|l| l.starts_with("# TYPE")).collect();
    let mut sorted = types.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(types, sorted);
}

#[test]
fn label_values_are_escaped() {
    let (mut p, rec) = publisher("scopes", MetricsOptions::default());
    let mut row = traced(0);
    row.scopes = vec![scope("say \"hi\"\\now", 1, 1, 0)];
    p.publish(&row);
    let text = rec.render(TextFormat::Prometheus);
    assert!(
        text.contains(r#"gpu_ledger_scope_calls_total{scope="say \"hi\"\\now"} 1"#),
        "{text}"
    );
}

#[test]
fn idle_time_is_published_by_cause_summed_over_details_and_only_where_the_row_splits_it() {
    use gpu_ledger_format::idle::{IdleBreakdown, IdleCause};
    let part = |cause: &str, detail: &str, ns: u64| IdleCause {
        cause: cause.into(),
        detail: Some(detail.into()),
        rule: "scope_open".into(),
        ns,
        gaps: 1,
    };
    let (mut p, rec) = publisher("timeline", MetricsOptions::default());
    // A row without the split publishes no cause.
    p.publish(&traced(0));
    assert_eq!(rec.value(DEVICE_IDLE_CAUSE, &[("device", "0")]), None);
    let mut row = traced(1);
    row.devices[0].idle = Some(IdleBreakdown {
        causes: vec![
            part("host_launch", "step/data", 600_000),
            part("host_launch", "blocked:synchronize", 100_000),
            part("launch_latency", "", 300_000),
        ],
        ..IdleBreakdown::default()
    });
    p.publish(&row);
    let cause = |c: &str| hist(&rec, DEVICE_IDLE_CAUSE, &[("device", "0"), ("cause", c)]);
    let (n, sum) = cause("host_launch").expect("host_launch published");
    assert_eq!(n, 1, "one observation per cause and row");
    assert!(close(sum, 0.0007), "{sum}");
    assert!(close(cause("launch_latency").unwrap().1, 0.0003));
    assert_eq!(cause("dependency"), None, "no cause the row does not name");
    // The labels carry causes, never details.
    for s in rec.series().iter().filter(|s| s.name == DEVICE_IDLE_CAUSE) {
        let keys: Vec<&str> = s.labels.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["device", "UUID", "cause"], "{:?}", s.labels);
    }
    // A perturbed row's idle times stay out, as its other times do.
    row.perturbed = true;
    p.publish(&row);
    assert_eq!(cause("host_launch").unwrap().0, 1);
}

/// The README's list of series is the one a dashboard is built from: every metric published is
/// in it, and it names none that is not.
#[test]
fn the_readme_lists_every_series_and_no_other() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("the workspace README");
    let start = readme
        .find("## Metrics for dashboards")
        .expect("the README's metrics section");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    for m in METRICS.iter().filter(|m| m.rows != Rows::Reserved) {
        assert!(
            section.contains(&format!("`{}`", m.name)),
            "README misses {}",
            m.name
        );
    }
    for word in section.split('`').filter(|w| w.starts_with("gpu_ledger_")) {
        let base = word.split(['{', '[', '(']).next().unwrap();
        let known = METRICS.iter().any(|m| {
            base == m.name
                || ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|s| base.strip_suffix(s) == Some(m.name))
        });
        assert!(known, "README names {word}, which is not published");
    }
}
