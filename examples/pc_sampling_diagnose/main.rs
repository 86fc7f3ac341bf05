//! Where PC sampling's cost per kernel launch goes, and what duty-cycled sampling costs a
//! training loop. One run prints, for a short kernel of its own (`spin`) on a stream of its own:
//!
//! - (a) plain launches: each launch then a synchronize, the launch call and the wait timed
//!   apart, and the same launches back to back with one synchronize; without a sampler and
//!   inside a sampled range (sampling enabled and started);
//! - (b) one CUDA graph replay of N nodes against N plain launches, both sampled: a cost per
//!   API call or per kernel;
//! - (c) the first launch of a function against its later ones, in a module loaded for it,
//!   sampled and not (`CUDA_MODULE_LOADING` is read from the environment: run it again with
//!   `EAGER` to tell lazy loading apart);
//! - (d) enabling and disabling sampling alone, and starting and stopping an empty range alone;
//! - (e) CUPTI's overhead records (`CUPTI_ACTIVITY_KIND_OVERHEAD`, count and time by kind) and
//!   the kernels' GPU intervals of back-to-back launches without and inside a sampled range:
//!   whether the time is the GPU's (kernels or gaps between them longer) or the host's.
//!
//! `--only plain --sampled|--unsampled --launches N` runs (a) alone in one mode, for
//! `strace -f -c` around it (the system calls per launch are the difference between N and 0
//! launches, sampled against unsampled). `--duty` runs the training loop's step in paired
//! rounds under the timeline without PC sampling and with duty-cycled sampling, then once with
//! a continuous window of iterations, and compares the top kernels' dominant stall reasons.
//!
//! ```text
//! pc_sampling_diagnose [--launches 200] [--graph-nodes 50] [--fresh 16] [--reps 10]
//! CUDA_MODULE_LOADING=EAGER pc_sampling_diagnose
//! pc_sampling_diagnose --only plain --sampled --launches 200
//! pc_sampling_diagnose --duty [--rounds 3] [--iters 2000] [--budget 0.01] [--keep DIR]
//! ```

mod activity;
mod duty;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use gpu_ledger::pcsampling::{PcSampler, PcSamplingConfig};

pub(crate) type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Where PC sampling's cost goes, and duty-cycled sampling on the training loop.
#[derive(Parser, Debug)]
#[command(about)]
pub(crate) struct Args {
    /// Launches of the plain case, and of (e).
    #[arg(long, default_value_t = 200)]
    launches: u32,
    /// Nodes of the CUDA graph in (b).
    #[arg(long, default_value_t = 50)]
    graph_nodes: u32,
    /// Fresh functions whose first launch is timed in (c), sampled and not.
    #[arg(long, default_value_t = 16)]
    fresh: u32,
    /// Repetitions of (b)'s replays and of (d)'s enables and ranges.
    #[arg(long, default_value_t = 10)]
    reps: u32,
    /// Run one case alone (`plain`), for strace.
    #[arg(long)]
    only: Option<String>,
    /// With `--only`: inside a sampled range.
    #[arg(long)]
    sampled: bool,
    /// With `--only`: without a sampler.
    #[arg(long)]
    unsampled: bool,
    /// The duty-cycle comparison on the training loop's step.
    #[arg(long)]
    duty: bool,
    /// `--duty`: paired rounds.
    #[arg(long, default_value_t = 3)]
    pub(crate) rounds: u32,
    /// `--duty`: iterations of each run.
    #[arg(long, default_value_t = 2000)]
    pub(crate) iters: u64,
    /// `--duty`: the duty cycle's budget, a fraction of the run.
    #[arg(long, default_value_t = 0.01)]
    pub(crate) budget: f64,
    /// `--duty`: iterations of the continuous window the duty cycle is compared with.
    #[arg(long, default_value_t = 20)]
    pub(crate) window: u64,
    /// `--duty`: where the last duty-cycled and the continuous run's ledgers are left.
    #[arg(long)]
    pub(crate) keep: Option<String>,
}

fn main() -> ExitCode {
    if !gpu_ledger::internals::driver_present() {
        eprintln!(
            "pc_sampling_diagnose: no NVIDIA driver or GPU here; run it on a machine with one"
        );
        return ExitCode::FAILURE;
    }
    let args = Args::parse();
    let run = if args.duty {
        duty::run(&args)
    } else {
        diagnose(&args)
    };
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pc_sampling_diagnose: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A short kernel: every thread runs a dependent chain of `iters` FMAs.
const SPIN: &str = r#"
extern "C" __global__ void spin(float* out, int iters) {
    float x = threadIdx.x;
    for (int i = 0; i < iters; ++i) x = x * 0.999f + 0.001f;
    if (x == 12345.0f) out[blockIdx.x] = x;
}
"#;
/// FMAs per thread of `spin`: about 10 µs on an H200.
const SPIN_ITERS: i32 = 2_000;
const GRID: u32 = 132;

/// The context, its stream, `spin` and its output.
pub(crate) struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    spin: CudaFunction,
    out: CudaSlice<f32>,
}

impl Gpu {
    fn new() -> Res<Gpu> {
        let ctx = CudaContext::new(0)?;
        // SAFETY: before any allocation and stream: nothing here shares buffers between
        // streams, and a graph capture must not record cudarc's events.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let module = ctx.load_module(cudarc::nvrtc::compile_ptx(SPIN)?)?;
        let spin = module.load_function("spin")?;
        let out = stream.alloc_zeros::<f32>(GRID as usize)?;
        Ok(Gpu {
            ctx,
            stream,
            spin,
            out,
        })
    }

    fn launch_fn(&mut self, f: &CudaFunction) -> Res<()> {
        let cfg = LaunchConfig {
            grid_dim: (GRID, 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(f);
        b.arg(&mut self.out).arg(&SPIN_ITERS);
        // SAFETY: `out` has one slot per block of the grid.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    fn launch(&mut self) -> Res<()> {
        let f = self.spin.clone();
        self.launch_fn(&f)
    }

    fn sampler(&self) -> Res<PcSampler> {
        Ok(PcSampler::new(&self.ctx, PcSamplingConfig::default())?)
    }
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn us(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Runs `work` inside a sampled range when `sampler` is given, else as it is.
fn maybe_sampled(
    sampler: Option<&mut PcSampler>,
    work: impl FnOnce() -> Res<()>,
) -> Res<Option<u64>> {
    match sampler {
        None => work().map(|()| None),
        Some(s) => {
            let mut inner = Ok(());
            let p = s.collect(|| {
                inner = work();
                Ok(())
            })?;
            inner?;
            Ok(Some(p.total_samples))
        }
    }
}

/// (a)'s figures of one mode: medians of the launch call and of the wait per launch (µs), and
/// the time per launch back to back (µs).
struct Plain {
    call: f64,
    wait: f64,
    back_to_back: f64,
    samples: Option<u64>,
}

fn plain(g: &mut Gpu, n: u32, sampled: bool) -> Res<Plain> {
    let mut sampler = if sampled { Some(g.sampler()?) } else { None };
    let (mut calls, mut waits) = (Vec::new(), Vec::new());
    let mut back_to_back = f64::NAN;
    let samples = maybe_sampled(sampler.as_mut(), || {
        for _ in 0..n {
            let t0 = Instant::now();
            g.launch()?;
            let t1 = Instant::now();
            g.stream.synchronize()?;
            calls.push(us(t1 - t0));
            waits.push(us(t1.elapsed()));
        }
        let t0 = Instant::now();
        for _ in 0..n {
            g.launch()?;
        }
        g.stream.synchronize()?;
        back_to_back = us(t0.elapsed()) / f64::from(n.max(1));
        Ok(())
    })?;
    Ok(Plain {
        call: median(&mut calls),
        wait: median(&mut waits),
        back_to_back,
        samples,
    })
}

fn case_plain(g: &mut Gpu, n: u32) -> Res<(f64, f64)> {
    let off = plain(g, n, false)?;
    let on = plain(g, n, true)?;
    println!(
        "(a) plain launches of `spin` ({GRID} blocks, ~10 µs), {n} each launch then a \
         synchronize, then {n} back to back with one synchronize (µs, medians):"
    );
    for (what, p) in [("unsampled", &off), ("sampled  ", &on)] {
        println!(
            "    {what}: launch call {:9.1}, wait {:9.1}, together {:9.1}; back to back {:9.1} \
             per launch{}",
            p.call,
            p.wait,
            p.call + p.wait,
            p.back_to_back,
            p.samples
                .map(|s| format!(" ({s} samples)"))
                .unwrap_or_default()
        );
    }
    println!(
        "    added by sampling per launch: {:.1} µs in the launch call, {:.1} µs in the wait; \
         {:.1} µs back to back",
        on.call - off.call,
        on.wait - off.wait,
        on.back_to_back - off.back_to_back
    );
    Ok((off.back_to_back, on.back_to_back))
}

/// (b): one replay of a graph of `nodes` launches of `spin`, unsampled and sampled (ms).
fn case_graph(g: &mut Gpu, nodes: u32, reps: u32, plain: (f64, f64)) -> Res<()> {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    g.stream.synchronize()?;
    g.stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let captured = (0..nodes).try_for_each(|_| g.launch());
    let graph = g.stream.end_capture(CUgraphInstantiate_flags(0));
    captured?;
    let graph = graph?.ok_or("the capture made no graph")?;
    graph.upload()?;
    let mut times = [Vec::new(), Vec::new()];
    for (i, sampled) in [false, true].into_iter().enumerate() {
        let mut sampler = if sampled { Some(g.sampler()?) } else { None };
        let stream = g.stream.clone();
        let t = &mut times[i];
        maybe_sampled(sampler.as_mut(), || {
            for _ in 0..reps {
                let t0 = Instant::now();
                graph.launch()?;
                stream.synchronize()?;
                t.push(us(t0.elapsed()));
            }
            Ok(())
        })?;
    }
    let (off, on) = (median(&mut times[0]), median(&mut times[1]));
    let per_launch_added = plain.1 - plain.0;
    println!(
        "(b) one graph replay of {nodes} `spin` nodes, then a synchronize (µs, median of \
         {reps}): unsampled {off:.1}, sampled {on:.1}: added {:.1} per replay, {:.1} per node; \
         {nodes} plain launches back to back had {:.1} added ({per_launch_added:.1} per launch)",
        on - off,
        (on - off) / f64::from(nodes.max(1)),
        per_launch_added * f64::from(nodes)
    );
    println!(
        "    a cost per API call adds about one launch's to a replay; a cost per kernel adds \
         one per node"
    );
    Ok(())
}

/// A module of `k` fresh copies of `spin`, named `prefix_i`.
fn fresh_module(g: &Gpu, prefix: &str, k: u32) -> Res<(Vec<CudaFunction>, f64, f64)> {
    let src: String = (0..k)
        .map(|i| SPIN.replace("void spin(", &format!("void {prefix}_{i}(")))
        .collect();
    let ptx = cudarc::nvrtc::compile_ptx(src)?;
    let t0 = Instant::now();
    let module = g.ctx.load_module(ptx)?;
    let load = us(t0.elapsed());
    let t0 = Instant::now();
    let fs = (0..k)
        .map(|i| module.load_function(&format!("{prefix}_{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let get = us(t0.elapsed()) / f64::from(k.max(1));
    Ok((fs, load, get))
}

/// (c): each fresh function's first launch and its second, each with a synchronize.
fn case_first_launch(g: &mut Gpu, k: u32) -> Res<()> {
    let loading = std::env::var("CUDA_MODULE_LOADING").unwrap_or_else(|_| "unset (LAZY)".into());
    println!("(c) first launch of a function against its second (µs, medians over {k} functions; CUDA_MODULE_LOADING={loading}):");
    for sampled in [false, true] {
        let mut sampler = if sampled { Some(g.sampler()?) } else { None };
        let prefix = if sampled {
            "fresh_sampled"
        } else {
            "fresh_plain"
        };
        let (mut first, mut second) = (Vec::new(), Vec::new());
        let (mut load, mut get) = (0.0, 0.0);
        maybe_sampled(sampler.as_mut(), || {
            let (fs, l, gt) = fresh_module(g, prefix, k)?;
            (load, get) = (l, gt);
            for f in &fs {
                for times in [&mut first, &mut second] {
                    let t0 = Instant::now();
                    g.launch_fn(f)?;
                    g.stream.synchronize()?;
                    times.push(us(t0.elapsed()));
                }
            }
            Ok(())
        })?;
        println!(
            "    {}: module load {load:.1}, function lookup {get:.1} each; first launch \
             {:.1}, second {:.1}",
            if sampled { "sampled  " } else { "unsampled" },
            median(&mut first),
            median(&mut second)
        );
    }
    Ok(())
}

/// (d): enabling and disabling sampling alone; an empty range started and stopped alone.
fn case_switches(g: &mut Gpu, reps: u32) -> Res<()> {
    let (mut enable, mut disable, mut range, mut sync) = (vec![], vec![], vec![], vec![]);
    for _ in 0..reps {
        let t0 = Instant::now();
        let s = g.sampler()?;
        let t1 = Instant::now();
        drop(s);
        enable.push(us(t1 - t0));
        disable.push(us(t1.elapsed()));
    }
    let mut s = g.sampler()?;
    for _ in 0..reps {
        let t0 = Instant::now();
        g.ctx.synchronize()?;
        sync.push(us(t0.elapsed()));
        let t0 = Instant::now();
        s.collect(|| Ok(()))?;
        range.push(us(t0.elapsed()));
    }
    drop(s);
    println!(
        "(d) alone (µs, medians of {reps}): enable {:.1}, disable {:.1}; an empty range started, \
         stopped and read {:.1} (a context synchronize alone {:.1})",
        median(&mut enable),
        median(&mut disable),
        median(&mut range),
        median(&mut sync)
    );
    Ok(())
}

/// (e): overhead and kernel records of back-to-back launches, unsampled then sampled.
fn case_records(g: &mut Gpu, n: u32) -> Res<()> {
    let session = activity::Session::start()?;
    let mut phases = Vec::new();
    for sampled in [false, true] {
        session.take()?;
        let mut sampler = if sampled { Some(g.sampler()?) } else { None };
        let t0 = Instant::now();
        maybe_sampled(sampler.as_mut(), || {
            for _ in 0..n {
                g.launch()?;
            }
            g.stream.synchronize()?;
            Ok(())
        })?;
        let host = us(t0.elapsed()) / f64::from(n.max(1));
        drop(sampler);
        let (kept, dropped) = session.take()?;
        phases.push((sampled, host, activity::summarize(&kept, "spin"), dropped));
    }
    drop(session);
    println!("(e) {n} launches back to back, with kernel and overhead records on:");
    for (sampled, host, r, dropped) in &phases {
        println!(
            "    {}: host {host:.1} µs per launch; {} kernel records: duration {:.1} µs \
             (median), GPU span {:.1} µs per kernel, gap between kernels {:.1} µs (median); \
             {dropped} records dropped",
            if *sampled { "sampled  " } else { "unsampled" },
            r.kernels,
            r.median_kernel_ns / 1e3,
            r.span_per_kernel_ns / 1e3,
            r.median_gap_ns / 1e3
        );
        if r.overhead.is_empty() {
            println!("      no overhead records");
        }
        for (kind, (count, ns)) in &r.overhead {
            println!(
                "      overhead {kind}: {count} records, {:.1} µs in all",
                *ns as f64 / 1e3
            );
        }
    }
    println!(
        "    longer kernels or gaps: the time is the GPU's; neither, with the host's time per \
         launch up: the host's (the launch call or the wait)"
    );
    Ok(())
}

fn diagnose(args: &Args) -> Res<()> {
    let mut g = Gpu::new()?;
    for _ in 0..20 {
        g.launch()?;
    }
    g.stream.synchronize()?;
    let lib = gpu_ledger::internals::cupti()?;
    println!(
        "pc_sampling_diagnose: driver {:?}, CUPTI {} ({}), CUDA_MODULE_LOADING={}",
        gpu_ledger::internals::driver_version().ok(),
        lib.release.name,
        lib.path.display(),
        std::env::var("CUDA_MODULE_LOADING").unwrap_or_else(|_| "unset".into())
    );
    if args.only.as_deref() == Some("plain") {
        if args.sampled == args.unsampled {
            return Err("--only plain takes one of --sampled and --unsampled".into());
        }
        let p = plain(&mut g, args.launches, args.sampled)?;
        println!(
            "only plain, {}: {} launches each with a synchronize then {} back to back: launch \
             call {:.1} µs, wait {:.1} µs, back to back {:.1} µs per launch",
            if args.sampled { "sampled" } else { "unsampled" },
            args.launches,
            args.launches,
            p.call,
            p.wait,
            p.back_to_back
        );
        return Ok(());
    }
    if let Some(other) = &args.only {
        return Err(format!("--only {other}: the one case run alone is `plain`").into());
    }
    let t = Instant::now();
    let plain = case_plain(&mut g, args.launches)?;
    case_graph(&mut g, args.graph_nodes, args.reps, plain)?;
    case_first_launch(&mut g, args.fresh)?;
    case_switches(&mut g, args.reps)?;
    case_records(&mut g, args.launches)?;
    println!("diagnostics took {:.1} s", t.elapsed().as_secs_f64());
    Ok(())
}
