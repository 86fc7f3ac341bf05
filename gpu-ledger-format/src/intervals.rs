//! Device busy time as the union of occupied intervals, and the idle gaps between them.
//!
//! Summing kernel and copy durations is only valid when nothing overlaps; with several streams
//! the device's busy time is the measure of the union of the `[start, end)` intervals, and its idle
//! time is the rest of the window from the first start to the last end.
//!
//! Conventions used by every function here:
//! - intervals are half-open `[start, end)` in nanoseconds, in any order, and may overlap;
//! - an interval with `end <= start` occupies no time: it still widens the window (an activity
//!   happened at that instant) but covers nothing and does not split a gap;
//! - gaps are the maximal uncovered runs inside the window `[first_start, last_end)`.

/// Busy/idle summary of a set of `[start, end)` intervals in ns (any order, may overlap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusySummary {
    /// Earliest start of any interval.
    pub first_start_ns: u64,
    /// Latest end of any interval (never before `first_start_ns`).
    pub last_end_ns: u64,
    /// Measure of the union of the intervals.
    pub busy_ns: u64,
    /// `last_end_ns - first_start_ns - busy_ns`: uncovered time inside the window.
    pub idle_ns: u64,
    /// Length of the longest uncovered run inside the window (0 when there is none).
    pub largest_gap_ns: u64,
    /// Start of that run (the earliest one on a tie); `first_start_ns` when there is no gap.
    pub largest_gap_at_ns: u64,
}

/// Sorts `intervals` by start then end, and returns the window and the covered runs.
fn sweep(
    intervals: &mut [(u64, u64)],
    mut on_gap: impl FnMut(u64, u64),
) -> Option<(u64, u64, u64)> {
    if intervals.is_empty() {
        return None;
    }
    // GPU records of a stream arrive in start order, so the input is often sorted already, or
    // a few sorted runs back to back, which the stable sort merges (equal intervals are
    // indistinguishable, so stability changes nothing).
    if !intervals.is_sorted() {
        intervals.sort();
    }
    let first_start = intervals[0].0;
    let mut last_end = first_start;
    let mut covered_to = first_start;
    let mut busy = 0u64;
    for &(s, e) in intervals.iter() {
        last_end = last_end.max(e.max(s));
        if e <= s {
            continue;
        }
        if s > covered_to {
            on_gap(covered_to, s);
        }
        if e > covered_to {
            busy += e - s.max(covered_to);
            covered_to = e;
        }
    }
    if last_end > covered_to {
        on_gap(covered_to, last_end);
    }
    Some((first_start, last_end, busy))
}

/// Busy and idle time of a set of intervals. Returns `None` when `intervals` is empty.
///
/// Sorts `intervals` in place (by start, then end); runs in `O(n log n)`.
pub fn union_busy(intervals: &mut [(u64, u64)]) -> Option<BusySummary> {
    let mut largest = (0u64, 0u64); // (length, start)
    let (first_start, last_end, busy) = sweep(intervals, |s, e| {
        if e - s > largest.0 {
            largest = (e - s, s);
        }
    })?;
    Some(BusySummary {
        first_start_ns: first_start,
        last_end_ns: last_end,
        busy_ns: busy,
        idle_ns: last_end - first_start - busy,
        largest_gap_ns: largest.0,
        largest_gap_at_ns: if largest.0 > 0 {
            largest.1
        } else {
            first_start
        },
    })
}

/// [`union_busy`] of intervals given one at a time: constant work per interval while they come
/// in order (by start, then end), as the GPU records of one stream do; sorted and swept at the
/// end otherwise. The intervals are kept for that, so a cleared accumulator keeps its capacity.
#[derive(Debug, Clone, Default)]
pub struct BusyAccumulator {
    intervals: Vec<(u64, u64)>,
    /// Every interval so far came in order, and the sweep below is up to date.
    in_order: bool,
    first_start: u64,
    last_end: u64,
    covered_to: u64,
    busy: u64,
    /// Longest gap so far and its start.
    largest: (u64, u64),
}

impl BusyAccumulator {
    /// Adds `[start, end)`.
    #[inline]
    pub fn push(&mut self, interval: (u64, u64)) {
        match self.intervals.last() {
            None => {
                self.in_order = true;
                self.first_start = interval.0;
                self.last_end = interval.0;
                self.covered_to = interval.0;
                self.busy = 0;
                self.largest = (0, 0);
            }
            Some(&last) => self.in_order &= last <= interval,
        }
        self.intervals.push(interval);
        if !self.in_order {
            return;
        }
        // One step of `sweep`, with `union_busy`'s gap callback.
        let (s, e) = interval;
        self.last_end = self.last_end.max(e.max(s));
        if e <= s {
            return;
        }
        if s > self.covered_to && s - self.covered_to > self.largest.0 {
            self.largest = (s - self.covered_to, self.covered_to);
        }
        if e > self.covered_to {
            self.busy += e - s.max(self.covered_to);
            self.covered_to = e;
        }
    }

    /// What [`union_busy`] gives for the intervals added since the last [`clear`](Self::clear).
    pub fn summary(&mut self) -> Option<BusySummary> {
        if !self.in_order || self.intervals.is_empty() {
            return union_busy(&mut self.intervals);
        }
        let mut largest = self.largest;
        if self.last_end > self.covered_to && self.last_end - self.covered_to > largest.0 {
            largest = (self.last_end - self.covered_to, self.covered_to);
        }
        Some(BusySummary {
            first_start_ns: self.first_start,
            last_end_ns: self.last_end,
            busy_ns: self.busy,
            idle_ns: self.last_end - self.first_start - self.busy,
            largest_gap_ns: largest.0,
            largest_gap_at_ns: if largest.0 > 0 {
                largest.1
            } else {
                self.first_start
            },
        })
    }

    /// Forgets the intervals, keeping the capacity.
    pub fn clear(&mut self) {
        self.intervals.clear();
    }
}

/// Calls `on_gap(start, end)` for every idle gap inside the window, in time order: the same runs
/// whose lengths [`union_busy`] sums into `idle_ns`, so that anything split along them adds up to
/// it exactly. Returns the window and the busy time (`(first_start, last_end, busy)`), `None`
/// for no intervals. Sorts `intervals` in place.
pub fn for_each_gap(
    intervals: &mut [(u64, u64)],
    on_gap: impl FnMut(u64, u64),
) -> Option<(u64, u64, u64)> {
    sweep(intervals, on_gap)
}

/// The union of `intervals` as disjoint runs in time order, each non-empty; zero-length
/// intervals cover nothing. Sorts `intervals` in place.
pub fn union_runs(intervals: &mut [(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    if !intervals.is_sorted() {
        intervals.sort();
    }
    for &(s, e) in intervals.iter() {
        if e <= s {
            continue;
        }
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The measure of `a` outside `b` and of `a` inside `b`, for two sets of disjoint runs in time
/// order ([`union_runs`]): one merge over both.
pub fn difference_and_overlap(a: &[(u64, u64)], b: &[(u64, u64)]) -> (u64, u64) {
    let (mut only, mut both) = (0u64, 0u64);
    let mut j = 0;
    for &(s, e) in a {
        let mut at = s;
        while j < b.len() && b[j].1 <= at {
            j += 1;
        }
        let mut k = j;
        while at < e {
            match b.get(k) {
                Some(&(bs, be)) if bs < e => {
                    if bs > at {
                        only += bs - at;
                        at = bs;
                    }
                    let to = be.min(e);
                    both += to.saturating_sub(at);
                    at = at.max(to);
                    k += 1;
                }
                _ => {
                    only += e - at;
                    at = e;
                }
            }
        }
    }
    (only, both)
}

/// The idle gaps `(start, end)` inside the window whose length is at least `min_gap_ns` (and
/// never zero), largest first; gaps of equal length are in time order.
///
/// Sorts `intervals` in place. Empty input gives no gaps.
pub fn gaps(intervals: &mut [(u64, u64)], min_gap_ns: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let floor = min_gap_ns.max(1);
    sweep(intervals, |s, e| {
        if e - s >= floor {
            out.push((s, e));
        }
    });
    out.sort_by(|a, b| (b.1 - b.0).cmp(&(a.1 - a.0)).then(a.0.cmp(&b.0)));
    out
}

/// A named span of time, for example a host scope that was open from `start_ns` to `end_ns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelledSpan {
    /// Start, ns (same clock as the gaps it labels).
    pub start_ns: u64,
    /// End, ns (exclusive).
    pub end_ns: u64,
    /// What was open: a scope path such as `step/backward`.
    pub label: String,
}

/// For each gap, the label of the innermost span open at the gap's start: of the spans with
/// `start_ns <= gap.0 < end_ns`, the one that started last (the shortest on a tie).
/// `None` where no span was open.
///
/// Both must be on the same clock: mapping CUPTI timestamps to host time is the caller's job.
pub fn label_gaps<'a>(gaps: &[(u64, u64)], spans: &'a [LabelledSpan]) -> Vec<Option<&'a str>> {
    gaps.iter()
        .map(|&(gap_start, _)| {
            spans
                .iter()
                .filter(|s| s.start_ns <= gap_start && gap_start < s.end_ns)
                .max_by(|a, b| a.start_ns.cmp(&b.start_ns).then(b.end_ns.cmp(&a.end_ns)))
                .map(|s| s.label.as_str())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_none() {
        assert_eq!(union_busy(&mut Vec::new()), None);
        assert!(gaps(&mut Vec::new(), 0).is_empty());
    }

    #[test]
    fn overlapping_streams_are_not_double_counted() {
        // Two streams: [0,100) and [50,150) overlap by 50; then a gap; then [200,250).
        let mut v = vec![(200, 250), (50, 150), (0, 100)];
        let s = union_busy(&mut v).unwrap();
        assert_eq!(s.first_start_ns, 0);
        assert_eq!(s.last_end_ns, 250);
        assert_eq!(s.busy_ns, 200);
        assert_eq!(s.idle_ns, 50);
        assert_eq!(s.largest_gap_ns, 50);
        assert_eq!(s.largest_gap_at_ns, 150);
        assert_eq!(v[0], (0, 100), "sorted in place");
    }

    #[test]
    fn nested_and_touching_intervals() {
        // [0,100) contains [10,20); [100,110) touches it: no gap at 100.
        let mut v = vec![(10, 20), (0, 100), (100, 110)];
        let s = union_busy(&mut v).unwrap();
        assert_eq!((s.busy_ns, s.idle_ns, s.largest_gap_ns), (110, 0, 0));
        assert_eq!(s.largest_gap_at_ns, 0);
    }

    #[test]
    fn zero_length_intervals_widen_window_only() {
        let mut v = vec![(0, 0), (10, 20), (15, 15), (30, 30)];
        let s = union_busy(&mut v).unwrap();
        assert_eq!((s.first_start_ns, s.last_end_ns), (0, 30));
        assert_eq!((s.busy_ns, s.idle_ns), (10, 20));
        assert_eq!((s.largest_gap_ns, s.largest_gap_at_ns), (10, 0));
        let g = gaps(&mut v, 0);
        assert_eq!(g, vec![(0, 10), (20, 30)]);
    }

    #[test]
    fn reversed_interval_is_a_point() {
        let mut v = vec![(50, 10), (0, 5)];
        let s = union_busy(&mut v).unwrap();
        assert_eq!((s.first_start_ns, s.last_end_ns, s.busy_ns), (0, 50, 5));
        assert_eq!(s.idle_ns, 45);
    }

    #[test]
    fn gaps_sorted_largest_first_and_filtered() {
        let mut v = vec![(0, 10), (12, 20), (50, 60), (65, 70)];
        assert_eq!(gaps(&mut v, 0), vec![(20, 50), (60, 65), (10, 12)]);
        assert_eq!(gaps(&mut v, 5), vec![(20, 50), (60, 65)]);
        assert_eq!(gaps(&mut v, 31), Vec::<(u64, u64)>::new());
    }

    #[test]
    fn equal_gaps_keep_time_order_and_earliest_is_largest_at() {
        let mut v = vec![(20, 30), (0, 10)];
        v.push((40, 50));
        assert_eq!(gaps(&mut v, 1), vec![(10, 20), (30, 40)]);
        assert_eq!(union_busy(&mut v).unwrap().largest_gap_at_ns, 10);
    }

    #[test]
    fn extreme_timestamps_do_not_overflow() {
        let mut v = vec![(u64::MAX - 10, u64::MAX), (0, 1)];
        let s = union_busy(&mut v).unwrap();
        assert_eq!(s.busy_ns, 11);
        assert_eq!(s.idle_ns, u64::MAX - 11);
    }

    #[test]
    fn the_gaps_walked_are_those_idle_ns_sums() {
        let mut v = vec![(0, 10), (12, 20), (15, 15), (50, 60), (65, 70), (70, 70)];
        let mut walked = Vec::new();
        let w = for_each_gap(&mut v, |s, e| walked.push((s, e))).unwrap();
        assert_eq!(walked, vec![(10, 12), (20, 50), (60, 65)]);
        let s = union_busy(&mut v).unwrap();
        assert_eq!(walked.iter().map(|(a, b)| b - a).sum::<u64>(), s.idle_ns);
        assert_eq!(w, (0, 70, s.busy_ns));
        assert_eq!(for_each_gap(&mut [], |_, _| ()), None);
    }

    #[test]
    fn runs_difference_and_overlap() {
        let copies = union_runs(&mut [(30, 40), (0, 10), (5, 12), (20, 20)]);
        assert_eq!(copies, vec![(0, 12), (30, 40)]);
        let compute = union_runs(&mut [(8, 31), (35, 36), (39, 50)]);
        // Copies outside compute: [0,8) and [31,35) and [36,39); inside: [8,12), 30, 35, 39.
        assert_eq!(
            difference_and_overlap(&copies, &compute),
            (8 + 4 + 3, 4 + 1 + 1 + 1)
        );
        assert_eq!(difference_and_overlap(&copies, &[]), (22, 0));
        assert_eq!(difference_and_overlap(&[], &compute), (0, 0));
    }

    #[test]
    fn labels_pick_innermost_open_span() {
        let spans = vec![
            LabelledSpan {
                start_ns: 0,
                end_ns: 1000,
                label: "step".into(),
            },
            LabelledSpan {
                start_ns: 100,
                end_ns: 500,
                label: "step/forward".into(),
            },
            LabelledSpan {
                start_ns: 500,
                end_ns: 900,
                label: "step/backward".into(),
            },
        ];
        let g = [(150, 200), (500, 600), (950, 990), (2000, 2100)];
        assert_eq!(
            label_gaps(&g, &spans),
            vec![
                Some("step/forward"),
                Some("step/backward"),
                Some("step"),
                None
            ]
        );
    }
}
