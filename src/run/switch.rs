//! A sampled timeline's switch: the activity kinds and the API callbacks, on for a traced
//! iteration and off between, switched by `step()` or ahead of time by the collector thread.
//!
//! A switch costs the calling thread 50 to 120 µs (`docs/overhead.md`). On the stepping thread
//! that time is on the application's critical path (a `step()` that follows a synchronize
//! leaves the GPU idle), so by default the collector switches instead: it turns the kinds and
//! callbacks on during the iteration before a traced one and off during the iteration after,
//! while `step()` only flips the capture flag ([`crate::cupti::calls::ApiCalls::traced`]).
//! `step()` switches itself only when the collector has not (a very short iteration), and always
//! when PC sampling runs: CUPTI refuses to enable a kind while PC sampling is enabled, so the
//! kinds must be off exactly in the iterations its window takes. The records of untraced work
//! that the kinds let through meanwhile are counted and dropped by the collector
//! (`Trailer::untraced_records`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use crate::cupti::calls::ApiCalls;
use crate::cupti::LoadedCupti;
use crate::error::Result;

/// Where the kinds and callbacks stand; `step()` and the collector both switch under its lock.
#[derive(Debug)]
struct State {
    /// The activity kinds and the API callbacks are on.
    on: bool,
    /// Shutdown began: nothing switches any more (the session turns everything off itself).
    closed: bool,
}

/// The switch of one run's sampled timeline.
#[derive(Debug)]
pub(crate) struct Switch {
    state: Mutex<State>,
    /// What the stepping thread asks the collector to make of the kinds and callbacks.
    wanted: AtomicBool,
    /// Whether the collector switches ahead of time; off with PC sampling and after a failure
    /// of the collector's switch.
    ahead: AtomicBool,
    /// Host time the stepping thread spent switching, ns.
    step_ns: AtomicU64,
    /// Host time the collector spent switching, ns.
    collector_ns: AtomicU64,
}

impl Default for Switch {
    /// The state a timeline session starts in: the kinds and callbacks on.
    fn default() -> Self {
        Switch {
            state: Mutex::new(State {
                on: true,
                closed: false,
            }),
            wanted: AtomicBool::new(true),
            ahead: AtomicBool::new(true),
            step_ns: AtomicU64::new(0),
            collector_ns: AtomicU64::new(0),
        }
    }
}

impl Switch {
    /// Every switch is made by `step()` from now on.
    pub(crate) fn switch_in_step_only(&self) {
        self.ahead.store(false, Ordering::SeqCst);
    }
    /// Whether the collector switches ahead of time.
    pub(crate) fn ahead(&self) -> bool {
        self.ahead.load(Ordering::Relaxed)
    }
    /// Asks the collector to turn the kinds and callbacks on or off when it next looks. Stores
    /// only a change: `step()` asks on every untraced iteration, and a store would take the
    /// line from the collector's core, which reads it every tick.
    pub(crate) fn want(&self, on: bool) {
        if self.wanted.load(Ordering::Relaxed) != on {
            self.wanted.store(on, Ordering::Release);
        }
    }
    /// Host time `step()` spent switching, ns.
    pub(crate) fn step_ns(&self) -> u64 {
        self.step_ns.load(Ordering::Relaxed)
    }
    /// Host time the collector spent switching, ns.
    pub(crate) fn collector_ns(&self) -> u64 {
        self.collector_ns.load(Ordering::Relaxed)
    }

    /// On the stepping thread: the kinds and callbacks `on` now (nothing to do when the
    /// collector has switched them already), and the collector asked to leave them so.
    ///
    /// # Errors
    /// A CUPTI failure while switching.
    pub(crate) fn set_now(&self, lib: &LoadedCupti, calls: &ApiCalls, on: bool) -> Result<()> {
        self.want(on);
        let mut state = self.state.lock();
        if state.closed || state.on == on {
            return Ok(());
        }
        let t0 = Instant::now();
        let r = crate::cupti::activity::set_kinds_and_callbacks(lib, calls, on);
        state.on = on;
        self.step_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }

    /// At start, before iteration 0: the kinds and callbacks `on` whatever they were (the
    /// start-up calibration switches the kinds itself). Not counted as `step()`'s time.
    ///
    /// # Errors
    /// A CUPTI failure while switching.
    pub(crate) fn begin(&self, lib: &LoadedCupti, calls: &ApiCalls, on: bool) -> Result<()> {
        self.want(on);
        let mut state = self.state.lock();
        state.on = on;
        crate::cupti::activity::set_kinds_and_callbacks(lib, calls, on)
    }

    /// On the collector thread: makes the kinds and callbacks what `step()` last asked for.
    /// After a failure the collector stops switching (`step()` takes over), and the failure is
    /// returned once, as a warning.
    pub(crate) fn apply_wanted(&self, lib: &LoadedCupti, calls: &ApiCalls) -> Option<String> {
        if !self.ahead() {
            return None;
        }
        let mut state = self.state.lock();
        let on = self.wanted.load(Ordering::Acquire);
        if state.closed || state.on == on {
            return None;
        }
        let t0 = Instant::now();
        let r = crate::cupti::activity::set_kinds_and_callbacks(lib, calls, on);
        state.on = on;
        self.collector_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r.err().map(|e| {
            self.switch_in_step_only();
            format!(
                "the sampled timeline's collector could not switch tracing {} ({e}); step() \
                 switches it from now on",
                if on { "on" } else { "off" }
            )
        })
    }

    /// Shutdown: no switch after this returns.
    pub(crate) fn close(&self) {
        self.state.lock().closed = true;
    }
}
