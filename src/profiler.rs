//! The profiler: configuration, start and finish, iteration boundaries, and the state scopes and
//! the collector share.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;
use parking_lot::RwLock;

use crate::activity::calls::{ApiCalls, CapturedCall};
use crate::activity::pool::BufferPool;
use crate::activity::{ActivityShared, ActivityStats, TimelineSession};
use crate::collector::{self, Finish, IterationEnd};
use crate::counters::window::CounterState;
use crate::cupti;
use crate::error::{Error, Result};
use crate::events::EventPool;
use crate::host_clock::HostClock;
use crate::ledger::schema::{ConfigRecord, Header, LedgerLine, Trailer, SCHEMA_VERSION};
use crate::ledger::writer::LedgerWriter;
use crate::loader::LoadedCupti;
use crate::scope::{self, PathTable, ScopeGuard, ScopeRecord, ScopeSender, ScopeSlot};

/// How much the profiler records (book ch. 1, 3, 6: cheap first, expensive on request).
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
    fn name(self) -> &'static str {
        match self {
            Level::Scopes => "scopes",
            Level::Timeline => "timeline",
            Level::Counters => "counters",
        }
    }
}

/// Environment variable that sets the ledger path when the configuration does not.
pub const LEDGER_PATH_ENV: &str = "GPU_LEDGER_PATH";

/// Profiler configuration. Start from [`Config::default`] or [`Profiler::builder`].
#[derive(Debug, Clone)]
pub struct Config {
    /// What to record.
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
    /// request is a `cuptiActivityFlushAll`, which slows the application's launches: on the H200
    /// a realistic step ran +1.87 % slower than without the profiler at 20 ms and +1.16 % at 1 s
    /// (docs/overhead.md). Default 1 s: a row is written about a second after its iteration
    /// ends, well within `settle`; it is capped at half of `settle`.
    pub flush_interval: Duration,
    /// On a start failure, run unprofiled (and say why in the ledger) instead of returning `Err`.
    pub fail_open: bool,
    /// Sample clocks, power, temperature and energy with NVML (all levels).
    pub nvml: bool,
    /// NVML sampling period (see `nvml` module docs for why 20 ms).
    pub nvml_period: Duration,
    /// How often the sampler reads NVML's energy counter (a 4 ms call on the H200), `None` for
    /// never: energy is then integrated from power samples. Default 500 ms (`nvml` module docs).
    pub nvml_energy_period: Option<Duration>,
    /// Useful work per iteration (tokens, images, bytes), for energy per unit of work.
    pub work_per_iteration: Option<f64>,
    /// Keep every activity and scope span in the rows (for `gpu-ledger trace`); rows grow with
    /// the number of launches.
    pub record_activities: bool,
    /// Hardware counters (with [`Level::Counters`]): context, metrics, ranges, window.
    pub counters: Option<crate::counters::CountersSetup>,
    /// On SIGINT or SIGTERM, finish the ledger before the process dies: every iteration already
    /// ended by [`Profiler::step`] gets its row (a partial row for the open one, as at
    /// [`Profiler::finish`]), then the trailer, with the warning `run ended by SIGTERM
    /// (flush_on_signal)`. Then the signal is raised again with its default action, so the
    /// process ends with the same status as without the profiler.
    ///
    /// Off by default: a library should not take a process's signals unasked. When on:
    /// - a signal that already has a handler, or is ignored, is left alone, and the ledger header
    ///   says so (an application with its own handler should have it end the loop and call
    ///   [`Profiler::finish`]);
    /// - the handler only wakes a thread (`gpu-ledger-signal`), which does the work;
    /// - finishing is bounded: after 5 s (GPU records that never arrive, a stuck disk) the signal
    ///   ends the process anyway, and the ledger is then valid up to its last whole line;
    /// - [`Profiler::finish`] (or drop) restores the default disposition and stops the thread,
    ///   so a later profiler in the same process starts clean.
    ///
    /// Linux only: elsewhere the option is accepted, does nothing, and the header says so.
    pub flush_on_signal: bool,
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
            flush_on_signal: false,
        }
    }
}

/// Builds a [`Profiler`].
#[derive(Debug, Clone, Default)]
pub struct ProfilerBuilder {
    config: Config,
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
    /// How often NVML's energy counter is read (`None`: never, energy integrated from power).
    /// A read costs about 4 ms of the sampler thread on the H200; see `Config::nvml_energy_period`.
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
    /// Starts the profiler.
    ///
    /// # Errors
    /// See [`Profiler::start`].
    pub fn start(self) -> Result<Profiler> {
        Profiler::start(self.config)
    }
}

/// State shared by the application's threads (scopes, `step`) and the collector.
pub(crate) struct Running {
    /// The run's origin and the clock scopes read.
    pub(crate) clock: HostClock,
    pub(crate) cupti: Option<&'static LoadedCupti>,
    pub(crate) paths: PathTable,
    pub(crate) events: EventPool,
    /// `step()`'s messages; the collector polls them (see [`IterationEnd`]).
    control: crossbeam_channel::Sender<IterationEnd>,
    /// The one `Finish` message; the collector sleeps on this channel.
    finish: crossbeam_channel::Sender<Finish>,
    /// Each scope thread's slot, with gpu-ledger's index of the thread.
    thread_slots: parking_lot::Mutex<Vec<(u32, Arc<ScopeSlot>)>>,
    /// Time the application's threads spent inside `step()`, ns (the trailer's `step_ns`).
    pub(crate) step_ns: AtomicU64,
    /// The open iteration, the launch, copy and memset calls made so far (counted by CUPTI's
    /// callback at the timeline level), and the calls it captured.
    calls: Arc<ApiCalls>,
    /// The counters level, when it was set up; taken at shutdown.
    counters: parking_lot::Mutex<Option<CounterState>>,
    /// Path id of [`COUNTERS_SCOPE`]: the Range Profiler's own kernels (CUPTI launches `WaitNs`
    /// when user-replay passes start and stop) are attributed there, not to `(unscoped)`.
    pub(crate) counters_path: u32,
    /// False once shutdown began: `step()` then sends nothing (with `flush_on_signal` the
    /// signal thread can shut down while the application still steps). `step()` holds the read
    /// side while it sends, so no iteration end reaches the collector after `Finish`.
    open: RwLock<bool>,
    /// Warnings for the trailer that shutdown adds (the signal that ended the run).
    end_warnings: parking_lot::Mutex<Vec<String>>,
}

/// The scope the counters level's own GPU work is attributed to.
pub const COUNTERS_SCOPE: &str = "(gpu-ledger counters)";

impl Running {
    pub(crate) fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }
    pub(crate) fn iteration(&self) -> u64 {
        self.calls.iteration.load(Ordering::Relaxed)
    }
    /// The calls the callback captured and the open iteration (scope threads keep a handle).
    pub(crate) fn calls(&self) -> &Arc<ApiCalls> {
        &self.calls
    }
    /// Takes every thread's captured API calls.
    pub(crate) fn drain_calls(&self, out: &mut Vec<CapturedCall>) {
        self.calls.drain_into(out);
    }
    /// Calls the callback could not hand to their thread's ring.
    pub(crate) fn calls_lost(&self) -> u64 {
        self.calls.lost.load(Ordering::Relaxed)
    }
    /// A slot for the calling thread's closed scopes, registered for the collector to drain;
    /// returns its sending end.
    pub(crate) fn register_thread(&self, thread: u32) -> ScopeSender {
        let (slot, sender) = ScopeSlot::new(crate::scope::RING_CAPACITY);
        self.thread_slots.lock().push((thread, slot));
        sender
    }
    /// Takes every thread's closed scopes. The list's lock is held while draining: only a
    /// thread's first scope of a run takes it too (to register).
    pub(crate) fn drain_scopes(&self, out: &mut Vec<ScopeRecord>) {
        for (thread, slot) in self.thread_slots.lock().iter() {
            slot.drain_map_into(out, |closed| closed.into_record(*thread));
        }
    }
    /// Whether CUPTI's callback captures API calls (the timeline and counters levels), and so
    /// reads the scope path a thread's calls are attributed to.
    #[inline]
    pub(crate) fn captures_calls(&self) -> bool {
        self.cupti.is_some()
    }
    /// A scope was entered: a user range when a counters pass runs on this thread. Returns the
    /// pass to give back to [`counter_pop`](Self::counter_pop), 0 when none.
    pub(crate) fn counter_push(&self, name: &str) -> u64 {
        self.with_counters(|c| c.push(name)).unwrap_or(0)
    }
    pub(crate) fn counter_pop(&self, pass: u64) {
        self.with_counters(|c| c.pop(pass));
    }
    /// Runs `f` on the counters state, when counters are on. (Pushing an external-correlation
    /// id around these calls does not reach CUPTI's own kernels, which carry no API record,
    /// and it emptied a kernel-replay iteration in run 25; the collector moves those kernels
    /// to [`COUNTERS_SCOPE`] by name instead.)
    fn with_counters<T>(&self, f: impl FnOnce(&mut CounterState) -> T) -> Option<T> {
        // No lock on `step()` when counters were never set up (their scope path exists iff so).
        if self.counters_path == 0 {
            return None;
        }
        self.counters.lock().as_mut().map(f)
    }
    fn cupti_now(&self) -> Option<u64> {
        self.cupti.and_then(|lib| cupti::timestamp(lib).ok())
    }
    /// Shared state for a collector driven by hand ([`crate::collector::OfflineCollector`]): no
    /// CUPTI library, no counters, an empty path table, and no collector listening to `step()`
    /// (nothing here sends to it). Not registered as the current profiler, so scopes stay off.
    pub(crate) fn offline() -> Arc<Running> {
        let (control, _) = crossbeam_channel::unbounded();
        let (finish, _) = crossbeam_channel::bounded(1);
        Arc::new(Running {
            clock: HostClock::monotonic(Instant::now()),
            cupti: None,
            paths: PathTable::default(),
            events: EventPool::default(),
            control,
            finish,
            thread_slots: parking_lot::Mutex::new(Vec::new()),
            step_ns: AtomicU64::new(0),
            calls: Arc::new(ApiCalls::default()),
            counters: parking_lot::Mutex::new(None),
            counters_path: 0,
            open: RwLock::new(false),
            end_warnings: parking_lot::Mutex::new(Vec::new()),
        })
    }
    /// The trailer warnings shutdown added (the collector takes them when it writes the trailer).
    pub(crate) fn take_end_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *self.end_warnings.lock())
    }
}

static CURRENT: RwLock<Option<Arc<Running>>> = RwLock::new(None);

/// The running profiler's shared state, if any.
pub(crate) fn current() -> Option<Arc<Running>> {
    CURRENT.read().clone()
}

/// What a finished run produced.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// Where the ledger was written.
    pub ledger_path: PathBuf,
    /// The trailer that closes the ledger.
    pub trailer: Trailer,
}

/// An in-process GPU profiler. One runs per process at a time.
///
/// ```no_run
/// use gpu_ledger::{Level, Profiler};
/// let profiler = Profiler::builder().level(Level::Timeline).ledger_path("run.jsonl").start()?;
/// for _ in 0..10 {
///     let _step = Profiler::scope("step");
///     {
///         let _fwd = Profiler::scope("forward");
///         // launch kernels ...
///     }
///     drop(_step);
///     profiler.step();
/// }
/// let summary = profiler.finish()?;
/// println!("ledger at {}", summary.ledger_path.display());
/// # Ok::<(), gpu_ledger::Error>(())
/// ```
pub struct Profiler {
    /// The running profiler's shared state (`None` when inert, and once finished).
    running: Option<Arc<Running>>,
    /// What shutdown takes, shared with the signal thread.
    slot: Arc<Slot>,
    /// SIGINT/SIGTERM handling (`flush_on_signal`), stopped after shutdown.
    signals: Option<crate::signals::Watch>,
    ledger_path: PathBuf,
    /// Why profiling is off, when `fail_open` kept the application running.
    disabled_reason: Option<String>,
}

impl std::fmt::Debug for Profiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profiler")
            .field("ledger_path", &self.ledger_path)
            .field("running", &self.running.is_some())
            .field("disabled_reason", &self.disabled_reason)
            .finish()
    }
}

struct Inner {
    running: Arc<Running>,
    session: Option<TimelineSession>,
    collector: Option<JoinHandle<()>>,
    writer: Option<LedgerWriter>,
    trailer_rx: crossbeam_channel::Receiver<Trailer>,
}

/// How long `finish()` waits for a shutdown that the signal thread began (the signal ends the
/// process within [`crate::signals::FLUSH_BOUND`]).
const FINISH_WAIT: Duration = Duration::from_secs(10);

/// The running profiler's parts, shut down exactly once: by `finish()` or drop, or by the
/// signal thread (`flush_on_signal`), whichever comes first; the other waits for it.
struct Slot {
    state: parking_lot::Mutex<SlotState>,
    changed: parking_lot::Condvar,
}

enum SlotState {
    /// Not (yet) running: starting, inert, or failed to start.
    Empty,
    Running(Inner),
    Stopping,
    /// Shut down; the trailer that was written.
    Stopped(Box<Trailer>),
}

impl Slot {
    fn new() -> Arc<Slot> {
        Arc::new(Slot {
            state: parking_lot::Mutex::new(SlotState::Empty),
            changed: parking_lot::Condvar::new(),
        })
    }

    /// Shuts the profiler down (adding `end_warning` to the trailer) if it runs; if a shutdown
    /// is under way, waits for it at most `wait`. The trailer and the first error; `None` when
    /// nothing ran or the wait timed out.
    fn shut_down(
        &self,
        end_warning: Option<String>,
        wait: Duration,
    ) -> Option<(Trailer, Option<Error>)> {
        let deadline = Instant::now() + wait;
        let mut state = self.state.lock();
        loop {
            match std::mem::replace(&mut *state, SlotState::Stopping) {
                SlotState::Running(inner) => {
                    drop(state);
                    let (trailer, err) = shutdown(inner, end_warning);
                    *self.state.lock() = SlotState::Stopped(Box::new(trailer.clone()));
                    self.changed.notify_all();
                    return Some((trailer, err));
                }
                SlotState::Stopping => {
                    if self.changed.wait_until(&mut state, deadline).timed_out() {
                        return None;
                    }
                }
                SlotState::Stopped(trailer) => {
                    *state = SlotState::Stopped(trailer.clone());
                    return Some((*trailer, None));
                }
                SlotState::Empty => {
                    *state = SlotState::Empty;
                    return None;
                }
            }
        }
    }
}

impl Profiler {
    /// A builder with the default configuration.
    pub fn builder() -> ProfilerBuilder {
        ProfilerBuilder::default()
    }

    /// Enters a scope on the calling thread; it ends when the guard drops. Nested scopes form
    /// paths (`step/backward`). Costs one atomic load when no profiler runs.
    #[inline]
    pub fn scope(name: impl Into<Cow<'static, str>>) -> ScopeGuard<'static> {
        if !scope::ENABLED.load(Ordering::Relaxed) {
            return ScopeGuard::inert(None);
        }
        ScopeGuard::enter(name.into(), None)
    }

    /// Enters a scope whose device time is also measured by timing events recorded on `stream`
    /// at entry and exit (two `cuEventRecord` calls; the events are recycled).
    #[inline]
    pub fn scope_on<'s>(
        name: impl Into<Cow<'static, str>>,
        stream: &'s Arc<CudaStream>,
    ) -> ScopeGuard<'s> {
        if !scope::ENABLED.load(Ordering::Relaxed) {
            return ScopeGuard::inert(Some(stream));
        }
        ScopeGuard::enter(name.into(), Some(stream))
    }

    /// Starts profiling with `config`.
    ///
    /// # Errors
    /// [`Error::AlreadyRunning`]; [`Error::LedgerWrite`] for an unwritable ledger path; at the
    /// timeline level [`Error::NoDriver`], [`Error::CuptiNotFound`],
    /// [`Error::CuptiVersionMismatch`], [`Error::CuptiBusy`] or another CUPTI failure. With
    /// `fail_open`, every error but an unwritable ledger and an invalid configuration
    /// ([`Error::Config`]: bad settings, unknown metric names) returns an inert profiler
    /// instead, and the ledger header says why.
    pub fn start(config: Config) -> Result<Profiler> {
        let path = resolve_ledger_path(config.ledger_path.clone());
        let slot = Slot::new();
        match start_inner(&config, &path, &slot) {
            Ok((inner, warnings, signals)) => {
                for w in &warnings {
                    eprintln!("gpu-ledger: warning: {w}");
                }
                let running = inner.running.clone();
                *slot.state.lock() = SlotState::Running(inner);
                Ok(Profiler {
                    running: Some(running),
                    slot,
                    signals,
                    ledger_path: path,
                    disabled_reason: None,
                })
            }
            // Not the environment's fault but the caller's: fail_open does not hide these.
            Err(e @ (Error::LedgerWrite { .. } | Error::AlreadyRunning | Error::Config(_))) => {
                Err(e)
            }
            Err(e) if config.fail_open => {
                let reason = format!("profiling disabled (fail_open): {e}");
                eprintln!("gpu-ledger: {reason}");
                write_disabled_ledger(&config, &path, &reason)?;
                Ok(Profiler {
                    running: None,
                    slot,
                    signals: None,
                    ledger_path: path,
                    disabled_reason: Some(reason),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Where the ledger is being written.
    pub fn ledger_path(&self) -> &Path {
        &self.ledger_path
    }

    /// Why the profiler is inert, when `fail_open` kept the application running without it.
    pub fn disabled_reason(&self) -> Option<&str> {
        self.disabled_reason.as_deref()
    }

    /// Index of the iteration now open.
    pub fn iteration(&self) -> u64 {
        self.running.as_ref().map_or(0, |r| r.iteration())
    }

    /// The first ledger write error, if one happened (reported once on stderr as well).
    pub fn write_error(&self) -> Option<String> {
        match &*self.slot.state.lock() {
            SlotState::Running(inner) => inner.writer.as_ref().and_then(|w| w.error()),
            _ => None,
        }
    }

    /// Ends the current iteration and opens the next (like torch.profiler's `step()`). Never
    /// blocks on the GPU: the iteration's row is written once its GPU records have arrived.
    pub fn step(&self) {
        let Some(running) = &self.running else { return };
        let open = running.open.read();
        if !*open {
            return;
        }
        let entered_ns = running.now_ns();
        // Counters first: ending a pass synchronizes and may decode, which belongs to the
        // (perturbed) iteration that ends here, not to the next one.
        let counters = running
            .with_counters(|c| c.end_iteration(running.iteration()))
            .flatten();
        // The count first, then the iteration's end: every call counted here was entered in
        // this iteration or an earlier one (`ApiCalls::total`), so the collector never waits
        // for a call of the next iteration.
        let launches = running.calls.total.load(Ordering::SeqCst);
        let host_end_ns = running.now_ns();
        let cupti_end = running.cupti_now();
        let open_scopes = scope::open_scopes(running);
        let index = running.calls.iteration.fetch_add(1, Ordering::SeqCst);
        let _ = running.control.send(IterationEnd {
            index,
            host_end_ns,
            cupti_end,
            launches,
            open_scopes,
            counters,
        });
        running.with_counters(|c| c.begin_iteration(index + 1));
        running.step_ns.fetch_add(
            running.now_ns().saturating_sub(entered_ns),
            Ordering::Relaxed,
        );
        drop(open);
    }

    /// Stops profiling, waits for every record, writes the trailer and closes the ledger.
    /// Synchronize your streams first: work still running on the GPU is recorded only as far as
    /// CUPTI has completed it.
    ///
    /// # Errors
    /// The first ledger write error, or a CUPTI error while stopping; the ledger is still closed.
    pub fn finish(mut self) -> Result<RunSummary> {
        let path = self.ledger_path.clone();
        let was_running = self.running.is_some();
        match self.end() {
            Some((trailer, None)) => Ok(RunSummary {
                ledger_path: path,
                trailer,
            }),
            Some((_, Some(e))) => Err(e),
            None if !was_running => Ok(RunSummary {
                ledger_path: path,
                trailer: Trailer::default(),
            }),
            None => Err(Error::Thread(format!(
                "the signal thread (flush_on_signal) began shutting the profiler down and did \
                 not finish within {FINISH_WAIT:?}"
            ))),
        }
    }

    /// Shuts down (or waits for the signal thread's shutdown), then removes the signal handlers.
    fn end(&mut self) -> Option<(Trailer, Option<Error>)> {
        let ended = self
            .running
            .take()
            .and_then(|_| self.slot.shut_down(None, FINISH_WAIT));
        // After shutdown: a signal that comes while the ledger is being finished waits for it.
        drop(self.signals.take());
        ended
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        let _ = self.end();
    }
}

fn shutdown(mut inner: Inner, end_warning: Option<String>) -> (Trailer, Option<Error>) {
    let running = inner.running.clone();
    // No step() is sending now, and none will: Finish is the collector's last message. Before
    // scopes are disabled: a thread still stepping (a signal's shutdown runs beside the
    // application) would otherwise enter its next iteration's scopes as inert guards and then
    // end that iteration, a complete row with none of its scopes.
    *running.open.write() = false;
    scope::ENABLED.store(false, Ordering::SeqCst);
    running.end_warnings.lock().extend(end_warning);
    let host_end_ns = running.now_ns();
    let cupti_end = running.cupti_now();
    let open = scope::open_scopes(&running);
    let counters = running
        .with_counters(|c| c.finish(running.iteration()))
        .flatten();
    let mut first_err = None;
    if let Some(session) = inner.session.take() {
        // Flushes every buffer into the collector's inbox before the collector is told to finish.
        if let Err(e) = session.stop() {
            first_err = Some(e);
        }
    }
    let _ = running.finish.send(Finish {
        host_end_ns,
        cupti_end,
        open_scopes: open,
        counters,
    });
    if let Some(c) = inner.collector.take() {
        let _ = c.join();
    }
    // The Range Profiler is released only once the timeline has stopped and every record is in.
    drop(running.counters.lock().take());
    let mut trailer = inner.trailer_rx.try_recv().unwrap_or_default();
    if let Some(writer) = inner.writer.take() {
        let err = writer.error();
        let path = writer.path().to_path_buf();
        let report = writer.close();
        trailer.overhead.writer_cpu_ns = report.cpu_ns;
        trailer.lines_not_written = report.lines_not_written;
        if let (None, Some(msg)) = (&first_err, err) {
            first_err = Some(Error::LedgerWrite {
                path,
                source: std::io::Error::other(msg),
            });
        }
    }
    *CURRENT.write() = None;
    scope::GENERATION.fetch_add(1, Ordering::SeqCst);
    (trailer, first_err)
}

fn resolve_ledger_path(configured: Option<PathBuf>) -> PathBuf {
    if let Some(p) = configured {
        return p;
    }
    if let Some(p) = std::env::var_os(LEDGER_PATH_ENV) {
        return PathBuf::from(p);
    }
    let secs = crate::util::unix_ns() / 1_000_000_000;
    let rank = crate::rank::from_env()
        .map(|r| format!("-rank{}", r.rank))
        .unwrap_or_default();
    PathBuf::from(format!(
        "gpu-ledger-{secs}-{}{rank}.jsonl",
        std::process::id()
    ))
}

fn config_record(config: &Config) -> ConfigRecord {
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
    }
}

fn write_disabled_ledger(config: &Config, path: &Path, reason: &str) -> Result<()> {
    let writer = LedgerWriter::create(path)?;
    let header = Header {
        schema_version: SCHEMA_VERSION,
        gpu_ledger_version: env!("CARGO_PKG_VERSION").to_string(),
        start_unix_ns: crate::util::unix_ns(),
        start_cupti_ns: None,
        config: config_record(config),
        environment: crate::device::environment(None, std::time::SystemTime::now()),
        rank: crate::rank::from_env(),
        warnings: vec![reason.to_string()],
        counters: None,
    };
    writer.send(LedgerLine::Header(header));
    writer.send(LedgerLine::Trailer(Trailer {
        warnings: vec![reason.to_string()],
        ..Trailer::default()
    }));
    let report = writer.close();
    if report.lines_not_written > 0 {
        return Err(Error::LedgerWrite {
            path: path.to_path_buf(),
            source: std::io::Error::other("write failed"),
        });
    }
    Ok(())
}

type Started = (Inner, Vec<String>, Option<crate::signals::Watch>);

fn start_inner(config: &Config, path: &Path, slot: &Arc<Slot>) -> Result<Started> {
    if config.buffer_bytes < 1024 || config.buffers == 0 {
        return Err(Error::Config(
            "buffers must be at least 1 and buffer_bytes at least 1024".into(),
        ));
    }
    if config.nvml_energy_period.is_some_and(|p| p.is_zero()) {
        return Err(Error::Config(
            "nvml_energy_period is zero: give a period (500 ms by default) or None to never read \
             the energy counter"
                .into(),
        ));
    }
    if let Some(setup) = &config.counters {
        setup.config.validate_with_timeline()?;
    }
    let mut current = CURRENT.write();
    if current.is_some() {
        return Err(Error::AlreadyRunning);
    }
    let mut warnings = Vec::new();
    if config.counters.is_some() != (config.level == Level::Counters) {
        return Err(Error::Config(
            "Level::Counters and Config::counters go together: set both (ProfilerBuilder::counters \
             does) or neither"
                .into(),
        ));
    }
    let cupti = match config.level {
        Level::Scopes => None,
        Level::Timeline | Level::Counters => {
            crate::device::require_driver()?;
            Some(cupti::api()?)
        }
    };
    // The Range Profiler is set up before the timeline starts and before anything is recorded:
    // metric names are checked (a typo is an error), and a device whose counters cannot be read
    // leaves the timeline running with the reason in the header.
    let mut counter_state = None;
    let mut counters_header = None;
    let mut counter_iterations = None;
    if let Some(setup) = &config.counters {
        match crate::counters::RangeProfiler::new(&setup.context, setup.config.clone()) {
            Ok(rp) => {
                counters_header = Some(crate::counters::CountersHeader::collected(&rp));
                counter_iterations = Some(setup.window.describe(rp.runs_per_collection()));
                counter_state = Some(CounterState::new(rp, setup.window, setup.derive));
            }
            Err(e) => {
                use crate::counters::Unavailable as U;
                match crate::counters::Unavailable::of(&e) {
                    U::UnknownMetric | U::NoCupti => return Err(e),
                    _ if matches!(e, Error::Config(_)) => return Err(e),
                    _ => {
                        warnings.push(format!(
                            "hardware counters are not collected (the timeline runs): {e}"
                        ));
                        counters_header = Some(crate::counters::CountersHeader::not_collected(
                            &setup.config,
                            &e,
                        ));
                    }
                }
            }
        }
    }
    let writer = LedgerWriter::create(path)?;
    let origin = Instant::now();
    let start_time = std::time::SystemTime::now();
    let start_unix_ns = crate::util::unix_ns();
    let (control_tx, control_rx) = crossbeam_channel::unbounded();
    let (finish_tx, finish_rx) = crossbeam_channel::bounded(1);
    let (buffer_tx, buffer_rx) = crossbeam_channel::unbounded();
    let paths = PathTable::default();
    let counters_path = if counter_state.is_some() {
        paths.intern(0, COUNTERS_SCOPE)
    } else {
        0
    };
    let running = Arc::new(Running {
        clock: HostClock::new(origin),
        cupti,
        paths,
        events: EventPool::default(),
        control: control_tx,
        finish: finish_tx,
        thread_slots: parking_lot::Mutex::new(Vec::new()),
        step_ns: AtomicU64::new(0),
        calls: Arc::new(ApiCalls::default()),
        counters: parking_lot::Mutex::new(counter_state),
        counters_path,
        open: RwLock::new(true),
        end_warnings: parking_lot::Mutex::new(Vec::new()),
    });
    let mut session = None;
    let mut activity = None;
    if let Some(lib) = cupti {
        let shared = Arc::new(ActivityShared {
            pool: BufferPool::new(config.buffers, config.max_buffers, config.buffer_bytes),
            sink: buffer_tx,
            stats: ActivityStats::default(),
        });
        session = Some(TimelineSession::start(
            lib,
            shared.clone(),
            running.calls.clone(),
        )?);
        activity = Some(shared);
    }
    let start_cupti_ns = running.cupti_now();
    let mut environment = crate::device::environment(cupti, start_time);
    let sampler = if config.nvml {
        start_nvml(config, &mut environment, origin, &mut warnings)
    } else {
        None
    };
    environment.explain_nulls();
    // Installed before the header, which carries its warnings; on a later error the watch drops
    // and the default dispositions are back.
    let signals = if config.flush_on_signal {
        let slot = slot.clone();
        let on_signal: crate::signals::OnSignal = Arc::new(move |name: &'static str| {
            let warning = format!("run ended by {name} (flush_on_signal)");
            let _ = slot.shut_down(Some(warning), crate::signals::FLUSH_BOUND);
        });
        crate::signals::Watch::install(on_signal, &mut warnings)
    } else {
        None
    };
    let header = Header {
        schema_version: SCHEMA_VERSION,
        gpu_ledger_version: env!("CARGO_PKG_VERSION").to_string(),
        start_unix_ns,
        start_cupti_ns,
        config: ConfigRecord {
            counter_iterations,
            ..config_record(config)
        },
        environment,
        rank: crate::rank::from_env(),
        warnings: warnings.clone(),
        counters: counters_header,
    };
    writer.send(LedgerLine::Header(header));
    let (trailer_tx, trailer_rx) = crossbeam_channel::bounded(1);
    let line_tx = writer
        .sender()
        .ok_or_else(|| Error::Thread("gpu-ledger-writer closed at start".into()))?;
    let collector = collector::spawn(collector::CollectorSetup {
        running: running.clone(),
        activity,
        control: control_rx,
        finish: finish_rx,
        buffers: buffer_rx,
        lines: line_tx,
        trailer: trailer_tx,
        settle: config.settle,
        // A row must get at least two flushes within its settle time.
        flush_interval: config.flush_interval.min(config.settle / 2),
        start_cupti_ns: start_cupti_ns.unwrap_or(0),
        nvml: sampler,
        work_per_iteration: config.work_per_iteration,
        record_activities: config.record_activities,
        auto_ranges: config
            .counters
            .as_ref()
            .is_some_and(|c| c.config.range_mode == crate::counters::RangeMode::Auto),
    })?;
    *current = Some(running.clone());
    scope::GENERATION.fetch_add(1, Ordering::SeqCst);
    scope::ENABLED.store(true, Ordering::SeqCst);
    running.with_counters(|c| c.begin_iteration(0));
    Ok((
        Inner {
            running,
            session,
            collector: Some(collector),
            writer: Some(writer),
            trailer_rx,
        },
        warnings,
        signals,
    ))
}

/// Loads NVML, adds its items to the environment record and starts the sampler. Without NVML
/// everything else keeps working: the reason goes to the header warnings and stderr.
fn start_nvml(
    config: &Config,
    env: &mut crate::ledger::Environment,
    origin: Instant,
    warnings: &mut Vec<String>,
) -> Option<crate::nvml::NvmlSampler> {
    use crate::nvml::{NvmlLibrary, NvmlSampler, NvmlSamplerConfig};
    let lib = match NvmlLibrary::init() {
        Ok(lib) => lib,
        Err(e) => {
            env.nvml_unavailable(&e.to_string());
            warnings.push(format!("NVML: {e}"));
            return None;
        }
    };
    env.fill_nvml(&lib);
    env.link_gpus_to_nvml();
    let sampler_config = NvmlSamplerConfig {
        period: config.nvml_period,
        energy_period: config.nvml_energy_period,
        devices: Some(env.sampled_devices()),
        ..NvmlSamplerConfig::default()
    };
    match NvmlSampler::start(lib, sampler_config, origin) {
        Ok(s) => Some(s),
        Err(e) => {
            warnings.push(format!("NVML sampling is off: {e}"));
            None
        }
    }
}
