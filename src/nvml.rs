//! NVML sampling of clocks, power, temperature, throttle reasons and energy, and their summary
//! over each iteration. Owner: issue 4.
//!
//! # Rates, and why
//!
//! Measured on the target host (H200, driver 580.159.04): NVML's power, energy and clock values
//! change every **100 ms** ([`NVML_UPDATE_PERIOD`]); reading power or a clock costs about **3 µs**,
//! utilization about 84 µs, and the energy counter (`nvmlDeviceGetTotalEnergyConsumption`) about
//! **4 ms** per call. A probe of this module on that host (warm calls, idle GPU) gave: clocks,
//! instant power, temperature and throttle reasons under 1 µs each, memory info 7 µs, one PCIe
//! byte counter (`NVML_FI_DEV_PCIE_COUNT_TX_BYTES`) 160 µs, the energy counter 3.6 to 7 ms
//! (also through the field-value API), and `nvmlDeviceGetPcieThroughput` 21 ms (it blocks for
//! its 20 ms measurement, so it is never called). Power and the energy counter were seen to step
//! every 100 ms.
//!
//! None of these reads slows the GPU work of the process that samples: with another thread
//! repeating one of them back to back through 100 training steps (`overhead --nvml-interference`,
//! `docs/measurements.md` runs 42–43), the steps slowed by at most 0.2 % with the energy counter
//! and under 0.1 % with the others. What the rates below trade is the sampler thread's own time.
//!
//! - **Sample period: 20 ms** ([`DEFAULT_SAMPLE_PERIOD`]). Five samples per NVML update, so every
//!   update is seen at most 20 ms after it happens and an iteration of 100 ms or more has at least
//!   four samples. One sample of one device is six cheap reads (SM and memory clock, instant
//!   power, temperature, throttle reasons, memory used; utilization is deliberately not read):
//!   about 10 µs measured (under 25 µs with the 3 µs figure), i.e. about 0.1 % of one core per
//!   device, all of it on the sampler thread. Sampling faster would only re-read the same values;
//!   slower would let the value seen lag the value in force by more.
//! - **PCIe byte counters: every 100 ms** ([`DEFAULT_PCIE_PERIOD`]), on the same tick as a sample:
//!   320 µs for both, 0.3 % of a core per device. Rates come from counter differences, so a slower
//!   read loses nothing but resolution; iterations shorter than two PCIe periods may have none.
//! - **Energy counter: every 500 ms per device, at most one read per sample tick**
//!   ([`DEFAULT_ENERGY_PERIOD`]). A read costs 4 ms, so this is 0.8 % of the sampler thread per
//!   device, and with one read per tick a tick never costs more than 4 ms + the cheap reads (well
//!   inside the 20 ms period). Reading faster than the counter's own 100 ms update would buy
//!   nothing; reading at iteration boundaries would put the 4 ms call on a schedule the
//!   application controls. The precision of a window's energy is set by the counter's 100 ms update
//!   granularity, not by the read rate, because the parts of the window before the first and after
//!   the last counter read are integrated from power samples (see below).
//! - **Ring of 65 536 samples per device** ([`DEFAULT_RING_CAPACITY`]): 21.8 minutes at 20 ms,
//!   136 bytes each (8.5 MiB per device). Iteration summaries only need the last iteration's
//!   window; the bound only limits how much history [`NvmlSampler::samples`] can export. Energy
//!   reads keep 16 384 entries (2.3 hours at 500 ms, 256 KiB). Overwritten entries are counted in
//!   [`DeviceSamplerStats`].
//!
//! # Threads and time
//!
//! Every NVML call runs on one named thread, `gpu-ledger-nvml` ([`SAMPLER_THREAD_NAME`]); nothing
//! here calls NVML on the application's threads. [`NvmlSampler::summarize`] only copies samples
//! under a short lock. Sample times are `host_ns`: nanoseconds since the `origin` [`Instant`]
//! passed to [`NvmlSampler::start`] (the profiler's own start instant), taken at the midpoint of
//! the reads; iteration windows are given in the same nanoseconds.
//!
//! # Per-iteration figures ([`NvmlIterationSummary`])
//!
//! - Clocks, power, temperature, memory used and throttle reasons come from the samples whose
//!   `host_ns` lies inside the window; each figure carries the number of samples behind it.
//!   Means are plain means over those samples (the sampler is periodic, so they are evenly spaced).
//! - **Energy** ([`EnergyEstimate`]), the ledger says which method was used:
//!   - [`EnergyMethod::EnergyCounter`] when the window is at least
//!     [`DEFAULT_ENERGY_COUNTER_MIN_WINDOW`] (2 s) long and holds two or more counter reads
//!     spanning at least half of it: the counter difference between the first and the last read
//!     inside the window, plus the two edges (window start to first read, last read to window end)
//!     integrated from power samples. The counter moves in 100 ms steps, so each read may lag by up
//!     to 100 ms: the error is at most about `P x 100 ms` over the window, i.e. 5 % at 2 s and 1 %
//!     at 10 s. Below 2 s that bound is worse than integrated power, so the counter is not used.
//!   - [`EnergyMethod::IntegratedPower`] otherwise: the power samples (with the one just outside
//!     each edge, for interpolation) are joined linearly and integrated exactly over the window
//!     (trapezoid rule with uneven spacing, clipped to the window; before the first or after the
//!     last sample the nearest value is held).
//!   - [`EnergyMethod::CoveringSample`] when the window is coarse (below).
//!
//!   The integrated-power figure is always reported too (`integrated_joules`), so the two methods
//!   can be compared on every long window. On an idle H200 the two agreed within 0.3 % over 3 s
//!   and 6 s windows (the loaded comparison is the GPU test of issue 4).
//! - **Coarse windows**: a window shorter than the NVML update period (100 ms), or one with no
//!   sample inside it, cannot be resolved. It gets the single sample nearest to its midpoint
//!   (within 100 ms), all its figures come from that one sample, energy is that sample's power
//!   times the window, and `coarse` is true. No precision is made up.
//!
//! Power is NVML's instant reading (`NVML_FI_DEV_POWER_INSTANT`) where the device supports it;
//! otherwise `nvmlDeviceGetPowerUsage`, which is a 1 s average on Ampere and newer GPUs (recorded
//! as [`PowerKind::Average`]; GA100 is also labelled average, conservatively) and instantaneous
//! on older ones. Each sample and each summary records which.
//!
//! # Without NVML
//!
//! [`NvmlLibrary::init`] returns [`NvmlError::Unavailable`] when the library cannot be loaded, the
//! driver is not loaded or permission is denied; its message says what is missing and that
//! everything else keeps working. The profiler turns it into a header warning and runs on.
//!
//! # Testing without a GPU
//!
//! Everything above runs on the [`NvmlSource`] trait; [`FakeNvmlSource`] is a scripted source for
//! tests, and [`summarize_samples`] is the aggregation as a pure function.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use nvml_wrapper::enum_wrappers::device::{
    Clock, ComputeMode, PerformanceState, TemperatureSensor,
};
use nvml_wrapper::enums::device::{DeviceArchitecture, SampleValue};
use nvml_wrapper::error::NvmlError as WrapperError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::{
    NVML_FI_DEV_PCIE_COUNT_RX_BYTES, NVML_FI_DEV_PCIE_COUNT_TX_BYTES, NVML_FI_DEV_POWER_INSTANT,
};
use nvml_wrapper::{Device, Nvml};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::ledger::{
    ClockStats, EnergyEstimate, EnergyMethod, NvmlGpuRecord, NvmlIterationSummary, PowerKind,
    PowerStats,
};

/// How often NVML refreshes power, energy and clock values (measured on the H200 host).
pub const NVML_UPDATE_PERIOD: Duration = Duration::from_millis(100);
/// Default sampling period: five samples per NVML update (see the module docs).
pub const DEFAULT_SAMPLE_PERIOD: Duration = Duration::from_millis(20);
/// Default period between two energy-counter reads of one device (a read costs about 4 ms).
pub const DEFAULT_ENERGY_PERIOD: Duration = Duration::from_millis(500);
/// Default period between two reads of the PCIe byte counters (about 320 µs for both).
pub const DEFAULT_PCIE_PERIOD: Duration = Duration::from_millis(100);
/// Shortest window whose energy is taken from the energy counter (5 % worst-case error bound).
pub const DEFAULT_ENERGY_COUNTER_MIN_WINDOW: Duration = Duration::from_secs(2);
/// Default number of samples kept per device (21.8 minutes at 20 ms, 8.5 MiB).
pub const DEFAULT_RING_CAPACITY: usize = 1 << 16;
/// Default number of energy-counter reads kept per device (2.3 hours at 500 ms).
pub const DEFAULT_ENERGY_RING_CAPACITY: usize = 1 << 14;
/// Default time [`NvmlSampler::stop`] (and `Drop`) waits for the thread to finish.
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_millis(500);
/// Name of the sampler thread.
pub const SAMPLER_THREAD_NAME: &str = "gpu-ledger-nvml";

/// Distinct error messages kept per device in [`DeviceSamplerStats::errors`].
const MAX_DISTINCT_ERRORS: usize = 16;
/// Back-off after a failed energy-counter read, so an unsupported counter is not asked every tick.
const ENERGY_RETRY_AFTER_ERROR: Duration = Duration::from_secs(5);

/// Errors of the NVML layer.
#[derive(Debug, thiserror::Error)]
pub enum NvmlError {
    /// NVML cannot be used at all (no library, driver not loaded, no permission, ...).
    #[error(
        "NVML is not available: {reason}. Clocks, power, temperature and energy will not be \
         sampled and the per-GPU NVML items of the environment record will be missing; \
         everything else keeps working"
    )]
    Unavailable {
        /// What is missing, in words.
        reason: String,
    },
    /// A call about one device failed.
    #[error("NVML device {index}: {what}: {detail}")]
    Device {
        /// NVML device index.
        index: u32,
        /// What was being read.
        what: &'static str,
        /// The error NVML reported.
        detail: String,
    },
    /// The sampler configuration cannot work (zero period, zero capacity, no device, ...).
    #[error("invalid NVML sampler configuration: {0}")]
    Config(String),
    /// The sampler thread could not be started.
    #[error("could not start the {SAMPLER_THREAD_NAME} thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// The sampler thread did not finish within the timeout; it was left detached.
    #[error(
        "the {SAMPLER_THREAD_NAME} thread did not stop within {0:?}; it was left running detached"
    )]
    StopTimedOut(Duration),
    /// The sampler thread panicked (a bug, or a panicking [`NvmlSource`]).
    #[error("the {SAMPLER_THREAD_NAME} thread panicked; samples taken before the panic are kept")]
    Panicked,
}

impl NvmlError {
    /// Maps an initialization failure of nvml-wrapper to [`NvmlError::Unavailable`] with a reason
    /// that names what is missing.
    fn unavailable(error: &WrapperError, lib_path: Option<&OsStr>) -> Self {
        let lib = lib_path
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|| "libnvidia-ml.so.1".to_owned());
        let reason = match error {
            WrapperError::LibloadingError(e) => format!(
                "the NVML library {lib} could not be loaded ({e}); it ships with the NVIDIA \
                 driver, so either no driver is installed or its library directory is not on \
                 the loader path (LD_LIBRARY_PATH)"
            ),
            WrapperError::LibraryNotFound => format!("the NVML library {lib} was not found"),
            WrapperError::FailedToLoadSymbol(s) => format!(
                "the NVML library {lib} lacks the symbol {s} (a driver too old for nvml-wrapper \
                 0.13)"
            ),
            WrapperError::DriverNotLoaded => "the NVIDIA kernel driver is not loaded".to_owned(),
            WrapperError::NoPermission => "permission denied while initializing NVML (check the \
                 access rights on /dev/nvidia* or the container's device list)"
                .to_owned(),
            WrapperError::LibRmVersionMismatch => "the NVML library does not match the loaded \
                 kernel driver (driver updated without a reboot?)"
                .to_owned(),
            other => format!("NVML initialization failed: {other}"),
        };
        NvmlError::Unavailable { reason }
    }

    fn device(index: u32, what: &'static str, error: &WrapperError) -> Self {
        NvmlError::Device {
            index,
            what,
            detail: error.to_string(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Samples
// ---------------------------------------------------------------------------------------------
/// One read of one device, as an [`NvmlSource`] returns it. A figure the device does not report
/// (or that failed this time) is `None`; the reason is in `field_errors`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NvmlReading {
    /// SM clock, MHz.
    #[serde(default)]
    pub sm_clock_mhz: Option<u32>,
    /// Memory clock, MHz.
    #[serde(default)]
    pub mem_clock_mhz: Option<u32>,
    /// Board power, milliwatts.
    #[serde(default)]
    pub power_mw: Option<u32>,
    /// Whether `power_mw` is an instant reading or an average.
    #[serde(default)]
    pub power_kind: Option<PowerKind>,
    /// GPU die temperature, °C.
    #[serde(default)]
    pub temperature_c: Option<u32>,
    /// Clock-event (throttle) reasons as NVML's bitmask; see [`throttle_reason_names`].
    #[serde(default)]
    pub throttle_reasons: Option<u64>,
    /// Device memory in use (all processes), bytes.
    #[serde(default)]
    pub memory_used_bytes: Option<u64>,
    /// PCIe bytes transmitted by the device since an unspecified origin (a counter that may
    /// wrap; rates come from differences).
    #[serde(default)]
    pub pcie_tx_bytes: Option<u64>,
    /// PCIe bytes received by the device, same convention as `pcie_tx_bytes`.
    #[serde(default)]
    pub pcie_rx_bytes: Option<u64>,
    /// Why a figure above is `None` (`"temperature_c: GPU lost"`). Not kept in stored samples:
    /// the sampler moves them into [`DeviceSamplerStats::errors`].
    #[serde(skip)]
    pub field_errors: Vec<String>,
}

/// One sample: a reading and when it was taken.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NvmlSample {
    /// Nanoseconds since the sampler's origin, at the midpoint of the reads.
    pub host_ns: u64,
    /// The figures read.
    #[serde(flatten)]
    pub reading: NvmlReading,
}

/// One read of the energy counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EnergyRead {
    /// Nanoseconds since the sampler's origin, at the midpoint of the read.
    pub host_ns: u64,
    /// Energy consumed since the driver was loaded, millijoules.
    pub energy_mj: u64,
}

/// NVML's clock-event (throttle) reason bits and their stable names in the ledger.
const THROTTLE_REASONS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// Stable names of the reasons set in an NVML clock-event (throttle) bitmask: `gpu_idle`,
/// `applications_clocks_setting`, `sw_power_cap`, `hw_slowdown`, `sync_boost`,
/// `sw_thermal_slowdown`, `hw_thermal_slowdown`, `hw_power_brake_slowdown`,
/// `display_clock_setting`, and `unknown_bit_N` for a bit this build does not know.
pub fn throttle_reason_names(bits: u64) -> Vec<String> {
    let mut names = Vec::new();
    for bit in 0..64 {
        let mask = 1u64 << bit;
        if bits & mask == 0 {
            continue;
        }
        match THROTTLE_REASONS.iter().find(|(m, _)| *m == mask) {
            Some((_, name)) => names.push((*name).to_owned()),
            None => names.push(format!("unknown_bit_{bit}")),
        }
    }
    names
}

// ---------------------------------------------------------------------------------------------
// Sources
// ---------------------------------------------------------------------------------------------

/// Where samples come from: the NVML library ([`NvmlLibrary`]) or a fake ([`FakeNvmlSource`]).
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
    /// cannot be read is `None` with a line in [`NvmlReading::field_errors`].
    ///
    /// # Errors
    /// When the device itself cannot be reached.
    fn read_sample(&mut self, nvml_index: u32) -> Result<NvmlReading, NvmlError>;

    /// Reads the energy counter of one device, in millijoules since the driver was loaded.
    /// Expensive (about 4 ms on an H200): the sampler calls it at its own, slower rate.
    ///
    /// # Errors
    /// When the device has no energy counter or cannot be reached.
    fn read_energy_mj(&mut self, nvml_index: u32) -> Result<u64, NvmlError>;

    /// Reads the PCIe byte counters of one device. Costs about 160 µs per counter on an H200
    /// (60 times a clock read), so the sampler reads them at its own, slower rate
    /// ([`NvmlSamplerConfig::pcie_period`]). The default reports no counters.
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

/// The NVML library, loaded at run time through nvml-wrapper.
///
/// Implements [`NvmlSource`] for the sampler and [`NvmlInventory`] for the environment record.
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
    pub fn new(index: u32) -> Self {
        Self {
            record: NvmlGpuRecord {
                index,
                ..NvmlGpuRecord::default()
            },
            missing: Vec::new(),
        }
    }

    /// The NVML index being probed.
    pub fn index(&self) -> u32 {
        self.record.index
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
    pub fn finish(self) -> (NvmlGpuRecord, Vec<String>) {
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
        self.nvml.sys_driver_version().map_err(probe_reason)
    }

    fn nvml_version(&self) -> Result<String, String> {
        self.nvml.sys_nvml_version().map_err(probe_reason)
    }

    fn device_count(&self) -> Result<u32, String> {
        self.nvml.device_count().map_err(probe_reason)
    }

    fn probe_device(&self, index: u32, p: &mut GpuProbe) {
        let d = match self.nvml.device_by_index(index) {
            Ok(d) => d,
            Err(e) => {
                p.fail(&format!("no NVML handle: {}", probe_reason(e)));
                return;
            }
        };
        let r = |res: Result<u32, WrapperError>| res.map_err(probe_reason);
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
        p.put("memory_bus_width_bits", r(d.memory_bus_width()), |g| {
            &mut g.memory_bus_width_bits
        });
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
        p.put("power_limit_mw", r(d.enforced_power_limit()), |g| {
            &mut g.power_limit_mw
        });
        p.put(
            "power_limit_default_mw",
            r(d.power_management_limit_default()),
            |g| &mut g.power_limit_default_mw,
        );
        p.put(
            "pstate",
            d.performance_state()
                .map_err(probe_reason)
                .and_then(pstate_name),
            |g| &mut g.pstate,
        );
        p.put("sm_clock_mhz", r(d.clock_info(Clock::SM)), |g| {
            &mut g.sm_clock_mhz
        });
        p.put("mem_clock_mhz", r(d.clock_info(Clock::Memory)), |g| {
            &mut g.mem_clock_mhz
        });
        p.put("max_sm_clock_mhz", r(d.max_clock_info(Clock::SM)), |g| {
            &mut g.max_sm_clock_mhz
        });
        p.put(
            "max_mem_clock_mhz",
            r(d.max_clock_info(Clock::Memory)),
            |g| &mut g.max_mem_clock_mhz,
        );
        p.put(
            "applications_sm_clock_mhz",
            r(d.applications_clock(Clock::SM)),
            |g| &mut g.applications_sm_clock_mhz,
        );
        p.put(
            "applications_mem_clock_mhz",
            r(d.applications_clock(Clock::Memory)),
            |g| &mut g.applications_mem_clock_mhz,
        );
        p.put(
            "temperature_c",
            r(d.temperature(TemperatureSensor::Gpu)),
            |g| &mut g.temperature_c,
        );
        p.put("power_mw", r(d.power_usage()), |g| &mut g.power_mw);
        p.put(
            "throttle_reasons",
            d.current_throttle_reasons()
                .map(|t| throttle_reason_names(t.bits()))
                .map_err(probe_reason),
            |g| &mut g.throttle_reasons,
        );
        p.put("pcie_link_gen", r(d.current_pcie_link_gen()), |g| {
            &mut g.pcie_link_gen
        });
        p.put("pcie_link_width", r(d.current_pcie_link_width()), |g| {
            &mut g.pcie_link_width
        });
    }
}

/// A scripted [`NvmlSource`] for tests and GPU-less examples: readings and energy come from
/// closures of `(nvml_index, time since the source was created)`.
pub struct FakeNvmlSource {
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
    pub fn new(
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
    pub fn with_pcie(
        mut self,
        pcie: impl FnMut(u32, Duration) -> Result<PcieCounters, NvmlError> + Send + 'static,
    ) -> Self {
        self.pcie = Some(Box::new(pcie));
        self
    }

    /// A fake whose devices all draw `power_w` at `sm_clock_mhz`, with an energy counter that
    /// integrates that power exactly.
    pub fn constant(devices: u32, power_w: f64, sm_clock_mhz: u32) -> Self {
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

// ---------------------------------------------------------------------------------------------
// Sampler
// ---------------------------------------------------------------------------------------------

/// A device to sample: its CUDA ordinal (the `device_id` of ledger rows) and its NVML index.
///
/// The two differ when `CUDA_VISIBLE_DEVICES` or `CUDA_DEVICE_ORDER` reorder devices; build the
/// list with `Environment::sampled_devices`, which matches them by UUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampledDevice {
    /// CUDA device ordinal, as in ledger rows.
    pub device_id: u32,
    /// NVML device index.
    pub nvml_index: u32,
}

/// Configuration of [`NvmlSampler`].
#[derive(Debug, Clone, PartialEq)]
pub struct NvmlSamplerConfig {
    /// Time between two samples of every device. Default [`DEFAULT_SAMPLE_PERIOD`].
    pub period: Duration,
    /// Time between two energy-counter reads of one device; `None` never reads the counter
    /// (energy is then always integrated from power). Default [`DEFAULT_ENERGY_PERIOD`].
    pub energy_period: Option<Duration>,
    /// Time between two reads of the PCIe byte counters (rounded up to whole sample periods);
    /// `None` never reads them. Default [`DEFAULT_PCIE_PERIOD`].
    pub pcie_period: Option<Duration>,
    /// NVML's own refresh period: shorter windows are coarse. Default [`NVML_UPDATE_PERIOD`].
    pub update_period: Duration,
    /// Shortest window whose energy comes from the counter.
    /// Default [`DEFAULT_ENERGY_COUNTER_MIN_WINDOW`].
    pub energy_counter_min_window: Duration,
    /// Samples kept per device. Default [`DEFAULT_RING_CAPACITY`].
    pub ring_capacity: usize,
    /// Energy reads kept per device. Default [`DEFAULT_ENERGY_RING_CAPACITY`].
    pub energy_ring_capacity: usize,
    /// Devices to sample (from `Environment::sampled_devices`); `None` samples every NVML device
    /// with `device_id = nvml_index`, which is right only when CUDA and NVML order devices alike.
    /// `Some` of an empty list is an error, never "all devices".
    pub devices: Option<Vec<SampledDevice>>,
    /// How long `Drop` waits for the thread. Default [`DEFAULT_STOP_TIMEOUT`].
    pub stop_timeout: Duration,
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
    pub fn summary_params(&self) -> SummaryParams {
        SummaryParams {
            update_period_ns: duration_ns(self.update_period),
            energy_counter_min_window_ns: duration_ns(self.energy_counter_min_window),
            covering_max_ns: duration_ns(self.update_period.max(self.period)),
        }
    }
}

/// Counters of one device's sampling, for the trailer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DeviceSamplerStats {
    /// CUDA device ordinal.
    pub device_id: u32,
    /// NVML device index.
    pub nvml_index: u32,
    /// Samples taken.
    pub samples: u64,
    /// Samples overwritten because the ring was full.
    pub samples_overwritten: u64,
    /// Reads of the whole device that failed (no sample stored).
    pub sample_errors: u64,
    /// Energy-counter reads taken.
    pub energy_reads: u64,
    /// Energy reads overwritten because their ring was full.
    pub energy_reads_overwritten: u64,
    /// Energy-counter reads that failed.
    pub energy_errors: u64,
    /// Ticks that took longer than the period (samples were then late).
    pub late_ticks: u64,
    /// Distinct error messages seen (first 16), with the field they concern.
    pub errors: Vec<String>,
}

#[derive(Debug)]
struct DeviceRing {
    samples: VecDeque<NvmlSample>,
    energy: VecDeque<EnergyRead>,
    stats: DeviceSamplerStats,
}

impl DeviceRing {
    fn note_error(&mut self, message: String) {
        if self.stats.errors.len() < MAX_DISTINCT_ERRORS && !self.stats.errors.contains(&message) {
            self.stats.errors.push(message);
        }
    }
}

#[derive(Debug)]
struct DeviceState {
    device: SampledDevice,
    ring: Mutex<DeviceRing>,
}

#[derive(Debug)]
struct Shared {
    devices: Vec<DeviceState>,
}

/// Samples of one device, as [`NvmlSampler::samples`] returns them (for counter tracks).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DeviceSamples {
    /// CUDA device ordinal.
    pub device_id: u32,
    /// NVML device index.
    pub nvml_index: u32,
    /// Samples in time order (oldest overwritten first when the ring is full).
    pub samples: Vec<NvmlSample>,
    /// Energy-counter reads in time order.
    pub energy_reads: Vec<EnergyRead>,
}

/// The background sampler: one named thread reading every device each period.
///
/// ```no_run
/// use std::time::{Duration, Instant};
/// use gpu_ledger::nvml::{NvmlLibrary, NvmlSampler, NvmlSamplerConfig};
///
/// let origin = Instant::now();
/// let lib = NvmlLibrary::init()?;
/// let mut sampler = NvmlSampler::start(lib, NvmlSamplerConfig::default(), origin)?;
/// // ... an iteration runs from `start_ns` to `end_ns` (ns since `origin`) ...
/// let (start_ns, end_ns) = (0, 250_000_000);
/// let per_device = sampler.summarize_all(start_ns, end_ns);
/// sampler.stop(Duration::from_millis(500))?;
/// # Ok::<(), gpu_ledger::nvml::NvmlError>(())
/// ```
#[derive(Debug)]
pub struct NvmlSampler {
    shared: Arc<Shared>,
    stop_tx: Option<Sender<()>>,
    done_rx: Receiver<()>,
    handle: Option<JoinHandle<()>>,
    config: NvmlSamplerConfig,
    params: SummaryParams,
    origin: Instant,
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn host_ns(origin: Instant) -> u64 {
    duration_ns(Instant::now().saturating_duration_since(origin))
}

impl NvmlSampler {
    /// Starts the `gpu-ledger-nvml` thread, which owns `source` from now on.
    ///
    /// `origin` is the instant sample times count from (the profiler's start).
    ///
    /// # Errors
    /// [`NvmlError::Config`] for a zero period or capacity or no device to sample, an error of
    /// `source.device_count()` when `config.devices` is `None`, [`NvmlError::Spawn`] when the
    /// thread cannot be created.
    pub fn start<S: NvmlSource + 'static>(
        mut source: S,
        mut config: NvmlSamplerConfig,
        origin: Instant,
    ) -> Result<Self, NvmlError> {
        if config.period.is_zero() {
            return Err(NvmlError::Config("the sample period is zero".to_owned()));
        }
        if config.energy_period.is_some_and(|p| p.is_zero()) {
            return Err(NvmlError::Config("the energy period is zero".to_owned()));
        }
        if config.ring_capacity == 0 || config.energy_ring_capacity == 0 {
            return Err(NvmlError::Config("a ring capacity is zero".to_owned()));
        }
        let devices = match &config.devices {
            Some(list) if list.is_empty() => {
                return Err(NvmlError::Config(
                    "no device to sample (no CUDA device was matched to an NVML device)".to_owned(),
                ))
            }
            Some(list) => list.clone(),
            None => {
                let n = source.device_count()?;
                if n == 0 {
                    return Err(NvmlError::Config(
                        "NVML sees no device to sample".to_owned(),
                    ));
                }
                (0..n)
                    .map(|i| SampledDevice {
                        device_id: i,
                        nvml_index: i,
                    })
                    .collect()
            }
        };
        config.devices = Some(devices.clone());
        let shared = Arc::new(Shared {
            devices: devices
                .iter()
                .map(|&device| DeviceState {
                    device,
                    ring: Mutex::new(DeviceRing {
                        samples: VecDeque::with_capacity(config.ring_capacity.min(4096)),
                        energy: VecDeque::with_capacity(config.energy_ring_capacity.min(1024)),
                        stats: DeviceSamplerStats {
                            device_id: device.device_id,
                            nvml_index: device.nvml_index,
                            ..DeviceSamplerStats::default()
                        },
                    }),
                })
                .collect(),
        });
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(1);
        let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
        let pcie_every = config.pcie_period.map(|p| {
            let ticks = p.as_nanos().div_ceil(config.period.as_nanos()).max(1);
            u64::try_from(ticks).unwrap_or(u64::MAX)
        });
        let loop_config = LoopConfig {
            period: config.period,
            energy_period: config.energy_period,
            pcie_every,
            ring_capacity: config.ring_capacity,
            energy_ring_capacity: config.energy_ring_capacity,
        };
        let thread_shared = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name(SAMPLER_THREAD_NAME.to_owned())
            .spawn(move || {
                // Dropped when the thread ends, normally or by unwinding: `stop` waits on it.
                let _done = done_tx;
                run_sampler(source, &thread_shared, &stop_rx, &loop_config, origin);
            })
            .map_err(NvmlError::Spawn)?;
        Ok(Self {
            params: config.summary_params(),
            shared,
            stop_tx: Some(stop_tx),
            done_rx,
            handle: Some(handle),
            config,
            origin,
        })
    }

    /// The configuration in force (with `devices` resolved to `Some`).
    pub fn config(&self) -> &NvmlSamplerConfig {
        &self.config
    }

    /// The instant sample times count from.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// The devices sampled.
    pub fn devices(&self) -> Vec<SampledDevice> {
        self.shared.devices.iter().map(|d| d.device).collect()
    }

    /// Whether the thread is still running.
    pub fn is_running(&self) -> bool {
        self.handle.as_ref().is_some_and(|h| !h.is_finished())
    }

    /// NVML figures of device `device_id` (CUDA ordinal) over `[start_ns, end_ns]` (ns since the
    /// origin). Makes no NVML call: it copies the samples around the window under a short lock.
    /// Call it once the sampler has passed `end_ns` (one period later) so that the window's end
    /// is bracketed; before that the last value is held to the end.
    ///
    /// A device that is not sampled gets a summary with no figures and a note.
    pub fn summarize(&self, device_id: u32, start_ns: u64, end_ns: u64) -> NvmlIterationSummary {
        let Some(state) = self
            .shared
            .devices
            .iter()
            .find(|d| d.device.device_id == device_id)
        else {
            let mut s = NvmlIterationSummary {
                device_id,
                window_ns: end_ns.saturating_sub(start_ns),
                ..NvmlIterationSummary::default()
            };
            s.notes
                .push("device is not sampled by NVML (not matched to an NVML device)".to_owned());
            return s;
        };
        let (samples, energy) = {
            let ring = state.ring.lock();
            let lo = ring
                .samples
                .partition_point(|s| s.host_ns < start_ns)
                .saturating_sub(1);
            let hi =
                (ring.samples.partition_point(|s| s.host_ns <= end_ns) + 1).min(ring.samples.len());
            let samples: Vec<NvmlSample> = ring.samples.range(lo..hi).cloned().collect();
            let elo = ring.energy.partition_point(|e| e.host_ns < start_ns);
            let ehi = ring.energy.partition_point(|e| e.host_ns <= end_ns);
            let energy: Vec<EnergyRead> = ring.energy.range(elo..ehi.max(elo)).copied().collect();
            (samples, energy)
        };
        summarize_samples(device_id, &samples, &energy, start_ns, end_ns, &self.params)
    }

    /// [`NvmlSampler::summarize`] for every sampled device, in the order of `devices()`.
    pub fn summarize_all(&self, start_ns: u64, end_ns: u64) -> Vec<NvmlIterationSummary> {
        self.shared
            .devices
            .iter()
            .map(|d| self.summarize(d.device.device_id, start_ns, end_ns))
            .collect()
    }

    /// Every sample and energy read still in the rings, per device (for counter tracks in a
    /// trace export). Copies; the sampler keeps running.
    pub fn samples(&self) -> Vec<DeviceSamples> {
        self.shared
            .devices
            .iter()
            .map(|d| {
                let ring = d.ring.lock();
                DeviceSamples {
                    device_id: d.device.device_id,
                    nvml_index: d.device.nvml_index,
                    samples: ring.samples.iter().cloned().collect(),
                    energy_reads: ring.energy.iter().copied().collect(),
                }
            })
            .collect()
    }

    /// Sampling counters and errors per device.
    pub fn stats(&self) -> Vec<DeviceSamplerStats> {
        self.shared
            .devices
            .iter()
            .map(|d| d.ring.lock().stats.clone())
            .collect()
    }

    /// Stops the thread (it takes one last sample first) and waits up to `timeout` for it.
    /// Samples stay available. Calling it again does nothing.
    ///
    /// # Errors
    /// [`NvmlError::StopTimedOut`] when the thread did not finish in time (it is detached and
    /// ends on its own), [`NvmlError::Panicked`] when it panicked.
    pub fn stop(&mut self, timeout: Duration) -> Result<(), NvmlError> {
        let Some(handle) = self.handle.take() else {
            return Ok(());
        };
        if let Some(tx) = self.stop_tx.take() {
            // Full or disconnected both mean the thread is stopping already.
            let _ = tx.try_send(());
        }
        match self.done_rx.recv_timeout(timeout) {
            Err(RecvTimeoutError::Timeout) => Err(NvmlError::StopTimedOut(timeout)),
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                handle.join().map_err(|_| NvmlError::Panicked)
            }
        }
    }
}

impl Drop for NvmlSampler {
    fn drop(&mut self) {
        let timeout = self.config.stop_timeout;
        // Errors cannot be reported from Drop; call `stop` to see them.
        let _ = self.stop(timeout);
    }
}

#[derive(Debug, Clone, Copy)]
struct LoopConfig {
    period: Duration,
    energy_period: Option<Duration>,
    /// Read the PCIe counters every this many ticks.
    pcie_every: Option<u64>,
    ring_capacity: usize,
    energy_ring_capacity: usize,
}

fn sample_all<S: NvmlSource>(
    source: &mut S,
    shared: &Shared,
    cfg: &LoopConfig,
    origin: Instant,
    with_pcie: bool,
) {
    for state in &shared.devices {
        let t0 = host_ns(origin);
        let mut result = source.read_sample(state.device.nvml_index);
        if with_pcie {
            if let Ok(reading) = &mut result {
                match source.read_pcie_bytes(state.device.nvml_index) {
                    Ok(pcie) => {
                        reading.pcie_tx_bytes = pcie.tx_bytes;
                        reading.pcie_rx_bytes = pcie.rx_bytes;
                        reading.field_errors.extend(pcie.field_errors);
                    }
                    Err(e) => reading.field_errors.push(format!("pcie counters: {e}")),
                }
            }
        }
        let t1 = host_ns(origin);
        let at = t0 + (t1.saturating_sub(t0)) / 2;
        let mut ring = state.ring.lock();
        match result {
            Ok(mut reading) => {
                for e in std::mem::take(&mut reading.field_errors) {
                    ring.note_error(e);
                }
                if ring.samples.len() >= cfg.ring_capacity {
                    ring.samples.pop_front();
                    ring.stats.samples_overwritten += 1;
                }
                ring.samples.push_back(NvmlSample {
                    host_ns: at,
                    reading,
                });
                ring.stats.samples += 1;
            }
            Err(e) => {
                ring.stats.sample_errors += 1;
                ring.note_error(e.to_string());
            }
        }
    }
}

fn run_sampler<S: NvmlSource>(
    mut source: S,
    shared: &Shared,
    stop_rx: &Receiver<()>,
    cfg: &LoopConfig,
    origin: Instant,
) {
    let start = Instant::now();
    // Stagger the first energy reads one tick apart so that no tick reads two counters.
    let mut energy_due: Vec<Instant> = (0..shared.devices.len())
        .map(|i| {
            start
                + cfg
                    .period
                    .saturating_mul(u32::try_from(i).unwrap_or(u32::MAX))
        })
        .collect();
    let mut next_tick = start;
    let mut tick: u64 = 0;
    loop {
        let with_pcie = cfg.pcie_every.is_some_and(|every| tick % every == 0);
        sample_all(&mut source, shared, cfg, origin, with_pcie);
        tick = tick.wrapping_add(1);

        if let Some(energy_period) = cfg.energy_period {
            let now = Instant::now();
            let due = energy_due
                .iter()
                .enumerate()
                .filter(|(_, at)| **at <= now)
                .min_by_key(|(_, at)| **at)
                .map(|(i, _)| i);
            if let Some(i) = due {
                let state = &shared.devices[i];
                let t0 = host_ns(origin);
                let result = source.read_energy_mj(state.device.nvml_index);
                let t1 = host_ns(origin);
                let mut ring = state.ring.lock();
                match result {
                    Ok(mj) => {
                        if ring.energy.len() >= cfg.energy_ring_capacity {
                            ring.energy.pop_front();
                            ring.stats.energy_reads_overwritten += 1;
                        }
                        ring.energy.push_back(EnergyRead {
                            host_ns: t0 + (t1.saturating_sub(t0)) / 2,
                            energy_mj: mj,
                        });
                        ring.stats.energy_reads += 1;
                        energy_due[i] = Instant::now() + energy_period;
                    }
                    Err(e) => {
                        ring.stats.energy_errors += 1;
                        ring.note_error(e.to_string());
                        energy_due[i] =
                            Instant::now() + energy_period.max(ENERGY_RETRY_AFTER_ERROR);
                    }
                }
            }
        }

        next_tick += cfg.period;
        let now = Instant::now();
        if next_tick <= now {
            for state in &shared.devices {
                state.ring.lock().stats.late_ticks += 1;
            }
            next_tick = now + cfg.period;
        }
        match stop_rx.recv_deadline(next_tick) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    // One last sample so that the last iteration's end is bracketed.
    sample_all(&mut source, shared, cfg, origin, cfg.pcie_every.is_some());
}

// ---------------------------------------------------------------------------------------------
// Aggregation
// ---------------------------------------------------------------------------------------------

/// Parameters of [`summarize_samples`], in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SummaryParams {
    /// NVML's refresh period: shorter windows are coarse.
    pub update_period_ns: u64,
    /// Shortest window whose energy comes from the energy counter.
    pub energy_counter_min_window_ns: u64,
    /// How far from a coarse window's midpoint its covering sample may be; also how far outside
    /// the window a sample may be to be used for interpolation at the window's edges.
    pub covering_max_ns: u64,
}

impl Default for SummaryParams {
    fn default() -> Self {
        NvmlSamplerConfig::default().summary_params()
    }
}

fn clock_stats(values: impl Iterator<Item = u32>) -> Option<ClockStats> {
    let mut n = 0u32;
    let mut sum = 0f64;
    let mut min = u32::MAX;
    let mut max = 0u32;
    for v in values {
        n += 1;
        sum += f64::from(v);
        min = min.min(v);
        max = max.max(v);
    }
    (n > 0).then(|| ClockStats {
        min_mhz: min,
        mean_mhz: sum / f64::from(n),
        max_mhz: max,
        samples: n,
    })
}

fn ns_to_s(ns: u64) -> f64 {
    ns as f64 * 1e-9
}

/// Integral of the piecewise-linear function through `points` (time ns, watts) over `[a, b]`,
/// joules. Before the first and after the last point the nearest value is held. `points` must be
/// sorted by time. `None` without points.
pub fn integrate_power_j(points: &[(u64, f64)], a: u64, b: u64) -> Option<f64> {
    let (first, last) = (points.first()?, points.last()?);
    if b <= a {
        return Some(0.0);
    }
    let value_at = |t: u64| -> f64 {
        let i = points.partition_point(|p| p.0 <= t);
        if i == 0 {
            first.1
        } else if i == points.len() {
            last.1
        } else {
            let (t0, p0) = points[i - 1];
            let (t1, p1) = points[i];
            if t1 == t0 {
                p1
            } else {
                p0 + (p1 - p0) * (t - t0) as f64 / (t1 - t0) as f64
            }
        }
    };
    let mut prev_t = a;
    let mut prev_p = value_at(a);
    let mut joules = 0.0;
    for &(t, p) in points.iter().filter(|(t, _)| *t > a && *t < b) {
        joules += (prev_p + p) / 2.0 * ns_to_s(t - prev_t);
        prev_t = t;
        prev_p = p;
    }
    joules += (prev_p + value_at(b)) / 2.0 * ns_to_s(b - prev_t);
    Some(joules)
}

/// Index of the sample nearest to the window's midpoint, if within `max_ns` of it.
fn covering_sample(
    samples: &[NvmlSample],
    start_ns: u64,
    end_ns: u64,
    max_ns: u64,
) -> Option<usize> {
    let mid = start_ns + (end_ns - start_ns) / 2;
    let i = samples.partition_point(|s| s.host_ns < mid);
    let candidates = [i.checked_sub(1), (i < samples.len()).then_some(i)];
    candidates
        .into_iter()
        .flatten()
        .map(|j| (j, samples[j].host_ns.abs_diff(mid)))
        .filter(|(_, d)| *d <= max_ns)
        .min_by_key(|(_, d)| *d)
        .map(|(j, _)| j)
}

/// Rate of a byte counter over the window: the sum of its positive steps between the reads inside
/// the window and the nearest read on each side (within `reach_ns`), per second between the
/// first and last of those reads. `None` with fewer than two reads.
fn counter_rate(
    samples: &[NvmlSample],
    start_ns: u64,
    end_ns: u64,
    reach_ns: u64,
    get: impl Fn(&NvmlReading) -> Option<u64>,
) -> Option<f64> {
    let all: Vec<(u64, u64)> = samples
        .iter()
        .filter_map(|s| get(&s.reading).map(|v| (s.host_ns, v)))
        .collect();
    let lo = all.partition_point(|p| p.0 < start_ns).saturating_sub(1);
    let hi = (all.partition_point(|p| p.0 <= end_ns) + 1).min(all.len());
    let points: Vec<(u64, u64)> = all[lo..hi]
        .iter()
        .copied()
        .filter(|p| {
            p.0.saturating_add(reach_ns) >= start_ns && p.0 <= end_ns.saturating_add(reach_ns)
        })
        .collect();
    let (first, last) = (points.first()?, points.last()?);
    if points.len() < 2 || last.0 <= first.0 {
        return None;
    }
    let bytes: u64 = points
        .windows(2)
        .map(|w| w[1].1.saturating_sub(w[0].1))
        .sum();
    Some(bytes as f64 / ns_to_s(last.0 - first.0))
}

/// Summarizes one device's samples and energy reads over `[start_ns, end_ns]`.
///
/// `samples` should cover the window and include the sample just before and just after it (they
/// are used to interpolate power at the edges, when within `params.covering_max_ns`); samples
/// and reads far outside the window are ignored. Unsorted input is sorted first. See the module
/// docs for the methods and the coarse rule.
pub fn summarize_samples(
    device_id: u32,
    samples: &[NvmlSample],
    energy_reads: &[EnergyRead],
    start_ns: u64,
    end_ns: u64,
    params: &SummaryParams,
) -> NvmlIterationSummary {
    let mut out = NvmlIterationSummary {
        device_id,
        window_ns: end_ns.saturating_sub(start_ns),
        ..NvmlIterationSummary::default()
    };
    if end_ns < start_ns {
        out.notes.push(format!(
            "window ends ({end_ns} ns) before it starts ({start_ns} ns)"
        ));
        return out;
    }
    let sorted_samples;
    let samples = if samples.is_sorted_by_key(|s| s.host_ns) {
        samples
    } else {
        let mut v = samples.to_vec();
        v.sort_by_key(|s| s.host_ns);
        sorted_samples = v;
        &sorted_samples
    };
    let sorted_reads;
    let energy_reads = if energy_reads.is_sorted_by_key(|e| e.host_ns) {
        energy_reads
    } else {
        let mut v = energy_reads.to_vec();
        v.sort_by_key(|e| e.host_ns);
        sorted_reads = v;
        &sorted_reads
    };

    let lo = samples.partition_point(|s| s.host_ns < start_ns);
    let hi = samples.partition_point(|s| s.host_ns <= end_ns);
    let inside = &samples[lo..hi];
    let short = out.window_ns < params.update_period_ns;
    let used: &[NvmlSample] = if short || inside.is_empty() {
        out.coarse = true;
        if short {
            out.notes.push(format!(
                "window of {:.1} ms is shorter than NVML's {:.0} ms update period: figures come \
                 from the one sample covering it",
                out.window_ns as f64 / 1e6,
                params.update_period_ns as f64 / 1e6
            ));
        } else {
            out.notes.push(
                "no sample inside the window: figures come from the one sample covering it"
                    .to_owned(),
            );
        }
        match covering_sample(samples, start_ns, end_ns, params.covering_max_ns) {
            Some(i) => &samples[i..=i],
            None => {
                out.notes.push(format!(
                    "no sample within {:.0} ms of the window's midpoint: no NVML figures",
                    params.covering_max_ns as f64 / 1e6
                ));
                return out;
            }
        }
    } else {
        inside
    };
    out.samples = u32::try_from(used.len()).unwrap_or(u32::MAX);

    out.sm_clock = clock_stats(used.iter().filter_map(|s| s.reading.sm_clock_mhz));
    out.mem_clock = clock_stats(used.iter().filter_map(|s| s.reading.mem_clock_mhz));

    let powers: Vec<(f64, Option<PowerKind>)> = used
        .iter()
        .filter_map(|s| {
            s.reading
                .power_mw
                .map(|mw| (f64::from(mw) / 1000.0, s.reading.power_kind))
        })
        .collect();
    if !powers.is_empty() {
        let n = powers.len();
        let kind = powers
            .iter()
            .find_map(|(_, k)| *k)
            .unwrap_or(PowerKind::Average);
        if powers.iter().any(|(_, k)| k.is_some_and(|k| k != kind)) {
            out.notes
                .push("power samples of mixed kinds (instant and average)".to_owned());
        }
        out.power = Some(PowerStats {
            mean_w: powers.iter().map(|(w, _)| w).sum::<f64>() / n as f64,
            max_w: powers.iter().map(|(w, _)| *w).fold(f64::MIN, f64::max),
            samples: u32::try_from(n).unwrap_or(u32::MAX),
            kind,
        });
    }

    let temps: Vec<u32> = used
        .iter()
        .filter_map(|s| s.reading.temperature_c)
        .collect();
    out.temperature_max_c = temps.iter().copied().max();
    out.temperature_samples = u32::try_from(temps.len()).unwrap_or(u32::MAX);

    let mut throttle_bits = 0u64;
    for bits in used.iter().filter_map(|s| s.reading.throttle_reasons) {
        throttle_bits |= bits;
        out.throttle_samples += 1;
    }
    let mut names = throttle_reason_names(throttle_bits);
    names.sort();
    out.throttle_reasons = names;

    let mem: Vec<u64> = used
        .iter()
        .filter_map(|s| s.reading.memory_used_bytes)
        .collect();
    out.memory_used_max_bytes = mem.iter().copied().max();
    out.memory_used_samples = u32::try_from(mem.len()).unwrap_or(u32::MAX);

    if !out.coarse {
        let reach = params.covering_max_ns;
        out.pcie_tx_bytes_per_s =
            counter_rate(samples, start_ns, end_ns, reach, |r| r.pcie_tx_bytes);
        out.pcie_rx_bytes_per_s =
            counter_rate(samples, start_ns, end_ns, reach, |r| r.pcie_rx_bytes);
    }

    out.energy = if out.coarse {
        used[0].reading.power_mw.map(|mw| EnergyEstimate {
            joules: f64::from(mw) / 1000.0 * ns_to_s(out.window_ns),
            method: EnergyMethod::CoveringSample,
            counter_reads: 0,
            counter_span_ns: None,
            power_samples: 1,
            integrated_joules: None,
        })
    } else {
        window_energy(
            samples,
            energy_reads,
            start_ns,
            end_ns,
            params,
            &mut out.notes,
        )
    };
    out
}

fn window_energy(
    samples: &[NvmlSample],
    energy_reads: &[EnergyRead],
    start_ns: u64,
    end_ns: u64,
    params: &SummaryParams,
    notes: &mut Vec<String>,
) -> Option<EnergyEstimate> {
    // Power points inside the window plus the nearest one on each side, if close enough.
    let reach_lo = start_ns.saturating_sub(params.covering_max_ns);
    let reach_hi = end_ns.saturating_add(params.covering_max_ns);
    let with_power: Vec<(u64, f64)> = samples
        .iter()
        .filter_map(|s| {
            s.reading
                .power_mw
                .map(|mw| (s.host_ns, f64::from(mw) / 1000.0))
        })
        .collect();
    let lo = with_power
        .partition_point(|p| p.0 < start_ns)
        .saturating_sub(1);
    let hi = (with_power.partition_point(|p| p.0 <= end_ns) + 1).min(with_power.len());
    let points: Vec<(u64, f64)> = with_power[lo..hi]
        .iter()
        .copied()
        .filter(|p| p.0 >= reach_lo && p.0 <= reach_hi)
        .collect();
    let power_samples = u32::try_from(points.len()).unwrap_or(u32::MAX);
    let integrated = integrate_power_j(&points, start_ns, end_ns);

    let window = end_ns - start_ns;
    if window >= params.energy_counter_min_window_ns {
        let reads: Vec<EnergyRead> = energy_reads
            .iter()
            .copied()
            .filter(|e| e.host_ns >= start_ns && e.host_ns <= end_ns)
            .collect();
        match (reads.first(), reads.last()) {
            (Some(first), Some(last)) if reads.len() >= 2 => {
                let span = last.host_ns - first.host_ns;
                let monotone = reads.windows(2).all(|w| w[1].energy_mj >= w[0].energy_mj);
                if !monotone {
                    notes.push(
                        "energy counter went backwards inside the window (driver reloaded?): \
                         integrated power used"
                            .to_owned(),
                    );
                } else if span < window / 2 {
                    notes.push(format!(
                        "energy-counter reads span only {:.0} ms of the {:.0} ms window: \
                         integrated power used",
                        span as f64 / 1e6,
                        window as f64 / 1e6
                    ));
                } else {
                    let counter_j = (last.energy_mj - first.energy_mj) as f64 / 1000.0;
                    let edges = match (
                        integrate_power_j(&points, start_ns, first.host_ns),
                        integrate_power_j(&points, last.host_ns, end_ns),
                    ) {
                        (Some(a), Some(b)) => a + b,
                        _ => {
                            notes.push(
                                "no power samples: the window's edges outside the counter reads \
                                 assume the counter's mean power"
                                    .to_owned(),
                            );
                            let mean_w = if span > 0 {
                                counter_j / ns_to_s(span)
                            } else {
                                0.0
                            };
                            mean_w * ns_to_s(window - span)
                        }
                    };
                    return Some(EnergyEstimate {
                        joules: counter_j + edges,
                        method: EnergyMethod::EnergyCounter,
                        counter_reads: u32::try_from(reads.len()).unwrap_or(u32::MAX),
                        counter_span_ns: Some(span),
                        power_samples,
                        integrated_joules: integrated,
                    });
                }
            }
            _ => notes.push(format!(
                "{} energy-counter read(s) inside the window: integrated power used",
                reads.len()
            )),
        }
    }
    integrated.map(|joules| EnergyEstimate {
        joules,
        method: EnergyMethod::IntegratedPower,
        counter_reads: 0,
        counter_span_ns: None,
        power_samples,
        integrated_joules: Some(joules),
    })
}
