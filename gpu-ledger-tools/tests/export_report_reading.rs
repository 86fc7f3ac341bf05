//! What a reader of the HTML report sees, checked in its markup: one colour per scope in every
//! chart, time axes in one unit, a clock axis from 0 with its data under the top tick, a second
//! GPU's line visible over the first, graph launches per iteration, and a run without rows
//! saying why once, at the top. `export_browser.rs` checks the layout at 480 px in Chromium.

use std::collections::BTreeMap;

use gpu_ledger_format::reader::Ledger;
use gpu_ledger_tools::export::{write_html_report, LedgerSummary, ReportOptions, SummaryOptions};

mod export_common;
use export_common::read;

fn report(l: &Ledger) -> String {
    let mut out = Vec::new();
    write_html_report(l, "golden.jsonl", &ReportOptions::default(), &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// The markup of the figure around the chart `id`.
fn figure<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html
        .find(&format!("<figure class=\"chart-figure\" id=\"fig-{id}\">"))
        .unwrap_or_else(|| panic!("no figure {id}"));
    let end = start + html[start..].find("</figure>").unwrap();
    &html[start..end]
}

/// A figure's legend: name → colour.
fn legend(fig: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for li in fig.split("<li>").skip(1) {
        let colour = li
            .split("fill=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        let name = li
            .split("</svg>")
            .nth(1)
            .unwrap()
            .split("</li>")
            .next()
            .unwrap();
        out.insert(name.to_string(), colour.to_string());
    }
    out
}

/// The y axis' tick labels of a chart (the texts drawn right-aligned left of the plot).
fn y_ticks(fig: &str) -> Vec<String> {
    fig.split("text-anchor=\"end\" fill=\"#555\">")
        .skip(1)
        .map(|t| t.split("</text>").next().unwrap().to_string())
        .collect()
}

#[test]
fn a_scope_has_one_colour_in_every_chart_and_colours_are_not_shared() {
    for name in [
        "v1-nested-scopes.jsonl",
        "v1-ab-baseline.jsonl",
        "v1-overlapping-streams.jsonl",
    ] {
        let html = report(&read(name));
        let host = legend(figure(&html, "chart-scopes-host"));
        let device = legend(figure(&html, "chart-scopes-device"));
        let mut both = 0;
        for (scope, c) in &host {
            if let Some(d) = device.get(scope) {
                assert_eq!(
                    c, d,
                    "{name}: {scope} is {c} in one chart and {d} in the other"
                );
                both += 1;
            }
        }
        assert!(
            both >= 2 || name != "v1-nested-scopes.jsonl",
            "{name}: {host:?} {device:?}"
        );
        for l in [&host, &device] {
            let mut colours: Vec<&String> = l.values().collect();
            colours.sort();
            colours.dedup();
            assert_eq!(colours.len(), l.len(), "{name}: a colour twice in {l:?}");
        }
    }
}

#[test]
fn a_time_axis_speaks_one_unit() {
    for name in [
        "v1-nested-scopes.jsonl",
        "v1-graph-kernels.jsonl",
        "v1-ab-change.jsonl",
    ] {
        let html = report(&read(name));
        for id in ["chart-scopes-host", "chart-scopes-device"] {
            let ticks = y_ticks(figure(&html, id));
            assert!(ticks.len() >= 3, "{name} {id}: {ticks:?}");
            let units: Vec<&str> = ticks
                .iter()
                .map(|t| t.rsplit(' ').next().unwrap())
                .collect();
            assert!(
                units.windows(2).all(|w| w[0] == w[1]),
                "{name} {id}: {ticks:?}"
            );
            assert_eq!(
                ticks[0],
                format!("0 {}", units[0]),
                "{name} {id}: {ticks:?}"
            );
        }
    }
}

#[test]
fn the_clock_axis_starts_at_zero_and_tops_its_data() {
    let l = read("v1-overlapping-streams.jsonl");
    let s = LedgerSummary::compute(&l, &SummaryOptions::default());
    let max = s.nvml[0].sm_clock_mhz.as_ref().unwrap().max;
    let html = report(&l);
    let ticks: Vec<f64> = y_ticks(figure(&html, "chart-clocks"))
        .iter()
        .map(|t| t.parse().unwrap())
        .collect();
    assert_eq!(ticks[0], 0.0, "{ticks:?}");
    assert!(*ticks.last().unwrap() >= max, "{ticks:?} under {max}");
    // Every chart's top tick is at or above its data: the power chart's too.
    let power: Vec<f64> = y_ticks(figure(&html, "chart-power"))
        .iter()
        .map(|t| t.parse().unwrap())
        .collect();
    let pmax = s.nvml[0].power_w.as_ref().unwrap().max;
    assert!(*power.last().unwrap() >= pmax, "{power:?} under {pmax}");
    assert!(
        power[0] <= s.nvml[0].power_w.as_ref().unwrap().min,
        "{power:?}"
    );
}

#[test]
fn a_second_gpu_line_does_not_hide_the_first() {
    let l = read("v1-graph-kernels.jsonl");
    let html = report(&l);
    let fig = figure(&html, "chart-idle");
    let lines: Vec<&str> = fig.split("<path class=\"line\"").skip(1).collect();
    assert_eq!(lines.len(), 2, "two GPUs: {fig}");
    assert!(!lines[0]
        .split('>')
        .next()
        .unwrap()
        .contains("stroke-dasharray"));
    assert!(lines[1]
        .split('>')
        .next()
        .unwrap()
        .contains("stroke-dasharray"));
    let width = |p: &str| {
        p.split("stroke-width=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    assert!(
        width(lines[0]) > width(lines[1]),
        "the first is drawn wider under the second"
    );
}

#[test]
fn graph_launches_are_per_iteration() {
    let l = read("v1-graph-kernels.jsonl");
    let s = LedgerSummary::compute(&l, &SummaryOptions::default());
    let f = s
        .families
        .families
        .iter()
        .find(|f| f.graph_launches > 0)
        .expect("a family launched from a graph");
    let per_iter = f.graph_launches as f64 / s.families.iterations as f64;
    assert!(
        f.graph_launches as f64 > per_iter,
        "the ledger tells the two apart"
    );
    let html = report(&l);
    assert!(html.contains("<th>graph launches/iter</th>"));
    let row = html
        .split("<tr>")
        .find(|r| r.contains(&format!(">{}</td>", f.family)))
        .unwrap();
    let last = row
        .rsplit("<td>")
        .next()
        .unwrap()
        .split("</td>")
        .next()
        .unwrap();
    let shown: f64 = last.parse().unwrap();
    assert!(
        (shown - per_iter).abs() <= per_iter * 0.01,
        "{last} vs {per_iter}"
    );
    let md = gpu_ledger_tools::export::markdown_summary(&s, "g");
    assert!(md.contains("| graph launches/iter |"), "{md}");
}

/// A ledger `fail_open` wrote: its header, no row, and a trailer saying why.
fn unprofiled() -> Ledger {
    let mut l = read("v1-nested-scopes.jsonl");
    l.iterations.clear();
    let t = l.trailer.as_mut().unwrap();
    t.iterations = 5;
    t.warnings = vec![
        "profiling is off: no NVIDIA driver; the application ran 5 iterations \
                       unprofiled, which have no rows"
            .into(),
    ];
    l
}

#[test]
fn a_run_without_rows_says_why_once_at_the_top() {
    let html = report(&unprofiled());
    let why = "profiling is off: no NVIDIA driver";
    assert_eq!(html.matches(why).count(), 1, "{html}");
    let at = html.find(why).unwrap();
    assert!(
        at < html.find("</header>").unwrap() + 200,
        "the reason comes first: {html}"
    );
    assert!(html.contains("No iteration was profiled"));
    assert!(!html.contains("<svg"), "no empty chart: {html}");
    assert!(!html.contains("nothing to show"));
    assert!(
        !html.contains("href=\"#"),
        "no link to a section that is not there"
    );
    let s = LedgerSummary::compute(&unprofiled(), &SummaryOptions::default());
    let md = gpu_ledger_tools::export::markdown_summary(&s, "u.jsonl");
    assert_eq!(md.matches(why).count(), 1, "{md}");
    assert!(md.find("**No iteration was profiled.**").unwrap() < md.find(why).unwrap());
    assert!(!md.contains("###"), "no empty section: {md}");
}

#[test]
fn launches_outside_every_scope_have_no_host_time_shown_as_zero() {
    let l = read("v1-nested-scopes.jsonl");
    let s = LedgerSummary::compute(&l, &SummaryOptions::default());
    let md = gpu_ledger_tools::export::markdown_summary(&s, "n");
    let line = md
        .lines()
        .find(|l| l.starts_with("| (unscoped) |"))
        .unwrap();
    assert!(
        line.starts_with(
            "| (unscoped) | 9/9 | not measured | not measured | not measured | 40.0 µs |"
        ),
        "{line}"
    );
    let html = report(&l);
    let row = html
        .split("<tr>")
        .find(|r| r.contains(">(unscoped)</td>"))
        .unwrap();
    assert_eq!(row.matches("<td>not measured</td>").count(), 3, "{row}");
    assert!(!row.contains(">0 ns<"), "{row}");
}
