//! Samples and tolerances shared by the NVML unit tests.

use super::samples::{NvmlReading, NvmlSample};
use crate::ledger::PowerKind;

pub(crate) const MS: u64 = 1_000_000;
pub(crate) const S: u64 = 1_000_000_000;

pub(crate) fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

pub(crate) fn sample(host_ns: u64, power_w: f64, sm: u32) -> NvmlSample {
    NvmlSample {
        host_ns,
        reading: NvmlReading {
            sm_clock_mhz: Some(sm),
            mem_clock_mhz: Some(2619),
            power_mw: Some((power_w * 1000.0).round() as u32),
            power_kind: Some(PowerKind::Instant),
            temperature_c: Some(50),
            throttle_reasons: Some(0),
            memory_used_bytes: Some(1 << 30),
            ..NvmlReading::default()
        },
    }
}

/// Samples every `step_ns` from `from_ns` to `to_ns` inclusive at constant power.
pub(crate) fn steady(from_ns: u64, to_ns: u64, step_ns: u64, power_w: f64) -> Vec<NvmlSample> {
    (0..)
        .map(|i| from_ns + i * step_ns)
        .take_while(|t| *t <= to_ns)
        .map(|t| sample(t, power_w, 1980))
        .collect()
}
