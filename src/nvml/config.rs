//! What the sampler reads, how often, and how much it keeps.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::aggregation::SummaryParams;

/// How often NVML refreshes power, energy and clock values; a shorter window cannot be resolved.
pub(crate) const NVML_UPDATE_PERIOD: Duration = Duration::from_millis(100);
/// Default sampling period: five samples per NVML update (see the module docs).
pub const DEFAULT_SAMPLE_PERIOD: Duration = Duration::from_millis(20);
/// Default period between two energy-counter reads of one device: the counter is by far the
/// slowest NVML read, so it gets its own, slower rate (see the module docs).
pub const DEFAULT_ENERGY_PERIOD: Duration = Duration::from_millis(500);
/// Default period between two reads of the PCIe byte counters, which cost far more than the
/// other figures of a sample; rates come from counter differences, so reading them less often
/// loses only resolution.
pub const DEFAULT_PCIE_PERIOD: Duration = Duration::from_millis(100);
/// Shortest window whose energy is taken from the energy counter (5 % worst-case error bound).
pub(crate) const DEFAULT_ENERGY_COUNTER_MIN_WINDOW: Duration = Duration::from_secs(2);
/// Default number of samples kept per device (21.8 minutes at 20 ms).
pub(crate) const DEFAULT_RING_CAPACITY: usize = 1 << 16;
/// Default number of energy-counter reads kept per device (2.3 hours at 500 ms).
pub(crate) const DEFAULT_ENERGY_RING_CAPACITY: usize = 1 << 14;
/// Default time [`NvmlSampler::stop`](super::NvmlSampler::stop) (and `Drop`) waits for the
/// thread to finish.
pub(crate) const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_millis(500);
/// Name of the sampler thread.
pub(crate) const SAMPLER_THREAD_NAME: &str = "gpu-ledger-nvml";

/// A device to sample: its CUDA ordinal (the `device_id` of ledger rows) and its NVML index.
///
/// The two differ when `CUDA_VISIBLE_DEVICES` or `CUDA_DEVICE_ORDER` reorder devices; build the
/// list with `Environment::sampled_devices`, which matches them by UUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SampledDevice {
    /// CUDA device ordinal, as in ledger rows.
    pub(crate) device_id: u32,
    /// NVML device index.
    pub(crate) nvml_index: u32,
}

/// Configuration of [`NvmlSampler`](super::NvmlSampler).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NvmlSamplerConfig {
    /// Time between two samples of every device. Default [`DEFAULT_SAMPLE_PERIOD`].
    pub(crate) period: Duration,
    /// Time between two energy-counter reads of one device; `None` never reads the counter
    /// (energy is then always integrated from power). Default [`DEFAULT_ENERGY_PERIOD`].
    pub(crate) energy_period: Option<Duration>,
    /// Time between two reads of the PCIe byte counters (rounded up to whole sample periods);
    /// `None` never reads them. Default [`DEFAULT_PCIE_PERIOD`].
    pub(crate) pcie_period: Option<Duration>,
    /// NVML's own refresh period: shorter windows are coarse. Default [`NVML_UPDATE_PERIOD`].
    pub(crate) update_period: Duration,
    /// Shortest window whose energy comes from the counter.
    /// Default [`DEFAULT_ENERGY_COUNTER_MIN_WINDOW`].
    pub(crate) energy_counter_min_window: Duration,
    /// Samples kept per device. Default [`DEFAULT_RING_CAPACITY`].
    pub(crate) ring_capacity: usize,
    /// Energy reads kept per device. Default [`DEFAULT_ENERGY_RING_CAPACITY`].
    pub(crate) energy_ring_capacity: usize,
    /// Devices to sample (from `Environment::sampled_devices`); `None` samples every NVML device
    /// with `device_id = nvml_index`, which is right only when CUDA and NVML order devices alike.
    /// `Some` of an empty list is an error, never "all devices".
    pub(crate) devices: Option<Vec<SampledDevice>>,
    /// How long `Drop` waits for the thread. Default [`DEFAULT_STOP_TIMEOUT`].
    pub(crate) stop_timeout: Duration,
}

impl Default for NvmlSamplerConfig {
    fn default() -> Self {
        Self {
            period: DEFAULT_SAMPLE_PERIOD,
            energy_period: Some(DEFAULT_ENERGY_PERIOD),
            pcie_period: Some(DEFAULT_PCIE_PERIOD),
            update_period: NVML_UPDATE_PERIOD,
            energy_counter_min_window: DEFAULT_ENERGY_COUNTER_MIN_WINDOW,
            ring_capacity: DEFAULT_RING_CAPACITY,
            energy_ring_capacity: DEFAULT_ENERGY_RING_CAPACITY,
            devices: None,
            stop_timeout: DEFAULT_STOP_TIMEOUT,
        }
    }
}

impl NvmlSamplerConfig {
    /// The aggregation parameters this configuration implies.
    pub(crate) fn summary_params(&self) -> SummaryParams {
        SummaryParams {
            update_period_ns: duration_ns(self.update_period),
            energy_counter_min_window_ns: duration_ns(self.energy_counter_min_window),
            covering_max_ns: duration_ns(self.update_period.max(self.period)),
        }
    }
}

impl Default for SummaryParams {
    fn default() -> Self {
        NvmlSamplerConfig::default().summary_params()
    }
}

pub(crate) fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
