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
//! println!("{} iterations in {}", summary.trailer.iterations, summary.ledger_path.display());
//! # Ok::<(), gpu_ledger::Error>(())
//! ```

pub mod activity;
pub mod analysis;
#[doc(hidden)]
pub mod collector;
mod correlation;
pub mod counters;
pub mod cupti;
pub mod device;
pub mod env;
pub mod error;
pub mod events;
pub mod export;
mod host_clock;
pub mod kernels;
pub mod ledger;
pub mod loader;
pub mod nvml;
pub mod profiler;
pub mod rank;
pub mod scope;
mod signals;
mod thread_slot;
pub mod util;

pub use error::{Error, Result};
pub use ledger::{read_ledger, Ledger};
pub use profiler::{Config, Level, Profiler, ProfilerBuilder, RunSummary, COUNTERS_SCOPE};
pub use scope::ScopeGuard;
