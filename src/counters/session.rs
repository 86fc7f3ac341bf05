//! The Range Profiler session: the chip's metric catalog (host side), and [`RangeProfiler`],
//! which owns the host object and config image and runs collections on a CUDA context.
//!
//! The call sequence is the one of CUPTI 13.0's `range_profiling` sample:
//! `cuptiProfilerInitialize`; `cuptiDeviceGetChipName`; `cuptiProfilerGetCounterAvailability`;
//! `cuptiProfilerHostInitialize`, `ConfigAddMetrics`, `GetConfigImage`, `GetNumOfPasses`; then
//! per collection `cuptiRangeProfilerEnable`, `GetCounterDataSize`,
//! `CounterDataImageInitialize`, `SetConfig`, { `Start`, `PushRange`/`PopRange`, `Stop` } until
//! every pass is submitted, `DecodeData`, `GetCounterDataInfo`, per range `GetRangeInfo` and
//! `cuptiProfilerHostEvaluateToGpuValues`, and `cuptiRangeProfilerDisable`.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::sync::Arc;

use cudarc::driver::CudaContext;
use cupti_sys as sys;
use serde::{Deserialize, Serialize};

use super::config::CounterConfig;
use super::error::support_error;
use super::launches::{name_auto_ranges, Launch, LaunchRecorder};
use super::metrics::{nearest, nearest_metric, resolve, split_metric, MetricCatalog};
use super::ranges::RangeValues;
use crate::cupti;
use crate::cupti::range_profiler::{
    self as ffi, AlignedBuf, HostObject, MetricProperties, StopInfo, Target,
};
use crate::cupti::LoadedCupti;
use crate::driver::flush::L2Flush;
use crate::error::{Error, Result};
use crate::ledger::counters::{CacheState, DroppedMetric, RangeMode, ReplayMode};

/// The metrics of one chip, from the Profiler Host API (`GetBaseMetrics`, `GetSubMetrics`,
/// `GetMetricProperties`): what requested names are validated against on a GPU.
pub struct ChipCatalog {
    chip: String,
    host: HostObject,
    /// Base metric name -> its CUPTI metric type.
    bases: BTreeMap<String, sys::CUpti_MetricType::Type>,
}

impl ChipCatalog {
    /// Reads the chip name and counter availability of `ctx`'s device and opens a host object.
    /// Call it while no Range Profiler collection runs on the context.
    ///
    /// # Errors
    /// CUPTI loading errors; an unsupported device, with each failing item and the fix; the
    /// permission error (ERR_NVGPUCTRPERM) when the counters are restricted.
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        let lib = cupti::api()?;
        Self::with_lib(lib, ctx)
    }

    fn with_lib(lib: &'static LoadedCupti, ctx: &Arc<CudaContext>) -> Result<Self> {
        ffi::profiler_initialize(lib)?;
        let ordinal = ctx.ordinal();
        let support = ffi::device_supported(lib, ctx)?;
        if let Some(e) = support_error(ordinal, &support) {
            return Err(e);
        }
        ctx.bind_to_thread()?;
        let chip = ffi::chip_name(lib, ordinal)?;
        let availability = ffi::counter_availability(lib, ctx)?;
        let host = HostObject::new(lib, &chip, &availability)?;
        let mut bases = BTreeMap::new();
        for t in ffi::METRIC_TYPES {
            for b in host.base_metrics(t)? {
                bases.entry(b).or_insert(t);
            }
        }
        Ok(ChipCatalog { chip, host, bases })
    }

    /// The chip name CUPTI reports (`GH100` for H100 and H200).
    pub fn chip(&self) -> &str {
        &self.chip
    }

    /// Every base metric name (`dram__bytes_read`, ...), sorted.
    pub fn base_metrics(&self) -> impl Iterator<Item = &str> {
        self.bases.keys().map(String::as_str)
    }

    /// Description, unit and type of a metric; `None` when the chip has no such metric.
    ///
    /// # Errors
    /// CUPTI failures other than an unknown name.
    pub fn properties(&self, name: &str) -> Result<Option<MetricProperties>> {
        self.host.metric_properties(name)
    }

    /// Whether CUPTI builds a configuration for this one full name (`base.rollup[.submetric]`):
    /// the test of a rollup or submetric the base-name check cannot make. Opens a host object
    /// of its own, so a refusal leaves no state behind.
    pub fn accepts(&self, name: &str) -> bool {
        let Ok(c) = CString::new(name) else {
            return false;
        };
        self.host.fresh().and_then(|h| h.config_image(&[c])).is_ok()
    }

    /// The full names (`base.rollup[.submetric]`) CUPTI lists for a base metric.
    pub fn full_names(&self, base: &str) -> Vec<String> {
        let Some(t) = self.bases.get(base) else {
            return Vec::new();
        };
        self.host
            .sub_metrics(*t, base)
            .unwrap_or_default()
            .into_iter()
            .map(|s| {
                if s.starts_with(base) {
                    s
                } else if let Some(rest) = s.strip_prefix('.') {
                    format!("{base}.{rest}")
                } else {
                    format!("{base}.{s}")
                }
            })
            .collect()
    }
}

/// The rollups and submetrics most metric names end in (Nsight Compute's naming), for a base
/// metric whose submetrics CUPTI does not list.
const COMMON_SUFFIXES: &[&str] = &[
    "sum",
    "avg",
    "min",
    "max",
    "sum.per_second",
    "avg.per_second",
    "sum.per_cycle_active",
    "avg.per_cycle_active",
    "sum.per_cycle_elapsed",
    "avg.per_cycle_elapsed",
    "sum.pct_of_peak_sustained_active",
    "avg.pct_of_peak_sustained_active",
    "sum.pct_of_peak_sustained_elapsed",
    "avg.pct_of_peak_sustained_elapsed",
    "sum.peak_sustained",
    "avg.peak_sustained",
    "ratio",
    "pct",
];

impl MetricCatalog for ChipCatalog {
    /// A name is accepted when its base metric is one the chip lists; a wrong rollup or
    /// submetric is then refused by `cuptiProfilerHostConfigAddMetrics`. Names are not passed to
    /// `cuptiProfilerHostGetMetricProperties` here: on CUPTI 13.0 / H200 a configuration of
    /// several metrics crashed inside libnvperf_host after that call (docs/measurements.md).
    fn contains(&self, name: &str) -> bool {
        let (base, _) = split_metric(name);
        self.bases.contains_key(base)
    }

    fn suggest(&self, name: &str, n: usize) -> Vec<String> {
        let (base, rest) = split_metric(name);
        let bases: Vec<String> = if self.bases.contains_key(base) {
            vec![base.to_string()]
        } else {
            nearest(base, self.base_metrics(), 3)
        };
        let mut candidates: Vec<String> = Vec::new();
        for b in &bases {
            if let Some(r) = rest {
                let same_suffix = format!("{b}.{r}");
                if same_suffix != name && self.contains(&same_suffix) {
                    candidates.push(same_suffix);
                    continue;
                }
            }
            let mut full = self.full_names(b);
            if full.is_empty() {
                // CUPTI 12.9 on a CUDA 13.0 driver lists no submetrics: suggest from the
                // names' grammar; adding the metrics still decides what is valid.
                full = COMMON_SUFFIXES.iter().map(|s| format!("{b}.{s}")).collect();
            }
            {
                candidates.extend(nearest(name, full.iter().map(String::as_str), n));
            }
        }
        nearest_metric(name, candidates.iter().map(String::as_str), n)
    }
}

/// What one collection produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Collected {
    /// The chip.
    pub chip: String,
    /// Range mode used.
    pub range_mode: RangeMode,
    /// Replay mode used.
    pub replay_mode: ReplayMode,
    /// Config passes the metric set needs.
    pub passes: usize,
    /// Application runs (start/stop pairs) the collection took.
    pub runs: usize,
    /// The metrics, in evaluation order.
    pub metrics: Vec<String>,
    /// One entry per range, in counter-data order.
    pub ranges: Vec<RangeValues>,
    /// Ranges CUPTI could not store (more than `max_ranges`).
    pub dropped_ranges: usize,
    /// Auto ranges with a launch recorder: whether every run launched the same kernels in the
    /// same order (user replay assumes it).
    pub launches_consistent: Option<bool>,
}

impl Collected {
    /// The range with this name (`a/c`, or `"0"` for the first auto range).
    pub fn range(&self, name: &str) -> Option<&RangeValues> {
        self.ranges.iter().find(|r| r.name == name)
    }

    /// Names auto ranges from the kernels in launch order (see [`name_auto_ranges`]); returns
    /// how many were named.
    pub fn name_auto_ranges(&mut self, launches: &[Launch]) -> usize {
        name_auto_ranges(&mut self.ranges, launches)
    }
}

/// What [`RangeProfiler::end_pass`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassEnd {
    /// Runs made so far in this collection (1 after the first).
    pub runs: usize,
    /// True when CUPTI has every pass: call [`RangeProfiler::decode`].
    pub all_passes_submitted: bool,
    /// The pass index CUPTI will collect next.
    pub next_pass_index: usize,
    /// The nesting level CUPTI will collect next.
    pub next_nesting_level: usize,
    /// Ranges still open at the end of the run, closed here (unbalanced push/pop).
    pub closed_open_ranges: usize,
}

/// The separator asked of CUPTI between nested range names: a control character no scope name
/// holds, so that a `/` inside a name cannot split it.
const PATH_SEPARATOR: &std::ffi::CStr = c"\x1f";

struct Collection {
    target: Target,
    runs: usize,
    in_pass: bool,
    depth: usize,
    /// User ranges pushed over the whole collection.
    pushed: usize,
    last_stop: Option<StopInfo>,
    recorder: Option<LaunchRecorder>,
    launches: Vec<Vec<Launch>>,
}

/// A Range Profiler on one CUDA context: host side set up once (metrics validated, config image,
/// number of passes known before anything runs), then any number of collections, each
/// `begin` → passes (`start_pass`, `push_range`/`pop_range`, `end_pass`) → `decode`.
///
/// ```no_run
/// use gpu_ledger::counters::{CounterConfig, RangeProfiler};
/// # fn run(ctx: &std::sync::Arc<cudarc::driver::CudaContext>) -> gpu_ledger::Result<()> {
/// let mut rp = RangeProfiler::new(ctx, CounterConfig {
///     metrics: vec!["dram__bytes_read.sum".into(), "gpu__time_duration.sum".into()],
///     ..CounterConfig::default()
/// })?;
/// println!("{} pass(es), {} run(s)", rp.passes(), rp.runs_per_collection());
/// let collected = rp.collect(|rp| {
///     rp.push_range("work")?;
///     // ... launch kernels and synchronize ...
///     rp.pop_range()
/// })?;
/// for r in &collected.ranges {
///     println!("{}: {:?}", r.name, r.values);
/// }
/// # Ok(()) }
/// ```
pub struct RangeProfiler {
    lib: &'static LoadedCupti,
    ctx: Arc<CudaContext>,
    catalog: ChipCatalog,
    config: CounterConfig,
    metrics: Vec<String>,
    dropped: Vec<DroppedMetric>,
    metric_c: Vec<CString>,
    config_image: AlignedBuf,
    passes: usize,
    collection: Option<Collection>,
    flush: Option<L2Flush>,
}

impl RangeProfiler {
    /// Sets up the host side on `ctx`'s device: validates the metric list against the chip
    /// (unknown names are rejected with the nearest valid ones), builds the config image and
    /// reads the number of passes. Nothing is collected yet.
    ///
    /// # Errors
    /// [`Error::Config`] for invalid settings or unknown metrics; the permission, busy and
    /// unsupported-device errors of CUPTI with their fixes (see [`super::Unavailable`]).
    pub fn new(ctx: &Arc<CudaContext>, config: CounterConfig) -> Result<Self> {
        let tracing = if cupti::activity::tracing() {
            cupti::layouts::Tracing::Already
        } else {
            cupti::layouts::Tracing::No
        };
        Self::set_up(ctx, config, tracing)
    }

    /// [`RangeProfiler::new`] for the counters level, which sets it up before its timeline
    /// starts tracing: what the release evaluates wrongly while it traces is refused.
    pub(crate) fn for_profiler(ctx: &Arc<CudaContext>, config: CounterConfig) -> Result<Self> {
        Self::set_up(ctx, config, cupti::layouts::Tracing::SetUpFirst)
    }

    fn set_up(
        ctx: &Arc<CudaContext>,
        config: CounterConfig,
        tracing: cupti::layouts::Tracing,
    ) -> Result<Self> {
        config.validate()?;
        let lib = cupti::api()?;
        let catalog = ChipCatalog::with_lib(lib, ctx)?;
        let resolved = resolve(&config.metrics, &catalog)?;
        super::release::check_release(&config, &resolved.metrics, tracing)?;
        let metric_c = resolved
            .metrics
            .iter()
            .map(|m| CString::new(m.as_str()))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| Error::Config("a metric name holds a NUL byte".into()))?;
        let mut config_image = match catalog.host.config_image(&metric_c) {
            Ok(image) => image,
            Err(e) => {
                // A known base metric with a wrong rollup or submetric: name the culprits and
                // suggest, as for an unknown base.
                let refused: Vec<&str> = resolved
                    .metrics
                    .iter()
                    .map(String::as_str)
                    .filter(|m| !catalog.accepts(m))
                    .collect();
                if refused.is_empty() {
                    return Err(e);
                }
                return Err(super::metrics::refused_metrics_error(&refused, &catalog));
            }
        };
        let passes = ffi::num_passes(lib, &mut config_image)?;
        let flush = match config.cache {
            CacheState::Flushed => Some(L2Flush::new(ctx)?),
            CacheState::AsLeft => None,
        };
        Ok(RangeProfiler {
            lib,
            ctx: ctx.clone(),
            catalog,
            config,
            metrics: resolved.metrics,
            dropped: resolved.dropped,
            metric_c,
            config_image,
            passes,
            collection: None,
            flush,
        })
    }

    /// The chip name.
    pub fn chip(&self) -> &str {
        self.catalog.chip()
    }

    /// The context collections run on.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The chip's catalog (metric properties, base metrics).
    pub fn catalog(&self) -> &ChipCatalog {
        &self.catalog
    }

    /// The metrics collected (presets expanded).
    pub fn metrics(&self) -> &[String] {
        &self.metrics
    }

    /// Optional preset metrics this chip lacks.
    pub fn dropped_metrics(&self) -> &[DroppedMetric] {
        &self.dropped
    }

    /// The configuration.
    pub fn config(&self) -> &CounterConfig {
        &self.config
    }

    /// Config passes the metric set needs (`cuptiProfilerHostGetNumOfPasses`), known before any
    /// collection starts.
    pub fn passes(&self) -> usize {
        self.passes
    }

    /// Runs of the application's work one collection takes (see
    /// [`CounterConfig::runs_per_collection`]).
    pub fn runs_per_collection(&self) -> usize {
        self.config.runs_per_collection(self.passes)
    }

    /// True while a collection is open (between [`begin`](Self::begin) and
    /// [`decode`](Self::decode) or [`abort`](Self::abort)).
    pub fn collecting(&self) -> bool {
        self.collection.is_some()
    }

    /// Opens a collection: enables the Range Profiler on the context, creates the counter-data
    /// image and sets the configuration.
    ///
    /// # Errors
    /// A collection already open; CUPTI failures (permission, busy counters) with their fixes.
    pub fn begin(&mut self) -> Result<()> {
        if self.collection.is_some() {
            return Err(Error::Config(
                "counters: a collection is already open; decode or abort it first".into(),
            ));
        }
        self.ctx.bind_to_thread()?;
        let mut target = Target::enable(self.lib, &self.ctx)?;
        let levels = usize::from(self.config.nesting_levels);
        let tree_nodes =
            u32::try_from(self.config.max_ranges.saturating_mul(levels)).unwrap_or(u32::MAX);
        target.prepare(
            &self.metric_c,
            self.config.max_ranges,
            tree_nodes,
            self.config_image.as_slice(),
        )?;
        target.set_config(
            cupti_range(self.config.range_mode),
            cupti_replay(self.config.replay_mode),
            self.config.max_ranges,
            self.config.nesting_levels,
            1,
            0,
            1,
        )?;
        let recorder = if self.config.record_kernel_names {
            Some(LaunchRecorder::start()?)
        } else {
            None
        };
        self.collection = Some(Collection {
            target,
            runs: 0,
            in_pass: false,
            depth: 0,
            pushed: 0,
            last_stop: None,
            recorder,
            launches: Vec::new(),
        });
        Ok(())
    }

    /// Starts one run of the work (`cuptiRangeProfilerStart`).
    ///
    /// # Errors
    /// No open collection, a run already started, or every pass already submitted.
    pub fn start_pass(&mut self) -> Result<()> {
        self.ctx.bind_to_thread()?;
        let c = open(&mut self.collection, "start_pass")?;
        if c.in_pass {
            return Err(Error::Config(
                "counters: start_pass twice without end_pass".into(),
            ));
        }
        if c.last_stop.is_some_and(|s| s.all_passes_submitted) {
            return Err(Error::Config(
                "counters: every pass is already submitted; call decode".into(),
            ));
        }
        if let Some(r) = &c.recorder {
            r.take();
        }
        c.target.start()?;
        c.in_pass = true;
        Ok(())
    }

    /// Opens a user range (`cuptiRangeProfilerPushRange`); nested pushes make nested ranges.
    ///
    /// # Errors
    /// Auto range mode, no run started, a name with a NUL or U+001F byte; CUPTI failures.
    pub fn push_range(&mut self, name: &str) -> Result<()> {
        if self.config.range_mode != RangeMode::User {
            return Err(Error::Config(
                "counters: push_range needs RangeMode::User".into(),
            ));
        }
        if name.contains('\u{1f}') {
            return Err(Error::Config(format!(
                "counters: range name {name:?} holds U+001F, the path separator"
            )));
        }
        let name_c = CString::new(name)
            .map_err(|_| Error::Config(format!("counters: range name {name:?} holds a NUL")))?;
        // The collection alone is borrowed: the flush is used below.
        let c = open(&mut self.collection, "push_range")?;
        if !c.in_pass {
            return Err(Error::Config("counters: push_range outside a run".into()));
        }
        if c.depth == 0 {
            if let Some(flush) = &self.flush {
                flush.run()?;
            }
        }
        c.target.push_range(&name_c)?;
        c.depth += 1;
        c.pushed += 1;
        Ok(())
    }

    /// Closes the innermost user range (`cuptiRangeProfilerPopRange`).
    ///
    /// # Errors
    /// No open range; CUPTI failures.
    pub fn pop_range(&mut self) -> Result<()> {
        let c = open(&mut self.collection, "pop_range")?;
        if c.depth == 0 {
            return Err(Error::Config(
                "counters: pop_range without an open range".into(),
            ));
        }
        c.target.pop_range()?;
        c.depth -= 1;
        Ok(())
    }

    /// Ends the run (`cuptiRangeProfilerStop`), closing ranges left open first.
    ///
    /// # Errors
    /// No run started; CUPTI failures.
    pub fn end_pass(&mut self) -> Result<PassEnd> {
        self.ctx.bind_to_thread()?;
        let c = open(&mut self.collection, "end_pass")?;
        if !c.in_pass {
            return Err(Error::Config(
                "counters: end_pass without start_pass".into(),
            ));
        }
        let open = c.depth;
        while c.depth > 0 {
            c.target.pop_range()?;
            c.depth -= 1;
        }
        c.in_pass = false;
        let stop = c.target.stop()?;
        c.runs += 1;
        c.last_stop = Some(stop);
        if let Some(r) = &c.recorder {
            c.launches.push(r.take());
        }
        Ok(PassEnd {
            runs: c.runs,
            all_passes_submitted: stop.all_passes_submitted,
            next_pass_index: stop.pass_index,
            next_nesting_level: stop.target_nesting_level,
            closed_open_ranges: open,
        })
    }

    /// Decodes the collection, evaluates every metric for every range, names auto ranges when
    /// kernel names were recorded, and closes the collection (`cuptiRangeProfilerDisable`).
    ///
    /// # Errors
    /// Passes still missing or a run still open; CUPTI failures. The collection is closed in
    /// every case.
    pub fn decode(&mut self) -> Result<Collected> {
        let Some(mut c) = self.collection.take() else {
            return Err(Error::Config(
                "counters: decode without a collection".into(),
            ));
        };
        let result = self.decode_inner(&mut c);
        let disabled = c.target.disable();
        if let Some(r) = c.recorder.take() {
            let _ = r.stop();
        }
        let collected = result?;
        disabled?;
        Ok(collected)
    }

    fn decode_inner(&self, c: &mut Collection) -> Result<Collected> {
        if c.in_pass {
            return Err(Error::Config(
                "counters: decode during a run; call end_pass".into(),
            ));
        }
        if !c.last_stop.is_some_and(|s| s.all_passes_submitted) {
            return Err(Error::Config(format!(
                "counters: decode after {} run(s), but CUPTI still needs passes (expected {} \
                 run(s)); the collection is discarded",
                c.runs,
                self.runs_per_collection()
            )));
        }
        self.ctx.bind_to_thread()?;
        let dropped_ranges = c.target.decode()?;
        let image = c.target.counter_data();
        let n = ffi::counter_data_ranges(self.lib, image)?;
        if n == 0 && dropped_ranges == 0 && c.pushed > 0 {
            // CUPTI 12.9 on a CUDA 13.0 driver returned this, every call succeeding, while another
            // process held the GPU's counters.
            return Err(Error::Config(format!(
                "counters: CUPTI returned no ranges for the {} range(s) pushed and reported no \
                 error; another process may hold the GPU's counters (Nsight Compute, another \
                 Range Profiler, DCGM profiling): stop it, or `dcgmi profile --pause`",
                c.pushed
            )));
        }
        let mut ranges = Vec::with_capacity(n);
        for index in 0..n {
            let raw = ffi::range_name(self.lib, image, index, PATH_SEPARATOR)?;
            let path: Vec<String> = raw.split('\u{1f}').map(str::to_string).collect();
            let values = self.catalog.host.evaluate(image, index, &self.metric_c)?;
            ranges.push(RangeValues {
                index,
                name: path.join("/"),
                path,
                kernel: None,
                launch_index: None,
                values: self.metrics.iter().cloned().zip(values).collect(),
            });
        }
        let launches_consistent =
            (!c.launches.is_empty()).then(|| c.launches.windows(2).all(|w| w[0] == w[1]));
        if let Some(first) = c.launches.first() {
            name_auto_ranges(&mut ranges, first);
        }
        Ok(Collected {
            chip: self.chip().to_string(),
            range_mode: self.config.range_mode,
            replay_mode: self.config.replay_mode,
            passes: self.passes,
            runs: c.runs,
            metrics: self.metrics.clone(),
            ranges,
            dropped_ranges,
            launches_consistent,
        })
    }

    /// Closes an open collection without decoding it (a window cut short).
    pub fn abort(&mut self) {
        if let Some(mut c) = self.collection.take() {
            if c.in_pass {
                while c.depth > 0 && c.target.pop_range().is_ok() {
                    c.depth -= 1;
                }
                let _ = c.target.stop();
            }
            let _ = c.target.disable();
        }
    }

    /// One whole collection: `begin`, then `workload` once per run (it pushes and pops its
    /// ranges and launches the same work each time), the context synchronized after each run,
    /// until CUPTI has every pass; then `decode`.
    ///
    /// # Errors
    /// Any error of the steps or of `workload` (the collection is then aborted), or more runs
    /// than predicted plus a margin.
    pub fn collect<F>(&mut self, mut workload: F) -> Result<Collected>
    where
        F: FnMut(&mut RangeProfiler) -> Result<()>,
    {
        self.begin()?;
        let limit = self.runs_per_collection() * 2 + 2;
        loop {
            let step = (|| {
                self.start_pass()?;
                let w = workload(self);
                let sync = self.ctx.synchronize().map_err(Error::from);
                let end = self.end_pass();
                w?;
                sync?;
                end
            })();
            match step {
                Err(e) => {
                    self.abort();
                    return Err(e);
                }
                Ok(end) if end.all_passes_submitted => break,
                Ok(end) if end.runs >= limit => {
                    self.abort();
                    return Err(Error::Config(format!(
                        "counters: CUPTI still wants passes after {} runs ({} predicted)",
                        end.runs,
                        self.runs_per_collection()
                    )));
                }
                Ok(_) => {}
            }
        }
        self.decode()
    }

    /// Closes any open collection and releases the host side.
    ///
    /// # Errors
    /// None today; kept so that the signature can report teardown failures.
    pub fn finish(mut self) -> Result<()> {
        self.abort();
        Ok(())
    }
}

impl Drop for RangeProfiler {
    fn drop(&mut self) {
        self.abort();
    }
}

/// CUPTI's value for a range mode.
/// The open collection, or the error that names the call made outside one.
fn open<'a>(collection: &'a mut Option<Collection>, what: &str) -> Result<&'a mut Collection> {
    collection.as_mut().ok_or_else(|| {
        Error::Config(format!(
            "counters: {what} outside a collection (call begin first)"
        ))
    })
}

fn cupti_range(mode: RangeMode) -> sys::CUpti_ProfilerRange::Type {
    match mode {
        RangeMode::User => sys::CUpti_ProfilerRange::CUPTI_UserRange,
        RangeMode::Auto => sys::CUpti_ProfilerRange::CUPTI_AutoRange,
    }
}

/// CUPTI's value for a replay mode.
fn cupti_replay(mode: ReplayMode) -> sys::CUpti_ProfilerReplayMode::Type {
    match mode {
        ReplayMode::User => sys::CUpti_ProfilerReplayMode::CUPTI_UserReplay,
        ReplayMode::Kernel => sys::CUpti_ProfilerReplayMode::CUPTI_KernelReplay,
    }
}
