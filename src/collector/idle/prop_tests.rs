//! Whatever the records, the causes add up to the idle time: every gap is cut into pieces that
//! cover it once, on the split alone and through the whole collector.

use proptest::prelude::*;
use rustc_hash::FxHashMap as HashMap;

use super::model::{CallNote, Launch, Work, WorkKind};
use super::paint::{Evidence, InCall, RawEvidence};
use super::split::{split_device, ClockProblem, Context};
use crate::cupti::calls::Attribution;
use gpu_ledger_format::intervals::union_busy;

/// A piece of work: start, length (0 included), stream, kind, launched (entry before or after
/// the start, exit or not) or not.
type WorkSpec = (u64, u64, u32, u8, Option<(u64, bool, u64)>);

fn work_spec() -> impl Strategy<Value = WorkSpec> {
    (
        0u64..20_000,
        prop_oneof![Just(0u64), 1u64..3_000],
        0u32..3,
        0u8..3,
        proptest::option::of((0u64..25_000, any::<bool>(), 0u64..2_000)),
    )
}

/// Host evidence: `(thread key, start, end, kind)`, kind 0 a blocking call, 1 a launch, 2 a
/// scope, 3 a boundary.
fn evidence_spec() -> impl Strategy<Value = Vec<(u64, u64, u64, u8)>> {
    proptest::collection::vec((1u64..3, 0u64..25_000, 0u64..5_000, 0u8..4), 0..12)
}

fn build(
    specs: &[WorkSpec],
    ev: &[(u64, u64, u64, u8)],
) -> (Vec<Work>, HashMap<u32, Launch>, RawEvidence) {
    let mut work = Vec::new();
    let mut launches = HashMap::default();
    for (i, &(start, len, stream, kind, launch)) in specs.iter().enumerate() {
        let call = i as u32 + 1;
        work.push(Work {
            start,
            end: start + len,
            kind: match kind {
                0 => WorkKind::Kernel,
                1 => WorkKind::Memcpy,
                _ => WorkKind::Memset,
            },
            context: 1,
            stream,
            name: "w",
            graph_id: u32::from(stream == 2),
            call,
        });
        if let Some((entry, has_exit, call_ns)) = launch {
            launches.insert(
                call,
                Launch {
                    entry,
                    exit: has_exit.then_some(entry + call_ns),
                    blocking: kind == 1 && stream == 0,
                    key: 1 + u64::from(stream % 2),
                    thread: stream % 2,
                    index: i as u32,
                    path_id: stream,
                    attribution: Attribution::OwnThread,
                },
            );
        }
    }
    let mut raw = RawEvidence::default();
    let note = CallNote {
        function: "f",
        bytes: None,
        path_id: 0,
    };
    for &(key, start, len, kind) in ev {
        match kind {
            0 => raw.calls.push((
                key,
                start,
                start + len,
                InCall::Blocked(super::model::Fixed::Free),
                note,
            )),
            1 => raw
                .calls
                .push((key, start, start + len, InCall::Launching, note)),
            2 => raw.scopes.push((key, start, start + len, key as u32 + 10)),
            _ => raw.boundaries.push((key, start, start + len)),
        }
    }
    raw.stream_waits.push((1, 1, 5_000));
    raw.host_funcs.push(12_000);
    (work, launches, raw)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_causes_always_add_up_to_the_idle_time_and_no_gap_counts_twice(
        specs in proptest::collection::vec(work_spec(), 1..24),
        ev in evidence_spec(),
        floor in prop_oneof![Just(0u64), 1u64..3_000],
        largest in 0usize..4,
        lead_end in proptest::option::of(0u64..20_000),
        clock in 0u8..4,
        others in proptest::collection::vec((0u64..25_000, 1u64..2_000), 0..4),
    ) {
        let (mut work, launches, raw) = build(&specs, &ev);
        let evidence = Evidence::of(&[&raw]);
        let mut others: Vec<(u64, u64)> = others.iter().map(|&(s, l)| (s, s + l)).collect();
        let others = gpu_ledger_format::intervals::union_runs(&mut others);
        let cx = Context {
            launches: &launches,
            evidence: &evidence,
            others: &others,
            floor,
            clock: match clock {
                0 => Some(ClockProblem::Step),
                1 => Some(ClockProblem::Unreliable),
                _ => None,
            },
            largest,
        };
        let lead = lead_end.map(|end| Work { start: end.saturating_sub(10), end, ..work[0] });
        let mut intervals: Vec<(u64, u64)> = work.iter().map(|w| (w.start, w.end)).collect();
        let summary = union_busy(&mut intervals).unwrap();
        let s = split_device(&mut work, lead, &cx);
        prop_assert_eq!(s.idle_ns, summary.idle_ns);
        let placed: u64 = s.causes.iter().map(|(_, ns, _)| ns).sum();
        prop_assert_eq!(placed, summary.idle_ns, "{:?}", s.causes);
        let gaps = gpu_ledger_format::intervals::gaps(&mut intervals, 1);
        for (label, ns, n) in &s.causes {
            prop_assert!(*ns > 0, "{:?}", label);
            prop_assert!(*n as usize <= gaps.len() && *n > 0, "{:?} in {} gaps of {}", label, n, gaps.len());
        }
        prop_assert!(s.causes.iter().all(|(l, _, _)| l.rule != super::model::Rule::AccountingRemainder));
        // Each label once.
        for (i, a) in s.causes.iter().enumerate() {
            prop_assert!(s.causes[i + 1..].iter().all(|b| b.0 != a.0));
        }
        prop_assert_eq!(s.compute_idle_ns, summary.idle_ns + s.copy_only_ns);
        // The largest gaps: at most `largest`, longest first, each covered once by its pieces,
        // and the longest of all gaps first.
        prop_assert!(s.largest.len() <= largest);
        prop_assert!(s.largest.windows(2).all(|w| (w[0].ns, std::cmp::Reverse(w[0].start)) >= (w[1].ns, std::cmp::Reverse(w[1].start))));
        for g in &s.largest {
            prop_assert_eq!(g.pieces.iter().map(|p| p.ns).sum::<u64>(), g.ns);
            prop_assert!(g.pieces.iter().all(|p| p.ns > 0));
        }
        if let (Some(first), true) = (s.largest.first(), largest > 0) {
            prop_assert_eq!(first.ns, summary.largest_gap_ns);
        }
        if let Some(l) = &s.lead_in {
            prop_assert_eq!(l.pieces.iter().map(|p| p.ns).sum::<u64>(), l.ns);
            prop_assert_eq!(l.start + l.ns, summary.first_start_ns);
        } else if let Some(end) = lead_end {
            prop_assert!(end >= summary.first_start_ns);
        }
    }
}
