//! A scripted [`NvmlSource`] for tests: every figure comes from a closure.

use std::time::{Duration, Instant};

use super::error::NvmlError;
use super::samples::NvmlReading;
use super::source::{NvmlSource, PcieCounters};
use crate::ledger::PowerKind;

/// A scripted [`NvmlSource`]: readings and energy come from closures of
/// `(nvml_index, time since the source was created)`.
pub(crate) struct FakeNvmlSource {
    devices: u32,
    created: Instant,
    reading: ReadingFn,
    energy: EnergyFn,
    pcie: Option<PcieFn>,
}

type ReadingFn = Box<dyn FnMut(u32, Duration) -> Result<NvmlReading, NvmlError> + Send>;
type EnergyFn = Box<dyn FnMut(u32, Duration) -> Result<u64, NvmlError> + Send>;
type PcieFn = Box<dyn FnMut(u32, Duration) -> Result<PcieCounters, NvmlError> + Send>;

impl std::fmt::Debug for FakeNvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeNvmlSource")
            .field("devices", &self.devices)
            .finish_non_exhaustive()
    }
}

impl FakeNvmlSource {
    /// A fake with `devices` devices whose readings and energy counter come from the closures.
    pub(crate) fn new(
        devices: u32,
        reading: impl FnMut(u32, Duration) -> Result<NvmlReading, NvmlError> + Send + 'static,
        energy: impl FnMut(u32, Duration) -> Result<u64, NvmlError> + Send + 'static,
    ) -> Self {
        Self {
            devices,
            created: Instant::now(),
            reading: Box::new(reading),
            energy: Box::new(energy),
            pcie: None,
        }
    }

    /// Adds PCIe byte counters from `pcie` (without it the fake reports none).
    pub(crate) fn with_pcie(
        mut self,
        pcie: impl FnMut(u32, Duration) -> Result<PcieCounters, NvmlError> + Send + 'static,
    ) -> Self {
        self.pcie = Some(Box::new(pcie));
        self
    }

    /// A fake whose devices all draw `power_w` at `sm_clock_mhz`, with an energy counter that
    /// integrates that power exactly.
    pub(crate) fn constant(devices: u32, power_w: f64, sm_clock_mhz: u32) -> Self {
        let power_mw = (power_w * 1000.0).round().max(0.0) as u32;
        Self::new(
            devices,
            move |_, _| {
                Ok(NvmlReading {
                    sm_clock_mhz: Some(sm_clock_mhz),
                    mem_clock_mhz: Some(2619),
                    power_mw: Some(power_mw),
                    power_kind: Some(PowerKind::Instant),
                    temperature_c: Some(40),
                    throttle_reasons: Some(0),
                    memory_used_bytes: Some(1 << 30),
                    ..NvmlReading::default()
                })
            },
            move |_, t| Ok((power_w * t.as_secs_f64() * 1000.0).max(0.0) as u64),
        )
    }
}

impl NvmlSource for FakeNvmlSource {
    fn device_count(&mut self) -> Result<u32, NvmlError> {
        Ok(self.devices)
    }

    fn read_sample(&mut self, nvml_index: u32) -> Result<NvmlReading, NvmlError> {
        if nvml_index >= self.devices {
            return Err(NvmlError::Device {
                index: nvml_index,
                what: "device handle",
                detail: "no such device in the fake".to_owned(),
            });
        }
        (self.reading)(nvml_index, self.created.elapsed())
    }

    fn read_energy_mj(&mut self, nvml_index: u32) -> Result<u64, NvmlError> {
        if nvml_index >= self.devices {
            return Err(NvmlError::Device {
                index: nvml_index,
                what: "device handle",
                detail: "no such device in the fake".to_owned(),
            });
        }
        (self.energy)(nvml_index, self.created.elapsed())
    }

    fn read_pcie_bytes(&mut self, nvml_index: u32) -> Result<PcieCounters, NvmlError> {
        let elapsed = self.created.elapsed();
        match &mut self.pcie {
            Some(f) => f(nvml_index, elapsed),
            None => Ok(PcieCounters::default()),
        }
    }
}
