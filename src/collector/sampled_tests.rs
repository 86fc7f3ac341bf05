//! The collector under a sampled timeline: records of untraced iterations, which the activity
//! kinds let through while they are switched ahead of a traced iteration and after it, are
//! counted apart and kept out of every row.

use super::offline::OfflineCollector;
use super::tests::{call, kernel, kernels_of, one_complete_row};
use crate::cupti::record::{Record, SyncRecord};

fn sync(start: u64) -> Record {
    Record::Sync(SyncRecord {
        kind: "stream",
        start,
        end: start + 10,
        correlation_id: 900 + (start % 97) as u32,
        context_id: 1,
        stream_id: 7,
    })
}

#[test]
fn records_of_untraced_iterations_are_counted_apart_and_in_no_row() {
    let mut c = OfflineCollector::new(1_000);
    let fwd = c.intern_path("step/forward");
    // Iteration 0, traced.
    c.accept_call(call(1, 0, fwd));
    c.accept(kernel(1, 1_100, "k"));
    c.end_iteration(1_900, 2_000, 1);
    assert_eq!(kernels_of(&one_complete_row(&mut c), "step/forward"), 1);
    // Iteration 1, untraced: its row is written at its end, before any of its records come.
    c.end_untraced_iteration(2_900, 3_000, 1);
    assert!(one_complete_row(&mut c).untraced);
    // Iteration 2, traced. With its flush come records of iteration 1 (the kinds were switched
    // on during it, its calls not captured): a kernel and a synchronization, and a
    // synchronization of the traced iteration 0, whose row is written: that one is late.
    c.accept_call(call(3, 2, fwd));
    c.accept(kernel(2, 2_100, "armed"));
    c.accept(sync(2_200));
    c.accept(sync(1_500));
    c.accept(kernel(3, 3_100, "k"));
    c.end_iteration(3_900, 4_000, 2);
    let row = one_complete_row(&mut c);
    assert!(!row.untraced);
    assert_eq!(kernels_of(&row, "step/forward"), 1);
    assert_eq!(row.kernels.len(), 1, "{:?}", row.kernels);
    assert!(row.synchronization.is_empty(), "{:?}", row.synchronization);
    // Iteration 3, untraced: the kinds were switched off during it, after a kernel.
    c.accept(kernel(4, 4_100, "after"));
    c.end_untraced_iteration(4_900, 5_000, 2);
    let row = one_complete_row(&mut c);
    assert!(row.untraced);
    assert!(row.kernels.is_empty(), "{:?}", row.kernels);
    let (rows, trailer) = c.finish(5_900, 6_000);
    assert!(rows.iter().all(|r| r.kernels.is_empty()));
    assert_eq!(trailer.untraced_records, 3, "{trailer:?}");
    assert_eq!(trailer.late_records, 1, "{trailer:?}");
    assert_eq!(trailer.unplaced_records, 0, "{trailer:?}");
}

#[test]
fn without_untraced_iterations_an_old_record_is_late_not_untraced() {
    let mut c = OfflineCollector::new(1_000);
    let fwd = c.intern_path("step/forward");
    c.accept_call(call(1, 0, fwd));
    c.accept(kernel(1, 1_100, "k"));
    c.end_iteration(1_900, 2_000, 1);
    one_complete_row(&mut c);
    c.accept(sync(1_500));
    let (_, trailer) = c.finish(2_900, 3_000);
    assert_eq!((trailer.untraced_records, trailer.late_records), (0, 1));
}

/// A graph captured while the timeline samples the iteration out (only the graph callbacks
/// run then) is attributed by its capture scopes in every traced window that replays it, the
/// same in the third window as in the first.
#[test]
fn graph_capture_scopes_outlive_untraced_iterations() {
    use crate::cupti::calls::graphs::GraphEvent;
    let mut c = OfflineCollector::new(1_000);
    let attention = c.intern_path("forward/attention");
    let replay = c.intern_path("step/replay");
    let mut windows = Vec::new();
    for it in 0..7u64 {
        let traced = it % 2 == 0;
        if it == 1 {
            // Captured and instantiated in an untraced iteration.
            c.accept_graph_event(GraphEvent::Created {
                node: 11,
                graph: Some(1),
                path_id: attention,
                call: 0,
                iteration: it,
            });
            c.accept_graph_event(GraphEvent::Cloned {
                node: 101,
                original: 11,
                owner: None,
            });
            c.accept_graph_event(GraphEvent::ExecCreated {
                exec: 7,
                nodes: vec![101],
            });
        }
        let (t0, t1) = (1_000 * (it + 1), 1_000 * (it + 2));
        if it >= 1 {
            let corr = 100 + it as u32;
            if traced {
                c.accept_call(super::tests::driver_call("cuGraphLaunch", corr, it, replay));
            }
            let Record::Kernel(mut k) = kernel(corr, t0 + 100, "node_kernel") else {
                unreachable!()
            };
            (k.graph_id, k.graph_node_id) = (1, 101);
            c.accept(Record::Kernel(k));
        }
        let launches = it / 2;
        if traced {
            c.end_iteration(t1 - 50, t1, launches);
        } else {
            c.end_untraced_iteration(t1 - 50, t1, launches);
        }
        let row = one_complete_row(&mut c);
        if traced && it > 0 {
            windows.push((
                kernels_of(&row, "step/replay/forward/attention"),
                row.attribution.unwrap().graph_capture,
            ));
        }
    }
    assert_eq!(windows, [(1, 1); 3], "windows 2, 4 and 6 alike");
    let (_, trailer) = c.finish(9_000, 9_000);
    assert_eq!(trailer.untraced_records, 3, "the untraced replays' kernels");
    assert_eq!(trailer.graphs.unwrap().records_unseen, 0);
}
