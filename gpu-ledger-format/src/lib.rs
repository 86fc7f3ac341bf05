//! The gpu-ledger ledger format: JSON Lines of one header, one row per iteration and one trailer,
//! written by the `gpu-ledger` profiler and read by its tools. Every record type is here, with
//! the reader (whole, [`read_ledger`], or a line at a time, [`LedgerStream`]), the validation
//! every line passes, and [`check_ledger`], what `gpu-ledger check` reports.
//!
//! The profiler re-exports this crate as `gpu_ledger::ledger`; a tool that only reads ledgers
//! depends on it alone, with no CUDA library to build.
//!
//! ```no_run
//! let ledger = gpu_ledger_format::read_ledger("run.jsonl".as_ref())?;
//! for row in &ledger.iterations {
//!     println!("iteration {}: {} ns", row.index, row.host_wall_ns);
//! }
//! # Ok::<(), gpu_ledger_format::Error>(())
//! ```

#![forbid(unsafe_code)]

pub mod check;
pub mod counters;
pub mod environment;
mod error;
mod float;
pub mod idle;
pub mod intervals;
mod names;
pub mod nvml;
pub mod reader;
pub mod schema;
pub mod stalls;
pub mod stream;
pub mod validate;

pub use check::{check_ledger, truncation_warning, CheckNote, CheckReport};
pub use environment::*;
pub use error::{Error, Result};
pub use idle::{DispatchFloor, IdleBreakdown, IdleCause, IdleGap, InventoryEntry};
pub use names::{COUNTERS_SCOPE, OTHER_SCOPE_PATHS, UNSCOPED};
pub use nvml::*;
pub use reader::{read_ledger, Ledger};
pub use schema::*;
pub use stream::{LedgerStream, StreamItem};

/// The sum of `values`, held at `u64::MAX` rather than wrapped: the one rule by which every
/// reader of a ledger adds its counts and times, so that every command shows the same figure
/// for the same sum (values are at most 2^62 each, so only a few of them can reach the bound).
pub fn saturating_sum(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0, u64::saturating_add)
}
