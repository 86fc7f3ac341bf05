//! Attribution of launches made on threads other than the one that opens the scopes, with the
//! asynchronous-framework model of `examples/common/async_engine.rs`.

use std::time::Duration;

use gpu_ledger::{read_ledger, Follow, Ledger, Level, Profiler};

#[path = "../../examples/common/async_engine.rs"]
mod async_engine;
use async_engine::{kernels_per_step, placement, Engine, Mode};

const ITERS: u64 = 10;

/// A profiled run of `ITERS` steps with two launcher threads.
fn run(mode: Mode, follow: Follow) -> (Ledger, Vec<String>) {
    let _turn = super::SERIAL.lock();
    let gpu = super::gpu();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("async.jsonl");
    let mut engine = Engine::new(&gpu.ctx, 2, mode, 1 << 20, 1000);
    engine.step();
    let profiler = Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(&path)
        .record_activities(true)
        .settle(Duration::from_secs(5))
        .follow(follow)
        .start()
        .unwrap();
    for _ in 0..ITERS {
        engine.step();
        profiler.step();
    }
    let summary = profiler.finish().unwrap();
    engine.shutdown();
    (read_ledger(&path).unwrap(), summary.trailer.warnings)
}

/// The share of the run's kernel time in the scope its kernel belongs to.
fn share_in_scope(ledger: &Ledger) -> f64 {
    let (right, total) = ledger.iterations.iter().fold((0, 0), |(r, t), row| {
        let p = placement(row);
        (r + p.0, t + p.1)
    });
    right as f64 / total as f64
}

/// Every row: the attribution counts add up to its kernels, and the launching threads are the
/// two launchers with all of them.
fn assert_counts_add_up(ledger: &Ledger) {
    assert_eq!(ledger.iterations.len() as u64, ITERS);
    for row in &ledger.iterations {
        let kernels = super::kernel_launches(row);
        assert_eq!(kernels, kernels_per_step() as u64, "row {}", row.index);
        let a = row
            .attribution
            .expect("the timeline level counts attribution");
        assert_eq!(a.total(), kernels, "row {}: {a:?}", row.index);
        let mut names: Vec<&str> = row
            .launch_threads
            .iter()
            .map(|t| t.name.as_deref().unwrap_or("?"))
            .collect();
        names.sort_unstable();
        assert_eq!(names, ["launcher-0", "launcher-1"], "row {}", row.index);
        assert!(row.launch_threads.iter().all(|t| t.tid != 0));
        assert_eq!(
            row.launch_threads.iter().map(|t| t.kernels).sum::<u64>(),
            kernels
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_handed_over_context_attributes_every_kernel_exactly() {
    for batch in [false, true] {
        let mode = Mode {
            handoff: true,
            phase_sync: false,
            batch,
        };
        let (ledger, _) = run(mode, Follow::Off);
        assert_counts_add_up(&ledger);
        for row in &ledger.iterations {
            let (_, _, right, kernels) = placement(row);
            assert_eq!(right, kernels, "batch {batch}, row {}", row.index);
            assert_eq!(row.attribution.unwrap().handoff, kernels);
            let acts = row.activities.as_ref().unwrap();
            assert!(acts
                .iter()
                .filter(|a| a.kind == "kernel")
                .all(|a| a.attribution.as_deref() == Some("handoff")));
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn following_the_stepping_thread_with_phase_end_syncs_places_the_kernel_time() {
    let mode = Mode {
        handoff: false,
        phase_sync: true,
        batch: true,
    };
    let (ledger, trailer) = run(mode, Follow::SteppingThread);
    assert_counts_add_up(&ledger);
    for row in &ledger.iterations {
        assert_eq!(row.attribution.unwrap().followed, kernels_per_step() as u64);
    }
    let share = share_in_scope(&ledger);
    println!(
        "followed, phase-end syncs: {:.3} % of kernel time in its scope",
        share * 100.0
    );
    assert!(share >= 0.99, "{share}");
    assert!(
        trailer.iter().any(|w| w.contains("followed thread")),
        "the trailer says how these kernels were attributed: {trailer:?}"
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn following_without_phase_end_syncs_measures_the_lazy_queues_error() {
    let mode = Mode {
        handoff: false,
        phase_sync: false,
        batch: true,
    };
    let (ledger, trailer) = run(mode, Follow::SteppingThread);
    assert_counts_add_up(&ledger);
    let (mut right, mut total) = (0, 0);
    for row in &ledger.iterations {
        let (r, t, _, _) = placement(row);
        right += r;
        total += t;
    }
    println!(
        "followed, no phase-end syncs, batched: {:.3} % of kernel time in its scope",
        100.0 * right as f64 / total as f64
    );
    assert!(
        right < total,
        "batched launches run late: some land in a later phase"
    );
    let note = trailer
        .iter()
        .find(|w| w.contains("followed thread"))
        .expect("the trailer's note on followed kernels");
    assert!(note.contains("Synchronize at phase ends") && note.contains("ScopeContext"));
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn launches_on_threads_without_scopes_are_unscoped_and_the_row_says_why() {
    let mode = Mode {
        handoff: false,
        phase_sync: false,
        batch: false,
    };
    let (ledger, _) = run(mode, Follow::Off);
    assert_counts_add_up(&ledger);
    for row in &ledger.iterations {
        assert_eq!(row.attribution.unwrap().unscoped, kernels_per_step() as u64);
        let w = row
            .warnings
            .iter()
            .find(|w| w.contains("in no scope although scopes were open"))
            .unwrap_or_else(|| panic!("row {}: {:?}", row.index, row.warnings));
        assert!(w.contains("launcher-0") && w.contains("launcher-1"), "{w}");
    }
}

/// A framework's own stream, known only by its driver handle, times a scope as a cudarc
/// stream does, on a thread with no current context too.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_scope_on_a_raw_stream_handle_is_timed_by_its_events() {
    let _turn = super::SERIAL.lock();
    let g = super::gpu();
    let n = 1 << 22;
    let (a, b, mut c) = super::vectors(&g.stream, n);
    let own = g.ctx.new_stream().unwrap();
    // SAFETY: the handle is a live stream of this context, which outlives the profiler below.
    let raw = unsafe { gpu_ledger::RawStream::from_raw(own.cu_stream()) }.unwrap();
    assert_eq!(raw.handle(), own.cu_stream());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raw.jsonl");
    let profiler = super::timeline(&path);
    std::thread::scope(|t| {
        t.spawn(|| {
            for _ in 0..3 {
                let s = Profiler::scope_on_raw("raw", &raw);
                g.vadd.launch(&own, &a, &b, &mut c, n as u64).unwrap();
                drop(s);
            }
        });
    });
    profiler.step();
    own.synchronize().unwrap();
    let (_, ledger) = super::finish_without_event_warnings(profiler, &path);
    let s = ledger.iterations[0]
        .scopes
        .iter()
        .find(|s| s.path == "raw")
        .unwrap();
    assert_eq!((s.calls, s.kernels), (3, 3));
    let ev = s.event_device_ns.expect("the scope has event time");
    assert!(
        ev >= s.device_ns && ev < 10 * s.device_ns + 600_000,
        "events span {ev} ns, its kernels {} ns",
        s.device_ns
    );
}
