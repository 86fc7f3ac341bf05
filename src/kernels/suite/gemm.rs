//! GEMM (`kernels/gemm.cu`, example `ex4_gemm`): naive, shared-memory tiled, tensor-core BF16
//! (wmma), and cuBLAS BF16 through cudarc as the library reference. All matrices are row-major:
//! `C (M × N) = A (M × K) · B (K × N)`.

use std::sync::Arc;

use cudarc::cublas::{result as cublas, sys as cublas_sys, CudaBlas};
use cudarc::driver::PushKernelArg;
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use super::{
    download, from_bf16_bits, load_functions, round_up, to_bf16_bits, upload, GpuWorkload, Launch,
    Padding, Rng, SuiteError, SuiteResult, Verification, Workload,
};
use crate::kernels::Work;

/// The kernel file.
pub const MODULE: &str = "gemm";

/// `M × N × K` above which verification compares a sample of C instead of all of it.
pub const FULL_CHECK_LIMIT: u64 = 1 << 28;

/// C entries compared when the product is too large for a full CPU reference.
pub const SAMPLED_ENTRIES: usize = 2048;

/// Which GEMM kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GemmKernel {
    /// One thread per C element, FP32, operands straight from global memory.
    Naive,
    /// 32×32 shared-memory tiles, FP32, 4 C elements per thread.
    Tiled,
    /// Tensor cores: wmma m16n16k16 BF16 inputs, FP32 accumulate and output, 64×64 block tiles.
    WmmaBf16,
}

impl GemmKernel {
    /// All three.
    pub const ALL: [GemmKernel; 3] = [GemmKernel::Naive, GemmKernel::Tiled, GemmKernel::WmmaBf16];

    /// The kernel name.
    pub fn kernel(self) -> &'static str {
        match self {
            GemmKernel::Naive => "gemm_naive",
            GemmKernel::Tiled => "gemm_tiled",
            GemmKernel::WmmaBf16 => "gemm_wmma_bf16",
        }
    }

    /// Block dimensions.
    pub fn block(self) -> [u32; 3] {
        match self {
            GemmKernel::Naive => [16, 16, 1],
            GemmKernel::Tiled => [32, 8, 1],
            GemmKernel::WmmaBf16 => [128, 1, 1],
        }
    }

    /// The C tile one block computes `(rows, cols)` and the K step, which set the padded shape.
    pub fn tile(self) -> (u64, u64, u64) {
        match self {
            GemmKernel::Naive => (16, 16, 1),
            GemmKernel::Tiled => (32, 32, 32),
            GemmKernel::WmmaBf16 => (64, 64, 32),
        }
    }

    /// Bytes per element of A and B.
    pub fn input_bytes(self) -> u64 {
        match self {
            GemmKernel::Naive | GemmKernel::Tiled => 4,
            GemmKernel::WmmaBf16 => 2,
        }
    }
}

/// One GEMM of shape `M × N × K` with one of the suite's kernels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GemmSpec {
    /// Rows of A and C.
    pub m: u32,
    /// Columns of B and C.
    pub n: u32,
    /// Columns of A, rows of B.
    pub k: u32,
    /// Which kernel.
    pub kernel: GemmKernel,
}

impl GemmSpec {
    /// A GEMM of shape `m × n × k`.
    pub fn new(m: u32, n: u32, k: u32, kernel: GemmKernel) -> Self {
        GemmSpec { m, n, k, kernel }
    }

    /// Grid: one block per C tile, `(ceil(N / tile cols), ceil(M / tile rows))`.
    pub fn grid(&self) -> [u32; 3] {
        let (tm, tn, _) = self.kernel.tile();
        [
            u64::from(self.n).div_ceil(tn) as u32,
            u64::from(self.m).div_ceil(tm) as u32,
            1,
        ]
    }

    /// Analytic work: `2MNK` FLOPs; A and B read once, C written once.
    pub fn work_for(m: u64, n: u64, k: u64, input_bytes: u64, output_bytes: u64) -> Work {
        Work {
            bytes: input_bytes * (m * k + k * n) + output_bytes * m * n,
            flops: 2 * m * n * k,
        }
    }
}

impl Workload for GemmSpec {
    fn name(&self) -> String {
        format!("{} {}x{}x{}", self.kernel.kernel(), self.m, self.n, self.k)
    }

    fn launches(&self) -> Vec<Launch> {
        vec![Launch {
            kernel: self.kernel.kernel(),
            grid: self.grid(),
            block: self.kernel.block(),
            dynamic_shared_bytes: 0,
            work: Self::work_for(
                u64::from(self.m),
                u64::from(self.n),
                u64::from(self.k),
                self.kernel.input_bytes(),
                4,
            ),
        }]
    }

    fn padding(&self) -> Option<Padding> {
        let (tm, tn, tk) = self.kernel.tile();
        let (m, n, k) = (u64::from(self.m), u64::from(self.n), u64::from(self.k));
        Some(Padding {
            useful: vec![m, n, k],
            padded: vec![round_up(m, tm), round_up(n, tn), round_up(k, tk)],
        })
    }

    fn tolerance(&self) -> f64 {
        match self.kernel {
            // FP32 accumulation over K against float64.
            GemmKernel::Naive | GemmKernel::Tiled => 1e-5,
            // The reference uses the same BF16-rounded inputs: only the FP32 (tensor-core)
            // accumulation differs. Far tighter than the 1e-2 a BF16 output would need.
            GemmKernel::WmmaBf16 => 1e-3,
        }
    }
}

/// CPU reference: `A · B` in float64, all of C.
pub fn reference(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0f64; m * n];
    for i in 0..m {
        let row = &mut c[i * n..(i + 1) * n];
        for p in 0..k {
            let aip = f64::from(a[i * k + p]);
            let brow = &b[p * n..(p + 1) * n];
            for (cj, &bj) in row.iter_mut().zip(brow) {
                *cj += aip * f64::from(bj);
            }
        }
    }
    c
}

/// CPU reference of one entry `C[i][j]` in float64.
pub fn reference_entry(a: &[f32], b: &[f32], n: usize, k: usize, i: usize, j: usize) -> f64 {
    (0..k)
        .map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]))
        .sum()
}

/// Compares `c` (M × N) with the reference: all of it when `M·N·K` ≤ [`FULL_CHECK_LIMIT`], else
/// [`SAMPLED_ENTRIES`] entries chosen by `seed`.
pub fn compare_product(
    what: String,
    c: &[f32],
    a: &[f32],
    b: &[f32],
    (m, n, k): (usize, usize, usize),
    tolerance: f64,
    seed: u64,
) -> Verification {
    if (m as u64) * (n as u64) * (k as u64) <= FULL_CHECK_LIMIT {
        return Verification::compare(what, c, &reference(a, b, m, n, k), tolerance);
    }
    let mut rng = Rng::new(seed ^ 0x5EED_5EED);
    let mut out = Vec::with_capacity(SAMPLED_ENTRIES);
    let mut reference = Vec::with_capacity(SAMPLED_ENTRIES);
    for _ in 0..SAMPLED_ENTRIES {
        let i = rng.below(m as u64) as usize;
        let j = rng.below(n as u64) as usize;
        out.push(c[i * n + j]);
        reference.push(reference_entry(a, b, n, k, i, j));
    }
    Verification::compare(format!("{what} (sampled)"), &out, &reference, tolerance)
}

/// The three GEMM kernels, compiled.
#[derive(Debug, Clone)]
pub struct GemmKernels {
    functions: [CudaFunction; 3],
}

impl GemmKernels {
    /// Compiles `kernels/gemm.cu`.
    ///
    /// # Errors
    /// As [`crate::kernels::compile`], or a missing function.
    pub fn load(ctx: &Arc<CudaContext>) -> SuiteResult<Self> {
        let names = GemmKernel::ALL.map(GemmKernel::kernel);
        let functions = load_functions(ctx, MODULE, names)?;
        Ok(GemmKernels { functions })
    }

    /// The compiled function of `kernel` (for the driver's occupancy calculator and attributes).
    pub fn function(&self, kernel: GemmKernel) -> &CudaFunction {
        &self.functions[GemmKernel::ALL
            .iter()
            .position(|&k| k == kernel)
            .expect("kernel in ALL")]
    }

    /// Enqueues an FP32 GEMM (naive or tiled) of `spec`'s shape.
    ///
    /// # Errors
    /// A BF16 kernel, buffers too short, or a launch failure.
    pub fn launch_f32(
        &self,
        stream: &Arc<CudaStream>,
        spec: &GemmSpec,
        a: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        c: &mut CudaSlice<f32>,
    ) -> SuiteResult<()> {
        if spec.kernel == GemmKernel::WmmaBf16 {
            return Err(SuiteError::Shape("launch_f32 runs the FP32 kernels".into()));
        }
        // SAFETY: the FP32 kernels take `(const float*, const float*, float*, unsigned,
        // unsigned, unsigned)`.
        unsafe { self.launch(stream, spec, a, b, c) }
    }

    /// Enqueues the tensor-core GEMM: A and B as BF16 bits, C in FP32.
    ///
    /// # Errors
    /// Buffers too short, or a launch failure.
    pub fn launch_bf16(
        &self,
        stream: &Arc<CudaStream>,
        spec: &GemmSpec,
        a: &CudaSlice<u16>,
        b: &CudaSlice<u16>,
        c: &mut CudaSlice<f32>,
    ) -> SuiteResult<()> {
        if spec.kernel != GemmKernel::WmmaBf16 {
            return Err(SuiteError::Shape("launch_bf16 runs gemm_wmma_bf16".into()));
        }
        // SAFETY: gemm_wmma_bf16 takes `(const unsigned short*, const unsigned short*, float*,
        // unsigned, unsigned, unsigned)`; cudarc allocations are 256-byte aligned, as its 16-byte
        // loads need when K and N are multiples of 8 (it checks that itself).
        unsafe { self.launch(stream, spec, a, b, c) }
    }

    /// Enqueues `spec.kernel` with `(a, b, c, m, n, k)` after checking the buffers' lengths.
    ///
    /// # Safety
    /// `spec.kernel` must take `(const T*, const T*, float*, unsigned, unsigned, unsigned)`.
    unsafe fn launch<T>(
        &self,
        stream: &Arc<CudaStream>,
        spec: &GemmSpec,
        a: &CudaSlice<T>,
        b: &CudaSlice<T>,
        c: &mut CudaSlice<f32>,
    ) -> SuiteResult<()> {
        check_lengths(spec, a.len(), b.len(), c.len())?;
        let mut l = stream.launch_builder(self.function(spec.kernel));
        l.arg(a)
            .arg(b)
            .arg(c)
            .arg(&spec.m)
            .arg(&spec.n)
            .arg(&spec.k);
        // SAFETY: the caller vouches for the signature; A, B and C hold M·K, K·N and M·N
        // elements, the most the kernel indexes.
        unsafe { l.launch(spec.launches()[0].config()) }?;
        Ok(())
    }
}

fn check_lengths(spec: &GemmSpec, a: usize, b: usize, c: usize) -> SuiteResult<()> {
    let (m, n, k) = (spec.m as usize, spec.n as usize, spec.k as usize);
    if a < m * k || b < k * n || c < m * n {
        return Err(SuiteError::Shape(format!(
            "GEMM {m}x{n}x{k}: buffers of {a}, {b}, {c} elements are too short"
        )));
    }
    Ok(())
}

/// Rounds `values` to BF16 in place and returns their BF16 bits.
fn round_to_bf16(values: &mut [f32]) -> Vec<u16> {
    values
        .iter_mut()
        .map(|x| {
            let bits = to_bf16_bits(*x);
            *x = from_bf16_bits(bits);
            bits
        })
        .collect()
}

enum Operands {
    F32 {
        a: CudaSlice<f32>,
        b: CudaSlice<f32>,
    },
    Bf16 {
        a: CudaSlice<u16>,
        b: CudaSlice<u16>,
    },
}

/// A GEMM with its buffers: A and B uniform in [-1, 1) from the seed (BF16-rounded for the
/// tensor-core kernel, and the reference uses the rounded values).
pub struct GemmGpu {
    stream: Arc<CudaStream>,
    kernels: GemmKernels,
    spec: GemmSpec,
    seed: u64,
    a_host: Vec<f32>,
    b_host: Vec<f32>,
    operands: Operands,
    c: CudaSlice<f32>,
}

impl GemmGpu {
    /// Allocates and uploads.
    ///
    /// # Errors
    /// A driver error.
    pub fn new(
        stream: &Arc<CudaStream>,
        kernels: &GemmKernels,
        spec: GemmSpec,
        seed: u64,
    ) -> SuiteResult<Self> {
        let (m, n, k) = (spec.m as usize, spec.n as usize, spec.k as usize);
        let mut rng = Rng::new(seed);
        let mut a_host = rng.vec(m * k, -1.0, 1.0);
        let mut b_host = rng.vec(k * n, -1.0, 1.0);
        let operands = if spec.kernel == GemmKernel::WmmaBf16 {
            let a_bits = round_to_bf16(&mut a_host);
            let b_bits = round_to_bf16(&mut b_host);
            Operands::Bf16 {
                a: upload(stream, &a_bits)?,
                b: upload(stream, &b_bits)?,
            }
        } else {
            Operands::F32 {
                a: upload(stream, &a_host)?,
                b: upload(stream, &b_host)?,
            }
        };
        let c = stream.alloc_zeros::<f32>((m * n).max(1))?;
        Ok(GemmGpu {
            stream: stream.clone(),
            kernels: kernels.clone(),
            spec,
            seed,
            a_host,
            b_host,
            operands,
            c,
        })
    }
}

impl GemmGpu {
    /// The GEMM's shape and kernel.
    pub fn gemm_spec(&self) -> &GemmSpec {
        &self.spec
    }
}

impl GpuWorkload for GemmGpu {
    spec_stream_and_poison!(c);

    fn run(&mut self) -> SuiteResult<()> {
        match &self.operands {
            Operands::F32 { a, b } => {
                self.kernels
                    .launch_f32(&self.stream, &self.spec, a, b, &mut self.c)
            }
            Operands::Bf16 { a, b } => {
                self.kernels
                    .launch_bf16(&self.stream, &self.spec, a, b, &mut self.c)
            }
        }
    }

    fn verify(&mut self) -> SuiteResult<Verification> {
        let (m, n, k) = (
            self.spec.m as usize,
            self.spec.n as usize,
            self.spec.k as usize,
        );
        let out = download(&self.stream, &self.c, m * n)?;
        Ok(compare_product(
            self.spec.name(),
            &out,
            &self.a_host,
            &self.b_host,
            (m, n, k),
            self.spec.tolerance(),
            self.seed,
        ))
    }
}

/// A cuBLAS GEMM: BF16 A, B and C, FP32 compute (`cublasGemmEx`, `CUBLAS_COMPUTE_32F`), the library
/// reference for the GEMM kernels. cuBLAS chooses its kernels: [`Workload::launches`] is empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CublasGemmSpec {
    /// Rows of A and C.
    pub m: u32,
    /// Columns of B and C.
    pub n: u32,
    /// Columns of A, rows of B.
    pub k: u32,
}

impl Workload for CublasGemmSpec {
    fn name(&self) -> String {
        format!("cublasGemmEx bf16 {}x{}x{}", self.m, self.n, self.k)
    }

    fn launches(&self) -> Vec<Launch> {
        Vec::new()
    }

    fn work(&self) -> Work {
        GemmSpec::work_for(
            u64::from(self.m),
            u64::from(self.n),
            u64::from(self.k),
            2,
            2,
        )
    }

    fn tolerance(&self) -> f64 {
        // BF16 output: one rounding to 8 significant bits.
        1e-2
    }
}

/// True when libcublas can be loaded.
pub fn cublas_present() -> bool {
    // SAFETY: only attempts to dlopen libcublas by its usual names.
    unsafe { cublas_sys::is_culib_present() }
}

/// A cuBLAS BF16 GEMM with its buffers.
pub struct CublasGemmGpu {
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    spec: CublasGemmSpec,
    seed: u64,
    a_host: Vec<f32>,
    b_host: Vec<f32>,
    a: CudaSlice<u16>,
    b: CudaSlice<u16>,
    c: CudaSlice<u16>,
}

impl CublasGemmGpu {
    /// Creates a cuBLAS handle on `stream`, allocates and uploads BF16 inputs uniform in
    /// [-1, 1) from the seed.
    ///
    /// # Errors
    /// [`SuiteError::MissingLibrary`] without libcublas, or a cuBLAS or driver error.
    pub fn new(stream: &Arc<CudaStream>, spec: CublasGemmSpec, seed: u64) -> SuiteResult<Self> {
        if !cublas_present() {
            return Err(SuiteError::MissingLibrary("libcublas"));
        }
        let blas = CudaBlas::new(stream.clone())?;
        let (m, n, k) = (spec.m as usize, spec.n as usize, spec.k as usize);
        let mut rng = Rng::new(seed);
        let mut a_host = rng.vec(m * k, -1.0, 1.0);
        let mut b_host = rng.vec(k * n, -1.0, 1.0);
        let a_bits = round_to_bf16(&mut a_host);
        let b_bits = round_to_bf16(&mut b_host);
        let a = upload(stream, &a_bits)?;
        let b = upload(stream, &b_bits)?;
        let c = stream.alloc_zeros::<u16>((m * n).max(1))?;
        Ok(CublasGemmGpu {
            stream: stream.clone(),
            blas,
            spec,
            seed,
            a_host,
            b_host,
            a,
            b,
            c,
        })
    }
}

impl GpuWorkload for CublasGemmGpu {
    spec_stream_and_poison!(c);

    fn run(&mut self) -> SuiteResult<()> {
        let (m, n, k) = (self.spec.m as i32, self.spec.n as i32, self.spec.k as i32);
        let alpha = 1.0f32;
        let beta = 0.0f32;
        let (a, _ra) = self.a.device_ptr(&self.stream);
        let (b, _rb) = self.b.device_ptr(&self.stream);
        let (c, _rc) = self.c.device_ptr_mut(&self.stream);
        use cublas_sys::cublasOperation_t::CUBLAS_OP_N;
        use cublas_sys::cudaDataType_t::CUDA_R_16BF;
        // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: cuBLAS gets (N, M, K) with B first.
        // SAFETY: the handle is live and bound to `stream`; B, A and C hold K·N, M·K and M·N
        // BF16 values with leading dimensions N, K and N; alpha and beta are f32 as
        // CUBLAS_COMPUTE_32F requires and outlive the call (cuBLAS reads them before returning
        // in host pointer mode).
        unsafe {
            cublas::gemm_ex(
                *self.blas.handle(),
                CUBLAS_OP_N,
                CUBLAS_OP_N,
                n,
                m,
                k,
                (&alpha) as *const f32 as *const _,
                b as *const _,
                CUDA_R_16BF,
                n,
                a as *const _,
                CUDA_R_16BF,
                k,
                (&beta) as *const f32 as *const _,
                c as *mut _,
                CUDA_R_16BF,
                n,
                cublas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }?;
        Ok(())
    }

    fn verify(&mut self) -> SuiteResult<Verification> {
        let (m, n, k) = (
            self.spec.m as usize,
            self.spec.n as usize,
            self.spec.k as usize,
        );
        let bits = download(&self.stream, &self.c, m * n)?;
        let out: Vec<f32> = bits.iter().map(|&x| from_bf16_bits(x)).collect();
        Ok(compare_product(
            self.spec.name(),
            &out,
            &self.a_host,
            &self.b_host,
            (m, n, k),
            self.spec.tolerance(),
            self.seed,
        ))
    }
}
