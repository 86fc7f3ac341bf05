//! Who launched an iteration's work, and how its kernels found their scopes: counts by
//! attribution and by launching thread for the row, and the warning when most kernel time is in
//! no scope although scopes were open (the launches came from threads the scopes were not on).

use rustc_hash::FxHashMap as HashMap;

use super::attribution::CallSource;
use crate::cupti::calls::{ApiCalls, Attribution, CallingThread};
use crate::ledger::schema::{AttributionCounts, LaunchThread};

/// Share of an iteration's kernel time in no scope above which the row warns, when scopes were
/// open in it.
const UNSCOPED_WARNING_SHARE: f64 = 0.5;

/// How a kernel's scope was found, for the row's counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KernelAttribution {
    OwnThread,
    Handoff,
    Followed,
    /// gpu-ledger's own kernels, moved to their scope by name.
    Profiler,
    Unscoped,
    /// A graph node's kernel, in the scope it was captured in under its launch's.
    GraphCapture,
    /// A graph node's kernel whose capture was not seen, in its graph launch's scope.
    GraphLaunch,
}

impl KernelAttribution {
    /// A kernel placed in `path_id` through `by`.
    pub(super) fn of(by: CallSource, path_id: u32) -> Self {
        match by.attribution {
            _ if path_id == 0 => KernelAttribution::Unscoped,
            Attribution::OwnThread => KernelAttribution::OwnThread,
            Attribution::Handoff => KernelAttribution::Handoff,
            Attribution::Followed => KernelAttribution::Followed,
            Attribution::GraphCapture => KernelAttribution::GraphCapture,
            Attribution::GraphLaunch => KernelAttribution::GraphLaunch,
            // A scope no call gave: the collector put gpu-ledger's own kernels there by name.
            Attribution::Unscoped => KernelAttribution::Profiler,
        }
    }

    /// Its name in the ledger's activity entries.
    pub(super) fn name(self) -> &'static str {
        match self {
            KernelAttribution::OwnThread => "own_thread",
            KernelAttribution::Handoff => "handoff",
            KernelAttribution::Followed => "followed",
            KernelAttribution::Profiler => "profiler",
            KernelAttribution::Unscoped => "unscoped",
            KernelAttribution::GraphCapture => "graph_capture",
            KernelAttribution::GraphLaunch => "graph_launch",
        }
    }
}

fn count(counts: &mut AttributionCounts, a: KernelAttribution) {
    let c = match a {
        KernelAttribution::OwnThread => &mut counts.own_thread,
        KernelAttribution::Handoff => &mut counts.handoff,
        KernelAttribution::Followed => &mut counts.followed,
        KernelAttribution::Profiler => &mut counts.profiler,
        KernelAttribution::Unscoped => &mut counts.unscoped,
        KernelAttribution::GraphCapture => &mut counts.graph_capture,
        KernelAttribution::GraphLaunch => &mut counts.graph_launch,
    };
    *c = c.saturating_add(1);
}

#[derive(Default)]
struct ThreadTally {
    kernels: u64,
    kernel_ns: u64,
    copies: u64,
    attribution: AttributionCounts,
    unscoped_ns: u64,
}

/// One row's tally. Kept from row to row: the names of the threads it has seen stay cached.
#[derive(Default)]
pub(super) struct LaunchTally {
    /// Thread index -> the thread, as the call capture recorded it.
    known: Vec<Option<CallingThread>>,
    /// This row's threads by index; `None`: launches whose call was not captured.
    threads: HashMap<Option<u32>, ThreadTally>,
    counts: AttributionCounts,
    kernel_ns: u64,
    unscoped_ns: u64,
    /// The warning went to stderr once already.
    warned: bool,
    /// Kernels of the rows written so far, and those among them attributed by following a
    /// thread (for the trailer's note).
    run_kernels: u64,
    run_followed: u64,
}

impl LaunchTally {
    #[inline]
    pub(super) fn add_kernel(&mut self, by: CallSource, a: KernelAttribution, ns: u64) {
        count(&mut self.counts, a);
        self.kernel_ns = self.kernel_ns.saturating_add(ns);
        let t = self.threads.entry(by.thread).or_default();
        t.kernels += 1;
        t.kernel_ns = t.kernel_ns.saturating_add(ns);
        count(&mut t.attribution, a);
        if a == KernelAttribution::Unscoped {
            self.unscoped_ns = self.unscoped_ns.saturating_add(ns);
            t.unscoped_ns = t.unscoped_ns.saturating_add(ns);
        }
    }

    #[inline]
    pub(super) fn add_copy(&mut self, by: CallSource) {
        self.threads.entry(by.thread).or_default().copies += 1;
    }

    fn thread(&mut self, calls: &ApiCalls, index: u32) -> CallingThread {
        let i = index as usize;
        if self.known.get(i).is_none_or(Option::is_none) {
            if self.known.len() <= i {
                self.known.resize(i + 1, None);
            }
            self.known[i] = calls.thread(index);
        }
        self.known[i].clone().unwrap_or_default()
    }

    /// The row's counts and threads (the threads by kernels, most first), and its warning
    /// when `scopes_open` and most kernel time is in no scope; the tally is empty again after.
    pub(super) fn finish(
        &mut self,
        calls: &ApiCalls,
        scopes_open: bool,
        warnings: &mut Vec<String>,
    ) -> (AttributionCounts, Vec<LaunchThread>) {
        let counts = std::mem::take(&mut self.counts);
        self.run_kernels = self.run_kernels.saturating_add(counts.total());
        self.run_followed = self.run_followed.saturating_add(counts.followed);
        let kernel_ns = std::mem::take(&mut self.kernel_ns);
        let unscoped_ns = std::mem::take(&mut self.unscoped_ns);
        let mut tallies: Vec<(Option<u32>, ThreadTally)> = self.threads.drain().collect();
        tallies.sort_by(|a, b| b.1.kernels.cmp(&a.1.kernels).then(a.0.cmp(&b.0)));
        let mut unscoped_from = Vec::new();
        let mut threads = Vec::with_capacity(tallies.len());
        for (index, t) in tallies {
            let Some(index) = index else {
                if t.unscoped_ns > 0 {
                    unscoped_from.push("launches whose call was not captured".to_string());
                }
                continue;
            };
            let thread = self.thread(calls, index);
            let launched = LaunchThread {
                name: thread.name,
                tid: thread.tid,
                kernels: t.kernels,
                kernel_ns: t.kernel_ns,
                copies: t.copies,
                attribution: t.attribution,
                ..LaunchThread::default()
            };
            if t.unscoped_ns > 0 {
                unscoped_from.push(launched.label());
            }
            threads.push(launched);
        }
        let share = if kernel_ns == 0 {
            0.0
        } else {
            unscoped_ns as f64 / kernel_ns as f64
        };
        if scopes_open && share > UNSCOPED_WARNING_SHARE {
            let msg = format!(
                "{:.0} % of this iteration's kernel time is in no scope although scopes were \
                 open: its kernels were launched on threads with no scope open ({}). Hand the \
                 scope to the launching thread (Profiler::context() where the scope is open, \
                 ScopeContext::enter on the launching thread), or follow the thread that opens \
                 the scopes (Config::follow)",
                share * 100.0,
                unscoped_from.join(", ")
            );
            if !self.warned {
                self.warned = true;
                eprintln!("gpu-ledger: warning: {msg}");
            }
            warnings.push(msg);
        }
        (counts, threads)
    }
}

impl LaunchTally {
    /// The trailer's note when kernels were attributed by following a thread: what that rule
    /// cannot see (work a queue defers to a later phase).
    pub(super) fn follow_note(&self) -> Option<String> {
        (self.run_followed > 0).then(|| {
            format!(
                "{} of {} kernels were launched on threads with no scope of their own and \
                 attributed to the scope open on the followed thread at their launch \
                 (Config::follow): work a framework queues and launches later lands in the \
                 scope open when it is launched. Synchronize at phase ends while profiling, or \
                 hand each operation's scope to the launching thread (ScopeContext)",
                self.run_followed, self.run_kernels
            )
        })
    }
}
