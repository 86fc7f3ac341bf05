//! The report's per-iteration charts built as rows stream past, in memory and size independent of
//! the number of rows: rows go into buckets of `width` consecutive rows, at most `max_points` of
//! them; when one more is needed, neighbours merge in pairs and the width doubles. Each bucket
//! keeps sums and counts, so that a bar or point is the mean of its rows, as in the report of a
//! ledger read whole; the charts' captions state the width.

use std::collections::{BTreeMap, BTreeSet};

use super::html::{self_host_times, Charts, ReportOptions};
use super::summary::LedgerSummary;
use super::svg::Series;
use crate::analysis::stats::idle_share;
use gpu_ledger_format::schema::IterationRow;

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

/// The report's charts of a streamed ledger (see the module doc).
#[derive(Debug)]
pub(crate) struct ChartBuckets {
    max_points: usize,
    max_scopes: usize,
    width: usize,
    buckets: Vec<Bucket>,
    has_scopes: bool,
    device_ids: BTreeSet<u32>,
    nvml_ids: BTreeSet<u32>,
}

impl ChartBuckets {
    /// Charts of at most `opts.max_points` bars or points.
    pub(crate) fn new(opts: &ReportOptions) -> Self {
        Self {
            // Pairs must merge into at least one bucket.
            max_points: opts.max_points.max(2),
            max_scopes: opts.max_scopes,
            width: 1,
            buckets: Vec::new(),
            has_scopes: false,
            device_ids: BTreeSet::new(),
            nvml_ids: BTreeSet::new(),
        }
    }

    /// Rows per bucket now.
    pub(crate) fn width(&self) -> usize {
        self.width
    }

    /// Buckets now.
    pub(crate) fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Takes the next row (every row, in ledger order, as the report of a whole ledger shows).
    pub(crate) fn push(&mut self, row: &IterationRow, opts_filter: &crate::analysis::RowFilter) {
        let full = self.buckets.last().is_none_or(|b| b.rows >= self.width);
        if full && self.buckets.len() == self.max_points {
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
        if self.buckets.last().is_none_or(|b| b.rows >= self.width) {
            self.buckets.push(Bucket {
                first: row.index,
                ..Bucket::default()
            });
        }
        let Some(b) = self.buckets.last_mut() else {
            return;
        };
        b.last = row.index;
        b.rows += 1;
        let left_out = (!row.complete && !opts_filter.include_incomplete)
            || (row.perturbed && !opts_filter.include_perturbed);
        b.excluded += usize::from(left_out);
        b.index_sum += row.index as f64;
        let (own, outside) = self_host_times(row);
        add_all(&mut b.host, own);
        b.outside += outside;
        for sc in &row.scopes {
            *b.device.entry(sc.path.clone()).or_default() += sc.device_ns as f64;
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
                name: name.to_string(),
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
        let bucket_note = if self.width > 1 {
            format!(
                " Each bar is the mean of {} consecutive iterations (the last bar may hold fewer).",
                self.width
            )
        } else {
            String::new()
        };
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
