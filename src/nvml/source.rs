//! Where samples come from: the [`NvmlSource`] trait the sampler reads through, so that the
//! sampler and its tests run the same code with or without a GPU.

use super::error::NvmlError;
use super::samples::NvmlReading;

/// Where samples come from: the NVML library ([`NvmlLibrary`](super::NvmlLibrary)) or, in tests,
/// a scripted fake.
///
/// Called only from the sampler thread.
pub trait NvmlSource: Send {
    /// Number of devices NVML sees.
    ///
    /// # Errors
    /// When NVML cannot count its devices.
    fn device_count(&mut self) -> Result<u32, NvmlError>;

    /// Reads clocks, power, temperature, throttle reasons and memory used of one device (not the
    /// PCIe counters: see [`NvmlSource::read_pcie_bytes`]). Cheap (microseconds). A figure that
    /// cannot be read is `None` with a line in `NvmlReading::field_errors`.
    ///
    /// # Errors
    /// When the device itself cannot be reached.
    fn read_sample(&mut self, nvml_index: u32) -> Result<NvmlReading, NvmlError>;

    /// Reads the energy counter of one device, in millijoules since the driver was loaded.
    /// Expensive (milliseconds, the slowest read by far): the sampler calls it at its own, slower
    /// rate.
    ///
    /// # Errors
    /// When the device has no energy counter or cannot be reached.
    fn read_energy_mj(&mut self, nvml_index: u32) -> Result<u64, NvmlError>;

    /// Reads the PCIe byte counters of one device. Each costs many times a clock read, so the
    /// sampler reads them at its own, slower rate
    /// ([`DEFAULT_PCIE_PERIOD`](super::DEFAULT_PCIE_PERIOD)). The default reports no counters.
    ///
    /// # Errors
    /// When the device cannot be reached.
    fn read_pcie_bytes(&mut self, nvml_index: u32) -> Result<PcieCounters, NvmlError> {
        let _ = nvml_index;
        Ok(PcieCounters::default())
    }
}

/// PCIe byte counters of one device (`NVML_FI_DEV_PCIE_COUNT_{TX,RX}_BYTES`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PcieCounters {
    /// Bytes transmitted by the device, a counter that may wrap.
    pub tx_bytes: Option<u64>,
    /// Bytes received by the device, same convention.
    pub rx_bytes: Option<u64>,
    /// Why a counter is `None`.
    pub field_errors: Vec<String>,
}

impl<S: NvmlSource + ?Sized> NvmlSource for Box<S> {
    fn device_count(&mut self) -> Result<u32, NvmlError> {
        (**self).device_count()
    }
    fn read_sample(&mut self, nvml_index: u32) -> Result<NvmlReading, NvmlError> {
        (**self).read_sample(nvml_index)
    }
    fn read_energy_mj(&mut self, nvml_index: u32) -> Result<u64, NvmlError> {
        (**self).read_energy_mj(nvml_index)
    }
    fn read_pcie_bytes(&mut self, nvml_index: u32) -> Result<PcieCounters, NvmlError> {
        (**self).read_pcie_bytes(nvml_index)
    }
}
