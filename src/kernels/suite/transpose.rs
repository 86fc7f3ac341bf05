//! Matrix transpose (`kernels/transpose.cu`, example `ex2_transpose`): direct with strided stores,
//! shared-memory tiled, tiled with one padding column. Same launch structure for all three.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, PushKernelArg};

use super::{
    download, load_functions, to_u32, upload, GpuWorkload, Launch, Padding, Rng, SuiteError,
    SuiteResult, Verification, Workload,
};
use crate::kernels::Work;

/// The kernel file.
pub const MODULE: &str = "transpose";

/// Tile edge (elements); a block moves one tile.
pub const TILE: u32 = 32;
/// Rows of the tile a block's threads cover at once (block is `TILE × BLOCK_ROWS`).
pub const BLOCK_ROWS: u32 = 8;

/// How a tile reaches its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransposeVariant {
    /// Global to global, stores strided by `rows`.
    Direct,
    /// Through `__shared__ float tile[32][32]` (32-way bank conflicts on the column read).
    Tiled,
    /// Through `__shared__ float tile[32][33]` (no bank conflicts).
    Padded,
}

impl TransposeVariant {
    /// All three, from the direct transpose to the padded tile.
    pub const ALL: [TransposeVariant; 3] = [
        TransposeVariant::Direct,
        TransposeVariant::Tiled,
        TransposeVariant::Padded,
    ];

    /// The kernel name.
    pub fn kernel(self) -> &'static str {
        match self {
            TransposeVariant::Direct => "transpose_direct",
            TransposeVariant::Tiled => "transpose_tiled",
            TransposeVariant::Padded => "transpose_padded",
        }
    }

    /// Static shared memory per block, bytes.
    pub fn static_shared_bytes(self) -> u32 {
        match self {
            TransposeVariant::Direct => 0,
            TransposeVariant::Tiled => TILE * TILE * 4,
            TransposeVariant::Padded => TILE * (TILE + 1) * 4,
        }
    }
}

/// `out (cols × rows) = in (rows × cols)ᵀ`, row-major f32.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransposeSpec {
    /// Rows of the input.
    pub rows: u32,
    /// Columns of the input.
    pub cols: u32,
    /// Which kernel.
    pub variant: TransposeVariant,
}

impl TransposeSpec {
    /// A transpose of a `rows × cols` matrix.
    pub fn new(rows: u32, cols: u32, variant: TransposeVariant) -> Self {
        TransposeSpec {
            rows,
            cols,
            variant,
        }
    }

    /// Grid: one block per 32×32 tile, `(ceil(cols/32), ceil(rows/32))`.
    pub fn grid(&self) -> [u32; 3] {
        [self.cols.div_ceil(TILE), self.rows.div_ceil(TILE), 1]
    }

    /// Elements.
    pub fn elements(&self) -> u64 {
        u64::from(self.rows) * u64::from(self.cols)
    }
}

impl Workload for TransposeSpec {
    fn name(&self) -> String {
        format!("{} {}x{}", self.variant.kernel(), self.rows, self.cols)
    }

    fn launches(&self) -> Vec<Launch> {
        vec![Launch {
            kernel: self.variant.kernel(),
            grid: self.grid(),
            block: [TILE, BLOCK_ROWS, 1],
            dynamic_shared_bytes: 0,
            work: Work {
                bytes: 8 * self.elements(),
                flops: 0,
            },
        }]
    }

    fn padding(&self) -> Option<Padding> {
        Some(Padding {
            useful: vec![u64::from(self.rows), u64::from(self.cols)],
            padded: vec![
                super::round_up(u64::from(self.rows), u64::from(TILE)),
                super::round_up(u64::from(self.cols), u64::from(TILE)),
            ],
        })
    }

    fn tolerance(&self) -> f64 {
        0.0 // a permutation: exact
    }
}

/// CPU reference: the transpose of a `rows × cols` row-major matrix.
pub fn reference(input: &[f32], rows: usize, cols: usize) -> Vec<f64> {
    let mut out = vec![0.0f64; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = f64::from(input[r * cols + c]);
        }
    }
    out
}

/// The three transpose kernels, compiled.
#[derive(Debug, Clone)]
pub struct TransposeKernels {
    functions: [CudaFunction; 3],
}

impl TransposeKernels {
    /// Compiles `kernels/transpose.cu`.
    ///
    /// # Errors
    /// As [`crate::kernels::compile`], or a missing function.
    pub fn load(ctx: &Arc<CudaContext>) -> SuiteResult<Self> {
        let names = TransposeVariant::ALL.map(TransposeVariant::kernel);
        let functions = load_functions(ctx, MODULE, names)?;
        Ok(TransposeKernels { functions })
    }

    /// Enqueues `spec`'s transpose of `input` into `output`.
    ///
    /// # Errors
    /// Buffers shorter than `rows × cols`, or a launch failure.
    pub fn launch(
        &self,
        stream: &Arc<CudaStream>,
        spec: &TransposeSpec,
        input: &CudaSlice<f32>,
        output: &mut CudaSlice<f32>,
    ) -> SuiteResult<()> {
        let n = spec.elements();
        if n as usize > input.len().min(output.len()) {
            return Err(SuiteError::Shape(format!(
                "transpose of {n} elements, but a buffer holds fewer"
            )));
        }
        to_u32(n, "transpose elements")?;
        let idx = TransposeVariant::ALL
            .iter()
            .position(|&v| v == spec.variant)
            .expect("variant in ALL");
        let cfg = spec.launches()[0].config();
        let mut l = stream.launch_builder(&self.functions[idx]);
        l.arg(input).arg(output).arg(&spec.rows).arg(&spec.cols);
        // SAFETY: the arguments match `(const float*, float*, unsigned int, unsigned int)`, and
        // both buffers hold rows × cols floats, the most the kernel indexes.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }
}

/// A transpose with its buffers: the input uniform in [-1, 1) from the seed.
pub struct TransposeGpu {
    stream: Arc<CudaStream>,
    kernels: TransposeKernels,
    spec: TransposeSpec,
    input_host: Vec<f32>,
    input: CudaSlice<f32>,
    output: CudaSlice<f32>,
}

impl TransposeGpu {
    /// Allocates and uploads.
    ///
    /// # Errors
    /// A driver error.
    pub fn new(
        stream: &Arc<CudaStream>,
        kernels: &TransposeKernels,
        spec: TransposeSpec,
        seed: u64,
    ) -> SuiteResult<Self> {
        let n = spec.elements() as usize;
        let input_host = Rng::new(seed).vec(n, -1.0, 1.0);
        let input = upload(stream, &input_host)?;
        let output = stream.alloc_zeros::<f32>(n.max(1))?;
        Ok(TransposeGpu {
            stream: stream.clone(),
            kernels: kernels.clone(),
            spec,
            input_host,
            input,
            output,
        })
    }

    /// Switches to another variant of the same shape (the buffers are kept).
    pub fn set_variant(&mut self, variant: TransposeVariant) {
        self.spec.variant = variant;
    }
}

impl GpuWorkload for TransposeGpu {
    spec_stream_and_poison!(output);

    fn run(&mut self) -> SuiteResult<()> {
        self.kernels
            .launch(&self.stream, &self.spec, &self.input, &mut self.output)
    }

    fn verify(&mut self) -> SuiteResult<Verification> {
        let out = download(&self.stream, &self.output, self.spec.elements() as usize)?;
        Ok(Verification::compare(
            self.spec.name(),
            &out,
            &reference(
                &self.input_host,
                self.spec.rows as usize,
                self.spec.cols as usize,
            ),
            self.spec.tolerance(),
        ))
    }
}
