//! Figures derived from evaluated metric values (pure functions): achieved DRAM bandwidth,
//! arithmetic intensity at DRAM, % of peak, sectors per request and sector efficiency, FLOP
//! counts, and the first-pass four-way classification (memory, compute, both or latency bound).
//!
//! Every function returns `None` rather than a number when an input is missing, not finite, or a
//! denominator is not positive: a ledger never holds an invented value.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::metrics::names;
use crate::ledger::counters::{Bound, Derived};

/// Bytes per L1/L2 sector.
pub const SECTOR_BYTES: f64 = 32.0;

/// Threads per warp (one request is one warp-wide instruction).
pub const WARP_SIZE: f64 = 32.0;

fn ratio(num: f64, den: f64) -> Option<f64> {
    (num.is_finite() && den.is_finite() && den > 0.0 && num >= 0.0).then(|| num / den)
}

/// Achieved bandwidth in bytes/s from bytes moved and a duration in ns:
/// `BW = (B_read + B_write) / t`.
pub fn bandwidth(bytes: f64, duration_ns: f64) -> Option<f64> {
    ratio(bytes, duration_ns).map(|b_per_ns| b_per_ns * 1e9)
}

/// `achieved / peak` in percent.
pub fn pct_of_peak(achieved: f64, peak: f64) -> Option<f64> {
    ratio(achieved, peak).map(|r| r * 100.0)
}

/// Arithmetic intensity at one level of the hierarchy: operations per byte moved at that level
/// (name the level: this crate stores the DRAM one).
pub fn arithmetic_intensity(operations: f64, bytes: f64) -> Option<f64> {
    ratio(operations, bytes)
}

/// Sector efficiency: useful bytes over the bytes the sectors moved,
/// `η = B_u / (sectors × 32)`.
pub fn sector_efficiency(useful_bytes: f64, sectors: f64) -> Option<f64> {
    ratio(useful_bytes, sectors * SECTOR_BYTES)
}

/// Sectors per request: 4 for a warp reading 32 consecutive 4-byte words, 32 when every lane
/// touches its own sector.
pub fn sectors_per_request(sectors: f64, requests: f64) -> Option<f64> {
    ratio(sectors, requests)
}

/// Useful bytes of `requests` full-warp requests of `access_bytes` per thread (the input of
/// [`sector_efficiency`] when the program's useful bytes are not known otherwise).
pub fn useful_bytes_of_requests(requests: f64, access_bytes: f64) -> f64 {
    requests * WARP_SIZE * access_bytes
}

/// FLOPs from add, multiply and fused multiply-add thread-instruction counts (an FMA is two),
/// the way Nsight Compute's roofline counts them.
pub fn flops(add: f64, mul: f64, fma: f64) -> f64 {
    add + mul + 2.0 * fma
}

/// Where "high" starts, in % of peak. There is no universal number (what counts is the achieved
/// share of the relevant peak); the default 60 % is where Nsight Compute's speed-of-light rule
/// starts to call both throughputs low ("below 60 % of peak typically indicate latency
/// issues").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// A throughput at or above this % of its peak is "high".
    pub high_pct: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds { high_pct: 60.0 }
    }
}

/// Classifies a range from its memory and compute throughput (% of peak); `None` when either is
/// not a finite percentage.
pub fn classify(memory_pct: f64, compute_pct: f64, thresholds: &Thresholds) -> Option<Bound> {
    if !memory_pct.is_finite() || !compute_pct.is_finite() || memory_pct < 0.0 || compute_pct < 0.0
    {
        return None;
    }
    let mem = memory_pct >= thresholds.high_pct;
    let comp = compute_pct >= thresholds.high_pct;
    Some(match (mem, comp) {
        (true, false) => Bound::Memory,
        (false, true) => Bound::Compute,
        (true, true) => Bound::Both,
        (false, false) => Bound::Latency,
    })
}

/// Inputs of [`derive()`] that the counters do not carry.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DeriveOptions {
    /// Bytes each thread reads or writes per global access, used to turn requests into useful
    /// bytes for sector efficiency (4 for `float`; 16 for `float4` loads).
    pub access_bytes: f64,
    /// The device's peak DRAM bandwidth in bytes/s, for % of peak when
    /// `dram__throughput.avg.pct_of_peak_sustained_elapsed` was not collected.
    pub peak_dram_bytes_per_s: Option<f64>,
    /// Classification thresholds.
    pub thresholds: Thresholds,
}

impl Default for DeriveOptions {
    fn default() -> Self {
        DeriveOptions {
            access_bytes: 4.0,
            peak_dram_bytes_per_s: None,
            thresholds: Thresholds::default(),
        }
    }
}

/// Computes every figure whose inputs are among `values` (metric name -> evaluated value).
pub fn derive(values: &BTreeMap<String, f64>, options: &DeriveOptions) -> Derived {
    let get = |name: &str| values.get(name).copied().filter(|v| v.is_finite());
    let mut d = Derived::default();
    let read = get(names::DRAM_BYTES_READ);
    let write = get(names::DRAM_BYTES_WRITE);
    d.dram_bytes = match (read, write) {
        (Some(r), Some(w)) => Some(r + w),
        (Some(x), None) | (None, Some(x)) => Some(x),
        (None, None) => None,
    };
    if let (Some(bytes), Some(t)) = (d.dram_bytes, get(names::GPU_TIME)) {
        d.dram_bandwidth_bytes_per_s = bandwidth(bytes, t);
    }
    d.dram_pct_of_peak = get(names::DRAM_THROUGHPUT_PCT).or_else(|| {
        pct_of_peak(
            d.dram_bandwidth_bytes_per_s?,
            options.peak_dram_bytes_per_s?,
        )
    });
    let fl = |a: &str, m: &str, f: &str| -> Option<f64> {
        let (a, m, f) = (get(a), get(m), get(f));
        (a.is_some() || m.is_some() || f.is_some())
            .then(|| flops(a.unwrap_or(0.0), m.unwrap_or(0.0), f.unwrap_or(0.0)))
    };
    d.fp32_flops = fl(names::FADD, names::FMUL, names::FFMA);
    d.fp16_flops = fl(names::HADD, names::HMUL, names::HFMA);
    d.fp64_flops = fl(names::DADD, names::DMUL, names::DFMA);
    let total_flops = [d.fp32_flops, d.fp16_flops, d.fp64_flops]
        .iter()
        .flatten()
        .copied()
        .reduce(|a, b| a + b);
    if let (Some(f), Some(b)) = (total_flops, d.dram_bytes) {
        d.arithmetic_intensity_dram = arithmetic_intensity(f, b);
    }
    let eff = |sectors: Option<f64>, requests: Option<f64>| -> (Option<f64>, Option<f64>) {
        match (sectors, requests) {
            (Some(s), Some(r)) => (
                sectors_per_request(s, r),
                sector_efficiency(useful_bytes_of_requests(r, options.access_bytes), s)
                    .map(|e| e.min(1.0)),
            ),
            _ => (None, None),
        }
    };
    (
        d.global_load_sectors_per_request,
        d.global_load_sector_efficiency,
    ) = eff(
        get(names::GLOBAL_LD_SECTORS),
        get(names::GLOBAL_LD_REQUESTS),
    );
    (
        d.global_store_sectors_per_request,
        d.global_store_sector_efficiency,
    ) = eff(
        get(names::GLOBAL_ST_SECTORS),
        get(names::GLOBAL_ST_REQUESTS),
    );
    if d.global_load_sector_efficiency.is_some() || d.global_store_sector_efficiency.is_some() {
        d.sector_efficiency_access_bytes = Some(options.access_bytes);
    }
    if let (Some(c), Some(w)) = (
        get(names::SHARED_LD_BANK_CONFLICTS),
        get(names::SHARED_LD_WAVEFRONTS),
    ) {
        d.shared_load_conflicts_per_wavefront = ratio(c, w);
    }
    if let (Some(m), Some(c)) = (
        get(names::MEMORY_THROUGHPUT_PCT),
        get(names::SM_THROUGHPUT_PCT),
    ) {
        d.bound = classify(m, c, &options.thresholds);
    }
    d
}
