//! What the report's per-iteration charts show, built as the rows go past: consecutive rows
//! grouped into at most [`ReportOptions::max_points`] buckets, and per bucket each scope's own
//! host time, its device time, each GPU's idle share and NVML's clock and power. Each bucket keeps
//! sums and counts, so that a bar or point is the mean of its rows.
//!
//! A ledger whose rows are counted before they are pushed (one in memory) is split evenly: of
//! `n` rows, bucket `b` holds rows `b·n/max .. (b+1)·n/max`. A stream, whose length is not known,
//! goes into buckets of `width` consecutive rows; when one more is needed past `max_points`,
//! neighbours merge in pairs and the width doubles, so that neither memory nor the report's size
//! grows with the rows. The charts' captions say how many rows a bar holds.

use std::collections::{BTreeMap, BTreeSet};

use super::ReportOptions;
use crate::analysis::names::{NameFold, OTHER_NAMES};
use crate::analysis::stats::{idle_share, RowFilter};
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
fn self_host_times(row: &IterationRow) -> (BTreeMap<String, f64>, f64) {
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

/// Sums over one bucket's rows.
#[derive(Debug, Clone, Default)]
struct Bucket {
    first: u64,
    last: u64,
    rows: usize,
    /// Rows left out as perturbed or incomplete (warm-up is known only at the end).
    excluded: usize,
    index_sum: f64,
    host: BTreeMap<String, f64>,
    outside: f64,
    device: BTreeMap<String, f64>,
    idle: BTreeMap<u32, (f64, usize)>,
    sm: BTreeMap<u32, (f64, usize)>,
    power: BTreeMap<u32, (f64, usize)>,
}

fn add_all<K: Ord + Clone>(into: &mut BTreeMap<K, f64>, from: BTreeMap<K, f64>) {
    for (k, v) in from {
        *into.entry(k).or_default() += v;
    }
}

fn add_counted(into: &mut BTreeMap<u32, (f64, usize)>, from: BTreeMap<u32, (f64, usize)>) {
    for (k, (v, n)) in from {
        let e = into.entry(k).or_default();
        e.0 += v;
        e.1 += n;
    }
}

impl Bucket {
    fn merge(&mut self, o: Bucket) {
        self.last = o.last;
        self.rows += o.rows;
        self.excluded += o.excluded;
        self.index_sum += o.index_sum;
        self.outside += o.outside;
        add_all(&mut self.host, o.host);
        add_all(&mut self.device, o.device);
        add_counted(&mut self.idle, o.idle);
        add_counted(&mut self.sm, o.sm);
        add_counted(&mut self.power, o.power);
    }
}

/// The report's charts built row by row (see the module doc).
#[derive(Debug)]
pub(crate) struct ChartBuckets {
    max_points: usize,
    max_scopes: usize,
    /// Rows per bucket now, for a stream.
    width: usize,
    /// For a ledger of known length: where each bucket ends, in rows.
    plan: Option<Vec<usize>>,
    /// Rows pushed.
    rows: usize,
    buckets: Vec<Bucket>,
    has_scopes: bool,
    device_ids: BTreeSet<u32>,
    nvml_ids: BTreeSet<u32>,
    /// The scope paths charted apart; later ones are charted as one (bounded memory per bucket).
    names: NameFold,
}

impl ChartBuckets {
    /// Charts of a stream, at most `opts.max_points` bars or points.
    pub(crate) fn new(opts: &ReportOptions) -> Self {
        Self {
            // Pairs must merge into at least one bucket.
            max_points: opts.max_points.max(2),
            max_scopes: opts.max_scopes,
            width: 1,
            plan: None,
            rows: 0,
            buckets: Vec::new(),
            has_scopes: false,
            device_ids: BTreeSet::new(),
            nvml_ids: BTreeSet::new(),
            names: NameFold::default(),
        }
    }

    /// Charts of a ledger of `rows` rows, split evenly into at most `opts.max_points` bars or
    /// points; rows past `rows` join the last one.
    pub(crate) fn for_rows(opts: &ReportOptions, rows: usize) -> Self {
        let ends = buckets(rows, opts.max_points)
            .into_iter()
            .map(|r| r.end)
            .collect();
        Self {
            plan: Some(ends),
            ..Self::new(opts)
        }
    }

    /// Rows per bucket now (about, for a ledger split evenly).
    pub(crate) fn width(&self) -> usize {
        match &self.plan {
            Some(_) => self.rows.div_ceil(self.buckets.len().max(1)).max(1),
            None => self.width,
        }
    }

    /// Buckets now.
    pub(crate) fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether the next row starts a bucket.
    fn starts_bucket(&self) -> bool {
        let Some(last) = self.buckets.last() else {
            return true;
        };
        match &self.plan {
            Some(ends) => {
                let n = self.buckets.len();
                n < ends.len() && self.rows >= ends[n - 1]
            }
            None => last.rows >= self.width,
        }
    }

    /// Merges neighbours in pairs and doubles the width: a stream's buckets when one more is
    /// needed past `max_points`.
    fn halve(&mut self) {
        let old = std::mem::take(&mut self.buckets);
        let mut it = old.into_iter();
        while let Some(mut a) = it.next() {
            if let Some(b) = it.next() {
                a.merge(b);
            }
            self.buckets.push(a);
        }
        self.width *= 2;
    }

    /// Takes the next row (every row, in ledger order, used or not); `filter` says which rows
    /// the statistics leave out, whose bars are faded.
    pub(crate) fn push(&mut self, row: &IterationRow, filter: &RowFilter) {
        if self.plan.is_none() && self.starts_bucket() && self.buckets.len() == self.max_points {
            self.halve();
        }
        if self.starts_bucket() {
            self.buckets.push(Bucket {
                first: row.index,
                ..Bucket::default()
            });
        }
        self.rows += 1;
        let Some(b) = self.buckets.last_mut() else {
            return;
        };
        b.last = row.index;
        b.rows += 1;
        let left_out = (!row.complete && !filter.include_incomplete)
            || (row.perturbed && !filter.include_perturbed);
        b.excluded += usize::from(left_out);
        b.index_sum += row.index as f64;
        let (own, outside) = self_host_times(row);
        for (path, v) in own {
            let key = self.names.key(&path, 0);
            *b.host.entry(key.to_string()).or_default() += v;
        }
        b.outside += outside;
        for sc in &row.scopes {
            let key = self.names.key(&sc.path, sc.device_ns);
            *b.device.entry(key.to_string()).or_default() += sc.device_ns as f64;
        }
        self.has_scopes |= !row.scopes.is_empty();
        for d in &row.devices {
            self.device_ids.insert(d.device_id);
            if let Some(v) = idle_share(d).filter(|v| v.is_finite()) {
                let e = b.idle.entry(d.device_id).or_default();
                e.0 += v;
                e.1 += 1;
            }
        }
        for n in &row.nvml {
            self.nvml_ids.insert(n.device_id);
            for (map, v) in [
                (&mut b.sm, n.sm_clock.as_ref().map(|c| c.mean_mhz)),
                (&mut b.power, n.power.as_ref().map(|p| p.mean_w)),
            ] {
                if let Some(v) = v.filter(|v| v.is_finite()) {
                    let e = map.entry(n.device_id).or_default();
                    e.0 += v;
                    e.1 += 1;
                }
            }
        }
    }

    /// What the captions say of the buckets: nothing when each bar is one row.
    fn bucket_note(&self) -> String {
        match &self.plan {
            Some(_) if self.buckets.iter().any(|b| b.rows > 1) => format!(
                " Each bar is the mean of about {} consecutive iterations.",
                self.width()
            ),
            None if self.width > 1 => format!(
                " Each bar is the mean of {} consecutive iterations (the last bar may hold fewer).",
                self.width
            ),
            _ => String::new(),
        }
    }

    fn stacked(&self, pick: impl Fn(&Bucket) -> &BTreeMap<String, f64>) -> Vec<Series> {
        let mut totals: BTreeMap<&str, f64> = BTreeMap::new();
        for b in &self.buckets {
            for (k, v) in pick(b) {
                *totals.entry(k.as_str()).or_default() += v;
            }
        }
        let mut names: Vec<(&str, f64)> = totals.into_iter().filter(|(_, v)| *v > 0.0).collect();
        names.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
        let shown: Vec<&str> = names.iter().take(self.max_scopes).map(|n| n.0).collect();
        let mean = |b: &Bucket, v: f64| Some(v / b.rows.max(1) as f64);
        let mut series: Vec<Series> = shown
            .iter()
            .map(|name| Series {
                name: if *name == OTHER_NAMES {
                    self.names.label()
                } else {
                    name.to_string()
                },
                values: self
                    .buckets
                    .iter()
                    .map(|b| mean(b, pick(b).get(*name).copied().unwrap_or(0.0)))
                    .collect(),
            })
            .collect();
        if names.len() > shown.len() {
            series.push(Series {
                name: "other scopes".into(),
                values: self
                    .buckets
                    .iter()
                    .map(|b| {
                        let other = pick(b)
                            .iter()
                            .filter(|(k, _)| !shown.contains(&k.as_str()))
                            .map(|(_, v)| v)
                            .sum::<f64>();
                        mean(b, other)
                    })
                    .collect(),
            });
        }
        series
    }

    fn per_gpu(
        &self,
        ids: &BTreeSet<u32>,
        pick: impl Fn(&Bucket) -> &BTreeMap<u32, (f64, usize)>,
    ) -> Vec<Series> {
        ids.iter()
            .map(|&d| Series {
                name: format!("GPU {d}"),
                values: self
                    .buckets
                    .iter()
                    .map(|b| {
                        pick(b)
                            .get(&d)
                            .filter(|(_, n)| *n > 0)
                            .map(|(s, n)| s / *n as f64)
                    })
                    .collect(),
            })
            .collect()
    }

    /// The charts, with the rows `s` left out faded.
    pub(crate) fn finish(self, s: &LedgerSummary) -> Charts {
        let labels = self
            .buckets
            .iter()
            .map(|b| {
                if b.first == b.last {
                    b.first.to_string()
                } else {
                    format!("{}–{}", b.first, b.last)
                }
            })
            .collect();
        let dimmed = self
            .buckets
            .iter()
            .map(|b| {
                let warm = s.warmup.count_in(b.first, b.last);
                b.excluded + warm >= b.rows
            })
            .collect();
        let xs = self
            .buckets
            .iter()
            .map(|b| b.index_sum / b.rows.max(1) as f64)
            .collect();
        let bucket_note = self.bucket_note();
        let mut host = self.stacked(|b| &b.host);
        host.push(Series {
            name: "outside any scope".into(),
            values: self
                .buckets
                .iter()
                .map(|b| Some(b.outside / b.rows.max(1) as f64))
                .collect(),
        });
        let nvml = (!self.nvml_ids.is_empty()).then(|| {
            (
                self.per_gpu(&self.nvml_ids, |b| &b.sm),
                self.per_gpu(&self.nvml_ids, |b| &b.power),
            )
        });
        Charts {
            labels,
            dimmed,
            xs,
            bucket_note,
            has_scopes: self.has_scopes,
            device: self.stacked(|b| &b.device),
            idle: self.per_gpu(&self.device_ids, |b| &b.idle),
            host,
            nvml,
        }
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
