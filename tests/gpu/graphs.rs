//! CUDA graphs on the GPU: every node's kernel, copy and memset in the scope it was captured in,
//! nested under its replay's scope, with the whole timeline traced and in every traced window of
//! a sampled one; a graph captured before `start()` in its replay's scope with one warning; and
//! the node map's size flat over many replays and many fresh captures.

use std::time::Duration;

use gpu_ledger::ledger::{GraphCounts, IterationRow, Trailer};
use gpu_ledger::{read_ledger, Level, Profiler, ProfilerBuilder, TimelineSampling};

#[path = "../../examples/common/graph_step.rs"]
mod graph_step;
use graph_step::{
    graph_launches, kernels_in, launches_line, phase_errors, replay, GraphStep, KERNELS, NODES,
    PHASES,
};

use crate::{gpu, SERIAL};

/// A timeline profiler writing to `path`, as `builder` adds to it.
fn start(builder: ProfilerBuilder, path: &std::path::Path) -> Profiler {
    builder
        .level(Level::Timeline)
        .ledger_path(path)
        .settle(Duration::from_secs(5))
        .start()
        .expect("the timeline starts on the GPU host")
}

/// Finishes the run: its rows and trailer.
fn finish(profiler: Profiler, path: &std::path::Path) -> (Vec<IterationRow>, Trailer) {
    let trailer = profiler.finish().unwrap().trailer;
    (read_ledger(path).unwrap().iterations, trailer)
}

/// A traced row with `replays` replays of the graph in `step/<name>`: each phase's kernels in
/// its capture scope under the replay's, its copy and memset too, and each replay's records
/// under one correlation id of their own.
fn assert_replays(row: &IterationRow, name: &str, replays: u64) {
    println!("{}", launches_line(row));
    assert!(row.complete, "row {}: {:?}", row.index, row.warnings);
    let errors = phase_errors(row, name, replays);
    assert!(errors.is_empty(), "{errors:?}\n{:?}", row.scopes);
    let prefix = format!("step/{name}/");
    let mine: Vec<_> = graph_launches(row)
        .into_values()
        .filter(|l| l.scopes.iter().any(|s| s.starts_with(&prefix)))
        .collect();
    assert_eq!(
        mine.len() as u64,
        replays,
        "row {}: one correlation id per replay",
        row.index
    );
    for l in &mine {
        assert_eq!(l.records, NODES, "row {}: {l:?}", row.index);
        assert!(l.scopes.iter().all(|s| s.starts_with(&prefix)), "{l:?}");
    }
    let backward = format!("step/{name}/backward");
    for kind in ["memcpy", "memset"] {
        let n = row
            .activities
            .iter()
            .flatten()
            .filter(|a| a.kind == kind && a.scope == backward)
            .count() as u64;
        assert_eq!(n, replays, "row {}: {kind} nodes in {backward}", row.index);
    }
}

/// The graph counts of a trailer, checked present.
fn graph_counts(trailer: &Trailer) -> GraphCounts {
    trailer.graphs.expect("the trailer counts the graph nodes")
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn graph_nodes_land_in_their_capture_scopes_under_the_replay_scope() {
    let _g = SERIAL.lock();
    let gpu = gpu();
    let mut step = GraphStep::new(&gpu.ctx).unwrap();
    step.phases().unwrap();
    step.stream.synchronize().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("graph.jsonl");
    let profiler = start(Profiler::builder().record_activities(true), &path);
    // Captured inside the profiled iteration 0: its launch calls put work in the graph and are
    // not awaited.
    let graph = step.capture().unwrap();
    const ITERS: u64 = 20;
    for _ in 0..ITERS {
        replay(&graph, "replay").unwrap();
        step.stream.synchronize().unwrap();
        profiler.step();
    }
    drop(graph);
    let (rows, trailer) = finish(profiler, &path);
    assert_eq!(rows.len() as u64, ITERS);
    assert_eq!(rows[0].missing_records, 0, "{:?}", rows[0].warnings);
    for row in &rows {
        assert_replays(row, "replay", 1);
        let counts = row.attribution.unwrap();
        assert_eq!(counts.graph_capture, KERNELS, "{counts:?}");
        assert_eq!(counts.total(), KERNELS, "{counts:?}");
        assert_eq!(row.launch_threads[0].attribution.graph_capture, KERNELS);
    }
    let g = graph_counts(&trailer);
    println!("{g:?}");
    assert_eq!(g.nodes_captured, NODES);
    assert_eq!(g.records_unseen, 0, "{:?}", trailer.warnings);
    assert_eq!(g.records_by_capture, NODES * ITERS);
    assert!((NODES..=2 * NODES).contains(&g.nodes_live_peak), "{g:?}");
    assert_eq!(
        g.nodes_live_at_end, 0,
        "the dropped graph's nodes are forgotten"
    );
    assert!(
        !trailer.warnings.iter().any(|w| w.contains("graph")),
        "{:?}",
        trailer.warnings
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_sampled_timeline_attributes_graph_nodes_alike_in_every_traced_window() {
    let _g = SERIAL.lock();
    let gpu = gpu();
    let mut step = GraphStep::new(&gpu.ctx).unwrap();
    step.phases().unwrap();
    step.stream.synchronize().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sampled.jsonl");
    let sampling = TimelineSampling::every(10);
    let builder = Profiler::builder()
        .record_activities(true)
        .sample_timeline(sampling);
    let profiler = start(builder, &path);
    const ITERS: u64 = 41;
    // Graph `replay` is captured in traced iteration 0; graph `late` in iteration 5, which the
    // timeline samples out (only the graph callbacks see its capture).
    let first = step.capture().unwrap();
    let mut late = None;
    for it in 0..ITERS {
        if it == 5 {
            late = Some(step.capture().unwrap());
        }
        replay(&first, "replay").unwrap();
        if let Some(late) = &late {
            replay(late, "late").unwrap();
        }
        step.stream.synchronize().unwrap();
        profiler.step();
    }
    drop((first, late));
    let (rows, trailer) = finish(profiler, &path);
    let traced: Vec<&IterationRow> = rows.iter().filter(|r| !r.untraced).collect();
    let indices: Vec<u64> = traced.iter().map(|r| r.index).collect();
    assert_eq!(indices, [0, 10, 20, 30, 40]);
    // Each traced window's graph launches: the k-th window as the first.
    for row in &traced {
        assert_replays(row, "replay", 1);
        let late = u64::from(row.index >= 5);
        if late > 0 {
            assert_replays(row, "late", 1);
        }
        let counts = row.attribution.unwrap();
        assert_eq!(counts.graph_capture, KERNELS * (1 + late), "{counts:?}");
        assert_eq!(counts.total(), counts.graph_capture, "{counts:?}");
    }
    for row in rows.iter().filter(|r| r.untraced) {
        assert!(row.kernels.is_empty(), "row {}", row.index);
    }
    let g = graph_counts(&trailer);
    println!("{g:?}");
    assert_eq!(g.nodes_captured, 2 * NODES, "both captures seen");
    assert_eq!(g.records_unseen, 0, "{:?}", trailer.warnings);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_graph_captured_before_start_stays_in_the_replay_scope_with_one_warning() {
    let _g = SERIAL.lock();
    let gpu = gpu();
    let mut step = GraphStep::new(&gpu.ctx).unwrap();
    step.phases().unwrap();
    step.stream.synchronize().unwrap();
    let graph = step.capture().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("early.jsonl");
    let profiler = start(Profiler::builder().record_activities(true), &path);
    const ITERS: u64 = 5;
    for _ in 0..ITERS {
        replay(&graph, "replay").unwrap();
        step.stream.synchronize().unwrap();
        profiler.step();
    }
    let (rows, trailer) = finish(profiler, &path);
    drop(graph);
    for row in &rows {
        println!("{}", launches_line(row));
        assert!(row.complete, "row {}: {:?}", row.index, row.warnings);
        assert_eq!(kernels_in(row, "step/replay"), KERNELS, "{:?}", row.scopes);
        for (phase, ..) in PHASES {
            assert_eq!(kernels_in(row, &format!("step/replay/{phase}")), 0);
        }
        let counts = row.attribution.unwrap();
        assert_eq!((counts.graph_launch, counts.total()), (KERNELS, KERNELS));
    }
    let g = graph_counts(&trailer);
    assert_eq!(g.records_unseen, NODES * ITERS, "{g:?}");
    assert_eq!((g.nodes_captured, g.records_by_capture), (0, 0));
    let warned: Vec<&String> = trailer
        .warnings
        .iter()
        .filter(|w| w.contains("graph"))
        .collect();
    assert_eq!(warned.len(), 1, "{:?}", trailer.warnings);
    assert!(
        warned[0].contains("Profiler::start() first"),
        "{}",
        warned[0]
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_node_map_stays_flat_over_many_replays_and_many_fresh_captures() {
    let _g = SERIAL.lock();
    let gpu = gpu();
    let mut step = GraphStep::new(&gpu.ctx).unwrap();
    step.phases().unwrap();
    step.stream.synchronize().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // 10 000 replays of one graph: its nodes and its executable graph's, no more.
    let path = dir.path().join("replays.jsonl");
    let profiler = start(Profiler::builder(), &path);
    let graph = step.capture().unwrap();
    for _ in 0..100 {
        for _ in 0..100 {
            replay(&graph, "replay").unwrap();
        }
        step.stream.synchronize().unwrap();
        profiler.step();
    }
    drop(graph);
    let (rows, trailer) = finish(profiler, &path);
    assert!(rows.iter().all(|r| r.complete));
    let g = graph_counts(&trailer);
    println!("10 000 replays: {g:?}");
    assert!(g.nodes_live_peak <= 2 * NODES, "{g:?}");
    assert_eq!(g.records_by_capture, 10_000 * NODES, "{g:?}");
    assert_eq!(g.nodes_live_at_end, 0, "{g:?}");
    // 1 000 fresh captures, each replayed once and destroyed at once (its records still to come):
    // entries live while the rows of their iteration wait, a few rows at a 5 ms flush.
    let path = dir.path().join("captures.jsonl");
    let builder = Profiler::builder().flush_interval(Duration::from_millis(5));
    let profiler = start(builder, &path);
    const CAPTURES: u64 = 1_000;
    for _ in 0..CAPTURES {
        let graph = step.capture().unwrap();
        replay(&graph, "replay").unwrap();
        drop(graph);
        step.stream.synchronize().unwrap();
        std::thread::sleep(Duration::from_millis(1));
        profiler.step();
    }
    let (rows, trailer) = finish(profiler, &path);
    for row in &rows {
        assert!(row.complete, "row {}: {:?}", row.index, row.warnings);
        assert!(
            phase_errors(row, "replay", 1).is_empty(),
            "{:?}",
            row.scopes
        );
    }
    let g = graph_counts(&trailer);
    println!("1 000 fresh captures: {g:?}");
    assert_eq!(g.nodes_captured, CAPTURES * NODES, "{g:?}");
    assert_eq!(g.records_unseen, 0, "{:?}", trailer.warnings);
    assert!(
        g.nodes_live_peak <= 2 * NODES * CAPTURES / 10,
        "more than a tenth of every capture's nodes held at once: {g:?}"
    );
    assert_eq!(g.nodes_live_at_end, 0, "{g:?}");
}
