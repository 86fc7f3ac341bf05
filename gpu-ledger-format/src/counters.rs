//! The ledger records of the counters level: what the header says of the counters asked for,
//! and what a row of a counters window holds. All fields are additive (`#[serde(default)]`
//! where a reader of an older ledger may miss them).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Header record: what counters were asked for and whether they are collected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CountersHeader {
    /// True when the Range Profiler was set up; false when counters are not collected.
    pub collected: bool,
    /// Why not, when not (the error text, with its fix).
    #[serde(default)]
    pub reason: Option<String>,
    /// The class of the reason (`no_permission`, `hardware_busy`, `unsupported_device`, ...).
    #[serde(default)]
    pub unavailable: Option<Unavailable>,
    /// The chip CUPTI reports (`GH100`).
    #[serde(default)]
    pub chip: Option<String>,
    /// The requested list as given (metric names and preset names).
    #[serde(default)]
    pub requested: Vec<String>,
    /// The metrics collected (presets expanded).
    #[serde(default)]
    pub metrics: Vec<String>,
    /// Optional preset metrics this chip lacks.
    #[serde(default)]
    pub dropped_metrics: Vec<DroppedMetric>,
    /// Config passes the metric set needs.
    #[serde(default)]
    pub passes: u32,
    /// Iterations one collection takes (user replay: one pass per iteration).
    #[serde(default)]
    pub iterations_per_collection: u32,
    /// `user` or `auto`.
    pub range_mode: RangeMode,
    /// `user` or `kernel`.
    pub replay_mode: ReplayMode,
    /// User-range nesting levels collected.
    #[serde(default = "one")]
    pub nesting_levels: u16,
    /// The L2's state at the start of each range: `as_left` (what the previous work left) or
    /// `flushed` (every earlier line evicted first).
    #[serde(default)]
    pub cache: CacheState,
}

fn one() -> u16 {
    1
}

/// Row record: the counters of one iteration of a counters window. With user replay a collection
/// spans `passes` consecutive iterations; every one of them is `perturbed` and carries this
/// record, and the values are in the row of the iteration that completed the collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IterationCounters {
    /// Index of the collection (window) in the run, from 0.
    pub collection: u64,
    /// The iteration the collection began in.
    pub first_iteration: u64,
    /// This iteration's run within the collection, from 1.
    pub run: u32,
    /// Runs the collection takes.
    pub runs: u32,
    /// True in the row that holds the values (the collection's last run).
    pub complete: bool,
    /// The ranges, when `complete`.
    #[serde(default)]
    pub ranges: Vec<CounterRange>,
    /// Ranges CUPTI could not store.
    #[serde(default)]
    pub dropped_ranges: u64,
    /// Why a started collection produced no values (an error, an aborted window).
    #[serde(default)]
    pub error: Option<String>,
}

/// One range's values in a ledger row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterRange {
    /// Scope path (`step/forward`) for user ranges; the launch index for auto ranges.
    pub name: String,
    /// Nesting depth (1 = top level).
    pub depth: u32,
    /// Auto ranges: the kernel.
    #[serde(default)]
    pub kernel: Option<String>,
    /// Auto ranges: launch index within the iteration.
    #[serde(default)]
    pub launch_index: Option<u64>,
    /// Metric name -> value, as evaluated by CUPTI.
    #[serde(deserialize_with = "crate::float::map_null_as_nan")]
    pub values: BTreeMap<String, f64>,
    /// Figures derived from the values.
    #[serde(default)]
    pub derived: Derived,
}

/// How ranges are delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RangeMode {
    /// Ranges are what the caller pushes and pops (gpu-ledger scopes); nested names are kept as
    /// paths (`a`, `a/c`).
    User,
    /// One range per kernel launch, named `"0"`, `"1"`, ... in launch order.
    Auto,
}

impl RangeMode {
    /// `user` or `auto`.
    pub fn as_str(self) -> &'static str {
        match self {
            RangeMode::User => "user",
            RangeMode::Auto => "auto",
        }
    }
}

/// How a metric set that needs several passes is replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayMode {
    /// The caller runs the same work once per pass (for gpu-ledger: consecutive iterations of the
    /// application's loop are the replay).
    User,
    /// CUPTI replays each kernel itself, saving and restoring device memory between passes
    /// (auto ranges only).
    Kernel,
}

impl ReplayMode {
    /// `user` or `kernel`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplayMode::User => "user",
            ReplayMode::Kernel => "kernel",
        }
    }
}

/// The L2's state at the start of each counted range.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheState {
    /// As the previous work left it: the application's own state. A range's DRAM writes include
    /// the write-back of lines that earlier work left dirty, and its reads miss less where the
    /// earlier work read the same data (Nsight Compute's `--cache-control none`).
    #[default]
    AsLeft,
    /// Flushed before each top-level user range: the context's work is waited for, then a read
    /// of several times the L2's size evicts every earlier line, so that the range starts with
    /// no dirty line and none of its own data in L2 (Nsight Compute's `--cache-control all`).
    /// User ranges with one nesting level only; the waits and the flush perturb the iteration.
    Flushed,
}

impl CacheState {
    /// `as_left` or `flushed`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheState::AsLeft => "as_left",
            CacheState::Flushed => "flushed",
        }
    }
}

/// Why counters were not collected: what the ledger header records, with the fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unavailable {
    /// No permission to read the counters (ERR_NVGPUCTRPERM).
    NoPermission,
    /// Another tool holds the counters.
    HardwareBusy,
    /// The GPU or its configuration cannot be profiled.
    UnsupportedDevice,
    /// A requested metric does not exist on this GPU.
    UnknownMetric,
    /// CUPTI or the CUDA driver is missing or of the wrong version.
    NoCupti,
    /// The loaded CUPTI release lacks what was asked for (auto ranges, a kind of metric).
    UnsupportedRelease,
    /// Anything else (the error text says what).
    Other,
}

/// A preset metric the chip lacks, left out of the collection.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DroppedMetric {
    /// The metric.
    pub name: String,
    /// The preset that asked for it.
    pub preset: String,
    /// Why it was left out.
    pub reason: String,
}

/// Figures derived for one range; a field is present only when its inputs were collected.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Derived {
    /// DRAM bytes read plus written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dram_bytes: Option<f64>,
    /// Achieved DRAM bandwidth, bytes/s (DRAM bytes over `gpu__time_duration.sum`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dram_bandwidth_bytes_per_s: Option<f64>,
    /// DRAM throughput, % of peak (the collected metric, else bandwidth over the given peak).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dram_pct_of_peak: Option<f64>,
    /// FP32 FLOPs (add + mul + 2 fma).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp32_flops: Option<f64>,
    /// FP16 FLOPs (add + mul + 2 fma, per instruction as ncu counts them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp16_flops: Option<f64>,
    /// FP64 FLOPs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp64_flops: Option<f64>,
    /// All FLOPs counted above per DRAM byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arithmetic_intensity_dram: Option<f64>,
    /// Global-load sectors per request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_load_sectors_per_request: Option<f64>,
    /// Global-store sectors per request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_store_sectors_per_request: Option<f64>,
    /// Global-load sector efficiency (useful bytes over sector bytes, `access_bytes` per thread).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_load_sector_efficiency: Option<f64>,
    /// Global-store sector efficiency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_store_sector_efficiency: Option<f64>,
    /// The per-thread access width the efficiencies assumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sector_efficiency_access_bytes: Option<f64>,
    /// Shared-memory load bank conflicts per load wavefront.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_load_conflicts_per_wavefront: Option<f64>,
    /// The first-pass class: memory, compute, both or latency bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<Bound>,
}

/// The first-pass classification of a range from its memory and compute throughput as % of
/// their peaks: a high share of one peak and a low share of the other names what bounds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// High memory throughput, low compute: reduce bytes (coalescing, reuse, fusion).
    Memory,
    /// High compute throughput, low memory: reduce or cheapen instructions (pipes, precision).
    Compute,
    /// Both high: the range is near its roof; only algorithmic change or fusion moves it.
    Both,
    /// Both low: neither unit is fed; latency or too little parallelism (occupancy, stalls).
    Latency,
}

impl Bound {
    /// The next step for this class.
    pub fn next_step(self) -> &'static str {
        match self {
            Bound::Memory => "memory-bound: reduce bytes moved (coalescing, reuse, fusion)",
            Bound::Compute => "compute-bound: reduce or move instructions (pipe mix, Tensor Cores)",
            Bound::Both => "both high: near the roof; fuse or change the algorithm",
            Bound::Latency => {
                "latency-bound: neither unit is fed; look at occupancy, eligible warps and stalls"
            }
        }
    }
}
