//! The join of captured calls and GPU records: each activity is placed in the iteration its
//! launching call was entered in and attributed to the scope open on that call's thread, by the
//! correlation id both carry, whatever order they arrive in.
//!
//! Nested calls (`cudaLaunchKernel` calls `cuLaunchKernel`; cuBLAS makes runtime calls inside
//! runtime calls): only the outermost traced call on a thread is counted and awaited; every call
//! inside it is kept with the outermost call's id, and a GPU record carrying either id stands for
//! the outermost call. Host-side records (synchronization, allocation) are placed by their own
//! host time.

use super::Collector;
use crate::cupti::calls::{Attribution, CapturedCall};
use crate::cupti::functions::{is_counted, ApiClass, CallKind};
use crate::cupti::record::{CopyRecord, KernelRecord, MemoryRecord, Record, SyncRecord};

/// A GPU activity waiting to be placed or placed in an iteration.
#[derive(Debug)]
pub(super) enum Activity {
    Kernel(KernelRecord),
    Memcpy(CopyRecord),
    Memset(CopyRecord),
    Sync(SyncRecord),
    Memory(MemoryRecord),
}

impl Activity {
    #[inline]
    fn correlation_id(&self) -> u32 {
        match self {
            Activity::Kernel(r) => r.correlation_id,
            Activity::Memcpy(r) => r.correlation_id,
            Activity::Memset(r) => r.correlation_id,
            Activity::Sync(r) => r.correlation_id,
            Activity::Memory(r) => r.correlation_id,
        }
    }
    /// A time in CUPTI's clock that falls inside the activity's iteration when no call says
    /// better: GPU start for device work (never before its launch call), host start for waits,
    /// the operation time for allocations.
    pub(super) fn fallback_time(&self) -> u64 {
        match self {
            Activity::Kernel(r) => r.start,
            Activity::Memcpy(r) => r.start,
            Activity::Memset(r) => r.start,
            Activity::Sync(r) => r.start,
            Activity::Memory(r) => r.timestamp,
        }
    }
    /// The CUDA graph node it ran (0: not a graph node's).
    #[inline]
    fn graph_node_id(&self) -> u64 {
        match self {
            Activity::Kernel(r) => r.graph_node_id,
            Activity::Memcpy(r) | Activity::Memset(r) => r.graph_node_id,
            Activity::Sync(_) | Activity::Memory(_) => 0,
        }
    }
    /// Host-side records are placed by their own time, not by their call.
    pub(super) fn is_host_side(&self) -> bool {
        matches!(self, Activity::Sync(_) | Activity::Memory(_))
    }
}

/// An activity placed in an iteration, with the scope path it is attributed to, how that path
/// was found, the thread whose call launched it, and that call's correlation id (the outermost
/// call's, which [`HostCall`] is kept under).
pub(super) struct Placed {
    pub(super) path_id: u32,
    pub(super) activity: Activity,
    pub(super) by: CallSource,
    pub(super) call_id: u32,
}

/// An outermost call with its host times, kept in its iteration for the idle causes (the
/// correlation table forgets calls before the row is built).
#[derive(Clone, Copy, Debug)]
pub(super) struct HostCall {
    pub(super) correlation_id: u32,
    /// The calling thread's index ([`CapturedCall::thread`]).
    pub(super) thread: u32,
    /// Entry and exit, host ns since the run's origin.
    pub(super) entry_ns: u64,
    pub(super) exit_ns: u64,
    pub(super) kind: CallKind,
    pub(super) function: &'static str,
    pub(super) path_id: u32,
    pub(super) attribution: Attribution,
}

/// How an activity's scope was found, and which thread launched it.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(super) struct CallSource {
    pub(super) attribution: Attribution,
    /// The launching thread ([`CapturedCall::thread`]); none when its call was not captured.
    pub(super) thread: Option<u32>,
}

/// What the collector knows of a correlation id.
#[derive(Clone, Copy, Default)]
pub(super) struct CallInfo {
    /// Index of the iteration its call was placed in; none before it arrives.
    iteration: Option<u64>,
    /// Scope path id of its call; 0: none.
    path_id: u32,
    /// A nested call's outermost call ([`CapturedCall::nested`]).
    outer: Option<u32>,
    /// How `path_id` was found, and the calling thread.
    by: CallSource,
}

/// What waits for an iteration's end before it can be placed.
pub(super) enum Deferred {
    /// A captured call of an iteration whose start the collector has not seen yet.
    Call(CapturedCall),
    /// A host-side record whose iteration has not ended yet.
    Host(Activity),
}

impl Collector {
    /// One decoded record.
    pub(super) fn accept(&mut self, rec: Record) {
        self.trailer.activity_records += 1;
        let activity = match rec {
            Record::Overhead { start, end, .. } => {
                self.trailer.overhead.cupti_overhead_ns += end.saturating_sub(start);
                return;
            }
            Record::Other { .. } => return,
            // The start-up calibration's kernels are the profiler's, launched before iteration 0
            // and never captured: counted apart, not attributed; their back-to-back gaps measure
            // the dispatch floor.
            Record::Kernel(k) if k.name.starts_with(crate::cupti::calibrate::KERNEL_PREFIX) => {
                self.trailer.calibration_records += 1;
                self.rows.add_calibration_kernel(&k);
                return;
            }
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

    /// A call the API callback captured ([`CapturedCall`]): placed in the iteration open when it
    /// was entered, attributed to the scope open on its thread, and the activities that waited
    /// for it placed. A call the application made itself counts toward the calls the row waits
    /// for, and its launch, copy or memset, when it succeeded, is awaited (unless a nested call's
    /// GPU record stood for it already); a call made inside another is neither.
    pub(super) fn accept_call(&mut self, call: CapturedCall) {
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
        let corr = call.correlation_id;
        let outermost = !call.nested;
        let outer = call.nested.then_some(call.outer_correlation_id);
        let it = &mut self.iterations[pos];
        self.calls.update(corr, |info| {
            info.iteration = Some(it.index);
            // 0 (no scope) keeps a path already known from the outermost call of the same id.
            if call.path_id != 0 {
                info.path_id = call.path_id;
                info.by.attribution = call.attribution;
            }
            info.by.thread.get_or_insert(call.thread);
            if outer.is_some() {
                info.outer = outer;
            }
        });
        it.call_ids.push(corr);
        if outermost && is_counted(class) {
            it.counted_calls += 1;
        }
        if outermost && call.entry != 0 && it.traced {
            if let Some((kind, function)) = self.classes.kind(call.runtime, call.cbid) {
                it.host_calls.push(HostCall {
                    correlation_id: corr,
                    thread: call.thread,
                    entry_ns: call.entry,
                    exit_ns: call.exit,
                    kind,
                    function,
                    path_id: call.path_id,
                    attribution: call.attribution,
                });
            }
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
            && call.return_value == 0
            && matches!(
                class,
                Some(ApiClass::KernelLaunch | ApiClass::Memcpy | ApiClass::Memset)
            )
            && (it.arrived.is_empty() || !it.arrived.remove(&corr))
            && !self.graphs.take_captured_call(corr)
        {
            it.expected.insert(corr);
        }
    }

    /// Takes the calls every thread's API callback captured since the last call. Before any
    /// buffer is decoded: a synchronization or allocation record is placed as it is decoded, and
    /// its scope comes from its call.
    pub(super) fn drain_calls(&mut self) {
        let mut batch = std::mem::take(&mut self.call_batch);
        self.running.drain_calls(&mut batch);
        self.take_graph_events();
        // Host times to ns as scopes' are, before a call can wait in `deferred`: an anchor first,
        // so that the calls drained are interpolated rather than extrapolated.
        if let (Some(clock), false) = (&mut self.clock, batch.is_empty()) {
            clock.push(self.running.clock.anchor());
            for call in batch.iter_mut().filter(|c| c.entry != 0) {
                call.entry = clock.to_ns(call.entry);
                call.exit = if call.exit == 0 {
                    0
                } else {
                    clock.to_ns(call.exit)
                };
            }
        }
        for call in batch.drain(..) {
            self.accept_call(call);
        }
        self.call_batch = batch;
    }

    /// Places an activity by its call, or keeps it until the call arrives; a host-side record
    /// is placed by its time once its iteration has ended.
    pub(super) fn accept_activity(&mut self, a: Activity) {
        if a.is_host_side() {
            let t = a.fallback_time();
            match self.position_at(t) {
                // Before the run's start, the only CUDA work traced is the start-up
                // calibration's (its syncs and allocations); without one, a record that old is
                // late.
                Some(0) if t < self.iterations[0].cupti_start => {
                    if self.iterations[0].index > 0 && self.untraced_at(t) {
                        self.trailer.untraced_records += 1;
                    } else if self.iterations[0].index > 0 {
                        self.trailer.late_records += 1;
                    } else if self.rows.calibration.is_some() {
                        self.trailer.calibration_records += 1;
                    } else {
                        self.trailer.late_records += 1;
                    }
                }
                Some(pos) if self.iterations[pos].cupti_end().is_none() => {
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
                Some(pos) => self.place_as(pos, a, info.path_id, info.outer, info.by),
                None => self.trailer.late_records += 1,
            },
            _ => self.waiting.entry(corr).or_default().push(a),
        }
    }

    /// Places an activity in the iteration at `pos`, with what is known of its call.
    pub(super) fn place(&mut self, pos: usize, a: Activity) {
        let info = self.calls.get(a.correlation_id()).unwrap_or_default();
        self.place_as(pos, a, info.path_id, info.outer, info.by);
    }

    /// [`place`](Self::place) with what is known of the activity's correlation id: its scope
    /// path, outermost call and source ([`CallInfo`]). Those, not the whole `CallInfo`: passed
    /// in registers rather than copied through the stack, which would read the copy of the
    /// entry `accept_call` just wrote before its stores had landed (a stalled forward per
    /// kernel).
    fn place_as(
        &mut self,
        pos: usize,
        a: Activity,
        path_id: u32,
        outer: Option<u32>,
        by: CallSource,
    ) {
        let corr = a.correlation_id();
        let it = &mut self.iterations[pos];
        // What it awaited is settled either way; an untraced iteration keeps no record.
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
        if !it.traced {
            self.trailer.untraced_records += 1;
            return;
        }
        // A graph node's record: its call is the whole graph's launch (one branch otherwise).
        let (path_id, by) = match a.graph_node_id() {
            0 => (path_id, by),
            node => self.graphs.scope(node, path_id, by, &self.running),
        };
        it.placed.push(Placed {
            path_id,
            activity: a,
            by,
            call_id: outer.unwrap_or(corr),
        });
    }
}
