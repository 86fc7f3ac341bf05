//! Helpers shared by the benchmarks, included by each with `mod common;`.
//!
//! Cargo discovers benchmarks as `benches/*.rs` and `benches/*/main.rs` only, so this directory
//! is not a benchmark target of its own. Not every benchmark uses every item, hence the
//! `dead_code` allowance.
#![allow(dead_code)]

use std::time::Duration;

use gpu_ledger::analysis::stats::median;

pub mod rows;

/// Kernel names as CUPTI reports them: mangled, of typical length for templated C++ kernels.
pub const KERNEL_NAMES: [&str; 20] = [
    "_Z10vector_addPKfS0_Pfy",
    "_ZN7cutlass6KernelINS_4gemm6kernel4GemmINS1_11threadblock13MmaPipelinedINS1_9GemmShapeILi128ELi128ELi8EEEEEEEvNT_6ParamsE",
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_",
    "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_7MeanOpsIffEEjfLi4EEEEEvT1_",
    "_ZN4cuda3std3__48__detail15__softmax_fwd_kernelIfLi256ELi8EEEvPKT_PS4_ii",
    "_Z19flash_fwd_kernel_v2ILi128ELi64ELi64ELi4ELb0ELb1EEv16Flash_fwd_params",
    "_ZN5cudnn19engines_precompiled16nchwToNhwcKernelIfLi32ELi8EEEvNS0_20nchw2nhwc_params_tIT_EE",
    "_ZN2at6native27unrolled_elementwise_kernelINS0_15CUDAFunctor_addIfEENS_6detail5ArrayIPcLi3EEEEEviT_T0_",
    "_Z22layer_norm_fwd_kernelIfLi1024ELi4EEvPKT_S2_S2_PS0_PfS4_fi",
    "_ZN7cutlass6KernelINS_4gemm6kernel13GemmUniversalINS1_11threadblock19MmaMultistageINS1_9GemmShapeILi256ELi128ELi32EEEEEEEEvNT_6ParamsE",
    "_Z15transpose_naivePKfPfii",
    "_Z14transpose_smemILi32ELi8EEvPKfPfii",
    "_Z6reduceILj256EEvPKfPfj",
    "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastINS0_13BinaryFunctorIfffNS0_15binary_internal10MulFunctorIfEEEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_",
    "_Z12gelu_forwardIfEvPKT_PS0_l",
    "_Z24adam_update_fused_kernelIfLi4EEvPT_S1_S1_PKS0_fffffl",
    "_Z16embedding_gatherIfEvPKlPKT_PS2_ll",
    "_Z21cross_entropy_forwardIfLi256EEvPKT_PKlPS0_ii",
    "_Z9rope_fwdIfLi64EEvPT_PKfS3_iii",
    "_Z17all_reduce_kernelIfLi8EEvPT_PKS0_m",
];

/// Runs per summary figure: each summary figure is the median over this many runs.
pub const SAMPLES: usize = 11;

/// CPU time of the calling thread so far, ns, from `/proc/thread-self/schedstat` (Linux); unlike
/// wall time it does not count the time the thread waited for a core on a loaded machine. The
/// kernel updates it at scheduler ticks (1 to 4 ms), so a timed run must be long (a few hundred
/// ms) for it to be read to about 1 %. `None` where it cannot be read.
///
/// (`gpu_ledger`'s own reader of this clock is private to the crate and reads 0 where the clock
/// is missing; the summaries need to tell "unavailable" apart, hence this one.)
pub fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Runs `run` [`SAMPLES`] times, each between two reads of the thread's CPU clock; `run` returns
/// the wall time of its timed part. Returns the median over the runs of `per(wall ns)` and, when
/// the CPU clock could be read around every run, the median of `per(thread CPU ns)`.
pub fn wall_and_cpu_medians(
    mut run: impl FnMut() -> Duration,
    per: impl Fn(f64) -> f64,
) -> (f64, Option<f64>) {
    let mut wall = Vec::with_capacity(SAMPLES);
    let mut cpu = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let c0 = thread_cpu_ns();
        let d = run();
        let c1 = thread_cpu_ns();
        wall.push(per(d.as_nanos() as f64));
        if let (Some(c0), Some(c1)) = (c0, c1) {
            cpu.push(per(c1.saturating_sub(c0) as f64));
        }
    }
    let cpu = (cpu.len() == wall.len()).then(|| median(&cpu).expect("finite samples"));
    (median(&wall).expect("finite samples"), cpu)
}

/// The verdict column of the summaries.
pub fn verdict(met: bool) -> &'static str {
    if met {
        "ok"
    } else {
        "MISSED"
    }
}

/// A benchmark's `main`: criterion's benchmarks (`benches`, from `criterion_group!`), then, under
/// `cargo bench` only, the benchmark's own `summary`. `cargo test --benches` runs each benchmark
/// once as a test (`--test`) and `--list` lists them; neither prints the summary.
pub fn run(benches: fn(), summary: fn()) {
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
    let args: Vec<String> = std::env::args().collect();
    let benchmarking =
        args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test" || a == "--list");
    if benchmarking {
        summary();
    }
}
