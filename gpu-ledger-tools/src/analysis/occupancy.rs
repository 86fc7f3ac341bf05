//! Theoretical occupancy, waves and padding.
//!
//! [`occupancy`] is a port of `cudaOccMaxActiveBlocksPerMultiprocessor` from CUDA 13.0's
//! `cuda_occupancy.h` (the occupancy calculator behind Nsight Compute's occupancy section), for
//! devices of compute capability 7.0 and later, with the architecture's constants held in
//! [`DeviceLimits`] so that another architecture is a matter of parameters. Resident blocks per
//! SM are the minimum of five limits:
//!
//! - **warps**: `⌊(max threads per SM / 32) / ⌈block threads / 32⌉⌋`, 0 when the block is larger
//!   than the per-block thread limit;
//! - **registers**: registers are allocated per warp, `regs/thread × 32` rounded up to the
//!   allocation unit (256); each of the 4 SM sub-partitions holds
//!   `⌊(regs per SM / 4) / regs per warp⌋` warps; the limit is `⌊4 × that / warps per block⌋`.
//!   0 when the block exceeds the per-block register file, checked both as allocated and as the
//!   hardware checks it (warps rounded up to a multiple of 4), or when regs/thread exceeds the
//!   per-thread maximum;
//! - **shared memory**: per block, static + dynamic + the 1 KiB the driver reserves, rounded up to
//!   the allocation unit (128 B); 0 when that exceeds the per-block limit (48 KiB, or the opt-in
//!   227 KiB when the kernel asks for more, plus the reserve); otherwise
//!   `⌊SM shared capacity / per-block allocation⌋`, with the SM capacity set by the carveout;
//! - **blocks**: the architecture's maximum resident blocks per SM (32 on sm_90);
//! - **barriers** (sm_90 and later): `⌊2 × max blocks / barriers per block⌋`.
//!
//! Differences from the header, all documented on the items: partitioned global caching (sm_52,
//! sm_6x only) and virtual resources (sm_100 and later, not reported by CUPTI) are not modelled;
//! a kernel without a known opt-in limit is assumed to have opted in to exactly the dynamic shared
//! memory it launched with (it did launch); and the limiting resources are those whose limit equals
//! the final minimum, barriers included (the header keeps earlier flags when the barrier limit
//! lowers the minimum). Clusters (`cluster` dims) are not modelled: a cluster launch is computed
//! as independent blocks.

use serde::{Deserialize, Serialize};

use gpu_ledger_format::schema::KernelGroup;
use gpu_ledger_format::GpuRecord;

/// Per-SM and per-block resource limits of one device, and its allocation granularities.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceLimits {
    /// Compute capability `[major, minor]`.
    pub compute_capability: [u32; 2],
    /// Streaming multiprocessors (132 on H100 SXM / H200).
    pub sm_count: u32,
    /// Threads per warp.
    pub warp_size: u32,
    /// Largest block, threads.
    pub max_threads_per_block: u32,
    /// Resident threads per SM (maximum warps per SM × warp size).
    pub max_threads_per_sm: u32,
    /// Resident blocks per SM.
    pub max_blocks_per_sm: u32,
    /// 32-bit registers per SM.
    pub regs_per_sm: u32,
    /// 32-bit registers one block may use.
    pub regs_per_block: u32,
    /// Registers per thread above which a launch cannot run. `cuda_occupancy.h` uses 256 for
    /// compute capability 7.0 and later (ptxas itself never assigns more than 255).
    pub max_regs_per_thread: u32,
    /// Register allocation unit, registers per warp.
    pub reg_alloc_unit: u32,
    /// SM sub-partitions (warp schedulers), each with a quarter of the register file.
    pub sub_partitions: u32,
    /// Shared memory per SM at the largest carveout, bytes.
    pub shared_per_sm: u32,
    /// Shared memory per block without opt-in, bytes.
    pub shared_per_block: u32,
    /// Shared memory per block with opt-in (`cudaFuncAttributeMaxDynamicSharedMemorySize`), bytes.
    pub shared_per_block_optin: u32,
    /// Shared memory the driver reserves per block (compute capability 8.0 and later), bytes.
    pub reserved_shared_per_block: u32,
    /// Shared memory allocation unit, bytes.
    pub shared_alloc_unit: u32,
    /// Shared memory capacities the L1/shared carveout can select, bytes, ascending.
    pub shared_carveout_sizes: Vec<u32>,
    /// Barriers available per block slot (2 on sm_90); `None` where the header applies no barrier
    /// limit (before sm_90).
    pub barriers_per_block_slot: Option<u32>,
}

impl DeviceLimits {
    /// Hopper, compute capability 9.0 (H100, H200) with 132 SMs, as `cudaGetDeviceProperties`
    /// reports it and `cuda_occupancy.h` (CUDA 13.0) treats it: 64 warps, 32 blocks and 64 Ki
    /// registers per SM; 64 Ki registers and 1024 threads per block; registers allocated per warp
    /// in units of 256 over 4 sub-partitions; 228 KiB shared memory per SM, 48 KiB per block
    /// (227 KiB opt-in) plus 1 KiB reserved per block, allocated in units of 128 bytes; carveouts
    /// of 0, 8, 16, 32, 64, 100, 132, 164, 196 and 228 KiB.
    pub fn sm90() -> Self {
        const KIB: u32 = 1024;
        Self {
            compute_capability: [9, 0],
            sm_count: 132,
            warp_size: 32,
            max_threads_per_block: 1024,
            max_threads_per_sm: 2048,
            max_blocks_per_sm: 32,
            regs_per_sm: 64 * KIB,
            regs_per_block: 64 * KIB,
            max_regs_per_thread: 256,
            reg_alloc_unit: 256,
            sub_partitions: 4,
            shared_per_sm: 228 * KIB,
            shared_per_block: 48 * KIB,
            shared_per_block_optin: 227 * KIB,
            reserved_shared_per_block: KIB,
            shared_alloc_unit: 128,
            shared_carveout_sizes: [0, 8, 16, 32, 64, 100, 132, 164, 196, 228]
                .iter()
                .map(|k| k * KIB)
                .collect(),
            barriers_per_block_slot: Some(2),
        }
    }

    /// The same limits with another SM count (an H100 PCIe has 114).
    #[must_use]
    pub fn with_sm_count(mut self, sm_count: u32) -> Self {
        self.sm_count = sm_count;
        self
    }

    /// Limits for a GPU of the ledger's environment, when its architecture is known here
    /// (compute capability 9.0). `None` for other architectures: build their [`DeviceLimits`]
    /// from their parameters.
    pub fn for_gpu(gpu: &GpuRecord) -> Option<Self> {
        match gpu.compute_capability {
            [9, 0] if gpu.sm_count > 0 => Some(Self::sm90().with_sm_count(gpu.sm_count)),
            _ => None,
        }
    }

    /// Maximum resident warps per SM.
    pub fn max_warps_per_sm(&self) -> u32 {
        self.max_threads_per_sm / self.warp_size.max(1)
    }

    fn check(&self) -> Result<(), OccupancyError> {
        let positive = [
            ("sm_count", self.sm_count),
            ("warp_size", self.warp_size),
            ("max_threads_per_block", self.max_threads_per_block),
            ("max_threads_per_sm", self.max_threads_per_sm),
            ("max_blocks_per_sm", self.max_blocks_per_sm),
            ("regs_per_sm", self.regs_per_sm),
            ("regs_per_block", self.regs_per_block),
            ("reg_alloc_unit", self.reg_alloc_unit),
            ("sub_partitions", self.sub_partitions),
            ("shared_per_sm", self.shared_per_sm),
            ("shared_per_block", self.shared_per_block),
            ("shared_alloc_unit", self.shared_alloc_unit),
        ];
        match positive.iter().find(|(_, v)| *v == 0) {
            Some((name, _)) => Err(OccupancyError::InvalidDevice(name)),
            None if self.shared_carveout_sizes.is_empty() => {
                Err(OccupancyError::InvalidDevice("shared_carveout_sizes"))
            }
            None => Ok(()),
        }
    }

    /// `cudaOccAlignUpShmemSizeVoltaPlus`: the smallest carveout holding `bytes`.
    fn align_up_carveout(&self, bytes: u64) -> Option<u64> {
        self.shared_carveout_sizes
            .iter()
            .map(|&s| u64::from(s))
            .find(|&s| bytes <= s)
    }
}

/// The resources one launch asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchResources {
    /// Threads per block (product of the block dimensions).
    pub block_threads: u32,
    /// Registers per thread.
    pub registers_per_thread: u32,
    /// Static shared memory per block, bytes.
    pub static_shared_bytes: u32,
    /// Dynamic shared memory per block, bytes.
    pub dynamic_shared_bytes: u32,
    /// The kernel's `cudaFuncAttributeMaxDynamicSharedMemorySize`, when known. `None` assumes it
    /// equals `dynamic_shared_bytes` (a recorded launch did run, so it had opted in to at least
    /// that).
    pub max_dynamic_shared_bytes: Option<u32>,
    /// The kernel's preferred shared memory carveout in percent
    /// (`cudaFuncAttributePreferredSharedMemoryCarveout`); `None` for the default (largest).
    pub carveout_percent: Option<u32>,
    /// Block barriers the kernel uses (`cudaOccFuncAttributes` assumes 1).
    pub block_barriers: u32,
}

impl LaunchResources {
    /// A launch with default attributes (no carveout preference, one barrier).
    pub fn new(
        block_threads: u32,
        registers_per_thread: u32,
        static_shared_bytes: u32,
        dynamic_shared_bytes: u32,
    ) -> Self {
        Self {
            block_threads,
            registers_per_thread,
            static_shared_bytes,
            dynamic_shared_bytes,
            max_dynamic_shared_bytes: None,
            carveout_percent: None,
            block_barriers: 1,
        }
    }

    /// The resources of a ledger kernel group. Fails when the block has more than `u32::MAX`
    /// threads.
    pub fn of(k: &KernelGroup) -> Result<Self, OccupancyError> {
        let threads = k.shape.block_threads();
        let threads = u32::try_from(threads).map_err(|_| OccupancyError::InvalidLaunch("block"))?;
        Ok(Self::new(
            threads,
            k.shape.registers_per_thread,
            k.shape.static_shared_bytes,
            k.shape.dynamic_shared_bytes,
        ))
    }
}

/// A resource that limits resident blocks per SM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limiter {
    /// Warp slots (block size).
    Warps,
    /// Register file.
    Registers,
    /// Shared memory.
    SharedMemory,
    /// Resident block slots.
    Blocks,
    /// Block barriers.
    Barriers,
}

impl std::fmt::Display for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Limiter::Warps => "warps",
            Limiter::Registers => "registers",
            Limiter::SharedMemory => "shared memory",
            Limiter::Blocks => "blocks",
            Limiter::Barriers => "barriers",
        })
    }
}

/// Why occupancy could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OccupancyError {
    /// A device limit that must be positive is zero (or a list is empty).
    #[error("invalid device limits: {0} must be positive")]
    InvalidDevice(&'static str),
    /// A launch parameter is out of range.
    #[error("invalid launch: {0}")]
    InvalidLaunch(&'static str),
}

/// Theoretical occupancy of one launch on one SM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Occupancy {
    /// Resident blocks per SM: the minimum of the limits below. 0 means the launch cannot run
    /// with these limits.
    pub active_blocks_per_sm: u32,
    /// Warps per block, `⌈threads / 32⌉`.
    pub warps_per_block: u32,
    /// `active_blocks_per_sm × warps_per_block`.
    pub active_warps_per_sm: u32,
    /// Architectural maximum of resident warps per SM.
    pub max_warps_per_sm: u32,
    /// `active_warps_per_sm / max_warps_per_sm`, in `[0, 1]`.
    pub occupancy: f64,
    /// Resources whose limit equals `active_blocks_per_sm`, in the order warps, registers,
    /// shared memory, blocks, barriers.
    pub limiters: Vec<Limiter>,
    /// Blocks allowed by warp slots.
    pub block_limit_warps: u32,
    /// Blocks allowed by registers; `None` when the kernel uses none (no limit).
    pub block_limit_registers: Option<u32>,
    /// Blocks allowed by shared memory; `None` when a block allocates none (no limit).
    pub block_limit_shared: Option<u32>,
    /// Blocks allowed by block slots.
    pub block_limit_blocks: u32,
    /// Blocks allowed by barriers; `None` when no barrier limit applies.
    pub block_limit_barriers: Option<u32>,
    /// Registers allocated to one block.
    pub allocated_registers_per_block: u64,
    /// Shared memory allocated to one block (reserve included), bytes.
    pub allocated_shared_per_block: u64,
}

impl Occupancy {
    /// The limiting resources as text: `registers`, `warps + registers`.
    pub fn limiter_names(&self) -> String {
        let names: Vec<String> = self.limiters.iter().map(ToString::to_string).collect();
        names.join(" + ")
    }
}

fn div_round_up(x: u64, y: u64) -> u64 {
    x.div_ceil(y)
}

fn round_up(x: u64, y: u64) -> u64 {
    x.div_ceil(y) * y
}

fn clamp_u32(x: u64) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

/// Theoretical resident blocks, warps and occupancy of `launch` on `device`; see the module doc
/// for the arithmetic.
///
/// # Errors
/// [`OccupancyError::InvalidLaunch`] for a block of 0 threads or a carveout above 100 %;
/// [`OccupancyError::InvalidDevice`] for limits with a zero where a positive value is needed.
pub fn occupancy(
    device: &DeviceLimits,
    launch: &LaunchResources,
) -> Result<Occupancy, OccupancyError> {
    device.check()?;
    if launch.block_threads == 0 {
        return Err(OccupancyError::InvalidLaunch("block has no threads"));
    }
    if launch.carveout_percent.is_some_and(|c| c > 100) {
        return Err(OccupancyError::InvalidLaunch("carveout above 100 %"));
    }
    let warp = u64::from(device.warp_size);
    let warps_per_block = div_round_up(u64::from(launch.block_threads), warp);
    let max_warps = u64::from(device.max_warps_per_sm());

    // cudaOccMaxBlocksPerSMWarpsLimit (partitioned global caching off).
    let limit_warps = if launch.block_threads > device.max_threads_per_block {
        0
    } else {
        max_warps / warps_per_block
    };
    let (limit_regs, regs_per_block) = registers_limit(device, launch, warps_per_block);
    let (limit_smem, smem_per_block) = shared_memory_limit(device, launch)?;
    let limit_blocks = u64::from(device.max_blocks_per_sm);
    let limit_barriers = match device.barriers_per_block_slot {
        Some(per_slot) if launch.block_barriers > 0 => {
            Some(limit_blocks * u64::from(per_slot) / u64::from(launch.block_barriers))
        }
        _ => None,
    };

    let limits = [
        (Limiter::Warps, Some(limit_warps)),
        (Limiter::Registers, limit_regs),
        (Limiter::SharedMemory, limit_smem),
        (Limiter::Blocks, Some(limit_blocks)),
        (Limiter::Barriers, limit_barriers),
    ];
    let active = limits.iter().filter_map(|(_, l)| *l).min().unwrap_or(0);
    let limiters = limits
        .iter()
        .filter(|(_, l)| *l == Some(active))
        .map(|(name, _)| *name)
        .collect();
    let active_warps = active * warps_per_block;
    Ok(Occupancy {
        active_blocks_per_sm: clamp_u32(active),
        warps_per_block: clamp_u32(warps_per_block),
        active_warps_per_sm: clamp_u32(active_warps),
        max_warps_per_sm: clamp_u32(max_warps),
        occupancy: active_warps as f64 / max_warps as f64,
        limiters,
        block_limit_warps: clamp_u32(limit_warps),
        block_limit_registers: limit_regs.map(clamp_u32),
        block_limit_shared: limit_smem.map(clamp_u32),
        block_limit_blocks: clamp_u32(limit_blocks),
        block_limit_barriers: limit_barriers.map(clamp_u32),
        allocated_registers_per_block: regs_per_block,
        allocated_shared_per_block: smem_per_block,
    })
}

/// `cudaOccMaxBlocksPerSMRegsLimit`: the blocks the register file allows (`None` for no limit,
/// when the kernel uses no registers) and the registers one block is allocated.
fn registers_limit(
    device: &DeviceLimits,
    launch: &LaunchResources,
    warps_per_block: u64,
) -> (Option<u64>, u64) {
    let warp = u64::from(device.warp_size);
    let regs = u64::from(launch.registers_per_thread);
    let regs_per_warp = round_up(regs * warp, u64::from(device.reg_alloc_unit));
    let regs_per_block = regs_per_warp * warps_per_block;
    let regs_assumed = regs_per_warp * round_up(warps_per_block, u64::from(device.sub_partitions));
    let limit_regs = if u64::from(device.regs_per_block) < regs_assumed
        || u64::from(device.regs_per_block) < regs_per_block
        || launch.registers_per_thread > device.max_regs_per_thread
    {
        Some(0)
    } else {
        // `None` (no limit) when the kernel uses no registers.
        let per_sub = u64::from(device.regs_per_sm / device.sub_partitions);
        per_sub
            .checked_div(regs_per_warp)
            .map(|w| w * u64::from(device.sub_partitions) / warps_per_block)
    };
    (limit_regs, regs_per_block)
}

/// `cudaOccMaxBlocksPerSMSmemLimit` (function shared memory limit: opt-in): the blocks shared
/// memory allows (`None` for no limit, when a block allocates none) and the bytes one block is
/// allocated, reserve included, or an error when the device lists no carveout large enough.
fn shared_memory_limit(
    device: &DeviceLimits,
    launch: &LaunchResources,
) -> Result<(Option<u64>, u64), OccupancyError> {
    let static_smem =
        u64::from(launch.static_shared_bytes) + u64::from(device.reserved_shared_per_block);
    let dynamic = u64::from(launch.dynamic_shared_bytes);
    let smem_per_block = round_up(static_smem + dynamic, u64::from(device.shared_alloc_unit));
    let max_dynamic = u64::from(
        launch
            .max_dynamic_shared_bytes
            .unwrap_or(launch.dynamic_shared_bytes),
    );
    let max_usage = static_smem + max_dynamic;
    let block_cap = if max_usage > u64::from(device.shared_per_block) {
        u64::from(device.shared_per_block_optin)
    } else {
        u64::from(device.shared_per_block)
    } + u64::from(device.reserved_shared_per_block);
    if dynamic > max_dynamic || smem_per_block > block_cap {
        return Ok((Some(0), smem_per_block));
    }
    // cudaOccSMemPreferenceVoltaPlus: the carveout the kernel prefers, aligned up.
    let preferred = match launch.carveout_percent {
        None => u64::from(device.shared_per_sm),
        Some(pct) => u64::from(pct) * u64::from(device.shared_per_sm) / 100,
    };
    let preferred = device
        .align_up_carveout(preferred)
        .ok_or(OccupancyError::InvalidDevice("shared_carveout_sizes"))?;
    let sm_shared = if preferred >= smem_per_block {
        preferred
    } else {
        device
            .align_up_carveout(smem_per_block)
            .ok_or(OccupancyError::InvalidDevice("shared_carveout_sizes"))?
    };
    let limit_smem = (smem_per_block > 0).then(|| sm_shared / smem_per_block);
    Ok((limit_smem, smem_per_block))
}

/// How a grid fills the device in waves of `S × b` blocks (`S` SMs, `b` resident blocks per SM).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Waves {
    /// Blocks in the grid, `G`.
    pub grid_blocks: u64,
    /// Blocks resident at once on the device, `S × b`.
    pub blocks_per_wave: u64,
    /// `⌈G / (S·b)⌉`.
    pub waves: u64,
    /// Blocks in the last wave when it is partial; 0 when every wave is full.
    pub tail_blocks: u64,
    /// `G / (⌈G/(S·b)⌉ · S·b)`, in `(0, 1]`.
    pub efficiency: f64,
}

/// Waves of a grid of `grid_blocks` blocks with `blocks_per_sm` resident blocks per SM on
/// `sm_count` SMs. `None` when any of them is 0.
pub fn waves(grid_blocks: u64, blocks_per_sm: u32, sm_count: u32) -> Option<Waves> {
    let per_wave = u64::from(blocks_per_sm).checked_mul(u64::from(sm_count))?;
    if grid_blocks == 0 || per_wave == 0 {
        return None;
    }
    let n = grid_blocks.div_ceil(per_wave);
    Some(Waves {
        grid_blocks,
        blocks_per_wave: per_wave,
        waves: n,
        tail_blocks: grid_blocks % per_wave,
        efficiency: grid_blocks as f64 / (n as f64 * per_wave as f64),
    })
}

/// Wave efficiency `G / (⌈G/(S·b)⌉·S·b)`; `None` when any input is 0.
pub fn wave_efficiency(grid_blocks: u64, blocks_per_sm: u32, sm_count: u32) -> Option<f64> {
    waves(grid_blocks, blocks_per_sm, sm_count).map(|w| w.efficiency)
}

/// Padding efficiency: useful over padded work, `∏ useful[i] / ∏ padded[i]`; for a GEMM tile
/// kernel `useful = [M, N, K]` and `padded = [M', N', K']` gives `MNK / M'N'K'`. `None` when the
/// slices are empty or of different lengths, a padded dimension is 0, or a useful dimension is
/// larger than its padded one.
pub fn padding_efficiency(useful: &[u64], padded: &[u64]) -> Option<f64> {
    if useful.is_empty() || useful.len() != padded.len() {
        return None;
    }
    useful.iter().zip(padded).try_fold(1.0, |acc, (&u, &p)| {
        (p > 0 && u <= p).then(|| acc * (u as f64 / p as f64))
    })
}

/// Occupancy and waves of one ledger kernel group on a device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelLaunchAnalysis {
    /// Theoretical occupancy per SM.
    pub occupancy: Occupancy,
    /// Waves of the grid; `None` when the grid is empty or no block fits.
    pub waves: Option<Waves>,
}

/// Occupancy and waves of a kernel group's launch shape on `device`.
///
/// # Errors
/// As [`occupancy`], and [`OccupancyError::InvalidLaunch`] when the block has more than
/// `u32::MAX` threads.
pub fn analyze_kernel(
    k: &KernelGroup,
    device: &DeviceLimits,
) -> Result<KernelLaunchAnalysis, OccupancyError> {
    let occ = occupancy(device, &LaunchResources::of(k)?)?;
    let grid = k.shape.grid_blocks();
    let w = waves(grid, occ.active_blocks_per_sm, device.sm_count);
    Ok(KernelLaunchAnalysis {
        occupancy: occ,
        waves: w,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sm90_constants() {
        let d = DeviceLimits::sm90();
        assert_eq!(d.max_warps_per_sm(), 64);
        assert_eq!(d.shared_per_sm, 233_472);
        assert_eq!(d.shared_per_block_optin, 232_448);
        assert_eq!(d.check(), Ok(()));
    }

    #[test]
    fn invalid_inputs_are_errors() {
        let d = DeviceLimits::sm90();
        assert!(occupancy(&d, &LaunchResources::new(0, 32, 0, 0)).is_err());
        let mut l = LaunchResources::new(128, 32, 0, 0);
        l.carveout_percent = Some(101);
        assert!(occupancy(&d, &l).is_err());
        let bad = DeviceLimits {
            warp_size: 0,
            ..DeviceLimits::sm90()
        };
        assert_eq!(
            occupancy(&bad, &LaunchResources::new(128, 32, 0, 0)),
            Err(OccupancyError::InvalidDevice("warp_size"))
        );
    }

    #[test]
    fn for_gpu_only_knows_hopper() {
        let mut g = GpuRecord {
            compute_capability: [9, 0],
            sm_count: 114,
            ..GpuRecord::default()
        };
        assert_eq!(DeviceLimits::for_gpu(&g).unwrap().sm_count, 114);
        g.compute_capability = [8, 0];
        assert_eq!(DeviceLimits::for_gpu(&g), None);
    }

    #[test]
    fn waves_and_padding() {
        assert_eq!(waves(0, 1, 132), None);
        assert_eq!(waves(10, 0, 132), None);
        let w = waves(1057, 8, 132).unwrap();
        assert_eq!((w.blocks_per_wave, w.waves, w.tail_blocks), (1056, 2, 1));
        assert!((w.efficiency - 1057.0 / 2112.0).abs() < 1e-12);
        assert_eq!(wave_efficiency(1056, 8, 132), Some(1.0));
        assert_eq!(padding_efficiency(&[2, 3], &[4, 3]), Some(0.5));
        assert_eq!(padding_efficiency(&[5], &[4]), None);
        assert_eq!(padding_efficiency(&[1], &[0]), None);
        assert_eq!(padding_efficiency(&[], &[]), None);
        assert_eq!(padding_efficiency(&[1, 2], &[1]), None);
    }
}
