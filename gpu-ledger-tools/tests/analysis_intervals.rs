//! Property tests of the interval union against a brute-force per-nanosecond union.

use gpu_ledger_tools::analysis::intervals::{gaps, union_busy, BusySummary};
use proptest::prelude::*;

/// The reference: mark every covered nanosecond of the window, then read runs.
fn brute_force(intervals: &[(u64, u64)], min_gap: u64) -> Option<(BusySummary, Vec<(u64, u64)>)> {
    let first = intervals.iter().map(|i| i.0).min()?;
    let last = intervals.iter().map(|&(s, e)| s.max(e)).max()?;
    let covered: Vec<bool> = (first..last)
        .map(|t| intervals.iter().any(|&(s, e)| s <= t && t < e))
        .collect();
    let busy = covered.iter().filter(|&&c| c).count() as u64;
    let mut runs = Vec::new();
    let mut t = 0usize;
    while t < covered.len() {
        if covered[t] {
            t += 1;
            continue;
        }
        let start = t;
        while t < covered.len() && !covered[t] {
            t += 1;
        }
        runs.push((first + start as u64, first + t as u64));
    }
    // Largest gap: the earliest of the longest runs.
    let (largest, at) = runs.iter().fold((0u64, first), |best, &(s, e)| {
        if e - s > best.0 {
            (e - s, s)
        } else {
            best
        }
    });
    let mut filtered: Vec<(u64, u64)> = runs
        .into_iter()
        .filter(|&(s, e)| e - s >= min_gap.max(1))
        .collect();
    filtered.sort_by(|a, b| (b.1 - b.0).cmp(&(a.1 - a.0)).then(a.0.cmp(&b.0)));
    Some((
        BusySummary {
            first_start_ns: first,
            last_end_ns: last,
            busy_ns: busy,
            idle_ns: last - first - busy,
            largest_gap_ns: largest,
            largest_gap_at_ns: at,
        },
        filtered,
    ))
}

fn intervals() -> impl Strategy<Value = Vec<(u64, u64)>> {
    // Starts in 0..300, lengths -5..60 (negative: a reversed interval), up to 12 of them.
    prop::collection::vec((0u64..300, -5i64..60), 0..12).prop_map(|v| {
        v.into_iter()
            .map(|(s, len)| (s, (s as i64 + len).max(0) as u64))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn union_matches_brute_force(v in intervals(), min_gap in 0u64..40) {
        let expected = brute_force(&v, min_gap);
        let got = union_busy(&mut v.clone());
        let got_gaps = gaps(&mut v.clone(), min_gap);
        match expected {
            None => {
                prop_assert!(got.is_none());
                prop_assert!(got_gaps.is_empty());
            }
            Some((summary, g)) => {
                prop_assert_eq!(got, Some(summary));
                prop_assert_eq!(got_gaps, g);
            }
        }
    }

    #[test]
    fn union_is_order_independent_and_bounded(mut v in intervals()) {
        let Some(s) = union_busy(&mut v.clone()) else { return Ok(()); };
        v.reverse();
        prop_assert_eq!(union_busy(&mut v.clone()), Some(s));
        let summed: u64 = v.iter().map(|&(a, b)| b.saturating_sub(a)).sum();
        prop_assert!(s.busy_ns <= summed);
        prop_assert_eq!(s.busy_ns + s.idle_ns, s.last_end_ns - s.first_start_ns);
        prop_assert!(s.largest_gap_ns <= s.idle_ns);
        let all = gaps(&mut v, 0);
        prop_assert_eq!(all.iter().map(|g| g.1 - g.0).sum::<u64>(), s.idle_ns);
        prop_assert_eq!(all.first().map_or(0, |g| g.1 - g.0), s.largest_gap_ns);
    }
}

#[test]
fn sorts_in_place_as_documented() {
    let mut v = vec![(30, 40), (0, 10), (5, 8)];
    union_busy(&mut v);
    assert_eq!(v, vec![(0, 10), (5, 8), (30, 40)]);
}
