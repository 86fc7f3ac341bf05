//! The profiler's own cost, side by side: the same GPU workloads run interleaved in one
//! process, over several rounds, under each configuration, and the table printed last says what
//! each level adds per launch, against no profiler and against a minimal raw-CUPTI tracer.
//!
//! ```text
//! cargo run --release --example overhead                    # the table, < 2 min on an H200
//! cargo run --release --example overhead -- --decompose     # + raw-CUPTI steps in between
//! cargo run --release --example overhead -- --sustained 60  # 200 000 launches/s at Timeline
//! cargo run --release --example overhead -- --nvml-interference  # what each NVML read costs the GPU work
//! cargo run --release --example overhead -- --configs none,raw-cupti,timeline --workloads a --rounds 30
//! cargo run --release --example overhead -- --scope-on --rounds 20 --launches 20000
//! cargo run --release --example overhead -- --configs none,tl-sampled --workloads c --rounds 150 --step-laps
//! cargo run --release --example overhead -- --configs none,raw-cupti,timeline,tl-nocauses --workloads a,c --rounds 30
//! ```
//!
//! Configurations:
//! - `none`: no profiler and no scope calls in the code;
//! - `disabled`: the workload's scope guards, no profiler running (gpu-ledger compiled in, off);
//! - `scopes`: `Level::Scopes` (host time per scope; nothing per launch);
//! - `timeline`: `Level::Timeline` (CUPTI activity records, scope attribution);
//! - `raw-cupti`: the floor any CUPTI kernel tracer pays, written here against the raw bindings:
//!   `CONCURRENT_KERNEL` enabled, a preallocated buffer pool, trivial buffer callbacks (the
//!   completion callback counts the kernel records and returns the buffer), nothing else;
//! - with `--decompose`, two ablations of the timeline level that split what it adds above
//!   `raw-cupti`:
//!   `tl-noscope` (the workload code without its scope guards: what the scopes cost at the
//!   timeline level) and `tl-fewsteps`
//!   (`profiler.step()` [`FEW_STEPS`] times less often: what `step()` costs on the critical path
//!   between a step's synchronize and the next step's first launch);
//! - `scopes-nonvtx` and `tl-nonvtx` (named in `--configs`): the scopes and timeline levels
//!   without the NVTX range each scope pushes (`ProfilerBuilder::nvtx_emit(false)`), for what
//!   NVTX emission costs with no NVTX tool attached;
//! - `tl-nvtxin` (named in `--configs`): the timeline level importing NVTX ranges as scopes. NVTX
//!   finds its tool once per process, so run the example with `NVTX_INJECTION64_PATH` set to the
//!   CUPTI library: NVTX then reaches CUPTI in every configuration, and `timeline` against
//!   `tl-nvtxin` is what importing adds per scope (the callback that sees the scope's own range);
//! - `tl-sampled` and `tl-idle` (named in `--configs`): the timeline traced on one iteration in
//!   [`SAMPLE_EVERY`], and on iteration 0 alone (CUPTI attached, never switched on again), so
//!   that `tl-sampled` − `tl-idle` is what the switches and the traced iterations cost;
//! - `tl-nocauses` (named in `--configs`): the timeline level with idle causes off
//!   (`ProfilerBuilder::idle_causes(false)`): the API callback reads no clock per call, so that
//!   `timeline` − `tl-nocauses` is what the idle causes' entry and exit stamps cost per launch;
//! - `--perturbation`: what tracing adds to the GPU's own time, per kernel shape, against the
//!   start-up calibration's estimate (`perturbation.rs`).
//!
//! Workloads: (a) back-to-back launches of an empty kernel; (b) the same with one
//! `Profiler::scope` per launch (configurations without scopes run it without them); (c) the
//! realistic step, the training loop's (`examples/common/training_model.rs`:
//! cuBLAS GEMMs, fused softmax and attention, reductions, vector adds, device copies, in
//! `forward`/`backward`/`optimizer` scopes, then the loss read back in `log`); (d) a kernel mix:
//! 22 kernels of 10 to 500 µs (a busy loop on `clock64` and the bundled vector_add) in
//! `step/{forward,backward,optimizer}` scopes and a synchronize per step, a fallback for (c)
//! and the harder case (shorter kernels, so CUPTI's per-kernel cost is a larger share).
//! Under `scopes` and `timeline`, `profiler.step()` ends an iteration every 1000 launches in (a)
//! and (b) and after every step in (c) and (d).
//!
//! Each round runs every configuration once (start, a short warm-up, the workloads, finish) in an
//! order rotated per round; each workload's figure for the round is its loop time (host clock
//! around the whole loop, ending with a synchronize) divided by its launches ((c): by its steps),
//! beside the launching thread's CPU time over the same loop. The table gives the median and p90
//! over rounds, the time added per launch against `none`, the same against the raw-CUPTI
//! reference, the whole-run slowdown, and the records dropped as the ledger trailers report them.
//! Figures that compare two configurations are also paired by round, with the median's 95 %
//! interval; a verdict is `unresolved` when that interval holds the target.
//!
//! Layout: this file (options, the GPU workloads, the configurations), `raw.rs` (the raw-CUPTI
//! reference), `table.rs` (the rounds and what they print), `sustained.rs`, `interference.rs`,
//! `scope_on.rs`, `switch_probe.rs`.
//!
//! On a machine without a GPU it exits non-zero with one line saying why.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use clap::Parser;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use cupti_sys as sys;
use gpu_ledger::analysis::stats::{
    median, median_interval, percentile_sorted, Distribution, MedianInterval,
};
use gpu_ledger::internals::thread_cpu_ns;
use gpu_ledger::internals::LoadedCupti;
use gpu_ledger::internals::{self as nvml, NvmlLibrary, NvmlSource};
use gpu_ledger::kernels::suite::SuiteError;
use gpu_ledger::kernels::VectorAdd;
use gpu_ledger::ledger::schema::Overhead;
use gpu_ledger::{Level, Profiler, ScopeGuard};

// The training loop's model (workload (c)); its graph-path workspace setter is not used here.
#[allow(dead_code)]
#[path = "../common/training_model.rs"]
mod training_model;
use training_model::Model;

mod interference;
mod laps;
mod perturbation;
mod raw;
mod scope_on;
mod sustained;
mod switch_probe;
mod table;
use interference::nvml_interference;
use raw::RawSession;
use scope_on::scope_on;
use sustained::sustained;
use table::{parse_configs, parse_workloads, table, Paired};

type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

/// The benchmark's own kernels, compiled with NVRTC for the device.
const SOURCE: &str = r#"
extern "C" __global__ void empty_kernel() {}

extern "C" __global__ void spin_kernel(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"#;

/// Launches per iteration (`profiler.step()`) in workloads (a) and (b).
const LAUNCHES_PER_ITERATION: u64 = 1000;
/// Busy-loop kernels of the realistic step, µs each.
const FORWARD_US: [u32; 8] = [10, 20, 50, 10, 100, 20, 200, 50];
/// Busy-loop kernels of the backward phase, µs each.
const BACKWARD_US: [u32; 10] = [20, 50, 100, 500, 20, 10, 100, 200, 50, 20];
/// vector_add sizes: 4 Mi floats (about 12 µs on an H200, docs/measurements.md) and 16 Mi floats
/// (four times the bytes).
const VADD_SMALL: u64 = 4 << 20;
const VADD_LARGE: u64 = 16 << 20;
/// The perturbation shapes' vector add far beyond the L2 (768 MiB in all), and the buffers' size.
const VADD_HUGE: u64 = 64 << 20;
/// The perturbation shapes' vector add that fits in the L2 (12 MiB in all).
const VADD_TINY: u64 = 1 << 20;
/// Launches per step of the kernel mix (d): 8 + 2 in forward, 10 in backward, 2 in optimizer.
const LAUNCHES_PER_STEP: u64 = (FORWARD_US.len() + 2 + BACKWARD_US.len() + 2) as u64;
/// Launches before the timed workloads of each configuration (first buffers, lazy loading).
const WARMUP_LAUNCHES: u64 = 2000;
/// How many times less often `tl-fewsteps` calls `profiler.step()`.
const FEW_STEPS: u64 = 50;
/// `tl-sampled` traces one iteration in this many.
const SAMPLE_EVERY: u64 = 100;

#[derive(Parser, Debug)]
#[command(about = "gpu-ledger's own overhead against no profiler and raw CUPTI")]
struct Args {
    /// Rounds; each runs every configuration once, in a rotated order.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Empty-kernel launches in workloads (a) and (b).
    #[arg(long, default_value_t = 100_000)]
    launches: u64,
    /// Training steps in workload (c).
    #[arg(long, default_value_t = 100)]
    train_steps: u64,
    /// Kernel-mix steps in workload (d).
    #[arg(long, default_value_t = 150)]
    steps: u64,
    /// Also run the two ablations of the timeline level (tl-noscope, tl-fewsteps).
    #[arg(long)]
    decompose: bool,
    /// Run only these configurations, comma-separated labels (none, disabled, scopes,
    /// timeline, raw-cupti, tl-noscope, tl-fewsteps, scopes-nonvtx, tl-nonvtx, tl-nvtxin, tl-sampled, tl-idle,
    /// tl-nocauses); `none`
    /// must be among them. Overrides --decompose.
    #[arg(long, value_name = "LIST")]
    configs: Option<String>,
    /// Run only these workloads, comma-separated: a, b, c, d.
    #[arg(long, value_name = "LIST", default_value = "a,b,c,d")]
    workloads: String,
    /// NVML sampling in the profiled configurations (as in a real run).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    nvml: bool,
    /// How often the profiled configurations read NVML's energy counter, ms (0: never, energy
    /// integrated from power); the default is the profiler's (500 ms).
    #[arg(long, default_value_t = 500)]
    energy_ms: u64,
    /// The profiler's `flush_interval` in ms (how often the collector calls
    /// `cuptiActivityFlushAll` while an iteration waits for its records); the default is the
    /// profiler's.
    #[arg(long, default_value_t = 1000)]
    flush_ms: u64,
    /// Keep the ledgers here instead of a temporary directory.
    #[arg(long)]
    ledger_dir: Option<PathBuf>,
    /// Instead of the table: launch at `--rate` for this many seconds at Level::Timeline and
    /// print dropped records and the resident memory once a second.
    #[arg(long, value_name = "SECS")]
    sustained: Option<u64>,
    /// Launches per second in the sustained mode.
    #[arg(long, default_value_t = 200_000)]
    rate: u64,
    /// Launching threads in the sustained mode (each on its own stream).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Instead of the table: run workloads (a), (c) and (d) without a profiler while another thread
    /// repeats one kind of NVML read back to back, for each kind the sampler makes, and print
    /// the time each call adds to the workload.
    #[arg(long)]
    nvml_interference: bool,
    /// Instead of the table: `--launches` empty launches plain, with the application's own
    /// timing-event pair around each, and in a `Profiler::scope_on` each, `--rounds` rounds:
    /// the target for a scope timed on a stream.
    #[arg(long)]
    scope_on: bool,
    /// Instead of the table: what tracing adds to the GPU's own time, by grid size and kernel
    /// length (batches queued behind a spin, timed by events) under none, raw-cupti and timeline,
    /// and on a GPU-bound pipeline against the rows' estimate (`tracing_added_ns`), `--rounds`
    /// rounds.
    #[arg(long)]
    perturbation: bool,
    /// Instead of the table: what a sampled timeline's switch is made of (each activity kind,
    /// the callbacks one by one, the callbacks by domain), `--rounds` rounds, on the raw bindings.
    #[arg(long)]
    switch_probe: bool,
    /// With the table: time each step of workload (c) and print, per step of the loop, what
    /// each configuration adds to it against `none`, paired by round (where in the loop a
    /// configuration's cost falls: at a sampled timeline's switches and traced iteration, or
    /// spread over every step).
    #[arg(long)]
    step_laps: bool,
    /// The steady state of workload (c) begins at this step of each run: the steps before it
    /// pay the profiler's start (its first scopes, the threads' first work), once a run. The
    /// sampled timeline's target is judged on the steps from here on, and the start is
    /// printed apart, in µs a run.
    #[arg(long, default_value_t = 10)]
    steady_from: usize,
    /// With `--step-laps`: also write every step's time to this CSV file (config, round,
    /// first_iteration, step, ns), for analysis beyond the printed summary.
    #[arg(long, value_name = "FILE", requires = "step_laps")]
    laps_csv: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("overhead: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<()> {
    // Bad options are reported before anything touches the GPU.
    parse_workloads(&args.workloads)?;
    if args.steady_from == 0 || args.steady_from as u64 >= args.train_steps {
        return Err(format!(
            "--steady-from {} must be at least 1 and below --train-steps ({}): the steps before \
             it are the run's start, those from it on its steady state",
            args.steady_from, args.train_steps
        )
        .into());
    }
    if let Some(list) = &args.configs {
        parse_configs(list)?;
    }
    // One clear line and a non-zero exit without a driver, GPU, CUPTI or NVRTC; cudarc would
    // panic without the driver library, so this comes first.
    Profiler::preflight(Level::Timeline)?;
    let lib = gpu_ledger::internals::cupti()?;
    if !gpu_ledger::kernels::nvrtc_present() {
        return Err(
            "libnvrtc not found: install the CUDA toolkit or the nvidia-cuda-nvrtc wheel".into(),
        );
    }
    let tmp = tempfile::tempdir()?;
    let ledger_dir = args
        .ledger_dir
        .clone()
        .unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&ledger_dir)?;
    let mut gpu = Gpu::new()?;
    match args.sustained {
        Some(secs) => sustained(&gpu, args, secs, &ledger_dir),
        None if args.nvml_interference => nvml_interference(&mut gpu, args),
        None if args.scope_on => scope_on(&gpu, args, &ledger_dir),
        None if args.perturbation => perturbation::perturbation(&mut gpu, lib, args, &ledger_dir),
        None if args.switch_probe => switch_probe::switch_probe(&gpu, lib, args),
        None => table(&mut gpu, lib, args, &ledger_dir),
    }
}

// ---------------------------------------------------------------------------------------------
// The GPU side: kernels and buffers.

/// The context, the stream every workload launches on, and the kernels.
struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    empty: CudaFunction,
    spin: CudaFunction,
    vadd: VectorAdd,
    a: CudaSlice<f32>,
    b: CudaSlice<f32>,
    c: CudaSlice<f32>,
    sms: u32,
    cycles_per_us: f64,
    name: String,
    /// The training loop's model, for workload (c).
    model: Model,
    /// With `--step-laps`: each step's host time of the last run of workload (c), ns.
    laps: Option<Vec<u64>>,
}

const ONE_THREAD: LaunchConfig = LaunchConfig {
    grid_dim: (1, 1, 1),
    block_dim: (1, 1, 1),
    shared_mem_bytes: 0,
};

impl Gpu {
    fn new() -> Result<Self> {
        let ctx = CudaContext::new(0)?;
        // SAFETY: every workload runs on one stream (or, in the sustained mode, each thread on
        // its own stream with no buffer shared), and nothing is freed before a synchronize, so
        // cudarc's per-slice events are not needed; turning them off keeps cudarc from adding
        // event records to each launch.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let (major, minor) = ctx.compute_capability()?;
        let opts = CompileOptions {
            options: vec![format!("--gpu-architecture=sm_{major}{minor}")],
            ..Default::default()
        };
        let module = ctx.load_module(compile_ptx_with_opts(SOURCE, opts)?)?;
        let sms = ctx.attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )? as u32;
        let model = Model::new(&ctx, sms, stream.clone()).map_err(|e| match e {
            SuiteError::MissingLibrary(lib) => format!(
                "{lib} not found: workload (c), the training loop's step, runs cuBLAS GEMMs; \
                 install the CUDA toolkit or the nvidia-cublas wheel"
            )
            .into(),
            e => Box::<dyn std::error::Error>::from(e),
        })?;
        let mut gpu = Gpu {
            model,
            laps: None,
            empty: module.load_function("empty_kernel")?,
            spin: module.load_function("spin_kernel")?,
            vadd: VectorAdd::new(&ctx)?,
            a: stream.alloc_zeros::<f32>(VADD_HUGE as usize)?,
            b: stream.alloc_zeros::<f32>(VADD_HUGE as usize)?,
            c: stream.alloc_zeros::<f32>(VADD_HUGE as usize)?,
            sms,
            cycles_per_us: 1000.0,
            name: ctx.name()?,
            ctx,
            stream,
        };
        gpu.calibrate()?;
        Ok(gpu)
    }

    /// SM cycles per µs, from the host time of a long busy loop (the launch latency is under
    /// 0.1 % of it).
    fn calibrate(&mut self) -> Result<()> {
        let cycles: i64 = 50_000_000;
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t0 = Instant::now();
            self.launch_spin_cycles(cycles, 1)?;
            self.stream.synchronize()?;
            best = best.min(t0.elapsed().as_secs_f64() * 1e6);
        }
        self.cycles_per_us = cycles as f64 / best;
        Ok(())
    }

    #[inline]
    fn launch_empty(&self) -> Result<()> {
        launch_empty_on(&self.stream, &self.empty)
    }

    fn launch_spin_cycles(&self, cycles: i64, grid: u32) -> Result<()> {
        let cfg = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (64, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.stream.launch_builder(&self.spin);
        launch.arg(&cycles);
        // SAFETY: spin_kernel takes one `long long`, which is what is pushed.
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }

    /// A kernel busy for about `us` µs on every SM.
    fn launch_spin(&self, us: u32) -> Result<()> {
        self.launch_spin_cycles((f64::from(us) * self.cycles_per_us) as i64, self.sms)
    }

    fn launch_vadd(&mut self, n: u64) -> Result<()> {
        self.vadd
            .launch(&self.stream, &self.a, &self.b, &mut self.c, n)?;
        Ok(())
    }
}

#[inline]
fn launch_empty_on(stream: &CudaStream, empty: &CudaFunction) -> Result<()> {
    // SAFETY: empty_kernel takes no parameters and none are pushed.
    unsafe { stream.launch_builder(empty).launch(ONE_THREAD) }?;
    Ok(())
}

/// A scope when the configuration has scopes in its code, nothing otherwise.
#[inline(always)]
fn scope<const SCOPED: bool>(name: &'static str) -> Option<ScopeGuard<'static>> {
    SCOPED.then(|| Profiler::scope(name))
}

/// Workloads (a) and (b): `n` back-to-back empty-kernel launches, one scope each when `SCOPED`;
/// `profiler.step()` every `LAUNCHES_PER_ITERATION * step_every` launches.
fn run_launches<const SCOPED: bool>(
    gpu: &Gpu,
    n: u64,
    profiler: Option<&Profiler>,
    step_every: u64,
) -> Result<Duration> {
    let t0 = Instant::now();
    for i in 0..n {
        let guard = scope::<SCOPED>("launch");
        gpu.launch_empty()?;
        drop(guard);
        if (i + 1) % (LAUNCHES_PER_ITERATION * step_every) == 0 {
            if let Some(p) = profiler {
                p.step();
            }
        }
    }
    gpu.stream.synchronize()?;
    Ok(t0.elapsed())
}

/// `steps` runs of `step` (each ending in a synchronize of its own), timed on the host clock,
/// with `profiler.step()` after every `step_every`-th: the loop of workloads (c) and (d). With
/// `laps`, each step's host time, its `profiler.step()` included, is pushed there (ns).
#[inline(always)]
fn timed_steps(
    steps: u64,
    profiler: Option<&Profiler>,
    step_every: u64,
    mut laps: Option<&mut Vec<u64>>,
    mut step: impl FnMut() -> Result<()>,
) -> Result<Duration> {
    let t0 = Instant::now();
    let mut lap0 = t0;
    for i in 0..steps {
        step()?;
        if (i + 1) % step_every == 0 {
            if let Some(p) = profiler {
                p.step();
            }
        }
        if let Some(laps) = laps.as_deref_mut() {
            let now = Instant::now();
            laps.push((now - lap0).as_nanos() as u64);
            lap0 = now;
        }
    }
    Ok(t0.elapsed())
}

/// Workload (c): `steps` training steps, each with its loss read back (a synchronize), as the
/// training loop runs them; `profiler.step()` after every `step_every`-th.
fn run_train_steps<const SCOPED: bool>(
    gpu: &mut Gpu,
    steps: u64,
    profiler: Option<&Profiler>,
    step_every: u64,
) -> Result<Duration> {
    let mut laps = gpu.laps.take();
    if let Some(l) = laps.as_mut() {
        l.clear();
    }
    let d = timed_steps(steps, profiler, step_every, laps.as_mut(), || {
        gpu.model.step(false, SCOPED)?;
        let _log = scope::<SCOPED>("log");
        gpu.model.read_loss()?;
        Ok(())
    });
    gpu.laps = laps;
    d
}

/// Workload (d): `steps` kernel-mix steps; `profiler.step()` after every `step_every`-th.
fn run_steps<const SCOPED: bool>(
    gpu: &mut Gpu,
    steps: u64,
    profiler: Option<&Profiler>,
    step_every: u64,
) -> Result<Duration> {
    timed_steps(steps, profiler, step_every, None, || {
        {
            let _step = scope::<SCOPED>("step");
            {
                let _fwd = scope::<SCOPED>("forward");
                for us in FORWARD_US {
                    gpu.launch_spin(us)?;
                }
                gpu.launch_vadd(VADD_SMALL)?;
                gpu.launch_vadd(VADD_SMALL)?;
            }
            {
                let _bwd = scope::<SCOPED>("backward");
                for us in BACKWARD_US {
                    gpu.launch_spin(us)?;
                }
            }
            {
                let _opt = scope::<SCOPED>("optimizer");
                gpu.launch_vadd(VADD_LARGE)?;
                gpu.launch_vadd(VADD_LARGE)?;
            }
            // The step's result is read on the host (a loss value): one synchronize per step.
            gpu.stream.synchronize()?;
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Configurations.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Config {
    None,
    Disabled,
    Scopes,
    Timeline,
    /// The raw-CUPTI reference.
    Raw,
    /// The timeline level, the workload code without its scope guards.
    TimelineNoScopes,
    /// The timeline level, `step()` [`FEW_STEPS`] times less often.
    TimelineFewSteps,
    /// The scopes level without the NVTX range each scope pushes.
    ScopesNoNvtx,
    /// The timeline level without the NVTX range each scope pushes.
    TimelineNoNvtx,
    /// The timeline level importing NVTX ranges as scopes.
    TimelineNvtxIn,
    /// The timeline level traced on one iteration in [`SAMPLE_EVERY`].
    TimelineSampled,
    /// The sampled timeline tracing iteration 0 alone: CUPTI attached and never switched on
    /// again, so that `tl-sampled` − `tl-idle` is what the switches and traced iterations cost.
    TimelineIdle,
    /// The timeline level with idle causes off: no clock read per traced call.
    TimelineNoCauses,
}

impl Config {
    const ALL: [Config; 13] = [
        Config::None,
        Config::Disabled,
        Config::Scopes,
        Config::Timeline,
        Config::Raw,
        Config::TimelineNoScopes,
        Config::TimelineFewSteps,
        Config::ScopesNoNvtx,
        Config::TimelineNoNvtx,
        Config::TimelineNvtxIn,
        Config::TimelineSampled,
        Config::TimelineIdle,
        Config::TimelineNoCauses,
    ];
    fn label(self) -> &'static str {
        match self {
            Config::None => "none",
            Config::Disabled => "disabled",
            Config::Scopes => "scopes",
            Config::Timeline => "timeline",
            Config::Raw => "raw-cupti",
            Config::TimelineNoScopes => "tl-noscope",
            Config::TimelineFewSteps => "tl-fewsteps",
            Config::ScopesNoNvtx => "scopes-nonvtx",
            Config::TimelineNoNvtx => "tl-nonvtx",
            Config::TimelineNvtxIn => "tl-nvtxin",
            Config::TimelineSampled => "tl-sampled",
            Config::TimelineIdle => "tl-idle",
            Config::TimelineNoCauses => "tl-nocauses",
        }
    }
    /// Whether the workload code contains its scope guards.
    fn scoped(self) -> bool {
        matches!(
            self,
            Config::Disabled
                | Config::Scopes
                | Config::Timeline
                | Config::TimelineFewSteps
                | Config::ScopesNoNvtx
                | Config::TimelineNoNvtx
                | Config::TimelineNvtxIn
                | Config::TimelineSampled
                | Config::TimelineIdle
                | Config::TimelineNoCauses
        )
    }
    /// Calls of `profiler.step()` are made every this many of the workload's iterations.
    fn step_every(self) -> u64 {
        if self == Config::TimelineFewSteps {
            FEW_STEPS
        } else {
            1
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Workload {
    Launch,
    ScopedLaunch,
    /// The training loop's step.
    Train,
    /// The kernel mix.
    Step,
}

impl Workload {
    const ALL: [Workload; 4] = [
        Workload::Launch,
        Workload::ScopedLaunch,
        Workload::Train,
        Workload::Step,
    ];
    fn label(self) -> &'static str {
        match self {
            Workload::Launch => "(a) empty launches",
            Workload::ScopedLaunch => "(b) + scope each",
            Workload::Train => "(c) training step",
            Workload::Step => "(d) kernel mix",
        }
    }
}

/// What is running for one configuration.
enum Active {
    Nothing,
    Profiler(Profiler),
    Raw(RawSession),
}

/// What one configuration's run reported about itself.
#[derive(Default, Clone)]
struct SelfReport {
    /// Records dropped (ledger trailer, or the raw reference's own count).
    dropped: u64,
    /// Kernel records seen.
    kernel_records: u64,
    /// Kernel launches made while it ran.
    launches: u64,
    /// Late and unplaced records (ledger trailer).
    late: u64,
    /// Iterations the ledger wrote (trailer).
    iterations: u64,
    /// Records of untraced iterations a sampled timeline dropped (trailer).
    untraced: u64,
    /// Buffer requests refused.
    refused: u64,
    /// The profiler's own measured cost (ledger trailer), summed over rounds.
    overhead: Option<Overhead>,
    /// Distinct trailer warnings.
    warnings: Vec<String>,
}

impl SelfReport {
    fn add(&mut self, other: SelfReport) {
        self.dropped += other.dropped;
        self.kernel_records += other.kernel_records;
        self.launches += other.launches;
        self.late += other.late;
        self.iterations += other.iterations;
        self.untraced += other.untraced;
        self.refused += other.refused;
        if let Some(o) = other.overhead {
            let s = self.overhead.get_or_insert_with(Overhead::default);
            s.cupti_overhead_ns += o.cupti_overhead_ns;
            s.buffer_callback_ns += o.buffer_callback_ns;
            s.collector_cpu_ns += o.collector_cpu_ns;
            s.writer_cpu_ns += o.writer_cpu_ns;
            s.step_ns += o.step_ns;
            s.sampling_switch_ns += o.sampling_switch_ns;
            s.sampling_switch_collector_ns += o.sampling_switch_collector_ns;
            s.buffers_used += o.buffers_used;
            s.buffer_requests_refused += o.buffer_requests_refused;
        }
        for w in other.warnings {
            if !self.warnings.contains(&w) {
                self.warnings.push(w);
            }
        }
    }
}

fn start(config: Config, lib: &'static LoadedCupti, args: &Args, ledger: &Path) -> Result<Active> {
    let level = match config {
        Config::None | Config::Disabled => return Ok(Active::Nothing),
        Config::Raw => return Ok(Active::Raw(RawSession::start(lib)?)),
        Config::Scopes | Config::ScopesNoNvtx => Level::Scopes,
        Config::Timeline
        | Config::TimelineNoScopes
        | Config::TimelineFewSteps
        | Config::TimelineNoNvtx
        | Config::TimelineNvtxIn
        | Config::TimelineSampled
        | Config::TimelineIdle
        | Config::TimelineNoCauses => Level::Timeline,
    };
    let profiler = Profiler::builder()
        .level(level)
        .nvml(args.nvml)
        .nvml_energy_period(
            (args.energy_ms > 0).then(|| std::time::Duration::from_millis(args.energy_ms)),
        )
        .flush_interval(std::time::Duration::from_millis(args.flush_ms))
        .ledger_path(ledger)
        .nvtx_emit(!matches!(
            config,
            Config::ScopesNoNvtx | Config::TimelineNoNvtx
        ))
        .idle_causes(config != Config::TimelineNoCauses);
    let profiler = match config {
        Config::TimelineNvtxIn => profiler.nvtx_import(gpu_ledger::NvtxImport::default()),
        Config::TimelineSampled => {
            profiler.sample_timeline(gpu_ledger::TimelineSampling::every(SAMPLE_EVERY))
        }
        Config::TimelineIdle => {
            profiler.sample_timeline(gpu_ledger::TimelineSampling::every(u64::MAX))
        }
        _ => profiler,
    }
    .start()?;
    Ok(Active::Profiler(profiler))
}

fn stop(active: Active, launches: u64) -> Result<SelfReport> {
    match active {
        Active::Nothing => Ok(SelfReport {
            launches,
            ..SelfReport::default()
        }),
        Active::Raw(raw) => {
            let mut r = raw.stop()?;
            r.launches = launches;
            Ok(r)
        }
        Active::Profiler(p) => {
            let t = p.finish()?.trailer;
            Ok(SelfReport {
                dropped: t.dropped_records,
                kernel_records: t.kernel_records,
                launches,
                late: t.late_records + t.unplaced_records,
                untraced: t.untraced_records,
                iterations: t.iterations,
                refused: t.overhead.buffer_requests_refused,
                overhead: Some(t.overhead.clone()),
                warnings: t.warnings.clone(),
            })
        }
    }
}
