//! The publisher: each ledger row, as it is written, into the `metrics` facade.
//!
//! Handles are registered once per series and kept: a steady-state row costs one increment,
//! `set` or `record` per figure, no allocation and no registration. The recorder is looked up
//! at every row (one atomic load): when it is not the one the handles were registered with (the
//! application installed its exporter after the profiler started), the handles are dropped and
//! registered again with the new one.

use std::sync::Arc;

use gpu_ledger_format::nvml::NvmlIterationSummary;
use gpu_ledger_format::schema::{DeviceIteration, Header, IterationRow, ScopeRow};
use metrics::{
    Counter, Gauge, Histogram, Key, KeyName, Label, Level, Metadata, Recorder, SharedString,
};
use rustc_hash::FxHashMap;

use crate::catalogue::{Kind, M, METRICS};
use crate::options::MetricsOptions;
use crate::scopes::{Place, ScopeLimit, OTHER_SCOPE};

/// The metadata every registration carries.
static META: Metadata<'static> = Metadata::new("gpu_ledger", Level::INFO, Some(module_path!()));

/// The series of the run's own figures (labels: `rank`).
const RUN: u32 = 0;
/// The series of `gpu_ledger_run_info`.
const RUN_INFO: u32 = 1;

enum Handle {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
}

/// A device's series: its own, and those with one more label, by that label and its value.
struct DeviceSeries {
    base: u32,
    extra: Vec<(&'static str, FxHashMap<String, u32>)>,
}

/// A GPU of the ledger header.
struct Gpu {
    ordinal: u32,
    uuid: String,
    name: String,
}

/// A scope's figures for one row (one path's, or the sum of the paths in `(other)`).
#[derive(Default)]
struct ScopeFigures {
    calls: u64,
    host_ns: u64,
    device_ns: u64,
    event_device_ns: Option<u64>,
}

impl ScopeFigures {
    fn add(&mut self, s: &ScopeRow) {
        self.calls += s.calls;
        self.host_ns += s.host_ns;
        self.device_ns += s.device_ns_inclusive;
        if let Some(e) = s.event_device_ns {
            *self.event_device_ns.get_or_insert(0) += e;
        }
    }
}

/// Publishes ledger rows through a `metrics` recorder ([`METRICS`] lists what it publishes).
/// The profiler's collector thread owns one per run (feature `metrics`); `gpu-ledger metrics`
/// drives one over a ledger already written.
pub struct Publisher {
    recorder: Option<Arc<dyn Recorder + Send + Sync>>,
    histograms: bool,
    /// The level traces GPU activity (timeline, counters): rows that are not `untraced` have
    /// device figures.
    traces: bool,
    version: String,
    level: String,
    rank: Option<String>,
    gpus: Vec<Gpu>,
    /// Each series' labels, by series id.
    labels: Vec<Vec<Label>>,
    devices: FxHashMap<u32, DeviceSeries>,
    scopes: ScopeLimit,
    other: Option<u32>,
    places: Vec<Place>,
    handles: FxHashMap<(M, u32), Handle>,
    /// The recorder the handles were registered with, by address.
    recorder_id: Option<usize>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("level", &self.level)
            .field("series", &self.labels.len())
            .field("handles", &self.handles.len())
            .finish()
    }
}

impl Publisher {
    /// A publisher of the rows of the run that `header` opens.
    pub fn new(options: &MetricsOptions, header: &Header) -> Self {
        let rank = header.rank.as_ref().map(|r| r.rank.to_string());
        let gpus = header
            .environment
            .gpus
            .iter()
            .map(|g| Gpu {
                ordinal: g.ordinal,
                uuid: g.uuid.clone().unwrap_or_default(),
                name: g.name.clone(),
            })
            .collect();
        let mut p = Publisher {
            recorder: options.recorder.clone(),
            histograms: options.histograms,
            traces: header.config.level != "scopes",
            version: header.gpu_ledger_version.clone(),
            level: header.config.level.clone(),
            rank,
            gpus,
            labels: Vec::new(),
            devices: FxHashMap::default(),
            scopes: ScopeLimit::new(
                options.scope_depth,
                options.max_scopes,
                options.scopes.clone(),
            ),
            other: None,
            places: Vec::new(),
            handles: FxHashMap::default(),
            recorder_id: None,
        };
        let run = p.add_series(Vec::new());
        let info = p.add_series(vec![
            Label::new("version", p.version.clone()),
            Label::new("level", p.level.clone()),
        ]);
        debug_assert_eq!((run, info), (RUN, RUN_INFO));
        p
    }

    /// Publishes one row: what it has, and nothing it does not (an untraced row has no device
    /// figures; a perturbed row's times stay out of the histograms).
    pub fn publish(&mut self, row: &IterationRow) {
        self.check_recorder();
        let traced = self.traces && !row.untraced;
        let steady = !row.perturbed;
        self.publish_run(row, traced, steady);
        self.publish_scopes(row, traced, steady);
        if traced {
            for d in &row.devices {
                self.publish_device(d, row.host_wall_ns, steady);
            }
        }
        for n in &row.nvml {
            self.publish_nvml(n, steady);
        }
        self.publish_energy(&row.nvml, steady);
    }

    /// Describes every metric to the recorder (help text and unit), and sets the info gauges.
    /// [`publish`](Self::publish) calls it before its first row and whenever the recorder
    /// changes.
    pub fn describe(&mut self) {
        self.with_recorder(|r| {
            for def in METRICS {
                let key = KeyName::from_const_str(def.name);
                let help = SharedString::const_str(def.help);
                match def.kind {
                    Kind::Counter => r.describe_counter(key, def.unit, help),
                    Kind::Gauge => r.describe_gauge(key, def.unit, help),
                    Kind::Histogram => r.describe_histogram(key, def.unit, help),
                }
            }
        });
        self.gauge(M::RUN_INFO, RUN_INFO, 1.0);
        let gpus: Vec<(u32, String)> = self
            .gpus
            .iter()
            .map(|g| (g.ordinal, g.name.clone()))
            .collect();
        for (ordinal, name) in gpus {
            let id = self.device_series_with(ordinal, "name", &name);
            self.gauge(M::DEVICE_INFO, id, 1.0);
        }
    }

    fn publish_run(&mut self, row: &IterationRow, traced: bool, steady: bool) {
        self.count(M::ITERATIONS, RUN, 1);
        self.count(M::ITERATIONS_UNTRACED, RUN, u64::from(row.untraced));
        self.count(M::ITERATIONS_PERTURBED, RUN, u64::from(row.perturbed));
        self.count(M::ITERATIONS_INCOMPLETE, RUN, u64::from(!row.complete));
        self.gauge(M::ITERATION_INDEX, RUN, row.index as f64);
        if steady {
            self.observe(M::ITERATION_DURATION, RUN, seconds(row.host_wall_ns));
        }
        if traced {
            self.count(M::DROPPED_RECORDS, RUN, row.dropped_records);
            self.count(M::MISSING_RECORDS, RUN, row.missing_records);
            if let (Some(added), true) = (row.tracing_added_ns, steady) {
                self.observe(M::TRACING_ADDED, RUN, seconds(added));
            }
        }
    }

    fn publish_scopes(&mut self, row: &IterationRow, traced: bool, steady: bool) {
        if self.scopes.off() {
            return;
        }
        let mut places = std::mem::take(&mut self.places);
        {
            let (labels, rank) = (&mut self.labels, &self.rank);
            let paths = row.scopes.iter().map(|s| s.path.as_str());
            self.scopes.place(paths, &mut places, |path| {
                push_series(labels, rank, vec![Label::new("scope", path.to_string())])
            });
        }
        let mut other = ScopeFigures::default();
        let (mut any_other, mut unpublished) = (false, 0);
        for (s, place) in row.scopes.iter().zip(&places) {
            match *place {
                Place::Own(id) => {
                    let mut f = ScopeFigures::default();
                    f.add(s);
                    self.publish_scope(id, &f, traced, steady);
                }
                Place::Other => {
                    other.add(s);
                    any_other = true;
                    unpublished += 1;
                }
                Place::Drop => unpublished += 1,
            }
        }
        self.places = places;
        if any_other {
            let id = self.other_series();
            self.publish_scope(id, &other, traced, steady);
        }
        self.count(M::SCOPE_ROWS_UNPUBLISHED, RUN, unpublished);
    }

    fn publish_scope(&mut self, id: u32, f: &ScopeFigures, traced: bool, steady: bool) {
        self.count(M::SCOPE_CALLS, id, f.calls);
        if !steady {
            return;
        }
        self.observe(M::SCOPE_HOST, id, seconds(f.host_ns));
        if traced {
            self.observe(M::SCOPE_DEVICE, id, seconds(f.device_ns));
        }
        if let Some(e) = f.event_device_ns {
            self.observe(M::SCOPE_EVENT_DEVICE, id, seconds(e));
        }
    }

    fn publish_device(&mut self, d: &DeviceIteration, wall_ns: u64, steady: bool) {
        let id = self.device_series(d.device_id);
        self.count(M::DEVICE_KERNELS, id, d.kernel_count);
        if !steady {
            return;
        }
        self.observe(M::DEVICE_BUSY, id, seconds(d.busy_ns));
        self.observe(M::DEVICE_IDLE, id, seconds(d.idle_ns));
        if wall_ns > 0 {
            self.gauge(M::DEVICE_BUSY_RATIO, id, d.busy_ns as f64 / wall_ns as f64);
        }
        let window = d.last_end_ns.saturating_sub(d.first_start_ns);
        if window > 0 {
            self.gauge(M::DEVICE_IDLE_RATIO, id, d.idle_ns as f64 / window as f64);
        }
        self.publish_idle_causes(d);
    }

    /// Idle time by cause, one observation per cause the row's split names (the causes add up
    /// to the row's idle time). The label is the cause alone, never its detail (a scope path or
    /// a function): the causes are a fixed, short list, so the series stay bounded.
    fn publish_idle_causes(&mut self, d: &DeviceIteration) {
        let Some(idle) = &d.idle else {
            return;
        };
        let mut by_cause: Vec<(&str, u64)> = Vec::new();
        for c in &idle.causes {
            match by_cause.iter_mut().find(|(name, _)| *name == c.cause) {
                Some((_, ns)) => *ns = ns.saturating_add(c.ns),
                None => by_cause.push((&c.cause, c.ns)),
            }
        }
        for (cause, ns) in by_cause {
            let id = self.device_series_with(d.device_id, "cause", cause);
            self.observe(M::DEVICE_IDLE_CAUSE, id, seconds(ns));
        }
    }

    fn publish_nvml(&mut self, n: &NvmlIterationSummary, steady: bool) {
        let id = self.device_series(n.device_id);
        let clock = |c: &Option<gpu_ledger_format::nvml::ClockStats>| {
            c.as_ref()
                .map(|c| c.mean_mhz * 1e6)
                .filter(|v| v.is_finite())
        };
        if let Some(hz) = clock(&n.sm_clock) {
            self.gauge(M::GPU_SM_CLOCK, id, hz);
        }
        if let Some(hz) = clock(&n.mem_clock) {
            self.gauge(M::GPU_MEMORY_CLOCK, id, hz);
        }
        if let Some(w) = n.power.as_ref().map(|p| p.mean_w).filter(|w| w.is_finite()) {
            self.gauge(M::GPU_POWER, id, w);
        }
        let joules = n
            .energy
            .as_ref()
            .map(|e| e.joules)
            .filter(|j| j.is_finite());
        if let (Some(j), true) = (joules, steady) {
            self.observe(M::GPU_ENERGY, id, j);
        }
        if let Some(c) = n.temperature_max_c {
            self.gauge(M::GPU_TEMPERATURE, id, f64::from(c));
        }
        if let Some(b) = n.memory_used_max_bytes {
            self.gauge(M::GPU_MEMORY_USAGE, id, b as f64);
        }
        for (direction, rate) in [
            ("transmit", n.pcie_tx_bytes_per_s),
            ("receive", n.pcie_rx_bytes_per_s),
        ] {
            if let Some(r) = rate.filter(|r| r.is_finite()) {
                let s = self.device_series_with(n.device_id, "direction", direction);
                self.gauge(M::GPU_PCIE, s, r);
            }
        }
        // No throttle samples means the reasons are unknown, not that there were none.
        if n.throttle_samples > 0 {
            for reason in &n.throttle_reasons {
                let s = self.device_series_with(n.device_id, "reason", reason);
                self.count(M::GPU_THROTTLE, s, 1);
            }
        }
        self.count(M::GPU_NVML_COARSE, id, u64::from(n.coarse));
    }

    /// The iteration's energy over its devices, as the ledger's run energy counts it: only when
    /// every device has a figure.
    fn publish_energy(&mut self, nvml: &[NvmlIterationSummary], steady: bool) {
        if !steady || nvml.is_empty() {
            return;
        }
        let joules: Option<f64> = nvml
            .iter()
            .map(|n| {
                n.energy
                    .as_ref()
                    .map(|e| e.joules)
                    .filter(|j| j.is_finite())
            })
            .sum();
        if let Some(j) = joules {
            self.observe(M::ITERATION_ENERGY, RUN, j);
        }
    }
}

/// Nanoseconds as seconds.
#[inline]
fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Adds a series of `labels` (and `rank`, when the run has one) to `table`; its id.
fn push_series(table: &mut Vec<Vec<Label>>, rank: &Option<String>, mut labels: Vec<Label>) -> u32 {
    if let Some(r) = rank {
        labels.push(Label::new("rank", r.clone()));
    }
    table.push(labels);
    (table.len() - 1) as u32
}

impl Publisher {
    fn add_series(&mut self, labels: Vec<Label>) -> u32 {
        push_series(&mut self.labels, &self.rank, labels)
    }

    fn other_series(&mut self) -> u32 {
        if let Some(id) = self.other {
            return id;
        }
        let id = self.add_series(vec![Label::new("scope", OTHER_SCOPE)]);
        self.other = Some(id);
        id
    }

    /// The series of device `ordinal` (labels `device`, `UUID`).
    fn device_series(&mut self, ordinal: u32) -> u32 {
        if let Some(d) = self.devices.get(&ordinal) {
            return d.base;
        }
        let base = self.add_series(self.device_labels(ordinal));
        self.devices.insert(
            ordinal,
            DeviceSeries {
                base,
                extra: Vec::new(),
            },
        );
        base
    }

    /// The series of device `ordinal` with the label `key="value"` too.
    fn device_series_with(&mut self, ordinal: u32, key: &'static str, value: &str) -> u32 {
        self.device_series(ordinal);
        let known = self.devices[&ordinal]
            .extra
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, values)| values.get(value).copied());
        if let Some(id) = known {
            return id;
        }
        let mut labels = self.device_labels(ordinal);
        labels.push(Label::new(key, value.to_string()));
        let id = self.add_series(labels);
        let d = self.devices.get_mut(&ordinal).expect("made above");
        match d.extra.iter_mut().find(|(k, _)| *k == key) {
            Some((_, values)) => {
                values.insert(value.to_string(), id);
            }
            None => d
                .extra
                .push((key, FxHashMap::from_iter([(value.to_string(), id)]))),
        }
        id
    }

    fn device_labels(&self, ordinal: u32) -> Vec<Label> {
        let uuid = self
            .gpus
            .iter()
            .find(|g| g.ordinal == ordinal)
            .map(|g| g.uuid.clone())
            .unwrap_or_default();
        vec![
            Label::new("device", ordinal.to_string()),
            Label::new("UUID", uuid),
        ]
    }

    fn with_recorder<T>(&self, f: impl FnOnce(&dyn Recorder) -> T) -> T {
        match &self.recorder {
            Some(r) => f(r.as_ref()),
            None => metrics::with_recorder(f),
        }
    }

    /// Registers again, and describes again, when the recorder is not the one the handles were
    /// registered with.
    fn check_recorder(&mut self) {
        let id = self.with_recorder(|r| std::ptr::from_ref(r).cast::<()>() as usize);
        if self.recorder_id != Some(id) {
            self.recorder_id = Some(id);
            self.handles.clear();
            self.describe();
        }
    }

    /// The handle of metric `m`'s series `series`, registered on first use.
    fn handle(&mut self, m: M, series: u32) -> &Handle {
        let (labels, recorder) = (&self.labels, &self.recorder);
        self.handles.entry((m, series)).or_insert_with(|| {
            let def = m.def();
            let key = Key::from_parts(
                KeyName::from_const_str(def.name),
                labels[series as usize].clone(),
            );
            let register = |r: &dyn Recorder| match def.kind {
                Kind::Counter => Handle::Counter(r.register_counter(&key, &META)),
                Kind::Gauge => Handle::Gauge(r.register_gauge(&key, &META)),
                Kind::Histogram => Handle::Histogram(r.register_histogram(&key, &META)),
            };
            match recorder {
                Some(r) => register(r.as_ref()),
                None => metrics::with_recorder(register),
            }
        })
    }

    fn count(&mut self, m: M, series: u32, n: u64) {
        if let Handle::Counter(c) = self.handle(m, series) {
            c.increment(n);
        }
    }

    fn gauge(&mut self, m: M, series: u32, v: f64) {
        if let Handle::Gauge(g) = self.handle(m, series) {
            g.set(v);
        }
    }

    fn observe(&mut self, m: M, series: u32, v: f64) {
        if !self.histograms {
            return;
        }
        if let Handle::Histogram(h) = self.handle(m, series) {
            h.record(v);
        }
    }
}
