//! The scopes level end to end on any machine: no GPU, no CUPTI.

use std::time::Duration;

use gpu_ledger::{read_ledger, Level, Profiler};
use parking_lot::Mutex;

/// One profiler per process at a time: tests in this binary take turns.
static SERIAL: Mutex<()> = Mutex::new(());

/// A Scopes-level builder writing to `path`.
fn scopes_builder(path: &std::path::Path) -> gpu_ledger::ProfilerBuilder {
    Profiler::builder()
        .level(Level::Scopes)
        .ledger_path(path)
        .settle(Duration::from_millis(200))
}

fn scopes_profiler(path: &std::path::Path) -> Profiler {
    scopes_builder(path)
        .start()
        .expect("the scopes level needs no GPU")
}

/// What [`serial_run`] hands a test.
type SerialRun = (
    parking_lot::MutexGuard<'static, ()>,
    tempfile::TempDir,
    std::path::PathBuf,
    Profiler,
);

/// This test's turn, a temporary directory, the ledger path in it and a Scopes-level profiler
/// writing there (dropped in reverse: the profiler first, the turn last).
fn serial_run() -> SerialRun {
    serial_run_with(|b| b)
}

/// [`serial_run`] with the builder adjusted by `configure` first.
fn serial_run_with(
    configure: impl FnOnce(gpu_ledger::ProfilerBuilder) -> gpu_ledger::ProfilerBuilder,
) -> SerialRun {
    let turn = SERIAL.lock();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    let profiler = configure(scopes_builder(&path))
        .start()
        .expect("the scopes level needs no GPU");
    (turn, dir, path, profiler)
}

#[test]
fn nested_scopes_from_two_threads_make_one_row_per_iteration() {
    let (_g, _dir, path, profiler) = serial_run();
    for _ in 0..3 {
        {
            let _step = Profiler::scope("step");
            {
                let _fwd = Profiler::scope("forward");
                std::thread::sleep(Duration::from_millis(2));
            }
            std::thread::scope(|s| {
                s.spawn(|| {
                    let _w = Profiler::scope("worker");
                    let _inner = Profiler::scope("inner");
                });
            });
        }
        profiler.step();
    }
    let summary = profiler.finish().unwrap();
    assert_eq!(summary.trailer.iterations, 3);
    let ledger = read_ledger(&path).unwrap();
    assert_eq!(ledger.iterations.len(), 3);
    assert!(ledger.trailer.is_some());
    for (i, row) in ledger.iterations.iter().enumerate() {
        assert_eq!(row.index, i as u64);
        assert!(row.complete, "row {i}: {:?}", row.warnings);
        let paths: Vec<&str> = row.scopes.iter().map(|s| s.path.as_str()).collect();
        assert_eq!(
            paths,
            ["step", "step/forward", "worker", "worker/inner"],
            "row {i}"
        );
        let fwd = &row.scopes[1];
        assert_eq!(fwd.calls, 1);
        assert!(
            fwd.host_ns >= 2_000_000,
            "forward slept 2 ms, got {} ns",
            fwd.host_ns
        );
        assert!(row.scopes[0].host_ns >= fwd.host_ns);
        assert!(row.host_wall_ns >= row.scopes[0].host_ns);
        assert!(row.warnings.is_empty(), "{:?}", row.warnings);
    }
}

#[test]
fn a_burst_of_scopes_larger_than_a_thread_ring_is_counted_whole() {
    // A thread's ring holds 4 096 closed scopes; the collector drains it every 2 ms. Tens of
    // thousands closed back to back spill into the overflow vector, and every one must still be
    // in its row, in the right iteration.
    let (_g, _dir, path, profiler) = serial_run();
    let bursts = [30_000u64, 5, 20_000];
    for n in bursts {
        for _ in 0..n {
            let _s = Profiler::scope("tiny");
        }
        profiler.step();
    }
    let summary = profiler.finish().unwrap();
    assert_eq!(summary.trailer.late_records, 0);
    let ledger = read_ledger(&path).unwrap();
    assert_eq!(ledger.iterations.len(), bursts.len());
    for (row, n) in ledger.iterations.iter().zip(bursts) {
        assert!(row.complete, "row {}: {:?}", row.index, row.warnings);
        assert_eq!(row.scopes.len(), 1, "row {}", row.index);
        assert_eq!(row.scopes[0].calls, n, "row {}", row.index);
    }
}

#[test]
fn many_static_names_under_two_parents_each_reach_their_own_path() {
    // A thread finds a static name's path id in a 64-slot direct-mapped cache keyed by parent,
    // address and length, with a map behind it: 150 names under two parents collide in that
    // cache, and one text at two addresses is one path.
    let (_g, _dir, path, profiler) = serial_run();
    let names: Vec<&'static str> = (0..150)
        .map(|i| &*Box::leak(format!("n{i}").into_boxed_str()))
        .collect();
    let twin: &'static str = Box::leak(String::from("n7").into_boxed_str());
    assert_ne!(twin.as_ptr(), names[7].as_ptr());
    for _ in 0..2 {
        for round in 0..3 {
            for parent in ["a", "b"] {
                let _p = Profiler::scope(parent);
                for name in &names {
                    let _s = Profiler::scope(*name);
                }
                if round == 0 {
                    let _s = Profiler::scope(twin);
                }
            }
        }
        profiler.step();
    }
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    assert_eq!(ledger.iterations.len(), 2);
    for row in &ledger.iterations {
        assert_eq!(row.scopes.len(), 2 + 2 * names.len(), "row {}", row.index);
        for parent in ["a", "b"] {
            for (i, name) in names.iter().enumerate() {
                let want = format!("{parent}/{name}");
                let s = row
                    .scopes
                    .iter()
                    .find(|s| s.path == want)
                    .unwrap_or_else(|| panic!("row {}: no {want}", row.index));
                let calls = if i == 7 { 4 } else { 3 };
                assert_eq!(s.calls, calls, "row {}: {want}", row.index);
            }
        }
    }
}

#[test]
fn many_iterations_between_two_collector_ticks_each_get_their_row() {
    // step() does not wake the collector; it sees iteration ends at its next tick (2 ms). A
    // thousand iterations inside one tick must still be a thousand rows with their own scopes.
    let (_g, _dir, path, profiler) = serial_run();
    let t0 = std::time::Instant::now();
    for i in 0..1000u64 {
        for _ in 0..=(i % 3) {
            let _s = Profiler::scope("work");
        }
        profiler.step();
    }
    let loop_ns = t0.elapsed().as_nanos() as u64;
    let summary = profiler.finish().unwrap();
    // The trailer states what the thousand step() calls cost this thread: something, and less
    // than the whole loop they were part of.
    let step_ns = summary.trailer.overhead.step_ns;
    assert!(
        step_ns > 0 && step_ns < loop_ns,
        "step_ns {step_ns}, loop {loop_ns} ns"
    );
    let ledger = read_ledger(&path).unwrap();
    assert_eq!(ledger.iterations.len(), 1000);
    for (i, row) in ledger.iterations.iter().enumerate() {
        assert_eq!(row.index, i as u64);
        assert!(row.complete, "row {i}: {:?}", row.warnings);
        assert_eq!(row.scopes[0].calls, i as u64 % 3 + 1, "row {i}");
    }
}

#[test]
fn more_iterations_than_the_ring_holds_between_two_ticks_each_get_their_row_in_order() {
    // step() hands its iteration ends to the collector through a ring of 1 024 that the collector
    // drains every tick (2 ms); ends that find it full wait in an overflow vector. Twenty
    // thousand steps back to back outrun it: every row must still be there, in order, its host
    // time starting where the one before ended, with its own scope.
    let (_g, _dir, path, profiler) = serial_run();
    const STEPS: u64 = 20_000;
    for _ in 0..STEPS {
        drop(Profiler::scope("work"));
        profiler.step();
    }
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    assert_eq!(ledger.iterations.len() as u64, STEPS);
    let mut next_start = None;
    for (i, row) in ledger.iterations.iter().enumerate() {
        assert_eq!(row.index, i as u64);
        assert!(row.complete, "row {i}: {:?}", row.warnings);
        assert_eq!(row.scopes.len(), 1, "row {i}");
        assert_eq!(row.scopes[0].calls, 1, "row {i}");
        if let Some(start) = next_start {
            assert_eq!(
                row.host_start_ns,
                start,
                "row {i} starts where row {} ended",
                i - 1
            );
        }
        next_start = Some(row.host_start_ns + row.host_wall_ns);
    }
}

#[test]
fn scope_open_across_step_is_reported_not_lost() {
    let (_g, _dir, path, profiler) = serial_run();
    let outer = Profiler::scope("train");
    profiler.step();
    profiler.step();
    drop(outer);
    profiler.step();
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    assert_eq!(ledger.iterations.len(), 3);
    assert!(ledger.iterations[0]
        .warnings
        .iter()
        .any(|w| w.contains("scopes still open") && w.contains("train")));
    let last = &ledger.iterations[2];
    assert_eq!(last.scopes.len(), 1);
    assert_eq!(last.scopes[0].path, "train");
    assert!(
        last.warnings
            .iter()
            .any(|w| w.contains("open across 2 iteration")),
        "{:?}",
        last.warnings
    );
}

#[test]
fn guards_dropped_out_of_order_are_reported() {
    let (_g, _dir, path, profiler) = serial_run();
    let a = Profiler::scope("a");
    let b = Profiler::scope("b");
    drop(a);
    drop(b);
    profiler.step();
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    let row = &ledger.iterations[0];
    assert!(
        row.warnings
            .iter()
            .any(|w| w.contains("out of order") && w.contains("scope a")),
        "{:?}",
        row.warnings
    );
    let paths: Vec<&str> = row.scopes.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(paths, ["a", "a/b"]);
}

#[test]
fn disabled_profiler_guards_are_inert() {
    let _g = SERIAL.lock();
    let guard = Profiler::scope("nothing");
    drop(guard);
}

#[test]
fn second_profiler_is_refused_while_one_runs() {
    let _g = SERIAL.lock();
    let dir = tempfile::tempdir().unwrap();
    let p1 = scopes_profiler(&dir.path().join("a.jsonl"));
    let err = Profiler::builder()
        .level(Level::Scopes)
        .ledger_path(dir.path().join("b.jsonl"))
        .start()
        .err();
    assert!(
        matches!(err, Some(gpu_ledger::Error::AlreadyRunning)),
        "{err:?}"
    );
    p1.finish().unwrap();
}

#[test]
fn unwritable_ledger_path_is_a_clear_error() {
    let _g = SERIAL.lock();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    // A path below a regular file cannot be created.
    let err = Profiler::builder()
        .level(Level::Scopes)
        .ledger_path(file.join("run.jsonl"))
        .start()
        .err()
        .unwrap();
    let msg = err.to_string();
    assert!(
        matches!(err, gpu_ledger::Error::LedgerWrite { .. }),
        "{msg}"
    );
    assert!(
        msg.contains("a-file") && msg.contains("writable path"),
        "{msg}"
    );
    // The failed start left no profiler behind.
    let p = scopes_profiler(&dir.path().join("ok.jsonl"));
    p.finish().unwrap();
}

#[test]
fn a_full_disk_is_reported_once_and_the_application_carries_on() {
    let _g = SERIAL.lock();
    // /dev/full accepts the open and fails every write with ENOSPC.
    let profiler = scopes_profiler(std::path::Path::new("/dev/full"));
    for _ in 0..5 {
        let _s = Profiler::scope("work");
        drop(_s);
        profiler.step();
    }
    std::thread::sleep(Duration::from_millis(300));
    let err = profiler
        .write_error()
        .expect("the write error is kept for the application");
    assert!(
        err.contains("/dev/full") && err.contains("No space left"),
        "{err}"
    );
    let end = profiler
        .finish()
        .expect_err("finish reports the write failure");
    assert!(
        matches!(end, gpu_ledger::Error::LedgerWrite { .. }),
        "{end}"
    );
    // A new run works normally afterwards.
    let dir = tempfile::tempdir().unwrap();
    scopes_profiler(&dir.path().join("ok.jsonl"))
        .finish()
        .unwrap();
}

#[test]
fn scope_and_iteration_host_times_agree_with_the_monotonic_clock_whichever_clock_scopes_read() {
    // Scopes read the TSC where the kernel keeps time with it, and the collector converts the
    // readings by interpolating between anchors it takes every tick; anchors older than 1 to
    // 2 s are let go, so the outer scope here (2.2 s) is converted from the run's average rate.
    let (_g, _dir, path, profiler) = serial_run();
    let outer_t0 = std::time::Instant::now();
    let mut inner_wall = Vec::new();
    // The Instant readings just before and after each step(): the iteration's end, which step()
    // reads on the scope clock, lies between them.
    let mut steps: Vec<(std::time::Instant, Option<std::time::Instant>)> = Vec::new();
    {
        let _outer = Profiler::scope("outer");
        for _ in 0..22 {
            let t0 = std::time::Instant::now();
            {
                let _inner = Profiler::scope("inner");
                std::thread::sleep(Duration::from_millis(100));
            }
            inner_wall.push(t0.elapsed().as_nanos() as u64);
            steps.push((std::time::Instant::now(), None));
            profiler.step();
            steps.last_mut().unwrap().1 = Some(std::time::Instant::now());
        }
    }
    let outer_wall = outer_t0.elapsed().as_nanos() as u64;
    let summary = profiler.finish().unwrap();
    let expected_clock = if cfg!(target_arch = "x86_64")
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc")
    {
        "tsc"
    } else {
        "monotonic"
    };
    assert_eq!(summary.trailer.overhead.scope_clock, expected_clock);
    let ledger = read_ledger(&path).unwrap();
    // A scope's time lies between the sleep it holds and the Instant readings around it. (Not
    // "around minus the guard's cost": a thread preempted between those readings and the guard
    // makes that gap any size on a loaded machine.) A conversion error shows as a time outside
    // that window.
    for (i, around) in inner_wall.iter().enumerate() {
        let row = &ledger.iterations[i];
        let inner = row.scopes.iter().find(|s| s.path == "outer/inner").unwrap();
        assert_eq!(inner.calls, 1);
        assert!(
            inner.host_ns <= around + 1_000 && inner.host_ns >= 100_000_000,
            "row {i}: inner {} ns, slept 100 ms, measured around it {around} ns",
            inner.host_ns
        );
    }
    // So does an iteration's: from one step()'s end reading to the next one's.
    for i in 1..steps.len() {
        let row = &ledger.iterations[i];
        let (before, after) = (steps[i].0, steps[i].1.unwrap());
        let (prev_before, prev_after) = (steps[i - 1].0, steps[i - 1].1.unwrap());
        let shortest = before.duration_since(prev_after).as_nanos() as u64;
        let longest = after.duration_since(prev_before).as_nanos() as u64;
        assert!(
            row.host_wall_ns + 1_000 >= shortest && row.host_wall_ns <= longest + 1_000,
            "row {i}: {} ns, between {shortest} and {longest} ns by the steps' readings",
            row.host_wall_ns
        );
    }
    // The outer scope ended in the last iteration, where its whole time is counted.
    let last = ledger.iterations.last().unwrap();
    let outer = last.scopes.iter().find(|s| s.path == "outer").unwrap();
    assert!(
        outer.host_ns <= outer_wall + 1_000 && outer.host_ns >= 2_200_000_000,
        "outer {} ns, slept 2.2 s, measured around it {outer_wall} ns",
        outer.host_ns
    );
}

#[test]
fn the_energy_counter_period_is_configurable_and_recorded_in_the_header() {
    let _turn = SERIAL.lock();
    let dir = tempfile::tempdir().unwrap();
    for (period, expected) in [
        (Some(Duration::from_millis(500)), Some(500)),
        (Some(Duration::from_secs(5)), Some(5000)),
        (None, None),
    ] {
        let path = dir.path().join("run.jsonl");
        let profiler = Profiler::builder()
            .level(Level::Scopes)
            .nvml_energy_period(period)
            .ledger_path(&path)
            .start()
            .unwrap();
        profiler.finish().unwrap();
        let ledger = read_ledger(&path).unwrap();
        assert_eq!(ledger.header.config.nvml_energy_period_ms, expected);
    }
    // The default is the nvml module's.
    assert_eq!(
        gpu_ledger::Config::default().nvml_energy_period,
        Some(gpu_ledger::internals::DEFAULT_ENERGY_PERIOD)
    );
}

#[test]
fn a_zero_energy_counter_period_is_a_clear_error() {
    let _turn = SERIAL.lock();
    let dir = tempfile::tempdir().unwrap();
    let Err(err) = Profiler::builder()
        .level(Level::Scopes)
        .nvml_energy_period(Some(Duration::ZERO))
        .ledger_path(dir.path().join("run.jsonl"))
        .start()
    else {
        panic!("a zero period is refused");
    };
    let msg = err.to_string();
    assert!(msg.contains("nvml_energy_period is zero"), "{msg}");
    assert!(msg.contains("None"), "names the fix: {msg}");
}

/// Spans of the only row of a run with `record_activities`, by path.
fn spans_of(path: &std::path::Path) -> Vec<gpu_ledger::ledger::schema::ScopeSpan> {
    let ledger = read_ledger(path).unwrap();
    assert_eq!(ledger.iterations.len(), 1);
    let mut spans = ledger.iterations[0]
        .scope_spans
        .clone()
        .expect("spans recorded");
    spans.sort_by_key(|s| s.start_ns);
    spans
}

#[test]
fn next_ends_a_scope_and_starts_its_sibling_at_one_boundary() {
    let (_turn, _dir, path, profiler) = serial_run_with(|b| b.record_activities(true));
    {
        let _step = Profiler::scope("step");
        let s = Profiler::scope("forward");
        std::thread::sleep(Duration::from_millis(2));
        let s = s.next("backward");
        std::thread::sleep(Duration::from_millis(2));
        let s = s.next(String::from("optimizer"));
        drop(s);
    }
    profiler.step();
    profiler.finish().unwrap();
    let spans = spans_of(&path);
    let paths: Vec<&str> = spans.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(
        paths,
        ["step", "step/forward", "step/backward", "step/optimizer"],
        "siblings under the same parent, in order"
    );
    // One clock reading ends each scope and starts the next.
    assert_eq!(spans[1].end_ns, spans[2].start_ns);
    assert_eq!(spans[2].end_ns, spans[3].start_ns);
    assert!(spans[1].end_ns - spans[1].start_ns >= 2_000_000);
    let ledger = read_ledger(&path).unwrap();
    let row = &ledger.iterations[0];
    assert!(row.warnings.is_empty(), "{:?}", row.warnings);
    for p in ["step/forward", "step/backward", "step/optimizer"] {
        let s = row.scopes.iter().find(|s| s.path == p).unwrap();
        assert_eq!(s.calls, 1, "{p}");
    }
}

#[test]
fn next_on_a_scope_that_is_not_innermost_ends_it_and_opens_anew() {
    let (_turn, _dir, path, profiler) = serial_run_with(|b| b.record_activities(true));
    {
        let a = Profiler::scope("a");
        let _c = Profiler::scope("c");
        // `a` is not the innermost scope: it ends (out of order) and `b` opens below `c`.
        let _b = a.next("b");
    }
    profiler.step();
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    let row = &ledger.iterations[0];
    let mut paths: Vec<&str> = row.scopes.iter().map(|s| s.path.as_str()).collect();
    paths.sort();
    assert_eq!(paths, ["a", "a/c", "a/c/b"]);
    assert!(
        row.warnings.iter().any(|w| w.contains("out of order")),
        "{:?}",
        row.warnings
    );
    // Without a profiler, next is as inert as the guard it replaces.
    let g = Profiler::scope("x").next("y");
    drop(g);
}

#[test]
fn a_context_handed_to_another_thread_nests_its_scopes_there() {
    let (_g, _dir, path, profiler) = serial_run();
    assert!(
        gpu_ledger::ScopeContext::current().is_none(),
        "no scope open"
    );
    let (tx, rx) = std::sync::mpsc::channel::<gpu_ledger::ScopeContext>();
    let worker = std::thread::Builder::new()
        .name("launcher".into())
        .spawn(move || {
            for ctx in rx {
                let _in = ctx.enter();
                let _op = Profiler::scope("op");
                std::thread::sleep(Duration::from_millis(1));
            }
        })
        .unwrap();
    for _ in 0..2 {
        {
            let _fwd = Profiler::scope("forward");
            let ctx = Profiler::context();
            assert!(!ctx.is_none());
            tx.send(ctx).unwrap();
            // An inert context: the worker's scope opened inside it stays top-level.
            tx.send(gpu_ledger::ScopeContext::NONE).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        profiler.step();
    }
    drop(tx);
    worker.join().unwrap();
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    assert_eq!(ledger.iterations.len(), 2);
    for row in &ledger.iterations {
        let calls = |p: &str| {
            row.scopes
                .iter()
                .find(|s| s.path == p)
                .map_or(0, |s| s.calls)
        };
        assert_eq!(calls("forward"), 1, "{:?}", row.scopes);
        assert_eq!(calls("forward/op"), 1, "the handed-over scope's child");
        assert_eq!(calls("op"), 1, "under no context");
        assert!(
            row.warnings.is_empty(),
            "an entered context is not a scope left open: {:?}",
            row.warnings
        );
    }
}

#[test]
fn a_context_of_a_finished_run_enters_as_nothing() {
    let ctx = {
        let (_g, _dir, _path, profiler) = serial_run();
        let _s = Profiler::scope("s");
        let ctx = Profiler::context();
        drop(_s);
        profiler.finish().unwrap();
        ctx
    };
    assert!(!ctx.is_none());
    let (_g, _dir, path, profiler) = serial_run();
    {
        let _in = ctx.enter();
        let _x = Profiler::scope("x");
    }
    profiler.step();
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    let paths: Vec<&str> = ledger.iterations[0]
        .scopes
        .iter()
        .map(|s| s.path.as_str())
        .collect();
    assert_eq!(paths, ["x"], "the old run's path id means nothing here");
}

#[test]
fn concurrent_steps_each_end_one_iteration_and_no_row_is_lost() {
    // Profiler is Send + Sync: eight threads stepping at once must give one row per step()
    // call, with consecutive indices, none dropped. Several runs, as a race shows in some only.
    const THREADS: u64 = 8;
    const STEPS: u64 = 100;
    for run in 0..10 {
        let (_g, _dir, path, profiler) = serial_run();
        let start = std::sync::Barrier::new(THREADS as usize);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    start.wait();
                    for _ in 0..STEPS {
                        profiler.step();
                    }
                });
            }
        });
        let summary = profiler.finish().unwrap();
        assert_eq!(summary.trailer.iterations, THREADS * STEPS, "run {run}");
        assert!(
            summary.trailer.warnings.is_empty(),
            "run {run}: {:?}",
            summary.trailer.warnings
        );
        let ledger = read_ledger(&path).unwrap();
        let indices: Vec<u64> = ledger.iterations.iter().map(|r| r.index).collect();
        assert_eq!(
            indices,
            (0..THREADS * STEPS).collect::<Vec<_>>(),
            "run {run}"
        );
    }
}

/// Path -> calls over the ledger's rows.
fn scope_calls(path: &std::path::Path) -> std::collections::BTreeMap<String, u64> {
    let mut table = std::collections::BTreeMap::new();
    for row in read_ledger(path).unwrap().iterations {
        for s in row.scopes {
            *table.entry(s.path).or_insert(0) += s.calls;
        }
    }
    table
}

/// Installs the scope layer as the global `tracing` subscriber once for this test binary.
fn install_scope_layer() {
    use tracing_subscriber::layer::SubscriberExt;
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let subscriber = tracing_subscriber::registry().with(gpu_ledger::ScopeLayer::new());
        tracing::subscriber::set_global_default(subscriber).unwrap();
    });
}

#[test]
fn tracing_spans_give_the_same_scopes_as_guards_including_a_span_entered_on_another_thread() {
    install_scope_layer();
    let run = |spans: bool| {
        let (_g, _dir, path, profiler) = serial_run();
        for _ in 0..3 {
            if spans {
                let _step = tracing::info_span!("step").entered();
                {
                    let _fwd = tracing::info_span!("forward").entered();
                }
                let _bwd = tracing::info_span!("backward").entered();
                // Created inside `backward`, entered on another thread.
                let worker = tracing::info_span!("allreduce");
                std::thread::spawn(move || {
                    let _in = worker.enter();
                })
                .join()
                .unwrap();
            } else {
                let _step = Profiler::scope("step");
                {
                    let _fwd = Profiler::scope("forward");
                }
                let _bwd = Profiler::scope("backward");
                let handed = Profiler::context();
                std::thread::spawn(move || {
                    let _in = handed.enter();
                    let _s = Profiler::scope("allreduce");
                })
                .join()
                .unwrap();
            }
            profiler.step();
        }
        profiler.finish().unwrap();
        scope_calls(&path)
    };
    let guards = run(false);
    let spans = run(true);
    assert_eq!(
        guards.get("step/backward/allreduce"),
        Some(&3),
        "{guards:?}"
    );
    assert_eq!(spans, guards);
}

#[test]
fn spans_entered_with_no_profiler_running_record_nothing_and_do_not_disturb_a_later_run() {
    install_scope_layer();
    {
        let _outside = tracing::info_span!("before").entered();
    }
    let (_g, _dir, path, profiler) = serial_run();
    let outer = tracing::info_span!("outer").entered();
    {
        let _inner = tracing::info_span!("inner").entered();
    }
    drop(outer);
    profiler.step();
    profiler.finish().unwrap();
    let table = scope_calls(&path);
    assert_eq!(table.get("outer/inner"), Some(&1), "{table:?}");
    assert!(!table.keys().any(|k| k.contains("before")), "{table:?}");
}
