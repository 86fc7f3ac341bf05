//! Attribution in an asynchronous framework: the training thread opens
//! `step/{forward,backward,optimizer,sync}` and records operations; named launcher threads launch
//! their kernels later (`examples/common/async_engine.rs`). Runs the same training loop under
//! each way of attributing those launches and prints, per way, the share of kernel time that
//! landed in the scope its kernel belongs to, how the ledger says each kernel was attributed, and
//! its warnings.
//!
//! ```sh
//! cargo run --release --example async_framework -- [--iters 20] [--launchers 2] [--batch]
//! ```

use std::process::ExitCode;
use std::time::Duration;

use cudarc::driver::CudaContext;
use gpu_ledger::{read_ledger, Follow, Level, Profiler};

#[path = "common/async_engine.rs"]
mod async_engine;
use async_engine::{placement, Engine, Mode};

struct Args {
    iters: u64,
    launchers: usize,
    batch: bool,
    n: u64,
    fmas: u32,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        iters: 20,
        launchers: 2,
        batch: false,
        n: 1 << 20,
        fmas: 2000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--iters" => {
                a.iters = value("--iters")?
                    .parse()
                    .map_err(|e| format!("--iters: {e}"))?
            }
            "--launchers" => {
                a.launchers = value("--launchers")?
                    .parse()
                    .map_err(|e| format!("--launchers: {e}"))?
            }
            "--fmas" => {
                a.fmas = value("--fmas")?
                    .parse()
                    .map_err(|e| format!("--fmas: {e}"))?
            }
            "--batch" => a.batch = true,
            other => {
                return Err(format!(
                    "unknown argument {other} (--iters N, --launchers N, --fmas N, --batch)"
                ))
            }
        }
    }
    if a.launchers == 0 {
        return Err("--launchers must be at least 1".into());
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("async_framework: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = Profiler::preflight(Level::Timeline) {
        eprintln!("async_framework: {e}");
        return ExitCode::FAILURE;
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("async_framework: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One profiled run of the training loop; prints its line of the table.
fn run_mode(
    ctx: &std::sync::Arc<CudaContext>,
    args: &Args,
    label: &str,
    mode: Mode,
    follow: Follow,
) -> Result<(), Box<dyn std::error::Error>> {
    let tag: String = label.chars().filter(char::is_ascii_alphanumeric).collect();
    let path = std::env::temp_dir().join(format!("gpu-ledger-async-{tag}.jsonl"));
    let mut engine = Engine::new(ctx, args.launchers, mode, args.n, args.fmas);
    engine.step(); // warm-up: module load, first launches
    let profiler = Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(&path)
        .record_activities(true)
        .settle(Duration::from_secs(5))
        .follow(follow)
        .start()?;
    for _ in 0..args.iters {
        engine.step();
        profiler.step();
    }
    let summary = profiler.finish()?;
    engine.shutdown();
    let ledger = read_ledger(&path)?;
    let (mut right, mut total, mut right_k, mut kernels) = (0, 0, 0, 0);
    let mut worst: f64 = 1.0;
    let mut by = gpu_ledger::ledger::AttributionCounts::default();
    let mut row_warnings = 0;
    for row in &ledger.iterations {
        let p = placement(row);
        right += p.0;
        total += p.1;
        right_k += p.2;
        kernels += p.3;
        if p.1 > 0 {
            worst = worst.min(p.0 as f64 / p.1 as f64);
        }
        if let Some(a) = row.attribution {
            by.own_thread += a.own_thread;
            by.handoff += a.handoff;
            by.followed += a.followed;
            by.profiler += a.profiler;
            by.unscoped += a.unscoped;
        }
        row_warnings += usize::from(row.warnings.iter().any(|w| w.contains("in no scope")));
    }
    let threads: Vec<String> = ledger
        .iterations
        .first()
        .map(|r| {
            r.launch_threads
                .iter()
                .map(|t| format!("{}:{}", t.name.as_deref().unwrap_or("?"), t.kernels))
                .collect()
        })
        .unwrap_or_default();
    println!(
        "{label:<24} {:>7.2} % {:>7.2} % {:>5}/{:<5} own {:>4} handoff {:>4} followed {:>4} unscoped {:>4}  rows warned {:>2}/{:<2} threads {}",
        100.0 * right as f64 / total.max(1) as f64,
        100.0 * worst,
        right_k,
        kernels,
        by.own_thread,
        by.handoff,
        by.followed,
        by.unscoped,
        row_warnings,
        ledger.iterations.len(),
        threads.join(" "),
    );
    for w in &summary.trailer.warnings {
        println!("{:<24} trailer: {w}", "");
    }
    Ok(())
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let ctx = CudaContext::new(0)?;
    println!(
        "{} iterations, {} launcher thread(s), {} kernels per step of {} FMAs over {} floats{}",
        args.iters,
        args.launchers,
        async_engine::kernels_per_step(),
        args.fmas,
        args.n,
        if args.batch { ", batched launches" } else { "" }
    );
    println!(
        "{:<24} {:>9} {:>9} {:>11}  attribution of the kernels (ledger)",
        "attribution", "in scope", "worst row", "kernels"
    );
    let batch = args.batch;
    let runs = [
        (
            "hand-off",
            Mode {
                handoff: true,
                phase_sync: false,
                batch,
            },
            Follow::Off,
        ),
        (
            "follow, phase syncs",
            Mode {
                handoff: false,
                phase_sync: true,
                batch,
            },
            Follow::SteppingThread,
        ),
        (
            "follow, no phase syncs",
            Mode {
                handoff: false,
                phase_sync: false,
                batch,
            },
            Follow::SteppingThread,
        ),
        (
            "none",
            Mode {
                handoff: false,
                phase_sync: false,
                batch,
            },
            Follow::Off,
        ),
    ];
    for (label, mode, follow) in runs {
        run_mode(&ctx, args, label, mode, follow).map_err(|e| format!("{label}: {e}"))?;
    }
    println!(
        "in scope: kernel time in the scope its kernel belongs to (step/forward for forward_op ...), over all rows; worst row: the lowest row's share"
    );
    Ok(())
}
