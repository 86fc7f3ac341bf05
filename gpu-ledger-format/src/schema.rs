//! The ledger's line types. One JSON object per line: a header, one row per iteration, a trailer.
//!
//! Every field a reader may meet is here; new fields are added with `#[serde(default)]` so that
//! older ledgers stay readable, and a change that breaks that raises [`SCHEMA_VERSION`].

use serde::{Deserialize, Serialize};

use crate::environment::Environment;
use crate::idle::{DispatchFloor, IdleBreakdown, InventoryEntry};
use crate::nvml::{NvmlIterationSummary, RunEnergy};

/// Version of the line format written by this build. The reader refuses any other.
pub const SCHEMA_VERSION: u32 = 1;

/// One line of a ledger file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)]
pub enum LedgerLine {
    /// First line: schema version, environment, configuration.
    Header(Header),
    /// One completed (or, at shutdown, incomplete) iteration.
    Iteration(IterationRow),
    /// Last line: run summary, dropped records and the profiler's own overhead.
    Trailer(Trailer),
}

/// The first line of a ledger.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Line format version; see [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Version of the gpu-ledger crate that wrote the file.
    pub gpu_ledger_version: String,
    /// Wall-clock start of the run, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// CUPTI timestamp (ns) taken at the same instant as `start_unix_ns`; activity times in rows
    /// are CUPTI timestamps, so this maps them to wall-clock time.
    #[serde(default)]
    pub start_cupti_ns: Option<u64>,
    /// The profiler configuration in force.
    pub config: ConfigRecord,
    /// The machine, GPUs and software the run used.
    pub environment: Environment,
    /// Rank of this process when launched by torchrun, mpirun or SLURM.
    #[serde(default)]
    pub rank: Option<RankInfo>,
    /// Anything that limits what this ledger holds (NVML missing, counters not collected, ...).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Hardware counters: what was asked for, the passes it needs, or why they are not
    /// collected. Absent below `Level::Counters`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<crate::counters::CountersHeader>,
    /// What tracing itself adds to the device's time per kernel, measured at start on this GPU
    /// (the timeline and counters levels with `Config::calibrate_tracing`); the rows' `tracing_added_ns` are
    /// estimated from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing_calibration: Option<TracingCalibration>,
}

/// The device time CUPTI's kernel tracing adds, measured at start: the same back-to-back
/// kernels, queued behind a spin so that the GPU runs them without waiting for the host, timed
/// by events with tracing on and off, alternated over rounds. A kernel is charged
/// `per_kernel_ns + per_block_ns × grid blocks`, the per-block figure the mean of two streaming
/// kernels' (blocks of 256 threads, each thread of a copy loading and storing one float, of an
/// add loading two and storing one): streaming blocks' cost depends on their mix of loads and
/// stores, and the mean errs least on either. What the model misses is in docs/overhead.md: a
/// grid of many waves of small blocks can slow far more than it charges, and blocks that do no
/// memory work cost less than a streaming kernel's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TracingCalibration {
    /// CUDA ordinal of the device measured (the one the rows' estimates assume for every
    /// device).
    pub device_id: u32,
    /// Added device time per kernel, ns: the median over rounds.
    pub per_kernel_ns: f64,
    /// Added device time per block of a large grid, ns: the mean of the copy's and the add's
    /// figures (ledgers written before the add was measured: the copy's alone).
    pub per_block_ns: f64,
    /// Lowest and highest per-kernel figure over the rounds.
    pub per_kernel_range_ns: [f64; 2],
    /// Lowest and highest per-block figure over the rounds, of either streaming kernel.
    pub per_block_range_ns: [f64; 2],
    /// Added device time per block of the copy (a float loaded and stored per thread), ns: the
    /// median over rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_block_copy_ns: Option<f64>,
    /// Added device time per block of the add (two floats loaded and one stored per thread),
    /// ns: the median over rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_block_add_ns: Option<f64>,
    /// Rounds, each with tracing on and off.
    pub rounds: u32,
    /// Kernels per timed batch, and the grids of the two batches (blocks).
    pub kernels_per_batch: u32,
    /// Grid of the small and of the large batch, blocks.
    pub grids: [u64; 2],
    /// The check on the model: kernels that spin across every SM, their untraced length and
    /// what tracing added to each (medians, ns). Charged only `per_kernel_ns` plus their
    /// blocks by the model; a much larger figure here means the cost grows with kernel length.
    pub spin_ns: f64,
    /// What tracing added to each spin kernel, ns.
    pub spin_added_ns: f64,
    /// Blocks of each spin kernel (one per SM).
    pub spin_grid: u64,
    /// Host time the calibration took, ns.
    pub took_ns: u64,
}

impl TracingCalibration {
    /// The device time tracing is estimated to add to `count` launches of `grid_blocks` blocks,
    /// ns (never negative).
    pub fn added_ns(&self, count: u64, grid_blocks: u64) -> f64 {
        let per_launch = self.per_kernel_ns + self.per_block_ns * grid_blocks as f64;
        (per_launch * count as f64).max(0.0)
    }
}

/// The configuration a run was profiled with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConfigRecord {
    /// `scopes`, `timeline` or `counters`.
    pub level: String,
    /// Number of CUPTI activity buffers preallocated.
    pub buffer_count: usize,
    /// Size of each CUPTI activity buffer in bytes.
    pub buffer_bytes: usize,
    /// How long an ended iteration may wait for its GPU records before it is written anyway.
    pub settle_ms: u64,
    /// NVML sampling period, when NVML sampling is on.
    #[serde(default)]
    pub nvml_period_ms: Option<u64>,
    /// How often NVML's energy counter was read, ms; `None` when it was not (energy integrated
    /// from power) or in ledgers written before this was recorded.
    #[serde(default)]
    pub nvml_energy_period_ms: Option<u64>,
    /// Iterations selected for hardware counters, when any.
    #[serde(default)]
    pub counter_iterations: Option<String>,
    /// Whether rows carry every activity and scope span (`activities`, `scope_spans`).
    #[serde(default)]
    pub record_activities: bool,
    /// Which thread a call on a thread with no scope of its own follows (`off`, `stepping
    /// thread`, `threads a, b`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow: Option<String>,
    /// Where the level came from: `configuration` (the program's builder) or `GPU_LEDGER_LEVEL`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level_source: Option<String>,
    /// NVTX both ways: whether scopes push NVTX ranges, and whether NVTX ranges are imported
    /// as scopes (with the domains, depth and step marker, or why not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvtx: Option<String>,
    /// The iterations the timeline traced when it sampled (`1 in 100 from iteration 0`); absent
    /// when it traced every one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline_sampling: Option<String>,
    /// Why tracing's own device time was not calibrated, when it was asked for and failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing_calibration: Option<String>,
    /// The iterations PC sampling ran in and its settings, or why it did not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pc_sampling: Option<String>,
    /// How rows were also published as metrics (scope depth and limit, histograms, recorder),
    /// when they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
    /// Whether rows split idle time by cause, and with what settings (`on: largest_gaps=5
    /// small_read_bytes=1024 floor=calibration`), or `off`. Absent below the timeline level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_causes: Option<String>,
}

/// Where this process sits in a multi-process job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankInfo {
    /// Global rank (`RANK`, `OMPI_COMM_WORLD_RANK`, `SLURM_PROCID`).
    pub rank: u32,
    /// Rank on this host, when the launcher set it.
    pub local_rank: Option<u32>,
    /// Number of ranks, when the launcher set it.
    pub world_size: Option<u32>,
}

/// One row per iteration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IterationRow {
    /// Iteration index, counting from 0.
    pub index: u64,
    /// Host time of the iteration's start, ns since the profiler started.
    pub host_start_ns: u64,
    /// Host wall time between the iteration's start and its end (the `step()` call).
    pub host_wall_ns: u64,
    /// False when the row was written at shutdown or after a panic before the iteration ended,
    /// or when its GPU records did not all arrive within the settle time.
    pub complete: bool,
    /// True when hardware counters (kernel serialization and replay) or PC sampling ran in this
    /// iteration: its times are then not representative and statistics leave it out.
    pub perturbed: bool,
    /// Device time per GPU.
    pub devices: Vec<DeviceIteration>,
    /// Time and launches per scope path (`step/backward`), `(unscoped)` included.
    pub scopes: Vec<ScopeRow>,
    /// Kernels grouped by name, device and launch shape.
    pub kernels: Vec<KernelGroup>,
    /// Copies grouped by device and direction.
    pub memcpy: Vec<CopyGroup>,
    /// Memsets grouped by device.
    pub memset: Vec<CopyGroup>,
    /// Host-side waits (stream, event, context synchronization) seen by CUPTI.
    pub synchronization: Vec<SyncGroup>,
    /// Activity records CUPTI reported as dropped while this iteration was open.
    pub dropped_records: u64,
    /// Launch API calls of this iteration whose GPU record did not arrive in time.
    #[serde(default)]
    pub missing_records: u64,
    /// NVML summary per device, when NVML sampling is on.
    #[serde(default)]
    pub nvml: Vec<NvmlIterationSummary>,
    /// Structural problems seen in this iteration (unbalanced scopes, scopes left open, ...).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Every kernel, copy and memset, when `Config::record_activities` is on (for traces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activities: Option<Vec<ActivityEntry>>,
    /// Every scope instance as a host span, when `Config::record_activities` is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope_spans: Option<Vec<ScopeSpan>>,
    /// Hardware counters of this iteration, when a counters pass ran in it (then `perturbed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<crate::counters::IterationCounters>,
    /// How the iteration's kernels were attributed to scopes; the counts add up to the kernel
    /// count. At the levels that trace kernels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribution: Option<AttributionCounts>,
    /// The threads whose calls launched the iteration's kernels, copies and memsets, by thread.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub launch_threads: Vec<LaunchThread>,
    /// True when the timeline sampled this iteration out (`Config::timeline_sampling`): the row
    /// has host times, scopes' host times and NVML, but no GPU records, and GPU statistics
    /// leave it out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub untraced: bool,
    /// The device time CUPTI's tracing is estimated to have added to this iteration's kernels,
    /// ns, from the header's `tracing_calibration` (per kernel and per block of its grid). It
    /// lengthens the step by as much where the GPU is the bottleneck, and hides behind the host
    /// where it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing_added_ns: Option<u64>,
    /// Warp stall reasons and hot source lines from PC sampling, when it ran in this
    /// iteration (then `perturbed`: sampling slows kernels launched while it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalls: Option<crate::stalls::IterationStalls>,
    /// The host calls the funnel asks about, by kind, scope and function: device-wide and
    /// stream synchronizations, synchronous copies and memsets, small device-to-host reads,
    /// allocations and frees (docs/idle.md). With idle causes on, in traced rows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_inventory: Vec<InventoryEntry>,
}

/// Kernels counted by how their scope was found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttributionCounts {
    /// In the innermost scope open on the thread that launched them.
    pub own_thread: u64,
    /// In a scope handed to the launching thread (`ScopeContext::enter`).
    pub handoff: u64,
    /// Launched on a thread with no scope: in the scope open at that instant on the followed
    /// thread (`Config::follow`).
    pub followed: u64,
    /// gpu-ledger's own kernels (the counters level's), found by name.
    pub profiler: u64,
    /// In no scope: `(unscoped)`.
    pub unscoped: u64,
    /// Nodes of a CUDA graph, in the scope open where they were captured, nested under the scope
    /// their graph was launched in.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub graph_capture: u64,
    /// Nodes of a CUDA graph whose capture the profiler did not see (captured before
    /// `Profiler::start()`): in the scope their graph was launched in.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub graph_launch: u64,
}

impl AttributionCounts {
    /// The kernels counted.
    pub fn total(&self) -> u64 {
        self.own_thread
            .saturating_add(self.handoff)
            .saturating_add(self.followed)
            .saturating_add(self.profiler)
            .saturating_add(self.unscoped)
            .saturating_add(self.graph_capture)
            .saturating_add(self.graph_launch)
    }
}

/// Whether a count is zero, for counts that ledgers without them leave out.
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One thread that launched work in an iteration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchThread {
    /// The thread's name, when it has one.
    #[serde(default)]
    pub name: Option<String>,
    /// The operating system's thread id (0 where unknown).
    pub tid: u32,
    /// Kernels it launched.
    pub kernels: u64,
    /// Their GPU time, summed.
    pub kernel_ns: u64,
    /// Copies and memsets it launched.
    pub copies: u64,
    /// How its kernels were attributed.
    pub attribution: AttributionCounts,
    /// Time the thread waited on a run queue, runnable but not running, ns, over the
    /// iteration (`/proc/self/task/<tid>/schedstat`, read when the collector took `step()`'s
    /// message, up to 2 ms after it). None where the file cannot be read, and for iterations
    /// shorter than the collector's tick that shared one reading with the one before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_queue_ns: Option<u64>,
    /// Time the thread ran on a CPU, ns, over the same span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_cpu_ns: Option<u64>,
    /// Times the thread was scheduled onto a CPU over the same span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeslices: Option<u64>,
}

impl LaunchThread {
    /// The thread as warnings name it: `"name" (tid N)`, or `tid N` without a name.
    pub fn label(&self) -> String {
        match &self.name {
            Some(name) => format!("\"{name}\" (tid {})", self.tid),
            None => format!("tid {}", self.tid),
        }
    }
}

/// One GPU activity of an iteration (kept only when activities are recorded).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityEntry {
    /// `kernel`, `memcpy` or `memset`.
    pub kind: String,
    /// Kernel name, copy direction (`HtoD`, ...) or `memset`.
    pub name: String,
    /// Device ordinal.
    pub device_id: u32,
    /// CUPTI stream id.
    pub stream_id: u32,
    /// GPU start, CUPTI ns (subtract the header's `start_cupti_ns` for time since start).
    pub start_ns: u64,
    /// GPU end, CUPTI ns.
    pub end_ns: u64,
    /// Scope path it was launched in.
    pub scope: String,
    /// How `scope` was found: `own_thread`, `handoff`, `followed`, `profiler`, `unscoped`,
    /// `graph_capture` or `graph_launch` (the names of [`AttributionCounts`]' fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribution: Option<String>,
    /// CUPTI correlation id of the launching call.
    pub correlation_id: u32,
    /// Bytes moved or set (copies and memsets).
    #[serde(default)]
    pub bytes: Option<u64>,
    /// CUDA graph id when launched from a graph.
    #[serde(default)]
    pub graph_id: Option<u32>,
}

/// One scope instance on the host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeSpan {
    /// Scope path.
    pub path: String,
    /// gpu-ledger's index of the thread (0 = the first thread that opened a scope).
    pub thread: u32,
    /// Entry, host ns since the profiler started.
    pub start_ns: u64,
    /// Exit, host ns since the profiler started.
    pub end_ns: u64,
}

/// Per-device figures of one iteration. Times in ns; the window is in CUPTI time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceIteration {
    /// CUDA device ordinal as CUPTI reports it.
    pub device_id: u32,
    /// Start of the first activity (CUPTI ns).
    pub first_start_ns: u64,
    /// End of the last activity (CUPTI ns).
    pub last_end_ns: u64,
    /// Union of kernel, memcpy and memset intervals: time the device was doing anything.
    pub busy_ns: u64,
    /// `last_end - first_start - busy`: gaps between activities inside the iteration's window.
    pub idle_ns: u64,
    /// Largest single gap inside the window.
    pub largest_gap_ns: u64,
    /// Kernel launches that ran on this device.
    pub kernel_count: u64,
    /// Highest device memory allocated through the CUDA allocator, as traced (bytes), when
    /// allocation records were seen; counts only allocations made while the profiler ran.
    #[serde(default)]
    pub peak_memory_bytes: Option<u64>,
    /// `idle_ns` split by cause, the gap before the window, and the longest gaps (docs/idle.md).
    /// With idle causes on (`Config::idle_causes`), in traced rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<IdleBreakdown>,
}

/// Time and launches of one scope path in one iteration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScopeRow {
    /// Slash-separated path: `step/backward`. `(unscoped)` collects launches outside any scope.
    pub path: String,
    /// Times the scope was entered and left in this iteration.
    pub calls: u64,
    /// Host wall time inside the scope, summed over calls (children included).
    pub host_ns: u64,
    /// Kernel, memcpy and memset launches made directly in this scope (children excluded).
    pub launches: u64,
    /// Kernel launches among them.
    #[serde(default)]
    pub kernels: u64,
    /// Union of the GPU intervals of activities launched directly in this scope.
    pub device_ns: u64,
    /// Union of the GPU intervals of activities launched in this scope or any scope below it.
    pub device_ns_inclusive: u64,
    /// GPU time between the scope's start and end events, when it was opened with a stream
    /// (`Profiler::scope_on`), summed over calls; `None` when no call was event-timed.
    #[serde(default)]
    pub event_device_ns: Option<u64>,
}

/// How a kernel was launched and with what resources: the shape that, with its name and device,
/// makes launches one kernel group.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct LaunchShape {
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// Cluster dimensions (0 when no cluster).
    #[serde(default)]
    pub cluster: [u32; 3],
    /// Registers per thread.
    pub registers_per_thread: u32,
    /// Static shared memory per block, bytes.
    pub static_shared_bytes: u32,
    /// Dynamic shared memory per block, bytes.
    pub dynamic_shared_bytes: u32,
    /// Local memory per thread, bytes (non-zero means spills or local arrays).
    pub local_bytes_per_thread: u32,
}

impl LaunchShape {
    /// Blocks in the grid.
    pub fn grid_blocks(&self) -> u64 {
        self.grid.iter().map(|&x| u64::from(x)).product()
    }

    /// Threads per block.
    pub fn block_threads(&self) -> u64 {
        self.block.iter().map(|&x| u64::from(x)).product()
    }
}

/// Launches of one kernel (name, device and launch shape) in one iteration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelGroup {
    /// Kernel name as CUPTI reports it (mangled for C++ kernels).
    pub name: String,
    /// Device ordinal.
    pub device_id: u32,
    /// The launch shape; its fields stand beside the group's in the ledger.
    #[serde(flatten)]
    pub shape: LaunchShape,
    /// Local memory CUPTI reports reserved for the whole launch, bytes (largest launch).
    #[serde(default)]
    pub local_bytes_total: u64,
    /// Launches.
    pub count: u64,
    /// Sum of durations, ns.
    pub total_ns: u64,
    /// Shortest launch, ns.
    pub min_ns: u64,
    /// Longest launch, ns.
    pub max_ns: u64,
    /// Launches that came from a CUDA graph.
    #[serde(default)]
    pub graph_launches: u64,
}

/// Copies or memsets of one kind in one iteration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyGroup {
    /// Device ordinal.
    pub device_id: u32,
    /// Direction for copies (`HtoD`, `DtoH`, `DtoD`, `HtoH`, `PtoP`, ...), `memset` for memsets.
    pub kind: String,
    /// Operations.
    pub count: u64,
    /// Bytes moved or set.
    pub bytes: u64,
    /// Sum of durations, ns.
    pub total_ns: u64,
}

/// Synchronization waits of one kind in one iteration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncGroup {
    /// `stream`, `event`, `context` or `stream_wait_event`.
    pub kind: String,
    /// Waits.
    pub count: u64,
    /// Sum of wait durations, ns.
    pub total_ns: u64,
}

/// The last line of a ledger.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Trailer {
    /// Iteration rows written.
    pub iterations: u64,
    /// Kernel records decoded over the whole run.
    pub kernel_records: u64,
    /// All activity records decoded over the whole run.
    pub activity_records: u64,
    /// Driver and runtime API calls the timeline level's callback captured (only the calls
    /// attribution needs are traced). Not among `activity_records`: CUPTI writes no API records
    /// for them. (Ledgers written before the callback captured calls counted CUPTI's API records
    /// here, which were.)
    #[serde(default)]
    pub api_records: u64,
    /// Activity records CUPTI dropped over the whole run.
    pub dropped_records: u64,
    /// Records that arrived after their iteration had been written (counted, not attributed).
    pub late_records: u64,
    /// Records that could not be placed in any iteration (before the first or after the last).
    pub unplaced_records: u64,
    /// Records of work in iterations a sampled timeline left untraced: the activity kinds are
    /// switched on during the iteration before a traced one and off during the one after, and
    /// what they record meanwhile is counted here, in no row.
    #[serde(default)]
    pub untraced_records: u64,
    /// Lines the writer could not write (disk full, ...), and rows the collector could not hand
    /// to a writer that had ended.
    pub lines_not_written: u64,
    /// Scopes entered, closed or handed over while their thread's state was being torn down
    /// (a guard dropped by another thread-local's destructor at thread exit): not recorded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub scopes_lost_at_thread_exit: u64,
    /// Scopes recorded under [`crate::OTHER_SCOPE_PATHS`] because the run already had as many
    /// distinct scope paths as the profiler keeps apart.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub scope_paths_folded: u64,
    /// Records of the start-up calibration of tracing's device time: its kernels (the
    /// profiler's own, launched before iteration 0) and the synchronization and memory records
    /// from before the run's start. Counted here, in no row.
    #[serde(default)]
    pub calibration_records: u64,
    /// What the profiler itself cost.
    pub overhead: Overhead,
    /// Energy over the run from NVML (iterations not perturbed), when NVML sampled.
    #[serde(default)]
    pub energy: Option<RunEnergy>,
    /// Problems over the whole run.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// PC samples summed over the run's sampled iterations, per kernel and per scope, and with
    /// a duty cycle what its windows cost; absent when PC sampling read no window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalls: Option<crate::stalls::RunStalls>,
    /// The CUDA graph nodes the run saw, when it launched or captured any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graphs: Option<GraphCounts>,
    /// The dispatch floor of each device the rows split idle time with (docs/idle.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dispatch_floors: Vec<DispatchFloor>,
}

/// What the profiler kept of CUDA graphs' nodes to attribute their kernels, copies and memsets
/// to the scopes they were captured in, over a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GraphCounts {
    /// Kernel, copy and memset nodes whose creation (stream capture or an explicit node) the
    /// profiler saw, with the scope open on the creating thread.
    #[serde(default)]
    pub nodes_captured: u64,
    /// Most node entries (captured graphs' and executable graphs' nodes) held at once: what
    /// live graphs hold, each kept until its graph is destroyed and the row of that iteration
    /// is written.
    #[serde(default)]
    pub nodes_live_peak: u64,
    /// Node entries still held at the end: of graphs not destroyed before the run ended.
    #[serde(default)]
    pub nodes_live_at_end: u64,
    /// Nodes not kept because the profiler held its bound of nodes already: their kernels are
    /// in their graph launch's scope.
    #[serde(default)]
    pub nodes_not_kept: u64,
    /// Kernels, copies and memsets of graph nodes attributed to the scope they were captured in.
    #[serde(default)]
    pub records_by_capture: u64,
    /// Kernels, copies and memsets of graph nodes whose capture the profiler did not see: in
    /// the scope of their graph launch.
    #[serde(default)]
    pub records_unseen: u64,
    /// Graph callbacks CUPTI made that could not be kept (an id it could not give, or the
    /// collector too far behind).
    #[serde(default)]
    pub callbacks_lost: u64,
}

/// The profiler's own measured cost during the run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Overhead {
    /// Sum of CUPTI's own overhead records (buffer flushes, instrumentation), ns.
    pub cupti_overhead_ns: u64,
    /// Time spent inside gpu-ledger's buffer callbacks, ns.
    pub buffer_callback_ns: u64,
    /// CPU time of the collector thread (decoding, attribution), ns.
    pub collector_cpu_ns: u64,
    /// CPU time of the writer thread, ns.
    pub writer_cpu_ns: u64,
    /// Activity buffers handed to CUPTI over the run.
    pub buffers_used: u64,
    /// Buffer requests the pool could not serve (each drops records).
    pub buffer_requests_refused: u64,
    /// Time the application's threads spent inside `Profiler::step()`, summed, ns: on a
    /// training loop's critical path when `step()` follows a synchronize. Counters passes are
    /// ended and begun there, so with counters it includes their cost.
    #[serde(default)]
    pub step_ns: u64,
    /// The clock scope guards read: `tsc` where the kernel keeps time with the TSC (scopes read
    /// it directly, the collector converts), else `monotonic` (`clock_gettime`). Empty in
    /// ledgers written before it was recorded.
    #[serde(default)]
    pub scope_clock: String,
    /// Timing events made for scopes on a stream (`Profiler::scope_on`). The pool reuses each
    /// once the collector has read it, so this is how many were in flight at most, not one per
    /// scope; each lives until the run ends. 0 in ledgers written before it was recorded.
    #[serde(default)]
    pub scope_events_made: u64,
    /// Time `step()` spent switching a sampled timeline's tracing on and off, ns (included in
    /// `step_ns`).
    #[serde(default)]
    pub sampling_switch_ns: u64,
    /// Time the collector thread spent switching a sampled timeline's tracing on ahead of a
    /// traced iteration and off after it, ns: the switches kept off the stepping thread.
    #[serde(default)]
    pub sampling_switch_collector_ns: u64,
    /// Time the collector thread spent publishing rows as metrics (included in
    /// `collector_cpu_ns`), ns: what the application's recorder costs per row.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub metrics_publish_ns: u64,
}
