//! One device's idle time in one row, split by cause: every gap of the busy-time sweep (the
//! gaps `idle_ns` sums) cut into contiguous pieces, each placed by one rule, so that the pieces
//! add up to `idle_ns` by construction. A pure function of its inputs, property-tested.

use std::cell::{Cell, OnceCell};

use rustc_hash::FxHashMap as HashMap;

use super::model::{
    push, Fixed, Label, Launch, Piece, Rule, Work, WorkKind, AFTER_LATE_LAUNCH, BELOW_FLOOR,
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
    /// Each label with its ns and the gaps that have a piece of it, in order of first use.
    pub(crate) causes: Vec<(Label, u64, u64)>,
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
    let d = Device {
        work,
        by_end: &by_end,
        by_stream: OnceCell::new(),
        cx,
        next_from: Cell::new(0),
        end_from: Cell::new(0),
    };
    let mut out = Split::default();
    let mut intervals: Vec<(u64, u64)> = work.iter().map(|w| (w.start, w.end)).collect();
    let mut sink = Sink::default();
    let mut gaps = Vec::new();
    let window = for_each_gap(&mut intervals, |s, e| gaps.push((s, e)));
    for (gs, ge) in gaps {
        sink.pieces.clear();
        let next = d.next_at(ge);
        let before = d.before_at(gs);
        d.classify(gs, ge, next, before, &mut sink);
        out.idle_ns += ge - gs;
        let placed: u64 = sink.pieces.iter().map(|p| p.ns).sum();
        debug_assert_eq!(placed, ge - gs, "a gap's pieces cover it once");
        if placed != ge - gs {
            let rest = (ge - gs).saturating_sub(placed);
            push(
                &mut sink.pieces,
                Label::unknown(Rule::AccountingRemainder),
                rest,
                None,
            );
        }
        add_gap(&mut out.causes, &mut sink.labels, &sink.pieces);
        keep_largest(&mut out.largest, cx.largest, gs, ge - gs, || Gap {
            start: gs,
            ns: ge - gs,
            pieces: sink.pieces.clone(),
            before: before.copied(),
            after: next.copied(),
            launch: next.and_then(|n| cx.launches.get(&n.call).copied()),
        });
    }
    out.same_stream_gaps = std::mem::take(&mut sink.same_stream);
    if let (Some((first, _, _)), Some(lead)) = (window, lead) {
        if lead.end < first {
            sink.pieces.clear();
            let next = d.next_at(first);
            d.classify(lead.end, first, next, Some(&lead), &mut sink);
            out.lead_in = Some(Gap {
                start: lead.end,
                ns: first - lead.end,
                pieces: sink.pieces.clone(),
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

/// What classifying a gap writes, reused from gap to gap.
#[derive(Default)]
struct Sink {
    pieces: Vec<Piece>,
    /// The painter's cut points.
    cuts: Vec<u64>,
    same_stream: Vec<u64>,
    /// Where each label sits in the split's causes.
    labels: HashMap<Label, usize>,
}

/// Adds one gap's pieces to `causes` (found through `index`), each label's gap count once.
fn add_gap(
    causes: &mut Vec<(Label, u64, u64)>,
    index: &mut HashMap<Label, usize>,
    pieces: &[Piece],
) {
    let mut seen = 0u128;
    for (k, p) in pieces.iter().enumerate() {
        let i = *index.entry(p.label).or_insert_with(|| {
            causes.push((p.label, 0, 0));
            causes.len() - 1
        });
        causes[i].1 += p.ns;
        let first = if i < 128 {
            let bit = 1u128 << i;
            let first = seen & bit == 0;
            seen |= bit;
            first
        } else {
            !pieces[..k].iter().any(|q| q.label == p.label)
        };
        causes[i].2 += u64::from(first);
    }
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
    /// By stream, then start: made when a dependency needs a stream's predecessor.
    by_stream: OnceCell<Vec<u32>>,
    cx: &'a Context<'a>,
    /// Where the last look-ups by start and by end landed: gaps come in time order, so each
    /// look-up moves on from the last instead of searching from the start.
    next_from: Cell<usize>,
    end_from: Cell<usize>,
}

/// The first index of `0..len` whose `key` is at least `t`, for keys that never decrease,
/// moving on from `cursor` (searched from scratch when `t` is behind it).
fn seek(cursor: &Cell<usize>, len: usize, key: impl Fn(usize) -> u64, t: u64) -> usize {
    let mut i = cursor.get().min(len);
    if i > 0 && key(i - 1) >= t {
        let (mut lo, mut hi) = (0, i);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if key(mid) < t {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        i = lo;
    }
    while i < len && key(i) < t {
        i += 1;
    }
    cursor.set(i);
    i
}

impl Device<'_> {
    /// The work that starts at `t` and runs (a zero-length record ends no gap), launched
    /// earliest: "the host was late" is then judged against the first chance it had.
    fn next_at(&self, t: u64) -> Option<&Work> {
        let first = seek(&self.next_from, self.work.len(), |i| self.work[i].start, t);
        let mut starting = self.work[first..]
            .iter()
            .take_while(|w| w.start == t)
            .filter(|w| w.end > w.start);
        let one = starting.next()?;
        // Most gaps end at one piece of work: no launch to look up.
        let Some(two) = starting.next() else {
            return Some(one);
        };
        [one, two]
            .into_iter()
            .chain(starting)
            .min_by_key(|w| (self.entry_of(w).unwrap_or(u64::MAX), w.call))
    }

    /// The work that ends at `t` (the longest-running one, to name the gap).
    fn before_at(&self, t: u64) -> Option<&Work> {
        let end_of = |k: usize| self.work[self.by_end[k] as usize].end;
        let first = seek(&self.end_from, self.by_end.len(), end_of, t);
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
        let by_stream = self.by_stream.get_or_init(|| order_by(self.work, key));
        let at = by_stream.partition_point(|&i| key(&self.work[i as usize]) < key(n));
        at.checked_sub(1)
            .map(|i| &self.work[by_stream[i] as usize])
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
        sink: &mut Sink,
    ) {
        let out = &mut sink.pieces;
        let len = ge - gs;
        let Some(n) = next else {
            push(out, Label::unknown(Rule::ZeroLengthWork), len, None);
            return;
        };
        let Some(c) = self.cx.launches.get(&n.call) else {
            push(out, Label::unknown(Rule::NoLaunchCall), len, None);
            return;
        };
        if let Some(problem) = self.cx.clock {
            let rule = match problem {
                ClockProblem::Step => Rule::ClockStep,
                ClockProblem::Unreliable => Rule::ClockUnreliable,
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
            self.cx
                .evidence
                .paint(c.key, (gs, h), at_launch, out, &mut sink.cuts);
            self.after_launch(n, before, c, exit, (h, ge), out);
        } else if exit.is_some_and(|x| x > gs) {
            // Entered before the gap, still inside the call when it began.
            self.after_launch(n, before, c, exit, (gs, ge), out);
        } else {
            // Launched before the gap began: dispatch latency up to the floor, then a wait.
            if before.is_some_and(|b| (b.context, b.stream) == (n.context, n.stream)) {
                sink.same_stream.push(len);
            }
            let f = len.min(self.cx.floor);
            push(out, BELOW_FLOOR, f, None);
            if len > f {
                let label =
                    self.dependency(n, before, c, (gs + f, ge), Rule::LaunchedBeforeGapStart);
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
                self.dependency(n, before, c, (x + latency, to), Rule::WaitedAfterLateLaunch);
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
        fallback: Rule,
    ) -> Label {
        // Evidence issued between the launch of n's stream predecessor and n's own launch.
        let ev = self.cx.evidence;
        let lower = if ev.stream_waits.is_empty() && ev.host_funcs.is_empty() {
            0
        } else {
            self.stream_predecessor(n)
                .and_then(|p| self.entry_of(p))
                .unwrap_or(0)
        };
        let waits = &ev.stream_waits;
        let first = waits.partition_point(|w| w.2 < lower);
        if waits[first..]
            .iter()
            .take_while(|w| w.2 <= c.entry)
            .any(|w| (w.0, w.1) == (n.context, n.stream))
        {
            return Label::dependency(Fixed::Event, Rule::StreamWaitEvent);
        }
        let funcs = &ev.host_funcs;
        let first = funcs.partition_point(|&t| t < lower);
        if funcs.get(first).is_some_and(|&t| t <= c.entry) {
            return Label::dependency(Fixed::HostFunction, Rule::HostFuncBefore);
        }
        if n.graph_id != 0 && before.is_some_and(|b| b.graph_id == n.graph_id) {
            return Label::dependency(Fixed::Graph, Rule::GraphDependency);
        }
        if 2 * covered(self.cx.others, from, to) >= to - from {
            return Label::dependency(Fixed::OtherDevice, Rule::OtherDeviceBusy);
        }
        if before.is_some_and(|b| (b.context, b.stream) == (n.context, n.stream)) {
            return Label::dependency(Fixed::StreamOrder, Rule::SameStreamAboveFloor);
        }
        Label::dependency(Fixed::Unknown, fallback)
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
