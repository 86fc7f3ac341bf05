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
//! scope path open on the thread. Each goes into the thread's own ring
//! (`crate::thread_slot`): no lock, no allocation and no clock read per call.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cupti_sys as sys;

use super::functions::{is_counted, ApiClasses};
use crate::thread_slot::{SlotSender, ThreadSlot};

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
}

/// Calls a thread's ring holds before they spill into its slot's overflow vector (a lock per
/// call until the collector drains it, every 2 ms): 2 million calls a second per thread never
/// spill. 128 KiB per thread that makes traced calls.
const RING_CAPACITY: usize = 4096;

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
    /// Calls whose thread could not take them (the thread was exiting): their records are
    /// placed by time, and rows waiting for them say so.
    pub lost: AtomicU64,
    session: u64,
    slots: parking_lot::Mutex<Vec<Arc<ThreadSlot<CapturedCall>>>>,
    classes: ApiClasses,
}

impl Default for ApiCalls {
    fn default() -> Self {
        ApiCalls {
            total: AtomicU64::new(0),
            iteration: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            session: NEXT_SESSION.fetch_add(1, Ordering::Relaxed),
            slots: parking_lot::Mutex::new(Vec::new()),
            classes: ApiClasses::default(),
        }
    }
}

impl ApiCalls {
    /// Whether calls of this function are counted.
    fn counted(&self, runtime: bool, cbid: u32) -> bool {
        is_counted(self.classes.of(runtime, cbid))
    }

    /// Moves every call captured so far, on every thread, into `out`.
    pub(crate) fn drain_into(&self, out: &mut Vec<CapturedCall>) {
        for slot in self.slots.lock().iter() {
            slot.drain_into(out);
        }
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
        let taken = CALL_THREAD.try_with(|t| {
            let depth = t.depth.get();
            if enter {
                t.depth.set(depth + 1);
                // The iteration first, then the count (see `total`).
                *correlation_data = self.iteration.load(Ordering::SeqCst);
                if depth == 0 {
                    t.outer.set(correlation_id);
                    if self.counted(runtime, cbid) {
                        self.total.fetch_add(1, Ordering::SeqCst);
                    }
                }
                return true;
            }
            let depth = depth.saturating_sub(1);
            t.depth.set(depth);
            let nested = depth > 0;
            let call = CapturedCall {
                outer_correlation_id: if nested {
                    t.outer.get()
                } else {
                    correlation_id
                },
                correlation_id,
                cbid,
                iteration: *correlation_data,
                path_id: t.scope_path.get(),
                return_value,
                runtime,
                nested,
            };
            let Ok(mut sender) = t.sender.try_borrow_mut() else {
                return false;
            };
            match &mut *sender {
                Some((session, tx)) if *session == self.session => tx.send(call),
                other => {
                    // The thread's first call of this run: its ring (one allocation and one
                    // lock, once per thread).
                    let (slot, mut tx) = ThreadSlot::new(RING_CAPACITY);
                    self.slots.lock().push(slot);
                    tx.send(call);
                    *other = Some((self.session, tx));
                }
            }
            true
        });
        if !enter && !taken.unwrap_or(false) {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A thread's side of the capture.
struct CallThread {
    /// The innermost scope open on this thread ([`set_scope_path`]).
    scope_path: Cell<u32>,
    /// Traced calls in progress on this thread.
    depth: Cell<u32>,
    /// The correlation id of the outermost of them.
    outer: Cell<u32>,
    /// This thread's ring, for the run (session) that made it.
    sender: RefCell<Option<(u64, SlotSender<CapturedCall>)>>,
}

thread_local! {
    static CALL_THREAD: CallThread = const {
        CallThread {
            scope_path: Cell::new(0),
            depth: Cell::new(0),
            outer: Cell::new(0),
            sender: RefCell::new(None),
        }
    };
}

/// Sets the scope path that calls made on this thread from now on are attributed to (0: none).
/// Scope guards call it as they open and close.
#[inline]
pub(crate) fn set_scope_path(path_id: u32) {
    let _ = CALL_THREAD.try_with(|t| t.scope_path.set(path_id));
}

/// CUPTI callback of the timeline level, enabled for every traced driver and runtime function
/// ([`classify_api`](super::functions::classify_api)). Nothing here can panic, and nothing allocates but a thread's first call.
pub(crate) unsafe extern "C" fn capture_api_call(
    userdata: *mut std::os::raw::c_void,
    domain: sys::CUpti_CallbackDomain::Type,
    cbid: sys::CUpti_CallbackId,
    cbdata: *const std::os::raw::c_void,
) {
    if userdata.is_null() || cbdata.is_null() {
        return;
    }
    // SAFETY: for the driver and runtime API domains, the only ones enabled, CUPTI passes a
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
    fn call(calls: &ApiCalls, runtime: bool, name: &str, corr: u32, inner: impl FnOnce()) {
        let table = if runtime {
            sys::RUNTIME_API_CBIDS
        } else {
            sys::DRIVER_API_CBIDS
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
}
