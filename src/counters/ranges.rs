//! The values of one range of a collection: what a session decodes and what naming auto ranges
//! after their kernels ([`super::launches`]) fills in. A leaf of its own, so that the session can
//! use the launch recorder and the recorder's naming can take the session's ranges without the
//! two modules importing each other.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The values of one range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RangeValues {
    /// Index in the counter-data image.
    pub index: usize,
    /// The range's name: the pushed names joined by `/` for user ranges (`a/c`), the launch
    /// index (`"0"`, `"1"`, ...) for auto ranges.
    pub name: String,
    /// The pushed names, outermost first (one element for auto ranges).
    pub path: Vec<String>,
    /// Auto ranges: the kernel of this launch, when known.
    pub kernel: Option<String>,
    /// Auto ranges: the launch index the kernel was matched by.
    pub launch_index: Option<u64>,
    /// Metric name -> value.
    pub values: BTreeMap<String, f64>,
}

impl RangeValues {
    /// The value of one metric.
    pub fn get(&self, metric: &str) -> Option<f64> {
        self.values.get(metric).copied()
    }

    /// Nesting depth, 1 for a top-level range.
    pub fn depth(&self) -> usize {
        self.path.len()
    }
}
