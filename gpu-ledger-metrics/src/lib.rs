//! gpu-ledger's ledger rows as metrics: per-iteration and per-scope GPU figures on the
//! dashboards a fleet already scrapes.
//!
//! A [`Publisher`] turns each ledger row into counters, gauges and histograms through the
//! [`metrics`] facade, so that whichever exporter the application installed (Prometheus,
//! StatsD, OpenTelemetry) carries them. The profiler drives one on its collector thread with
//! its feature `metrics` (`Profiler::builder().metrics(MetricsOptions::default())`); the
//! command line drives one over a ledger already written (`gpu-ledger metrics run.jsonl`) into
//! a [`MemoryRecorder`], rendered as Prometheus or OpenMetrics text. [`METRICS`] lists every
//! metric; the ledger stays the record, the metrics are a view of it.
//!
//! ```
//! use std::sync::Arc;
//! use gpu_ledger_format::schema::{Header, IterationRow, ScopeRow};
//! use gpu_ledger_metrics::{MemoryRecorder, MetricsOptions, Publisher, TextFormat};
//!
//! let recorder = MemoryRecorder::new();
//! let options = MetricsOptions::default().with_recorder(Arc::new(recorder.clone()));
//! let mut header = Header::default();
//! header.config.level = "scopes".into();
//! let mut publisher = Publisher::new(&options, &header);
//! publisher.publish(&IterationRow {
//!     host_wall_ns: 5_000_000,
//!     complete: true,
//!     scopes: vec![ScopeRow { path: "step".into(), calls: 1, host_ns: 4_000_000, ..ScopeRow::default() }],
//!     ..IterationRow::default()
//! });
//! let text = recorder.render(TextFormat::Prometheus);
//! assert!(text.contains("gpu_ledger_iterations_total 1\n"));
//! assert!(text.contains("gpu_ledger_scope_host_seconds_sum{scope=\"step\"} 0.004\n"));
//! ```

#![forbid(unsafe_code)]

mod catalogue;
mod memory;
mod options;
mod publisher;
mod scopes;
mod text;

#[cfg(test)]
mod tests;

pub use catalogue::{
    buckets_for, names, Kind, Labels, MetricDef, Rows, JOULES_BUCKETS, METRICS, SECONDS_BUCKETS,
};
pub use memory::{MemoryRecorder, Series, Value};
/// The `metrics` facade this crate publishes through (for [`MetricsOptions::recorder`]).
pub use metrics;
pub use options::MetricsOptions;
pub use publisher::Publisher;
pub use scopes::OTHER_SCOPE;
pub use text::TextFormat;
