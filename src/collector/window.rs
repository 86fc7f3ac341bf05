//! The iteration window: the iterations whose rows are not written yet, oldest first, what each
//! has gathered, where a record's iteration sits, and when the oldest row is ready.
//!
//! A row is ready when its iteration has ended, a CUPTI flush has run after the end, every
//! counted call made before the end has been captured, every launch, copy and memset among
//! them has its GPU record, and every event-timed scope in it has completed; or, at the latest,
//! `settle` after it ended (the row then says how many records were missing).

use std::time::Instant;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::attribution::{Deferred, HostCall, Placed};
use super::sched::ThreadSched;
use super::{Collector, TRACED_SPANS};
use crate::counters::IterationCounters;
use crate::driver::events::ScopeEvents;
use crate::ledger::schema::LedgerLine;
use crate::pcsampling::window::SampledIteration;
use crate::run::{IterationEnd, ScopeRecord};

/// Where an iteration is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// `step()` has not ended it.
    Open,
    /// `step()` ended it at `at`; `flushed` once a CUPTI flush began after that.
    Ended {
        host_end_ns: u64,
        cupti_end: u64,
        at: Instant,
        flushed: bool,
    },
    /// The iteration still open at `finish()`, ended there: written at once, and only when
    /// something happened in it.
    Finished { host_end_ns: u64, cupti_end: u64 },
}

/// A scope's timing events, waiting to complete.
pub(super) struct PendingEvents {
    pub(super) path_id: u32,
    pub(super) events: ScopeEvents,
}

/// One iteration whose row is not written yet.
pub(super) struct IterationState {
    pub(super) index: u64,
    pub(super) host_start_ns: u64,
    pub(super) cupti_start: u64,
    pub(super) phase: Phase,
    pub(super) scopes: Vec<ScopeRecord>,
    pub(super) placed: Vec<Placed>,
    /// Correlation ids of launch/copy/memset calls whose GPU record has not arrived.
    pub(super) expected: Awaited,
    /// Outermost calls whose GPU record came through a nested call's id before the outermost
    /// call itself was registered: not awaited when it is.
    pub(super) arrived: HashSet<u32>,
    /// Correlation ids of every call of this iteration (to forget them afterwards).
    pub(super) call_ids: Vec<u32>,
    pub(super) events: Vec<PendingEvents>,
    pub(super) event_ns: HashMap<u32, u64>,
    pub(super) warnings: Vec<String>,
    pub(super) dropped_at_start: u64,
    /// Counted launch/copy/memset calls made since the start, read at this iteration's end.
    pub(super) launches_by_end: u64,
    /// Counted calls captured in this iteration.
    pub(super) counted_calls: u64,
    /// Counted calls not captured when the row was written.
    pub(super) missing_calls: u64,
    pub(super) counters: Option<IterationCounters>,
    /// What PC sampling read of it, when it was sampled.
    pub(super) stalls: Option<SampledIteration>,
    /// False when a sampled timeline left it untraced: its row waits for no flush.
    pub(super) traced: bool,
    /// Its outermost calls with their host times, when calls are stamped (idle causes).
    pub(super) host_calls: Vec<HostCall>,
    /// The launching threads' scheduling over it, when read (`None`: not read, or shared with
    /// the iteration before).
    pub(super) sched: Option<Vec<ThreadSched>>,
}

/// A set of correlation ids (the calls an iteration awaits a GPU record of) with its newest
/// member kept apart: a call is usually followed by its GPU record before the next call, so the
/// id inserted is the one removed next, and the hash set stays empty.
#[derive(Default)]
pub(super) struct Awaited {
    /// The newest id; never also in `rest`.
    newest: Option<u32>,
    rest: HashSet<u32>,
}

impl Awaited {
    /// Adds `id`; false when it was there already.
    #[inline]
    pub(super) fn insert(&mut self, id: u32) -> bool {
        if self.newest == Some(id) || (!self.rest.is_empty() && self.rest.contains(&id)) {
            return false;
        }
        if let Some(older) = self.newest.replace(id) {
            self.rest.insert(older);
        }
        true
    }

    /// Removes `id`; false when it was not there.
    #[inline]
    pub(super) fn remove(&mut self, id: u32) -> bool {
        if self.newest == Some(id) {
            self.newest = None;
            true
        } else {
            !self.rest.is_empty() && self.rest.remove(&id)
        }
    }

    pub(super) fn len(&self) -> usize {
        self.rest.len() + usize::from(self.newest.is_some())
    }

    pub(super) fn is_empty(&self) -> bool {
        self.newest.is_none() && self.rest.is_empty()
    }

    fn clear(&mut self) {
        self.newest = None;
        self.rest.clear();
    }
}

/// An iteration's vectors and sets, kept from the last row written for the next iteration: each
/// iteration fills them to about the same size, and growing them again, record by record, costs
/// more than the records' own attribution.
#[derive(Default)]
pub(super) struct IterationBuffers {
    placed: Vec<Placed>,
    call_ids: Vec<u32>,
    expected: Awaited,
    host_calls: Vec<HostCall>,
}

impl IterationState {
    pub(super) fn new(
        index: u64,
        host_start_ns: u64,
        cupti_start: u64,
        dropped_at_start: u64,
        buffers: IterationBuffers,
    ) -> Self {
        let IterationBuffers {
            placed,
            call_ids,
            expected,
            host_calls,
        } = buffers;
        debug_assert!(placed.is_empty() && call_ids.is_empty() && expected.is_empty());
        debug_assert!(host_calls.is_empty());
        IterationState {
            index,
            host_start_ns,
            cupti_start,
            phase: Phase::Open,
            scopes: Vec::new(),
            placed,
            expected,
            arrived: HashSet::default(),
            call_ids,
            events: Vec::new(),
            event_ns: HashMap::default(),
            warnings: Vec::new(),
            dropped_at_start,
            launches_by_end: 0,
            counted_calls: 0,
            missing_calls: 0,
            counters: None,
            stalls: None,
            traced: true,
            host_calls,
            sched: None,
        }
    }

    /// The end of its CUPTI window; none while it is open.
    #[inline]
    pub(super) fn cupti_end(&self) -> Option<u64> {
        match self.phase {
            Phase::Open => None,
            Phase::Ended { cupti_end, .. } | Phase::Finished { cupti_end, .. } => Some(cupti_end),
        }
    }

    /// Its host end; none while it is open.
    pub(super) fn host_end_ns(&self) -> Option<u64> {
        match self.phase {
            Phase::Open => None,
            Phase::Ended { host_end_ns, .. } | Phase::Finished { host_end_ns, .. } => {
                Some(host_end_ns)
            }
        }
    }

    /// When `step()` ended it; none while it is open and for the iteration `finish()` ended.
    pub(super) fn ended_at(&self) -> Option<Instant> {
        match self.phase {
            Phase::Ended { at, .. } => Some(at),
            _ => None,
        }
    }

    /// `step()` ended it and no CUPTI flush has begun since.
    pub(super) fn waits_for_flush(&self) -> bool {
        self.traced && matches!(self.phase, Phase::Ended { flushed: false, .. })
    }

    /// Marks it flushed when `step()` ended it before a flush that began at `flush_start`.
    pub(super) fn flushed_at(&mut self, flush_start: Instant) {
        if let Phase::Ended { at, flushed, .. } = &mut self.phase {
            if *at <= flush_start {
                *flushed = true;
            }
        }
    }

    #[inline]
    fn contains_cupti(&self, t: u64) -> bool {
        self.cupti_end().is_none_or(|end| t < end)
    }

    /// Empties what the next iteration can reuse, and hands it over.
    fn into_buffers(mut self) -> IterationBuffers {
        self.placed.clear();
        self.call_ids.clear();
        self.expected.clear();
        self.host_calls.clear();
        IterationBuffers {
            placed: self.placed,
            call_ids: self.call_ids,
            expected: self.expected,
            host_calls: self.host_calls,
        }
    }
}

impl Collector {
    /// Takes one iteration end: the open iteration's ends it, and then any that arrived early
    /// for the iterations after it; an end for a later iteration waits for its predecessor's;
    /// an end for an iteration already ended is counted for the trailer.
    pub(super) fn take_end(&mut self, m: IterationEnd) {
        let open = self.iterations.back().map_or(0, |it| it.index);
        if m.index > open {
            if self.early_ends.insert(m.index, m).is_some() {
                self.stray_ends += 1;
            }
            return;
        }
        if m.index < open || self.iterations.is_empty() {
            self.stray_ends += 1;
            return;
        }
        let mut next = Some(m);
        while let Some(m) = next {
            // Before the end places what waited for it: an untraced iteration keeps no record.
            if let Some(pos) = self.position_of(m.index) {
                self.iterations[pos].traced = m.traced;
            }
            self.untraced_seen |= !m.traced;
            let extras = m.extras.map(|e| *e).unwrap_or_default();
            self.end_iteration(
                m.index,
                m.host_end,
                m.cupti_end,
                m.launches,
                &extras.open_scopes,
                extras.counters,
            );
            if let Some(pos) = self.position_of(m.index) {
                let it = &mut self.iterations[pos];
                it.stalls = extras.stalls;
                it.warnings.extend(extras.warning);
            }
            next = self.early_ends.remove(&(m.index + 1));
        }
    }

    /// `step()` ended iteration `index` at these times, with `launches` counted calls made
    /// since the start and the scopes in `open` still open on its thread; the next iteration
    /// opens, and what waited for the end is placed.
    pub(super) fn end_iteration(
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
        it.phase = Phase::Ended {
            host_end_ns,
            cupti_end,
            at: Instant::now(),
            flushed: false,
        };
        // The launching threads' run-queue time, as soon after step() as the collector sees it.
        if let (Some(reader), true) = (self.sched.as_mut(), it.traced) {
            it.sched = reader.read(self.running.calls());
        }
        if !open.is_empty() {
            let warning = format!(
                "iteration ended with scopes still open on the stepping thread: {}",
                self.paths_text(open)
            );
            self.iterations[pos].warnings.push(warning);
        }
        let buffers = self.spare_buffers.take().unwrap_or_default();
        let next = IterationState::new(index + 1, host_end_ns, cupti_end, dropped, buffers);
        self.iterations.push_back(next);
        self.place_deferred();
        self.add_future_scopes(index + 1);
    }

    /// Places what waited for an iteration's end: captured calls of an iteration not begun yet,
    /// and host-side records of an iteration not ended yet.
    pub(super) fn place_deferred(&mut self) {
        for d in std::mem::take(&mut self.deferred) {
            match d {
                Deferred::Host(a) => self.accept_activity(a),
                Deferred::Call(c) => self.accept_call(c),
            }
        }
    }

    /// The paths of `ids`, joined for a warning.
    pub(super) fn paths_text(&self, ids: &[u32]) -> String {
        let paths: Vec<String> = ids.iter().map(|p| self.running.paths.path(*p)).collect();
        paths.join(", ")
    }

    /// Where iteration `index` sits in `iterations`. Indices run consecutively from the front
    /// (each end pushes the next), so this is arithmetic: a search along the deque, once per
    /// record, would make the collector quadratic in the iterations waiting for their rows.
    #[inline]
    pub(super) fn position_of(&self, index: u64) -> Option<usize> {
        let front = self.iterations.front()?.index;
        let pos = usize::try_from(index.checked_sub(front)?).ok()?;
        let it = self.iterations.get(pos)?;
        debug_assert_eq!(it.index, index, "iteration indices are consecutive");
        (it.index == index).then_some(pos)
    }

    /// Where the iteration whose CUPTI window holds time `t` sits: the first whose end is after
    /// `t`. Ends never decrease along the deque (`end_iteration`), so this is a binary search.
    pub(super) fn position_at(&self, t: u64) -> Option<usize> {
        let pos = self.iterations.partition_point(|it| !it.contains_cupti(t));
        (pos < self.iterations.len()).then_some(pos)
    }

    /// Whether CUPTI time `t`, before the oldest iteration in the window, fell in an iteration
    /// a sampled timeline left untraced (no traced row written lately spans it).
    pub(super) fn untraced_at(&self, t: u64) -> bool {
        self.untraced_seen && !self.traced_spans.iter().any(|&(s, e)| s <= t && t < e)
    }

    /// Whether the oldest iteration's row can be written.
    pub(super) fn front_ready(&self) -> bool {
        let Some(it) = self.iterations.front() else {
            return false;
        };
        let Phase::Ended { at, flushed, .. } = it.phase else {
            return false;
        };
        // An untraced iteration has no GPU records to wait for a flush for.
        let flushed = flushed || !self.timeline_rules || !it.traced;
        // NVML: one sampling period past the end, so that a sample brackets the window's end.
        let sampled = self
            .nvml
            .as_ref()
            .is_none_or(|n| at.elapsed() >= n.config().period);
        (flushed && sampled && self.calls_in(it) && it.expected.is_empty() && it.events.is_empty())
            || at.elapsed() >= self.settle
    }

    /// Whether every counted call made before the iteration's end has been captured.
    fn calls_in(&self, it: &IterationState) -> bool {
        !self.timeline_rules || self.counted_calls_before + it.counted_calls >= it.launches_by_end
    }

    /// Writes the oldest iteration's row. Activities whose call never came (made while their
    /// thread was exiting) and whose GPU time falls before the iteration's end are placed here.
    pub(super) fn finalize_front(&mut self, incomplete: bool) {
        let Some(front) = self.iterations.front() else {
            return;
        };
        let end = front.cupti_end().unwrap_or(u64::MAX);
        let orphans: Vec<u32> = self
            .waiting
            .iter()
            .filter(|(_, v)| v.iter().any(|a| a.fallback_time() < end))
            .map(|(k, _)| *k)
            .collect();
        let start = front.cupti_start;
        for corr in orphans {
            if let Some(v) = self.waiting.remove(&corr) {
                for a in v {
                    let t = a.fallback_time();
                    if t < start && self.untraced_at(t) {
                        self.trailer.untraced_records += 1;
                    } else {
                        self.place(0, a);
                    }
                }
            }
        }
        // Only this row's events are given up on: later iterations' may still complete.
        self.resolve_events_at(0, true);
        self.event_reader.end_pass(&self.running.events);
        let Some(mut it) = self.iterations.pop_front() else {
            return;
        };
        self.graphs.retire_through(it.index);
        if it.traced {
            if self.traced_spans.len() == TRACED_SPANS {
                self.traced_spans.pop_front();
            }
            self.traced_spans
                .push_back((it.cupti_start, it.cupti_end().unwrap_or(u64::MAX)));
        }
        let have = self.counted_calls_before + it.counted_calls;
        if it.ended_at().is_some() && self.timeline_rules && have < it.launches_by_end {
            it.missing_calls = it.launches_by_end - have;
        }
        // A shortfall is reported in this row once; later rows start from the count at its end.
        self.counted_calls_before = have.max(it.launches_by_end);
        for corr in &it.call_ids {
            self.calls.remove(*corr);
        }
        let dropped_now = self.dropped_total();
        let mut row = self
            .rows
            .build(&self.running, &mut it, incomplete, dropped_now, self.settle);
        self.spare_buffers = Some(it.into_buffers());
        if let Some(n) = &self.nvml {
            row.nvml = n.summarize_all(row.host_start_ns, row.host_start_ns + row.host_wall_ns);
            if !row.perturbed {
                self.nvml_rows.push(row.nvml.clone());
            }
        }
        self.trailer.iterations += 1;
        self.trailer.dropped_records = dropped_now;
        self.rows.observe_stalls(&row);
        // The row is whole (NVML included); it is published on this thread, never the
        // application's, before the ledger takes it.
        #[cfg(feature = "metrics")]
        if let Some(p) = &mut self.metrics {
            let t = Instant::now();
            p.publish(&row);
            self.trailer.overhead.metrics_publish_ns += t.elapsed().as_nanos() as u64;
        }
        if self.lines.send(LedgerLine::Iteration(row)).is_err() {
            // The writer has ended (it panicked): the row is counted, not lost silently.
            self.trailer.lines_not_written += 1;
        }
    }
}
