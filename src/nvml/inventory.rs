//! What NVML tells about each device at the start of a run, for the environment record: the
//! [`NvmlInventory`] trait, the [`GpuProbe`] it fills, and the NVML library's answers.

use nvml_wrapper::enum_wrappers::device::{
    Clock, ComputeMode, PerformanceState, TemperatureSensor,
};
use nvml_wrapper::enums::device::DeviceArchitecture;
use nvml_wrapper::error::NvmlError as WrapperError;
use nvml_wrapper::Device;

use super::library::NvmlLibrary;
use super::samples::throttle_reason_names;
use crate::ledger::NvmlGpuRecord;

/// Per-GPU NVML items, collected through [`NvmlInventory::probe_device`].
///
/// Each item is `put` with its value or the reason it could not be read; the reasons become
/// lines of [`Environment::missing`](crate::ledger::Environment::missing).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuProbe {
    record: NvmlGpuRecord,
    missing: Vec<String>,
}

impl GpuProbe {
    /// An empty probe for NVML device `index`.
    pub(crate) fn new(index: u32) -> Self {
        Self {
            record: NvmlGpuRecord {
                index,
                ..NvmlGpuRecord::default()
            },
            missing: Vec::new(),
        }
    }

    /// Records one item: its value, or why it could not be read.
    pub fn put<T>(
        &mut self,
        field: &str,
        value: Result<T, String>,
        slot: impl FnOnce(&mut NvmlGpuRecord) -> &mut Option<T>,
    ) {
        match value {
            Ok(v) => *slot(&mut self.record) = Some(v),
            Err(reason) => {
                *slot(&mut self.record) = None;
                self.missing.push(format!(
                    "nvml_gpus[{}].{field}: {reason}",
                    self.record.index
                ));
            }
        }
    }

    /// Records that the whole device could not be probed.
    pub fn fail(&mut self, reason: &str) {
        self.missing
            .push(format!("nvml_gpus[{}]: {reason}", self.record.index));
    }

    /// The record and its missing lines.
    pub(crate) fn finish(self) -> (NvmlGpuRecord, Vec<String>) {
        (self.record, self.missing)
    }
}

/// What the environment record needs from NVML: implemented by [`NvmlLibrary`], and by fakes in
/// tests. Errors are reasons in words.
pub trait NvmlInventory {
    /// NVIDIA driver version.
    ///
    /// # Errors
    /// The reason it cannot be read.
    fn driver_version(&self) -> Result<String, String>;
    /// NVML library version.
    ///
    /// # Errors
    /// The reason it cannot be read.
    fn nvml_version(&self) -> Result<String, String>;
    /// Number of devices NVML sees.
    ///
    /// # Errors
    /// The reason it cannot be read.
    fn device_count(&self) -> Result<u32, String>;
    /// Fills `probe` with the items of device `index` (see [`NvmlGpuRecord`]).
    fn probe_device(&self, index: u32, probe: &mut GpuProbe);
}

fn probe_reason(e: WrapperError) -> String {
    match e {
        WrapperError::NotSupported => "not supported by this device".to_owned(),
        WrapperError::NoPermission => "permission denied".to_owned(),
        other => other.to_string(),
    }
}

fn pstate_name(p: PerformanceState) -> Result<String, String> {
    let n = match p {
        PerformanceState::Zero => 0,
        PerformanceState::One => 1,
        PerformanceState::Two => 2,
        PerformanceState::Three => 3,
        PerformanceState::Four => 4,
        PerformanceState::Five => 5,
        PerformanceState::Six => 6,
        PerformanceState::Seven => 7,
        PerformanceState::Eight => 8,
        PerformanceState::Nine => 9,
        PerformanceState::Ten => 10,
        PerformanceState::Eleven => 11,
        PerformanceState::Twelve => 12,
        PerformanceState::Thirteen => 13,
        PerformanceState::Fourteen => 14,
        PerformanceState::Fifteen => 15,
        PerformanceState::Unknown => return Err("NVML reports the pstate as unknown".to_owned()),
    };
    Ok(format!("P{n}"))
}

fn compute_mode_name(m: ComputeMode) -> String {
    match m {
        ComputeMode::Default => "default",
        ComputeMode::ExclusiveThread => "exclusive_thread",
        ComputeMode::Prohibited => "prohibited",
        ComputeMode::ExclusiveProcess => "exclusive_process",
    }
    .to_owned()
}

fn architecture_name(a: DeviceArchitecture) -> Result<String, String> {
    let s = match a {
        DeviceArchitecture::Kepler => "kepler",
        DeviceArchitecture::Maxwell => "maxwell",
        DeviceArchitecture::Pascal => "pascal",
        DeviceArchitecture::Volta => "volta",
        DeviceArchitecture::Turing => "turing",
        DeviceArchitecture::Ampere => "ampere",
        DeviceArchitecture::Ada => "ada",
        DeviceArchitecture::Hopper => "hopper",
        DeviceArchitecture::Blackwell => "blackwell",
        DeviceArchitecture::Unknown => {
            return Err("NVML reports the architecture as unknown".to_owned())
        }
    };
    Ok(s.to_owned())
}

impl NvmlInventory for NvmlLibrary {
    fn driver_version(&self) -> Result<String, String> {
        self.nvml().sys_driver_version().map_err(probe_reason)
    }

    fn nvml_version(&self) -> Result<String, String> {
        self.nvml().sys_nvml_version().map_err(probe_reason)
    }

    fn device_count(&self) -> Result<u32, String> {
        self.nvml().device_count().map_err(probe_reason)
    }

    fn probe_device(&self, index: u32, p: &mut GpuProbe) {
        let d = match self.nvml().device_by_index(index) {
            Ok(d) => d,
            Err(e) => {
                p.fail(&format!("no NVML handle: {}", probe_reason(e)));
                return;
            }
        };
        probe_identity(&d, p);
        probe_memory(&d, p);
        probe_modes(&d, p);
        probe_power_and_clocks(&d, p);
        probe_state(&d, p);
    }
}

/// A `u32` item's value, or the reason NVML gave for it.
fn u32_item(res: Result<u32, WrapperError>) -> Result<u32, String> {
    res.map_err(probe_reason)
}

/// What the device is: name, UUID, PCI bus id, architecture, compute capability.
fn probe_identity(d: &Device<'_>, p: &mut GpuProbe) {
    p.put("name", d.name().map_err(probe_reason), |g| &mut g.name);
    p.put("uuid", d.uuid().map_err(probe_reason), |g| &mut g.uuid);
    p.put(
        "pci_bus_id",
        d.pci_info().map(|i| i.bus_id).map_err(probe_reason),
        |g| &mut g.pci_bus_id,
    );
    p.put(
        "architecture",
        d.architecture()
            .map_err(probe_reason)
            .and_then(architecture_name),
        |g| &mut g.architecture,
    );
    p.put(
        "compute_capability",
        d.cuda_compute_capability()
            .map_err(probe_reason)
            .and_then(|c| match (u32::try_from(c.major), u32::try_from(c.minor)) {
                (Ok(a), Ok(b)) => Ok([a, b]),
                _ => Err(format!("negative value {}.{}", c.major, c.minor)),
            }),
        |g| &mut g.compute_capability,
    );
}

/// The device's memory: total and used bytes, bus width.
fn probe_memory(d: &Device<'_>, p: &mut GpuProbe) {
    match d.memory_info() {
        Ok(m) => {
            p.put("memory_total_bytes", Ok(m.total), |g| {
                &mut g.memory_total_bytes
            });
            p.put("memory_used_bytes", Ok(m.used), |g| {
                &mut g.memory_used_bytes
            });
        }
        Err(e) => {
            let why = probe_reason(e);
            p.put("memory_total_bytes", Err(why.clone()), |g| {
                &mut g.memory_total_bytes
            });
            p.put("memory_used_bytes", Err(why), |g| &mut g.memory_used_bytes);
        }
    }
    p.put(
        "memory_bus_width_bits",
        u32_item(d.memory_bus_width()),
        |g| &mut g.memory_bus_width_bits,
    );
}

/// How the device is set up: VBIOS, persistence, ECC, MIG and compute modes.
fn probe_modes(d: &Device<'_>, p: &mut GpuProbe) {
    p.put(
        "vbios_version",
        d.vbios_version().map_err(probe_reason),
        |g| &mut g.vbios_version,
    );
    p.put(
        "persistence_mode",
        d.is_in_persistent_mode().map_err(probe_reason),
        |g| &mut g.persistence_mode,
    );
    match d.is_ecc_enabled() {
        Ok(e) => {
            p.put("ecc_enabled", Ok(e.currently_enabled), |g| {
                &mut g.ecc_enabled
            });
            p.put("ecc_pending", Ok(e.pending_enabled), |g| &mut g.ecc_pending);
        }
        Err(e) => {
            let why = probe_reason(e);
            p.put("ecc_enabled", Err(why.clone()), |g| &mut g.ecc_enabled);
            p.put("ecc_pending", Err(why), |g| &mut g.ecc_pending);
        }
    }
    match d.mig_mode() {
        Ok(m) => {
            p.put("mig_enabled", Ok(m.current != 0), |g| &mut g.mig_enabled);
            p.put("mig_pending", Ok(m.pending != 0), |g| &mut g.mig_pending);
        }
        Err(e) => {
            let why = probe_reason(e);
            p.put("mig_enabled", Err(why.clone()), |g| &mut g.mig_enabled);
            p.put("mig_pending", Err(why), |g| &mut g.mig_pending);
        }
    }
    p.put(
        "compute_mode",
        d.compute_mode()
            .map(compute_mode_name)
            .map_err(probe_reason),
        |g| &mut g.compute_mode,
    );
}

/// The device's power limits, performance state and clocks (current, maximum, applications).
fn probe_power_and_clocks(d: &Device<'_>, p: &mut GpuProbe) {
    p.put("power_limit_mw", u32_item(d.enforced_power_limit()), |g| {
        &mut g.power_limit_mw
    });
    p.put(
        "power_limit_default_mw",
        u32_item(d.power_management_limit_default()),
        |g| &mut g.power_limit_default_mw,
    );
    p.put(
        "pstate",
        d.performance_state()
            .map_err(probe_reason)
            .and_then(pstate_name),
        |g| &mut g.pstate,
    );
    p.put("sm_clock_mhz", u32_item(d.clock_info(Clock::SM)), |g| {
        &mut g.sm_clock_mhz
    });
    p.put(
        "mem_clock_mhz",
        u32_item(d.clock_info(Clock::Memory)),
        |g| &mut g.mem_clock_mhz,
    );
    p.put(
        "max_sm_clock_mhz",
        u32_item(d.max_clock_info(Clock::SM)),
        |g| &mut g.max_sm_clock_mhz,
    );
    p.put(
        "max_mem_clock_mhz",
        u32_item(d.max_clock_info(Clock::Memory)),
        |g| &mut g.max_mem_clock_mhz,
    );
    p.put(
        "applications_sm_clock_mhz",
        u32_item(d.applications_clock(Clock::SM)),
        |g| &mut g.applications_sm_clock_mhz,
    );
    p.put(
        "applications_mem_clock_mhz",
        u32_item(d.applications_clock(Clock::Memory)),
        |g| &mut g.applications_mem_clock_mhz,
    );
}

/// What the device is doing at the start: temperature, power draw, throttle reasons, PCIe
/// link.
fn probe_state(d: &Device<'_>, p: &mut GpuProbe) {
    p.put(
        "temperature_c",
        u32_item(d.temperature(TemperatureSensor::Gpu)),
        |g| &mut g.temperature_c,
    );
    p.put("power_mw", u32_item(d.power_usage()), |g| &mut g.power_mw);
    p.put(
        "throttle_reasons",
        d.current_throttle_reasons()
            .map(|t| throttle_reason_names(t.bits()))
            .map_err(probe_reason),
        |g| &mut g.throttle_reasons,
    );
    p.put("pcie_link_gen", u32_item(d.current_pcie_link_gen()), |g| {
        &mut g.pcie_link_gen
    });
    p.put(
        "pcie_link_width",
        u32_item(d.current_pcie_link_width()),
        |g| &mut g.pcie_link_width,
    );
}
