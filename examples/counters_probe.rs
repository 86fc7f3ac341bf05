//! Diagnostic: collects one metric over one vector add with the CUPTI Range Profiler (user range,
//! user replay) and prints its value or the error. Run once per metric, each in its own process,
//! to map which metrics this CUPTI accepts: `counters_probe METRIC[,METRIC...]`.

use std::process::ExitCode;

use cudarc::driver::CudaContext;
use gpu_ledger::counters::{CounterConfig, RangeMode, RangeProfiler, ReplayMode};
use gpu_ledger::kernels::VectorAdd;

fn main() -> ExitCode {
    let Some(metric) = std::env::args().nth(1) else {
        eprintln!("usage: counters_probe METRIC");
        return ExitCode::from(2);
    };
    match probe(&metric) {
        Ok(v) => {
            println!("{metric}: ok {v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("{metric}: error {e}");
            ExitCode::FAILURE
        }
    }
}

fn probe(metric: &str) -> Result<f64, Box<dyn std::error::Error>> {
    gpu_ledger::device::require_driver()?;
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    let vadd = VectorAdd::new(&ctx)?;
    let n = 1u64 << 24;
    let a = stream.alloc_zeros::<f32>(n as usize)?;
    let b = stream.alloc_zeros::<f32>(n as usize)?;
    let mut c = stream.alloc_zeros::<f32>(n as usize)?;
    stream.synchronize()?;
    let config = CounterConfig {
        metrics: metric.split(',').map(str::to_string).collect(),
        range_mode: RangeMode::User,
        replay_mode: ReplayMode::User,
        ..CounterConfig::default()
    };
    let mut rp = RangeProfiler::new(&ctx, config)?;
    let collected = rp.collect(|rp| {
        rp.push_range("vadd")?;
        vadd.launch(&stream, &a, &b, &mut c, n)?;
        stream.synchronize()?;
        rp.pop_range()
    })?;
    rp.finish()?;
    let range = collected.range("vadd").ok_or("no range")?;
    for m in metric.split(',') {
        println!("  {m} = {:?}", range.get(m));
    }
    Ok(range.values.values().next().copied().unwrap_or(f64::NAN))
}
