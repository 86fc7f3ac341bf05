//! NVTX both ways on a small training step. Scopes `step/{forward,backward,optimizer}` launch
//! the bundled train kernels; inside `forward` the application pushes an NVTX range `attention`
//! (as a library would) around two of its launches; odd iterations end with an NVTX mark
//! `step` instead of `Profiler::step()`.
//!
//! At the timeline level (the default) NVTX ranges are imported, and the example prints each
//! scope's calls and kernels per iteration: `step/forward/attention` holds the two launches, the
//! marked iterations have rows of their own. Under Nsight Compute, with `GPU_LEDGER_LEVEL=scopes`,
//! the scopes' own NVTX ranges select kernels:
//!
//! ```sh
//! cargo run --release --example nvtx_scopes -- [ITERATIONS] [LEDGER]
//! GPU_LEDGER_LEVEL=scopes ncu --nvtx --nvtx-include "step/backward/" target/release/examples/nvtx_scopes 3
//! ```

use std::process::ExitCode;
use std::time::Duration;

use cudarc::driver::CudaContext;
use gpu_ledger::kernels::{TrainOp, TrainOps};
use gpu_ledger::{Level, NvtxImport, Profiler};

/// Launches of each phase per iteration: forward (two of them inside `attention`), backward,
/// optimizer.
const LAUNCHES: [(TrainOp, u64); 3] = [
    (TrainOp::Forward, 3),
    (TrainOp::Backward, 3),
    (TrainOp::Optimizer, 1),
];

fn main() -> ExitCode {
    if let Err(e) = Profiler::preflight(Level::Timeline) {
        eprintln!("nvtx_scopes: {e}");
        return ExitCode::FAILURE;
    }
    let mut args = std::env::args().skip(1);
    let iterations: u64 = match args.next().map(|a| a.parse()) {
        None => 6,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("nvtx_scopes: ITERATIONS: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ledger = args.next().unwrap_or_else(|| "nvtx_scopes.jsonl".into());
    match run(iterations, &ledger) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nvtx_scopes: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(iterations: u64, ledger: &str) -> Result<(), Box<dyn std::error::Error>> {
    // The profiler starts before the first NVTX call, so that NVTX finds CUPTI.
    let profiler = Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(ledger)
        .settle(Duration::from_secs(5))
        .nvtx_import(NvtxImport {
            step_marker: Some("step".into()),
            ..NvtxImport::default()
        })
        .start()?;
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    let ops = TrainOps::new(&ctx)?;
    let n: u64 = 1 << 18;
    let mut x = stream.alloc_zeros::<f32>(n as usize)?;
    for i in 0..iterations {
        {
            let _step = Profiler::scope("step");
            for (op, launches) in LAUNCHES {
                let _phase = Profiler::scope(op.scope());
                for k in 0..launches {
                    // Two of forward's launches inside the application's own NVTX range.
                    let attention = op == TrainOp::Forward && k < 2;
                    if attention && k == 0 {
                        nvtx::range_push!("attention");
                    }
                    ops.launch(&stream, op, &mut x, n, 200)?;
                    if attention && k == 1 {
                        nvtx::range_pop!();
                    }
                }
            }
        }
        stream.synchronize()?;
        if i % 2 == 1 {
            nvtx::mark!("step");
        } else {
            profiler.step();
        }
    }
    let off = profiler.disabled_reason().map(str::to_owned);
    let summary = profiler.finish()?;
    if let Some(why) = off {
        println!("{why}");
        return Ok(());
    }
    let ledger = summary.read_ledger()?;
    println!(
        "nvtx: {}",
        ledger.header.config.nvtx.as_deref().unwrap_or("-")
    );
    let config = &ledger.header.config;
    let source = config.level_source.as_deref().unwrap_or("-");
    println!("level: {} (from {source})", config.level);
    println!(
        "{:>9}  {:<28} {:>5} {:>7}",
        "iteration", "scope", "calls", "kernels"
    );
    for row in &ledger.iterations {
        for s in &row.scopes {
            println!(
                "{:>9}  {:<28} {:>5} {:>7}",
                row.index, s.path, s.calls, s.kernels
            );
        }
    }
    for w in ledger.trailer.iter().flat_map(|t| &t.warnings) {
        println!("trailer warning: {w}");
    }
    Ok(())
}
