//! Vector addition (`kernels/vadd.cu`): scalar and 16-byte vectorized, each with a grid-stride
//! option; and the device-to-device copy that is its bandwidth reference. The scalar kernel is the
//! one [`crate::kernels::VectorAdd`] launches.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, PushKernelArg};

use super::{
    download, grid_dim, load_functions, upload, GpuWorkload, Launch, Rng, SuiteError, SuiteResult,
    Verification, Workload,
};
use crate::kernels::{VectorAdd, Work};

/// The kernel file.
pub const MODULE: &str = VectorAdd::MODULE;

/// Width of each thread's accesses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VaddVariant {
    /// 4-byte loads and stores, one element per thread.
    Scalar,
    /// 16-byte (`float4`) loads and stores, four elements per thread.
    Vec4,
}

/// `c = a + b` over `n` floats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VectorAddSpec {
    /// Elements.
    pub n: u64,
    /// Access width.
    pub variant: VaddVariant,
    /// `Some(blocks)`: the grid-stride kernel with this fixed grid; `None`: one thread per
    /// element (per four elements for [`VaddVariant::Vec4`]).
    pub grid_stride_blocks: Option<u32>,
    /// Threads per block.
    pub block: u32,
}

impl VectorAddSpec {
    /// One thread per element (or per 4), 256-thread blocks.
    pub fn new(n: u64, variant: VaddVariant) -> Self {
        VectorAddSpec {
            n,
            variant,
            grid_stride_blocks: None,
            block: 256,
        }
    }

    /// The grid-stride kernel with a fixed grid of `blocks`.
    #[must_use]
    pub fn grid_stride(mut self, blocks: u32) -> Self {
        self.grid_stride_blocks = Some(blocks.max(1));
        self
    }

    /// The kernel this spec launches.
    pub fn kernel(&self) -> &'static str {
        match (self.variant, self.grid_stride_blocks.is_some()) {
            (VaddVariant::Scalar, false) => VectorAdd::KERNEL,
            (VaddVariant::Vec4, false) => "vadd_vec4",
            (VaddVariant::Scalar, true) => "vadd_scalar_grid_stride",
            (VaddVariant::Vec4, true) => "vadd_vec4_grid_stride",
        }
    }

    /// Threads the one-thread-per-item kernel needs: `n`, or for float4 `max(n/4, n%4)` (the
    /// first `n % 4` threads also do the tail).
    pub fn items(&self) -> u64 {
        match self.variant {
            VaddVariant::Scalar => self.n,
            VaddVariant::Vec4 => (self.n / 4).max(self.n % 4),
        }
    }

    /// Blocks in the grid.
    pub fn grid(&self) -> u32 {
        match self.grid_stride_blocks {
            Some(b) => b,
            None => grid_dim(self.items(), u64::from(self.block)),
        }
    }

    /// Analytic work: 8n bytes read, 4n written, n additions.
    pub fn work_for(n: u64) -> Work {
        VectorAdd::work(n)
    }
}

impl Workload for VectorAddSpec {
    fn name(&self) -> String {
        match self.grid_stride_blocks {
            Some(b) => format!("{} n={} blocks={b}", self.kernel(), self.n),
            None => format!("{} n={}", self.kernel(), self.n),
        }
    }

    fn launches(&self) -> Vec<Launch> {
        vec![Launch::linear(
            self.kernel(),
            self.grid(),
            self.block,
            Self::work_for(self.n),
        )]
    }

    fn tolerance(&self) -> f64 {
        // One rounding of an exact sum.
        1e-6
    }
}

/// CPU reference: `a + b` in float64.
pub fn reference(a: &[f32], b: &[f32]) -> Vec<f64> {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) + f64::from(y))
        .collect()
}

/// The four vector-add kernels, compiled.
#[derive(Debug, Clone)]
pub struct VaddKernels {
    scalar: CudaFunction,
    vec4: CudaFunction,
    scalar_gs: CudaFunction,
    vec4_gs: CudaFunction,
}

impl VaddKernels {
    /// Compiles `kernels/vadd.cu` for `ctx`'s device.
    ///
    /// # Errors
    /// As [`crate::kernels::compile`], or a missing function.
    pub fn load(ctx: &Arc<CudaContext>) -> SuiteResult<Self> {
        let [scalar, vec4, scalar_gs, vec4_gs] = load_functions(
            ctx,
            MODULE,
            [
                VectorAdd::KERNEL,
                "vadd_vec4",
                "vadd_scalar_grid_stride",
                "vadd_vec4_grid_stride",
            ],
        )?;
        Ok(VaddKernels {
            scalar,
            vec4,
            scalar_gs,
            vec4_gs,
        })
    }

    /// Enqueues `c = a + b` over the first `spec.n` elements.
    ///
    /// # Errors
    /// A slice shorter than `n`, or a launch failure.
    pub fn launch(
        &self,
        stream: &Arc<CudaStream>,
        spec: &VectorAddSpec,
        a: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        c: &mut CudaSlice<f32>,
    ) -> SuiteResult<()> {
        let n = spec.n;
        if n as usize > a.len().min(b.len()).min(c.len()) {
            return Err(SuiteError::Shape(format!(
                "vector add over {n} elements, but a buffer holds fewer"
            )));
        }
        let f = match (spec.variant, spec.grid_stride_blocks.is_some()) {
            (VaddVariant::Scalar, false) => &self.scalar,
            (VaddVariant::Vec4, false) => &self.vec4,
            (VaddVariant::Scalar, true) => &self.scalar_gs,
            (VaddVariant::Vec4, true) => &self.vec4_gs,
        };
        let cfg = spec.launches()[0].config();
        let mut l = stream.launch_builder(f);
        l.arg(a).arg(b).arg(c).arg(&n);
        // SAFETY: the arguments match `(const float*, const float*, float*, unsigned long long)`;
        // every buffer holds at least n floats and is 256-byte aligned (cudarc allocations), as
        // the float4 kernels need.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }
}

/// A vector add with its buffers: `a`, `b` uniform in [-1, 1) from the seed.
pub struct VectorAddGpu {
    stream: Arc<CudaStream>,
    kernels: VaddKernels,
    spec: VectorAddSpec,
    a_host: Vec<f32>,
    b_host: Vec<f32>,
    a: CudaSlice<f32>,
    b: CudaSlice<f32>,
    c: CudaSlice<f32>,
}

impl VectorAddGpu {
    /// Allocates and uploads the inputs.
    ///
    /// # Errors
    /// A driver error.
    pub fn new(
        stream: &Arc<CudaStream>,
        kernels: &VaddKernels,
        spec: VectorAddSpec,
        seed: u64,
    ) -> SuiteResult<Self> {
        let n = spec.n as usize;
        let mut rng = Rng::new(seed);
        let a_host = rng.vec(n, -1.0, 1.0);
        let b_host = rng.vec(n, -1.0, 1.0);
        let a = upload(stream, &a_host)?;
        let b = upload(stream, &b_host)?;
        let c = stream.alloc_zeros::<f32>(n.max(1))?;
        Ok(VectorAddGpu {
            stream: stream.clone(),
            kernels: kernels.clone(),
            spec,
            a_host,
            b_host,
            a,
            b,
            c,
        })
    }
}

impl GpuWorkload for VectorAddGpu {
    spec_stream_and_poison!(c);

    fn run(&mut self) -> SuiteResult<()> {
        self.kernels
            .launch(&self.stream, &self.spec, &self.a, &self.b, &mut self.c)
    }

    fn verify(&mut self) -> SuiteResult<Verification> {
        let out = download(&self.stream, &self.c, self.spec.n as usize)?;
        Ok(Verification::compare(
            self.spec.name(),
            &out,
            &reference(&self.a_host, &self.b_host),
            self.spec.tolerance(),
        ))
    }
}

/// A device-to-device copy (`cuMemcpyDtoDAsync`) of `n` floats: the bandwidth reference of the
/// vector add. It moves `8n` bytes (read and write) and launches no kernel: the ledger records it
/// as a `DtoD` copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceCopySpec {
    /// Floats copied.
    pub n: u64,
}

impl Workload for DeviceCopySpec {
    fn name(&self) -> String {
        format!("memcpy DtoD n={}", self.n)
    }

    fn launches(&self) -> Vec<Launch> {
        Vec::new()
    }

    fn work(&self) -> Work {
        Work {
            bytes: 8 * self.n,
            flops: 0,
        }
    }

    fn tolerance(&self) -> f64 {
        0.0
    }
}

/// A device-to-device copy with its buffers.
pub struct DeviceCopyGpu {
    stream: Arc<CudaStream>,
    spec: DeviceCopySpec,
    src_host: Vec<f32>,
    src: CudaSlice<f32>,
    dst: CudaSlice<f32>,
}

impl DeviceCopyGpu {
    /// Allocates the buffers; the source is uniform in [-1, 1) from the seed.
    ///
    /// # Errors
    /// A driver error.
    pub fn new(stream: &Arc<CudaStream>, spec: DeviceCopySpec, seed: u64) -> SuiteResult<Self> {
        let src_host = Rng::new(seed).vec(spec.n as usize, -1.0, 1.0);
        let src = upload(stream, &src_host)?;
        let dst = stream.alloc_zeros::<f32>((spec.n as usize).max(1))?;
        Ok(DeviceCopyGpu {
            stream: stream.clone(),
            spec,
            src_host,
            src,
            dst,
        })
    }
}

impl GpuWorkload for DeviceCopyGpu {
    spec_stream_and_poison!(dst);

    fn run(&mut self) -> SuiteResult<()> {
        self.stream.memcpy_dtod(&self.src, &mut self.dst)?;
        Ok(())
    }

    fn verify(&mut self) -> SuiteResult<Verification> {
        let out = download(&self.stream, &self.dst, self.spec.n as usize)?;
        let reference: Vec<f64> = self.src_host.iter().map(|&x| f64::from(x)).collect();
        Ok(Verification::compare(
            self.spec.name(),
            &out,
            &reference,
            0.0,
        ))
    }
}
