//! API calls as CUPTI's callback sees them: what attribution needs of each launch, copy, memset,
//! allocation and synchronization call, captured on the calling thread in place of CUPTI's API
//! activity records.
//!
//! CUPTI writing DRIVER and RUNTIME activity records costs more per launch than the timeline
//! level's whole allowance over raw CUPTI, and pushing and popping an external-correlation id
//! per scope costs as much again (docs/measurements.md). The callback the timeline level needs
//! anyway (to count calls) already
//! sees every call, so it keeps what the collector used from those records: the correlation id
//! the GPU records carry, the function, its return value, the iteration open at entry, and the
//! scope path open on the thread; and, unless idle causes are off, the host clock at the
//! outermost call's entry and exit (a TSC read each where scopes read the TSC: the collector
//! converts them as it converts scopes, and places them on CUPTI's clock to tell a late host from
//! a dependency). Each goes into the thread's own ring (`crate::thread_slot`): no lock and no
//! allocation per call.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use cupti_sys as sys;

use super::functions::{is_counted, ApiClasses};
use crate::clock::CallClock;
use crate::thread_slot::{SlotSender, ThreadSlot};

pub(crate) mod graphs;

/// One API call, captured at its exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CapturedCall {
    /// CUPTI's correlation id, which the call's GPU records carry.
    pub correlation_id: u32,
    /// Callback id (`cupti_driver_cbid.h` / `cupti_runtime_cbid.h`).
    pub cbid: u32,
    /// The iteration open when the call was entered.
    pub iteration: u64,
    /// The innermost scope open on the calling thread (0: none).
    pub path_id: u32,
    /// The call's return value (0 is success).
    pub return_value: u32,
    /// True for a runtime API call, false for a driver API call.
    pub runtime: bool,
    /// A call made inside another traced call (`cudaLaunchKernel` calls `cuLaunchKernel`). The
    /// GPU work may carry either call's id: with CUPTI's API records off, cuBLAS's kernels carry
    /// the inner driver call's. So a nested call is neither counted nor awaited itself;
    /// its GPU records stand for the outermost call's.
    pub nested: bool,
    /// The correlation id of the outermost traced call this one was made in (its own when not
    /// nested).
    pub outer_correlation_id: u32,
    /// How `path_id` was found.
    pub attribution: Attribution,
    /// The calling thread: its index in the run's list of launching threads
    /// (`ApiCalls::thread`).
    pub thread: u32,
    /// The host clock at the outermost call's entry: a raw reading of the run's scope clock
    /// on the calling thread, ns since the run's origin once the collector has taken it; 0:
    /// not read (a nested call, or idle causes off).
    pub entry: u64,
    /// The host clock at the outermost call's exit, as `entry`.
    pub exit: u64,
}

/// How a call's scope path was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Attribution {
    /// No scope: none open on its thread, none handed to it, none open on a followed thread.
    #[default]
    Unscoped,
    /// The innermost scope open on the calling thread.
    OwnThread,
    /// A scope context captured on another thread and entered on this one (`ScopeContext`).
    Handoff,
    /// No scope on the calling thread: the scope open at that instant on the followed thread
    /// (`Config::follow`).
    Followed,
    /// A CUDA graph's node: the scope open where it was captured, nested under its graph
    /// launch's (the collector's; never a call's own).
    GraphCapture,
    /// A CUDA graph's node whose capture was not seen: its graph launch's scope (the
    /// collector's; never a call's own).
    GraphLaunch,
}

/// A thread that made traced calls, as the ledger names it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct CallingThread {
    /// The thread's name (`std::thread::Builder::name`), when it has one.
    pub(crate) name: Option<String>,
    /// The operating system's thread id (0 where unknown).
    pub(crate) tid: u32,
    /// `crate::thread_slot::thread_key` of the thread: what joins its calls to its scopes.
    pub(crate) key: u64,
}

impl CallingThread {
    /// The calling thread.
    fn current() -> Self {
        CallingThread {
            name: std::thread::current().name().map(str::to_owned),
            tid: os_thread_id(),
            key: crate::thread_slot::thread_key(),
        }
    }
}

/// The kernel's id of the calling thread, as `top -H`, `gdb` and Nsight Systems show it.
#[cfg(target_os = "linux")]
fn os_thread_id() -> u32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    let tid = unsafe { libc::gettid() };
    u32::try_from(tid).unwrap_or(0)
}

#[cfg(not(target_os = "linux"))]
fn os_thread_id() -> u32 {
    0
}

/// The bit of a thread's scope path ([`set_scope_path`]) that says the path came through a
/// scope context handed over from another thread. Path ids stay far below it.
pub(crate) const HANDOFF_BIT: u32 = 1 << 31;

/// Calls a thread's ring holds before they spill into its slot's overflow vector (a lock per
/// call until the collector drains it, every 2 ms): 2 million calls a second per thread never
/// spill. 224 KiB per thread that makes traced calls (56 bytes a call).
const RING_CAPACITY: usize = 4096;

const _: () = assert!(std::mem::size_of::<CapturedCall>() == 56);

/// Session ids, so that a thread's ring from an earlier profiler run is not reused.
static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

/// What the callback shares with `step()` and the collector (its CUPTI userdata).
pub(crate) struct ApiCalls {
    /// Counted calls (launches, graph launches, copies, memsets) the application has entered
    /// so far. `step()` reads it before it ends the iteration, and a row waits for that many
    /// calls in all. The callback reads [`iteration`](Self::iteration) *before* it counts, so a
    /// call that `step()` counted for iteration `k` belongs to `k` or an earlier one.
    pub total: AtomicU64,
    /// The open iteration (`step()` increments it after reading `total`).
    pub iteration: AtomicU64,
    /// False while the timeline samples the open iteration out: the callback then returns at
    /// once, counting and capturing nothing (CUPTI records nothing either).
    pub traced: AtomicBool,
    /// Calls whose thread could not take them (the thread was exiting): their records are
    /// placed by time, and rows waiting for them say so.
    pub lost: AtomicU64,
    /// The scope path open now on the followed thread (`Config::follow`), which a call on a
    /// thread with no scope of its own is attributed to; 0: none.
    pub followed: AtomicU32,
    /// NVTX ranges imported as scopes, when [`crate::config::Nvtx::import`] is on and NVTX
    /// reaches CUPTI.
    pub nvtx: std::sync::OnceLock<super::nvtx::NvtxImporter>,
    /// The API callbacks the session enabled, for a sampled timeline to switch.
    pub(crate) callbacks: std::sync::OnceLock<super::CallbackSet>,
    /// CUDA graph nodes created, cloned and destroyed, for the collector ([`graphs`]).
    pub(crate) graphs: graphs::GraphQueue,
    session: u64,
    /// Each calling thread's ring, in the order of their first call (a thread's index).
    slots: parking_lot::Mutex<Vec<(Arc<ThreadSlot<CapturedCall>>, CallingThread)>>,
    classes: ApiClasses,
    /// What stamps each outermost call's entry and exit.
    clock: CallClock,
}

impl Default for ApiCalls {
    /// With the callback ids of the CUPTI the API bindings were generated from.
    fn default() -> Self {
        ApiCalls::new(
            ApiClasses::default(),
            CallClock::Monotonic(std::time::Instant::now()),
        )
    }
}

impl ApiCalls {
    /// Shared state for a callback that classifies calls by `classes` (the loaded release's)
    /// and stamps them with `clock`.
    pub(crate) fn new(classes: ApiClasses, clock: CallClock) -> Self {
        ApiCalls {
            total: AtomicU64::new(0),
            iteration: AtomicU64::new(0),
            traced: AtomicBool::new(true),
            lost: AtomicU64::new(0),
            followed: AtomicU32::new(0),
            nvtx: std::sync::OnceLock::new(),
            callbacks: std::sync::OnceLock::new(),
            graphs: graphs::GraphQueue::default(),
            session: NEXT_SESSION.fetch_add(1, Ordering::Relaxed),
            slots: parking_lot::Mutex::new(Vec::new()),
            classes,
            clock,
        }
    }
}

impl ApiCalls {
    /// Moves every call captured so far, on every thread, into `out`.
    pub(crate) fn drain_into(&self, out: &mut Vec<CapturedCall>) {
        for (slot, _) in self.slots.lock().iter() {
            slot.drain_into(out);
        }
    }

    /// The thread of index `index` ([`CapturedCall::thread`]).
    pub(crate) fn thread(&self, index: u32) -> Option<CallingThread> {
        self.slots
            .lock()
            .get(index as usize)
            .map(|(_, thread)| thread.clone())
    }

    /// The index and operating system id of every thread that made traced calls, into `out`.
    pub(crate) fn threads(&self, out: &mut Vec<(u32, u32)>) {
        out.clear();
        let slots = self.slots.lock();
        for (i, (_, thread)) in slots.iter().enumerate() {
            out.push((u32::try_from(i).unwrap_or(u32::MAX), thread.tid));
        }
    }

    /// Whether calls carry their entry and exit times.
    #[cfg(test)]
    pub(crate) fn stamps_calls(&self) -> bool {
        self.clock != CallClock::Off
    }

    /// What the callback does at a traced call's entry (`enter`) or exit, on the calling
    /// thread. `correlation_data` is CUPTI's per-call slot, the same at entry and exit.
    fn on_call(
        &self,
        runtime: bool,
        enter: bool,
        cbid: u32,
        correlation_id: u32,
        correlation_data: &mut u64,
        return_value: u32,
    ) {
        // A sampled timeline switches whole callback domains on: their functions that are not
        // traced reach the callback too, and leave no trace.
        let class = self.classes.of(runtime, cbid);
        if class.is_none() {
            return;
        }
        // A call entered while the iteration was sampled out is not captured at its exit either,
        // whatever step() did meanwhile: CUPTI's slot carries the mark from entry to exit.
        if enter {
            if !self.traced.load(Ordering::Relaxed) {
                *correlation_data = UNTRACED;
                return;
            }
        } else if *correlation_data & !ITERATION_BITS != ENTERED {
            return;
        }
        let taken = CALL_THREAD.try_with(|t| {
            let depth = t.depth.get();
            if enter {
                t.depth.set(depth + 1);
                // The iteration first, then the count (see `total`).
                *correlation_data =
                    ENTERED | (self.iteration.load(Ordering::SeqCst) & ITERATION_BITS);
                if depth == 0 {
                    t.entry.set(self.clock.raw_now());
                    t.outer.set(correlation_id);
                    if is_counted(class) {
                        self.total.fetch_add(1, Ordering::SeqCst);
                    }
                }
                return true;
            }
            let depth = depth.saturating_sub(1);
            t.depth.set(depth);
            let nested = depth > 0;
            // Only the outermost call's times are used; a nested call's would cost two reads.
            let (entry, exit) = if nested {
                (0, 0)
            } else {
                (t.entry.get(), self.clock.raw_now())
            };
            let (path_id, attribution) = self.scope_of(t.scope_path.get());
            let mut call = CapturedCall {
                outer_correlation_id: if nested {
                    t.outer.get()
                } else {
                    correlation_id
                },
                correlation_id,
                cbid,
                iteration: *correlation_data & ITERATION_BITS,
                path_id,
                return_value,
                runtime,
                nested,
                attribution,
                thread: 0,
                entry,
                exit,
            };
            let Ok(mut sender) = t.sender.try_borrow_mut() else {
                return false;
            };
            match &mut *sender {
                Some((session, index, tx)) if *session == self.session => {
                    call.thread = *index;
                    tx.send(call)
                }
                other => *other = Some(self.first_call(call)),
            }
            true
        });
        if !enter && !taken.unwrap_or(false) {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The scope path a call is attributed to, and how it was found, from its thread's path
    /// `raw` ([`set_scope_path`]).
    #[inline]
    fn scope_of(&self, raw: u32) -> (u32, Attribution) {
        if raw & HANDOFF_BIT != 0 {
            (raw & !HANDOFF_BIT, Attribution::Handoff)
        } else if raw != 0 {
            (raw, Attribution::OwnThread)
        } else {
            // The one atomic load a call pays for following a thread, on a thread with no
            // scope of its own.
            match self.followed.load(Ordering::Relaxed) {
                0 => (0, Attribution::Unscoped),
                f => (f, Attribution::Followed),
            }
        }
    }

    /// The thread's first call of this run: its ring (one allocation and one lock, once per
    /// thread), with `call` sent; the thread's sender.
    #[cold]
    #[inline(never)]
    fn first_call(&self, mut call: CapturedCall) -> (u64, u32, SlotSender<CapturedCall>) {
        let (slot, mut tx) = ThreadSlot::new(RING_CAPACITY);
        let index = {
            let mut slots = self.slots.lock();
            slots.push((slot, CallingThread::current()));
            u32::try_from(slots.len() - 1).unwrap_or(u32::MAX)
        };
        call.thread = index;
        tx.send(call);
        (self.session, index, tx)
    }
}

#[cfg(test)]
impl ApiCalls {
    /// Enters and exits the driver function `name` on the calling thread, as CUPTI's callback
    /// would (tests of the collector's readers of the calling threads).
    pub(crate) fn call_for_tests(&self, name: &str, correlation_id: u32) {
        let cbid = cupti_sys::bound_cbids()
            .driver
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(id, _)| *id)
            .expect("a driver function");
        let mut data = 0u64;
        self.on_call(false, true, cbid, correlation_id, &mut data, 0);
        self.on_call(false, false, cbid, correlation_id, &mut data, 0);
    }
}

/// A thread's side of the capture.
struct CallThread {
    /// The innermost scope open on this thread, with [`HANDOFF_BIT`] when it came through a
    /// handed-over context ([`set_scope_path`]).
    scope_path: Cell<u32>,
    /// Traced calls in progress on this thread.
    depth: Cell<u32>,
    /// The correlation id of the outermost of them.
    outer: Cell<u32>,
    /// The call clock at the outermost one's entry.
    entry: Cell<u64>,
    /// This thread's ring, for the run (session) that made it, and the thread's index there.
    sender: RefCell<Option<(u64, u32, SlotSender<CapturedCall>)>>,
}

thread_local! {
    static CALL_THREAD: CallThread = const {
        CallThread {
            scope_path: Cell::new(0),
            depth: Cell::new(0),
            outer: Cell::new(0),
            entry: Cell::new(0),
            sender: RefCell::new(None),
        }
    };
}

/// Sets the scope path that calls made on this thread from now on are attributed to (0: none),
/// with [`HANDOFF_BIT`] set when it was handed over from another thread. Scope guards call it as
/// they open and close.
#[inline]
pub(crate) fn set_scope_path(path_id: u32) {
    let _ = CALL_THREAD.try_with(|t| t.scope_path.set(path_id));
}

/// What a call entered in a sampled-out iteration carries in CUPTI's per-call slot (an
/// iteration index is never this large).
const UNTRACED: u64 = u64::MAX;
/// The mark a captured call's entry leaves in the slot's top 16 bits, beside its iteration: a
/// call whose entry the callback did not see (the callbacks were switched on while it ran, as a
/// sampled timeline's collector does during a synchronize) is not captured at its exit.
const ENTERED: u64 = 0x6c65 << 48;
/// The slot's bits that hold the iteration.
const ITERATION_BITS: u64 = (1 << 48) - 1;

/// CUPTI callback of the timeline level, enabled for every traced driver and runtime function
/// ([`classify_api`](super::functions::classify_api)), for the graph resource callbacks
/// ([`graphs::CALLBACKS`]) and, when NVTX ranges are imported, for the NVTX calls of
/// [`super::nvtx::CALLBACKS`]. Nothing here can panic, and nothing allocates but a thread's
/// first call and a graph event (a node's creation costs the driver far more).
pub(crate) unsafe extern "C" fn capture_api_call(
    userdata: *mut std::os::raw::c_void,
    domain: sys::CUpti_CallbackDomain::Type,
    cbid: sys::CUpti_CallbackId,
    cbdata: *const std::os::raw::c_void,
) {
    if userdata.is_null() || cbdata.is_null() {
        return;
    }
    if domain == sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE {
        if cbid == sys::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_MODULE_LOADED {
            // SAFETY: for a module-loaded resource callback CUPTI passes a CUpti_ResourceData.
            unsafe { super::pc_sampling::on_module_loaded(cbdata.cast()) };
        } else if graphs::CALLBACKS.contains(&cbid) {
            // SAFETY: userdata is the session's ApiCalls, alive until unsubscribe; for a graph
            // resource callback CUPTI passes a CUpti_ResourceData, valid for the call.
            unsafe { graphs::on_resource(&*(userdata as *const ApiCalls), cbid, cbdata.cast()) };
        }
        return;
    }
    if domain == sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_NVTX {
        // SAFETY: userdata is the session's ApiCalls, alive until unsubscribe; for the NVTX
        // domain CUPTI passes a CUpti_NvtxData for callback id `cbid`, valid for the call.
        unsafe {
            let calls = &*(userdata as *const ApiCalls);
            if let Some(importer) = calls.nvtx.get() {
                importer.on_callback(cbid, &*(cbdata as *const sys::CUpti_NvtxData));
            }
        }
        return;
    }
    // SAFETY: for the driver and runtime API domains, the other ones enabled, CUPTI passes a
    // CUpti_CallbackData, valid for the callback; userdata is the session's ApiCalls, alive
    // until unsubscribe. correlationData points to CUPTI's u64 slot for this call (the same at
    // entry and exit); at exit functionReturnValue, when set, points to the call's CUresult or
    // cudaError_t, C enums of int size.
    unsafe {
        let data = &*(cbdata as *const sys::CUpti_CallbackData);
        let calls = &*(userdata as *const ApiCalls);
        let enter = data.callbackSite == sys::CUpti_ApiCallbackSite::CUPTI_API_ENTER;
        let mut scratch = 0u64;
        let slot = if data.correlationData.is_null() {
            &mut scratch
        } else {
            &mut *data.correlationData
        };
        let rv = if enter || data.functionReturnValue.is_null() {
            0
        } else {
            *(data.functionReturnValue as *const u32)
        };
        let runtime = domain == sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API;
        calls.on_call(runtime, enter, cbid, data.correlationId, slot, rv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cbid(table: &[(u32, &str)], name: &str) -> u32 {
        table.iter().find(|(_, n)| *n == name).unwrap().0
    }

    /// Enters and exits one call, as CUPTI's callback would.
    pub(super) fn call(
        calls: &ApiCalls,
        runtime: bool,
        name: &str,
        corr: u32,
        inner: impl FnOnce(),
    ) {
        let table = if runtime {
            sys::bound_cbids().runtime
        } else {
            sys::bound_cbids().driver
        };
        let id = cbid(table, name);
        let mut data = 0u64;
        calls.on_call(runtime, true, id, corr, &mut data, 0);
        inner();
        calls.on_call(runtime, false, id, corr, &mut data, 0);
    }

    fn drained(calls: &ApiCalls) -> Vec<CapturedCall> {
        let mut out = Vec::new();
        calls.drain_into(&mut out);
        out
    }

    #[test]
    fn a_function_that_is_not_traced_is_not_captured_nor_counted() {
        let calls = ApiCalls::default();
        call(&calls, false, "cuCtxGetCurrent", 5, || {
            // A traced call made inside it is an outermost call.
            call(&calls, false, "cuLaunchKernel", 6, || {});
        });
        let got = drained(&calls);
        assert_eq!(got.len(), 1, "only the launch is captured");
        assert_eq!((got[0].correlation_id, got[0].outer_correlation_id), (6, 6));
        assert_eq!(calls.total.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_call_carries_its_entry_iteration_and_the_open_scope() {
        let calls = ApiCalls::default();
        set_scope_path(7);
        call(&calls, false, "cuLaunchKernel", 11, || {
            // A step() on another thread while the call runs.
            calls.iteration.fetch_add(1, Ordering::SeqCst);
        });
        set_scope_path(0);
        call(&calls, false, "cuLaunchKernel", 12, || {});
        let got = drained(&calls);
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[0].correlation_id, got[0].iteration, got[0].path_id),
            (11, 0, 7)
        );
        assert_eq!(
            (got[1].correlation_id, got[1].iteration, got[1].path_id),
            (12, 1, 0)
        );
        assert_eq!(calls.total.load(Ordering::SeqCst), 2);
        assert!(
            drained(&calls).is_empty(),
            "a second drain gives nothing new"
        );
    }

    #[test]
    fn a_call_entered_while_sampled_out_is_neither_counted_nor_captured() {
        let calls = ApiCalls::default();
        set_scope_path(0);
        calls.traced.store(false, Ordering::SeqCst);
        call(&calls, false, "cuLaunchKernel", 21, || {
            // Tracing comes back on while the call runs: its exit is still not captured.
            calls.traced.store(true, Ordering::SeqCst);
        });
        assert_eq!(calls.total.load(Ordering::SeqCst), 0);
        assert!(drained(&calls).is_empty());
        // The thread's nesting depth is intact: the next traced call is an outermost one.
        call(&calls, false, "cuLaunchKernel", 22, || {});
        let got = drained(&calls);
        assert_eq!(got.len(), 1);
        assert!(!got[0].nested);
        assert_eq!(calls.total.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn an_exit_whose_entry_the_callback_did_not_see_is_not_captured() {
        let calls = ApiCalls::default();
        set_scope_path(0);
        let id = cbid(sys::bound_cbids().driver, "cuStreamSynchronize");
        // The callbacks were switched on while the synchronize ran: CUPTI calls its exit alone,
        // with the slot as CUPTI left it (zero, or anything but an entry's mark).
        for mut data in [0u64, 5, 1 << 60] {
            calls.on_call(false, false, id, 31, &mut data, 0);
        }
        assert!(drained(&calls).is_empty());
        // The thread's nesting depth is intact: the next call is an outermost one.
        call(&calls, false, "cuLaunchKernel", 32, || {});
        let got = drained(&calls);
        assert_eq!(got.len(), 1);
        assert!(!got[0].nested);
        assert_eq!(got[0].iteration, 0);
    }

    #[test]
    fn a_call_inside_another_is_kept_but_not_counted() {
        let calls = ApiCalls::default();
        call(&calls, true, "cudaLaunchKernel_v7000", 20, || {
            call(&calls, false, "cuLaunchKernel", 21, || {});
        });
        // A runtime call inside a runtime call is nested too.
        call(&calls, true, "cudaMemcpy_v3020", 30, || {
            call(&calls, true, "cudaMemcpyAsync_v3020", 31, || {
                call(&calls, false, "cuMemcpyAsync", 32, || {});
            });
        });
        // Synchronization and allocation are traced, not counted.
        call(&calls, false, "cuCtxSynchronize", 22, || {});
        let got = drained(&calls);
        let by_id = |c: u32| got.iter().find(|g| g.correlation_id == c).unwrap();
        assert!(by_id(21).nested && !by_id(21).runtime);
        assert_eq!(by_id(21).outer_correlation_id, 20);
        assert!(!by_id(20).nested && by_id(20).runtime);
        assert_eq!(by_id(20).outer_correlation_id, 20);
        assert!(!by_id(22).nested);
        assert!(by_id(31).nested && by_id(32).nested && !by_id(30).nested);
        assert_eq!(
            (
                by_id(31).outer_correlation_id,
                by_id(32).outer_correlation_id
            ),
            (30, 30)
        );
        assert_eq!(
            calls.total.load(Ordering::SeqCst),
            2,
            "only the outermost launch and copy count"
        );
    }

    #[test]
    fn each_thread_has_its_own_ring_and_a_new_run_a_new_one() {
        let first = Arc::new(ApiCalls::default());
        let threads: Vec<_> = (0..4u32)
            .map(|k| {
                let calls = first.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        call(&calls, false, "cuMemcpyHtoD_v2", k * 1000 + i, || {});
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut ids: Vec<u32> = drained(&first).iter().map(|c| c.correlation_id).collect();
        ids.sort_unstable();
        assert_eq!(
            ids,
            (0..4000).collect::<Vec<_>>(),
            "nothing lost, nothing twice"
        );
        assert_eq!(first.slots.lock().len(), 4);
        // Two runs, one after the other, on this thread: each gets its own ring.
        let second = ApiCalls::default();
        call(&first, false, "cuLaunchKernel", 1, || {});
        call(&second, false, "cuLaunchKernel", 2, || {});
        assert_eq!(drained(&second).len(), 1);
        assert_eq!(drained(&first).len(), 1);
        assert_eq!(first.lost.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_call_says_how_its_scope_was_found() {
        let calls = ApiCalls::default();
        set_scope_path(5);
        call(&calls, false, "cuLaunchKernel", 1, || {});
        set_scope_path(6 | HANDOFF_BIT);
        call(&calls, false, "cuLaunchKernel", 2, || {});
        set_scope_path(0);
        call(&calls, false, "cuLaunchKernel", 3, || {});
        calls.followed.store(9, Ordering::Relaxed);
        call(&calls, false, "cuLaunchKernel", 4, || {});
        // A scope of the thread's own wins over the followed thread's.
        set_scope_path(5);
        call(&calls, false, "cuLaunchKernel", 5, || {});
        set_scope_path(0);
        let got: Vec<(u32, Attribution)> = drained(&calls)
            .iter()
            .map(|c| (c.path_id, c.attribution))
            .collect();
        assert_eq!(
            got,
            [
                (5, Attribution::OwnThread),
                (6, Attribution::Handoff),
                (0, Attribution::Unscoped),
                (9, Attribution::Followed),
                (5, Attribution::OwnThread),
            ]
        );
    }

    #[test]
    fn an_outermost_call_carries_its_entry_and_exit_times_and_a_nested_one_none() {
        let calls = ApiCalls::default();
        call(&calls, true, "cudaLaunchKernel_v7000", 40, || {
            std::thread::sleep(std::time::Duration::from_millis(2));
            call(&calls, false, "cuLaunchKernel", 41, || {});
        });
        let got = drained(&calls);
        let by_id = |c: u32| *got.iter().find(|g| g.correlation_id == c).unwrap();
        let outer = by_id(40);
        assert!(outer.entry > 0, "{outer:?}");
        assert!(outer.exit >= outer.entry + 2_000_000, "{outer:?}");
        assert_eq!((by_id(41).entry, by_id(41).exit), (0, 0));
        // Idle causes off: no clock read at all.
        let off = ApiCalls::new(ApiClasses::default(), CallClock::Off);
        assert!(!off.stamps_calls());
        call(&off, false, "cuLaunchKernel", 42, || {});
        let got = drained(&off);
        assert_eq!((got[0].entry, got[0].exit), (0, 0));
    }

    #[test]
    fn a_call_names_its_thread() {
        let calls = Arc::new(ApiCalls::default());
        call(&calls, false, "cuLaunchKernel", 1, || {});
        let c = calls.clone();
        std::thread::Builder::new()
            .name("launcher-0".into())
            .spawn(move || call(&c, false, "cuLaunchKernel", 2, || {}))
            .unwrap()
            .join()
            .unwrap();
        let got = drained(&calls);
        let of = |corr: u32| {
            got.iter()
                .find(|g| g.correlation_id == corr)
                .unwrap()
                .thread
        };
        assert_ne!(of(1), of(2));
        let launcher = calls.thread(of(2)).unwrap();
        assert_eq!(launcher.name.as_deref(), Some("launcher-0"));
        #[cfg(target_os = "linux")]
        {
            assert_ne!(launcher.tid, 0);
            assert_ne!(launcher.tid, calls.thread(of(1)).unwrap().tid);
        }
        assert_eq!(calls.thread(99), None);
        assert_ne!(launcher.key, calls.thread(of(1)).unwrap().key);
        let mut threads = Vec::new();
        calls.threads(&mut threads);
        assert_eq!(threads.len(), 2);
        assert!(threads.contains(&(of(2), launcher.tid)));
    }
}
