//! Idle time by cause across rows: per device, the distribution over iterations of each cause's
//! idle time (`devices[i].idle.causes`, docs/idle.md), the summary's table and the comparison's
//! per-cause change both built from it.
//!
//! Only devices of rows that carry a split (`idle`) count: untraced rows, rows written with idle
//! causes off and older ledgers carry none, and a device without one is not measured (never a
//! zero). A row that split a device's idle time and has no piece of a cause had none of it: that
//! cause's value for the row is 0.
//!
//! `host_launch` is split by its detail, with every `scope:<path>` one detail (`scope`), since a
//! table of every scope would bury the causes; [`CauseSeries`] keeps the scopes apart too
//! ([`IdleCauses::host_launch_scopes`]). The other causes are not split.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::series::{Budget, Series};
use super::stats::Distribution;
use gpu_ledger_format::idle::{cause, IdleCause};
use gpu_ledger_format::schema::IterationRow;

/// The prefix of `host_launch`'s details that name the scope the launching thread was in.
const SCOPE_PREFIX: &str = "scope:";

/// The detail a piece of idle time is tabled under: `host_launch`'s detail, with every scope as
/// `scope`; none for the other causes.
pub fn table_detail(c: &IdleCause) -> Option<&str> {
    if c.cause != cause::HOST_LAUNCH {
        return None;
    }
    match c.detail.as_deref() {
        Some(d) if d.starts_with(SCOPE_PREFIX) => Some("scope"),
        d => d,
    }
}

/// One cause (and `host_launch`'s detail) of one device over the rows that split its idle time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CauseStats {
    /// CUDA device ordinal.
    pub device_id: u32,
    /// `launch_latency`, `host_launch`, `dependency` or `unknown`.
    pub cause: String,
    /// For `host_launch`: `scope` (every scope), `blocked:<what>`, `launch_call`,
    /// `iteration_boundary` or `nothing_known`.
    pub detail: Option<String>,
    /// Its idle time per iteration, ns (0 in rows that split the device's idle time without it).
    pub per_iteration_ns: Distribution,
    /// Its idle time over the rows, ns.
    pub total_ns: u64,
    /// Gaps with a piece of it, summed over the rows.
    pub gaps: u64,
    /// Its share of the device's idle time over the rows; `None` when the device had none.
    pub share_of_idle: Option<f64>,
}

/// Idle time of `host_launch` spent in one scope of one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScopeIdle {
    /// CUDA device ordinal.
    pub device_id: u32,
    /// The scope the launching thread was in.
    pub scope: String,
    /// Idle time over the rows, ns.
    pub total_ns: u64,
    /// Share of the device's idle time over the rows.
    pub share_of_idle: Option<f64>,
}

/// Idle time by cause of every device, from a [`CauseSeries`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IdleCauses {
    /// Rows that split each device's idle time, and that time summed over them (ns).
    pub devices: BTreeMap<u32, (u64, u64)>,
    /// Per device (by ordinal), the causes, most idle time first.
    pub causes: Vec<CauseStats>,
    /// Per device, `host_launch`'s scopes, most idle time first.
    pub host_launch_scopes: Vec<ScopeIdle>,
}

impl IdleCauses {
    /// Whether no row split any device's idle time.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }
}

/// The rows' idle time by cause, one row at a time (see the module doc).
#[derive(Debug)]
pub struct CauseSeries {
    budget: Budget,
    by: BTreeMap<u32, DeviceCauses>,
}

#[derive(Debug, Default)]
struct DeviceCauses {
    rows: u64,
    idle_ns: u64,
    keys: BTreeMap<(String, Option<String>), KeyAcc>,
    scopes: BTreeMap<String, u64>,
}

#[derive(Debug)]
struct KeyAcc {
    values: Series,
    rows: u64,
    ns: u64,
    gaps: u64,
}

impl CauseSeries {
    /// An empty accumulator whose series share `budget`.
    pub fn new(budget: Budget) -> Self {
        Self {
            budget,
            by: BTreeMap::new(),
        }
    }

    /// Takes a row (one the caller counts); devices without a split are skipped.
    pub fn push(&mut self, r: &IterationRow) {
        for d in &r.devices {
            let Some(b) = &d.idle else { continue };
            let dev = self.by.entry(d.device_id).or_default();
            dev.rows += 1;
            dev.idle_ns = dev.idle_ns.saturating_add(d.idle_ns);
            // One value per key and row, however many rules placed its pieces.
            let mut row: BTreeMap<(&str, Option<&str>), (u64, u64)> = BTreeMap::new();
            for c in &b.causes {
                let e = row.entry((c.cause.as_str(), table_detail(c))).or_default();
                e.0 = e.0.saturating_add(c.ns);
                e.1 = e.1.saturating_add(c.gaps);
                if let Some(scope) = (c.cause == cause::HOST_LAUNCH)
                    .then_some(c.detail.as_deref())
                    .flatten()
                    .and_then(|d| d.strip_prefix(SCOPE_PREFIX))
                {
                    let s = dev.scopes.entry(scope.to_string()).or_default();
                    *s = s.saturating_add(c.ns);
                }
            }
            for ((c, detail), (ns, gaps)) in row {
                let budget = &self.budget;
                let k = dev
                    .keys
                    .entry((c.to_string(), detail.map(str::to_string)))
                    .or_insert_with(|| KeyAcc {
                        values: budget.series(),
                        rows: 0,
                        ns: 0,
                        gaps: 0,
                    });
                k.values.push_u64(ns);
                k.rows += 1;
                k.ns = k.ns.saturating_add(ns);
                k.gaps = k.gaps.saturating_add(gaps);
            }
        }
    }

    /// The figures: each cause's rows without it counted as 0, so that every distribution is
    /// over the same rows.
    pub fn finish(self) -> IdleCauses {
        let mut out = IdleCauses::default();
        for (device_id, dev) in self.by {
            out.devices.insert(device_id, (dev.rows, dev.idle_ns));
            let share = |ns: u64| (dev.idle_ns > 0).then(|| ns as f64 / dev.idle_ns as f64);
            let mut causes: Vec<CauseStats> = dev
                .keys
                .into_iter()
                .filter_map(|((cause, detail), mut k)| {
                    (k.rows..dev.rows).for_each(|_| k.values.push(0.0));
                    Some(CauseStats {
                        device_id,
                        cause,
                        detail,
                        per_iteration_ns: k.values.distribution()?,
                        total_ns: k.ns,
                        gaps: k.gaps,
                        share_of_idle: share(k.ns),
                    })
                })
                .collect();
            causes.sort_by_key(|c| std::cmp::Reverse(c.total_ns));
            out.causes.extend(causes);
            let mut scopes: Vec<ScopeIdle> = dev
                .scopes
                .into_iter()
                .map(|(scope, ns)| ScopeIdle {
                    device_id,
                    scope,
                    total_ns: ns,
                    share_of_idle: share(ns),
                })
                .collect();
            scopes.sort_by_key(|s| std::cmp::Reverse(s.total_ns));
            out.host_launch_scopes.extend(scopes);
        }
        out
    }
}

/// The idle time of each cause of `causes` (all details and rules together), with the cause
/// holding more than `share` of their total and its largest detail: what a warning names.
/// `None` when no cause does or there is no idle time.
pub fn dominant_cause(causes: &[CauseStats], share: f64) -> Option<(&str, Option<&str>, f64)> {
    let total: u64 = causes.iter().map(|c| c.total_ns).sum();
    if total == 0 {
        return None;
    }
    let mut by: BTreeMap<&str, u64> = BTreeMap::new();
    for c in causes {
        *by.entry(c.cause.as_str()).or_default() += c.total_ns;
    }
    let (name, ns) = by
        .into_iter()
        .find(|(_, ns)| *ns as f64 > share * total as f64)?;
    let detail = causes
        .iter()
        .filter(|c| c.cause == name)
        .max_by_key(|c| c.total_ns)
        .and_then(|c| c.detail.as_deref());
    Some((name, detail, ns as f64 / total as f64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_ledger_format::idle::IdleBreakdown;
    use gpu_ledger_format::schema::DeviceIteration;

    fn piece(cause: &str, detail: Option<&str>, ns: u64) -> IdleCause {
        IdleCause {
            cause: cause.into(),
            detail: detail.map(Into::into),
            rule: "r".into(),
            ns,
            gaps: 1,
        }
    }

    fn row(index: u64, causes: Option<Vec<IdleCause>>) -> IterationRow {
        let idle_ns = causes.iter().flatten().map(|c| c.ns).sum();
        IterationRow {
            index,
            devices: vec![DeviceIteration {
                idle_ns,
                idle: causes.map(|causes| IdleBreakdown {
                    causes,
                    compute_idle_ns: idle_ns,
                    ..IdleBreakdown::default()
                }),
                ..DeviceIteration::default()
            }],
            ..IterationRow::default()
        }
    }

    #[test]
    fn a_cause_missing_from_a_split_row_is_zero_and_a_row_without_a_split_is_not_counted() {
        let mut s = CauseSeries::new(Budget::exact(4));
        s.push(&row(
            0,
            Some(vec![
                piece("host_launch", Some("scope:step/data"), 300),
                piece("host_launch", Some("scope:step/log"), 100),
                piece("launch_latency", None, 100),
            ]),
        ));
        s.push(&row(1, Some(vec![piece("launch_latency", None, 200)])));
        s.push(&row(2, None));
        let f = s.finish();
        assert_eq!(f.devices[&0], (2, 700));
        let host = &f.causes[0];
        assert_eq!(
            (host.cause.as_str(), host.detail.as_deref()),
            ("host_launch", Some("scope"))
        );
        assert_eq!((host.total_ns, host.gaps), (400, 2));
        assert_eq!(
            host.per_iteration_ns.n, 2,
            "the row without a split is left out"
        );
        assert_eq!(host.per_iteration_ns.min, 0.0, "row 1 had no host_launch");
        assert_eq!(host.per_iteration_ns.max, 400.0);
        assert!((host.share_of_idle.unwrap() - 4.0 / 7.0).abs() < 1e-12);
        let scopes: Vec<(&str, u64)> = f
            .host_launch_scopes
            .iter()
            .map(|s| (s.scope.as_str(), s.total_ns))
            .collect();
        assert_eq!(scopes, [("step/data", 300), ("step/log", 100)]);
        let (c, d, share) = dominant_cause(&f.causes, 0.5).unwrap();
        assert_eq!((c, d), ("host_launch", Some("scope")));
        assert!((share - 4.0 / 7.0).abs() < 1e-12);
        assert_eq!(dominant_cause(&f.causes, 0.6), None);
    }

    #[test]
    fn no_split_no_figures() {
        let mut s = CauseSeries::new(Budget::exact(1));
        s.push(&row(0, None));
        assert!(s.finish().is_empty());
    }
}
