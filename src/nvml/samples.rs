//! What one read of one device gives: readings, timed samples, energy-counter reads, and the
//! stable names of NVML's throttle-reason bits.

use serde::{Deserialize, Serialize};

use crate::ledger::PowerKind;

/// One read of one device, as an [`NvmlSource`](super::NvmlSource) returns it. A figure the
/// device does not report (or that failed this time) is `None`; the reason is in `field_errors`.
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
    /// Clock-event (throttle) reasons as NVML's bitmask (named in the ledger: `sw_power_cap`, ...).
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
    /// the sampler moves them into its per-device error list.
    #[serde(skip)]
    pub field_errors: Vec<String>,
}

/// One sample: a reading and when it was taken.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub(crate) struct NvmlSample {
    /// Nanoseconds since the sampler's origin, at the midpoint of the reads.
    pub(crate) host_ns: u64,
    /// The figures read.
    #[serde(flatten)]
    pub(crate) reading: NvmlReading,
}

/// One read of the energy counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct EnergyRead {
    /// Nanoseconds since the sampler's origin, at the midpoint of the read.
    pub(crate) host_ns: u64,
    /// Energy consumed since the driver was loaded, millijoules.
    pub(crate) energy_mj: u64,
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
pub(crate) fn throttle_reason_names(bits: u64) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use super::throttle_reason_names;

    #[test]
    fn throttle_names_are_stable() {
        assert_eq!(
            throttle_reason_names(0x4 | 0x40 | (1 << 40)),
            vec!["sw_power_cap", "hw_thermal_slowdown", "unknown_bit_40"]
        );
        assert!(throttle_reason_names(0).is_empty());
        assert_eq!(throttle_reason_names(0x1), vec!["gpu_idle"]);
    }
}
