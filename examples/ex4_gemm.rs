//! GEMM, tensor-core eligibility and waves. Runs the shared-memory tiled FP32 GEMM (baseline)
//! against the BF16 tensor-core (wmma) GEMM (the change) at 4096³, with cuBLAS BF16 and the naive
//! kernel for reference, under gpu-ledger; prints the one-page experiment ledger with wave and
//! padding efficiency per kernel.
//!
//! `cargo run --release --example ex4_gemm [-- LEDGER_PATH]`

use std::process::ExitCode;

use gpu_ledger::kernels::suite::experiment::{
    device_line, exit_code, measure, open_device, ExperimentConfig, ExperimentPage, Side,
};
use gpu_ledger::kernels::suite::gemm::{
    CublasGemmGpu, CublasGemmSpec, GemmGpu, GemmKernel, GemmKernels, GemmSpec,
};
use gpu_ledger::kernels::suite::Workload;

/// Cycles the tensor pipe was active, % of peak.
const TENSOR_PIPE: &str = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active";
/// Achieved occupancy: warps active, % of the maximum.
const WARPS_ACTIVE: &str = "sm__warps_active.avg.pct_of_peak_sustained_active";

fn main() -> ExitCode {
    exit_code("ex4_gemm", run())
}

fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/gpu-ledger-ex4.jsonl".into());
    let dev = open_device(0)?;
    let kernels = GemmKernels::load(&dev.ctx)?;
    let (m, n, k) = (4096, 4096, 4096);
    let mk = |kernel| GemmGpu::new(&dev.stream, &kernels, GemmSpec::new(m, n, k, kernel), 5);
    let mut tiled = mk(GemmKernel::Tiled)?;
    let mut wmma = mk(GemmKernel::WmmaBf16)?;
    let mut naive = mk(GemmKernel::Naive)?;
    let mut cublas = CublasGemmGpu::new(&dev.stream, CublasGemmSpec { m, n, k }, 6)?;
    let results = measure(
        &mut [
            Side {
                label: "baseline",
                workload: &mut tiled,
            },
            Side {
                label: "change",
                workload: &mut wmma,
            },
            Side {
                label: "cuBLAS",
                workload: &mut cublas,
            },
            Side {
                label: "naive",
                workload: &mut naive,
            },
        ],
        &ExperimentConfig::new(10, 3, &path).with_counters(&[TENSOR_PIPE, WARPS_ACTIVE]),
    )?;
    let mut page = ExperimentPage::new(
        "ex4 GEMM: tensor-core eligibility and waves",
        device_line(&dev.gpu),
        "gemm_tiled, 4096³ FP32: 32x32 shared-memory tiles, 4 outputs per thread on the FP32 \
         SIMT pipe; 2MNK FLOPs",
        "Because the tiled kernel's multiply-adds run on the FP32 pipe, expressing them as BF16 \
         wmma m16n16k16 tensor-core MMAs with FP32 accumulation should raise the FLOP rate \
         several-fold; BF16 inputs are the correctness budget (checked against a float64 \
         product of the same rounded inputs).",
        "gemm_wmma_bf16: BF16 inputs, wmma tensor-core MMAs, 64x64 block tiles (precision and \
         pipe change together, by design of the experiment); cuBLAS BF16 and the naive kernel are \
         shown for reference",
        results,
        std::path::Path::new(&path),
    );
    for kernel in [GemmKernel::Tiled, GemmKernel::WmmaBf16, GemmKernel::Naive] {
        let spec = GemmSpec::new(m, n, k, kernel);
        if let Some(p) = spec.padding() {
            page.notes.push(format!(
                "{}: tile {:?}, padded {:?}, padding efficiency {:.1}%",
                kernel.kernel(),
                kernel.tile(),
                p.padded,
                100.0 * p.efficiency().unwrap_or(f64::NAN)
            ));
        }
    }
    for (i, expect_tensor) in [(0usize, false), (1, true), (2, true), (3, false)] {
        let r = &page.results[i];
        let label = r.label.clone();
        let tensor = r.counter_mean("", TENSOR_PIPE);
        let occupancy = r.counter_mean("", WARPS_ACTIVE);
        if expect_tensor {
            page.check(
                format!("{label}: tensor pipe active, % of peak"),
                tensor,
                "> 0",
                |v| v > 0.0,
            );
        } else {
            page.check(
                format!("{label}: tensor pipe active, % of peak"),
                tensor,
                "0 (FP32 SIMT kernel)",
                |v| v == 0.0,
            );
        }
        page.check(
            format!("{label}: achieved occupancy (warps active, % of peak)"),
            occupancy,
            "in (0, 100]",
            |v| v > 0.0 && v <= 100.0,
        );
    }
    println!("{page}");
    Ok(page.all_correct())
}
