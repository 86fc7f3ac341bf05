//! The collector thread: decodes CUPTI buffers, attributes each activity to a scope and an
//! iteration through the call that launched it (captured by the API callback on the calling
//! thread: the scope open there and the iteration open at its entry; `crate::cupti::calls`),
//! and writes one ledger row per iteration once its records have arrived. Records that arrive
//! for an iteration already written are counted as late in the trailer, never dropped silently.
//!
//! - this module: the thread's loop, what wakes it, and when it asks CUPTI for buffers;
//! - [`window`]: the iterations waiting for their rows, and when a row is ready;
//! - [`attribution`]: the join of captured calls and GPU records ([`correlation`] finds a call by
//!   its id);
//! - [`graphs`]: CUDA graph nodes' records in the scopes the nodes were captured in;
//! - [`scopes`]: closed scopes and their timing events;
//! - [`row`]: a row from what an iteration gathered ([`kernel_groups`], [`scope_busy`]);
//! - [`trailer`]: the end of the run.

mod attribution;
mod correlation;
mod graphs;
mod idle;
mod kernel_groups;
mod launch_threads;
#[cfg(any(test, feature = "internals"))]
pub(crate) mod offline;
mod row;
mod sched;
mod scope_busy;
mod scopes;
mod stalls;
mod trailer;
mod window;

#[cfg(test)]
mod duty_tests;
#[cfg(test)]
mod graph_tests;
#[cfg(test)]
mod idle_tests;
#[cfg(test)]
mod sampled_tests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
// FxHash for the per-record maps: keys are correlation ids, not attacker input, and SipHash
// dominated the lookup cost.
use rustc_hash::FxHashMap as HashMap;

use crate::clock::TickConverter;
use crate::cupti::activity::{ActivityShared, FilledBuffer};
use crate::cupti::calls::CapturedCall;
use crate::cupti::functions::ApiClasses;
use crate::cupti::record::NameCache;
use crate::driver::events::EventReader;
use crate::error::{Error, Result};
use crate::ledger::nvml::NvmlIterationSummary;
use crate::ledger::schema::{LedgerLine, Trailer};
use crate::nvml::NvmlSampler;
use crate::run::ScopeRecord;
use crate::run::{Inbox, IterationEnd, RunState};
use attribution::{Activity, CallInfo, Deferred};
use correlation::CorrelationMap;
use row::RowBuilder;
use window::{IterationBuffers, IterationState};

/// What the collector thread is started with.
pub(crate) struct CollectorSetup {
    pub(crate) running: Arc<RunState>,
    pub(crate) inbox: Inbox,
    pub(crate) activity: Option<Arc<ActivityShared>>,
    pub(crate) buffers: Receiver<FilledBuffer>,
    pub(crate) lines: Sender<LedgerLine>,
    pub(crate) trailer: Sender<Trailer>,
    pub(crate) settle: Duration,
    pub(crate) flush_interval: Duration,
    pub(crate) start_cupti_ns: u64,
    /// Rows wait for CUPTI's records (every counted call captured, a flush after the end): at
    /// the timeline and counters levels; at the scopes level a row is written when its
    /// iteration ends.
    pub(crate) timeline_rules: bool,
    pub(crate) nvml: Option<NvmlSampler>,
    pub(crate) work_per_iteration: Option<f64>,
    pub(crate) record_activities: bool,
    /// Counters use auto ranges: name each range from the iteration's kernel records.
    pub(crate) auto_ranges: bool,
    /// What tracing adds per kernel, for the rows' estimate, when calibrated at start.
    pub(crate) tracing_calibration: Option<crate::ledger::schema::TracingCalibration>,
    /// The cubins and sources PC samples are mapped through, the lines kept per function, and
    /// the planner written rows go to, when PC sampling was set up.
    pub(crate) pc_sources: Option<crate::pcsampling::window::CollectorSide>,
    /// Publishes each row as metrics as it is written, when the run asked for them.
    #[cfg(feature = "metrics")]
    pub(crate) metrics: Option<crate::metrics::Publisher>,
    /// What the split of idle time by cause records, when it is on (the timeline and counters
    /// levels).
    pub(crate) idle: Option<crate::config::IdleConfig>,
}

/// Starts the collector thread.
pub(crate) fn spawn(setup: CollectorSetup) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("gpu-ledger-collector".into())
        .spawn(move || Collector::new(setup).run())
        .map_err(|e| Error::Thread(format!("gpu-ledger-collector could not start: {e}")))
}

/// The collector's state. Its jobs' fields are grouped; each job's code is in its module.
struct Collector {
    // The run, its messages and the ledger.
    running: Arc<RunState>,
    inbox: Inbox,
    activity: Option<Arc<ActivityShared>>,
    buffers: Receiver<FilledBuffer>,
    lines: Sender<LedgerLine>,
    trailer_tx: Sender<Trailer>,
    settle: Duration,
    flush_interval: Duration,
    last_flush: Instant,
    timeline_rules: bool,
    names: NameCache,
    // Attribution.
    classes: ApiClasses,
    /// What is known of each call until its iteration's row is written, by correlation id: a
    /// table indexed by the id, as the ids in flight are a band of nearly consecutive numbers
    /// ([`CorrelationMap`]).
    calls: CorrelationMap<CallInfo>,
    /// Activities whose call has not arrived yet, by correlation id.
    waiting: HashMap<u32, Vec<Activity>>,
    /// Reused vector for draining the threads' captured API calls.
    call_batch: Vec<CapturedCall>,
    /// Reused vector for draining `step()`'s iteration ends.
    ends: Vec<IterationEnd>,
    /// Captured calls and host-side activities that wait for an iteration's start or end: a
    /// buffer can be decoded before the `step()` message that ended its iteration.
    deferred: Vec<Deferred>,
    /// Counted calls captured in iterations already written.
    counted_calls_before: u64,
    /// The capture scopes of the nodes of live CUDA graphs.
    graphs: graphs::GraphScopes,
    // The window.
    iterations: VecDeque<IterationState>,
    /// The buffers of the last row written, for the next iteration.
    spare_buffers: Option<IterationBuffers>,
    /// Iteration ends that arrived before their predecessor's, by index: each ends its
    /// iteration once the one before it has ended, rather than being dropped.
    early_ends: BTreeMap<u64, IterationEnd>,
    /// Iteration ends for an iteration already ended (counted in the trailer).
    stray_ends: u64,
    /// A sampled timeline has left an iteration untraced.
    untraced_seen: bool,
    /// The CUPTI time spans of the last traced rows written: a record older than the window
    /// that no span holds is of an untraced iteration.
    traced_spans: VecDeque<(u64, u64)>,
    // Scopes.
    /// Scopes closed in an iteration whose start the collector has not seen yet (a thread
    /// raced the stepping thread's message).
    future_scopes: BTreeMap<u64, Vec<ScopeRecord>>,
    /// Reused vector for draining the threads' scope rings.
    scope_batch: Vec<ScopeRecord>,
    /// Scope timing events waiting in all iterations (none unless scopes are timed on streams).
    events_pending: usize,
    /// Reads scope events and gives them back to the run's pool.
    event_reader: EventReader,
    /// Converts scope clock readings to ns, where scopes read the TSC; `None` where they read
    /// ns already.
    clock: Option<TickConverter>,
    /// Reads the launching threads' run-queue time at each iteration end, when asked.
    sched: Option<sched::SchedReader>,
    // Rows, and the whole run.
    rows: RowBuilder,
    trailer: Trailer,
    nvml: Option<NvmlSampler>,
    /// NVML summaries of the rows written (not perturbed), for the run's energy.
    nvml_rows: Vec<Vec<NvmlIterationSummary>>,
    work_per_iteration: Option<f64>,
    #[cfg(feature = "metrics")]
    metrics: Option<crate::metrics::Publisher>,
}

impl Collector {
    fn new(s: CollectorSetup) -> Self {
        let mut iterations = VecDeque::new();
        iterations.push_back(IterationState::new(
            0,
            0,
            s.start_cupti_ns,
            0,
            IterationBuffers::default(),
        ));
        let clock = s.running.clock.converter();
        let sched = s
            .idle
            .as_ref()
            .filter(|i| i.schedstat)
            .map(|_| sched::SchedReader::default());
        Collector {
            running: s.running,
            inbox: s.inbox,
            activity: s.activity,
            buffers: s.buffers,
            lines: s.lines,
            trailer_tx: s.trailer,
            settle: s.settle,
            flush_interval: s.flush_interval,
            last_flush: Instant::now(),
            timeline_rules: s.timeline_rules,
            names: NameCache::default(),
            classes: ApiClasses::default(),
            calls: CorrelationMap::default(),
            waiting: HashMap::default(),
            call_batch: Vec::new(),
            ends: Vec::new(),
            deferred: Vec::new(),
            counted_calls_before: 0,
            graphs: graphs::GraphScopes::default(),
            iterations,
            spare_buffers: None,
            early_ends: BTreeMap::new(),
            stray_ends: 0,
            untraced_seen: false,
            traced_spans: VecDeque::new(),
            future_scopes: BTreeMap::new(),
            scope_batch: Vec::new(),
            events_pending: 0,
            event_reader: EventReader::default(),
            clock,
            sched,
            rows: RowBuilder::new(s.record_activities, s.auto_ranges, s.tracing_calibration)
                .with_stalls(s.pc_sources.map(stalls::StallRows::new))
                .with_idle(s.idle),
            trailer: Trailer::default(),
            nvml: s.nvml,
            nvml_rows: Vec::new(),
            work_per_iteration: s.work_per_iteration,
            #[cfg(feature = "metrics")]
            metrics: s.metrics,
        }
    }

    fn run(mut self) {
        // The collector wakes on its own every tick: nothing the application does wakes it but
        // a filled CUPTI buffer and `finish()` (see `IterationEnd`). 2 ms keeps the scope rings
        // (`scope::RING_CAPACITY`) from filling below 2 million scopes a second per thread.
        let tick = self.flush_interval.min(TICK).max(Duration::from_millis(1));
        // Without CUPTI (Level::Scopes) the buffer channel's sender is gone from the start: a
        // disconnected receiver is always ready, so it is replaced by one that never is.
        let mut buffers = self.buffers.clone();
        loop {
            // Iteration ends are seen at most a tick late: records of an iteration that has not
            // ended yet wait for it (`deferred`), and rows wait for the flush interval anyway.
            self.take_iteration_ends();
            // A sampled timeline's switch, soon after the step() that asked for it.
            if let Some(w) = self.running.switch_ahead() {
                self.trailer.warnings.push(w);
            }
            crossbeam_channel::select! {
                recv(buffers) -> b => match b {
                    Ok(b) => self.decode(b),
                    Err(_) => buffers = crossbeam_channel::never(),
                },
                recv(self.inbox.finish) -> m => {
                    if let Ok(f) = m {
                        self.finish(
                            f.host_end_ns,
                            f.cupti_end,
                            f.open_scopes,
                            f.counters,
                            f.stalls,
                            f.traced,
                        );
                    }
                    return;
                },
                default(tick) => {}
            }
            self.maintain();
        }
    }

    /// Handles every `step()` message sent so far.
    fn take_iteration_ends(&mut self) {
        let mut ends = std::mem::take(&mut self.ends);
        self.inbox.ends.drain_into(&mut ends);
        if let (Some(clock), false) = (&mut self.clock, ends.is_empty()) {
            // An anchor after the drain: every end was read before it, so each is interpolated
            // between two anchors rather than extrapolated past the last.
            clock.push(self.running.clock.anchor());
            for m in &mut ends {
                m.host_end = clock.to_ns(m.host_end);
            }
        }
        // An end that found the ring full comes from its overflow vector, maybe after a later
        // one: `take_end` keeps an early end until its predecessor's arrives.
        for m in ends.drain(..) {
            self.handle(m);
        }
        self.ends = ends;
    }

    fn handle(&mut self, m: IterationEnd) {
        self.take_end(m);
    }

    fn dropped_total(&self) -> u64 {
        self.activity
            .as_ref()
            .map_or(0, |a| a.stats.dropped_records.load(Ordering::Relaxed))
    }

    /// Decodes a filled buffer, attributing each record as it comes.
    fn decode(&mut self, buf: FilledBuffer) {
        let (Some(lib), Some(shared)) = (self.running.cupti, self.activity.clone()) else {
            return;
        };
        self.drain_calls();
        // Each record is attributed as it is decoded: no Vec<Record> per buffer (128 bytes a
        // record, grown by reallocation), which tripled the cost per record.
        let mut names = std::mem::take(&mut self.names);
        buf.drain(lib, &shared, &mut names, |record| self.accept(record));
        self.names = names;
    }

    /// Periodic work: takes the scopes and calls, flushes CUPTI while iterations wait, reads
    /// the scopes' events, writes the rows that are ready.
    fn maintain(&mut self) {
        self.drain_scopes();
        self.drain_calls();
        let waiting_rows = self.iterations.iter().any(IterationState::waits_for_flush);
        // Flushing costs the application's launches (docs/overhead.md), so it is rare in steady
        // state; when the pool is nearly exhausted, buffers CUPTI holds partly filled are the
        // only way back to a free one, and flushing often is what avoids dropped records.
        let pressure = self
            .activity
            .as_ref()
            .is_some_and(|a| a.pool.nearly_exhausted());
        let due = if pressure {
            self.last_flush.elapsed() >= PRESSURE_FLUSH_INTERVAL
        } else {
            waiting_rows && self.last_flush.elapsed() >= self.flush_interval
        };
        if due {
            self.flush_cupti();
        }
        self.resolve_events();
        while self.front_ready() {
            self.finalize_front(false);
        }
    }

    /// Asks CUPTI for every buffer with completed records and decodes them; the iterations
    /// ended before it began are then flushed.
    fn flush_cupti(&mut self) {
        let flush_start = Instant::now();
        if let Some(lib) = self.running.cupti {
            // CUPTI calls the completion callback from inside, which queues buffers to us.
            let _ = crate::cupti::flush_all(lib, false);
        }
        while let Ok(b) = self.buffers.try_recv() {
            self.decode(b);
        }
        self.last_flush = Instant::now();
        for it in self.iterations.iter_mut() {
            it.flushed_at(flush_start);
        }
    }
}

/// How often the collector flushes CUPTI while the buffer pool is nearly exhausted.
const PRESSURE_FLUSH_INTERVAL: Duration = Duration::from_millis(20);
/// Traced rows whose spans the collector keeps after writing them ([`Collector::untraced_at`]):
/// a sampled timeline's records arrive with the flush that follows a traced iteration, so only
/// the last few traced rows can be their home.
const TRACED_SPANS: usize = 8;
/// Longest time the collector sleeps between looks at `step()`'s messages and the scope rings.
const TICK: Duration = Duration::from_millis(2);
