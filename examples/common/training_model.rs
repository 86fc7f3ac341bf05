//! The training loop's model: a representative mixed training step built from the bundled
//! kernels and cuBLAS GEMMs (see `examples/training_loop.rs` for the step's kernels). Shared by
//! `training_loop` and `overhead` (workload (c)) through `#[path]`, so that the profiler's cost is
//! measured on the same step the training loop profiles.

use std::sync::Arc;

use cudarc::cublas::{sys as cublas_sys, CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtrMut};
use gpu_ledger::kernels::suite::attention::{AttentionKernels, AttentionSpec, AttentionVariant};
use gpu_ledger::kernels::suite::gemm::cublas_present;
use gpu_ledger::kernels::suite::reduce::{ReduceKernels, ReduceMode, ReduceVariant, ReductionSpec};
use gpu_ledger::kernels::suite::softmax::SoftmaxKernels;
use gpu_ledger::kernels::suite::transpose::{TransposeKernels, TransposeSpec, TransposeVariant};
use gpu_ledger::kernels::suite::vadd::{VaddKernels, VaddVariant, VectorAddSpec};
use gpu_ledger::kernels::suite::{upload, Rng, SuiteError};
use gpu_ledger::Profiler;

/// Tokens, hidden size, FFN size; attention sees the [T × D] activation as BH heads of SEQ × 64.
pub const T: u32 = 4096;
pub const D: u32 = 1024;
pub const H: u32 = 4096;
pub const SEQ: u32 = 512;
pub const HEAD: u32 = 64;
const LR: f32 = 1e-3;
/// cuBLAS workspace handed to the handle in the graph path: the size cuBLAS's documentation
/// (`cublasSetWorkspace`) recommends for Hopper (4 MiB for earlier architectures).
const CUBLAS_WORKSPACE_BYTES: usize = 32 << 20;

pub struct Model {
    pub stream: Arc<CudaStream>,
    blas: CudaBlas,
    vadd: VaddKernels,
    transpose: TransposeKernels,
    reduce: ReduceKernels,
    softmax: SoftmaxKernels,
    attention: AttentionKernels,
    pub attn: AttentionSpec,
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
    /// Loads the kernels into `ctx` (a device of `sm_count` SMs), creates the cuBLAS handle on
    /// `s` and allocates and fills every buffer on `s`.
    pub fn new(
        ctx: &Arc<CudaContext>,
        sm_count: u32,
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
            sm_count,
        );
        let grad_spec = ReductionSpec::for_device(
            u64::from(dh),
            ReduceVariant::Shuffle,
            ReduceMode::Sum,
            sm_count,
        );
        let blocks = loss_spec.blocks.max(grad_spec.blocks) as usize;
        Ok(Model {
            blas: CudaBlas::new(s.clone())?,
            vadd: VaddKernels::load(ctx)?,
            transpose: TransposeKernels::load(ctx)?,
            reduce: ReduceKernels::load(ctx)?,
            softmax: SoftmaxKernels::load(ctx)?,
            attention: AttentionKernels::load(ctx)?,
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
    pub fn set_blas_workspace(&mut self) -> Result<(), SuiteError> {
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

    fn backward(&mut self, recompute: bool, scoped: bool) -> Result<(), SuiteError> {
        if recompute {
            let _r = scoped.then(|| Profiler::scope("recompute"));
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

    /// One step, each phase in its scope. Run eagerly, the scopes attribute the launches;
    /// captured into a graph, the profiler records each node with the scope open, and the
    /// graph's replays attribute each node's kernel to it. They are `Profiler::scope` (host
    /// only), never `Profiler::scope_on`, whose `cuEventRecord` on the capturing stream would be
    /// captured into the graph instead of timing anything. Without `scoped` the step makes no
    /// scope call at all (the overhead benchmark's configurations without scopes).
    pub fn step(&mut self, recompute: bool, scoped: bool) -> Result<(), SuiteError> {
        let scope = |name| scoped.then(|| Profiler::scope(name));
        {
            let _s = scope("forward");
            self.forward()?;
        }
        {
            let _s = scope("backward");
            self.backward(recompute, scoped)?;
        }
        let _s = scope("optimizer");
        self.optimizer()
    }

    pub fn read_loss(&self) -> Result<f32, SuiteError> {
        let v = self.stream.clone_dtoh(&self.loss)?;
        self.stream.synchronize()?;
        Ok(v[0])
    }
}
