//! Reduction (`kernels/reduce.cu`, example `ex3_reduction`): shared-memory tree and warp-shuffle
//! block sums, a second-pass launch over the per-block partials, and a consumer (`y = x / sum`)
//! either after the second pass or with the second pass fused into it.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, PushKernelArg};

use super::{
    download, load_functions, upload, GpuWorkload, Launch, Rng, SuiteError, SuiteResult,
    Verification, Workload,
};
use crate::kernels::Work;

/// The kernel file.
pub const MODULE: &str = "reduce";

/// Threads per block of every reduction kernel (`RED_BLOCK` in the source).
pub const BLOCK: u32 = 256;

/// Largest partial count the second pass accepts in one block, by design of the suite (each
/// thread sums `count / 256` partials).
pub const MAX_PARTIALS: u32 = 1 << 16;

/// How a block sums its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceVariant {
    /// Shared-memory tree with a barrier per level (`reduce_tree_partials`).
    Tree,
    /// Warp shuffles, one shared stage (`reduce_shuffle_partials`).
    Shuffle,
}

impl ReduceVariant {
    /// The first-pass kernel.
    pub fn kernel(self) -> &'static str {
        match self {
            ReduceVariant::Tree => "reduce_tree_partials",
            ReduceVariant::Shuffle => "reduce_shuffle_partials",
        }
    }
}

/// What follows the first pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceMode {
    /// Second pass only: the sum in `total[0]` (2 launches).
    Sum,
    /// Second pass, then the consumer `y = x / total` (3 launches).
    Unfused,
    /// The consumer sums the partials itself (`scale_by_partials`, 2 launches).
    Fused,
}

/// Sum of `n` floats over `blocks` partials, and what consumes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReductionSpec {
    /// Elements.
    pub n: u64,
    /// First-pass block sum.
    pub variant: ReduceVariant,
    /// What follows.
    pub mode: ReduceMode,
    /// Blocks of the first pass and of the consumer (= partials).
    pub blocks: u32,
}

impl ReductionSpec {
    /// `blocks` = 8 per SM (2048 resident threads per SM at 256 per block), and never more than
    /// the blocks needed to give every thread one element.
    pub fn for_device(n: u64, variant: ReduceVariant, mode: ReduceMode, sm_count: u32) -> Self {
        let needed = n.div_ceil(u64::from(BLOCK)).max(1);
        let blocks = u64::from(sm_count.max(1) * 8)
            .min(needed)
            .min(u64::from(MAX_PARTIALS));
        ReductionSpec {
            n,
            variant,
            mode,
            blocks: blocks as u32,
        }
    }
}

impl Workload for ReductionSpec {
    fn name(&self) -> String {
        let mode = match self.mode {
            ReduceMode::Sum => "sum",
            ReduceMode::Unfused => "second pass + consumer",
            ReduceMode::Fused => "fused into consumer",
        };
        format!(
            "{} n={} blocks={} ({mode})",
            self.variant.kernel(),
            self.n,
            self.blocks
        )
    }

    fn launches(&self) -> Vec<Launch> {
        let (n, p) = (self.n, u64::from(self.blocks));
        let first = Launch::linear(
            self.variant.kernel(),
            self.blocks,
            BLOCK,
            Work {
                bytes: 4 * n + 4 * p,
                flops: n,
            },
        );
        let second = Launch::linear(
            "reduce_second_pass",
            1,
            BLOCK,
            Work {
                bytes: 4 * p + 4,
                flops: p,
            },
        );
        let consumer = Launch::linear(
            "scale_by_total",
            self.blocks,
            BLOCK,
            Work {
                bytes: 8 * n + 4,
                flops: n,
            },
        );
        // DRAM bytes: x and y once, the partials once (every block re-reads them from L2).
        let fused = Launch::linear(
            "scale_by_partials",
            self.blocks,
            BLOCK,
            Work {
                bytes: 8 * n + 4 * p,
                flops: n + p * p,
            },
        );
        match self.mode {
            ReduceMode::Sum => vec![first, second],
            ReduceMode::Unfused => vec![first, second, consumer],
            ReduceMode::Fused => vec![first, fused],
        }
    }

    fn tolerance(&self) -> f64 {
        // float32 partial sums against a float64 sum.
        1e-5
    }
}

/// CPU reference: the float64 sum.
pub fn reference_sum(x: &[f32]) -> f64 {
    x.iter().map(|&v| f64::from(v)).sum()
}

/// CPU reference of the consumer: `x / sum` in float64.
pub fn reference_scaled(x: &[f32], sum: f64) -> Vec<f64> {
    x.iter().map(|&v| f64::from(v) / sum).collect()
}

/// The reduction kernels, compiled.
#[derive(Debug, Clone)]
pub struct ReduceKernels {
    tree: CudaFunction,
    shuffle: CudaFunction,
    second: CudaFunction,
    scale_total: CudaFunction,
    scale_partials: CudaFunction,
}

impl ReduceKernels {
    /// Compiles `kernels/reduce.cu`.
    ///
    /// # Errors
    /// As [`crate::kernels::compile`], or a missing function.
    pub fn load(ctx: &Arc<CudaContext>) -> SuiteResult<Self> {
        let [tree, shuffle, second, scale_total, scale_partials] = load_functions(
            ctx,
            MODULE,
            [
                "reduce_tree_partials",
                "reduce_shuffle_partials",
                "reduce_second_pass",
                "scale_by_total",
                "scale_by_partials",
            ],
        )?;
        Ok(ReduceKernels {
            tree,
            shuffle,
            second,
            scale_total,
            scale_partials,
        })
    }
}

impl ReduceKernels {
    /// Enqueues the first pass and the second pass of `spec` (its mode is ignored): the sum of
    /// the first `spec.n` floats of `x` into `total[0]`, through `partials` (one per block).
    ///
    /// # Errors
    /// Buffers too short, or a launch failure.
    pub fn launch_sum(
        &self,
        stream: &Arc<CudaStream>,
        spec: &ReductionSpec,
        x: &CudaSlice<f32>,
        partials: &mut CudaSlice<f32>,
        total: &mut CudaSlice<f32>,
    ) -> SuiteResult<()> {
        if (x.len() as u64) < spec.n || partials.len() < spec.blocks as usize || total.is_empty() {
            return Err(SuiteError::Shape(format!(
                "sum of {} floats over {} partials: a buffer is too short",
                spec.n, spec.blocks
            )));
        }
        let sum = ReductionSpec {
            mode: ReduceMode::Sum,
            ..spec.clone()
        };
        let launches = sum.launches();
        self.first_pass(stream, spec, x, partials, &launches[0])?;
        self.second_pass(stream, spec.blocks, partials, total, &launches[1])
    }

    fn second_pass(
        &self,
        stream: &Arc<CudaStream>,
        count: u32,
        partials: &CudaSlice<f32>,
        total: &mut CudaSlice<f32>,
        launch: &Launch,
    ) -> SuiteResult<()> {
        let mut l = stream.launch_builder(&self.second);
        l.arg(partials).arg(&count).arg(total);
        // SAFETY: matches `(const float*, unsigned int, float*)`; partials holds `count` floats
        // and total at least one (checked by the callers).
        unsafe { l.launch(launch.config()) }?;
        Ok(())
    }

    fn first_pass(
        &self,
        stream: &Arc<CudaStream>,
        spec: &ReductionSpec,
        x: &CudaSlice<f32>,
        partials: &mut CudaSlice<f32>,
        launch: &Launch,
    ) -> SuiteResult<()> {
        let f = match spec.variant {
            ReduceVariant::Tree => &self.tree,
            ReduceVariant::Shuffle => &self.shuffle,
        };
        let n = spec.n;
        let mut l = stream.launch_builder(f);
        l.arg(x).arg(&n).arg(partials);
        // SAFETY: matches `(const float*, unsigned long long, float*)`; x holds n floats and
        // partials one float per block of the grid (checked by the callers).
        unsafe { l.launch(launch.config()) }?;
        Ok(())
    }
}

/// A reduction with its buffers: `x` uniform in [0.5, 1.5) from the seed (a sum far from 0, so
/// that its relative error means something).
pub struct ReductionGpu {
    stream: Arc<CudaStream>,
    kernels: ReduceKernels,
    spec: ReductionSpec,
    x_host: Vec<f32>,
    x: CudaSlice<f32>,
    partials: CudaSlice<f32>,
    total: CudaSlice<f32>,
    y: CudaSlice<f32>,
}

impl ReductionGpu {
    /// Allocates and uploads.
    ///
    /// # Errors
    /// A driver error, or more blocks than [`MAX_PARTIALS`].
    pub fn new(
        stream: &Arc<CudaStream>,
        kernels: &ReduceKernels,
        spec: ReductionSpec,
        seed: u64,
    ) -> SuiteResult<Self> {
        if spec.blocks == 0 || spec.blocks > MAX_PARTIALS {
            return Err(SuiteError::Shape(format!(
                "reduction over {} blocks (1..={MAX_PARTIALS})",
                spec.blocks
            )));
        }
        let n = spec.n as usize;
        let x_host = Rng::new(seed).vec(n, 0.5, 1.5);
        let x = upload(stream, &x_host)?;
        let partials = stream.alloc_zeros::<f32>(spec.blocks as usize)?;
        let total = stream.alloc_zeros::<f32>(1)?;
        let y = stream.alloc_zeros::<f32>(n.max(1))?;
        Ok(ReductionGpu {
            stream: stream.clone(),
            kernels: kernels.clone(),
            spec,
            x_host,
            x,
            partials,
            total,
            y,
        })
    }

    /// Changes the variant and mode, keeping the buffers.
    pub fn set(&mut self, variant: ReduceVariant, mode: ReduceMode) {
        self.spec.variant = variant;
        self.spec.mode = mode;
    }

    /// The sum the GPU computed (after [`ReduceMode::Sum`] or [`ReduceMode::Unfused`]);
    /// synchronizes.
    ///
    /// # Errors
    /// A driver error.
    pub fn total(&self) -> SuiteResult<f32> {
        Ok(download(&self.stream, &self.total, 1)?[0])
    }

    /// The float64 reference sum.
    pub fn reference_sum(&self) -> f64 {
        reference_sum(&self.x_host)
    }
}

impl GpuWorkload for ReductionGpu {
    spec_stream_and_poison!(partials, total, y);

    fn run(&mut self) -> SuiteResult<()> {
        self.run_each(&mut |_| Ok(()))
    }

    fn run_each(&mut self, before: &mut dyn FnMut(usize) -> SuiteResult<()>) -> SuiteResult<()> {
        let launches = self.spec.launches();
        let n = self.spec.n;
        let count = self.spec.blocks;
        before(0)?;
        self.kernels.first_pass(
            &self.stream,
            &self.spec,
            &self.x,
            &mut self.partials,
            &launches[0],
        )?;
        match self.spec.mode {
            ReduceMode::Sum | ReduceMode::Unfused => {
                before(1)?;
                self.kernels.second_pass(
                    &self.stream,
                    count,
                    &self.partials,
                    &mut self.total,
                    &launches[1],
                )?;
                if self.spec.mode == ReduceMode::Unfused {
                    before(2)?;
                    let mut l = self.stream.launch_builder(&self.kernels.scale_total);
                    l.arg(&self.x).arg(&self.total).arg(&mut self.y).arg(&n);
                    // SAFETY: matches `(const float*, const float*, float*, unsigned long long)`;
                    // x and y hold n floats, total one.
                    unsafe { l.launch(launches[2].config()) }?;
                }
            }
            ReduceMode::Fused => {
                before(1)?;
                let mut l = self.stream.launch_builder(&self.kernels.scale_partials);
                l.arg(&self.x)
                    .arg(&self.partials)
                    .arg(&count)
                    .arg(&mut self.y)
                    .arg(&n);
                // SAFETY: matches `(const float*, const float*, unsigned int, float*,
                // unsigned long long)`; partials holds `count` floats, x and y n floats.
                unsafe { l.launch(launches[1].config()) }?;
            }
        }
        Ok(())
    }

    fn verify(&mut self) -> SuiteResult<Verification> {
        let sum = self.reference_sum();
        match self.spec.mode {
            ReduceMode::Sum => {
                let total = self.total()?;
                Ok(Verification::compare(
                    format!("{} total", self.spec.name()),
                    &[total],
                    &[sum],
                    self.spec.tolerance(),
                ))
            }
            ReduceMode::Unfused | ReduceMode::Fused => {
                let out = download(&self.stream, &self.y, self.spec.n as usize)?;
                let mut v = Verification::compare(
                    self.spec.name(),
                    &out,
                    &reference_scaled(&self.x_host, sum),
                    self.spec.tolerance(),
                );
                if self.spec.mode == ReduceMode::Unfused {
                    // The total must be right too, not only the scaled vector.
                    let total = self.total()?;
                    let t = Verification::compare("total", &[total], &[sum], 0.0);
                    v.rel_err = super::worst(v.rel_err, t.rel_err);
                }
                Ok(v)
            }
        }
    }
}
