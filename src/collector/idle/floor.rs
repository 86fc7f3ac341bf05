//! The dispatch floor: how long a device leaves between two pieces of work that were both
//! launched before the first ended. A gap of already launched work is dispatch latency up to the
//! floor; what is longer waited on something else.
//!
//! Where it comes from, first that holds:
//! 1. `IdleConfig::dispatch_floor` (`config`);
//! 2. the start-up calibration (`calibration`): it queues batches of one-block empty kernels
//!    behind a spin, so each batch runs back to back with tracing on, exactly the case; the
//!    floor is the 90th percentile of the gaps between consecutive empty kernels of a stream, so
//!    that the ordinary jitter of dispatch is latency, not an unexplained wait;
//! 3. the run's own gaps (`observed`): the median of the most recent gaps between work of one
//!    stream launched before the gap began, once there are enough;
//! 4. [`DEFAULT_FLOOR_NS`] (`default`).

use rustc_hash::FxHashMap as HashMap;

use crate::cupti::record::KernelRecord;
use crate::ledger::idle::DispatchFloor;

/// The floor where nothing measured one, ns.
pub(crate) const DEFAULT_FLOOR_NS: u64 = 1_000;
/// The calibration's kernel whose back-to-back gaps are the floor.
const EMPTY_KERNEL: &str = "gpu_ledger_calibrate_empty";
/// Calibration kernels kept (the calibration launches about 1 600 traced).
const MAX_CALIBRATION: usize = 8_192;
/// Gaps the calibration must give for its floor to be used.
const MIN_CALIBRATION_GAPS: usize = 16;
/// Recent gaps kept per device for the observed floor, and how many it needs.
const OBSERVED_KEPT: usize = 1_024;
const MIN_OBSERVED: u64 = 64;

/// A calibration kernel: device, stream, start, end, and whether it is an empty one.
type CalibrationKernel = (u32, u32, u64, u64, bool);

/// The floors of a run's devices.
pub(crate) struct Floors {
    config: Option<u64>,
    calibration: Vec<CalibrationKernel>,
    /// The calibration's floors by device, computed when first needed after new kernels came.
    measured: Option<HashMap<u32, DispatchFloor>>,
    /// Per device: the most recent same-stream gaps (a ring) and how many were seen.
    observed: HashMap<u32, (Vec<u64>, u64)>,
    /// Per device: the observed floor and the count of gaps seen when it was computed (it is
    /// computed again once a ring's worth of new gaps has come, not every row).
    observed_floor: HashMap<u32, (u64, DispatchFloor)>,
    /// The floor each device's rows used last.
    used: HashMap<u32, DispatchFloor>,
}

impl Floors {
    pub(crate) fn new(config: Option<u64>) -> Self {
        Floors {
            config,
            calibration: Vec::new(),
            measured: None,
            observed: HashMap::default(),
            observed_floor: HashMap::default(),
            used: HashMap::default(),
        }
    }

    /// A kernel record of the start-up calibration.
    pub(crate) fn add_calibration(&mut self, k: &KernelRecord) {
        if self.calibration.len() < MAX_CALIBRATION {
            let empty = k.name == EMPTY_KERNEL;
            self.calibration
                .push((k.device_id, k.stream_id, k.start, k.end, empty));
            self.measured = None;
        }
    }

    /// Gaps of `device` between already launched work of one stream, seen in a row.
    pub(crate) fn observe(&mut self, device: u32, gaps: &[u64]) {
        let (ring, seen) = self.observed.entry(device).or_default();
        for &g in gaps {
            if ring.len() < OBSERVED_KEPT {
                ring.push(g);
            } else {
                ring[(*seen % OBSERVED_KEPT as u64) as usize] = g;
            }
            *seen += 1;
        }
    }

    /// The floor of `device` for its next row, ns, and where it came from.
    pub(crate) fn floor(&mut self, device: u32) -> (u64, &'static str) {
        let f = self.choose(device);
        let out = (f.floor_ns, source_name(&f.source));
        if self.used.get(&device) != Some(&f) {
            self.used.insert(device, f);
        }
        out
    }

    fn choose(&mut self, device: u32) -> DispatchFloor {
        if let Some(ns) = self.config {
            return floor(device, ns, None, 0, "config");
        }
        if self.measured.is_none() {
            self.measured = Some(calibration_floors(&mut self.calibration));
        }
        if let Some(f) = self.measured.as_ref().and_then(|m| m.get(&device)) {
            return f.clone();
        }
        if let Some((ring, seen)) = self
            .observed
            .get(&device)
            .filter(|(_, n)| *n >= MIN_OBSERVED)
        {
            let cached = self.observed_floor.get(&device);
            if let Some((_, f)) = cached.filter(|(at, _)| seen - at < OBSERVED_KEPT as u64) {
                return f.clone();
            }
            let mut v = ring.clone();
            v.sort_unstable();
            let (median, p90) = (v[v.len() / 2], v[v.len() * 9 / 10]);
            let mut f = floor(device, median, Some(p90), *seen, "observed");
            f.median_ns = Some(median);
            self.observed_floor.insert(device, (*seen, f.clone()));
            return f;
        }
        floor(device, DEFAULT_FLOOR_NS, None, 0, "default")
    }

    /// The floor each device's rows used last, by device.
    pub(crate) fn used(&self) -> Vec<DispatchFloor> {
        let mut v: Vec<DispatchFloor> = self.used.values().cloned().collect();
        v.sort_by_key(|f| f.device_id);
        v
    }
}

fn floor(device: u32, ns: u64, p90: Option<u64>, samples: u64, source: &str) -> DispatchFloor {
    DispatchFloor {
        device_id: device,
        floor_ns: ns,
        median_ns: None,
        p90_ns: p90,
        samples,
        source: source.into(),
    }
}

/// The static name of a floor's source.
fn source_name(source: &str) -> &'static str {
    match source {
        "config" => "config",
        "calibration" => "calibration",
        "observed" => "observed",
        _ => "default",
    }
}

/// The calibration's floor per device: the gaps between consecutive empty kernels of one stream
/// (the copy, add and spin kernels between batches separate them).
fn calibration_floors(kernels: &mut [CalibrationKernel]) -> HashMap<u32, DispatchFloor> {
    kernels.sort_unstable_by_key(|k| (k.0, k.1, k.2));
    let mut gaps: HashMap<u32, Vec<u64>> = HashMap::default();
    for w in kernels.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.4 && b.4 && (a.0, a.1) == (b.0, b.1) {
            gaps.entry(a.0).or_default().push(b.2.saturating_sub(a.3));
        }
    }
    let mut out = HashMap::default();
    for (device, mut v) in gaps {
        if v.len() < MIN_CALIBRATION_GAPS {
            continue;
        }
        v.sort_unstable();
        let (median, p90) = (v[v.len() / 2], v[v.len() * 9 / 10]);
        let mut f = floor(device, p90, Some(p90), v.len() as u64, "calibration");
        f.median_ns = Some(median);
        out.insert(device, f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cupti::record::intern_name;

    fn calibration_kernel(name: &str, start: u64, end: u64) -> KernelRecord {
        KernelRecord {
            name: intern_name(name),
            start,
            end,
            device_id: 0,
            context_id: 1,
            stream_id: 3,
            correlation_id: 0,
            shape: Default::default(),
            shared_executed_bytes: 0,
            local_bytes_total: 0,
            graph_id: 0,
            graph_node_id: 0,
            device_launched: false,
        }
    }

    #[test]
    fn the_calibration_floor_is_the_90th_percentile_of_empty_kernel_gaps() {
        let mut f = Floors::new(None);
        assert_eq!(f.floor(0), (DEFAULT_FLOOR_NS, "default"));
        // Two batches of 20 empty kernels, gaps 700 ns but every fifth 900 ns, separated by a
        // spin whose gaps are not counted.
        let mut t = 0;
        for batch in 0..2 {
            for i in 0..20 {
                f.add_calibration(&calibration_kernel(EMPTY_KERNEL, t, t + 500));
                t += 500 + if i % 5 == 4 { 900 } else { 700 };
            }
            f.add_calibration(&calibration_kernel(
                "gpu_ledger_calibrate_spin",
                t,
                t + 50_000 * (batch + 1),
            ));
            t += 200_000;
        }
        assert_eq!(f.floor(0), (900, "calibration"));
        let used = f.used();
        assert_eq!(used[0].median_ns, Some(700));
        assert_eq!(used[0].samples, 38);
        // Another device: not calibrated; its own gaps once there are enough.
        assert_eq!(f.floor(1).1, "default");
        f.observe(1, &[1_300; 63]);
        assert_eq!(f.floor(1).1, "default");
        f.observe(1, &[1_300]);
        assert_eq!(f.floor(1), (1_300, "observed"));
        // A floor set in the configuration wins.
        assert_eq!(Floors::new(Some(42)).floor(0), (42, "config"));
    }
}
