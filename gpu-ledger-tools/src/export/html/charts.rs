//! What the report's per-iteration charts show, built as the rows go past: consecutive rows
//! grouped into at most [`ReportOptions::max_points`] buckets, and per bucket each scope's own
//! host time, its device time, each GPU's idle share, idle time by cause and NVML's clock and
//! power. Each bucket keeps
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
use crate::export::svg::{Series, PALETTE};
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
    /// Idle time by cause, summed over devices, per row that split idle time; empty when no row
    /// did.
    pub(crate) idle_causes: Vec<Series>,
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
    /// Idle time by cause over the rows that split it, and those rows.
    causes: BTreeMap<String, f64>,
    cause_rows: usize,
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
        add_all(&mut self.causes, o.causes);
        self.cause_rows += o.cause_rows;
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
        if row.devices.iter().any(|d| d.idle.is_some()) {
            b.cause_rows += 1;
            for c in row.devices.iter().filter_map(|d| d.idle.as_ref()) {
                for (cause, ns) in c.by_cause() {
                    *b.causes.entry(cause.to_string()).or_default() += ns as f64;
                }
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
                color: None,
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
                color: Some(OTHER_SCOPES),
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
                color: None,
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

    /// Idle time by cause per bucket: the mean over its rows that split idle time, none where
    /// no row did; the causes in the order of docs/idle.md, any other after them.
    fn idle_causes(&self) -> Vec<Series> {
        use gpu_ledger_format::idle::cause;
        let order = [
            cause::LAUNCH_LATENCY,
            cause::HOST_LAUNCH,
            cause::DEPENDENCY,
            cause::UNKNOWN,
        ];
        let mut names: Vec<&str> = Vec::new();
        for b in &self.buckets {
            for k in b.causes.keys() {
                if !names.contains(&k.as_str()) {
                    names.push(k);
                }
            }
        }
        let rank = |n: &str| order.iter().position(|o| *o == n).unwrap_or(order.len());
        names.sort_by(|a, b| rank(a).cmp(&rank(b)).then(a.cmp(b)));
        names
            .into_iter()
            .map(|name| Series {
                name: name.to_string(),
                // The palette by position, the causes in the fixed order above.
                color: None,
                values: (self.buckets.iter())
                    .map(|b| {
                        (b.cause_rows > 0).then(|| {
                            b.causes.get(name).copied().unwrap_or(0.0) / b.cause_rows as f64
                        })
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
            color: Some(OUTSIDE_SCOPES),
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
        let mut device = self.stacked(|b| &b.device);
        color_scopes(&mut host, &mut device);
        Charts {
            labels,
            dimmed,
            xs,
            bucket_note,
            has_scopes: self.has_scopes,
            device,
            idle: self.per_gpu(&self.device_ids, |b| &b.idle),
            host,
            nvml,
            idle_causes: self.idle_causes(),
        }
    }
}

/// Colour of the "other scopes" segment, a grey no scope gets.
const OTHER_SCOPES: &str = "#bab0ac";
/// Colour of the time outside every scope, a lighter grey.
const OUTSIDE_SCOPES: &str = "#d9d9d9";

/// One colour per scope over both scope charts, so that a scope reads the same in each: the
/// host chart's scopes in its order, then the device chart's others in colours no scope has
/// (or, past the palette, none of that chart's). The palette's grey is left to "other scopes".
fn color_scopes(host: &mut [Series], device: &mut [Series]) {
    let palette = &PALETTE[..PALETTE.len() - 1];
    let mut given: BTreeMap<String, &'static str> = BTreeMap::new();
    for s in host.iter_mut().filter(|s| s.color.is_none()) {
        let c = palette[given.len() % palette.len()];
        s.color = Some(*given.entry(s.name.clone()).or_insert(c));
    }
    for s in device.iter_mut().filter(|s| s.color.is_none()) {
        s.color = given.get(&s.name).copied();
    }
    // A colour no scope has yet, else one this chart does not show, else the palette's turn.
    let mut taken: BTreeSet<&str> = given.values().copied().collect();
    let mut shown: BTreeSet<&str> = device.iter().filter_map(|s| s.color).collect();
    for (i, s) in device.iter_mut().enumerate() {
        if s.color.is_none() {
            let free = |set: &BTreeSet<&str>| palette.iter().copied().find(|c| !set.contains(c));
            let c = free(&taken)
                .or_else(|| free(&shown))
                .unwrap_or(palette[i % palette.len()]);
            taken.insert(c);
            shown.insert(c);
            s.color = Some(c);
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

    #[test]
    fn a_scope_has_one_colour_in_both_charts() {
        let series = |names: &[&str]| -> Vec<Series> {
            names
                .iter()
                .map(|n| Series {
                    name: n.to_string(),
                    values: vec![Some(1.0)],
                    color: None,
                })
                .collect()
        };
        let mut host = series(&["step/load", "step/fwd", "step/bwd"]);
        let mut device = series(&["step/bwd", "step/opt", "step/load"]);
        color_scopes(&mut host, &mut device);
        let of = |v: &[Series], n: &str| v.iter().find(|s| s.name == n).unwrap().color;
        assert_eq!(of(&host, "step/load"), of(&device, "step/load"));
        assert_eq!(of(&host, "step/bwd"), of(&device, "step/bwd"));
        let mut all: Vec<_> = host.iter().chain(&device).map(|s| s.color).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 4, "four scopes, four colours");
    }
}
