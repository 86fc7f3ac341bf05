//! CUDA graph nodes' records through [`OfflineCollector`]: synthetic graph callbacks (nodes
//! created, cloned by instantiations, destroyed) and kernel, copy and memset records carrying
//! graph and node ids land in the scope each node was captured in, under their launch's scope.

use super::offline::OfflineCollector;
use super::tests::{call, driver_call, kernel, kernels_of, one_complete_row, transfer};
use crate::cupti::calls::graphs::{GraphEvent, Owner};
use crate::cupti::calls::CapturedCall;
use crate::cupti::record::Record;
use crate::ledger::schema::IterationRow;

/// A kernel record of graph node `node` (of graph 1), launched by call `corr`.
fn graph_kernel(corr: u32, start: u64, node: u64) -> Record {
    let Record::Kernel(mut k) = kernel(corr, start, "node_kernel") else {
        unreachable!()
    };
    k.graph_id = 1;
    k.graph_node_id = node;
    Record::Kernel(k)
}

/// A copy (`memcpy`) or memset record of graph node `node`.
fn graph_transfer(memset: bool, corr: u32, start: u64, node: u64) -> Record {
    let mut c = transfer(if memset { "memset" } else { "DtoD" }, corr, start, 64);
    c.graph_id = 1;
    c.graph_node_id = node;
    if memset {
        Record::Memset(c)
    } else {
        Record::Memcpy(c)
    }
}

/// `cuGraphLaunch` in iteration `iteration` with scope `path_id` open.
fn graph_launch(corr: u32, iteration: u64, path_id: u32) -> CapturedCall {
    driver_call("cuGraphLaunch", corr, iteration, path_id)
}

/// Node `node` of graph `graph` created with scope `path_id` open, outside any traced call.
fn created(node: u64, graph: u32, path_id: u32) -> GraphEvent {
    GraphEvent::Created {
        node,
        graph: Some(graph),
        path_id,
        call: 0,
        iteration: 0,
    }
}

/// The instantiation of `originals` as executable graph `exec`: each cloned to `first + i`.
fn instantiate(c: &mut OfflineCollector, exec: u32, originals: &[u64], first: u64) {
    let clones: Vec<u64> = (first..).take(originals.len()).collect();
    for (&original, &node) in originals.iter().zip(&clones) {
        c.accept_graph_event(GraphEvent::Cloned {
            node,
            original,
            owner: None,
        });
    }
    c.accept_graph_event(GraphEvent::ExecCreated {
        exec,
        nodes: clones,
    });
}

fn device_ns_inclusive(row: &IterationRow, path: &str) -> u64 {
    row.scopes
        .iter()
        .find(|s| s.path == path)
        .map_or(0, |s| s.device_ns_inclusive)
}

#[test]
fn graph_kernels_land_in_their_capture_scope_under_the_launch_scope() {
    let mut c = OfflineCollector::new(1_000);
    let attention = c.intern_path("forward/attention");
    let backward = c.intern_path("backward");
    let replay = c.intern_path("step/replay");
    c.accept_graph_event(created(11, 1, attention));
    c.accept_graph_event(created(12, 1, backward));
    instantiate(&mut c, 7, &[11, 12], 101);
    c.accept_call(graph_launch(50, 0, replay));
    c.accept(graph_kernel(50, 1_100, 101));
    c.accept(graph_kernel(50, 1_700, 102));
    c.end_iteration(5_000, 2_000, 1);
    let row = one_complete_row(&mut c);
    assert_eq!(kernels_of(&row, "step/replay/forward/attention"), 1);
    assert_eq!(kernels_of(&row, "step/replay/backward"), 1);
    assert_eq!(kernels_of(&row, "step/replay"), 0);
    assert_eq!(
        device_ns_inclusive(&row, "step/replay"),
        1_000,
        "the launch scope's inclusive time holds its nodes' kernels"
    );
    let counts = row.attribution.unwrap();
    assert_eq!((counts.graph_capture, counts.total()), (2, 2), "{counts:?}");
    assert_eq!(row.launch_threads[0].attribution.graph_capture, 2);
    let (_, trailer) = c.finish(6_000, 2_500);
    let graphs = trailer.graphs.unwrap();
    assert_eq!((graphs.nodes_captured, graphs.records_by_capture), (2, 2));
    assert_eq!(graphs.records_unseen, 0);
    assert_eq!(
        graphs.nodes_live_peak, 4,
        "two captured nodes and their clones"
    );
    // No calibration offline: the idle split says so once; any other warning is a fault.
    assert_eq!(other_warnings(&trailer.warnings), Vec::<&String>::new());
}

#[test]
fn copy_and_memset_nodes_follow_their_capture_scope() {
    let mut c = OfflineCollector::new(1_000);
    let backward = c.intern_path("backward");
    let replay = c.intern_path("step/replay");
    c.accept_graph_event(created(13, 1, backward));
    c.accept_graph_event(created(14, 1, backward));
    instantiate(&mut c, 7, &[13, 14], 103);
    c.accept_call(graph_launch(50, 0, replay));
    c.accept(graph_transfer(false, 50, 1_100, 103));
    c.accept(graph_transfer(true, 50, 1_300, 104));
    c.end_iteration(5_000, 2_000, 1);
    let row = one_complete_row(&mut c);
    let scope = row
        .scopes
        .iter()
        .find(|s| s.path == "step/replay/backward")
        .expect("the copies' capture scope");
    assert_eq!(scope.device_ns, 200, "a 100 ns copy and a 100 ns memset");
    assert_eq!(row.launch_threads[0].copies, 2);
    assert_eq!(row.attribution.unwrap().total(), 0, "no kernel");
    let (_, trailer) = c.finish(6_000, 2_500);
    assert_eq!(trailer.graphs.unwrap().records_by_capture, 2);
}

#[test]
fn launches_captured_into_a_graph_are_not_awaited() {
    let mut c = OfflineCollector::new(1_000);
    let attention = c.intern_path("forward/attention");
    // Stream capture: the launch and the copy call each create a node, and launch nothing.
    for (corr, node, name) in [(1, 11, "cuLaunchKernel"), (2, 12, "cuMemcpyDtoDAsync_v2")] {
        c.accept_graph_event(GraphEvent::Created {
            node,
            graph: Some(1),
            path_id: attention,
            call: corr,
            iteration: 0,
        });
        c.accept_call(driver_call(name, corr, 0, attention));
    }
    // A launch that was not captured is still awaited.
    c.accept_call(call(3, 0, attention));
    c.end_iteration(5_000, 2_000, 3);
    assert!(c.take_rows().is_empty(), "the uncaptured launch's kernel");
    c.accept(kernel(3, 1_500, "eager"));
    let row = one_complete_row(&mut c);
    assert_eq!(row.missing_records, 0);
    assert_eq!(kernels_of(&row, "forward/attention"), 1);
}

#[test]
fn a_node_whose_capture_was_not_seen_stays_in_the_launch_scope_with_one_warning() {
    let mut c = OfflineCollector::new(1_000);
    let replay = c.intern_path("step/replay");
    // A graph captured before the profiler started: none of its nodes is known.
    for it in 0..2u32 {
        let corr = 50 + it;
        c.accept_call(graph_launch(corr, u64::from(it), replay));
        c.accept(graph_kernel(corr, 1_100 + 1_000 * u64::from(it), 555));
        c.end_iteration(
            5_000 * u64::from(it + 1),
            2_000 + 1_000 * u64::from(it),
            1 + u64::from(it),
        );
        let row = one_complete_row(&mut c);
        assert_eq!(kernels_of(&row, "step/replay"), 1);
        let counts = row.attribution.unwrap();
        assert_eq!((counts.graph_launch, counts.total()), (1, 1), "{counts:?}");
        assert_eq!(row.launch_threads[0].attribution.graph_launch, 1);
    }
    let (_, trailer) = c.finish(20_000, 4_500);
    assert_eq!(trailer.graphs.unwrap().records_unseen, 2);
    let warned: Vec<&String> = trailer
        .warnings
        .iter()
        .filter(|w| w.contains("did not see"))
        .collect();
    assert_eq!(warned.len(), 1, "{:?}", trailer.warnings);
    assert!(
        warned[0].starts_with("2 kernels, copies and memsets"),
        "{}",
        warned[0]
    );
    assert!(
        warned[0].contains("Profiler::start() first"),
        "{}",
        warned[0]
    );
}

#[test]
fn a_capture_path_shares_its_leading_scopes_with_the_launch_path_once() {
    let mut c = OfflineCollector::new(1_000);
    let step = c.intern_path("step");
    let forward = c.intern_path("step/forward");
    let replay = c.intern_path("step/replay");
    let attention = c.intern_path("forward/attention");
    c.accept_graph_event(created(11, 1, forward));
    c.accept_graph_event(created(12, 1, attention));
    instantiate(&mut c, 7, &[11, 12], 101);
    // Replayed in the scope it was captured in, in a sibling of it, and in no scope.
    for (corr, path) in [(50, step), (51, replay), (52, 0)] {
        c.accept_call(graph_launch(corr, 0, path));
        c.accept(graph_kernel(corr, 1_100, 101));
        c.accept(graph_kernel(corr, 1_200, 102));
    }
    c.end_iteration(5_000, 2_000, 3);
    let row = one_complete_row(&mut c);
    let expected = [
        ("step/forward", 2),
        ("step/forward/attention", 1),
        ("step/replay/forward", 1),
        ("step/replay/forward/attention", 1),
        ("forward/attention", 1),
    ];
    for (path, n) in expected {
        assert_eq!(kernels_of(&row, path), n, "{path}: {:?}", row.scopes);
    }
    assert_eq!(row.attribution.unwrap().graph_capture, 6);
}

#[test]
fn a_destroyed_graph_keeps_its_scopes_until_its_iterations_row_is_written() {
    let mut c = OfflineCollector::new(1_000);
    let attention = c.intern_path("forward/attention");
    let replay = c.intern_path("step/replay");
    c.accept_graph_event(created(11, 1, attention));
    instantiate(&mut c, 7, &[11], 101);
    c.accept_call(graph_launch(50, 0, replay));
    // The application destroys the graph right after launching it; the record comes later.
    c.accept_graph_event(GraphEvent::ExecDestroyed {
        exec: 7,
        iteration: 0,
    });
    c.accept_graph_event(GraphEvent::GraphDestroyed {
        graph: 1,
        iteration: 0,
    });
    assert_eq!(c.graph_nodes().0, 2, "kept until the row is written");
    c.end_iteration(5_000, 2_000, 1);
    c.accept(graph_kernel(50, 1_100, 101));
    let row = one_complete_row(&mut c);
    assert_eq!(kernels_of(&row, "step/replay/forward/attention"), 1);
    assert_eq!(c.graph_nodes().0, 0, "forgotten with the row");
    // An id seen again after that is unknown (CUPTI's ids are never reused).
    c.accept_call(graph_launch(51, 1, replay));
    c.accept(graph_kernel(51, 2_100, 101));
    c.end_iteration(9_000, 3_000, 2);
    let row = one_complete_row(&mut c);
    assert_eq!(row.attribution.unwrap().graph_launch, 1);
    let (_, trailer) = c.finish(10_000, 3_500);
    let graphs = trailer.graphs.unwrap();
    assert_eq!((graphs.nodes_live_peak, graphs.nodes_live_at_end), (2, 0));
}

#[test]
fn two_instantiations_of_one_graph_each_map_their_clones() {
    let mut c = OfflineCollector::new(1_000);
    let attention = c.intern_path("forward/attention");
    let backward = c.intern_path("backward");
    let replay = c.intern_path("step/replay");
    c.accept_graph_event(created(11, 1, attention));
    c.accept_graph_event(created(12, 1, backward));
    instantiate(&mut c, 7, &[11, 12], 101);
    instantiate(&mut c, 8, &[11, 12], 201);
    c.accept_call(graph_launch(50, 0, replay));
    c.accept_call(graph_launch(51, 0, replay));
    for (node, start) in [(101, 1_100), (102, 1_200), (201, 1_300), (202, 1_400)] {
        c.accept(graph_kernel(if node < 200 { 50 } else { 51 }, start, node));
    }
    // The first executable graph goes; the graph and the second stay.
    c.accept_graph_event(GraphEvent::ExecDestroyed {
        exec: 7,
        iteration: 0,
    });
    c.end_iteration(5_000, 2_000, 2);
    let row = one_complete_row(&mut c);
    assert_eq!(kernels_of(&row, "step/replay/forward/attention"), 2);
    assert_eq!(kernels_of(&row, "step/replay/backward"), 2);
    assert_eq!(
        c.graph_nodes().0,
        4,
        "the graph's two nodes and the second exec's"
    );
    c.accept_call(graph_launch(52, 1, replay));
    c.accept(graph_kernel(52, 2_100, 202));
    c.end_iteration(9_000, 3_000, 3);
    assert_eq!(
        kernels_of(&one_complete_row(&mut c), "step/replay/backward"),
        1
    );
}

#[test]
fn a_cloned_graph_keeps_its_nodes_scopes_and_a_clone_of_an_unseen_node_forgets_the_id() {
    let mut c = OfflineCollector::new(1_000);
    let backward = c.intern_path("backward");
    let other = c.intern_path("other");
    let replay = c.intern_path("step/replay");
    c.accept_graph_event(created(12, 1, backward));
    // cuGraphClone into graph 2, then the original graph goes.
    c.accept_graph_event(GraphEvent::Cloned {
        node: 302,
        original: 12,
        owner: Some(Owner::Graph(2)),
    });
    c.accept_graph_event(GraphEvent::GraphDestroyed {
        graph: 1,
        iteration: 0,
    });
    // An id once created in another scope, then cloned from a node never seen.
    c.accept_graph_event(created(401, 3, other));
    c.accept_graph_event(GraphEvent::Cloned {
        node: 401,
        original: 999,
        owner: Some(Owner::Graph(3)),
    });
    c.end_iteration(5_000, 2_000, 0);
    one_complete_row(&mut c);
    instantiate(&mut c, 9, &[302], 501);
    c.accept_call(graph_launch(60, 1, replay));
    c.accept(graph_kernel(60, 2_100, 501));
    c.accept(graph_kernel(60, 2_200, 401));
    c.end_iteration(9_000, 3_000, 1);
    let row = one_complete_row(&mut c);
    assert_eq!(kernels_of(&row, "step/replay/backward"), 1);
    assert_eq!(kernels_of(&row, "step/replay"), 1, "{:?}", row.scopes);
    let counts = row.attribution.unwrap();
    assert_eq!((counts.graph_capture, counts.graph_launch), (1, 1));
}

#[test]
fn the_node_map_is_bounded_and_says_what_it_did_not_keep() {
    let mut c = OfflineCollector::new(1_000);
    c.set_graph_bound(4);
    let fwd = c.intern_path("forward");
    for node in 1..=5 {
        c.accept_graph_event(created(node, 1, fwd));
    }
    assert_eq!(c.graph_nodes().0, 4);
    let (_, trailer) = c.finish(5_000, 2_000);
    let graphs = trailer.graphs.unwrap();
    assert_eq!((graphs.nodes_not_kept, graphs.nodes_live_peak), (1, 4));
    assert_eq!((graphs.nodes_captured, graphs.nodes_live_at_end), (5, 4));
    assert!(
        trailer
            .warnings
            .iter()
            .any(|w| w.starts_with("1 graph nodes were not kept")),
        "{:?}",
        trailer.warnings
    );
}

/// A run that captures, instantiates, replays and destroys a fresh graph of `NODES` nodes every
/// iteration, a million nodes in all, keeps as many entries as one graph holds.
#[test]
fn a_fresh_graph_every_iteration_keeps_the_node_map_flat_over_a_million_nodes() {
    const NODES: u64 = 1_000;
    const GRAPHS: u64 = 1_000;
    let mut c = OfflineCollector::new(1_000);
    let attention = c.intern_path("forward/attention");
    let replay = c.intern_path("step/replay");
    let mut capacity = None;
    for it in 0..GRAPHS {
        let graph = it as u32 + 1;
        let first = it * 2 * NODES;
        let originals: Vec<u64> = (first..first + NODES).collect();
        for &node in &originals {
            c.accept_graph_event(created(node, graph, attention));
        }
        instantiate(&mut c, graph, &originals, first + NODES);
        let corr = 10 + it as u32;
        c.accept_call(graph_launch(corr, it, replay));
        let t0 = 1_000 + it * 1_000;
        for k in 0..3 {
            c.accept(graph_kernel(corr, t0 + 100 * k, first + NODES + k));
        }
        for event in [
            GraphEvent::ExecDestroyed {
                exec: graph,
                iteration: it,
            },
            GraphEvent::GraphDestroyed {
                graph,
                iteration: it,
            },
        ] {
            c.accept_graph_event(event);
        }
        c.end_iteration(5_000 * (it + 1), t0 + 1_000, it + 1);
        let row = one_complete_row(&mut c);
        assert_eq!(kernels_of(&row, "step/replay/forward/attention"), 3);
        let (live, cap) = c.graph_nodes();
        assert_eq!(live, 0, "iteration {it}: every node forgotten with its row");
        // The table's size settles after the first graphs and never grows again.
        if it == 10 {
            capacity = Some(cap);
        } else if let Some(settled) = capacity {
            assert_eq!(cap, settled, "iteration {it}");
        }
    }
    let (_, trailer) = c.finish(5_000 * (GRAPHS + 1), 1_000 * (GRAPHS + 2));
    let graphs = trailer.graphs.unwrap();
    assert_eq!(graphs.nodes_captured, NODES * GRAPHS);
    assert_eq!(
        graphs.nodes_live_peak,
        2 * NODES,
        "one graph and its clones"
    );
    assert_eq!(graphs.nodes_live_at_end, 0);
    assert_eq!(graphs.records_by_capture, 3 * GRAPHS);
}

/// The trailer's warnings other than the idle split's note that no dispatch floor was measured
/// (an offline collector has no calibration).
fn other_warnings(warnings: &[String]) -> Vec<&String> {
    warnings
        .iter()
        .filter(|w| !w.starts_with("idle causes: the dispatch floor"))
        .collect()
}
