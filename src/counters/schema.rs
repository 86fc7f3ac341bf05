//! Ledger records for hardware counters, proposed for `src/ledger/schema.rs` (which references
//! them): one [`CountersHeader`] in the header, one [`IterationCounters`] in each row of a
//! counters window. All fields are additive (`#[serde(default)]` where a reader of an older
//! ledger may miss them).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::derived::{derive, DeriveOptions, Derived};
use super::error::Unavailable;
use super::metrics::DroppedMetric;
use super::session::{Collected, RangeMode, RangeProfiler, ReplayMode};
use crate::error::Error;

/// Header record: what counters were asked for and whether they are collected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CountersHeader {
    /// True when the Range Profiler was set up; false when counters are not collected.
    pub collected: bool,
    /// Why not, when not (the error text, with its fix).
    #[serde(default)]
    pub reason: Option<String>,
    /// The class of the reason (`no_permission`, `hardware_busy`, `unsupported_device`, ...).
    #[serde(default)]
    pub unavailable: Option<Unavailable>,
    /// The chip CUPTI reports (`GH100`).
    #[serde(default)]
    pub chip: Option<String>,
    /// The requested list as given (metric names and preset names).
    #[serde(default)]
    pub requested: Vec<String>,
    /// The metrics collected (presets expanded).
    #[serde(default)]
    pub metrics: Vec<String>,
    /// Optional preset metrics this chip lacks.
    #[serde(default)]
    pub dropped_metrics: Vec<DroppedMetric>,
    /// Config passes the metric set needs.
    #[serde(default)]
    pub passes: u32,
    /// Iterations one collection takes (user replay: one pass per iteration).
    #[serde(default)]
    pub iterations_per_collection: u32,
    /// `user` or `auto`.
    pub range_mode: RangeMode,
    /// `user` or `kernel`.
    pub replay_mode: ReplayMode,
    /// User-range nesting levels collected.
    #[serde(default = "one")]
    pub nesting_levels: u16,
}

fn one() -> u16 {
    1
}

impl CountersHeader {
    /// The header record of a set-up profiler.
    pub fn collected(rp: &RangeProfiler) -> Self {
        let c = rp.config();
        CountersHeader {
            collected: true,
            reason: None,
            unavailable: None,
            chip: Some(rp.chip().to_string()),
            requested: c.metrics.clone(),
            metrics: rp.metrics().to_vec(),
            dropped_metrics: rp.dropped_metrics().to_vec(),
            passes: rp.passes() as u32,
            iterations_per_collection: rp.runs_per_collection() as u32,
            range_mode: c.range_mode,
            replay_mode: c.replay_mode,
            nesting_levels: c.nesting_levels,
        }
    }

    /// The header record when setting up failed: the timeline goes on, this says why.
    pub fn not_collected(config: &super::CounterConfig, error: &Error) -> Self {
        CountersHeader {
            collected: false,
            reason: Some(error.to_string()),
            unavailable: Some(Unavailable::of(error)),
            chip: None,
            requested: config.metrics.clone(),
            metrics: Vec::new(),
            dropped_metrics: Vec::new(),
            passes: 0,
            iterations_per_collection: 0,
            range_mode: config.range_mode,
            replay_mode: config.replay_mode,
            nesting_levels: config.nesting_levels,
        }
    }
}

/// Row record: the counters of one iteration of a counters window. With user replay a collection
/// spans `passes` consecutive iterations; every one of them is `perturbed` and carries this
/// record, and the values are in the row of the iteration that completed the collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IterationCounters {
    /// Index of the collection (window) in the run, from 0.
    pub collection: u64,
    /// The iteration the collection began in.
    pub first_iteration: u64,
    /// This iteration's run within the collection, from 1.
    pub run: u32,
    /// Runs the collection takes.
    pub runs: u32,
    /// True in the row that holds the values (the collection's last run).
    pub complete: bool,
    /// The ranges, when `complete`.
    #[serde(default)]
    pub ranges: Vec<CounterRange>,
    /// Ranges CUPTI could not store.
    #[serde(default)]
    pub dropped_ranges: u64,
    /// Why a started collection produced no values (an error, an aborted window).
    #[serde(default)]
    pub error: Option<String>,
}

/// One range's values in a ledger row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterRange {
    /// Scope path (`step/forward`) for user ranges; the launch index for auto ranges.
    pub name: String,
    /// Nesting depth (1 = top level).
    pub depth: u32,
    /// Auto ranges: the kernel.
    #[serde(default)]
    pub kernel: Option<String>,
    /// Auto ranges: launch index within the iteration.
    #[serde(default)]
    pub launch_index: Option<u64>,
    /// Metric name -> value, as evaluated by CUPTI.
    pub values: BTreeMap<String, f64>,
    /// Figures derived from the values.
    #[serde(default)]
    pub derived: Derived,
}

impl IterationCounters {
    /// The completed record of a decoded collection, with derived figures.
    pub fn from_collected(
        collected: &Collected,
        collection: u64,
        first_iteration: u64,
        options: &DeriveOptions,
    ) -> Self {
        IterationCounters {
            collection,
            first_iteration,
            run: collected.runs as u32,
            runs: collected.runs as u32,
            complete: true,
            ranges: collected
                .ranges
                .iter()
                .map(|r| CounterRange {
                    name: r.name.clone(),
                    depth: r.depth() as u32,
                    kernel: r.kernel.clone(),
                    launch_index: r.launch_index,
                    values: r.values.clone(),
                    derived: derive(&r.values, options),
                })
                .collect(),
            dropped_ranges: collected.dropped_ranges as u64,
            error: None,
        }
    }

    /// The record of a run that does not complete the collection.
    pub fn pending(collection: u64, first_iteration: u64, run: u32, runs: u32) -> Self {
        IterationCounters {
            collection,
            first_iteration,
            run,
            runs,
            complete: false,
            ranges: Vec::new(),
            dropped_ranges: 0,
            error: None,
        }
    }
}
