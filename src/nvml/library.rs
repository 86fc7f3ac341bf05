//! The NVML library behind [`NvmlSource`]: loaded at run time through nvml-wrapper, asking each
//! device only for the figures it supports.

use std::ffi::OsStr;

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::{DeviceArchitecture, SampleValue};
use nvml_wrapper::error::NvmlError as WrapperError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::{
    NVML_FI_DEV_PCIE_COUNT_RX_BYTES, NVML_FI_DEV_PCIE_COUNT_TX_BYTES, NVML_FI_DEV_POWER_INSTANT,
};
use nvml_wrapper::{Device, Nvml};

use super::error::NvmlError;
use super::samples::NvmlReading;
use super::source::{NvmlSource, PcieCounters};
use crate::ledger::PowerKind;

/// The NVML library, loaded at run time through nvml-wrapper.
///
/// Implements [`NvmlSource`] for the sampler and `NvmlInventory` for the
/// environment record.
pub struct NvmlLibrary {
    nvml: Nvml,
    caps: Vec<DeviceCaps>,
}

impl std::fmt::Debug for NvmlLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlLibrary").finish_non_exhaustive()
    }
}

/// Figures a device answered `NotSupported` for, so they are not asked again every tick.
#[derive(Debug, Clone, Copy, Default)]
struct DeviceCaps {
    unsupported: u32,
    /// Kind of `nvmlDeviceGetPowerUsage` on this device, once known.
    power_usage_kind: Option<PowerKind>,
}

const F_SM: u32 = 1;
const F_MEM: u32 = 1 << 1;
const F_POWER_INSTANT: u32 = 1 << 2;
const F_POWER_USAGE: u32 = 1 << 3;
const F_TEMP: u32 = 1 << 4;
const F_THROTTLE: u32 = 1 << 5;
const F_MEM_USED: u32 = 1 << 6;
const F_PCIE_TX: u32 = 1 << 7;
const F_PCIE_RX: u32 = 1 << 8;

impl NvmlLibrary {
    /// Loads `libnvidia-ml.so.1` from the loader path and initializes NVML.
    ///
    /// # Errors
    /// [`NvmlError::Unavailable`] when the library is missing, the driver is not loaded or
    /// permission is denied; the message says what is missing and that the rest keeps working.
    pub fn init() -> Result<Self, NvmlError> {
        Self::init_from(None)
    }

    /// Like [`NvmlLibrary::init`], loading the library from `lib_path` when given (the path the
    /// crate's loader found).
    ///
    /// # Errors
    /// As [`NvmlLibrary::init`].
    pub fn init_from(lib_path: Option<&OsStr>) -> Result<Self, NvmlError> {
        let mut builder = Nvml::builder();
        if let Some(path) = lib_path {
            builder.lib_path(path);
        }
        let nvml = builder
            .init()
            .map_err(|e| NvmlError::unavailable(&e, lib_path))?;
        Ok(Self {
            nvml,
            caps: Vec::new(),
        })
    }

    /// The underlying nvml-wrapper handle, for calls this module does not make.
    pub fn nvml(&self) -> &Nvml {
        &self.nvml
    }

    fn caps_mut(&mut self, index: u32) -> &mut DeviceCaps {
        let i = index as usize;
        if self.caps.len() <= i {
            self.caps.resize(i + 1, DeviceCaps::default());
        }
        &mut self.caps[i]
    }
}

/// Reads one figure unless the device already said it does not support it; records why it is
/// `None` otherwise.
fn read_field<T>(
    caps: &mut DeviceCaps,
    flag: u32,
    name: &str,
    errors: &mut Vec<String>,
    read: impl FnOnce() -> Result<T, WrapperError>,
) -> Option<T> {
    if caps.unsupported & flag != 0 {
        return None;
    }
    match read() {
        Ok(v) => Some(v),
        Err(WrapperError::NotSupported) => {
            caps.unsupported |= flag;
            errors.push(format!(
                "{name}: not supported by this device (not asked again)"
            ));
            None
        }
        Err(e) => {
            errors.push(format!("{name}: {e}"));
            None
        }
    }
}

fn sample_value_u64(value: &SampleValue) -> Option<u64> {
    match *value {
        SampleValue::U32(v) => Some(u64::from(v)),
        SampleValue::U64(v) => Some(v),
        SampleValue::I64(v) => u64::try_from(v).ok(),
        SampleValue::F64(v) if v.is_finite() && v >= 0.0 => Some(v as u64),
        SampleValue::F64(_) => None,
    }
}

/// `nvmlDeviceGetPowerUsage` averages over 1 s on Ampere and newer, reads instantly before.
fn power_usage_kind(device: &Device<'_>) -> PowerKind {
    match device.architecture() {
        Ok(
            DeviceArchitecture::Kepler
            | DeviceArchitecture::Maxwell
            | DeviceArchitecture::Pascal
            | DeviceArchitecture::Volta
            | DeviceArchitecture::Turing,
        ) => PowerKind::Instant,
        _ => PowerKind::Average,
    }
}

impl NvmlSource for NvmlLibrary {
    fn device_count(&mut self) -> Result<u32, NvmlError> {
        self.nvml
            .device_count()
            .map_err(|e| NvmlError::Unavailable {
                reason: format!("NVML could not count its devices: {e}"),
            })
    }

    fn read_sample(&mut self, nvml_index: u32) -> Result<NvmlReading, NvmlError> {
        let mut caps = *self.caps_mut(nvml_index);
        let device = self
            .nvml
            .device_by_index(nvml_index)
            .map_err(|e| NvmlError::device(nvml_index, "device handle", &e))?;
        let mut r = NvmlReading::default();
        let errors = &mut r.field_errors;

        let [instant_power] = read_field_values(
            &device,
            &mut caps,
            [(
                F_POWER_INSTANT,
                NVML_FI_DEV_POWER_INSTANT,
                "power_mw (instant)",
            )],
            errors,
        );
        if let Some(mw) = instant_power {
            r.power_mw = u32::try_from(mw).ok();
            r.power_kind = r.power_mw.map(|_| PowerKind::Instant);
        } else if caps.unsupported & F_POWER_INSTANT != 0 {
            // Only when instant power is unsupported: a transient failure must not mix kinds.
            r.power_mw = read_field(&mut caps, F_POWER_USAGE, "power_mw", errors, || {
                device.power_usage()
            });
            if r.power_mw.is_some() {
                let kind = *caps
                    .power_usage_kind
                    .get_or_insert_with(|| power_usage_kind(&device));
                r.power_kind = Some(kind);
            }
        }

        r.sm_clock_mhz = read_field(&mut caps, F_SM, "sm_clock_mhz", errors, || {
            device.clock_info(Clock::SM)
        });
        r.mem_clock_mhz = read_field(&mut caps, F_MEM, "mem_clock_mhz", errors, || {
            device.clock_info(Clock::Memory)
        });
        r.temperature_c = read_field(&mut caps, F_TEMP, "temperature_c", errors, || {
            device.temperature(TemperatureSensor::Gpu)
        });
        r.throttle_reasons = read_field(&mut caps, F_THROTTLE, "throttle_reasons", errors, || {
            device.current_throttle_reasons().map(|t| t.bits())
        });
        r.memory_used_bytes =
            read_field(&mut caps, F_MEM_USED, "memory_used_bytes", errors, || {
                device.memory_info().map(|m| m.used)
            });
        *self.caps_mut(nvml_index) = caps;
        Ok(r)
    }

    fn read_energy_mj(&mut self, nvml_index: u32) -> Result<u64, NvmlError> {
        let device = self
            .nvml
            .device_by_index(nvml_index)
            .map_err(|e| NvmlError::device(nvml_index, "device handle", &e))?;
        device
            .total_energy_consumption()
            .map_err(|e| NvmlError::device(nvml_index, "energy counter", &e))
    }

    fn read_pcie_bytes(&mut self, nvml_index: u32) -> Result<PcieCounters, NvmlError> {
        let mut caps = *self.caps_mut(nvml_index);
        if caps.unsupported & (F_PCIE_TX | F_PCIE_RX) == F_PCIE_TX | F_PCIE_RX {
            return Ok(PcieCounters::default());
        }
        let device = self
            .nvml
            .device_by_index(nvml_index)
            .map_err(|e| NvmlError::device(nvml_index, "device handle", &e))?;
        let mut out = PcieCounters::default();
        let [tx, rx] = read_field_values(
            &device,
            &mut caps,
            [
                (F_PCIE_TX, NVML_FI_DEV_PCIE_COUNT_TX_BYTES, "pcie_tx_bytes"),
                (F_PCIE_RX, NVML_FI_DEV_PCIE_COUNT_RX_BYTES, "pcie_rx_bytes"),
            ],
            &mut out.field_errors,
        );
        out.tx_bytes = tx;
        out.rx_bytes = rx;
        *self.caps_mut(nvml_index) = caps;
        Ok(out)
    }
}

/// Reads NVML field values in one call, skipping those the device does not support; each is
/// `None` when it cannot be read, with the reason in `errors`.
fn read_field_values<const N: usize>(
    device: &Device<'_>,
    caps: &mut DeviceCaps,
    fields: [(u32, u32, &str); N],
    errors: &mut Vec<String>,
) -> [Option<u64>; N] {
    let mut out = [None; N];
    let asked: Vec<usize> = (0..N)
        .filter(|&i| caps.unsupported & fields[i].0 == 0)
        .collect();
    if asked.is_empty() {
        return out;
    }
    let ids: Vec<FieldId> = asked.iter().map(|&i| FieldId(fields[i].1)).collect();
    match device.field_values_for(&ids) {
        Ok(values) => {
            for (&i, value) in asked.iter().zip(values) {
                let (flag, _, name) = fields[i];
                out[i] = match value.map(|sample| sample.value) {
                    Ok(Ok(v)) => sample_value_u64(&v),
                    Ok(Err(WrapperError::NotSupported)) => {
                        caps.unsupported |= flag;
                        errors.push(format!(
                            "{name}: not supported by this device (not asked again)"
                        ));
                        None
                    }
                    Ok(Err(e)) | Err(e) => {
                        errors.push(format!("{name}: {e}"));
                        None
                    }
                };
            }
        }
        Err(e @ (WrapperError::NotSupported | WrapperError::FailedToLoadSymbol(_))) => {
            for &i in &asked {
                caps.unsupported |= fields[i].0;
                errors.push(format!(
                    "{}: field values not available ({e}; not asked again)",
                    fields[i].2
                ));
            }
        }
        Err(e) => {
            for &i in &asked {
                errors.push(format!("{}: {e}", fields[i].2));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{NvmlError, NvmlLibrary};

    #[test]
    fn without_nvml_init_is_a_clear_error_not_a_panic() {
        match NvmlLibrary::init() {
            // A GPU host: nothing to check here.
            Ok(_) => {}
            Err(e) => {
                let msg = e.to_string();
                assert!(matches!(e, NvmlError::Unavailable { .. }), "{msg}");
                assert!(msg.contains("NVML is not available"), "{msg}");
                assert!(msg.contains("everything else keeps working"), "{msg}");
            }
        }
        let missing =
            NvmlLibrary::init_from(Some(std::ffi::OsStr::new("/nonexistent/libnvidia-ml.so.1")));
        let msg = missing.expect_err("no library at that path").to_string();
        assert!(msg.contains("/nonexistent/libnvidia-ml.so.1"), "{msg}");
        assert!(msg.contains("could not be loaded"), "{msg}");
    }
}
