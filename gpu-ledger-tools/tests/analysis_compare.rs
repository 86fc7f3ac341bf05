//! A/B comparison: the bootstrap interval on synthetic data with a known answer, and a full
//! comparison of two ledgers with its warnings.

use gpu_ledger_format::schema::IterationRow;
use gpu_ledger_tools::analysis::compare::{
    bootstrap_speedup, compare, CompareError, CompareOptions, LedgerView, Verdict,
};
use gpu_ledger_tools::analysis::stats::{RowFilter, Warmup};

mod analysis_common;
use analysis_common::{copies, header, kernel, nvml, row, scope, Noise};
use gpu_ledger_format::NvmlGpuRecord;

/// `n` iterations around `center_ns` with a relative standard deviation `rel_sd`.
fn sample(noise: &mut Noise, n: usize, center_ns: f64, rel_sd: f64) -> Vec<f64> {
    (0..n)
        .map(|_| center_ns * (1.0 + rel_sd * noise.normal()))
        .collect()
}

#[test]
fn interval_contains_the_true_speedup() {
    // B = A / 1.25 with independent 3 % noise on both: the true ratio of medians is 1.25.
    let mut noise = Noise(2024);
    let a = sample(&mut noise, 40, 100e6, 0.03);
    let b = sample(&mut noise, 40, 80e6, 0.03);
    let s = bootstrap_speedup(&a, &b, 10_000, 0.95, 7).unwrap();
    assert!(s.ci_low < 1.25 && 1.25 < s.ci_high, "{s:?}");
    assert!(s.ci_low <= s.speedup && s.speedup <= s.ci_high, "{s:?}");
    assert!(s.ci_high - s.ci_low < 0.06, "interval too wide: {s:?}");
    assert!(s.is_significant());
    // Seeded: the same inputs give the same interval; another seed a slightly different one.
    assert_eq!(bootstrap_speedup(&a, &b, 10_000, 0.95, 7), Some(s));
    let other = bootstrap_speedup(&a, &b, 10_000, 0.95, 8).unwrap();
    assert_ne!((other.ci_low, other.ci_high), (s.ci_low, s.ci_high));
    assert!((other.ci_low - s.ci_low).abs() < 0.01);
    // A wider confidence gives a wider interval.
    let wide = bootstrap_speedup(&a, &b, 10_000, 0.99, 7).unwrap();
    assert!(wide.ci_low <= s.ci_low && wide.ci_high >= s.ci_high);
}

#[test]
fn interval_covers_the_truth_at_about_its_confidence() {
    // 200 independent experiments of 30 iterations per side: the 95 % interval must cover the
    // true 1.25 in most of them, and a wrong value (1.35) in almost none.
    let mut noise = Noise(99);
    let (mut covered, mut covered_wrong) = (0, 0);
    for seed in 0..200u64 {
        let a = sample(&mut noise, 30, 100e6, 0.05);
        let b = sample(&mut noise, 30, 80e6, 0.05);
        let s = bootstrap_speedup(&a, &b, 2000, 0.95, seed).unwrap();
        covered += usize::from(s.ci_low <= 1.25 && 1.25 <= s.ci_high);
        covered_wrong += usize::from(s.ci_low <= 1.35 && 1.35 <= s.ci_high);
    }
    assert!((170..=200).contains(&covered), "coverage {covered}/200");
    assert!(
        covered_wrong <= 10,
        "a wrong ratio was covered {covered_wrong}/200 times"
    );
}

#[test]
fn no_change_is_not_significant() {
    let mut noise = Noise(5);
    let a = sample(&mut noise, 50, 100e6, 0.03);
    let b = sample(&mut noise, 50, 100e6, 0.03);
    let s = bootstrap_speedup(&a, &b, 5000, 0.95, 1).unwrap();
    assert!(s.ci_low < 1.0 && 1.0 < s.ci_high, "{s:?}");
    assert!(!s.is_significant());
}

/// A ledger of `n` rows with per-iteration wall time around `wall_ns`; `fused` means the
/// elementwise kernels were fused (fewer launches, less time).
fn ledger(noise: &mut Noise, n: u64, wall_ns: f64, fused: bool) -> Vec<IterationRow> {
    (0..n)
        .map(|i| {
            let wall = (wall_ns * (1.0 + 0.02 * noise.normal())) as u64;
            let mut r = row(i, wall);
            let (launches, each) = if fused { (100, 1_500) } else { (400, 1_000) };
            r.kernels = vec![
                kernel("_Z5scaleIfEvPT_S0_i", 64, 256, 32, launches, each),
                kernel("ampere_sgemm_128x64_nn", 1024, 256, 90, 4, 1_000_000),
            ];
            r.memcpy = vec![copies(2)];
            r.scopes = vec![
                scope("step", wall - 1000, wall - 2000, 0),
                scope("step/forward", wall / 3, wall / 3, launches + 4),
            ];
            r
        })
        .collect()
}

#[test]
fn full_comparison_of_two_ledgers() {
    let mut noise = Noise(11);
    let (ha, mut hb) = (header("580.95.05"), header("575.57.08"));
    hb.config.level = "counters".into();
    let rows_a = ledger(&mut noise, 40, 10e6, false);
    let mut rows_b = ledger(&mut noise, 42, 8e6, true);
    rows_b[20].perturbed = true;
    rows_b[21].perturbed = true;
    rows_b[20].host_wall_ns *= 3;
    let c = compare(
        LedgerView {
            header: &ha,
            rows: &rows_a,
        },
        LedgerView {
            header: &hb,
            rows: &rows_b,
        },
        &CompareOptions::default(),
    )
    .unwrap();

    assert_eq!((c.a.rows, c.a.used), (40, 40));
    assert_eq!((c.b.rows, c.b.used), (42, 40));
    assert_eq!(c.b.perturbed, [20, 21]);
    assert!(
        c.speedup.ci_low < 1.25 && 1.25 < c.speedup.ci_high,
        "{:?}",
        c.speedup
    );
    assert!((c.delta_t - (1.0 - 1.0 / c.speedup.speedup)).abs() < 1e-12);
    assert!((c.delta_t - 0.2).abs() < 0.02, "{}", c.delta_t);
    assert!(
        (c.delta_median_ns + 2e6).abs() < 0.2e6,
        "{}",
        c.delta_median_ns
    );

    // Launch counts: 404 -> 104 kernels per iteration, copies unchanged.
    assert_eq!((c.launches.kernels_a, c.launches.kernels_b), (404.0, 104.0));
    assert_eq!((c.launches.memcpy_a, c.launches.memcpy_b), (2.0, 2.0));

    // Families: the fused one changed most (400 us -> 150 us per iteration, 300 fewer launches).
    let f = &c.families[0];
    assert_eq!(f.family, "scale");
    assert!((f.delta_ns_per_iteration + 250_000.0).abs() < 1e-6);
    assert!((f.launches_delta_per_iteration + 300.0).abs() < 1e-9);
    assert!((f.speedup.unwrap() - 400.0 / 150.0).abs() < 1e-9);
    let g = &c.families[1];
    assert_eq!(
        (g.family.as_str(), g.speedup),
        ("ampere_sgemm_128x64_nn", Some(1.0))
    );

    // Scopes: both present, forward's launches dropped by 300.
    let fwd = c.scopes.iter().find(|s| s.path == "step/forward").unwrap();
    assert!((fwd.launches_delta_per_iteration + 300.0).abs() < 1e-9);
    assert!(fwd.host_speedup.unwrap() > 1.15 && fwd.device_speedup.unwrap() > 1.15);

    let has = |needle: &str| c.warnings.iter().any(|w| w.contains(needle));
    assert!(
        has("driver version differs: A 580.95.05, B 575.57.08"),
        "{:#?}",
        c.warnings
    );
    // Another level costs the application other time: no verdict, and the reason, once.
    assert_eq!(c.verdict(), Verdict::NotComparable);
    assert_eq!(c.incomparable.len(), 1, "{:#?}", c.incomparable);
    assert!(c.incomparable[0].starts_with("A was profiled at level timeline, B at level counters"));
    assert!(!has("level"), "{:#?}", c.warnings);
    assert!(
        has("perturbation differs: A has 0 perturbed iterations, B has 2"),
        "{:#?}",
        c.warnings
    );
    assert!(has("no NVML samples"), "{:#?}", c.warnings);
    assert!(!has("GPU"), "same GPU: {:#?}", c.warnings);
}

#[test]
fn identical_setups_warn_only_about_missing_nvml() {
    let mut noise = Noise(3);
    let h = header("580.95.05");
    let a = ledger(&mut noise, 30, 10e6, false);
    let b = ledger(&mut noise, 30, 10e6, false);
    let c = compare(
        LedgerView {
            header: &h,
            rows: &a,
        },
        LedgerView {
            header: &h,
            rows: &b,
        },
        &CompareOptions {
            filter: RowFilter {
                warmup: Warmup::None,
                ..RowFilter::default()
            },
            ..CompareOptions::default()
        },
    )
    .unwrap();
    assert_eq!(c.warnings.len(), 1, "{:#?}", c.warnings);
    assert!(!c.speedup.is_significant(), "{:?}", c.speedup);
}

#[test]
fn differing_gpu_and_few_iterations_are_warned() {
    let mut noise = Noise(4);
    let ha = header("580.95.05");
    let mut hb = ha.clone();
    hb.environment.gpus[0].name = "NVIDIA H100 80GB HBM3".into();
    let a = ledger(&mut noise, 5, 10e6, false);
    let b = ledger(&mut noise, 5, 10e6, false);
    let c = compare(
        LedgerView {
            header: &ha,
            rows: &a,
        },
        LedgerView {
            header: &hb,
            rows: &b,
        },
        &CompareOptions::default(),
    )
    .unwrap();
    // Another GPU model: no verdict, the reason in words rather than Rust's debug text.
    assert_eq!(c.verdict(), Verdict::NotComparable);
    assert_eq!(
        c.incomparable,
        [
            "A ran on 1× NVIDIA H200 (sm_90, 132 SMs), B on 1× NVIDIA H100 80GB HBM3 (sm_90, 132 \
          SMs): the work runs on different GPUs, or is split over a different number of them"
        ]
    );
    assert!(
        !c.warnings.iter().any(|w| w.contains("GPU")),
        "{:#?}",
        c.warnings
    );
    // The same setups give a verdict.
    let same = compare(
        LedgerView {
            header: &ha,
            rows: &a,
        },
        LedgerView {
            header: &ha,
            rows: &b,
        },
        &CompareOptions::default(),
    )
    .unwrap();
    assert!(same.incomparable.is_empty());
    assert_ne!(same.verdict(), Verdict::NotComparable);
    assert!(
        c.warnings.iter().any(|w| w.contains("only 5 iterations")),
        "{:#?}",
        c.warnings
    );
}

#[test]
fn unusable_inputs_are_errors_not_panics() {
    let h = header("580.95.05");
    let mut noise = Noise(1);
    let good = ledger(&mut noise, 10, 10e6, false);
    let mut all_perturbed = good.clone();
    for r in &mut all_perturbed {
        r.perturbed = true;
    }
    let view = |rows| LedgerView { header: &h, rows };
    let err = compare(
        view(&all_perturbed),
        view(&good),
        &CompareOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            CompareError::NoUsableRows {
                side: "A",
                kept: 0,
                ..
            }
        ),
        "{err}"
    );
    let err = compare(view(&good), view(&[]), &CompareOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            CompareError::NoUsableRows {
                side: "B",
                rows: 0,
                ..
            }
        ),
        "{err}"
    );
    let bad = CompareOptions {
        resamples: 0,
        ..CompareOptions::default()
    };
    assert!(matches!(
        compare(view(&good), view(&good), &bad),
        Err(CompareError::InvalidOption(_))
    ));
    let bad = CompareOptions {
        confidence: 1.5,
        ..CompareOptions::default()
    };
    assert!(matches!(
        compare(view(&good), view(&good), &bad),
        Err(CompareError::InvalidOption(_))
    ));
}

#[test]
fn nvml_operating_point_and_gpu_settings_are_compared() {
    let mut noise = Noise(8);
    let mut ha = header("580.95.05");
    ha.environment.nvml_gpus = vec![NvmlGpuRecord {
        index: 0,
        power_limit_mw: Some(700_000),
        power_mw: Some(90_000),
        sm_clock_mhz: Some(345),
        ..NvmlGpuRecord::default()
    }];
    ha.environment.pid = Some(100);
    let mut hb = ha.clone();
    // Run-to-run state at start and the process id: not warned about.
    hb.environment.nvml_gpus[0].power_mw = Some(120_000);
    hb.environment.nvml_gpus[0].sm_clock_mhz = Some(1980);
    hb.environment.pid = Some(200);
    let mut a = ledger(&mut noise, 20, 10e6, false);
    let mut b = ledger(&mut noise, 20, 10e6, false);
    for r in &mut a {
        r.nvml = vec![nvml(1980.0, 600.0, &["gpu_idle"])];
    }
    for r in &mut b {
        r.nvml = vec![nvml(1965.0, 610.0, &["gpu_idle"])];
    }
    let opts = CompareOptions::default();
    let c = compare(view(&ha, &a), view(&hb, &b), &opts).unwrap();
    assert!(
        c.warnings.is_empty(),
        "same settings, clocks within 5 %: {:#?}",
        c.warnings
    );

    // A lower power limit, a CUDA variable, and clocks that dropped under a power cap.
    hb.environment.nvml_gpus[0].power_limit_mw = Some(500_000);
    hb.environment
        .cuda_env
        .insert("CUDA_LAUNCH_BLOCKING".into(), "1".into());
    for r in &mut b {
        r.nvml = vec![nvml(1755.0, 500.0, &["gpu_idle", "sw_power_cap"])];
    }
    let c = compare(view(&ha, &a), view(&hb, &b), &opts).unwrap();
    let has = |needle: &str| c.warnings.iter().any(|w| w.contains(needle));
    assert!(
        has("environment nvml_gpus[0].power_limit_mw differs: A 700000, B 500000"),
        "{:#?}",
        c.warnings
    );
    assert!(
        has("environment cuda_env.CUDA_LAUNCH_BLOCKING differs"),
        "{:#?}",
        c.warnings
    );
    assert!(
        has("NVML SM clock mean (MHz) of device 0 differs: median A 1980.0, B 1755.0 (-11.4%)"),
        "{:#?}",
        c.warnings
    );
    assert!(
        has("NVML power mean (W) of device 0 differs"),
        "{:#?}",
        c.warnings
    );
    assert!(
        has("throttle reasons of device 0 differ: only in A none, only in B sw_power_cap"),
        "{:#?}",
        c.warnings
    );
    // No warning prints Rust's debug text of a value.
    assert!(
        !c.warnings
            .iter()
            .any(|w| w.contains("Some(") || w.contains("None") || w.contains("[\"")),
        "{:#?}",
        c.warnings
    );
    assert!(
        !has("memory clock") && !has("temperature") && !has("pid") && !has("power_mw differs"),
        "{:#?}",
        c.warnings
    );
    assert_eq!(c.warnings.len(), 5, "{:#?}", c.warnings);

    // NVML on one side only.
    for r in &mut b {
        r.nvml.clear();
    }
    let c = compare(view(&ha, &a), view(&ha, &b), &opts).unwrap();
    assert_eq!(
        c.warnings,
        ["NVML was sampled in A only: clocks and power of B are unknown"]
    );
}

fn view<'a>(
    header: &'a gpu_ledger_format::schema::Header,
    rows: &'a [IterationRow],
) -> LedgerView<'a> {
    LedgerView { header, rows }
}
