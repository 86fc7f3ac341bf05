//! The state one run shares between the application's threads (scopes, `step()`) and the
//! collector thread, and the two messages that cross between them: an iteration's end and the
//! run's finish.
//!
//! A scope checks [`ENABLED`] first, so a process without a running profiler pays one relaxed
//! load per scope; [`GENERATION`] moves at every start and finish, so that a thread drops what
//! it kept of an earlier run the next time it opens a scope.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Mutex, RwLock, RwLockWriteGuard};

mod messages;
mod paths;
mod switch;

pub(crate) use messages::{ClosedScope, Finish, IterationEnd, IterationExtras, ScopeRecord};
pub(crate) use paths::{PathTable, MAX_SCOPE_PATHS, OTHER_SCOPE_PATHS};

use crate::clock::HostClock;
use crate::config::{Follow, TimelineSampling};
use crate::counters::window::CounterState;
use crate::cupti::calls::{ApiCalls, CapturedCall};
use crate::cupti::{self, LoadedCupti};
use crate::driver::events::EventPool;
use crate::error::{Error, Result};
use crate::pcsampling::window::PcSamplingState;
use crate::thread_slot::{SlotSender, ThreadSlot};

/// True while a profiler runs. Checked first by every scope.
pub(crate) static ENABLED: AtomicBool = AtomicBool::new(false);
/// Bumped at every profiler start and finish so that threads drop state of an earlier run.
pub(crate) static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Counts `n` scopes of the running profiler lost at their thread's exit: entered while the
/// thread's state was being torn down, or open when it was (a guard kept in another
/// thread-local, dropped after it). Out of line: only threads that exit get here.
#[cold]
pub(crate) fn lost_at_thread_exit(n: u64) {
    if let Some(running) = current() {
        running.lost_at_thread_exit.fetch_add(n, Ordering::Relaxed);
    }
}

/// The running profiler's shared state; `None` between runs.
static CURRENT: RwLock<Option<Arc<RunState>>> = RwLock::new(None);

pub(crate) use crate::ledger::COUNTERS_SCOPE;

/// Closed scopes a thread's ring holds before they spill into its slot's overflow vector (a
/// lock and a vector push per scope until the collector drains it): the collector drains every
/// 2 ms, so a thread closing up to 2 million scopes a second never spills. About 256 KiB per
/// thread that opens scopes.
const RING_CAPACITY: usize = 4096;

/// Iteration ends the ring holds before they spill into its overflow vector: the collector
/// drains it every tick (2 ms), so only iterations shorter than 2 µs could spill.
const ENDS_CAPACITY: usize = 1024;

/// `step()`'s iteration ends, waiting for the collector.
pub(crate) type EndSlot = ThreadSlot<IterationEnd>;

/// A thread's closed scopes, waiting for the collector.
type ScopeSlot = ThreadSlot<ClosedScope>;
/// The writing end of a thread's [`ScopeSlot`], owned by that thread.
pub(crate) type ScopeSender = SlotSender<ClosedScope>;

/// What the collector receives from the run: `step()`'s messages and the one `Finish`.
pub(crate) struct Inbox {
    pub(crate) ends: Arc<EndSlot>,
    pub(crate) finish: Receiver<Finish>,
}

/// State shared by the application's threads (scopes, `step`) and the collector. What `step()`
/// reads on every call comes first, in three cache lines: `step()` runs right after the
/// application's synchronize with its caches cold, and each line it touches there is a miss while
/// the GPU waits.
#[repr(C)]
pub(crate) struct RunState {
    /// `step()`'s end of the ring of iteration ends the collector polls (see [`IterationEnd`]);
    /// `None` once shutdown began: `step()` then sends nothing (with `flush_on_signal` the
    /// signal thread can shut down while the application still steps). `step()` holds it while
    /// it counts, numbers and sends, so no iteration end reaches the collector after `Finish`,
    /// and steps from several threads are taken one at a time: each ends one iteration.
    open: Mutex<Option<SlotSender<IterationEnd>>>,
    /// Time the application's threads spent inside `step()`, in scope clock units
    /// (`HostClock::raw_now`; the trailer's `step_ns` once converted).
    step_raw: AtomicU64,
    /// The open iteration, the launch, copy and memset calls made so far (counted by CUPTI's
    /// callback at the timeline level), and the calls it captured.
    calls: Arc<ApiCalls>,
    pub(crate) cupti: Option<&'static LoadedCupti>,
    /// The run's origin and the clock scopes read.
    pub(crate) clock: HostClock,
    /// Path id of [`COUNTERS_SCOPE`]: the Range Profiler's own kernels (CUPTI launches `WaitNs`
    /// when user-replay passes start and stop) are attributed there, not to `(unscoped)`.
    pub(crate) counters_path: u32,
    /// PC sampling, when it was set up (`step()` takes no lock without it); taken at shutdown.
    /// Boxed, so that `step()` finds it absent in the line it shares with the clock.
    pc_sampling: OnceLock<Box<Mutex<Option<PcSamplingState>>>>,
    /// The iterations a sampled timeline traces (`None`: every one, or no timeline).
    sampling: Option<TimelineSampling>,
    pub(crate) paths: PathTable,
    pub(crate) events: EventPool,
    /// The one `Finish` message; the collector sleeps on this channel.
    finish: Sender<Finish>,
    /// Each scope thread's slot, with gpu-ledger's index of the thread and its key
    /// (`crate::thread_slot::thread_key`).
    thread_slots: Mutex<Vec<(u32, u64, Arc<ScopeSlot>)>>,
    /// The counters level, when it was set up; taken at shutdown.
    counters: Mutex<Option<CounterState>>,
    /// The thread whose open scope calls on threads with no scope of their own are attributed
    /// to.
    pub(crate) follow: Follow,
    /// Warnings for the trailer that shutdown adds (the signal that ended the run).
    end_warnings: Mutex<Vec<String>>,
    /// With [`Follow::SteppingThread`], the key (`crate::thread_slot::thread_key`) of the thread
    /// that called `step()` last, or started the run.
    pub(crate) stepping: AtomicU64,
    /// Scopes push NVTX ranges ([`crate::config::Nvtx::emit`]).
    pub(crate) nvtx_emit: bool,
    /// Most imported NVTX ranges open at once on a thread, when ranges are imported.
    pub(crate) nvtx_depth: Option<u32>,
    /// NVTX ranges not made scopes because the thread already had `nvtx_depth` open.
    pub(crate) nvtx_too_deep: AtomicU64,
    /// A sampled timeline's switch of the activity kinds and API callbacks.
    switch: switch::Switch,
    /// `step()` calls that came after shutdown began, which end no iteration.
    steps_after_close: AtomicU64,
    /// Each scope thread's count of its open scopes, written by that thread only: at
    /// `finish()` the scopes open on other threads than the finishing one are in no row.
    thread_open: Mutex<Vec<Arc<AtomicU32>>>,
    /// Scopes open on other threads when shutdown began (set by [`close`](Self::close)).
    open_elsewhere: AtomicU64,
    /// Scopes lost at their thread's exit ([`lost_at_thread_exit`]).
    lost_at_thread_exit: AtomicU64,
}

/// What a run does with NVTX, as start decided it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NvtxRun {
    /// Scopes push NVTX ranges.
    pub(crate) emit: bool,
    /// Imported ranges' depth limit, when NVTX ranges are imported.
    pub(crate) import_depth: Option<u32>,
}

impl RunState {
    /// The shared state of a run on `clock`, with CUPTI at the timeline and counters levels and
    /// the counters level's state when it was set up, its API calls stamped with host times when
    /// `stamp_calls`; and the collector's end of its messages.
    /// Called on the thread that starts the run, which `Follow::SteppingThread` follows until
    /// another thread calls `step()`.
    pub(crate) fn new(
        clock: HostClock,
        cupti: Option<&'static LoadedCupti>,
        counters: Option<CounterState>,
        follow: Follow,
        nvtx: NvtxRun,
        sampling: Option<TimelineSampling>,
        stamp_calls: bool,
    ) -> (Arc<RunState>, Inbox) {
        let (ends, ends_tx) = EndSlot::new(ENDS_CAPACITY);
        let (finish_tx, finish) = crossbeam_channel::bounded(1);
        let paths = PathTable::default();
        let counters_path = if counters.is_some() {
            paths.intern(0, COUNTERS_SCOPE)
        } else {
            0
        };
        let call_clock = clock.call_clock(stamp_calls);
        let running = Arc::new(RunState {
            clock,
            cupti,
            paths,
            events: EventPool::default(),
            finish: finish_tx,
            thread_slots: Mutex::new(Vec::new()),
            step_raw: AtomicU64::new(0),
            calls: Arc::new(cupti.map_or_else(ApiCalls::default, |lib| {
                ApiCalls::new(
                    crate::cupti::functions::ApiClasses::for_release(lib.release.cbids),
                    call_clock,
                )
            })),
            counters: Mutex::new(counters),
            counters_path,
            open: Mutex::new(Some(ends_tx)),
            end_warnings: Mutex::new(Vec::new()),
            follow,
            stepping: AtomicU64::new(crate::thread_slot::thread_key()),
            nvtx_emit: nvtx.emit,
            nvtx_depth: nvtx.import_depth,
            nvtx_too_deep: AtomicU64::new(0),
            sampling: sampling.filter(|_| cupti.is_some()),
            switch: switch::Switch::default(),
            pc_sampling: OnceLock::new(),
            steps_after_close: AtomicU64::new(0),
            thread_open: Mutex::new(Vec::new()),
            open_elsewhere: AtomicU64::new(0),
            lost_at_thread_exit: AtomicU64::new(0),
        });
        (running, Inbox { ends, finish })
    }

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
    /// Time the application's threads spent inside `step()`, ns.
    pub(crate) fn step_ns(&self) -> u64 {
        self.clock
            .raw_duration_ns(self.step_raw.load(Ordering::Relaxed))
    }
    /// Whether iteration `index` is traced: always, unless the timeline samples.
    pub(crate) fn traces(&self, index: u64) -> bool {
        self.sampling.as_ref().is_none_or(|s| s.traces(index))
    }
    /// Host time `step()` spent switching a sampled timeline's tracing, ns.
    pub(crate) fn sampling_switch_ns(&self) -> u64 {
        self.switch.step_ns()
    }
    /// Host time the collector spent switching a sampled timeline's tracing ahead, ns.
    pub(crate) fn sampling_switch_collector_ns(&self) -> u64 {
        self.switch.collector_ns()
    }
    /// Every switch of a sampled timeline is made in `step()`: with PC sampling, whose window
    /// needs the kinds off in exactly the iterations it takes.
    pub(crate) fn switch_in_step_only(&self) {
        self.switch.switch_in_step_only();
    }
    /// On the collector thread: switches a sampled timeline's kinds and callbacks as `step()`
    /// last asked; a failure is returned as a warning.
    pub(crate) fn switch_ahead(&self) -> Option<String> {
        match (self.cupti, &self.sampling) {
            (Some(lib), Some(_)) => self.switch.apply_wanted(lib, &self.calls),
            _ => None,
        }
    }
    /// On the stepping thread: the kinds and callbacks `on` now; a failure is returned as a
    /// warning.
    fn switch_now(&self, on: bool) -> Option<String> {
        let lib = self.cupti?;
        self.switch.set_now(lib, &self.calls, on).err().map(|e| {
            format!(
                "the sampled timeline could not switch tracing {} after this iteration: {e}",
                if on { "on" } else { "off" }
            )
        })
    }
    /// Sets tracing as the first iteration wants it: on, unless a sampled timeline leaves it
    /// untraced; armed ahead when the second one is traced.
    ///
    /// # Errors
    /// A CUPTI failure while switching.
    pub(crate) fn begin_tracing(&self) -> Result<()> {
        let Some(lib) = self.cupti else {
            return Ok(());
        };
        let first = self.traces(0);
        self.calls.traced.store(first, Ordering::SeqCst);
        let arm = self.switch.ahead() && self.traces(1);
        self.switch.begin(lib, &self.calls, first || arm)
    }
    /// A slot for the calling thread's closed scopes, registered for the collector to drain;
    /// returns its sending end. `key` is the thread's `thread_key`, which its captured calls
    /// carry too: the collector joins a thread's scopes to its calls by it.
    pub(crate) fn register_thread(&self, thread: u32, key: u64) -> ScopeSender {
        let (slot, sender) = ScopeSlot::new(RING_CAPACITY);
        self.thread_slots.lock().push((thread, key, slot));
        sender
    }
    /// A scope thread's count of its open scopes, which it alone writes.
    pub(crate) fn register_open(&self) -> Arc<AtomicU32> {
        let open = Arc::new(AtomicU32::new(0));
        self.thread_open.lock().push(open.clone());
        open
    }
    /// Takes every thread's closed scopes. The list's lock is held while draining: only a
    /// thread's first scope of a run takes it too (to register).
    pub(crate) fn drain_scopes(&self, out: &mut Vec<ScopeRecord>) {
        for (thread, key, slot) in self.thread_slots.lock().iter() {
            slot.drain_map_into(out, |closed| closed.into_record(*thread, *key));
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
    /// Runs `f` on the counters state, when counters are on. The Range Profiler's own kernels
    /// carry no API call, so no scope can claim them; the collector moves them to
    /// [`COUNTERS_SCOPE`] by name instead.
    fn with_counters<T>(&self, f: impl FnOnce(&mut CounterState) -> T) -> Option<T> {
        // No lock on `step()` when counters were never set up (their scope path exists iff so).
        if self.counters_path == 0 {
            return None;
        }
        self.counters.lock().as_mut().map(f)
    }
    /// Hands the run its PC sampling, before it is published.
    pub(crate) fn install_pc_sampling(&self, state: PcSamplingState) {
        let _ = self.pc_sampling.set(Box::new(Mutex::new(Some(state))));
    }
    /// Runs `f` on the PC sampling state, when PC sampling is on.
    fn with_pc_sampling<T>(&self, f: impl FnOnce(&mut PcSamplingState) -> T) -> Option<T> {
        self.pc_sampling.get()?.lock().as_mut().map(f)
    }
    /// CUPTI's clock now, at the levels that load CUPTI.
    pub(crate) fn cupti_now(&self) -> Option<u64> {
        self.cupti.and_then(|lib| cupti::timestamp(lib).ok())
    }
    /// The trailer warnings shutdown added (the collector takes them when it writes the trailer).
    pub(crate) fn take_end_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *self.end_warnings.lock())
    }

    /// Ends the open iteration and opens the next: the work of `Profiler::step`, whose thread
    /// has the scopes `open_scopes` open. Never blocks on the GPU; does nothing once shutdown
    /// began. Calls from several threads serialize: each ends exactly one iteration.
    pub(crate) fn step(&self, open_scopes: impl FnOnce() -> Vec<u32>) {
        let mut open = self.open.lock();
        let Some(ends) = open.as_mut() else {
            self.steps_after_close.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let entered = self.clock.raw_now();
        // Counters first: ending a pass synchronizes and may decode, which belongs to the
        // (perturbed) iteration that ends here, not to the next one.
        let counters = self
            .with_counters(|c| c.end_iteration(self.iteration()))
            .flatten();
        // PC sampling's stop and read synchronize too: inside the iteration, as the counters'.
        let stalls = self
            .with_pc_sampling(|p| p.end_iteration(self.iteration(), false))
            .flatten();
        // The count first, then the iteration's end: every call counted here was entered in
        // this iteration or an earlier one (`ApiCalls::total`), so the collector never waits
        // for a call of the next iteration.
        // A sampled timeline starts capturing calls before the next iteration opens, so that no
        // call of it escapes (calls at the end of this one may be captured: its row is untraced
        // anyway), and stops after, so that every call of this one is captured. The kinds and
        // callbacks are on by then: switched ahead by the collector, or here.
        let index = self.iteration();
        let (traced, next_traced) = (self.traces(index), self.traces(index + 1));
        let mut warning = None;
        if next_traced && !traced {
            warning = self.switch_now(true);
            self.calls.traced.store(true, Ordering::SeqCst);
        }
        let launches = self.calls.total.load(Ordering::SeqCst);
        let host_end = self.clock.raw_now();
        let cupti_end = self.cupti_now();
        let open_scopes = open_scopes();
        let index = self.calls.iteration.fetch_add(1, Ordering::SeqCst);
        if traced && !next_traced {
            self.calls.traced.store(false, Ordering::SeqCst);
        }
        if self.sampling.is_some() && !next_traced {
            // Off after a traced iteration, on again one iteration before the next traced one:
            // by the collector, off the application's critical path, unless it cannot.
            if self.switch.ahead() {
                self.switch.want(self.traces(index + 2));
            } else {
                warning = warning.or(self.switch_now(false));
            }
        }
        ends.send(IterationEnd {
            index,
            host_end,
            cupti_end,
            launches,
            traced,
            extras: IterationExtras::boxed(open_scopes, counters, stalls, warning),
        });
        self.with_counters(|c| c.begin_iteration(index + 1));
        self.with_pc_sampling(|p| p.begin_iteration(index + 1, self.now_ns()));
        self.step_raw.fetch_add(
            self.clock.raw_now().saturating_sub(entered),
            Ordering::Relaxed,
        );
        drop(open);
    }

    /// Stops `step()` and the scopes and ends the open iteration now, adding `end_warning` to
    /// the trailer: the message to send once CUPTI has handed over every buffer. The calling
    /// thread has the scopes `open_scopes` open.
    pub(crate) fn close(
        &self,
        end_warning: Option<String>,
        open_scopes: impl FnOnce() -> Vec<u32>,
    ) -> Finish {
        // No step() is sending now, and none will: Finish is the collector's last message. Before
        // scopes are disabled: a thread still stepping (a signal's shutdown runs beside the
        // application) would otherwise enter its next iteration's scopes as inert guards and then
        // end that iteration, a complete row with none of its scopes.
        *self.open.lock() = None;
        ENABLED.store(false, Ordering::SeqCst);
        self.switch.close();
        self.end_warnings.lock().extend(end_warning);
        let host_end_ns = self.now_ns();
        let cupti_end = self.cupti_now();
        let open_scopes = open_scopes();
        let open_anywhere: u64 = self
            .thread_open
            .lock()
            .iter()
            .map(|o| u64::from(o.load(Ordering::Relaxed)))
            .sum();
        self.open_elsewhere.store(
            open_anywhere.saturating_sub(open_scopes.len() as u64),
            Ordering::Relaxed,
        );
        let counters = self.with_counters(|c| c.finish(self.iteration())).flatten();
        let stalls = self
            .with_pc_sampling(|p| p.end_iteration(self.iteration(), true))
            .flatten();
        Finish {
            host_end_ns,
            cupti_end,
            open_scopes,
            counters,
            stalls,
            traced: self.traces(self.iteration()),
        }
    }

    /// Scopes open on other threads than the finishing one when shutdown began.
    pub(crate) fn scopes_open_elsewhere(&self) -> u64 {
        self.open_elsewhere.load(Ordering::Relaxed)
    }

    /// Scopes lost at their thread's exit ([`lost_at_thread_exit`]).
    pub(crate) fn scopes_lost_at_thread_exit(&self) -> u64 {
        self.lost_at_thread_exit.load(Ordering::Relaxed)
    }

    /// `step()` calls that came after shutdown began (none of them ended an iteration).
    pub(crate) fn steps_after_close(&self) -> u64 {
        self.steps_after_close.load(Ordering::Relaxed)
    }

    /// Hands the collector its last message.
    pub(crate) fn send_finish(&self, finish: Finish) {
        let _ = self.finish.send(finish);
    }

    /// Releases the Range Profiler and the PC sampler: only once the timeline has stopped and
    /// every record is in.
    pub(crate) fn release_counters(&self) {
        drop(self.counters.lock().take());
        if let Some(pc) = self.pc_sampling.get() {
            drop(pc.lock().take());
        }
    }
}

/// The running profiler's shared state, if any.
pub(crate) fn current() -> Option<Arc<RunState>> {
    CURRENT.read().clone()
}

/// The right to start a run: held from the check that none runs until the run is published,
/// so that two concurrent starts cannot both succeed.
pub(crate) struct Claim(RwLockWriteGuard<'static, Option<Arc<RunState>>>);

/// Claims the process's one run.
///
/// # Errors
/// [`Error::AlreadyRunning`] while another profiler runs.
pub(crate) fn claim() -> Result<Claim> {
    let current = CURRENT.write();
    if current.is_some() {
        return Err(Error::AlreadyRunning);
    }
    Ok(Claim(current))
}

impl Claim {
    /// Makes `running` the current run and turns the scopes on.
    pub(crate) fn publish(mut self, running: &Arc<RunState>) {
        *self.0 = Some(running.clone());
        GENERATION.fetch_add(1, Ordering::SeqCst);
        ENABLED.store(true, Ordering::SeqCst);
        running.with_counters(|c| c.begin_iteration(0));
        running.with_pc_sampling(|p| p.begin_iteration(0, running.now_ns()));
    }
}

/// Ends the current run: threads drop what they kept of it at their next scope.
pub(crate) fn retire() {
    *CURRENT.write() = None;
    GENERATION.fetch_add(1, Ordering::SeqCst);
}
