//! The profiler's configuration: the level, where the ledger goes, the CUPTI buffers, when rows
//! are written, NVML, hardware counters and signals.

use std::path::PathBuf;
use std::time::Duration;

use crate::ledger::schema::ConfigRecord;
// NVTX import options live beside the NVTX code (a leaf module), so that the CUPTI layer's NVTX
// importer reads them without importing the configuration (which imports the CUPTI layer's users).
pub use crate::nvtx::NvtxImport;

/// How much the profiler records: cheap and unperturbing first, expensive only on request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Host time per scope; device time from CUDA events for scopes opened on a stream. No CUPTI.
    Scopes,
    /// Plus CUPTI activity records: kernels, copies, memsets, synchronization, allocations.
    Timeline,
    /// Plus hardware counters from CUPTI's Range Profiler on the iterations the window selects
    /// (per scope or per kernel); those iterations are flagged `perturbed`. Needs
    /// [`Config::counters`] ([`ProfilerBuilder::counters`]).
    Counters,
}

impl Level {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Level::Scopes => "scopes",
            Level::Timeline => "timeline",
            Level::Counters => "counters",
        }
    }
}

/// Which thread's scopes a traced call on a thread with no scope of its own is attributed to:
/// the scope open on the followed thread at the instant of the call. Frameworks that launch on
/// their own worker threads get their launches attributed to the phases the application's
/// thread is in; the row counts such kernels as `followed`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Follow {
    /// Follow no thread: such calls go to `(unscoped)`.
    Off,
    /// The thread that calls [`Profiler::step`](crate::Profiler::step); before the first
    /// `step()`, the thread that started the profiler.
    #[default]
    SteppingThread,
    /// The threads of these names (`std::thread::Builder::name`). With several, the scope of the
    /// one that opened or closed a scope last.
    Threads(Vec<String>),
}

impl Follow {
    /// As the ledger header records it.
    pub(crate) fn describe(&self) -> String {
        match self {
            Follow::Off => "off".into(),
            Follow::SteppingThread => "stepping thread".into(),
            Follow::Threads(names) => format!("threads {}", names.join(", ")),
        }
    }
}

/// Environment variable that sets the ledger path when the configuration does not.
pub const LEDGER_PATH_ENV: &str = "GPU_LEDGER_PATH";

/// Environment variable that overrides the configured level at start, so that one binary is
/// measured with and without the profiler: `off` (nothing starts, no ledger is written),
/// `scopes`, `timeline` or `counters` (which needs [`Config::counters`]).
pub const LEVEL_ENV: &str = "GPU_LEDGER_LEVEL";

/// What [`LEVEL_ENV`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LevelOverride {
    /// Profile nothing.
    Off,
    /// Profile at this level instead of the configured one.
    Level(Level),
}

/// Reads [`LEVEL_ENV`]'s `value`: `None` when unset or empty.
///
/// # Errors
/// [`crate::Error::Config`] naming the value and the ones accepted.
pub(crate) fn level_override(
    value: Option<&std::ffi::OsStr>,
) -> crate::Result<Option<LevelOverride>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let text = value.to_string_lossy();
    let level = match text.trim().to_ascii_lowercase().as_str() {
        "" => return Ok(None),
        "off" => LevelOverride::Off,
        "scopes" => LevelOverride::Level(Level::Scopes),
        "timeline" => LevelOverride::Level(Level::Timeline),
        "counters" => LevelOverride::Level(Level::Counters),
        _ => {
            return Err(crate::Error::Config(format!(
                "{LEVEL_ENV}={text:?} is not a level: set it to off, scopes, timeline or \
                 counters, or unset it to use the level the program configures"
            )))
        }
    };
    Ok(Some(level))
}

/// Applies [`LEVEL_ENV`] (read as `value`) to `config`: the level to run at (`None`: off) and
/// where it came from, as the ledger header records it.
///
/// # Errors
/// An unknown value, or `counters` asked of a program that configured no counters.
pub(crate) fn apply_level_override(
    config: &mut Config,
    value: Option<&std::ffi::OsStr>,
) -> crate::Result<Option<&'static str>> {
    match level_override(value)? {
        None => Ok(Some("configuration")),
        Some(LevelOverride::Off) => Ok(None),
        Some(LevelOverride::Level(Level::Counters)) if config.counters.is_none() => {
            Err(crate::Error::Config(format!(
                "{LEVEL_ENV}=counters, but the program configures no hardware counters: they \
                 need a context and metrics (ProfilerBuilder::counters); set {LEVEL_ENV} to \
                 timeline or scopes instead"
            )))
        }
        Some(LevelOverride::Level(level)) => {
            config.level = level;
            if level != Level::Counters {
                // The counters setup goes with the counters level only.
                config.counters = None;
            }
            if level == Level::Scopes {
                // PC samples are attributed through the timeline's kernel records.
                config.pc_sampling = None;
            }
            Ok(Some(LEVEL_ENV))
        }
    }
}

/// NVTX, both ways: gpu-ledger's scopes as NVTX ranges, and the NVTX ranges of libraries and
/// of the application as scopes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nvtx {
    /// Each scope also pushes an NVTX range of its name on its thread (and pops it as it ends),
    /// so that Nsight Systems shows the scopes and `ncu --nvtx --nvtx-include "step/backward/"`
    /// profiles one scope's kernels. With no NVTX tool attached a range is a call through a
    /// null function pointer. Default on.
    pub emit: bool,
    /// NVTX push/pop ranges become scopes, nested under the scope open on their thread (at the
    /// timeline and counters levels, through CUPTI's NVTX callbacks). Default off: it routes
    /// every NVTX call of the process through CUPTI.
    pub import: Option<NvtxImport>,
}

impl Default for Nvtx {
    fn default() -> Self {
        Nvtx {
            emit: true,
            import: None,
        }
    }
}

/// Profiler configuration. Start from [`Config::default`] or
/// [`Profiler::builder`](crate::Profiler::builder).
#[derive(Debug, Clone)]
pub struct Config {
    /// What to record; `GPU_LEDGER_LEVEL` overrides it at start ([`LEVEL_ENV`]).
    pub level: Level,
    /// Where to write the ledger. Default: `$GPU_LEDGER_PATH`, else
    /// `gpu-ledger-<unix seconds>-<pid>[-rank<N>].jsonl` in the current directory.
    pub ledger_path: Option<PathBuf>,
    /// CUPTI activity buffers allocated at start.
    pub buffers: usize,
    /// Most CUPTI buffers the pool may grow to before records are dropped.
    pub max_buffers: usize,
    /// Bytes per CUPTI buffer.
    pub buffer_bytes: usize,
    /// How long an ended iteration waits for its GPU records before it is written anyway.
    pub settle: Duration,
    /// How often the collector asks CUPTI for completed records while iterations wait. Each
    /// request is a `cuptiActivityFlushAll`, which slows the application's launches, so it is
    /// rare (`docs/overhead.md` has the measured cost). Default 1 s: a row is written about a
    /// second after its iteration ends, well within `settle`; it is capped at half of `settle`.
    pub flush_interval: Duration,
    /// On a start failure, run unprofiled (and say why in the ledger) instead of returning `Err`.
    pub fail_open: bool,
    /// Sample clocks, power, temperature and energy with NVML (all levels).
    pub nvml: bool,
    /// NVML sampling period: 20 ms by default, five samples per NVML update (100 ms).
    pub nvml_period: Duration,
    /// How often the sampler reads NVML's energy counter (a call of several ms), `None` for
    /// never: energy is then integrated from power samples. Default 500 ms.
    pub nvml_energy_period: Option<Duration>,
    /// Useful work per iteration (tokens, images, bytes), for energy per unit of work.
    pub work_per_iteration: Option<f64>,
    /// Keep every activity and scope span in the rows (for `gpu-ledger trace`); rows grow with
    /// the number of launches.
    pub record_activities: bool,
    /// Hardware counters (with [`Level::Counters`]): context, metrics, ranges, window.
    pub counters: Option<crate::counters::CountersSetup>,
    /// Warp stall reasons and hot source lines from PC sampling, on a window of iterations (at
    /// the timeline and counters levels, outside the counters window). Sampled iterations are
    /// flagged `perturbed`: CUPTI's sampling lengthens every kernel launched while it runs
    /// (docs/pc-sampling.md).
    pub pc_sampling: Option<crate::pcsampling::PcSamplingSetup>,
    /// On SIGINT or SIGTERM, finish the ledger before the process dies: every iteration already
    /// ended by [`Profiler::step`](crate::Profiler::step) gets its row (a partial row for the
    /// open one, as at [`Profiler::finish`](crate::Profiler::finish)), then the trailer, with the
    /// warning `run ended by SIGTERM (flush_on_signal)`. Then the signal is raised again with its default action, so the
    /// process ends with the same status as without the profiler.
    ///
    /// Off by default: a library should not take a process's signals unasked. When on:
    /// - a signal that already has a handler, or is ignored, is left alone, and the ledger header
    ///   says so (an application with its own handler should have it end the loop and call
    ///   [`Profiler::finish`](crate::Profiler::finish));
    /// - the handler only wakes a thread (`gpu-ledger-signal`), which does the work;
    /// - finishing is bounded: after 5 s (GPU records that never arrive, a stuck disk) the signal
    ///   ends the process anyway, and the ledger is then valid up to its last whole line;
    /// - [`Profiler::finish`](crate::Profiler::finish) (or drop) restores the default
    ///   disposition and stops the thread, so a later profiler in the same process starts clean.
    ///
    /// Linux only: elsewhere the option is accepted, does nothing, and the header says so.
    pub flush_on_signal: bool,
    /// The thread whose open scope a launch, copy or memset on a thread with no scope of its own
    /// is attributed to ([`Follow`]); default: the thread that calls `step()`. At the timeline and
    /// counters levels; it costs one atomic load per traced call on a thread with no open scope.
    pub follow: Follow,
    /// NVTX ranges out of scopes, and scopes out of NVTX ranges ([`Nvtx`]).
    pub nvtx: Nvtx,
    /// At [`Level::Timeline`], trace only the iterations this selects; the others get the rows
    /// of [`Level::Scopes`] (host times, scopes, NVML), flagged `untraced`. `None`: trace every
    /// iteration.
    pub timeline_sampling: Option<TimelineSampling>,
    /// At the timeline and counters levels, measure at start how much device time CUPTI's
    /// tracing adds per kernel, and estimate in every traced row what it added
    /// (`tracing_added_ns`). Default on; it takes about 110 ms at start (docs/overhead.md).
    pub calibrate_tracing: bool,
    /// Publish each row, as the collector writes it, through the `metrics` facade (feature
    /// `metrics`): to the recorder the application installed (its Prometheus, StatsD or
    /// OpenTelemetry exporter), or the options' own. `None` (the default): no metrics.
    #[cfg(feature = "metrics")]
    pub metrics: Option<crate::metrics::MetricsOptions>,
    /// At the timeline and counters levels, split each device's idle time by cause, list the
    /// largest gaps and the host calls that block or allocate, and read the launching threads'
    /// run-queue time ([`IdleConfig`], docs/idle.md). Default on.
    pub idle: IdleConfig,
}

/// What the idle-cause split records ([`Config::idle`]).
///
/// With it on, the API callback reads the host clock at each outermost traced call's entry and
/// exit (two TSC reads where scopes read the TSC); off, rows carry no `idle`, no
/// `host_inventory` and no run-queue figures, and the callback reads no clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleConfig {
    /// Split idle time by cause (default on).
    pub enabled: bool,
    /// Largest gaps kept per device and row, longest first (default 5; 0: none).
    pub largest_gaps: usize,
    /// A device-to-host copy of at most this many bytes is an `.item()`-like read in the
    /// inventory (`small_dtoh`; default 1024).
    pub small_read_bytes: u64,
    /// The dispatch floor to use instead of measuring it (the calibration's back-to-back empty
    /// kernels, else the run's own gaps; docs/idle.md).
    pub dispatch_floor: Option<Duration>,
    /// Read each launching thread's run-queue time per iteration from
    /// `/proc/self/task/<tid>/schedstat` (Linux; default on).
    pub schedstat: bool,
}

impl Default for IdleConfig {
    fn default() -> Self {
        IdleConfig {
            enabled: true,
            largest_gaps: 5,
            small_read_bytes: 1024,
            dispatch_floor: None,
            schedstat: true,
        }
    }
}

impl IdleConfig {
    /// As the ledger header records it.
    pub(crate) fn describe(&self) -> String {
        if !self.enabled {
            return "off".into();
        }
        let floor = match self.dispatch_floor {
            Some(f) => format!("{} ns", f.as_nanos()),
            None => "measured".into(),
        };
        format!(
            "on: largest_gaps={} small_read_bytes={} floor={floor} schedstat={}",
            self.largest_gaps,
            self.small_read_bytes,
            if self.schedstat { "on" } else { "off" }
        )
    }
}

/// Which iterations [`Level::Timeline`] traces when not all of them: one in `every` from
/// `first`, and every iteration of `window`. Untraced iterations cost what [`Level::Scopes`]
/// costs: CUPTI's activity kinds are off and its callback returns at once.
///
/// ```
/// use gpu_ledger::TimelineSampling;
/// let s = TimelineSampling::every(100).starting_at(5).and_window(1000..1010);
/// assert!(s.traces(5) && s.traces(105) && s.traces(1003));
/// assert!(!s.traces(6) && !s.traces(0));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TimelineSampling {
    /// Trace iterations `first`, `first + every`, `first + 2 × every`, …; `None`: only the
    /// window.
    pub every: Option<u64>,
    /// The first iteration `every` traces.
    pub first: u64,
    /// Trace every iteration in this range as well.
    pub window: Option<std::ops::Range<u64>>,
}

impl TimelineSampling {
    /// One iteration in `every`, from iteration 0.
    pub fn every(every: u64) -> Self {
        TimelineSampling {
            every: Some(every),
            first: 0,
            window: None,
        }
    }
    /// Only the iterations of `window`.
    pub fn window(window: std::ops::Range<u64>) -> Self {
        TimelineSampling {
            every: None,
            first: 0,
            window: Some(window),
        }
    }
    /// The first iteration `every` traces.
    #[must_use]
    pub fn starting_at(mut self, first: u64) -> Self {
        self.first = first;
        self
    }
    /// Also every iteration of `window`.
    #[must_use]
    pub fn and_window(mut self, window: std::ops::Range<u64>) -> Self {
        self.window = Some(window);
        self
    }
    /// Whether iteration `index` is traced.
    pub fn traces(&self, index: u64) -> bool {
        let periodic = self
            .every
            .is_some_and(|k| index >= self.first && (index - self.first) % k.max(1) == 0);
        periodic || self.window.as_ref().is_some_and(|w| w.contains(&index))
    }
    /// As the ledger header records it.
    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(k) = self.every {
            parts.push(format!("1 in {k} from iteration {}", self.first));
        }
        if let Some(w) = &self.window {
            parts.push(format!("iterations {}..{}", w.start, w.end));
        }
        parts.join(", and ")
    }
    /// # Errors
    /// [`crate::Error::Config`] for a sampling that traces nothing.
    pub(crate) fn validate(&self) -> crate::Result<()> {
        let bad = |why: &str| Err(crate::Error::Config(format!("timeline sampling: {why}")));
        match (self.every, &self.window) {
            (Some(0), _) => {
                bad("every is 0; give 1 to trace every iteration, or 100 for one in 100")
            }
            (None, None) => bad(
                "neither every nor window is set, so no iteration is traced; set \
                 one, or leave Config::timeline_sampling unset to trace every iteration",
            ),
            (None, Some(w)) if w.is_empty() => bad(&format!(
                "the window {}..{} is empty and every is unset, so no iteration is traced",
                w.start, w.end
            )),
            _ => Ok(()),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            level: Level::Timeline,
            ledger_path: None,
            buffers: 8,
            max_buffers: 64,
            buffer_bytes: 4 << 20,
            settle: Duration::from_secs(2),
            flush_interval: Duration::from_millis(1000),
            fail_open: false,
            nvml: true,
            nvml_period: crate::nvml::DEFAULT_SAMPLE_PERIOD,
            nvml_energy_period: Some(crate::nvml::DEFAULT_ENERGY_PERIOD),
            work_per_iteration: None,
            record_activities: false,
            counters: None,
            pc_sampling: None,
            flush_on_signal: false,
            follow: Follow::default(),
            nvtx: Nvtx::default(),
            timeline_sampling: None,
            calibrate_tracing: true,
            #[cfg(feature = "metrics")]
            metrics: None,
            idle: IdleConfig::default(),
        }
    }
}

/// Builds a [`Profiler`](crate::Profiler).
#[derive(Debug, Clone, Default)]
#[must_use = "a ProfilerBuilder does nothing until start(): call it and bind the Profiler"]
pub struct ProfilerBuilder {
    pub(crate) config: Config,
}

impl ProfilerBuilder {
    /// Sets the level.
    pub fn level(mut self, level: Level) -> Self {
        self.config.level = level;
        self
    }
    /// Sets the ledger path.
    pub fn ledger_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.ledger_path = Some(path.into());
        self
    }
    /// Sets how long an ended iteration waits for its GPU records.
    pub fn settle(mut self, settle: Duration) -> Self {
        self.config.settle = settle;
        self
    }
    /// Sets the CUPTI buffer pool: buffers at start, maximum, bytes each.
    pub fn buffers(mut self, initial: usize, max: usize, bytes: usize) -> Self {
        self.config.buffers = initial;
        self.config.max_buffers = max;
        self.config.buffer_bytes = bytes;
        self
    }
    /// Sets how often the collector asks CUPTI for completed records while an iteration waits
    /// for them (each request is a `cuptiActivityFlushAll`).
    pub fn flush_interval(mut self, interval: Duration) -> Self {
        self.config.flush_interval = interval;
        self
    }
    /// Turns NVML sampling on or off.
    pub fn nvml(mut self, on: bool) -> Self {
        self.config.nvml = on;
        self
    }
    /// How often NVML's energy counter is read (`None`: never, energy integrated from power);
    /// see [`Config::nvml_energy_period`].
    pub fn nvml_energy_period(mut self, period: Option<Duration>) -> Self {
        self.config.nvml_energy_period = period;
        self
    }
    /// Useful work per iteration (tokens, images, bytes), for energy per unit of work.
    pub fn work_per_iteration(mut self, work: f64) -> Self {
        self.config.work_per_iteration = Some(work);
        self
    }
    /// Keeps every activity and scope span in the rows, for timeline traces.
    pub fn record_activities(mut self, on: bool) -> Self {
        self.config.record_activities = on;
        self
    }
    /// Collects hardware counters as `setup` says and sets the level to [`Level::Counters`].
    ///
    /// ```no_run
    /// use gpu_ledger::counters::{CounterConfig, CounterWindow, CountersSetup, RangeMode};
    /// # fn f(ctx: &std::sync::Arc<cudarc::driver::CudaContext>) -> gpu_ledger::Result<()> {
    /// let mut setup = CountersSetup::new(ctx, CounterConfig {
    ///     metrics: vec!["speed_of_light".into()],
    ///     range_mode: RangeMode::User, // one range per scope
    ///     ..CounterConfig::default()
    /// });
    /// setup.window = CounterWindow { skip: 10, collections: 1 };
    /// let profiler = gpu_ledger::Profiler::builder().counters(setup).start()?;
    /// # Ok(()) }
    /// ```
    pub fn counters(mut self, setup: crate::counters::CountersSetup) -> Self {
        self.config.level = Level::Counters;
        self.config.counters = Some(setup);
        self
    }
    /// PC-samples the iterations of `setup`'s window: stall reasons per kernel and per scope,
    /// and the hottest source lines, in those iterations' rows (`stalls`). Needs
    /// [`Level::Timeline`] or [`Level::Counters`].
    ///
    /// ```no_run
    /// use gpu_ledger::pcsampling::{PcSamplingSetup, PcSamplingWindow};
    /// # fn f(ctx: &std::sync::Arc<cudarc::driver::CudaContext>) -> gpu_ledger::Result<()> {
    /// let mut setup = PcSamplingSetup::new(ctx);
    /// setup.window = PcSamplingWindow { skip: 10, iterations: 2 };
    /// let profiler = gpu_ledger::Profiler::builder()
    ///     .level(gpu_ledger::Level::Timeline)
    ///     .pc_sampling(setup)
    ///     .start()?;
    /// # Ok(()) }
    /// ```
    pub fn pc_sampling(mut self, setup: crate::pcsampling::PcSamplingSetup) -> Self {
        self.config.pc_sampling = Some(setup);
        self
    }
    /// Runs unprofiled instead of failing when the profiler cannot start.
    pub fn fail_open(mut self, yes: bool) -> Self {
        self.config.fail_open = yes;
        self
    }
    /// On SIGINT or SIGTERM, finishes the ledger and then lets the signal end the process (off
    /// by default; Linux only). See [`Config::flush_on_signal`].
    pub fn flush_on_signal(mut self, on: bool) -> Self {
        self.config.flush_on_signal = on;
        self
    }
    /// Sets which thread's open scope a call on a thread with no scope of its own is attributed
    /// to. See [`Config::follow`].
    pub fn follow(mut self, follow: Follow) -> Self {
        self.config.follow = follow;
        self
    }
    /// Turns the NVTX range each scope pushes on or off (on by default). See [`Nvtx::emit`].
    pub fn nvtx_emit(mut self, on: bool) -> Self {
        self.config.nvtx.emit = on;
        self
    }
    /// Imports NVTX ranges as scopes as `import` says (off by default). See [`Nvtx::import`].
    pub fn nvtx_import(mut self, import: NvtxImport) -> Self {
        self.config.nvtx.import = Some(import);
        self
    }
    /// Traces only the iterations `sampling` selects. See [`Config::timeline_sampling`].
    pub fn sample_timeline(mut self, sampling: TimelineSampling) -> Self {
        self.config.timeline_sampling = Some(sampling);
        self
    }
    /// Turns the start-up calibration of tracing's own device time on or off (on by default).
    /// See [`Config::calibrate_tracing`].
    pub fn calibrate_tracing(mut self, on: bool) -> Self {
        self.config.calibrate_tracing = on;
        self
    }
    /// Publishes each row as metrics, as `options` say (feature `metrics`). Install the
    /// application's exporter before [`start`](Self::start): rows published before it is
    /// installed reach no recorder (the ledger keeps them).
    ///
    /// ```no_run
    /// use gpu_ledger::metrics::MetricsOptions;
    /// let profiler = gpu_ledger::Profiler::builder()
    ///     .metrics(MetricsOptions::default())
    ///     .start()?;
    /// # Ok::<(), gpu_ledger::Error>(())
    /// ```
    #[cfg(feature = "metrics")]
    pub fn metrics(mut self, options: crate::metrics::MetricsOptions) -> Self {
        self.config.metrics = Some(options);
        self
    }

    /// Turns the split of idle time by cause on or off (on by default), and with it the host
    /// clock reads at each traced call. See [`Config::idle`].
    pub fn idle_causes(mut self, on: bool) -> Self {
        self.config.idle.enabled = on;
        self
    }
    /// Sets what the idle-cause split records. See [`IdleConfig`].
    pub fn idle(mut self, idle: IdleConfig) -> Self {
        self.config.idle = idle;
        self
    }
}

/// Where the ledger goes: the configured path, else `$GPU_LEDGER_PATH`, else a name of its own
/// in the current directory.
pub(crate) fn resolve_ledger_path(configured: Option<PathBuf>) -> PathBuf {
    if let Some(p) = configured {
        return p;
    }
    if let Some(p) = std::env::var_os(LEDGER_PATH_ENV) {
        return PathBuf::from(p);
    }
    let secs = crate::clock::unix_ns() / 1_000_000_000;
    let rank = crate::rank::from_env()
        .map(|r| format!("-rank{}", r.rank))
        .unwrap_or_default();
    PathBuf::from(format!(
        "gpu-ledger-{secs}-{}{rank}.jsonl",
        std::process::id()
    ))
}

/// The configuration as the ledger header records it.
pub(crate) fn config_record(config: &Config) -> ConfigRecord {
    ConfigRecord {
        level: config.level.name().to_string(),
        buffer_count: config.buffers,
        buffer_bytes: config.buffer_bytes,
        settle_ms: config.settle.as_millis() as u64,
        nvml_period_ms: config.nvml.then_some(config.nvml_period.as_millis() as u64),
        nvml_energy_period_ms: config
            .nvml
            .then_some(config.nvml_energy_period.map(|p| p.as_millis() as u64))
            .flatten(),
        counter_iterations: None,
        record_activities: config.record_activities,
        follow: Some(config.follow.describe()),
        level_source: None,
        nvtx: None,
        timeline_sampling: config
            .timeline_sampling
            .as_ref()
            .map(TimelineSampling::describe),
        tracing_calibration: None,
        pc_sampling: None,
        metrics: metrics_record(config),
        idle_causes: (config.level >= Level::Timeline).then(|| config.idle.describe()),
    }
}

/// The metrics options as the header records them.
fn metrics_record(config: &Config) -> Option<String> {
    #[cfg(feature = "metrics")]
    if let Some(options) = &config.metrics {
        return Some(options.describe());
    }
    let _ = config;
    None
}

#[cfg(test)]
mod tests {
    use super::TimelineSampling;

    #[test]
    fn sampling_traces_one_in_k_from_its_first_iteration_and_its_window() {
        let s = TimelineSampling::every(100).starting_at(3);
        let traced: Vec<u64> = (0..400).filter(|&i| s.traces(i)).collect();
        assert_eq!(traced, vec![3, 103, 203, 303]);
        let w = TimelineSampling::window(10..12);
        assert!(!w.traces(9) && w.traces(10) && w.traces(11) && !w.traces(12));
        let both = TimelineSampling::every(50).and_window(7..8);
        assert!(both.traces(0) && both.traces(7) && both.traces(50) && !both.traces(8));
        assert_eq!(
            both.describe(),
            "1 in 50 from iteration 0, and iterations 7..8"
        );
    }

    #[test]
    fn a_sampling_that_traces_nothing_is_refused_with_the_fix() {
        for (s, words) in [
            (TimelineSampling::every(0), "every is 0"),
            (TimelineSampling::default(), "neither every nor window"),
            (TimelineSampling::window(5..5), "is empty"),
        ] {
            let e = s.validate().expect_err("refused").to_string();
            assert!(e.contains(words), "{e}");
        }
        assert!(TimelineSampling::every(1).validate().is_ok());
    }
}
