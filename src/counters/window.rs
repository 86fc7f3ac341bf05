//! The counters level inside a running [`crate::Profiler`]: which iterations get counters (the
//! window), and the state machine that drives the [`RangeProfiler`] across them from the
//! application's stepping thread.
//!
//! Iteration `i` of a collection runs between two `step()` calls. The pass is started after the
//! boundary timestamp of `step()` and ended (GPU synchronized, `cuptiRangeProfilerStop`, and on
//! the last pass the decode) before the next boundary timestamp, so that every cost of the
//! counters falls inside iterations that are flagged `perturbed`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;

use cudarc::driver::CudaContext;
use serde::{Deserialize, Serialize};

use super::config::CounterConfig;
use super::derived::DeriveOptions;
use super::records::{counters_from_collected, counters_pending};
use super::session::RangeProfiler;
use crate::ledger::counters::{IterationCounters, RangeMode};

/// Which iterations get counters, in the spirit of `ncu --launch-skip/--launch-count` and
/// torch.profiler's wait/warmup/active schedule: `skip` iterations run with the timeline only,
/// then `collections` collections run back to back, each over as many iterations as its metric
/// set needs (`RangeProfiler::runs_per_collection`), then the timeline alone again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterWindow {
    /// Iterations before the first collection (warm-up: compilation, allocator, caches).
    pub skip: u64,
    /// Collections to run.
    pub collections: u64,
}

impl Default for CounterWindow {
    /// Skip 5 iterations of warm-up, then one collection.
    fn default() -> Self {
        CounterWindow {
            skip: 5,
            collections: 1,
        }
    }
}

impl CounterWindow {
    /// How the window reads in the ledger header (`config.counter_iterations`).
    pub fn describe(&self, iterations_per_collection: usize) -> String {
        let r = self.iterations(iterations_per_collection);
        if r.is_empty() {
            return "none".into();
        }
        format!(
            "{}..{} ({} collection(s) of {} iteration(s), from iteration {})",
            r.start, r.end, self.collections, iterations_per_collection, r.start
        )
    }

    /// The iterations counters are collected in.
    pub fn iterations(&self, iterations_per_collection: usize) -> std::ops::Range<u64> {
        let n = self
            .collections
            .saturating_mul(iterations_per_collection as u64);
        self.skip..self.skip.saturating_add(n)
    }
}

/// What the profiler is asked to collect: the context whose device is measured, the Range
/// Profiler settings, the window, and the inputs of the derived figures.
#[derive(Debug, Clone)]
pub struct CountersSetup {
    /// The CUDA context the application launches its work on.
    pub context: Arc<CudaContext>,
    /// Metrics, range mode (user ranges = scopes, auto ranges = kernels), replay mode.
    pub config: CounterConfig,
    /// Which iterations.
    pub window: CounterWindow,
    /// Access size and peak bandwidth for the derived figures.
    pub derive: DeriveOptions,
}

impl CountersSetup {
    /// Counters on `context` with `config`, the default window and derive options.
    pub fn new(context: &Arc<CudaContext>, config: CounterConfig) -> Self {
        CountersSetup {
            context: context.clone(),
            config,
            window: CounterWindow::default(),
            derive: DeriveOptions::default(),
        }
    }
}

/// True while a user-range pass runs: scopes entered on the stepping thread become ranges.
/// Read by every scope entry, so it is a relaxed atomic, not the state's lock.
static RANGES_ON: AtomicBool = AtomicBool::new(false);

/// Whether scopes should be offered to the counters as ranges now.
#[inline]
pub(crate) fn ranges_on() -> bool {
    RANGES_ON.load(Ordering::Relaxed)
}

struct Open {
    index: u64,
    first_iteration: u64,
}

/// The counters state of a running profiler, behind the profiler's lock.
pub(crate) struct CounterState {
    rp: RangeProfiler,
    window: CounterWindow,
    derive: DeriveOptions,
    begun: u64,
    open: Option<Open>,
    /// Generation of the running pass (0: none); a scope's range is popped only in its pass.
    pass: u64,
    passes_started: u64,
    /// The thread that runs passes (the one calling `step()`); only its scopes are ranges.
    owner: Option<ThreadId>,
    /// After an error, no further collection starts (the error is in the ledger).
    stopped: bool,
    /// An error of `begin_iteration`, reported in the row of that iteration.
    begin_error: Option<String>,
}

impl CounterState {
    pub(crate) fn new(rp: RangeProfiler, window: CounterWindow, derive: DeriveOptions) -> Self {
        CounterState {
            rp,
            window,
            derive,
            begun: 0,
            open: None,
            pass: 0,
            passes_started: 0,
            owner: None,
            stopped: false,
            begin_error: None,
        }
    }

    /// Called as iteration `iteration` begins (profiler start for 0, `step()` afterwards):
    /// opens a collection when the window says so and starts a pass of the open one. A failure
    /// is reported in the iteration's row.
    pub(crate) fn begin_iteration(&mut self, iteration: u64) {
        if self.stopped {
            return;
        }
        if self.open.is_none() {
            if iteration < self.window.skip || self.begun >= self.window.collections {
                return;
            }
            if let Err(e) = self.rp.begin() {
                self.begin_error =
                    Some(self.stop(format!("counters: could not open a collection: {e}")));
                return;
            }
            self.open = Some(Open {
                index: self.begun,
                first_iteration: iteration,
            });
            self.begun += 1;
        }
        if let Err(e) = self.rp.start_pass() {
            self.rp.abort();
            self.open = None;
            self.begin_error = Some(self.stop(format!("counters: could not start a pass: {e}")));
            return;
        }
        self.passes_started += 1;
        self.pass = self.passes_started;
        self.owner = Some(std::thread::current().id());
        RANGES_ON.store(
            self.rp.config().range_mode == RangeMode::User,
            Ordering::Relaxed,
        );
    }

    /// Called as iteration `iteration` ends, before its boundary timestamp: ends the pass
    /// (after synchronizing the context: the pass must hold the iteration's GPU work) and
    /// decodes the collection when CUPTI has every pass. `None` when no pass ran in it.
    pub(crate) fn end_iteration(&mut self, iteration: u64) -> Option<IterationCounters> {
        if let Some(error) = self.begin_error.take() {
            let mut rec = counters_pending(self.begun.saturating_sub(1), iteration, 0, 0);
            rec.error = Some(error);
            return Some(rec);
        }
        let open = self.open.as_ref()?;
        if self.pass == 0 {
            return None;
        }
        let (index, first) = (open.index, open.first_iteration);
        RANGES_ON.store(false, Ordering::Relaxed);
        self.pass = 0;
        let runs = self.rp.runs_per_collection() as u32;
        let sync = self.rp.context().synchronize();
        let end = match sync
            .map_err(crate::Error::from)
            .and_then(|_| self.rp.end_pass())
        {
            Ok(end) => end,
            Err(e) => {
                self.rp.abort();
                self.open = None;
                let mut rec = counters_pending(index, first, 0, runs);
                rec.error = Some(self.stop(format!("counters: ending the pass failed: {e}")));
                return Some(rec);
            }
        };
        if !end.all_passes_submitted {
            return Some(counters_pending(
                index,
                first,
                end.runs as u32,
                runs.max(end.runs as u32 + 1),
            ));
        }
        self.open = None;
        match self.rp.decode() {
            Ok(collected) => Some(counters_from_collected(
                &collected,
                index,
                first,
                &self.derive,
            )),
            Err(e) => {
                let mut rec = counters_pending(index, first, end.runs as u32, runs);
                rec.error = Some(self.stop(format!("counters: decoding failed: {e}")));
                Some(rec)
            }
        }
    }

    /// The profiler is finishing during iteration `iteration`: a pass still running ends and
    /// a collection still missing passes is discarded, said in the row.
    pub(crate) fn finish(&mut self, iteration: u64) -> Option<IterationCounters> {
        if self.pass != 0 {
            if let Some(mut rec) = self.end_iteration(iteration) {
                if !rec.complete && rec.error.is_none() {
                    self.rp.abort();
                    self.open = None;
                    rec.error = Some(format!(
                        "counters: the run ended after {} of the collection's {} iterations; its \
                         values are discarded",
                        rec.run, rec.runs
                    ));
                }
                return Some(rec);
            }
        }
        if let Some(open) = self.open.take() {
            self.rp.abort();
            let mut rec = counters_pending(open.index, open.first_iteration, 0, 0);
            rec.error = Some("counters: the run ended before the collection completed".into());
            return Some(rec);
        }
        None
    }

    /// A scope was entered: push a user range when a pass runs on this thread. Returns the
    /// pass generation to hand back to [`pop`](Self::pop), 0 when no range was pushed.
    pub(crate) fn push(&mut self, name: &str) -> u64 {
        if self.pass == 0 || self.owner != Some(std::thread::current().id()) {
            return 0;
        }
        match self.rp.push_range(name) {
            Ok(()) => self.pass,
            Err(_) => 0,
        }
    }

    /// The scope of a range pushed in pass `pass` ended.
    pub(crate) fn pop(&mut self, pass: u64) {
        if pass != 0 && pass == self.pass {
            let _ = self.rp.pop_range();
        }
    }

    fn stop(&mut self, message: String) -> String {
        if !self.stopped {
            eprintln!("gpu-ledger: {message}; no further counters are collected in this run");
        }
        self.stopped = true;
        RANGES_ON.store(false, Ordering::Relaxed);
        message
    }
}

impl Drop for CounterState {
    fn drop(&mut self) {
        RANGES_ON.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_description_names_the_iterations() {
        let w = CounterWindow {
            skip: 3,
            collections: 2,
        };
        assert_eq!(
            w.describe(4),
            "3..11 (2 collection(s) of 4 iteration(s), from iteration 3)"
        );
        let none = CounterWindow {
            skip: 3,
            collections: 0,
        };
        assert_eq!(none.describe(4), "none");
    }

    #[test]
    fn ranges_are_off_without_a_profiler() {
        assert!(!ranges_on());
    }
}
