//! The same training step instrumented twice: once with `Profiler::scope` guards (and a
//! `ScopeContext` handed to a worker thread), once only with `tracing` spans through
//! `gpu_ledger::ScopeLayer`. Prints both per-scope tables (calls and kernels summed over the
//! run) side by side and whether they are the same; exits non-zero when they differ.
//!
//! ```sh
//! cargo run --release --example tracing_scopes -- [ITERATIONS]
//! ```

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use gpu_ledger::kernels::{TrainOp, TrainOps};
use gpu_ledger::{Level, Profiler};
use tracing_subscriber::layer::SubscriberExt;

/// How the step is instrumented.
#[derive(Clone, Copy, PartialEq)]
enum Instrumentation {
    Guards,
    Spans,
}

/// Path -> (calls, kernels) over the run.
type Table = BTreeMap<String, (u64, u64)>;

struct Gpu {
    stream: Arc<CudaStream>,
    ops: TrainOps,
    x: CudaSlice<f32>,
    /// The worker thread's own stream and buffer.
    worker_stream: Arc<CudaStream>,
    worker_x: CudaSlice<f32>,
}

const N: u64 = 1 << 18;

fn main() -> ExitCode {
    if let Err(e) = Profiler::preflight(Level::Timeline) {
        eprintln!("tracing_scopes: {e}");
        return ExitCode::FAILURE;
    }
    let iterations: u64 = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 5,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("tracing_scopes: ITERATIONS: {e}");
            return ExitCode::FAILURE;
        }
    };
    match run(iterations) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("tracing_scopes: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(iterations: u64) -> Result<bool, Box<dyn std::error::Error>> {
    let subscriber = tracing_subscriber::registry().with(gpu_ledger::ScopeLayer::new());
    tracing::subscriber::set_global_default(subscriber)?;
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    let worker_stream = ctx.new_stream()?;
    let mut gpu = Gpu {
        x: stream.alloc_zeros::<f32>(N as usize)?,
        worker_x: worker_stream.alloc_zeros::<f32>(N as usize)?,
        stream,
        worker_stream,
        ops: TrainOps::new(&ctx)?,
    };
    let dir = tempfile::tempdir()?;
    let guards = profile(
        &mut gpu,
        Instrumentation::Guards,
        iterations,
        &dir.path().join("guards.jsonl"),
    )?;
    let spans = profile(
        &mut gpu,
        Instrumentation::Spans,
        iterations,
        &dir.path().join("spans.jsonl"),
    )?;
    println!("{:<28} {:>14} {:>14}", "scope", "guards", "tracing spans");
    for path in guards
        .keys()
        .chain(spans.keys().filter(|p| !guards.contains_key(*p)))
    {
        let cell = |t: &Table| {
            t.get(path)
                .map_or("-".to_string(), |(c, k)| format!("{c} calls {k} k"))
        };
        println!("{path:<28} {:>14} {:>14}", cell(&guards), cell(&spans));
    }
    let same = guards == spans;
    println!("same per-scope table: {}", if same { "yes" } else { "no" });
    Ok(same)
}

/// One profiled run of the step, instrumented as `how`; its per-scope table.
fn profile(
    gpu: &mut Gpu,
    how: Instrumentation,
    iterations: u64,
    ledger: &std::path::Path,
) -> Result<Table, Box<dyn std::error::Error>> {
    let profiler = Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(ledger)
        .settle(Duration::from_secs(5))
        .start()?;
    for _ in 0..iterations {
        step(gpu, how)?;
        gpu.stream.synchronize()?;
        gpu.worker_stream.synchronize()?;
        profiler.step();
    }
    let summary = profiler.finish()?;
    let mut table = Table::new();
    for row in summary.read_ledger()?.iterations {
        for s in row.scopes {
            let e = table.entry(s.path).or_default();
            e.0 += s.calls;
            e.1 += s.kernels;
        }
    }
    Ok(table)
}

/// `step/{forward,backward,optimizer}`; backward hands `allreduce` to a worker thread.
fn step(gpu: &mut Gpu, how: Instrumentation) -> Result<(), Box<dyn std::error::Error>> {
    let Gpu {
        stream,
        ops,
        x,
        worker_stream,
        worker_x,
    } = gpu;
    let spans = how == Instrumentation::Spans;
    let _step = phase(spans, "step");
    for op in TrainOp::ALL {
        let _phase = phase(spans, op.scope());
        ops.launch(stream, op, x, N, 200)?;
        if op == TrainOp::Backward {
            let handed = gpu_ledger::Profiler::context();
            let ops = &*ops;
            let span = spans.then(|| tracing::info_span!("allreduce"));
            std::thread::scope(|s| {
                s.spawn(|| {
                    // The span's parent is `backward`, entered on the other thread; the guards'
                    // version hands the scope over as a context.
                    let _in = (!spans).then(|| handed.enter());
                    let _guard = (!spans).then(|| Profiler::scope("allreduce"));
                    let _entered = span.as_ref().map(|s| s.enter());
                    ops.launch(worker_stream, TrainOp::Optimizer, worker_x, N, 50)
                })
                .join()
                .expect("the worker thread")
            })?;
        }
    }
    Ok(())
}

/// A phase scope: a guard, or an entered span (its name must be a literal for `tracing`).
fn phase(spans: bool, name: &'static str) -> Phase {
    if spans {
        let span = match name {
            "step" => tracing::info_span!("step"),
            "forward" => tracing::info_span!("forward"),
            "backward" => tracing::info_span!("backward"),
            _ => tracing::info_span!("optimizer"),
        };
        Phase {
            _guard: None,
            _span: Some(span.entered()),
        }
    } else {
        Phase {
            _guard: Some(Profiler::scope(name)),
            _span: None,
        }
    }
}

/// Held for the phase's length: one of the two.
struct Phase {
    _guard: Option<gpu_ledger::ScopeGuard<'static>>,
    _span: Option<tracing::span::EnteredSpan>,
}
