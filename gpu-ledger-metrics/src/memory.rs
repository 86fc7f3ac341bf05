//! A recorder that keeps every series in memory, in a stable order: what `gpu-ledger metrics`
//! renders as text, and what tests read back.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

use crate::catalogue::{buckets_for, Kind};

/// A histogram's observations: count, sum and per-bucket counts (not cumulative).
#[derive(Debug, Default)]
struct HistogramCell {
    bounds: &'static [f64],
    count: u64,
    sum: f64,
    /// One per bound; an observation above the last is in `count` only.
    buckets: Vec<u64>,
}

impl HistogramCell {
    fn new(bounds: &'static [f64]) -> Self {
        HistogramCell {
            bounds,
            buckets: vec![0; bounds.len()],
            ..HistogramCell::default()
        }
    }
}

/// The handle the facade records a histogram observation through.
struct HistogramHandle(Mutex<HistogramCell>);

impl HistogramFn for HistogramHandle {
    fn record(&self, value: f64) {
        let mut h = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        h.count += 1;
        h.sum += value;
        // Observations land in the first bucket whose bound is at least the value (`le`).
        if let Some(i) = h.bounds.iter().position(|&b| value <= b) {
            h.buckets[i] += 1;
        }
    }
}

enum Cell {
    Counter(Arc<AtomicU64>),
    Gauge(Arc<AtomicU64>),
    Histogram(Arc<HistogramHandle>),
}

/// A metric family's description.
#[derive(Clone, Debug, Default)]
pub(crate) struct Description {
    pub(crate) help: String,
}

#[derive(Default)]
struct Store {
    descriptions: BTreeMap<String, Description>,
    series: BTreeMap<(String, Vec<(String, String)>), Cell>,
}

/// A series' value, as read back from a [`MemoryRecorder`].
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A counter's count.
    Counter(u64),
    /// A gauge's last value.
    Gauge(f64),
    /// A histogram: observations, their sum, and per bound the observations at most that bound
    /// (cumulative, as Prometheus' `_bucket{le}`).
    Histogram {
        /// Observations.
        count: u64,
        /// Their sum.
        sum: f64,
        /// `(le, cumulative count)` per bound, `+Inf` excluded (it is `count`).
        buckets: Vec<(f64, u64)>,
    },
}

impl Value {
    /// Its type.
    pub fn kind(&self) -> Kind {
        match self {
            Value::Counter(_) => Kind::Counter,
            Value::Gauge(_) => Kind::Gauge,
            Value::Histogram { .. } => Kind::Histogram,
        }
    }
}

/// One series of a [`MemoryRecorder`].
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The metric's name.
    pub name: String,
    /// Its labels, in the order the publisher gave them.
    pub labels: Vec<(String, String)>,
    /// Its value now.
    pub value: Value,
}

impl Series {
    /// The value of label `key`, if the series has it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A `metrics` recorder that keeps every series in memory, ordered by name and labels.
/// Histograms are kept as buckets ([`buckets_for`](crate::buckets_for) their name), count and
/// sum, as a Prometheus exporter configured with the same buckets keeps them. Cloning shares
/// the store.
#[derive(Clone, Default)]
pub struct MemoryRecorder {
    store: Arc<Mutex<Store>>,
}

impl std::fmt::Debug for MemoryRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRecorder")
            .field("series", &self.lock().series.len())
            .finish()
    }
}

impl MemoryRecorder {
    /// An empty recorder.
    pub fn new() -> Self {
        MemoryRecorder::default()
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every series now, ordered by name and labels.
    pub fn series(&self) -> Vec<Series> {
        self.lock()
            .series
            .iter()
            .map(|((name, labels), cell)| Series {
                name: name.clone(),
                labels: labels.clone(),
                value: read(cell),
            })
            .collect()
    }

    /// The value of the series `name` whose labels include every one of `labels`; `None` when
    /// no series matches, and the first when several do.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<Value> {
        self.series()
            .into_iter()
            .find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
            .map(|s| s.value)
    }

    /// The descriptions given, by metric name.
    pub(crate) fn descriptions(&self) -> BTreeMap<String, Description> {
        self.lock().descriptions.clone()
    }

    /// Keeps the help text; the unit is in the name already.
    fn describe(&self, key: KeyName, help: SharedString) {
        self.lock().descriptions.insert(
            key.as_str().to_string(),
            Description {
                help: help.to_string(),
            },
        );
    }

    /// The cell of `key`, made by `make` when new.
    fn cell<T>(
        &self,
        key: &Key,
        make: impl FnOnce() -> Cell,
        get: impl Fn(&Cell) -> Option<T>,
    ) -> T {
        let labels = key
            .labels()
            .map(|l| (l.key().to_string(), l.value().to_string()))
            .collect();
        let mut store = self.lock();
        let cell = store
            .series
            .entry((key.name().to_string(), labels))
            .or_insert_with(make);
        // A name registered as another type keeps its first: the facade's handle then goes
        // nowhere, as an exporter's would.
        get(cell).unwrap_or_else(|| get(&make_like(cell)).expect("a fresh cell of its own type"))
    }
}

/// A fresh cell of `cell`'s type, detached from the store.
fn make_like(cell: &Cell) -> Cell {
    match cell {
        Cell::Counter(_) => Cell::Counter(Arc::default()),
        Cell::Gauge(_) => Cell::Gauge(Arc::default()),
        Cell::Histogram(h) => {
            let bounds = h.0.lock().unwrap_or_else(PoisonError::into_inner).bounds;
            Cell::Histogram(Arc::new(HistogramHandle(Mutex::new(HistogramCell::new(
                bounds,
            )))))
        }
    }
}

fn read(cell: &Cell) -> Value {
    match cell {
        Cell::Counter(c) => Value::Counter(c.load(Ordering::Acquire)),
        Cell::Gauge(g) => Value::Gauge(f64::from_bits(g.load(Ordering::Acquire))),
        Cell::Histogram(h) => {
            let h = h.0.lock().unwrap_or_else(PoisonError::into_inner);
            let mut total = 0;
            let buckets = h
                .bounds
                .iter()
                .zip(&h.buckets)
                .map(|(&le, &n)| {
                    total += n;
                    (le, total)
                })
                .collect();
            Value::Histogram {
                count: h.count,
                sum: h.sum,
                buckets,
            }
        }
    }
}

impl Recorder for MemoryRecorder {
    fn describe_counter(&self, key: KeyName, _: Option<Unit>, description: SharedString) {
        self.describe(key, description);
    }

    fn describe_gauge(&self, key: KeyName, _: Option<Unit>, description: SharedString) {
        self.describe(key, description);
    }

    fn describe_histogram(&self, key: KeyName, _: Option<Unit>, description: SharedString) {
        self.describe(key, description);
    }

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let c = self.cell(
            key,
            || Cell::Counter(Arc::default()),
            |c| match c {
                Cell::Counter(a) => Some(a.clone()),
                _ => None,
            },
        );
        Counter::from_arc(c)
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let g = self.cell(
            key,
            || Cell::Gauge(Arc::default()),
            |c| match c {
                Cell::Gauge(a) => Some(a.clone()),
                _ => None,
            },
        );
        Gauge::from_arc(g)
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let bounds = buckets_for(key.name());
        let h = self.cell(
            key,
            || {
                Cell::Histogram(Arc::new(HistogramHandle(Mutex::new(HistogramCell::new(
                    bounds,
                )))))
            },
            |c| match c {
                Cell::Histogram(a) => Some(a.clone()),
                _ => None,
            },
        );
        Histogram::from_arc(h)
    }
}
