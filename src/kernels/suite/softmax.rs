//! Row softmax (`kernels/softmax.cu`, example `ex5_softmax`): five kernels as a framework composes
//! it (max, subtract, exp, sum, divide, each through device memory) against one fused kernel that
//! keeps the row on chip.

use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, PushKernelArg};

use super::{
    download, grid_dim, load_functions, upload, GpuWorkload, Launch, Rng, SuiteError, SuiteResult,
    Verification, Workload,
};
use crate::kernels::Work;

/// The kernel file.
pub const MODULE: &str = "softmax";

/// Threads per block of every softmax kernel.
pub const BLOCK: u32 = 256;

/// The five kernels of the composition, in launch order.
pub const COMPOSED: [&str; 5] = [
    "softmax_row_max",
    "softmax_subtract",
    "softmax_exp",
    "softmax_row_sum",
    "softmax_divide",
];

/// The fused kernel.
pub const FUSED: &str = "softmax_fused";

/// Largest row the fused kernel holds in shared memory: 32768 floats (128 KiB of dynamic shared
/// memory, opted in at load time; well inside sm_90's 227 KiB per block).
pub const MAX_FUSED_COLS: u32 = 32 * 1024;

/// Dynamic shared memory above which a kernel must opt in.
pub const DEFAULT_DYNAMIC_SHARED_LIMIT: u32 = 48 * 1024;

/// Row softmax of a `rows × cols` f32 matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoftmaxSpec {
    /// Rows.
    pub rows: u32,
    /// Columns.
    pub cols: u32,
    /// One fused kernel (true) or the five-kernel composition.
    pub fused: bool,
}

impl SoftmaxSpec {
    /// A softmax over `rows` rows of `cols`.
    pub fn new(rows: u32, cols: u32, fused: bool) -> Self {
        SoftmaxSpec { rows, cols, fused }
    }

    /// Elements.
    pub fn elements(&self) -> u64 {
        u64::from(self.rows) * u64::from(self.cols)
    }

    /// Dynamic shared memory of the fused kernel: the row, `4 · cols` bytes.
    pub fn fused_shared_bytes(&self) -> u32 {
        4 * self.cols
    }
}

impl Workload for SoftmaxSpec {
    fn name(&self) -> String {
        format!(
            "softmax {} {}x{}",
            if self.fused { "fused" } else { "composed" },
            self.rows,
            self.cols
        )
    }

    fn launches(&self) -> Vec<Launch> {
        let n = self.elements();
        let r = u64::from(self.rows);
        if self.fused {
            return vec![Launch {
                kernel: FUSED,
                grid: [self.rows, 1, 1],
                block: [BLOCK, 1, 1],
                dynamic_shared_bytes: self.fused_shared_bytes(),
                work: Work {
                    bytes: 8 * n,
                    flops: 5 * n,
                },
            }];
        }
        let elementwise = grid_dim(n, u64::from(BLOCK));
        vec![
            Launch::linear(
                COMPOSED[0],
                self.rows,
                BLOCK,
                Work {
                    bytes: 4 * n + 4 * r,
                    flops: n,
                },
            ),
            Launch::linear(
                COMPOSED[1],
                elementwise,
                BLOCK,
                Work {
                    bytes: 8 * n + 4 * r,
                    flops: n,
                },
            ),
            Launch::linear(
                COMPOSED[2],
                elementwise,
                BLOCK,
                Work {
                    bytes: 8 * n,
                    flops: n,
                },
            ),
            Launch::linear(
                COMPOSED[3],
                self.rows,
                BLOCK,
                Work {
                    bytes: 4 * n + 4 * r,
                    flops: n,
                },
            ),
            Launch::linear(
                COMPOSED[4],
                elementwise,
                BLOCK,
                Work {
                    bytes: 8 * n + 4 * r,
                    flops: n,
                },
            ),
        ]
    }

    fn tolerance(&self) -> f64 {
        1e-5
    }
}

/// CPU reference: the row softmax in float64.
pub fn reference(x: &[f32], rows: usize, cols: usize) -> Vec<f64> {
    let mut out = vec![0.0f64; rows * cols];
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let m = row
            .iter()
            .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
        let dst = &mut out[r * cols..(r + 1) * cols];
        let mut sum = 0.0;
        for (d, &v) in dst.iter_mut().zip(row) {
            *d = (f64::from(v) - m).exp();
            sum += *d;
        }
        for d in dst.iter_mut() {
            *d /= sum;
        }
    }
    out
}

/// The six softmax kernels, compiled.
#[derive(Debug, Clone)]
pub struct SoftmaxKernels {
    composed: [CudaFunction; 5],
    fused: CudaFunction,
}

impl SoftmaxKernels {
    /// Compiles `kernels/softmax.cu` and lets the fused kernel use up to 128 KiB of dynamic
    /// shared memory ([`MAX_FUSED_COLS`] floats).
    ///
    /// # Errors
    /// As [`crate::kernels::compile`], a missing function, or the attribute call's error.
    pub fn load(ctx: &Arc<CudaContext>) -> SuiteResult<Self> {
        let [max, subtract, exp, sum, divide, fused] = load_functions(
            ctx,
            MODULE,
            [
                COMPOSED[0],
                COMPOSED[1],
                COMPOSED[2],
                COMPOSED[3],
                COMPOSED[4],
                FUSED,
            ],
        )?;
        fused.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            (MAX_FUSED_COLS * 4) as i32,
        )?;
        Ok(SoftmaxKernels {
            composed: [max, subtract, exp, sum, divide],
            fused,
        })
    }
}

impl SoftmaxKernels {
    /// Enqueues the fused softmax of `x` (rows × cols) into `y`.
    ///
    /// # Errors
    /// A row too long to stay on chip, buffers shorter than rows × cols, or a launch failure.
    pub fn launch_fused(
        &self,
        stream: &Arc<CudaStream>,
        rows: u32,
        cols: u32,
        x: &CudaSlice<f32>,
        y: &mut CudaSlice<f32>,
    ) -> SuiteResult<()> {
        let spec = SoftmaxSpec::new(rows, cols, true);
        check_shape(&spec, x.len().min(y.len()))?;
        let mut l = stream.launch_builder(&self.fused);
        l.arg(x).arg(y).arg(&cols);
        // SAFETY: matches `(const float*, float*, unsigned)`; x and y hold rows × cols floats;
        // the dynamic shared memory (4 · cols bytes) is within the opt-in limit set at load time.
        unsafe { l.launch(spec.launches()[0].config()) }?;
        Ok(())
    }
}

fn check_shape(spec: &SoftmaxSpec, len: usize) -> SuiteResult<()> {
    if spec.cols == 0 || spec.cols > MAX_FUSED_COLS || spec.rows == 0 {
        return Err(SuiteError::Shape(format!(
            "softmax rows of {} columns (1..={MAX_FUSED_COLS}, so that a row fits on chip)",
            spec.cols
        )));
    }
    if (len as u64) < spec.elements() {
        return Err(SuiteError::Shape(format!(
            "softmax of {} elements, but a buffer holds {len}",
            spec.elements()
        )));
    }
    Ok(())
}

/// A softmax with its buffers: x uniform in [-4, 4) from the seed; the composition's two
/// intermediates and the row statistics are separate buffers, as a framework's tensors are.
pub struct SoftmaxGpu {
    stream: Arc<CudaStream>,
    kernels: SoftmaxKernels,
    spec: SoftmaxSpec,
    x_host: Vec<f32>,
    x: CudaSlice<f32>,
    shifted: CudaSlice<f32>,
    exps: CudaSlice<f32>,
    row_max: CudaSlice<f32>,
    row_sum: CudaSlice<f32>,
    y: CudaSlice<f32>,
}

impl SoftmaxGpu {
    /// Allocates and uploads.
    ///
    /// # Errors
    /// A row too long for the fused kernel, or a driver error.
    pub fn new(
        stream: &Arc<CudaStream>,
        kernels: &SoftmaxKernels,
        spec: SoftmaxSpec,
        seed: u64,
    ) -> SuiteResult<Self> {
        check_shape(&spec, spec.elements() as usize)?;
        let n = spec.elements() as usize;
        let x_host = Rng::new(seed).vec(n, -4.0, 4.0);
        let x = upload(stream, &x_host)?;
        Ok(SoftmaxGpu {
            stream: stream.clone(),
            kernels: kernels.clone(),
            x_host,
            x,
            shifted: stream.alloc_zeros::<f32>(n)?,
            exps: stream.alloc_zeros::<f32>(n)?,
            row_max: stream.alloc_zeros::<f32>(spec.rows as usize)?,
            row_sum: stream.alloc_zeros::<f32>(spec.rows as usize)?,
            y: stream.alloc_zeros::<f32>(n)?,
            spec,
        })
    }

    /// Switches between the fused kernel and the composition (the buffers are kept).
    pub fn set_fused(&mut self, fused: bool) {
        self.spec.fused = fused;
    }

    /// The output, copied back (synchronizes).
    ///
    /// # Errors
    /// A driver error.
    pub fn output(&self) -> SuiteResult<Vec<f32>> {
        download(&self.stream, &self.y, self.y.len())
    }
}

impl GpuWorkload for SoftmaxGpu {
    spec_stream_and_poison!(shifted, exps, row_max, row_sum, y);

    fn run(&mut self) -> SuiteResult<()> {
        self.run_each(&mut |_| Ok(()))
    }

    fn run_each(&mut self, before: &mut dyn FnMut(usize) -> SuiteResult<()>) -> SuiteResult<()> {
        let launches = self.spec.launches();
        let n = self.spec.elements();
        let cols = self.spec.cols;
        let s = &self.stream;
        if self.spec.fused {
            before(0)?;
            return self
                .kernels
                .launch_fused(s, self.spec.rows, cols, &self.x, &mut self.y);
        }
        let k = &self.kernels.composed;
        before(0)?;
        let mut l = s.launch_builder(&k[0]);
        l.arg(&self.x).arg(&mut self.row_max).arg(&cols);
        // SAFETY: matches `(const float*, float*, unsigned)`: one block per row of x, one
        // output per row.
        unsafe { l.launch(launches[0].config()) }?;
        before(1)?;
        let mut l = s.launch_builder(&k[1]);
        l.arg(&self.x)
            .arg(&self.row_max)
            .arg(&mut self.shifted)
            .arg(&n)
            .arg(&cols);
        // SAFETY: matches `(const float*, const float*, float*, unsigned long long, unsigned)`;
        // x and shifted hold n floats, row_max one per row.
        unsafe { l.launch(launches[1].config()) }?;
        before(2)?;
        let mut l = s.launch_builder(&k[2]);
        l.arg(&self.shifted).arg(&mut self.exps).arg(&n);
        // SAFETY: matches `(const float*, float*, unsigned long long)`; both hold n floats.
        unsafe { l.launch(launches[2].config()) }?;
        before(3)?;
        let mut l = s.launch_builder(&k[3]);
        l.arg(&self.exps).arg(&mut self.row_sum).arg(&cols);
        // SAFETY: as the row max.
        unsafe { l.launch(launches[3].config()) }?;
        before(4)?;
        let mut l = s.launch_builder(&k[4]);
        l.arg(&self.exps)
            .arg(&self.row_sum)
            .arg(&mut self.y)
            .arg(&n)
            .arg(&cols);
        // SAFETY: as the subtraction.
        unsafe { l.launch(launches[4].config()) }?;
        Ok(())
    }

    fn verify(&mut self) -> SuiteResult<Verification> {
        let out = self.output()?;
        Ok(Verification::compare(
            self.spec.name(),
            &out,
            &reference(
                &self.x_host,
                self.spec.rows as usize,
                self.spec.cols as usize,
            ),
            self.spec.tolerance(),
        ))
    }
}
