//! One device's idle time in one row, split by cause: every gap of the busy-time sweep (the
//! gaps `idle_ns` sums) cut into contiguous pieces, each placed by one rule, so that the pieces
//! add up to `idle_ns` by construction. A pure function of its inputs, property-tested.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;

use super::model::{
    push, Detail, Label, Launch, Piece, Work, WorkKind, AFTER_LATE_LAUNCH, BELOW_FLOOR,
    INSIDE_LAUNCH,
};
use super::paint::Evidence;
use crate::cupti::calls::Attribution;
use gpu_ledger_format::intervals::{difference_and_overlap, for_each_gap, union_runs};

/// Why host times cannot be placed on CUPTI's clock in a row, when they cannot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClockProblem {
    /// The host clock jumped against CUPTI's between the row's two `step()` readings.
    Step,
    /// Launch times and GPU starts disagree by more than the tolerance.
    Unreliable,
}

/// What one device's split needs besides its work.
pub(crate) struct Context<'a> {
    /// The row's launching calls by correlation id.
    pub(crate) launches: &'a HashMap<u32, Launch>,
    pub(crate) evidence: &'a Evidence,
    /// Other devices' busy runs in the row (disjoint, in time order).
    pub(crate) others: &'a [(u64, u64)],
    pub(crate) floor: u64,
    pub(crate) clock: Option<ClockProblem>,
    /// Gaps kept per device, longest first.
    pub(crate) largest: usize,
}

/// A gap and its pieces, with the work on either side and the launch of the work after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Gap {
    pub(crate) start: u64,
    pub(crate) ns: u64,
    pub(crate) pieces: Vec<Piece>,
    pub(crate) before: Option<Work>,
    pub(crate) after: Option<Work>,
    pub(crate) launch: Option<Launch>,
}

/// A device's split.
#[derive(Debug, Default)]
pub(crate) struct Split {
    /// By label: ns and the gaps that have a piece of it.
    pub(crate) causes: BTreeMap<Label, (u64, u64)>,
    /// The device's idle time as the sweep found it (what the causes add up to).
    pub(crate) idle_ns: u64,
    pub(crate) compute_idle_ns: u64,
    pub(crate) copy_only_ns: u64,
    pub(crate) copy_overlapped_ns: u64,
    pub(crate) largest: Vec<Gap>,
    pub(crate) lead_in: Option<Gap>,
    /// Gaps between work of one stream launched before the gap began: samples of the dispatch
    /// floor for a device the calibration did not measure.
    pub(crate) same_stream_gaps: Vec<u64>,
}

/// The split of `work` (one device's, in any order; sorted here), with `lead` the last work
/// of the device's previous traced row, whose end opens the lead-in gap when it is before this
/// row's first start.
pub(crate) fn split_device(work: &mut [Work], lead: Option<Work>, cx: &Context<'_>) -> Split {
    work.sort_unstable_by_key(|w| (w.start, w.end, w.call));
    let by_end = order_by(work, |w| (w.end, w.start));
    let by_stream = order_by(work, |w| (w.context, w.stream, w.start));
    let d = Device {
        work,
        by_end: &by_end,
        by_stream: &by_stream,
        cx,
    };
    let mut out = Split::default();
    let mut intervals: Vec<(u64, u64)> = work.iter().map(|w| (w.start, w.end)).collect();
    let mut pieces = Vec::new();
    let mut gaps = Vec::new();
    let window = for_each_gap(&mut intervals, |s, e| gaps.push((s, e)));
    for (gs, ge) in gaps {
        pieces.clear();
        let next = d.next_at(ge);
        let before = d.before_at(gs);
        d.classify(gs, ge, next, before, &mut pieces, &mut out.same_stream_gaps);
        out.idle_ns += ge - gs;
        let mut seen: Vec<Label> = Vec::with_capacity(pieces.len());
        for p in &pieces {
            let e = out.causes.entry(p.label).or_insert((0, 0));
            e.0 += p.ns;
            if !seen.contains(&p.label) {
                seen.push(p.label);
                e.1 += 1;
            }
        }
        let placed: u64 = pieces.iter().map(|p| p.ns).sum();
        debug_assert_eq!(placed, ge - gs, "a gap's pieces cover it once");
        if placed != ge - gs {
            let e = out
                .causes
                .entry(Label::unknown("accounting_remainder"))
                .or_insert((0, 0));
            e.0 += (ge - gs).saturating_sub(placed);
            e.1 += 1;
        }
        keep_largest(&mut out.largest, cx.largest, gs, ge - gs, || Gap {
            start: gs,
            ns: ge - gs,
            pieces: pieces.clone(),
            before: before.copied(),
            after: next.copied(),
            launch: next.and_then(|n| cx.launches.get(&n.call).copied()),
        });
    }
    if let (Some((first, _, _)), Some(lead)) = (window, lead) {
        if lead.end < first {
            pieces.clear();
            let next = d.next_at(first);
            let mut unused = Vec::new();
            d.classify(lead.end, first, next, Some(&lead), &mut pieces, &mut unused);
            out.lead_in = Some(Gap {
                start: lead.end,
                ns: first - lead.end,
                pieces: pieces.clone(),
                before: Some(lead),
                after: next.copied(),
                launch: next.and_then(|n| cx.launches.get(&n.call).copied()),
            });
        }
    }
    if let Some((first, last, _)) = window {
        copy_figures(work, first, last, &mut out);
    }
    out
}

/// Indices of `work` ordered by `key`.
fn order_by<K: Ord>(work: &[Work], key: impl Fn(&Work) -> K) -> Vec<u32> {
    let mut v: Vec<u32> = (0..work.len() as u32).collect();
    v.sort_unstable_by_key(|&i| key(&work[i as usize]));
    v
}

/// Keeps `gap` among the `k` longest (ties: the earlier), longest first; `gap` is built only
/// when it makes the cut.
fn keep_largest(kept: &mut Vec<Gap>, k: usize, start: u64, ns: u64, gap: impl FnOnce() -> Gap) {
    let key = |ns: u64, start: u64| (std::cmp::Reverse(ns), start);
    let at = kept.partition_point(|x| key(x.ns, x.start) <= key(ns, start));
    if at < k {
        kept.insert(at, gap());
        kept.truncate(k);
    }
}

/// The compute-idle, copy-only and overlapped-copy figures of the window `[first, last)`.
fn copy_figures(work: &[Work], first: u64, last: u64, out: &mut Split) {
    let mut compute: Vec<(u64, u64)> = Vec::new();
    let mut copies: Vec<(u64, u64)> = Vec::new();
    for w in work {
        match w.kind {
            WorkKind::Memcpy => copies.push((w.start, w.end)),
            WorkKind::Kernel | WorkKind::Memset => compute.push((w.start, w.end)),
        }
    }
    let compute = union_runs(&mut compute);
    let copies = union_runs(&mut copies);
    let compute_ns: u64 = compute.iter().map(|(s, e)| e - s).sum();
    let (only, both) = difference_and_overlap(&copies, &compute);
    out.compute_idle_ns = (last - first) - compute_ns;
    out.copy_only_ns = only;
    out.copy_overlapped_ns = both;
}

/// One device's work, indexed for the gaps' look-ups.
struct Device<'a> {
    /// By start, end, call.
    work: &'a [Work],
    by_end: &'a [u32],
    by_stream: &'a [u32],
    cx: &'a Context<'a>,
}

impl Device<'_> {
    /// The work that starts at `t` and runs (a zero-length record ends no gap), launched
    /// earliest: "the host was late" is then judged against the first chance it had.
    fn next_at(&self, t: u64) -> Option<&Work> {
        let first = self.work.partition_point(|w| w.start < t);
        self.work[first..]
            .iter()
            .take_while(|w| w.start == t)
            .filter(|w| w.end > w.start)
            .min_by_key(|w| (self.entry_of(w).unwrap_or(u64::MAX), w.call))
    }

    /// The work that ends at `t` (the longest-running one, to name the gap).
    fn before_at(&self, t: u64) -> Option<&Work> {
        let first = self
            .by_end
            .partition_point(|&i| self.work[i as usize].end < t);
        self.by_end[first..]
            .iter()
            .map(|&i| &self.work[i as usize])
            .take_while(|w| w.end == t)
            .min_by_key(|w| w.start)
    }

    fn entry_of(&self, w: &Work) -> Option<u64> {
        self.cx.launches.get(&w.call).map(|l| l.entry)
    }

    /// The work launched before `n` on its stream in this row, when there is any.
    fn stream_predecessor(&self, n: &Work) -> Option<&Work> {
        let key = |w: &Work| (w.context, w.stream, w.start);
        let at = self
            .by_stream
            .partition_point(|&i| key(&self.work[i as usize]) < key(n));
        at.checked_sub(1)
            .map(|i| &self.work[self.by_stream[i] as usize])
            .filter(|p| (p.context, p.stream) == (n.context, n.stream))
    }

    /// Cuts `[gs, ge)` into pieces: the host late to launch `next`, or `next` launched in time
    /// and dispatched or held back; with no launch to judge by, unknown.
    fn classify(
        &self,
        gs: u64,
        ge: u64,
        next: Option<&Work>,
        before: Option<&Work>,
        out: &mut Vec<Piece>,
        same_stream: &mut Vec<u64>,
    ) {
        let len = ge - gs;
        let Some(n) = next else {
            push(out, Label::unknown("zero_length_work"), len, None);
            return;
        };
        let Some(c) = self.cx.launches.get(&n.call) else {
            push(out, Label::unknown("no_launch_call"), len, None);
            return;
        };
        if let Some(problem) = self.cx.clock {
            let rule = match problem {
                ClockProblem::Step => "clock_step",
                ClockProblem::Unreliable => "clock_unreliable",
            };
            push(out, Label::unknown(rule), len, None);
            return;
        }
        // A blocking copy or memset submits its work at entry; it stays in the call only to wait
        // for it.
        let exit = if c.blocking { Some(c.entry) } else { c.exit };
        if c.entry > gs {
            // The host entered the launch after the gap began: it was late.
            let h = c.entry.min(ge);
            let at_launch = matches!(c.attribution, Attribution::OwnThread | Attribution::Handoff)
                .then_some(c.path_id)
                .filter(|p| *p != 0);
            self.cx.evidence.paint(c.key, gs, h, at_launch, out);
            self.after_launch(n, before, c, exit, (h, ge), out);
        } else if exit.is_some_and(|x| x > gs) {
            // Entered before the gap, still inside the call when it began.
            self.after_launch(n, before, c, exit, (gs, ge), out);
        } else {
            // Launched before the gap began: dispatch latency up to the floor, then a wait.
            if before.is_some_and(|b| (b.context, b.stream) == (n.context, n.stream)) {
                same_stream.push(len);
            }
            let f = len.min(self.cx.floor);
            push(out, BELOW_FLOOR, f, None);
            if len > f {
                let label =
                    self.dependency(n, before, c, (gs + f, ge), "launched_before_gap_start");
                push(out, label, len - f, None);
            }
        }
    }

    /// `[from, to)` of a gap whose next work `n` the host was still launching at `from`: the
    /// launch call until its exit, then dispatch latency up to the floor, then a wait. The work
    /// cannot start sooner than the floor after its submission (somewhere in the call), so the
    /// call counts at most until the floor before the start.
    fn after_launch(
        &self,
        n: &Work,
        before: Option<&Work>,
        c: &Launch,
        exit: Option<u64>,
        (from, to): (u64, u64),
        out: &mut Vec<Piece>,
    ) {
        let floor = self.cx.floor;
        let x = exit.map_or(from, |x| x.min(to.saturating_sub(floor)).clamp(from, to));
        push(out, INSIDE_LAUNCH, x - from, None);
        let rest = to - x;
        let latency = rest.min(floor);
        push(out, AFTER_LATE_LAUNCH, latency, None);
        if rest > latency {
            let label =
                self.dependency(n, before, c, (x + latency, to), "waited_after_late_launch");
            push(out, label, rest - latency, None);
        }
    }

    /// What `n` waited for over `[from, to)` once launched: the first evidence that holds, else
    /// `unknown` by rule `fallback`.
    fn dependency(
        &self,
        n: &Work,
        before: Option<&Work>,
        c: &Launch,
        (from, to): (u64, u64),
        fallback: &'static str,
    ) -> Label {
        // Evidence issued between the launch of n's stream predecessor and n's own launch.
        let lower = self
            .stream_predecessor(n)
            .and_then(|p| self.entry_of(p))
            .unwrap_or(0);
        let ev = self.cx.evidence;
        let waits = &ev.stream_waits;
        let first = waits.partition_point(|w| w.2 < lower);
        if waits[first..]
            .iter()
            .take_while(|w| w.2 <= c.entry)
            .any(|w| (w.0, w.1) == (n.context, n.stream))
        {
            return Label::dependency("event", "stream_wait_event");
        }
        let funcs = &ev.host_funcs;
        let first = funcs.partition_point(|&t| t < lower);
        if funcs.get(first).is_some_and(|&t| t <= c.entry) {
            return Label::dependency("host_function", "host_func_before");
        }
        if n.graph_id != 0 && before.is_some_and(|b| b.graph_id == n.graph_id) {
            return Label::dependency("graph", "graph_dependency");
        }
        if 2 * covered(self.cx.others, from, to) >= to - from {
            return Label::dependency("other_device", "other_device_busy");
        }
        if before.is_some_and(|b| (b.context, b.stream) == (n.context, n.stream)) {
            return Label::dependency("stream_order", "same_stream_above_floor");
        }
        Label::new(
            crate::ledger::idle::cause::DEPENDENCY,
            Detail::Text("unknown"),
            fallback,
        )
    }
}

/// The measure of `[from, to)` that `runs` (disjoint, in time order) cover.
fn covered(runs: &[(u64, u64)], from: u64, to: u64) -> u64 {
    let first = runs.partition_point(|r| r.1 <= from);
    runs[first..]
        .iter()
        .take_while(|r| r.0 < to)
        .map(|&(s, e)| e.min(to).saturating_sub(s.max(from)))
        .sum()
}
