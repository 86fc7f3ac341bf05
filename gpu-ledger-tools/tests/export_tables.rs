//! CSV, Markdown, merge and experiment-ledger exports on the golden ledgers.

use gpu_ledger_format::reader::Ledger;
use gpu_ledger_tools::analysis::compare::Verdict;
use gpu_ledger_tools::analysis::compare::{compare, CompareOptions, LedgerView};
use gpu_ledger_tools::export::experiment::{ExperimentEntry, ExperimentLog, CSV_COLUMNS};
use gpu_ledger_tools::export::{
    markdown_comparison, markdown_summary, merge_ranks, write_csv, CsvLayout, LedgerSummary,
    MergeError, RankSeries, SummaryOptions,
};

mod export_common;
use export_common::read;

fn view(l: &Ledger) -> LedgerView<'_> {
    LedgerView {
        header: &l.header,
        rows: &l.iterations,
    }
}

/// Splits one CSV line into fields (RFC 4180 quoting).
fn split_csv(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            (c, _) => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// Every Markdown table row has as many cells as its header.
fn assert_tables_are_rectangular(md: &str) {
    let mut expected = None;
    for line in md.lines() {
        if line.starts_with('|') {
            let cells = line.len() - line.replace('|', "").len() - line.matches("\\|").count();
            match expected {
                None => expected = Some(cells),
                Some(n) => assert_eq!(n, cells, "{line}"),
            }
        } else {
            expected = None;
        }
    }
}

#[test]
fn csv_has_one_line_per_row_and_documented_columns() {
    let l = read("v1-nested-scopes.jsonl");
    let mut out = Vec::new();
    assert_eq!(write_csv(&l.iterations, &mut out).unwrap(), 12);
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1 + l.iterations.len());
    let head = split_csv(lines[0]);
    assert_eq!(
        &head[..10],
        [
            "index",
            "host_start_ns",
            "host_wall_ns",
            "complete",
            "perturbed",
            "untraced",
            "tracing_added_ns",
            "dropped_records",
            "missing_records",
            "kernel_launches"
        ]
    );
    for c in [
        "dev0_busy_ns",
        "dev0_idle_ns",
        "dev0_largest_gap_ns",
        "dev0_idle_share",
        "dev0_sm_clock_mhz",
        "dev0_power_w",
        "dev0_energy_j",
        "scope:step/forward/attention:device_ns_inclusive",
        "scope:step/forward/attention:host_ns",
        "scope:(unscoped):host_ns",
    ] {
        assert!(head.iter().any(|h| h == c), "missing column {c}");
    }
    let col = |name: &str| head.iter().position(|h| h == name).unwrap();
    for (line, row) in lines[1..].iter().zip(&l.iterations) {
        let f = split_csv(line);
        assert_eq!(f.len(), head.len(), "{line}");
        assert_eq!(f[0], row.index.to_string());
        assert_eq!(f[col("host_wall_ns")], row.host_wall_ns.to_string());
        assert_eq!(f[col("dev0_busy_ns")], row.devices[0].busy_ns.to_string());
        assert_eq!(f[col("dev0_energy_j")], "", "no energy in this ledger");
        assert_eq!(f[col("untraced")], "false");
        assert_eq!(
            f[col("tracing_added_ns")],
            "",
            "no calibration in this ledger"
        );
    }
    let row11 = split_csv(lines[12]);
    assert_eq!(row11[col("complete")], "false");
    assert_eq!(split_csv(lines[7])[col("perturbed")], "true");
    assert_eq!(
        split_csv(lines[2])[col("scope:step/forward/attention:host_ns")],
        "3010000"
    );
}

#[test]
fn csv_quotes_odd_scope_names_and_leaves_absent_cells_empty() {
    let mut l = read("v1-missing-nvml.jsonl");
    l.iterations[1].scopes[0].path = "load, \"shard\"".into();
    l.iterations[2].devices.clear();
    let layout = CsvLayout::from_rows(&l.iterations);
    let mut out = Vec::new();
    layout.write_header(&mut out).unwrap();
    for r in &l.iterations {
        layout.write_row(&mut out, r).unwrap();
    }
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("\"scope:load, \"\"shard\"\":host_ns\""));
    let lines: Vec<&str> = text.lines().collect();
    let head = split_csv(lines[0]);
    let busy = head.iter().position(|h| h == "dev0_busy_ns").unwrap();
    let step = head.iter().position(|h| h == "scope:step:host_ns").unwrap();
    let odd = head
        .iter()
        .position(|h| h == "scope:load, \"shard\":host_ns")
        .unwrap();
    assert_eq!(split_csv(lines[3])[busy], "");
    assert_eq!(split_csv(lines[2])[step], "", "step did not run in row 1");
    assert_ne!(split_csv(lines[2])[odd], "");
    assert_eq!(head.iter().filter(|h| h.contains("sm_clock")).count(), 1);
    assert_eq!(
        split_csv(lines[1])[busy + 4],
        "",
        "NVML missing: empty clock"
    );
}

#[test]
fn markdown_summary_has_the_tables() {
    let l = read("v1-nested-scopes.jsonl");
    let s = LedgerSummary::compute(&l, &SummaryOptions::default());
    assert_eq!(s.warmup, [0]);
    assert_eq!(s.perturbed, [6]);
    assert_eq!(s.incomplete, [11]);
    assert_eq!(s.used.len(), 9);
    let md = markdown_summary(&s, "nested.jsonl");
    for needle in [
        "**Environment:** 1× NVIDIA H200 (sm_90, 132 SMs) · driver 580.95.05 · CUDA 13.0",
        "12 rows, 9 used (left out: warm-up 0; perturbed 6; incomplete 11)",
        "### Scopes (per iteration)",
        "| scope | ran in | host median | host p90 | host p99 |",
        "| step/forward/attention | 9/9 |",
        "### Top kernel families",
        "| 1 | ampere_sgemm_128x64_nn |",
        "flash_fwd_kernel",
        "Amdahl ceiling",
        "### Device busy and idle",
        "### Clocks and power",
        "**Energy per iteration:** not recorded.",
        "### Warnings",
        "scope step/backward left open at shutdown",
    ] {
        assert!(md.contains(needle), "missing {needle:?} in\n{md}");
    }
    assert_tables_are_rectangular(&md);
}

#[test]
fn markdown_summary_energy_and_missing_nvml() {
    let l = read("v1-overlapping-streams.jsonl");
    let s = LedgerSummary::compute(&l, &SummaryOptions::default());
    let md = markdown_summary(&s, "o.jsonl");
    assert_tables_are_rectangular(&md);
    assert!(md.contains("**Energy per iteration:** 4.53 J mean"), "{md}");
    assert!(md.contains("| 0 | 1980 MHz |"));
    let l = read("v1-missing-nvml.jsonl");
    let s = LedgerSummary::compute(&l, &SummaryOptions::default());
    assert!(s.nvml.is_empty() && s.energy.is_none());
    let md = markdown_summary(&s, "m.jsonl");
    assert!(md.contains("header: NVML: NVML is not available"));
    assert!(md.contains("no NVML figures"));
    assert!(md.contains("12 activity records dropped by CUPTI (iterations 3)"));
    assert!(!md.contains("### Clocks and power"));
}

#[test]
fn markdown_escapes_names_that_would_break_a_table() {
    let mut l = read("v1-missing-nvml.jsonl");
    for r in &mut l.iterations {
        r.scopes[0].path = "a|b<script>".into();
    }
    let md = markdown_summary(&LedgerSummary::compute(&l, &SummaryOptions::default()), "x");
    assert!(md.contains("a\\|b&lt;script&gt;"));
    assert!(!md.contains("<script>"));
}

#[test]
fn comparison_markdown_and_experiment_ledger() {
    let a = read("v1-ab-baseline.jsonl");
    let b = read("v1-ab-change.jsonl");
    let c = compare(view(&a), view(&b), &CompareOptions::default()).unwrap();
    assert!(c.speedup.ci_low > 1.5, "{:?}", c.speedup);
    let md = markdown_comparison(&c, "a.jsonl", "b.jsonl");
    assert_tables_are_rectangular(&md);
    assert!(md.contains("**Verdict: B is faster.**"), "{md}");
    assert!(md.contains("| ampere_sgemm_128x64_nn |"));
    let same = compare(view(&a), view(&a), &CompareOptions::default()).unwrap();
    assert_eq!(
        Verdict::from_estimate(&same.speedup),
        Verdict::NoSignificantChange
    );

    let dir = tempfile::tempdir().unwrap();
    let log = ExperimentLog::in_dir(&dir.path().join("exp"));
    let e =
        ExperimentEntry::from_comparison(&c, "GEMM tile | split", "128x64", "a", "b", "2025-11-24");
    assert_eq!(e.verdict, Verdict::Faster);
    // B halves the GEMM (12 ms -> 6 ms per iteration); the softmax stays.
    assert!((e.kernel_ns_a - e.kernel_ns_b - 6e6).abs() < 0.1e6, "{e:?}");
    log.append(&e).unwrap();
    let e2 = ExperimentEntry::from_comparison(&same, "noise", "none", "a", "a", "2025-11-25");
    log.append(&e2).unwrap();
    let md = std::fs::read_to_string(&log.markdown).unwrap();
    assert_eq!(md.matches("| date | hypothesis |").count(), 1);
    assert!(md.contains("| 2025-11-24 | GEMM tile \\| split | 128x64 | — |"));
    assert!(md.contains("| faster"));
    assert!(md.contains("| no significant change"));
    let csv = std::fs::read_to_string(&log.csv).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0], CSV_COLUMNS.join(","));
    assert_eq!(split_csv(lines[1]).len(), CSV_COLUMNS.len());
    assert_eq!(split_csv(lines[1])[12], "faster");
    assert_eq!(split_csv(lines[2])[12], "no significant change");
}

#[test]
fn merge_aligns_ranks_and_finds_the_slowest() {
    let r0 = read("v1-rank0.jsonl");
    let r1 = read("v1-rank1.jsonl");
    let s0 = RankSeries::from_rows(&r0.header, "r0", &r0.iterations);
    let s1 = RankSeries::from_rows(&r1.header, "r1", &r1.iterations);
    let v = merge_ranks(vec![s1.clone(), s0.clone()]).unwrap();
    assert_eq!(v.ranks, [0, 1]);
    assert_eq!(v.sources, ["r0", "r1"]);
    assert_eq!(v.iterations.len(), 10);
    let slowest: Vec<u32> = v.iterations.iter().map(|i| i.slowest_rank).collect();
    // Rank 1 lags by 2 ms in iterations 3 and 7; rank 0 by 1 ms in 5; 9 only exists in rank 0.
    assert_eq!(slowest, [0, 0, 0, 1, 0, 0, 0, 1, 0, 0]);
    assert_eq!(v.iterations[3].spread_ns, 2_000_000);
    assert_eq!(v.iterations[5].spread_ns, 1_000_000);
    assert_eq!(v.iterations[9].wall_ns, [Some(8_090_000), None]);
    assert_eq!(v.slowest_counts, [8, 2]);
    assert_eq!(v.spread.unwrap().n, 9);
    assert!(v
        .notes
        .iter()
        .any(|n| n.contains("iterations 9 are missing")));
    let md = v.to_markdown();
    assert_tables_are_rectangular(&md);
    assert!(md.contains("| iteration | rank 0 | rank 1 | slowest rank |"));
    assert!(
        md.contains("| 3 | 8.03 ms | 10.0 ms | 1 | 2.00 ms |"),
        "{md}"
    );
    let csv = v.to_csv();
    assert_eq!(csv.lines().count(), 11);
    assert!(csv.starts_with("index,wall_ns_rank0,wall_ns_rank1,slowest_rank"));

    let dup = merge_ranks(vec![s0.clone(), s0.clone()]).unwrap_err();
    assert!(matches!(dup, MergeError::DuplicateRank { rank: 0, .. }));
    assert!(dup.to_string().contains("both claim rank 0"));
    let mut anon = s1.clone();
    anon.rank = None;
    assert!(matches!(
        merge_ranks(vec![s0.clone(), anon.clone()]),
        Err(MergeError::MissingRank { .. })
    ));
    let mut anon0 = s0;
    anon0.rank = None;
    let v = merge_ranks(vec![anon0, anon]).unwrap();
    assert!(v.notes[0].contains("numbered in the order given"));
    assert!(matches!(merge_ranks(Vec::new()), Err(MergeError::Empty)));
}

#[test]
fn summary_says_once_when_most_device_time_is_unscoped_while_scopes_were_open() {
    use gpu_ledger_format::{AttributionCounts, LaunchThread, ScopeRow};
    let mut l = read("v1-nested-scopes.jsonl");
    let s = LedgerSummary::compute(&l, &SummaryOptions::default());
    assert!(
        !markdown_summary(&s, "x").contains("is in (unscoped)"),
        "the golden ledger's scopes hold its device time"
    );
    for (i, r) in l.iterations.iter_mut().enumerate() {
        let busy: u64 = r.devices.iter().map(|d| d.busy_ns).sum();
        r.scopes.retain(|s| s.path != "(unscoped)");
        r.scopes.push(ScopeRow {
            path: "(unscoped)".into(),
            calls: 0,
            host_ns: 0,
            launches: 5,
            kernels: 5,
            device_ns: busy * 9 / 10,
            device_ns_inclusive: busy * 9 / 10,
            event_device_ns: None,
        });
        r.launch_threads.push(LaunchThread {
            name: Some("launcher-0".into()),
            tid: 7,
            kernels: 5,
            kernel_ns: busy,
            copies: 0,
            attribution: AttributionCounts {
                unscoped: 5,
                ..AttributionCounts::default()
            },
            ..LaunchThread::default()
        });
        r.warnings.push(format!(
            "{} % of this iteration's kernel time is in no scope although scopes were open: x",
            90 + i
        ));
    }
    let md = markdown_summary(&LedgerSummary::compute(&l, &SummaryOptions::default()), "x");
    assert!(
        md.contains("90 % of the device time of the iterations that had scopes is in (unscoped), launched on threads with no scope open (\"launcher-0\" (tid 7): 60 kernels)"),
        "{md}"
    );
    assert!(md.contains("ScopeContext::enter") && md.contains("Config::follow"));
    assert!(
        !md.contains("of this iteration's kernel time"),
        "one line for the run, not one per row's share: {md}"
    );
}
