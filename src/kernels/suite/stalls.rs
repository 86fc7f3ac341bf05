//! Kernels whose warp stall character is known, run under PC sampling
//! (`kernels/stalls.cu` and the suite's transposes, spill pair and reductions): each case's
//! expected dominant stall reason, and the pairs whose stall mix must move one way.

use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};

use super::reduce::{ReduceKernels, ReduceMode, ReduceVariant, ReductionGpu, ReductionSpec};
use super::spill::{SpillGpu, SpillKernels, SpillSpec};
use super::transpose::{TransposeGpu, TransposeKernels, TransposeSpec, TransposeVariant};
use super::{upload, GpuWorkload, Rng, SuiteResult};
use crate::pcsampling::{PcSampler, Sources, StallProfile};

/// The kernel file.
pub const MODULE: &str = "stalls";

/// One kernel to sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StallCase {
    /// Dependent loads over a random cycle larger than L2.
    PointerChase,
    /// A dependent FMA chain, one warp per scheduler.
    FmaChain,
    /// Shared-memory transpose through a 32×32 tile: 32-way bank conflicts on the reads.
    TransposeConflicted,
    /// The same through a 32×33 tile: no conflicts.
    TransposePadded,
    /// A dynamically indexed per-thread array in local memory.
    Spill,
    /// The same sums in registers.
    SpillFree,
    /// Block sums by a shared-memory tree with a barrier per level.
    ReduceTree,
    /// Block sums by warp shuffles and one barrier.
    ReduceShuffle,
}

impl StallCase {
    /// Every case, pairs adjacent.
    pub const ALL: [StallCase; 8] = [
        StallCase::PointerChase,
        StallCase::FmaChain,
        StallCase::TransposeConflicted,
        StallCase::TransposePadded,
        StallCase::Spill,
        StallCase::SpillFree,
        StallCase::ReduceTree,
        StallCase::ReduceShuffle,
    ];

    /// Runs of the case one sampled repeat makes: the reductions' first passes take a few
    /// microseconds, so they run in batches to collect as many samples as the others.
    pub fn batch(self) -> u32 {
        match self {
            StallCase::ReduceTree | StallCase::ReduceShuffle => 200,
            _ => 1,
        }
    }

    /// The sampled kernel's name.
    pub fn kernel(self) -> &'static str {
        match self {
            StallCase::PointerChase => "pointer_chase",
            StallCase::FmaChain => "fma_chain",
            StallCase::TransposeConflicted => "transpose_tiled",
            StallCase::TransposePadded => "transpose_padded",
            StallCase::Spill => "spill_dynamic_index",
            StallCase::SpillFree => "spill_free",
            StallCase::ReduceTree => "reduce_tree_partials",
            StallCase::ReduceShuffle => "reduce_shuffle_partials",
        }
    }
}

/// The cases' kernels and buffers on one stream.
pub struct StallCases {
    stream: Arc<CudaStream>,
    chase: CudaFunction,
    fma: CudaFunction,
    next: CudaSlice<u32>,
    out: CudaSlice<u32>,
    fout: CudaSlice<f32>,
    chase_threads: u32,
    fma_blocks: u32,
    transpose: TransposeGpu,
    spill: SpillGpu,
    reduce_tree: ReductionGpu,
    reduce_shuffle: ReductionGpu,
    /// The cubins, for source lines.
    pub sources: Sources,
}

/// Elements of the pointer chase's cycle: 256 MiB of `u32`, over five times the H200's L2.
pub const CHASE_ELEMENTS: usize = 1 << 26;
/// Dependent loads per thread and launch.
pub const CHASE_STEPS: u32 = 512;
/// FMAs per thread and launch.
pub const FMA_ITERS: u32 = 1 << 18;

impl StallCases {
    /// Compiles the kernels (to cubins, kept in [`sources`](Self::sources) with their source
    /// text) and fills the buffers.
    ///
    /// # Errors
    /// Compilation, a driver call, or CUPTI's CRC of a cubin.
    pub fn new(ctx: &Arc<CudaContext>) -> SuiteResult<Self> {
        let stream = ctx.default_stream();
        let (module, _) = crate::kernels::compile_cubin(ctx, MODULE)?;
        let chase = module.load_function("pointer_chase")?;
        let fma = module.load_function("fma_chain")?;
        // Sattolo's shuffle: one cycle through every element, in random order.
        let mut rng = Rng::new(7);
        let mut next: Vec<u32> = (0..CHASE_ELEMENTS as u32).collect();
        for i in (1..CHASE_ELEMENTS).rev() {
            let j = rng.below(i as u64) as usize;
            next.swap(i, j);
        }
        let sms = ctx.attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )? as u32;
        let chase_threads = sms * 2 * 256;
        let fma_blocks = sms * 4;
        let transpose = TransposeGpu::new(
            &stream,
            &TransposeKernels::load(ctx)?,
            TransposeSpec::new(4096, 4096, TransposeVariant::Tiled),
            1,
        )?;
        let spill = SpillGpu::new(
            &stream,
            &SpillKernels::load(ctx)?,
            SpillSpec {
                threads: sms * 8 * 256,
                iters: 256,
                dynamic: true,
            },
            2,
        )?;
        let reduce = ReduceKernels::load(ctx)?;
        // One element per thread: the block sum's barriers, not the loads, are most of the work.
        let n = u64::from(sms) * 8 * 256;
        let spec = |v| ReductionSpec::for_device(n, v, ReduceMode::Sum, sms);
        let reduce_tree = ReductionGpu::new(&stream, &reduce, spec(ReduceVariant::Tree), 3)?;
        let reduce_shuffle = ReductionGpu::new(&stream, &reduce, spec(ReduceVariant::Shuffle), 3)?;
        let mut sources = Sources::new();
        for (_, cubin) in crate::kernels::compiled_cubins() {
            sources.add_cubin(cubin)?;
        }
        for (file, text) in crate::kernels::source_files() {
            sources.add_text(&file, text);
        }
        Ok(StallCases {
            next: upload(&stream, &next)?,
            out: stream.alloc_zeros::<u32>(chase_threads as usize)?,
            fout: stream.alloc_zeros::<f32>((fma_blocks * 32) as usize)?,
            stream,
            chase,
            fma,
            chase_threads,
            fma_blocks,
            transpose,
            spill,
            reduce_tree,
            reduce_shuffle,
            sources,
        })
    }

    /// Enqueues `repeats` launches of the case's work (for a reduction, the whole sum, whose
    /// first pass is the sampled kernel).
    ///
    /// # Errors
    /// A launch failure.
    pub fn run(&mut self, case: StallCase, repeats: u32) -> SuiteResult<()> {
        for _ in 0..repeats {
            match case {
                StallCase::PointerChase => {
                    let cfg = LaunchConfig {
                        grid_dim: (self.chase_threads / 256, 1, 1),
                        block_dim: (256, 1, 1),
                        shared_mem_bytes: 0,
                    };
                    let mut b = self.stream.launch_builder(&self.chase);
                    b.arg(&self.next).arg(&mut self.out).arg(&CHASE_STEPS);
                    // SAFETY: `next` holds CHASE_ELEMENTS indices below CHASE_ELEMENTS, every
                    // thread's start index is below it, and `out` has one slot per thread.
                    unsafe { b.launch(cfg) }?;
                }
                StallCase::FmaChain => {
                    let cfg = LaunchConfig {
                        grid_dim: (self.fma_blocks, 1, 1),
                        block_dim: (32, 1, 1),
                        shared_mem_bytes: 0,
                    };
                    let mut b = self.stream.launch_builder(&self.fma);
                    b.arg(&mut self.fout).arg(&FMA_ITERS);
                    // SAFETY: `fout` has one slot per thread of the grid.
                    unsafe { b.launch(cfg) }?;
                }
                StallCase::TransposeConflicted | StallCase::TransposePadded => {
                    self.transpose
                        .set_variant(if case == StallCase::TransposePadded {
                            TransposeVariant::Padded
                        } else {
                            TransposeVariant::Tiled
                        });
                    self.transpose.run()?;
                }
                StallCase::Spill | StallCase::SpillFree => {
                    self.spill.set_dynamic(case == StallCase::Spill);
                    self.spill.run()?;
                }
                StallCase::ReduceTree => self.reduce_tree.run()?,
                StallCase::ReduceShuffle => self.reduce_shuffle.run()?,
            }
        }
        Ok(())
    }

    /// Runs the case once to warm up, then samples `repeats` × [`StallCase::batch`] runs of it.
    ///
    /// # Errors
    /// A launch or sampling failure.
    pub fn sample(
        &mut self,
        sampler: &mut PcSampler,
        case: StallCase,
        repeats: u32,
    ) -> SuiteResult<StallProfile> {
        self.run(case, 1)?;
        self.stream.synchronize()?;
        let mut failed = None;
        let profile = sampler.collect(|| {
            if let Err(e) = self.run(case, repeats * case.batch()) {
                failed = Some(e);
            }
            Ok(())
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(profile),
        }
    }
}
