//! gpu-ledger: an in-process GPU profiler. Wrap the phases of a GPU application in
//! [`Profiler::scope`] guards, mark iteration boundaries with [`Profiler::step`], and get one
//! ledger row per iteration: kernels, copies, memsets and waits from CUPTI, attributed to the
//! scopes that launched them.
//!
//! ```no_run
//! use gpu_ledger::{Level, Profiler};
//!
//! let profiler = Profiler::builder().level(Level::Timeline).ledger_path("run.jsonl").start()?;
//! for _ in 0..100 {
//!     {
//!         let _step = Profiler::scope("step");
//!         let _fwd = Profiler::scope("forward"); // recorded as step/forward
//!         // ... launch kernels ...
//!     }
//!     profiler.step();
//! }
//! let summary = profiler.finish()?;
//! println!("{} iterations", summary.trailer.iterations);
//! # Ok::<(), gpu_ledger::Error>(())
//! ```

// Unsafe code stays in the thin layers over C libraries and the OS (`cupti`, `driver`, `signals`,
// the TSC read in `clock`) and in the bundled kernels' launches; everywhere else it is refused.
#![deny(unsafe_code)]
// A `pub` item that nothing outside can reach should say `pub(crate)`. With every feature on (the
// crate's own tests build it so) each public item is reachable, so the lint has no false alarms.
#![cfg_attr(all(feature = "internals", feature = "kernels"), warn(unreachable_pub))]

mod clock;
mod collector;
mod config;
pub mod counters;
#[allow(unsafe_code)]
mod cupti;
#[allow(unsafe_code)]
mod driver;
mod env;
mod error;
#[cfg(feature = "kernels")]
#[allow(unsafe_code)]
pub mod kernels;
mod nvml;
#[allow(unsafe_code)]
mod nvtx;
pub mod pcsampling;
mod profiler;
mod rank;
mod run;
mod scope;
#[allow(unsafe_code)]
mod signals;
mod thread_slot;
#[cfg(feature = "tracing")]
mod tracing_layer;
mod writer;

pub use config::{
    Config, Follow, IdleConfig, Level, Nvtx, NvtxImport, ProfilerBuilder, TimelineSampling,
    LEDGER_PATH_ENV, LEVEL_ENV,
};
pub use driver::events::RawStream;
pub use error::{Error, Result};
/// The ledger format: every record of header, row and trailer, and the reader (the
/// `gpu-ledger-format` crate, which tools that only read ledgers depend on alone).
pub use gpu_ledger_format as ledger;
/// Each ledger row as metrics through the `metrics` facade, published from the collector thread
/// to the application's exporter (feature `metrics`: the `gpu-ledger-metrics` crate, which
/// `gpu-ledger metrics` also uses); turned on with [`ProfilerBuilder::metrics`].
#[cfg(feature = "metrics")]
pub use gpu_ledger_metrics as metrics;
/// Analysis of ledgers and their exports (feature `analysis`: the `gpu-ledger-tools` crate's
/// modules, which need no GPU).
#[cfg(feature = "analysis")]
pub use gpu_ledger_tools::{analysis, export};
pub use ledger::{read_ledger, Ledger};
pub use ledger::{COUNTERS_SCOPE, UNSCOPED};
pub use profiler::{Profiler, RunSummary};
pub use scope::{ContextGuard, InScope, ScopeContext, ScopeGuard, Scoped};
#[cfg(feature = "tracing")]
pub use tracing_layer::ScopeLayer;

/// What gpu-ledger's own benchmarks, examples and GPU tests reach below the public API (feature
/// `internals`, which they turn on). No stability promise: not for applications.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals {
    pub use crate::clock::thread_cpu_ns;
    pub use crate::collector::offline::OfflineCollector;
    pub use crate::cupti::activity::KINDS as TIMELINE_KINDS;
    pub use crate::cupti::calls::graphs::{GraphEvent, Owner};
    pub use crate::cupti::calls::{Attribution, CapturedCall};
    pub use crate::cupti::functions::traced_callbacks;
    pub use crate::cupti::layouts::{Lack, Layouts, Release, Tracing};
    pub use crate::cupti::record::{decode, NameCache, Record};
    pub use crate::cupti::{api as cupti, check as cupti_check, LoadedCupti};
    pub use crate::cupti::{subscribe, unsubscribe};
    pub use crate::driver::device::{driver_present, driver_version, require_driver};
    pub use crate::driver::events::elapsed_ns;
    pub use crate::env::{environment, nvml_index};
    pub use crate::nvml::{
        NvmlError, NvmlLibrary, NvmlSource, DEFAULT_ENERGY_PERIOD, DEFAULT_PCIE_PERIOD,
        DEFAULT_SAMPLE_PERIOD,
    };
    pub use crate::writer::LedgerWriter;
}

/// The README's Rust examples, compiled as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// A profiler, its builder and a scope context do nothing useful unbound, so each is
/// `#[must_use]`: the first three blocks below are refused under `#![deny(unused_must_use)]` and
/// the last, the same calls bound, compiles.
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// fn main() -> gpu_ledger::Result<()> {
///     gpu_ledger::Profiler::builder().start()?; // the profiler would stop right here
///     Ok(())
/// }
/// ```
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// fn main() {
///     gpu_ledger::Profiler::builder().level(gpu_ledger::Level::Timeline); // never started
/// }
/// ```
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// fn main() {
///     gpu_ledger::Profiler::context(); // captured for no thread
/// }
/// ```
///
/// ```no_run
/// #![deny(unused_must_use)]
/// fn main() -> gpu_ledger::Result<()> {
///     let profiler = gpu_ledger::Profiler::builder().start()?;
///     let builder = gpu_ledger::Profiler::builder().level(gpu_ledger::Level::Timeline);
///     let context = gpu_ledger::Profiler::context();
///     drop((builder, context));
///     profiler.finish()?;
///     Ok(())
/// }
/// ```
#[cfg(doctest)]
pub struct MustUseDoctests;
