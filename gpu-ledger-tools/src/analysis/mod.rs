//! From ledger rows to the decisions of the profiling funnel: pure functions on data, no GPU.
//! Each item has one path, through the module that holds it (`analysis::stats::Distribution`).
//!
//! - [`intervals`]: device busy time as the union of intervals, idle gaps (the ledger format's
//!   own module);
//! - [`stats`]: distributions, percentiles, warm-up detection, the row filter and the figures'
//!   types;
//! - [`selection`]: which rows count (warm-up, perturbed, incomplete, untraced);
//! - [`distributions`]: per-scope and per-family distributions across iterations;
//! - [`families`]: kernel families from demangled names, shares, contribution rank and Amdahl
//!   ceilings `1/(1-p)`;
//! - [`mod@occupancy`]: theoretical occupancy ported from CUDA's occupancy calculator, waves and
//!   padding;
//! - [`series`]: one figure in bounded memory, exact up to a bound and a quantile sketch beyond;
//! - [`mod@compare`]: A/B comparison of two ledgers with a bootstrap interval and warnings when the
//!   runs are not comparable;
//! - [`idle`]: each device's idle time by cause across rows, for the summary and the comparison;
//! - [`indices`]: iteration lists as runs; [`rng`]: the one random number generator.
//!
//! One engine does the work: rows are pushed one at a time into builders ([`selection::RowSelector`],
//! [`distributions::ScopeSeries`], [`compare::CompareSide`], ...) whose memory does not grow with
//! the rows; the functions over rows in memory ([`selection::select_rows`],
//! [`compare::compare`], ...) push through the same builders with a
//! [`Budget::exact`](series::Budget::exact) that keeps every figure exact.
//!
//! Analysis reads ledger types only; the exports in [`crate::export`] build on it, never the other
//! way round.
//!
//! ```
//! use gpu_ledger_tools::analysis::families::amdahl_speedup;
//! use gpu_ledger_tools::analysis::intervals::union_busy;
//! use gpu_ledger_tools::analysis::stats::Distribution;
//!
//! // Two overlapping streams: busy 150 ns of a 200 ns window.
//! let busy = union_busy(&mut vec![(0, 100), (50, 150), (180, 200)]).unwrap();
//! assert_eq!((busy.busy_ns, busy.idle_ns, busy.largest_gap_ns), (170, 30, 30));
//!
//! // A family with 3.4% of device time made 2x faster gains 1.7%: 1/((1-p) + p/s).
//! assert!((amdahl_speedup(0.034, 2.0).unwrap() - 1.0173).abs() < 1e-4);
//!
//! let d = Distribution::from_samples(&[1.0, 2.0, 3.0, 4.0]).unwrap();
//! assert_eq!(d.median, 2.5);
//! ```

#![forbid(unsafe_code)]

pub mod compare;
pub mod distributions;
pub mod families;
pub mod idle;
pub mod indices;
pub mod names;
pub use gpu_ledger_format::intervals;
pub mod occupancy;
pub mod rng;
pub mod selection;
pub mod series;
pub mod stats;
