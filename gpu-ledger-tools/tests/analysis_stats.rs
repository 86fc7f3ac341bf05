//! Row selection (warm-up, perturbed, incomplete) and per-scope / per-family distributions.

use gpu_ledger_format::schema::IterationRow;
use gpu_ledger_tools::analysis::distributions::{family_distributions, scope_distributions};
use gpu_ledger_tools::analysis::families::FamilyRules;
use gpu_ledger_tools::analysis::selection::select_rows;
use gpu_ledger_tools::analysis::stats::{
    Distribution, IterationMetric, RowFilter, Warmup, WarmupDetect,
};

mod analysis_common;
use analysis_common::{kernel, row, scope};

/// 30 iterations of about 10 ms: 0 and 1 are slow (warm-up), 2 is normal, 3 is perturbed and
/// slow, 4 is incomplete.
fn ledger() -> Vec<IterationRow> {
    (0..30u64)
        .map(|i| {
            let wall = match i {
                0 => 80_000_000,
                1 => 30_000_000,
                3 => 50_000_000,
                _ => 10_000_000 + (i % 4) * 100_000,
            };
            let mut r = row(i, wall);
            r.perturbed = i == 3;
            r.complete = i != 4;
            r
        })
        .collect()
}

#[test]
fn detected_warmup_perturbed_and_incomplete_are_left_out() {
    let rows = ledger();
    let s = select_rows(&rows, &RowFilter::default());
    assert_eq!(s.warmup, [0, 1]);
    assert_eq!(s.perturbed, [3]);
    assert_eq!(s.incomplete, [4]);
    assert_eq!(s.used.len(), 26);
    assert_eq!(s.used[0].index, 2);
    let d = Distribution::from_samples(&IterationMetric::HostWall.values(s.used.iter().copied()))
        .unwrap();
    assert!(d.max <= 10_300_000.0, "no slow row kept: {d:?}");
}

#[test]
fn other_policies() {
    let rows = ledger();
    let none = select_rows(
        &rows,
        &RowFilter {
            warmup: Warmup::None,
            ..RowFilter::default()
        },
    );
    assert!(none.warmup.is_empty());
    assert_eq!(none.used.len(), 28);
    // Fixed counts ledger rows: the first three rows, whatever else they are.
    let fixed = select_rows(
        &rows,
        &RowFilter {
            warmup: Warmup::Fixed(3),
            ..RowFilter::default()
        },
    );
    assert_eq!(fixed.warmup, [0, 1, 2]);
    assert_eq!(fixed.used.len(), 25);
    // Keeping perturbed rows: the slow perturbed row 3 is then inside the warm-up window, and
    // everything up to the last slow leading row is warm-up.
    let keep = select_rows(
        &rows,
        &RowFilter {
            include_perturbed: true,
            ..RowFilter::default()
        },
    );
    assert_eq!(keep.warmup, [0, 1, 2, 3]);
    assert!(keep.perturbed.is_empty());
    // A window of 1 leaves row 1 in.
    let narrow = select_rows(
        &rows,
        &RowFilter {
            warmup: Warmup::Detect(WarmupDetect {
                max_warmup: 1,
                ..WarmupDetect::default()
            }),
            ..RowFilter::default()
        },
    );
    assert_eq!(narrow.warmup, [0]);
    let all = select_rows(
        &rows,
        &RowFilter {
            warmup: Warmup::None,
            include_perturbed: true,
            include_incomplete: true,
            include_untraced: true,
        },
    );
    assert_eq!(all.used.len(), 30);
}

#[test]
fn empty_ledger_selects_nothing() {
    let s = select_rows(&[], &RowFilter::default());
    assert!(s.used.is_empty() && s.warmup.is_empty());
    assert!(scope_distributions(s.used.iter().copied()).is_empty());
    assert!(family_distributions(s.used.iter().copied(), &FamilyRules::new()).is_empty());
}

#[test]
fn scope_distributions_over_present_iterations() {
    let rows: Vec<IterationRow> = (0..10u64)
        .map(|i| {
            let mut r = row(i, 10_000_000);
            r.scopes = vec![scope("step", 9_000_000 + i * 1000, 8_000_000, 0)];
            r.scopes
                .push(scope("step/forward", 3_000_000, 2_500_000, 40));
            if i % 5 == 0 {
                // A checkpoint every fifth iteration, entered twice.
                r.scopes
                    .push(scope("step/checkpoint", 1_000_000, 500_000, 2));
                r.scopes
                    .push(scope("step/checkpoint", 1_000_000, 500_000, 2));
            }
            r
        })
        .collect();
    let s = scope_distributions(&rows);
    let paths: Vec<&str> = s.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(paths, ["step", "step/checkpoint", "step/forward"]);
    let step = &s[0];
    assert_eq!((step.iterations, step.present_in), (10, 10));
    assert_eq!(step.host_ns.min, 9_000_000.0);
    assert_eq!(step.host_ns.max, 9_009_000.0);
    assert!((step.host_ns.median - 9_004_500.0).abs() < 1e-6);
    let ck = &s[1];
    assert_eq!(ck.present_in, 2);
    assert_eq!(ck.calls.median, 2.0);
    assert_eq!(ck.host_ns.median, 2_000_000.0);
    assert_eq!(ck.launches.median, 4.0);
    assert!((ck.host_ns_mean_per_iteration - 400_000.0).abs() < 1e-6);
    assert!((ck.launches_mean_per_iteration - 0.8).abs() < 1e-12);
    assert_eq!(ck.event_device_ns, None);
}

#[test]
fn family_distributions_per_iteration() {
    let rows: Vec<IterationRow> = (0..4u64)
        .map(|i| {
            let mut r = row(i, 10_000_000);
            r.kernels = vec![
                kernel("_Z5scaleIfEvPT_S0_i", 10, 128, 16, 10, 1000 + i * 100),
                kernel("_Z5scaleIdEvPT_S0_i", 10, 128, 16, 5, 2000),
            ];
            if i == 0 {
                r.kernels.push(kernel("init_kernel", 1, 32, 8, 1, 50_000));
            }
            r
        })
        .collect();
    let f = family_distributions(&rows, &FamilyRules::new());
    assert_eq!(
        f[0].family, "scale",
        "float and double instantiations are one family"
    );
    assert_eq!(f[0].present_in, 4);
    // Per iteration: 10*(1000+100i) + 10000 = 20000, 21000, 22000, 23000.
    assert_eq!((f[0].total_ns.min, f[0].total_ns.max), (20_000.0, 23_000.0));
    assert_eq!(f[0].launches.median, 15.0);
    assert_eq!(f[1].family, "init_kernel");
    assert_eq!(f[1].present_in, 1);
    assert!((f[1].total_ns_mean_per_iteration - 12_500.0).abs() < 1e-9);
}

/// Rows in memory go through the same selector and series as a stream, with a budget sized to
/// them: past the bound where a stream's series move to a sketch, every figure is still exact.
#[test]
fn the_functions_over_rows_in_memory_stay_exact_past_the_streaming_bound() {
    use gpu_ledger_tools::analysis::distributions::ScopeSeries;
    use gpu_ledger_tools::analysis::series::EXACT_VALUES;
    use gpu_ledger_tools::analysis::stats::detect_warmup;
    let n = EXACT_VALUES as u64 + 5_000;
    let rows: Vec<IterationRow> = (0..n)
        .map(|i| {
            let wall = if i < 3 {
                50_000_000
            } else {
                10_000_000 + (i * 7919) % 400_000
            };
            let mut r = row(i, wall);
            r.scopes = vec![scope("step", wall - 1000 - (i * 104_729) % 5000, 0, 1)];
            r
        })
        .collect();
    let walls: Vec<f64> = rows.iter().map(|r| r.host_wall_ns as f64).collect();
    let s = select_rows(&rows, &RowFilter::default());
    let warm = detect_warmup(&walls, &WarmupDetect::default());
    assert_eq!(warm, 3);
    assert_eq!(s.warmup, [0, 1, 2]);
    assert_eq!(s.used.len() as u64, n - 3);
    assert!(
        s.used.windows(2).all(|w| w[0].index < w[1].index),
        "ledger order"
    );
    let hosts: Vec<u64> = s.used.iter().map(|r| r.scopes[0].host_ns).collect();
    let exact = Distribution::from_u64(&hosts).unwrap();
    let step = &scope_distributions(s.used.iter().copied())[0];
    assert_eq!(step.host_ns, exact);
    assert!(!step.host_ns.sketched);
    // The same rows as a stream, in bounded memory: the sketch.
    let mut streamed = ScopeSeries::default();
    s.used.iter().for_each(|r| streamed.push(r));
    assert!(streamed.sketched());
}
