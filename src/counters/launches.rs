//! Kernel names for auto ranges. CUPTI names auto ranges `"0"`, `"1"`, ... in launch order, and
//! nothing else; the kernel of each range is the kernel of the launch with that index. Inside a
//! gpu-ledger [`crate::Profiler`] the timeline's kernel records give that order (sort by
//! correlation id); standalone, [`LaunchRecorder`] takes it from CUPTI launch callbacks.

use std::ffi::CStr;
use std::sync::Arc;

use cupti_sys as sys;
use parking_lot::Mutex;

use super::ranges::RangeValues;
use crate::cupti;
use crate::cupti::functions::{traced_functions, ApiClass};
use crate::cupti::range_profiler::{LaunchSink, LaunchSubscription};
use crate::cupti::LoadedCupti;
use crate::error::Result;

/// One launch seen by the recorder, in launch order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Launch {
    /// A kernel launch and the kernel's name as CUPTI gave it (mangled for C++ kernels).
    Kernel(String),
    /// A graph launch: it runs an unknown number of kernels, so auto ranges after it cannot be
    /// matched by position.
    Graph,
}

/// Names the auto ranges of a collection: range `"i"` is the `i`-th launch. Ranges after a graph
/// launch, or past the end of `launches`, keep `kernel: None`; so do all of them when there are
/// fewer ranges than kernel launches and no graph launch (CUPTI lost some, so position no longer
/// says which kernel a range is). Returns how many were named.
pub fn name_auto_ranges(ranges: &mut [RangeValues], launches: &[Launch]) -> usize {
    let launches = AutoRangeLaunches::new(launches);
    let lost = launches.lost_ranges(ranges.len());
    let mut named = 0;
    for r in ranges.iter_mut() {
        r.kernel = None;
        if lost.is_some() {
            continue;
        }
        if let Some((i, k)) = launches.get(&r.name) {
            r.kernel = Some(k.to_string());
            r.launch_index = Some(i as u64);
            named += 1;
        }
    }
    named
}

/// The launches auto ranges can stand for: those before the first graph launch, which runs an
/// unknown number of kernels (found once, not per range).
pub(crate) struct AutoRangeLaunches<'a>(&'a [Launch], bool);

impl<'a> AutoRangeLaunches<'a> {
    pub(crate) fn new(launches: &'a [Launch]) -> Self {
        let graph = launches.iter().position(|l| matches!(l, Launch::Graph));
        let before_graph = graph.unwrap_or(launches.len());
        AutoRangeLaunches(&launches[..before_graph], graph.is_some())
    }

    /// `Some(launches)` when `ranges` auto ranges (stored and dropped) are fewer than the
    /// kernel launches and no graph launch makes the count unknown: ranges were lost, and the
    /// `i`-th range is no longer known to be the `i`-th kernel.
    pub(crate) fn lost_ranges(&self, ranges: usize) -> Option<usize> {
        (!self.1 && ranges < self.0.len()).then_some(self.0.len())
    }

    /// The launch auto range `range` (`"0"`, `"1"`, ...) stands for: its index and kernel name.
    /// `None` past the end of the launches and at or after a graph launch.
    pub(crate) fn get(&self, range: &str) -> Option<(usize, &'a str)> {
        let i = range.parse::<usize>().ok()?;
        match self.0.get(i)? {
            Launch::Kernel(k) => Some((i, k.as_str())),
            Launch::Graph => None,
        }
    }
}

struct LaunchLog {
    driver_kernel: Vec<u32>,
    driver_graph: Vec<u32>,
    runtime_kernel: Vec<u32>,
    runtime_graph: Vec<u32>,
    launches: Mutex<Vec<Launch>>,
}

impl LaunchSink for LaunchLog {
    fn on_launch(&self, runtime: bool, cbid: u32, symbol: Option<&CStr>, enter: bool) {
        let (kernel, graph) = if runtime {
            (&self.runtime_kernel, &self.runtime_graph)
        } else {
            (&self.driver_kernel, &self.driver_graph)
        };
        let is_kernel = kernel.binary_search(&cbid).is_ok();
        let is_graph = graph.binary_search(&cbid).is_ok();
        if !is_kernel && !is_graph {
            return;
        }
        // The driver launch a runtime launch makes inside is not a launch of its own.
        if !outermost_call_entry(runtime, enter) {
            return;
        }
        let entry = if is_graph {
            Launch::Graph
        } else {
            Launch::Kernel(symbol.map_or_else(
                || "(unknown)".to_string(),
                |s| s.to_string_lossy().into_owned(),
            ))
        };
        self.launches.lock().push(entry);
    }
}

/// The loaded release's callback ids of the `runtime` (or driver) API's functions of `class`.
fn cbids(lib: &'static LoadedCupti, runtime: bool, class: ApiClass) -> Vec<u32> {
    let mut v: Vec<u32> = traced_functions(lib.release.cbids)
        .filter(|&(rt, _, _, c)| rt == runtime && c == class)
        .map(|(_, id, _, _)| id)
        .collect();
    v.sort_unstable();
    v
}

/// Records the name of every kernel launched in this process, in launch order, through CUPTI's
/// launch callbacks. It takes CUPTI's one subscriber slot, so it cannot run next to a gpu-ledger
/// [`crate::Profiler`] at `Level::Timeline` (which has the same order in its kernel records).
/// Each launch takes a lock and allocates the name: use it while counters are collected (the
/// range is perturbed anyway), not on a timing run.
pub struct LaunchRecorder {
    lib: &'static LoadedCupti,
    subscription: LaunchSubscription,
    log: Arc<LaunchLog>,
}

impl LaunchRecorder {
    /// Subscribes to CUPTI's launch callbacks (driver and runtime API).
    ///
    /// # Errors
    /// [`crate::Error::CuptiBusy`] when another CUPTI subscriber exists; CUPTI loading errors.
    pub fn start() -> Result<Self> {
        let lib = cupti::api()?;
        let log = Arc::new(LaunchLog {
            driver_kernel: cbids(lib, false, ApiClass::KernelLaunch),
            driver_graph: cbids(lib, false, ApiClass::GraphLaunch),
            runtime_kernel: cbids(lib, true, ApiClass::KernelLaunch),
            runtime_graph: cbids(lib, true, ApiClass::GraphLaunch),
            launches: Mutex::new(Vec::new()),
        });
        let subscription = LaunchSubscription::new(lib, log.clone())?;
        let rec = LaunchRecorder {
            lib,
            subscription,
            log,
        };
        rec.enable(true)?;
        Ok(rec)
    }

    fn enable(&self, on: bool) -> Result<()> {
        let Some(sub) = self.subscription.handle() else {
            return Ok(());
        };
        use sys::CUpti_CallbackDomain as d;
        for (domain, ids) in [
            (d::CUPTI_CB_DOMAIN_DRIVER_API, &self.log.driver_kernel),
            (d::CUPTI_CB_DOMAIN_DRIVER_API, &self.log.driver_graph),
            (d::CUPTI_CB_DOMAIN_RUNTIME_API, &self.log.runtime_kernel),
            (d::CUPTI_CB_DOMAIN_RUNTIME_API, &self.log.runtime_graph),
        ] {
            for id in ids {
                cupti::enable_callback(self.lib, sub, domain, *id, on)?;
            }
        }
        Ok(())
    }

    /// The launches recorded since the last `take`, in launch order.
    pub fn take(&self) -> Vec<Launch> {
        std::mem::take(&mut *self.log.launches.lock())
    }

    /// Unsubscribes, reporting CUPTI's error (Drop ignores it).
    ///
    /// # Errors
    /// The CUPTI failure of `cuptiUnsubscribe`.
    pub fn stop(mut self) -> Result<()> {
        self.subscription.unsubscribe()
    }
}

thread_local! {
    /// Depth of runtime launch calls in progress on this thread ([`outermost_call_entry`]). A
    /// runtime call such as `cudaLaunchKernel` (cuBLAS makes these) calls the driver inside, and
    /// CUPTI fires a driver callback for that inner call too. (The timeline level's callback
    /// tracks its own nesting, `crate::cupti::calls`.)
    static RUNTIME_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Tracks the nesting of runtime launch calls on this thread (call it for every callback of a
/// counted function, entry and exit) and says whether this is the entry of a call the
/// application made: a runtime call, or a driver call not made inside one.
fn outermost_call_entry(runtime: bool, enter: bool) -> bool {
    RUNTIME_DEPTH
        .try_with(|depth| {
            let d = depth.get();
            if runtime {
                depth.set(if enter { d + 1 } else { d.saturating_sub(1) });
            }
            enter && (runtime || d == 0)
        })
        .unwrap_or(false)
}
