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
//! (`ctx.new_stream()`: the legacy default stream cannot be captured) and replayed as a CUDA graph
//! each iteration (scope `step(graph)`); see [`capture_step`] for what the capture requires. Without
//! it, the step runs eagerly on the context's default stream, as before.
//!
//! `cargo run --release --example training_loop -- [--iters N] [--graph] [--recompute]
//! [--ledger PATH]`

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use cudarc::cublas::{sys as cublas_sys, CudaBlas, Gemm, GemmConfig};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaSlice, CudaStream, DevicePtrMut};
use gpu_ledger::analysis::{family_table, FamilyRules};
use gpu_ledger::kernels::suite::attention::{AttentionKernels, AttentionSpec, AttentionVariant};
use gpu_ledger::kernels::suite::experiment::{device_line, open_device};
use gpu_ledger::kernels::suite::gemm::cublas_present;
use gpu_ledger::kernels::suite::reduce::{ReduceKernels, ReduceMode, ReduceVariant, ReductionSpec};
use gpu_ledger::kernels::suite::softmax::SoftmaxKernels;
use gpu_ledger::kernels::suite::transpose::{TransposeKernels, TransposeSpec, TransposeVariant};
use gpu_ledger::kernels::suite::vadd::{VaddKernels, VaddVariant, VectorAddSpec};
use gpu_ledger::kernels::suite::{upload, Rng, SuiteError};
use gpu_ledger::{read_ledger, Level, Profiler};

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

/// Tokens, hidden size, FFN size; attention sees the [T × D] activation as BH heads of SEQ × 64.
const T: u32 = 4096;
const D: u32 = 1024;
const H: u32 = 4096;
const SEQ: u32 = 512;
const HEAD: u32 = 64;
const LR: f32 = 1e-3;
/// cuBLAS workspace handed to the handle in the graph path: the size cuBLAS's documentation
/// (`cublasSetWorkspace`) recommends for Hopper (4 MiB for earlier architectures).
const CUBLAS_WORKSPACE_BYTES: usize = 32 << 20;

struct Model {
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    vadd: VaddKernels,
    transpose: TransposeKernels,
    reduce: ReduceKernels,
    softmax: SoftmaxKernels,
    attention: AttentionKernels,
    attn: AttentionSpec,
    loss_spec: ReductionSpec,
    grad_spec: ReductionSpec,
    x: CudaSlice<f32>,
    w1: CudaSlice<f32>,
    w2: CudaSlice<f32>,
    w1_new: CudaSlice<f32>,
    w2_new: CudaSlice<f32>,
    w2t: CudaSlice<f32>,
    h: CudaSlice<f32>,
    a: CudaSlice<f32>,
    y: CudaSlice<f32>,
    o: CudaSlice<f32>,
    dy: CudaSlice<f32>,
    da: CudaSlice<f32>,
    dh: CudaSlice<f32>,
    dw1: CudaSlice<f32>,
    dw2: CudaSlice<f32>,
    partials: CudaSlice<f32>,
    loss: CudaSlice<f32>,
    grad_sum: CudaSlice<f32>,
    /// The cuBLAS workspace set with `cublasSetWorkspace` (graph path only). Declared after
    /// `blas`, so that the handle is destroyed before the buffer is freed; the captured GEMMs
    /// point into it, and the graph is dropped before the model.
    blas_workspace: Option<CudaSlice<u8>>,
}

/// Row-major `C (m × n) = alpha · op(A) · op(B)`, `op(A)` m × k (A stored k × m when `ta`),
/// `op(B)` k × n (B stored n × k when `tb`), through column-major cuBLAS as `Cᵀ = op(B)ᵀ·op(A)ᵀ`.
#[allow(clippy::too_many_arguments)]
fn gemm(
    blas: &CudaBlas,
    (ta, tb): (bool, bool),
    (m, n, k): (u32, u32, u32),
    alpha: f32,
    a: &CudaSlice<f32>,
    b: &CudaSlice<f32>,
    c: &mut CudaSlice<f32>,
) -> Result<(), SuiteError> {
    use cublas_sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
    let (m, n, k) = (m as i32, n as i32, k as i32);
    let cfg = GemmConfig {
        transa: if tb { CUBLAS_OP_T } else { CUBLAS_OP_N },
        transb: if ta { CUBLAS_OP_T } else { CUBLAS_OP_N },
        m: n,
        n: m,
        k,
        alpha,
        lda: if tb { k } else { n },
        ldb: if ta { m } else { k },
        beta: 0.0,
        ldc: n,
    };
    if a.len() < (m * k) as usize || b.len() < (k * n) as usize || c.len() < (m * n) as usize {
        return Err(SuiteError::Shape(format!(
            "GEMM {m}x{n}x{k}: a buffer is too short"
        )));
    }
    // SAFETY: the buffers hold m·k, k·n and m·n floats (checked above) with the leading
    // dimensions given, and the handle is bound to the stream they are used on.
    unsafe { blas.gemm(cfg, b, a, c) }?;
    Ok(())
}

impl Model {
    /// Loads the kernels, creates the cuBLAS handle on `s` and allocates and fills every buffer
    /// on `s`.
    fn new(
        dev: &gpu_ledger::kernels::suite::experiment::Device,
        s: Arc<CudaStream>,
    ) -> Result<Self, SuiteError> {
        if !cublas_present() {
            return Err(SuiteError::MissingLibrary("libcublas"));
        }
        let mut rng = Rng::new(2024);
        let mut fill = |n: u32, scale: f32| upload(&s, &rng.vec(n as usize, -scale, scale));
        let td = T * D;
        let th = T * H;
        let dh = D * H;
        let attn = AttentionSpec::new(
            td / (SEQ * HEAD),
            SEQ,
            AttentionVariant::find(HEAD, 64, 64).expect("compiled variant"),
        );
        let loss_spec = ReductionSpec::for_device(
            u64::from(td),
            ReduceVariant::Shuffle,
            ReduceMode::Sum,
            dev.gpu.sm_count,
        );
        let grad_spec = ReductionSpec::for_device(
            u64::from(dh),
            ReduceVariant::Shuffle,
            ReduceMode::Sum,
            dev.gpu.sm_count,
        );
        let blocks = loss_spec.blocks.max(grad_spec.blocks) as usize;
        Ok(Model {
            blas: CudaBlas::new(s.clone())?,
            vadd: VaddKernels::load(&dev.ctx)?,
            transpose: TransposeKernels::load(&dev.ctx)?,
            reduce: ReduceKernels::load(&dev.ctx)?,
            softmax: SoftmaxKernels::load(&dev.ctx)?,
            attention: AttentionKernels::load(&dev.ctx)?,
            attn,
            loss_spec,
            grad_spec,
            x: fill(td, 1.0)?,
            w1: fill(dh, 0.03)?,
            w2: fill(dh, 0.03)?,
            w1_new: s.alloc_zeros(dh as usize)?,
            w2_new: s.alloc_zeros(dh as usize)?,
            w2t: s.alloc_zeros(dh as usize)?,
            h: s.alloc_zeros(th as usize)?,
            a: s.alloc_zeros(th as usize)?,
            y: s.alloc_zeros(td as usize)?,
            o: s.alloc_zeros(td as usize)?,
            dy: s.alloc_zeros(td as usize)?,
            da: s.alloc_zeros(th as usize)?,
            dh: s.alloc_zeros(th as usize)?,
            dw1: s.alloc_zeros(dh as usize)?,
            dw2: s.alloc_zeros(dh as usize)?,
            partials: s.alloc_zeros(blocks)?,
            loss: s.alloc_zeros(1)?,
            grad_sum: s.alloc_zeros(1)?,
            blas_workspace: None,
            stream: s,
        })
    }

    /// Gives the cuBLAS handle a workspace of its own, allocated here, before any capture.
    /// Without it cuBLAS uses its default workspace pool, which it may (re)allocate on the
    /// handle's stream when a routine needs it: an allocation inside the capture is an unsafe
    /// call that ends it with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (or, where cuBLAS uses the
    /// stream-ordered allocator, memory nodes in the graph). `cublasSetStream` resets the
    /// workspace to the default pool, so this comes after `CudaBlas::new` (which sets the
    /// stream) and nothing calls `set_stream` afterwards.
    fn set_blas_workspace(&mut self) -> Result<(), SuiteError> {
        let mut ws = self.stream.alloc_zeros::<u8>(CUBLAS_WORKSPACE_BYTES)?;
        {
            let (ptr, _sync) = ws.device_ptr_mut(&self.stream);
            // SAFETY: `ptr` is a live device allocation of CUBLAS_WORKSPACE_BYTES bytes, aligned
            // to at least 256 bytes as cuBLAS requires (driver allocations are), owned by the
            // model and freed only after the handle is destroyed (field order) and after the
            // graph that uses it is dropped.
            unsafe {
                cublas_sys::cublasSetWorkspace_v2(
                    *self.blas.handle(),
                    ptr as *mut std::ffi::c_void,
                    CUBLAS_WORKSPACE_BYTES,
                )
            }
            .result()?;
        }
        self.blas_workspace = Some(ws);
        Ok(())
    }

    fn activations(&mut self) -> Result<(), SuiteError> {
        gemm(
            &self.blas,
            (false, false),
            (T, H, D),
            1.0,
            &self.x,
            &self.w1,
            &mut self.h,
        )?;
        self.softmax
            .launch_fused(&self.stream, T, H, &self.h, &mut self.a)
    }

    fn forward(&mut self) -> Result<(), SuiteError> {
        self.activations()?;
        gemm(
            &self.blas,
            (false, false),
            (T, D, H),
            1.0,
            &self.a,
            &self.w2,
            &mut self.y,
        )?;
        self.attention.launch(
            &self.stream,
            &self.attn,
            &self.y,
            &self.y,
            &self.y,
            &mut self.o,
        )?;
        self.reduce.launch_sum(
            &self.stream,
            &self.loss_spec,
            &self.o,
            &mut self.partials,
            &mut self.loss,
        )
    }

    fn backward(&mut self, recompute: bool) -> Result<(), SuiteError> {
        if recompute {
            let _r = Profiler::scope("recompute");
            self.activations()?;
        }
        let s = &self.stream;
        let add = |n: u32| VectorAddSpec::new(u64::from(n), VaddVariant::Vec4);
        self.vadd
            .launch(s, &add(T * D), &self.o, &self.y, &mut self.dy)?;
        let t = TransposeSpec::new(H, D, TransposeVariant::Padded);
        self.transpose.launch(s, &t, &self.w2, &mut self.w2t)?;
        gemm(
            &self.blas,
            (false, false),
            (T, H, D),
            1.0,
            &self.dy,
            &self.w2t,
            &mut self.da,
        )?;
        gemm(
            &self.blas,
            (true, false),
            (H, D, T),
            -LR,
            &self.a,
            &self.dy,
            &mut self.dw2,
        )?;
        self.vadd
            .launch(s, &add(T * H), &self.da, &self.a, &mut self.dh)?;
        gemm(
            &self.blas,
            (true, false),
            (D, H, T),
            -LR,
            &self.x,
            &self.dh,
            &mut self.dw1,
        )
    }

    fn optimizer(&mut self) -> Result<(), SuiteError> {
        let s = &self.stream;
        self.reduce.launch_sum(
            s,
            &self.grad_spec,
            &self.dw1,
            &mut self.partials,
            &mut self.grad_sum,
        )?;
        let add = VectorAddSpec::new(u64::from(D * H), VaddVariant::Vec4);
        self.vadd
            .launch(s, &add, &self.w1, &self.dw1, &mut self.w1_new)?;
        self.vadd
            .launch(s, &add, &self.w2, &self.dw2, &mut self.w2_new)?;
        s.memcpy_dtod(&self.w1_new, &mut self.w1)?;
        s.memcpy_dtod(&self.w2_new, &mut self.w2)?;
        Ok(())
    }

    /// One step, each phase in its scope (when not capturing, the scopes attribute the
    /// launches). During the capture the profiler has not started, so the scopes are inert;
    /// they are `Profiler::scope` (host time and CUPTI's external-correlation stack only), never
    /// `Profiler::scope_on`, whose `cuEventRecord` on the capturing stream would be captured
    /// into the graph instead of timing anything.
    fn step(&mut self, recompute: bool) -> Result<(), SuiteError> {
        {
            let _s = Profiler::scope("forward");
            self.forward()?;
        }
        {
            let _s = Profiler::scope("backward");
            self.backward(recompute)?;
        }
        let _s = Profiler::scope("optimizer");
        self.optimizer()
    }

    fn read_loss(&self) -> Result<f32, SuiteError> {
        let v = self.stream.clone_dtoh(&self.loss)?;
        self.stream.synchronize()?;
        Ok(v[0])
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
/// - the scopes in `step` are inert host scopes (see [`Model::step`]).
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
    let captured = model.step(recompute);
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
    let mut model = Model::new(&dev, stream)?;
    if args.graph {
        model.set_blas_workspace()?;
    }
    // Eager warm-up: module loads, cuBLAS heuristics, first touch (and, before a capture, every
    // lazy initialization that could allocate or synchronize).
    model.step(args.recompute)?;
    let first_loss = model.read_loss()?;
    // The capture runs before the profiler starts: its launch calls produce no GPU records, and
    // a profiled iteration containing them would wait for records that never come.
    let graph = if args.graph {
        Some(capture_step(&mut model, args.recompute)?)
    } else {
        None
    };
    model.stream.synchronize()?;

    let profiler = Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(&args.ledger)
        .start()?;
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
                // The whole step is one API call, cuGraphLaunch. CUPTI gives every kernel and
                // copy node the graph runs the correlation id of that call (their records also
                // carry graphId / graphNodeId), and gpu-ledger attributes an activity through
                // its correlation id to the scope that was open when the call was made. So all
                // of the step's kernels and copies are attributed to `step(graph)`, none to
                // forward / backward / optimizer (a graph has no host calls per phase; capturing
                // one graph per phase and launching each in its scope would keep the split).
                // The scope's launches / kernels count the graph's nodes, its device time is the
                // union of their GPU intervals, and its host time is the asynchronous launch call
                // only; the kernel groups count the nodes as graph launches.
                let _s = Profiler::scope("step(graph)");
                g.launch()?;
            }
            None => model.step(args.recompute)?,
        }
        {
            let _s = Profiler::scope("log");
            loss = model.read_loss()?;
        }
        profiler.step();
    }
    let summary = profiler.finish()?;
    println!("loss: first {first_loss:.4e}, last {loss:.4e}");

    let ledger = read_ledger(&summary.ledger_path)?;
    // Iteration 0 carries CUPTI's first-launch cost: leave it out.
    let rows: Vec<_> = ledger
        .iterations
        .iter()
        .filter(|r| r.index > 0 && r.complete && !r.perturbed)
        .collect();
    print_scopes(&rows);
    if args.graph {
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
        let mut name = f.family.clone();
        if name.len() > 40 {
            name.truncate(39);
            name.push('…');
        }
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
        summary.ledger_path.display()
    );
    let t = &summary.trailer;
    println!(
        "{} kernel records, {} dropped; CUPTI overhead {:.3} ms, collector CPU {:.3} ms",
        t.kernel_records,
        t.dropped_records,
        t.overhead.cupti_overhead_ns as f64 / 1e6,
        t.overhead.collector_cpu_ns as f64 / 1e6
    );
    if !loss.is_finite() {
        return Err(format!("the loss is not finite: {loss}").into());
    }
    Ok(())
}

fn print_scopes(rows: &[&gpu_ledger::ledger::IterationRow]) {
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
    gpu_ledger::analysis::Distribution::from_samples(v).map_or(f64::NAN, |d| d.median)
}
