//! Hardware counters through the CUPTI Range Profiler (`docs/counters.md`).
//!
//! - [`RangeProfiler`]: the session. Host side once (chip name, counter availability, metrics
//!   validated against the chip, config image, number of passes), then collections on a CUDA
//!   context: user ranges ([`RangeProfiler::push_range`] / [`RangeProfiler::pop_range`], nested
//!   paths kept) or auto ranges (one per kernel, in launch order), with user replay (the caller
//!   runs the work once per pass) or kernel replay (CUPTI replays each kernel).
//! - [`metrics`]: metric names as Nsight Compute spells them, the presets
//!   (`speed_of_light`, `memory`, `occupancy`, `compute`) and validation with suggestions.
//! - [`derived`]: bandwidth, arithmetic intensity, % of peak, sector efficiency and the
//!   four-way classification, as pure functions.
//! - [`error`]: why counters cannot be collected: an unsupported device, and the
//!   [`Unavailable`] class the ledger header records (CUPTI's codes and fixes are the CUPTI
//!   layer's, one table for every level).
//! - the ledger records of the counters level are `crate::ledger::counters`'s, re-exported here.
//!
//! The counters level has no `unsafe`: every CUPTI call it makes is in the CUPTI layer
//! (`cupti/range_profiler.rs`).
//!
//! ```no_run
//! use gpu_ledger::counters::{CounterConfig, RangeMode, RangeProfiler, ReplayMode};
//! # fn run(ctx: &std::sync::Arc<cudarc::driver::CudaContext>) -> gpu_ledger::Result<()> {
//! let mut rp = RangeProfiler::new(ctx, CounterConfig {
//!     metrics: vec!["speed_of_light".into()],
//!     range_mode: RangeMode::Auto,
//!     replay_mode: ReplayMode::Kernel,
//!     record_kernel_names: true,
//!     ..CounterConfig::default()
//! })?;
//! let collected = rp.collect(|_rp| {
//!     // ... launch the kernels to measure ...
//!     Ok(())
//! })?;
//! for r in &collected.ranges {
//!     println!("{} {:?} {:?}", r.name, r.kernel, r.values);
//! }
//! # Ok(()) }
//! ```

mod config;
pub mod derived;
pub mod error;
pub mod launches;
pub mod metrics;
mod ranges;
pub mod records;
pub(crate) mod release;
mod session;
pub(crate) mod window;

pub use crate::cupti::range_profiler::{DeviceSupport, MetricProperties};
pub use crate::ledger::counters::{
    Bound, CacheState, CounterRange, CountersHeader, Derived, DroppedMetric, IterationCounters,
    RangeMode, ReplayMode, Unavailable,
};
pub use config::CounterConfig;
pub use derived::{classify, derive, DeriveOptions, Thresholds};
pub use error::{unavailable_fix, unavailable_of};
pub use launches::{name_auto_ranges, Launch, LaunchRecorder};
pub use metrics::{preset, resolve, MetricCatalog, NameList, Preset, PRESETS};
pub use ranges::RangeValues;
pub use records::{
    counters_from_collected, counters_pending, header_collected, header_not_collected,
};
pub use session::{ChipCatalog, Collected, PassEnd, RangeProfiler};
pub use window::{CounterWindow, CountersSetup};
