//! Local memory (`kernels/spill.cu`, example `ex7_spill`): a per-thread array indexed with a
//! data-dependent index lives in local memory; the same computation with compile-time indices stays
//! in registers.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, PushKernelArg};

use super::{
    download, grid_dim, load_functions, to_u32, upload, GpuWorkload, Launch, Rng, SuiteResult,
    Verification, Workload,
};
use crate::kernels::Work;

/// The kernel file.
pub const MODULE: &str = "spill";

/// Accumulators per thread (`SLOTS` in the source): 128 bytes of local memory when spilled.
pub const SLOTS: u32 = 32;

/// Threads per block.
pub const BLOCK: u32 = 256;

/// The per-thread bucket sum, with or without the dynamically indexed array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillSpec {
    /// Threads, each with its own accumulators.
    pub threads: u32,
    /// Values each thread reads.
    pub iters: u32,
    /// `spill_dynamic_index` (true) or `spill_free`.
    pub dynamic: bool,
}

impl SpillSpec {
    /// The kernel name.
    pub fn kernel(&self) -> &'static str {
        if self.dynamic {
            "spill_dynamic_index"
        } else {
            "spill_free"
        }
    }
}

impl Workload for SpillSpec {
    fn name(&self) -> String {
        format!(
            "{} threads={} iters={}",
            self.kernel(),
            self.threads,
            self.iters
        )
    }

    fn launches(&self) -> Vec<Launch> {
        let (t, i) = (u64::from(self.threads), u64::from(self.iters));
        vec![Launch::linear(
            self.kernel(),
            grid_dim(t, u64::from(BLOCK)),
            BLOCK,
            Work {
                bytes: 4 * t * i + 4 * t,
                flops: t * (i + 2 * u64::from(SLOTS)),
            },
        )]
    }

    fn tolerance(&self) -> f64 {
        1e-5
    }
}

/// CPU reference: for each thread, `Σ_s acc[s]·(s+1)` where `acc[s]` sums the values whose low
/// 5 mantissa bits are `s`, in float64.
pub fn reference(x: &[f32], threads: usize, iters: usize) -> Vec<f64> {
    (0..threads)
        .map(|t| {
            let mut acc = [0.0f64; SLOTS as usize];
            for i in 0..iters {
                let v = x[i * threads + t];
                acc[(v.to_bits() & (SLOTS - 1)) as usize] += f64::from(v);
            }
            acc.iter()
                .enumerate()
                .map(|(s, &a)| a * (s + 1) as f64)
                .sum()
        })
        .collect()
}

/// Both kernels, compiled.
#[derive(Debug, Clone)]
pub struct SpillKernels {
    dynamic: CudaFunction,
    free: CudaFunction,
}

impl SpillKernels {
    /// Compiles `kernels/spill.cu`.
    ///
    /// # Errors
    /// As [`crate::kernels::compile`], or a missing function.
    pub fn load(ctx: &Arc<CudaContext>) -> SuiteResult<Self> {
        let [dynamic, free] = load_functions(ctx, MODULE, ["spill_dynamic_index", "spill_free"])?;
        Ok(SpillKernels { dynamic, free })
    }

    /// Local memory per thread of each kernel as the driver reports it
    /// (`CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES`): `(dynamic, free)`.
    ///
    /// # Errors
    /// A driver error.
    pub fn local_bytes(&self) -> SuiteResult<(i32, i32)> {
        Ok((
            self.dynamic.local_size_bytes()?,
            self.free.local_size_bytes()?,
        ))
    }
}

/// The bucket sum with its buffers: x uniform in [0.5, 1.5) from the seed.
pub struct SpillGpu {
    stream: Arc<CudaStream>,
    kernels: SpillKernels,
    spec: SpillSpec,
    x_host: Vec<f32>,
    x: CudaSlice<f32>,
    out: CudaSlice<f32>,
}

impl SpillGpu {
    /// Allocates and uploads.
    ///
    /// # Errors
    /// A shape over 32 bits, or a driver error.
    pub fn new(
        stream: &Arc<CudaStream>,
        kernels: &SpillKernels,
        spec: SpillSpec,
        seed: u64,
    ) -> SuiteResult<Self> {
        let n = u64::from(spec.threads) * u64::from(spec.iters);
        to_u32(u64::from(spec.threads.max(1)), "threads")?;
        let x_host = Rng::new(seed).vec(n as usize, 0.5, 1.5);
        Ok(SpillGpu {
            stream: stream.clone(),
            kernels: kernels.clone(),
            x: upload(stream, &x_host)?,
            out: stream.alloc_zeros::<f32>(spec.threads.max(1) as usize)?,
            spec,
            x_host,
        })
    }

    /// Switches between the two kernels (the buffers are kept).
    pub fn set_dynamic(&mut self, dynamic: bool) {
        self.spec.dynamic = dynamic;
    }
}

impl GpuWorkload for SpillGpu {
    spec_stream_and_poison!(out);

    fn run(&mut self) -> SuiteResult<()> {
        let f = if self.spec.dynamic {
            &self.kernels.dynamic
        } else {
            &self.kernels.free
        };
        let (threads, iters) = (self.spec.threads, self.spec.iters);
        let cfg = self.spec.launches()[0].config();
        let mut l = self.stream.launch_builder(f);
        l.arg(&self.x).arg(&mut self.out).arg(&threads).arg(&iters);
        // SAFETY: matches `(const float*, float*, unsigned, unsigned)`; x holds
        // threads · iters floats and out one per thread.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    fn verify(&mut self) -> SuiteResult<Verification> {
        let out = download(&self.stream, &self.out, self.spec.threads as usize)?;
        Ok(Verification::compare(
            self.spec.name(),
            &out,
            &reference(
                &self.x_host,
                self.spec.threads as usize,
                self.spec.iters as usize,
            ),
            self.spec.tolerance(),
        ))
    }
}
