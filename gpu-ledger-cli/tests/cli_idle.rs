//! The `gpu-ledger` commands on the golden ledger whose rows split idle time by cause
//! (`tests/data/v1-idle-causes.jsonl`): summary, report, trace and compare show it, held whole
//! and streamed alike.

mod cli_common;
use cli_common::{data, run, stderr, stdout};

fn idle() -> String {
    data("v1-idle-causes.jsonl").display().to_string()
}

#[test]
fn summary_shows_the_causes_and_the_warning_held_or_streamed() {
    let held = run(&["summary", &idle()]);
    assert!(held.status.success(), "{}", stderr(&held));
    let text = stdout(&held);
    assert!(text.contains("### Idle time by cause"), "{text}");
    assert!(text.contains("| 0 | host_launch (scope) | 1.20 ms | 1.23 ms | 48.3% | 9 |"));
    assert!(text.contains("#### Host calls in the iterations used"));
    assert!(text.contains("- GPU 0: idle 25 % of the host wall time"));
    let streamed = run(&["--hold-bytes", "0", "summary", &idle()]);
    assert_eq!(stdout(&streamed), text, "the streamed summary is the same");
}

#[test]
fn report_and_trace_show_the_chart_the_gaps_and_the_slices() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    let o = run(&["report", &idle(), "-o", &html.display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(html).unwrap();
    assert!(html.contains("<svg id=\"chart-idle-causes\""));
    assert!(html.contains("<table id=\"idle-gaps\">"));
    let json = dir.path().join("t.json");
    let o = run(&["trace", &idle(), "-o", &json.display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
    assert_eq!(v["otherData"]["idle_gaps"], 28);
}

#[test]
fn compare_tables_the_causes_of_both_sides() {
    let o = run(&[
        "compare",
        &idle(),
        &idle(),
        "--seed",
        "7",
        "--resamples",
        "200",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("### Idle time by cause (median per iteration)"),
        "{text}"
    );
    assert!(text.contains("| 0 | host_launch (scope) | 1.20 ms | 1.20 ms | 0 | 48.3% | 48.3% |"));
}
