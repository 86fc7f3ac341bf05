//! The collector driven by hand, for its tests and the decode benchmark.

use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::{Collector, CollectorSetup};
use crate::clock::HostClock;
use crate::cupti::calls::CapturedCall;
use crate::cupti::record::Record;
use crate::ledger::schema::{IterationRow, LedgerLine, Trailer};
use crate::run::{IterationEnd, RunState};

/// The collector's attribution driven by hand, without threads, CUPTI or a ledger file: for
/// the collector's tests and the decode benchmark. Not a stable API.
///
/// It is the profiler's own `Collector` with no CUPTI library, at the timeline level's rules: an
/// iteration's row is written once the iteration has ended, every counted launch/copy/memset call
/// made before its end (the `launches` given to [`end_iteration`](Self::end_iteration)) has been
/// captured, and every such call has its GPU record. Handing records to
/// [`accept`](Self::accept) stands for CUPTI's flush, so no flush is awaited. What it skips:
/// decoding from a CUPTI buffer (the caller decodes), scope rings (no thread records scopes
/// here), scope timing events, NVML and hardware counters. The settle time is unbounded: a row
/// whose records never come is not written by time, only by [`finish`](Self::finish).
pub struct OfflineCollector {
    collector: Collector,
    lines: Receiver<LedgerLine>,
    /// Index of the open iteration.
    open_index: u64,
}

impl OfflineCollector {
    /// A collector at the timeline level's attribution rules, iteration 0 open at CUPTI time
    /// `start_cupti_ns` (and host time 0).
    pub fn new(start_cupti_ns: u64) -> Self {
        Self::with_calibration(start_cupti_ns, None)
    }

    /// [`new`](Self::new), with rows estimating tracing's added device time from `calibration`.
    pub fn with_calibration(
        start_cupti_ns: u64,
        calibration: Option<crate::ledger::schema::TracingCalibration>,
    ) -> Self {
        Self::with_parts(start_cupti_ns, calibration, None)
    }

    /// [`new`](Self::new), with PC sampling's sources and planner: rows carry what a sampled
    /// iteration read, and the trailer the run's profile.
    #[cfg(test)]
    pub(crate) fn with_pc_sampling(
        start_cupti_ns: u64,
        side: crate::pcsampling::window::CollectorSide,
    ) -> Self {
        Self::with_parts(start_cupti_ns, None, Some(side))
    }

    fn with_parts(
        start_cupti_ns: u64,
        calibration: Option<crate::ledger::schema::TracingCalibration>,
        pc_sources: Option<crate::pcsampling::window::CollectorSide>,
    ) -> Self {
        let (line_tx, line_rx) = crossbeam_channel::unbounded();
        let (trailer_tx, _) = crossbeam_channel::bounded(1);
        let (_, buffer_rx) = crossbeam_channel::unbounded();
        // No CUPTI, no counters, and nothing sends to the inbox: `step()` is `end_iteration`.
        // Not published as the current run, so scopes stay off.
        let (running, inbox) = RunState::new(
            HostClock::monotonic(Instant::now()),
            None,
            None,
            crate::config::Follow::default(),
            crate::run::NvtxRun::default(),
            None,
            true,
        );
        let collector = Collector::new(CollectorSetup {
            running,
            inbox,
            activity: None,
            buffers: buffer_rx,
            lines: line_tx,
            trailer: trailer_tx,
            settle: Duration::MAX,
            // Every maintain() "flushes": the caller has handed in every record it has.
            flush_interval: Duration::ZERO,
            start_cupti_ns,
            timeline_rules: true,
            nvml: None,
            work_per_iteration: None,
            record_activities: false,
            auto_ranges: false,
            tracing_calibration: calibration,
            pc_sources,
            #[cfg(feature = "metrics")]
            metrics: None,
            idle: Some(crate::config::IdleConfig {
                // No thread of the offline collector's is a launching thread of its own.
                schedstat: false,
                ..crate::config::IdleConfig::default()
            }),
        });
        let mut collector = collector;
        if let Some(idle) = &mut collector.rows.idle {
            idle.synthetic_thread_keys();
        }
        OfflineCollector {
            collector,
            lines: line_rx,
            open_index: 0,
        }
    }

    /// Publishes every row it writes through `publisher`, as the profiler's collector does
    /// with feature `metrics`.
    #[cfg(feature = "metrics")]
    pub fn with_metrics(mut self, publisher: crate::metrics::Publisher) -> Self {
        self.collector.metrics = Some(publisher);
        self
    }

    /// [`new`](Self::new), with the idle-cause split as `idle` says (`None`: off).
    pub fn with_idle(start_cupti_ns: u64, idle: Option<crate::config::IdleConfig>) -> Self {
        let mut c = Self::new(start_cupti_ns);
        c.collector
            .rows
            .set_idle(idle.map(|i| crate::config::IdleConfig {
                schedstat: false,
                ..i
            }));
        if let Some(idle) = &mut c.collector.rows.idle {
            idle.synthetic_thread_keys();
        }
        c
    }

    /// The id of a slash-separated scope path (`"step/forward"`), interned as a scope guard
    /// would: the id a captured call carries to attribute its launch to that path.
    pub fn intern_path(&self, path: &str) -> u32 {
        let paths = &self.collector.running.paths;
        path.split('/')
            .fold(0, |parent, name| paths.intern(parent, name))
    }

    /// `Collector::accept`: one decoded record.
    pub fn accept(&mut self, record: Record) {
        self.collector.accept(record);
    }

    /// A scope of path `path_id` closed on gpu-ledger's thread 0 in iteration `iteration`,
    /// open over host times `[start_ns, end_ns)`.
    pub fn accept_scope(&mut self, path_id: u32, iteration: u64, start_ns: u64, end_ns: u64) {
        self.accept_scope_on(0, path_id, iteration, start_ns, end_ns);
    }

    /// [`accept_scope`](Self::accept_scope) on gpu-ledger's thread `thread`: the thread whose
    /// captured calls carry `thread` too (here a call's thread and a scope's thread of one
    /// index are one thread).
    pub fn accept_scope_on(
        &mut self,
        thread: u32,
        path_id: u32,
        iteration: u64,
        start_ns: u64,
        end_ns: u64,
    ) {
        self.collector.add_scopes(vec![crate::run::ScopeRecord {
            path_id,
            iteration_at_entry: iteration,
            iteration,
            start_ns,
            end_ns,
            events: None,
            out_of_order: false,
            thread,
            thread_key: u64::from(thread) + 1,
        }]);
    }

    /// One API call as the timeline level's callback captures it.
    pub fn accept_call(&mut self, call: CapturedCall) {
        self.collector.accept_call(call);
    }

    /// One event of CUPTI's graph callbacks (a node created, cloned or destroyed, an
    /// executable graph made or destroyed), as the collector takes them before the calls
    /// made after them.
    pub fn accept_graph_event(&mut self, event: crate::cupti::calls::graphs::GraphEvent) {
        self.collector.graphs.apply(event);
    }

    /// Holds at most `bound` graph nodes (the profiler's bound is far higher).
    #[cfg(test)]
    pub(crate) fn set_graph_bound(&mut self, bound: usize) {
        self.collector.graphs = super::graphs::GraphScopes::with_bound(bound);
    }

    /// Graph node entries the collector holds now (captured and executable graphs' nodes), and
    /// how many it has room for without growing.
    pub fn graph_nodes(&self) -> (usize, usize) {
        (
            self.collector.graphs.len(),
            self.collector.graphs.capacity(),
        )
    }

    /// What `step()` makes the collector do: ends the open iteration at these times, with
    /// `launches` counted launch/copy/memset calls made since the start, and opens the next.
    pub fn end_iteration(&mut self, host_end_ns: u64, cupti_end_ns: u64, launches: u64) {
        self.end(host_end_ns, cupti_end_ns, launches, true);
    }

    /// `end_iteration` for an iteration a sampled timeline left untraced.
    pub fn end_untraced_iteration(&mut self, host_end_ns: u64, cupti_end_ns: u64, launches: u64) {
        self.end(host_end_ns, cupti_end_ns, launches, false);
    }

    fn end(&mut self, host_end_ns: u64, cupti_end_ns: u64, launches: u64, traced: bool) {
        let index = self.open_index;
        self.open_index += 1;
        self.collector.handle(IterationEnd {
            index,
            host_end: host_end_ns,
            cupti_end: Some(cupti_end_ns),
            launches,
            traced,
            extras: None,
        });
    }

    /// `end_iteration` for an iteration PC sampling read `stalls` of.
    #[cfg(test)]
    pub(crate) fn end_sampled_iteration(
        &mut self,
        host_end_ns: u64,
        cupti_end_ns: u64,
        launches: u64,
        stalls: Option<crate::pcsampling::window::SampledIteration>,
    ) {
        let index = self.open_index;
        self.open_index += 1;
        self.collector.handle(IterationEnd {
            index,
            host_end: host_end_ns,
            cupti_end: Some(cupti_end_ns),
            launches,
            traced: true,
            extras: crate::run::IterationExtras::boxed(Vec::new(), None, stalls, None),
        });
    }

    /// `step()`'s message for iteration `index`, whatever the open iteration is: ends arriving
    /// out of order, as from threads that raced to the channel.
    #[cfg(test)]
    pub(crate) fn end_iteration_with_index(
        &mut self,
        index: u64,
        host_end_ns: u64,
        cupti_end_ns: u64,
    ) {
        self.collector.handle(IterationEnd {
            index,
            host_end: host_end_ns,
            cupti_end: Some(cupti_end_ns),
            launches: 0,
            traced: true,
            extras: None,
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
        self.collector.finish(
            host_end_ns,
            Some(cupti_end_ns),
            Vec::new(),
            None,
            None,
            true,
        );
        let rows = self.drain_rows();
        (rows, self.collector.trailer.clone())
    }

    /// Drops the writer's end of the rows' channel, as a writer thread that ended does.
    #[cfg(test)]
    pub(crate) fn lose_writer(&mut self) {
        self.lines = crossbeam_channel::never();
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
