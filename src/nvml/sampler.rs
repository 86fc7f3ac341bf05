//! The background sampler: one named thread that reads every device each period into bounded
//! rings, and summarizes a window from them without calling NVML.

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::aggregation::{summarize_samples, SummaryParams};
use super::config::{duration_ns, NvmlSamplerConfig, SampledDevice, SAMPLER_THREAD_NAME};
use super::error::NvmlError;
use super::samples::{EnergyRead, NvmlSample};
use super::source::NvmlSource;
use crate::ledger::NvmlIterationSummary;

/// Distinct error messages kept per device in [`DeviceSamplerStats::errors`].
const MAX_DISTINCT_ERRORS: usize = 16;
/// Back-off after a failed energy-counter read, so an unsupported counter is not asked every tick.
const ENERGY_RETRY_AFTER_ERROR: Duration = Duration::from_secs(5);

/// Counters of one device's sampling, for the trailer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct DeviceSamplerStats {
    /// CUDA device ordinal.
    pub(crate) device_id: u32,
    /// NVML device index.
    pub(crate) nvml_index: u32,
    /// Samples taken.
    pub(crate) samples: u64,
    /// Samples overwritten because the ring was full.
    pub(crate) samples_overwritten: u64,
    /// Reads of the whole device that failed (no sample stored).
    pub(crate) sample_errors: u64,
    /// Energy-counter reads taken.
    pub(crate) energy_reads: u64,
    /// Energy reads overwritten because their ring was full.
    pub(crate) energy_reads_overwritten: u64,
    /// Energy-counter reads that failed.
    pub(crate) energy_errors: u64,
    /// Ticks that took longer than the period (samples were then late).
    pub(crate) late_ticks: u64,
    /// Distinct error messages seen (first 16), with the field they concern.
    pub(crate) errors: Vec<String>,
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

/// The background sampler: one named thread reading every device each period.
///
/// [`NvmlSampler::start`] hands it a source and the instant sample times count from; once an
/// iteration has ended, [`NvmlSampler::summarize_all`] gives its figures per device (nanoseconds
/// since that instant, like the iteration's window); [`NvmlSampler::stop`] ends the thread, and
/// dropping the sampler does too.
#[derive(Debug)]
pub(crate) struct NvmlSampler {
    shared: Arc<Shared>,
    stop_tx: Option<Sender<()>>,
    done_rx: Receiver<()>,
    handle: Option<JoinHandle<()>>,
    config: NvmlSamplerConfig,
    params: SummaryParams,
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
    pub(crate) fn start<S: NvmlSource + 'static>(
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
        })
    }

    /// The configuration in force (with `devices` resolved to `Some`).
    pub(crate) fn config(&self) -> &NvmlSamplerConfig {
        &self.config
    }

    /// NVML figures of device `device_id` (CUDA ordinal) over `[start_ns, end_ns]` (ns since the
    /// origin). Makes no NVML call: it copies the samples around the window under a short lock.
    /// Call it once the sampler has passed `end_ns` (one period later) so that the window's end
    /// is bracketed; before that the last value is held to the end.
    ///
    /// A device that is not sampled gets a summary with no figures and a note.
    pub(crate) fn summarize(
        &self,
        device_id: u32,
        start_ns: u64,
        end_ns: u64,
    ) -> NvmlIterationSummary {
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
    pub(crate) fn summarize_all(&self, start_ns: u64, end_ns: u64) -> Vec<NvmlIterationSummary> {
        self.shared
            .devices
            .iter()
            .map(|d| self.summarize(d.device.device_id, start_ns, end_ns))
            .collect()
    }

    /// Sampling counters and errors per device.
    pub(crate) fn stats(&self) -> Vec<DeviceSamplerStats> {
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
    pub(crate) fn stop(&mut self, timeout: Duration) -> Result<(), NvmlError> {
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

/// Samples of one device, as [`NvmlSampler::samples`] returns them.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub(crate) struct DeviceSamples {
    /// CUDA device ordinal.
    pub(crate) device_id: u32,
    /// NVML device index.
    pub(crate) nvml_index: u32,
    /// Samples in time order (oldest overwritten first when the ring is full).
    pub(crate) samples: Vec<NvmlSample>,
    /// Energy-counter reads in time order.
    pub(crate) energy_reads: Vec<EnergyRead>,
}

/// What the tests inspect; the profiler reads only summaries and stats.
#[cfg(test)]
impl NvmlSampler {
    /// The devices sampled.
    pub(crate) fn devices(&self) -> Vec<SampledDevice> {
        self.shared.devices.iter().map(|d| d.device).collect()
    }

    /// Whether the thread is still running.
    pub(crate) fn is_running(&self) -> bool {
        self.handle.as_ref().is_some_and(|h| !h.is_finished())
    }

    /// Every sample and energy read still in the rings, per device. Copies; the sampler keeps
    /// running.
    pub(crate) fn samples(&self) -> Vec<DeviceSamples> {
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
}

#[cfg(test)]
mod tests;
