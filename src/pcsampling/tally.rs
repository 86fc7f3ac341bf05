//! What a profiled run's PC samples add up to over all its windows, kept by the collector one
//! row at a time: per kernel (by function name) its device time over the unperturbed rows,
//! which ranks it, and its samples by reason over the windows; per scope its samples; and the
//! recent rows' wall times and launches, which a duty cycle measures its windows against.

use std::collections::{BTreeMap, VecDeque};

use crate::ledger::schema::IterationRow;
use crate::ledger::stalls::{KernelProfile, RunStalls, ScopeProfile};

/// Unperturbed rows whose wall times and launch counts are kept for the median.
const RECENT_ROWS: usize = 32;
/// Most kernels and scopes the trailer lists; the rest are counted.
pub(crate) const MAX_LISTED: usize = 256;

/// One kernel (function name) over the run.
#[derive(Debug, Clone, Default)]
pub(crate) struct GroupTally {
    /// Device time over the unperturbed rows, ns.
    pub(crate) device_ns: u64,
    /// The last row index it ran in, and the gap to the row it ran in before (0: seen once).
    pub(crate) last_seen: Option<u64>,
    pub(crate) period: u64,
    pub(crate) windows: u64,
    pub(crate) samples: u64,
    pub(crate) by_reason: BTreeMap<String, u64>,
}

impl GroupTally {
    /// Whether it is expected to run in iteration `index`, from the rows seen so far: every
    /// `period` iterations after the last one it ran in (any iteration when that is unknown).
    pub(crate) fn expected_at(&self, index: u64) -> bool {
        match self.last_seen {
            Some(last) if self.period > 1 && index > last => (index - last) % self.period == 0,
            _ => true,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct ScopeTally {
    windows: u64,
    samples: u64,
    by_reason: BTreeMap<String, u64>,
}

/// The run's PC samples and the figures that rank its kernels.
#[derive(Debug, Clone)]
pub(crate) struct RunTally {
    /// The sampled GPU: kernel groups on other devices are not ranked.
    device: u32,
    coverage: f64,
    pub(crate) groups: BTreeMap<String, GroupTally>,
    scopes: BTreeMap<String, ScopeTally>,
    windows: u64,
    samples: u64,
    dropped: u64,
    unattributed: u64,
    /// Wall time and kernel launches on the sampled GPU of the last unperturbed rows.
    recent: VecDeque<(u64, u64)>,
    /// End of the last row, host ns since the start.
    pub(crate) last_end_ns: u64,
    /// The top kernels and the recent rows' baseline, as of the last row: computed on the
    /// collector, so that the stepping thread only reads them.
    top: Vec<String>,
    medians: Option<(u64, u64)>,
}

impl RunTally {
    /// Nothing yet; kernels on `device` are ranked, the top ones holding `coverage` of its
    /// device time.
    pub(crate) fn new(device: u32, coverage: f64) -> Self {
        RunTally {
            device,
            coverage,
            groups: BTreeMap::new(),
            scopes: BTreeMap::new(),
            windows: 0,
            samples: 0,
            dropped: 0,
            unattributed: 0,
            recent: VecDeque::new(),
            last_end_ns: 0,
            top: Vec::new(),
            medians: None,
        }
    }

    /// Takes one written row.
    pub(crate) fn add(&mut self, row: &IterationRow) {
        self.last_end_ns = self
            .last_end_ns
            .max(row.host_start_ns.saturating_add(row.host_wall_ns));
        let mut launches = 0u64;
        for g in row.kernels.iter().filter(|g| g.device_id == self.device) {
            launches += g.count;
            let t = self.groups.entry(g.name.clone()).or_default();
            if !row.perturbed {
                t.device_ns = t.device_ns.saturating_add(g.total_ns);
            }
            match t.last_seen {
                Some(last) if row.index > last => {
                    t.period = row.index - last;
                    t.last_seen = Some(row.index);
                }
                None => t.last_seen = Some(row.index),
                _ => {}
            }
        }
        if !row.perturbed && row.complete && !row.untraced {
            if self.recent.len() == RECENT_ROWS {
                self.recent.pop_front();
            }
            self.recent.push_back((row.host_wall_ns, launches));
        }
        if let Some(st) = row.stalls.as_ref().filter(|s| s.error.is_none()) {
            self.windows += 1;
            self.samples = self.samples.saturating_add(st.sampled());
            self.dropped = self.dropped.saturating_add(st.dropped_samples);
            self.unattributed = self.unattributed.saturating_add(st.unattributed_samples);
            for k in st.kernels.iter().filter(|k| k.samples > 0) {
                let t = self.groups.entry(k.name.clone()).or_default();
                t.windows += 1;
                t.samples = t.samples.saturating_add(k.samples);
                add_counts(&mut t.by_reason, &k.by_reason);
            }
            for s in st.scopes.iter().filter(|s| s.samples > 0) {
                let t = self.scopes.entry(s.scope.clone()).or_default();
                t.windows += 1;
                t.samples = t.samples.saturating_add(s.samples);
                add_counts(&mut t.by_reason, &s.by_reason);
            }
        }
        self.top = self.rank();
        let mut walls: Vec<u64> = self.recent.iter().map(|r| r.0).collect();
        let most = self.recent.iter().map(|r| r.1).max().unwrap_or(0);
        self.medians = (!walls.is_empty()).then(|| (median(&mut walls), most));
    }

    /// The median wall time and the most launches of the recent unperturbed rows (a window's
    /// cost is estimated from the launches of the longest iteration, so that it is not
    /// underestimated for the iterations that launch more); `None` before `at_least` of them.
    pub(crate) fn baseline(&self, at_least: usize) -> Option<(u64, u64)> {
        self.medians
            .filter(|_| self.recent.len() >= at_least.max(1))
    }

    /// The kernels that hold `coverage` of the device time together, most device time first.
    pub(crate) fn top(&self) -> &[String] {
        &self.top
    }

    /// The top kernels, ranked anew.
    fn rank(&self) -> Vec<String> {
        let mut ranked: Vec<(&str, u64)> = self
            .groups
            .iter()
            .filter(|(_, g)| g.device_ns > 0)
            .map(|(n, g)| (n.as_str(), g.device_ns))
            .collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let total: u128 = ranked.iter().map(|r| u128::from(r.1)).sum();
        let mut covered: u128 = 0;
        let mut top = Vec::new();
        for (name, ns) in ranked {
            if total > 0 && covered as f64 >= self.coverage * total as f64 {
                break;
            }
            covered += u128::from(ns);
            top.push(name.to_string());
        }
        top
    }

    /// The run's profile for the trailer; `None` when no window was read.
    pub(crate) fn profile(&self) -> Option<RunStalls> {
        if self.windows == 0 {
            return None;
        }
        let top = &self.top;
        let total: u64 = self.groups.values().map(|g| g.device_ns).sum();
        let mut kernels: Vec<KernelProfile> = self
            .groups
            .iter()
            .filter(|(n, g)| g.samples > 0 || top.contains(n))
            .map(|(n, g)| KernelProfile {
                name: n.clone(),
                device_ns: g.device_ns,
                device_share: g.device_ns as f64 / total.max(1) as f64,
                top: top.contains(n),
                windows: g.windows,
                samples: g.samples,
                by_reason: g.by_reason.clone(),
            })
            .collect();
        kernels.sort_by(|a, b| {
            (b.device_ns, b.samples)
                .cmp(&(a.device_ns, a.samples))
                .then_with(|| a.name.cmp(&b.name))
        });
        let kernels_left_out = kernels.len().saturating_sub(MAX_LISTED) as u64;
        kernels.truncate(MAX_LISTED);
        let mut scopes: Vec<ScopeProfile> = self
            .scopes
            .iter()
            .map(|(s, t)| ScopeProfile {
                scope: s.clone(),
                windows: t.windows,
                samples: t.samples,
                by_reason: t.by_reason.clone(),
            })
            .collect();
        scopes.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then_with(|| a.scope.cmp(&b.scope))
        });
        let scopes_left_out = scopes.len().saturating_sub(MAX_LISTED) as u64;
        scopes.truncate(MAX_LISTED);
        Some(RunStalls {
            windows: self.windows,
            samples: self.samples,
            dropped_samples: self.dropped,
            unattributed_samples: self.unattributed,
            coverage: self.coverage,
            kernels,
            kernels_left_out,
            scopes,
            scopes_left_out,
            duty_cycle: None,
        })
    }
}

fn add_counts(to: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, n) in from {
        let e = to.entry(k.clone()).or_default();
        *e = e.saturating_add(*n);
    }
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}
