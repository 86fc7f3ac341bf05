//! Which scope paths get series of their own: the bound on the `scope` label's values.

use gpu_ledger_format::UNSCOPED;
use rustc_hash::FxHashMap;

/// The label value of the top-level paths past the limit, summed.
pub const OTHER_SCOPE: &str = "(other)";

/// Refused paths remembered; past this many (paths made of data, not of code), the rest are
/// decided again at every row, which costs time but no memory.
const REFUSED_KEPT: usize = 4096;

/// Where one scope row's figures go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// The series of this id.
    Own(u32),
    /// Summed into `(other)`.
    Other,
    /// Nowhere: a deeper path past the limit, inside its ancestor's figures.
    Drop,
}

/// The paths admitted so far (for the whole run: a path once admitted keeps its series), and
/// the rules for the next.
pub(crate) struct ScopeLimit {
    depth: usize,
    max: usize,
    named: Vec<String>,
    admitted: FxHashMap<String, u32>,
    /// Paths refused for good (too deep, or past a limit that is full), up to
    /// [`REFUSED_KEPT`] of them, so that a refused path is not decided again every row.
    refused: FxHashMap<String, Place>,
    /// Paths admitted under `max` (named paths and `(unscoped)` are not counted).
    counted: usize,
    /// Reused per row: the rows not admitted yet, by position.
    pending: Vec<usize>,
}

/// A path's depth: `step` is 1, `step/forward` 2.
fn depth(path: &str) -> usize {
    path.bytes().filter(|&b| b == b'/').count() + 1
}

impl ScopeLimit {
    pub(crate) fn new(depth: usize, max: usize, named: Vec<String>) -> Self {
        ScopeLimit {
            depth,
            max,
            named,
            admitted: FxHashMap::default(),
            refused: FxHashMap::default(),
            counted: 0,
            pending: Vec::new(),
        }
    }

    /// Whether no scope is published at all.
    pub(crate) fn off(&self) -> bool {
        self.depth == 0
    }

    /// Places each of `paths` (one row's scope paths) into `out`, admitting new paths
    /// shallowest first so that the limit keeps the top levels; `new_series` makes the series
    /// of a path admitted now.
    pub(crate) fn place<'a>(
        &mut self,
        paths: impl ExactSizeIterator<Item = &'a str> + Clone,
        out: &mut Vec<Place>,
        mut new_series: impl FnMut(&str) -> u32,
    ) {
        out.clear();
        self.pending.clear();
        for (i, path) in paths.clone().enumerate() {
            if let Some(&id) = self.admitted.get(path) {
                out.push(Place::Own(id));
                continue;
            }
            match self.refused.get(path) {
                Some(&place) => out.push(place),
                None => {
                    out.push(Place::Drop);
                    self.pending.push(i);
                }
            }
        }
        if self.pending.is_empty() {
            return;
        }
        let all: Vec<&str> = paths.collect();
        let mut pending = std::mem::take(&mut self.pending);
        pending.sort_by_key(|&i| depth(all[i]));
        for &i in &pending {
            out[i] = self.decide(all[i], &mut new_series);
        }
        self.pending = pending;
    }

    fn decide(&mut self, path: &str, new_series: &mut impl FnMut(&str) -> u32) -> Place {
        let d = depth(path);
        let always = path == UNSCOPED || self.named.iter().any(|n| n == path);
        let fits = d <= self.depth && self.counted < self.max;
        if always || fits {
            if !always {
                self.counted += 1;
            }
            let id = new_series(path);
            self.admitted.insert(path.to_string(), id);
            Place::Own(id)
        } else {
            let place = if d == 1 { Place::Other } else { Place::Drop };
            // A refusal is final once the path is too deep or the limit is full, as admitted
            // paths are never given back.
            if self.refused.len() < REFUSED_KEPT {
                self.refused.insert(path.to_string(), place);
            }
            place
        }
    }
}
