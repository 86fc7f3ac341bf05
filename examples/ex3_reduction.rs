//! Reduction, synchronization and tail behaviour. Sums 2^24 + 17 floats and normalises by the sum:
//! the warp-shuffle block sum with a separate second-pass launch (baseline) against the second pass
//! fused into the consumer (the change), with the shared-memory tree for reference, under
//! gpu-ledger; prints the one-page experiment ledger.
//!
//! `cargo run --release --example ex3_reduction [-- LEDGER_PATH]`

use std::process::ExitCode;

use gpu_ledger::counters::metrics::names;
use gpu_ledger::kernels::suite::experiment::{
    device_line, exit_code, measure, open_device, ExperimentConfig, ExperimentPage, Side,
};
use gpu_ledger::kernels::suite::reduce::{
    ReduceKernels, ReduceMode, ReduceVariant, ReductionGpu, ReductionSpec,
};

/// Warps stalled at a barrier per issued instruction.
const BARRIER_STALLS: &str = "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio";

fn main() -> ExitCode {
    exit_code("ex3_reduction", run())
}

fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/gpu-ledger-ex3.jsonl".into());
    let dev = open_device(0)?;
    let kernels = ReduceKernels::load(&dev.ctx)?;
    let n = (1u64 << 24) + 17;
    let sms = dev.gpu.sm_count;
    let mk = |v, m| {
        ReductionGpu::new(
            &dev.stream,
            &kernels,
            ReductionSpec::for_device(n, v, m, sms),
            4,
        )
    };
    let mut unfused = mk(ReduceVariant::Shuffle, ReduceMode::Unfused)?;
    let mut fused = mk(ReduceVariant::Shuffle, ReduceMode::Fused)?;
    let mut tree = mk(ReduceVariant::Tree, ReduceMode::Unfused)?;
    let blocks =
        ReductionSpec::for_device(n, ReduceVariant::Shuffle, ReduceMode::Fused, sms).blocks;
    let results = measure(
        &mut [
            Side {
                label: "baseline",
                workload: &mut unfused,
            },
            Side {
                label: "change",
                workload: &mut fused,
            },
            Side {
                label: "tree",
                workload: &mut tree,
            },
        ],
        &ExperimentConfig::new(20, 20, &path)
            .with_counters(&[BARRIER_STALLS, names::DRAM_BYTES_READ]),
    )?;
    let mut page = ExperimentPage::new(
        "ex3 reduction: synchronization and tail behaviour",
        device_line(&dev.gpu),
        format!(
            "y = x / sum(x) over 2^24 + 17 floats: reduce_shuffle_partials ({blocks} blocks, \
             warp shuffles) -> reduce_second_pass (1 block) -> scale_by_total; 3 launches per run"
        ),
        "Because the second pass is a one-block launch between two full-device passes, it adds \
         a launch and a serial bubble to every run; letting each consumer block re-sum the \
         partials itself (from L2) removes that launch, so end-to-end time per run should fall \
         by about one launch gap while DRAM traffic stays the same.",
        "scale_by_partials: the second pass fused into the consumer (2 launches per run); the \
         shared-memory tree first pass (unfused) is shown for reference",
        results,
        std::path::Path::new(&path),
    );
    let stalls = |i: usize, k: &str| page.results[i].counter_mean(k, BARRIER_STALLS);
    let (tree, shuffle) = (
        stalls(2, "reduce_tree_partials"),
        stalls(0, "reduce_shuffle_partials"),
    );
    page.check(
        "tree / shuffle first pass: barrier stalls per issue",
        tree.zip(shuffle).map(|(t, s)| t / s.max(f64::MIN_POSITIVE)),
        "> 1 (a __syncthreads per tree level against one per block)",
        |v| v > 1.0,
    );
    let read = |i: usize| page.results[i].counter("", names::DRAM_BYTES_READ);
    page.check(
        "change / baseline: DRAM bytes read per run",
        read(1).zip(read(0)).map(|(c, b)| c / b),
        "1 ± 5 % (the partials are re-read from L2)",
        |v| (v - 1.0).abs() <= 0.05,
    );
    page.notes.push(
        "prediction: the second pass appears as its own kernel (reduce_second_pass, grid 1) in \
         the baseline and not in the change; both sums match the float64 CPU sum"
            .into(),
    );
    println!("{page}");
    Ok(page.all_correct())
}
