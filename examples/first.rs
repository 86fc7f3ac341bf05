//! The README's first program, as a user copies it (a test keeps the two the same).

use cudarc::driver::CudaContext;
use gpu_ledger::{Level, Profiler};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Before the first cudarc call, which panics on a machine without the NVIDIA driver: this
    // returns an error whose one line names the cause and the fix.
    Profiler::require_gpu()?;
    // Started before the application's CUDA work, so that it sees all of it. fail_open: where
    // CUPTI is missing or held by another tool, the application runs unprofiled and the
    // ledger's header says why.
    let profiler = Profiler::builder()
        .level(Level::Timeline) // Scopes: host time + CUDA events only; Timeline: + CUPTI
        // (.counters(setup) for Level::Counters: + hardware counters)
        .fail_open(true)
        .ledger_path("run.jsonl")
        .start()?;
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    for _ in 0..100 {
        {
            let _step = Profiler::scope("step");
            {
                // Recorded as "step/forward".
                let _f = Profiler::scope("forward");
                // ... launch kernels ...
            }
            {
                // Device time too, from timing events recorded on the stream.
                let _b = Profiler::scope_on("backward", &stream);
                // ...
            }
        }
        profiler.step(); // ends the iteration; never waits for the GPU
    }
    stream.synchronize()?;
    let summary = profiler.finish()?; // writes the trailer, returns it
    println!("{} iterations", summary.trailer.iterations);
    Ok(())
}
