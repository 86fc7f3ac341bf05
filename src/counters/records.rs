//! The counters level's ledger records (`crate::ledger::counters`) as a Range Profiler session
//! makes them: the header record of a set-up or failed session, and a row's record of a
//! collection's run.

use super::derived::{derive, DeriveOptions};
use super::error::unavailable_of;
use super::session::{Collected, RangeProfiler};
use crate::error::Error;
use crate::ledger::counters::{CounterRange, CountersHeader, IterationCounters};

/// The header record of a set-up profiler.
pub fn header_collected(rp: &RangeProfiler) -> CountersHeader {
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
        cache: c.cache,
    }
}

/// The header record when setting up failed: the timeline goes on, this says why.
pub fn header_not_collected(config: &super::CounterConfig, error: &Error) -> CountersHeader {
    CountersHeader {
        collected: false,
        reason: Some(error.to_string()),
        unavailable: Some(unavailable_of(error)),
        chip: None,
        requested: config.metrics.clone(),
        metrics: Vec::new(),
        dropped_metrics: Vec::new(),
        passes: 0,
        iterations_per_collection: 0,
        range_mode: config.range_mode,
        replay_mode: config.replay_mode,
        nesting_levels: config.nesting_levels,
        cache: config.cache,
    }
}

/// The completed record of a decoded collection, with derived figures.
pub fn counters_from_collected(
    collected: &Collected,
    collection: u64,
    first_iteration: u64,
    options: &DeriveOptions,
) -> IterationCounters {
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
pub fn counters_pending(
    collection: u64,
    first_iteration: u64,
    run: u32,
    runs: u32,
) -> IterationCounters {
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::counters::metrics::names;
    use crate::counters::{CounterConfig, RangeValues};
    use crate::ledger::counters::{RangeMode, ReplayMode};

    fn range(name: &str, v: &[(&str, f64)]) -> RangeValues {
        RangeValues {
            index: 0,
            name: name.to_string(),
            path: name.split('/').map(str::to_string).collect(),
            kernel: None,
            launch_index: None,
            values: v.iter().map(|(k, x)| (k.to_string(), *x)).collect(),
        }
    }

    fn collected() -> Collected {
        Collected {
            chip: "GH100".into(),
            range_mode: RangeMode::User,
            replay_mode: ReplayMode::User,
            passes: 1,
            runs: 2,
            metrics: vec![names::FADD.into(), names::DRAM_BYTES_READ.into()],
            ranges: vec![
                range(
                    "outer",
                    &[(names::FADD, 3.0), (names::DRAM_BYTES_READ, 24.0)],
                ),
                range(
                    "outer/inner",
                    &[(names::FADD, 1.0), (names::DRAM_BYTES_READ, 8.0)],
                ),
            ],
            dropped_ranges: 0,
            launches_consistent: None,
        }
    }

    #[test]
    fn collected_ranges_become_ledger_records_with_depth_and_derived_figures() {
        let c = collected();
        assert_eq!(c.range("outer/inner").unwrap().depth(), 2);
        assert_eq!(c.range("outer").unwrap().get(names::FADD), Some(3.0));
        let rec = counters_from_collected(&c, 4, 100, &DeriveOptions::default());
        assert!(rec.complete);
        assert_eq!(
            (rec.collection, rec.first_iteration, rec.run, rec.runs),
            (4, 100, 2, 2)
        );
        assert_eq!(rec.ranges[1].name, "outer/inner");
        assert_eq!(rec.ranges[1].depth, 2);
        assert_eq!(rec.ranges[0].derived.fp32_flops, Some(3.0));
        assert_eq!(
            rec.ranges[0].derived.arithmetic_intensity_dram,
            Some(3.0 / 24.0)
        );
        let json = serde_json::to_string(&rec).unwrap();
        let back: IterationCounters = serde_json::from_str(&json).unwrap();
        assert_eq!(back, rec);
        let pending = counters_pending(4, 100, 1, 2);
        assert!(!pending.complete && pending.ranges.is_empty());
        // A reader of a minimal record (older writer) gets defaults.
        let min: IterationCounters = serde_json::from_str(
            r#"{"collection":0,"first_iteration":0,"run":1,"runs":1,"complete":false}"#,
        )
        .unwrap();
        assert!(min.ranges.is_empty() && min.error.is_none());
        let r: BTreeMap<String, f64> = BTreeMap::new();
        assert!(r.is_empty());
    }

    #[test]
    fn header_record_says_why_counters_were_not_collected() {
        let config = CounterConfig::default();
        let err = crate::cupti::result::error(
            "cuptiRangeProfilerEnable",
            cupti_sys::CUptiResult::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES,
            "insufficient privileges".into(),
        );
        let h = header_not_collected(&config, &err);
        assert!(!h.collected);
        assert_eq!(
            h.unavailable,
            Some(crate::ledger::counters::Unavailable::NoPermission)
        );
        assert!(h
            .reason
            .as_deref()
            .unwrap()
            .contains("NVreg_RestrictProfilingToAdminUsers=0"));
        let json = serde_json::to_string(&h).unwrap();
        assert!(json.contains(r#""unavailable":"no_permission""#), "{json}");
        assert!(json.contains(r#""range_mode":"user""#), "{json}");
        let back: CountersHeader = serde_json::from_str(&json).unwrap();
        assert_eq!(back, h);
    }
}
