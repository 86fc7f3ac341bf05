//! Idle time by cause in the summary and its warning, the HTML report and the trace, on the golden ledger built for it
//! (`tests/data/v1-idle-causes.jsonl`: steady rows idle 2.5 ms of 10 ms, host_launch in scope
//! step/data 1.2 ms of it; a warm-up row with 5 ms unknown; an untraced row) and on ledgers
//! without a split, which must show nothing of it.

use gpu_ledger_format::reader::Ledger;
use gpu_ledger_tools::export::summary::LARGEST_GAPS_KEPT;
use gpu_ledger_tools::export::trace::{write_trace, TraceOptions};
use gpu_ledger_tools::export::{
    markdown_summary, write_html_report, LedgerSummary, ReportBuilder, ReportOptions,
    SummaryBuilder, SummaryOptions,
};

mod export_common;
use export_common::read;

const IDLE: &str = "v1-idle-causes.jsonl";

/// An inventory line as compared: kind, scope, count, bytes, synchronous.
type Inventoried<'a> = (&'a str, &'a str, u64, Option<u64>, Option<u64>);

/// A cause's change as compared: cause, detail, median A, median B, B − A.
type CauseChange<'a> = (
    &'a str,
    Option<&'a str>,
    Option<f64>,
    Option<f64>,
    Option<f64>,
);

fn summary(l: &Ledger) -> LedgerSummary {
    LedgerSummary::compute(l, &SummaryOptions::default())
}

#[test]
fn the_summary_tables_idle_time_by_cause_over_the_steady_state() {
    let l = read(IDLE);
    let s = summary(&l);
    assert_eq!(s.used.len(), 8, "warm-up 0 and untraced 6 left out");
    let i = s.idle.as_ref().expect("rows split idle time");
    let d = &i.devices[0];
    assert_eq!((d.device_id, d.iterations), (0, 8));
    assert_eq!(d.idle_ns.median, 2_500_000.0);
    assert!((d.idle_share_of_wall.unwrap() - 20_100_000.0 / 80_000_000.0).abs() < 1e-12);
    assert_eq!(d.copy_only_ns.median, 150_000.0);
    assert_eq!(d.copy_overlapped_ns.median, 500_000.0);
    assert_eq!(d.compute_idle_ns.median, 2_650_000.0);
    assert_eq!(d.lead_in_ns.as_ref().unwrap().median, 300_000.0);
    assert_eq!(d.floor, Some((4_000, "calibration".into())));
    let causes: Vec<(&str, Option<&str>, u64, u64)> = i
        .causes
        .iter()
        .map(|c| (c.cause.as_str(), c.detail.as_deref(), c.total_ns, c.gaps))
        .collect();
    assert_eq!(
        causes,
        [
            ("host_launch", Some("scope"), 9_700_000, 9),
            ("launch_latency", None, 4_800_000, 1200),
            ("dependency", None, 3_200_000, 16),
            ("host_launch", Some("blocked:synchronize"), 2_400_000, 8),
        ],
        "the warm-up row's unknown 5 ms is not in the steady state"
    );
    let host = &i.causes[0].per_iteration_ns;
    assert_eq!(
        (host.n, host.median, host.max),
        (8, 1_200_000.0, 1_300_000.0)
    );
    let scopes: Vec<(&str, u64)> = (i.host_launch_scopes.iter())
        .map(|x| (x.scope.as_str(), x.total_ns))
        .collect();
    assert_eq!(scopes, [("step/data", 9_600_000), ("step/log", 100_000)]);
    let inv: Vec<Inventoried> = (i.inventory.iter())
        .map(|x| {
            let (k, sc) = (x.kind.as_str(), x.scope.as_str());
            (k, sc, x.count, x.bytes, x.synchronous)
        })
        .collect();
    assert_eq!(
        inv,
        [
            ("small_dtoh", "step/loss", 8, Some(32), Some(8)),
            ("stream_sync", "step/loss", 8, None, None),
            ("device_sync", "(unscoped)", 1, None, None),
            ("alloc", "step/forward", 4, Some(128 << 20), None),
        ]
    );
    assert_eq!(i.inventory_iterations, 8);
    assert_eq!(i.largest_gaps.len(), 20, "bounded: 24 gaps, 20 kept");
    assert_eq!(i.largest_gaps[0].gap.ns, 1_200_000);
    assert_eq!(
        (i.largest_gaps[0].iteration, i.largest_gaps[0].offset_ns),
        (1, 1_000_000),
        "ties keep the earliest row"
    );
    assert!(i.largest_gaps.iter().all(|g| g.gap.cause != "unknown"));
}

#[test]
fn the_markdown_shows_the_table_the_scopes_copies_and_host_calls() {
    let l = read(IDLE);
    let md = markdown_summary(&summary(&l), IDLE);
    for want in [
        "### Idle time by cause",
        "| 0 | host_launch (scope) | 1.20 ms | 1.23 ms | 48.3% | 9 |",
        "| 0 | host_launch (blocked:synchronize) | 300 µs | 300 µs | 11.9% | 8 |",
        "host_launch by scope** (mean per iteration, share of idle): step/data 1.20 ms (47.8%), \
         step/log 12.5 µs (0.5%)",
        "copy-only 150 µs",
        "gap across step()** (lead-in, outside idle): median 300 µs over 8 iterations",
        "| small_dtoh | step/loss | cuMemcpyDtoH_v2 | 0 | 1 | 4 B | 8 of 8 | 300 µs |",
        "| alloc | step/forward | cuMemAlloc_v2 | 0 | 0.500 | 16.0 MiB |  | 20.0 µs |",
    ] {
        assert!(md.contains(want), "missing {want:?} in\n{md}");
    }
    assert!(!md.contains("unknown"), "warm-up's cause shown:\n{md}");
}

#[test]
fn the_warning_names_the_dominant_cause_its_scope_and_the_remedy() {
    let s = summary(&read(IDLE));
    let w: Vec<&String> = s
        .warnings
        .iter()
        .filter(|w| w.contains("idle 25 %"))
        .collect();
    assert_eq!(w.len(), 1, "{:?}", s.warnings);
    assert!(
        w[0].starts_with("GPU 0: idle 25 % of the host wall time"),
        "{}",
        w[0]
    );
    assert!(w[0].contains("(above 10 %)"), "{}", w[0]);
    assert!(
        w[0].contains("60 % of it host_launch in scope step/data"),
        "{}",
        w[0]
    );
    assert!(w[0].contains("move the host work off the launching thread"));
}

/// The golden ledger with every steady row's causes replaced by `pieces` (cause, detail, ns)
/// and its wall time by `wall`.
fn reshaped(pieces: &[(&str, Option<&str>, u64)], wall: u64) -> Ledger {
    let mut l = read(IDLE);
    for r in l.iterations.iter_mut().filter(|r| r.index > 0) {
        r.host_wall_ns = wall;
        for d in &mut r.devices {
            let Some(b) = d.idle.as_mut() else { continue };
            b.causes = pieces
                .iter()
                .map(|(c, det, ns)| gpu_ledger_format::idle::IdleCause {
                    cause: c.to_string(),
                    detail: det.map(str::to_string),
                    rule: "r".into(),
                    ns: *ns,
                    gaps: 1,
                })
                .collect();
            d.idle_ns = pieces.iter().map(|p| p.2).sum();
        }
    }
    l
}

#[test]
fn the_warning_names_each_causes_remedy_and_stays_quiet_below_its_thresholds() {
    let warn = |l: &Ledger| {
        summary(l)
            .warnings
            .into_iter()
            .find(|w| w.starts_with("GPU 0: idle"))
    };
    let ms = 1_000_000;
    let sync = reshaped(
        &[("host_launch", Some("blocked:synchronize"), 2 * ms)],
        10 * ms,
    );
    let w = warn(&sync).expect("20 % idle, all blocked");
    assert!(
        w.contains("100 % of it host_launch (blocked:synchronize): remove the synchronization"),
        "{w}"
    );
    let latency = reshaped(&[("launch_latency", None, 2 * ms)], 10 * ms);
    assert!(warn(&latency)
        .unwrap()
        .contains("CUDA graph, or fuse kernels"));
    let dep = reshaped(&[("dependency", Some("event"), 2 * ms)], 10 * ms);
    assert!(warn(&dep).unwrap().contains("cross-stream wait"));
    let quiet = reshaped(&[("launch_latency", None, 900_000)], 10 * ms);
    assert_eq!(warn(&quiet), None, "9 % idle is below the threshold");
    let spread = reshaped(
        &[
            ("launch_latency", None, ms),
            ("host_launch", Some("launch_call"), ms),
            ("dependency", Some("graph"), ms),
        ],
        10 * ms,
    );
    assert_eq!(warn(&spread), None, "no cause holds more than half");
}

#[test]
fn ledgers_without_a_split_show_nothing_of_it() {
    for name in [
        "v1-overlapping-streams.jsonl",
        "v1-nested-scopes.jsonl",
        "v1-ab-baseline.jsonl",
    ] {
        let s = summary(&read(name));
        assert!(s.idle.is_none(), "{name}");
        let md = markdown_summary(&s, name);
        assert!(!md.contains("Idle time by cause"), "{name}");
        assert!(!s
            .warnings
            .iter()
            .any(|w| w.contains("of the host wall time of the iterations used")));
    }
}

#[test]
fn a_streamed_summary_gives_the_same_idle_figures() {
    let l = read(IDLE);
    let opts = SummaryOptions::default();
    let mut b = SummaryBuilder::new(&opts);
    l.iterations.iter().cloned().for_each(|r| b.push(r));
    let streamed = b.finish(&l.header, l.trailer.as_ref());
    assert_eq!(streamed.idle, summary(&l).idle);
}

fn report(l: &Ledger, opts: &ReportOptions) -> String {
    let mut out = Vec::new();
    write_html_report(l, IDLE, opts, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// The text between `<table id="{id}"` and its `</table>`.
fn table<'h>(html: &'h str, id: &str) -> &'h str {
    let start = html
        .find(&format!("<table id=\"{id}\""))
        .unwrap_or_else(|| panic!("no table {id}"));
    let len = html[start..].find("</table>").unwrap();
    &html[start..start + len]
}

#[test]
fn the_report_charts_idle_time_by_cause_and_tables_the_longest_gaps() {
    let html = report(&read(IDLE), &ReportOptions::default());
    assert!(html.contains("<a href=\"#idle-causes\">Idle causes</a>"));
    assert!(html.contains("<svg id=\"chart-idle-causes\""));
    let chart = &html[html.find("<svg id=\"chart-idle-causes\"").unwrap()..];
    let chart = &chart[..chart.find("</figure>").unwrap()];
    assert_eq!(
        chart.matches("<g class=\"stack\"").count(),
        10,
        "a bar per row"
    );
    assert!(chart.contains("<title>1: total 2.50 ms\nlaunch_latency: 600 µs\nhost_launch: 1.50 ms"));
    assert!(
        chart.contains("<title>0: total 7.50 ms"),
        "the warm-up's unknown is charted"
    );
    assert!(
        chart.contains("<title>6: not measured</title>"),
        "untraced: no zero"
    );
    let causes = table(&html, "idle-causes-table");
    assert!(causes.contains("<td class=\"l\">host_launch (scope)</td><td>1.20 ms</td>"));
    let gaps = table(&html, "idle-gaps");
    assert_eq!(
        gaps.matches("<tr>").count(),
        1 + LARGEST_GAPS_KEPT,
        "bounded"
    );
    let first = gaps.split("<tr>").nth(2).unwrap();
    for want in [
        "<td>1</td><td>0</td><td>1.00 ms</td><td>1.20 ms</td>",
        "host_launch (scope:step/data)",
        "scope_open",
        "step/data",
        "main (tid 4242)",
        "ampere_sgemm_128x64_nn",
        "softmax_kernel",
    ] {
        assert!(first.contains(want), "{want:?} not in {first}");
    }
    assert!(gaps.contains("cuStreamSynchronize"));
    let calls = table(&html, "idle-host-calls");
    assert!(calls.contains("<td class=\"l\">small_dtoh</td><td class=\"l\">step/loss</td>"));
    assert_eq!(
        html.matches("<table").count(),
        html.matches("</table>").count()
    );
}

#[test]
fn a_streamed_report_in_few_buckets_still_charts_the_causes() {
    let l = read(IDLE);
    let opts = ReportOptions {
        max_points: 3,
        ..ReportOptions::default()
    };
    let mut b = ReportBuilder::new(&opts);
    l.iterations.iter().cloned().for_each(|r| b.push(r));
    let mut out = Vec::new();
    b.finish(&l.header, l.trailer.as_ref(), IDLE, &mut out)
        .unwrap();
    let html = String::from_utf8(out).unwrap();
    let chart = &html[html.find("<svg id=\"chart-idle-causes\"").unwrap()..];
    let chart = &chart[..chart.find("</svg>").unwrap()];
    assert!(chart.matches("<g class=\"stack\"").count() <= 3);
    // Rows 4..=7 share a bucket with untraced row 6: the mean is over the three that split.
    assert!(chart.contains("<title>4–7: total 2.50 ms"), "{chart}");
}

#[test]
fn reports_of_ledgers_without_a_split_have_no_idle_cause_section() {
    for name in ["v1-overlapping-streams.jsonl", "v1-graph-kernels.jsonl"] {
        let html = report(&read(name), &ReportOptions::default());
        assert!(!html.contains("chart-idle-causes"), "{name}");
        assert!(!html.contains("#idle-causes"), "{name}");
    }
}

fn trace_of(l: &Ledger) -> serde_json::Value {
    let mut out = Vec::new();
    write_trace(l, &mut out, &TraceOptions::default()).unwrap();
    serde_json::from_slice(&out).unwrap()
}

#[test]
fn the_trace_marks_each_longest_gap_on_its_device_track() {
    let v = trace_of(&read(IDLE));
    let events = v["traceEvents"].as_array().unwrap();
    let gaps: Vec<&serde_json::Value> = events.iter().filter(|e| e["cat"] == "idle gap").collect();
    assert_eq!(
        gaps.len(),
        8 * 3 + 4,
        "3 per traced steady row, 4 in the warm-up"
    );
    assert_eq!(v["otherData"]["idle_gaps"], 28);
    let track = events
        .iter()
        .find(|e| e["name"] == "thread_name" && e["args"]["name"] == "idle gaps")
        .expect("the track is named");
    assert_eq!(track["pid"], 1, "GPU 0's process");
    let first = gaps
        .iter()
        .find(|g| g["args"]["iteration"] == 1 && g["name"] == "host_launch" && g["dur"] == 1200.0)
        .expect("row 1's 1.2 ms gap");
    assert_eq!(
        (first["pid"].clone(), first["tid"].clone()),
        (track["pid"].clone(), track["tid"].clone())
    );
    let a = &first["args"];
    assert_eq!(a["detail"], "scope:step/data");
    assert_eq!(a["rule"], "scope_open");
    assert_eq!(a["scope"], "step/data");
    assert_eq!(
        (a["thread"].clone(), a["tid"].clone()),
        ("main".into(), 4242.into())
    );
    assert_eq!(a["before"], "ampere_sgemm_128x64_nn");
    assert_eq!(
        a["after"], "softmax_kernel<256>",
        "kernel names demangled as elsewhere"
    );
    assert_eq!(
        a["parts"][0],
        "host_launch (scope:step/data) by scope_open: 1200000 ns"
    );
    // On one track slices must not overlap.
    let mut spans: Vec<(f64, f64)> = gaps
        .iter()
        .filter(|g| g["tid"] == track["tid"])
        .map(|g| {
            (
                g["ts"].as_f64().unwrap(),
                g["ts"].as_f64().unwrap() + g["dur"].as_f64().unwrap(),
            )
        })
        .collect();
    spans.sort_by(|x, y| x.0.total_cmp(&y.0));
    assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0 + 1e-9));
}

#[test]
fn traces_of_ledgers_without_a_split_have_no_gap_slices() {
    for name in ["v1-overlapping-streams.jsonl", "v1-nested-scopes.jsonl"] {
        let v = trace_of(&read(name));
        let events = v["traceEvents"].as_array().unwrap();
        assert!(!events.iter().any(|e| e["cat"] == "idle gap"), "{name}");
        assert!(v["otherData"].get("idle_gaps").is_none(), "{name}");
    }
}

#[test]
fn the_comparison_gives_each_causes_medians_and_their_difference() {
    use gpu_ledger_tools::analysis::compare::{
        compare, compare_streamed, CompareOptions, CompareSide, LedgerView,
    };
    fn view(l: &Ledger) -> LedgerView<'_> {
        LedgerView {
            header: &l.header,
            rows: &l.iterations,
        }
    }
    let a = read(IDLE);
    let b = reshaped(
        &[
            ("host_launch", Some("scope:step/data"), 600_000),
            ("launch_latency", None, 600_000),
            ("dependency", Some("event"), 400_000),
        ],
        10_000_000,
    );
    let opts = CompareOptions {
        resamples: 200,
        ..CompareOptions::default()
    };

    let c = compare(view(&a), view(&b), &opts).unwrap();
    let got: Vec<CauseChange> = (c.idle_causes.iter())
        .map(|x| {
            let (c, d) = (x.cause.as_str(), x.detail.as_deref());
            (c, d, x.a_median_ns, x.b_median_ns, x.delta_median_ns)
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "host_launch",
                Some("scope"),
                Some(1.2e6),
                Some(6e5),
                Some(-6e5)
            ),
            (
                "host_launch",
                Some("blocked:synchronize"),
                Some(3e5),
                Some(0.0),
                Some(-3e5)
            ),
            ("dependency", None, Some(4e5), Some(4e5), Some(0.0)),
            ("launch_latency", None, Some(6e5), Some(6e5), Some(0.0)),
        ],
        "largest change first; B measured without a blocked piece: 0, not absent"
    );
    let md = gpu_ledger_tools::export::markdown_comparison(&c, "a", "b");
    assert!(
        md.contains("| 0 | host_launch (scope) | 1.20 ms | 600 µs | −600 µs |"),
        "{md}"
    );
    let mut sa = CompareSide::new(&opts);
    a.iterations.iter().cloned().for_each(|r| sa.push(r));
    let mut sb = CompareSide::new(&opts);
    b.iterations.iter().cloned().for_each(|r| sb.push(r));
    let streamed = compare_streamed(&a.header, sa, &b.header, sb, &opts).unwrap();
    assert_eq!(streamed.idle_causes, c.idle_causes);

    let without = read("v1-ab-baseline.jsonl");
    let c = compare(view(&without), view(&a), &opts).unwrap();
    assert!(c
        .idle_causes
        .iter()
        .all(|x| x.a_median_ns.is_none() && x.delta_median_ns.is_none()));
    assert!(
        gpu_ledger_tools::export::markdown_comparison(&c, "a", "b").contains("| not measured |")
    );
    let c = compare(view(&without), view(&without), &opts).unwrap();
    assert!(c.idle_causes.is_empty());
    assert!(
        !gpu_ledger_tools::export::markdown_comparison(&c, "a", "b").contains("Idle time by cause")
    );
}
