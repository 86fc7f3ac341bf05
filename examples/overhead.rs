//! The profiler's own cost, side by side (issue 7): the same GPU workloads run interleaved in one
//! process, over several rounds, under each configuration, and the table printed last says what
//! each level adds per launch, against no profiler and against a minimal raw-CUPTI tracer.
//!
//! ```text
//! cargo run --release --example overhead                    # the table, < 60 s on an H200
//! cargo run --release --example overhead -- --decompose     # + raw-CUPTI steps in between
//! cargo run --release --example overhead -- --sustained 60  # 200 000 launches/s at Timeline
//! cargo run --release --example overhead -- --nvml-interference  # what each NVML read costs the GPU work
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
//! - with `--decompose`, the steps between the floor and the timeline level, each adding to the
//!   one before: `raw+api` (the driver/runtime API records gpu-ledger enables, with the same
//!   functions switched off), `raw+api+cb` (a subscriber callback on the counted launch, copy and
//!   memset functions, as gpu-ledger's launch counter) and `raw+all` (every other activity kind
//!   the timeline level enables). `raw+all` is the timeline level's whole CUPTI configuration
//!   with trivial consumers, so `timeline` minus `raw+all` is gpu-ledger's own share (decoding,
//!   attribution, scopes' external-correlation push/pop, `step()`, NVML sampling, the ledger);
//!   and two ablations of the timeline level that split that share: `tl-noscope` (the workload
//!   code without its scope guards: what the scopes cost at the timeline level) and `tl-fewsteps`
//!   (`profiler.step()` [`FEW_STEPS`] times less often: what `step()` costs on the critical path
//!   between a step's synchronize and the next step's first launch).
//!
//! Workloads: (a) back-to-back launches of an empty kernel; (b) the same with one
//! `Profiler::scope` per launch (configurations without scopes run it without them); (c) the
//! realistic step the issue names, the training loop's (`examples/common/training_model.rs`:
//! cuBLAS GEMMs, fused softmax and attention, reductions, vector adds, device copies, in
//! `forward`/`backward`/`optimizer` scopes, then the loss read back in `log`); (d) a kernel mix:
//! 22 kernels of 10 to 500 µs (a busy loop on `clock64` and the bundled vector_add) in
//! `step/{forward,backward,optimizer}` scopes and a synchronize per step, the issue's fallback
//! workload and the harder case (shorter kernels, so CUPTI's per-kernel cost is a larger share).
//! Under `scopes` and `timeline`, `profiler.step()` ends an iteration every 1000 launches in (a)
//! and (b) and after every step in (c) and (d).
//!
//! Each round runs every configuration once (start, a short warm-up, the three workloads, finish)
//! in an order rotated per round; each workload's figure for the round is its loop time (host
//! clock around the whole loop, ending with a synchronize) divided by its launches. The table
//! gives the median and p90 over rounds, the time added per launch against `none`, the same
//! against the raw-CUPTI reference, the whole-run slowdown, and the records dropped as the ledger
//! trailers report them.
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
use gpu_ledger::analysis::{median, percentile_sorted, Distribution};
use gpu_ledger::kernels::suite::SuiteError;
use gpu_ledger::kernels::VectorAdd;
use gpu_ledger::ledger::schema::Overhead;
use gpu_ledger::loader::LoadedCupti;
use gpu_ledger::nvml::{self, NvmlLibrary, NvmlSource};
use gpu_ledger::util::thread_cpu_ns;
use gpu_ledger::{Level, Profiler, ScopeGuard};

// The training loop's model (workload (c)); its graph-path workspace setter is not used here.
#[allow(dead_code)]
#[path = "common/training_model.rs"]
mod training_model;
use training_model::Model;

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
/// vector_add sizes: 4 Mi floats (about 12 µs on an H200) and 16 Mi floats (about 45 µs).
const VADD_SMALL: u64 = 4 << 20;
const VADD_LARGE: u64 = 16 << 20;
/// Launches per step of the kernel mix (d): 8 + 2 in forward, 10 in backward, 2 in optimizer.
const LAUNCHES_PER_STEP: u64 = (FORWARD_US.len() + 2 + BACKWARD_US.len() + 2) as u64;
/// Launches before the timed workloads of each configuration (first buffers, lazy loading).
const WARMUP_LAUNCHES: u64 = 2000;
/// How many times less often `tl-fewsteps` calls `profiler.step()`.
const FEW_STEPS: u64 = 50;

#[derive(Parser, Debug)]
#[command(about = "gpu-ledger's own overhead against no profiler and raw CUPTI (issue 7)")]
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
    /// Also run the raw-CUPTI steps between the floor and the timeline level.
    #[arg(long)]
    decompose: bool,
    /// Run only these configurations, comma-separated labels (none, disabled, scopes,
    /// timeline, raw-cupti, raw+api, raw+api+cb, raw+all, tl-noscope, tl-fewsteps); `none`
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
    if let Some(list) = &args.configs {
        parse_configs(list)?;
    }
    // One clear line and a non-zero exit without a driver, GPU, CUPTI or NVRTC; cudarc would
    // panic without the driver library, so this comes first.
    gpu_ledger::device::require_driver()?;
    let lib = gpu_ledger::loader::cupti()?;
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
            empty: module.load_function("empty_kernel")?,
            spin: module.load_function("spin_kernel")?,
            vadd: VectorAdd::new(&ctx)?,
            a: stream.alloc_zeros::<f32>(VADD_LARGE as usize)?,
            b: stream.alloc_zeros::<f32>(VADD_LARGE as usize)?,
            c: stream.alloc_zeros::<f32>(VADD_LARGE as usize)?,
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
fn scope<const SCOPED: bool>(name: &'static str) -> Option<ScopeGuard> {
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

/// Workload (c): `steps` training steps, each with its loss read back (a synchronize), as the
/// training loop runs them; `profiler.step()` after every `step_every`-th.
fn run_train_steps<const SCOPED: bool>(
    gpu: &mut Gpu,
    steps: u64,
    profiler: Option<&Profiler>,
    step_every: u64,
) -> Result<Duration> {
    let t0 = Instant::now();
    for i in 0..steps {
        gpu.model.step(false, SCOPED)?;
        {
            let _log = scope::<SCOPED>("log");
            gpu.model.read_loss()?;
        }
        if (i + 1) % step_every == 0 {
            if let Some(p) = profiler {
                p.step();
            }
        }
    }
    Ok(t0.elapsed())
}

/// Workload (d): `steps` kernel-mix steps; `profiler.step()` after every `step_every`-th.
fn run_steps<const SCOPED: bool>(
    gpu: &mut Gpu,
    steps: u64,
    profiler: Option<&Profiler>,
    step_every: u64,
) -> Result<Duration> {
    let t0 = Instant::now();
    for i in 0..steps {
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
        if (i + 1) % step_every == 0 {
            if let Some(p) = profiler {
                p.step();
            }
        }
    }
    Ok(t0.elapsed())
}

// ---------------------------------------------------------------------------------------------
// Configurations.

/// How much of CUPTI the raw reference turns on; each mode adds to the one before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum RawMode {
    /// CONCURRENT_KERNEL records only: the floor.
    Kernel,
    /// Plus the driver/runtime API records gpu-ledger keeps.
    KernelApi,
    /// Plus a subscriber callback on the counted functions.
    KernelApiCallback,
    /// Plus every other activity kind the timeline level enables.
    All,
}

impl RawMode {
    /// The activity kinds this mode enables. `All` mirrors gpu-ledger's timeline kinds
    /// (`KINDS` in src/activity/mod.rs) plus the API kinds.
    fn kinds(self) -> Vec<sys::CUpti_ActivityKind::Type> {
        use sys::CUpti_ActivityKind as k;
        let mut kinds = vec![k::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL];
        if self >= RawMode::KernelApi {
            kinds.extend([
                k::CUPTI_ACTIVITY_KIND_DRIVER,
                k::CUPTI_ACTIVITY_KIND_RUNTIME,
            ]);
        }
        if self >= RawMode::All {
            kinds.extend([
                k::CUPTI_ACTIVITY_KIND_MEMCPY,
                k::CUPTI_ACTIVITY_KIND_MEMCPY2,
                k::CUPTI_ACTIVITY_KIND_MEMSET,
                k::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
                k::CUPTI_ACTIVITY_KIND_MEMORY2,
                k::CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                k::CUPTI_ACTIVITY_KIND_OVERHEAD,
            ]);
        }
        kinds
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Config {
    None,
    Disabled,
    Scopes,
    Timeline,
    Raw(RawMode),
    /// The timeline level, the workload code without its scope guards.
    TimelineNoScopes,
    /// The timeline level, `step()` [`FEW_STEPS`] times less often.
    TimelineFewSteps,
}

impl Config {
    const ALL: [Config; 10] = [
        Config::None,
        Config::Disabled,
        Config::Scopes,
        Config::Timeline,
        Config::Raw(RawMode::Kernel),
        Config::Raw(RawMode::KernelApi),
        Config::Raw(RawMode::KernelApiCallback),
        Config::Raw(RawMode::All),
        Config::TimelineNoScopes,
        Config::TimelineFewSteps,
    ];
    fn label(self) -> &'static str {
        match self {
            Config::None => "none",
            Config::Disabled => "disabled",
            Config::Scopes => "scopes",
            Config::Timeline => "timeline",
            Config::Raw(RawMode::Kernel) => "raw-cupti",
            Config::Raw(RawMode::KernelApi) => "raw+api",
            Config::Raw(RawMode::KernelApiCallback) => "raw+api+cb",
            Config::Raw(RawMode::All) => "raw+all",
            Config::TimelineNoScopes => "tl-noscope",
            Config::TimelineFewSteps => "tl-fewsteps",
        }
    }
    /// Whether the workload code contains its scope guards.
    fn scoped(self) -> bool {
        matches!(
            self,
            Config::Disabled | Config::Scopes | Config::Timeline | Config::TimelineFewSteps
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
        self.refused += other.refused;
        if let Some(o) = other.overhead {
            let s = self.overhead.get_or_insert_with(Overhead::default);
            s.cupti_overhead_ns += o.cupti_overhead_ns;
            s.buffer_callback_ns += o.buffer_callback_ns;
            s.collector_cpu_ns += o.collector_cpu_ns;
            s.writer_cpu_ns += o.writer_cpu_ns;
            s.step_ns += o.step_ns;
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
        Config::Raw(mode) => return Ok(Active::Raw(RawSession::start(lib, mode)?)),
        Config::Scopes => Level::Scopes,
        Config::Timeline | Config::TimelineNoScopes | Config::TimelineFewSteps => Level::Timeline,
    };
    let profiler = Profiler::builder()
        .level(level)
        .nvml(args.nvml)
        .nvml_energy_period(
            (args.energy_ms > 0).then(|| std::time::Duration::from_millis(args.energy_ms)),
        )
        .flush_interval(std::time::Duration::from_millis(args.flush_ms))
        .ledger_path(ledger)
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
                refused: t.overhead.buffer_requests_refused,
                overhead: Some(t.overhead.clone()),
                warnings: t.warnings.clone(),
            })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The raw-CUPTI reference: the least a CUPTI kernel tracer can do.

/// The reference's buffers and counters. The buffers are allocated once and never freed, so a
/// buffer CUPTI still held could never be written after release.
struct RawPool {
    free: crossbeam_queue::ArrayQueue<usize>,
    buffer_bytes: usize,
    buffers: usize,
    kernels: AtomicU64,
    dropped: AtomicU64,
    refused: AtomicU64,
}

/// Buffers of the raw pool: as many and as large as gpu-ledger's defaults (8 × 4 MiB).
const RAW_BUFFERS: usize = 8;
const RAW_BUFFER_BYTES: usize = 4 << 20;

static RAW_POOL: OnceLock<RawPool> = OnceLock::new();
static RAW_LIB: OnceLock<&'static LoadedCupti> = OnceLock::new();
/// Calls seen by the reference's subscriber callback.
static RAW_API_CALLS: AtomicU64 = AtomicU64::new(0);

fn raw_pool() -> &'static RawPool {
    RAW_POOL.get_or_init(|| {
        let free = crossbeam_queue::ArrayQueue::new(RAW_BUFFERS);
        for _ in 0..RAW_BUFFERS {
            let buf: &'static mut [u64] =
                Box::leak(vec![0u64; RAW_BUFFER_BYTES / 8].into_boxed_slice());
            let _ = free.push(buf.as_mut_ptr() as usize);
        }
        RawPool {
            free,
            buffer_bytes: RAW_BUFFER_BYTES,
            buffers: RAW_BUFFERS,
            kernels: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    })
}

/// CUPTI asks for a buffer: one from the pool, or none (CUPTI then drops and counts records).
unsafe extern "C" fn raw_buffer_requested(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
) {
    let _ = std::panic::catch_unwind(|| {
        let pool = RAW_POOL.get();
        let taken = pool.and_then(|p| p.free.pop().map(|b| (p, b)));
        // SAFETY: CUPTI passes valid out-pointers.
        unsafe {
            *max_records = 0;
            match taken {
                Some((p, b)) => {
                    *buffer = b as *mut u8;
                    *size = p.buffer_bytes;
                }
                None => {
                    *buffer = std::ptr::null_mut();
                    *size = 0;
                    if let Some(p) = pool {
                        p.refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    });
}

/// CUPTI hands back a filled buffer: count its records and return it to the pool.
unsafe extern "C" fn raw_buffer_completed(
    ctx: sys::CUcontext,
    stream_id: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    let _ = std::panic::catch_unwind(|| {
        let (Some(pool), Some(lib)) = (RAW_POOL.get(), RAW_LIB.get()) else {
            return;
        };
        if buffer.is_null() {
            return;
        }
        let mut rec: *mut sys::CUpti_Activity = std::ptr::null_mut();
        let mut kernels = 0u64;
        loop {
            // SAFETY: `buffer` and `valid` are CUPTI's own for this completion; `rec` walks it
            // from null as documented.
            let rc = unsafe { lib.api.cuptiActivityGetNextRecord(buffer, valid, &mut rec) };
            if rc != sys::CUptiResult::CUPTI_SUCCESS {
                break;
            }
            // SAFETY: every record starts with its kind.
            let kind = unsafe { (*rec).kind };
            kernels +=
                u64::from(kind == sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        }
        pool.kernels.fetch_add(kernels, Ordering::Relaxed);
        let mut dropped = 0usize;
        // SAFETY: `ctx` and `stream_id` are the ones CUPTI passed to this callback.
        let rc = unsafe {
            lib.api
                .cuptiActivityGetNumDroppedRecords(ctx, stream_id, &mut dropped)
        };
        if rc == sys::CUptiResult::CUPTI_SUCCESS {
            pool.dropped.fetch_add(dropped as u64, Ordering::Relaxed);
        }
        let _ = pool.free.push(buffer as usize);
    });
}

/// The reference's subscriber callback: one relaxed add on entry, as gpu-ledger's counter.
unsafe extern "C" fn raw_api_callback(
    _userdata: *mut std::os::raw::c_void,
    _domain: sys::CUpti_CallbackDomain::Type,
    _cbid: sys::CUpti_CallbackId,
    cbdata: *const std::os::raw::c_void,
) {
    if cbdata.is_null() {
        return;
    }
    // SAFETY: for the driver and runtime API domains, the only ones enabled, CUPTI passes a
    // CUpti_CallbackData.
    let data = unsafe { &*(cbdata as *const sys::CUpti_CallbackData) };
    if data.callbackSite == sys::CUpti_ApiCallbackSite::CUPTI_API_ENTER {
        RAW_API_CALLS.fetch_add(1, Ordering::Relaxed);
    }
}

/// A running raw-CUPTI reference. Only one CUPTI client runs at a time: it is stopped (disabled
/// and fully flushed) before any gpu-ledger timeline profiler starts, and started only after one
/// has finished.
struct RawSession {
    lib: &'static LoadedCupti,
    mode: RawMode,
    subscriber: Option<sys::CUpti_SubscriberHandle>,
    /// Counter values at start: kernel records, dropped records, refused requests.
    start: (u64, u64, u64),
    /// Set once torn down.
    stopped: bool,
}

fn cupti_ok(lib: &LoadedCupti, call: &'static str, code: sys::CUptiResult::Type) -> Result<()> {
    Ok(gpu_ledger::cupti::check(lib, call, code)?)
}

/// The driver and runtime functions gpu-ledger does not keep API records for.
fn unneeded_api_functions() -> impl Iterator<Item = (bool, u32)> {
    let driver = sys::DRIVER_API_CBIDS.iter().map(|(id, n)| (false, *id, *n));
    let runtime = sys::RUNTIME_API_CBIDS.iter().map(|(id, n)| (true, *id, *n));
    driver
        .chain(runtime)
        .filter(|(_, _, n)| gpu_ledger::activity::classify_api(n).is_none())
        .map(|(rt, id, _)| (rt, id))
}

impl RawSession {
    fn start(lib: &'static LoadedCupti, mode: RawMode) -> Result<Self> {
        let _ = RAW_LIB.set(lib);
        let pool = raw_pool();
        let start = (
            pool.kernels.load(Ordering::Relaxed),
            pool.dropped.load(Ordering::Relaxed),
            pool.refused.load(Ordering::Relaxed),
        );
        // SAFETY: both callbacks are plain `extern "C"` functions that never unwind (they catch
        // panics) and live for the whole process; the buffers they hand out are never freed.
        let rc = unsafe {
            lib.api.cuptiActivityRegisterCallbacks(
                Some(raw_buffer_requested),
                Some(raw_buffer_completed),
            )
        };
        cupti_ok(lib, "cuptiActivityRegisterCallbacks", rc)?;
        let mut session = RawSession {
            lib,
            mode,
            subscriber: None,
            start,
            stopped: false,
        };
        for kind in mode.kinds() {
            // SAFETY: plain enum argument.
            let rc = unsafe { lib.api.cuptiActivityEnable(kind) };
            cupti_ok(lib, "cuptiActivityEnable", rc)?;
        }
        if mode >= RawMode::KernelApi {
            for (runtime, cbid) in unneeded_api_functions() {
                // SAFETY: plain integer arguments.
                let rc = unsafe {
                    if runtime {
                        lib.api.cuptiActivityEnableRuntimeApi(cbid, 0)
                    } else {
                        lib.api.cuptiActivityEnableDriverApi(cbid, 0)
                    }
                };
                cupti_ok(lib, "cuptiActivityEnable{Driver,Runtime}Api", rc)?;
            }
        }
        if mode >= RawMode::KernelApiCallback {
            let mut handle: sys::CUpti_SubscriberHandle = std::ptr::null_mut();
            // SAFETY: out-pointer valid; the callback never unwinds and uses no user data.
            let rc = unsafe {
                lib.api
                    .cuptiSubscribe(&mut handle, Some(raw_api_callback), std::ptr::null_mut())
            };
            cupti_ok(lib, "cuptiSubscribe", rc)?;
            session.subscriber = Some(handle);
            use sys::CUpti_CallbackDomain as d;
            for (domain, table) in [
                (d::CUPTI_CB_DOMAIN_DRIVER_API, sys::DRIVER_API_CBIDS),
                (d::CUPTI_CB_DOMAIN_RUNTIME_API, sys::RUNTIME_API_CBIDS),
            ] {
                for (cbid, name) in table {
                    if gpu_ledger::activity::is_counted(gpu_ledger::activity::classify_api(name)) {
                        // SAFETY: the handle came from cuptiSubscribe and is subscribed.
                        let rc = unsafe { lib.api.cuptiEnableCallback(1, handle, domain, *cbid) };
                        cupti_ok(lib, "cuptiEnableCallback", rc)?;
                    }
                }
            }
        }
        Ok(session)
    }

    /// Disables everything, flushes every buffer back (forced) and releases the subscriber.
    fn stop(mut self) -> Result<SelfReport> {
        let first_err = self.teardown();
        let pool = raw_pool();
        let report = SelfReport {
            kernel_records: pool.kernels.load(Ordering::Relaxed) - self.start.0,
            dropped: pool.dropped.load(Ordering::Relaxed) - self.start.1,
            refused: pool.refused.load(Ordering::Relaxed) - self.start.2,
            warnings: if pool.free.len() == pool.buffers {
                Vec::new()
            } else {
                vec![format!(
                    "{} raw buffers still held by CUPTI after the forced flush",
                    pool.buffers - pool.free.len()
                )]
            },
            ..SelfReport::default()
        };
        first_err.map(|()| report)
    }

    fn teardown(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.stopped, true) {
            return Ok(());
        }
        let lib = self.lib;
        let mut first: Result<()> = Ok(());
        for kind in self.mode.kinds() {
            // SAFETY: plain enum argument.
            let rc = unsafe { lib.api.cuptiActivityDisable(kind) };
            if let Err(e) = cupti_ok(lib, "cuptiActivityDisable", rc) {
                first = first.and(Err(e));
            }
        }
        // SAFETY: plain flag argument; CUPTI calls the completion callback from inside.
        let rc = unsafe {
            lib.api
                .cuptiActivityFlushAll(sys::CUpti_ActivityFlag::CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)
        };
        if let Err(e) = cupti_ok(lib, "cuptiActivityFlushAll", rc) {
            first = first.and(Err(e));
        }
        if let Some(handle) = self.subscriber.take() {
            // SAFETY: the handle came from cuptiSubscribe and is released once.
            let rc = unsafe { lib.api.cuptiUnsubscribe(handle) };
            if let Err(e) = cupti_ok(lib, "cuptiUnsubscribe", rc) {
                first = first.and(Err(e));
            }
        }
        first
    }
}

impl Drop for RawSession {
    fn drop(&mut self) {
        // After `stop` there is nothing left to do; on an early return this releases CUPTI.
        let _ = self.teardown();
    }
}

// ---------------------------------------------------------------------------------------------
// The table.

/// Per-round figures of one (workload, configuration).
#[derive(Default)]
struct Series {
    /// µs per launch ((c): per step), one value per round.
    per_unit_us: Vec<f64>,
    /// The launching thread's CPU time over the loop, µs per launch ((c): per step): the
    /// launch path's own cost without the time the thread was off the CPU (preempted,
    /// migrated, or asleep in a synchronize).
    cpu_per_unit_us: Vec<f64>,
    /// Whole loop, s, one value per round.
    total_s: Vec<f64>,
}

/// The `q`-quantile of `v` in any order (NaN when empty), by the analysis module's rule.
fn percentile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    percentile_sorted(&s, q).unwrap_or(f64::NAN)
}

/// What the table's per-unit figures divide by: launches, except for (c), whose unit is the
/// step (cuBLAS decides its own launches).
fn units_of(w: Workload, args: &Args) -> u64 {
    match w {
        Workload::Train => args.train_steps,
        _ => launches_of(w, args, 0),
    }
}

/// Kernel launches the workload makes, with `train_kernels` per training step.
fn launches_of(w: Workload, args: &Args, train_kernels: u64) -> u64 {
    match w {
        Workload::Launch | Workload::ScopedLaunch => args.launches,
        Workload::Train => args.train_steps * train_kernels,
        Workload::Step => args.steps * LAUNCHES_PER_STEP,
    }
}

/// Kernels one training step launches, counted by the raw-CUPTI reference over one step.
fn kernels_per_train_step(gpu: &mut Gpu, lib: &'static LoadedCupti) -> Result<u64> {
    let raw = RawSession::start(lib, RawMode::Kernel)?;
    run_train_steps::<false>(gpu, 1, None, 1)?;
    Ok(raw.stop()?.kernel_records)
}

fn run_workload(
    gpu: &mut Gpu,
    w: Workload,
    config: Config,
    args: &Args,
    profiler: Option<&Profiler>,
) -> Result<Duration> {
    let every = config.step_every();
    match (w, config.scoped()) {
        (Workload::Launch, _) => run_launches::<false>(gpu, args.launches, profiler, every),
        (Workload::ScopedLaunch, false) => {
            run_launches::<false>(gpu, args.launches, profiler, every)
        }
        (Workload::ScopedLaunch, true) => run_launches::<true>(gpu, args.launches, profiler, every),
        (Workload::Train, false) => {
            run_train_steps::<false>(gpu, args.train_steps, profiler, every)
        }
        (Workload::Train, true) => run_train_steps::<true>(gpu, args.train_steps, profiler, every),
        (Workload::Step, false) => run_steps::<false>(gpu, args.steps, profiler, every),
        (Workload::Step, true) => run_steps::<true>(gpu, args.steps, profiler, every),
    }
}

fn table(gpu: &mut Gpu, lib: &'static LoadedCupti, args: &Args, dir: &Path) -> Result<()> {
    let wall = Instant::now();
    let mut configs = vec![
        Config::None,
        Config::Disabled,
        Config::Scopes,
        Config::Timeline,
        Config::Raw(RawMode::Kernel),
    ];
    if let Some(list) = &args.configs {
        configs = parse_configs(list)?;
    } else if args.decompose {
        configs.push(Config::Raw(RawMode::KernelApi));
        configs.push(Config::Raw(RawMode::KernelApiCallback));
        configs.push(Config::Raw(RawMode::All));
        configs.push(Config::TimelineNoScopes);
        configs.push(Config::TimelineFewSteps);
    }
    eprintln!(
        "overhead: {} ({} SMs, {:.0} MHz SM clock by calibration); {} rounds of {} configurations",
        gpu.name,
        gpu.sms,
        gpu.cycles_per_us,
        args.rounds,
        configs.len()
    );
    let mut series: Vec<Vec<Series>> = Workload::ALL
        .iter()
        .map(|_| configs.iter().map(|_| Series::default()).collect())
        .collect();
    let mut reports: Vec<SelfReport> = configs.iter().map(|_| SelfReport::default()).collect();
    let workloads = parse_workloads(&args.workloads)?;
    let train_kernels = kernels_per_train_step(gpu, lib)?;
    eprintln!("overhead: the training step (c) launches {train_kernels} kernels");
    // Warm-up round, not counted: module loading, CUPTI's first start, NVML's first init.
    for (ci, &config) in configs.iter().enumerate() {
        let active = start(config, lib, args, &dir.join(format!("warmup-{ci}.jsonl")))?;
        let p = match &active {
            Active::Profiler(p) => Some(p),
            _ => None,
        };
        run_launches::<false>(gpu, WARMUP_LAUNCHES, p, 1)?;
        run_train_steps::<false>(gpu, 2, p, 1)?;
        run_steps::<false>(gpu, 2, p, 1)?;
        stop(active, 0)?;
    }
    for round in 0..args.rounds {
        let t_round = Instant::now();
        for k in 0..configs.len() {
            let ci = (k + round) % configs.len();
            let config = configs[ci];
            let ledger = dir.join(format!("{}-round{round}.jsonl", config.label()));
            let active = start(config, lib, args, &ledger)?;
            let profiler = match &active {
                Active::Profiler(p) => Some(p),
                _ => None,
            };
            run_launches::<false>(gpu, WARMUP_LAUNCHES, profiler, 1)?;
            let mut launches = WARMUP_LAUNCHES;
            for j in 0..workloads.len() {
                let wi = workloads[(j + round) % workloads.len()];
                let w = Workload::ALL[wi];
                let cpu0 = thread_cpu_ns();
                let d = run_workload(gpu, w, config, args, profiler)?;
                let cpu_us = thread_cpu_ns().saturating_sub(cpu0) as f64 / 1e3;
                launches += launches_of(w, args, train_kernels);
                let s = &mut series[wi][ci];
                s.per_unit_us
                    .push(d.as_secs_f64() * 1e6 / units_of(w, args) as f64);
                s.cpu_per_unit_us.push(cpu_us / units_of(w, args) as f64);
                s.total_s.push(d.as_secs_f64());
            }
            reports[ci].add(stop(active, launches)?);
        }
        eprintln!(
            "overhead: round {}/{} done in {:.1} s",
            round + 1,
            args.rounds,
            t_round.elapsed().as_secs_f64()
        );
    }
    print_self_reports(&configs, &reports);
    print_targets(&configs, &series, &reports);
    print_table(&configs, &series, &reports, args);
    println!(
        "{} on {}; {} rounds; whole run {:.1} s",
        &if args.nvml {
            format!(
                "NVML on (energy counter every {} ms, 0: never)",
                args.energy_ms
            )
        } else {
            "NVML off".to_string()
        },
        gpu.name,
        args.rounds,
        wall.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `--configs`: the labels, in order; `none` is required (every figure is against it).
fn parse_configs(list: &str) -> Result<Vec<Config>> {
    let mut out = Vec::new();
    for label in list.split(',').map(str::trim).filter(|l| !l.is_empty()) {
        let c = Config::ALL
            .into_iter()
            .find(|c| c.label() == label)
            .ok_or_else(|| {
                let known: Vec<_> = Config::ALL.iter().map(|c| c.label()).collect();
                format!(
                    "--configs: unknown configuration '{label}' (known: {})",
                    known.join(", ")
                )
            })?;
        if !out.contains(&c) {
            out.push(c);
        }
    }
    if !out.contains(&Config::None) {
        return Err("--configs must include 'none': every figure is measured against it".into());
    }
    Ok(out)
}

/// `--workloads`: indices into [`Workload::ALL`].
fn parse_workloads(list: &str) -> Result<Vec<usize>> {
    let mut out = Vec::new();
    for w in list.split(',').map(str::trim).filter(|l| !l.is_empty()) {
        let i = match w {
            "a" => 0,
            "b" => 1,
            "c" => 2,
            "d" => 3,
            _ => return Err(format!("--workloads: unknown workload '{w}' (a, b, c, d)").into()),
        };
        if !out.contains(&i) {
            out.push(i);
        }
    }
    if out.is_empty() {
        return Err("--workloads: name at least one of a, b, c, d".into());
    }
    Ok(out)
}

fn idx(configs: &[Config], c: Config) -> Option<usize> {
    configs.iter().position(|x| *x == c)
}

fn print_self_reports(configs: &[Config], reports: &[SelfReport]) {
    println!("\nself-reported overhead (ledger trailers, summed over rounds; ns per launch made while running)");
    println!(
        "{:<12} {:>10} {:>14} {:>12} {:>12} {:>12} {:>10} {:>10} {:>9} {:>8}",
        "config",
        "launches",
        "kernel recs",
        "cupti ovh",
        "buffer cb",
        "collector",
        "writer",
        "step()",
        "dropped",
        "late"
    );
    for (c, r) in configs.iter().zip(reports) {
        let per = |ns: u64| ns as f64 / r.launches.max(1) as f64;
        match &r.overhead {
            Some(o) => println!(
                "{:<12} {:>10} {:>14} {:>9.1} ns {:>9.1} ns {:>9.1} ns {:>7.1} ns {:>7.1} ns {:>9} {:>8}",
                c.label(),
                r.launches,
                r.kernel_records,
                per(o.cupti_overhead_ns),
                per(o.buffer_callback_ns),
                per(o.collector_cpu_ns),
                per(o.writer_cpu_ns),
                per(o.step_ns),
                r.dropped,
                r.late
            ),
            None if matches!(c, Config::Raw(_)) => println!(
                "{:<12} {:>10} {:>14} {:>12} {:>12} {:>12} {:>10} {:>10} {:>9} {:>8}",
                c.label(),
                r.launches,
                r.kernel_records,
                "-",
                "-",
                "-",
                "-",
                "-",
                r.dropped,
                "-"
            ),
            None => {}
        }
        for w in &r.warnings {
            println!("    {}: {w}", c.label());
        }
    }
}

/// Median µs per launch of (workload, config), if it ran.
fn median_of(series: &[Vec<Series>], configs: &[Config], w: Workload, c: Config) -> Option<f64> {
    let wi = Workload::ALL.iter().position(|x| *x == w)?;
    let ci = idx(configs, c)?;
    median(&series[wi][ci].per_unit_us)
}

/// `combine(a's µs per launch, b's)` in each round (workload `w`): both ran in the same round,
/// close in time, so a drift of the machine between rounds cancels. A workload has the same
/// launch count in every configuration, so a ratio of loop times is the ratio of these.
/// Median, smallest and largest over the rounds.
fn paired(
    series: &[Vec<Series>],
    configs: &[Config],
    w: Workload,
    pair: (Config, Config),
    combine: fn(f64, f64) -> f64,
) -> Option<(f64, f64, f64)> {
    paired_by(series, configs, w, pair, combine, |s| &s.per_unit_us)
}

/// [`paired`] over another of the series' figures.
fn paired_by(
    series: &[Vec<Series>],
    configs: &[Config],
    w: Workload,
    (a, b): (Config, Config),
    combine: fn(f64, f64) -> f64,
    field: fn(&Series) -> &Vec<f64>,
) -> Option<(f64, f64, f64)> {
    let wi = Workload::ALL.iter().position(|x| *x == w)?;
    let (sa, sb) = (
        field(&series[wi][idx(configs, a)?]),
        field(&series[wi][idx(configs, b)?]),
    );
    let d: Vec<f64> = sa.iter().zip(sb).map(|(x, y)| combine(*x, *y)).collect();
    let d = Distribution::from_samples(&d)?;
    Some((d.median, d.min, d.max))
}

/// For [`paired`]: the difference of two values, and the slowdown of one over another, %.
fn difference(x: f64, y: f64) -> f64 {
    x - y
}
fn slowdown_pct(x: f64, y: f64) -> f64 {
    100.0 * (x / y - 1.0)
}

fn print_targets(configs: &[Config], series: &[Vec<Series>], reports: &[SelfReport]) {
    // Each line is printed when the run has what it compares (see --configs, --workloads).
    let m = |w, c| median_of(series, configs, w, c);
    let added = |w, c| Some(m(w, c)? - m(w, Config::None)?);
    let slow = |w, c| Some(m(w, c)? / m(w, Config::None)? - 1.0);
    let ok = |pass: bool| if pass { "ok" } else { "MISSED" };
    let raw = Config::Raw(RawMode::Kernel);
    println!("\ntargets (issue 7), from the medians below");
    if let (Some(tl), Some(r)) = (
        added(Workload::Launch, Config::Timeline),
        added(Workload::Launch, raw),
    ) {
        println!(
            "  timeline, (a): added {tl:.3} µs/launch vs raw-CUPTI's {r:.3} + 0.2 µs: {}",
            ok(tl <= r + 0.2)
        );
    }
    for c in [Config::Raw(RawMode::All), Config::Timeline] {
        if let Some((d, lo, hi)) = paired(series, configs, Workload::Launch, (c, raw), difference) {
            println!(
                "  {}, (a), paired by round: {} - raw-CUPTI {d:+.3} µs/launch (rounds {lo:+.3} to \
                 {hi:+.3}){}",
                c.label(),
                c.label(),
                if c == Config::Timeline {
                    format!("; target ≤ +0.2: {}", ok(d <= 0.2))
                } else {
                    String::new()
                }
            );
        }
    }
    if let Some((d, lo, hi)) = paired(
        series,
        configs,
        Workload::Launch,
        (Config::Timeline, Config::Raw(RawMode::All)),
        difference,
    ) {
        println!(
            "  timeline, (a), paired by round: timeline - raw+all (gpu-ledger's own share) \
             {d:+.3} µs/launch (rounds {lo:+.3} to {hi:+.3})"
        );
    }
    // The same pairs on the launching thread's CPU time: what the launch path itself costs,
    // without the rounds' scheduling noise (a thread off the CPU adds wall time, not CPU time).
    for c in [Config::Raw(RawMode::All), Config::Timeline] {
        if let Some((d, lo, hi)) = paired_by(
            series,
            configs,
            Workload::Launch,
            (c, raw),
            difference,
            |s| &s.cpu_per_unit_us,
        ) {
            println!(
                "  {}, (a), paired by round, launching thread's CPU time: {} - raw-CUPTI \
                 {d:+.3} µs/launch (rounds {lo:+.3} to {hi:+.3})",
                c.label(),
                c.label()
            );
        }
    }
    if let Some(tl) = slow(Workload::Train, Config::Timeline) {
        println!(
            "  timeline, (c) training step: whole-run slowdown {:+.2} % (target ≤ 1 %): {}",
            100.0 * tl,
            ok(tl <= 0.01)
        );
    }
    if let Some(tl) = slow(Workload::Step, Config::Timeline) {
        println!(
            "  timeline, (d) kernel mix (the issue's fallback step, not its target): slowdown \
             {:+.2} %",
            100.0 * tl
        );
    }
    for w in [Workload::Train, Workload::Step] {
        for c in [Config::Timeline, raw] {
            if let Some((d, lo, hi)) = paired(series, configs, w, (c, Config::None), slowdown_pct) {
                println!(
                    "  {}, {}, paired by round: slowdown {d:+.2} % (rounds {lo:+.2} to {hi:+.2} %)",
                    c.label(),
                    w.label()
                );
            }
        }
    }
    if let Some(i) = idx(configs, Config::Timeline) {
        let dropped = reports[i].dropped;
        println!(
            "  timeline: {dropped} dropped records (target 0): {}",
            ok(dropped == 0)
        );
    }
    if let Some(a) = added(Workload::Launch, Config::Scopes) {
        println!(
            "  scopes, (a): added {a:.3} µs per launch with no scope (target: nothing): {}",
            ok(a <= 0.05)
        );
    }
    if let Some(b) = added(Workload::ScopedLaunch, Config::Scopes) {
        println!(
            "  scopes, (b): added {:.0} ns per scope, host time only (target ≤ 100 ns): {}",
            b * 1e3,
            ok(b <= 0.1)
        );
    }
    if let Some((d, lo, hi)) = paired(
        series,
        configs,
        Workload::ScopedLaunch,
        (Config::Scopes, Config::None),
        difference,
    ) {
        println!(
            "  scopes, (b), paired by round: {:.0} ns per scope (rounds {:.0} to {:.0} ns; target \
             ≤ 100 ns): {}",
            d * 1e3,
            lo * 1e3,
            hi * 1e3,
            ok(d <= 0.1)
        );
    }
    if let Some(b) = added(Workload::ScopedLaunch, Config::Disabled) {
        println!(
            "  disabled, (b): added {:.0} ns per scope (target ≤ 5 ns; below this run's noise, see \
             benches/scope_overhead.rs)",
            b * 1e3
        );
    }
    print_split(configs, series);
}

/// With `--decompose`: gpu-ledger's own share of the steps' slowdown (timeline minus raw+all),
/// and the parts of it the two ablations isolate, for (c) and (d).
fn print_split(configs: &[Config], series: &[Vec<Series>]) {
    for w in [Workload::Train, Workload::Step] {
        print_split_of(configs, series, w);
    }
}

fn print_split_of(configs: &[Config], series: &[Vec<Series>], w: Workload) {
    let slow = |c| {
        median_of(series, configs, w, c)
            .zip(median_of(series, configs, w, Config::None))
            .map(|(x, none)| slowdown_pct(x, none))
    };
    let (Some(tl), Some(all), Some(noscope), Some(few)) = (
        slow(Config::Timeline),
        slow(Config::Raw(RawMode::All)),
        slow(Config::TimelineNoScopes),
        slow(Config::TimelineFewSteps),
    ) else {
        return;
    };
    // step() runs FEW_STEPS times less often in tl-fewsteps: the difference is
    // (1 - 1/FEW_STEPS) of its whole cost.
    let steps = (tl - few) * FEW_STEPS as f64 / (FEW_STEPS - 1) as f64;
    let scopes = tl - noscope;
    println!(
        "\nsplit of the slowdown of {}, percentage points",
        w.label()
    );
    println!(
        "  timeline {tl:+.2} % = raw+all (CUPTI itself) {all:+.2} + gpu-ledger's own {:+.2}",
        tl - all
    );
    println!("  of gpu-ledger's own: scopes (timeline - tl-noscope) {scopes:+.2}, step() ((timeline - tl-fewsteps) x {FEW_STEPS}/{}) {steps:+.2}, the rest (collector, NVML, flushes, ledger) {:+.2}", FEW_STEPS - 1, tl - all - scopes - steps);
}

fn print_table(configs: &[Config], series: &[Vec<Series>], reports: &[SelfReport], args: &Args) {
    let none = idx(configs, Config::None).unwrap_or(0);
    let raw = idx(configs, Config::Raw(RawMode::Kernel));
    println!(
        "\nper-launch cost, median and p90 over {} rounds (µs per launch: loop time / launches; \
         (c): per step)",
        args.rounds
    );
    println!(
        "{:<20} {:<12} {:>8} {:>8} {:>8} {:>9} {:>10} {:>7} {:>9} {:>8}",
        "workload",
        "config",
        "p50 µs",
        "p90 µs",
        "cpu µs",
        "added µs",
        "added-raw",
        "÷raw",
        "slowdown",
        "dropped"
    );
    for (wi, w) in Workload::ALL.iter().enumerate() {
        if series[wi][none].per_unit_us.is_empty() {
            continue; // not run (--workloads)
        }
        let base = percentile(&series[wi][none].per_unit_us, 0.5);
        let base_total = percentile(&series[wi][none].total_s, 0.5);
        let raw_p50 = raw.map(|r| percentile(&series[wi][r].per_unit_us, 0.5));
        for (ci, c) in configs.iter().enumerate() {
            let s = &series[wi][ci];
            let p50 = percentile(&s.per_unit_us, 0.5);
            let p90 = percentile(&s.per_unit_us, 0.9);
            let added = p50 - base;
            let (vs_raw, ratio) = match raw_p50 {
                Some(r) => (
                    format!("{:+.3}", added - (r - base)),
                    format!("{:.3}", p50 / r),
                ),
                None => ("-".into(), "-".into()),
            };
            let slowdown = 100.0 * (percentile(&s.total_s, 0.5) / base_total - 1.0);
            let dropped = match c {
                Config::None | Config::Disabled | Config::Scopes => "-".to_string(),
                _ => reports[ci].dropped.to_string(),
            };
            println!(
                "{:<20} {:<12} {:>8.3} {:>8.3} {:>8.3} {:>+9.3} {:>10} {:>7} {:>+8.2}% {:>8}",
                w.label(),
                c.label(),
                p50,
                p90,
                percentile(&s.cpu_per_unit_us, 0.5),
                added,
                vs_raw,
                ratio,
                slowdown,
                dropped
            );
        }
    }
    println!(
        "(a), (b): {} launches per round; (c): {} training steps per round, figures in µs per \
         step; (d): {} steps of {} kernels per round. cpu = the launching thread's CPU time, p50 \
         (it includes spinning in a synchronize). added = p50 - none's p50; added-raw = added \
         - raw-cupti's added; ÷raw = p50 / raw-cupti's p50; slowdown = median loop time / none's - \
         1; dropped = records dropped over all rounds (the whole run's, not per workload).",
        args.launches, args.train_steps, args.steps, LAUNCHES_PER_STEP
    );
}

// ---------------------------------------------------------------------------------------------
// Sustained mode.

/// Resident memory of this process, KiB (`VmRSS` in /proc/self/status).
fn vm_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Launches at most this many kernels per scope in the sustained mode (when behind schedule).
const MAX_BURST: u64 = 2000;

fn sustained(gpu: &Gpu, args: &Args, secs: u64, dir: &Path) -> Result<()> {
    let threads = args.threads.max(1);
    let ledger = dir.join("sustained.jsonl");
    let profiler = Profiler::builder()
        .level(Level::Timeline)
        .nvml(args.nvml)
        .ledger_path(&ledger)
        .start()?;
    eprintln!(
        "overhead: sustained {} launches/s for {secs} s at Level::Timeline on {} ({threads} threads)",
        args.rate, gpu.name
    );
    let stop = AtomicBool::new(false);
    let launched = AtomicU64::new(0);
    let per_thread = args.rate as f64 / threads as f64;
    let mut samples: Vec<(u64, u64, u64)> = Vec::new(); // (second, RSS KiB, launches that second)
    let outcome: Result<(), String> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (stop, launched, ctx, empty) = (&stop, &launched, &gpu.ctx, &gpu.empty);
                s.spawn(move || -> Result<(), String> {
                    let stream = ctx.new_stream().map_err(|e| e.to_string())?;
                    let t0 = Instant::now();
                    let mut done = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let due = (t0.elapsed().as_secs_f64() * per_thread) as u64;
                        if due <= done {
                            std::thread::sleep(Duration::from_micros(200));
                            continue;
                        }
                        let n = (due - done).min(MAX_BURST);
                        let _burst = Profiler::scope("burst");
                        for _ in 0..n {
                            launch_empty_on(&stream, empty).map_err(|e| e.to_string())?;
                        }
                        done += n;
                        launched.fetch_add(n, Ordering::Relaxed);
                    }
                    stream.synchronize().map_err(|e| e.to_string())
                })
            })
            .collect();
        let t0 = Instant::now();
        let mut last = 0u64;
        for tick in 1..=secs * 10 {
            let next = Duration::from_millis(100 * tick);
            if let Some(wait) = next.checked_sub(t0.elapsed()) {
                std::thread::sleep(wait);
            }
            profiler.step();
            if tick % 10 == 0 {
                let now = launched.load(Ordering::Relaxed);
                samples.push((tick / 10, vm_rss_kib().unwrap_or(0), now - last));
                last = now;
            }
        }
        stop.store(true, Ordering::Relaxed);
        let mut first = Ok(());
        for w in workers {
            let r = w
                .join()
                .unwrap_or_else(|_| Err("a launching thread panicked".into()));
            if first.is_ok() {
                first = r;
            }
        }
        first
    });
    outcome?;
    let total = launched.load(Ordering::Relaxed);
    let trailer = profiler.finish()?.trailer;
    println!("\nsecond  VmRSS MiB  launches/s");
    for (sec, rss, n) in &samples {
        println!("{sec:>6} {:>10.1} {n:>11}", *rss as f64 / 1024.0);
    }
    let half = samples.len() / 2;
    let mid = samples.get(half).map_or(0, |s| s.1);
    let max_late = samples[half..].iter().map(|s| s.1).max().unwrap_or(0);
    let growth_mib = max_late.saturating_sub(mid) as f64 / 1024.0;
    let rate = total as f64 / secs.max(1) as f64;
    println!(
        "\nsustained: {total} launches in {secs} s ({rate:.0}/s, target {}); kernel records {}; \
         dropped {} (target 0); late/unplaced {}; buffers used {}, requests refused {}",
        args.rate,
        trailer.kernel_records,
        trailer.dropped_records,
        trailer.late_records + trailer.unplaced_records,
        trailer.overhead.buffers_used,
        trailer.overhead.buffer_requests_refused
    );
    // A burst can grow the buffer pool once (a step of a few buffers); what matters is whether
    // memory keeps growing afterwards, so the verdict is on the last quarter, with the second
    // half printed beside it.
    let quarter = samples.len() * 3 / 4;
    let q_start = samples.get(quarter).map_or(0, |s| s.1);
    let q_max = samples[quarter..].iter().map(|s| s.1).max().unwrap_or(0);
    let q_growth_mib = q_max.saturating_sub(q_start) as f64 / 1024.0;
    println!(
        "VmRSS growth over the second half: {growth_mib:.1} MiB; over the last quarter: \
         {q_growth_mib:.1} MiB ({})",
        if q_growth_mib <= 4.0 {
            "stopped growing: at most one 4 MiB buffer in the last quarter"
        } else {
            "still growing in the last quarter"
        }
    );
    if rate < 0.98 * args.rate as f64 {
        println!(
            "the launching threads fell short of the rate: launch-bound at {threads} threads; try \
             --threads {}",
            threads * 2
        );
    }
    let o = &trailer.overhead;
    println!(
        "self-reported: CUPTI overhead {:.1} ms, buffer callbacks {:.1} ms, collector CPU {:.1} ms, \
         writer CPU {:.1} ms",
        o.cupti_overhead_ns as f64 / 1e6,
        o.buffer_callback_ns as f64 / 1e6,
        o.collector_cpu_ns as f64 / 1e6,
        o.writer_cpu_ns as f64 / 1e6
    );
    for w in &trailer.warnings {
        println!("warning: {w}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// NVML interference mode.

/// One kind of read the NVML sampler makes, repeated back to back by the interference probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NvmlRead {
    /// No reading thread: the baseline.
    Nothing,
    /// The sampler's every-tick read: clocks, instant power, temperature, throttle, memory used.
    Sample,
    /// The PCIe byte counters (TX and RX, one field-value call).
    Pcie,
    /// The energy counter.
    Energy,
}

impl NvmlRead {
    const ALL: [NvmlRead; 4] = [
        NvmlRead::Nothing,
        NvmlRead::Sample,
        NvmlRead::Pcie,
        NvmlRead::Energy,
    ];
    fn label(self) -> &'static str {
        match self {
            NvmlRead::Nothing => "none",
            NvmlRead::Sample => "sample",
            NvmlRead::Pcie => "pcie",
            NvmlRead::Energy => "energy",
        }
    }
    /// Calls per second of this read under the profiler's default schedule.
    fn default_rate_hz(self) -> f64 {
        let hz = |d: Duration| 1.0 / d.as_secs_f64();
        match self {
            NvmlRead::Nothing => 0.0,
            NvmlRead::Sample => hz(nvml::DEFAULT_SAMPLE_PERIOD),
            NvmlRead::Pcie => hz(nvml::DEFAULT_PCIE_PERIOD),
            NvmlRead::Energy => hz(nvml::DEFAULT_ENERGY_PERIOD),
        }
    }
    fn call(self, lib: &mut NvmlLibrary, index: u32) -> Result<(), nvml::NvmlError> {
        match self {
            NvmlRead::Nothing => Ok(()),
            NvmlRead::Sample => lib.read_sample(index).map(drop),
            NvmlRead::Pcie => lib.read_pcie_bytes(index).map(drop),
            NvmlRead::Energy => lib.read_energy_mj(index).map(drop),
        }
    }
}

/// The NVML index of the benchmark's device, matched by PCI bus id.
fn nvml_index_of(gpu: &Gpu, lib: &NvmlLibrary) -> Result<u32> {
    use cudarc::driver::sys::CUdevice_attribute as a;
    let domain = gpu.ctx.attribute(a::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?;
    let bus = gpu.ctx.attribute(a::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?;
    let device = gpu.ctx.attribute(a::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?;
    let bus_id = format!("{domain:08X}:{bus:02X}:{device:02X}.0");
    let d = lib
        .nvml()
        .device_by_pci_bus_id(bus_id.as_str())
        .map_err(|e| format!("NVML has no device at PCI {bus_id}: {e}"))?;
    Ok(d.index()?)
}

/// What one workload run under one read reported.
struct Interfered {
    elapsed: Duration,
    calls: u64,
    call_ns: u64,
}

/// Runs `work` while another thread repeats `read` back to back (from before `work` starts until
/// it returns).
fn with_reader(
    lib: &mut NvmlLibrary,
    index: u32,
    read: NvmlRead,
    work: impl FnOnce() -> Result<Duration>,
) -> Result<Interfered> {
    if read == NvmlRead::Nothing {
        return Ok(Interfered {
            elapsed: work()?,
            calls: 0,
            call_ns: 0,
        });
    }
    let stop = AtomicBool::new(false);
    let calls = AtomicU64::new(0);
    std::thread::scope(|s| {
        let reader = s.spawn(|| -> Result<u64, nvml::NvmlError> {
            let mut busy_ns = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                read.call(lib, index)?;
                busy_ns += t.elapsed().as_nanos() as u64;
                calls.fetch_add(1, Ordering::Relaxed);
            }
            Ok(busy_ns)
        });
        // The workload starts once the reader is in its loop.
        while calls.load(Ordering::Relaxed) == 0 && !reader.is_finished() {
            std::hint::spin_loop();
        }
        let before = calls.load(Ordering::Relaxed);
        let elapsed = work();
        let during = calls.load(Ordering::Relaxed) - before;
        stop.store(true, Ordering::Relaxed);
        let busy_ns = reader
            .join()
            .map_err(|_| "the NVML reading thread panicked")??;
        let total = calls.load(Ordering::Relaxed).max(1);
        Ok(Interfered {
            elapsed: elapsed?,
            calls: during,
            // The mean call, over every call the thread made.
            call_ns: busy_ns / total,
        })
    })
}

/// `--nvml-interference`: which of the sampler's NVML reads slows the GPU work, and by how much
/// per call. No profiler runs; each read is repeated back to back so that its effect is many
/// times the rounds' noise, then scaled to the profiler's default schedule.
fn nvml_interference(gpu: &mut Gpu, args: &Args) -> Result<()> {
    let mut lib = NvmlLibrary::init()?;
    let index = nvml_index_of(gpu, &lib)?;
    let workloads = [Workload::Launch, Workload::Train, Workload::Step];
    let launches = args.launches / 5;
    eprintln!(
        "overhead: NVML interference on {} (NVML index {index}); {} rounds; (a) {launches} empty \
         launches, (c) {} training steps, (d) {} kernel-mix steps",
        gpu.name, args.rounds, args.train_steps, args.steps
    );
    // [workload][read] -> per-round (elapsed s, calls during, mean call µs)
    let mut runs: Vec<Vec<Vec<(f64, u64, f64)>>> =
        vec![vec![Vec::new(); NvmlRead::ALL.len()]; workloads.len()];
    for round in 0..=args.rounds {
        for k in 0..NvmlRead::ALL.len() {
            let ri = (k + round) % NvmlRead::ALL.len();
            let read = NvmlRead::ALL[ri];
            for (wi, w) in workloads.iter().enumerate() {
                let r = with_reader(&mut lib, index, read, || match w {
                    Workload::Train => run_train_steps::<false>(gpu, args.train_steps, None, 1),
                    Workload::Step => run_steps::<false>(gpu, args.steps, None, 1),
                    _ => run_launches::<false>(gpu, launches, None, 1),
                })?;
                // Round 0 warms up NVML's and the driver's first calls; not counted.
                if round > 0 {
                    runs[wi][ri].push((r.elapsed.as_secs_f64(), r.calls, r.call_ns as f64 / 1e3));
                }
            }
        }
    }
    println!("\nNVML interference: one thread repeats a read back to back while the workload runs");
    println!(
        "{:<20} {:<7} {:>10} {:>12} {:>12} {:>14} {:>14} {:>16}",
        "workload",
        "read",
        "loop ms",
        "added ms",
        "calls",
        "call µs",
        "added/call µs",
        "default sched %"
    );
    for (wi, w) in workloads.iter().enumerate() {
        let base: Vec<f64> = runs[wi][0].iter().map(|r| r.0).collect();
        for (ri, read) in NvmlRead::ALL.iter().enumerate() {
            let rs = &runs[wi][ri];
            let loop_s: Vec<f64> = rs.iter().map(|r| r.0).collect();
            let added: Vec<f64> = loop_s.iter().zip(&base).map(|(x, b)| x - b).collect();
            let per_call: Vec<f64> = rs
                .iter()
                .zip(&added)
                .filter(|(r, _)| r.1 > 0)
                .map(|(r, d)| d * 1e6 / r.1 as f64)
                .collect();
            let calls: Vec<f64> = rs.iter().map(|r| r.1 as f64).collect();
            let call_us: Vec<f64> = rs.iter().map(|r| r.2).collect();
            let per_call_med = median(&per_call);
            // Added time per second of work at the default schedule, as a share of that second.
            let sched = per_call_med.map(|p| p * read.default_rate_hz() / 1e4);
            let fmt =
                |v: Option<f64>, prec: usize| v.map_or("-".to_string(), |x| format!("{x:.prec$}"));
            println!(
                "{:<20} {:<7} {:>10} {:>12} {:>12} {:>14} {:>14} {:>16}",
                w.label(),
                read.label(),
                fmt(median(&loop_s).map(|x| x * 1e3), 2),
                fmt(median(&added).map(|x| x * 1e3), 3),
                fmt(median(&calls), 0),
                fmt(median(&call_us), 1),
                fmt(per_call_med, 2),
                fmt(sched, 3)
            );
        }
    }
    println!(
        "\n`added` is paired by round (the same round's `none` subtracted), median over {} \
         rounds; `added/call` divides it by the calls made while the workload ran; `default \
         sched %` scales that to the sampler's default rates (sample every {} ms, PCIe every {} \
         ms, energy every {} ms) as a share of the workload's time.",
        args.rounds,
        nvml::DEFAULT_SAMPLE_PERIOD.as_millis(),
        nvml::DEFAULT_PCIE_PERIOD.as_millis(),
        nvml::DEFAULT_ENERGY_PERIOD.as_millis()
    );
    Ok(())
}
