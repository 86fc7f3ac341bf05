//! The HTML report without a browser: self-contained (no script, no external resource), every
//! chart present, text escaped, balanced SVG. `export_browser.rs` renders it in Chromium.

use gpu_ledger_format::reader::Ledger;
use gpu_ledger_tools::export::{
    roofline_svg, write_html_report, ReportOptions, Roofline, RooflinePoint,
};

mod export_common;
use export_common::{read, CHARTS};

fn report(l: &Ledger, opts: &ReportOptions) -> String {
    let mut out = Vec::new();
    write_html_report(l, "golden.jsonl", opts, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn assert_self_contained(html: &str) {
    let lower = html.to_ascii_lowercase();
    assert!(lower.starts_with("<!doctype html>"));
    assert!(!lower.contains("<script"), "no script");
    assert!(!lower.contains("src="), "no external resource");
    assert!(!lower.contains("<link"), "no stylesheet link");
    assert!(
        !lower.contains("http://")
            || lower.matches("http://").count()
                == lower.matches("http://www.w3.org/2000/svg").count()
    );
    assert!(!lower.contains("https://"));
    assert!(lower.contains("content-security-policy"));
    assert_eq!(
        lower.matches("<svg").count(),
        lower.matches("</svg>").count()
    );
    assert_eq!(
        lower.matches("<figure").count(),
        lower.matches("</figure>").count()
    );
    assert_eq!(
        lower.matches("<table").count(),
        lower.matches("</table>").count()
    );
}

#[test]
fn report_has_every_chart_and_table() {
    for name in [
        "v1-nested-scopes.jsonl",
        "v1-overlapping-streams.jsonl",
        "v1-graph-kernels.jsonl",
        "v1-ab-baseline.jsonl",
    ] {
        let html = report(&read(name), &ReportOptions::default());
        assert_self_contained(&html);
        for id in CHARTS {
            assert!(
                html.contains(&format!("<svg id=\"{id}\"")),
                "{name}: no {id}"
            );
        }
        assert!(html.contains("no counters in this ledger"));
        assert!(html.contains("<section id=\"warnings\">"));
    }
}

#[test]
fn report_charts_carry_the_data() {
    let html = report(&read("v1-nested-scopes.jsonl"), &ReportOptions::default());
    // Families with their Amdahl figures.
    assert!(html.contains("ampere_sgemm_128x64_nn"));
    assert!(html.contains("ceiling 3.01×"), "{html}");
    // 12 stacked bars per scope chart, the warm-up, perturbed and incomplete ones faded.
    let host = &html[html.find("id=\"chart-scopes-host\"").unwrap()..];
    let host = &host[..host.find("</svg>").unwrap()];
    assert_eq!(host.matches("<g class=\"stack\"").count(), 12);
    assert_eq!(host.matches("opacity=\"0.35\"").count(), 3);
    assert!(html.contains("step/forward/attention"));
    assert!(html.contains("outside any scope"));
    // Shaded ranges on the line charts.
    assert!(html.contains("warm-up: iterations 0"));
    assert!(html.contains("perturbed: iterations 6"));
    // Rows left out: counts and iteration numbers, each said as what it is.
    assert!(html.contains(
        "9 of 12 used; 3 left out: 1 warm-up (iteration 0), 1 perturbed (iteration 6), 1 \
         incomplete (iteration 11)."
    ));
}

#[test]
fn missing_nvml_gives_notices_not_empty_charts() {
    let html = report(&read("v1-missing-nvml.jsonl"), &ReportOptions::default());
    assert_self_contained(&html);
    assert!(html.contains("no NVML figures in this ledger"));
    assert!(html.contains("<svg id=\"chart-clocks\""));
}

#[test]
fn every_text_is_escaped() {
    let mut l = read("v1-missing-nvml.jsonl");
    let evil = "<script>alert('x')</script>&\"";
    for r in &mut l.iterations {
        r.scopes[0].path = evil.into();
        r.kernels[0].name = evil.into();
        r.warnings.push(evil.into());
    }
    l.header.environment.hostname = Some(evil.into());
    let opts = ReportOptions {
        title: Some(evil.into()),
        ..ReportOptions::default()
    };
    let html = report(&l, &opts);
    assert_self_contained(&html);
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"));
}

#[test]
fn many_iterations_are_bucketed() {
    let mut l = read("v1-nested-scopes.jsonl");
    let template = l.iterations[3].clone();
    l.iterations = (0..5000u64)
        .map(|i| {
            let mut r = template.clone();
            r.index = i;
            r.host_start_ns = i * 20_000_000;
            r
        })
        .collect();
    let opts = ReportOptions {
        max_points: 100,
        ..ReportOptions::default()
    };
    let html = report(&l, &opts);
    let host = &html[html.find("id=\"chart-scopes-host\"").unwrap()..];
    let host = &host[..host.find("</svg>").unwrap()];
    assert_eq!(host.matches("<g class=\"stack\"").count(), 100);
    assert!(html.contains("mean of about 50 consecutive iterations"));
    assert!(html.len() < 2_000_000, "report too large: {}", html.len());
}

#[test]
fn roofline_takes_points_when_counters_exist() {
    let r = Roofline {
        peak_flops_per_s: Some(60e12),
        peak_bytes_per_s: Some(4.8e12),
        points: vec![
            RooflinePoint {
                label: "gemm".into(),
                arithmetic_intensity: 64.0,
                flops_per_s: 40e12,
            },
            RooflinePoint {
                label: "softmax".into(),
                arithmetic_intensity: 0.5,
                flops_per_s: 1.5e12,
            },
        ],
    };
    let svg = roofline_svg(Some(&r));
    assert!(svg.contains("class=\"roof\""));
    assert_eq!(svg.matches("<g class=\"point\">").count(), 2);
    let html = report(
        &read("v1-overlapping-streams.jsonl"),
        &ReportOptions {
            roofline: Some(r),
            ..ReportOptions::default()
        },
    );
    assert!(!html.contains("no counters in this ledger"));
    let empty = roofline_svg(Some(&Roofline::default()));
    assert!(empty.contains("no counters in this ledger"));
}
