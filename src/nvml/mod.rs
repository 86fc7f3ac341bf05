//! NVML sampling of clocks, power, temperature, throttle reasons and energy, and their summary
//! over each iteration ([`NvmlIterationSummary`](crate::ledger::NvmlIterationSummary) in the
//! ledger rows).
//!
//! # Rates
//!
//! NVML refreshes power, energy and clock values every 100 ms (its update period). Every NVML call
//! runs on the sampler thread, so the rates below trade only that thread's time; what each read
//! costs is recorded in `docs/measurements.md`.
//!
//! - **Samples every 20 ms** ([`DEFAULT_SAMPLE_PERIOD`]): SM and memory clock, power,
//!   temperature, throttle reasons and memory used of every device (utilization is not read).
//!   Five samples per NVML update, so an update is seen at most 20 ms after it happens and an
//!   iteration of 100 ms or more has at least four samples.
//! - **PCIe byte counters every 100 ms** ([`DEFAULT_PCIE_PERIOD`]), on the tick of a sample.
//! - **Energy counter every 500 ms per device, at most one read per tick**
//!   ([`DEFAULT_ENERGY_PERIOD`]): the counter is the slowest read by far, and with one read per
//!   tick a tick stays well inside the sample period.
//! - Bounded rings per device: 65 536 samples and 16 384 energy reads. Summaries need only the
//!   last iteration's window; overwritten entries are counted in the sampler's stats.
//!
//! # Threads and time
//!
//! Every NVML call runs on one named thread, `gpu-ledger-nvml`; nothing here calls NVML on the
//! application's threads, and summarizing a window only copies samples under a short lock.
//! Sample times are nanoseconds since the `origin` instant the sampler is started with (the
//! profiler's own start instant), taken at the midpoint of the reads; iteration windows are given
//! in the same nanoseconds.
//!
//! # Per-iteration figures
//!
//! - Clocks, power, temperature, memory used and throttle reasons come from the samples inside
//!   the window; each figure carries the number of samples behind it. Means are plain means over
//!   those samples (the sampler is periodic, so they are evenly spaced).
//! - **Energy**, with the method used recorded in the ledger
//!   ([`EnergyMethod`](crate::ledger::EnergyMethod)):
//!   - `EnergyCounter` when the window is at least 2 s long and holds two or more counter reads
//!     spanning at least half of it: `E = (C_last - C_first) + ∫ P dt` over the two edges (window
//!     start to first read, last read to window end), the edges integrated from power samples.
//!     The counter moves in steps of the 100 ms update period, so each read may lag by up to
//!     100 ms: the error is at most about `P x 100 ms`, i.e. 5 % of a 2 s window and 1 % of a 10 s
//!     one. Below 2 s that bound is worse than integrated power, so the counter is not used.
//!   - `IntegratedPower` otherwise: the power samples (with the one just outside each edge, for
//!     interpolation) are joined linearly and integrated exactly over the window (trapezoid rule
//!     with uneven spacing, clipped to the window; before the first or after the last sample the
//!     nearest value is held).
//!   - `CoveringSample` when the window is coarse (below).
//!
//!   The integrated-power figure is always reported too (`integrated_joules`), so the two methods
//!   can be compared on every long window.
//! - **Coarse windows**: a window shorter than the NVML update period, or one with no sample
//!   inside it, cannot be resolved. It gets the single sample nearest to its midpoint (within one
//!   update period), all its figures come from that one sample, energy is that sample's power
//!   times the window, and `coarse` is true. No precision is made up.
//!
//! Power is NVML's instant reading (`NVML_FI_DEV_POWER_INSTANT`) where the device supports it;
//! otherwise `nvmlDeviceGetPowerUsage`, which is a 1 s average on Ampere and newer GPUs (recorded
//! as [`PowerKind::Average`](crate::ledger::PowerKind::Average); GA100 is also labelled average,
//! conservatively) and instantaneous on older ones. Each sample and each summary records which.
//!
//! # Without NVML
//!
//! [`NvmlLibrary::init`] returns [`NvmlError::Unavailable`] when the library cannot be loaded, the
//! driver is not loaded or permission is denied; its message says what is missing and that
//! everything else keeps working. The profiler turns it into a header warning and runs on.
//!
//! # Testing without a GPU
//!
//! The sampler reads through the [`NvmlSource`] trait, so its tests run on a scripted source, and
//! the aggregation is a pure function of samples and energy reads.

mod aggregation;
mod config;
mod error;
#[cfg(test)]
mod fake;
mod inventory;
mod library;
mod sampler;
mod samples;
mod source;
#[cfg(test)]
mod test_support;

pub use config::{DEFAULT_ENERGY_PERIOD, DEFAULT_SAMPLE_PERIOD};
pub(crate) use inventory::{GpuProbe, NvmlInventory};
pub use library::NvmlLibrary;
// What only the overhead example reads directly: the sources' read calls and their values.
#[cfg(feature = "internals")]
pub use config::DEFAULT_PCIE_PERIOD;
#[cfg(feature = "internals")]
pub use error::NvmlError;
#[cfg(feature = "internals")]
pub use source::NvmlSource;

pub(crate) use config::{NvmlSamplerConfig, SampledDevice, DEFAULT_STOP_TIMEOUT};
pub(crate) use sampler::NvmlSampler;
