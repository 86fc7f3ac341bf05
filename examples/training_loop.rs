//! A representative mixed training step built from the bundled kernels and cuBLAS GEMMs, for
//! kernel families, idle gaps and Amdahl ceilings to have a realistic workload (and for the
//! profiler's overhead to be measured on it). FP32 throughout; the numbers are not a model, the
//! kernel mix and dependencies are:
//!
//! - `forward`: `h = X·W1` (cuBLAS), `a = softmax(h)` (fused softmax), `y = a·W2` (cuBLAS),
//!   `o = attention(y, y, y)` (fused attention, head dim 64), `loss = Σ o` (block reduction and
//!   its second pass);
//! - `backward`: with `--recompute`, `h` and `a` are recomputed here (scope
//!   `backward/recompute`), as activation checkpointing does; `dY = o + y` (vector add),
//!   `W2ᵀ` (padded transpose), `dA = dY·W2ᵀ`, `dW2 = aᵀ·dY` (cuBLAS), `dH = dA + a`,
//!   `dW1 = Xᵀ·dH` (cuBLAS);
//! - `optimizer`: the gradient sum (reduction), `W += dW` (vector add, the learning rate folded
//!   into the GEMMs' alpha) and a device-to-device copy back into the weights;
//! - `log`: the loss copied to the host every step (a `.item()`-like synchronization).
//!
//! With `--graph` the step (forward, backward, optimizer) is captured once on a stream of its own
//! (`ctx.new_stream()`: the legacy default stream cannot be captured), inside the first profiled
//! iteration, and replayed as a CUDA graph each iteration (scope `step(graph)`): each node's
//! kernel or copy is attributed to the phase it was captured in, under the replay's scope
//! (`step(graph)/forward`); see [`capture_step`] for what the capture requires. Without it, the
//! step runs eagerly on the context's default stream.
//!
//! `cargo run --release --example training_loop -- [--iters N] [--graph] [--recompute]
//! [--ledger PATH]`

use std::process::ExitCode;

use clap::Parser;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::CudaGraph;
use gpu_ledger::analysis::families::{family_table, FamilyRules};
use gpu_ledger::kernels::suite::experiment::{device_line, open_device};
use gpu_ledger::ledger::IterationRow;
use gpu_ledger::{Level, Profiler, RunSummary};

#[path = "common/training_model.rs"]
mod training_model;
use training_model::{Model, D, H, HEAD, SEQ, T};

/// A mixed training step under gpu-ledger.
#[derive(Parser, Debug)]
#[command(about)]
struct Args {
    /// Iterations (steps) to run after one warm-up step.
    #[arg(long, default_value_t = 20)]
    iters: u64,
    /// Capture the step once and replay it as a CUDA graph.
    #[arg(long)]
    graph: bool,
    /// Recompute the forward activations inside backward (activation checkpointing).
    #[arg(long)]
    recompute: bool,
    /// Where the ledger goes.
    #[arg(long, default_value = "target/gpu-ledger-training.jsonl")]
    ledger: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("training_loop: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Captures one step on the model's stream and instantiates it.
///
/// What the captured region (and the code it calls) may do, checked against
/// `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`, under which an unsafe call made on this thread
/// (allocation, synchronous copy, stream/context/event synchronization or query, use of the
/// legacy stream) invalidates the capture:
/// - the stream is a `ctx.new_stream()` stream: `cuStreamBeginCapture` refuses the legacy NULL
///   stream, which is what `ctx.default_stream()` is (the original failure);
/// - the kernel helpers (`src/kernels/suite/*`: `launch`, `launch_fused`, `launch_sum`) only
///   build arguments and call `cuLaunchKernel` on the stream;
/// - the GEMMs are `cublasSgemm` on a handle bound to the stream, host pointer mode (alpha and
///   beta are read at capture time, they are constants), with a workspace set beforehand
///   ([`Model::set_blas_workspace`]) and heuristics warmed up by the eager step;
/// - the optimizer's copies are `cuMemcpyDtoDAsync` on the stream (memcpy nodes);
/// - every buffer was allocated before; nothing synchronizes or copies to the host inside;
/// - cudarc's event tracking is off (see `run`): otherwise every kernel argument, GEMM operand
///   and copy would add `cuStreamWaitEvent` on events recorded outside the capture (a dependency
///   across the capture boundary) and `cuEventRecord` calls to the graph;
/// - the scopes in `step` are host scopes, never timed on the stream (see [`Model::step`]).
///
/// `THREAD_LOCAL` is enough (no relaxed mode needed), and it keeps any such call made by this
/// thread an error instead of a silently wrong graph. An error inside the capture is reported
/// before the one `end_capture` then returns (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED), which
/// would hide the cause.
fn capture_step(
    model: &mut Model,
    recompute: bool,
) -> Result<CudaGraph, Box<dyn std::error::Error>> {
    let stream = model.stream.clone();
    if stream.cu_stream().is_null() {
        return Err("graph capture needs a non-default stream (ctx.new_stream())".into());
    }
    if stream.context().is_managing_stream_synchronization() {
        return Err(
            "cudarc event tracking is on: it would record and wait on events inside the capture"
                .into(),
        );
    }
    // The warm-up's work is complete, so that nothing outside the capture is pending on it.
    stream.synchronize()?;
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let captured = model.step(recompute, true);
    let ended = stream.end_capture(CUgraphInstantiate_flags(0));
    captured.map_err(|e| format!("during stream capture: {e}"))?;
    let graph = ended?.ok_or("stream capture produced an empty graph")?;
    graph.upload()?;
    Ok(graph)
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let dev = open_device(0)?;
    // SAFETY: everything runs on one stream and the loop synchronizes every step, so cudarc's
    // per-buffer events are not needed. This comes before any allocation (buffers allocated
    // while tracking is on carry events) and before `new_stream` (which puts the context in
    // multi-stream mode, where cudarc records and waits on those events at every buffer use):
    // with it, no event is recorded or waited on during graph capture.
    unsafe { dev.ctx.disable_event_tracking() };
    // The graph path gets a stream of its own: the legacy default stream cannot be captured.
    // The eager path keeps the default stream, unchanged.
    let stream = if args.graph {
        dev.ctx.new_stream()?
    } else {
        dev.stream.clone()
    };
    let mut model = Model::new(&dev.ctx, dev.gpu.sm_count, stream)?;
    if args.graph {
        model.set_blas_workspace()?;
    }
    // Eager warm-up: module loads, cuBLAS heuristics, first touch (and, before a capture, every
    // lazy initialization that could allocate or synchronize).
    model.step(args.recompute, true)?;
    let first_loss = model.read_loss()?;
    model.stream.synchronize()?;

    let profiler = Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(&args.ledger)
        .start()?;
    // The capture runs after start(), in iteration 0: the profiler records each node with the
    // phase scope open as it is captured (a graph captured before start() would stay whole in
    // the replay's scope), and the captured launch calls, which run nothing, are not awaited.
    let graph = if args.graph {
        Some(capture_step(&mut model, args.recompute)?)
    } else {
        None
    };
    println!(
        "training_loop on {}: {} steps, T={T} D={D} H={H}, attention {} heads x {SEQ} x {HEAD}{}{}",
        device_line(&dev.gpu),
        args.iters,
        model.attn.bh,
        if args.graph { ", CUDA graph" } else { "" },
        if args.recompute {
            ", recompute in backward"
        } else {
            ""
        },
    );
    let mut loss = first_loss;
    for _ in 0..=args.iters {
        match &graph {
            Some(g) => {
                // The whole step is one API call, cuGraphLaunch, whose correlation id CUPTI gives
                // every kernel and copy node the graph runs; their records also carry the node's
                // id, and gpu-ledger attributes each to the scope open where the node was
                // captured, nested under this one: `step(graph)/forward`, `step(graph)/backward`,
                // `step(graph)/optimizer` (attribution `graph_capture`). `step(graph)`'s device
                // time is the union of them all, its host time the asynchronous launch call
                // only; the kernel groups count the nodes as graph launches.
                let _s = Profiler::scope("step(graph)");
                g.launch()?;
            }
            None => model.step(args.recompute, true)?,
        }
        {
            let _s = Profiler::scope("log");
            loss = model.read_loss()?;
        }
        profiler.step();
    }
    let summary = profiler.finish()?;
    println!("loss: first {first_loss:.4e}, last {loss:.4e}");
    report(&summary, args.graph)?;
    if !loss.is_finite() {
        return Err(format!("the loss is not finite: {loss}").into());
    }
    Ok(())
}

/// What the run's ledger says: the scopes, the graph's share of the kernels, the kernel
/// families, the device's idle time and the profiler's own figures.
fn report(summary: &RunSummary, graph: bool) -> Result<(), Box<dyn std::error::Error>> {
    let ledger = summary.read_ledger()?;
    // Iteration 0 carries CUPTI's first-launch cost: leave it out.
    let rows: Vec<_> = ledger
        .iterations
        .iter()
        .filter(|r| r.index > 0 && r.complete && !r.perturbed)
        .collect();
    print_scopes(&rows);
    if graph {
        let per_step = |f: fn(&gpu_ledger::ledger::KernelGroup) -> u64| {
            rows.iter()
                .flat_map(|r| r.kernels.iter().map(f))
                .sum::<u64>() as f64
                / rows.len().max(1) as f64
        };
        println!(
            "graph: {:.1} of {:.1} kernels per step came from the graph",
            per_step(|k| k.graph_launches),
            per_step(|k| k.count)
        );
    }
    print_families(&rows);
    let idle: Vec<f64> = rows
        .iter()
        .flat_map(|r| r.devices.iter().map(|d| d.idle_ns as f64))
        .collect();
    let busy: f64 = rows
        .iter()
        .flat_map(|r| r.devices.iter().map(|d| d.busy_ns as f64))
        .sum();
    println!(
        "\ndevice idle inside iterations: {:.1} µs per step ({:.2}% of the busy time); ledger {}",
        idle.iter().sum::<f64>() / rows.len().max(1) as f64 / 1e3,
        100.0 * idle.iter().sum::<f64>() / busy.max(1.0),
        summary
            .ledger_path
            .as_deref()
            .map_or("not written".into(), |p| p.display().to_string())
    );
    let t = &summary.trailer;
    println!(
        "{} kernel records, {} dropped; CUPTI overhead {:.3} ms, collector CPU {:.3} ms",
        t.kernel_records,
        t.dropped_records,
        t.overhead.cupti_overhead_ns as f64 / 1e6,
        t.overhead.collector_cpu_ns as f64 / 1e6
    );
    Ok(())
}

/// The kernel families ranked by device time, with what halving each would give.
fn print_families(rows: &[&IterationRow]) {
    let table = family_table(rows.iter().copied(), &FamilyRules::default());
    println!(
        "\nkernel families over {} iterations (device busy {:.1} ms, kernels {:.1} ms, wall {:.1} ms)",
        table.iterations,
        table.device_busy_ns as f64 / 1e6,
        table.kernel_ns as f64 / 1e6,
        table.host_wall_ns as f64 / 1e6
    );
    println!(
        "{:>4} {:<40} {:>8} {:>10} {:>8} {:>8} {:>8}",
        "rank", "family", "launch/it", "mean µs", "share", "ceiling", "if 2x"
    );
    for f in &table.families {
        // Cut by characters, not bytes: a demangled name may hold multi-byte characters.
        let name: String = if f.family.chars().count() > 40 {
            f.family.chars().take(39).chain(['…']).collect()
        } else {
            f.family.clone()
        };
        println!(
            "{:>4} {:<40} {:>8.1} {:>10.1} {:>7.1}% {:>8} {:>8}",
            f.rank,
            name,
            f.launches_per_iteration,
            f.mean_ns / 1e3,
            100.0 * f.share_of_device_time.unwrap_or(f64::NAN),
            f.amdahl_ceiling.map_or("-".into(), |c| format!("{c:.2}x")),
            f.speedup_if_2x.map_or("-".into(), |c| format!("{c:.3}x")),
        );
    }
}

fn print_scopes(rows: &[&IterationRow]) {
    use std::collections::BTreeMap;
    let mut per: BTreeMap<&str, (Vec<f64>, Vec<f64>, u64)> = BTreeMap::new();
    for r in rows {
        for s in &r.scopes {
            let e = per.entry(&s.path).or_default();
            e.0.push(s.device_ns_inclusive as f64 / 1e3);
            e.1.push(s.host_ns as f64 / 1e3);
            e.2 += s.launches;
        }
    }
    println!(
        "\n{:<22} {:>12} {:>12} {:>12}",
        "scope", "device p50 µs", "host p50 µs", "launches/it"
    );
    for (path, (dev, host, launches)) in per {
        println!(
            "{:<22} {:>12.1} {:>12.1} {:>12.1}",
            path,
            median(&dev),
            median(&host),
            launches as f64 / rows.len().max(1) as f64
        );
    }
}

fn median(v: &[f64]) -> f64 {
    gpu_ledger::analysis::stats::Distribution::from_samples(v).map_or(f64::NAN, |d| d.median)
}
