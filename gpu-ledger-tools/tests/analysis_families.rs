//! Kernel families from real mangled names, shares, ranks and Amdahl figures.

use gpu_ledger_tools::analysis::families::{
    base_name, demangle, family_table, FamilyRules, GroupingRule,
};

mod analysis_common;
use analysis_common::{kernel, row};

// Names mangled by g++ from templates shaped like PyTorch's and CUTLASS's kernels; the expected
// demangled text is what c++filt prints for them.
const VECTORIZED: &str =
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_";
const LAMBDA: &str = "_ZN2at6native18elementwise_kernelILi128ELi4EZNS0_6launchEvEUliE_EEviT1_";
const CUTLASS: &str =
    "_ZN7cutlass7Kernel2I52cutlass_80_tensorop_s1688gemm_128x128_16x5_nn_align4EEvNT_6ParamsE";
const ANON: &str = "_ZN12_GLOBAL__N_120softmax_warp_forwardIfEEvPT_PKS1_i";
const SGEMM: &str = "ampere_sgemm_128x64_nn";

#[test]
fn demangles_like_cxxfilt() {
    assert_eq!(
        demangle(VECTORIZED).unwrap(),
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)"
    );
    assert_eq!(
        demangle(LAMBDA).unwrap(),
        "void at::native::elementwise_kernel<128, 4, at::native::launch()::{lambda(int)#1}>(int, at::native::launch()::{lambda(int)#1})"
    );
    assert_eq!(
        demangle(CUTLASS).unwrap(),
        "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x5_nn_align4>(cutlass_80_tensorop_s1688gemm_128x128_16x5_nn_align4::Params)"
    );
    assert_eq!(
        demangle(ANON).unwrap(),
        "void (anonymous namespace)::softmax_warp_forward<float>(float*, float const*, int)"
    );
    assert_eq!(demangle(SGEMM), None);
}

#[test]
fn base_names_drop_templates_arguments_and_namespaces() {
    assert_eq!(base_name(VECTORIZED), "vectorized_elementwise_kernel");
    assert_eq!(base_name(LAMBDA), "elementwise_kernel");
    assert_eq!(base_name(CUTLASS), "Kernel2");
    assert_eq!(base_name(ANON), "softmax_warp_forward");
    assert_eq!(base_name(SGEMM), SGEMM);
    // An already demangled name (CUPTI can be asked for those) gives the same family.
    assert_eq!(
        base_name(&demangle(VECTORIZED).unwrap()),
        "vectorized_elementwise_kernel"
    );
}

/// Ten iterations of 1 ms device busy time and 1.1 ms wall time each.
fn rows() -> Vec<gpu_ledger_format::schema::IterationRow> {
    (0..10)
        .map(|i| {
            let mut r = row(i, 1_100_000);
            r.devices[0].busy_ns = 1_000_000;
            r.kernels = vec![
                kernel(CUTLASS, 1024, 256, 128, 2, 200_000),
                kernel(CUTLASS, 64, 256, 128, 1, 100_000),
                kernel(VECTORIZED, 4, 128, 16, 200, 1_000),
                kernel(LAMBDA, 8, 128, 20, 50, 2_000),
                kernel(SGEMM, 16, 256, 90, 1, 50_000),
            ];
            r
        })
        .collect()
}

#[test]
fn table_ranks_families_with_shares_and_ceilings() {
    let rows = rows();
    let t = family_table(&rows, &FamilyRules::new());
    assert_eq!(t.iterations, 10);
    assert_eq!(
        (t.device_busy_ns, t.kernel_ns, t.host_wall_ns),
        (10_000_000, 8_500_000, 11_000_000)
    );
    let names: Vec<&str> = t.families.iter().map(|f| f.family.as_str()).collect();
    assert_eq!(
        names,
        [
            "Kernel2",
            "vectorized_elementwise_kernel",
            "elementwise_kernel",
            SGEMM
        ]
    );
    assert_eq!(
        t.families.iter().map(|f| f.rank).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );

    let k2 = &t.families[0];
    assert_eq!((k2.launches, k2.total_ns), (30, 5_000_000));
    assert!((k2.launches_per_iteration - 3.0).abs() < 1e-12);
    assert!((k2.mean_ns - 5_000_000.0 / 30.0).abs() < 1e-6);
    assert_eq!((k2.min_ns, k2.max_ns), (100_000, 200_000));
    assert!((k2.contribution_ns - 5_000_000.0).abs() < 1e-6);
    assert!((k2.share_of_device_time.unwrap() - 0.5).abs() < 1e-12);
    assert!((k2.share_of_kernel_time.unwrap() - 5.0 / 8.5).abs() < 1e-12);
    assert!((k2.share_of_wall_time.unwrap() - 5.0 / 11.0).abs() < 1e-12);
    assert!((k2.amdahl_ceiling.unwrap() - 2.0).abs() < 1e-12);
    assert!((k2.speedup_if_2x.unwrap() - 1.0 / 0.75).abs() < 1e-12);
    // Two shapes kept apart, the larger first; names are shown demangled.
    assert_eq!(k2.shapes.len(), 2);
    assert_eq!(k2.shapes[0].shape.launch.grid, [1024, 1, 1]);
    assert_eq!(
        (k2.shapes[0].launches, k2.shapes[0].total_ns),
        (20, 4_000_000)
    );
    assert_eq!(k2.shapes[1].shape.launch.grid, [64, 1, 1]);
    assert!(k2.names[0].starts_with("void cutlass::Kernel2<cutlass_80_tensorop"));

    let v = &t.families[1];
    assert_eq!((v.launches, v.total_ns), (2000, 2_000_000));
    assert!((v.amdahl_ceiling.unwrap() - 1.25).abs() < 1e-12);
    assert!((v.speedup_if_2x.unwrap() - 1.0 / 0.9).abs() < 1e-12);
}

#[test]
fn rules_merge_families() {
    let rows = rows();
    let rules = FamilyRules::new()
        .with(GroupingRule::substring("sgemm", "gemm"))
        .with(GroupingRule::prefix("cutlass::", "gemm"));
    let t = family_table(&rows, &rules);
    let g = &t.families[0];
    assert_eq!(g.family, "gemm");
    assert_eq!(g.total_ns, 5_500_000);
    assert_eq!(g.shapes.len(), 3);
    assert_eq!(g.names.len(), 2);
    assert!((g.share_of_device_time.unwrap() - 0.55).abs() < 1e-12);
    assert_eq!(t.families.len(), 3);
}

#[test]
fn overlapping_streams_clamp_the_share() {
    let mut rows = rows();
    for r in &mut rows {
        r.devices[0].busy_ns = 400_000; // streams overlapped: kernels add up to 850 us
    }
    let t = family_table(&rows, &FamilyRules::new());
    let k2 = &t.families[0];
    assert!((k2.share_of_device_time.unwrap() - 1.25).abs() < 1e-12);
    assert_eq!(k2.amdahl_ceiling, None);
    assert_eq!(k2.speedup_if_2x, Some(2.0));
}

#[test]
fn empty_and_deviceless_input() {
    let t = family_table(&[], &FamilyRules::new());
    assert!(t.families.is_empty());
    assert_eq!(t.iterations, 0);
    let mut r = row(0, 1000);
    r.devices.clear();
    r.kernels = vec![kernel(SGEMM, 1, 32, 8, 1, 10)];
    let t = family_table(std::slice::from_ref(&r), &FamilyRules::new());
    assert_eq!(t.families[0].share_of_device_time, None);
    assert_eq!(t.families[0].amdahl_ceiling, None);
    assert_eq!(t.families[0].share_of_kernel_time, Some(1.0));
}
