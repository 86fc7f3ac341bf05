//! `gpu-ledger metrics`: a golden ledger's rows as Prometheus and OpenMetrics text, checked
//! against the ledger itself.

use std::collections::BTreeMap;

use gpu_ledger_format::read_ledger;

mod cli_common;
use cli_common::{data, run, stderr, stdout};

/// `series text → value` of a Prometheus text exposition (comments left out).
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("a sample line");
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|e| panic!("{l}: {e}")),
            };
            (series.to_string(), value)
        })
        .collect()
}

fn metrics(args: &[&str]) -> String {
    let o = run(args);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-12)
}

#[test]
fn metrics_prints_the_rows_as_prometheus_text_equal_to_the_ledger() {
    let path = data("v1-nested-scopes.jsonl");
    let ledger = read_ledger(&path).expect("a golden ledger");
    let text = metrics(&["metrics", &path.display().to_string()]);
    let s = samples(&text);
    let rows = &ledger.iterations;
    let steady: Vec<_> = rows.iter().filter(|r| !r.perturbed).collect();
    assert_eq!(s["gpu_ledger_iterations_total"], rows.len() as f64);
    let wall: f64 = steady.iter().map(|r| r.host_wall_ns as f64 / 1e9).sum();
    assert!(close(s["gpu_ledger_iteration_duration_seconds_sum"], wall));
    assert_eq!(
        s["gpu_ledger_iteration_duration_seconds_count"],
        steady.len() as f64
    );
    let uuid = ledger.header.environment.gpus[0].uuid.clone().unwrap();
    let dev = format!("{{device=\"0\",UUID=\"{uuid}\"}}");
    let busy: f64 = steady
        .iter()
        .map(|r| r.devices[0].busy_ns as f64 / 1e9)
        .sum();
    assert!(close(
        s[&format!("gpu_ledger_device_busy_seconds_sum{dev}")],
        busy
    ));
    let kernels: u64 = rows
        .iter()
        .flat_map(|r| &r.devices)
        .map(|d| d.kernel_count)
        .sum();
    assert_eq!(
        s[&format!("gpu_ledger_device_kernels_total{dev}")],
        kernels as f64
    );
    for path in ["step", "step/forward"] {
        let of = |r: &&gpu_ledger_format::IterationRow| {
            r.scopes
                .iter()
                .find(|x| x.path == path)
                .cloned()
                .unwrap_or_default()
        };
        let calls: u64 = rows.iter().map(|r| of(&r).calls).sum();
        let host: f64 = steady.iter().map(|r| of(r).host_ns as f64 / 1e9).sum();
        assert_eq!(
            s[&format!("gpu_ledger_scope_calls_total{{scope=\"{path}\"}}")],
            calls as f64
        );
        let key = format!("gpu_ledger_scope_host_seconds_sum{{scope=\"{path}\"}}");
        assert!(close(s[&key], host), "{path}: {} against {host}", s[&key]);
    }
    // Depth 2 by default: the third level is inside its ancestors.
    assert!(!text.contains("scope=\"step/forward/"), "{text}");
    // Gauges: the last row's figure.
    let last = rows.last().unwrap().nvml[0].power.as_ref().unwrap().mean_w;
    assert_eq!(s[&format!("gpu_ledger_hw_gpu_power_watts{dev}")], last);
    // The same ledger prints the same text.
    assert_eq!(text, metrics(&["metrics", &path.display().to_string()]));
}

#[test]
fn metrics_takes_the_runs_scope_options_and_prints_openmetrics() {
    let path = data("v1-nested-scopes.jsonl").display().to_string();
    let text = metrics(&[
        "metrics",
        &path,
        "--scope-depth",
        "1",
        "--scope",
        "step/forward/attention",
    ]);
    let scopes: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("gpu_ledger_scope_calls_total"))
        .collect();
    assert_eq!(
        scopes.len(),
        3,
        "(unscoped), step and the named path: {scopes:?}"
    );
    assert!(text.contains("scope=\"step/forward/attention\""));
    let om = metrics(&["metrics", &path, "--format", "openmetrics"]);
    assert!(om.ends_with("# EOF\n"));
    assert!(om.contains("# TYPE gpu_ledger_iterations counter\n"));
    assert!(om.contains("# UNIT gpu_ledger_iteration_duration_seconds seconds\n"));
    let none = metrics(&["metrics", &path, "--no-histograms"]);
    assert!(!none.contains("_bucket{"));
}
