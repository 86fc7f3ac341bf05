//! From ledger rows to the decisions of the profiling funnel: pure functions on data, no GPU.
//!
//! - [`intervals`]: device busy time as the union of intervals, idle gaps;
//! - [`stats`]: distributions, percentiles, warm-up detection, the row filter and the figures'
//!   types; [`selection`]: which rows count; [`distributions`]: per-scope and per-family
//!   distributions;
//! - [`families`]: kernel families from demangled names, shares, contribution rank and Amdahl
//!   ceilings `1/(1-p)`;
//! - [`mod@occupancy`]: theoretical occupancy ported from CUDA's occupancy calculator, waves and
//!   padding;
//! - [`series`]: one figure streamed in bounded memory, exact up to a bound and a quantile
//!   sketch beyond;
//! - [`mod@compare`]: A/B comparison of two ledgers with a bootstrap interval and warnings when the
//!   runs are not comparable.
//!
//! Analysis reads ledger types only; the exports in [`crate::export`] build on it, never the other
//! way round.
//!
//! ```
//! use gpu_ledger_tools::analysis::{amdahl_speedup, union_busy, Distribution};
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
pub mod indices;
/// Device busy time as the union of intervals, and idle gaps.
pub mod intervals {
    pub use gpu_ledger_format::intervals::{
        gaps, label_gaps, union_busy, BusySummary, LabelledSpan,
    };
}
pub mod occupancy;
pub mod rng;
pub mod selection;
pub mod series;
pub mod stats;

pub use compare::{
    bootstrap_speedup, compare, compare_streamed, CompareError, CompareOptions, CompareSide,
    Comparison, FamilyChange, LaunchChange, LedgerView, RunSide, ScopeChange, SpeedupEstimate,
    Verdict,
};
pub use distributions::{family_distributions, scope_distributions};
pub use families::{
    amdahl_ceiling, amdahl_speedup, base_name, demangle, display_name, family_table,
    qualified_name, strip_name, FamilyNamer, FamilyRules, FamilySummary, FamilyTable,
    FamilyTableBuilder, GroupingRule, KernelShape, RuleMatch, RuleParseError, ShapeSummary,
};
pub use indices::IndexRuns;
pub use intervals::{gaps, label_gaps, union_busy, BusySummary, LabelledSpan};
pub use occupancy::{
    analyze_kernel, occupancy, padding_efficiency, wave_efficiency, waves, DeviceLimits,
    KernelLaunchAnalysis, LaunchResources, Limiter, Occupancy, OccupancyError, Waves,
};
pub use selection::{select_rows, RowSelection};
pub use series::{Budget, Series, EXACT_BUDGET, EXACT_VALUES, SKETCH_RELATIVE_ERROR};
pub use stats::{
    detect_warmup, idle_share, mad, median, median_interval, percentile_sorted, Distribution,
    FamilyStats, IterationMetric, MedianInterval, RowFilter, ScopeStats, Warmup, WarmupDetect,
};
