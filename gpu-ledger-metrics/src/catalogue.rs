//! Every metric gpu-ledger publishes: its name, type, unit, labels, the rows that feed it and its
//! help text; and the histogram buckets.
//!
//! Names follow Prometheus' conventions (base units in the name, `_total` on counters) and, where
//! an OpenTelemetry semantic convention names the figure (`hw.gpu.power`, `hw.energy`,
//! `hw.gpu.memory.usage`), its Prometheus form after the `gpu_ledger_` prefix. Device series carry
//! the label `UUID` spelled as NVIDIA's dcgm-exporter spells it, so that a query joins them to
//! DCGM's device figures with `on(UUID)`.

use metrics::Unit;

/// A metric's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (a `u64` count).
    Counter,
    /// The last row's value.
    Gauge,
    /// One observation per row: `_sum`, `_count` and buckets.
    Histogram,
}

impl Kind {
    /// As Prometheus' `# TYPE` line names it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// The labels of a metric's series. Every series also has `rank` when the launcher set one
/// (`RANK`, `OMPI_COMM_WORLD_RANK`, `SLURM_PROCID`; the ledger header's `rank`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Labels {
    /// `rank` only.
    Run,
    /// `version` (gpu-ledger's) and `level` (`scopes`, `timeline`, `counters`).
    RunInfo,
    /// `device` (the CUDA ordinal, as the ledger's `device_id`) and `UUID` (`GPU-…`, empty when
    /// the ledger has none).
    Device,
    /// The device's labels and one more.
    DeviceAnd(&'static str),
    /// `scope`: the scope path (`step/forward`), `(unscoped)`, or `(other)` for the top-level
    /// paths past the limit ([`MetricsOptions`](crate::MetricsOptions)).
    Scope,
}

/// Which rows feed a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rows {
    /// Every row.
    All,
    /// Rows that are not `perturbed` (hardware counters or PC sampling lengthened their times).
    NotPerturbed,
    /// Rows with GPU records: at the timeline and counters levels, not `untraced` by a sampled
    /// timeline.
    Traced,
    /// Traced rows that are not perturbed.
    TracedNotPerturbed,
    /// Rows with an NVML summary of the device (every row while NVML samples).
    Nvml,
    /// NVML summaries of rows that are not perturbed.
    NvmlNotPerturbed,
    /// Published once per run (and again when the recorder changes).
    Once,
    /// Named and described, not published yet: the ledger has no such figure.
    Reserved,
}

/// One metric of [`METRICS`].
#[derive(Clone, Copy, Debug)]
pub struct MetricDef {
    /// The series' name, as exported.
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// Its unit for the `metrics` facade (`None` where `metrics::Unit` has none: hertz, watts,
    /// joules, degrees, ratios); the name carries it either way.
    pub unit: Option<Unit>,
    /// Its labels.
    pub labels: Labels,
    /// The rows that feed it.
    pub rows: Rows,
    /// What it measures (the exporter's `# HELP`).
    pub help: &'static str,
}

macro_rules! catalogue {
    ($( $id:ident = $name:literal, $kind:ident, $unit:expr, $labels:expr, $rows:ident, $help:literal; )*) => {
        /// A metric of the catalogue, by its position in [`METRICS`]. Reserved metrics are
        /// named before anything publishes them.
        #[allow(non_camel_case_types, clippy::upper_case_acronyms, clippy::enum_variant_names, dead_code)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub(crate) enum M { $($id),* }

        /// The metrics' names, as constants.
        pub mod names {
            $(
                #[doc = $help]
                pub const $id: &str = $name;
            )*
        }

        /// Every metric gpu-ledger publishes (and the ones it reserves), in the order of the
        /// README's list.
        pub static METRICS: &[MetricDef] = &[
            $( MetricDef {
                name: $name,
                kind: Kind::$kind,
                unit: $unit,
                labels: $labels,
                rows: Rows::$rows,
                help: $help,
            } ),*
        ];
    };
}

catalogue! {
    ITERATIONS = "gpu_ledger_iterations_total", Counter, Some(Unit::Count), Labels::Run, All,
        "Iteration rows published: one per ledger row.";
    ITERATIONS_UNTRACED = "gpu_ledger_iterations_untraced_total", Counter, Some(Unit::Count), Labels::Run, All,
        "Rows of iterations a sampled timeline left untraced: host times, scopes and NVML only.";
    ITERATIONS_PERTURBED = "gpu_ledger_iterations_perturbed_total", Counter, Some(Unit::Count), Labels::Run, All,
        "Rows whose times hardware counters or PC sampling lengthened; their times stay out of the histograms.";
    ITERATIONS_INCOMPLETE = "gpu_ledger_iterations_incomplete_total", Counter, Some(Unit::Count), Labels::Run, All,
        "Rows written before every GPU record of the iteration arrived, or at shutdown.";
    ITERATION_INDEX = "gpu_ledger_iteration_index", Gauge, None, Labels::Run, All,
        "Index of the last iteration published, counting from 0.";
    ITERATION_DURATION = "gpu_ledger_iteration_duration_seconds", Histogram, Some(Unit::Seconds), Labels::Run, NotPerturbed,
        "Host wall time of each iteration, from its start to its step().";
    DROPPED_RECORDS = "gpu_ledger_dropped_records_total", Counter, Some(Unit::Count), Labels::Run, Traced,
        "CUPTI activity records dropped while the iteration was open.";
    MISSING_RECORDS = "gpu_ledger_missing_records_total", Counter, Some(Unit::Count), Labels::Run, Traced,
        "Launches whose GPU record had not arrived when the row was written.";
    TRACING_ADDED = "gpu_ledger_tracing_added_seconds", Histogram, Some(Unit::Seconds), Labels::Run, TracedNotPerturbed,
        "Device time CUPTI's tracing is estimated to have added to the iteration's kernels.";
    ITERATION_ENERGY = "gpu_ledger_iteration_energy_joules", Histogram, None, Labels::Run, NvmlNotPerturbed,
        "Energy of each iteration over all its devices, when every device has a figure.";
    SCOPE_ROWS_UNPUBLISHED = "gpu_ledger_scope_rows_unpublished_total", Counter, Some(Unit::Count), Labels::Run, All,
        "Scope rows without a series of their own: top-level paths past the limit are summed into scope (other), deeper ones are inside their ancestors' figures.";
    SCOPE_CALLS = "gpu_ledger_scope_calls_total", Counter, Some(Unit::Count), Labels::Scope, All,
        "Times the scope was entered and left.";
    SCOPE_HOST = "gpu_ledger_scope_host_seconds", Histogram, Some(Unit::Seconds), Labels::Scope, NotPerturbed,
        "Host wall time inside the scope per iteration, its children included.";
    SCOPE_DEVICE = "gpu_ledger_scope_device_seconds", Histogram, Some(Unit::Seconds), Labels::Scope, TracedNotPerturbed,
        "Device time of the work launched in the scope or below it per iteration (union of its GPU intervals).";
    SCOPE_EVENT_DEVICE = "gpu_ledger_scope_event_device_seconds", Histogram, Some(Unit::Seconds), Labels::Scope, NotPerturbed,
        "GPU time between the scope's start and end events per iteration, for scopes opened on a stream.";
    DEVICE_BUSY = "gpu_ledger_device_busy_seconds", Histogram, Some(Unit::Seconds), Labels::Device, TracedNotPerturbed,
        "Time the device ran kernels, copies or memsets per iteration (union of their intervals).";
    DEVICE_IDLE = "gpu_ledger_device_idle_seconds", Histogram, Some(Unit::Seconds), Labels::Device, TracedNotPerturbed,
        "Gaps between the device's activities per iteration, inside its first-to-last activity window.";
    DEVICE_IDLE_CAUSE = "gpu_ledger_device_idle_cause_seconds", Histogram, Some(Unit::Seconds), Labels::DeviceAnd("cause"), TracedNotPerturbed,
        "Idle time per iteration by cause (launch_latency, host_launch, dependency, unknown), for rows that split it; the causes add up to the idle time.";
    DEVICE_BUSY_RATIO = "gpu_ledger_device_busy_ratio", Gauge, None, Labels::Device, TracedNotPerturbed,
        "Busy time over the host wall time of the last traced iteration (that iteration's hw.gpu.utilization).";
    DEVICE_IDLE_RATIO = "gpu_ledger_device_idle_ratio", Gauge, None, Labels::Device, TracedNotPerturbed,
        "Idle time over the device's first-to-last activity window of the last traced iteration.";
    DEVICE_KERNELS = "gpu_ledger_device_kernels_total", Counter, Some(Unit::Count), Labels::Device, Traced,
        "Kernels that ran on the device.";
    GPU_SM_CLOCK = "gpu_ledger_gpu_sm_clock_hertz", Gauge, None, Labels::Device, Nvml,
        "Mean SM clock over the last iteration, from NVML (DCGM_FI_DEV_SM_CLOCK, in hertz).";
    GPU_MEMORY_CLOCK = "gpu_ledger_gpu_memory_clock_hertz", Gauge, None, Labels::Device, Nvml,
        "Mean memory clock over the last iteration, from NVML (DCGM_FI_DEV_MEM_CLOCK, in hertz).";
    GPU_POWER = "gpu_ledger_hw_gpu_power_watts", Gauge, None, Labels::Device, Nvml,
        "Mean board power over the last iteration, from NVML (hw.gpu.power).";
    GPU_ENERGY = "gpu_ledger_hw_energy_joules", Histogram, None, Labels::Device, NvmlNotPerturbed,
        "Energy of the device per iteration, from NVML; the sum is the device's energy (hw.energy).";
    GPU_TEMPERATURE = "gpu_ledger_gpu_temperature_celsius", Gauge, None, Labels::Device, Nvml,
        "Highest GPU temperature over the last iteration, from NVML.";
    GPU_MEMORY_USAGE = "gpu_ledger_hw_gpu_memory_usage_bytes", Gauge, Some(Unit::Bytes), Labels::Device, Nvml,
        "Highest device memory in use (all processes) over the last iteration, from NVML (hw.gpu.memory.usage).";
    GPU_PCIE = "gpu_ledger_gpu_pcie_bytes_per_second", Gauge, None, Labels::DeviceAnd("direction"), Nvml,
        "PCIe traffic over the last iteration, from NVML's byte counters (direction transmit or receive).";
    GPU_THROTTLE = "gpu_ledger_gpu_throttle_iterations_total", Counter, Some(Unit::Count), Labels::DeviceAnd("reason"), Nvml,
        "Iterations in which NVML reported this clock-event (throttle) reason.";
    GPU_NVML_COARSE = "gpu_ledger_gpu_nvml_coarse_iterations_total", Counter, Some(Unit::Count), Labels::Device, Nvml,
        "Iterations shorter than NVML's update period: their NVML figures come from one covering sample.";
    RUN_INFO = "gpu_ledger_run_info", Gauge, None, Labels::RunInfo, Once,
        "Always 1: the profiler's version and level as labels.";
    DEVICE_INFO = "gpu_ledger_device_info", Gauge, None, Labels::DeviceAnd("name"), Once,
        "Always 1: each GPU of the ledger header with its name as a label.";
}

impl M {
    /// Its entry in [`METRICS`].
    #[inline]
    pub(crate) fn def(self) -> &'static MetricDef {
        &METRICS[self as usize]
    }
}

/// Histogram buckets for the `_seconds` histograms: 100 µs to 60 s, covering a training step's
/// scopes and iterations.
pub const SECONDS_BUCKETS: &[f64] = &[
    1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0,
];

/// Histogram buckets for the `_joules` histograms: 0.1 J to 10 kJ per iteration.
pub const JOULES_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1e3, 2.5e3, 5e3, 1e4,
];

/// The buckets of the histogram `name` (by its unit suffix), as an exporter should set them:
/// `PrometheusBuilder::set_buckets_for_metric(Matcher::Suffix("_seconds".into()),
/// SECONDS_BUCKETS)`, and the same for `_joules`.
pub fn buckets_for(name: &str) -> &'static [f64] {
    if name.ends_with("_joules") {
        JOULES_BUCKETS
    } else {
        SECONDS_BUCKETS
    }
}
