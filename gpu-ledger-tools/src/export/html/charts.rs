//! What the report's per-iteration charts show, from rows read whole: consecutive rows grouped
//! into at most [`ReportOptions::max_points`] buckets, and per bucket each scope's own host time,
//! its device time, each GPU's idle share and NVML's clock and power. The streamed report builds
//! the same [`Charts`] as rows go past (`ChartBuckets`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::ReportOptions;
use crate::analysis::stats::idle_share;
use crate::export::summary::LedgerSummary;
use crate::export::svg::Series;
use gpu_ledger_format::schema::IterationRow;

/// Positions of rows grouped into at most `max` consecutive buckets.
fn buckets(n: usize, max: usize) -> Vec<std::ops::Range<usize>> {
    let max = max.max(1);
    if n <= max {
        return (0..n).map(|i| i..i + 1).collect();
    }
    (0..max)
        .map(|b| (b * n / max)..((b + 1) * n / max))
        .filter(|r| !r.is_empty())
        .collect()
}

fn mean_of(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let (mut s, mut n) = (0.0, 0usize);
    for v in values.flatten() {
        if v.is_finite() {
            s += v;
            n += 1;
        }
    }
    (n > 0).then(|| s / n as f64)
}

/// One series per GPU of `ids`, named `GPU n`: per bucket of `rows`, the mean of
/// `value(row, gpu)` over the bucket's rows.
fn per_gpu_series(
    ids: &BTreeSet<u32>,
    rows: &[IterationRow],
    bks: &[std::ops::Range<usize>],
    value: impl Fn(&IterationRow, u32) -> Option<f64>,
) -> Vec<Series> {
    ids.iter()
        .map(|&d| Series {
            name: format!("GPU {d}"),
            values: bks
                .iter()
                .map(|r| mean_of(r.clone().map(|i| value(&rows[i], d))))
                .collect(),
        })
        .collect()
}

/// The nearest ancestor of `path` present in `paths`.
fn parent_in(path: &str, paths: &BTreeSet<&str>) -> Option<String> {
    let mut cur = path;
    while let Some((head, _)) = cur.rsplit_once('/') {
        if paths.contains(head) {
            return Some(head.to_string());
        }
        cur = head;
    }
    None
}

/// Per scope: host time minus that of its children present in the row (its own time), and the
/// row's time outside every top-level scope.
pub(crate) fn self_host_times(row: &IterationRow) -> (BTreeMap<String, f64>, f64) {
    let mut host: BTreeMap<&str, u64> = BTreeMap::new();
    for s in &row.scopes {
        let e = host.entry(s.path.as_str()).or_default();
        *e = e.saturating_add(s.host_ns);
    }
    let paths: BTreeSet<&str> = host.keys().copied().collect();
    let mut own: BTreeMap<String, f64> = host
        .iter()
        .map(|(p, &h)| (p.to_string(), h as f64))
        .collect();
    let mut top = 0.0;
    for (p, &h) in &host {
        match parent_in(p, &paths) {
            Some(parent) => {
                if let Some(v) = own.get_mut(&parent) {
                    *v -= h as f64;
                }
            }
            None => top += h as f64,
        }
    }
    for v in own.values_mut() {
        *v = v.max(0.0);
    }
    (own, (row.host_wall_ns as f64 - top).max(0.0))
}

fn bucket_label(rows: &[IterationRow], r: &std::ops::Range<usize>) -> String {
    let a = rows[r.start].index;
    let b = rows[r.end - 1].index;
    if a == b {
        a.to_string()
    } else {
        format!("{a}–{b}")
    }
}

/// Stacked series of the top `max_scopes` scopes by total, the rest as "other scopes", plus an
/// optional extra series.
fn stacked_scope_series(
    per_row: &[BTreeMap<String, f64>],
    extra: Option<(&str, Vec<f64>)>,
    bks: &[std::ops::Range<usize>],
    max_scopes: usize,
) -> Vec<Series> {
    let mut totals: HashMap<&str, f64> = HashMap::new();
    for m in per_row {
        for (k, v) in m {
            *totals.entry(k.as_str()).or_default() += v;
        }
    }
    let mut names: Vec<(&str, f64)> = totals.into_iter().filter(|(_, v)| *v > 0.0).collect();
    names.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    let shown: Vec<&str> = names.iter().take(max_scopes).map(|n| n.0).collect();
    let has_other = names.len() > shown.len();
    let mut series: Vec<Series> = shown
        .iter()
        .map(|name| Series {
            name: name.to_string(),
            values: bks
                .iter()
                .map(|r| {
                    mean_of(
                        r.clone()
                            .map(|i| Some(per_row[i].get(*name).copied().unwrap_or(0.0))),
                    )
                })
                .collect(),
        })
        .collect();
    if has_other {
        series.push(Series {
            name: "other scopes".into(),
            values: bks
                .iter()
                .map(|r| {
                    mean_of(r.clone().map(|i| {
                        Some(
                            per_row[i]
                                .iter()
                                .filter(|(k, _)| !shown.contains(&k.as_str()))
                                .map(|(_, v)| v)
                                .sum::<f64>(),
                        )
                    }))
                })
                .collect(),
        });
    }
    if let Some((name, v)) = extra {
        series.push(Series {
            name: name.into(),
            values: bks
                .iter()
                .map(|r| mean_of(r.clone().map(|i| Some(v[i]))))
                .collect(),
        });
    }
    series
}

/// What the per-iteration charts show: one bar or point per bucket of consecutive rows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Charts {
    pub(crate) labels: Vec<String>,
    pub(crate) dimmed: Vec<bool>,
    pub(crate) xs: Vec<f64>,
    pub(crate) bucket_note: String,
    pub(crate) has_scopes: bool,
    pub(crate) host: Vec<Series>,
    pub(crate) device: Vec<Series>,
    pub(crate) idle: Vec<Series>,
    /// SM clock and board power per GPU; `None` when no row has NVML figures.
    pub(crate) nvml: Option<(Vec<Series>, Vec<Series>)>,
}

/// The charts of `rows`, bucketed into at most `opts.max_points` bars.
pub(super) fn charts_from_rows(
    rows: &[IterationRow],
    s: &LedgerSummary,
    opts: &ReportOptions,
) -> Charts {
    let bks = buckets(rows.len(), opts.max_points);
    let labels: Vec<String> = bks.iter().map(|r| bucket_label(rows, r)).collect();
    let excluded: BTreeSet<u64> = s
        .warmup
        .iter()
        .chain(s.perturbed.iter())
        .chain(s.incomplete.iter())
        .collect();
    let dimmed: Vec<bool> = bks
        .iter()
        .map(|r| r.clone().all(|i| excluded.contains(&rows[i].index)))
        .collect();
    let bucketed = bks.iter().any(|r| r.len() > 1);
    let bucket_note = if bucketed {
        format!(
            " Each bar is the mean of about {} consecutive iterations.",
            rows.len().div_ceil(bks.len().max(1))
        )
    } else {
        String::new()
    };
    let (own, outside): (Vec<_>, Vec<_>) = rows.iter().map(self_host_times).unzip();
    let host = stacked_scope_series(
        &own,
        Some(("outside any scope", outside)),
        &bks,
        opts.max_scopes,
    );
    let has_scopes = rows.iter().any(|r| !r.scopes.is_empty());
    let dev: Vec<BTreeMap<String, f64>> = rows
        .iter()
        .map(|r| {
            let mut m = BTreeMap::new();
            for sc in &r.scopes {
                *m.entry(sc.path.clone()).or_default() += sc.device_ns as f64;
            }
            m
        })
        .collect();
    let device = stacked_scope_series(&dev, None, &bks, opts.max_scopes);
    let device_ids: BTreeSet<u32> = rows
        .iter()
        .flat_map(|r| r.devices.iter().map(|d| d.device_id))
        .collect();
    let xs: Vec<f64> = bks
        .iter()
        .map(|r| mean_of(r.clone().map(|i| Some(rows[i].index as f64))).unwrap_or(0.0))
        .collect();
    let idle = per_gpu_series(&device_ids, rows, &bks, |row, d| {
        row.devices
            .iter()
            .find(|x| x.device_id == d)
            .and_then(idle_share)
    });
    let nvml_ids: BTreeSet<u32> = rows
        .iter()
        .flat_map(|r| r.nvml.iter().map(|n| n.device_id))
        .collect();
    let nvml = (!nvml_ids.is_empty()).then(|| {
        let nv_series =
            |f: &dyn Fn(&gpu_ledger_format::NvmlIterationSummary) -> Option<f64>| -> Vec<Series> {
                per_gpu_series(&nvml_ids, rows, &bks, |row, d| {
                    row.nvml.iter().find(|n| n.device_id == d).and_then(f)
                })
            };
        (
            nv_series(&|n| n.sm_clock.as_ref().map(|c| c.mean_mhz)),
            nv_series(&|n| n.power.as_ref().map(|p| p.mean_w)),
        )
    });
    Charts {
        labels,
        dimmed,
        xs,
        bucket_note,
        has_scopes,
        host,
        device,
        idle,
        nvml,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_ranges_cover_everything() {
        assert_eq!(buckets(3, 10), vec![0..1, 1..2, 2..3]);
        let b = buckets(1000, 7);
        assert_eq!(b.len(), 7);
        assert_eq!(b[0].start, 0);
        assert_eq!(b[6].end, 1000);
        assert!(b.windows(2).all(|w| w[0].end == w[1].start));
        assert!(buckets(0, 5).is_empty());
    }
}
