//! The warp stall section of the summary and the report, from synthetic ledgers with PC-sampled
//! rows: reason shares per scope, the hottest lines with their text, the dropped samples and how
//! to avoid them, the same section whether the ledger is read whole or streamed, escaped HTML,
//! and no section at all without PC samples.

mod analysis_common;

use std::collections::BTreeMap;

use analysis_common::{header, kernel, row, scope};
use gpu_ledger_format::reader::Ledger;
use gpu_ledger_format::schema::IterationRow;
use gpu_ledger_format::stalls::{IterationStalls, KernelStalls, LineStalls, ScopeStalls};
use gpu_ledger_tools::export::{
    markdown_summary, write_html_report, LedgerSummary, ReportBuilder, ReportOptions,
    SummaryBuilder, SummaryOptions,
};

fn counts(v: &[(&str, u64)]) -> BTreeMap<String, u64> {
    v.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

fn line(file: &str, no: u32, by: &[(&str, u64)], text: Option<&str>) -> LineStalls {
    let by_reason = counts(by);
    LineStalls {
        file: file.into(),
        line: no,
        samples: by_reason.values().sum(),
        by_reason,
        text: text.map(str::to_string),
    }
}

fn function(name: &str, by: &[(&str, u64)], lines: Vec<LineStalls>) -> KernelStalls {
    let by_reason = counts(by);
    KernelStalls {
        name: name.into(),
        samples: by_reason.values().sum(),
        by_reason,
        cubin: !lines.is_empty(),
        lines,
    }
}

fn scope_stalls(path: &str, by: &[(&str, u64)], kernels: &[&str]) -> ScopeStalls {
    let by_reason = counts(by);
    ScopeStalls {
        scope: path.into(),
        samples: by_reason.values().sum(),
        by_reason,
        kernels: kernels.iter().map(|k| k.to_string()).collect(),
        split_by_time: true,
    }
}

/// One sampled iteration: `gemm` in `step/forward`; `reduce` in both scopes, its 400 samples
/// shared out 100 / 300 by GPU time, as the collector does; with `extra`, 50 dropped samples and
/// a function no kernel record names.
fn stalls(extra: bool) -> IterationStalls {
    let gemm = function(
        "gemm",
        &[("long_scoreboard", 995), ("selected", 3), ("wait", 2)],
        vec![
            line(
                "kernels/gemm.cu",
                42,
                &[("long_scoreboard", 899), ("selected", 1)],
                Some("    acc += (a < b) ? a : b;  "),
            ),
            line(
                "",
                0,
                &[("long_scoreboard", 96), ("selected", 2), ("wait", 2)],
                None,
            ),
        ],
    );
    let reduce = function(
        "reduce",
        &[("barrier", 300), ("wait", 100)],
        vec![line(
            "kernels/reduce.cu",
            17,
            &[("barrier", 300), ("wait", 100)],
            Some("__syncthreads();"),
        )],
    );
    let mut kernels = vec![gemm, reduce];
    if extra {
        kernels.push(function("helper", &[("wait", 20)], Vec::new()));
    }
    let scopes = vec![
        scope_stalls(
            "step/forward",
            &[
                ("long_scoreboard", 995),
                ("selected", 3),
                ("wait", 27),
                ("barrier", 75),
            ],
            &["gemm", "reduce"],
        ),
        scope_stalls(
            "step/backward",
            &[("barrier", 225), ("wait", 75)],
            &["reduce"],
        ),
    ];
    let (dropped, non_user, unattributed) = if extra { (50, 10, 20) } else { (0, 0, 0) };
    IterationStalls {
        total_samples: 1400 + unattributed + dropped + non_user,
        dropped_samples: dropped,
        non_user_samples: non_user,
        hardware_buffer_full: false,
        kernels,
        scopes,
        unattributed_samples: unattributed,
        error: None,
    }
}

fn plain_row(i: u64) -> IterationRow {
    let mut r = row(i, 2_000_000);
    r.kernels = vec![kernel("gemm", 128, 256, 64, 2, 500_000)];
    r.scopes = vec![
        scope("step", 1_900_000, 1_000_000, 2),
        scope("step/forward", 1_000_000, 600_000, 1),
        scope("step/backward", 800_000, 400_000, 1),
    ];
    r
}

/// Eight rows, 3 and 5 PC-sampled (so perturbed), 5 dropping samples.
fn ledger(sampled: bool) -> Ledger {
    let iterations = (0..8)
        .map(|i| {
            let mut r = plain_row(i);
            if sampled && (i == 3 || i == 5) {
                r.perturbed = true;
                r.stalls = Some(stalls(i == 5));
            }
            r
        })
        .collect();
    Ledger {
        header: header("580.95.05"),
        iterations,
        trailer: None,
        truncated_last_line: None,
    }
}

fn streamed(l: &Ledger, opts: &SummaryOptions) -> LedgerSummary {
    let mut b = SummaryBuilder::new(opts);
    l.iterations.iter().for_each(|r| b.push(r.clone()));
    b.finish(&l.header, l.trailer.as_ref())
}

/// The stall section of a Markdown summary: from its heading to the next `### ` heading.
fn section(md: &str) -> Option<&str> {
    let start = md.find("### Warp stall reasons")?;
    let rest = &md[start + 4..];
    let end = rest.find("\n### ").map_or(md.len(), |e| start + 4 + e);
    Some(&md[start..end])
}

fn html(l: &Ledger) -> String {
    let mut out = Vec::new();
    write_html_report(l, "stalls.jsonl", &ReportOptions::default(), &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn the_summary_shows_each_scope_s_reasons_lines_and_the_dropped_samples() {
    let l = ledger(true);
    let s = LedgerSummary::compute(&l, &SummaryOptions::default());
    assert!(
        !s.used.iter().any(|i| i == 3 || i == 5),
        "sampled rows are perturbed"
    );
    let md = markdown_summary(&s, "stalls.jsonl");
    let sec = section(&md).unwrap_or_else(|| panic!("no stall section:\n{md}"));
    assert!(sec.starts_with("### Warp stall reasons (PC sampling, 2 sampled iterations)"));
    // Two iterations of 1100 + 300 samples each: forward first, reasons largest first.
    assert!(
        sec.contains(
            "| step/forward * | 2200 | 78.0 % | long_scoreboard 90.5 %, barrier 6.8 %, \
             wait 2.5 %, selected 0.3 % |"
        ),
        "{sec}"
    );
    assert!(
        sec.contains("| step/backward * | 600 | 21.3 % | barrier 75.0 %, wait 25.0 % |"),
        "{sec}"
    );
    assert!(
        sec.contains("shared out between them by its GPU time"),
        "{sec}"
    );
    // Hottest lines, merged over both iterations; reduce's line follows its share of a scope.
    assert!(
        sec.contains("#### Hottest source lines of step/forward"),
        "{sec}"
    );
    assert!(
        sec.contains(
            "| kernels/gemm.cu:42 | 1800 | 81.8 % | long_scoreboard 99.9 % | \
             acc += (a < b) ? a : b; |"
        ),
        "{sec}"
    );
    assert!(
        sec.contains("| (no line information) | 200 | 9.1 % | long_scoreboard 96.0 % |  |"),
        "{sec}"
    );
    assert!(
        sec.contains("| kernels/reduce.cu:17 | 200 | 9.1 % | barrier 75.0 % | __syncthreads(); |"),
        "{sec}"
    );
    assert!(
        sec.contains(
            "| kernels/reduce.cu:17 | 600 | 100.0 % | barrier 75.0 % | __syncthreads(); |"
        ),
        "{sec}"
    );
    // Totals, with the dropped samples and their fix.
    assert!(
        sec.contains("Samples: 2880 in total (iterations 3, 5): 2820 with a PC, 50 dropped, 10 in"),
        "{sec}"
    );
    assert!(sec.contains("20 in functions no kernel record"), "{sec}");
    assert!(
        sec.contains(
            "PC sampling dropped 50 of 2880 samples (1.7 %) in iterations 5: the shares are of \
             the samples kept; raise PcSamplingConfig::hardware_buffer_bytes or the period"
        ),
        "{sec}"
    );
    assert!(
        sec.contains("long_scoreboard = Stall Long Scoreboard"),
        "{sec}"
    );
    let st = s.stalls.as_ref().unwrap();
    assert_eq!(st.scopes.len(), 2);
    assert_eq!(
        st.scopes[0].hot_lines[0].text.as_deref(),
        Some("acc += (a < b) ? a : b;")
    );
}

#[test]
fn no_dropped_warning_without_dropped_samples_and_errors_are_listed() {
    let mut l = ledger(false);
    l.iterations[2].perturbed = true;
    l.iterations[2].stalls = Some(stalls(false));
    l.iterations[4].perturbed = true;
    l.iterations[4].stalls = Some(IterationStalls {
        error: Some("CUPTI_ERROR_NOT_SUPPORTED: <sampling> refused".into()),
        ..IterationStalls::default()
    });
    let s = LedgerSummary::compute(&l, &SummaryOptions::default());
    let md = markdown_summary(&s, "stalls.jsonl");
    let sec = section(&md).unwrap();
    assert!(sec.contains("(PC sampling, 2 sampled iterations)"), "{sec}");
    assert!(!sec.contains("dropped 0 of"), "{sec}");
    assert!(!sec.contains("hardware_buffer_bytes"), "{sec}");
    assert!(
        sec.contains("- iterations 4: CUPTI_ERROR_NOT_SUPPORTED: \\<sampling> refused"),
        "{sec}"
    );
    let page = html(&l);
    assert!(page.contains("<li>iterations 4: CUPTI_ERROR_NOT_SUPPORTED: &lt;sampling&gt; refused"));
}

#[test]
fn streamed_and_whole_summaries_and_reports_agree_on_the_stall_section() {
    let l = ledger(true);
    let opts = SummaryOptions::default();
    let whole = LedgerSummary::compute(&l, &opts);
    let stream = streamed(&l, &opts);
    assert!(whole.stalls.is_some());
    assert_eq!(whole.stalls, stream.stalls);
    let (a, b) = (
        markdown_summary(&whole, "stalls.jsonl"),
        markdown_summary(&stream, "stalls.jsonl"),
    );
    assert_eq!(section(&a), section(&b));
    assert_eq!(a, b);

    let ropts = ReportOptions::default();
    let mut rb = ReportBuilder::new(&ropts);
    l.iterations.iter().for_each(|r| rb.push(r.clone()));
    let mut streamed_html = Vec::new();
    rb.finish(&l.header, None, "stalls.jsonl", &mut streamed_html)
        .unwrap();
    assert!(String::from_utf8(streamed_html).unwrap() == html(&l));
}

#[test]
fn the_report_has_a_stacked_bar_per_scope_and_escapes_source_text() {
    let page = html(&ledger(true));
    let lower = page.to_ascii_lowercase();
    assert!(!lower.contains("<script") && !lower.contains(" style="));
    assert_eq!(
        lower.matches("<svg").count(),
        lower.matches("</svg>").count()
    );
    assert_eq!(
        lower.matches("<table").count(),
        lower.matches("</table>").count()
    );
    assert!(page.contains("<a href=\"#stalls\">Warp stalls</a>"));
    let sec = &page[page
        .find("<section id=\"stalls\">")
        .expect("a stall section")..];
    let sec = &sec[..sec.find("</section>").unwrap()];
    assert!(sec.contains("Warp stall reasons (PC sampling, 2 sampled iterations)"));
    assert!(sec.contains("<svg id=\"chart-stalls\""));
    assert_eq!(sec.matches("<g class=\"stall-bar\">").count(), 2);
    // Forward's bar: four reasons, each a segment with its share.
    let fwd = &sec[sec
        .find("<g class=\"stall-bar\"><title>step/forward")
        .unwrap()..];
    let fwd = &fwd[..fwd.find("</g>").unwrap()];
    assert_eq!(fwd.matches("<rect ").count(), 4, "{fwd}");
    assert!(fwd.contains("Stall Long Scoreboard (long_scoreboard): 90.5 % (1990 samples)"));
    assert!(
        sec.contains("Stall Barrier (barrier)</li>"),
        "legend: {sec}"
    );
    assert!(
        sec.contains("<code>acc += (a &lt; b) ? a : b;</code>"),
        "{sec}"
    );
    assert!(!sec.contains("a < b"));
    assert!(sec.contains("(no line information)"));
    assert!(sec.contains("raise PcSamplingConfig::hardware_buffer_bytes or the period"));
}

#[test]
fn a_ledger_without_pc_samples_has_no_stall_section() {
    let l = ledger(false);
    let opts = SummaryOptions::default();
    let s = LedgerSummary::compute(&l, &opts);
    assert!(s.stalls.is_none());
    assert!(streamed(&l, &opts).stalls.is_none());
    let md = markdown_summary(&s, "plain.jsonl");
    assert!(!md.contains("Warp stall"), "{md}");
    let page = html(&l);
    assert!(!page.contains("chart-stalls") && !page.contains("id=\"stalls\""));
    assert!(!page.contains("Warp stalls"));
}

#[test]
fn the_run_s_profile_from_the_trailer_is_in_the_summary_whole_and_streamed() {
    use gpu_ledger_format::schema::Trailer;
    use gpu_ledger_format::stalls::{DutyCycleCost, KernelProfile, RunStalls, ScopeProfile};
    let mut l = ledger(true);
    let plain = markdown_summary(
        &LedgerSummary::compute(&l, &SummaryOptions::default()),
        "stalls.jsonl",
    );
    assert!(!plain.contains("PC sampling over the run"), "{plain}");
    l.trailer = Some(Trailer {
        iterations: 8,
        stalls: Some(RunStalls {
            windows: 2,
            samples: 2_800,
            coverage: 0.9,
            kernels: vec![KernelProfile {
                name: "gemm".into(),
                device_ns: 6_000_000,
                device_share: 1.0,
                top: true,
                windows: 2,
                samples: 2_200,
                by_reason: counts(&[("long_scoreboard", 2_000), ("wait", 200)]),
            }],
            scopes: vec![ScopeProfile {
                scope: "step/forward".into(),
                windows: 2,
                samples: 2_200,
                by_reason: counts(&[("long_scoreboard", 2_000), ("wait", 200)]),
            }],
            duty_cycle: Some(DutyCycleCost {
                budget: 0.01,
                target_samples: 2_000,
                windows_opened: 2,
                windows_measured: 2,
                cost_ns: 50_000,
                run_ns: 10_000_000,
                covered: true,
            }),
            ..RunStalls::default()
        }),
        ..Trailer::default()
    });
    let opts = SummaryOptions::default();
    let whole = markdown_summary(&LedgerSummary::compute(&l, &opts), "stalls.jsonl");
    let stream = markdown_summary(&streamed(&l, &opts), "stalls.jsonl");
    assert_eq!(whole, stream);
    assert!(
        whole.contains("### PC sampling over the run (2 windows, 2800 samples)"),
        "{whole}"
    );
    assert!(whole.contains("cost 0.5 % of the run's 10.0 ms wall time, against a budget of 1.0 %"));
    assert!(whole.contains(
        "| gemm | 6.00 ms | 100.0 % | yes | 2 | 2200 | long_scoreboard 90.9 %, wait 9.1 % |"
    ));
    assert!(whole.contains("| step/forward | 2 | 2200 | long_scoreboard 90.9 %, wait 9.1 % |"));
    // The section follows the per-iteration stall section and comes before the devices.
    let at = |s: &str| whole.find(s).unwrap_or_else(|| panic!("{s}: {whole}"));
    assert!(at("### Warp stall reasons") < at("### PC sampling over the run"));
}
