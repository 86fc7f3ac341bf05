//! What a publisher publishes and where: how many scope paths get series of their own, whether
//! per-iteration histograms are kept, and which recorder receives them.

use std::sync::Arc;

use metrics::Recorder;

/// How ledger rows become metrics.
///
/// Scope paths are label values, so they are bounded: every path of at most `scope_depth`
/// levels gets a series of its own, first come first served, until `max_scopes` have one; the
/// paths in `scopes` and `(unscoped)` always do. A top-level path past the limit is summed into
/// `scope="(other)"`; a deeper one has no series (its time is inside its ancestor's figures).
/// Either way `gpu_ledger_scope_rows_unpublished_total` counts it. A run's scope series are thus
/// at most `max_scopes + scopes.len() + 2` per scope metric.
#[derive(Clone)]
pub struct MetricsOptions {
    /// Deepest scope path with series of its own: 1 for top-level paths (`step`), 2 for their
    /// children (`step/forward`); 0 publishes no scope metrics. Default 2.
    pub scope_depth: usize,
    /// Most scope paths given series of their own, besides `scopes` and `(unscoped)`.
    /// Default 64.
    pub max_scopes: usize,
    /// Scope paths that always get series of their own, at any depth and outside the limit.
    pub scopes: Vec<String>,
    /// Per-iteration histograms (times, energy); off: counters and gauges only. Default on.
    pub histograms: bool,
    /// The recorder that receives the metrics; `None` (the default): the one the application
    /// installed with the `metrics` facade (`PrometheusBuilder::install` installs one), looked
    /// up at every row, so that one installed after the profiler started is found.
    pub recorder: Option<Arc<dyn Recorder + Send + Sync>>,
}

impl Default for MetricsOptions {
    fn default() -> Self {
        MetricsOptions {
            scope_depth: 2,
            max_scopes: 64,
            scopes: Vec::new(),
            histograms: true,
            recorder: None,
        }
    }
}

impl std::fmt::Debug for MetricsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsOptions")
            .field("scope_depth", &self.scope_depth)
            .field("max_scopes", &self.max_scopes)
            .field("scopes", &self.scopes)
            .field("histograms", &self.histograms)
            .field("recorder", &self.recorder.as_ref().map(|_| "explicit"))
            .finish()
    }
}

impl MetricsOptions {
    /// These options with `recorder` as the recorder (rather than the global one).
    #[must_use]
    pub fn with_recorder(mut self, recorder: Arc<dyn Recorder + Send + Sync>) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// As the ledger header records it: `scope depth 2, 64 scopes, histograms, global
    /// recorder`.
    pub fn describe(&self) -> String {
        let mut parts = vec![
            format!("scope depth {}", self.scope_depth),
            format!("{} scopes", self.max_scopes),
        ];
        if !self.scopes.is_empty() {
            parts.push(format!("always {}", self.scopes.join(", ")));
        }
        parts.push(
            if self.histograms {
                "histograms"
            } else {
                "no histograms"
            }
            .into(),
        );
        parts.push(
            if self.recorder.is_some() {
                "explicit recorder"
            } else {
                "global recorder"
            }
            .into(),
        );
        parts.join(", ")
    }
}
