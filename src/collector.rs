//! The collector thread: decodes CUPTI buffers, attributes each activity to a scope and an
//! iteration through the call that launched it (captured by the API callback on the calling
//! thread: the scope open there and the iteration open at its entry; `crate::activity::calls`),
//! and writes one ledger row per iteration once its records have arrived.
//!
//! An iteration's row is written when the iteration has ended, a CUPTI flush has run after its
//! end, every kernel launch, copy and memset call made in it has its GPU record, and every
//! event-timed scope in it has completed; or, at the latest, `settle` after it ended (the row then
//! says how many records were missing). Records that arrive for an iteration already written are
//! counted as late in the trailer, never dropped silently.

use std::collections::VecDeque;

// FxHash for the per-record maps: keys are correlation ids and device numbers, not attacker
// input, and SipHash dominated the lookup cost.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::events::{EventReader, ScopeEvents};
use crossbeam_channel::{Receiver, Sender};
use cupti_sys as sys;

use crate::activity::calls::CapturedCall;
use crate::activity::record::{
    CopyRecord, KernelRecord, MemoryRecord, MemsetRecord, NameCache, Record, SyncRecord,
};
use crate::activity::{self, ActivityShared, ApiClass, FilledBuffer};
use crate::analysis::intervals::BusyAccumulator;
use crate::correlation::CorrelationMap;
use crate::counters::launches::AutoRangeLaunches;
use crate::counters::{IterationCounters, Launch};
use crate::error::{Error, Result};
use crate::host_clock::TickConverter;
use crate::ledger::schema::*;
use crate::profiler::Running;
use crate::scope::ScopeRecord;

/// `step()` ended iteration `index`. Sent on a channel the collector polls and never sleeps on,
/// so that `step()` never wakes it: waking a sleeping thread made `step()` cost 17-21 µs on the
/// development VM (a futex wake and an inter-processor interrupt) against about 0.1 µs when the
/// collector was awake, on the application's critical path after each synchronize.
pub(crate) struct IterationEnd {
    pub index: u64,
    pub host_end_ns: u64,
    pub cupti_end: Option<u64>,
    pub launches: u64,
    pub open_scopes: Vec<u32>,
    /// Hardware counters of the iteration, when a pass ran in it.
    pub counters: Option<IterationCounters>,
}

/// `finish()`: close everything and send the trailer. The one message the collector sleeps on.
pub(crate) struct Finish {
    pub host_end_ns: u64,
    pub cupti_end: Option<u64>,
    pub open_scopes: Vec<u32>,
    pub counters: Option<IterationCounters>,
}

/// What the collector thread is started with.
pub(crate) struct CollectorSetup {
    pub running: Arc<Running>,
    pub activity: Option<Arc<ActivityShared>>,
    pub control: Receiver<IterationEnd>,
    pub finish: Receiver<Finish>,
    pub buffers: Receiver<FilledBuffer>,
    pub lines: Sender<LedgerLine>,
    pub trailer: Sender<Trailer>,
    pub settle: Duration,
    pub flush_interval: Duration,
    pub start_cupti_ns: u64,
    pub nvml: Option<crate::nvml::NvmlSampler>,
    pub work_per_iteration: Option<f64>,
    pub record_activities: bool,
    /// Counters use auto ranges: name each range from the iteration's kernel records.
    pub auto_ranges: bool,
}

/// Starts the collector thread.
pub(crate) fn spawn(setup: CollectorSetup) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("gpu-ledger-collector".into())
        .spawn(move || Collector::new(setup).run())
        .map_err(|e| Error::Thread(format!("gpu-ledger-collector could not start: {e}")))
}

/// The collector's attribution driven by hand, without threads, CUPTI or a ledger file: for
/// benchmarks (`benches/decode.rs`) and tests. Not a stable API.
///
/// It is the profiler's own `Collector` with no CUPTI library, at the timeline level's rules: an
/// iteration's row is written once the iteration has ended, every counted launch/copy/memset call
/// made before its end (the `launches` given to [`end_iteration`](Self::end_iteration)) has its
/// API record, and every such call has its GPU record. Handing records to
/// [`accept`](Self::accept) stands for CUPTI's flush, so no flush is awaited. What it skips:
/// decoding from a CUPTI buffer (the caller decodes), scope rings (no thread records scopes
/// here), scope timing events, NVML and hardware counters. The settle time is unbounded: a row
/// whose records never come is not written by time, only by [`finish`](Self::finish).
#[doc(hidden)]
pub struct OfflineCollector {
    collector: Collector,
    lines: Receiver<LedgerLine>,
    /// Index of the open iteration.
    open_index: u64,
}

#[doc(hidden)]
impl OfflineCollector {
    /// A collector at the timeline level's attribution rules, iteration 0 open at CUPTI time
    /// `start_cupti_ns` (and host time 0).
    pub fn new(start_cupti_ns: u64) -> Self {
        let (line_tx, line_rx) = crossbeam_channel::unbounded();
        let (trailer_tx, _) = crossbeam_channel::bounded(1);
        let (_, control_rx) = crossbeam_channel::unbounded();
        let (_, finish_rx) = crossbeam_channel::bounded(1);
        let (_, buffer_rx) = crossbeam_channel::unbounded();
        let mut collector = Collector::new(CollectorSetup {
            running: Running::offline(),
            activity: None,
            control: control_rx,
            finish: finish_rx,
            buffers: buffer_rx,
            lines: line_tx,
            trailer: trailer_tx,
            settle: Duration::MAX,
            // Every maintain() "flushes": the caller has handed in every record it has.
            flush_interval: Duration::ZERO,
            start_cupti_ns,
            nvml: None,
            work_per_iteration: None,
            record_activities: false,
            auto_ranges: false,
        });
        collector.offline_timeline = true;
        OfflineCollector {
            collector,
            lines: line_rx,
            open_index: 0,
        }
    }

    /// The id of a slash-separated scope path (`"step/forward"`), interned as a scope guard
    /// would: the external-correlation id that attributes a launch to that path.
    pub fn intern_path(&self, path: &str) -> u32 {
        let paths = &self.collector.running.paths;
        path.split('/')
            .fold(0, |parent, name| paths.intern(parent, name))
    }

    /// `Collector::accept`: one decoded record.
    pub fn accept(&mut self, record: Record) {
        self.collector.accept(record);
    }

    /// One API call as the timeline level's callback captures it, in place of its API record
    /// and external-correlation record.
    pub fn accept_call(&mut self, call: CapturedCall) {
        self.collector.accept_call(call);
    }

    /// What `step()` makes the collector do: ends the open iteration at these times, with
    /// `launches` counted launch/copy/memset calls made since the start, and opens the next.
    pub fn end_iteration(&mut self, host_end_ns: u64, cupti_end_ns: u64, launches: u64) {
        let index = self.open_index;
        self.open_index += 1;
        self.collector.handle(IterationEnd {
            index,
            host_end_ns,
            cupti_end: Some(cupti_end_ns),
            launches,
            open_scopes: Vec::new(),
            counters: None,
        });
    }

    /// Runs `maintain()` (rows whose records are all in are written) and returns the rows
    /// written since the last call.
    pub fn take_rows(&mut self) -> Vec<IterationRow> {
        self.collector.maintain();
        self.drain_rows()
    }

    /// What `finish()` makes the collector do, ending the open iteration at these times: every
    /// ended iteration is written, waiting or not, and the open one when something happened in
    /// it. Returns the remaining rows and the trailer.
    pub fn finish(mut self, host_end_ns: u64, cupti_end_ns: u64) -> (Vec<IterationRow>, Trailer) {
        self.collector
            .finish(host_end_ns, Some(cupti_end_ns), Vec::new(), None);
        let rows = self.drain_rows();
        (rows, self.collector.trailer.clone())
    }

    /// Counts so far (records, late and unplaced records...), as the trailer would have them.
    pub fn trailer(&self) -> &Trailer {
        &self.collector.trailer
    }

    fn drain_rows(&self) -> Vec<IterationRow> {
        self.lines
            .try_iter()
            .filter_map(|l| match l {
                LedgerLine::Iteration(row) => Some(row),
                _ => None,
            })
            .collect()
    }
}

/// A GPU activity waiting to be placed or placed in an iteration.
#[derive(Debug)]
enum Activity {
    Kernel(KernelRecord),
    Memcpy(CopyRecord),
    Memset(MemsetRecord),
    Sync(SyncRecord),
    Memory(MemoryRecord),
}

impl Activity {
    fn correlation_id(&self) -> u32 {
        match self {
            Activity::Kernel(r) => r.correlation_id,
            Activity::Memcpy(r) => r.correlation_id,
            Activity::Memset(r) => r.correlation_id,
            Activity::Sync(r) => r.correlation_id,
            Activity::Memory(r) => r.correlation_id,
        }
    }
    /// A time in CUPTI's clock that falls inside the activity's iteration when no API record
    /// says better: GPU start for device work (never before its launch call), host start for
    /// waits, the operation time for allocations.
    fn fallback_time(&self) -> u64 {
        match self {
            Activity::Kernel(r) => r.start,
            Activity::Memcpy(r) => r.start,
            Activity::Memset(r) => r.start,
            Activity::Sync(r) => r.start,
            Activity::Memory(r) => r.timestamp,
        }
    }
    /// Host-side records are placed by their own time, not by an API record.
    fn is_host_side(&self) -> bool {
        matches!(self, Activity::Sync(_) | Activity::Memory(_))
    }
}

struct Placed {
    path_id: u32,
    activity: Activity,
}

struct PendingEvents {
    path_id: u32,
    events: ScopeEvents,
}

struct IterationState {
    index: u64,
    host_start_ns: u64,
    host_end_ns: Option<u64>,
    cupti_start: u64,
    cupti_end: Option<u64>,
    ended_at: Option<Instant>,
    flushed: bool,
    scopes: Vec<ScopeRecord>,
    placed: Vec<Placed>,
    /// Correlation ids of launch/copy/memset calls whose GPU record has not arrived.
    expected: Awaited,
    /// Outermost calls whose GPU record came through a nested call's id before the outermost
    /// call itself was registered: not awaited when it is.
    arrived: HashSet<u32>,
    /// Correlation ids of every call of this iteration (to forget them afterwards).
    api_ids: Vec<u32>,
    events: Vec<PendingEvents>,
    event_ns: HashMap<u32, u64>,
    warnings: Vec<String>,
    dropped_at_start: u64,
    /// Counted launch/copy/memset calls made since the start, read at this iteration's end.
    launches_by_end: u64,
    /// API records of counted calls placed in this iteration.
    counted_api_records: u64,
    /// Counted calls whose API record had not arrived when the row was written.
    missing_api_records: u64,
    counters: Option<IterationCounters>,
}

/// A set of correlation ids (the calls an iteration awaits a GPU record of) with its newest
/// member kept apart: a call is usually followed by its GPU record before the next call, so the
/// id inserted is the one removed next, and the hash set stays empty. Two hash operations per
/// launch were a tenth of the collector's time.
#[derive(Default)]
struct Awaited {
    /// The newest id; never also in `rest`.
    newest: Option<u32>,
    rest: HashSet<u32>,
}

impl Awaited {
    /// Adds `id`; false when it was there already.
    fn insert(&mut self, id: u32) -> bool {
        if self.newest == Some(id) || (!self.rest.is_empty() && self.rest.contains(&id)) {
            return false;
        }
        if let Some(older) = self.newest.replace(id) {
            self.rest.insert(older);
        }
        true
    }

    /// Removes `id`; false when it was not there.
    fn remove(&mut self, id: u32) -> bool {
        if self.newest == Some(id) {
            self.newest = None;
            true
        } else {
            !self.rest.is_empty() && self.rest.remove(&id)
        }
    }

    fn len(&self) -> usize {
        self.rest.len() + usize::from(self.newest.is_some())
    }

    fn is_empty(&self) -> bool {
        self.newest.is_none() && self.rest.is_empty()
    }

    fn clear(&mut self) {
        self.newest = None;
        self.rest.clear();
    }
}

/// An iteration's vectors and sets, kept from the last row written for the next iteration: each
/// iteration fills them to about the same size, and growing them again, record by record, was
/// a tenth of the collector's time per launch.
#[derive(Default)]
struct IterationBuffers {
    placed: Vec<Placed>,
    api_ids: Vec<u32>,
    expected: Awaited,
}

impl IterationState {
    fn new(
        index: u64,
        host_start_ns: u64,
        cupti_start: u64,
        dropped_at_start: u64,
        buffers: IterationBuffers,
    ) -> Self {
        let IterationBuffers {
            placed,
            api_ids,
            expected,
        } = buffers;
        debug_assert!(placed.is_empty() && api_ids.is_empty() && expected.is_empty());
        IterationState {
            index,
            host_start_ns,
            host_end_ns: None,
            cupti_start,
            cupti_end: None,
            ended_at: None,
            flushed: false,
            scopes: Vec::new(),
            placed,
            expected,
            arrived: HashSet::default(),
            api_ids,
            events: Vec::new(),
            event_ns: HashMap::default(),
            warnings: Vec::new(),
            dropped_at_start,
            launches_by_end: 0,
            counted_api_records: 0,
            missing_api_records: 0,
            counters: None,
        }
    }
    fn contains_cupti(&self, t: u64) -> bool {
        self.cupti_end.is_none_or(|end| t < end)
    }
}

struct Collector {
    running: Arc<Running>,
    activity: Option<Arc<ActivityShared>>,
    control: Receiver<IterationEnd>,
    finish: Receiver<Finish>,
    buffers: Receiver<FilledBuffer>,
    lines: Sender<LedgerLine>,
    trailer_tx: Sender<Trailer>,
    settle: Duration,
    flush_interval: Duration,
    names: NameCache,
    classes: activity::ApiClasses,
    /// What is known of each call until its iteration's row is written, by correlation id: a
    /// table indexed by the id, as the ids in flight are a band of nearly consecutive numbers
    /// ([`CorrelationMap`]).
    calls: CorrelationMap<CallInfo>,
    /// Activities whose call has not arrived yet, by correlation id.
    waiting: HashMap<u32, Vec<Activity>>,
    iterations: VecDeque<IterationState>,
    last_flush: Instant,
    /// Device memory bookkeeping: bytes live per device, and sizes by address.
    live_bytes: HashMap<u32, i64>,
    alloc_sizes: HashMap<(u32, u64), u64>,
    trailer: Trailer,
    /// Scopes closed in an iteration whose start the collector has not seen yet (a thread
    /// raced the stepping thread's message).
    future_scopes: std::collections::BTreeMap<u64, Vec<ScopeRecord>>,
    /// Reused vector for draining the threads' scope rings.
    scope_batch: Vec<ScopeRecord>,
    /// Reused vector for draining the threads' captured API calls.
    call_batch: Vec<CapturedCall>,
    /// Scope timing events waiting in all iterations (none unless scopes are timed on streams).
    events_pending: usize,
    /// Reads scope events and gives them back to the run's pool.
    event_reader: EventReader,
    /// Converts scope clock readings to ns, where scopes read the TSC; `None` where they read
    /// ns already.
    clock: Option<TickConverter>,
    /// API records and host-side activities that fall in the open iteration: placed once the
    /// iteration's end is known, since buffers can be decoded before the `step()` message that
    /// ended it.
    deferred: Vec<Deferred>,
    /// Set once `finish()` has set the open iteration's end: nothing is deferred any more.
    finishing: bool,
    /// API records of counted calls in iterations already written.
    counted_api_records_before: u64,
    /// The buffers of the last row written, for the next iteration.
    spare_buffers: Option<IterationBuffers>,
    /// Tables of the row being built, kept for their capacity.
    kernel_groups: KernelGroups,
    device_busy: Vec<DeviceBusy>,
    scope_busy: ScopeBusyTable,
    nvml: Option<crate::nvml::NvmlSampler>,
    /// NVML summaries of the rows written (not perturbed), for the run's energy.
    nvml_rows: Vec<Vec<crate::ledger::NvmlIterationSummary>>,
    work_per_iteration: Option<f64>,
    record_activities: bool,
    auto_ranges: bool,
    /// Set only by [`OfflineCollector`]: no CUPTI library, but the timeline level's rules for
    /// when a row is ready (every counted call's API record in, a "flush" after the end). Always
    /// false in a profiler's collector, where `running.cupti` decides.
    offline_timeline: bool,
}

/// What the collector knows of a correlation id.
#[derive(Clone, Copy, Default)]
struct CallInfo {
    /// Index of the iteration its call (or API record) was placed in; none before it arrives.
    iteration: Option<u64>,
    /// Scope path id, from the call or its external-correlation record; 0: none.
    path_id: u32,
    /// A nested call's outermost call ([`CapturedCall::nested`]).
    outer: Option<u32>,
}

enum Deferred {
    /// A captured call of an iteration whose start the collector has not seen yet.
    Call(CapturedCall),
    Api {
        runtime: bool,
        cbid: u32,
        start: u64,
        corr: u32,
        rv: u32,
    },
    Host(Activity),
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
        Collector {
            running: s.running,
            activity: s.activity,
            control: s.control,
            finish: s.finish,
            buffers: s.buffers,
            lines: s.lines,
            trailer_tx: s.trailer,
            settle: s.settle,
            flush_interval: s.flush_interval,
            names: NameCache::default(),
            classes: activity::ApiClasses::default(),
            calls: CorrelationMap::default(),
            waiting: HashMap::default(),
            iterations,
            last_flush: Instant::now(),
            live_bytes: HashMap::default(),
            alloc_sizes: HashMap::default(),
            trailer: Trailer::default(),
            future_scopes: std::collections::BTreeMap::new(),
            scope_batch: Vec::new(),
            call_batch: Vec::new(),
            events_pending: 0,
            event_reader: EventReader::default(),
            clock,
            deferred: Vec::new(),
            finishing: false,
            counted_api_records_before: 0,
            spare_buffers: None,
            kernel_groups: KernelGroups::default(),
            device_busy: Vec::new(),
            scope_busy: ScopeBusyTable::default(),
            nvml: s.nvml,
            nvml_rows: Vec::new(),
            work_per_iteration: s.work_per_iteration,
            record_activities: s.record_activities,
            auto_ranges: s.auto_ranges,
            offline_timeline: false,
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
            crossbeam_channel::select! {
                recv(buffers) -> b => match b {
                    Ok(b) => self.decode(b),
                    Err(_) => buffers = crossbeam_channel::never(),
                },
                recv(self.finish) -> m => {
                    if let Ok(f) = m {
                        self.finish(f.host_end_ns, f.cupti_end, f.open_scopes, f.counters);
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
        while let Ok(m) = self.control.try_recv() {
            self.handle(m);
        }
    }

    fn handle(&mut self, m: IterationEnd) {
        self.end_iteration(
            m.index,
            m.host_end_ns,
            m.cupti_end,
            m.launches,
            &m.open_scopes,
            m.counters,
        );
    }

    fn dropped_total(&self) -> u64 {
        self.activity
            .as_ref()
            .map_or(0, |a| a.stats.dropped_records.load(Ordering::Relaxed))
    }

    fn end_iteration(
        &mut self,
        index: u64,
        host_end_ns: u64,
        cupti_end: Option<u64>,
        launches: u64,
        open: &[u32],
        counters: Option<IterationCounters>,
    ) {
        let dropped = self.dropped_total();
        let cupti_running = self.running.cupti.is_some();
        let Some(pos) = self.position_of(index) else {
            return;
        };
        let it = &mut self.iterations[pos];
        // Without CUPTI every window is open-ended. With it, a timestamp that could not be read
        // closes the window where it opened: its records go to the next iteration rather than
        // every later record to this one, and iteration ends stay ordered (`position_at`).
        let cupti_end = match cupti_end {
            Some(end) => end,
            None if cupti_running => {
                it.warnings.push(
                    "CUPTI's timestamp could not be read at this step(): the iteration's GPU records are counted in the next row".into(),
                );
                it.cupti_start
            }
            None => u64::MAX,
        };
        it.launches_by_end = launches;
        it.counters = counters;
        it.host_end_ns = Some(host_end_ns);
        it.cupti_end = Some(cupti_end);
        it.ended_at = Some(Instant::now());
        if !open.is_empty() {
            let paths: Vec<String> = open.iter().map(|p| self.running.paths.path(*p)).collect();
            it.warnings.push(format!(
                "iteration ended with scopes still open on the stepping thread: {}",
                paths.join(", ")
            ));
        }
        let buffers = self.spare_buffers.take().unwrap_or_default();
        let next = IterationState::new(index + 1, host_end_ns, cupti_end, dropped, buffers);
        self.iterations.push_back(next);
        for d in std::mem::take(&mut self.deferred) {
            match d {
                Deferred::Api {
                    runtime,
                    cbid,
                    start,
                    corr,
                    rv,
                } => self.accept_api(runtime, cbid, start, corr, rv),
                Deferred::Host(a) => self.accept_activity(a),
                Deferred::Call(c) => self.accept_call(c),
            }
        }
        if let Some(future) = self.future_scopes.remove(&(index + 1)) {
            self.add_scopes(future);
        }
    }

    fn add_scopes(&mut self, mut batch: Vec<ScopeRecord>) {
        let newest = self.iterations.back().map_or(0, |it| it.index);
        for rec in batch.drain(..) {
            if rec.iteration > newest {
                self.future_scopes
                    .entry(rec.iteration)
                    .or_default()
                    .push(rec);
                continue;
            }
            let Some(pos) = self.position_of(rec.iteration) else {
                self.trailer.late_records += 1;
                continue;
            };
            let it = &mut self.iterations[pos];
            if rec.out_of_order {
                it.warnings.push(format!(
                    "scope {} ended while a scope opened after it was still open (guards dropped out of order)",
                    self.running.paths.path(rec.path_id)
                ));
            }
            if rec.iteration_at_entry != rec.iteration {
                it.warnings.push(format!(
                    "scope {} was open across {} iteration boundary(ies); its host time is counted in the iteration where it ended",
                    self.running.paths.path(rec.path_id),
                    rec.iteration - rec.iteration_at_entry
                ));
            }
            let mut rec = rec;
            if let Some(events) = rec.events.take() {
                self.events_pending += 1;
                it.events.push(PendingEvents {
                    path_id: rec.path_id,
                    events,
                });
            }
            it.scopes.push(rec);
        }
        self.scope_batch = batch;
    }

    fn decode(&mut self, buf: FilledBuffer) {
        let (Some(lib), Some(shared)) = (self.running.cupti, self.activity.clone()) else {
            return;
        };
        self.drain_calls();
        // Each record is attributed as it is decoded: no Vec<Record> per buffer (128 bytes a
        // record, grown by reallocation), which tripled the cost per record.
        let mut names = std::mem::take(&mut self.names);
        // SAFETY: the buffer came from CUPTI's completion callback of this session.
        unsafe {
            activity::drain_buffer(lib, &shared, buf, |rec| {
                // SAFETY: `rec` is a complete record handed out by cuptiActivityGetNextRecord.
                let record = activity::record::decode(rec, &mut names);
                self.accept(record);
            });
        }
        self.names = names;
    }

    fn accept(&mut self, rec: Record) {
        self.trailer.activity_records += 1;
        let activity = match rec {
            Record::ExternalCorrelation {
                correlation_id,
                external_id,
            } => {
                self.calls
                    .update(correlation_id, |c| c.path_id = external_id as u32);
                return;
            }
            Record::Api(api) => {
                self.trailer.api_records += 1;
                self.accept_api(
                    api.runtime,
                    api.cbid,
                    api.start,
                    api.correlation_id,
                    api.return_value,
                );
                return;
            }
            Record::Overhead { start, end, .. } => {
                self.trailer.overhead.cupti_overhead_ns += end.saturating_sub(start);
                return;
            }
            Record::Other { .. } => return,
            Record::Kernel(k) => {
                self.trailer.kernel_records += 1;
                Activity::Kernel(k)
            }
            Record::Memcpy(c) => Activity::Memcpy(c),
            Record::Memset(m) => Activity::Memset(m),
            Record::Sync(s) => Activity::Sync(s),
            Record::Memory(m) => Activity::Memory(m),
        };
        self.accept_activity(activity);
    }

    fn accept_api(&mut self, runtime: bool, cbid: u32, start: u64, corr: u32, rv: u32) {
        let class = self.classes.of(runtime, cbid);
        let Some(pos) = self.position_at(start) else {
            self.trailer.unplaced_records += 1;
            return;
        };
        if start < self.iterations[pos].cupti_start && pos == 0 {
            // Belongs to an iteration already written.
            self.trailer.late_records += 1;
            return;
        }
        if self.iterations[pos].cupti_end.is_none() && !self.finishing {
            self.deferred.push(Deferred::Api {
                runtime,
                cbid,
                start,
                corr,
                rv,
            });
            return;
        }
        self.register_call(pos, corr, class, rv, true, 0, None);
    }

    /// A call the API callback captured ([`CapturedCall`]): placed in the iteration open when it
    /// was entered, attributed to the scope open on its thread.
    fn accept_call(&mut self, call: CapturedCall) {
        let newest = self.iterations.back().map_or(0, |it| it.index);
        if call.iteration > newest {
            // Its iteration's start (the step() message) has not been taken yet.
            self.deferred.push(Deferred::Call(call));
            return;
        }
        self.trailer.api_records += 1;
        let Some(pos) = self.position_of(call.iteration) else {
            // Belongs to an iteration already written.
            self.trailer.late_records += 1;
            return;
        };
        let class = self.classes.of(call.runtime, call.cbid);
        self.register_call(
            pos,
            call.correlation_id,
            class,
            call.return_value,
            !call.nested,
            call.path_id,
            call.nested.then_some(call.outer_correlation_id),
        );
    }

    /// Records that call `corr` of `class` belongs to the iteration at `pos`, and places the
    /// activities that waited for it. A call the application made itself (`outermost`) counts
    /// toward the calls the row waits for, and its launch, copy or memset, when it succeeded, is
    /// awaited (unless a nested call's GPU record stood for it already); a call made inside
    /// another is neither. The call's scope path (`path_id`, 0 for none, which keeps one already
    /// known) and, for a nested call, the outermost call's id (`outer`) are recorded with it.
    #[allow(clippy::too_many_arguments)]
    fn register_call(
        &mut self,
        pos: usize,
        corr: u32,
        class: Option<ApiClass>,
        rv: u32,
        outermost: bool,
        path_id: u32,
        outer: Option<u32>,
    ) {
        let it = &mut self.iterations[pos];
        self.calls.update(corr, |info| {
            info.iteration = Some(it.index);
            if path_id != 0 {
                info.path_id = path_id;
            }
            if outer.is_some() {
                info.outer = outer;
            }
        });
        it.api_ids.push(corr);
        if outermost && activity::is_counted(class) {
            it.counted_api_records += 1;
        }
        // Most calls come before their GPU records: nothing waits, and no nested call's record
        // arrived first.
        let waiting = if self.waiting.is_empty() {
            None
        } else {
            self.waiting.remove(&corr)
        };
        if let Some(waiting) = waiting {
            for a in waiting {
                self.place(pos, a);
            }
        } else if outermost
            && rv == 0
            && matches!(
                class,
                Some(ApiClass::KernelLaunch | ApiClass::Memcpy | ApiClass::Memset)
            )
            && (it.arrived.is_empty() || !it.arrived.remove(&corr))
        {
            it.expected.insert(corr);
        }
    }

    /// Takes the calls every thread's API callback captured since the last call. Before any
    /// buffer is decoded: a synchronization or allocation record is placed as it is decoded, and
    /// its scope comes from its call.
    fn drain_calls(&mut self) {
        let mut batch = std::mem::take(&mut self.call_batch);
        self.running.drain_calls(&mut batch);
        for call in batch.drain(..) {
            self.accept_call(call);
        }
        self.call_batch = batch;
    }

    fn accept_activity(&mut self, a: Activity) {
        if a.is_host_side() {
            let t = a.fallback_time();
            match self.position_at(t) {
                Some(0) if t < self.iterations[0].cupti_start => self.trailer.late_records += 1,
                Some(pos) if self.iterations[pos].cupti_end.is_none() && !self.finishing => {
                    self.deferred.push(Deferred::Host(a))
                }
                Some(pos) => self.place(pos, a),
                None => self.trailer.unplaced_records += 1,
            }
            return;
        }
        let corr = a.correlation_id();
        match self.calls.get(corr) {
            Some(
                info @ CallInfo {
                    iteration: Some(index),
                    ..
                },
            ) => match self.position_of(index) {
                Some(pos) => self.place_as(pos, a, info.path_id, info.outer),
                None => self.trailer.late_records += 1,
            },
            _ => self.waiting.entry(corr).or_default().push(a),
        }
    }

    /// Where iteration `index` sits in `iterations`. Indices run consecutively from the front
    /// (each end pushes the next), so this is arithmetic. A search along the deque here, once
    /// per record, made the collector quadratic in the iterations waiting for their rows
    /// (thousands of them at 10 000 steps a second with rows flushed every second).
    fn position_of(&self, index: u64) -> Option<usize> {
        let front = self.iterations.front()?.index;
        let pos = usize::try_from(index.checked_sub(front)?).ok()?;
        let it = self.iterations.get(pos)?;
        debug_assert_eq!(it.index, index, "iteration indices are consecutive");
        (it.index == index).then_some(pos)
    }

    /// Where the iteration whose CUPTI window holds time `t` sits: the first whose end is after
    /// `t`. Ends never decrease along the deque (`end_iteration`), so this is a binary search.
    fn position_at(&self, t: u64) -> Option<usize> {
        let pos = self.iterations.partition_point(|it| !it.contains_cupti(t));
        (pos < self.iterations.len()).then_some(pos)
    }

    fn place(&mut self, pos: usize, a: Activity) {
        let info = self.calls.get(a.correlation_id()).unwrap_or_default();
        self.place_as(pos, a, info.path_id, info.outer);
    }

    /// [`place`](Self::place) with what is known of the activity's correlation id: its scope
    /// path and outermost call ([`CallInfo`]). Those two, not the whole `CallInfo`: passed in
    /// registers rather than copied through the stack, which read the copy of the entry just
    /// written by `register_call` before its stores had landed (a stalled forward per kernel).
    fn place_as(&mut self, pos: usize, a: Activity, path_id: u32, outer: Option<u32>) {
        let corr = a.correlation_id();
        let it = &mut self.iterations[pos];
        match outer {
            // A nested call's record stands for its outermost call's.
            Some(outer) => {
                if !it.expected.remove(outer) {
                    it.arrived.insert(outer);
                }
            }
            None => {
                it.expected.remove(corr);
            }
        }
        it.placed.push(Placed {
            path_id,
            activity: a,
        });
    }

    /// Periodic work: flush CUPTI while iterations wait, resolve events, write ready rows.
    /// Takes the scopes every thread closed since the last call.
    fn drain_scopes(&mut self) {
        let mut batch = std::mem::take(&mut self.scope_batch);
        // The anchor first: every record drained below was made before it, but for those closed
        // while the rings are read (converted at the newest segment's rate).
        if let Some(clock) = &mut self.clock {
            clock.push(self.running.clock.anchor());
        }
        self.running.drain_scopes(&mut batch);
        if let Some(clock) = &self.clock {
            for rec in &mut batch {
                rec.start_ns = clock.to_ns(rec.start_ns);
                rec.end_ns = clock.to_ns(rec.end_ns);
            }
        }
        self.add_scopes(batch);
    }

    fn maintain(&mut self) {
        self.drain_scopes();
        self.drain_calls();
        let waiting_rows = self
            .iterations
            .iter()
            .any(|it| it.ended_at.is_some() && !it.flushed);
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
            if it.ended_at.is_some_and(|t| t <= flush_start) {
                it.flushed = true;
            }
        }
    }

    /// Reads the scope events that have completed, in every waiting iteration.
    fn resolve_events(&mut self) {
        // Most runs time no scope on a stream: nothing to look at in any iteration.
        if self.events_pending == 0 {
            return;
        }
        for pos in 0..self.iterations.len() {
            self.resolve_events_at(pos, false);
        }
        self.event_reader.end_pass(&self.running.events);
    }

    /// Reads the completed scope events of the iteration at `pos`; with `force`, gives up on the
    /// rest (each with a warning in its row).
    fn resolve_events_at(&mut self, pos: usize, force: bool) {
        let running = &self.running;
        let it = &mut self.iterations[pos];
        if it.events.is_empty() {
            return;
        }
        let before = it.events.len();
        let mut still = Vec::new();
        // Scopes complete in the order they were recorded on a stream: unless giving up, the
        // first pending pair ends this pass, so a tick makes one driver call per completed scope
        // and one more, not one per scope still running.
        let mut blocked = false;
        for ev in it.events.drain(..) {
            if blocked {
                still.push(ev);
                continue;
            }
            match self.event_reader.read(&ev.events) {
                Ok(Some(ns)) => *it.event_ns.entry(ev.path_id).or_default() += ns,
                Ok(None) if !force => {
                    blocked = true;
                    still.push(ev);
                }
                Ok(None) => it.warnings.push(format!(
                    "scope {}: timing events had not completed when the row was written",
                    running.paths.path(ev.path_id)
                )),
                Err(e) => it.warnings.push(format!(
                    "scope {}: timing events failed: {e}",
                    running.paths.path(ev.path_id)
                )),
            }
        }
        self.events_pending -= before - still.len();
        it.events = still;
    }

    fn front_ready(&self) -> bool {
        let Some(it) = self.iterations.front() else {
            return false;
        };
        let Some(ended_at) = it.ended_at else {
            return false;
        };
        let flushed = it.flushed || !self.timeline_rules();
        // NVML: one sampling period past the end, so that a sample brackets the window's end.
        let sampled = self
            .nvml
            .as_ref()
            .is_none_or(|n| ended_at.elapsed() >= n.config().period);
        (flushed
            && sampled
            && self.api_records_in(it)
            && it.expected.is_empty()
            && it.events.is_empty())
            || ended_at.elapsed() >= self.settle
    }

    /// Whether rows wait for CUPTI's records (the timeline and counters levels, and the offline
    /// collector), rather than being written as soon as the iteration ends (the scopes level).
    fn timeline_rules(&self) -> bool {
        self.running.cupti.is_some() || self.offline_timeline
    }

    /// Whether every counted call made before the iteration's end has been captured (or, from
    /// the offline collector's records, has its API record) here.
    fn api_records_in(&self, it: &IterationState) -> bool {
        !self.timeline_rules()
            || self.counted_api_records_before + it.counted_api_records >= it.launches_by_end
    }

    /// Writes the oldest iteration's row. Activities still waiting for an API record whose GPU
    /// time falls before the iteration's end are placed here (their API record never came).
    fn finalize_front(&mut self, incomplete: bool) {
        let Some(front) = self.iterations.front() else {
            return;
        };
        let end = front.cupti_end.unwrap_or(u64::MAX);
        let orphans: Vec<u32> = self
            .waiting
            .iter()
            .filter(|(_, v)| v.iter().any(|a| a.fallback_time() < end))
            .map(|(k, _)| *k)
            .collect();
        for corr in orphans {
            if let Some(v) = self.waiting.remove(&corr) {
                for a in v {
                    self.place(0, a);
                }
            }
        }
        // Only this row's events are given up on: later iterations' may still complete.
        self.resolve_events_at(0, true);
        self.event_reader.end_pass(&self.running.events);
        let Some(mut it) = self.iterations.pop_front() else {
            return;
        };
        let have = self.counted_api_records_before + it.counted_api_records;
        if it.ended_at.is_some() && self.timeline_rules() && have < it.launches_by_end {
            it.missing_api_records = it.launches_by_end - have;
        }
        // A shortfall is reported in this row once; later rows start from the count at its end.
        self.counted_api_records_before = have.max(it.launches_by_end);
        for corr in &it.api_ids {
            self.calls.remove(*corr);
        }
        let dropped_now = self.dropped_total();
        let mut row = self.build_row(&mut it, incomplete, dropped_now);
        it.placed.clear();
        it.api_ids.clear();
        it.expected.clear();
        self.spare_buffers = Some(IterationBuffers {
            placed: it.placed,
            api_ids: it.api_ids,
            expected: it.expected,
        });
        if let Some(n) = &self.nvml {
            row.nvml = n.summarize_all(row.host_start_ns, row.host_start_ns + row.host_wall_ns);
            if !row.perturbed {
                self.nvml_rows.push(row.nvml.clone());
            }
        }
        self.trailer.iterations += 1;
        self.trailer.dropped_records = dropped_now;
        let _ = self.lines.send(LedgerLine::Iteration(row));
    }

    fn finish(
        &mut self,
        host_end_ns: u64,
        cupti_end: Option<u64>,
        open: Vec<u32>,
        counters: Option<IterationCounters>,
    ) {
        // Every step() message first, so that iteration boundaries are known; then every buffer
        // (the session was stopped with a forced flush before Finish was sent).
        self.take_iteration_ends();
        self.drain_calls();
        while let Ok(b) = self.buffers.try_recv() {
            self.decode(b);
        }
        self.drain_scopes();
        self.trailer
            .warnings
            .append(&mut self.running.take_end_warnings());
        // The open iteration ends now; what waited for its end is placed.
        self.finishing = true;
        if let Some(it) = self.iterations.back_mut() {
            it.host_end_ns = Some(host_end_ns);
            it.cupti_end = Some(cupti_end.unwrap_or(u64::MAX));
        }
        for d in std::mem::take(&mut self.deferred) {
            match d {
                Deferred::Api {
                    runtime,
                    cbid,
                    start,
                    corr,
                    rv,
                } => self.accept_api(runtime, cbid, start, corr, rv),
                Deferred::Host(a) => self.accept_activity(a),
                Deferred::Call(c) => self.accept_call(c),
            }
        }
        // Ended iterations: written as usual, without waiting any longer.
        while self
            .iterations
            .front()
            .is_some_and(|it| it.ended_at.is_some())
        {
            self.finalize_front(false);
        }
        // The open iteration: written only when something happened in it.
        if let Some(it) = self.iterations.front_mut() {
            // Scopes or GPU work make a partial row; a trailing synchronize or free alone does not.
            let gpu_work = it
                .placed
                .iter()
                .filter(|p| !p.activity.is_host_side())
                .count();
            let host_only = it.placed.len() - gpu_work;
            // A counters pass that ran in the partial iteration is reported in its row.
            let has_counters = counters.is_some();
            it.counters = counters;
            let has_content =
                !it.scopes.is_empty() || gpu_work > 0 || !self.waiting.is_empty() || has_counters;
            if !has_content && host_only > 0 {
                self.trailer.warnings.push(format!(
                    "{host_only} synchronization/allocation records after the last step() are in no row"
                ));
            }
            if !open.is_empty() {
                let paths: Vec<String> = open.iter().map(|p| self.running.paths.path(*p)).collect();
                it.warnings.push(format!(
                    "profiler finished with scopes still open: {}",
                    paths.join(", ")
                ));
            }
            if has_content {
                it.warnings.push("work recorded after the last step(): this row is the partial iteration before finish()".into());
                self.finalize_front(true);
            }
        }
        let leftover: usize = self.waiting.values().map(Vec::len).sum();
        self.trailer.unplaced_records += leftover as u64;
        if leftover > 0 {
            self.trailer.warnings.push(format!(
                "{leftover} activity records could not be placed in any iteration (no API record and no matching time)"
            ));
        }
        if self.trailer.late_records > 0 {
            self.trailer.warnings.push(format!(
                "{} records arrived after their iteration's row was written (raise Config::settle)",
                self.trailer.late_records
            ));
        }
        if let Some(a) = &self.activity {
            let st = &a.stats;
            self.trailer.dropped_records = st.dropped_records.load(Ordering::Relaxed);
            self.trailer.overhead.buffer_callback_ns = st.callback_ns.load(Ordering::Relaxed);
            self.trailer.overhead.buffers_used = st.buffers_used.load(Ordering::Relaxed);
            self.trailer.overhead.buffer_requests_refused =
                st.requests_refused.load(Ordering::Relaxed);
            let growth = st.pool_growth.load(Ordering::Relaxed);
            if growth > 0 {
                self.trailer.warnings.push(format!(
                    "the CUPTI buffer pool grew by {growth} buffers during the run (allocation on a CUPTI thread); raise Config::buffers"
                ));
            }
        }
        if self.trailer.dropped_records > 0 {
            let msg = format!(
                "CUPTI dropped {} activity records (buffer pool exhausted); raise Config::max_buffers or buffer_bytes",
                self.trailer.dropped_records
            );
            eprintln!("gpu-ledger: warning: {msg}");
            self.trailer.warnings.push(msg);
        }
        let lost = self.running.calls_lost();
        if lost > 0 {
            self.trailer.warnings.push(format!(
                "{lost} API calls made by exiting threads could not be captured; their GPU records were placed by time and counted in the unscoped path"
            ));
        }
        let event_failures = self.running.events.failures();
        if event_failures > 0 {
            self.trailer.warnings.push(format!(
                "{event_failures} scope timing events could not be recorded"
            ));
        }
        if let Some(mut n) = self.nvml.take() {
            self.trailer.energy = Some(crate::ledger::run_energy(
                self.nvml_rows.iter().map(Vec::as_slice),
                self.work_per_iteration,
            ));
            for st in n.stats() {
                if st.sample_errors + st.energy_errors > 0 || st.samples_overwritten > 0 {
                    self.trailer.warnings.push(format!(
                        "NVML device {}: {} sample errors, {} energy errors, {} samples overwritten; {}",
                        st.device_id,
                        st.sample_errors,
                        st.energy_errors,
                        st.samples_overwritten,
                        st.errors.join("; ")
                    ));
                }
            }
            if let Err(e) = n.stop(crate::nvml::DEFAULT_STOP_TIMEOUT) {
                self.trailer.warnings.push(format!("NVML sampler: {e}"));
            }
        }
        self.trailer.overhead.collector_cpu_ns = crate::util::thread_cpu_ns();
        // Final: shutdown closed step() (the `open` lock) before sending Finish.
        self.trailer.overhead.step_ns = self.running.step_ns.load(Ordering::Relaxed);
        self.trailer.overhead.scope_clock = self.running.clock.source().name().to_string();
        self.trailer.overhead.scope_events_made = self.running.events.made() as u64;
        let _ = self.lines.send(LedgerLine::Trailer(self.trailer.clone()));
        let _ = self.trailer_tx.send(self.trailer.clone());
    }

    fn build_row(
        &mut self,
        it: &mut IterationState,
        incomplete: bool,
        dropped_now: u64,
    ) -> IterationRow {
        let running = self.running.clone();
        let paths = &running.paths;
        if it.counters.is_some() {
            claim_counters_kernels(&mut it.placed, running.counters_path);
        }
        let missing = it.expected.len() as u64 + it.missing_api_records;
        if missing > 0 {
            it.warnings.push(format!(
                "{missing} launch/copy/memset calls made in this iteration had no record within the settle \
                 time ({} ms): {} without a GPU record, {} whose call was not captured",
                self.settle.as_millis(),
                it.expected.len(),
                it.missing_api_records
            ));
        }
        // One pass over the placed activities: devices, kernel groups, copies, scopes.
        // Kept across rows, with the capacity they grew to.
        let mut per_device = std::mem::take(&mut self.device_busy);
        let mut kernels = std::mem::take(&mut self.kernel_groups);
        let mut copies: HashMap<(u32, &'static str), CopyGroup> = HashMap::default();
        let mut memsets: HashMap<u32, CopyGroup> = HashMap::default();
        let mut syncs: HashMap<&'static str, SyncGroup> = HashMap::default();
        let mut scope_busy = std::mem::take(&mut self.scope_busy);
        let mut memory_events: Vec<&MemoryRecord> = Vec::new();
        for p in &it.placed {
            let (device_id, interval, kernel) = match &p.activity {
                Activity::Kernel(k) => {
                    kernels.add(k);
                    (k.device_id, (k.start, k.end), true)
                }
                Activity::Memcpy(c) => {
                    let g = copies
                        .entry((c.device_id, c.direction))
                        .or_insert_with(|| CopyGroup {
                            device_id: c.device_id,
                            kind: c.direction.to_string(),
                            count: 0,
                            bytes: 0,
                            total_ns: 0,
                        });
                    g.count += 1;
                    g.bytes += c.bytes;
                    g.total_ns += c.end.saturating_sub(c.start);
                    (c.device_id, (c.start, c.end), false)
                }
                Activity::Memset(m) => {
                    let g = memsets.entry(m.device_id).or_insert_with(|| CopyGroup {
                        device_id: m.device_id,
                        kind: "memset".into(),
                        count: 0,
                        bytes: 0,
                        total_ns: 0,
                    });
                    g.count += 1;
                    g.bytes += m.bytes;
                    g.total_ns += m.end.saturating_sub(m.start);
                    (m.device_id, (m.start, m.end), false)
                }
                Activity::Sync(s) => {
                    let g = syncs.entry(s.kind).or_insert_with(|| SyncGroup {
                        kind: s.kind.into(),
                        count: 0,
                        total_ns: 0,
                    });
                    g.count += 1;
                    g.total_ns += s.end.saturating_sub(s.start);
                    continue;
                }
                Activity::Memory(m) => {
                    memory_events.push(m);
                    continue;
                }
            };
            // A handful of devices: a linear search beats hashing.
            let d = match per_device.iter().position(|d| d.device_id == device_id) {
                Some(i) => &mut per_device[i],
                None => {
                    per_device.push(DeviceBusy {
                        device_id,
                        busy: BusyAccumulator::default(),
                        kernels: 0,
                    });
                    per_device.last_mut().expect("just pushed")
                }
            };
            d.busy.push(interval);
            d.kernels += u64::from(kernel);
            scope_busy.add(paths, p.path_id, interval, kernel);
        }
        // Peak device memory, in time order, carrying live bytes across iterations.
        memory_events.sort_by_key(|m| m.timestamp);
        let mut peaks: HashMap<u32, u64> = HashMap::default();
        for m in memory_events {
            if m.memory_kind != DEVICE_MEMORY_KIND {
                continue;
            }
            let live = self.live_bytes.entry(m.device_id).or_insert(0);
            if m.allocation {
                *live += m.bytes as i64;
                self.alloc_sizes.insert((m.device_id, m.address), m.bytes);
            } else {
                let bytes = self
                    .alloc_sizes
                    .remove(&(m.device_id, m.address))
                    .unwrap_or(m.bytes);
                *live -= bytes as i64;
            }
            let peak = peaks.entry(m.device_id).or_insert(0);
            *peak = (*peak).max((*live).max(0) as u64);
        }
        let mut devices: Vec<DeviceIteration> = per_device
            .iter_mut()
            .filter_map(|d| {
                let b = d.busy.summary()?;
                let live = self
                    .live_bytes
                    .get(&d.device_id)
                    .map(|v| (*v).max(0) as u64);
                Some(DeviceIteration {
                    device_id: d.device_id,
                    first_start_ns: b.first_start_ns,
                    last_end_ns: b.last_end_ns,
                    busy_ns: b.busy_ns,
                    idle_ns: b.idle_ns,
                    largest_gap_ns: b.largest_gap_ns,
                    kernel_count: d.kernels,
                    peak_memory_bytes: peaks.get(&d.device_id).copied().or(live),
                })
            })
            .collect();
        devices.sort_by_key(|d| d.device_id);
        for d in &mut per_device {
            d.busy.clear();
            d.kernels = 0;
        }
        self.device_busy = per_device;
        // Scopes.
        let mut rows: HashMap<u32, ScopeRow> = HashMap::default();
        let new_row = |id: u32| ScopeRow {
            path: paths.path(id),
            calls: 0,
            host_ns: 0,
            launches: 0,
            kernels: 0,
            device_ns: 0,
            device_ns_inclusive: 0,
            event_device_ns: None,
        };
        for s in &it.scopes {
            let r = rows.entry(s.path_id).or_insert_with(|| new_row(s.path_id));
            r.calls += 1;
            r.host_ns += s.end_ns.saturating_sub(s.start_ns);
        }
        for (path_id, ns) in &it.event_ns {
            rows.entry(*path_id)
                .or_insert_with(|| new_row(*path_id))
                .event_device_ns = Some(*ns);
        }
        let busy_rows = scope_busy.finish();
        self.scope_busy = scope_busy;
        for b in &busy_rows.own {
            let r = rows.entry(b.path_id).or_insert_with(|| new_row(b.path_id));
            r.launches += b.launches;
            r.kernels = b.kernels;
            r.device_ns = b.busy_ns;
        }
        for b in &busy_rows.inclusive {
            rows.entry(b.path_id)
                .or_insert_with(|| new_row(b.path_id))
                .device_ns_inclusive = b.busy_ns;
        }
        let mut scopes: Vec<ScopeRow> = rows.into_values().collect();
        scopes.sort_by(|a, b| a.path.cmp(&b.path));
        let kernel_groups = kernels.finish();
        self.kernel_groups = kernels;
        let mut memcpy: Vec<CopyGroup> = copies.into_values().collect();
        memcpy.sort_by(|a, b| (a.device_id, &a.kind).cmp(&(b.device_id, &b.kind)));
        let mut memset: Vec<CopyGroup> = memsets.into_values().collect();
        memset.sort_by_key(|g| g.device_id);
        let mut synchronization: Vec<SyncGroup> = syncs.into_values().collect();
        synchronization.sort_by(|a, b| a.kind.cmp(&b.kind));
        let host_end = it.host_end_ns.unwrap_or(it.host_start_ns);
        let mut counters = it.counters.take();
        if let Some(c) = counters.as_mut().filter(|c| self.auto_ranges && c.complete) {
            name_auto_ranges(c, &it.placed);
        }
        let (activities, scope_spans) = if self.record_activities {
            (
                Some(activity_entries(&it.placed, paths)),
                Some(scope_spans(&it.scopes, paths)),
            )
        } else {
            (None, None)
        };
        IterationRow {
            index: it.index,
            host_start_ns: it.host_start_ns,
            host_wall_ns: host_end.saturating_sub(it.host_start_ns),
            complete: !incomplete && missing == 0,
            perturbed: counters.is_some(),
            devices,
            scopes,
            kernels: kernel_groups,
            memcpy,
            memset,
            synchronization,
            dropped_records: dropped_now.saturating_sub(it.dropped_at_start),
            missing_records: missing,
            nvml: Vec::new(),
            warnings: std::mem::take(&mut it.warnings),
            activities,
            scope_spans,
            counters,
        }
    }
}

/// How often the collector flushes CUPTI while the buffer pool is nearly exhausted.
const PRESSURE_FLUSH_INTERVAL: Duration = Duration::from_millis(20);
/// Longest time the collector sleeps between looks at `step()`'s messages and the scope rings.
const TICK: Duration = Duration::from_millis(2);

/// Kernels the CUPTI Range Profiler launches itself while user-replay passes start and stop
/// (measured on CUPTI 13.0 / H200, docs/measurements.md run 25). They have no API record, so
/// they would land in `(unscoped)` by time.
const RANGE_PROFILER_KERNELS: [&str; 1] = ["WaitNs"];

/// In an iteration with a counters pass, moves the Range Profiler's own kernels from
/// `(unscoped)` to the counters scope, so that the application's scopes show only its work.
fn claim_counters_kernels(placed: &mut [Placed], counters_path: u32) {
    if counters_path == 0 {
        return;
    }
    for p in placed.iter_mut().filter(|p| p.path_id == 0) {
        if let Activity::Kernel(k) = &p.activity {
            if RANGE_PROFILER_KERNELS.contains(&k.name) {
                p.path_id = counters_path;
            }
        }
    }
}

/// Names auto ranges from the iteration's kernel records: range `"i"` is the `i`-th kernel in
/// launch order (correlation id, then start time for the kernels of one graph launch). With user
/// replay every iteration of the collection must launch the same kernels; the names come from
/// the iteration that completed it.
fn name_auto_ranges(counters: &mut IterationCounters, placed: &[Placed]) {
    let mut kernels: Vec<&KernelRecord> = placed
        .iter()
        .filter_map(|p| match &p.activity {
            Activity::Kernel(k) => Some(k),
            _ => None,
        })
        .collect();
    kernels.sort_by_key(|k| (k.correlation_id, k.start));
    let launches: Vec<Launch> = kernels
        .iter()
        .map(|k| Launch::Kernel(k.name.to_string()))
        .collect();
    let launches = AutoRangeLaunches::new(&launches);
    for r in counters.ranges.iter_mut().filter(|r| r.kernel.is_none()) {
        if let Some((i, k)) = launches.get(&r.name) {
            r.kernel = Some(k.to_string());
            r.launch_index = Some(i as u64);
        }
    }
}

/// `CUPTI_ACTIVITY_MEMORY_KIND_DEVICE`.
const DEVICE_MEMORY_KIND: u32 = sys::CUpti_ActivityMemoryKind::CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;

/// What makes a kernel group: the name's text and the launch shape.
#[derive(Hash, PartialEq, Eq)]
struct KernelKey {
    name: &'static str,
    device_id: u32,
    grid: [u32; 3],
    block: [u32; 3],
    cluster: [u32; 3],
    regs: u32,
    smem: (u32, u32),
    local: u32,
}

impl KernelKey {
    fn of_group(name: &'static str, g: &KernelGroup) -> Self {
        KernelKey {
            name,
            device_id: g.device_id,
            grid: g.grid,
            block: g.block,
            cluster: g.cluster,
            regs: g.registers_per_thread,
            smem: (g.static_shared_bytes, g.dynamic_shared_bytes),
            local: g.local_bytes_per_thread,
        }
    }
}

/// A hash of a kernel's name address (and length) and launch shape, read straight from its
/// record: hashing the name's text per kernel was a fifth of building a row, and a key struct
/// built on the stack to be hashed and compared cost as much again (loads of fields just stored).
fn shape_hash(k: &KernelRecord) -> u64 {
    // Each pair of u32 times its own odd constant (products that do not wait on each other),
    // folded: collisions only cost a comparison ([`KernelGroups::add`]).
    let pair = |a: u32, b: u32| u64::from(a) | (u64::from(b) << 32);
    let words = [
        k.name.as_ptr() as u64,
        k.name.len() as u64 ^ (u64::from(k.device_id) << 32),
        pair(k.grid[0], k.grid[1]),
        pair(k.grid[2], k.block[0]),
        pair(k.block[1], k.block[2]),
        pair(k.cluster[0], k.cluster[1]),
        pair(k.cluster[2], k.registers_per_thread),
        pair(k.static_shared_bytes, k.dynamic_shared_bytes),
        u64::from(k.local_bytes_per_thread),
    ];
    const ODD: [u64; 9] = [
        0x9E37_79B9_7F4A_7C15,
        0xC2B2_AE3D_27D4_EB4F,
        0x1656_67B1_9E37_79F9,
        0xD6E8_FEB8_6659_FD93,
        0xFF51_AFD7_ED55_8CCD,
        0xC4CE_B9FE_1A85_EC53,
        0x94D0_49BB_1331_11EB,
        0xBF58_476D_1CE4_E5B9,
        0x8CB9_2BA7_2F3D_8DD7,
    ];
    words
        .iter()
        .zip(ODD)
        .fold(0u64, |h, (w, c)| h ^ w.wrapping_mul(c))
}

/// One kernel group of a row, with its name (copied into the group once, at the end) and the
/// next group whose [`shape_hash`] is the same.
struct KernelAcc {
    name: &'static str,
    group: KernelGroup,
    next: Option<usize>,
}

impl KernelAcc {
    /// Same name address and shape: the same group.
    fn holds(&self, k: &KernelRecord) -> bool {
        let g = &self.group;
        std::ptr::eq(self.name, k.name)
            && g.device_id == k.device_id
            && g.grid == k.grid
            && g.block == k.block
            && g.cluster == k.cluster
            && g.registers_per_thread == k.registers_per_thread
            && g.static_shared_bytes == k.static_shared_bytes
            && g.dynamic_shared_bytes == k.dynamic_shared_bytes
            && g.local_bytes_per_thread == k.local_bytes_per_thread
    }
}

/// A row's kernel groups ([`KernelKey`]), in the order of their first launch placed. Kernels
/// are grouped by name address, and the groups of one text at two addresses merged at the end.
struct KernelGroups {
    /// The groups found last, direct-mapped by [`shape_hash`]'s top bits: the hash and the
    /// group's index plus one (0: none). A hit is a compare where `index` took a probe sequence
    /// per kernel. Kept across rows: an entry is used only where the group it names holds the
    /// kernel, and a row has one group per name address and shape, so an entry of an earlier
    /// row is either right or passed over.
    recent: Box<[(u64, u32); RECENT_GROUPS]>,
    /// [`shape_hash`] -> the first group with it.
    index: HashMap<u64, usize>,
    groups: Vec<KernelAcc>,
    /// Every name address seen (in any row), and whether its text was seen at another address
    /// too: decoded names are interned (one address per text), but a record built by hand may
    /// hold a text at another address.
    addresses: HashMap<(usize, usize), bool>,
    /// The first address of each text.
    texts: HashMap<&'static str, (usize, usize)>,
    /// A name of this row has its text at two addresses: groups are merged by text at the end.
    merge: bool,
}

/// Slots of [`KernelGroups::recent`] (a power of two, 8 KiB): a row's distinct kernel shapes,
/// up to a few hundred, mostly find their own. 2 048 slots measured no faster (runs 82 and the
/// development VM) and take 32 KiB of a cache the collector shares with the buffers it streams.
const RECENT_GROUPS: usize = 512;

impl Default for KernelGroups {
    fn default() -> Self {
        KernelGroups {
            recent: Box::new([(0, 0); RECENT_GROUPS]),
            index: HashMap::default(),
            groups: Vec::new(),
            addresses: HashMap::default(),
            texts: HashMap::default(),
            merge: false,
        }
    }
}

impl KernelGroups {
    fn add(&mut self, k: &KernelRecord) {
        let hash = shape_hash(k);
        // The top bits: a product's best mixed.
        let slot = (hash >> (64 - RECENT_GROUPS.trailing_zeros())) as usize;
        let (seen, group) = self.recent[slot];
        let i = match (group as usize).checked_sub(1) {
            Some(i) if seen == hash && self.groups.get(i).is_some_and(|g| g.holds(k)) => i,
            _ => {
                let i = self.find_or_add(k, hash);
                self.recent[slot] = (hash, i as u32 + 1);
                i
            }
        };
        let g = &mut self.groups[i].group;
        let d = k.end.saturating_sub(k.start);
        g.count += 1;
        g.local_bytes_total = g.local_bytes_total.max(k.local_bytes_total);
        g.total_ns += d;
        g.min_ns = g.min_ns.min(d);
        g.max_ns = g.max_ns.max(d);
        g.graph_launches += u64::from(k.graph_id != 0);
    }

    /// The index of `k`'s group (whose [`shape_hash`] is `hash`), made where missing.
    #[inline(never)]
    fn find_or_add(&mut self, k: &KernelRecord, hash: u64) -> usize {
        let groups = &mut self.groups;
        let mut new_group = |groups: &mut Vec<KernelAcc>| {
            let address = (k.name.as_ptr() as usize, k.name.len());
            let shared = match self.addresses.get(&address) {
                Some(&shared) => shared,
                None => {
                    let shared = match self.texts.entry(k.name) {
                        std::collections::hash_map::Entry::Vacant(e) => {
                            e.insert(address);
                            false
                        }
                        std::collections::hash_map::Entry::Occupied(e) => {
                            self.addresses.insert(*e.get(), true);
                            true
                        }
                    };
                    self.addresses.insert(address, shared);
                    shared
                }
            };
            self.merge |= shared;
            groups.push(KernelAcc {
                name: k.name,
                group: KernelGroup {
                    name: String::new(),
                    device_id: k.device_id,
                    grid: k.grid,
                    block: k.block,
                    cluster: k.cluster,
                    registers_per_thread: k.registers_per_thread,
                    static_shared_bytes: k.static_shared_bytes,
                    dynamic_shared_bytes: k.dynamic_shared_bytes,
                    local_bytes_per_thread: k.local_bytes_per_thread,
                    local_bytes_total: 0,
                    count: 0,
                    total_ns: 0,
                    min_ns: u64::MAX,
                    max_ns: 0,
                    graph_launches: 0,
                },
                next: None,
            });
            groups.len() - 1
        };
        match self.index.entry(hash) {
            std::collections::hash_map::Entry::Vacant(e) => *e.insert(new_group(groups)),
            std::collections::hash_map::Entry::Occupied(e) => {
                let mut i = *e.get();
                loop {
                    if groups[i].holds(k) {
                        break i;
                    }
                    match groups[i].next {
                        Some(next) => i = next,
                        None => {
                            let j = new_group(groups);
                            groups[i].next = Some(j);
                            break j;
                        }
                    }
                }
            }
        }
    }

    /// The groups, longest total time first, then by name; empties the table for the next row.
    fn finish(&mut self) -> Vec<KernelGroup> {
        self.index.clear();
        if std::mem::take(&mut self.merge) {
            // One text at two addresses: its groups become one, in the order of first launch.
            let merged = merge_by_text(self.groups.drain(..).map(|a| (a.name, a.group)).collect());
            self.groups
                .extend(merged.into_iter().map(|(name, group)| KernelAcc {
                    name,
                    group,
                    next: None,
                }));
        }
        let longest_first = |a: &(u64, &str, usize), b: &(u64, &str, usize)| {
            b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1))
        };
        // Sorting (total, name, index) rather than the groups themselves: a group is 120 bytes.
        let mut order: Vec<(u64, &'static str, usize)> = self
            .groups
            .iter()
            .enumerate()
            .map(|(i, a)| (a.group.total_ns, a.name, i))
            .collect();
        // Unstable is enough: with no two groups equal (else the branch below), the order is total.
        order.sort_unstable_by(longest_first);
        if order
            .windows(2)
            .any(|w| longest_first(&w[0], &w[1]).is_eq())
        {
            // Groups of one name and total time in other shapes: their order has always been
            // the iteration order of a map of every group by key, filled in launch order. Kept,
            // so that rows do not change.
            let mut by_key: HashMap<KernelKey, KernelGroup> = HashMap::default();
            for KernelAcc {
                name, group: mut g, ..
            } in self.groups.drain(..)
            {
                g.name = name.to_string();
                by_key.entry(KernelKey::of_group(name, &g)).or_insert(g);
            }
            let mut out: Vec<KernelGroup> = by_key.into_values().collect();
            out.sort_by(|a, b| {
                b.total_ns
                    .cmp(&a.total_ns)
                    .then_with(|| a.name.cmp(&b.name))
            });
            return out;
        }
        // Straight from the table, without collecting it first.
        let out = order
            .iter()
            .map(|&(_, name, i)| KernelGroup {
                name: name.to_string(),
                ..self.groups[i].group.clone()
            })
            .collect();
        self.groups.clear();
        out
    }
}

/// Merges the groups whose keys differ only in the address of one name text, in the order of
/// their first launch.
fn merge_by_text(groups: Vec<(&'static str, KernelGroup)>) -> Vec<(&'static str, KernelGroup)> {
    let mut index: HashMap<KernelKey, usize> = HashMap::default();
    let mut out: Vec<(&'static str, KernelGroup)> = Vec::with_capacity(groups.len());
    for (name, g) in groups {
        match index.entry(KernelKey::of_group(name, &g)) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let m = &mut out[*e.get()].1;
                m.count += g.count;
                m.local_bytes_total = m.local_bytes_total.max(g.local_bytes_total);
                m.total_ns += g.total_ns;
                m.min_ns = m.min_ns.min(g.min_ns);
                m.max_ns = m.max_ns.max(g.max_ns);
                m.graph_launches += g.graph_launches;
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(out.len());
                out.push((name, g));
            }
        }
    }
    out
}

/// A device's GPU intervals in a row.
struct DeviceBusy {
    device_id: u32,
    busy: BusyAccumulator,
    kernels: u64,
}

/// A row's GPU intervals by scope path: each path's own, and those launched below it. Kept
/// across rows, with its entries' capacity.
#[derive(Default)]
struct ScopeBusyTable {
    entries: Vec<ScopeIntervals>,
    /// Entries of earlier rows, emptied, for their capacity.
    spare: Vec<ScopeIntervals>,
    /// Paths with activities of their own, for ids below [`DENSE_PATH_IDS`]: entry + 1 by id
    /// (0: none). Interned path ids count up from 1, so an indexed load replaces a hash lookup
    /// per activity.
    own_dense: Vec<u32>,
    /// The other paths with activities of their own (external ids the path table does not know).
    own: HashMap<u32, usize>,
    /// Those paths' entries in the order of the first activity placed in each.
    own_order: Vec<usize>,
    /// Every path in `entries`: those and their ancestors.
    all: HashMap<u32, usize>,
}

struct ScopeIntervals {
    path_id: u32,
    /// The parent path's entry; none for top-level paths and the unscoped path.
    parent: Option<usize>,
    launches: u64,
    kernels: u64,
    own: BusyAccumulator,
    /// Set once an activity was placed below this path: `inclusive` is then kept.
    has_below: bool,
    /// Own intervals and those of the activities launched below, in placement order (nearly
    /// sorted, where a concatenation of each path's list was not); empty while `has_below` is
    /// not set, the same as `own` then.
    inclusive: BusyAccumulator,
}

/// Path ids below this are looked up by index in [`ScopeBusyTable`]: 16 KiB at most.
const DENSE_PATH_IDS: usize = 4096;

/// A path's busy time in a row: its own ([`ScopeBusyRows::own`]) or inclusive.
struct ScopeBusy {
    path_id: u32,
    launches: u64,
    kernels: u64,
    busy_ns: u64,
}

struct ScopeBusyRows {
    /// Paths with activities of their own.
    own: Vec<ScopeBusy>,
    /// Those and their ancestors, with the activities below them.
    inclusive: Vec<ScopeBusy>,
}

impl ScopeBusyTable {
    fn add(
        &mut self,
        paths: &crate::scope::PathTable,
        path_id: u32,
        interval: (u64, u64),
        kernel: bool,
    ) {
        let dense = (path_id as usize) < DENSE_PATH_IDS;
        let known = if dense {
            self.own_dense
                .get(path_id as usize)
                .and_then(|&i| i.checked_sub(1))
                .map(|i| i as usize)
        } else {
            self.own.get(&path_id).copied()
        };
        let i = match known {
            Some(i) => i,
            None => {
                let i = self.entry(paths, path_id);
                if dense {
                    let slot = path_id as usize;
                    if self.own_dense.len() <= slot {
                        self.own_dense.resize(slot + 1, 0);
                    }
                    self.own_dense[slot] = i as u32 + 1;
                } else {
                    self.own.insert(path_id, i);
                }
                self.own_order.push(i);
                i
            }
        };
        let e = &mut self.entries[i];
        e.launches += 1;
        e.kernels += u64::from(kernel);
        e.own.push(interval);
        if e.has_below {
            e.inclusive.push(interval);
        }
        let mut up = e.parent;
        while let Some(j) = up {
            let a = &mut self.entries[j];
            if !a.has_below {
                a.has_below = true;
                a.inclusive.clone_from(&a.own);
            }
            a.inclusive.push(interval);
            up = a.parent;
        }
    }

    /// The entry of `path_id`, made with its ancestors' where missing.
    fn entry(&mut self, paths: &crate::scope::PathTable, path_id: u32) -> usize {
        if let Some(&i) = self.all.get(&path_id) {
            return i;
        }
        let parent = match path_id {
            0 => 0,
            p => paths.parent(p),
        };
        let parent = (parent != 0).then(|| self.entry(paths, parent));
        let mut e = self.spare.pop().unwrap_or_else(|| ScopeIntervals {
            path_id,
            parent,
            launches: 0,
            kernels: 0,
            own: BusyAccumulator::default(),
            has_below: false,
            inclusive: BusyAccumulator::default(),
        });
        e.path_id = path_id;
        e.parent = parent;
        self.entries.push(e);
        let i = self.entries.len() - 1;
        self.all.insert(path_id, i);
        i
    }

    /// The busy times; empties the table for the next row.
    fn finish(&mut self) -> ScopeBusyRows {
        let mut own_ns = Vec::with_capacity(self.entries.len());
        let mut inclusive_ns = Vec::with_capacity(self.entries.len());
        for e in &mut self.entries {
            let own = e.own.summary().map_or(0, |b| b.busy_ns);
            let inclusive = if e.has_below {
                e.inclusive.summary().map_or(0, |b| b.busy_ns)
            } else {
                own
            };
            own_ns.push(own);
            inclusive_ns.push(inclusive);
        }
        // In the orders of the maps the row's scopes have always been taken from (a map of the
        // paths with activities filled in placement order, then a map of those and their
        // ancestors, walked up from each in that map's order): rows of one path text (the
        // unscoped path 0 and ids the path table does not know) keep their order.
        let entries = &self.entries;
        let mut own: HashMap<u32, usize> = HashMap::default();
        for &i in &self.own_order {
            own.insert(entries[i].path_id, i);
        }
        let mut inclusive: HashMap<u32, usize> = HashMap::default();
        for &i in own.values() {
            let mut up = Some(i);
            while let Some(j) = up {
                inclusive.entry(entries[j].path_id).or_insert(j);
                up = entries[j].parent;
            }
        }
        let busy = |i: usize, ns: &[u64]| ScopeBusy {
            path_id: entries[i].path_id,
            launches: entries[i].launches,
            kernels: entries[i].kernels,
            busy_ns: ns[i],
        };
        let rows = ScopeBusyRows {
            own: own.into_values().map(|i| busy(i, &own_ns)).collect(),
            inclusive: inclusive
                .into_values()
                .map(|i| busy(i, &inclusive_ns))
                .collect(),
        };
        for &i in &self.own_order {
            if let Some(slot) = self.own_dense.get_mut(self.entries[i].path_id as usize) {
                *slot = 0;
            }
        }
        for mut e in self.entries.drain(..) {
            e.launches = 0;
            e.kernels = 0;
            e.own.clear();
            e.has_below = false;
            e.inclusive.clear();
            self.spare.push(e);
        }
        self.own.clear();
        self.own_order.clear();
        self.all.clear();
        rows
    }
}

fn activity_entries(placed: &[Placed], paths: &crate::scope::PathTable) -> Vec<ActivityEntry> {
    let mut out: Vec<ActivityEntry> = placed
        .iter()
        .filter_map(|p| {
            let (kind, name, device_id, stream_id, start, end, corr, bytes, graph) =
                match &p.activity {
                    Activity::Kernel(k) => (
                        "kernel",
                        k.name.to_string(),
                        k.device_id,
                        k.stream_id,
                        k.start,
                        k.end,
                        k.correlation_id,
                        None,
                        k.graph_id,
                    ),
                    Activity::Memcpy(c) => (
                        "memcpy",
                        c.direction.to_string(),
                        c.device_id,
                        c.stream_id,
                        c.start,
                        c.end,
                        c.correlation_id,
                        Some(c.bytes),
                        c.graph_id,
                    ),
                    Activity::Memset(m) => (
                        "memset",
                        "memset".to_string(),
                        m.device_id,
                        m.stream_id,
                        m.start,
                        m.end,
                        m.correlation_id,
                        Some(m.bytes),
                        m.graph_id,
                    ),
                    Activity::Sync(_) | Activity::Memory(_) => return None,
                };
            Some(ActivityEntry {
                kind: kind.into(),
                name,
                device_id,
                stream_id,
                start_ns: start,
                end_ns: end,
                scope: paths.path(p.path_id),
                correlation_id: corr,
                bytes,
                graph_id: (graph != 0).then_some(graph),
            })
        })
        .collect();
    out.sort_by_key(|a| (a.start_ns, a.correlation_id));
    out
}

fn scope_spans(scopes: &[ScopeRecord], paths: &crate::scope::PathTable) -> Vec<ScopeSpan> {
    let mut out: Vec<ScopeSpan> = scopes
        .iter()
        .map(|s| ScopeSpan {
            path: paths.path(s.path_id),
            thread: s.thread,
            start_ns: s.start_ns,
            end_ns: s.end_ns,
        })
        .collect();
    out.sort_by_key(|s| (s.thread, s.start_ns));
    out
}
