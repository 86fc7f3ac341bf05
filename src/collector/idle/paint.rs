//! What each launching thread was doing, on CUPTI's clock: the CUDA calls it sat in, the scopes
//! open on it, the stretch between `step()` and its first call, each flattened into disjoint
//! runs so that any stretch of a late host is painted in a few binary searches.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap as HashMap;

use super::model::{
    push, CallNote, Cause, Detail, Fixed, Label, Piece, Rule, BOUNDARY, NOTHING_KNOWN,
};

/// What a thread was doing inside a CUDA call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InCall {
    /// Blocked in a call of this kind (one of `crate::ledger::idle::blocked`).
    Blocked(Fixed),
    /// Launching or enqueueing other work.
    Launching,
}

/// Evidence of one row (and the row before it), as intervals on CUPTI's clock by thread key,
/// before flattening: a row's evidence is carried into the next row, whose lead-in and first
/// gaps it covers.
#[derive(Default, Clone)]
pub(crate) struct RawEvidence {
    /// `(key, start, end, what, call)`.
    pub(crate) calls: Vec<(u64, u64, u64, InCall, CallNote)>,
    /// `(key, start, end, path id)` of closed scopes.
    pub(crate) scopes: Vec<(u64, u64, u64, u32)>,
    /// `(key, start, end)`: from `step()` to the thread's first call of the iteration.
    pub(crate) boundaries: Vec<(u64, u64, u64)>,
    /// `(context, stream, host start)` of `cuStreamWaitEvent` synchronization records.
    pub(crate) stream_waits: Vec<(u32, u32, u64)>,
    /// Entries of `cuLaunchHostFunc` calls.
    pub(crate) host_funcs: Vec<u64>,
}

impl RawEvidence {
    /// Keeps the intervals that end after `t` (the points, few, all): what a row passes on to
    /// the next is what can cover the next row's lead-in, which begins at `t` or later.
    pub(crate) fn keep_after(&mut self, t: u64) {
        self.calls.retain(|c| c.2 > t);
        self.scopes.retain(|s| s.2 > t);
        self.boundaries.retain(|b| b.2 > t);
    }

    pub(crate) fn clear(&mut self) {
        self.calls.clear();
        self.scopes.clear();
        self.boundaries.clear();
        self.stream_waits.clear();
        self.host_funcs.clear();
    }
}

/// An interval `(start, end, rank, what)` to [`flatten`].
type Ranked<R, W> = (u64, u64, R, W);

/// Intervals by thread key.
type ByThread<T> = HashMap<u64, Vec<T>>;

/// A thread's evidence, flattened: disjoint runs in time order.
#[derive(Default)]
struct ThreadRuns {
    calls: Vec<(u64, u64, InCall, CallNote)>,
    scopes: Vec<(u64, u64, u32)>,
    boundaries: Vec<(u64, u64)>,
}

/// The evidence a row's gaps are painted with. Rebuilt in place row after row: its tables keep
/// the capacity they grew to.
#[derive(Default)]
pub(crate) struct Evidence {
    threads: HashMap<u64, ThreadRuns>,
    /// Sorted by host start.
    pub(crate) stream_waits: Vec<(u32, u32, u64)>,
    /// Sorted.
    pub(crate) host_funcs: Vec<u64>,
    /// The intervals before flattening, by thread.
    calls_in: ByThread<Ranked<u8, (InCall, CallNote)>>,
    scopes_in: ByThread<Ranked<(u64, Reverse<u64>), u32>>,
}

impl Evidence {
    /// The flattened evidence of `rows` (this row's and the one before).
    #[cfg(test)]
    pub(crate) fn of(rows: &[&RawEvidence]) -> Self {
        let mut e = Evidence::default();
        e.rebuild(rows);
        e
    }

    /// Makes this the flattened evidence of `rows` (this row's and the one before).
    pub(crate) fn rebuild(&mut self, rows: &[&RawEvidence]) {
        for v in self.calls_in.values_mut() {
            v.clear();
        }
        for v in self.scopes_in.values_mut() {
            v.clear();
        }
        for t in self.threads.values_mut() {
            t.calls.clear();
            t.scopes.clear();
            t.boundaries.clear();
        }
        self.stream_waits.clear();
        self.host_funcs.clear();
        for raw in rows {
            for &(key, s, e, what, note) in &raw.calls {
                // A blocking call outranks a launch it overlaps (a synchronization record and
                // the call it came from are one).
                let rank = u8::from(matches!(what, InCall::Blocked(_)));
                let v = self.calls_in.entry(key).or_default();
                v.push((s, e, rank, (what, note)));
            }
            for &(key, s, e, path) in &raw.scopes {
                // The innermost open scope: the latest start, then the shortest.
                let v = self.scopes_in.entry(key).or_default();
                v.push((s, e, (s, Reverse(e)), path));
            }
            for &(key, s, e) in &raw.boundaries {
                let t = self.threads.entry(key).or_default();
                t.boundaries.push((s, e));
            }
            self.stream_waits.extend_from_slice(&raw.stream_waits);
            self.host_funcs.extend_from_slice(&raw.host_funcs);
        }
        for (key, v) in &mut self.calls_in {
            if !v.is_empty() {
                let t = self.threads.entry(*key).or_default();
                flatten_into(v, &mut t.calls, |s, e, (w, n)| (s, e, w, n));
            }
        }
        for (key, v) in &mut self.scopes_in {
            if !v.is_empty() {
                let t = self.threads.entry(*key).or_default();
                flatten_into(v, &mut t.scopes, |s, e, w| (s, e, w));
            }
        }
        for t in self.threads.values_mut() {
            t.boundaries.retain(|(s, e)| e > s);
            t.boundaries.sort_unstable();
        }
        self.stream_waits.sort_unstable_by_key(|w| w.2);
        self.host_funcs.sort_unstable();
    }

    /// Paints `[a, b)` of a late host with what thread `key` was doing, into `out`: a CUDA call
    /// it sat in, else the innermost scope open on it, else the stretch after `step()` before its
    /// first call, else the scope it launched the next work in (`at_launch`), else nothing known.
    /// `cuts` is scratch space, kept by the caller from call to call.
    pub(crate) fn paint(
        &self,
        key: u64,
        (a, b): (u64, u64),
        at_launch: Option<u32>,
        out: &mut Vec<Piece>,
        cuts: &mut Vec<u64>,
    ) {
        if b <= a {
            return;
        }
        let Some(t) = self.threads.get(&key) else {
            push(out, fallback(at_launch), b - a, None);
            return;
        };
        cuts.clear();
        cuts.extend([a, b]);
        cut(&t.calls, |r| (r.0, r.1), a, b, cuts);
        cut(&t.scopes, |r| (r.0, r.1), a, b, cuts);
        cut(&t.boundaries, |r| *r, a, b, cuts);
        cuts.sort_unstable();
        cuts.dedup();
        for w in cuts.windows(2) {
            let (u, v) = (w[0], w[1]);
            let (label, note) = if let Some(&(_, _, what, note)) =
                covering(&t.calls, u, |r| (r.0, r.1))
            {
                match what {
                    InCall::Blocked(detail) => (Label::host(detail, Rule::InCudaCall), Some(note)),
                    InCall::Launching => (
                        Label::host(Fixed::LaunchCall, Rule::InLaunchCall),
                        Some(note),
                    ),
                }
            } else if let Some(&(_, _, path)) = covering(&t.scopes, u, |r| (r.0, r.1)) {
                (
                    Label::new(Cause::HostLaunch, Detail::Scope(path), Rule::ScopeOpen),
                    None,
                )
            } else if covering(&t.boundaries, u, |r| *r).is_some() {
                (BOUNDARY, None)
            } else {
                (fallback(at_launch), None)
            };
            push(out, label, v - u, note);
        }
    }
}

/// What a late host's time is when nothing on its thread covers it.
fn fallback(at_launch: Option<u32>) -> Label {
    match at_launch {
        Some(path) => Label::new(Cause::HostLaunch, Detail::Scope(path), Rule::ScopeAtLaunch),
        None => NOTHING_KNOWN,
    }
}

/// The run of `runs` (disjoint, in time order) that holds `t`.
fn covering<T>(runs: &[T], t: u64, span: impl Fn(&T) -> (u64, u64)) -> Option<&T> {
    let i = runs.partition_point(|r| span(r).1 <= t);
    runs.get(i).filter(|r| span(r).0 <= t)
}

/// The ends of `runs` that fall strictly inside `(a, b)`, into `cuts`.
fn cut<T>(runs: &[T], span: impl Fn(&T) -> (u64, u64), a: u64, b: u64, cuts: &mut Vec<u64>) {
    let first = runs.partition_point(|r| span(r).1 <= a);
    for r in &runs[first..] {
        let (s, e) = span(r);
        if s >= b {
            break;
        }
        for x in [s, e] {
            if x > a && x < b {
                cuts.push(x);
            }
        }
    }
}

/// Overlapping intervals `(start, end, rank, what)` as disjoint runs in time order, each run
/// holding the highest-ranked interval that covers it (the later one of equal rank); empty
/// intervals cover nothing, and adjacent runs of one interval are merged.
#[cfg(test)]
pub(crate) fn flatten<R: Ord + Copy, W: Copy>(mut v: Vec<Ranked<R, W>>) -> Vec<(u64, u64, W)> {
    let mut out = Vec::new();
    flatten_into(&mut v, &mut out, |s, e, w| (s, e, w));
    out
}

/// [`flatten`] of `v` (sorted in place) into `out` (emptied first), each run made by `make`.
fn flatten_into<R: Ord + Copy, W: Copy, T>(
    v: &mut Vec<Ranked<R, W>>,
    out: &mut Vec<T>,
    make: impl Fn(u64, u64, W) -> T,
) {
    out.clear();
    v.retain(|x| x.1 > x.0);
    v.sort_by_key(|x| x.0);
    // One thread's calls follow one another: nothing to rank.
    if v.windows(2).all(|w| w[0].1 <= w[1].0) {
        out.extend(v.iter().map(|&(s, e, _, w)| make(s, e, w)));
        return;
    }
    let mut runs: Vec<(u64, u64, usize)> = Vec::with_capacity(v.len());
    // (rank, index, end): the index breaks ties toward the later interval.
    let mut active: BinaryHeap<(R, usize, u64)> = BinaryHeap::new();
    let mut i = 0;
    let mut t = v[0].0;
    loop {
        while i < v.len() && v[i].0 <= t {
            active.push((v[i].2, i, v[i].1));
            i += 1;
        }
        while active.peek().is_some_and(|top| top.2 <= t) {
            active.pop();
        }
        let Some(&(_, idx, end)) = active.peek() else {
            match v.get(i) {
                Some(next) => {
                    t = next.0;
                    continue;
                }
                None => break,
            }
        };
        let next = v.get(i).map_or(end, |n| n.0.min(end));
        match runs.last_mut() {
            Some(last) if last.2 == idx && last.1 == t => last.1 = next,
            _ => runs.push((t, next, idx)),
        }
        t = next;
    }
    out.extend(runs.into_iter().map(|(s, e, idx)| make(s, e, v[idx].3)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flattening_keeps_the_highest_rank_and_the_innermost_of_equal_rank() {
        // A long low-ranked interval with a higher one inside, and a later equal-ranked one.
        let v = vec![
            (0, 100, 1, 'a'),
            (10, 20, 2, 'b'),
            (50, 60, 1, 'c'),
            (90, 90, 9, 'z'),
        ];
        assert_eq!(
            flatten(v),
            vec![
                (0, 10, 'a'),
                (10, 20, 'b'),
                (20, 50, 'a'),
                (50, 60, 'c'),
                (60, 100, 'a')
            ]
        );
        // Disjoint, with a hole.
        assert_eq!(
            flatten(vec![(5, 6, 0, 'x'), (0, 1, 0, 'y')]),
            vec![(0, 1, 'y'), (5, 6, 'x')]
        );
        assert!(flatten::<u8, char>(Vec::new()).is_empty());
    }

    fn note(function: &'static str) -> CallNote {
        CallNote {
            function,
            bytes: None,
            path_id: 0,
        }
    }

    #[test]
    fn a_late_host_is_painted_call_first_then_scope_then_boundary_then_fallback() {
        let raw = RawEvidence {
            calls: vec![
                (
                    1,
                    20,
                    30,
                    InCall::Blocked(Fixed::Synchronize),
                    note("cuStreamSynchronize"),
                ),
                (1, 40, 45, InCall::Launching, note("cuLaunchKernel")),
            ],
            scopes: vec![(1, 0, 100, 5), (1, 25, 60, 6), (2, 0, 100, 9)],
            boundaries: vec![(1, 60, 80)],
            ..RawEvidence::default()
        };
        let ev = Evidence::of(&[&raw]);
        let (mut out, mut cuts) = (Vec::new(), Vec::new());
        ev.paint(1, (10, 90), Some(7), &mut out, &mut cuts);
        let got: Vec<(String, &str, u64)> = out
            .iter()
            .map(|p| (format!("{:?}", p.label.detail), p.label.rule.name(), p.ns))
            .collect();
        assert_eq!(
            got,
            vec![
                ("Scope(5)".into(), "scope_open", 10),
                ("Text(Synchronize)".into(), "in_cuda_call", 10),
                ("Scope(6)".into(), "scope_open", 10),
                ("Text(LaunchCall)".into(), "in_launch_call", 5),
                ("Scope(6)".into(), "scope_open", 15),
                ("Scope(5)".into(), "scope_open", 30),
            ]
        );
        assert_eq!(out.iter().map(|p| p.ns).sum::<u64>(), 80);
        // Past the scopes: the boundary stretch is under scope 5 until 100; a thread with no
        // evidence at all gets the scope of its launch, or nothing known.
        out.clear();
        ev.paint(3, (0, 10), Some(7), &mut out, &mut cuts);
        assert_eq!(out[0].label.rule, Rule::ScopeAtLaunch);
        out.clear();
        ev.paint(3, (0, 10), None, &mut out, &mut cuts);
        assert_eq!(out[0].label, NOTHING_KNOWN);
        out.clear();
        ev.paint(1, (100, 110), None, &mut out, &mut cuts);
        assert_eq!(out[0].label, NOTHING_KNOWN);
    }
}
