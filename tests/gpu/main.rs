//! GPU tests, one binary: run on an NVIDIA GPU with `scripts/test.sh` (or the bundle from
//! `scripts/gpu-bundle.sh`). Each is ignored on machines without a GPU and never skips itself.
//! One module per area; the helpers here are shared.

#![allow(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use gpu_ledger::kernels::VectorAdd;
use gpu_ledger::ledger::IterationRow;
use gpu_ledger::{read_ledger, Ledger, Level, Profiler, RunSummary};
use parking_lot::Mutex;

mod attribution;
mod cache;
mod counters;
mod faults;
mod graphs;
mod idle;
mod kernels_suite;
mod multi_gpu;
mod nvml;
mod nvtx;
mod pc_sampling;
mod sampling;
mod timeline;

/// An example built next to this test binary (the GPU bundle puts both in one folder; cargo puts
/// examples in `target/<profile>/examples`).
pub fn example_binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    [dir.join(name), dir.join("../examples").join(name)]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("the {name} example next to the test binary"))
}

/// One profiler per process: GPU tests take turns.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub vadd: VectorAdd,
}

pub fn gpu() -> Gpu {
    gpu_ledger::Profiler::require_gpu().expect("this test needs an NVIDIA GPU and driver");
    let ctx = CudaContext::new(0).expect("CUDA context on device 0");
    // Like a minimal probe: no extra event records around each launch from cudarc's
    // multi-stream tracking. The tests synchronize explicitly.
    // SAFETY: every test synchronizes its streams before reusing or freeing memory.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.default_stream();
    let vadd = VectorAdd::new(&ctx).expect("NVRTC compiles vector_add");
    Gpu { ctx, stream, vadd }
}

pub fn timeline(path: &std::path::Path) -> Profiler {
    Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(path)
        .settle(Duration::from_secs(5))
        .start()
        .expect("timeline profiler starts on the GPU host")
}

/// vector_add's three operands, `n` zeroed floats each, on `stream`.
pub fn vectors(
    stream: &Arc<CudaStream>,
    n: usize,
) -> (CudaSlice<f32>, CudaSlice<f32>, CudaSlice<f32>) {
    let v = || stream.alloc_zeros::<f32>(n).unwrap();
    (v(), v(), v())
}

/// Finishes `profiler`, checks that no trailer warning concerns scope timing events, and reads
/// the ledger it wrote at `path`.
pub fn finish_without_event_warnings(
    profiler: Profiler,
    path: &std::path::Path,
) -> (RunSummary, Ledger) {
    let summary = profiler.finish().unwrap();
    assert!(
        !summary.trailer.warnings.iter().any(|w| w.contains("event")),
        "{:?}",
        summary.trailer.warnings
    );
    let ledger = read_ledger(path).unwrap();
    (summary, ledger)
}

pub fn kernel_launches(row: &IterationRow) -> u64 {
    row.kernels.iter().map(|k| k.count).sum()
}

/// A count without decimals, anything else with five (for the measured-vs-analytic lines).
pub fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        format!("{x:.5}")
    }
}

/// Prints a measured value next to an analytic expectation that is not asserted (information
/// for the reader of the log); returns the relative difference.
pub fn report(what: &str, measured: f64, expected: f64) -> f64 {
    let rel = if expected != 0.0 {
        (measured - expected) / expected
    } else {
        measured
    };
    println!(
        "  {what:<60} measured {:>14}  analytic {:>14}  ({:+.3} %)",
        num(measured),
        num(expected),
        rel * 100.0
    );
    rel
}
