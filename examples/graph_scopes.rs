//! A step captured into a CUDA graph with its phases in scopes (`forward/attention`,
//! `backward`, `optimizer`), replayed every iteration in scope `step/replay`: each node's kernel,
//! copy and memset is attributed to the scope it was captured in, nested under the replay's
//! (`step/replay/forward/attention`), in every traced window of a sampled timeline.
//!
//! The capture runs inside the profiled iteration 0, after `start()`: the profiler sees each
//! node made, with the scope open then. With `--pre-start` a second graph, captured before the
//! profiler started, is replayed in `step/early` too: its nodes stay in `step/early`
//! (attribution `graph_launch`) and the trailer warns once, naming the remedy.
//!
//! For every traced row it prints where the kernels landed and what the graph launches'
//! records carried: one correlation id per replay, each with every node's record, is what a
//! driver that correlates graph launches right gives, in the first traced window and in the
//! later ones alike. It exits with an error when a row is not what it should be.
//!
//! `cargo run --release --example graph_scopes -- [--iters N] [--sample-every K] [--pre-start]
//! [--ledger PATH]`

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use cudarc::driver::CudaContext;
use gpu_ledger::{Level, Profiler, TimelineSampling};

#[path = "common/graph_step.rs"]
mod graph_step;
use graph_step::{launches_line, phase_errors, replay, GraphStep, KERNELS, NODES};

/// Graph nodes attributed to the scopes they were captured in.
#[derive(Parser, Debug)]
#[command(about)]
struct Args {
    /// Iterations, each one replay (iteration 0 captures first).
    #[arg(long, default_value_t = 31)]
    iters: u64,
    /// Trace one iteration in K (0: every one).
    #[arg(long, default_value_t = 10)]
    sample_every: u64,
    /// Also replay a graph captured before the profiler started.
    #[arg(long)]
    pre_start: bool,
    /// Where the ledger goes.
    #[arg(long, default_value = "target/gpu-ledger-graph-scopes.jsonl")]
    ledger: String,
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("graph_scopes: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), graph_step::Error> {
    let ctx = CudaContext::new(0)?;
    // SAFETY: the step runs on one stream and synchronizes every iteration, so cudarc's
    // per-buffer events are not needed; off before any allocation, and they would be captured.
    unsafe { ctx.disable_event_tracking() };
    let mut step = GraphStep::new(&ctx)?;
    // Eager warm-up: module load and first touch, outside any capture.
    step.phases()?;
    step.stream.synchronize()?;
    let early = if args.pre_start {
        Some(step.capture()?)
    } else {
        None
    };
    let mut builder = Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(&args.ledger)
        .record_activities(true)
        .settle(Duration::from_secs(5));
    if args.sample_every > 0 {
        builder = builder.sample_timeline(TimelineSampling::every(args.sample_every));
    }
    let profiler = builder.start()?;
    let graph = step.capture()?;
    for _ in 0..args.iters {
        replay(&graph, "replay")?;
        if let Some(early) = &early {
            replay(early, "early")?;
        }
        step.stream.synchronize()?;
        profiler.step();
    }
    drop(graph);
    drop(early);
    let summary = profiler.finish()?;
    let ledger = summary.read_ledger()?;
    let mut errors = Vec::new();
    for row in ledger.iterations.iter().filter(|r| !r.untraced) {
        let counts = row.attribution.unwrap_or_default();
        println!(
            "{} | kernels: graph_capture {}, graph_launch {}, of {}",
            launches_line(row),
            counts.graph_capture,
            counts.graph_launch,
            counts.total()
        );
        for s in row.scopes.iter().filter(|s| s.kernels > 0) {
            println!("    {:<32} {} kernels", s.path, s.kernels);
        }
        if !row.complete {
            errors.push(format!("row {} incomplete: {:?}", row.index, row.warnings));
        }
        errors.extend(phase_errors(row, "replay", 1));
        if counts.graph_capture != KERNELS {
            errors.push(format!(
                "row {}: {} kernels attributed by their capture, not {KERNELS}",
                row.index, counts.graph_capture
            ));
        }
        if args.pre_start && graph_step::kernels_in(row, "step/early") != KERNELS {
            errors.push(format!(
                "row {}: the graph captured before start() is not whole in step/early",
                row.index
            ));
        }
    }
    let t = &summary.trailer;
    let g = t.graphs.unwrap_or_default();
    println!(
        "graph nodes: {} captured, at most {} held (of {NODES} per graph and its executable \
         graph), {} at the end; records by capture {}, unseen {}",
        g.nodes_captured,
        g.nodes_live_peak,
        g.nodes_live_at_end,
        g.records_by_capture,
        g.records_unseen
    );
    for w in &t.warnings {
        println!("trailer warning: {w}");
    }
    if errors.is_empty() {
        println!("every traced row: each node in the scope it was captured in");
        Ok(())
    } else {
        Err(errors.join("\n").into())
    }
}
