//! Idle time by cause on a loop whose idle profile is known by construction
//! (`common/idle_profile.rs`: a host scope that busy-waits 200 µs between two phases, a
//! `cuStreamSynchronize` then a launch, a 4-byte device-to-host read, a `cuMemAlloc` in the loop,
//! 200 back-to-back empty kernels, a kernel waiting on an event recorded on another stream).
//!
//! For every iteration after the warm-up it prints each cause's expected idle time beside the
//! measured one (the target: each within 5 % of the iteration's idle time or 5 µs, whichever is
//! larger, and the causes adding up to `idle_ns` exactly), then whether the row's largest gaps
//! name each phase. Exits non-zero when a target is missed, and without a GPU.
//!
//! `cargo run --release --example idle_causes -- [--iters 20] [--ledger PATH]`

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use cudarc::driver::CudaContext;
use gpu_ledger::{IdleConfig, Level, Profiler};

#[path = "common/idle_profile.rs"]
mod idle_profile;
use idle_profile::{compare, named_in_largest_gaps, print, Workload, LARGEST_GAPS};

/// Iterations run before those compared (module loading, first allocations).
const WARMUP: u64 = 2;

/// Idle time by cause against a known idle profile.
#[derive(Parser, Debug)]
#[command(about)]
struct Args {
    /// Iterations compared, after the warm-up.
    #[arg(long, default_value_t = 20)]
    iters: u64,
    /// Where the ledger goes.
    #[arg(long, default_value = "target/gpu-ledger-idle-causes.jsonl")]
    ledger: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("idle_causes: a target was missed (see above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("idle_causes: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<bool, Box<dyn std::error::Error>> {
    Profiler::preflight(Level::Timeline)?;
    let ctx = CudaContext::new(0)?;
    let mut workload = Workload::new(&ctx)?;
    let profiler = Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(&args.ledger)
        .settle(Duration::from_secs(5))
        .idle(IdleConfig {
            largest_gaps: LARGEST_GAPS,
            ..IdleConfig::default()
        })
        .start()?;
    let mut expected = Vec::new();
    for _ in 0..WARMUP + args.iters {
        expected.push(workload.iteration(&profiler)?);
    }
    let summary = profiler.finish()?;
    let floor = summary
        .trailer
        .dispatch_floors
        .iter()
        .find(|f| f.device_id == 0)
        .ok_or("the trailer has no dispatch floor for device 0")?;
    println!(
        "dispatch floor: {} ns ({}; median gap {} ns over {} samples)",
        floor.floor_ns,
        floor.source,
        floor.median_ns.unwrap_or(floor.floor_ns),
        floor.samples
    );
    let median = floor.median_ns.unwrap_or(floor.floor_ns);
    let ledger = summary.read_ledger()?;
    let (mut rows, mut met) = (0, 0);
    let mut named = [0u64; 5];
    for row in ledger.iterations.iter().filter(|r| r.index >= WARMUP) {
        let Some(e) = expected.get(row.index as usize) else {
            continue;
        };
        let Some(c) = compare(row, e, median) else {
            println!("iteration {}: no idle causes in the row", row.index);
            rows += 1;
            continue;
        };
        print(row.index, &c);
        let names = named_in_largest_gaps(row);
        let missing: Vec<&str> = names.iter().filter(|n| !n.1).map(|n| n.0).collect();
        if !missing.is_empty() {
            println!("  largest gaps do not name: {}", missing.join(", "));
        }
        for (count, (_, found)) in named.iter_mut().zip(names) {
            *count += u64::from(found);
        }
        rows += 1;
        met += u64::from(c.missed().is_empty() && c.adds_up && c.queued_in_time());
    }
    println!("\n{met} of {rows} iterations within every target");
    for (count, (name, _)) in named.iter().zip(named_in_largest_gaps(&Default::default())) {
        println!("  largest gaps name {name}: {count} of {rows}");
    }
    Ok(rows > 0 && met == rows && named.iter().all(|&n| n == rows))
}
