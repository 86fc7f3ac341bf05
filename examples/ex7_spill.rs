//! Local memory. Runs a per-thread bucket sum whose 32-float accumulator array is indexed with a
//! data-dependent index (it lives in local memory: the baseline) against the same computation with
//! compile-time indices only (registers: the change) under gpu-ledger; prints the one-page
//! experiment ledger with the registers and local memory per thread the kernel records show.
//!
//! `cargo run --release --example ex7_spill [-- LEDGER_PATH]`

use std::process::ExitCode;

use gpu_ledger::counters::metrics::names;
use gpu_ledger::kernels::suite::experiment::{
    device_line, exit_code, measure, open_device, ExperimentConfig, ExperimentPage, Side,
};
use gpu_ledger::kernels::suite::spill::{SpillGpu, SpillKernels, SpillSpec};

/// Warps stalled on the long scoreboard (L1TEX: local and global memory) per issued instruction.
const LONG_SCOREBOARD: &str =
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio";

fn main() -> ExitCode {
    exit_code("ex7_spill", run())
}

fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/gpu-ledger-ex7.jsonl".into());
    let dev = open_device(0)?;
    let kernels = SpillKernels::load(&dev.ctx)?;
    let threads = dev.gpu.sm_count * 2048;
    let iters = 128;
    let mk = |dynamic| {
        SpillGpu::new(
            &dev.stream,
            &kernels,
            SpillSpec {
                threads,
                iters,
                dynamic,
            },
            9,
        )
    };
    let mut spilling = mk(true)?;
    let mut registers = mk(false)?;
    let results = measure(
        &mut [
            Side {
                label: "baseline",
                workload: &mut spilling,
            },
            Side {
                label: "change",
                workload: &mut registers,
            },
        ],
        &ExperimentConfig::new(20, 10, &path).with_counters(&[
            names::LOCAL_LD_SECTORS,
            names::LOCAL_ST_SECTORS,
            LONG_SCOREBOARD,
        ]),
    )?;
    let (local_dynamic, local_free) = kernels.local_bytes()?;
    let mut page = ExperimentPage::new(
        "ex7 spill: registers, local memory and occupancy",
        device_line(&dev.gpu),
        format!(
            "spill_dynamic_index: {threads} threads x {iters} values, acc[idx] += v with idx \
             from the value's mantissa bits: the 32-float acc[] is in local memory"
        ),
        "Because a data-dependent index forces acc[] into local memory (128 bytes per thread, \
         backed by L1/L2/DRAM), every update is a local load and store; writing the update over \
         compile-time slots keeps acc[] in registers at 32x the compare/select work, so local \
         traffic should vanish, registers per thread rise, and kernel time fall if the local \
         round trips dominate.",
        "spill_free: for every slot s, acc[s] += (idx == s) ? v : 0, fully unrolled (the only \
         change); the results are bit-identical",
        results,
        std::path::Path::new(&path),
    );
    page.notes.push(format!(
        "driver's view (CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES): spill_dynamic_index {local_dynamic} B, \
         spill_free {local_free} B per thread; compare with the ledger's local column"
    ));
    let local = |i: usize| {
        let r = &page.results[i];
        Some(r.counter("", names::LOCAL_LD_SECTORS)? + r.counter("", names::LOCAL_ST_SECTORS)?)
    };
    let (spilling, registers) = (local(0), local(1));
    let stalls = |i: usize| page.results[i].counter_mean("", LONG_SCOREBOARD);
    let stall_ratio = stalls(1)
        .zip(stalls(0))
        .map(|(c, b)| c / b.max(f64::MIN_POSITIVE));
    page.check(
        "baseline: local load and store sectors",
        spilling,
        "> 0",
        |v| v > 0.0,
    );
    page.check(
        "change: local load and store sectors",
        registers,
        "0",
        |v| v == 0.0,
    );
    page.check(
        "change / baseline: long-scoreboard stalls per issue",
        stall_ratio,
        "< 1 (local loads wait on the long scoreboard; registers do not)",
        |v| v < 1.0,
    );
    println!("{page}");
    Ok(page.all_correct())
}
