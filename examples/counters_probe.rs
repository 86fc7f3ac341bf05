//! Diagnostic: collects one metric over one vector add with the CUPTI Range Profiler (user range,
//! user replay) and prints its value or the error. Run once per metric, each in its own process,
//! to map which metrics this CUPTI accepts: `counters_probe METRIC[,METRIC...]`. `PROBE_AUTO=1`:
//! auto ranges with kernel replay over two launches instead, with no CUPTI subscriber of
//! gpu-ledger's own.

use std::process::ExitCode;

use cudarc::driver::CudaContext;
use gpu_ledger::counters::{CounterConfig, RangeMode, RangeProfiler, ReplayMode};
use gpu_ledger::kernels::VectorAdd;

fn main() -> ExitCode {
    let Some(metric) = std::env::args().nth(1) else {
        eprintln!("usage: counters_probe METRIC");
        return ExitCode::from(2);
    };
    // COUNTERS_PROBE_THREAD_STACK=<bytes>: run the probe on a spawned thread with that stack
    // (to compare with the test harness, which runs each test on its own thread).
    let result = match std::env::var("COUNTERS_PROBE_THREAD_STACK")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        Some(stack) => {
            let m = metric.clone();
            std::thread::Builder::new()
                .stack_size(stack)
                .spawn(move || probe(&m).map_err(|e| e.to_string()))
                .expect("spawn the probe thread")
                .join()
                .unwrap_or_else(|_| Err("the probe thread panicked".into()))
        }
        None => probe(&metric).map_err(|e| e.to_string()),
    };
    match result {
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
    gpu_ledger::Profiler::preflight(gpu_ledger::Level::Counters)?;
    let ctx = CudaContext::new(0)?;
    // Switches that reproduce, one at a time, what the GPU test binary does before profiling.
    let flag = |k: &str| std::env::var_os(k).is_some();
    if flag("PROBE_NO_EVENT_TRACKING") {
        // SAFETY: this program synchronizes its one stream before reusing memory.
        unsafe { ctx.disable_event_tracking() };
    }
    // PROBE_NESTING=2: an outer range "outer" around "vadd", both levels collected.
    let nesting: u16 = std::env::var("PROBE_NESTING")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    // PROBE_AUTO=1: auto ranges with kernel replay, and no kernel-name recorder (no CUPTI
    // subscriber of gpu-ledger's own): one range per kernel launch.
    let auto = flag("PROBE_AUTO");
    // PROBE_AUTO_USER_REPLAY=1 (with PROBE_AUTO): auto ranges replayed by running the workload
    // again, instead of CUPTI's kernel replay.
    let auto_user_replay = flag("PROBE_AUTO_USER_REPLAY");
    let config = CounterConfig {
        metrics: metric.split(',').map(str::to_string).collect(),
        range_mode: if auto {
            RangeMode::Auto
        } else {
            RangeMode::User
        },
        replay_mode: if auto && !auto_user_replay {
            ReplayMode::Kernel
        } else {
            ReplayMode::User
        },
        nesting_levels: nesting,
        record_kernel_names: false,
        ..CounterConfig::default()
    };
    // PROBE_TIMELINE=1: a gpu-ledger timeline (CUPTI activity tracing) runs meanwhile.
    let timeline = if flag("PROBE_TIMELINE") {
        Some(
            gpu_ledger::Profiler::builder()
                .level(gpu_ledger::Level::Timeline)
                .ledger_path(std::env::temp_dir().join("counters-probe.jsonl"))
                .start()?,
        )
    } else {
        None
    };
    // PROBE_PROFILER_FIRST: build the Range Profiler configuration before allocating buffers.
    let mut early = if flag("PROBE_PROFILER_FIRST") {
        Some(RangeProfiler::new(&ctx, config.clone())?)
    } else {
        None
    };
    let stream = ctx.default_stream();
    let vadd = VectorAdd::new(&ctx)?;
    let n: u64 = std::env::var("PROBE_LOG2_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(1 << 24, |p: u32| 1u64 << p);
    let a = stream.alloc_zeros::<f32>(n as usize)?;
    let b = stream.alloc_zeros::<f32>(n as usize)?;
    let mut c = stream.alloc_zeros::<f32>(n as usize)?;
    if flag("PROBE_WARMUP_LAUNCH") {
        vadd.launch(&stream, &a, &b, &mut c, n)?;
    }
    stream.synchronize()?;
    let mut rp = match early.take() {
        Some(rp) => rp,
        None => RangeProfiler::new(&ctx, config)?,
    };
    // PROBE_HOLD_MS: keep the collection open that long after the first launch, printing
    // "holding" first (another process then finds the counters taken).
    let hold = std::env::var("PROBE_HOLD_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    let collected = rp.collect(|rp| {
        if auto {
            vadd.launch(&stream, &a, &b, &mut c, n)?;
            vadd.launch(&stream, &a, &b, &mut c, n)?;
            return Ok(stream.synchronize()?);
        }
        if nesting > 1 {
            rp.push_range("outer")?;
        }
        rp.push_range("vadd")?;
        vadd.launch(&stream, &a, &b, &mut c, n)?;
        stream.synchronize()?;
        if let Some(ms) = hold {
            use std::io::Write;
            println!("holding");
            let _ = std::io::stdout().flush();
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        if nesting > 1 {
            rp.pop_range()?;
        }
        rp.pop_range()
    })?;
    rp.finish()?;
    if let Some(t) = timeline {
        t.finish()?;
    }
    println!("  passes {} runs {}", collected.passes, collected.runs);
    for r in &collected.ranges {
        println!("  range {}: {:?}", r.name, r.values);
    }
    if auto {
        println!("  auto ranges: {}", collected.ranges.len());
        let first = collected.ranges.first().ok_or("no auto range")?;
        return Ok(first.values.values().next().copied().unwrap_or(f64::NAN));
    }
    let inner = if nesting > 1 { "outer/vadd" } else { "vadd" };
    let range = collected.range(inner).ok_or("no range")?;
    for m in metric.split(',') {
        println!("  {m} = {:?}", range.get(m));
    }
    Ok(range.values.values().next().copied().unwrap_or(f64::NAN))
}
