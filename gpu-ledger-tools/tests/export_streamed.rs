//! The streamed summary, report, comparison and merge: the same figures as the whole-ledger
//! functions on every golden ledger, a quantile sketch past the exact bound that keeps its stated
//! error, a bootstrap that says what it resampled, and a report whose size stays bounded as rows
//! grow.

mod export_common;

use export_common::{data, read};
use gpu_ledger_format::reader::{read_ledger, Ledger};
use gpu_ledger_format::schema::IterationRow;
use gpu_ledger_tools::analysis::compare::{
    compare, compare_streamed, CompareOptions, CompareSide, LedgerView, BOOTSTRAP_SAMPLE,
};
use gpu_ledger_tools::analysis::series::SKETCH_RELATIVE_ERROR;
use gpu_ledger_tools::analysis::stats::{percentile_sorted, Distribution, RowFilter, Warmup};
use gpu_ledger_tools::export::{
    merge_ranks, write_html_report, LedgerSummary, MergeStream, RankSeries, ReportBuilder,
    ReportOptions, SummaryBuilder, SummaryOptions,
};

fn golden() -> Vec<(String, Ledger)> {
    let mut out: Vec<(String, Ledger)> = std::fs::read_dir(data())
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name()?.to_str()?.to_string();
            let l = read_ledger(&p).ok()?;
            Some((name, l))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 8, "golden ledgers: {}", out.len());
    out
}

fn filters() -> [RowFilter; 3] {
    [
        RowFilter::default(),
        RowFilter {
            warmup: Warmup::None,
            include_perturbed: true,
            include_incomplete: true,
            include_untraced: true,
        },
        RowFilter {
            warmup: Warmup::Fixed(2),
            ..RowFilter::default()
        },
    ]
}

fn streamed_summary(l: &Ledger, opts: &SummaryOptions) -> LedgerSummary {
    let mut b = SummaryBuilder::new(opts);
    l.iterations.iter().for_each(|r| b.push(r.clone()));
    b.finish(&l.header, l.trailer.as_ref())
}

#[test]
fn streamed_summaries_equal_whole_ones_on_every_golden_ledger() {
    for (name, l) in golden() {
        for filter in filters() {
            let opts = SummaryOptions {
                filter,
                ..SummaryOptions::default()
            };
            let mut whole = LedgerSummary::compute(&l, &opts);
            let mut streamed = streamed_summary(&l, &opts);
            assert!(!streamed.sketched);
            // Held-back warm-up candidates are added last, so a sum of fractional joules can
            // differ in its last bit; every other figure is the same to the bit.
            if let (Some(w), Some(s)) = (&mut whole.energy, &mut streamed.energy) {
                assert!((w.total_j - s.total_j).abs() <= 1e-12 * w.total_j.abs());
                let (wm, sm) = (
                    w.mean_j_per_iteration.unwrap(),
                    s.mean_j_per_iteration.unwrap(),
                );
                assert!((wm - sm).abs() <= 1e-12 * wm.abs());
                for (a, b) in w.per_device.iter_mut().zip(&mut s.per_device) {
                    assert!((a.total_j - b.total_j).abs() <= 1e-12 * a.total_j.abs());
                    b.total_j = a.total_j;
                }
                s.total_j = w.total_j;
                s.mean_j_per_iteration = w.mean_j_per_iteration;
            }
            assert_eq!(streamed, whole, "{name} {filter:?}");
        }
    }
}

#[test]
fn streamed_reports_equal_whole_ones_on_every_golden_ledger() {
    for (name, l) in golden() {
        let opts = ReportOptions::default();
        let mut whole = Vec::new();
        write_html_report(&l, &name, &opts, &mut whole).unwrap();
        let mut b = ReportBuilder::new(&opts);
        l.iterations.iter().for_each(|r| b.push(r.clone()));
        let mut streamed = Vec::new();
        b.finish(&l.header, l.trailer.as_ref(), &name, &mut streamed)
            .unwrap();
        assert!(whole == streamed, "{name}: the streamed report differs");
    }
}

fn side<'o>(l: &Ledger, opts: &'o CompareOptions) -> CompareSide<'o> {
    let mut s = CompareSide::new(opts);
    l.iterations.iter().for_each(|r| s.push(r.clone()));
    s
}

#[test]
fn streamed_comparisons_equal_whole_ones_below_the_bound() {
    let ledgers = golden();
    let opts = CompareOptions {
        resamples: 500,
        ..CompareOptions::default()
    };
    let mut compared = 0;
    for (na, a) in &ledgers {
        for (nb, b) in &ledgers {
            let whole = compare(
                LedgerView {
                    header: &a.header,
                    rows: &a.iterations,
                },
                LedgerView {
                    header: &b.header,
                    rows: &b.iterations,
                },
                &opts,
            );
            let streamed =
                compare_streamed(&a.header, side(a, &opts), &b.header, side(b, &opts), &opts);
            compared += usize::from(whole.is_ok());
            assert_eq!(streamed, whole, "{na} vs {nb}");
        }
    }
    assert!(compared > 20, "{compared} comparisons made");
}

/// `n` rows like the golden ones, with host wall times of a long-tailed distribution.
fn long_run(n: u64, slower: f64) -> (Ledger, Vec<f64>) {
    let mut l = read("v1-ab-baseline.jsonl");
    let template = l.iterations[l.iterations.len() - 1].clone();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut walls = Vec::new();
    l.iterations = (0..n)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let noise = (state % 100_000) as f64 / 100_000.0;
            let tail = if state % 50 == 0 { 3.0 } else { 1.0 };
            let wall = (1_000_000.0 * slower * (1.0 + 0.1 * noise) * tail) as u64;
            walls.push(wall as f64);
            IterationRow {
                index: i,
                host_start_ns: i * 10_000_000,
                host_wall_ns: wall,
                complete: true,
                perturbed: false,
                ..template.clone()
            }
        })
        .collect();
    (l, walls)
}

#[test]
fn past_the_bound_summary_percentiles_come_from_a_sketch_within_its_error() {
    let n = gpu_ledger_tools::analysis::series::EXACT_VALUES as u64 + 20_000;
    let (l, walls) = long_run(n, 1.0);
    let opts = SummaryOptions {
        filter: RowFilter {
            warmup: Warmup::None,
            ..RowFilter::default()
        },
        ..SummaryOptions::default()
    };
    let s = streamed_summary(&l, &opts);
    assert!(s.sketched);
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("percentiles from a quantile sketch") && w.contains("1 %")),
        "{:?}",
        s.warnings
    );
    let d = s.host_wall_ns.unwrap();
    assert!(d.sketched);
    let exact = Distribution::from_samples(&walls).unwrap();
    assert_eq!((d.n, d.min, d.max), (exact.n, exact.min, exact.max));
    let mut sorted = walls.clone();
    sorted.sort_unstable_by(f64::total_cmp);
    for (q, got) in [(0.5, d.median), (0.9, d.p90), (0.99, d.p99)] {
        let want = percentile_sorted(&sorted, q).unwrap();
        assert!(
            (got - want).abs() <= SKETCH_RELATIVE_ERROR * want,
            "q {q}: sketch {got}, exact {want}"
        );
    }
    // Below the bound the same rows give exact percentiles and no such warning.
    let (small, _) = long_run(5_000, 1.0);
    let s = streamed_summary(&small, &opts);
    assert!(!s.sketched);
    assert_eq!(s, LedgerSummary::compute(&small, &opts));
}

#[test]
fn past_the_bound_the_bootstrap_resamples_a_bounded_sample_and_says_so() {
    let n = BOOTSTRAP_SAMPLE as u64 + 10_000;
    let (a, _) = long_run(n, 1.0);
    let (b, _) = long_run(n, 0.9);
    let opts = CompareOptions {
        resamples: 20,
        filter: RowFilter {
            warmup: Warmup::None,
            ..RowFilter::default()
        },
        ..CompareOptions::default()
    };
    let c = compare_streamed(
        &a.header,
        side(&a, &opts),
        &b.header,
        side(&b, &opts),
        &opts,
    )
    .unwrap();
    assert_eq!(
        (c.speedup.sample_a, c.speedup.sample_b),
        (BOOTSTRAP_SAMPLE, BOOTSTRAP_SAMPLE)
    );
    assert_eq!(c.a.distribution.n, n as usize);
    let said = format!("uniform sample of {BOOTSTRAP_SAMPLE} of A's {n}");
    assert!(
        c.warnings.iter().any(|w| w.contains(&said)),
        "{:?}",
        c.warnings
    );
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("percentiles from a quantile sketch") && w.contains("1 %")),
        "{:?}",
        c.warnings
    );
    // B is 10 % faster: the sample's estimate finds it.
    assert!(
        (c.speedup.speedup - 1.0 / 0.9).abs() < 0.01,
        "{:?}",
        c.speedup
    );
    assert!(c.speedup.ci_low > 1.0);
}

#[test]
fn report_size_stays_bounded_as_rows_grow() {
    let opts = ReportOptions {
        max_points: 50,
        ..ReportOptions::default()
    };
    let report = |n: u64| {
        let (l, _) = long_run(n, 1.0);
        let mut b = ReportBuilder::new(&opts);
        l.iterations.iter().for_each(|r| b.push(r.clone()));
        assert!(b.buckets() <= 50, "{} buckets", b.buckets());
        let width = b.bucket_width();
        let mut out = Vec::new();
        b.finish(&l.header, l.trailer.as_ref(), "long", &mut out)
            .unwrap();
        (String::from_utf8(out).unwrap(), width)
    };
    let (small, w_small) = report(2_000);
    let (large, w_large) = report(32_000);
    assert_eq!((w_small, w_large), (64, 1024));
    assert!(large.contains("Each bar is the mean of 1024 consecutive iterations"));
    let host = &large[large.find("id=\"chart-scopes-host\"").unwrap()..];
    let host = &host[..host.find("</svg>").unwrap()];
    let bars = host.matches("<g class=\"stack\"").count();
    assert!((25..=50).contains(&bars), "{bars} bars");
    // Sixteen times the rows, about the same report (labels only grow by their digits).
    assert!(
        (large.len() as f64) < 1.1 * small.len() as f64,
        "{} bytes for 2 000 rows, {} for 32 000",
        small.len(),
        large.len()
    );
}

#[test]
fn a_streamed_merge_writes_what_the_whole_merge_writes() {
    let r0 = read("v1-rank0.jsonl");
    let r1 = read("v1-rank1.jsonl");
    let mut shorter = r1.clone();
    shorter.iterations.truncate(shorter.iterations.len() - 2);
    for (x, y) in [(&r1, &r0), (&r0, &shorter), (&r0, &r1)] {
        let series = |l: &Ledger, src: &str| {
            RankSeries::from_rows(&l.header, src, &l.iterations).with_trailer(l.trailer.is_some())
        };
        let whole = merge_ranks(vec![series(x, "x"), series(y, "y")]).unwrap();
        let mut m = MergeStream::new(vec![
            RankSeries::new(&x.header, "x"),
            RankSeries::new(&y.header, "y"),
        ])
        .unwrap();
        let (mut md, mut csv) = (m.head(false), m.head(true));
        let mut indices: Vec<u64> = x
            .iterations
            .iter()
            .chain(&y.iterations)
            .map(|r| r.index)
            .collect();
        indices.sort_unstable();
        indices.dedup();
        let cell = |l: &Ledger, i: u64| {
            l.iterations
                .iter()
                .find(|r| r.index == i)
                .map(|r| (r.host_wall_ns, r.perturbed || !r.complete))
        };
        for i in indices {
            let it = m.push(i, &[cell(x, i), cell(y, i)]).unwrap();
            md.push_str(&it.to_markdown());
            csv.push_str(&it.to_csv());
        }
        m.ended(0, x.trailer.is_some());
        m.ended(1, y.trailer.is_some());
        md.push_str(&m.finish_markdown());
        assert_eq!(md, whole.to_markdown());
        assert_eq!(csv, whole.to_csv());
    }
}

#[test]
fn many_scopes_share_one_budget_of_exact_values() {
    use gpu_ledger_tools::analysis::distributions::ScopeSeries;
    use gpu_ledger_tools::analysis::series::Budget;
    let mut l = read("v1-nested-scopes.jsonl");
    let template = l.iterations[3].clone();
    let scope = template.scopes[0].clone();
    // 40 scopes, six series each, over 2 000 rows: 480 000 values against a budget of 20 000.
    let budget = Budget::with_limit(20_000);
    let mut scopes = ScopeSeries::with_budget(budget.clone());
    let mut host: Vec<f64> = Vec::new();
    l.iterations = (0..2_000u64)
        .map(|i| {
            let mut r = template.clone();
            r.index = i;
            r.scopes = (0..40)
                .map(|k| {
                    let mut s = scope.clone();
                    s.path = format!("step/s{k:02}");
                    s.host_ns = 1_000_000 + (i * 7919 + k * 104_729) % 200_000;
                    s
                })
                .collect();
            host.push(r.scopes[7].host_ns as f64);
            r
        })
        .collect();
    for r in &l.iterations {
        scopes.push(r);
        assert!(budget.held() <= 20_000 + 1, "held {}", budget.held());
    }
    assert!(scopes.sketched());
    let stats = scopes.finish();
    assert_eq!(stats.len(), 40);
    let d = stats[7].host_ns;
    assert!(d.sketched);
    let mut sorted = host.clone();
    sorted.sort_unstable_by(f64::total_cmp);
    let exact = percentile_sorted(&sorted, 0.9).unwrap();
    assert!((d.p90 - exact).abs() <= SKETCH_RELATIVE_ERROR * exact * 1.001);
    assert_eq!(d.n, 2_000);
}

/// A ledger in memory is the streamed engine's small case: the whole-ledger functions push its
/// rows through the builders with a budget sized to it, so that past the bounds where a stream
/// moves to a sketch and a sample, their figures stay exact and equal a direct build.
#[test]
fn a_ledger_in_memory_stays_exact_past_the_streaming_bounds() {
    use gpu_ledger_tools::analysis::series::{Budget, EXACT_VALUES};
    let n = EXACT_VALUES as u64 + 20_000;
    let (l, walls) = long_run(n, 1.0);
    let opts = SummaryOptions {
        filter: RowFilter {
            warmup: Warmup::None,
            ..RowFilter::default()
        },
        ..SummaryOptions::default()
    };
    let whole = LedgerSummary::compute(&l, &opts);
    let mut b = SummaryBuilder::with_budget(&opts, Budget::exact(l.iterations.len()));
    l.iterations.iter().for_each(|r| b.push(r));
    assert_eq!(whole, b.finish(&l.header, l.trailer.as_ref()));
    assert!(!whole.sketched);
    assert!(!whole.warnings.iter().any(|w| w.contains("quantile sketch")));
    assert_eq!(whole.host_wall_ns, Distribution::from_samples(&walls));
    assert!(
        streamed_summary(&l, &opts).sketched,
        "a stream of the same rows"
    );

    let (b_ledger, _) = long_run(n, 0.9);
    let copts = CompareOptions {
        resamples: 20,
        filter: opts.filter,
        ..CompareOptions::default()
    };
    fn view(l: &Ledger) -> LedgerView<'_> {
        LedgerView {
            header: &l.header,
            rows: &l.iterations,
        }
    }
    fn exact_side<'a>(l: &'a Ledger, o: &'a CompareOptions) -> CompareSide<'a, &'a IterationRow> {
        let mut s = CompareSide::with_budget(o, Budget::exact(l.iterations.len()));
        l.iterations.iter().for_each(|r| s.push(r));
        s
    }
    let c = compare(view(&l), view(&b_ledger), &copts).unwrap();
    let direct = compare_streamed(
        &l.header,
        exact_side(&l, &copts),
        &b_ledger.header,
        exact_side(&b_ledger, &copts),
        &copts,
    );
    assert_eq!(Ok(&c), direct.as_ref());
    assert_eq!(
        (c.speedup.sample_a, c.speedup.sample_b),
        (n as usize, n as usize)
    );
    assert_eq!(Some(c.a.distribution), Distribution::from_samples(&walls));
    assert!(
        !c.warnings
            .iter()
            .any(|w| w.contains("sketch") || w.contains("sample")),
        "{:?}",
        c.warnings
    );
}

/// The report of a ledger in memory splits its rows evenly between the bars, as it did before it
/// was built row by row, and is the direct build of a report made for its rows.
#[test]
fn a_report_of_a_ledger_in_memory_splits_its_rows_evenly() {
    let (l, _) = long_run(1_000, 1.0);
    let opts = ReportOptions::default();
    let mut whole = Vec::new();
    write_html_report(&l, "long", &opts, &mut whole).unwrap();
    let mut b = ReportBuilder::for_rows(&opts, l.iterations.len());
    l.iterations.iter().for_each(|r| b.push(r));
    assert_eq!((b.buckets(), b.bucket_width()), (400, 3));
    let mut direct = Vec::new();
    b.finish(&l.header, l.trailer.as_ref(), "long", &mut direct)
        .unwrap();
    assert!(whole == direct, "the wrapper is the direct build");
    let whole = String::from_utf8(whole).unwrap();
    assert!(whole.contains("Each bar is the mean of about 3 consecutive iterations."));
    let host = &whole[whole.find("id=\"chart-scopes-host\"").unwrap()..];
    let host = &host[..host.find("</svg>").unwrap()];
    assert_eq!(host.matches("<g class=\"stack\"").count(), 400);
}
