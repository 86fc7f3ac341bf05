//! Profiles one step at `Level::Scopes`. Handing gpu-ledger the application's `CudaStream` compiles
//! only when both use the same cudarc, the one whose features the application's Cargo.toml chose
//! (each of `ci/apps/*/Cargo.toml` builds this program).

use cudarc::driver::CudaContext;
use gpu_ledger::{Level, Profiler};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // One clear error without a driver or a GPU, where cudarc would panic.
    Profiler::preflight(Level::Scopes)?;
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    let profiler = Profiler::builder()
        .level(Level::Scopes)
        .ledger_path("app.jsonl")
        .start()?;
    {
        let _step = Profiler::scope_on("step", &stream);
    }
    profiler.step();
    stream.synchronize()?;
    profiler.finish()?;
    Ok(())
}
