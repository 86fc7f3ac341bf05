//! Fused softmax, the fusion roof. Runs the row softmax as a framework composes it, five kernels
//! through device memory (baseline), against one fused kernel that keeps each row on chip (the
//! change), on 8192 × 4096 FP32 under gpu-ledger; prints the one-page experiment ledger.
//!
//! `cargo run --release --example ex5_softmax [-- LEDGER_PATH]`

use std::process::ExitCode;

use gpu_ledger::counters::metrics::names;
use gpu_ledger::kernels::suite::experiment::{
    device_line, exit_code, measure, open_device, ExperimentConfig, ExperimentPage, Side,
};
use gpu_ledger::kernels::suite::softmax::{SoftmaxGpu, SoftmaxKernels, SoftmaxSpec};
use gpu_ledger::kernels::suite::Workload;

fn main() -> ExitCode {
    exit_code("ex5_softmax", run())
}

fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/gpu-ledger-ex5.jsonl".into());
    let dev = open_device(0)?;
    let kernels = SoftmaxKernels::load(&dev.ctx)?;
    let (rows, cols) = (8192, 4096);
    let mut composed = SoftmaxGpu::new(
        &dev.stream,
        &kernels,
        SoftmaxSpec::new(rows, cols, false),
        7,
    )?;
    let mut fused = SoftmaxGpu::new(&dev.stream, &kernels, SoftmaxSpec::new(rows, cols, true), 7)?;
    let results = measure(
        &mut [
            Side {
                label: "baseline",
                workload: &mut composed,
            },
            Side {
                label: "change",
                workload: &mut fused,
            },
        ],
        &ExperimentConfig::new(20, 10, &path)
            .with_counters(&[names::DRAM_BYTES_READ, names::DRAM_BYTES_WRITE]),
    )?;
    let ratio = SoftmaxSpec::new(rows, cols, true).work().bytes as f64
        / SoftmaxSpec::new(rows, cols, false).work().bytes as f64;
    let mut page = ExperimentPage::new(
        "ex5 softmax: the fusion roof",
        device_line(&dev.gpu),
        "row softmax of 8192 x 4096 FP32 as a framework composes it: row max, subtract, exp, \
         row sum, divide; five launches, each reading and writing device memory (8 passes over \
         the matrix)",
        "Because every kernel of the composition is a bandwidth-bound pass over the matrix, one \
         kernel that reads each row once, keeps it in shared memory and writes the result once \
         should move about a quarter of the bytes (2 of 8 passes) in one launch instead of five, \
         so kernel time should fall close to 4x and end-to-end time with it.",
        "softmax_fused: one block per row, the row in dynamic shared memory (16 KiB), one read \
         and one write per element (the only change)",
        results,
        std::path::Path::new(&path),
    );
    page.notes.push(format!(
        "analytic bytes fused / composed = {ratio:.2} (expected at most 0.35); launches per run 1 \
         against 5 (see the table)"
    ));
    let bytes = |i: usize| {
        let r = &page.results[i];
        Some(r.counter("", names::DRAM_BYTES_READ)? + r.counter("", names::DRAM_BYTES_WRITE)?)
    };
    page.check(
        "change / baseline: DRAM bytes per run",
        bytes(1).zip(bytes(0)).map(|(c, b)| c / b),
        format!("≤ 0.35 (analytic {ratio:.2})"),
        |v| v <= 0.35,
    );
    println!("{page}");
    Ok(page.all_correct())
}
