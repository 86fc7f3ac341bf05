//! NVML figures in the ledger: each row's summary per device over the iteration
//! ([`NvmlIterationSummary`]) and the trailer's energy over the run ([`RunEnergy`], computed from
//! those summaries by [`run_energy`]).

use serde::{Deserialize, Serialize};

/// Whether a power figure is an instant reading or NVML's running average.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PowerKind {
    /// An instant reading (`NVML_FI_DEV_POWER_INSTANT`, or `nvmlDeviceGetPowerUsage` before
    /// Ampere).
    Instant,
    /// `nvmlDeviceGetPowerUsage` on Ampere and newer: an average over the last second.
    Average,
}

/// How an iteration's energy was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnergyMethod {
    /// Energy-counter difference over the reads inside the window, edges integrated from power.
    EnergyCounter,
    /// Power samples integrated over the window (trapezoid rule, uneven spacing).
    IntegratedPower,
    /// Coarse window: the covering sample's power times the window length.
    CoveringSample,
}

/// Energy of one device over one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnergyEstimate {
    /// Energy, joules.
    #[serde(deserialize_with = "crate::float::null_as_nan")]
    pub joules: f64,
    /// How it was obtained.
    pub method: EnergyMethod,
    /// Energy-counter reads behind the figure (0 unless the counter was used).
    pub counter_reads: u32,
    /// Time between the first and last counter read used, ns (the rest of the window was
    /// integrated from power).
    #[serde(default)]
    pub counter_span_ns: Option<u64>,
    /// Power samples behind the figure (including the ones just outside the window used for
    /// interpolation at its edges).
    pub power_samples: u32,
    /// Energy from integrated power samples, for comparison with the counter (equal to `joules`
    /// when that is the method; `None` for coarse windows or without power samples).
    #[serde(default)]
    pub integrated_joules: Option<f64>,
}

/// Minimum, mean and maximum of a clock over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClockStats {
    /// Lowest sample, MHz.
    pub min_mhz: u32,
    /// Mean of the samples, MHz.
    #[serde(deserialize_with = "crate::float::null_as_nan")]
    pub mean_mhz: f64,
    /// Highest sample, MHz.
    pub max_mhz: u32,
    /// Samples behind the figures.
    pub samples: u32,
}

/// Power over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerStats {
    /// Mean of the samples, watts.
    #[serde(deserialize_with = "crate::float::null_as_nan")]
    pub mean_w: f64,
    /// Highest sample, watts.
    #[serde(deserialize_with = "crate::float::null_as_nan")]
    pub max_w: f64,
    /// Samples behind the figures.
    pub samples: u32,
    /// Instant readings or NVML's 1 s average.
    pub kind: PowerKind,
}

/// NVML figures of one device over one iteration.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NvmlIterationSummary {
    /// CUDA device ordinal.
    pub device_id: u32,
    /// Length of the window summarized, ns.
    #[serde(default)]
    pub window_ns: u64,
    /// Samples behind the figures (1 when coarse).
    #[serde(default)]
    pub samples: u32,
    /// True when the window was shorter than NVML's update period or held no sample: every
    /// figure then comes from the single sample covering it.
    #[serde(default)]
    pub coarse: bool,
    /// SM clock over the window.
    #[serde(default)]
    pub sm_clock: Option<ClockStats>,
    /// Memory clock over the window.
    #[serde(default)]
    pub mem_clock: Option<ClockStats>,
    /// Board power over the window.
    #[serde(default)]
    pub power: Option<PowerStats>,
    /// Energy over the window.
    #[serde(default)]
    pub energy: Option<EnergyEstimate>,
    /// Highest GPU temperature, °C.
    #[serde(default)]
    pub temperature_max_c: Option<u32>,
    /// Samples behind `temperature_max_c`.
    #[serde(default)]
    pub temperature_samples: u32,
    /// Clock-event (throttle) reasons seen in any sample, by name (sorted).
    #[serde(default)]
    pub throttle_reasons: Vec<String>,
    /// Samples behind `throttle_reasons` (0 means unknown, not "none").
    #[serde(default)]
    pub throttle_samples: u32,
    /// Highest device memory in use (all processes), bytes.
    #[serde(default)]
    pub memory_used_max_bytes: Option<u64>,
    /// Samples behind `memory_used_max_bytes`.
    #[serde(default)]
    pub memory_used_samples: u32,
    /// PCIe transmit rate from the device's byte counter, bytes/s, between the counter reads
    /// nearest the window's edges; `None` for coarse windows or with fewer than two reads.
    #[serde(default)]
    pub pcie_tx_bytes_per_s: Option<f64>,
    /// PCIe receive rate from the device's byte counter, bytes/s, as `pcie_tx_bytes_per_s`.
    #[serde(default)]
    pub pcie_rx_bytes_per_s: Option<f64>,
    /// Why a figure is absent or how it is limited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Device-iterations per energy method.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EnergyMethodCounts {
    /// From the energy counter.
    pub energy_counter: u64,
    /// From integrated power.
    pub integrated_power: u64,
    /// From one covering sample (coarse windows).
    pub covering_sample: u64,
}

/// Energy of one device over the run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DeviceRunEnergy {
    /// CUDA device ordinal.
    pub device_id: u32,
    /// Iterations with an energy figure for this device.
    pub iterations: u64,
    /// Sum of those figures, joules.
    #[serde(deserialize_with = "crate::float::null_as_nan")]
    pub total_j: f64,
}

/// Energy over a run: per iteration and per unit of useful work.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RunEnergy {
    /// Iterations given.
    pub iterations: u64,
    /// Iterations with an energy figure on every device (the others are left out below).
    pub iterations_with_energy: u64,
    /// Iterations where at least one device's window was coarse.
    pub coarse_iterations: u64,
    /// Energy of the iterations with energy, all devices, joules.
    #[serde(deserialize_with = "crate::float::null_as_nan")]
    pub total_j: f64,
    /// Mean energy per iteration (all devices), joules.
    pub mean_j_per_iteration: Option<f64>,
    /// Lowest energy of one iteration, joules.
    pub min_j_per_iteration: Option<f64>,
    /// Highest energy of one iteration, joules.
    pub max_j_per_iteration: Option<f64>,
    /// Useful work per iteration as the user stated it (tokens, images, bytes).
    pub work_per_iteration: Option<f64>,
    /// Joules per unit of useful work.
    pub j_per_unit_work: Option<f64>,
    /// Units of useful work per joule.
    pub work_per_j: Option<f64>,
    /// How the per-device figures were obtained.
    pub methods: EnergyMethodCounts,
    /// Per device.
    pub per_device: Vec<DeviceRunEnergy>,
}

/// Energy over a run from the NVML summaries of its iterations (one slice of per-device
/// summaries per iteration; leave out perturbed or warm-up iterations before calling).
///
/// An iteration counts only when every device in it has an energy figure. `work_per_iteration`
/// is the useful work of one iteration (tokens, images, bytes), so that `j_per_unit_work` is
/// `mean joules per iteration / work_per_iteration`; a value that is not a positive finite number
/// gives no per-work figures.
pub fn run_energy<'a, I>(iterations: I, work_per_iteration: Option<f64>) -> RunEnergy
where
    I: IntoIterator<Item = &'a [NvmlIterationSummary]>,
{
    let mut acc = EnergyAccumulator::default();
    for devices in iterations {
        acc.push(devices);
    }
    acc.finish(work_per_iteration)
}

/// [`run_energy`] one iteration at a time, for rows read as a stream.
#[derive(Debug, Clone)]
pub struct EnergyAccumulator {
    out: RunEnergy,
    min: f64,
    max: f64,
}

impl Default for EnergyAccumulator {
    fn default() -> Self {
        Self {
            out: RunEnergy::default(),
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }
}

impl EnergyAccumulator {
    /// Adds the NVML summaries of one iteration.
    pub fn push(&mut self, devices: &[NvmlIterationSummary]) {
        let out = &mut self.out;
        out.iterations += 1;
        if devices.iter().any(|d| d.coarse) {
            out.coarse_iterations += 1;
        }
        for d in devices {
            if let Some(e) = &d.energy {
                match e.method {
                    EnergyMethod::EnergyCounter => out.methods.energy_counter += 1,
                    EnergyMethod::IntegratedPower => out.methods.integrated_power += 1,
                    EnergyMethod::CoveringSample => out.methods.covering_sample += 1,
                }
            }
        }
        if devices.is_empty() || devices.iter().any(|d| d.energy.is_none()) {
            return;
        }
        let mut joules = 0.0;
        for d in devices {
            let j = d.energy.as_ref().map_or(0.0, |e| e.joules);
            joules += j;
            let entry = match out
                .per_device
                .iter()
                .position(|p| p.device_id == d.device_id)
            {
                Some(i) => &mut out.per_device[i],
                None => {
                    out.per_device.push(DeviceRunEnergy {
                        device_id: d.device_id,
                        ..DeviceRunEnergy::default()
                    });
                    let last = out.per_device.len() - 1;
                    &mut out.per_device[last]
                }
            };
            entry.iterations += 1;
            entry.total_j += j;
        }
        out.iterations_with_energy += 1;
        out.total_j += joules;
        self.min = self.min.min(joules);
        self.max = self.max.max(joules);
    }

    /// The run's energy; `work_per_iteration` as in [`run_energy`].
    pub fn finish(self, work_per_iteration: Option<f64>) -> RunEnergy {
        let Self { mut out, min, max } = self;
        out.work_per_iteration = work_per_iteration;
        out.per_device.sort_by_key(|d| d.device_id);
        if out.iterations_with_energy > 0 {
            let n = out.iterations_with_energy as f64;
            let mean = out.total_j / n;
            out.mean_j_per_iteration = Some(mean);
            out.min_j_per_iteration = Some(min);
            out.max_j_per_iteration = Some(max);
            if let Some(work) = work_per_iteration.filter(|w| w.is_finite() && *w > 0.0) {
                out.j_per_unit_work = Some(mean / work);
                if out.total_j > 0.0 {
                    out.work_per_j = Some(work * n / out.total_j);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::{run_energy, EnergyEstimate, EnergyMethod, NvmlIterationSummary};

    const S: u64 = 1_000_000_000;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    fn summary_with_energy(
        device_id: u32,
        joules: Option<f64>,
        method: EnergyMethod,
    ) -> NvmlIterationSummary {
        NvmlIterationSummary {
            device_id,
            window_ns: S,
            samples: 50,
            coarse: method == EnergyMethod::CoveringSample,
            energy: joules.map(|j| EnergyEstimate {
                joules: j,
                method,
                counter_reads: 0,
                counter_span_ns: None,
                power_samples: 50,
                integrated_joules: Some(j),
            }),
            ..NvmlIterationSummary::default()
        }
    }

    #[test]
    fn whole_run_energy_per_iteration_and_per_unit_of_work() {
        let rows = [
            vec![
                summary_with_energy(0, Some(100.0), EnergyMethod::EnergyCounter),
                summary_with_energy(1, Some(110.0), EnergyMethod::EnergyCounter),
            ],
            vec![
                summary_with_energy(0, Some(90.0), EnergyMethod::IntegratedPower),
                summary_with_energy(1, Some(100.0), EnergyMethod::IntegratedPower),
            ],
            // Device 1 has no figure: the iteration is left out of the energy totals.
            vec![
                summary_with_energy(0, Some(95.0), EnergyMethod::IntegratedPower),
                summary_with_energy(1, None, EnergyMethod::IntegratedPower),
            ],
            vec![
                summary_with_energy(0, Some(1.0), EnergyMethod::CoveringSample),
                summary_with_energy(1, Some(2.0), EnergyMethod::CoveringSample),
            ],
        ];
        let run = run_energy(rows.iter().map(|r| r.as_slice()), Some(1000.0));
        assert_eq!(run.iterations, 4);
        assert_eq!(run.iterations_with_energy, 3);
        assert_eq!(run.coarse_iterations, 1);
        assert!(close(run.total_j, 210.0 + 190.0 + 3.0, 1e-9));
        let mean = 403.0 / 3.0;
        assert!(close(run.mean_j_per_iteration.expect("mean"), mean, 1e-9));
        assert_eq!(run.min_j_per_iteration, Some(3.0));
        assert_eq!(run.max_j_per_iteration, Some(210.0));
        assert!(close(
            run.j_per_unit_work.expect("J/work"),
            mean / 1000.0,
            1e-12
        ));
        assert!(close(run.work_per_j.expect("work/J"), 3000.0 / 403.0, 1e-9));
        assert_eq!(run.methods.energy_counter, 2);
        assert_eq!(run.methods.integrated_power, 3);
        assert_eq!(run.methods.covering_sample, 2);
        assert_eq!(run.per_device.len(), 2);
        assert!(close(run.per_device[0].total_j, 191.0, 1e-9));
        assert_eq!(run.per_device[1].iterations, 3);

        let no_work = run_energy(rows.iter().map(|r| r.as_slice()), Some(0.0));
        assert_eq!(no_work.j_per_unit_work, None);
        let empty = run_energy(std::iter::empty::<&[NvmlIterationSummary]>(), None);
        assert_eq!(empty.mean_j_per_iteration, None);
    }
}
